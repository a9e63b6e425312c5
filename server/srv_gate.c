/* The gate: qac's own listening socket, in front of libmicrohttpd.
 *
 * libmicrohttpd 0.9.75 answers the heads it cannot parse (malformed request
 * line or header, unsupported version, a head past its buffer, a bad
 * Content-Length) with HTML pages of its own, and has no hook to replace
 * them. So one thread accepts every connection, waits for its first request
 * head with recv(MSG_PEEK) (the bytes stay in the socket, unread), and runs
 * the strict checker of srv_head.c over it:
 *   - a valid head: the socket goes to the library (MHD_add_connection),
 *     which reads the head as if it had accepted the connection itself;
 *   - an invalid one: the gate answers in the JSON error family, closes its
 *     sending side and discards input for a moment (a lingering close, so
 *     that the client reads the answer rather than a reset);
 *   - none within header_timeout_ms of accept: closed, as before.
 * Why this and not the alternatives: a larger library buffer alone leaves
 * every syntax error in HTML; the library's hooks (URI log callback,
 * connection notifications) run before or during its parsing but cannot
 * answer; a proxy that relays every byte would put a copy and a thread hop
 * on the normal path; interposing the library's response functions would
 * hang on its internals. Peeking costs one recv per head and leaves the
 * library's parsing, keep-alive and pipelining as they were. Waiting heads
 * are held here with one epoll set, not in the library's connection
 * threads, so a slow head costs a socket and no thread.
 *
 * Later heads on a keep-alive connection: once a request is answered, its
 * connection thread (srv_http.c) checks whether the library has read
 * exactly the bytes of the requests so far (TCP's received count minus
 * what is still queued); if so the next head is still in the socket, and
 * qac_gate_next_head checks it the same way before the library reads it.
 * Requests pipelined behind a head in the bytes peeked are checked too:
 * the answer to the one before an invalid one carries Connection: close,
 * so that the library never parses it (and the client, retrying it on a
 * new connection, gets the gate's answer). A connection where a request
 * with a chunked body is seen (first, pipelined, or a later head) goes on
 * through a relay (srv_relay.c), which checks every byte that follows
 * before the library reads it. Bytes the library reads that were never
 * peeked (pipelined later, in one read with requests before them) are
 * left to it, with the framing checked again by the request handler
 * (qac_head_framing). */
#include <errno.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_received (Linux 4.1) */
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "srv_internal.h"
#include "qac_util.h"

#define LINGER_S 1.0                 /* how long an answered connection's input is discarded */
#define LINGER_MAX_BYTES (1u << 20)  /* or until this much was */
#define ACCEPT_PAUSE_S 0.05          /* out of file descriptors: retry accept after this */

typedef struct waiting {
    struct waiting *prev, *next;
    int fd;
    double deadline;
    int lingering;                   /* answered: in the linger list */
    size_t discarded;                /* bytes thrown away since */
    struct sockaddr_storage addr;
    socklen_t addrlen;
} waiting;

/* A FIFO: every entry of one list has the same timeout, so the first is
 * always the next to expire. */
typedef struct wlist {
    waiting *first, *last;
    int n;
} wlist;

struct qac_gate {
    qac_server *s;
    int listen_fd, epfd, wake_fd;
    pthread_t thread;
    wlist heads;                     /* waiting for a complete head */
    wlist linger;                    /* answered, discarding input */
    waiting *dead;                   /* closed in this round, freed after it */
    char *buf;                       /* max_head_bytes + 1, for peeks */
    size_t cap;
    double accept_paused_until;
    qac_gate_handoff_fn handoff;
    void *user;
    atomic_int stop;
};

static void wl_push(wlist *l, waiting *w) {
    w->prev = l->last;
    w->next = NULL;
    if (l->last) l->last->next = w;
    else l->first = w;
    l->last = w;
    l->n++;
}

static void wl_remove(wlist *l, waiting *w) {
    if (w->prev) w->prev->next = w->next;
    else l->first = w->next;
    if (w->next) w->next->prev = w->prev;
    else l->last = w->prev;
    w->prev = w->next = NULL;
    l->n--;
}

