/* libmicrohttpd glue: the per-request state machine (head, body chunks,
 * final call), the limits, the connection deadlines and the drain.
 * Connections come from the gate (srv_gate.c) with a checked first head;
 * between requests on a kept-alive one, the next head is checked here too.
 *
 * One thread per connection, so a handler may block on the batcher without
 * stalling other clients. Everything that can be decided from the head
 * (route, method, framing, API key, Content-Length, load) is answered on
 * the first call, before any body byte is read: MHD then sends no
 * `100 Continue` and closes the connection after the answer.
 *
 * A reaper thread closes connections that are too slow: the head must be
 * complete header_timeout_ms after accept, the body body_timeout_ms after
 * the head, at min_body_rate or better. /health and /metrics are never
 * refused for load (they count against no request limit).
 *
 * Connection slots: max_connections, and RESERVED_CONNECTIONS more for
 * /health and /metrics only. A connection let in on the reserve is closed
 * after its answer, so the reserve stays free for the next health check;
 * when the slots run out, the connection that has waited longest for its
 * next request (kept alive, idle) is closed to make room. Every answer
 * carries an X-Request-Id and is reported to the access log. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "srv_internal.h"
#include "qac_util.h"

#define DISCARD_CAP (64u << 20) /* past this, a rejected body closes the connection */
#define RESERVED_CONNECTIONS 32 /* past max_connections, for /health and /metrics only */
#define RECLAIM_SLACK 64        /* connections shut down here that the library has not closed yet */

typedef enum conn_phase { PHASE_HEAD = 0, PHASE_BODY, PHASE_HANDLING, PHASE_IDLE } conn_phase;

/* One TCP connection, from accept to close (MHD's socket context). */
typedef struct conn {
    struct conn *prev, *next;
    MHD_socket fd;
    conn_phase phase;
    double since;         /* start of the current phase */
    unsigned long long body_bytes;
    size_t uri_len;       /* the current request's target, as sent */
    int reaped;           /* shut down by the reaper, or reclaimed while idle */
    int waiting_next;     /* idle between requests, in qac_gate_next_head */
    int reserve;          /* let in on the reserve: close after the answer */
    char client[64];      /* the peer's address, for the access log */
    /* Fields below: the connection's own thread only. */
    unsigned long long wire; /* bytes of its requests so far (heads and bodies) */
    int untracked;        /* wire unknown (a chunked body): later heads are the library's */
    qac_relay *relay;     /* the connection goes through a relay (srv_relay.c), or NULL */
    unsigned relay_base;  /* requests the library had parsed when the relay began */
    int refused;          /* the gate answered its next head: serve nothing more */
    unsigned requests;    /* heads the library has parsed */
    unsigned bad_after;   /* > 0: the request after this many is invalid (seen pipelined) */
    qac_head_verdict bad; /* its answer */
} conn;

/* What the gate found pipelined behind a connection's first head, kept
 * until the library announces the connection (by socket and peer). */
typedef struct handoff_note {
    struct handoff_note *next;
    int fd;
    struct sockaddr_storage peer;
    socklen_t peerlen;
    double at;
    unsigned bad_after;
    qac_head_verdict bad;
    int reserve;
    qac_relay *relay;     /* the connection's relay: its reference goes to the conn */
} handoff_note;

typedef struct req_state {
    char *buf;
    size_t len, cap;
    int counted;          /* holds a slot in s->handling */
    int too_large;        /* the body passed max_body_bytes: drop the rest */
    size_t discarded;
    conn *cn;
    int client_keepalive; /* HTTP/1.1 and no Connection header but keep-alive */
    int open_answer;      /* answered without Connection: close */
    double t0;            /* the head is in */
    int head_only;        /* HEAD: no body goes out */
    char method[16];
    const char *path;     /* the library's, for this request */
    char rid[QAC_REQUEST_ID_CAP];
} req_state;

typedef struct http_state {
    pthread_mutex_t mu;   /* guards the list and every conn's fields */
    conn *conns;
    pthread_t reaper;
    pthread_mutex_t stop_mu;
    pthread_cond_t stop_cv;
    int stop;
    atomic_int handling;  /* requests being handled (the 429 limit) */
    unsigned live;        /* connections handed to the library, not shut down by us; guarded by mu */
    double last_5xx_log;
    unsigned long long suppressed_5xx;
    qac_gate *gate;       /* accepts, and hands over connections with a valid head */
    handoff_note *notes;  /* guarded by mu */
} http_state;

