/* The HTTP search service (`qac serve`).
 *
 * Layers, each in its own file:
 *   srv_config.c   the one qac_opt table for every server setting
 *   srv_backend.c  the real pieces (model, encoder, index, BM25) behind
 *                  qac_server_backend, a table of functions that tests and
 *                  the fuzzer replace with fakes
 *   srv_batcher.c  dynamic batching: the only thread that calls encode()
 *   srv_router.c   routing and auth: request in, response out, no
 *                  sockets (the fuzz entry point)
 *   srv_handlers.c the house's JSON endpoints
 *   srv_tei.c      text-embeddings-inference's endpoints
 *   srv_fields.c   the house endpoints' request fields
 *   srv_reply.c    answers: both error shapes, JSON bodies, the table of
 *                  failed statuses as HTTP codes
 *   srv_jsonw.c    the JSON writer of answers that grow with their input,
 *                  each bounded before the work (--max-response-bytes)
 *   srv_vectors.c  L2 normalisation (a zero vector stays zero)
 *   srv_prompts.c  the backend's prompts by name
 *   srv_docids.c   docid -> dense row (BM25 hits' passage text)
 *   srv_metrics.c  Prometheus counters and histograms
 *   srv_page.c     the embedded search page
 *   srv_head.c     a strict RFC 9112 check of request heads and chunked
 *                  bodies, without sockets
 *   srv_gate.c     the listening socket: each connection's first head is
 *                  checked (peeked, unread) before libmicrohttpd gets it
 *   srv_relay.c    connections that carry chunked bodies: every byte
 *                  checked before libmicrohttpd reads it
 *   srv_http.c     libmicrohttpd: per-request state machine, limits, drain
 *
 * Ownership: qac_server_create copies the config strings and borrows the
 * backend, which must outlive the server. The server never prints: it
 * reports through the log callback. */
#ifndef QAC_SERVER_H
#define QAC_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "qac_common.h"
#include "qac_config.h"
#include "qac_pair.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- configuration: one table drives flags, env, config file ---- */

/* The rows of `qac serve`'s options (flags, QAC_* env vars, defaults, bounds). */
const qac_opt *qac_server_opt_table(int *n);

typedef struct qac_server_config {
    char *host;
    int port;                 /* 0 = pick a free port (see qac_server_port) */
    char *api_key;            /* NULL = no auth */
    int max_batch_tokens;     /* token budget of one encoder call */
    int max_wait_ms;          /* how long the batcher waits to fill a batch */
    long long max_body_bytes;
    int max_texts;            /* texts (or queries) per request */
    int max_k;
    int truncate;             /* 1: cut long texts; 0: reject them with 413 */
    int max_concurrent;       /* requests in flight before 429 */
    int timeout_ms;           /* longest wait in the encode queue before 503 */
    int queue_size;           /* requests waiting for the encoder before 503 */
    int query_max_len;        /* tokens, specials included */
    int passage_max_len;
    int idle_timeout_s;       /* idle keep-alive connections are closed after this */
    int drain_timeout_ms;     /* SIGTERM: longest wait for in-flight requests, then exit */
    int slice_tokens;         /* large jobs are encoded this many tokens at a time */
    int max_text_hits;        /* queries x k with return_text (413 past it, before any work) */
    long long max_response_bytes; /* 413 when a response would be larger */
    int max_connections;
    int max_head_bytes;       /* request line + headers (414 / 431 past it) */
    int header_timeout_ms;    /* whole request head, from accept */
    int body_timeout_ms;      /* whole body, from the end of the head */
    int min_body_rate;        /* bytes/s a body must average after its first second */
} qac_server_config;

/* Defaults of the table, without parsing anything. */
qac_server_config qac_server_default_config(void);
/* Fill cfg from parsed options (strings are copied; free with
 * qac_server_config_clear). */
qac_status qac_server_config_from_opts(qac_server_config *cfg, const qac_opts *o);
void qac_server_config_clear(qac_server_config *cfg);

/* ---- what the server composes ---- */