/* Takes w out of its list and the epoll set; freed once the round's
 * events (which may still name it) are handled. */
static void retire(qac_gate *g, wlist *l, waiting *w, int own_fd) {
    wl_remove(l, w);
    if (own_fd) {
        epoll_ctl(g->epfd, EPOLL_CTL_DEL, w->fd, NULL);
        close(w->fd);
    }
    w->fd = -1;
    w->next = g->dead;
    g->dead = w;
}

/* The method and path of a head that passed the checks ("-" otherwise). */
typedef struct head_names {
    char method[16], path[256];
} head_names;

static void names_of(const char *buf, const qac_head_verdict *v, head_names *h) {
    snprintf(h->method, sizeof h->method, "-");
    snprintf(h->path, sizeof h->path, "-");
    if (!v || !v->target_len) return;
    size_t ml = strcspn(buf, " ");
    if (ml < sizeof h->method) snprintf(h->method, sizeof h->method, "%.*s", (int)ml, buf);
    size_t pl = 0;
    while (pl < v->target_len && buf[v->target_off + pl] != '?' && buf[v->target_off + pl] != '#') pl++;
    snprintf(h->path, sizeof h->path, "%.*s", (int)pl, buf + v->target_off);
}

/* A JSON error with Connection: close, on a socket nobody else writes;
 * logged as a request of method / path (NULL: "-") from client. */
static void send_error(qac_server *s, int fd, int status, const char *type, const char *message,
                       const char *request_id, const head_names *names, const char *client, double since) {
    char rid[QAC_REQUEST_ID_CAP];
    if (!request_id) {
        qac_request_id(s, NULL, rid, sizeof rid);
        request_id = rid;
    }
    qac_http_response r;
    memset(&r, 0, sizeof r);
    qac_server_error(&r, status, type, "%s", message);
    char date[64] = "";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    char head[512];
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 %d %s\r\nDate: %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n%s"
                      "X-Request-Id: %s\r\nConnection: close\r\n\r\n",
                      r.status, qac_head_reason(r.status), date, r.body_len,
                      r.status == 503 ? "Retry-After: 1\r\n" : "", request_id);
    struct iovec iov[2] = {{head, (size_t)hl}, {r.body, r.body_len}};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = iov;
    msg.msg_iovlen = 2;
    /* A few hundred bytes: one call into a fresh socket's buffer; a kept-alive
     * one may still hold an unread answer, so wait for room, briefly. */
    double end = qac_now() + LINGER_S;
    while (msg.msg_iovlen) {
        ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd p = {fd, POLLOUT, 0};
            double left = end - qac_now();
            if (left <= 0 || poll(&p, 1, (int)(left * 1000) + 1) <= 0) break;
            continue;
        }
        if (n < 0) break;
        while (msg.msg_iovlen && (size_t)n >= msg.msg_iov->iov_len) {
            n -= (ssize_t)msg.msg_iov->iov_len;
            msg.msg_iov++;
            msg.msg_iovlen--;
        }
        if (msg.msg_iovlen) {
            msg.msg_iov->iov_base = (char *)msg.msg_iov->iov_base + n;
            msg.msg_iov->iov_len -= (size_t)n;
        }
    }
    qac_metrics_request(s->metrics, QAC_ROUTE_OTHER, r.status, 0);
    qac_server_access(s, names ? names->method : NULL, names ? names->path : NULL, r.status, r.body_len,
                      since > 0 ? qac_now() - since : 0, request_id, client);
    qac_http_response_clear(&r);
}

/* Reads and drops what the client still sends; closes at its end of file,
 * at the byte cap, or at the deadline (expire). */
static void linger_read(qac_gate *g, waiting *w) {
    for (;;) {
        ssize_t n = recv(w->fd, g->buf, g->cap, MSG_DONTWAIT);
        if (n > 0) {
            w->discarded += (size_t)n;
            if (w->discarded <= LINGER_MAX_BYTES) continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        } else if (n < 0 && errno == EINTR) {
            continue;
        }
        retire(g, &g->linger, w, 1);
        return;
    }
}