static http_state *hs_of(qac_server *s) { return s->http; }

static handoff_note *take_note(http_state *hs, int fd, const struct sockaddr *peer) {
    for (handoff_note **p = &hs->notes; *p; p = &(*p)->next) {
        handoff_note *n = *p;
        if (n->fd == fd && (!peer || !memcmp(&n->peer, peer, n->peerlen))) {
            *p = n->next;
            return n;
        }
    }
    return NULL;
}

/* ---- responses ---- */

static void log_5xx(qac_server *s, int status) {
    http_state *hs = hs_of(s);
    double now = qac_now();
    unsigned long long skipped = 0;
    int emit = 0;
    pthread_mutex_lock(&hs->mu);
    if (now - hs->last_5xx_log >= 1.0) { /* one line a second, whatever the rate */
        emit = 1;
        skipped = hs->suppressed_5xx;
        hs->suppressed_5xx = 0;
        hs->last_5xx_log = now;
    } else {
        hs->suppressed_5xx++;
    }
    pthread_mutex_unlock(&hs->mu);
    if (emit && skipped)
        qac_server_log(s, QAC_LOG_WARN, "HTTP %d (and %llu more 5xx in the last second)", status, skipped);
    else if (emit)
        qac_server_log(s, QAC_LOG_WARN, "HTTP %d", status);
}

static void log_access(qac_server *s, const req_state *st, int status, unsigned long long bytes) {
    qac_server_access(s, st->method, st->path, status, bytes, qac_now() - st->t0, st->rid,
                      st->cn ? st->cn->client : NULL);
}

static enum MHD_Result send_response(qac_server *s, struct MHD_Connection *c, req_state *st, qac_http_response *r,
                                     int close) {
    if (r->status == 499) { /* the client went away: nobody to answer */
        log_access(s, st, 499, 0);
        qac_http_response_clear(r);
        return MHD_NO;
    }
    if (st->cn && st->cn->reserve) close = 1;
    unsigned long long bytes = st->head_only ? 0 : r->body_len;
    int status = r->status;
    struct MHD_Response *resp = MHD_create_response_from_buffer(r->body_len, r->body, MHD_RESPMEM_MUST_FREE);
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
    MHD_add_response_header(resp, "X-Request-Id", st->rid);
    if (close || atomic_load(&s->draining)) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    if (r->status >= 500) log_5xx(s, r->status);
    qac_http_response_clear(r);
    log_access(s, st, status, bytes);
    return ret;
}

/* An answer decided from the head alone; the body is never read. */
static enum MHD_Result early(qac_server *s, struct MHD_Connection *c, req_state *st, qac_route route,
                             qac_http_response *r) {
    qac_metrics_request(s->metrics, route, r->status, 0);
    return send_response(s, c, st, r, 1);
}

/* ---- the head: framing checks ---- */

/* The framing fields as the library parsed them: the gate checked the
 * first head of a connection already, this checks the later ones too. */
typedef struct head_scan {
    qac_head_fields f;
    size_t bytes; /* header lines, as "key: value\r\n" */
} head_scan;

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    head_scan *h = cls;
    (void)kind;
    size_t vlen = value ? strlen(value) : 0;
    h->bytes += strlen(key) + vlen + 4;
    if (!strcasecmp(key, MHD_HTTP_HEADER_HOST)) {
        h->f.n_host++;
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        h->f.n_cl++;
        h->f.cl = value ? value : "";
        h->f.cl_len = vlen;
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        h->f.n_te++;
        h->f.te = value ? value : "";
        h->f.te_len = vlen;
    }
    return MHD_YES;
}

/* Content-Length as digits only; -1 when malformed. */
static long long parse_length(const char *v) {
    if (!v || !*v) return -1;
    unsigned long long x = 0;
    for (const char *p = v; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        if (x > (1ULL << 62) / 10) return -1;
        x = x * 10 + (unsigned)(*p - '0');
    }
    return (long long)x;
}

static int is_reserved(qac_route route) { return route == QAC_ROUTE_HEALTH || route == QAC_ROUTE_METRICS; }

