/* The cross-encoder's routes (`qac serve --reranker DIR`): the pairs of a
 * request assembled, scored through the reranker's own batcher (the same
 * queue, token budget, slices, waiting and timeouts as the encoder's), and
 * answered in two shapes. TEI's POST /rerank is srv_tei.c's; this file has
 * the scoring both share with /search's rerank stage (srv_handlers.c) and
 * the Cohere / Jina route:
 *
 * POST /v1/rerank {"query": string, "documents": [string | {"text":
 * string}], "top_n"?: integer >= 1, "return_documents"?: bool (false),
 * "model"?: string} answers {"id", "model", "results": [{"index",
 * "relevance_score", "document"?: {"text"}}], "usage": {"total_tokens"},
 * "meta": {"api_version": {"version": "1"}, "billed_units":
 * {"search_units": 1}}}: the documents by relevance_score (the pair's
 * probability: sigmoid of the logit, or softmax(l)[1]) highest first, ties
 * by index descending (as TEI orders them), cut at top_n. Cohere's and
 * Jina's clients read it. Errors are the house's: 422 for a bad field or
 * a server without a reranker, 413 past --max-texts or when the answer
 * could pass --max-response-bytes (decided before scoring), a pair past
 * the length with --no-truncate 422. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "qac_util.h"
#include "srv_internal.h"

int qac_srv_rerank_scores(qac_server *s, const char *query, size_t qlen, const char *const *texts, const size_t *lens,
                          int n, int truncate, qac_trunc_side side, float *raw, float *probs, long long *tokens,
                          qac_reply_shape shape, qac_http_response *r) {
    const qac_server_backend *be = &s->be;
    int L = be->reranker_max_len, ok = 0;
    qac_pair_opts po = {L, truncate ? QAC_TRUNC_LONGEST_FIRST : QAC_TRUNC_NONE, side};
    int32_t *ids = malloc((size_t)n * L * sizeof *ids), *types = malloc((size_t)n * L * sizeof *types);
    const int32_t **pid = calloc((size_t)n + 1, sizeof *pid), **pty = calloc((size_t)n + 1, sizeof *pty);
    int *plen = calloc((size_t)n + 1, sizeof *plen);
    float *scores = malloc((size_t)n * 2 * sizeof *scores); /* [raw, probability] a pair */
    if (!ids || !types || !pid || !pty || !plen || !scores) {
        qac_srv_fail(r, shape, QAC_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        pid[i] = ids + (size_t)i * L, pty[i] = types + (size_t)i * L;
        qac_status st = be->rerank_pair(be->reranker, query, qlen, texts[i], lens[i], &po, ids + (size_t)i * L,
                                        types + (size_t)i * L, &plen[i], NULL);
        if (st == QAC_ERR_INVALID) { /* over the length with truncation off */
            if (shape == QAC_REPLY_TEI)
                qac_srv_error(r, shape, 422, "Validation", "Input validation error: text %d: %s", i, qac_last_error());
            else
                qac_server_error(r, 422, "validation_error", "document %d with the query is longer than %d tokens "
                                 "(truncation is off): %s", i, L, qac_last_error());
            goto done;
        }
        if (st) {
            qac_srv_fail(r, shape, st, "tokenizer");
            goto done;
        }
    }
    qac_status st = qac_batcher_run_pairs(s->rerank_batcher, pid, pty, plen, n, scores, s->cfg.timeout_ms, qac_srv_cancel);
    if (st) {
        qac_srv_fail(r, shape, st, "reranker");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        raw[i] = scores[2 * (size_t)i];
        if (probs) probs[i] = scores[2 * (size_t)i + 1];
    }
    for (int i = 0; i < n; i++)
        if (!isfinite(raw[i])) {
            qac_srv_error(r, shape, shape == QAC_REPLY_TEI ? 424 : 500, shape == QAC_REPLY_TEI ? "Backend" : "internal",
                          "score is NaN");
            goto done;
        }
    if (tokens)
        for (int i = 0; i < n; i++) *tokens += plen[i];
    ok = 1;
done:
    free(ids), free(types), free(pid), free(pty), free(plen), free(scores);
    return ok;
}

/* ---------------- /v1/rerank (Cohere, Jina) ---------------- */

typedef struct ranked {
    int index;
    float score;
} ranked;

/* score descending, then index descending (TEI's order) */
static int by_score(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return (x->index < y->index) - (x->index > y->index);
}

/* documents: strings or {"text": string} */
static int get_documents(qac_server *s, json_t *o, const char ***texts, size_t **lens, int *n, qac_http_response *r) {
    json_t *d = json_object_get(o, "documents");
    if (!json_is_array(d) || json_array_size(d) == 0) {
        qac_server_error(r, 422, "validation_error", "'documents' must be a non-empty array of strings (or of "
                                                     "objects with a \"text\" string)");
        return 0;
    }
    size_t m = json_array_size(d);
    if (m > (size_t)s->cfg.max_texts) {
        qac_server_error(r, 413, "payload_too_large", "'documents' has %zu entries, more than the limit of %d", m,
                         s->cfg.max_texts);
        return 0;
    }
    *texts = malloc(m * sizeof **texts);
    *lens = malloc(m * sizeof **lens);
    if (!*texts || !*lens) {
        qac_srv_fail(r, QAC_REPLY_HOUSE, QAC_ERR_NOMEM, "out of memory");
        return 0;
    }
    for (size_t i = 0; i < m; i++) {
        json_t *e = json_array_get(d, i), *t = json_is_object(e) ? json_object_get(e, "text") : e;
        if (!json_is_string(t)) {
            qac_server_error(r, 422, "validation_error", "document %zu must be a string or {\"text\": string}", i);
            return 0;
        }
        (*texts)[i] = json_string_value(t), (*lens)[i] = json_string_length(t);
    }
    *n = (int)m;
    return 1;
}

