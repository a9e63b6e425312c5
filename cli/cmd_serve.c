/* qac serve: load the model (and index), start the HTTP service, and drain
 * in-flight requests on SIGTERM / SIGINT before exiting 0 (1, at the drain
 * deadline, when requests had to be cut). All server
 * logging ends up here, on stderr. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "qac_server.h"

static const char *level_names[] = {"debug", "info", "warn", "error"};

static void log_stderr(void *user, qac_log_level level, const char *msg) {
    int min_level = *(const int *)user;
    if ((int)level < min_level) return;
    time_t now = time(NULL);
    struct tm tm;
    char ts[32];
    gmtime_r(&now, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    fprintf(stderr, "%s qac serve %s: %s\n", ts, level_names[level], msg);
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
    int rc = qac_cli_parse(&o, "serve", "[--index DIR] [--bm25 DIR] [--model DIR] [options]", table, n_opts, argc,
                           argv);
    if (rc) return rc < 0 ? 0 : rc;

    /* Block the stop signals before any thread starts, so that every thread
     * inherits the mask and only sigwait below sees them. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);
    raise_fd_limit();

    const char *quiet = getenv("QAC_QUIET");
    int min_level = quiet && *quiet && strcmp(quiet, "0") ? QAC_LOG_WARN : QAC_LOG_INFO;
    qac_server_config cfg = {0};
    qac_server_backend be;
    qac_server_real *real = NULL;
    qac_server *srv = NULL;
    rc = 1;
    char buf[4096];
    const char *model_dir = qac_cli_model_dir(&o, buf, sizeof buf);
    if (!model_dir) goto fail;
    if (qac_server_config_from_opts(&cfg, &o)) goto fail;
    if (qac_server_real_open(&real, &be, model_dir, qac_opts_str(&o, "index"), qac_opts_str(&o, "bm25"),
                             qac_opts_str(&o, "device"), qac_opts_str(&o, "dtype"), (int)qac_opts_int(&o, "threads"),
                             qac_opts_str(&o, "verify"), qac_opts_bool(&o, "allow-model-mismatch"),
                             qac_opts_str(&o, "query-prompt"), qac_opts_str(&o, "passage-prompt"),
                             qac_opts_bool(&o, "allow-prompt-mismatch")))
        goto fail;
    if (qac_server_create(&srv, &cfg, &be, log_stderr, &min_level)) goto fail;
    if (qac_server_listen(srv)) goto fail;
    if (be.text_unavailable) {
        char msg[700];
        snprintf(msg, sizeof msg, "return_text is disabled: %s", be.text_unavailable);
        log_stderr(&min_level, QAC_LOG_WARN, msg);
    }
    if (be.prompt_warning) log_stderr(&min_level, QAC_LOG_WARN, be.prompt_warning);
    if (!qac_opts_str(&o, "index"))
        log_stderr(&min_level, QAC_LOG_WARN, "no --index: encode-only server (/search answers 503)");
    /* The port line is the start-up handshake scripts wait for. */
    printf("qac serve: listening on http://%s:%d\n", cfg.host, qac_server_port(srv));
    fflush(stdout);

    int sig = 0;
    sigwait(&stop, &sig);
    log_stderr(&min_level, QAC_LOG_INFO, sig == SIGTERM ? "SIGTERM: draining" : "SIGINT: draining");
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
