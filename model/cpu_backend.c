/* The CPU encoder backend: one batch through bert_cpu.c, with a
 * persistent thread pool and activations reused across calls. The batch
 * arrives padded; its sequences are run back to back without the padding
 * (qac_bert_forward_packed: the same bits, fewer rows), and with CLS
 * pooling the last layer runs past its keys and values for the pooled rows
 * alone (qac_bert_forward_packed_rows: the same bits again). */
#include <stdlib.h>
#include <string.h>

#include "bert_cpu.h"
#include "encoder_backend.h"
#include "qac_cpu.h"

#define CPU_DEFAULT_BATCH 32

typedef struct cpu_backend {
    const qac_model *m;
    qac_pool *pool;
    qac_bert_acts acts;
    qac_bert_packed packed;
    int32_t *rows_ids; /* the batch's tokens back to back */
    int32_t *rows_types; /* and their token types */
    int *offs;
    int *pick;         /* CLS pooling: the row each sequence is pooled at */
    size_t rows_cap;
    int offs_cap;
    int raw;           /* skip the model's normalisation (qac_encoder_set_raw) */
    qac_encoder_cancel_fn cancel; /* asked between layers */
    void *cancel_user;
} cpu_backend;

static qac_status cpu_forward(void *impl, const int32_t *ids, const int32_t *type_ids, const int *lens,
                              const int *pool_from, int B, int T, float *out) {
    cpu_backend *cb = impl;
    const qac_model *m = cb->m;
    qac_status st = qac_bert_acts_alloc(&cb->acts, &m->cfg, B, T, 0, qac_pool_size(cb->pool));
    if (st == QAC_OK && cb->packed.L > 0 && cb->packed.ffn_out[0].pq && !m->cfg.glu)
        st = qac_bert_acts_q8(&cb->acts, &m->cfg); /* int8: the FFN's activation quantised by its GELU */
    if (st != QAC_OK) return st;
    cb->acts.cancel = cb->cancel;
    cb->acts.cancel_user = cb->cancel_user;
    if ((size_t)B * T > cb->rows_cap) {
        int32_t *r = realloc(cb->rows_ids, (size_t)B * T * sizeof *r);
        if (!r) return qac_set_error(QAC_ERR_NOMEM, "cpu encoder: out of memory");
        cb->rows_ids = r;
        int32_t *ty = realloc(cb->rows_types, (size_t)B * T * sizeof *ty);
        if (!ty) return qac_set_error(QAC_ERR_NOMEM, "cpu encoder: out of memory");
        cb->rows_types = ty;
        cb->rows_cap = (size_t)B * T;
    }
    if (B > cb->offs_cap) {
        int *o = realloc(cb->offs, (size_t)B * sizeof *o);
        if (!o) return qac_set_error(QAC_ERR_NOMEM, "cpu encoder: out of memory");
        cb->offs = o;
        int *pk = realloc(cb->pick, (size_t)B * sizeof *pk);
        if (!pk) return qac_set_error(QAC_ERR_NOMEM, "cpu encoder: out of memory");
        cb->pick = pk;
        cb->offs_cap = B;
    }
    int rows = 0;
    for (int b = 0; b < B; b++) {
        if (lens[b] < 1 || lens[b] > T)
            return qac_set_error(QAC_ERR_INVALID, "cpu encoder: sequence %d has length %d (T=%d)", b, lens[b], T);
        cb->offs[b] = rows;
        memcpy(cb->rows_ids + rows, ids + (size_t)b * T, (size_t)lens[b] * sizeof *ids);
        if (type_ids) memcpy(cb->rows_types + rows, type_ids + (size_t)b * T, (size_t)lens[b] * sizeof *ids);
        rows += lens[b];
    }
    int C = m->cfg.hidden_size;
    if (m->pooling == QAC_POOL_CLS && qac_bert_prunes_last(&m->cfg)) {
        /* CLS pooling reads one row a sequence (row pool_from[b], or 0 when
         * nothing follows it, as qac_pooling_forward_from): the last layer
         * past its keys and values runs for those rows alone, same bits */
        for (int b = 0; b < B; b++) {
            int s = pool_from && pool_from[b] > 0 ? pool_from[b] : 0;
            cb->pick[b] = s < lens[b] ? s : 0;
        }
        st = qac_bert_forward_packed_rows(&cb->acts, &m->cfg, &m->p, &cb->packed, cb->rows_ids,
                                          type_ids ? cb->rows_types : NULL, lens, cb->offs, cb->pick, B, T, cb->pool);
        if (st != QAC_OK) return st;
        static const int one = 1;
        for (int b = 0; b < B; b++)
            qac_pooling_forward_from(out + (size_t)b * C, cb->acts.last + (size_t)b * C, &one, NULL, 1, 1, C,
                                     m->pooling, m->normalize && !cb->raw);
        return QAC_OK;
    }
    st = qac_bert_forward_packed(&cb->acts, &m->cfg, &m->p, &cb->packed, cb->rows_ids,
                                 type_ids ? cb->rows_types : NULL, lens, cb->offs, B, T, cb->pool);
    if (st != QAC_OK) return st;
    for (int b = 0; b < B; b++)
        qac_pooling_forward_from(out + (size_t)b * C, cb->acts.last + (size_t)cb->offs[b] * C, lens + b,
                                 pool_from ? pool_from + b : NULL, 1, lens[b], C, m->pooling, m->normalize && !cb->raw);
    return QAC_OK;
}

