/* The encoder front end: tokenisation, length sorting, batching, padding
 * and output ordering. Backends run one padded batch.
 *
 * Which backend runs is chosen above this file, in
 * kernels/encoder_dispatch.c (qac_encoder_create), the one file that sees
 * every backend; it hands the backend it made to qac_encoder_attach. So
 * model/ never calls into kernels/. */
#include <stdlib.h>
#include <string.h>

#include "encoder_backend.h"

struct len_idx;

struct qac_encoder {
    const qac_model *m;
    qac_encoder_backend be;
    qac_device device;
    qac_precision cpu_precision; /* of the CPU backend; FP32 on CUDA */
    const char *cpu_note;        /* why cpu_precision is not the one asked for, or NULL */
    int max_batch;
    /* reused across calls, grown on demand */
    struct len_idx *order; /* [n] (length, index), longest first */
    size_t order_cap;
    int32_t *batch_ids;   /* [max_batch, T] */
    size_t batch_ids_cap;
    int32_t *batch_types; /* [max_batch, T] token types of a typed call */
    size_t batch_types_cap;
    int *batch_lens;      /* [max_batch] */
    int *batch_from;      /* [max_batch] */
    float *batch_out;     /* [max_batch, C] */
    int32_t *tok;         /* [n, max_len] token ids of encode_texts */
    size_t tok_cap;
    int *tok_lens;        /* [n] */
    size_t tok_lens_cap;
    const int32_t **tok_ptrs; /* [n] */
    size_t tok_ptrs_cap;
    int *tok_from;        /* [n] pooling starts of a prompted encode_texts */
    size_t tok_from_cap;
    int64_t truncated; /* texts encode_texts cut, since creation */
    qac_encoder_cancel_fn cancel;
    void *cancel_user;
};

static const char *const precision_names[] = {"fp32", "fp16", "bf16", "int8"};

qac_status qac_precision_parse(const char *name, qac_precision *out) {
    for (int i = 0; name && i < 4; i++)
        if (i != QAC_PREC_FP16 && !strcmp(name, precision_names[i])) {
            *out = (qac_precision)i;
            return QAC_OK;
        }
    return qac_set_error(QAC_ERR_INVALID, "dtype '%s': not one of fp32|bf16|int8", name ? name : "(null)");
}

const char *qac_precision_name(qac_precision p) {
    return (int)p >= 0 && (int)p < 4 ? precision_names[p] : "?";
}

qac_encoder_opts qac_encoder_default_opts(void) {
    qac_encoder_opts o = {QAC_DEVICE_AUTO, 0, 0, QAC_PREC_BF16, QAC_PREC_FP32};
    return o;
}

qac_status qac_encoder_attach(qac_encoder **out, const qac_model *m, const qac_encoder_backend *be,
                              qac_device device, qac_precision cpu_precision) {
    *out = NULL;
    qac_encoder *e = calloc(1, sizeof *e);
    if (!e) {
        if (be->free) be->free(be->impl);
        return qac_set_error(QAC_ERR_NOMEM, "encoder: out of memory");
    }
    e->m = m;
    e->be = *be;
    e->device = device;
    e->max_batch = e->be.max_batch > 0 ? e->be.max_batch : 32;
    e->cpu_precision = device == QAC_DEVICE_CPU ? cpu_precision : QAC_PREC_FP32;
    e->cpu_note = device == QAC_DEVICE_CPU ? e->be.note : NULL;
    *out = e;
    return QAC_OK;
}

void qac_encoder_free(qac_encoder *e) {
    if (!e) return;
    if (e->be.free) e->be.free(e->be.impl);
    free(e->order);
    free(e->batch_ids);
    free(e->batch_types);
    free(e->batch_lens);
    free(e->batch_from);
    free(e->batch_out);
    free(e->tok);
    free(e->tok_lens);
    free(e->tok_ptrs);
    free(e->tok_from);
    free(e);
}

int qac_encoder_dim(const qac_encoder *e) { return e->m->cfg.hidden_size; }
qac_device qac_encoder_device(const qac_encoder *e) { return e->device; }
qac_precision qac_encoder_cpu_precision(const qac_encoder *e) { return e->cpu_precision; }
const char *qac_encoder_cpu_note(const qac_encoder *e) { return e->cpu_note; }
const qac_model *qac_encoder_model(const qac_encoder *e) { return e->m; }

double qac_encoder_device_seconds(const qac_encoder *e) {
    return e->be.device_seconds ? e->be.device_seconds(e->be.impl) : -1.0;
}

