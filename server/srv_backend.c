/* The real backend: model + encoder, and optionally a dense index and a
 * BM25 index, checked against each other at start-up so that a server that
 * starts is one that answers correctly. */
#include <stdlib.h>
#include <string.h>

#include "qac_bm25.h"
#include "qac_index.h"
#include "qac_server.h"
#include "qac_xenc.h"

#define QAC_SERVER_ENCODER_BATCH 128

struct qac_server_real {
    qac_model *model;
    qac_encoder *enc;
    qac_index *index;
    qac_bm25 *bm25;
    char text_unavailable[512];
    char prompt_warning[1024];
    qac_xenc *xenc;          /* --reranker */
    qac_reranker *reranker;
    float *logits;           /* its batch's logits (the batcher thread's) */
    size_t logits_cap;
};

static qac_status r_encode_text(void *u, const char *text, size_t len, int max_len, int32_t *ids, int *n) {
    qac_server_real *r = u;
    return qac_tokenizer_encode(r->model->tok, text, len, max_len, ids, n);
}

static qac_status r_tokenize(void *u, const char *text, size_t len, int32_t *ids, int cap, int *n) {
    qac_server_real *r = u;
    return qac_tokenizer_tokenize(r->model->tok, text, len, ids, cap, n);
}

static const char *r_id_to_token(void *u, int32_t id) {
    qac_server_real *r = u;
    return qac_tokenizer_id_to_token(r->model->tok, id);
}

static qac_status r_encode(void *u, const int32_t *const *ids, const int *lens, const int *pool_from, int n,
                           float *out) {
    qac_server_real *r = u;
    return qac_encoder_encode_ids_from(r->enc, ids, lens, pool_from, n, out);
}

static qac_status r_encode_prompted(void *u, const char *prompt, const char *text, size_t len, int max_len,
                                    int32_t *ids, int *n, int *pool_from) {
    qac_server_real *r = u;
    qac_status st = qac_model_encode_prompted(r->model, prompt, text, len, max_len, ids, n);
    return st ? st : qac_model_prompt_skip(r->model, prompt, max_len, pool_from);
}

static qac_status r_encode_raw(void *u, const int32_t *const *ids, const int *lens, const int *pool_from, int n,
                               float *out) {
    qac_server_real *r = u;
    qac_encoder_set_raw(r->enc, 1);
    qac_status st = qac_encoder_encode_ids_from(r->enc, ids, lens, pool_from, n, out);
    qac_encoder_set_raw(r->enc, 0);
    return st;
}

static qac_status r_decode(void *u, const int32_t *ids, int n, int skip_special, char **text) {
    qac_server_real *r = u;
    return qac_tokenizer_decode(r->model->tok, ids, n, skip_special, text);
}

static qac_status r_tokenize_offsets(void *u, const char *text, size_t len, int32_t *ids, int32_t *offs, int cap,
                                     int *n) {
    qac_server_real *r = u;
    return qac_tokenizer_tokenize_offsets(r->model->tok, text, len, ids, offs, cap, n);
}

static qac_status r_search(void *u, const float *q, int nq, int k, float *scores, int64_t *rows) {
    return qac_index_search(u, q, nq, k, scores, rows);
}

static const char *r_docid(void *u, int64_t row) { return qac_index_docid(u, row); }

static qac_status r_text(void *u, int64_t row, char **text) { return qac_index_text(u, row, text); }

static qac_status r_bm25_search(void *u, const char *q, int k, float *scores, int64_t *rows, int *n) {
    return qac_bm25_search(u, q, NULL, k, scores, rows, n);
}

static const char *r_bm25_docid(void *u, int64_t row) { return qac_bm25_docid(u, row); }

static qac_status r_rerank_pair(void *u, const char *a, size_t alen, const char *b, size_t blen,
                                const qac_pair_opts *po, int32_t *ids, int32_t *types, int *n, int *cut) {
    qac_server_real *r = u;
    return qac_pair_encode(r->xenc->bert->tok, a, alen, b, blen, po, ids, types, n, cut);
}

static qac_status r_rerank_scores(void *u, const int32_t *const *ids, const int32_t *const *types, const int *lens,
                                  int n, float *out) {
    qac_server_real *r = u;
    int NL = r->xenc->num_labels;
    if ((size_t)n * NL > r->logits_cap) {
        float *l = realloc(r->logits, (size_t)n * NL * sizeof *l);
        if (!l) return qac_set_error(QAC_ERR_NOMEM, "reranker: out of memory");
        r->logits = l, r->logits_cap = (size_t)n * NL;
    }
    qac_status st = qac_reranker_logits_ids(r->reranker, ids, types, lens, n, r->logits);
    if (st) return st;
    float raw, prob;
    for (int i = 0; i < n; i++) { /* [raw, probability] a pair */
        qac_xenc_raw_scores(r->xenc, r->logits + (size_t)i * NL, 1, &raw);
        qac_xenc_probabilities(r->xenc, r->logits + (size_t)i * NL, 1, &prob);
        out[2 * (size_t)i] = raw, out[2 * (size_t)i + 1] = prob;
    }
    return QAC_OK;
}

