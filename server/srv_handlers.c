/* The JSON endpoints. Each handler validates the whole body before doing
 * any work, so a bad request costs no encoder time, and maps every failure
 * to one status: 400 unparseable, 413 too large, 422 wrong types or values,
 * 503 overloaded or unavailable, 500 only for internal faults. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "qac_fusion.h"
#include "qac_util.h"
#include "srv_internal.h"

/* Tokenize prompt + text (prompt NULL or "": the text alone) and encode
 * through the batcher: out is [n, dim]. With k > 0 the batcher also
 * searches the dense index, into scores/rows [n, k]. */
static int encode_texts(qac_server *s, const qac_srv_texts *t, const char *prompt, int max_len, float *out,
                        long long *tokens, int k, float *scores, int64_t *rows, qac_http_response *r) {
    int n = t->n, ok = 0, prompted = prompt && *prompt;
    /* a prompted text is tokenised one token longer to see whether it fits */
    int row = max_len + (prompted && !s->cfg.truncate);
    int32_t *ids = malloc((size_t)n * (size_t)row * sizeof *ids);
    const int32_t **ptrs = malloc((size_t)n * sizeof *ptrs);
    int *lens = malloc((size_t)n * sizeof *lens), *from = prompted ? malloc((size_t)n * sizeof *from) : NULL;
    if (!ids || !ptrs || !lens || (prompted && !from)) {
        qac_server_error(r, 500, "internal", "out of memory");
        goto done;
    }
    if (prompted && !s->be.encode_prompted) {
        qac_server_error(r, 500, "internal", "the backend cannot apply prompts");
        goto done;
    }
    long long total = 0;
    for (int i = 0; i < n; i++) {
        ptrs[i] = ids + (size_t)i * row;
        if (from) from[i] = 0;
        if (t->ids && t->ids[i]) { /* token ids: the model's input as given, no prompt */
            int m = (int)json_array_size(t->ids[i]);
            if (m > max_len && !s->cfg.truncate) {
                qac_server_error(r, 413, "payload_too_large",
                                 "input %d has %d token ids, more than the limit of %d (truncation is off)", i, m,
                                 max_len);
                goto done;
            }
            lens[i] = m < max_len ? m : max_len;
            for (int j = 0; j < lens[i]; j++) {
                json_int_t id = json_integer_value(json_array_get(t->ids[i], (size_t)j));
                if (id < 0 || id >= s->be.vocab_size) {
                    qac_server_error(r, 422, "validation_error", "input %d: token id %lld is outside the vocabulary (0..%d)",
                                     i, (long long)id, s->be.vocab_size - 1);
                    goto done;
                }
                ids[(size_t)i * row + (size_t)j] = (int32_t)id;
            }
            total += lens[i];
            continue;
        }
        if (prompted) {
            if (s->be.encode_prompted(s->be.enc, prompt, t->s[i], t->len[i], row, ids + (size_t)i * row, &lens[i],
                                      &from[i])) {
                qac_server_error(r, 500, "internal", "tokenizer: %s", qac_last_error());
                goto done;
            }
            if (lens[i] > max_len) {
                qac_server_error(r, 413, "payload_too_large",
                                 "text %d with its prompt has more than %d tokens with [CLS]/[SEP] (truncation is off)",
                                 i, max_len);
                goto done;
            }
            total += lens[i];
            continue;
        }
        if (!s->cfg.truncate) {
            int full = 0;
            int32_t scratch[1];
            if (s->be.tokenize(s->be.enc, t->s[i], t->len[i], scratch, 0, &full)) {
                qac_server_error(r, 500, "internal", "tokenizer: %s", qac_last_error());
                goto done;
            }
            if (full + 2 > max_len) {
                qac_server_error(r, 413, "payload_too_large",
                                 "text %d has %d tokens with [CLS]/[SEP], more than the limit of %d (truncation is off)",
                                 i, full + 2, max_len);
                goto done;
            }
        }
        if (s->be.encode_text(s->be.enc, t->s[i], t->len[i], max_len, ids + (size_t)i * row, &lens[i])) {
            qac_server_error(r, 500, "internal", "tokenizer: %s", qac_last_error());
            goto done;
        }
        total += lens[i];
    }
    qac_status st = qac_batcher_run(s->batcher, (const int32_t *const *)ptrs, lens, from, n, out, k, scores, rows,
                                    s->cfg.timeout_ms, qac_srv_cancel, 0);
    if (st) {
        qac_srv_fail(r, QAC_REPLY_HOUSE, st, k > 0 ? "encoder or index search" : "encoder");
    } else {
        ok = 1;
        if (tokens) *tokens = total;
    }
done:
    free(ids);
    free(ptrs);
    free(lens);
    free(from);
    return ok;
}

/* One vector as /encode and /v1/embeddings give it: floats or base64. */
static size_t embedding_max(int dim, int base64) {
    return base64 ? qac_jw_base64_size(dim) : qac_jw_floats_max(dim);
}