/* The client closed its side: recv sees end of file (or a reset). */
static int client_gone(void *ctx) {
    conn *cn = ctx;
    if (!cn || cn->reaped) return 1;
    char ch;
    ssize_t n = recv(cn->fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return 1;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return 1;
    return 0;
}

static void set_phase(qac_server *s, conn *cn, conn_phase p) {
    if (!cn) return;
    pthread_mutex_lock(&hs_of(s)->mu);
    cn->phase = p;
    cn->since = qac_now();
    if (p == PHASE_BODY) cn->body_bytes = 0;
    pthread_mutex_unlock(&hs_of(s)->mu);
}

static enum MHD_Result first_call(qac_server *s, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, req_state *st) {
    qac_http_response r;
    memset(&r, 0, sizeof r);
    size_t plen = strcspn(url, "?#");
    const char *allow = NULL;
    int method_ok = 0;
    qac_route route = qac_server_route_method(url, plen, method, &allow, &method_ok);
    head_scan h;
    memset(&h, 0, sizeof h);
    h.f.minor_11 = !version || strcmp(version, MHD_HTTP_VERSION_1_0) != 0;
    MHD_get_connection_values(c, MHD_HEADER_KIND, scan_header, &h);
    long long cl = h.f.n_cl ? parse_length(h.f.cl) : 0;
    const char *connection = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONNECTION);
    st->client_keepalive = h.f.minor_11 && (!connection || !strcasecmp(connection, "keep-alive"));
    if (st->cn) { /* where this request ends on the wire, for qac_gate_next_head */
        const union MHD_ConnectionInfo *hi = MHD_get_connection_info(c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
        st->cn->requests++;
        if (!hi || h.f.n_te || cl < 0) st->cn->untracked = 1;
        else st->cn->wire += hi->header_size + (unsigned long long)cl;
    }

    /* Head limits of our own, well inside MHD's buffer (see qac_server_listen),
     * so that the answer is JSON: past the buffer MHD answers by itself. */
    size_t line = strlen(method) + (st->cn ? st->cn->uri_len : strlen(url)) + 12;
    if (line > (size_t)s->cfg.max_head_bytes) {
        qac_server_error(&r, 414, "invalid_request", "the request line is longer than %d bytes", s->cfg.max_head_bytes);
        return early(s, c, st, route, &r);
    }
    if (line + h.bytes > (size_t)s->cfg.max_head_bytes) {
        qac_server_error(&r, 431, "invalid_request", "the request head is larger than %d bytes",
                         s->cfg.max_head_bytes);
        return early(s, c, st, route, &r);
    }

    /* RFC 9112 3.2, 6: Host, and a message length that cannot be read two
     * ways (request smuggling); refused, and the connection closed. */
    qac_head_verdict v = {0};
    if (qac_head_framing(&h.f, &v) != QAC_HEAD_OK || cl < 0) {
        if (cl < 0 && v.status == 0) qac_server_error(&r, 400, "invalid_request", "an invalid Content-Length");
        else qac_server_error(&r, v.status, v.type, "%s", v.message);
        return early(s, c, st, route, &r);
    }
    if (atomic_load(&s->draining) && route != QAC_ROUTE_HEALTH) {
        qac_server_error(&r, 503, "unavailable", "the server is shutting down");
        r.retry_after = 1;
        return early(s, c, st, route, &r);
    }
    /* Routing errors and auth come before the body too (no 100 Continue). */
    if (route == QAC_ROUTE_OTHER || !method_ok ||
        (s->cfg.api_key && !qac_server_authorized(s, route, MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                                                          MHD_HTTP_HEADER_AUTHORIZATION)))) {
        qac_http_request req = {method, url,
                                MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION), "", 0,
                                NULL, NULL};
        qac_server_handle(s, &req, &r); /* answers 404 / 405 / 401 without a body */
        return send_response(s, c, st, &r, 1);
    }
    if (cl > s->cfg.max_body_bytes) {
        qac_server_error(&r, 413, "payload_too_large", "the request body is larger than %lld bytes",
                         s->cfg.max_body_bytes);
        return early(s, c, st, route, &r);
    }
    /* Already at the limit: say so before reading the body. */
    if (!is_reserved(route) && atomic_load(&hs_of(s)->handling) >= s->cfg.max_concurrent) {
        qac_server_error(&r, 429, "too_many_requests", "more than %d requests in flight; retry later",
                         s->cfg.max_concurrent);
        r.retry_after = 1;
        return early(s, c, st, route, &r);
    }
    set_phase(s, st->cn, PHASE_BODY);
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    qac_server *s = cls;
    req_state *st = *con_cls;
    if (!st) { /* the head is in */
        st = calloc(1, sizeof *st);
        if (!st) return MHD_NO;
        *con_cls = st;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        st->cn = ci ? ci->socket_context : NULL;
        st->t0 = qac_now();
        st->head_only = !strcmp(method, "HEAD");
        snprintf(st->method, sizeof st->method, "%s", method);
        st->path = url;
        qac_request_id(s, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Request-Id"), st->rid, sizeof st->rid);
        atomic_fetch_add(&s->inflight, 1);
        if (st->cn && st->cn->refused) return MHD_NO;
        return first_call(s, c, url, method, version, st);
    }
    if (*upload_size) {
        size_t chunk = *upload_size;
        *upload_size = 0;
        if (st->cn) {
            pthread_mutex_lock(&hs_of(s)->mu);
            st->cn->body_bytes += chunk;
            pthread_mutex_unlock(&hs_of(s)->mu);
        }
        if (!st->too_large && st->len + chunk > (size_t)s->cfg.max_body_bytes && st->cn &&
            st->cn->fd != MHD_INVALID_SOCKET) {
            /* A chunked body past the limit. The library cannot queue an
             * answer mid-body, so it goes out on the socket directly, at
             * once, and the connection ends (what the client still sends
             * is read and dropped for a moment, so that it sees the 413). */
            char msg[96];
            snprintf(msg, sizeof msg, "the request body is larger than %lld bytes", s->cfg.max_body_bytes);
            qac_metrics_request(s->metrics, qac_server_route(url, strcspn(url, "?#"), NULL), 413, 0);
            qac_gate_answer_close(s, st->cn->fd, 413, "payload_too_large", msg, st->rid, st->method, st->path, st->t0);
            return MHD_NO;
        }
        if (st->too_large || st->len + chunk > (size_t)s->cfg.max_body_bytes) {
            /* no socket to answer on (cannot happen with the gate): drop the
             * rest, unread into memory, and answer at the end */
            st->too_large = 1;
            free(st->buf);
            st->buf = NULL;
            st->len = st->cap = 0;
            st->discarded += chunk;
            return st->discarded > DISCARD_CAP ? MHD_NO : MHD_YES;
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
    /* The whole request is in. Only now does it take a slot: a slow body
     * holds a connection (bounded by the body deadline), never a slot. */
    set_phase(s, st->cn, PHASE_HANDLING);
    qac_http_response r;
    int method_ok;
    qac_route route = qac_server_route_method(url, strcspn(url, "?#"), method, NULL, &method_ok);
    if (st->too_large) {
        memset(&r, 0, sizeof r);
        qac_server_error(&r, 413, "payload_too_large", "the request body is larger than %lld bytes",
                         s->cfg.max_body_bytes);
        return early(s, c, st, route, &r);
    }
    qac_head_verdict bad_body;
    if (st->cn && qac_relay_body_error(st->cn->relay, st->cn->requests - st->cn->relay_base, &bad_body)) {
        /* its chunked body was faulty: the relay cut it there */
        memset(&r, 0, sizeof r);
        qac_server_error(&r, bad_body.status, bad_body.type, "%s", bad_body.message);
        return early(s, c, st, route, &r);
    }
    if (!is_reserved(route)) {
        int n = atomic_fetch_add(&hs_of(s)->handling, 1) + 1;
        st->counted = 1;
        if (n > s->cfg.max_concurrent) {
            memset(&r, 0, sizeof r);
            qac_server_error(&r, 429, "too_many_requests", "more than %d requests in flight; retry later",
                             s->cfg.max_concurrent);
            r.retry_after = 1;
            qac_metrics_request(s->metrics, route, r.status, 0);
            return send_response(s, c, st, &r, 0);
        }
    }
    qac_http_request req = {method, url, MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION),
                            st->buf ? st->buf : "", st->len, client_gone, st->cn};
    qac_server_handle(s, &req, &r);
    /* The next request, already read by the library, is known invalid
     * (pipelined): close after this answer, before the library parses it.
     * A client retries it on a new connection, where the gate answers it. */
    int close = st->cn && st->cn->bad_after && st->cn->requests >= st->cn->bad_after;
    st->open_answer = !close && r.status != 499 && !atomic_load(&s->draining) && !(st->cn && st->cn->reserve);
    return send_response(s, c, st, &r, close);
}

/* A later request on the connection has a chunked body: from here on the
 * library reads the connection through a relay. Called between requests,
 * on the connection's own thread, while the library is not reading: the
 * socket's descriptor is replaced under it by its end of the relay's pair
 * (the relay keeps a duplicate of the client's socket). */
static void relay_from_here(qac_server *s, conn *cn) {
    int tcp = fcntl(cn->fd, F_DUPFD_CLOEXEC, 0), lib_fd = -1;
    qac_relay *r = tcp >= 0 ? qac_relay_start(s, tcp, &lib_fd) : NULL;
    if (!r) { /* left as it is: the library reads the body */
        if (tcp >= 0) close(tcp);
        return;
    }
    if (dup2(lib_fd, cn->fd) < 0) { /* cannot happen with valid descriptors: the relay ends, and the connection */
        close(lib_fd);
        qac_relay_release(r);
        return;
    }
    fcntl(cn->fd, F_SETFD, FD_CLOEXEC);
    close(lib_fd);
    cn->relay = r;
    cn->relay_base = cn->requests;
    cn->untracked = 1;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    qac_server *s = cls;
    req_state *st = *con_cls;
    (void)c;
    if (!st) return;
    conn *cn = st->cn;
    /* The library keeps the connection for another request (its rule:
     * HTTP/1.1, no "close" either way). */
    int next = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK && st->client_keepalive && st->open_answer && cn;
    if (st->counted) atomic_fetch_sub(&hs_of(s)->handling, 1);
    set_phase(s, cn, PHASE_IDLE);
    free(st->buf);
    free(st);
    *con_cls = NULL;
    atomic_fetch_sub(&s->inflight, 1);
    if (cn && cn->relay) { /* the relay checks what comes next */
        qac_relay_request_done(cn->relay);
        return;
    }
    if (!next || atomic_load(&s->draining)) return;
    if (cn->bad_after || cn->untracked) return; /* the library holds what comes next */
    /* Has the library read exactly the requests so far? Then the next head
     * is unread in the socket; otherwise it holds pipelined bytes already. */
    long long used = qac_gate_consumed(cn->fd);
    if (used < 0 || (unsigned long long)used != cn->wire) return;
    int bad_after = 0, chunked = 0;
    pthread_mutex_lock(&hs_of(s)->mu);
    cn->waiting_next = 1;
    pthread_mutex_unlock(&hs_of(s)->mu);
    int r = qac_gate_next_head(s, cn->fd, &bad_after, &cn->bad, &chunked);
    pthread_mutex_lock(&hs_of(s)->mu);
    cn->waiting_next = 0;
    pthread_mutex_unlock(&hs_of(s)->mu);
    if (r < 0) cn->refused = 1;
    else if (r > 0 && chunked) relay_from_here(s, cn);
    else if (r > 0 && bad_after > 0) cn->bad_after = cn->requests + (unsigned)bad_after;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    qac_server *s = cls;
    http_state *hs = hs_of(s);
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        conn *cn = calloc(1, sizeof *cn);
        if (!cn) return;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        cn->fd = ci ? ci->connect_fd : MHD_INVALID_SOCKET;
        cn->since = qac_now();
        const union MHD_ConnectionInfo *ai = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        pthread_mutex_lock(&hs->mu);
        handoff_note *note = hs->notes && ai && ai->client_addr ? take_note(hs, cn->fd, ai->client_addr) : NULL;
        if (note) {
            cn->bad_after = note->bad_after;
            cn->bad = note->bad;
            cn->reserve = note->reserve;
            cn->relay = note->relay;
            if (cn->relay) cn->untracked = 1;
            free(note);
        }
        qac_peer_name(ai ? ai->client_addr : NULL, ai && ai->client_addr ? (ai->client_addr->sa_family == AF_INET6
                                                                              ? sizeof(struct sockaddr_in6)
                                                                              : sizeof(struct sockaddr_in))
                                                                        : 0,
                      cn->client, sizeof cn->client);
        cn->next = hs->conns;
        if (hs->conns) hs->conns->prev = cn;
        hs->conns = cn;
        pthread_mutex_unlock(&hs->mu);
        *socket_context = cn;
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn *cn = *socket_context;
        if (!cn) return;
        pthread_mutex_lock(&hs->mu);
        if (cn->prev) cn->prev->next = cn->next;
        else hs->conns = cn->next;
        if (cn->next) cn->next->prev = cn->prev;
        if (!cn->reaped && hs->live) hs->live--;
        pthread_mutex_unlock(&hs->mu);
        qac_relay_release(cn->relay);
        free(cn);
        *socket_context = NULL;
    }
}

