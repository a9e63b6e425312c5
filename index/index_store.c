/* Embedding shards: the resumable unit of `qac index build`. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "index_internal.h"
#include "qac_safetensors.h"
#include "qac_util.h"

uint64_t qac_index_hash64(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    size_t words = n / 8;
    for (size_t i = 0; i < words; i++) {
        uint64_t w;
        memcpy(&w, p + 8 * i, 8);
        h = (h ^ w) * 0x100000001b3ULL;
    }
    for (size_t i = words * 8; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

qac_status qac_index_hash_file(const char *path, uint64_t *sum, uint64_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return qac_set_error(errno == ENOENT ? QAC_ERR_NOT_FOUND : QAC_ERR_IO, "open %s: %s", path, strerror(errno));
    enum { CHUNK = 1 << 20 }; /* a multiple of 8: chunks chain like one call */
    char *buf = malloc(CHUNK);
    if (!buf) {
        fclose(f);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    uint64_t h = QAC_HASH64_INIT, n = 0;
    size_t got;
    while ((got = fread(buf, 1, CHUNK, f)) > 0) {
        h = qac_index_hash64(h, buf, got);
        n += got;
    }
    int bad = ferror(f);
    free(buf);
    fclose(f);
    if (bad) return qac_set_error(QAC_ERR_IO, "read %s: %s", path, strerror(errno));
    *sum = h;
    if (size) *size = n;
    return QAC_OK;
}

static size_t elsize(uint32_t dtype) { return dtype == QAC_DTYPE_F16 ? 2 : 4; }

/* fwrite that also folds the bytes into the running checksum. */
static int put(FILE *f, uint64_t *h, const void *p, size_t n) {
    *h = qac_index_hash64(*h, p, n);
    return fwrite(p, 1, n, f) == n ? 0 : -1;
}

qac_status qac_shard_write(const char *path, uint32_t dtype, int dim, uint64_t first_row, uint64_t count,
                           const float *vectors, const char *const *docids, const uint64_t *offsets,
                           const int64_t *lines, const uint8_t *cut, uint64_t *checksum) {
    qac_atomic_file af;
    qac_status st = qac_atomic_open(&af, path);
    if (st) return st;
    qac_shard_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, QAC_SHARD_MAGIC, 8);
    h.version = QAC_SHARD_VERSION;
    h.dtype = dtype;
    h.count = count;
    h.dim = (uint32_t)dim;
    h.first_row = first_row;
    h.flags = cut ? QAC_SHARD_CUT : 0;
    /* header first with a zero checksum, patched after the payload */
    int bad = fwrite(&h, sizeof h, 1, af.f) != 1;
    uint64_t sum = QAC_HASH64_INIT;
    size_t nv = (size_t)count * (size_t)dim;
    if (dtype == QAC_DTYPE_F16) {
        uint16_t buf[4096];
        for (size_t i = 0; i < nv && !bad; i += 4096) {
            size_t m = nv - i < 4096 ? nv - i : 4096;
            for (size_t j = 0; j < m; j++) buf[j] = qac_f32_to_f16(vectors[i + j]);
            bad = put(af.f, &sum, buf, m * 2) != 0;
        }
    } else if (!bad) bad = put(af.f, &sum, vectors, nv * 4) != 0;
    if (!bad) fflush(af.f);
    qac_crash_point("shard_partial"); /* vectors on disk, ids and checksum not yet */
    if (!bad) bad = put(af.f, &sum, offsets, count * 8) != 0;
    if (!bad) bad = put(af.f, &sum, lines, count * 8) != 0;
    if (!bad && cut) bad = put(af.f, &sum, cut, count) != 0;
    /* lengths and bytes each hashed as one segment, exactly as the reader does */
    uint32_t *lens = malloc(count * 4 + 1);
    size_t blob = 0;
    for (uint64_t i = 0; lens && i < count; i++) blob += (lens[i] = (uint32_t)strlen(docids[i]));
    char *bytes = lens ? malloc(blob + 1) : NULL;
    if (!bytes) {
        free(lens);
        qac_atomic_abort(&af);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory writing %s", path);
    }
    for (uint64_t i = 0, pos = 0; i < count; pos += lens[i], i++) memcpy(bytes + pos, docids[i], lens[i]);
    if (!bad) bad = put(af.f, &sum, lens, count * 4) != 0;
    if (!bad) bad = put(af.f, &sum, bytes, blob) != 0;
    free(lens);
    free(bytes);
    h.checksum = sum;
    if (!bad) bad = fseek(af.f, 0, SEEK_SET) != 0 || fwrite(&h, sizeof h, 1, af.f) != 1;
    if (bad) {
        st = qac_set_error(QAC_ERR_IO, "write %s: %s", path, strerror(errno));
        qac_atomic_abort(&af);
        return st;
    }
    if ((st = qac_atomic_commit(&af))) return st;
    *checksum = sum;
    return QAC_OK;
}

