
#include "qac_util.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

double qac_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* stderr is one per process: whether its last progress line is still open
 * (a terminal line rewritten with '\r', not yet ended by '\n') */
static int progress_line_open;

void qac_progress_newline(void) {
    if (progress_line_open) fputc('\n', stderr);
    progress_line_open = 0;
}

void qac_progress_init(qac_progress_state *s, const char *unit) {
    memset(s, 0, sizeof *s);
    s->unit = unit ? unit : "items";
    s->start = s->last_print = qac_now();
    s->is_tty = isatty(2);
    s->quiet = qac_quiet();
}

int qac_quiet(void) {
    const char *q = getenv("QAC_QUIET");
    return q && *q && strcmp(q, "0") != 0;
}

static void fmt_secs(char *buf, size_t cap, double s) {
    if (s < 0 || s > 1e8) { snprintf(buf, cap, "?"); return; }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else if (t >= 60) snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, cap, "%lds", t);
}

void qac_progress_stderr(void *user, const char *phase, uint64_t done, uint64_t total) {
    qac_progress_state *s = user;
    if (s->quiet) return;
    double now = qac_now();
    int final = total && done >= total;
    if (strncmp(s->phase, phase, sizeof s->phase - 1) != 0) {
        /* a new phase: its clock starts at this report, so the rate counts
         * only the work after it (never 0/s for the work before) */
        qac_progress_newline();
        snprintf(s->phase, sizeof s->phase, "%s", phase);
        s->start = s->last_print = now;
        s->phase_start_done = done;
        s->final_printed = 0;
        if (!final) return;
    }
    if (final && s->final_printed) return;
    if (!final && now - s->last_print < (s->is_tty ? 0.5 : 5.0)) return;
    s->last_print = now;
    s->final_printed = final;
    /* "name/unit": this phase counts its own unit */
    const char *slash = strchr(phase, '/'), *unit = slash ? slash + 1 : s->unit;
    int name_len = slash ? (int)(slash - phase) : (int)strlen(phase);
    double el = now - s->start;
    double rate = el > 0 && done > s->phase_start_done ? (double)(done - s->phase_start_done) / el : 0;
    char rate_s[64] = "", eta[32] = "", elapsed[32], count[64];
    fmt_secs(elapsed, sizeof elapsed, el);
    if (rate > 0) snprintf(rate_s, sizeof rate_s, " %.1f %s/s", rate, unit);
    if (total && rate > 0 && !final) {
        char e[24];
        fmt_secs(e, sizeof e, (double)(total - done) / rate);
        snprintf(eta, sizeof eta, " ETA %s", e);
    }
    if (total)
        snprintf(count, sizeof count, "%llu/%llu %s (%.1f%%)", (unsigned long long)done, (unsigned long long)total,
                 unit, 100.0 * (double)(done < total ? done : total) / (double)total);
    else
        snprintf(count, sizeof count, "%llu %s", (unsigned long long)done, unit);
    fprintf(stderr, "%s[%.*s] %s%s elapsed %s%s%s", s->is_tty ? "\r" : "", name_len, phase, count, rate_s, elapsed,
            eta, s->is_tty && !final ? "    " : "\n");
    progress_line_open = s->is_tty && !final;
    fflush(stderr);
}

void qac_summary(const char *cmd, const char *fmt, ...) {
    if (qac_quiet()) return;
    qac_progress_newline();
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "qac %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
}

