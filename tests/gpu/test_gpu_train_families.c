/* The CUDA trainer on the families it takes beyond BERT (RoBERTa and
 * XLM-RoBERTa: BERT's post-LayerNorm stack with positions offset past the
 * padding index and one token type), and its refusal of ModernBERT, on the
 * checkpoints of tests/reference/gen_family_fixtures.py.
 *
 *  - fine-tuning gradients (InfoNCE, tau 0.05, cosine, fp32, no dropout) of
 *    every trained tensor against autograd in float64, with
 *    tests/encoder/test_families.c's bound (4 times torch's own float32
 *    distance from float64, relative to the tensor's largest gradient, plus
 *    4 sqrt(R) 2^-24 for the batch's R token rows): both sides are float32
 *    with sums in other orders. The batch holds a pad token inside a
 *    passage, so the word row of the padding id and the position row
 *    padding_idx, which torch leaves without a gradient, are compared too;
 *  - ModernBERT: qac_trainer_create on CUDA answers QAC_ERR_UNSUPPORTED
 *    naming the CPU path (--device cpu).
 * argv: NAME... (a ModernBERT name checks the refusal). Checkpoints as
 * test_gpu_families finds or makes them. Exits 77 (skipped) without a
 * usable GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qac_model.h"
#include "qac_safetensors.h"
#include "qac_train.h"
#include "testutil.h"

#define GRAD_FACTOR 4.0
#define EMB_FACTOR 4.0

static qac_safetensors *ref;

static const qac_st_tensor *need(const char *name) {
    const qac_st_tensor *t = qac_safetensors_find(ref, name);
    if (!t) {
        fprintf(stderr, "FAIL: the fixture has no tensor %s\n", name);
        exit(1);
    }
    return t;
}

static void *read_all(const char *name, size_t elem) {
    const qac_st_tensor *t = need(name);
    void *out = malloc(t->numel * elem);
    if (elem == 4 && t->dtype == QAC_ST_I32) memcpy(out, t->data, t->numel * 4);
    else if (elem == 4) qac_safetensors_read_f32(t, out);
    else memcpy(out, t->data, t->numel * 8); /* F64 as stored */
    return out;
}

static void opts_of(qac_train_opts *o) {
    qac_train_opts_default(o);
    o->tau = 0.05f;
    o->sim = QAC_SIM_COS;
    o->hidden_dropout = o->attn_dropout = 0.0f;
    o->total_steps = 1;
    o->device = QAC_DEVICE_CUDA;
    o->gpu_precision = QAC_PREC_FP32;
}

static void check_refusal(const char *name, qac_model *m) {
    qac_train_opts o;
    opts_of(&o);
    qac_trainer *t = NULL;
    qac_status st = qac_trainer_create(&t, m, &o);
    const char *msg = qac_last_error();
    printf("%-16s CUDA trainer: %s\n", name, st ? msg : "created");
    CHECK_MSG(st == QAC_ERR_UNSUPPORTED && strstr(msg, "--device cpu"),
              "%s: the CUDA trainer must refuse ModernBERT naming the CPU path (status %d)", name, (int)st);
    qac_trainer_free(t);
}

