/* The CPU encoder backend: one padded batch through bert_cpu.c, with a
 * persistent thread pool and activations reused across calls. */
#include <stdlib.h>

#include "bert_cpu.h"
#include "encoder_backend.h"

#define CPU_DEFAULT_BATCH 32

typedef struct cpu_backend {
    const qac_model *m;
    qac_pool *pool;
    qac_bert_acts acts;
    qac_bert_packed packed;
} cpu_backend;

static qac_status cpu_forward(void *impl, const int32_t *ids, const int *lens, int B, int T, float *out) {
    cpu_backend *cb = impl;
    const qac_model *m = cb->m;
    qac_status st = qac_bert_acts_alloc(&cb->acts, &m->cfg, B, T, 0, qac_pool_size(cb->pool));
    if (st != QAC_OK) return st;
    st = qac_bert_forward(&cb->acts, &m->cfg, &m->p, &cb->packed, ids, lens, B, T, NULL, cb->pool);
    if (st != QAC_OK) return st;
    qac_pooling_forward(out, cb->acts.last, lens, B, T, m->cfg.hidden_size, m->pooling, m->normalize);
    return QAC_OK;
}

static void cpu_free(void *impl) {
    cpu_backend *cb = impl;
    if (!cb) return;
    qac_bert_acts_free(&cb->acts);
    qac_bert_packed_free(&cb->packed);
    qac_pool_free(cb->pool);
    free(cb);
}

qac_status qac_cpu_backend_create(qac_encoder_backend *be, const qac_model *m, const qac_encoder_opts *o) {
    cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb) return qac_set_error(QAC_ERR_NOMEM, "cpu encoder: out of memory");
    cb->m = m;
    qac_status st = qac_pool_create(&cb->pool, o ? o->threads : 0);
    int bf16 = o && o->cpu_precision == QAC_PREC_BF16;
    if (st == QAC_OK && o && o->cpu_precision != QAC_PREC_FP32 && !bf16)
        st = qac_set_error(QAC_ERR_INVALID, "cpu encoder: precision must be fp32 or bf16");
    if (st == QAC_OK) st = bf16 ? qac_bert_pack_bf16(&cb->packed, &m->cfg, &m->p) : qac_bert_pack(&cb->packed, &m->cfg, &m->p);
    if (st != QAC_OK) {
        qac_pool_free(cb->pool);
        free(cb);
        return st;
    }
    be->impl = cb;
    be->forward = cpu_forward;
    be->free = cpu_free;
    be->max_batch = o && o->max_batch > 0 ? o->max_batch : CPU_DEFAULT_BATCH;
    return QAC_OK;
}
