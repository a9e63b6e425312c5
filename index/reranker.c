/* Scoring pairs with a cross-encoder (api/qac_xenc.h): pairs assembled
 * (api/qac_pair.h), the encoder (either backend, with token types) giving
 * each pair's last-layer [CLS] state (or the mean a ModernBERT head asks
 * for), then the head (model/cls_head.c) on
 * the CPU. The encoder sorts and batches; the head is per pair.
 *
 * In index/, beside search and fusion, not in model/: it makes its encoder
 * (qac_encoder_create), whose choice of backend sits above both backends
 * (kernels/encoder_dispatch.c), and model/ calls nothing only kernels/
 * defines. */
#include <stdlib.h>
#include <string.h>

#include "cls_head.h"
#include "qac_xenc.h"

struct qac_reranker {
    const qac_xenc *x;
    qac_encoder *enc;
    qac_cls_head head;
    float *cls, *pooled;         /* [cap_pairs, C] */
    int32_t *ids, *types;        /* [cap_pairs, max_len] the assembled pairs */
    int *lens;                   /* [cap_pairs] */
    const int32_t **pid, **ptype; /* [cap_pairs] row pointers */
    size_t cap_pairs, cap_len;
    int32_t *ta, *tb;            /* one text's tokens each */
    int cap_ta, cap_tb;
    int64_t truncated;
    qac_encoder_cancel_fn cancel; /* also asked while pairs are assembled */
    void *cancel_user;
};

qac_status qac_reranker_create(qac_reranker **out, const qac_xenc *x, const qac_encoder_opts *o) {
    *out = NULL;
    if (!x || !x->bert) return qac_set_error(QAC_ERR_INVALID, "reranker: no model");
    qac_reranker *r = calloc(1, sizeof *r);
    if (!r) return qac_set_error(QAC_ERR_NOMEM, "reranker: out of memory");
    r->x = x;
    qac_status st = qac_encoder_create(&r->enc, x->bert, o);
    if (st) {
        free(r);
        return qac_wrap_error(st, "reranker");
    }
    const qac_bert_params *p = &x->bert->p;
    r->head = (qac_cls_head){.pool_w = p->pooler_w, .pool_b = p->pooler_b, .w = x->cls_w, .b = x->cls_b,
                             .C = x->bert->cfg.hidden_size, .NL = x->num_labels, .drop_layer = x->bert->cfg.num_layers};
    if (x->head == QAC_XHEAD_MODERNBERT) {
        r->head.pool_w = x->mhead_w, r->head.pool_b = x->mhead_b;
        r->head.mode = QAC_CLS_HEAD_MODERNBERT;
        r->head.norm_w = x->mnorm_w, r->head.norm_b = x->mnorm_b;
        r->head.norm_eps = x->mnorm_eps, r->head.gelu_tanh = x->mgelu_tanh;
    }
    *out = r;
    return QAC_OK;
}

void qac_reranker_free(qac_reranker *r) {
    if (!r) return;
    qac_encoder_free(r->enc);
    free(r->cls), free(r->pooled), free(r->ids), free(r->types), free(r->lens), free(r->pid), free(r->ptype);
    free(r->ta), free(r->tb);
    free(r);
}

const qac_xenc *qac_reranker_model(const qac_reranker *r) { return r->x; }
qac_device qac_reranker_device(const qac_reranker *r) { return qac_encoder_device(r->enc); }
const qac_encoder *qac_reranker_encoder(const qac_reranker *r) { return r->enc; }
int64_t qac_reranker_truncated(const qac_reranker *r) { return r ? r->truncated : 0; }
void qac_reranker_set_cancel(qac_reranker *r, qac_encoder_cancel_fn fn, void *user) {
    r->cancel = fn, r->cancel_user = user;
    qac_encoder_set_cancel(r->enc, fn, user);
}

/* every 256 pairs assembled: whether the caller cancelled */
static qac_status check_cancel(const qac_reranker *r, int i, int n) {
    if ((i & 255) == 255 && r->cancel && r->cancel(r->cancel_user))
        return qac_set_error(QAC_ERR_CANCELLED, "rerank: cancelled after %d of %d pairs assembled", i + 1, n);
    return QAC_OK;
}

qac_pair_opts qac_reranker_default_pair_opts(const qac_reranker *r) {
    qac_pair_opts o = {r->x->max_len, QAC_TRUNC_LONGEST_FIRST, QAC_TRUNC_RIGHT};
    return o;
}

/* room for n pairs of up to len tokens */
static qac_status reserve(qac_reranker *r, int n, int len) {
    size_t C = (size_t)r->x->bert->cfg.hidden_size;
    if ((size_t)n > r->cap_pairs || (size_t)len > r->cap_len) {
        size_t np = (size_t)n > r->cap_pairs ? (size_t)n : r->cap_pairs;
        size_t nl = (size_t)len > r->cap_len ? (size_t)len : r->cap_len;
        free(r->cls), free(r->pooled), free(r->ids), free(r->types), free(r->lens), free(r->pid), free(r->ptype);
        r->cls = malloc(np * C * sizeof(float));
        r->pooled = malloc(np * C * sizeof(float));
        r->ids = malloc(np * nl * sizeof(int32_t));
        r->types = malloc(np * nl * sizeof(int32_t));
        r->lens = malloc(np * sizeof(int));
        r->pid = malloc(np * sizeof *r->pid);
        r->ptype = malloc(np * sizeof *r->ptype);
        r->cap_pairs = np, r->cap_len = nl;
        if (!r->cls || !r->pooled || !r->ids || !r->types || !r->lens || !r->pid || !r->ptype) {
            r->cap_pairs = r->cap_len = 0;
            return qac_set_error(QAC_ERR_NOMEM, "reranker: out of memory for %d pairs of %d tokens", n, len);
        }
    }
    return QAC_OK;
}

