/* A closed-loop HTTP/1.1 load generator for bench/serve_gpu (GPU machines
 * have no wrk): C connections, each its own thread and keep-alive
 * connection, each sending the next body as soon as the previous answer
 * is in. Latency is from the first byte sent to the last byte read.
 *   loadgen post HOST PORT PATH BODIES CONCURRENCY SECONDS
 *       bodies: one JSON body a line, sent in turn (each connection starts
 *       at its own offset); prints "requests N errors E rps R p50_ms ..
 *       p90_ms .. p99_ms .. mean_ms .." after a 1 s warm-up that is not
 *       counted
 *   loadgen get HOST PORT PATH        the body of a GET (exit 1 unless 200)
 *   loadgen wait HOST PORT SECONDS    until GET /health answers 200 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char *host, *port;

static int connect_to(void) {
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &ai) != 0) return -1;
    int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return fd;
}

static int send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) {
            if (w < 0 && errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

typedef struct conn {
    int fd;
    char *buf;
    size_t cap, len; /* bytes read and not yet consumed */
} conn;

static int fill(conn *c) {
    if (c->len == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 65536;
        char *b = realloc(c->buf, cap);
        if (!b) return -1;
        c->buf = b;
        c->cap = cap;
    }
    ssize_t r = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
    if (r < 0 && errno == EINTR) return 0;
    if (r <= 0) return -1;
    c->len += (size_t)r;
    return 0;
}

/* One response: its status, its body in *body (borrowed until the next
 * call), *close when the server ends the connection. -1 on a broken
 * connection or a response this client does not read (chunked). */
static int read_response(conn *c, const char **body, size_t *body_len, int *close_after) {
    char *end;
    for (;;) {
        end = c->len ? memmem(c->buf, c->len, "\r\n\r\n", 4) : NULL;
        if (end) break;
        if (fill(c)) return -1;
    }
    size_t head = (size_t)(end - c->buf) + 4;
    char hdr[16384];
    const size_t hl = head < sizeof hdr ? head : sizeof hdr - 1;
    memcpy(hdr, c->buf, hl);
    hdr[hl] = 0;
    int status = 0;
    if (sscanf(hdr, "HTTP/1.%*d %d", &status) != 1) return -1;
    long long clen = -1;
    *close_after = 0;
    for (char *save = NULL, *line = strtok_r(hdr, "\r\n", &save); line; line = strtok_r(NULL, "\r\n", &save)) {
        if (!strncasecmp(line, "Content-Length:", 15)) clen = atoll(line + 15);
        else if (!strncasecmp(line, "Connection:", 11) && strstr(line, "close")) *close_after = 1;
        else if (!strncasecmp(line, "Transfer-Encoding:", 18)) return -1;
    }
    if (clen < 0) return -1;
    while (c->len < head + (size_t)clen)
        if (fill(c)) return -1;
    *body = c->buf + head;
    *body_len = (size_t)clen;
    /* keep what follows (nothing, in a closed loop) */
    memmove(c->buf, c->buf + head + clen, c->len - head - (size_t)clen);
    c->len -= head + (size_t)clen;
    return status;
}

