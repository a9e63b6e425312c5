#include "family_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

qac_safetensors *fam_ref;

const qac_st_tensor *fam_need(const char *name) { return qac_test_tensor(fam_ref, name); }

size_t fam_numel(const char *name) { return (size_t)fam_need(name)->numel; }

void *fam_read_all(const char *name, size_t elem) {
    const qac_st_tensor *t = fam_need(name);
    void *out = malloc(t->numel * elem);
    if (elem == 4 && t->dtype == QAC_ST_I32) memcpy(out, t->data, t->numel * 4);
    else if (elem == 4) qac_safetensors_read_f32(t, out);
    else memcpy(out, t->data, t->numel * 8); /* F64 as stored */
    return out;
}

int fam_run(const char *dir, char **names, int n, fam_check_fn check) {
    for (int i = 0; i < n; i++) {
        char model[4500], path[4600];
        snprintf(model, sizeof model, "%s/%s", dir, names[i]);
        snprintf(path, sizeof path, "%s/%s.ref.safetensors", dir, names[i]);
        if (qac_safetensors_open(&fam_ref, path) != QAC_OK) {
            fprintf(stderr, "FAIL: %s\n", qac_last_error());
            return 1;
        }
        qac_model *m = NULL;
        CHECK_OK(qac_model_load_untokenized(&m, model));
        if (!m) return qac_test_summary();
        check(names[i], m);
        qac_model_free(m);
        qac_safetensors_close(fam_ref);
        fam_ref = NULL;
    }
    return qac_test_summary();
}

/* BUILD/family_fixtures, or made into a fresh directory named tmp_name;
 * the test runs from BUILD/tests/<dir>, the source is BUILD/.. */
static const char *fixture_dir(const char *tmp_name) {
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
    snprintf(dir, sizeof dir, "%s", qac_test_tmpdir(tmp_name));
    const char *py = getenv("QAC_PYTHON");
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "'%s' '%s/../../../tests/reference/gen_family_fixtures.py' --out '%s' >/dev/null",
             py && *py ? py : "python3", exe, dir);
    printf("making the checkpoints: %s\n", cmd);
    return system(cmd) == 0 ? dir : NULL;
}

int fam_gpu_main(int argc, char **argv, const char *tmp_name, fam_check_fn check) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s NAME...\n", argv[0]);
        return 2;
    }
    if (!qac_cuda_available()) qac_test_skip("no usable CUDA GPU");
    const char *fx = fixture_dir(tmp_name);
    if (!fx) {
        fprintf(stderr, "FAIL: no family checkpoints, and the generator failed (QAC_PYTHON needs transformers and "
                        "sentence-transformers)\n");
        return 1;
    }
    return fam_run(fx, argv + 1, argc - 1, check);
}

fam_emb_diff fam_emb_compare(const float *got, const float *e32, const double *e64, int n, int C) {
    fam_emb_diff r = {1, 0, 0, 0, 0};
    for (int i = 0; i < n; i++) {
        double dot = 0, ng = 0, nr = 0;
        for (int k = 0; k < C; k++) {
            size_t j = (size_t)i * C + k;
            double a = fabs(got[j] - e64[j]), b = fabs(e32[j] - e64[j]);
            if (!(a <= r.d_qac)) r.d_qac = isnan(a) ? INFINITY : a, r.worst = i;
            r.d_torch = b > r.d_torch ? b : r.d_torch;
            r.scale = fabs(e64[j]) > r.scale ? fabs(e64[j]) : r.scale;
            dot += got[j] * (double)e32[j];
            ng += (double)got[j] * got[j];
            nr += (double)e32[j] * e32[j];
        }
        double cs = dot / (sqrt(ng * nr) + 1e-300);
        if (!(cs >= r.min_cos)) r.min_cos = isnan(cs) ? -1 : cs;
    }
    return r;
}

void fam_batch(qac_train_batch *b) {
    const qac_st_tensor *q = fam_need("q_ids"), *p = fam_need("p_ids");
    *b = (qac_train_batch){(int)q->shape[0], (int)(p->shape[0] / q->shape[0]), (int)q->shape[1], (int)p->shape[1],
                           fam_read_all("q_ids", 4), fam_read_all("q_lens", 4), fam_read_all("p_ids", 4),
                           fam_read_all("p_lens", 4)};
}

