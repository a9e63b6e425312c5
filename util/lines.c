/* Plain or gzip text, one line at a time (util/qac_lines.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "qac_util.h"

#include "qac_lines.h"

struct qac_lines {
    gzFile gz;
    char *path, *buf;
    size_t cap;
    long lineno;
};

qac_status qac_lines_open(qac_lines **out, const char *path) {
    *out = NULL;
    qac_status cst = qac_check_input(path); /* a directory, by name */
    if (cst) return cst;
    gzFile gz = gzopen(path, "rb");
    if (!gz) return qac_set_error(errno == ENOENT ? QAC_ERR_NOT_FOUND : QAC_ERR_IO, "%s: %s", path,
                                  errno ? strerror(errno) : "cannot open");
    qac_lines *r = calloc(1, sizeof *r);
    if (r) r->path = strdup(path), r->cap = 1 << 16, r->buf = malloc(r->cap);
    if (!r || !r->path || !r->buf) {
        gzclose(gz);
        qac_lines_free(r);
        return qac_set_error(QAC_ERR_NOMEM, "%s: out of memory", path);
    }
    gzbuffer(gz, 1 << 17);
    r->gz = gz;
    *out = r;
    return QAC_OK;
}

qac_status qac_lines_next(qac_lines *r, const char **line, size_t *len, int *got) {
    *got = 0;
    size_t n = 0;
    for (;;) {
        if (r->cap - n < 2) {
            char *b = realloc(r->buf, r->cap * 2);
            if (!b) return qac_set_error(QAC_ERR_NOMEM, "%s:%ld: line too long for memory", r->path, r->lineno + 1);
            r->buf = b, r->cap *= 2;
        }
        if (!gzgets(r->gz, r->buf + n, (int)(r->cap - n > (1u << 30) ? (1u << 30) : r->cap - n))) {
            int err;
            const char *msg = gzerror(r->gz, &err);
            if (err != Z_OK && err != Z_BUF_ERROR)
                return qac_set_error(QAC_ERR_IO, "%s:%ld: read error: %s", r->path, r->lineno + 1, msg);
            if (!gzeof(r->gz)) return qac_set_error(QAC_ERR_IO, "%s:%ld: read error", r->path, r->lineno + 1);
            if (err == Z_BUF_ERROR)
                return qac_set_error(QAC_ERR_FORMAT, "%s:%ld: truncated gzip stream", r->path, r->lineno + 1);
            if (n == 0) return QAC_OK;
            break;
        }
        n += strlen(r->buf + n);
        if (n && r->buf[n - 1] == '\n') break;
    }
    while (n && (r->buf[n - 1] == '\n' || r->buf[n - 1] == '\r')) r->buf[--n] = '\0';
    r->lineno++;
    *line = r->buf, *len = n, *got = 1;
    return QAC_OK;
}

long qac_lines_lineno(const qac_lines *r) { return r->lineno; }

const char *qac_lines_path(const qac_lines *r) { return r->path; }

void qac_lines_free(qac_lines *r) {
    if (!r) return;
    if (r->gz) gzclose(r->gz);
    free(r->path);
    free(r->buf);
    free(r);
}