qac_status qac_atomic_open(qac_atomic_file *af, const char *path) {
    memset(af, 0, sizeof *af);
    af->path = strdup(path);
    if (!af->path || asprintf(&af->tmp_path, "%s.tmp.%ld", path, (long)getpid()) < 0) {
        free(af->path);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    af->f = fopen(af->tmp_path, "wb");
    if (!af->f) {
        qac_status st = qac_set_error(QAC_ERR_IO, "create %s: %s", af->tmp_path, strerror(errno));
        free(af->path);
        free(af->tmp_path);
        memset(af, 0, sizeof *af);
        return st;
    }
    return QAC_OK;
}

static void fsync_dir_of(const char *path) {
    char *copy = strdup(path);
    if (!copy) return;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(copy);
}

qac_status qac_atomic_commit(qac_atomic_file *af) {
    qac_status st = QAC_OK;
    if (fflush(af->f) != 0 || fsync(fileno(af->f)) != 0)
        st = qac_set_error(QAC_ERR_IO, "write %s: %s", af->tmp_path, strerror(errno));
    if (fclose(af->f) != 0 && !st)
        st = qac_set_error(QAC_ERR_IO, "close %s: %s", af->tmp_path, strerror(errno));
    af->f = NULL;
    if (!st && rename(af->tmp_path, af->path) != 0)
        st = qac_set_error(QAC_ERR_IO, "rename %s -> %s: %s", af->tmp_path, af->path, strerror(errno));
    if (st) unlink(af->tmp_path);
    else fsync_dir_of(af->path);
    free(af->path);
    free(af->tmp_path);
    memset(af, 0, sizeof *af);
    return st;
}

void qac_atomic_abort(qac_atomic_file *af) {
    if (!af || !af->tmp_path) return;
    if (af->f) fclose(af->f);
    unlink(af->tmp_path);
    free(af->path);
    free(af->tmp_path);
    memset(af, 0, sizeof *af);
}

qac_status qac_open_input(FILE **out, const char *path) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return qac_set_error(errno == ENOENT ? QAC_ERR_NOT_FOUND : QAC_ERR_IO, "open %s: %s", path,
                                 strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fclose(f);
        return qac_set_error(QAC_ERR_INVALID, "%s is a directory, not a file", path);
    }
    *out = f;
    return QAC_OK;
}

qac_status qac_open_text_input(FILE **out, const char *path) {
    FILE *f;
    qac_status st = qac_open_input(&f, path);
    if (st) return st;
    /* pread: the stream's position and buffer stay as they are, and a pipe
     * (--corpus <(zcat corpus.gz)), which cannot be peeked at, is read */
    unsigned char magic[2];
    if (pread(fileno(f), magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
        fclose(f);
        return qac_set_error(QAC_ERR_FORMAT,
                             "%s is gzip-compressed: decompress it first (gunzip -k %s); corpora, queries, qrels "
                             "and runs are read as plain text, which the index seeks into to show passages",
                             path, path);
    }
    *out = f;
    return QAC_OK;
}

qac_status qac_check_input(const char *path) {
    FILE *f;
    qac_status st = qac_open_input(&f, path);
    if (!st) fclose(f);
    return st;
}

/* The directory that would hold path ("." for a bare name). */
static void parent_of(char *buf, size_t cap, const char *path) {
    snprintf(buf, cap, "%s", path);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/') buf[--n] = '\0';
    char *slash = strrchr(buf, '/');
    if (!slash) snprintf(buf, cap, ".");
    else if (slash == buf) buf[1] = '\0';
    else *slash = '\0';
}

static qac_status writable_dir(const char *what, const char *dir) {
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return qac_set_error(QAC_ERR_NOT_FOUND, "%s: directory %s does not exist", what, dir);
    if (!S_ISDIR(sb.st_mode)) return qac_set_error(QAC_ERR_INVALID, "%s: %s is not a directory", what, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return qac_set_error(QAC_ERR_IO, "%s: cannot write in %s: %s", what, dir, strerror(errno));
    return QAC_OK;
}

qac_status qac_check_output_file(const char *path) {
    struct stat sb;
    if (!path || !*path) return qac_set_error(QAC_ERR_INVALID, "empty output path");
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return qac_set_error(QAC_ERR_INVALID, "%s is a directory: give the output file's name", path);
    char parent[4096];
    parent_of(parent, sizeof parent, path);
    return writable_dir(path, parent);
}

qac_status qac_check_output_dir(const char *path) {
    struct stat sb;
    if (!path || !*path) return qac_set_error(QAC_ERR_INVALID, "empty output path");
    if (stat(path, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode))
            return qac_set_error(QAC_ERR_INVALID, "%s exists and is not a directory: give a directory's name", path);
        return writable_dir(path, path);
    }
    /* created with its parents: the nearest existing ancestor must take it */
    char anc[4096];
    snprintf(anc, sizeof anc, "%s", path);
    do {
        char up[4096];
        parent_of(up, sizeof up, anc);
        if (!strcmp(up, anc)) break;
        snprintf(anc, sizeof anc, "%s", up);
    } while (stat(anc, &sb) != 0);
    return writable_dir(path, anc);
}

qac_status qac_read_file(const char *path, char **data, size_t *len) {
    *data = NULL;
    if (len) *len = 0;
    FILE *f;
    qac_status ost = qac_open_input(&f, path);
    if (ost) return ost;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (n < cap - 1) break;
        char *nb = realloc(buf, cap * 2);
        if (!nb) { free(buf); buf = NULL; break; }
        buf = nb;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf) return qac_set_error(QAC_ERR_NOMEM, "read %s: out of memory", path);
    if (err) {
        free(buf);
        return qac_set_error(QAC_ERR_IO, "read %s failed", path);
    }
    buf[n] = '\0';
    *data = buf;
    if (len) *len = n;
    return QAC_OK;
}

