/* Test driver for test_checkpoint_hf.py:
 *   ckpt_tool dump DIR OUT.safetensors   load DIR, write the 19 flat views
 *                                        (F32) + pooling/normalize/... metadata
 *   ckpt_tool save DIR OUT_DIR f32|f16|bf16
 *   ckpt_tool convert IN OUT f32|f16|bf16  re-store every float tensor */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qac_model.h"
#include "qac_safetensors.h"

static int fail(const char *what) {
    fprintf(stderr, "ckpt_tool %s: %s\n", what, qac_last_error());
    return 1;
}

static int parse_dtype(const char *s) {
    if (strcmp(s, "f32") == 0) return QAC_ST_F32;
    if (strcmp(s, "f16") == 0) return QAC_ST_F16;
    if (strcmp(s, "bf16") == 0) return QAC_ST_BF16;
    return -1;
}

static int dump(const char *dir, const char *out) {
    qac_model *m;
    if (qac_model_load(&m, dir) != QAC_OK) return fail("dump");
    qac_st_write_tensor w[QAC_BERT_NUM_TENSORS];
    float *p = m->param_mem;
    for (int i = 0; i < QAC_BERT_NUM_TENSORS; i++) {
        size_t n = qac_bert_tensor_size(&m->cfg, i);
        w[i] = (qac_st_write_tensor){qac_bert_tensor_name(i), QAC_ST_F32, 1, {(int64_t)n}, p, NULL};
        p += n;
    }
    char ms[16], nm[16];
    snprintf(ms, sizeof ms, "%d", m->max_seq_len);
    snprintf(nm, sizeof nm, "%d", m->normalize);
    const char *md[] = {"pooling", qac_pooling_name(m->pooling), "normalize", nm, "max_seq_len", ms,
                        "fingerprint", m->fingerprint, NULL};
    int rc = qac_safetensors_write(out, w, QAC_BERT_NUM_TENSORS, md) == QAC_OK ? 0 : fail("dump");
    qac_model_free(m);
    return rc;
}

static int save(const char *dir, const char *out, int dt) {
    qac_model *m;
    if (qac_model_load(&m, dir) != QAC_OK) return fail("save");
    int rc = qac_model_save_as(m, out, dt) == QAC_OK ? 0 : fail("save");
    qac_model_free(m);
    return rc;
}

static int convert(const char *in, const char *out, int dt) {
    qac_safetensors *st;
    if (qac_safetensors_open(&st, in) != QAC_OK) return fail("convert");
    int n = qac_safetensors_count(st), rc = 0;
    qac_st_write_tensor *w = calloc((size_t)n, sizeof *w);
    float **bufs = calloc((size_t)n, sizeof *bufs);
    for (int i = 0; i < n && !rc; i++) {
        const qac_st_tensor *t = qac_safetensors_get(st, i);
        bufs[i] = malloc((t->numel ? t->numel : 1) * sizeof(float));
        if (qac_safetensors_read_f32(t, bufs[i]) != QAC_OK) rc = fail("convert");
        w[i] = (qac_st_write_tensor){t->name, (qac_st_dtype)dt, t->ndim, {0}, bufs[i], NULL};
        memcpy(w[i].shape, t->shape, sizeof t->shape);
    }
    if (!rc && qac_safetensors_write(out, w, n, NULL) != QAC_OK) rc = fail("convert");
    for (int i = 0; i < n; i++) free(bufs[i]);
    free(bufs);
    free(w);
    qac_safetensors_close(st);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "dump") == 0) return dump(argv[2], argv[3]);
    if (argc == 5 && parse_dtype(argv[4]) >= 0) {
        if (strcmp(argv[1], "save") == 0) return save(argv[2], argv[3], parse_dtype(argv[4]));
        if (strcmp(argv[1], "convert") == 0) return convert(argv[2], argv[3], parse_dtype(argv[4]));
    }
    fprintf(stderr, "usage: ckpt_tool dump DIR OUT | save DIR OUT DTYPE | convert IN OUT DTYPE\n");
    return 2;
}