qac_status qac_server_real_add_reranker(qac_server_real *r, qac_server_backend *be, const char *dir,
                                        const char *device, const char *dtype, int threads) {
    qac_encoder_opts eo = qac_encoder_default_opts();
    eo.device = device && !strcmp(device, "cpu") ? QAC_DEVICE_CPU
                : device && !strcmp(device, "cuda") ? QAC_DEVICE_CUDA
                                                    : QAC_DEVICE_AUTO;
    eo.threads = threads;
    eo.cpu_precision = QAC_PREC_FP32;
    eo.max_batch = QAC_SERVER_ENCODER_BATCH;
    qac_status st = dtype ? qac_precision_parse(dtype, &eo.cpu_precision) : QAC_OK;
    if (st) return st;
    st = qac_xenc_load(&r->xenc, dir);
    if (st) return strstr(qac_last_error(), dir) ? st : qac_wrap_error(st, "reranker %s", dir);
    if ((st = qac_reranker_create(&r->reranker, r->xenc, &eo))) return qac_wrap_error(st, "reranker %s", dir);
    be->reranker = r;
    if (!be->encoder_note) be->encoder_note = qac_encoder_cpu_note(qac_reranker_encoder(r->reranker));
    be->reranker_id = r->xenc->bert->name;
    be->reranker_fingerprint = r->xenc->fingerprint;
    be->reranker_max_len = r->xenc->max_len;
    be->rerank_pair = r_rerank_pair;
    be->rerank_scores = r_rerank_scores;
    return QAC_OK;
}

/* What encode_text puts around a text: the tokenizer's own single template
 * (its post-processor, as Hugging Face's tokenizers and so TEI apply it),
 * laid out around one stand-in token: <s> and </s> for RoBERTa and XLM-R,
 * [CLS] and [SEP] for BERT and ModernBERT, nothing for a tokenizer.json
 * without a post-processor, whatever special tokens the vocabulary names.
 * A template of more than one token on a side (none of the families qac
 * loads) keeps the vocabulary's [CLS] and [SEP]. */
static void template_ends(const qac_tokenizer *t, const qac_special_ids *sp, int32_t *head, int32_t *tail) {
    int32_t ids[16], x = -2; /* no token has a negative id */
    int n = 0, at = -1;
    *head = sp->cls;
    *tail = sp->sep;
    if (qac_tokenizer_assemble(t, &x, 1, NULL, 0, 16, ids, NULL, &n)) return;
    for (int i = 0; i < n; i++)
        if (ids[i] == x) at = i;
    if (at < 0 || at > 1 || n - at - 1 > 1) return;
    *head = at == 1 ? ids[0] : -1;
    *tail = n - at - 1 == 1 ? ids[n - 1] : -1;
}

