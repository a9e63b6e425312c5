/* A walk over an index.faiss file before FAISS reads it. FAISS's reader
 * trusts every size field: a flipped byte in one makes it allocate (and
 * zero) up to terabytes before it notices the file is short, which is
 * minutes of paging or the OOM killer. Here each vector's length is checked
 * against the bytes left, for the layouts FAISS 1.7 writes for the indexes
 * qac builds (flat, scalar and product quantizers, IVF with array lists,
 * HNSW, pre-transforms); an unknown part stops the walk and is left to
 * FAISS. The values inside (quantizer types, graph links) are checked after
 * FAISS has read them (faiss_check.cpp). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "index_internal.h"

typedef struct walk {
    const unsigned char *p;
    size_t n, pos;
    int unknown; /* met a part this walk does not know: stop, accept */
    char why[200];
} walk;

#define FOURCC(s) ((uint32_t)(s)[0] | (uint32_t)(s)[1] << 8 | (uint32_t)(s)[2] << 16 | (uint32_t)(s)[3] << 24)

static int bad(walk *w, const char *what) {
    if (!w->why[0]) snprintf(w->why, sizeof w->why, "%s at byte %zu", what, w->pos);
    return -1;
}

static int take(walk *w, void *out, size_t bytes) {
    if (bytes > w->n - w->pos) return bad(w, "truncated");
    if (out) memcpy(out, w->p + w->pos, bytes);
    w->pos += bytes;
    return 0;
}

static int u8(walk *w, uint8_t *v) { return take(w, v, 1); }
static int u32(walk *w, uint32_t *v) { return take(w, v, 4); }
static int u64(walk *w, uint64_t *v) { return take(w, v, 8); }

/* A FAISS vector: a u64 count, then count elements of elem bytes. */
static int vec(walk *w, size_t elem, uint64_t *count) {
    uint64_t c;
    if (u64(w, &c)) return -1;
    if (c > (w->n - w->pos) / elem) return bad(w, "a vector longer than the file");
    if (count) *count = c;
    w->pos += (size_t)c * elem;
    return 0;
}

static int header(walk *w, int32_t *d, int64_t *ntotal) {
    uint32_t metric;
    uint8_t trained;
    if (take(w, d, 4) || take(w, ntotal, 8) || take(w, NULL, 16) || u8(w, &trained) || u32(w, &metric)) return -1;
    if (*d < 1 || *ntotal < 0) return bad(w, "a negative dimension or count");
    if (metric > 1 && take(w, NULL, 4)) return -1; /* metric_arg */
    return 0;
}

/* The quantizer's type is checked once FAISS has read it, against the factory's. */
static int sq(walk *w) {
    uint64_t d, code_size;
    if (take(w, NULL, 12) || u64(w, &d) || u64(w, &code_size)) return -1;
    if (d < 1 || d > (1u << 20)) return bad(w, "a scalar quantizer of a corrupt dimension");
    return vec(w, 4, NULL);
}

static int pq(walk *w, int32_t d_index) {
    uint64_t d, m, nbits, nc;
    if (u64(w, &d) || u64(w, &m) || u64(w, &nbits)) return -1;
    /* the tables FAISS derives from these are M x 2^nbits (x 2^nbits) */
    if (d != (uint64_t)d_index || m < 1 || m > d || d % m || nbits < 1 || nbits > 16)
        return bad(w, "a corrupt product quantizer");
    if (vec(w, 4, &nc)) return -1;
    if (nc != d << nbits) return bad(w, "product quantizer centroids of the wrong size");
    return 0;
}

static int walk_index(walk *w, int depth);

static int transform(walk *w) {
    uint32_t h;
    uint8_t b;
    if (u32(w, &h)) return -1;
    if (h == FOURCC("PCAm") || h == FOURCC("PcAm") || h == FOURCC("Pcam")) {
        if (take(w, NULL, 4) || (h == FOURCC("Pcam") && take(w, NULL, 4)) || u8(w, &b) ||
            (h != FOURCC("PCAm") && take(w, NULL, 4)) || vec(w, 4, NULL) || vec(w, 4, NULL) || vec(w, 4, NULL))
            return -1;
    } else if (h == FOURCC("Viqm")) {
        if (take(w, NULL, 8)) return -1;
    } else if (h == FOURCC("RmDT") || h == FOURCC("VCnt")) {
        if (vec(w, 4, NULL)) return -1;
    } else if (h == FOURCC("VNrm")) {
        if (take(w, NULL, 4)) return -1;
    } else if (h != FOURCC("LTra") && h != FOURCC("rrot")) {
        w->unknown = 1;
        return 0;
    }
    if (h != FOURCC("RmDT") && h != FOURCC("VCnt") && h != FOURCC("VNrm"))
        if (u8(w, &b) || vec(w, 4, NULL) || vec(w, 4, NULL)) return -1; /* have_bias, A, b */
    return take(w, NULL, 9);                                            /* d_in, d_out, is_trained */
}

