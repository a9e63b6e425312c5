/* Fuzz entry point for request parsing and routing: one input is
 *   byte 0        method selector (GET, POST, HEAD, PUT, DELETE)
 *   up to '\n'    the path
 *   the rest      the body
 * and goes through qac_server_handle against the fake backend (dense
 * index and BM25 loaded, API key off). Every response must be well-formed:
 * a known status, a body, and JSON errors in the house shape. The same
 * bytes also go through the request-head checker as a raw head. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fake_backend.h"
#include "srv_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static qac_server *server;
static qac_server_backend backend;
static fake_stats stats;

static void setup(void) {
    fake_backend_init(&backend, &stats, 1, 1);
    qac_server_config cfg = qac_server_default_config();
    cfg.max_wait_ms = 0;
    cfg.max_texts = 8;
    cfg.max_k = 30;
    cfg.query_max_len = 16;
    cfg.passage_max_len = 48;
    if (qac_server_create(&server, &cfg, &backend, NULL, NULL)) abort();
}

/* The same bytes as a raw request head (srv_head.c): a verdict that is
 * consistent with itself, whatever the input. */
static void check_head(const uint8_t *data, size_t size) {
    const size_t max_head = 256;
    qac_head_verdict v;
    qac_head_result r = qac_head_check((const char *)data, size, max_head, 8, &v);
    if (r == QAC_HEAD_OK) {
        if (v.head_len < 4 || v.head_len > size || v.head_len > max_head ||
            memcmp(data + v.head_len - 4, "\r\n\r\n", 4))
            abort();
        qac_head_verdict w; /* the head alone gives the same answer */
        if (qac_head_check((const char *)data, v.head_len, max_head, 8, &w) != QAC_HEAD_OK || w.head_len != v.head_len)
            abort();
    } else if (r == QAC_HEAD_ERROR) {
        int s = v.status;
        if (!(s == 400 || s == 413 || s == 414 || s == 431 || s == 501 || s == 505) || !v.type || !v.message) abort();
        qac_head_verdict w; /* more bytes never turn an error into anything else */
        uint8_t *more = malloc(size + 4);
        if (!more) return;
        memcpy(more, data, size);
        memcpy(more + size, "\r\n\r\n", 4);
        if (qac_head_check((const char *)more, size + 4, max_head, 8, &w) != QAC_HEAD_ERROR) abort();
        free(more);
    } else if (size > max_head) {
        abort(); /* past the limit there is always a verdict */
    }
    /* and as a chunked body: a complete one is complete on its own */
    size_t body = 0;
    if (qac_head_chunked((const char *)data, size, max_head, 8, &body, &v) == QAC_HEAD_OK) {
        size_t again = 0;
        if (body > size || qac_head_chunked((const char *)data, body, max_head, 8, &again, &v) != QAC_HEAD_OK ||
            again != body)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *methods[] = {"GET", "POST", "HEAD", "PUT", "DELETE"};
    if (!server) setup();
    if (size == 0) return 0;
    const char *method = methods[data[0] % 5];
    const uint8_t *p = data + 1, *end = data + size;
    const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
    size_t plen = nl ? (size_t)(nl - p) : (size_t)(end - p);
    char path[512];
    if (plen >= sizeof path) plen = sizeof path - 1;
    memcpy(path, p, plen);
    path[plen] = '\0'; /* a NUL inside just shortens the path, as in a real request line */
    const uint8_t *body = nl ? nl + 1 : end;
    size_t blen = (size_t)(end - body);
    /* the body is not NUL-terminated in real life either: copy it exactly */
    char *b = malloc(blen ? blen : 1);
    if (!b) return 0;
    memcpy(b, body, blen);
    qac_http_request req = {method, path, NULL, b, blen, NULL, NULL};
    qac_http_response r;
    qac_server_handle(server, &req, &r);
    /* text-embeddings-inference's routes answer errors in its own shape */
    size_t route_len = strcspn(path, "?#");
    int tei_route = (route_len == 6 && !strncmp(path, "/embed", 6)) || (route_len == 10 && !strncmp(path, "/embed_all", 10)) ||
                    (route_len == 7 && !strncmp(path, "/decode", 7)) || (route_len == 1 && !strcmp(method, "POST")) ||
                    (route_len == 9 && !strncmp(path, "/tokenize", 9)) ||
                    (route_len == 7 && !strncmp(path, "/rerank", 7));
    int known = (tei_route && (r.status == 424 || r.status == 429)) || r.status == 200 || r.status == 400 || r.status == 404 || r.status == 405 || r.status == 413 ||
                r.status == 422 || r.status == 503;
    if (!known || !r.body || !r.content_type) abort();
    if (r.status != 200 && strncmp(r.content_type, "application/json", 16) == 0) {
        json_t *o = json_loadb(r.body, r.body_len, 0, NULL);
        json_t *e = json_object_get(o, "error");
        int tei = json_is_string(e) && json_is_string(json_object_get(o, "error_type")) && tei_route;
        if (!tei && (!e || json_integer_value(json_object_get(e, "code")) != r.status ||
                     !json_is_string(json_object_get(e, "message"))))
            abort();
        json_decref(o);
    }
    qac_http_response_clear(&r);
    free(b);
    check_head(data, size);
    return 0;
}