static char *request(const char *method, const char *path, const char *body, size_t *n) {
    size_t bl = body ? strlen(body) : 0, cap = 256 + strlen(path) + strlen(host) + bl;
    char *r = malloc(cap);
    int h = snprintf(r, cap,
                     "%s %s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                     method, path, host, port, bl);
    memcpy(r + h, body ? body : "", bl);
    *n = (size_t)h + bl;
    return r;
}

typedef struct worker {
    const char *path;
    char **bodies;
    int nbodies, offset;
    double t_start, t_end;
    double *lat;
    size_t nlat, cap;
    long errors;
} worker;

static void *run(void *arg) {
    worker *w = arg;
    conn c = {-1, NULL, 0, 0};
    for (int i = w->offset; now() < w->t_end; i++) {
        if (c.fd < 0 && (c.fd = connect_to()) < 0) {
            w->errors++;
            usleep(10000);
            continue;
        }
        size_t n;
        char *req = request("POST", w->path, w->bodies[i % w->nbodies], &n);
        const double t0 = now();
        const char *body;
        size_t blen;
        int close_after = 0;
        int status = send_all(c.fd, req, n) ? -1 : read_response(&c, &body, &blen, &close_after);
        const double t1 = now();
        free(req);
        if (status < 0 || close_after) {
            close(c.fd);
            c.fd = -1;
            c.len = 0;
        }
        if (t0 < w->t_start) continue; /* warm-up */
        if (status != 200) {
            w->errors++;
            continue;
        }
        if (w->nlat == w->cap) {
            w->cap = w->cap ? w->cap * 2 : 4096;
            w->lat = realloc(w->lat, w->cap * sizeof(double));
        }
        w->lat[w->nlat++] = t1 - t0;
    }
    if (c.fd >= 0) close(c.fd);
    free(c.buf);
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int do_get(const char *path, int quiet) {
    conn c = {connect_to(), NULL, 0, 0};
    if (c.fd < 0) return -1;
    size_t n;
    char *req = request("GET", path, NULL, &n);
    const char *body = NULL;
    size_t blen = 0;
    int close_after;
    int status = send_all(c.fd, req, n) ? -1 : read_response(&c, &body, &blen, &close_after);
    if (status == 200 && !quiet) fwrite(body, 1, blen, stdout);
    free(req);
    free(c.buf);
    close(c.fd);
    return status;
}

int main(int argc, char **argv) {
    if (argc >= 5 && !strcmp(argv[1], "get")) {
        host = argv[2], port = argv[3];
        return do_get(argv[4], 0) == 200 ? 0 : 1;
    }
    if (argc >= 5 && !strcmp(argv[1], "wait")) {
        host = argv[2], port = argv[3];
        const double end = now() + atof(argv[4]);
        while (now() < end) {
            if (do_get("/health", 1) == 200) return 0;
            usleep(200000);
        }
        fprintf(stderr, "loadgen: %s:%s did not answer /health\n", host, port);
        return 1;
    }
    if (argc < 8 || strcmp(argv[1], "post")) {
        fprintf(stderr, "usage: loadgen post HOST PORT PATH BODIES CONCURRENCY SECONDS | get HOST PORT PATH | "
                        "wait HOST PORT SECONDS\n");
        return 2;
    }
    host = argv[2], port = argv[3];
    const char *path = argv[4];
    const int conc = atoi(argv[6]);
    const double secs = atof(argv[7]);
    FILE *f = fopen(argv[5], "r");
    if (!f || conc < 1 || conc > 4096 || secs <= 0) {
        fprintf(stderr, "loadgen: bad arguments or unreadable %s\n", argv[5]);
        return 2;
    }
    int nb = 0, cap = 256;
    char **bodies = malloc(sizeof(char *) * cap), line[65536];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (!*line) continue;
        if (nb == cap) bodies = realloc(bodies, sizeof(char *) * (cap *= 2));
        bodies[nb++] = strdup(line);
    }
    fclose(f);
    if (!nb) return 2;
    worker *w = calloc((size_t)conc, sizeof *w);
    pthread_t *th = malloc(sizeof(pthread_t) * conc);
    const double t0 = now();
    for (int i = 0; i < conc; i++) {
        w[i] = (worker){path, bodies, nb, (int)((i * 7919L) % nb), t0 + 1.0, t0 + 1.0 + secs, NULL, 0, 0, 0};
        pthread_create(&th[i], NULL, run, &w[i]);
    }
    size_t total = 0;
    long errors = 0;
    for (int i = 0; i < conc; i++) {
        pthread_join(th[i], NULL);
        total += w[i].nlat;
        errors += w[i].errors;
    }
    double *all = malloc(sizeof(double) * (total ? total : 1)), sum = 0;
    size_t k = 0;
    for (int i = 0; i < conc; i++) {
        for (size_t j = 0; j < w[i].nlat; j++) sum += (all[k++] = w[i].lat[j]);
        free(w[i].lat);
    }
    qsort(all, total, sizeof(double), cmp_double);
#define PCT(p) (total ? all[(size_t)((double)(total - 1) * (p))] * 1e3 : 0.0)
    printf("requests %zu errors %ld rps %.1f p50_ms %.3f p90_ms %.3f p99_ms %.3f mean_ms %.3f\n", total, errors,
           total / secs, PCT(0.50), PCT(0.90), PCT(0.99), total ? sum / total * 1e3 : 0.0);
    free(all);
    for (int i = 0; i < nb; i++) free(bodies[i]);
    free(bodies), free(w), free(th);
    return 0;
}
