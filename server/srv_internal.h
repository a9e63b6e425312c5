/* Internal to server/: the batcher, metrics and the server struct. */
#ifndef QAC_SRV_INTERNAL_H
#define QAC_SRV_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "qac_server.h"

struct sockaddr;

/* ---- dynamic batcher ----
 * Request threads submit tokenized texts; one worker thread gathers what is
 * queued (up to max_batch_tokens; it waits, at most max_wait_ms, only for
 * requests announced as arriving), makes ONE encode call for the batch, then ONE
 * search call for all the batch's queries that want hits, and hands each
 * job its rows. The encoder and the index therefore only ever see one
 * caller, and a scan of the index serves a whole batch. */
/* pool_from: [n] tokens the pooling skips at each sequence's start (a
 * prompt's, qac_model.h "Prompts"), or NULL for none. */
typedef qac_status (*qac_encode_fn)(void *user, const int32_t *const *ids, const int *lens, const int *pool_from,
                                    int n, float *out);
/* Top-k for nq vectors [nq, dim] into [nq, k], best first; the order must
 * be total (ties broken by docid), so that a shallower k is a prefix. */
typedef qac_status (*qac_search_fn)(void *user, const float *q, int nq, int k, float *scores, int64_t *rows);
/* A pair batcher's call: n pairs (ids and token types of lens[i] tokens)
 * into out [n, dim] (a cross-encoder's logits). */
typedef qac_status (*qac_pair_fn)(void *user, const int32_t *const *ids, const int32_t *const *types, const int *lens,
                                  int n, float *out);

typedef struct qac_metrics qac_metrics;
typedef struct qac_batcher qac_batcher;

typedef struct qac_batcher_opts {
    int dim;
    int max_batch_tokens;
    int max_wait_ms;
    int queue_size;   /* jobs waiting (not yet taken) before QAC_ERR_BUSY */
    int slice_tokens; /* a job with more tokens is encoded this many at a time,
                         interleaved with smaller jobs (0: max_batch_tokens) */
} qac_batcher_opts;

/* Asks whether the request's client has gone (1), so its work can stop. */
typedef struct qac_cancel {
    int (*gone)(void *ctx);
    void *ctx;
} qac_cancel;

/* search may be NULL: an encode-only batcher. */
qac_status qac_batcher_create(qac_batcher **out, qac_encode_fn fn, void *user, qac_search_fn search,
                              void *search_user, const qac_batcher_opts *o, qac_metrics *metrics);
/* Encode n sequences into out [n, dim]. Blocks until done. QAC_ERR_BUSY when
 * the queue is full, QAC_ERR_CANCELLED when the job waited in the queue for
 * longer than timeout_ms (0 = forever) or the batcher is stopping. The
 * buffers are borrowed until the call returns. */
qac_status qac_batcher_encode(qac_batcher *b, const int32_t *const *ids, const int *lens, int n, float *out,
                              int timeout_ms);
/* Encode, then search k deep: scores and rows [n, k]. k <= 0 is encode. */
qac_status qac_batcher_search(qac_batcher *b, const int32_t *const *ids, const int *lens, int n, float *out, int k,
                              float *scores, int64_t *rows, int timeout_ms);
/* Same, with pool_from (NULL or [n], see qac_encode_fn), and gives up
 * (QAC_ERR_CANCELLED) soon after cancel->gone says so: queued texts are
 * dropped, a slice already running finishes first. raw (k must be 0): the
 * vectors come from the raw encoder (see qac_batcher_set_raw), in calls of
 * their own. */
qac_status qac_batcher_run(qac_batcher *b, const int32_t *const *ids, const int *lens, const int *pool_from, int n,
                           float *out, int k, float *scores, int64_t *rows, int timeout_ms, const qac_cancel *cancel,
                           int raw);
/* A batcher of pairs (a cross-encoder's): the same queue, budget, slices,
 * waiting and cancelling, one fn call a batch; no search, no raw jobs. */
qac_status qac_batcher_create_pairs(qac_batcher **out, qac_pair_fn fn, void *user, const qac_batcher_opts *o,
                                    qac_metrics *metrics);
/* n pairs into out [n, dim], as qac_batcher_run (a pair batcher only). */
qac_status qac_batcher_run_pairs(qac_batcher *b, const int32_t *const *ids, const int32_t *const *types,
                                 const int *lens, int n, float *out, int timeout_ms, const qac_cancel *cancel);
