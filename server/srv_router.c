/* Routing, auth and the error family. No sockets here: qac_server_handle
 * turns one request into one response, which is what the HTTP layer, the
 * unit tests and the fuzzer call. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "srv_internal.h"
#include "qac_util.h"

typedef struct route_entry {
    const char *path;
    qac_route route;
    const char *allow;
} route_entry;

static const route_entry routes[] = {
    {"/", QAC_ROUTE_PAGE, "GET, HEAD, POST"}, /* POST: TEI's embed */
    {"/search", QAC_ROUTE_SEARCH, "POST"},
    {"/encode", QAC_ROUTE_ENCODE, "POST"},
    {"/v1/embeddings", QAC_ROUTE_EMBEDDINGS, "POST"},
    {"/tokenize", QAC_ROUTE_TOKENIZE, "POST"},
    {"/health", QAC_ROUTE_HEALTH, "GET, HEAD"},
    {"/info", QAC_ROUTE_INFO, "GET, HEAD"},
    {"/metrics", QAC_ROUTE_METRICS, "GET, HEAD"},
    {"/embed", QAC_ROUTE_EMBED, "POST"},
    {"/embed_all", QAC_ROUTE_EMBED_ALL, "POST"},
    {"/decode", QAC_ROUTE_DECODE, "POST"},
    {"/v1/models", QAC_ROUTE_MODELS, "GET, HEAD"},
    {"/rerank", QAC_ROUTE_RERANK, "POST"},
    {"/v1/rerank", QAC_ROUTE_RERANK_V1, "POST"},
};
#define N_ROUTES (int)(sizeof routes / sizeof routes[0])

#define MODEL_PREFIX "/v1/models/" /* OpenAI's GET /v1/models/{model} */

qac_route qac_server_route(const char *path, size_t len, const char **allow) {
    for (int i = 0; i < N_ROUTES; i++)
        if (strlen(routes[i].path) == len && memcmp(routes[i].path, path, len) == 0) {
            if (allow) *allow = routes[i].allow;
            return routes[i].route;
        }
    size_t pl = strlen(MODEL_PREFIX);
    if (len > pl && memcmp(path, MODEL_PREFIX, pl) == 0) {
        if (allow) *allow = "GET, HEAD";
        return QAC_ROUTE_MODELS;
    }
    if (allow) *allow = NULL;
    return QAC_ROUTE_OTHER;
}

qac_route qac_server_route_method(const char *path, size_t len, const char *method, const char **allow, int *ok) {
    const char *a = NULL;
    qac_route route = qac_server_route(path, len, &a);
    int get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    *ok = a && ((get && strstr(a, "GET")) || (post && strstr(a, "POST")));
    if (route == QAC_ROUTE_PAGE && post) route = QAC_ROUTE_EMBED;
    if (allow) *allow = a;
    return route;
}

void qac_server_log(qac_server *s, qac_log_level level, const char *fmt, ...) {
    if (!s || !s->log) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    s->log(s->log_user, level, msg);
}

static int key_matches(const char *want, const char *authorization) {
    if (!authorization) return 0;
    while (*authorization == ' ') authorization++;
    if (strncasecmp(authorization, "Bearer ", 7) != 0) return 0;
    const char *got = authorization + 7;
    while (*got == ' ') got++;
    size_t gl = strlen(got), wl = strlen(want);
    while (gl && got[gl - 1] == ' ') gl--;
    /* constant time in the key's length */
    unsigned diff = (unsigned)(gl != wl);
    for (size_t i = 0; i < wl; i++) diff |= (unsigned char)want[i] ^ (unsigned char)(i < gl ? got[i] : 0);
    return diff == 0;
}

int qac_server_authorized(const qac_server *s, qac_route route, const char *authorization) {
    return !s->cfg.api_key || route == QAC_ROUTE_HEALTH || route == QAC_ROUTE_PAGE ||
           key_matches(s->cfg.api_key, authorization);
}

static void handle_metrics(qac_server *s, qac_http_response *r) {
    qac_metrics_queue_depth(s->metrics, s->batcher ? qac_batcher_queue_depth(s->batcher) : 0);
    qac_metrics_inflight(s->metrics, atomic_load(&s->inflight));
    char *text = qac_metrics_render(s->metrics);
    if (!text) {
        qac_server_error(r, 500, "internal", "out of memory rendering metrics");
        return;
    }
    qac_srv_set_body(r, 200, text, "text/plain; version=0.0.4; charset=utf-8");
}