static qac_status check_header(const char *path, const qac_shard_header *h, uint64_t file_size,
                               uint64_t *payload_fixed) {
    if (memcmp(h->magic, QAC_SHARD_MAGIC, 8) != 0)
        return qac_set_error(QAC_ERR_FORMAT, "%s: not a qac embedding shard (bad magic)", path);
    if (h->version != QAC_SHARD_VERSION)
        return qac_set_error(QAC_ERR_FORMAT, "%s: shard version %u, this qac reads %u", path, h->version,
                             QAC_SHARD_VERSION);
    if ((h->dtype != QAC_DTYPE_F32 && h->dtype != QAC_DTYPE_F16) || h->dim == 0 || h->dim > 65536 ||
        h->count > ((uint64_t)1 << 40) || (h->flags & ~QAC_SHARD_CUT))
        return qac_set_error(QAC_ERR_FORMAT, "%s: corrupt shard header", path);
    uint64_t fixed = h->count * ((uint64_t)h->dim * elsize(h->dtype) + 8 + 8 + 4 + (h->flags & QAC_SHARD_CUT ? 1 : 0));
    if (file_size < sizeof *h + fixed)
        return qac_set_error(QAC_ERR_FORMAT, "%s: truncated shard (%llu bytes, need at least %llu)", path,
                             (unsigned long long)file_size, (unsigned long long)(sizeof *h + fixed));
    *payload_fixed = fixed;
    return QAC_OK;
}

qac_status qac_shard_peek(const char *path, qac_shard_header *h) {
    FILE *f = fopen(path, "rb");
    if (!f) return qac_set_error(errno == ENOENT ? QAC_ERR_NOT_FOUND : QAC_ERR_IO, "open %s: %s", path,
                                 strerror(errno));
    struct stat sb;
    int ok = fstat(fileno(f), &sb) == 0 && fread(h, sizeof *h, 1, f) == 1;
    fclose(f);
    if (!ok) return qac_set_error(QAC_ERR_FORMAT, "%s: truncated shard header", path);
    uint64_t fixed;
    return check_header(path, h, (uint64_t)sb.st_size, &fixed);
}

void qac_shard_free(qac_shard *s) {
    if (!s) return;
    free(s->vectors);
    free(s->offsets);
    free(s->lines);
    free(s->cut);
    free(s->docids);
    free(s->docid_mem);
    memset(s, 0, sizeof *s);
}

