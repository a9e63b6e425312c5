/* .qmat and .npy matrix files (format in api/qac_matrix.h). */
#include "qac_matrix.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "qac_util.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "matrix_io.c writes float32 rows in host order, which must be little-endian"
#endif

#define NPY_HEADER_SIZE 128
#define NPY_MAGIC "\x93NUMPY"

struct qac_matrix_writer {
    qac_atomic_file af;
    qac_matrix_format fmt;
    int dim;
    int64_t count;
};

qac_matrix_format qac_matrix_format_for_path(const char *path) {
    size_t n = strlen(path);
    return n >= 4 && strcmp(path + n - 4, ".npy") == 0 ? QAC_MATRIX_NPY : QAC_MATRIX_QMAT;
}

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* The header for the current count; both formats have a fixed size, so the
 * writer rewrites it in place when it closes. */
static size_t make_header(unsigned char *h, qac_matrix_format fmt, int64_t count, int dim) {
    if (fmt == QAC_MATRIX_QMAT) {
        memset(h, 0, QAC_MATRIX_HEADER_SIZE);
        memcpy(h, QAC_MATRIX_MAGIC, 8);
        put_u32(h + 8, QAC_MATRIX_VERSION);
        put_u32(h + 12, 0);
        put_u64(h + 16, (uint64_t)count);
        put_u32(h + 24, (uint32_t)dim);
        return QAC_MATRIX_HEADER_SIZE;
    }
    memcpy(h, NPY_MAGIC, 6);
    h[6] = 1;
    h[7] = 0;
    size_t dict_len = NPY_HEADER_SIZE - 10;
    h[8] = (unsigned char)(dict_len & 0xff); /* v1.0: uint16 little-endian header length */
    h[9] = (unsigned char)(dict_len >> 8);
    char dict[NPY_HEADER_SIZE];
    int n = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%" PRId64 ", %d), }",
                     count, dim);
    memset(h + 10, ' ', dict_len);
    memcpy(h + 10, dict, (size_t)n);
    h[NPY_HEADER_SIZE - 1] = '\n';
    return NPY_HEADER_SIZE;
}

qac_status qac_matrix_writer_open(qac_matrix_writer **out, const char *path, int dim) {
    *out = NULL;
    if (dim < 1) return qac_set_error(QAC_ERR_INVALID, "matrix %s: dimension %d must be >= 1", path, dim);
    qac_matrix_writer *w = calloc(1, sizeof *w);
    if (!w) return qac_set_error(QAC_ERR_NOMEM, "matrix %s: out of memory", path);
    w->fmt = qac_matrix_format_for_path(path);
    w->dim = dim;
    qac_status st = qac_atomic_open(&w->af, path);
    if (st != QAC_OK) {
        free(w);
        return st;
    }
    unsigned char h[NPY_HEADER_SIZE];
    size_t hn = make_header(h, w->fmt, 0, dim);
    if (fwrite(h, 1, hn, w->af.f) != hn) {
        st = qac_set_error(QAC_ERR_IO, "write %s: %s", path, strerror(errno));
        qac_matrix_writer_abort(w);
        return st;
    }
    *out = w;
    return QAC_OK;
}

qac_status qac_matrix_writer_append(qac_matrix_writer *w, const float *rows, int64_t n) {
    if (n < 0) return qac_set_error(QAC_ERR_INVALID, "matrix %s: negative row count", w->af.path);
    size_t k = (size_t)n * (size_t)w->dim;
    if (k && fwrite(rows, sizeof(float), k, w->af.f) != k)
        return qac_set_error(QAC_ERR_IO, "write %s: %s", w->af.tmp_path, strerror(errno));
    w->count += n;
    return QAC_OK;
}

int64_t qac_matrix_writer_count(const qac_matrix_writer *w) { return w->count; }

qac_status qac_matrix_writer_close(qac_matrix_writer *w) {
    unsigned char h[NPY_HEADER_SIZE];
    size_t hn = make_header(h, w->fmt, w->count, w->dim);
    qac_status st = QAC_OK;
    if (fseek(w->af.f, 0, SEEK_SET) != 0 || fwrite(h, 1, hn, w->af.f) != hn)
        st = qac_set_error(QAC_ERR_IO, "write %s: %s", w->af.tmp_path, strerror(errno));
    if (st == QAC_OK) {
        st = qac_atomic_commit(&w->af);
    } else {
        qac_atomic_abort(&w->af);
    }
    free(w);
    return st;
}