static void check_grads(const char *name, qac_model *m) {
    int32_t *q_ids = read_all("q_ids", 4), *p_ids = read_all("p_ids", 4);
    int *q_lens = read_all("q_lens", 4), *p_lens = read_all("p_lens", 4);
    int qr = (int)need("q_ids")->shape[0], pr = (int)need("p_ids")->shape[0];
    qac_train_batch b = {qr, pr / qr, (int)need("q_ids")->shape[1], (int)need("p_ids")->shape[1],
                         q_ids, q_lens, p_ids, p_lens};
    qac_train_opts o;
    opts_of(&o);
    qac_trainer *t = NULL;
    CHECK_OK(qac_trainer_create(&t, m, &o));
    if (!t) exit(1);
    double loss = 0, *l32 = read_all("loss32", 8), *l64 = read_all("loss64", 8);
    CHECK_OK(qac_trainer_grads(t, &b, &loss));
    double lq = fabs(loss - *l64), lt = fabs(*l32 - *l64);
    printf("%-16s CUDA loss %.9f (float64 %.9f, torch32 off by %.1e, qac %.1e)\n", name, loss, *l64, lt, lq);
    CHECK_MSG(lq <= EMB_FACTOR * lt + 1e-6 * fabs(*l64), "%s: loss %.9f, float64 %.9f", name, loss, *l64);
    const float *g = qac_trainer_grad_mem(t);
    CHECK(g != NULL);
    double rows = (double)b.nq * b.q_T + (double)b.nq * b.n * b.p_T, row_floor = 4 * sqrt(rows) * 0x1p-24;
    size_t off = 0;
    int compared = 0;
    for (int i = 0; g && i < QAC_BERT_NUM_TENSORS; i++) {
        size_t n = qac_bert_tensor_size(&m->cfg, i);
        const char *tn = qac_bert_tensor_name(i);
        if (!n || !strncmp(tn, "pooler", 6)) {
            off += n;
            continue;
        }
        char k32[64], k64[64];
        snprintf(k32, sizeof k32, "grad32.%s", tn);
        snprintf(k64, sizeof k64, "grad64.%s", tn);
        float *r32 = read_all(k32, 4);
        double *r64 = read_all(k64, 8), mq = 0, mt = 0, mr = 0;
        for (size_t j = 0; j < n; j++) {
            double a = fabs(g[off + j] - r64[j]), c = fabs(r32[j] - r64[j]);
            if (!(a <= mq)) mq = isnan(a) ? INFINITY : a;
            mt = c > mt ? c : mt;
            mr = fabs(r64[j]) > mr ? fabs(r64[j]) : mr;
        }
        double rq = mr > 0 ? mq / mr : mq, rt = mr > 0 ? mt / mr : mt, bound = GRAD_FACTOR * rt + row_floor;
        printf("  grad %-10s qac %.2e  torch32 %.2e  (bound %.2e)\n", tn, rq, rt, bound);
        CHECK_MSG(rq <= bound, "%s: CUDA gradient of %s off by %.3e relative (torch's float32 %.3e)", name, tn, rq,
                  rt);
        compared++;
        off += n;
        free(r32), free(r64);
    }
    CHECK(compared >= 8);
    qac_trainer_free(t);
    free(q_ids), free(p_ids), free(q_lens), free(p_lens), free(l32), free(l64);
}

/* The fixture directory: BUILD/family_fixtures, or made into a fresh one. */
static const char *fixtures(void) {
    static char dir[4200];
    char exe[4000], path[4300];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return NULL;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return NULL;
    *slash = '\0'; /* BUILD/tests/gpu */
    snprintf(dir, sizeof dir, "%s/../../family_fixtures", exe);
    snprintf(path, sizeof path, "%s/texts.txt", dir);
    if (access(path, R_OK) == 0) return dir;
    snprintf(dir, sizeof dir, "%s", qac_test_tmpdir("train-families"));
    const char *py = getenv("QAC_PYTHON");
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "'%s' '%s/../../../tests/reference/gen_family_fixtures.py' --out '%s' >/dev/null",
             py && *py ? py : "python3", exe, dir);
    printf("making the checkpoints: %s\n", cmd);
    return system(cmd) == 0 ? dir : NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s NAME...\n", argv[0]);
        return 2;
    }
    if (!qac_cuda_available()) qac_test_skip("no usable CUDA GPU");
    const char *fx = fixtures();
    if (!fx) {
        fprintf(stderr, "FAIL: no family checkpoints, and the generator failed (QAC_PYTHON needs transformers and "
                        "sentence-transformers)\n");
        return 1;
    }
    for (int i = 1; i < argc; i++) {
        char dir[4500], path[4600];
        snprintf(dir, sizeof dir, "%s/%s", fx, argv[i]);
        snprintf(path, sizeof path, "%s/%s.ref.safetensors", fx, argv[i]);
        if (qac_safetensors_open(&ref, path) != QAC_OK) {
            fprintf(stderr, "FAIL: %s\n", qac_last_error());
            return 1;
        }
        qac_model *m = NULL;
        CHECK_OK(qac_model_load_untokenized(&m, dir));
        if (!m) return qac_test_summary();
        if (m->cfg.family == QAC_FAMILY_MODERNBERT)
            check_refusal(argv[i], m);
        else
            check_grads(argv[i], m);
        qac_model_free(m);
        qac_safetensors_close(ref);
    }
    return qac_test_summary();
}
