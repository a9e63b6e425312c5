/* The progress line (qac_progress_stderr) and the summary line: a phase's
 * first report starts its clock and prints nothing (no 0.0/s); on a
 * terminal the line is rewritten in place ('\r', at most every 0.5 s) with
 * a rate and an ETA, and the final line ends it once; off a terminal
 * progress comes as whole lines, the final one once; a summary first ends
 * a line left open; QAC_QUIET silences both. stderr is captured in a file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "qac_util.h"
#include "testutil.h"

static char cap_path[4096];
static int saved_fd = -1;

static void capture_begin(void) {
    fflush(stderr);
    saved_fd = dup(2);
    if (!freopen(cap_path, "w", stderr)) abort();
}

/* stop capturing; returns what was written (malloc'd) */
static char *capture_end(void) {
    fflush(stderr);
    dup2(saved_fd, 2);
    close(saved_fd);
    char *text = NULL;
    size_t len = 0;
    if (qac_read_file(cap_path, &text, &len) != QAC_OK) abort();
    return text;
}

static void nap(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

int main(void) {
    snprintf(cap_path, sizeof cap_path, "%s/stderr.txt", qac_test_tmpdir("progress"));
    unsetenv("QAC_QUIET");

    /* off a terminal: whole lines, the phase start silent, the final once */
    qac_progress_state ps;
    qac_progress_init(&ps, "passages");
    ps.is_tty = 0;
    capture_begin();
    qac_progress_stderr(&ps, "encode", 0, 100);
    nap(0.05);
    qac_progress_stderr(&ps, "encode", 40, 100);  /* inside the 5 s interval: nothing */
    qac_progress_stderr(&ps, "encode", 100, 100); /* final */
    qac_progress_stderr(&ps, "encode", 100, 100); /* the same final again: nothing */
    qac_progress_stderr(&ps, "add/vectors", 7, 7); /* a one-report phase: final, no rate to show */
    char *out = capture_end();
    fprintf(stderr, "off a terminal:\n%s", out);
    CHECK_MSG(count(out, "\n") == 2, "two lines (two final lines), got %d", count(out, "\n"));
    CHECK_MSG(!strchr(out, '\r'), "no carriage returns off a terminal");
    CHECK_MSG(count(out, "[encode] 100/100 passages (100.0%)") == 1, "the encode final line once");
    CHECK_MSG(!strstr(out, " 0.0 "), "no rate of 0.0");
    CHECK_MSG(strstr(out, "passages/s") && !strstr(out, "vectors/s"),
              "a rate where work was timed, none for the one-report phase");
    CHECK_MSG(strstr(out, "[add] 7/7 vectors (100.0%)"), "the phase's own unit after the slash");
    free(out);

    /* on a terminal: '\r' updates with rate and ETA, then one final line */
    qac_progress_init(&ps, "queries");
    ps.is_tty = 1;
    capture_begin();
    qac_progress_stderr(&ps, "search", 0, 100);
    nap(0.6);
    qac_progress_stderr(&ps, "search", 20, 100);
    qac_progress_stderr(&ps, "search", 25, 100); /* within 0.5 s of the last: nothing */
    nap(0.6);
    qac_progress_stderr(&ps, "search", 50, 100);
    qac_progress_newline(); /* the line is open: ends it */
    qac_progress_newline(); /* and only once */
    nap(0.6);
    qac_progress_stderr(&ps, "search", 70, 100); /* open again */
    qac_summary("search", "%d queries", 100); /* ends the open line before its own */
    qac_progress_stderr(&ps, "search", 100, 100);
    out = capture_end();
    fprintf(stderr, "on a terminal (\\r shown as |):\n");
    for (char *p = out; *p; p++) fputc(*p == '\r' ? '|' : *p, stderr);
    CHECK_MSG(count(out, "\r[search] ") == 4, "four in-place lines (3 updates, the final), got %d",
              count(out, "\r[search] "));
    CHECK_MSG(count(out, "ETA ") == 3, "the updates carry an ETA, the final none");
    CHECK_MSG(count(out, "queries/s") == 4, "every line after the start has a rate");
    CHECK_MSG(!strstr(out, " 0.0 "), "no rate of 0.0");
    CHECK_MSG(strstr(out, "(50.0%)") && !strstr(out, "(25.0%)"), "throttled to one line per 0.5 s");
    CHECK_MSG(count(out, "\n") == 4, "four line ends: newline()'s, the summary's two, the final line's; got %d",
              count(out, "\n"));
    CHECK_MSG(strstr(out, "  \nqac search: 100 queries\n"), "the summary starts on a line of its own");
    free(out);

    /* QAC_QUIET: neither progress nor summary */
    setenv("QAC_QUIET", "1", 1);
    qac_progress_init(&ps, "docs");
    capture_begin();
    qac_progress_stderr(&ps, "bm25", 0, 10);
    qac_progress_stderr(&ps, "bm25", 10, 10);
    qac_summary("bm25 build", "10 documents");
    out = capture_end();
    CHECK_MSG(out[0] == '\0', "quiet: nothing printed, got '%s'", out);
    free(out);
    return qac_test_summary();
}