typedef struct qac_server_backend {
    /* Encoder side (required). tokenize / encode_text / id_to_token are
     * thread-safe; encode is called from the batcher thread only. */
    void *enc;
    const char *model_id;
    const char *fingerprint;
    const char *pooling;      /* "cls" | "mean" */
    int dim;
    int normalize;            /* the model L2-normalises its output */
    int model_max_len;
    int max_position;         /* the position table's size: the longest --*-max-len honoured (0: model_max_len) */
    /* [CLS] text [SEP], cut to max_len; *n is the sequence length. */
    qac_status (*encode_text)(void *enc, const char *text, size_t len, int max_len, int32_t *ids, int *n);
    /* Token ids without specials; writes at most cap, *n is the full count. */
    qac_status (*tokenize)(void *enc, const char *text, size_t len, int32_t *ids, int cap, int *n);
    const char *(*id_to_token)(void *enc, int32_t id);
    /* pool_from: [n] tokens the pooling skips at each start, or NULL. */
    qac_status (*encode)(void *enc, const int32_t *const *ids, const int *lens, const int *pool_from, int n,
                         float *out);
    /* Optional: encode's pooled vectors without the model's L2
     * normalisation (NULL: encode gives them already). Batcher thread only. */
    qac_status (*encode_raw)(void *enc, const int32_t *const *ids, const int *lens, const int *pool_from, int n,
                             float *out);
    /* Optional: ids -> text as Hugging Face's tokenizers decode them; an id
     * outside the vocabulary is skipped. *text is malloc'd. */
    qac_status (*decode)(void *enc, const int32_t *ids, int n, int skip_special, char **text);
    /* Optional: token ids without specials and each token's byte range in
     * text ([start, stop) pairs in offs, 2 per token); as tokenize. */
    qac_status (*tokenize_offsets)(void *enc, const char *text, size_t len, int32_t *ids, int32_t *offs, int cap,
                                   int *n);
    int cuda_gpu;             /* CUDA is compiled in and a usable GPU was found (qac_cuda_available) */
    int vocab_size;           /* token ids are 0 .. vocab_size - 1 */
    int32_t cls_id, sep_id;   /* what encode_text puts around a text; -1: none */
    int32_t special_ids[8];   /* every special token's id ([CLS] [SEP] [PAD] [UNK] [MASK]), -1: unused */
    /* Prompts (qac_model.h "Prompts"), all optional ("", 0, NULL: none):
     * /search puts query_prompt before every query, /encode the query or
     * the passage prompt by its "kind", /embed the prompt its prompt_name
     * names in prompt_names (else the default one), /v1/embeddings the one
     * its input_type asks for (else the default one). */
    const char *query_prompt, *passage_prompt;
    const char *default_prompt_name;     /* NULL: none */
    int n_prompts;
    const char *const *prompt_names, *const *prompt_texts;
    int include_prompt;                  /* 0: the pooling skips prompt tokens */
    const char *index_query_prompt, *index_passage_prompt; /* the index's (NULL: unknown or no index) */
    const char *prompt_warning;          /* a prompt mismatch served anyway, or NULL */
    const char *encoder_note;            /* why the encoder runs in another precision than asked, or NULL */
    /* [CLS] prompt+text [SEP] cut to max_len (prompt NULL or "": encode_text);
     * *pool_from: tokens the pooling skips. Thread-safe. Required when any
     * prompt is set. */
    qac_status (*encode_prompted)(void *enc, const char *prompt, const char *text, size_t len, int max_len,
                                  int32_t *ids, int *n, int *pool_from);

    /* Dense index (optional: search == NULL means none loaded). */
    void *index;
    int64_t index_count;
    const char *index_type;
    qac_status (*search)(void *index, const float *q, int nq, int k, float *scores, int64_t *rows);
    const char *(*docid)(void *index, int64_t row);
    qac_status (*text)(void *index, int64_t row, char **text); /* malloc'd */
    const char *text_unavailable; /* why text() cannot work (no corpus), or NULL */

    /* BM25 (optional: bm25_search == NULL means none loaded). */
    void *bm25;
    int64_t bm25_count;
    qac_status (*bm25_search)(void *bm25, const char *query, int k, float *scores, int64_t *rows, int *n);
    const char *(*bm25_docid)(void *bm25, int64_t row);

    /* A cross-encoder (optional: rerank_scores == NULL means none loaded;
     * TEI's /rerank then answers 424, /v1/rerank and /search's rerank 422). */
    void *reranker;
    const char *reranker_id;          /* its short name */
    const char *reranker_fingerprint;
    int reranker_max_len;             /* pair length, specials included */
    /* [CLS] a [SEP] b [SEP] with token types, cut by po (api/qac_pair.h);
     * ids and types hold po->max_len. Thread-safe. */
    qac_status (*rerank_pair)(void *rr, const char *a, size_t alen, const char *b, size_t blen,
                              const qac_pair_opts *po, int32_t *ids, int32_t *types, int *n, int *cut);
    /* n assembled pairs into out [n, 2]: each pair's raw score (the logit,
     * or l1 - l0) and its probability (sigmoid, or softmax(l)[1]): api/qac_xenc.h.
     * Called from the reranker's batcher thread only. */
    qac_status (*rerank_scores)(void *rr, const int32_t *const *ids, const int32_t *const *types, const int *lens,
                                int n, float *out);
} qac_server_backend;