static void answer(qac_gate *g, waiting *w, int status, const char *type, const char *message,
                   const head_names *names) {
    char client[64];
    qac_peer_name((const struct sockaddr *)&w->addr, w->addrlen, client, sizeof client);
    send_error(g->s, w->fd, status, type, message, NULL, names, client,
               w->deadline - g->s->cfg.header_timeout_ms / 1000.0);
    shutdown(w->fd, SHUT_WR);
    wl_remove(&g->heads, w);
    w->lingering = 1;
    w->deadline = qac_now() + LINGER_S;
    wl_push(&g->linger, w);
    linger_read(g, w);
}

/* Reads the empty lines before a valid head (RFC 9112 2.2), so that the
 * library's head size is the head's size on the wire. */
static void skip_empty_lines(int fd, const char *peeked, size_t n) {
    size_t lead = 0;
    while (lead + 1 < n && peeked[lead] == '\r' && peeked[lead + 1] == '\n') lead += 2;
    char sink[2 * 8];
    if (lead && lead <= sizeof sink) (void)!recv(fd, sink, lead, MSG_DONTWAIT);
}

/* A chunked body that came with its head is checked too, as far as it
 * came: the library would answer its syntax errors in HTML. */
static int body_error(const char *buf, size_t n, const qac_head_verdict *v, const qac_server *s, qac_head_verdict *out) {
    size_t body_len;
    return v->chunked && qac_head_chunked(buf + v->head_len, n - v->head_len, (size_t)s->cfg.max_head_bytes,
                                          QAC_HEAD_MAX_FIELDS, &body_len, out) == QAC_HEAD_ERROR;
}

static void examine(qac_gate *g, waiting *w, uint32_t events) {
    ssize_t n = recv(w->fd, g->buf, g->cap, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        if (events & (EPOLLHUP | EPOLLERR)) retire(g, &g->heads, w, 1);
        return;
    }
    if (n <= 0) { /* gone before a whole head */
        retire(g, &g->heads, w, 1);
        return;
    }
    qac_head_verdict v;
    qac_head_result r = qac_head_check(g->buf, (size_t)n, (size_t)g->s->cfg.max_head_bytes, QAC_HEAD_MAX_FIELDS, &v);
    if (r == QAC_HEAD_ERROR) {
        answer(g, w, v.status, v.type, v.message, NULL);
    } else if (r == QAC_HEAD_OK) {
        qac_head_verdict cv;
        head_names names;
        names_of(g->buf, &v, &names);
        if (body_error(g->buf, (size_t)n, &v, g->s, &cv)) {
            answer(g, w, cv.status, cv.type, cv.message, &names);
            return;
        }
        if (atomic_load(&g->s->draining)) {
            answer(g, w, 503, "unavailable", "the server is shutting down", &names);
            return;
        }
        qac_head_verdict bad;
        int chunked = 0;
        int bad_after = qac_head_pipelined(g->buf, (size_t)n, &v, (size_t)g->s->cfg.max_head_bytes,
                                           QAC_HEAD_MAX_FIELDS, &bad, &chunked);
        epoll_ctl(g->epfd, EPOLL_CTL_DEL, w->fd, NULL);
        skip_empty_lines(w->fd, g->buf, (size_t)n);
        const char *path = g->buf + v.target_off;
        size_t plen = 0;
        while (plen < v.target_len && path[plen] != '?' && path[plen] != '#') plen++;
        if (g->handoff(g->user, w->fd, (const struct sockaddr *)&w->addr, w->addrlen, path, plen, bad_after, &bad,
                       chunked)) {
            retire(g, &g->heads, w, 0); /* the socket is the library's now */
            return;
        }
        struct epoll_event ev = {0};
        ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
        ev.data.ptr = w;
        epoll_ctl(g->epfd, EPOLL_CTL_ADD, w->fd, &ev);
        answer(g, w, 503, "unavailable", "too many open connections; retry later", &names);
    } else if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
        retire(g, &g->heads, w, 1); /* it will send no more: the head stays unfinished */
    }
}

