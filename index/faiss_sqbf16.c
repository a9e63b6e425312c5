/* FAISS IndexScalarQuantizer with QT_bf16 and inner product, in FAISS's own
 * file layout (faiss/impl/index_write.cpp), written and read here: the
 * FAISS that qac links (Debian's 1.7.3) has no bf16 type, while FAISS
 * 1.9 and later read the file as their own (`faiss.read_index`). Codes are
 * rounded as FAISS's encode_bf16 rounds them, so the file is byte for byte
 * what FAISS's own add() and write_index() give for the same vectors. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "index_internal.h"
#include "qac_bf16.h"
#include "qac_util.h"

#define FAISS_QT_BF16 7          /* ScalarQuantizer::QT_bf16 */
#define FAISS_METRIC_IP 0        /* METRIC_INNER_PRODUCT */
#define FAISS_HEADER_DUMMY (1 << 20)
#define SQ_HEADER_BYTES 81       /* everything before the codes */

static void put(unsigned char **p, const void *v, size_t n) {
    memcpy(*p, v, n); /* FAISS writes host order; qac builds on little-endian hosts */
    *p += n;
}

qac_status qac_sqbf16_write_header(FILE *f, int dim, uint64_t ntotal) {
    unsigned char h[SQ_HEADER_BYTES], *p = h;
    int32_t d = dim, metric = FAISS_METRIC_IP, qtype = FAISS_QT_BF16, rangestat = 0;
    int64_t nt = (int64_t)ntotal, dummy = FAISS_HEADER_DUMMY;
    uint8_t trained = 1;
    float rangestat_arg = 0;
    uint64_t d64 = (uint64_t)dim, code_size = 2 * (uint64_t)dim, ntrained = 0, ncodes = code_size * ntotal;
    put(&p, "IxSQ", 4);
    put(&p, &d, 4), put(&p, &nt, 8), put(&p, &dummy, 8), put(&p, &dummy, 8), put(&p, &trained, 1);
    put(&p, &metric, 4);
    put(&p, &qtype, 4), put(&p, &rangestat, 4), put(&p, &rangestat_arg, 4), put(&p, &d64, 8);
    put(&p, &code_size, 8), put(&p, &ntrained, 8);
    put(&p, &ncodes, 8);
    if (fwrite(h, 1, sizeof h, f) != sizeof h) return qac_set_error(QAC_ERR_IO, "write SQbf16 index: %s", strerror(errno));
    return QAC_OK;
}

qac_status qac_sqbf16_write_rows(FILE *f, const float *x, uint64_t rows, int dim) {
    uint16_t buf[4096];
    size_t total = (size_t)rows * (size_t)dim;
    for (size_t i = 0; i < total;) {
        size_t n = total - i < 4096 ? total - i : 4096;
        for (size_t j = 0; j < n; j++) buf[j] = qac_bf16_from_float_faiss(x[i + j]);
        if (fwrite(buf, sizeof(uint16_t), n, f) != n)
            return qac_set_error(QAC_ERR_IO, "write SQbf16 index: %s", strerror(errno));
        i += n;
    }
    return QAC_OK;
}

qac_status qac_sqbf16_read(const char *path, int64_t want_n, int want_dim, uint16_t **codes) {
    *codes = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return qac_set_error(errno == ENOENT ? QAC_ERR_NOT_FOUND : QAC_ERR_IO, "open %s: %s", path, strerror(errno));
    unsigned char h[SQ_HEADER_BYTES];
    qac_status st = QAC_OK;
    if (fread(h, 1, sizeof h, f) != sizeof h) {
        fclose(f);
        return qac_set_error(QAC_ERR_FORMAT, "%s: truncated SQbf16 index", path);
    }
    int32_t d, metric, qtype;
    int64_t nt;
    uint8_t trained;
    uint64_t d64, code_size, ntrained, ncodes;
    memcpy(&d, h + 4, 4), memcpy(&nt, h + 8, 8), memcpy(&trained, h + 32, 1), memcpy(&metric, h + 33, 4);
    memcpy(&qtype, h + 37, 4), memcpy(&d64, h + 49, 8), memcpy(&code_size, h + 57, 8);
    memcpy(&ntrained, h + 65, 8), memcpy(&ncodes, h + 73, 8);
    if (memcmp(h, "IxSQ", 4) != 0 || qtype != FAISS_QT_BF16 || metric != FAISS_METRIC_IP || !trained)
        st = qac_set_error(QAC_ERR_FORMAT, "%s: not a FAISS SQbf16 inner-product index", path);
    else if (d != want_dim || nt != want_n || d64 != (uint64_t)d || code_size != 2 * (uint64_t)d || ntrained != 0 ||
             ncodes != code_size * (uint64_t)nt)
        st = qac_set_error(QAC_ERR_FORMAT, "%s: SQbf16 index has %lld x %d, manifest says %lld x %d", path,
                           (long long)nt, (int)d, (long long)want_n, want_dim);
    uint16_t *c = NULL;
    if (!st && !(c = qac_malloc_lines((size_t)ncodes))) {
        st = qac_set_error(QAC_ERR_NOMEM, "out of memory for %lld x %d bf16 codes", (long long)nt, (int)d);
    }
    if (!st && fread(c, 1, (size_t)ncodes, f) != (size_t)ncodes)
        st = qac_set_error(QAC_ERR_FORMAT, "%s: truncated SQbf16 index", path);
    if (!st && fgetc(f) != EOF) st = qac_set_error(QAC_ERR_FORMAT, "%s: trailing bytes after the SQbf16 codes", path);
    fclose(f);
    if (st) {
        free(c);
        return st;
    }
    *codes = c;
    return QAC_OK;
}
