/* The relay of connections that carry chunked bodies.
 *
 * libmicrohttpd 0.9.75 reads a chunked body by its own, looser rules, past
 * anything the gate can peek at: a bare LF ends a chunk line there, a
 * chunk size may be padded with any number of zeros (711 MB of wire
 * carried 177 KB of body), and a chunk-size line or a trailer section
 * longer than its buffer is answered with its own HTML 500 or 431. A
 * connection whose requests include a chunked body is therefore served
 * through a socket pair: the library reads one end, as if it were the
 * client, and this file's thread moves the bytes in between.
 *
 * Client to library, the relay reads the request stream as it comes:
 * each head is checked by qac_head_check (the gate's rules) and passed on
 * as it is; a Content-Length body is passed on as it is; a chunked body
 * goes through qac_chunked_feed (srv_head.c: CRLF only, bounded size
 * lines and digits, trailers within the head limit) and is passed on
 * re-framed, each run of data as one chunk with a short size line, its
 * trailers dropped (RFC 9110 6.5.1 lets a recipient discard them). Its
 * bytes on the wire, framing included, count against --max-body-bytes.
 * Library to client, bytes are copied as they are.
 *
 * Faults are answered in the JSON error family, in order:
 *   - a chunked body found faulty while it is relayed: the relay records
 *     the answer and the request's number (qac_relay_body_error), ends the
 *     body for the library with a last chunk, and that request's handler
 *     answers it with Connection: close (srv_http.c), after the answers to
 *     the requests before it;
 *   - a faulty head (or a body past the limit of a request not yet begun):
 *     nothing more goes to the library; once it has answered every request
 *     before (qac_relay_request_done counts them) and those answers are
 *     out, the relay answers it itself and closes.
 * The client's end of file goes on to the library (a request whose client
 * has gone is cancelled), and the library's close ends the relay once its
 * last bytes are out. A relay thread holds one reference and the
 * connection (srv_http.c) another; the server counts its running relays
 * and waits for them when it stops. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "srv_internal.h"
#include "qac_util.h"

#define RELAY_IO (64u << 10)     /* bytes moved per read, each way */
#define RELAY_FLUSH_S 5.0        /* the longest wait for a client to take the last answer */

typedef enum relay_phase { PHASE_HEAD = 0, PHASE_BODY_LENGTH, PHASE_BODY_CHUNKED, PHASE_STOPPED } relay_phase;

typedef struct bytes {
    char *p;
    size_t len, cap;
} bytes;

struct qac_relay {
    qac_server *s;
    int tcp, in, wake;     /* the client; our end of the pair; an eventfd */
    pthread_mutex_t mu;    /* guards the fields up to `phase` */
    int refs;
    unsigned done;         /* requests the library has finished */
    unsigned body_bad_at;  /* > 0: the chunked body of this request (1: the relay's first) is faulty */
    qac_head_verdict body_bad;
    /* The thread's own fields. */
    relay_phase phase;
    unsigned forwarded;    /* requests passed on whole (head and body) */
    unsigned long long left, wire; /* a Content-Length body's bytes to go; a chunked body's bytes so far */
    qac_chunked chunked;
    bytes from_client, to_lib, to_client;
    int head_error;        /* a request the relay answers itself, in head_bad */
    qac_head_verdict head_bad;
    char method[16], path[256]; /* of the request being read, for the access log */
    double since;          /* when its first byte came */
};

static void relay_unref(qac_relay *r) {
    pthread_mutex_lock(&r->mu);
    int last = --r->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (!last) return;
    pthread_mutex_destroy(&r->mu);
    close(r->wake);
    free(r->from_client.p);
    free(r->to_lib.p);
    free(r->to_client.p);
    free(r);
}

static int bytes_add(bytes *b, const void *p, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) return 0;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
    return 1;
}

static void bytes_take(bytes *b, size_t n) {
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
}