void qac_matrix_writer_abort(qac_matrix_writer *w) {
    if (!w) return;
    qac_atomic_abort(&w->af);
    free(w);
}

qac_status qac_matrix_write(const char *path, const float *data, int64_t count, int dim) {
    qac_matrix_writer *w;
    qac_status st = qac_matrix_writer_open(&w, path, dim);
    if (st != QAC_OK) return st;
    if ((st = qac_matrix_writer_append(w, data, count)) != QAC_OK) {
        qac_matrix_writer_abort(w);
        return st;
    }
    return qac_matrix_writer_close(w);
}

/* Parse the 2-D shape, dtype and order out of a .npy header dict. */
static qac_status parse_npy_dict(const char *path, const char *d, int64_t *count, int *dim) {
    const char *descr = strstr(d, "'descr'");
    const char *fo = strstr(d, "'fortran_order'");
    const char *shape = strstr(d, "'shape'");
    if (!descr || !fo || !shape) return qac_set_error(QAC_ERR_FORMAT, "%s: malformed .npy header", path);
    descr = strchr(descr + 7, '\'');
    if (!descr || strncmp(descr, "'<f4'", 5) != 0)
        return qac_set_error(QAC_ERR_UNSUPPORTED, "%s: only little-endian float32 ('<f4') .npy files are read", path);
    fo += strlen("'fortran_order'");
    while (*fo == ' ' || *fo == ':') fo++;
    if (strncmp(fo, "False", 5) != 0)
        return qac_set_error(QAC_ERR_UNSUPPORTED, "%s: Fortran-order .npy files are not read", path);
    const char *p = strchr(shape, '(');
    if (!p) return qac_set_error(QAC_ERR_FORMAT, "%s: malformed .npy shape", path);
    char *end;
    errno = 0;
    long long a = strtoll(p + 1, &end, 10);
    if (end == p + 1 || errno) return qac_set_error(QAC_ERR_FORMAT, "%s: malformed .npy shape", path);
    while (*end == ' ') end++;
    if (*end != ',') return qac_set_error(QAC_ERR_UNSUPPORTED, "%s: .npy array is not 2-D", path);
    const char *q = end + 1;
    long long b = strtoll(q, &end, 10);
    if (end == q || errno) return qac_set_error(QAC_ERR_UNSUPPORTED, "%s: .npy array is not 2-D", path);
    while (*end == ' ' || *end == ',') end++;
    if (*end != ')') return qac_set_error(QAC_ERR_UNSUPPORTED, "%s: .npy array is not 2-D", path);
    if (a < 0 || b < 1 || b > INT32_MAX)
        return qac_set_error(QAC_ERR_FORMAT, "%s: bad .npy shape (%lld, %lld)", path, a, b);
    *count = a;
    *dim = (int)b;
    return QAC_OK;
}