/* Closes connections past their deadlines. shutdown() (not close) makes
 * the connection's own thread see end of file and clean up; the fd stays
 * MHD's until its close notification, which takes the same lock. */
static void *reaper_main(void *arg) {
    qac_server *s = arg;
    http_state *hs = hs_of(s);
    const qac_server_config *cfg = &s->cfg;
    pthread_mutex_lock(&hs->stop_mu);
    while (!hs->stop) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_nsec += 100 * 1000 * 1000;
        if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&hs->stop_cv, &hs->stop_mu, &dl);
        if (hs->stop) break;
        double now = qac_now();
        pthread_mutex_lock(&hs->mu);
        for (conn *cn = hs->conns; cn; cn = cn->next) {
            if (cn->reaped || cn->fd == MHD_INVALID_SOCKET) continue;
            double age = now - cn->since;
            int kill = 0;
            if (cn->phase == PHASE_HEAD) kill = age * 1000.0 > cfg->header_timeout_ms;
            else if (cn->phase == PHASE_BODY)
                kill = age * 1000.0 > cfg->body_timeout_ms ||
                       (cfg->min_body_rate > 0 && age > 2.0 && (double)cn->body_bytes < cfg->min_body_rate * age);
            else if (cn->phase == PHASE_IDLE) /* a keep-alive connection's next head */
                kill = age * 1000.0 > cfg->header_timeout_ms + cfg->idle_timeout_s * 1000.0;
            if (kill) {
                shutdown(cn->fd, SHUT_RDWR);
                cn->reaped = 1;
                if (hs->live) hs->live--;
            }
        }
        pthread_mutex_unlock(&hs->mu);
    }
    pthread_mutex_unlock(&hs->stop_mu);
    return NULL;
}