void fam_batch_free(qac_train_batch *b) {
    free((void *)b->q_ids), free((void *)b->q_lens), free((void *)b->p_ids), free((void *)b->p_lens);
}

void fam_train_opts(qac_train_opts *o) {
    qac_train_opts_default(o);
    o->tau = 0.05f;
    o->sim = QAC_SIM_COS;
    o->hidden_dropout = o->attn_dropout = 0.0f;
    o->total_steps = 1;
}

/* One tensor's gradient g [n] against grad32.TN and grad64.TN. */
static void check_tensor(const char *name, const char *label, const char *tn, const float *g, size_t n,
                        double row_floor) {
    char k32[64], k64[64];
    snprintf(k32, sizeof k32, "grad32.%s", tn);
    snprintf(k64, sizeof k64, "grad64.%s", tn);
    if (fam_numel(k64) != n) {
        fprintf(stderr, "FAIL: %s: %s has %zu values, qac %zu\n", name, k64, fam_numel(k64), n);
        exit(1);
    }
    float *r32 = fam_read_all(k32, 4);
    double *r64 = fam_read_all(k64, 8), mq = 0, mt = 0, mr = 0;
    for (size_t j = 0; j < n; j++) {
        double a = fabs(g[j] - r64[j]), c = fabs(r32[j] - r64[j]);
        if (!(a <= mq)) mq = isnan(a) ? INFINITY : a;
        mt = c > mt ? c : mt;
        mr = fabs(r64[j]) > mr ? fabs(r64[j]) : mr;
    }
    double rq = mr > 0 ? mq / mr : mq, rt = mr > 0 ? mt / mr : mt, bound = FAM_GRAD_FACTOR * rt + row_floor;
    printf("  grad %-10s qac %.2e  torch32 %.2e  (relative to max %.2e; bound %.2e)\n", tn, rq, rt, mr, bound);
    CHECK_MSG(rq <= bound, "%s: %sgradient of %s off by %.3e relative (torch's float32 %.3e)", name, label, tn, rq,
              rt);
    free(r32), free(r64);
}

void fam_check_grads(const char *name, qac_model *m, const qac_train_opts *o, const char *label) {
    qac_train_batch b;
    fam_batch(&b);
    qac_trainer *t = NULL;
    CHECK_OK(qac_trainer_create(&t, m, o));
    if (!t) exit(1);
    double loss = 0, *l32 = fam_read_all("loss32", 8), *l64 = fam_read_all("loss64", 8);
    CHECK_OK(qac_trainer_grads(t, &b, &loss));
    double lq = fabs(loss - *l64), lt = fabs(*l32 - *l64);
    printf("%-16s %sloss %.9f (float64 %.9f, torch32 off by %.1e, qac %.1e)\n", name, label, loss, *l64, lt, lq);
    CHECK_MSG(lq <= FAM_EMB_FACTOR * lt + 1e-6 * fabs(*l64), "%s: %sloss %.9f, float64 %.9f", name, label, loss,
              *l64);
    const float *g = qac_trainer_grad_mem(t);
    CHECK(g != NULL);
    double rows = (double)b.nq * b.q_T + (double)b.nq * b.n * b.p_T, row_floor = 4 * sqrt(rows) * 0x1p-24;
    size_t off = 0;
    int compared = 0;
    for (int i = 0; g && i < QAC_BERT_NUM_TENSORS; i++) {
        size_t n = qac_bert_tensor_size(&m->cfg, i);
        const char *tn = qac_bert_tensor_name(i);
        if (n && strncmp(tn, "pooler", 6)) { /* absent, or never trained: skipped */
            check_tensor(name, label, tn, g + off, n, row_floor);
            compared++;
        }
        off += n;
    }
    CHECK(compared >= 8);
    qac_trainer_free(t);
    fam_batch_free(&b);
    free(l32), free(l64);
}
