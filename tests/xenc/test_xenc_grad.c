/* The cross-encoder trainer against PyTorch autograd (fixtures from
 * tests/reference/gen_xenc_fixtures.py): every parameter gradient of one
 * step (the encoder's, the token-type embeddings', the pooler's and the
 * classifier's) and the loss, on 3 Cranfield groups of 4 pairs, for
 *   l1    one label, no dropout;
 *   l2    two labels (score l1 - l0), no dropout;
 *   drop  one label, dropout 0.1 at BERT's four sites and before the
 *         classifier, torch given qac's masks;
 *   chunk l1 through GradCache (chunks of 5 pairs): the same gradients.
 * argv: FIXTURE_DIR CASE.
 *
 * The bound is the reference's own deviation: the fixture holds torch's
 * gradients in float32 and in float64. For each tensor, E = max |g32 - g64|
 * / max |g64| is torch's fp32 error relative to the tensor's scale; qac's
 * fp32 gradient must lie within 4 max(E, 2^-20) of g64 on the same scale
 * (both sides sum the same products in fp32 in other orders, so each
 * side's error is of torch's size; 4x leaves room for qac's sequential
 * sums against torch's blocked ones, and the floor of 2^-20, eight fp32
 * ulps of the tensor's largest entry, for a tensor whose sums torch
 * happens to round exactly). The loss likewise against loss64. The
 * classifier's bias has an exact gradient of zero (each group's score
 * gradients p_j - [j = 0] sum to zero), so its entries are held to an
 * absolute 4 x 2^-23: they sum the score gradients rounded to fp32, at
 * most 2 in absolute value a group averaged over the groups, each with a
 * relative error of 2^-24. Every tensor's ratio is printed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qac_safetensors.h"
#include "testutil.h"
#include "xenc_trainer.h"

static qac_safetensors *fx;

static const qac_st_tensor *need(const char *name) { return qac_test_tensor(fx, name); }

static double *f64s(const char *name, size_t n) {
    const qac_st_tensor *t = need(name);
    if (t->numel != n) {
        fprintf(stderr, "%s: %llu values, qac has %zu\n", name, (unsigned long long)t->numel, n);
        exit(1);
    }
    double *out = malloc(n * sizeof *out);
    if (t->dtype == QAC_ST_F64) memcpy(out, t->data, n * 8);
    else {
        float *f = malloc(n * sizeof *f);
        qac_safetensors_read_f32(t, f);
        for (size_t i = 0; i < n; i++) out[i] = f[i];
        free(f);
    }
    return out;
}

static int32_t *i32s(const char *name, int *rows, int *cols) {
    const qac_st_tensor *t = need(name);
    int32_t *out = malloc(t->numel * sizeof *out);
    memcpy(out, t->data, t->numel * 4);
    *rows = (int)t->shape[0];
    if (cols) *cols = t->ndim > 1 ? (int)t->shape[1] : 1;
    return out;
}

/* qac's gradient of one tensor against the fixture's; returns ratio to bound */
static double compare(const char *cs, const char *name, const float *got, size_t n, int *bad) {
    char k32[128], k64[128];
    snprintf(k32, sizeof k32, "%s.g32.%s", cs, name);
    snprintf(k64, sizeof k64, "%s.g64.%s", cs, name);
    double *g32 = f64s(k32, n), *g64 = f64s(k64, n);
    double scale = 0, e32 = 0, eq = 0;
    for (size_t i = 0; i < n; i++) scale = fabs(g64[i]) > scale ? fabs(g64[i]) : scale;
    for (size_t i = 0; i < n; i++) {
        double a = fabs(g32[i] - g64[i]), b = fabs((double)got[i] - g64[i]);
        e32 = a > e32 ? a : e32;
        eq = b > eq || isnan(b) ? (isnan(b) ? INFINITY : b) : eq;
    }
    double E = scale > 0 ? e32 / scale : 0, rel = scale > 0 ? eq / scale : eq;
    double bound = 4 * (E > 0x1p-20 ? E : 0x1p-20);
    if (scale < 1e-12) { /* exactly zero: absolute, see the file's note */
        E = e32, rel = eq, bound = 4 * 0x1p-23;
    }
    printf("  %-10s scale %.3e  torch fp32 E %.2e  qac %.2e  (%.2f of the bound)\n", name, scale, E, rel, rel / bound);
    if (!(rel <= bound)) {
        printf("FAIL %s %s: qac's gradient is %.3e from float64 (bound %.3e)\n", cs, name, rel, bound);
        (*bad)++;
    }
    free(g32), free(g64);
    return rel / bound;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: test_xenc_grad FIXTURE_DIR l1|l2|drop|chunk\n");
        return 2;
    }
    const char *dir = argv[1], *which = argv[2];
    const char *cs = !strcmp(which, "chunk") ? "l1" : which;
    char path[4096];
    snprintf(path, sizeof path, "%s/fixture.safetensors", dir);
    CHECK_OK(qac_safetensors_open(&fx, path));
    snprintf(path, sizeof path, "%s/%s", dir, !strcmp(cs, "l2") ? "l2" : "l1");
    qac_xenc *x = NULL;
    CHECK_OK(qac_xenc_load(&x, path));
    int P, T, nl;
    int32_t *ids = i32s("ids", &P, &T), *types = i32s("types", &P, &T), *lens32 = i32s("lens", &nl, NULL);
    int *lens = malloc((size_t)P * sizeof *lens);
    for (int i = 0; i < P; i++) lens[i] = lens32[i];
    int G = atoi(qac_safetensors_metadata(fx, "groups")), N = atoi(qac_safetensors_metadata(fx, "n"));
    float drop = !strcmp(cs, "drop") ? (float)atof(qac_safetensors_metadata(fx, "dropout")) : 0.0f;

    qac_train_opts o;
    qac_train_opts_default(&o);
    o.total_steps = 1;
    o.warmup_steps = 0;
    o.seed = 42;
    o.threads = 2;
    o.hidden_dropout = o.attn_dropout = drop;
    o.chunk = !strcmp(which, "chunk") ? 5 : 0;
    qac_xtrainer *t = NULL;
    CHECK_OK(qac_xtrainer_create(&t, x, &o, drop));
    qac_xenc_batch b = {G, N, T, ids, types, lens};
    double loss = 0;
    CHECK_OK(qac_xtrainer_grads(t, &b, &loss));

    char k32[64], k64[64];
    snprintf(k32, sizeof k32, "%s.loss32", cs);
    snprintf(k64, sizeof k64, "%s.loss64", cs);
    double *l32 = f64s(k32, 1), *l64 = f64s(k64, 1);
    double El = fabs(l32[0] - l64[0]), lb = 4 * (El > 0x1p-20 * fabs(l64[0]) ? El : 0x1p-20 * fabs(l64[0]));
    printf("%s (%s): loss qac %.9f torch fp64 %.9f fp32 %.9f; |qac - fp64| %.2e (bound %.2e)\n", which, cs, loss,
           l64[0], l32[0], fabs(loss - l64[0]), lb);
    CHECK_MSG(fabs(loss - l64[0]) <= lb, "loss %.9f differs from torch's %.9f", loss, l64[0]);

    const qac_bert_config *c = &x->bert->cfg;
    int bad = 0;
    double worst = 0;
    size_t off = 0;
    for (int i = 0; i < QAC_BERT_NUM_TENSORS; i++) {
        size_t n = qac_bert_tensor_size(c, i);
        if (!n) continue; /* a tensor BERT lacks (another family's final norm) */
        double r = compare(cs, qac_bert_tensor_name(i), t->grad_mem + off, n, &bad);
        worst = r > worst ? r : worst;
        off += n;
    }
    size_t nw = (size_t)x->num_labels * c->hidden_size;
    double r = compare(cs, "cls_w", t->g_cls_w, nw, &bad);
    worst = r > worst ? r : worst;
    r = compare(cs, "cls_b", t->g_cls_b, (size_t)x->num_labels, &bad);
    worst = r > worst ? r : worst;
    printf("%s: worst tensor at %.2f of its bound; %d over\n", which, worst, bad);
    CHECK_MSG(bad == 0, "%d gradients past their bound", bad);
    /* the token types reached the embeddings: type 1's row has a gradient */
    double t1 = 0;
    for (int k = 0; k < c->hidden_size; k++) t1 += fabs(t->g.type_emb[c->hidden_size + k]);
    CHECK_MSG(t1 > 0, "token type 1 got no gradient");

    qac_xtrainer_free(t);
    qac_xenc_free(x);
    qac_safetensors_close(fx);
    free(ids), free(types), free(lens32), free(lens), free(l32), free(l64);
    return qac_test_summary();
}