/* Called once the request line is parsed: keeps the target's length (MHD
 * hands the handler the path and the query separately). */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c) {
    qac_server *s = cls;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    conn *cn = ci ? ci->socket_context : NULL;
    if (cn) {
        pthread_mutex_lock(&hs_of(s)->mu);
        cn->uri_len = strlen(uri);
        pthread_mutex_unlock(&hs_of(s)->mu);
    }
    return NULL;
}

/* Paths are routed as sent: no percent-decoding, so "/health%00x" or
 * "/search%3fx" are not /health or /search. */
static size_t no_unescape(void *cls, struct MHD_Connection *c, char *s) {
    (void)cls;
    (void)c;
    return strlen(s);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    qac_server *s = cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t l = strlen(msg);
    while (l && (msg[l - 1] == '\n' || msg[l - 1] == '\r')) msg[--l] = '\0';
    qac_server_log(s, QAC_LOG_DEBUG, "libmicrohttpd: %s", msg);
}

/* Under mu: closes the connection that has waited longest for its next
 * request (none being sent), to free its slot. 1 if one was closed. */
static int reclaim_idle(http_state *hs) {
    conn *victim = NULL;
    for (conn *cn = hs->conns; cn; cn = cn->next) {
        if (cn->reaped || !cn->waiting_next || cn->fd == MHD_INVALID_SOCKET) continue;
        char ch;
        if (recv(cn->fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT) > 0) continue; /* a request is arriving */
        if (!victim || cn->since < victim->since) victim = cn;
    }
    if (!victim) return 0;
    shutdown(victim->fd, SHUT_RDWR); /* its thread sees end of file and closes it */
    victim->reaped = 1;
    if (hs->live) hs->live--;
    return 1;
}