/* The encoder of raw jobs (NULL: the main one). Set before any job. */
void qac_batcher_set_raw(qac_batcher *b, qac_encode_fn raw_fn);
int qac_batcher_queue_depth(qac_batcher *b);
/* A request that will (probably) submit work from this thread has arrived:
 * a free worker waits for it (at most max_wait_ms) rather than start a
 * batch without it. Its next qac_batcher_run uses the announcement up;
 * qac_batcher_expect_done withdraws one still unused (call it when the
 * request is done either way). b may be NULL. */
void qac_batcher_expect(qac_batcher *b);
void qac_batcher_expect_done(qac_batcher *b);
/* Announced requests not yet queued (tests). */
int qac_batcher_arriving(qac_batcher *b);
/* Finishes queued jobs, then stops the worker. */
void qac_batcher_free(qac_batcher *b);

/* ---- metrics ---- */
typedef enum qac_route {
    QAC_ROUTE_PAGE = 0, QAC_ROUTE_SEARCH, QAC_ROUTE_ENCODE, QAC_ROUTE_EMBEDDINGS, QAC_ROUTE_TOKENIZE,
    QAC_ROUTE_HEALTH, QAC_ROUTE_INFO, QAC_ROUTE_METRICS, QAC_ROUTE_EMBED, QAC_ROUTE_EMBED_ALL, QAC_ROUTE_DECODE,
    QAC_ROUTE_MODELS, QAC_ROUTE_RERANK, QAC_ROUTE_RERANK_V1, QAC_ROUTE_OTHER, QAC_ROUTE_COUNT
} qac_route;

const char *qac_route_path(qac_route r);
qac_status qac_metrics_create(qac_metrics **out);
void qac_metrics_free(qac_metrics *m);
/* qac_cuda_gpu_available: a usable GPU was found (the backend says). */
void qac_metrics_gpu(qac_metrics *m, int available);
void qac_metrics_request(qac_metrics *m, qac_route r, int status, double seconds);
void qac_metrics_batch(qac_metrics *m, int texts, int tokens, double seconds);
void qac_metrics_search_batch(qac_metrics *m, int queries, double seconds);
void qac_metrics_queue_depth(qac_metrics *m, int depth);
void qac_metrics_inflight(qac_metrics *m, int inflight);
/* Prometheus text exposition format 0.0.4; malloc'd. */
char *qac_metrics_render(qac_metrics *m);

/* ---- request heads (srv_head.c) and the gate in front of the HTTP library (srv_gate.c) ---- */
#define QAC_HEAD_MAX_FIELDS 100            /* header lines in one head (431 past it) */
#define QAC_HEAD_MAX_LENGTH (1ULL << 62)   /* Content-Length past this: 413 at once */

typedef enum qac_head_result { QAC_HEAD_INCOMPLETE = 0, QAC_HEAD_OK, QAC_HEAD_ERROR } qac_head_result;

typedef struct qac_head_verdict {
    int status;          /* QAC_HEAD_ERROR: 400, 413, 414, 431, 501 or 505 */
    const char *type;    /* the error family's type */
    const char *message; /* static */
    size_t head_len;     /* QAC_HEAD_OK: bytes of the head, its last CRLF included */
    size_t target_off, target_len; /* QAC_HEAD_OK: the request target, in the bytes checked */
    int chunked;         /* QAC_HEAD_OK: a chunked body follows */
    unsigned long long content_length; /* QAC_HEAD_OK, not chunked: the body's bytes */
} qac_head_verdict;

/* What the framing rules read from a head; the values point into it. */
typedef struct qac_head_fields {
    int minor_11;        /* HTTP/1.1 (or 1.x above it), not 1.0 */
    int n_host, n_cl, n_te;
    const char *cl, *te; /* the last value seen, without OWS */
    size_t cl_len, te_len;
} qac_head_fields;

/* Checks the bytes of a request head received so far (buf need not end
 * with it): OK once a whole valid head is in, INCOMPLETE while it may
 * still become one, ERROR with the answer otherwise. A head not complete
 * within max_head bytes is 414 (request line) or 431. */
qac_head_result qac_head_check(const char *buf, size_t len, size_t max_head, int max_fields, qac_head_verdict *v);
/* Host, Content-Length and Transfer-Encoding rules alone (RFC 9112 3.2, 6). */
qac_head_result qac_head_framing(const qac_head_fields *f, qac_head_verdict *v);
/* A chunked body (RFC 9112 7.1, as strict as the library), from its first
 * byte: OK with its length on the wire once its last chunk and trailers
 * are in, INCOMPLETE while it may still be valid, ERROR with the answer. */