qac_status qac_server_real_open(qac_server_real **out, qac_server_backend *be, const char *model_dir,
                                const char *index_dir, const char *bm25_dir, const char *device, const char *dtype,
                                int threads, const char *verify, int allow_model_mismatch, const char *query_prompt,
                                const char *passage_prompt, int allow_prompt_mismatch) {
    *out = NULL;
    memset(be, 0, sizeof *be);
    qac_server_real *r = calloc(1, sizeof *r);
    if (!r) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    qac_device dev = QAC_DEVICE_AUTO;
    if (device && !strcmp(device, "cpu")) dev = QAC_DEVICE_CPU;
    if (device && !strcmp(device, "cuda")) dev = QAC_DEVICE_CUDA;
    qac_status st;
    if ((st = qac_model_load(&r->model, model_dir))) {
        if (!strstr(qac_last_error(), model_dir)) qac_wrap_error(st, "model %s", model_dir);
        goto fail;
    }
    if (!r->model->tok) {
        st = qac_set_error(QAC_ERR_INVALID, "model %s has no tokenizer", model_dir);
        goto fail;
    }
    if ((st = qac_model_override_prompts(r->model, query_prompt, passage_prompt))) goto fail;
    qac_encoder_opts eo = qac_encoder_default_opts();
    eo.device = dev;
    eo.threads = threads;
    eo.cpu_precision = QAC_PREC_FP32;
    if (dtype && (st = qac_precision_parse(dtype, &eo.cpu_precision))) goto fail;
    /* The CPU forward pass gives a text the same bits in any batch; the GPU's
     * may not, so use `qac search`'s batch there too: a remote run then
     * matches an offline one exactly. */
    eo.max_batch = QAC_SERVER_ENCODER_BATCH;
    if ((st = qac_encoder_create(&r->enc, r->model, &eo))) {
        qac_wrap_error(st, "encoder");
        goto fail;
    }
    int dim = qac_encoder_dim(r->enc);
    if (index_dir) {
        qac_index_verify vm = QAC_VERIFY_FULL;
        if ((verify && (st = qac_index_verify_parse(verify, &vm))) ||
            (st = qac_index_open_verified(&r->index, index_dir, dev, vm)) ||
            (st = qac_index_set_threads(r->index, threads))) {
            if (!strstr(qac_last_error(), index_dir)) qac_wrap_error(st, "index %s", index_dir); /* named once */
            goto fail;
        }
        if (qac_index_dim(r->index) != dim) {
            st = qac_set_error(QAC_ERR_INVALID, "index %s has dimension %d but the model has %d", index_dir,
                               qac_index_dim(r->index), dim);
            goto fail;
        }
        /* The corpus is opened once, here: a changed one refuses the start;
         * a missing one (an index moved without it) only disables return_text. */
        qac_status cst = qac_index_open_corpus(r->index, vm);
        if (cst == QAC_ERR_NOT_FOUND) {
            snprintf(r->text_unavailable, sizeof r->text_unavailable, "%s", qac_last_error());
        } else if (cst) {
            st = strstr(qac_last_error(), index_dir) ? cst : qac_wrap_error(cst, "index %s", index_dir);
            goto fail;
        }
        if (!allow_model_mismatch && (st = qac_index_check_model(r->index, r->model))) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", qac_last_error());
            qac_set_error(st, "%s (or --allow-model-mismatch to serve it anyway)", msg);
            goto fail;
        }
        if ((st = qac_index_check_prompts(r->index, qac_model_query_prompt(r->model)))) {
            if (!allow_prompt_mismatch) {
                qac_wrap_error(st, "index %s", index_dir);
                goto fail;
            }
            snprintf(r->prompt_warning, sizeof r->prompt_warning, "%s", qac_last_error());
            qac_clear_error();
            st = QAC_OK;
        }
    }
    if (bm25_dir && (st = qac_bm25_open(&r->bm25, bm25_dir))) {
        if (!strstr(qac_last_error(), bm25_dir)) qac_wrap_error(st, "bm25 index %s", bm25_dir);
        goto fail;
    }
    const qac_model *m = r->model;
    int limit = m->max_seq_len > 0 ? m->max_seq_len : qac_bert_max_tokens(&m->cfg);
    if (limit > qac_bert_max_tokens(&m->cfg)) limit = qac_bert_max_tokens(&m->cfg);
    be->enc = r;
    be->model_id = m->name;
    be->fingerprint = m->fingerprint;
    be->pooling = m->pooling == QAC_POOL_MEAN ? "mean" : "cls";
    be->dim = dim;
    be->normalize = m->normalize;
    be->model_max_len = limit;
    be->max_position = qac_bert_max_tokens(&m->cfg); /* the position table, less a RoBERTa offset */
    be->encode_text = r_encode_text;
    be->tokenize = r_tokenize;
    be->id_to_token = r_id_to_token;
    be->encode = r_encode;
    if (m->normalize) be->encode_raw = r_encode_raw;
    be->decode = r_decode;
    if (qac_tokenizer_has_offsets(m->tok)) be->tokenize_offsets = r_tokenize_offsets;
    be->vocab_size = m->cfg.vocab_size;
    be->cuda_gpu = qac_cuda_available();
    qac_special_ids sp = qac_tokenizer_specials(m->tok);
    template_ends(m->tok, &sp, &be->cls_id, &be->sep_id);
    int32_t specials[] = {sp.cls, sp.sep, sp.pad, sp.unk, sp.mask, -1, -1, -1};
    memcpy(be->special_ids, specials, sizeof specials);
    be->encode_prompted = r_encode_prompted;
    be->query_prompt = qac_model_query_prompt(m);
    be->passage_prompt = qac_model_passage_prompt(m);
    be->default_prompt_name = m->default_prompt_name;
    be->n_prompts = m->n_prompts;
    be->prompt_names = (const char *const *)m->prompt_names;
    be->prompt_texts = (const char *const *)m->prompt_texts;
    be->include_prompt = m->include_prompt;
    if (r->prompt_warning[0]) be->prompt_warning = r->prompt_warning;
    be->encoder_note = qac_encoder_cpu_note(r->enc);
    if (r->index) {
        be->index = r->index;
        be->index_count = qac_index_count(r->index);
        be->index_type = qac_index_factory(r->index);
        be->search = r_search;
        be->docid = r_docid;
        be->text = r_text;
        qac_index_prompts(r->index, &be->index_query_prompt, &be->index_passage_prompt);
        if (r->text_unavailable[0]) be->text_unavailable = r->text_unavailable;
    }
    if (r->bm25) {
        be->bm25 = r->bm25;
        be->bm25_count = qac_bm25_count(r->bm25);
        be->bm25_search = r_bm25_search;
        be->bm25_docid = r_bm25_docid;
    }
    *out = r;
    return QAC_OK;
fail:
    qac_server_real_free(r);
    memset(be, 0, sizeof *be);
    return st;
}

void qac_server_real_free(qac_server_real *r) {
    if (!r) return;
    qac_bm25_free(r->bm25);
    qac_reranker_free(r->reranker);
    qac_xenc_free(r->xenc);
    free(r->logits);
    qac_index_free(r->index);
    qac_encoder_free(r->enc);
    qac_model_free(r->model);
    free(r);
}