/* A connection whose first head the gate found valid. At max_connections
 * an idle kept-alive connection makes room; past it the gate answers 503
 * itself (0 returned), except to /health and /metrics, which have a
 * reserve of their own (a connection let in there is closed after its
 * answer). */
static int handoff(void *user, int fd, const struct sockaddr *addr, unsigned addrlen, const char *path,
                   size_t path_len, int bad_after, const qac_head_verdict *bad, int chunked) {
    qac_server *s = user;
    http_state *hs = hs_of(s);
    unsigned cap = (unsigned)s->cfg.max_connections;
    int reserved = is_reserved(qac_server_route(path, path_len, NULL));
    pthread_mutex_lock(&hs->mu);
    if (hs->live >= cap) reclaim_idle(hs);
    int reserve = hs->live >= cap;
    int admit = !reserve || (reserved && hs->live < cap + RESERVED_CONNECTIONS);
    pthread_mutex_unlock(&hs->mu);
    /* the library's own count also holds connections closing but not yet
     * gone (its limit leaves room for RECLAIM_SLACK of them) */
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    if (!admit || (di && di->num_connections >= cap + RESERVED_CONNECTIONS + RECLAIM_SLACK)) return 0;
    /* A chunked body on the connection: the library reads it through a relay. */
    int lib_fd = fd;
    qac_relay *relay = chunked ? qac_relay_start(s, fd, &lib_fd) : NULL;
    if (relay) bad_after = 0; /* the relay finds faults in what follows, and answers them */
    handoff_note *note = (bad_after > 0 || reserve || relay) && addrlen <= sizeof note->peer ? calloc(1, sizeof *note)
                                                                                             : NULL;
    if (relay && !note) { /* nobody would hold its reference: the relay ends with the connection */
        close(lib_fd);
        qac_relay_release(relay);
        return 1;
    }
    fd = lib_fd;
    if (note) {
        note->fd = fd;
        memcpy(&note->peer, addr, addrlen);
        note->peerlen = (socklen_t)addrlen;
        note->at = qac_now();
        note->bad_after = bad_after > 0 ? (unsigned)bad_after : 0;
        if (bad_after > 0) note->bad = *bad;
        note->reserve = reserve;
        note->relay = relay;
        pthread_mutex_lock(&hs->mu);
        for (handoff_note **p = &hs->notes; *p;) { /* never claimed (the library dropped the connection) */
            handoff_note *n = *p;
            if (note->at - n->at > 10.0) {
                *p = n->next;
                qac_relay_release(n->relay);
                free(n);
            } else {
                p = &n->next;
            }
        }
        note->next = hs->notes;
        hs->notes = note;
        pthread_mutex_unlock(&hs->mu);
    }
    pthread_mutex_lock(&hs->mu);
    hs->live++; /* counted now: the library may announce it later */
    pthread_mutex_unlock(&hs->mu);
    if (MHD_add_connection(s->daemon, fd, addr, (socklen_t)addrlen) != MHD_YES) { /* fd closed */
        pthread_mutex_lock(&hs->mu);
        if (hs->live) hs->live--;
        handoff_note *n = note ? take_note(hs, fd, NULL) : NULL;
        pthread_mutex_unlock(&hs->mu);
        if (n) qac_relay_release(n->relay);
        free(n);
    }
    return 1;
}