void qac_encoder_set_cancel(qac_encoder *e, qac_encoder_cancel_fn fn, void *user) {
    e->cancel = fn;
    e->cancel_user = user;
    if (e->be.set_cancel) e->be.set_cancel(e->be.impl, fn, user);
}

void qac_encoder_set_raw(qac_encoder *e, int raw) {
    if (e->be.set_raw) e->be.set_raw(e->be.impl, raw);
}

/* Grow *p to hold n elements of size sz; *cap counts elements. */
static qac_status grow(void *p, size_t *cap, size_t n, size_t sz) {
    if (n <= *cap) return QAC_OK;
    size_t want = n > *cap * 2 ? n : *cap * 2;
    void *q = realloc(*(void **)p, want * sz);
    if (!q) return qac_set_error(QAC_ERR_NOMEM, "encoder: out of memory (%zu elements)", want);
    *(void **)p = q;
    *cap = want;
    return QAC_OK;
}

/* Ties keep input order, so batches are reproducible. */
typedef struct len_idx {
    int len, idx;
} len_idx;

static int cmp_len_desc(const void *a, const void *b) {
    const len_idx *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

qac_status qac_encoder_encode_ids(qac_encoder *e, const int32_t *const *ids, const int *lens, int n,
                                  float *out) {
    return qac_encoder_encode_ids_from(e, ids, lens, NULL, n, out);
}

qac_status qac_encoder_encode_ids_from(qac_encoder *e, const int32_t *const *ids, const int *lens,
                                       const int *pool_from, int n, float *out) {
    return qac_encoder_encode_ids_typed(e, ids, NULL, lens, pool_from, n, out);
}

qac_status qac_encoder_encode_ids_typed(qac_encoder *e, const int32_t *const *ids, const int32_t *const *type_ids,
                                        const int *lens, const int *pool_from, int n, float *out) {
    if (n < 0) return qac_set_error(QAC_ERR_INVALID, "encode: negative count %d", n);
    if (n == 0) return QAC_OK;
    const qac_bert_config *c = &e->m->cfg;
    for (int i = 0; i < n; i++) {
        if (lens[i] < 1 || lens[i] > qac_bert_max_tokens(c))
            return qac_set_error(QAC_ERR_INVALID, "encode: sequence %d has %d tokens (allowed 1..%d)", i, lens[i],
                                 qac_bert_max_tokens(c));
        for (int t = 0; t < lens[i]; t++) {
            if (ids[i][t] < 0 || ids[i][t] >= c->vocab_size)
                return qac_set_error(QAC_ERR_INVALID, "encode: sequence %d token %d has id %d (vocabulary %d)",
                                     i, t, ids[i][t], c->vocab_size);
            if (type_ids && (type_ids[i][t] < 0 || type_ids[i][t] >= c->type_vocab_size))
                return qac_set_error(QAC_ERR_INVALID,
                                     "encode: sequence %d token %d has token type %d (the model has %d types)", i, t,
                                     type_ids[i][t], c->type_vocab_size);
        }
    }
    qac_status st = grow(&e->order, &e->order_cap, (size_t)n, sizeof(len_idx));
    if (st != QAC_OK) return st;
    len_idx *sorted = e->order;
    for (int i = 0; i < n; i++) sorted[i] = (len_idx){lens[i], i};
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_len_desc);

    int C = c->hidden_size, MB = e->max_batch;
    int32_t pad = c->pad_token_id >= 0 && c->pad_token_id < c->vocab_size ? c->pad_token_id : 0;
    int Tmax = sorted[0].len;
    if ((st = grow(&e->batch_ids, &e->batch_ids_cap, (size_t)MB * Tmax, sizeof(int32_t))) != QAC_OK) return st;
    if (type_ids && (st = grow(&e->batch_types, &e->batch_types_cap, (size_t)MB * Tmax, sizeof(int32_t))) != QAC_OK)
        return st;
    if (!e->batch_lens && !(e->batch_lens = malloc((size_t)MB * sizeof(int))))
        return qac_set_error(QAC_ERR_NOMEM, "encoder: out of memory");
    if (pool_from && !e->batch_from && !(e->batch_from = malloc((size_t)MB * sizeof(int))))
        return qac_set_error(QAC_ERR_NOMEM, "encoder: out of memory");
    if (!e->batch_out && !(e->batch_out = malloc((size_t)MB * C * sizeof(float))))
        return qac_set_error(QAC_ERR_NOMEM, "encoder: out of memory");

    for (int s = 0; s < n; s += MB) {
        if (e->cancel && e->cancel(e->cancel_user))
            return qac_set_error(QAC_ERR_CANCELLED, "encode: cancelled after %d of %d sequences", s, n);
        int B = n - s < MB ? n - s : MB;
        int T = sorted[s].len; /* longest first */
        for (int b = 0; b < B; b++) {
            int i = sorted[s + b].idx, len = lens[i];
            int32_t *row = e->batch_ids + (size_t)b * T;
            memcpy(row, ids[i], (size_t)len * sizeof *row);
            for (int t = len; t < T; t++) row[t] = pad;
            if (type_ids) {
                int32_t *trow = e->batch_types + (size_t)b * T;
                memcpy(trow, type_ids[i], (size_t)len * sizeof *trow);
                for (int t = len; t < T; t++) trow[t] = 0;
            }
            e->batch_lens[b] = len;
            if (pool_from) e->batch_from[b] = pool_from[i];
        }
        st = e->be.forward(e->be.impl, e->batch_ids, type_ids ? e->batch_types : NULL, e->batch_lens,
                           pool_from ? e->batch_from : NULL, B, T, e->batch_out);
        if (st != QAC_OK) return st;
        for (int b = 0; b < B; b++)
            memcpy(out + (size_t)sorted[s + b].idx * C, e->batch_out + (size_t)b * C, (size_t)C * sizeof *out);
    }
    return QAC_OK;
}