/* The method and path of the head at the start of buf, for the log. */
static void note_names(qac_relay *r, const char *buf, size_t len) {
    size_t m = 0;
    while (m < len && m + 1 < sizeof r->method && buf[m] != ' ' && buf[m] != '\r' && buf[m] != '\n') m++;
    snprintf(r->method, sizeof r->method, "%.*s", (int)m, buf);
    size_t p0 = m + 1, p = p0;
    while (p < len && p - p0 + 1 < sizeof r->path && !strchr(" ?#\r\n", buf[p])) p++;
    snprintf(r->path, sizeof r->path, "%.*s", p > p0 ? (int)(p - p0) : 1, p > p0 ? buf + p0 : "-");
}

/* A chunked body found faulty: the handler answers it (the library gets a
 * last chunk so that it hands the request over). */
static void body_fault(qac_relay *r, const qac_head_verdict *v) {
    pthread_mutex_lock(&r->mu);
    r->body_bad_at = r->forwarded + 1;
    r->body_bad = *v;
    pthread_mutex_unlock(&r->mu);
    bytes_add(&r->to_lib, "0\r\n\r\n", 5);
    r->phase = PHASE_STOPPED;
}

static void head_fault(qac_relay *r, const qac_head_verdict *v) {
    r->head_error = 1;
    r->head_bad = *v;
    r->phase = PHASE_STOPPED;
}

/* Reads what the client sent so far into bytes for the library; stops
 * while those pile up (the library reads at its pace). */
static void relay_parse(qac_relay *r) {
    const qac_server_config *cfg = &r->s->cfg;
    bytes *in = &r->from_client;
    while (in->len && r->phase != PHASE_STOPPED && r->to_lib.len < RELAY_IO) {
        if (r->phase == PHASE_HEAD) {
            qac_head_verdict v;
            if (r->since == 0) r->since = qac_now();
            note_names(r, in->p, in->len);
            qac_head_result h = qac_head_check(in->p, in->len, (size_t)cfg->max_head_bytes, QAC_HEAD_MAX_FIELDS, &v);
            if (h == QAC_HEAD_INCOMPLETE) return;
            if (h == QAC_HEAD_ERROR) {
                head_fault(r, &v);
                return;
            }
            if (v.content_length > (unsigned long long)cfg->max_body_bytes) { /* the library would say so too */
                qac_head_verdict big = {.status = 413, .type = "payload_too_large",
                                        .message = "the request body is larger than --max-body-bytes"};
                head_fault(r, &big);
                return;
            }
            bytes_add(&r->to_lib, in->p, v.head_len);
            bytes_take(in, v.head_len);
            r->wire = 0;
            if (v.chunked) {
                qac_chunked_init(&r->chunked, (size_t)cfg->max_head_bytes, QAC_HEAD_MAX_FIELDS);
                r->phase = PHASE_BODY_CHUNKED;
            } else if (v.content_length) {
                r->left = v.content_length;
                r->phase = PHASE_BODY_LENGTH;
            } else {
                r->forwarded++;
                r->since = 0;
            }
        } else if (r->phase == PHASE_BODY_LENGTH) {
            size_t n = in->len < r->left ? in->len : (size_t)r->left;
            bytes_add(&r->to_lib, in->p, n);
            bytes_take(in, n);
            if ((r->left -= n) == 0) {
                r->forwarded++;
                r->since = 0;
                r->phase = PHASE_HEAD;
            }
        } else {
            size_t used, off, n;
            qac_head_verdict v;
            qac_head_result c = qac_chunked_feed(&r->chunked, in->p, in->len, &used, &off, &n, &v);
            r->wire += used;
            if (c != QAC_HEAD_ERROR && r->wire > (unsigned long long)cfg->max_body_bytes) {
                v = (qac_head_verdict){.status = 413, .type = "payload_too_large",
                                       .message = "the chunked body is larger than --max-body-bytes on the wire "
                                                  "(its framing counts)"};
                c = QAC_HEAD_ERROR;
            }
            if (c == QAC_HEAD_ERROR) {
                body_fault(r, &v);
                return;
            }
            if (n) { /* one chunk of the library's: a short size line, the data */
                char line[24];
                int k = snprintf(line, sizeof line, "%zx\r\n", n);
                bytes_add(&r->to_lib, line, (size_t)k);
                bytes_add(&r->to_lib, in->p + off, n);
                bytes_add(&r->to_lib, "\r\n", 2);
            }
            bytes_take(in, used);
            if (c == QAC_HEAD_OK) { /* the last chunk, its trailers left out */
                bytes_add(&r->to_lib, "0\r\n\r\n", 5);
                r->forwarded++;
                r->since = 0;
                r->phase = PHASE_HEAD;
            }
        }
    }
}