static void accept_all(qac_gate *g) {
    for (;;) {
        waiting *w = calloc(1, sizeof *w);
        if (!w) return;
        w->addrlen = sizeof w->addr;
        int fd = accept4(g->listen_fd, (struct sockaddr *)&w->addr, &w->addrlen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            free(w);
            if (e == EINTR || e == ECONNABORTED) continue;
            if ((e == EMFILE || e == ENFILE) && g->heads.first) {
                retire(g, &g->heads, g->heads.first, 1); /* the oldest waiting head makes room */
                continue;
            }
            if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
                struct epoll_event ev = {0};
                ev.data.ptr = &g->listen_fd;
                epoll_ctl(g->epfd, EPOLL_CTL_MOD, g->listen_fd, &ev);
                g->accept_paused_until = qac_now() + ACCEPT_PAUSE_S;
            }
            return;
        }
        /* Full: the oldest waiting head (the likeliest to be a slow one) goes. */
        if (g->heads.n >= g->s->cfg.max_connections) retire(g, &g->heads, g->heads.first, 1);
        if (g->linger.n >= g->s->cfg.max_connections) retire(g, &g->linger, g->linger.first, 1);
        w->fd = fd;
        w->deadline = qac_now() + g->s->cfg.header_timeout_ms / 1000.0;
        struct epoll_event ev = {0};
        ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
        ev.data.ptr = w;
        if (epoll_ctl(g->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            close(fd);
            free(w);
            continue;
        }
        wl_push(&g->heads, w);
        examine(g, w, 0); /* the head often came with the connection: no epoll round */
    }
}

static void expire(qac_gate *g, double now) {
    while (g->heads.first && g->heads.first->deadline <= now) retire(g, &g->heads, g->heads.first, 1);
    while (g->linger.first && g->linger.first->deadline <= now) retire(g, &g->linger, g->linger.first, 1);
    if (g->accept_paused_until && now >= g->accept_paused_until) {
        g->accept_paused_until = 0;
        struct epoll_event ev = {0};
        ev.events = EPOLLIN;
        ev.data.ptr = &g->listen_fd;
        epoll_ctl(g->epfd, EPOLL_CTL_MOD, g->listen_fd, &ev);
    }
}

static int next_timeout_ms(const qac_gate *g, double now) {
    double next = now + 1.0;
    if (g->heads.first && g->heads.first->deadline < next) next = g->heads.first->deadline;
    if (g->linger.first && g->linger.first->deadline < next) next = g->linger.first->deadline;
    if (g->accept_paused_until && g->accept_paused_until < next) next = g->accept_paused_until;
    double ms = (next - now) * 1000.0;
    return ms <= 0 ? 0 : (int)ms + 1;
}

static void *gate_main(void *arg) {
    qac_gate *g = arg;
    struct epoll_event evs[64];
    while (!atomic_load(&g->stop)) {
        int n = epoll_wait(g->epfd, evs, 64, next_timeout_ms(g, qac_now()));
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == &g->listen_fd) {
                accept_all(g);
            } else if (p == &g->wake_fd) {
                uint64_t x;
                (void)!read(g->wake_fd, &x, sizeof x);
            } else {
                waiting *w = p;
                if (w->fd < 0) continue; /* retired earlier in this round */
                if (w->lingering) linger_read(g, w);
                else examine(g, w, evs[i].events);
            }
        }
        expire(g, qac_now());
        while (g->dead) {
            waiting *w = g->dead;
            g->dead = w->next;
            free(w);
        }
    }
    return NULL;
}

static void close_all(qac_gate *g, wlist *l) {
    while (l->first) retire(g, l, l->first, 1);
    while (g->dead) {
        waiting *w = g->dead;
        g->dead = w->next;
        free(w);
    }
}

