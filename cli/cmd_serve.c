/* qac serve: load the model (and index), start the HTTP service, and drain
 * in-flight requests on SIGTERM / SIGINT before exiting 0 (1, at the drain
 * deadline, when requests had to be cut). All server
 * logging ends up here, on stderr. */
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cli.h"
#include "qac_index.h"
#include "qac_server.h"

static const char *level_names[] = {"debug", "info", "warn", "error"};

/* Where the server's log lines go: stderr, as text or one JSON object a
 * line, from any thread (one fprintf a line keeps lines whole). */
typedef struct serve_log {
    int min_level;
    int json;
} serve_log;

static void timestamp(char *ts, size_t cap) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    struct tm tm;
    gmtime_r(&now.tv_sec, &tm);
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts, cap, "%s.%03ldZ", base, now.tv_nsec / 1000000L);
}

static void log_stderr(void *user, qac_log_level level, const char *msg) {
    const serve_log *lg = user;
    if ((int)level < lg->min_level) return;
    char ts[48];
    timestamp(ts, sizeof ts);
    if (lg->json) {
        json_t *o = json_pack("{s:s,s:s,s:s}", "ts", ts, "level", level_names[level], "msg", msg);
        char *line = o ? json_dumps(o, JSON_COMPACT) : NULL;
        if (line) fprintf(stderr, "%s\n", line);
        free(line);
        json_decref(o);
        return;
    }
    fprintf(stderr, "%s qac serve %s: %s\n", ts, level_names[level], msg);
}

/* One line per answered request, at level info. */
static void log_access(void *user, const qac_access_entry *e) {
    const serve_log *lg = user;
    if (QAC_LOG_INFO < lg->min_level) return;
    char ts[48];
    timestamp(ts, sizeof ts);
    double ms = e->seconds * 1000.0;
    if (lg->json) {
        json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:s,s:i,s:I,s:f,s:s,s:s}", "ts", ts, "level", "info", "msg", "request",
                              "method", e->method, "path", e->path, "status", e->status, "bytes", (json_int_t)e->bytes,
                              "duration_ms", ms, "request_id", e->request_id, "client", e->client);
        char *line = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
        if (line) fprintf(stderr, "%s\n", line);
        free(line);
        json_decref(o);
        return;
    }
    fprintf(stderr, "%s qac serve info: request method=%s path=%s status=%d bytes=%llu duration_ms=%.3f request_id=%s "
            "client=%s\n", ts, e->method, e->path, e->status, e->bytes, ms, e->request_id, e->client);
}

static void *watchdog_main(void *arg) {
    int ms = *(const int *)arg;
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    fprintf(stderr, "qac serve: still running %d ms after the stop signal; exiting\n", ms);
    fflush(stderr);
    _exit(1);
    return NULL;
}

/* The stop signals. Threads that libraries start before main (OpenBLAS's)
 * do not block them, so the kernel may hand a SIGTERM to one of those: a
 * handler, not only sigwait, must catch it, or it kills the process. The
 * handler only wakes the main thread through a pipe. */
static int stop_pipe[2] = {-1, -1};
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig) {
    int saved = errno;
    stop_signal = sig;
    char c = 1;
    (void)!write(stop_pipe[1], &c, 1);
    errno = saved;
}