/* The real backend: loads the model (and index / BM25 when the directory is
 * not NULL) and checks that they fit together. device: "auto"|"cpu"|"cuda";
 * dtype: "fp32"|"bf16" (the CPU encoder's precision, NULL: fp32); verify: "full"|"size"|"none" (how index.faiss and the corpus are checked, see qac_index_verify).
 * allow_model_mismatch: serve an index whose recorded model fingerprint
 * differs from the model's (or is "none": built from vectors).
 * query_prompt / passage_prompt (NULL: the model's) replace the model's
 * prompts; a query prompt other than the one the index was built for is
 * refused unless allow_prompt_mismatch (then be->prompt_warning says so). */
typedef struct qac_server_real qac_server_real;
qac_status qac_server_real_open(qac_server_real **out, qac_server_backend *be, const char *model_dir,
                                const char *index_dir, const char *bm25_dir, const char *device,
                                const char *dtype, int threads, const char *verify, int allow_model_mismatch,
                                const char *query_prompt, const char *passage_prompt, int allow_prompt_mismatch);
/* Adds a cross-encoder to a real backend (`qac serve --reranker DIR`): its
 * own encoder on the same device, dtype and threads. */
qac_status qac_server_real_add_reranker(qac_server_real *r, qac_server_backend *be, const char *dir,
                                        const char *device, const char *dtype, int threads);
void qac_server_real_free(qac_server_real *r);

/* ---- the server ---- */

typedef enum qac_log_level { QAC_LOG_DEBUG = 0, QAC_LOG_INFO, QAC_LOG_WARN, QAC_LOG_ERROR } qac_log_level;
typedef void (*qac_server_log_fn)(void *user, qac_log_level level, const char *msg);

typedef struct qac_server qac_server;

/* One answered request, for the access log. Strings are borrowed for the
 * call; path has no query string; "-" where the request head could not be
 * read. status 499: the client went away before the answer. */
typedef struct qac_access_entry {
    const char *method, *path, *request_id, *client;
    int status;
    unsigned long long bytes; /* response body */
    double seconds;           /* from the request head to the answer */
} qac_access_entry;
typedef void (*qac_server_access_fn)(void *user, const qac_access_entry *e);

qac_status qac_server_create(qac_server **out, const qac_server_config *cfg, const qac_server_backend *be,
                             qac_server_log_fn log, void *log_user);
/* Called once per answered request, from the serving threads (it must be
 * thread-safe). Set before qac_server_listen. */
void qac_server_set_access_log(qac_server *s, qac_server_access_fn fn, void *user);
/* Bind and start serving (libmicrohttpd threads); returns at once. */
qac_status qac_server_listen(qac_server *s);
/* The bound port (useful with port 0). */
int qac_server_port(const qac_server *s);
/* Stop accepting, let in-flight requests finish (up to drain_timeout_ms),
 * then close everything. Returns QAC_ERR_BUSY if the drain timed out. */
qac_status qac_server_shutdown(qac_server *s);
void qac_server_free(qac_server *s);

/* ---- one request, without sockets (the HTTP layer and the fuzzer) ---- */

typedef struct qac_http_request {
    const char *method;
    const char *path;          /* may carry "?query", which is ignored */
    const char *authorization; /* header value or NULL */
    const char *body;
    size_t body_len;
    /* Optional: returns 1 once the client has gone, so work stops early. */
    int (*gone)(void *ctx);
    void *gone_ctx;
} qac_http_request;

typedef struct qac_http_response {
    int status;
    char *body;                /* malloc'd */
    size_t body_len;
    const char *content_type;  /* static string */
    char allow[32];            /* Allow header for 405, "" otherwise */
    int retry_after;           /* seconds, 0 = no header */
    int www_authenticate;      /* add WWW-Authenticate: Bearer */
} qac_http_response;

void qac_server_handle(qac_server *s, const qac_http_request *req, qac_http_response *resp);
/* An error response in the house shape {"error":{"code","type","message"}}. */
void qac_server_error(qac_http_response *resp, int status, const char *type, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
void qac_http_response_clear(qac_http_response *resp);

#ifdef __cplusplus
}
#endif
#endif