static qac_status open_listener(qac_gate *g, const char *host, int port, int *port_out) {
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int gai = getaddrinfo(host, ps, &hints, &ai);
    if (gai) return qac_set_error(QAC_ERR_INVALID, "cannot resolve host '%s': %s", host, gai_strerror(gai));
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (ai->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
        /* A peeked head must fit in the receive buffer (accepted sockets
         * inherit it). Raised only when the default is too small, since
         * setting it turns off the kernel's receive-buffer autotuning. */
        int rcv = 0;
        socklen_t rl = sizeof rcv;
        int want = 4 * g->s->cfg.max_head_bytes;
        if (getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, &rl) == 0 && rcv < want)
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &want, sizeof want);
    }
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
        if (fd >= 0) close(fd);
        freeaddrinfo(ai);
        return qac_set_error(QAC_ERR_IO, "cannot listen on %s:%d (address in use, or not allowed)", host, port);
    }
    freeaddrinfo(ai);
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    *port_out = port;
    if (getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
        *port_out = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                                   : ((struct sockaddr_in *)&sa)->sin_port);
    g->listen_fd = fd;
    return QAC_OK;
}

qac_status qac_gate_start(qac_gate **out, qac_server *s, qac_gate_handoff_fn handoff, void *user, int *port_out) {
    qac_gate *g = calloc(1, sizeof *g);
    if (!g) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    g->s = s;
    g->handoff = handoff;
    g->user = user;
    g->listen_fd = g->epfd = g->wake_fd = -1;
    g->cap = (size_t)s->cfg.max_head_bytes + 1;
    g->buf = malloc(g->cap);
    qac_status st = g->buf ? open_listener(g, s->cfg.host, s->cfg.port, port_out)
                           : qac_set_error(QAC_ERR_NOMEM, "out of memory");
    if (st == QAC_OK) {
        g->epfd = epoll_create1(EPOLL_CLOEXEC);
        g->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        struct epoll_event ev = {0};
        ev.events = EPOLLIN;
        ev.data.ptr = &g->listen_fd;
        struct epoll_event wev = {0};
        wev.events = EPOLLIN;
        wev.data.ptr = &g->wake_fd;
        if (g->epfd < 0 || g->wake_fd < 0 || epoll_ctl(g->epfd, EPOLL_CTL_ADD, g->listen_fd, &ev) != 0 ||
            epoll_ctl(g->epfd, EPOLL_CTL_ADD, g->wake_fd, &wev) != 0 ||
            pthread_create(&g->thread, NULL, gate_main, g) != 0)
            st = qac_set_error(QAC_ERR_INTERNAL, "cannot start the connection gate");
    }
    if (st != QAC_OK) {
        if (g->listen_fd >= 0) close(g->listen_fd);
        if (g->epfd >= 0) close(g->epfd);
        if (g->wake_fd >= 0) close(g->wake_fd);
        free(g->buf);
        free(g);
        return st;
    }
    *out = g;
    return QAC_OK;
}

void qac_gate_stop(qac_gate *g) {
    if (!g) return;
    atomic_store(&g->stop, 1);
    uint64_t one = 1;
    (void)!write(g->wake_fd, &one, sizeof one);
    pthread_join(g->thread, NULL);
    close(g->listen_fd);
    close_all(g, &g->heads);
    close_all(g, &g->linger);
    close(g->epfd);
    close(g->wake_fd);
    free(g->buf);
    free(g);
}

long long qac_gate_consumed(int fd) {
    for (int tries = 0; tries < 3; tries++) {
        struct tcp_info a, b;
        socklen_t la = sizeof a, lb = sizeof b;
        int inq = 0;
        if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &a, &la) != 0 || ioctl(fd, FIONREAD, &inq) != 0 ||
            getsockopt(fd, IPPROTO_TCP, TCP_INFO, &b, &lb) != 0 || inq < 0)
            return -1;
        if (la < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof a.tcpi_bytes_received) return -1;
        /* unchanged around the queue length: no byte arrived in between */
        if (a.tcpi_bytes_received == b.tcpi_bytes_received) return (long long)(a.tcpi_bytes_received - (unsigned)inq);
    }
    return -1;
}

/* After an answer and SHUT_WR: reads and drops input for LINGER_S (or
 * LINGER_MAX_BYTES, or the client's end of file), so that closing does not
 * reset the connection before the client has read the answer. */
static void linger_blocking(int fd) {
    char sink[4096];
    size_t dropped = 0;
    double end = qac_now() + LINGER_S;
    for (;;) {
        double left = end - qac_now();
        if (left <= 0 || dropped > LINGER_MAX_BYTES) return;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, (int)(left * 1000) + 1) <= 0) return;
        ssize_t n = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return;
        if (n > 0) dropped += (size_t)n;
    }
}