qac_status qac_encoder_encode_texts(qac_encoder *e, const char *const *texts, const size_t *lens, int n,
                                    int max_len, float *out) {
    return qac_encoder_encode_texts_prompted(e, NULL, texts, lens, n, max_len, out);
}

qac_status qac_encoder_encode_texts_prompted(qac_encoder *e, const char *prompt, const char *const *texts,
                                             const size_t *lens, int n, int max_len, float *out) {
    if (n < 0) return qac_set_error(QAC_ERR_INVALID, "encode: negative count %d", n);
    if (n == 0) return QAC_OK;
    const qac_model *m = e->m;
    if (!m->tok) return qac_set_error(QAC_ERR_INVALID, "encode: the model has no tokenizer");
    max_len = qac_encoder_max_len(e, max_len);
    if (max_len < 2) return qac_set_error(QAC_ERR_INVALID, "encode: max_len %d leaves no room for [CLS] [SEP]", max_len);
    qac_status st;
    if ((st = grow(&e->tok, &e->tok_cap, (size_t)n * max_len, sizeof(int32_t))) != QAC_OK) return st;
    if ((st = grow(&e->tok_lens, &e->tok_lens_cap, (size_t)n, sizeof(int))) != QAC_OK) return st;
    if ((st = grow(&e->tok_ptrs, &e->tok_ptrs_cap, (size_t)n, sizeof(int32_t *))) != QAC_OK) return st;
    int64_t cut_texts = 0; /* counted once the texts are encoded: a cancelled call encoded none */
    for (int i = 0; i < n; i++) {
        int32_t *ids = e->tok + (size_t)i * max_len;
        size_t len = lens ? lens[i] : strlen(texts[i]);
        int cut = 0;
        st = qac_tokenizer_encode_prompted_cut(m->tok, prompt, texts[i], len, max_len, ids, &e->tok_lens[i], &cut);
        if (st != QAC_OK) return qac_wrap_error(st, "encode: text %d", i);
        cut_texts += cut;
        e->tok_ptrs[i] = ids;
    }
    int skip = 0;
    if ((st = qac_model_prompt_skip(m, prompt, max_len, &skip)) != QAC_OK) return st;
    if (skip) {
        if ((st = grow(&e->tok_from, &e->tok_from_cap, (size_t)n, sizeof(int))) != QAC_OK) return st;
        for (int i = 0; i < n; i++) e->tok_from[i] = skip;
    }
    st = qac_encoder_encode_ids_from(e, e->tok_ptrs, e->tok_lens, skip ? e->tok_from : NULL, n, out);
    if (st == QAC_OK) e->truncated += cut_texts;
    return st;
}

int64_t qac_encoder_truncated(const qac_encoder *e) { return e ? e->truncated : 0; }

/* The default is the model's max_seq_len (sentence-transformers'
 * max_seq_length); a length asked for is honoured up to the position
 * table, as sentence-transformers honours a max_seq_length set above its
 * default (issue 38: it was cut to max_seq_len, so every --max-len past 256
 * gave the 256-token vector). */
int qac_encoder_max_len(const qac_encoder *e, int max_len) {
    const qac_model *m = e->m;
    int positions = qac_bert_max_tokens(&m->cfg), def = m->max_seq_len > 0 ? m->max_seq_len : positions;
    if (def > positions) def = positions;
    if (max_len <= 0) return def;
    return max_len > positions ? positions : max_len;
}