qac_status qac_mkdirs(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return qac_set_error(QAC_ERR_INVALID, "path too long: %s", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return qac_set_error(QAC_ERR_IO, "mkdir %s: %s", buf, strerror(errno));
            *p = c;
            if (!c) break;
        }
    }
    return QAC_OK;
}

qac_status qac_path_join(char *buf, size_t cap, const char *dir, const char *name) {
    int n = snprintf(buf, cap, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= cap) return qac_set_error(QAC_ERR_INVALID, "path too long: %s/%s", dir, name);
    return QAC_OK;
}

qac_status qac_default_model_dir(char *buf, size_t cap) {
    const char *m = getenv("QAC_MODEL"), *home = getenv("QAC_HOME"), *h = getenv("HOME");
    int n;
    if (m && *m) n = snprintf(buf, cap, "%s", m);
    else if (home && *home) n = snprintf(buf, cap, "%s/models/all-MiniLM-L6-v2", home);
    else n = snprintf(buf, cap, "%s/.local/share/qac/models/all-MiniLM-L6-v2", h ? h : ".");
    if (n < 0 || (size_t)n >= cap) return qac_set_error(QAC_ERR_INVALID, "model path too long");
    char cfg[4096];
    snprintf(cfg, sizeof cfg, "%s/config.json", buf);
    if (access(cfg, R_OK) != 0)
        return qac_set_error(QAC_ERR_NOT_FOUND,
                             "no model at %s (run scripts/setup.sh, or pass --model DIR / set QAC_MODEL)", buf);
    return QAC_OK;
}

qac_status qac_arena_put(char **arena, size_t *len, size_t *cap, const char *s, size_t *off) {
    size_t n = strlen(s) + 1;
    if (*len + n > *cap) {
        size_t nc = *cap ? *cap : 1 << 16;
        while (nc < *len + n) nc *= 2;
        char *na = realloc(*arena, nc);
        if (!na) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        *arena = na;
        *cap = nc;
    }
    memcpy(*arena + *len, s, n);
    *off = *len;
    *len += n;
    return QAC_OK;
}

void qac_crash_point(const char *name) {
    static atomic_int passes;
    const char *spec = getenv("QAC_TEST_CRASH");
    if (!spec) return;
    const char *colon = strrchr(spec, ':');
    size_t n = strlen(name);
    if (!colon || (size_t)(colon - spec) != n || strncmp(spec, name, n) != 0) return;
    if (atomic_fetch_add(&passes, 1) + 1 == atoi(colon + 1)) raise(SIGKILL);
}

/* Blocks this large are aligned to 2 MiB and offered to the kernel as huge
 * pages (where transparent huge pages are enabled only on request): the
 * encoder's activations and packed weights are read along strides of a
 * row (attention reads a head's keys and values 3 C floats apart), one 4 KiB
 * page a row, and with 4 KiB pages those reads wait on page walks. */
#define HUGE_FROM ((size_t)4 << 20)
#define HUGE_ALIGN ((size_t)2 << 20)

void *qac_malloc_lines(size_t bytes) {
    void *p = NULL;
#ifdef MADV_HUGEPAGE
    if (bytes >= HUGE_FROM) {
        if (posix_memalign(&p, HUGE_ALIGN, bytes) != 0) return NULL;
        (void)madvise(p, bytes, MADV_HUGEPAGE); /* a hint: failing is harmless */
        return p;
    }
#endif
    return posix_memalign(&p, 64, bytes ? bytes : 1) == 0 ? p : NULL;
}
