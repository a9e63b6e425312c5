/* Prometheus metrics: request counts by route and status, latency
 * histograms per route, batch size and token histograms, search batch
 * histograms, queue depth; the standard process metrics (read from /proc
 * as Prometheus' client libraries do) and a build-info metric. */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "srv_internal.h"

static const double lat_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
#define N_LAT (int)(sizeof lat_bounds / sizeof lat_bounds[0])
static const double size_bounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
#define N_SIZE (int)(sizeof size_bounds / sizeof size_bounds[0])
static const double tok_bounds[] = {16, 64, 256, 1024, 4096, 16384, 65536};
#define N_TOK (int)(sizeof tok_bounds / sizeof tok_bounds[0])

/* every status the server answers; 499: the client went away before the answer */
static const int codes[] = {200, 400, 401, 404, 405, 413, 414, 422, 424, 429, 431, 499, 500, 501, 503, 505};
#define N_CODES (int)(sizeof codes / sizeof codes[0])

typedef struct hist {
    unsigned long long buckets[16]; /* cumulative at render time */
    unsigned long long count;
    double sum;
} hist;

struct qac_metrics {
    pthread_mutex_t mu;
    unsigned long long requests[QAC_ROUTE_COUNT][N_CODES + 1]; /* last: any other code */
    hist latency[QAC_ROUTE_COUNT];
    hist batch_texts, batch_tokens, batch_seconds;
    hist search_queries, search_seconds;
    int queue_depth, inflight;
    int gpu_available;
};

static const char *route_paths[QAC_ROUTE_COUNT] = {"/",        "/search",     "/encode",  "/v1/embeddings",
                                                   "/tokenize", "/health",   "/info",    "/metrics",
                                                   "/embed",   "/embed_all", "/decode",  "/v1/models", "/rerank",
                                                   "/v1/rerank", "other"};

const char *qac_route_path(qac_route r) { return r >= 0 && r < QAC_ROUTE_COUNT ? route_paths[r] : "other"; }

qac_status qac_metrics_create(qac_metrics **out) {
    qac_metrics *m = calloc(1, sizeof *m);
    if (!m) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&m->mu, NULL);
    *out = m;
    return QAC_OK;
}

void qac_metrics_gpu(qac_metrics *m, int available) { m->gpu_available = available; }

void qac_metrics_free(qac_metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static void observe(hist *h, const double *bounds, int nb, double v) {
    for (int i = 0; i < nb; i++)
        if (v <= bounds[i]) {
            h->buckets[i]++;
            break;
        }
    h->count++;
    h->sum += v;
}

void qac_metrics_request(qac_metrics *m, qac_route r, int status, double seconds) {
    if (!m) return;
    if (r < 0 || r >= QAC_ROUTE_COUNT) r = QAC_ROUTE_OTHER;
    int ci = N_CODES;
    for (int i = 0; i < N_CODES; i++)
        if (codes[i] == status) ci = i;
    pthread_mutex_lock(&m->mu);
    m->requests[r][ci]++;
    observe(&m->latency[r], lat_bounds, N_LAT, seconds);
    pthread_mutex_unlock(&m->mu);
}

void qac_metrics_batch(qac_metrics *m, int texts, int tokens, double seconds) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    observe(&m->batch_texts, size_bounds, N_SIZE, texts);
    observe(&m->batch_tokens, tok_bounds, N_TOK, tokens);
    observe(&m->batch_seconds, lat_bounds, N_LAT, seconds);
    pthread_mutex_unlock(&m->mu);
}

void qac_metrics_search_batch(qac_metrics *m, int queries, double seconds) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    observe(&m->search_queries, size_bounds, N_SIZE, queries);
    observe(&m->search_seconds, lat_bounds, N_LAT, seconds);
    pthread_mutex_unlock(&m->mu);
}

void qac_metrics_queue_depth(qac_metrics *m, int depth) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->queue_depth = depth;
    pthread_mutex_unlock(&m->mu);
}

void qac_metrics_inflight(qac_metrics *m, int inflight) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->inflight = inflight;
    pthread_mutex_unlock(&m->mu);
}

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (w < 0) {
            b->oom = 1;
            return;
        }
        if ((size_t)w < b->cap - b->len) {
            b->len += (size_t)w;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)w + 1;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

static void render_hist(sbuf *b, const char *name, const char *labels, const hist *h, const double *bounds,
                        int nb) {
    unsigned long long cum = 0;
    const char *sep = *labels ? "," : "";
    for (int i = 0; i < nb; i++) {
        cum += h->buckets[i];
        sb_printf(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, bounds[i], cum);
    }
    sb_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep, h->count);
    if (*labels) {
        sb_printf(b, "%s_sum{%s} %.9g\n%s_count{%s} %llu\n", name, labels, h->sum, name, labels, h->count);
    } else {
        sb_printf(b, "%s_sum %.9g\n%s_count %llu\n", name, h->sum, name, h->count);
    }
}

/* The process_* family of Prometheus' client libraries, from /proc/self
 * (Linux); what cannot be read is left out. */