/* a text's tokens into *buf (grown), *n their count */
static qac_status tokens(const qac_tokenizer *t, const char *text, size_t len, int32_t **buf, int *cap, int *n) {
    for (;;) {
        qac_status st = qac_tokenizer_tokenize(t, text, len, *buf, *cap, n);
        if (st || *n <= *cap) return st;
        int32_t *b = realloc(*buf, (size_t)*n * sizeof *b);
        if (!b) return qac_set_error(QAC_ERR_NOMEM, "reranker: out of memory for %d tokens", *n);
        *buf = b, *cap = *n;
    }
}

static qac_status check_opts(const qac_reranker *r, const qac_pair_opts *po, qac_pair_opts *o) {
    *o = po ? *po : qac_reranker_default_pair_opts(r);
    if (o->max_len <= 0 || o->max_len > r->x->max_len) o->max_len = r->x->max_len;
    if (o->max_len <= qac_pair_specials_of(r->x->bert->tok))
        return qac_set_error(QAC_ERR_INVALID, "reranker: max_len %d leaves no room for a pair", o->max_len);
    return QAC_OK;
}

/* assemble pair i from tokens a, b */
static qac_status put_pair(qac_reranker *r, int i, const int32_t *a, int na, const int32_t *b, int nb,
                           const qac_pair_opts *o) {
    int32_t *ids = r->ids + (size_t)i * o->max_len, *types = r->types + (size_t)i * o->max_len;
    int cut = 0;
    qac_status st = qac_pair_assemble_with(r->x->bert->tok, a, na, b, nb, o, ids, types, &r->lens[i], &cut);
    if (st) return qac_wrap_error(st, "pair %d", i);
    r->truncated += cut;
    r->pid[i] = ids, r->ptype[i] = types;
    return QAC_OK;
}

qac_status qac_reranker_logits_ids(qac_reranker *r, const int32_t *const *ids, const int32_t *const *types,
                                   const int *lens, int n, float *logits) {
    if (n < 0) return qac_set_error(QAC_ERR_INVALID, "reranker: negative count %d", n);
    if (n == 0) return QAC_OK;
    qac_status st = reserve(r, n, 1);
    if (st) return st;
    /* a model without token types (ModernBERT) reads none, as transformers' does */
    if (r->x->bert->cfg.type_vocab_size <= 0) types = NULL;
    if ((st = qac_encoder_encode_ids_typed(r->enc, ids, types, lens, NULL, n, r->cls))) return st;
    qac_cls_head_forward(logits, r->pooled, r->pooled, r->cls, &r->head, NULL, n);
    return QAC_OK;
}

static qac_status run(qac_reranker *r, int n, float *logits) {
    return qac_reranker_logits_ids(r, r->pid, r->ptype, r->lens, n, logits);
}

qac_status qac_reranker_logits(qac_reranker *r, const char *const *queries, const size_t *qlens,
                               const char *const *passages, const size_t *plens, int n, const qac_pair_opts *po,
                               float *logits) {
    qac_pair_opts o;
    qac_status st = check_opts(r, po, &o);
    if (!st && n > 0) st = reserve(r, n, o.max_len);
    const qac_tokenizer *t = r->x->bert->tok;
    for (int i = 0; i < n && !st; i++) {
        int na, nb;
        size_t ql = qlens ? qlens[i] : strlen(queries[i]), pl = plens ? plens[i] : strlen(passages[i]);
        if (!(st = tokens(t, queries[i], ql, &r->ta, &r->cap_ta, &na)) &&
            !(st = tokens(t, passages[i], pl, &r->tb, &r->cap_tb, &nb)) &&
            !(st = put_pair(r, i, r->ta, na, r->tb, nb, &o)))
            st = check_cancel(r, i, n);
    }
    return st ? st : run(r, n, logits);
}

qac_status qac_reranker_logits_one(qac_reranker *r, const char *query, size_t qlen, const char *const *passages,
                                   const size_t *plens, int n, const qac_pair_opts *po, float *logits) {
    qac_pair_opts o;
    qac_status st = check_opts(r, po, &o);
    if (!st && n > 0) st = reserve(r, n, o.max_len);
    const qac_tokenizer *t = r->x->bert->tok;
    int na = 0;
    if (!st && n > 0) st = tokens(t, query, qlen, &r->ta, &r->cap_ta, &na);
    for (int i = 0; i < n && !st; i++) {
        int nb;
        if (!(st = tokens(t, passages[i], plens ? plens[i] : strlen(passages[i]), &r->tb, &r->cap_tb, &nb)) &&
            !(st = put_pair(r, i, r->ta, na, r->tb, nb, &o)))
            st = check_cancel(r, i, n);
    }
    return st ? st : run(r, n, logits);
}