static int by_size_desc(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x < y) - (x > y);
}

/* The most bytes the answer can take, before any scoring: the envelope,
 * keep results of the longest index and score, and with return_documents
 * the keep longest documents as written (which ones are kept is known only
 * after scoring). 0 when out of memory. */
static size_t v1_bound(const char *rid, const char *model, const char *const *texts, const size_t *lens, int n,
                       int keep, int ret_docs) {
    static const char envelope[] = "{\"id\":,\"model\":,\"results\":[],\"usage\":{\"total_tokens\":},"
                                   "\"meta\":{\"api_version\":{\"version\":\"1\"},\"billed_units\":"
                                   "{\"search_units\":1}}}";
    static const char result[] = "{\"index\":,\"relevance_score\":},", document[] = ",\"document\":{\"text\":}";
    size_t bound = sizeof envelope - 1 + qac_jw_str_size(rid, strlen(rid)) +
                   (model ? qac_jw_str_size(model, strlen(model)) : 4 /* null */) +
                   QAC_JW_INT_MAX + (size_t)keep * (sizeof result - 1 + QAC_JW_INT_MAX + QAC_JW_REAL_MAX);
    if (!ret_docs) return bound;
    size_t *size = malloc((size_t)n * sizeof *size);
    if (!size) return 0;
    for (int i = 0; i < n; i++) size[i] = sizeof document - 1 + qac_jw_str_size(texts[i], lens[i]);
    if (keep < n) qsort(size, (size_t)n, sizeof *size, by_size_desc);
    for (int i = 0; i < keep; i++) bound += size[i];
    free(size);
    return bound;
}

void qac_handle_rerank_v1(qac_server *s, const char *body, size_t len, qac_http_response *r) {
    json_t *o = qac_srv_parse_body(body, len, r);
    if (!o) return;
    const char **texts = NULL;
    size_t *lens = NULL;
    float *raw = NULL, *prob = NULL;
    ranked *rk = NULL;
    int n = 0, ret_docs = 0;
    long long top_n = 0;
    json_t *q = json_object_get(o, "query"), *model = json_object_get(o, "model");
    if (!s->be.rerank_scores) {
        qac_server_error(r, 422, "validation_error", "this server has no reranker: start it with --reranker DIR");
        goto done;
    }
    if (!json_is_string(q) || json_string_length(q) == 0) {
        qac_server_error(r, 422, "validation_error", "'query' must be a non-empty string");
        goto done;
    }
    if (model && !json_is_string(model)) {
        qac_server_error(r, 422, "validation_error", "'model' must be a string");
        goto done;
    }
    if (!get_documents(s, o, &texts, &lens, &n, r) || !qac_srv_get_int(o, "top_n", 1, 1LL << 30, &top_n, r) ||
        !qac_srv_get_bool(o, "return_documents", &ret_docs, r))
        goto done;
    int keep = top_n > 0 && top_n < n ? (int)top_n : n;
    char rid[QAC_REQUEST_ID_CAP];
    qac_request_id(s, NULL, rid, sizeof rid);
    size_t bound = v1_bound(rid, s->be.reranker_id, texts, lens, n, keep, ret_docs);
    if (!bound) {
        qac_srv_fail(r, QAC_REPLY_HOUSE, QAC_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (!qac_srv_response_fits(s, bound, QAC_REPLY_HOUSE, "send fewer documents, set top_n or drop return_documents",
                               r))
        goto done;
    raw = malloc((size_t)n * sizeof *raw), prob = malloc((size_t)n * sizeof *prob), rk = malloc((size_t)n * sizeof *rk);
    if (!raw || !prob || !rk) {
        qac_srv_fail(r, QAC_REPLY_HOUSE, QAC_ERR_NOMEM, "out of memory");
        goto done;
    }
    long long tokens = 0;
    if (!qac_srv_rerank_scores(s, json_string_value(q), json_string_length(q), texts, lens, n, s->cfg.truncate,
                               QAC_TRUNC_RIGHT, raw, prob, &tokens, QAC_REPLY_HOUSE, r))
        goto done;
    for (int i = 0; i < n; i++) rk[i] = (ranked){i, prob[i]};
    qsort(rk, (size_t)n, sizeof *rk, by_score);
    json_t *results = json_array();
    for (int i = 0; i < keep && results; i++) {
        json_t *e = json_pack("{s:i,s:f}", "index", rk[i].index, "relevance_score", (double)rk[i].score);
        if (e && ret_docs)
            json_object_set_new(e, "document", json_pack("{s:s%}", "text", texts[rk[i].index], lens[rk[i].index]));
        json_array_append_new(results, e);
    }
    qac_srv_json(r, QAC_REPLY_HOUSE,
                 json_pack("{s:s,s:s,s:o,s:{s:I},s:{s:{s:s},s:{s:i}}}", "id", rid, "model", s->be.reranker_id,
                           "results", results, "usage", "total_tokens", (json_int_t)tokens, "meta", "api_version",
                           "version", "1", "billed_units", "search_units", 1));
done:
    free(texts), free(lens), free(raw), free(prob), free(rk);
    json_decref(o);
}