qac_head_result qac_head_chunked(const char *buf, size_t len, size_t max_head, int max_fields, size_t *body_len,
                                 qac_head_verdict *v);
/* A chunked body read as it arrives, by the same rules as
 * qac_head_chunked (which runs it over one buffer): CRLF only, a chunk-size
 * line of at most QAC_CHUNK_LINE_MAX bytes (its CRLF included) with at most
 * QAC_CHUNK_DIGITS_MAX hex digits (leading zeros count: padded sizes cost
 * wire bytes, not body bytes), trailers as head lines within max_trailer
 * bytes and max_fields lines (431 past either). */
#define QAC_CHUNK_LINE_MAX 4096
#define QAC_CHUNK_DIGITS_MAX 16
#define QAC_STR_(x) #x
#define QAC_STR(x) QAC_STR_(x)
typedef struct qac_chunked {
    int state;
    unsigned long long size; /* the chunk size being read, then what is left of its data */
    size_t line;             /* bytes of the chunk-size line so far */
    int digits;              /* hex digits of the size so far */
    size_t trailer;          /* bytes of the trailer section so far */
    int fields;              /* trailer lines so far */
    size_t max_trailer;
    int max_fields;
} qac_chunked;
void qac_chunked_init(qac_chunked *c, size_t max_trailer, int max_fields);
/* Reads buf[0 .. len) on from where the body stands: *used bytes are taken;
 * a run of chunk data among them ([*data_off, +*data_len) of buf) ends the
 * call early, so each call reports at most one. INCOMPLETE: more is needed
 * (or data was reported); OK: the body ended, *used bytes into buf; ERROR:
 * the answer in *v. */
qac_head_result qac_chunked_feed(qac_chunked *c, const char *buf, size_t len, size_t *used, size_t *data_off,
                                 size_t *data_len, qac_head_verdict *v);
/* The requests pipelined behind a valid head (first, its verdict) in the
 * same bytes: 0 when none of those seen whole is invalid (head, or chunked
 * body), else k: the request after the k-th (the first is the 1st) is
 * invalid, with its answer in *bad. The first's own chunked body is the
 * caller's to check (qac_head_chunked). *chunked (NULL: not asked): whether
 * any request seen, the first included, has a chunked body. */
int qac_head_pipelined(const char *buf, size_t len, const qac_head_verdict *first, size_t max_head, int max_fields,
                       qac_head_verdict *bad, int *chunked);
const char *qac_head_reason(int status);

typedef struct qac_gate qac_gate;
/* Called with each connection whose first head is in and valid (path: its
 * target up to "?" or "#"): takes the socket (the head is still unread in
 * it) and returns 1, or returns 0 to have the gate answer 503. bad_after > 0: the request after that many is
 * known invalid (pipelined), *bad its answer. chunked: a request seen in the
 * bytes peeked has a chunked body (the connection goes through a relay). */
typedef int (*qac_gate_handoff_fn)(void *user, int fd, const struct sockaddr *addr, unsigned addrlen,
                                   const char *path, size_t path_len, int bad_after, const qac_head_verdict *bad,
                                   int chunked);
/* Listens on host:port and starts the gate's thread; *port_out: the bound port. */
qac_status qac_gate_start(qac_gate **out, qac_server *s, qac_gate_handoff_fn handoff, void *user, int *port_out);
/* Stops accepting and closes the connections still waiting for a head. */
void qac_gate_stop(qac_gate *g);
/* Bytes of a TCP socket its reader has taken so far (received minus still
 * queued), or -1 when the kernel does not say. */
long long qac_gate_consumed(int fd);
/* On a kept-alive connection whose requests so far were all read, nothing
 * more: waits for the next head (idle_timeout_s for its first byte; the
 * reaper bounds the rest) and checks it, unread. 1: valid, left for the
 * library; 0: none came (closed, idle, or draining); -1: invalid, answered
 * in JSON and the socket shut down both ways. On 1, *bad_after > 0 says the
 * request that many after this one is known invalid (pipelined), and
 * *chunked that a request seen has a chunked body. */