/* Writes what it can of b to fd; 0 when fd is gone. */
static int flush_to(int fd, bytes *b) {
    while (b->len) {
        ssize_t n = send(fd, b->p, b->len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            bytes_take(b, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
    return 1;
}

/* Reads what fd has into b (at most RELAY_IO past what b holds): 1 data
 * or none yet, 0 end of file or an error. */
static int fill_from(int fd, bytes *b) {
    if (b->cap - b->len < RELAY_IO) {
        char *q = realloc(b->p, b->len + RELAY_IO);
        if (!q) return 0;
        b->p = q;
        b->cap = b->len + RELAY_IO;
    }
    ssize_t n = recv(fd, b->p + b->len, RELAY_IO, MSG_DONTWAIT);
    if (n > 0) {
        b->len += (size_t)n;
        return 1;
    }
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
}

/* Waits (a bounded time) until fd can take the rest of b. */
static void flush_all(int fd, bytes *b) {
    double end = qac_now() + RELAY_FLUSH_S;
    while (b->len && flush_to(fd, b)) {
        struct pollfd p = {fd, POLLOUT, 0};
        double left = end - qac_now();
        if (left <= 0 || poll(&p, 1, (int)(left * 1000) + 1) <= 0) return;
    }
}

/* Reads and drops the client's input for a moment (or to its end of file). */
static void linger(int fd) {
    char sink[4096];
    size_t dropped = 0;
    double end = qac_now() + 1.0;
    while (dropped < (1u << 20)) {
        struct pollfd p = {fd, POLLIN, 0};
        double left = end - qac_now();
        if (left <= 0 || poll(&p, 1, (int)(left * 1000) + 1) <= 0) return;
        ssize_t n = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return;
        if (n > 0) dropped += (size_t)n;
    }
}

static void *relay_main(void *arg) {
    qac_relay *r = arg;
    int client_open = 1, lib_open = 1, lib_eof_sent = 0;
    while (lib_open) {
        pthread_mutex_lock(&r->mu);
        unsigned done = r->done;
        pthread_mutex_unlock(&r->mu);
        /* A faulty head: answered once every request before it is, and its answer is out. */
        if (r->head_error && done >= r->forwarded && !r->to_client.len) {
            while (fill_from(r->in, &r->to_client) && r->to_client.len) flush_all(r->tcp, &r->to_client);
            flush_all(r->tcp, &r->to_client);
            char msg[256];
            snprintf(msg, sizeof msg, "%s", r->head_bad.message ? r->head_bad.message : "an invalid request");
            qac_gate_answer_close(r->s, r->tcp, r->head_bad.status, r->head_bad.type, msg, NULL, r->method, r->path,
                                  r->since > 0 ? r->since : qac_now());
            break;
        }
        if (!client_open && !r->to_lib.len && !lib_eof_sent) {
            shutdown(r->in, SHUT_WR); /* the client has gone: so has the library's client */
            lib_eof_sent = 1;
        }
        struct pollfd p[3] = {{r->tcp, 0, 0}, {r->in, 0, 0}, {r->wake, POLLIN, 0}};
        int want_client = client_open && r->phase != PHASE_STOPPED && r->to_lib.len < RELAY_IO &&
                          r->from_client.len < (size_t)r->s->cfg.max_head_bytes + RELAY_IO;
        if (want_client) p[0].events |= POLLIN;
        if (r->to_client.len) p[0].events |= POLLOUT;
        if (!r->to_client.len) p[1].events |= POLLIN;
        if (r->to_lib.len) p[1].events |= POLLOUT;
        if (poll(p, 3, 200) < 0 && errno != EINTR) break;
        if (p[2].revents & POLLIN) {
            uint64_t x;
            (void)!read(r->wake, &x, sizeof x);
        }
        if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
            if (!fill_from(r->in, &r->to_client)) lib_open = 0;
        }
        if (r->to_client.len && !flush_to(r->tcp, &r->to_client)) {
            client_open = 0;
            r->to_client.len = 0;
        }
        if (want_client && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
            if (!fill_from(r->tcp, &r->from_client)) client_open = 0;
            relay_parse(r);
        } else if (r->from_client.len) {
            relay_parse(r);
        }
        if (r->to_lib.len && !flush_to(r->in, &r->to_lib)) lib_open = 0;
        if (!client_open && !lib_open) break;
    }
    /* The library closed (its answer carried Connection: close, or it ended
     * the connection): its last bytes go out, then a lingering close, so
     * that unread input does not reset the connection before the client
     * has read them. */
    if (r->to_client.len) flush_all(r->tcp, &r->to_client);
    shutdown(r->tcp, SHUT_WR);
    linger(r->tcp);
    close(r->tcp);
    close(r->in);
    atomic_fetch_sub(&r->s->relays, 1);
    relay_unref(r);
    return NULL;
}

qac_relay *qac_relay_start(qac_server *s, int tcp, int *lib_fd) {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return NULL;
    qac_relay *r = calloc(1, sizeof *r);
    int wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (!r || wake < 0 || fcntl(pair[1], F_SETFL, fcntl(pair[1], F_GETFL) | O_NONBLOCK) != 0 ||
        fcntl(pair[0], F_SETFL, fcntl(pair[0], F_GETFL) | O_NONBLOCK) != 0 ||
        fcntl(tcp, F_SETFL, fcntl(tcp, F_GETFL) | O_NONBLOCK) != 0) {
        free(r);
        if (wake >= 0) close(wake);
        close(pair[0]);
        close(pair[1]);
        return NULL;
    }
    r->s = s;
    r->tcp = tcp;
    r->in = pair[0];
    r->wake = wake;
    r->refs = 2;
    pthread_mutex_init(&r->mu, NULL);
    atomic_fetch_add(&s->relays, 1);
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256u << 10);
    int err = pthread_create(&th, &attr, relay_main, r);
    pthread_attr_destroy(&attr);
    if (err) {
        atomic_fetch_sub(&s->relays, 1);
        pthread_mutex_destroy(&r->mu);
        close(wake);
        close(pair[0]);
        close(pair[1]);
        free(r);
        return NULL;
    }
    *lib_fd = pair[1];
    return r;
}

void qac_relay_request_done(qac_relay *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->done++;
    pthread_mutex_unlock(&r->mu);
    uint64_t one = 1;
    (void)!write(r->wake, &one, sizeof one);
}

int qac_relay_body_error(qac_relay *r, unsigned request, qac_head_verdict *v) {
    if (!r) return 0;
    pthread_mutex_lock(&r->mu);
    int bad = r->body_bad_at && r->body_bad_at == request;
    if (bad) *v = r->body_bad;
    pthread_mutex_unlock(&r->mu);
    return bad;
}

void qac_relay_release(qac_relay *r) {
    if (r) relay_unref(r);
}

int qac_relay_running(const qac_server *s) { return atomic_load(&((qac_server *)s)->relays); }