static void answer_close(qac_server *s, int fd, int status, const char *type, const char *message,
                         const char *request_id, const head_names *names, double since) {
    struct sockaddr_storage peer;
    socklen_t pl = sizeof peer;
    char client[64];
    qac_peer_name(getpeername(fd, (struct sockaddr *)&peer, &pl) == 0 ? (struct sockaddr *)&peer : NULL, pl, client,
                  sizeof client);
    send_error(s, fd, status, type, message, request_id, names, client, since);
    shutdown(fd, SHUT_WR);
    linger_blocking(fd);
    shutdown(fd, SHUT_RD); /* the library reads end of file and closes */
}

void qac_gate_answer_close(qac_server *s, int fd, int status, const char *type, const char *message,
                           const char *request_id, const char *method, const char *path, double since) {
    head_names names;
    snprintf(names.method, sizeof names.method, "%s", method ? method : "-");
    snprintf(names.path, sizeof names.path, "%s", path ? path : "-");
    answer_close(s, fd, status, type, message, request_id, &names, since);
}

/* Answers a head found invalid on a connection the library serves (from
 * its thread, between requests), so that the library never parses it. */
static void refuse(qac_server *s, int fd, const char *buf, const qac_head_verdict *v) {
    head_names names;
    names_of(buf, v->target_len ? v : NULL, &names);
    answer_close(s, fd, v->status, v->type, v->message, NULL, &names, 0);
}

int qac_gate_next_head(qac_server *s, int fd, int *bad_after, qac_head_verdict *bad, int *chunked) {
    const qac_server_config *cfg = &s->cfg;
    size_t max_head = (size_t)cfg->max_head_bytes;
    char small[2048];
    char *buf = small;
    size_t cap = sizeof small;
    int result = 0, lowat = 1;
    double idle_end = qac_now() + cfg->idle_timeout_s;
    *bad_after = 0;
    *chunked = 0;
    for (;;) {
        struct pollfd p = {fd, POLLIN | POLLRDHUP, 0};
        int pr = poll(&p, 1, 200);
        if (atomic_load(&s->draining)) break; /* the library reads it and answers 503 */
        if (pr < 0 && errno != EINTR) break;
        if (pr <= 0) {
            if (lowat == 1 && qac_now() > idle_end) { /* idle: no byte of a next request */
                shutdown(fd, SHUT_RDWR);
                break;
            }
            continue;
        }
        ssize_t n = recv(fd, buf, cap, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0) break; /* closed */
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
            break;
        }
        qac_head_verdict v;
        qac_head_result r = qac_head_check(buf, (size_t)n, max_head, QAC_HEAD_MAX_FIELDS, &v);
        qac_head_verdict cv;
        if (r == QAC_HEAD_OK && body_error(buf, (size_t)n, &v, s, &cv)) {
            cv.target_off = v.target_off, cv.target_len = v.target_len;
            refuse(s, fd, buf, &cv);
            result = -1;
            break;
        }
        if (r == QAC_HEAD_OK) {
            *bad_after = qac_head_pipelined(buf, (size_t)n, &v, max_head, QAC_HEAD_MAX_FIELDS, bad, chunked);
            skip_empty_lines(fd, buf, (size_t)n);
            result = 1;
            break;
        }
        if (r == QAC_HEAD_ERROR) {
            v.target_len = 0;
            refuse(s, fd, buf, &v);
            result = -1;
            break;
        }
        if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) break; /* no more will come */
        if ((size_t)n == cap && cap < max_head + 1) { /* a large head: peek at all of it */
            char *big = malloc(max_head + 1);
            if (!big) break;
            buf = big;
            cap = max_head + 1;
            continue;
        }
        /* wake when more than what was seen is queued */
        lowat = (int)n + 1;
        setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof lowat);
    }
    if (lowat != 1) {
        lowat = 1;
        setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof lowat);
    }
    if (buf != small) free(buf);
    return result;
}