int qac_gate_next_head(qac_server *s, int fd, int *bad_after, qac_head_verdict *bad, int *chunked);
/* Answers on a socket the library serves (from its thread), then ends the
 * connection: the JSON error with Connection: close, a lingering close
 * (input read and dropped for a moment), shut down both ways. */
void qac_gate_answer_close(qac_server *s, int fd, int status, const char *type, const char *message,
                           const char *request_id, const char *method, const char *path, double since);

/* ---- the relay of chunked bodies (srv_relay.c) ----
 * A connection that carries a chunked body is served through a socket
 * pair: the HTTP library reads one end, and a relay thread moves bytes
 * between the client and the other, checking every request head and
 * chunked body by the rules of srv_head.c as the bytes arrive and passing
 * chunked bodies on re-framed (short size lines, no trailers), so that
 * the library never answers their faults in HTML. */
typedef struct qac_relay qac_relay;
/* Starts the relay thread for the client socket tcp (taken, closed by the
 * relay): *lib_fd is the end the library is to read (non-blocking).
 * Returns NULL (tcp untouched) when the pair or the thread cannot be had. */
qac_relay *qac_relay_start(qac_server *s, int tcp, int *lib_fd);
/* The library finished one more request of the connection (wakes the relay,
 * which answers a faulty head only once every request before it is answered). */
void qac_relay_request_done(qac_relay *r);
/* Whether request number `request` of the relay (1: the first it passed
 * on) had a faulty chunked body: then 1 and its answer in *v. The relay
 * ended that body early so that the library hands the request over. */
int qac_relay_body_error(qac_relay *r, unsigned request, qac_head_verdict *v);
/* Drops the connection's reference (the thread holds its own). */
void qac_relay_release(qac_relay *r);
/* Relay threads still running (they end once both sides have closed). */
int qac_relay_running(const qac_server *s);

/* ---- the page ---- */
extern const char qac_server_page_html[];
/* The page for this server (its largest k, its search modes); malloc'd. */
char *qac_server_page(const qac_server *s);

/* ---- the server ---- */
typedef struct qac_docid_map qac_docid_map;

struct qac_server {
    qac_server_config cfg;
    qac_server_backend be;
    qac_batcher *batcher;
    qac_batcher *rerank_batcher; /* the cross-encoder's pairs (NULL: no reranker) */
    qac_metrics *metrics;
    qac_server_log_fn log;
    void *log_user;
    qac_docid_map *docid_rows; /* docid -> dense row, for BM25 hits' text */
    size_t docid_json_max;     /* the longest docid of either index, as a JSON string */
    atomic_int inflight;
    atomic_int draining;
    atomic_int relays;         /* relay threads running (srv_relay.c) */
    void *daemon;              /* struct MHD_Daemon * */
    void (*http_stop)(qac_server *s); /* set by the HTTP layer once listening */
    void *http;                /* the HTTP layer's state (srv_http.c) */
    int drain_failed;          /* a drain timed out: requests are still running */
    int bound_port;
    double started;
    long long started_unix;    /* wall clock at creation (seconds since the epoch) */
    qac_server_access_fn access;
    void *access_user;
    uint64_t rid_seed;         /* request ids: a random seed and a counter */
    atomic_ullong rid_next;
};

#define QAC_REQUEST_ID_CAP 129 /* bytes of a request id, its NUL included */
/* A request id for the X-Request-Id header (cap >= QAC_REQUEST_ID_CAP): the client's
 * own when it sent a valid one (1-128 of A-Z a-z 0-9 - _ . : / + = @),
 * else a fresh random-looking one. */
void qac_request_id(qac_server *s, const char *client, char *out, size_t cap);
/* A peer address as text ("-" when unknown). */
void qac_peer_name(const struct sockaddr *addr, unsigned addrlen, char *out, size_t cap);
/* Reports one answered request to the access log (if any). */
void qac_server_access(qac_server *s, const char *method, const char *path, int status, unsigned long long bytes,
                       double seconds, const char *request_id, const char *client);