qac_status qac_matrix_read(const char *path, float **data, int64_t *count, int *dim) {
    *data = NULL;
    *count = 0;
    *dim = 0;
    FILE *f;
    qac_status ost = qac_open_input(&f, path);
    if (ost) return ost;
    struct stat sb;
    qac_status st = QAC_OK;
    unsigned char h[16];
    int64_t n = 0;
    int d = 0;
    long data_off = 0;
    if (fstat(fileno(f), &sb) != 0) {
        st = qac_set_error(QAC_ERR_IO, "stat %s: %s", path, strerror(errno));
        goto done;
    }
    if (fread(h, 1, 10, f) != 10) {
        st = qac_set_error(QAC_ERR_FORMAT, "%s: too short for a matrix header", path);
        goto done;
    }
    if (memcmp(h, QAC_MATRIX_MAGIC, 8) == 0) {
        unsigned char rest[QAC_MATRIX_HEADER_SIZE];
        memcpy(rest, h, 10);
        if (fread(rest + 10, 1, QAC_MATRIX_HEADER_SIZE - 10, f) != QAC_MATRIX_HEADER_SIZE - 10) {
            st = qac_set_error(QAC_ERR_FORMAT, "%s: truncated .qmat header", path);
            goto done;
        }
        uint32_t ver = get_u32(rest + 8), dtype = get_u32(rest + 12);
        uint64_t cnt = get_u64(rest + 16);
        uint32_t dm = get_u32(rest + 24);
        if (ver != QAC_MATRIX_VERSION) {
            st = qac_set_error(QAC_ERR_UNSUPPORTED, "%s: .qmat version %u (this build reads %u)", path, ver,
                               QAC_MATRIX_VERSION);
            goto done;
        }
        if (dtype != 0) {
            st = qac_set_error(QAC_ERR_UNSUPPORTED, "%s: .qmat dtype %u (only 0 = float32 is defined)", path, dtype);
            goto done;
        }
        if (dm < 1 || dm > INT32_MAX || cnt > (uint64_t)INT64_MAX / 4 / dm) {
            st = qac_set_error(QAC_ERR_FORMAT, "%s: bad .qmat shape (%" PRIu64 ", %u)", path, cnt, dm);
            goto done;
        }
        n = (int64_t)cnt;
        d = (int)dm;
        data_off = QAC_MATRIX_HEADER_SIZE;
    } else if (memcmp(h, NPY_MAGIC, 6) == 0) {
        size_t hl;
        if (h[6] == 1) {
            hl = (size_t)h[8] | (size_t)h[9] << 8;
            data_off = 10;
        } else if (h[6] == 2 || h[6] == 3) {
            unsigned char b2[2];
            if (fread(b2, 1, 2, f) != 2) {
                st = qac_set_error(QAC_ERR_FORMAT, "%s: truncated .npy header", path);
                goto done;
            }
            hl = (size_t)h[8] | (size_t)h[9] << 8 | (size_t)b2[0] << 16 | (size_t)b2[1] << 24;
            data_off = 12;
        } else {
            st = qac_set_error(QAC_ERR_UNSUPPORTED, "%s: .npy format version %d", path, h[6]);
            goto done;
        }
        if (hl > (1u << 20)) {
            st = qac_set_error(QAC_ERR_FORMAT, "%s: .npy header of %zu bytes", path, hl);
            goto done;
        }
        char *dict = malloc(hl + 1);
        if (!dict) {
            st = qac_set_error(QAC_ERR_NOMEM, "%s: out of memory", path);
            goto done;
        }
        if (fread(dict, 1, hl, f) != hl) {
            free(dict);
            st = qac_set_error(QAC_ERR_FORMAT, "%s: truncated .npy header", path);
            goto done;
        }
        dict[hl] = 0;
        st = parse_npy_dict(path, dict, &n, &d);
        free(dict);
        if (st != QAC_OK) goto done;
        if (n > INT64_MAX / 4 / d) {
            st = qac_set_error(QAC_ERR_FORMAT, "%s: .npy shape too large", path);
            goto done;
        }
        data_off += (long)hl;
    } else {
        st = qac_set_error(QAC_ERR_FORMAT, "%s: not a .qmat or .npy file (bad magic)", path);
        goto done;
    }
    uint64_t want = (uint64_t)data_off + (uint64_t)n * (uint64_t)d * 4;
    if ((uint64_t)sb.st_size != want) {
        st = qac_set_error(QAC_ERR_FORMAT, "%s: size %lld bytes, header says %" PRIu64 " (%" PRId64 " x %d)", path,
                           (long long)sb.st_size, want, n, d);
        goto done;
    }
    size_t k = (size_t)n * (size_t)d;
    float *buf = malloc(k ? k * sizeof(float) : 1);
    if (!buf) {
        st = qac_set_error(QAC_ERR_NOMEM, "%s: out of memory for %" PRId64 " x %d", path, n, d);
        goto done;
    }
    if (fseek(f, data_off, SEEK_SET) != 0 || fread(buf, sizeof(float), k, f) != k) {
        free(buf);
        st = qac_set_error(QAC_ERR_IO, "read %s: %s", path, strerror(errno));
        goto done;
    }
    *data = buf;
    *count = n;
    *dim = d;
done:
    fclose(f);
    return st;
}