static void render_process(sbuf *b) {
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    size_t got = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[got] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    unsigned long long utime = 0, stime = 0, start = 0, vsize = 0;
    long long rss = 0;
    long ticks = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    /* after ")": state (3), ... utime (14), stime (15), starttime (22), vsize (23), rss (24) */
    int have = p && ticks > 0 && page > 0 &&
               sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d %*d %llu %llu %lld",
                      &utime, &stime, &start, &vsize, &rss) == 5;
    if (have) {
        sb_printf(b, "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
                     "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total %.15g\n",
                  (double)(utime + stime) / (double)ticks);
        sb_printf(b, "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
                     "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes %lld\n",
                  rss * (long long)page);
        sb_printf(b, "# HELP process_virtual_memory_bytes Virtual memory size in bytes.\n"
                     "# TYPE process_virtual_memory_bytes gauge\nprocess_virtual_memory_bytes %llu\n",
                  vsize);
        unsigned long long btime = 0;
        FILE *sf = fopen("/proc/stat", "r");
        char line[256];
        while (sf && fgets(line, sizeof line, sf))
            if (sscanf(line, "btime %llu", &btime) == 1) break;
        if (sf) fclose(sf);
        if (btime)
            sb_printf(b, "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n"
                         "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %.15g\n",
                      (double)btime + (double)start / (double)ticks);
    }
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        long long fds = 0;
        for (struct dirent *e; (e = readdir(d));)
            if (e->d_name[0] != '.' && atoi(e->d_name) != dirfd(d)) fds++; /* not the listing's own */
        closedir(d);
        sb_printf(b, "# HELP process_open_fds Number of open file descriptors.\n"
                     "# TYPE process_open_fds gauge\nprocess_open_fds %lld\n",
                  fds);
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        sb_printf(b, "# HELP process_max_fds Maximum number of open file descriptors.\n"
                     "# TYPE process_max_fds gauge\nprocess_max_fds %llu\n",
                  (unsigned long long)rl.rlim_cur);
}

#ifdef QAC_HAVE_CUDA
#define BUILD_CUDA "yes"
#else
#define BUILD_CUDA "no"
#endif
#if defined(__clang__)
#define BUILD_COMPILER "clang " __clang_version__
#elif defined(__GNUC__)
#define BUILD_COMPILER "gcc " __VERSION__
#else
#define BUILD_COMPILER "unknown"
#endif

char *qac_metrics_render(qac_metrics *m) {
    sbuf b = {malloc(4096), 0, 4096, 0};
    if (!b.p) return NULL;
    b.p[0] = '\0';
    pthread_mutex_lock(&m->mu);
    sb_printf(&b, "# HELP qac_http_requests_total HTTP requests by route and status code.\n"
                  "# TYPE qac_http_requests_total counter\n");
    for (int r = 0; r < QAC_ROUTE_COUNT; r++)
        for (int c = 0; c <= N_CODES; c++) {
            if (!m->requests[r][c]) continue;
            if (c < N_CODES)
                sb_printf(&b, "qac_http_requests_total{route=\"%s\",code=\"%d\"} %llu\n", route_paths[r], codes[c],
                          m->requests[r][c]);
            else
                sb_printf(&b, "qac_http_requests_total{route=\"%s\",code=\"other\"} %llu\n", route_paths[r],
                          m->requests[r][c]);
        }
    sb_printf(&b, "# HELP qac_http_request_duration_seconds Time from the last body byte to the response.\n"
                  "# TYPE qac_http_request_duration_seconds histogram\n");
    for (int r = 0; r < QAC_ROUTE_COUNT; r++) {
        if (!m->latency[r].count) continue;
        char labels[64];
        snprintf(labels, sizeof labels, "route=\"%s\"", route_paths[r]);
        render_hist(&b, "qac_http_request_duration_seconds", labels, &m->latency[r], lat_bounds, N_LAT);
    }
    sb_printf(&b, "# HELP qac_batch_size Texts per encoder call.\n# TYPE qac_batch_size histogram\n");
    render_hist(&b, "qac_batch_size", "", &m->batch_texts, size_bounds, N_SIZE);
    sb_printf(&b, "# HELP qac_batch_tokens Tokens per encoder call.\n# TYPE qac_batch_tokens histogram\n");
    render_hist(&b, "qac_batch_tokens", "", &m->batch_tokens, tok_bounds, N_TOK);
    sb_printf(&b, "# HELP qac_batch_duration_seconds Time of one encoder call.\n"
                  "# TYPE qac_batch_duration_seconds histogram\n");
    render_hist(&b, "qac_batch_duration_seconds", "", &m->batch_seconds, lat_bounds, N_LAT);
    sb_printf(&b, "# HELP qac_search_batch_size Queries per dense index search call.\n"
                  "# TYPE qac_search_batch_size histogram\n");
    render_hist(&b, "qac_search_batch_size", "", &m->search_queries, size_bounds, N_SIZE);
    sb_printf(&b, "# HELP qac_search_batch_duration_seconds Time of one dense index search call.\n"
                  "# TYPE qac_search_batch_duration_seconds histogram\n");
    render_hist(&b, "qac_search_batch_duration_seconds", "", &m->search_seconds, lat_bounds, N_LAT);
    sb_printf(&b, "# HELP qac_queue_depth Requests waiting for the encoder.\n# TYPE qac_queue_depth gauge\n"
                  "qac_queue_depth %d\n",
              m->queue_depth);
    sb_printf(&b, "# HELP qac_inflight_requests Requests being served.\n# TYPE qac_inflight_requests gauge\n"
                  "qac_inflight_requests %d\n",
              m->inflight);
    pthread_mutex_unlock(&m->mu);
    render_process(&b);
    sb_printf(&b, "# HELP qac_build_info The build: version, cuda (yes: CUDA compiled in), compiler (value 1).\n"
                  "# TYPE qac_build_info gauge\nqac_build_info{version=\"%s\",cuda=\"%s\",compiler=\"%s\"} 1\n",
              QAC_VERSION_STRING, BUILD_CUDA, BUILD_COMPILER);
    sb_printf(&b, "# HELP qac_cuda_gpu_available 1 when CUDA is compiled in and a usable GPU was found "
                  "(as qac --version says).\n# TYPE qac_cuda_gpu_available gauge\nqac_cuda_gpu_available %d\n",
              m->gpu_available);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
