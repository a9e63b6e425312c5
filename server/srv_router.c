/* Routing, auth and the error family. No sockets here: qac_server_handle
 * turns one request into one response, which is what the HTTP layer, the
 * unit tests and the fuzzer call. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "srv_internal.h"
#include "qac_util.h"

typedef struct route_entry {
    const char *path;
    qac_route route;
    const char *allow;
} route_entry;

static const route_entry routes[] = {
    {"/", QAC_ROUTE_PAGE, "GET, HEAD"},
    {"/search", QAC_ROUTE_SEARCH, "POST"},
    {"/encode", QAC_ROUTE_ENCODE, "POST"},
    {"/v1/embeddings", QAC_ROUTE_EMBEDDINGS, "POST"},
    {"/tokenize", QAC_ROUTE_TOKENIZE, "POST"},
    {"/health", QAC_ROUTE_HEALTH, "GET, HEAD"},
    {"/info", QAC_ROUTE_INFO, "GET, HEAD"},
    {"/metrics", QAC_ROUTE_METRICS, "GET, HEAD"},
    {"/embed", QAC_ROUTE_EMBED, "POST"},
};
#define N_ROUTES (int)(sizeof routes / sizeof routes[0])

qac_route qac_server_route(const char *path, size_t len, const char **allow) {
    for (int i = 0; i < N_ROUTES; i++)
        if (strlen(routes[i].path) == len && memcmp(routes[i].path, path, len) == 0) {
            if (allow) *allow = routes[i].allow;
            return routes[i].route;
        }
    if (allow) *allow = NULL;
    return QAC_ROUTE_OTHER;
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

void qac_http_response_clear(qac_http_response *r) {
    if (!r) return;
    free(r->body);
    memset(r, 0, sizeof *r);
}

static void set_body(qac_http_response *r, int status, char *body, const char *type) {
    free(r->body);
    r->status = status;
    r->body = body;
    r->body_len = body ? strlen(body) : 0;
    r->content_type = type;
}

void qac_server_error(qac_http_response *r, int status, const char *type, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* Library messages may quote raw input: keep the JSON valid whatever it holds. */
    if (!qac_utf8_valid(msg, strlen(msg))) {
        for (char *p = msg; *p; p++)
            if ((unsigned char)*p >= 0x80) *p = '?';
    }
    json_t *o = json_pack("{s:{s:i,s:s,s:s}}", "error", "code", status, "type", type, "message", msg);
    char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!body) {
        /* Only reachable out of memory: a constant body still has the shape. */
        const char *fallback = "{\"error\":{\"code\":500,\"type\":\"internal\",\"message\":\"out of memory\"}}";
        body = strdup(fallback);
        status = 500;
    }
    set_body(r, status, body, "application/json");
}

int qac_utf8_valid(const char *str, size_t len) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int n;
        unsigned cp;
        if (c >= 0xC2 && c <= 0xDF) n = 1, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF) n = 2, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4) n = 3, cp = c & 0x07;
        else return 0;
        if (i + (size_t)n >= len) return 0;
        for (int k = 1; k <= n; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += (size_t)n + 1;
    }
    return 1;
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
    set_body(r, 200, text, "text/plain; version=0.0.4; charset=utf-8");
}

_Thread_local const qac_cancel *qac_srv_cancel;

void qac_server_handle(qac_server *s, const qac_http_request *req, qac_http_response *r) {
    memset(r, 0, sizeof *r);
    qac_cancel cancel = {req->gone, req->gone_ctx};
    qac_srv_cancel = req->gone ? &cancel : NULL;
    double t0 = qac_now();
    const char *path = req->path ? req->path : "/";
    size_t plen = strcspn(path, "?#");
    const char *allow = NULL;
    qac_route route = qac_server_route(path, plen, &allow);
    const char *method = req->method ? req->method : "";
    int is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    int is_post = !strcmp(method, "POST");
    const char *body = req->body ? req->body : "";

    if (route == QAC_ROUTE_OTHER) {
        qac_server_error(r, 404, "not_found", "no route for %.*s (see GET /info and the OpenAPI contract)",
                         (int)(plen > 200 ? 200 : plen), path);
    } else if (!(strstr(allow, "POST") ? is_post : is_get)) {
        qac_server_error(r, 405, "method_not_allowed", "%s is not allowed on %s (allowed: %s)",
                         strlen(method) > 16 ? "this method" : method, qac_route_path(route), allow);
        snprintf(r->allow, sizeof r->allow, "%s", allow);
    } else if (!qac_server_authorized(s, route, req->authorization)) {
        qac_server_error(r, 401, "unauthorized", "missing or wrong API key (send 'Authorization: Bearer KEY')");
        r->www_authenticate = 1;
    } else {
        /* these routes encode: a free batcher waits for this request */
        int encodes = route == QAC_ROUTE_SEARCH || route == QAC_ROUTE_ENCODE || route == QAC_ROUTE_EMBEDDINGS ||
                      route == QAC_ROUTE_EMBED;
        if (encodes) qac_batcher_expect(s->batcher);
        switch (route) {
        case QAC_ROUTE_PAGE: set_body(r, 200, strdup(qac_server_page_html), "text/html; charset=utf-8"); break;
        case QAC_ROUTE_SEARCH: qac_handle_search(s, body, req->body_len, r); break;
        case QAC_ROUTE_ENCODE: qac_handle_encode(s, body, req->body_len, r); break;
        case QAC_ROUTE_EMBEDDINGS: qac_handle_embeddings(s, body, req->body_len, r); break;
        case QAC_ROUTE_TOKENIZE: qac_handle_tokenize(s, body, req->body_len, r); break;
        case QAC_ROUTE_HEALTH: qac_handle_health(s, r); break;
        case QAC_ROUTE_INFO: qac_handle_info(s, r); break;
        case QAC_ROUTE_METRICS: handle_metrics(s, r); break;
        case QAC_ROUTE_EMBED: qac_handle_tei_embed(s, body, req->body_len, r); break;
        default: qac_server_error(r, 500, "internal", "unhandled route"); break;
        }
        if (encodes) qac_batcher_expect_done(s->batcher);
        if (!r->body) qac_server_error(r, 500, "internal", "out of memory");
    }
    qac_srv_cancel = NULL;
    qac_metrics_request(s->metrics, route, r->status, qac_now() - t0);
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
    if (s->cfg.query_max_len < 2 || s->cfg.query_max_len > be->model_max_len) s->cfg.query_max_len = be->model_max_len;
    if (s->cfg.passage_max_len > be->model_max_len) s->cfg.passage_max_len = be->model_max_len;
    qac_status st = s->cfg.host ? QAC_OK : qac_set_error(QAC_ERR_NOMEM, "out of memory");
    if (!st) st = qac_metrics_create(&s->metrics);
    if (!st) {
        qac_batcher_opts bo = {be->dim, cfg->max_batch_tokens, cfg->max_wait_ms, cfg->queue_size, cfg->slice_tokens};
        st = qac_batcher_create(&s->batcher, be->encode, be->enc, be->search, be->index, &bo, s->metrics);
    }
    if (!st && be->bm25_search && be->search) st = qac_docid_map_build(&s->docid_rows, be);
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
    qac_metrics_free(s->metrics);
    qac_docid_map_free(s->docid_rows);
    qac_server_config_clear(&s->cfg);
    free(s);
}