static void http_free(qac_server *s) {
    http_state *hs = hs_of(s);
    if (!hs) return;
    qac_gate_stop(hs->gate);
    hs->gate = NULL;
    while (hs->notes) {
        handoff_note *n = hs->notes;
        hs->notes = n->next;
        qac_relay_release(n->relay);
        free(n);
    }
    pthread_mutex_lock(&hs->stop_mu);
    hs->stop = 1;
    pthread_cond_broadcast(&hs->stop_cv);
    pthread_mutex_unlock(&hs->stop_mu);
    pthread_join(hs->reaper, NULL);
    pthread_mutex_destroy(&hs->mu);
    pthread_mutex_destroy(&hs->stop_mu);
    pthread_cond_destroy(&hs->stop_cv);
    free(hs);
    s->http = NULL;
}

/* Once the library has closed every connection, each relay sends its last
 * bytes and ends (bounded by its flush and linger times). */
static void wait_relays(qac_server *s) {
    double end = qac_now() + 15.0;
    while (qac_relay_running(s) > 0 && qac_now() < end) {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* qac_server_free: drain, and after a timed-out drain wait for the
 * requests still running (a process that cannot wait exits instead). */
static void http_stop(qac_server *s) {
    qac_server_shutdown(s);
    if (s->http) { /* no new connections before the daemon goes */
        qac_gate_stop(hs_of(s)->gate);
        hs_of(s)->gate = NULL;
    }
    if (s->daemon) MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
    s->http_stop = NULL;
    wait_relays(s);
    http_free(s);
}

qac_status qac_server_listen(qac_server *s) {
    if (s->daemon) return qac_set_error(QAC_ERR_INVALID, "the server is already listening");
    http_state *hs = calloc(1, sizeof *hs);
    if (!hs) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&hs->mu, NULL);
    pthread_mutex_init(&hs->stop_mu, NULL);
    pthread_cond_init(&hs->stop_cv, NULL);
    s->http = hs;
    if (pthread_create(&hs->reaper, NULL, reaper_main, s) != 0) {
        pthread_mutex_destroy(&hs->mu);
        pthread_mutex_destroy(&hs->stop_mu);
        pthread_cond_destroy(&hs->stop_cv);
        free(hs);
        s->http = NULL;
        return qac_set_error(QAC_ERR_INTERNAL, "cannot start the connection reaper thread");
    }
    /* The daemon does not listen: the gate (srv_gate.c) accepts, checks
     * each connection's first head and passes it on with MHD_add_connection. */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC | MHD_USE_POLL |
                     MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET;
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, s, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)s->cfg.max_connections + RESERVED_CONNECTIONS + RECLAIM_SLACK,
        /* idle keep-alive connections are closed by qac_gate_next_head, or
         * by the reaper; the library's own timer must not fire in between */
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(s->cfg.idle_timeout_s + s->cfg.header_timeout_ms / 1000 + 2),
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_UNESCAPE_CALLBACK, no_unescape, s,
        MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
        /* Each connection's buffer. The gate refuses first heads past
         * max_head_bytes; later heads of a keep-alive connection past it
         * but inside this buffer get our JSON answer from first_call, past
         * the buffer the library's own. Pages are touched only as bytes
         * arrive. */
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)s->cfg.max_head_bytes * 8,
        /* thousands of mostly idle connection threads: small stacks */
        MHD_OPTION_THREAD_STACK_SIZE, (size_t)(1u << 20), MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s, MHD_OPTION_END);
    if (!d) {
        http_free(s);
        return qac_set_error(QAC_ERR_IO, "cannot start the HTTP library's daemon");
    }
    s->daemon = d;
    qac_status st = qac_gate_start(&hs->gate, s, handoff, s, &s->bound_port);
    if (st != QAC_OK) {
        MHD_stop_daemon(d);
        s->daemon = NULL;
        http_free(s);
        return st;
    }
    s->http_stop = http_stop; /* the caller announces the address (once) */
    return QAC_OK;
}