/* Thousands of connections need as many descriptors: lift the soft limit. */
static void raise_fd_limit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int qac_cmd_serve(int argc, char **argv) {
    int n_opts;
    const qac_opt *table = qac_server_opt_table(&n_opts);
    qac_opts o;
    int rc = qac_cli_parse(&o, "serve", "[--index DIR] [--bm25 DIR] [--model DIR] [--reranker DIR] [options]", table, n_opts, argc,
                           argv);
    if (rc) return rc < 0 ? 0 : rc;

    /* Block the stop signals before any thread of ours starts, so that
     * every one inherits the mask; the main thread takes them below. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (pipe2(stop_pipe, O_CLOEXEC) != 0) {
        fprintf(stderr, "qac serve: cannot create a pipe: %s\n", strerror(errno));
        qac_opts_free(&o);
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigfillset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    raise_fd_limit();

    static serve_log lg;
    const char *level = qac_opts_str(&o, "log-level"), *quiet = getenv("QAC_QUIET");
    lg.min_level = QAC_LOG_INFO;
    for (int i = 0; i < 4; i++)
        if (level && !strcmp(level, level_names[i])) lg.min_level = i;
    int level_given = 0; /* by flag, environment or file, not the default */
    for (int i = 0; i < o.n; i++)
        if (!strcmp(o.table[i].name, "log-level")) level_given = o.source[i] > QAC_SRC_DEFAULT;
    if (!level_given && quiet && *quiet && strcmp(quiet, "0")) lg.min_level = QAC_LOG_WARN;
    lg.json = !strcmp(qac_opts_str(&o, "log-format"), "json");
    qac_server_config cfg = {0};
    qac_server_backend be;
    qac_server_real *real = NULL;
    qac_server *srv = NULL;
    rc = 1;
    char buf[4096];
    /* the model the index was built with, unless one is named */
    char recorded[4096] = "";
    if (qac_opts_str(&o, "index") && qac_index_recorded_model(qac_opts_str(&o, "index"), recorded, sizeof recorded))
        qac_clear_error(); /* no readable manifest: opening the index says why */
    const char *model_dir = qac_cli_model_for_index(&o, "serve", recorded, buf, sizeof buf);
    if (!model_dir) goto fail;
    if (qac_server_config_from_opts(&cfg, &o)) goto fail;
    if (qac_server_real_open(&real, &be, model_dir, qac_opts_str(&o, "index"), qac_opts_str(&o, "bm25"),
                             qac_opts_str(&o, "device"), qac_opts_str(&o, "dtype"), (int)qac_opts_int(&o, "threads"),
                             qac_opts_str(&o, "verify"), qac_opts_bool(&o, "allow-model-mismatch"),
                             qac_opts_str(&o, "query-prompt"), qac_opts_str(&o, "passage-prompt"),
                             qac_opts_bool(&o, "allow-prompt-mismatch")))
        goto fail;
    const char *reranker = qac_opts_str(&o, "reranker");
    char rbuf[4096], rnote[4096 + 512];
    if (reranker) {
        if (qac_model_resolve(reranker, rbuf, sizeof rbuf, rnote, sizeof rnote)) goto fail;
        if (rnote[0]) log_stderr(&lg, QAC_LOG_INFO, rnote);
        if (qac_server_real_add_reranker(real, &be, rbuf, qac_opts_str(&o, "device"), qac_opts_str(&o, "dtype"),
                                         (int)qac_opts_int(&o, "threads")))
            goto fail;
    }
    if (qac_server_create(&srv, &cfg, &be, log_stderr, &lg)) goto fail;
    qac_server_set_access_log(srv, log_access, &lg);
    if (qac_server_listen(srv)) goto fail;
    if (be.text_unavailable) {
        char msg[700];
        snprintf(msg, sizeof msg, "return_text is disabled: %s", be.text_unavailable);
        log_stderr(&lg, QAC_LOG_WARN, msg);
    }
    if (be.prompt_warning) log_stderr(&lg, QAC_LOG_WARN, be.prompt_warning);
    if (be.encoder_note) log_stderr(&lg, QAC_LOG_WARN, be.encoder_note);
    if (!qac_opts_str(&o, "index"))
        log_stderr(&lg, QAC_LOG_WARN, "no --index: encode-only server (/search answers 422)");
    /* The port line is the start-up handshake scripts wait for, and the
     * one place the address is announced. */
    printf("qac serve: listening on http://%s:%d\n", cfg.host, qac_server_port(srv));
    fflush(stdout);

    pthread_sigmask(SIG_UNBLOCK, &stop, NULL);
    for (char c; read(stop_pipe[0], &c, 1) != 1;) { /* EINTR: the handler ran here */
    }
    int sig = stop_signal;
    log_stderr(&lg, QAC_LOG_INFO, sig == SIGTERM ? "SIGTERM: draining" : "SIGINT: draining");
    /* Whatever blocks the drain or the clean-up, the process ends on time. */
    static int watchdog_ms;
    watchdog_ms = cfg.drain_timeout_ms + 800;
    pthread_t wd;
    if (pthread_create(&wd, NULL, watchdog_main, &watchdog_ms) == 0) pthread_detach(wd);
    if (qac_server_shutdown(srv) != QAC_OK) {
        /* Requests were cut: do not wait for them (or free what they use). */
        fprintf(stderr, "qac serve: %s; exiting\n", qac_last_error());
        fflush(stderr);
        _exit(1);
    }
    rc = 0;
    goto done;
fail:
    rc = qac_cli_fail("serve");
done:
    qac_server_free(srv);
    qac_server_real_free(real);
    qac_server_config_clear(&cfg);
    qac_opts_free(&o);
    return rc;
}