static void cpu_set_raw(void *impl, int raw) { ((cpu_backend *)impl)->raw = raw; }

static void cpu_set_cancel(void *impl, qac_encoder_cancel_fn fn, void *user) {
    cpu_backend *cb = impl;
    cb->cancel = fn;
    cb->cancel_user = user;
}

static void cpu_free(void *impl) {
    cpu_backend *cb = impl;
    if (!cb) return;
    qac_bert_acts_free(&cb->acts);
    qac_bert_packed_free(&cb->packed);
    qac_pool_free(cb->pool);
    free(cb->rows_ids);
    free(cb->rows_types);
    free(cb->offs);
    free(cb->pick);
    free(cb);
}

qac_status qac_cpu_backend_create(qac_encoder_backend *be, const qac_model *m, const qac_encoder_opts *o) {
    cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb) return qac_set_error(QAC_ERR_NOMEM, "cpu encoder: out of memory");
    cb->m = m;
    qac_status st = qac_pool_create(&cb->pool, o ? o->threads : 0);
    qac_precision prec = o ? o->cpu_precision : QAC_PREC_FP32;
    const char *note = NULL;
    if (st == QAC_OK && prec != QAC_PREC_FP32 && prec != QAC_PREC_BF16 && prec != QAC_PREC_INT8)
        st = qac_set_error(QAC_ERR_INVALID, "cpu encoder: precision %d must be fp32, bf16 or int8", (int)prec);
    if (st == QAC_OK && prec == QAC_PREC_INT8 && !qac_cpu_vnni()) {
        /* the portable int8 kernel gives the same bits but is far slower than fp32 */
        note = "int8 needs VNNI (AVX512-VNNI or AVX-VNNI), which this CPU path lacks: the encoder runs in fp32";
        prec = QAC_PREC_FP32;
    }
    if (st == QAC_OK)
        st = prec == QAC_PREC_BF16   ? qac_bert_pack_bf16(&cb->packed, &m->cfg, &m->p)
             : prec == QAC_PREC_INT8 ? qac_bert_pack_int8(&cb->packed, &m->cfg, &m->p)
                                     : qac_bert_pack(&cb->packed, &m->cfg, &m->p);
    if (st != QAC_OK) {
        qac_pool_free(cb->pool);
        free(cb);
        return st;
    }
    be->impl = cb;
    be->forward = cpu_forward;
    be->set_raw = cpu_set_raw;
    be->set_cancel = cpu_set_cancel;
    be->free = cpu_free;
    be->max_batch = o && o->max_batch > 0 ? o->max_batch : CPU_DEFAULT_BATCH;
    be->precision = prec;
    be->note = note;
    return QAC_OK;
}