static void embedding_write(qac_jw *w, const float *x, int dim, int base64) {
    if (base64) qac_jw_base64_floats(w, x, dim);
    else qac_jw_floats(w, x, dim);
}

static const char *or_empty(const char *s) { return s ? s : ""; }

/* ---------------- /encode ---------------- */

void qac_handle_encode(qac_server *s, const char *body, size_t len, qac_http_response *r) {
    static const char *const kinds[] = {"query", "passage", NULL}, *const encodings[] = {"float", "base64", NULL};
    json_t *o = qac_srv_parse_body(body, len, r);
    if (!o) return;
    qac_srv_texts t = {0};
    int kind = 1, normalize = 1, encoding = 0;
    float *vec = NULL;
    qac_jw w = {0};
    if (!qac_srv_get_texts(s, o, NULL, "texts", &t, r) || !qac_srv_get_enum(o, "kind", kinds, &kind, r) ||
        !qac_srv_get_bool(o, "normalize", &normalize, r) || !qac_srv_get_enum(o, "encoding", encodings, &encoding, r))
        goto done;
    int dim = s->be.dim;
    /* {"model":M,"dim":D,"embeddings":[E,...],"tokens":T}, decided before encoding */
    size_t bound = 64 + qac_jw_str_size(s->be.model_id, strlen(s->be.model_id)) + QAC_JW_INT_MAX * 2 +
                   (size_t)t.n * (embedding_max(dim, encoding) + 1);
    if (!qac_srv_response_fits(s, bound, QAC_REPLY_HOUSE, "send fewer texts or ask for \"encoding\": \"base64\"", r))
        goto done;
    vec = malloc((size_t)t.n * dim * sizeof *vec);
    if (!vec || !qac_jw_open(&w, bound)) {
        qac_srv_fail(r, QAC_REPLY_HOUSE, QAC_ERR_NOMEM, "out of memory");
        goto done;
    }
    long long tokens = 0;
    if (!encode_texts(s, &t, kind == 0 ? or_empty(s->be.query_prompt) : or_empty(s->be.passage_prompt),
                      kind == 0 ? s->cfg.query_max_len : s->cfg.passage_max_len, vec, &tokens, 0, NULL, NULL, r))
        goto done;
    if (normalize && !s->be.normalize) qac_srv_l2_normalize(vec, t.n, dim);
    qac_jw_lit(&w, "{\"model\":");
    qac_jw_str(&w, s->be.model_id, strlen(s->be.model_id));
    qac_jw_lit(&w, ",\"dim\":");
    qac_jw_int(&w, dim);
    qac_jw_lit(&w, ",\"embeddings\":[");
    for (int i = 0; i < t.n; i++) {
        if (i) qac_jw_lit(&w, ",");
        embedding_write(&w, vec + (size_t)i * dim, dim, encoding);
    }
    qac_jw_lit(&w, "],\"tokens\":");
    qac_jw_int(&w, tokens);
    qac_jw_lit(&w, "}");
    qac_jw_reply(&w, r, QAC_REPLY_HOUSE);
done:
    qac_jw_free(&w);
    free(vec);
    qac_srv_texts_free(&t);
    json_decref(o);
}

/* ---------------- /v1/embeddings (OpenAI) ---------------- */

/* A JSON array of integers (one tokenized input). */
static int is_int_array(json_t *a) {
    if (!json_is_array(a) || !json_array_size(a)) return 0;
    for (size_t i = 0; i < json_array_size(a); i++)
        if (!json_is_integer(json_array_get(a, i))) return 0;
    return 1;
}

/* OpenAI's `input`: a string, an array of strings, an array of token ids
 * (one input) or an array of arrays of token ids. */
static int get_openai_input(qac_server *s, json_t *o, qac_srv_texts *t, qac_http_response *r) {
    json_t *in = json_object_get(o, "input");
    int single_ids = is_int_array(in);
    if (!json_is_array(in) || !json_array_size(in) || json_is_string(json_array_get(in, 0)) ||
        (!single_ids && !json_is_array(json_array_get(in, 0))))
        return qac_srv_get_texts(s, o, "input", NULL, t, r); /* strings, or its error for anything else */
    size_t n = single_ids ? 1 : json_array_size(in);
    if (n > (size_t)s->cfg.max_texts) {
        qac_server_error(r, 413, "payload_too_large", "'input' has %zu entries, more than the limit of %d", n,
                         s->cfg.max_texts);
        return 0;
    }
    memset(t, 0, sizeof *t);
    t->n = (int)n;
    t->s = calloc(n, sizeof *t->s);
    t->len = calloc(n, sizeof *t->len);
    t->ids = calloc(n, sizeof *t->ids);
    if (!t->s || !t->len || !t->ids) {
        qac_srv_texts_free(t);
        qac_server_error(r, 500, "internal", "out of memory");
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *e = single_ids ? in : json_array_get(in, i);
        if (!is_int_array(e)) {
            qac_server_error(r, 422, "validation_error",
                             "'input[%zu]' must be a non-empty array of token ids, as the other entries", i);
            qac_srv_texts_free(t);
            return 0;
        }
        t->ids[i] = e;
    }
    return 1;
}