int qac_server_port(const qac_server *s) { return s->bound_port; }

qac_status qac_server_shutdown(qac_server *s) {
    if (!s || !s->daemon) return QAC_OK;
    if (s->drain_failed) return qac_set_error(QAC_ERR_BUSY, "the drain already timed out");
    struct MHD_Daemon *d = s->daemon;
    atomic_store(&s->draining, 1);
    qac_gate_stop(hs_of(s)->gate); /* stop accepting; in-flight requests go on */
    hs_of(s)->gate = NULL;
    double deadline = qac_now() + s->cfg.drain_timeout_ms / 1000.0;
    int left;
    while ((left = atomic_load(&s->inflight)) > 0 && qac_now() < deadline) {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (left > 0) {
        /* Stopping the daemon would join the threads still serving, for as
         * long as they take: leave them, the caller exits the process. */
        s->drain_failed = 1;
        qac_server_log(s, QAC_LOG_WARN, "drain timed out with %d requests in flight", left);
        return qac_set_error(QAC_ERR_BUSY, "drain timed out with %d requests in flight", left);
    }
    qac_server_log(s, QAC_LOG_INFO, "drained: no request in flight");
    MHD_stop_daemon(d);
    s->daemon = NULL;
    s->http_stop = NULL;
    wait_relays(s);
    http_free(s);
    return QAC_OK;
}