void qac_server_log(qac_server *s, qac_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Whether the Authorization header value admits a request to route. */
int qac_server_authorized(const qac_server *s, qac_route route, const char *authorization);

/* Route table lookup: the route and the methods it allows ("GET", "POST"). */
qac_route qac_server_route(const char *path, size_t path_len, const char **allow);
/* The route that serves method on path (POST / is TEI's POST /embed) and
 * whether the method is allowed there (*ok); allow as above. */
qac_route qac_server_route_method(const char *path, size_t path_len, const char *method, const char **allow, int *ok);

/* The cancel check of the request this thread is serving (NULL: none);
 * set by qac_server_handle, defined beside the batcher that reads it. */
extern _Thread_local const qac_cancel *qac_srv_cancel;
int qac_srv_gone(void);

/* ---- answers (srv_reply.c): below every route ---- */
struct json_t;
/* The error family of a route: the house's {"error": {code, type, message}}
 * or text-embeddings-inference's {"error", "error_type"}. */
typedef enum qac_reply_shape { QAC_REPLY_HOUSE = 0, QAC_REPLY_TEI } qac_reply_shape;
#define QAC_SRV_JSON_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(9)) /* 9 digits: floats round-trip */
/* The body (malloc'd, or NULL), its status and content type. */
void qac_srv_set_body(qac_http_response *r, int status, char *body, const char *content_type);
/* An error in the shape (the house's: qac_server_error). */
void qac_srv_error(qac_http_response *r, qac_reply_shape shape, int status, const char *type, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;
/* 200 with o serialised (the reference is taken); out of memory: the
 * shape's error. */
void qac_srv_json(qac_http_response *r, qac_reply_shape shape, struct json_t *o);
/* A failed call's status (not QAC_OK) answered in the shape, from one table:
 * busy 503 / TEI 429, cancelled 503 (or 499 when the client has gone),
 * anything else 500 / TEI 424, with what (the call, may be NULL) and
 * qac_last_error() in the message. */
void qac_srv_fail(qac_http_response *r, qac_reply_shape shape, qac_status st, const char *what);

/* ---- the JSON writer of answers that grow with their input (srv_jsonw.c) ---- */
typedef struct qac_jw {
    char *buf;
    size_t len, cap;   /* cap: the answer's bound */
    const char *fault; /* set: the answer is not sent (a broken bound, a non-finite number) */
} qac_jw;
#define QAC_JW_REAL_MAX 16 /* bytes of a finite double at 9 digits, at most: -1.23456789e-308 */
#define QAC_JW_INT_MAX 20  /* bytes of a long long */
/* A buffer of cap bytes (pages touched as written); 0 out of memory. */
int qac_jw_open(qac_jw *w, size_t cap);
/* A writer that writes nothing and counts: the same calls give len, the
 * exact size of what they would write. */
void qac_jw_count(qac_jw *w);
void qac_jw_free(qac_jw *w);
void qac_jw_raw(qac_jw *w, const char *s, size_t n);
void qac_jw_lit(qac_jw *w, const char *s);
/* A string as jansson escapes it; bytes that are not UTF-8 become U+FFFD
 * (each invalid sequence one, as Rust's from_utf8_lossy). */
void qac_jw_str(qac_jw *w, const char *s, size_t n);
size_t qac_jw_str_size(const char *s, size_t n); /* exactly what qac_jw_str writes */
void qac_jw_int(qac_jw *w, long long v);
size_t qac_jw_digits(long long v);
void qac_jw_real(qac_jw *w, double v); /* jansson's form at 9 digits */
/* [x0,x1,...] and its largest size; a base64 string of the little-endian
 * float32 bytes and its exact size. */
void qac_jw_floats(qac_jw *w, const float *x, int n);
size_t qac_jw_floats_max(int n);
void qac_jw_base64_floats(qac_jw *w, const float *x, int n);
size_t qac_jw_base64_size(int n);
/* The answer: 200 with the buffer (taken), or 500 in the shape on a fault. */
void qac_jw_reply(qac_jw *w, qac_http_response *r, qac_reply_shape shape);
/* Whether an answer of at most bound bytes is within --max-response-bytes;
 * if not, answers 413 in the shape naming the bound and fix (what to change). */
int qac_srv_response_fits(const qac_server *s, size_t bound, qac_reply_shape shape, const char *fix,
                          qac_http_response *r);

/* L2 normalisation of n vectors [n, dim] in place; a zero vector stays zero (srv_vectors.c). */
void qac_srv_l2_normalize(float *v, int n, int dim);

/* ---- the backend's prompts (srv_prompts.c) ---- */
/* The text of prompt `name`, or NULL when there is none by that name; the
 * default prompt's text ("" when there is none); the names, comma-separated
 * and quoted, into buf. */
const char *qac_srv_prompt(const qac_server *s, const char *name);
const char *qac_srv_default_prompt(const qac_server *s);
void qac_srv_prompt_names(const qac_server *s, char *buf, size_t cap);

/* ---- request fields of the house routes (srv_fields.c) ---- */
/* Texts taken from a request: borrowed from its parsed body. */
typedef struct qac_srv_texts {
    int n;
    const char **s;
    size_t *len;
    struct json_t **ids; /* NULL, or per entry: token ids given instead of a text (s NULL) */
} qac_srv_texts;
/* The body parsed into an object, or NULL after answering 400 / 422. */
struct json_t *qac_srv_parse_body(const char *body, size_t len, qac_http_response *r);
/* One string (under `one`) or an array of strings (under `many`); exactly
 * one of them must be present (NULL: that form is not taken). Empty
 * strings are refused, more than max_texts is 413. 0 after answering. */
int qac_srv_get_texts(qac_server *s, struct json_t *o, const char *one, const char *many, qac_srv_texts *t,
                      qac_http_response *r);
void qac_srv_texts_free(qac_srv_texts *t);
/* Optional typed fields: absent leaves *out alone; 0 after answering 422.
 * choices: NULL-terminated; *out is the index of the match. */
int qac_srv_get_int(struct json_t *o, const char *key, long long lo, long long hi, long long *out,
                    qac_http_response *r);
int qac_srv_get_bool(struct json_t *o, const char *key, int *out, qac_http_response *r);
int qac_srv_get_enum(struct json_t *o, const char *key, const char *const *choices, int *out, qac_http_response *r);

/* JSON endpoint handlers (srv_handlers.c). */
void qac_handle_search(qac_server *s, const char *body, size_t len, qac_http_response *resp);
void qac_handle_encode(qac_server *s, const char *body, size_t len, qac_http_response *resp);
void qac_handle_embeddings(qac_server *s, const char *body, size_t len, qac_http_response *resp);
void qac_handle_tokenize(qac_server *s, const char *body, size_t len, qac_http_response *resp);
void qac_handle_info(qac_server *s, qac_http_response *resp);
void qac_handle_health(qac_server *s, qac_http_response *resp);
/* OpenAI's GET /v1/models (id NULL) and GET /v1/models/{id}. */
void qac_handle_models(qac_server *s, const char *id, size_t id_len, qac_http_response *resp);
/* text-embeddings-inference's routes (srv_tei.c): POST /embed (and POST /),
 * /embed_all, /decode, and /tokenize given {"inputs": ...} (o parsed). */
void qac_handle_tei_embed(qac_server *s, const char *body, size_t len, qac_http_response *resp);
void qac_handle_tei_embed_all(qac_server *s, const char *body, size_t len, qac_http_response *resp);
void qac_handle_tei_decode(qac_server *s, const char *body, size_t len, qac_http_response *resp);
void qac_handle_tei_tokenize(qac_server *s, struct json_t *o, qac_http_response *resp);

/* The cross-encoder's routes (srv_rerank.c): TEI's POST /rerank and the
 * Cohere / Jina POST /v1/rerank. */
void qac_handle_tei_rerank(qac_server *s, const char *body, size_t len, qac_http_response *resp);
void qac_handle_rerank_v1(qac_server *s, const char *body, size_t len, qac_http_response *resp);
/* The raw scores (api/qac_xenc.h) of query against texts[0 .. n) through
 * the reranker's batcher, and with probs (may be NULL) their
 * probabilities; *tokens (may be NULL) += the pairs' tokens. truncate: cut
 * a pair over the length (longest_first on side); else it is refused, 422
 * in the shape. 0 after answering. */
int qac_srv_rerank_scores(qac_server *s, const char *query, size_t qlen, const char *const *texts, const size_t *lens,
                          int n, int truncate, qac_trunc_side side, float *raw, float *probs, long long *tokens,
                          qac_reply_shape shape, qac_http_response *r);

/* docid -> row map (srv_docids.c). */
qac_status qac_docid_map_build(qac_docid_map **out, const qac_server_backend *be);
int64_t qac_docid_map_get(const qac_docid_map *m, const char *docid);
void qac_docid_map_free(qac_docid_map *m);
/* The longest docid of the backend's indexes, as a JSON string (/search's bound). */
size_t qac_docid_json_max(const qac_server_backend *be);

/* Strict UTF-8 check (no overlongs, surrogates or values past U+10FFFF); srv_reply.c. */
int qac_utf8_valid(const char *s, size_t len);

#endif