void qac_handle_embeddings(qac_server *s, const char *body, size_t len, qac_http_response *r) {
    static const char *const encodings[] = {"float", "base64", NULL};
    /* not OpenAI's: which prompt the inputs take (absent: the default one) */
    static const char *const input_types[] = {"query", "passage", "document", NULL};
    int input_type = -1;
    json_t *o = qac_srv_parse_body(body, len, r);
    if (!o) return;
    qac_srv_texts t = {0};
    int encoding = 0;
    long long dims = s->be.dim;
    float *vec = NULL;
    qac_jw w = {0};
    json_t *model = json_object_get(o, "model");
    if (model && !json_is_string(model)) {
        qac_server_error(r, 422, "validation_error", "'model' must be a string");
        goto done;
    }
    if (!get_openai_input(s, o, &t, r) || !qac_srv_get_enum(o, "encoding_format", encodings, &encoding, r) ||
        !qac_srv_get_int(o, "dimensions", 1, 1 << 20, &dims, r) || !qac_srv_get_enum(o, "input_type", input_types, &input_type, r))
        goto done;
    if (dims > s->be.dim) {
        qac_server_error(r, 422, "validation_error", "'dimensions' must be at most %d for this model", s->be.dim);
        goto done;
    }
    int dim = s->be.dim;
    /* {"object":"list","data":[{"object":"embedding","index":I,"embedding":E},...],"model":M,
     *  "usage":{"prompt_tokens":T,"total_tokens":T}}, decided before encoding */
    size_t bound = 128 + qac_jw_str_size(s->be.model_id, strlen(s->be.model_id)) + QAC_JW_INT_MAX * 2 +
                   (size_t)t.n * (48 + QAC_JW_INT_MAX + embedding_max((int)dims, encoding));
    if (!qac_srv_response_fits(s, bound, QAC_REPLY_HOUSE,
                               "send fewer inputs, ask for fewer dimensions or for \"encoding_format\": \"base64\"", r))
        goto done;
    vec = malloc((size_t)t.n * dim * sizeof *vec);
    if (!vec || !qac_jw_open(&w, bound)) {
        qac_srv_fail(r, QAC_REPLY_HOUSE, QAC_ERR_NOMEM, "out of memory");
        goto done;
    }
    long long tokens = 0;
    const char *prompt = input_type < 0 ? qac_srv_default_prompt(s)
                         : input_type == 0 ? or_empty(s->be.query_prompt)
                                           : or_empty(s->be.passage_prompt);
    if (!encode_texts(s, &t, prompt, input_type == 0 ? s->cfg.query_max_len : s->cfg.passage_max_len, vec, &tokens,
                      0, NULL, NULL, r))
        goto done;
    if (dims < dim) { /* OpenAI's shortening: the first dimensions, normalised again */
        for (int i = 0; i < t.n; i++) memmove(vec + (size_t)i * dims, vec + (size_t)i * dim, (size_t)dims * sizeof *vec);
        qac_srv_l2_normalize(vec, t.n, (int)dims);
    } else if (!s->be.normalize) {
        qac_srv_l2_normalize(vec, t.n, dim);
    }
    qac_jw_lit(&w, "{\"object\":\"list\",\"data\":[");
    for (int i = 0; i < t.n; i++) {
        qac_jw_lit(&w, i ? ",{\"object\":\"embedding\",\"index\":" : "{\"object\":\"embedding\",\"index\":");
        qac_jw_int(&w, i);
        qac_jw_lit(&w, ",\"embedding\":");
        embedding_write(&w, vec + (size_t)i * dims, (int)dims, encoding);
        qac_jw_lit(&w, "}");
    }
    qac_jw_lit(&w, "],\"model\":");
    qac_jw_str(&w, s->be.model_id, strlen(s->be.model_id));
    qac_jw_lit(&w, ",\"usage\":{\"prompt_tokens\":");
    qac_jw_int(&w, tokens);
    qac_jw_lit(&w, ",\"total_tokens\":");
    qac_jw_int(&w, tokens);
    qac_jw_lit(&w, "}}");
    qac_jw_reply(&w, r, QAC_REPLY_HOUSE);
done:
    qac_jw_free(&w);
    free(vec);
    qac_srv_texts_free(&t);
    json_decref(o);
}

/* ---------------- /tokenize ---------------- */

/* {"ids":[[id,...],...],"tokens":[[token,...],...]} from every text's ids
 * (ids[at[i]] .. ids[at[i + 1]] are text i's). */