qac_status qac_shard_read(const char *path, uint64_t want_checksum, qac_shard *out) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return qac_set_error(errno == ENOENT ? QAC_ERR_NOT_FOUND : QAC_ERR_IO, "open %s: %s", path,
                                 strerror(errno));
    qac_status st = QAC_OK;
    struct stat sb;
    qac_shard_header h;
    uint64_t fixed = 0;
    uint32_t *lens = NULL;
    void *raw = NULL;
    if (fstat(fileno(f), &sb) != 0 || fread(&h, sizeof h, 1, f) != 1) {
        st = qac_set_error(QAC_ERR_FORMAT, "%s: truncated shard header", path);
        goto done;
    }
    if ((st = check_header(path, &h, (uint64_t)sb.st_size, &fixed))) goto done;
    uint64_t n = h.count, blob = (uint64_t)sb.st_size - sizeof h - fixed;
    size_t nv = (size_t)n * h.dim;
    out->count = n;
    out->first_row = h.first_row;
    out->dim = (int)h.dim;
    out->checksum = h.checksum;
    out->vectors = malloc(nv * 4 + 1);
    out->offsets = malloc(n * 8 + 1);
    out->lines = malloc(n * 8 + 1);
    if (h.flags & QAC_SHARD_CUT) out->cut = malloc(n + 1);
    out->docids = malloc(n * sizeof(char *) + 1);
    out->docid_mem = malloc(blob + n + 1);
    lens = malloc(n * 4 + 1);
    /* fp32 rows are read straight into the vectors; fp16 ones through a
     * buffer that is converted (one pass and one set of pages fewer) */
    const int f16 = h.dtype == QAC_DTYPE_F16;
    if (f16) raw = malloc(nv * 2 + 1);
    void *vec_in = f16 ? raw : (void *)out->vectors;
    if (!out->vectors || !out->offsets || !out->lines || !out->docids || !out->docid_mem || !lens || !vec_in ||
        (h.flags & QAC_SHARD_CUT && !out->cut)) {
        st = qac_set_error(QAC_ERR_NOMEM, "%s: out of memory reading shard", path);
        goto done;
    }
    char *tmp = malloc(blob + 1);
    if (!tmp) {
        st = qac_set_error(QAC_ERR_NOMEM, "%s: out of memory reading shard", path);
        goto done;
    }
    if (fread(vec_in, elsize(h.dtype), nv, f) != nv || fread(out->offsets, 8, n, f) != n ||
        fread(out->lines, 8, n, f) != n || (out->cut && fread(out->cut, 1, n, f) != n) || fread(lens, 4, n, f) != n ||
        fread(tmp, 1, blob, f) != blob) {
        free(tmp);
        st = qac_set_error(QAC_ERR_FORMAT, "%s: truncated shard", path);
        goto done;
    }
    uint64_t sum = QAC_HASH64_INIT;
    sum = qac_index_hash64(sum, vec_in, nv * elsize(h.dtype));
    sum = qac_index_hash64(sum, out->offsets, n * 8);
    sum = qac_index_hash64(sum, out->lines, n * 8);
    if (out->cut) sum = qac_index_hash64(sum, out->cut, n);
    sum = qac_index_hash64(sum, lens, n * 4);
    sum = qac_index_hash64(sum, tmp, blob);
    if (sum != h.checksum || (want_checksum && sum != want_checksum)) {
        free(tmp);
        st = qac_set_error(QAC_ERR_FORMAT, "%s: checksum mismatch (corrupt shard)", path);
        goto done;
    }
    uint64_t pos = 0;
    char *dst = out->docid_mem;
    for (uint64_t i = 0; i < n; i++) {
        if (lens[i] > blob - pos) {
            free(tmp);
            st = qac_set_error(QAC_ERR_FORMAT, "%s: docid lengths exceed the shard", path);
            goto done;
        }
        memcpy(dst, tmp + pos, lens[i]);
        dst[lens[i]] = '\0';
        out->docids[i] = dst;
        dst += lens[i] + 1;
        pos += lens[i];
    }
    free(tmp);
    if (f16)
        for (size_t i = 0; i < nv; i++) out->vectors[i] = qac_f16_to_f32(((uint16_t *)raw)[i]);
done:
    fclose(f);
    free(lens);
    free(raw);
    if (st) qac_shard_free(out);
    return st;
}
