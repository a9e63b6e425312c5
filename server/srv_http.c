/* libmicrohttpd glue: the per-request state machine (headers, body chunks,
 * final call), the body / concurrency limits, and the drain on shutdown.
 * One thread per connection, so a handler may block on the batcher without
 * stalling other clients. */
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "srv_internal.h"
#include "qac_util.h"

/* A rejected upload is read and dropped up to this size, so that clients
 * that write the whole body before reading see the error response. */
#define DISCARD_CAP (64u << 20)

typedef struct req_state {
    char *buf;
    size_t len, cap;
    int reject;       /* 0, or the status to answer once the body is in */
    size_t discarded;
    int responded;
} req_state;

static void reject_response(qac_server *s, int status, qac_http_response *r) {
    memset(r, 0, sizeof *r);
    if (status == 413)
        qac_server_error(r, 413, "payload_too_large", "the request body is larger than %lld bytes",
                         s->cfg.max_body_bytes);
    else if (status == 429)
        qac_server_error(r, 429, "too_many_requests", "more than %d requests in flight; retry later",
                         s->cfg.max_concurrent);
    else
        qac_server_error(r, 503, "unavailable", "the server is shutting down");
    r->retry_after = status == 413 ? 0 : 1;
}

static enum MHD_Result send_response(qac_server *s, struct MHD_Connection *c, qac_http_response *r) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(r->body_len, r->body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        qac_http_response_clear(r);
        return MHD_NO;
    }
    r->body = NULL; /* MHD owns it now */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r->content_type ? r->content_type : "application/json");
    if (r->allow[0]) MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->allow);
    if (r->retry_after) {
        char v[16];
        snprintf(v, sizeof v, "%d", r->retry_after);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    if (r->www_authenticate) MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (atomic_load(&s->draining)) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    if (r->status >= 500) qac_server_log(s, QAC_LOG_WARN, "HTTP %d", r->status);
    qac_http_response_clear(r);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    qac_server *s = cls;
    req_state *st = *con_cls;
    if (!st) { /* headers are in: decide early whether to keep the body */
        st = calloc(1, sizeof *st);
        if (!st) return MHD_NO;
        *con_cls = st;
        int n = atomic_fetch_add(&s->inflight, 1) + 1;
        if (atomic_load(&s->draining)) st->reject = 503;
        else if (n > s->cfg.max_concurrent) st->reject = 429;
        else {
            const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
            if (cl && strtoull(cl, NULL, 10) > (unsigned long long)s->cfg.max_body_bytes) st->reject = 413;
        }
        return MHD_YES;
    }
    if (st->responded) { /* an early answer is queued: swallow the rest */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t chunk = *upload_size;
        *upload_size = 0;
        if (!st->reject && st->len + chunk > (size_t)s->cfg.max_body_bytes) {
            st->reject = 413;
            free(st->buf);
            st->buf = NULL;
            st->len = st->cap = 0;
        }
        if (st->reject) {
            st->discarded += chunk;
            if (st->discarded <= DISCARD_CAP) return MHD_YES;
            qac_http_response r;
            reject_response(s, st->reject, &r);
            qac_metrics_request(s->metrics, qac_server_route(url, strcspn(url, "?"), NULL), r.status, 0);
            st->responded = 1;
            return send_response(s, c, &r);
        }
        if (st->len + chunk + 1 > st->cap) {
            size_t cap = st->cap ? st->cap : 4096;
            while (cap < st->len + chunk + 1) cap *= 2;
            char *nb = realloc(st->buf, cap);
            if (!nb) return MHD_NO;
            st->buf = nb;
            st->cap = cap;
        }
        memcpy(st->buf + st->len, upload, chunk);
        st->len += chunk;
        return MHD_YES;
    }
    /* the whole request is in */
    qac_http_response r;
    if (st->reject) {
        reject_response(s, st->reject, &r);
        qac_metrics_request(s->metrics, qac_server_route(url, strcspn(url, "?"), NULL), r.status, 0);
    } else {
        qac_http_request req = {method, url,
                                MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION),
                                st->buf ? st->buf : "", st->len};
        qac_server_handle(s, &req, &r);
    }
    st->responded = 1;
    return send_response(s, c, &r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    qac_server *s = cls;
    req_state *st = *con_cls;
    if (!st) return;
    free(st->buf);
    free(st);
    *con_cls = NULL;
    atomic_fetch_sub(&s->inflight, 1);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    qac_server *s = cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t l = strlen(msg);
    while (l && (msg[l - 1] == '\n' || msg[l - 1] == '\r')) msg[--l] = '\0';
    qac_server_log(s, QAC_LOG_DEBUG, "libmicrohttpd: %s", msg);
}

static void http_stop(qac_server *s) { qac_server_shutdown(s); }

qac_status qac_server_listen(qac_server *s) {
    if (s->daemon) return qac_set_error(QAC_ERR_INVALID, "the server is already listening");
    char port[16];
    snprintf(port, sizeof port, "%d", s->cfg.port);
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int gai = getaddrinfo(s->cfg.host, port, &hints, &ai);
    if (gai) return qac_set_error(QAC_ERR_INVALID, "cannot resolve host '%s': %s", s->cfg.host, gai_strerror(gai));
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC | MHD_USE_POLL |
                     MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)s->cfg.port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)(s->cfg.max_concurrent + 64), MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)s->cfg.idle_timeout_s, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_EXTERNAL_LOGGER,
        mhd_log, s, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!d)
        return qac_set_error(QAC_ERR_IO, "cannot listen on %s:%d (address in use, or not allowed)", s->cfg.host,
                             s->cfg.port);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    s->bound_port = info ? info->port : s->cfg.port;
    s->daemon = d;
    s->http_stop = http_stop;
    qac_server_log(s, QAC_LOG_INFO, "listening on http://%s:%d", s->cfg.host, s->bound_port);
    return QAC_OK;
}

int qac_server_port(const qac_server *s) { return s->bound_port; }

qac_status qac_server_shutdown(qac_server *s) {
    if (!s || !s->daemon) return QAC_OK;
    struct MHD_Daemon *d = s->daemon;
    atomic_store(&s->draining, 1);
    MHD_socket fd = MHD_quiesce_daemon(d); /* stop accepting; in-flight requests go on */
    if (fd != MHD_INVALID_SOCKET) close(fd);
    double deadline = qac_now() + s->cfg.drain_timeout_ms / 1000.0;
    int left;
    while ((left = atomic_load(&s->inflight)) > 0 && qac_now() < deadline) {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    qac_status st = QAC_OK;
    if (left > 0) {
        qac_server_log(s, QAC_LOG_WARN, "drain timed out with %d requests in flight", left);
        st = qac_set_error(QAC_ERR_BUSY, "drain timed out with %d requests in flight", left);
    } else {
        qac_server_log(s, QAC_LOG_INFO, "drained: no request in flight");
    }
    MHD_stop_daemon(d);
    s->daemon = NULL;
    s->http_stop = NULL;
    return st;
}