static void tokenize_write(qac_server *s, const qac_srv_texts *t, const int32_t *ids, const size_t *at, qac_jw *w) {
    for (int list = 0; list < 2; list++) {
        qac_jw_lit(w, list ? "],\"tokens\":[" : "{\"ids\":[");
        for (int i = 0; i < t->n; i++) {
            qac_jw_lit(w, i ? ",[" : "[");
            for (size_t k = at[i]; k < at[i + 1]; k++) {
                if (k > at[i]) qac_jw_lit(w, ",");
                const char *tok = list && s->be.id_to_token ? s->be.id_to_token(s->be.enc, ids[k]) : NULL;
                if (list) qac_jw_str(w, tok ? tok : "", tok ? strlen(tok) : 0);
                else qac_jw_int(w, ids[k]);
            }
            qac_jw_lit(w, "]");
        }
    }
    qac_jw_lit(w, "]}");
}

void qac_handle_tokenize(qac_server *s, const char *body, size_t len, qac_http_response *r) {
    json_t *o = qac_srv_parse_body(body, len, r);
    if (!o) return;
    if (json_object_get(o, "inputs")) { /* text-embeddings-inference's form */
        qac_handle_tei_tokenize(s, o, r);
        json_decref(o);
        return;
    }
    qac_srv_texts t = {0};
    int specials = 1;
    int32_t *ids = NULL; /* every text's ids, one after the other */
    size_t *at = NULL;   /* [n + 1]: where each text's ids start */
    qac_jw w = {0};
    if (!qac_srv_get_texts(s, o, "text", "texts", &t, r) || !qac_srv_get_bool(o, "add_special_tokens", &specials, r))
        goto done;
    /* First the ids, and the answer's exact size from them: decided before it is written. */
    at = calloc((size_t)t.n + 1, sizeof *at);
    if (!at) goto oom;
    for (int i = 0; i < t.n; i++) {
        int n = 0;
        int32_t scratch[1];
        if (s->be.tokenize(s->be.enc, t.s[i], t.len[i], scratch, 0, &n)) goto tokenizer;
        int32_t *grown = realloc(ids, (at[i] + (size_t)n + 2) * sizeof *ids);
        if (!grown) goto oom;
        ids = grown;
        qac_status st = specials ? s->be.encode_text(s->be.enc, t.s[i], t.len[i], n + 2, ids + at[i], &n)
                                 : s->be.tokenize(s->be.enc, t.s[i], t.len[i], ids + at[i], n, &n);
        if (st) goto tokenizer;
        at[i + 1] = at[i] + (size_t)n;
    }
    qac_jw_count(&w); /* the answer's exact size, from a dry run of its writing */
    tokenize_write(s, &t, ids, at, &w);
    size_t size = w.len;
    if (!qac_srv_response_fits(s, size, QAC_REPLY_HOUSE, "send less text", r)) goto done;
    if (!qac_jw_open(&w, size)) goto oom;
    tokenize_write(s, &t, ids, at, &w);
    qac_jw_reply(&w, r, QAC_REPLY_HOUSE);
    goto done;
tokenizer:
    qac_server_error(r, 500, "internal", "tokenizer: %s", qac_last_error());
    goto done;
oom:
    qac_srv_fail(r, QAC_REPLY_HOUSE, QAC_ERR_NOMEM, "out of memory");
done:
    qac_jw_free(&w);
    free(ids);
    free(at);
    qac_srv_texts_free(&t);
    json_decref(o);
}

/* ---------------- /search ---------------- */

static const char *const search_modes[] = {"dense", "bm25", "hybrid", NULL};

/* A /search request once read, and the lists and hits of its queries. */
typedef struct search_req {
    qac_srv_texts t;
    long long k;
    int rerank;             /* a cross-encoder reranks the first stage's top rerank_depth */
    long long rerank_depth;
    long long k_first;      /* hits the first stage collects: k, or rerank_depth when deeper */
    int mode; /* qac_search_mode */
    int return_text;
    int depth;              /* how deep each list is fetched (hybrid fuses deeper lists than it returns) */
    float *qv, *dscores;    /* [nq, dim], [nq, depth]: the dense lists */
    int64_t *drows;         /* [nq, depth] */
    float *bscores;         /* [depth]: the BM25 list of the query at hand */
    int64_t *brows;
    qac_hit *hits;          /* [2 depth] */
    const char **names;     /* [2 depth]: qac_hits_collect's scratch */
    long long hits_max;     /* hits of one query, at most: k, or fewer when the indexes hold fewer */
    size_t hit_max;         /* bytes of one hit in the answer, at most, its text aside */
    size_t bound;           /* bytes of the answer, at most, the passages' text aside */
} search_req;

static void search_free(search_req *q) {
    qac_srv_texts_free(&q->t);
    free(q->qv);
    free(q->dscores);
    free(q->drows);
    free(q->bscores);
    free(q->brows);
    free(q->hits);
    free(q->names);
}