static int invlists(walk *w, uint64_t nlist_ivf, int64_t ntotal) {
    uint32_t h, type;
    uint64_t nlist, code_size, count;
    if (u32(w, &h)) return -1;
    if (h != FOURCC("ilar")) {
        w->unknown = 1;
        return 0;
    }
    if (u64(w, &nlist) || u64(w, &code_size) || u32(w, &type)) return -1;
    if (nlist != nlist_ivf || code_size < 1 || code_size > (1u << 24)) return bad(w, "corrupt inverted lists");
    if (type != FOURCC("full")) {
        w->unknown = 1;
        return 0;
    }
    size_t at = w->pos + 8;
    if (vec(w, 8, &count)) return -1;
    if (count != nlist) return bad(w, "list sizes for another number of lists");
    uint64_t total = 0;
    for (uint64_t l = 0; l < nlist; l++) {
        uint64_t s;
        memcpy(&s, w->p + at + 8 * l, 8);
        if (s > (uint64_t)ntotal || (total += s) > (uint64_t)ntotal) return bad(w, "lists longer than the index");
        if (s && take(w, NULL, (size_t)s * (code_size + 8))) return -1;
    }
    return 0;
}

static int ivf_header(walk *w, int32_t *d, int64_t *ntotal, uint64_t *nlist, int depth) {
    uint64_t nprobe;
    uint8_t type;
    if (header(w, d, ntotal) || u64(w, nlist) || u64(w, &nprobe)) return -1;
    if (*nlist < 1 || *nlist > w->n) return bad(w, "a corrupt number of lists");
    if (walk_index(w, depth + 1) || w->unknown) return w->unknown ? 0 : -1;
    if (u8(w, &type) || vec(w, 8, NULL)) return -1; /* direct map */
    if (type == 2 && vec(w, 16, NULL)) return -1;
    return 0;
}

static int walk_index(walk *w, int depth) {
    uint32_t h;
    int32_t d;
    int64_t ntotal;
    uint64_t nlist, code_size;
    uint8_t b;
    if (depth > 8) return bad(w, "indexes nested too deep");
    if (u32(w, &h)) return -1;
    if (h == FOURCC("IxFI") || h == FOURCC("IxF2") || h == FOURCC("IxFl")) {
        return header(w, &d, &ntotal) || vec(w, 4, NULL);
    } else if (h == FOURCC("IxSQ")) {
        return header(w, &d, &ntotal) || sq(w) || vec(w, 1, NULL);
    } else if (h == FOURCC("IxPq") || h == FOURCC("IxPQ") || h == FOURCC("IxPo")) {
        if (header(w, &d, &ntotal) || pq(w, d) || vec(w, 1, NULL)) return -1;
        return h != FOURCC("IxPQ") ? take(w, NULL, 9) : 0; /* search_type, encode_signs, polysemous_ht */
    } else if (h == FOURCC("IwFl")) {
        if (ivf_header(w, &d, &ntotal, &nlist, depth) || w->unknown) return w->unknown ? 0 : -1;
        return invlists(w, nlist, ntotal);
    } else if (h == FOURCC("IwSQ") || h == FOURCC("IwSq")) {
        if (ivf_header(w, &d, &ntotal, &nlist, depth) || w->unknown) return w->unknown ? 0 : -1;
        if (sq(w) || u64(w, &code_size) || (h == FOURCC("IwSq") && u8(w, &b))) return -1;
        return invlists(w, nlist, ntotal);
    } else if (h == FOURCC("IwPQ")) {
        if (ivf_header(w, &d, &ntotal, &nlist, depth) || w->unknown) return w->unknown ? 0 : -1;
        if (u8(w, &b) || u64(w, &code_size) || pq(w, d)) return -1;
        return invlists(w, nlist, ntotal);
    } else if (h == FOURCC("IHNf") || h == FOURCC("IHNs") || h == FOURCC("IHNp")) {
        uint64_t levels, offsets;
        if (header(w, &d, &ntotal) || vec(w, 8, NULL) || vec(w, 4, NULL) || vec(w, 4, &levels) ||
            vec(w, 8, &offsets) || vec(w, 4, NULL) || take(w, NULL, 20))
            return -1;
        if (levels != (uint64_t)ntotal || offsets != (uint64_t)ntotal + 1) return bad(w, "an HNSW graph of another size");
        return walk_index(w, depth + 1);
    } else if (h == FOURCC("IxPT")) {
        uint32_t nt;
        if (header(w, &d, &ntotal) || u32(w, &nt)) return -1;
        if (nt > 64) return bad(w, "a corrupt number of transforms");
        for (uint32_t i = 0; i < nt && !w->unknown; i++)
            if (transform(w)) return -1;
        return w->unknown ? 0 : walk_index(w, depth + 1);
    }
    w->unknown = 1; /* a layout this walk does not know: FAISS reads it */
    return 0;
}

qac_status qac_faiss_precheck(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return qac_set_error(errno == ENOENT ? QAC_ERR_NOT_FOUND : QAC_ERR_IO, "open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_size < 4) {
        close(fd);
        return qac_set_error(QAC_ERR_FORMAT, "%s: truncated FAISS index", path);
    }
    void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return qac_set_error(QAC_ERR_IO, "mmap %s: %s", path, strerror(errno));
    walk w = {m, (size_t)sb.st_size, 0, 0, ""};
    int rc = walk_index(&w, 0);
    if (!rc && !w.unknown && w.pos != w.n) rc = bad(&w, "trailing bytes");
    munmap(m, (size_t)sb.st_size);
    if (rc)
        return qac_set_error(QAC_ERR_FORMAT, "%s: %s (corrupt FAISS index; rebuild it)", path, w.why);
    return QAC_OK;
}