void qac_server_handle(qac_server *s, const qac_http_request *req, qac_http_response *r) {
    memset(r, 0, sizeof *r);
    qac_cancel cancel = {req->gone, req->gone_ctx};
    qac_srv_cancel = req->gone ? &cancel : NULL;
    double t0 = qac_now();
    const char *path = req->path ? req->path : "/";
    size_t plen = strcspn(path, "?#");
    const char *allow = NULL;
    const char *method = req->method ? req->method : "";
    int method_ok = 0;
    qac_route route = qac_server_route_method(path, plen, method, &allow, &method_ok);
    const char *body = req->body ? req->body : "";

    if (route == QAC_ROUTE_OTHER) {
        qac_server_error(r, 404, "not_found", "no route for %.*s (see GET /info and the OpenAPI contract)",
                         (int)(plen > 200 ? 200 : plen), path);
    } else if (!method_ok) {
        qac_server_error(r, 405, "method_not_allowed", "%s is not allowed on %s (allowed: %s)",
                         strlen(method) > 16 ? "this method" : method, qac_route_path(route == QAC_ROUTE_EMBED && plen == 1 ? QAC_ROUTE_PAGE : route), allow);
        snprintf(r->allow, sizeof r->allow, "%s", allow);
    } else if (!qac_server_authorized(s, route, req->authorization)) {
        qac_server_error(r, 401, "unauthorized", "missing or wrong API key (send 'Authorization: Bearer KEY')");
        r->www_authenticate = 1;
    } else {
        /* these routes encode: a free batcher waits for this request */
        int encodes = route == QAC_ROUTE_SEARCH || route == QAC_ROUTE_ENCODE || route == QAC_ROUTE_EMBEDDINGS ||
                      route == QAC_ROUTE_EMBED;
        int reranks = route == QAC_ROUTE_RERANK || route == QAC_ROUTE_RERANK_V1;
        if (encodes) qac_batcher_expect(s->batcher);
        if (reranks) qac_batcher_expect(s->rerank_batcher);
        switch (route) {
        case QAC_ROUTE_PAGE: qac_srv_set_body(r, 200, qac_server_page(s), "text/html; charset=utf-8"); break;
        case QAC_ROUTE_SEARCH: qac_handle_search(s, body, req->body_len, r); break;
        case QAC_ROUTE_ENCODE: qac_handle_encode(s, body, req->body_len, r); break;
        case QAC_ROUTE_EMBEDDINGS: qac_handle_embeddings(s, body, req->body_len, r); break;
        case QAC_ROUTE_TOKENIZE: qac_handle_tokenize(s, body, req->body_len, r); break;
        case QAC_ROUTE_HEALTH: qac_handle_health(s, r); break;
        case QAC_ROUTE_INFO: qac_handle_info(s, r); break;
        case QAC_ROUTE_METRICS: handle_metrics(s, r); break;
        case QAC_ROUTE_EMBED: qac_handle_tei_embed(s, body, req->body_len, r); break;
        case QAC_ROUTE_EMBED_ALL: qac_handle_tei_embed_all(s, body, req->body_len, r); break;
        case QAC_ROUTE_DECODE: qac_handle_tei_decode(s, body, req->body_len, r); break;
        case QAC_ROUTE_RERANK: qac_handle_tei_rerank(s, body, req->body_len, r); break;
        case QAC_ROUTE_RERANK_V1: qac_handle_rerank_v1(s, body, req->body_len, r); break;
        case QAC_ROUTE_MODELS: /* the list, or one model: the rest of the path is its id */
            qac_handle_models(s, plen > strlen(MODEL_PREFIX) ? path + strlen(MODEL_PREFIX) : NULL,
                              plen > strlen(MODEL_PREFIX) ? plen - strlen(MODEL_PREFIX) : 0, r);
            break;
        default: qac_server_error(r, 500, "internal", "unhandled route"); break;
        }
        if (encodes) qac_batcher_expect_done(s->batcher);
        if (reranks) qac_batcher_expect_done(s->rerank_batcher);
        if (!r->body) qac_server_error(r, 500, "internal", "out of memory");
    }
    qac_srv_cancel = NULL;
    qac_metrics_request(s->metrics, route, r->status, qac_now() - t0);
}