/* The rerank stage's fields: "rerank": true (or a "rerank_depth") has the
 * cross-encoder score the first stage's top rerank_depth (default the
 * larger of k and 100, at least k) against the query, with the passages'
 * text; the answer is its top k by the reranker's raw score. */
static int search_read_rerank(qac_server *s, json_t *o, search_req *q, qac_http_response *r) {
    long long depth = 0;
    if (!qac_srv_get_bool(o, "rerank", &q->rerank, r) || !qac_srv_get_int(o, "rerank_depth", 1, s->cfg.max_k, &depth, r))
        return 0;
    if (depth > 0 && !json_is_false(json_object_get(o, "rerank"))) q->rerank = 1;
    q->k_first = q->k;
    if (!q->rerank) return 1;
    if (!s->be.rerank_scores) {
        qac_server_error(r, 422, "validation_error", "rerank: this server has no reranker: start it with --reranker DIR");
        return 0;
    }
    if (!s->be.text || s->be.text_unavailable) {
        qac_server_error(r, 422, "validation_error", "rerank needs the passages' text: %s",
                         s->be.text ? s->be.text_unavailable : "start the server with a dense --index built from a corpus");
        return 0;
    }
    q->rerank_depth = depth > 0 ? depth : q->k > 100 ? q->k : 100 < s->cfg.max_k ? 100 : s->cfg.max_k;
    if (q->rerank_depth < q->k) q->rerank_depth = q->k;
    q->k_first = q->rerank_depth;
    return 1;
}

/* Step 1: the fields, each checked against the limits and against what
 * this server has loaded, before any work. */
static int search_read(qac_server *s, json_t *o, search_req *q, qac_http_response *r) {
    q->k = 10;
    q->mode = QAC_SEARCH_DENSE;
    if (!qac_srv_get_texts(s, o, "query", "queries", &q->t, r) || !qac_srv_get_int(o, "k", 1, s->cfg.max_k, &q->k, r) ||
        !qac_srv_get_enum(o, "mode", search_modes, &q->mode, r) || !qac_srv_get_bool(o, "return_text", &q->return_text, r) ||
        !search_read_rerank(s, o, q, r))
        return 0;
    for (int i = 0; i < q->t.n; i++) {
        size_t c = 0;
        while (c < q->t.len[i] && strchr(" \t\r\n\f\v", q->t.s[i][c])) c++;
        if (c == q->t.len[i]) {
            qac_server_error(r, 422, "validation_error", "query %d is only whitespace", i);
            return 0;
        }
    }
    if (q->return_text && s->be.text_unavailable) {
        qac_server_error(r, 422, "validation_error", "return_text: this server has no passage text (%s)",
                         s->be.search ? "the corpus was not found when it started" : "no dense index");
        return 0;
    }
    /* Refused before any work: every hit's text is read and sent. */
    if (q->return_text && (long long)q->t.n * q->k > s->cfg.max_text_hits) {
        qac_server_error(r, 413, "payload_too_large",
                         "return_text with %d queries x k %lld = %lld passages, more than the limit of %d "
                         "(max-text-hits); lower k or send fewer queries",
                         q->t.n, q->k, (long long)q->t.n * q->k, s->cfg.max_text_hits);
        return 0;
    }
    if (q->mode != QAC_SEARCH_DENSE && !s->be.bm25_search) {
        qac_server_error(r, 422, "validation_error", "mode '%s' needs a BM25 index: start the server with --bm25 DIR",
                         search_modes[q->mode]);
        return 0;
    }
    if (q->mode != QAC_SEARCH_BM25 && !s->be.search) {
        qac_server_error(r, 422, "validation_error", "mode '%s' needs a dense index, and this server has none "
                         "(encode-only): start it with --index DIR%s", search_modes[q->mode],
                         s->be.bm25_search ? ", or search with \"mode\": \"bm25\"" : "");
        return 0;
    }
    q->depth = q->mode == QAC_SEARCH_HYBRID ? qac_hybrid_depth((int)q->k_first) : (int)q->k_first;
    /* The answer's bound, before any work: {"results":[[H,...],...],"mode":M,"took_ms":T} with k hits a
     * query (or as many as the lists can hold), each {"docid":D,"score":S,"rank":R} at its longest
     * (the longest docid either index holds). */
    long long docs = (q->mode != QAC_SEARCH_BM25 ? s->be.index_count : 0) +
                     (q->mode != QAC_SEARCH_DENSE ? s->be.bm25_count : 0);
    q->hits_max = q->k < docs ? q->k : docs;
    q->hit_max = sizeof "{\"docid\":,\"score\":,\"rank\":}," - 1 + s->docid_json_max + QAC_JW_REAL_MAX +
                 qac_jw_digits(q->hits_max);
    q->bound = sizeof "{\"results\":[],\"mode\":\"hybrid\",\"took_ms\":}" - 1 + QAC_JW_REAL_MAX +
               (size_t)q->t.n * (3 + (size_t)q->hits_max * q->hit_max) +
               (q->rerank ? sizeof ",\"rerank\":{\"model\":,\"depth\":}" - 1 + QAC_JW_INT_MAX +
                                qac_jw_str_size(s->be.reranker_id, strlen(s->be.reranker_id))
                          : 0);
    return qac_srv_response_fits(s, q->bound, QAC_REPLY_HOUSE,
                                 "lower k, send fewer queries"
                                 " (or raise --max-response-bytes)", r);
}

/* Step 2: every query encoded and searched in the dense index, together
 * with other requests' queries (the batcher), into the dense lists. */
static int search_dense(qac_server *s, search_req *q, qac_http_response *r) {
    size_t nq = (size_t)q->t.n, depth = (size_t)q->depth;
    q->qv = malloc(nq * (size_t)s->be.dim * sizeof *q->qv);
    q->dscores = malloc(nq * depth * sizeof *q->dscores);
    q->drows = malloc(nq * depth * sizeof *q->drows);
    if (!q->qv || !q->dscores || !q->drows) {
        qac_srv_fail(r, QAC_REPLY_HOUSE, QAC_ERR_NOMEM, "out of memory");
        return 0;
    }
    return encode_texts(s, &q->t, or_empty(s->be.query_prompt), s->cfg.query_max_len, q->qv, NULL, q->depth,
                        q->dscores, q->drows, r);
}

/* Step 3: query i's hits (q->hits, *nh of them): its BM25 list if the mode
 * reads one, then both lists collected as `qac search` collects them; a
 * hit only BM25 found gets its dense row, for return_text. */
static int search_hits(qac_server *s, search_req *q, int i, int *nh, qac_http_response *r) {
    int nb = 0;
    if (q->mode != QAC_SEARCH_DENSE) {
        /* BM25 reads a C string; JSON strings may hold a NUL, so copy rather than cut */
        char *text = strndup(q->t.s[i], q->t.len[i]);
        qac_status st = text ? s->be.bm25_search(s->be.bm25, text, q->depth, q->bscores, q->brows, &nb)
                             : qac_set_error(QAC_ERR_NOMEM, "out of memory");
        free(text);
        if (st) {
            qac_srv_fail(r, QAC_REPLY_HOUSE, st, "bm25 search");
            return 0;
        }
    }
    size_t at = (size_t)i * (size_t)q->depth;
    qac_hit_lists lists = {.mode = (qac_search_mode)q->mode,
                           .dense_rows = q->drows ? q->drows + at : NULL,
                           .dense_scores = q->dscores ? q->dscores + at : NULL,
                           .n_dense = q->drows ? q->depth : 0,
                           .bm25_rows = q->brows,
                           .bm25_scores = q->bscores,
                           .n_bm25 = nb,
                           .dense_docid = s->be.docid,
                           .dense_index = s->be.index,
                           .bm25_docid = s->be.bm25_docid,
                           .bm25_index = s->be.bm25,
                           .names = q->names};
    *nh = qac_hits_collect(&lists, (int)q->k_first, q->hits);
    for (int h = 0; h < *nh && s->docid_rows; h++)
        if (q->hits[h].row < 0) q->hits[h].row = qac_docid_map_get(s->docid_rows, q->hits[h].docid);
    return 1;
}

/* Step 3b: query i's first hits (rerank_depth of them) scored by the
 * cross-encoder with their passages' text, ordered by its raw score (as
 * float, then docid descending, as the rest of qac), cut at k. */