void qac_server_set_access_log(qac_server *s, qac_server_access_fn fn, void *user) {
    s->access = fn;
    s->access_user = user;
}

void qac_server_access(qac_server *s, const char *method, const char *path, int status, unsigned long long bytes,
                       double seconds, const char *request_id, const char *client) {
    if (!s->access) return;
    qac_access_entry e = {method && *method ? method : "-", path && *path ? path : "-", request_id ? request_id : "-",
                          client && *client ? client : "-", status, bytes, seconds};
    s->access(s->access_user, &e);
}

void qac_peer_name(const struct sockaddr *addr, unsigned addrlen, char *out, size_t cap) {
    if (!addr || !addrlen || getnameinfo(addr, (socklen_t)addrlen, out, (socklen_t)cap, NULL, 0, NI_NUMERICHOST) != 0)
        snprintf(out, cap, "-");
}

qac_status qac_server_create(qac_server **out, const qac_server_config *cfg, const qac_server_backend *be,
                             qac_server_log_fn log, void *log_user) {
    *out = NULL;
    if (!be || !be->encode || !be->encode_text || !be->tokenize || be->dim <= 0)
        return qac_set_error(QAC_ERR_INVALID, "server: the backend has no encoder");
    qac_server *s = calloc(1, sizeof *s);
    if (!s) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    s->cfg = *cfg;
    s->cfg.host = strdup(cfg->host ? cfg->host : "127.0.0.1");
    s->cfg.api_key = cfg->api_key && *cfg->api_key ? strdup(cfg->api_key) : NULL;
    s->be = *be;
    s->log = log;
    s->log_user = log_user;
    s->started = qac_now();
    s->started_unix = (long long)time(NULL);
    /* ids need only differ between requests and restarts, not be secret */
    if (getrandom(&s->rid_seed, sizeof s->rid_seed, GRND_NONBLOCK) != (ssize_t)sizeof s->rid_seed)
        s->rid_seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    /* unset (0): the model's limit (its sentence-transformers max_seq_length);
     * lengths asked for are honoured up to the position table, as the CLI's --max-len */
    int positions = be->max_position > 0 ? be->max_position : be->model_max_len;
    if (s->cfg.query_max_len < 2) s->cfg.query_max_len = be->model_max_len;
    if (s->cfg.query_max_len > positions) s->cfg.query_max_len = positions;
    if (s->cfg.passage_max_len < 2) s->cfg.passage_max_len = be->model_max_len;
    if (s->cfg.passage_max_len > positions) s->cfg.passage_max_len = positions;
    qac_status st = s->cfg.host ? QAC_OK : qac_set_error(QAC_ERR_NOMEM, "out of memory");
    if (!st) st = qac_metrics_create(&s->metrics);
    if (!st) qac_metrics_gpu(s->metrics, be->cuda_gpu);
    if (!st) {
        qac_batcher_opts bo = {be->dim, cfg->max_batch_tokens, cfg->max_wait_ms, cfg->queue_size, cfg->slice_tokens};
        st = qac_batcher_create(&s->batcher, be->encode, be->enc, be->search, be->index, &bo, s->metrics);
        if (!st) qac_batcher_set_raw(s->batcher, be->encode_raw);
    }
    if (!st && be->rerank_scores) { /* the reranker's pairs: their own batcher, the same budget and limits */
        qac_batcher_opts ro = {2, cfg->max_batch_tokens, cfg->max_wait_ms, cfg->queue_size, cfg->slice_tokens};
        st = qac_batcher_create_pairs(&s->rerank_batcher, be->rerank_scores, be->reranker, &ro, s->metrics);
    }
    if (!st && be->bm25_search && be->search) st = qac_docid_map_build(&s->docid_rows, be);
    if (!st) s->docid_json_max = qac_docid_json_max(be);
    if (st) {
        qac_server_free(s);
        return st;
    }
    *out = s;
    return QAC_OK;
}

void qac_server_free(qac_server *s) {
    if (!s) return;
    if (s->http_stop) s->http_stop(s);
    qac_batcher_free(s->batcher);
    qac_batcher_free(s->rerank_batcher);
    qac_metrics_free(s->metrics);
    qac_docid_map_free(s->docid_rows);
    qac_server_config_clear(&s->cfg);
    free(s);
}