static int search_rerank(qac_server *s, search_req *q, int i, int *nh, qac_http_response *r) {
    int n = *nh, ok = 0;
    char **text = calloc((size_t)n + 1, sizeof *text);
    size_t *lens = malloc(((size_t)n + 1) * sizeof *lens);
    float *raw = malloc(((size_t)n + 1) * sizeof *raw);
    if (!text || !lens || !raw) {
        qac_srv_fail(r, QAC_REPLY_HOUSE, QAC_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int h = 0; h < n; h++) {
        if (q->hits[h].row < 0) {
            qac_server_error(r, 500, "internal", "rerank: passage '%s' is not in the dense index, which holds the texts",
                             q->hits[h].docid ? q->hits[h].docid : "");
            goto done;
        }
        if (s->be.text(s->be.index, q->hits[h].row, &text[h])) {
            qac_server_error(r, 500, "internal", "passage text: %s", qac_last_error());
            goto done;
        }
        lens[h] = text[h] ? strlen(text[h]) : 0;
    }
    if (!qac_srv_rerank_scores(s, q->t.s[i], q->t.len[i], (const char *const *)text, lens, n, s->cfg.truncate,
                               QAC_TRUNC_RIGHT, raw, NULL, NULL, QAC_REPLY_HOUSE, r))
        goto done;
    for (int h = 0; h < n; h++) q->hits[h].score = raw[h];
    qac_hits_sort(q->hits, n);
    if (*nh > q->k) *nh = (int)q->k;
    ok = 1;
done:
    for (int h = 0; text && h < n; h++) free(text[h]);
    free(text), free(lens), free(raw);
    return ok;
}

/* What the answer still needs after query qi's hit hi at most, the
 * passages' text aside: return_text's texts take what it leaves. */
static size_t search_rest(const search_req *q, int qi, int hi) {
    size_t later_hits = (size_t)q->hits_max - (size_t)hi - 1, later_queries = (size_t)q->t.n - (size_t)qi - 1;
    return later_hits * q->hit_max + later_queries * (3 + (size_t)q->hits_max * q->hit_max) + 64 + QAC_JW_REAL_MAX;
}

/* Step 4: query qi's hits written into the answer; with return_text, each
 * passage's text as it is read, refused (413) once the answer could no
 * longer stay within --max-response-bytes. */
static int search_write_hits(qac_server *s, const search_req *q, int qi, int nh, qac_jw *w, qac_http_response *r) {
    qac_jw_lit(w, qi ? ",[" : "[");
    for (int i = 0; i < nh; i++) {
        const qac_hit *hit = &q->hits[i];
        const char *docid = hit->docid ? hit->docid : "";
        qac_jw_lit(w, i ? ",{\"docid\":" : "{\"docid\":");
        qac_jw_str(w, docid, strlen(docid));
        qac_jw_lit(w, ",\"score\":");
        qac_jw_real(w, (float)hit->score);
        qac_jw_lit(w, ",\"rank\":");
        qac_jw_int(w, i + 1);
        if (q->return_text && hit->row >= 0) {
            char *text = NULL;
            if (s->be.text(s->be.index, hit->row, &text)) {
                qac_server_error(r, 500, "internal", "passage text: %s", qac_last_error());
                return 0;
            }
            size_t need = sizeof ",\"text\":" - 1 + qac_jw_str_size(text ? text : "", text ? strlen(text) : 0);
            if (w->len + need + 1 + search_rest(q, qi, i) > w->cap) {
                free(text);
                qac_server_error(r, 413, "payload_too_large",
                                 "the answer with its passages' text would be larger than %lld bytes "
                                 "(max-response-bytes); lower k, send fewer queries or drop return_text",
                                 s->cfg.max_response_bytes);
                return 0;
            }
            qac_jw_lit(w, ",\"text\":");
            qac_jw_str(w, text ? text : "", text ? strlen(text) : 0);
            free(text);
        }
        qac_jw_lit(w, "}");
    }
    qac_jw_lit(w, "]");
    return 1;
}

void qac_handle_search(qac_server *s, const char *body, size_t len, qac_http_response *r) {
    double t0 = qac_now();
    json_t *o = qac_srv_parse_body(body, len, r);
    if (!o) return;
    search_req q = {0};
    qac_jw w = {0};
    if (!search_read(s, o, &q, r) || (q.mode != QAC_SEARCH_BM25 && !search_dense(s, &q, r))) goto done;
    q.bscores = malloc((size_t)q.depth * sizeof *q.bscores);
    q.brows = malloc((size_t)q.depth * sizeof *q.brows);
    q.hits = malloc((size_t)q.depth * 2 * sizeof *q.hits);
    q.names = malloc((size_t)q.depth * 2 * sizeof *q.names);
    /* the bound; with return_text, all the limit allows (the texts are counted as they are read) */
    if (!q.bscores || !q.brows || !q.hits || !q.names ||
        !qac_jw_open(&w, q.return_text ? (size_t)s->cfg.max_response_bytes : q.bound)) {
        qac_srv_fail(r, QAC_REPLY_HOUSE, QAC_ERR_NOMEM, "out of memory");
        goto done;
    }
    qac_jw_lit(&w, "{\"results\":[");
    for (int i = 0; i < q.t.n; i++) {
        int nh = 0;
        if (qac_srv_gone()) {
            qac_server_error(r, 499, "client_closed", "the client went away");
            goto done;
        }
        if (!search_hits(s, &q, i, &nh, r) || (q.rerank && !search_rerank(s, &q, i, &nh, r)) ||
            !search_write_hits(s, &q, i, nh, &w, r))
            goto done;
    }
    qac_jw_lit(&w, "],\"mode\":");
    qac_jw_str(&w, search_modes[q.mode], strlen(search_modes[q.mode]));
    if (q.rerank) {
        qac_jw_lit(&w, ",\"rerank\":{\"model\":");
        qac_jw_str(&w, s->be.reranker_id, strlen(s->be.reranker_id));
        qac_jw_lit(&w, ",\"depth\":");
        qac_jw_int(&w, q.rerank_depth);
        qac_jw_lit(&w, "}");
    }
    qac_jw_lit(&w, ",\"took_ms\":");
    qac_jw_real(&w, (qac_now() - t0) * 1000.0);
    qac_jw_lit(&w, "}");
    qac_jw_reply(&w, r, QAC_REPLY_HOUSE);
done:
    qac_jw_free(&w);
    search_free(&q);
    json_decref(o);
}

/* ---------------- /v1/models (OpenAI) ---------------- */

static json_t *model_json(const qac_server *s) {
    return json_pack("{s:s,s:s,s:I,s:s}", "id", s->be.model_id, "object", "model", "created",
                     (json_int_t)s->started_unix, "owned_by", "qac");
}

void qac_handle_models(qac_server *s, const char *id, size_t id_len, qac_http_response *r) {
    if (!id) {
        qac_srv_json(r, QAC_REPLY_HOUSE, json_pack("{s:s,s:[o]}", "object", "list", "data", model_json(s)));
        return;
    }
    if (id_len != strlen(s->be.model_id) || memcmp(id, s->be.model_id, id_len) != 0) {
        qac_server_error(r, 404, "not_found", "the model '%.*s' does not exist: this server serves '%s'",
                         (int)(id_len > 200 ? 200 : id_len), id, s->be.model_id);
        return;
    }
    qac_srv_json(r, QAC_REPLY_HOUSE, model_json(s));
}

/* ---------------- /info, /health ---------------- */

void qac_handle_info(qac_server *s, qac_http_response *r) {
    const qac_server_config *c = &s->cfg;
    json_t *modes = json_array();
    if (s->be.search) json_array_append_new(modes, json_string("dense"));
    if (s->be.bm25_search) json_array_append_new(modes, json_string("bm25"));
    if (s->be.search && s->be.bm25_search) json_array_append_new(modes, json_string("hybrid"));
    json_t *o = json_pack("{s:s,s:{s:s,s:s,s:i,s:s,s:b,s:i},s:o,s:{s:i,s:i,s:I,s:i,s:i,s:b,s:i,s:i,s:i,s:i,s:i},"
                          "s:b,s:f}",
                          "version", QAC_VERSION_STRING, "model", "id", s->be.model_id, "fingerprint",
                          s->be.fingerprint ? s->be.fingerprint : "", "dim", s->be.dim, "pooling",
                          s->be.pooling ? s->be.pooling : "", "normalize", s->be.normalize, "max_seq_len",
                          s->be.model_max_len, "modes", modes, "limits", "max_batch_tokens", c->max_batch_tokens,
                          "max_wait_ms", c->max_wait_ms, "max_body_bytes", (json_int_t)c->max_body_bytes,
                          "max_texts", c->max_texts, "max_k", c->max_k, "truncate", c->truncate, "max_concurrent",
                          c->max_concurrent, "timeout_ms", c->timeout_ms, "queue_size", c->queue_size,
                          "query_max_len", c->query_max_len, "passage_max_len", c->passage_max_len, "auth",
                          c->api_key != NULL, "uptime_s", qac_now() - s->started);
    /* the prompts each endpoint applies, and every named one /embed knows */
    json_t *named = json_object();
    for (int i = 0; named && i < s->be.n_prompts; i++)
        json_object_set_new(named, s->be.prompt_names[i], json_string(s->be.prompt_texts[i]));
    if (o && named)
        json_object_set_new(o, "prompts",
                            json_pack("{s:s,s:s,s:s,s:o,s:b}", "query", or_empty(s->be.query_prompt), "passage",
                                      or_empty(s->be.passage_prompt), "default_prompt_name",
                                      or_empty(s->be.default_prompt_name), "named", json_incref(named),
                                      "include_prompt", s->be.include_prompt));
    json_decref(named);
    if (o && s->be.search) {
        json_t *ix = json_pack("{s:s,s:I,s:i}", "type", s->be.index_type ? s->be.index_type : "", "size",
                               (json_int_t)s->be.index_count, "dim", s->be.dim);
        if (ix && s->be.index_query_prompt)
            json_object_set_new(ix, "prompts", json_pack("{s:s,s:s}", "query", s->be.index_query_prompt, "passage",
                                                         or_empty(s->be.index_passage_prompt)));
        json_object_set_new(o, "index", ix);
    }
    if (o && s->be.bm25_search) json_object_set_new(o, "bm25", json_pack("{s:I}", "size", (json_int_t)s->be.bm25_count));
    if (o && s->be.rerank_scores)
        json_object_set_new(o, "reranker", json_pack("{s:s,s:s,s:i}", "id", s->be.reranker_id, "fingerprint",
                                                     or_empty(s->be.reranker_fingerprint), "max_seq_len",
                                                     s->be.reranker_max_len));
    qac_srv_json(r, QAC_REPLY_HOUSE, o);
}

void qac_handle_health(qac_server *s, qac_http_response *r) {
    int draining = atomic_load(&s->draining);
    qac_srv_json(r, QAC_REPLY_HOUSE, json_pack("{s:s}", "status", draining ? "draining" : "ok"));
    if (draining) r->status = 503;
}
