/* BM25 searcher: memory-maps DIR/bm25.idx (layout in bm25_format.h),
 * validates it, and answers top-k queries exactly with MaxScore.
 *
 * MaxScore: query terms are ordered by their score upper bound. Once the
 * heap holds k documents with threshold theta, the lowest-bound terms whose
 * bounds sum below theta are "non-essential": only documents from the
 * essential lists become candidates, and non-essential lists are probed
 * (skipping whole blocks by their last row) only while the candidate can
 * still reach theta. A term's bound is the maximum over its blocks of
 * w * max_tf / (max_tf + K(min_dl)), valid for any k1 and b because the
 * term score grows with tf and falls with dl. Pruning keeps a relative
 * slack of 1e-6 so that float rounding and tie-breaking never drop a
 * document that exhaustive scoring would keep: results are identical. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bm25_format.h"
#include "qac_analyzer.h"
#include "qac_bm25.h"
#include "qac_util.h"

#define ROW_END UINT32_MAX

struct qac_bm25 {
    uint8_t *map;
    size_t map_len;
    const qac_bm25_header *h;
    const uint32_t *dlen;
    const uint64_t *docid_off;
    const char *docid_blob;
    const uint64_t *term_off;
    const char *term_blob;
    const qac_bm25_term *terms;
    const uint8_t *postings;
    uint64_t postings_len;
    uint8_t *norms; /* [n_docs] Lucene one-byte length norms */
    double avgdl;
};

/* ---- Lucene SmallFloat (int4 / byte4) ---- */

static uint32_t long_to_int4(uint64_t i) {
    int bits = i ? 64 - __builtin_clzll(i) : 0;
    if (bits < 4) return (uint32_t)i; /* subnormal */
    int shift = bits - 4;
    uint32_t enc = (uint32_t)(i >> shift) & 0x07; /* drop the implicit top bit */
    return enc | (uint32_t)(shift + 1) << 3;
}

static uint64_t int4_to_long(uint32_t i) {
    uint64_t bits = i & 0x07;
    int shift = (int)(i >> 3) - 1;
    return shift == -1 ? bits : (bits | 0x08) << shift;
}

/* 255 - long_to_int4(INT32_MAX): byte values below this encode themselves. */
#define NUM_FREE_VALUES 24u

uint8_t qac_bm25_norm_encode(uint32_t len) {
    if (len > INT32_MAX) len = INT32_MAX;
    if (len < NUM_FREE_VALUES) return (uint8_t)len;
    return (uint8_t)(NUM_FREE_VALUES + long_to_int4(len - NUM_FREE_VALUES));
}

uint32_t qac_bm25_norm_decode(uint8_t norm) {
    if (norm < NUM_FREE_VALUES) return norm;
    uint64_t d = NUM_FREE_VALUES + int4_to_long(norm - NUM_FREE_VALUES);
    return d > INT32_MAX ? INT32_MAX : (uint32_t)d;
}

/* ---- open ---- */

static uint64_t align8(uint64_t x) { return (x + 7) & ~(uint64_t)7; }

static qac_status bad(const char *path, const char *what) {
    return qac_set_error(QAC_ERR_FORMAT, "bm25 index %s: %s", path, what);
}

static qac_status validate(qac_bm25 *b, const char *path) {
    const uint64_t size = b->map_len;
    if (size < sizeof(qac_bm25_header)) return bad(path, "truncated header");
    const qac_bm25_header *h = b->h;
    if (memcmp(h->magic, QAC_BM25_MAGIC, sizeof QAC_BM25_MAGIC) != 0) return bad(path, "not a qac BM25 index (bad magic)");
    if (h->endian != QAC_BM25_ENDIAN) return bad(path, "written on a machine of another byte order");
    if (h->version != QAC_BM25_VERSION)
        return qac_set_error(QAC_ERR_UNSUPPORTED, "bm25 index %s: version %u, this build reads %u", path, h->version,
                             QAC_BM25_VERSION);
    if (h->analyzer != QAC_ANALYZER_VERSION)
        return qac_set_error(QAC_ERR_UNSUPPORTED, "bm25 index %s: built with analyzer %u, this build has %u; rebuild it",
                             path, h->analyzer, QAC_ANALYZER_VERSION);
    if (h->block != QAC_BM25_BLOCK) return bad(path, "unexpected block size");
    if (h->file_size != size) return bad(path, "file size does not match the header (truncated?)");
    const uint64_t nd = h->n_docs, nt = h->n_terms;
    if (nd >= UINT32_MAX || nt >= UINT32_MAX || nd > size / 4 || nt > size / 32) return bad(path, "bad counts");
    if (h->off_dlen != sizeof *h || h->off_docid_off != align8(h->off_dlen + 4 * nd) ||
        h->off_docid_blob != h->off_docid_off + 8 * (nd + 1) || h->off_docid_blob > size)
        return bad(path, "bad section offsets");
    b->dlen = (const uint32_t *)(b->map + h->off_dlen);
    b->docid_off = (const uint64_t *)(b->map + h->off_docid_off);
    b->docid_blob = (const char *)(b->map + h->off_docid_blob);
    uint64_t blob = b->docid_off[nd];
    if (blob > size || h->off_term_off != align8(h->off_docid_blob + blob) ||
        h->off_term_off + 8 * (nt + 1) > size || h->off_term_blob != h->off_term_off + 8 * (nt + 1))
        return bad(path, "bad section offsets");
    b->term_off = (const uint64_t *)(b->map + h->off_term_off);
    b->term_blob = (const char *)(b->map + h->off_term_blob);
    uint64_t tblob = b->term_off[nt];
    if (tblob > size || h->off_term_info != align8(h->off_term_blob + tblob) ||
        h->off_postings != h->off_term_info + sizeof(qac_bm25_term) * nt || h->off_postings > size)
        return bad(path, "bad section offsets");
    b->terms = (const qac_bm25_term *)(b->map + h->off_term_info);
    b->postings = b->map + h->off_postings;
    b->postings_len = size - h->off_postings;

    qac_bm25_hash hs;
    qac_bm25_hash_init(&hs);
    qac_bm25_hash_update(&hs, b->map + sizeof *h, size - sizeof *h);
    if (qac_bm25_hash_final(&hs) != h->checksum) return bad(path, "checksum mismatch (corrupted file)");

    uint64_t sum = 0, nonempty = 0;
    for (uint64_t d = 0; d < nd; d++) {
        if (b->docid_off[d + 1] <= b->docid_off[d] || b->docid_blob[b->docid_off[d + 1] - 1] != 0)
            return bad(path, "bad docid table");
        sum += b->dlen[d];
        nonempty += b->dlen[d] > 0;
    }
    if (b->docid_off[0] != 0 || sum != h->sum_dl || nonempty != h->n_docs_nonempty)
        return bad(path, "document statistics do not match");
    for (uint64_t t = 0; t < nt; t++) {
        if (b->term_off[t + 1] <= b->term_off[t]) return bad(path, "bad term table");
        const qac_bm25_term *ti = &b->terms[t];
        if (ti->df == 0 || ti->df > nd || ti->n_blocks != (ti->df + QAC_BM25_BLOCK - 1) / QAC_BM25_BLOCK)
            return bad(path, "bad term statistics");
        uint64_t hdr = (uint64_t)ti->n_blocks * sizeof(qac_bm25_block);
        if (ti->post_off % 4 || ti->post_off > b->postings_len || hdr > b->postings_len - ti->post_off)
            return bad(path, "postings out of range");
        const qac_bm25_block *bk = (const qac_bm25_block *)(b->postings + ti->post_off);
        uint32_t prev_end = 0;
        int64_t prev_row = -1;
        for (uint32_t i = 0; i < ti->n_blocks; i++) {
            if (bk[i].data_end <= prev_end || (int64_t)bk[i].last_row <= prev_row || bk[i].last_row >= nd)
                return bad(path, "bad postings block");
            prev_end = bk[i].data_end;
            prev_row = bk[i].last_row;
        }
        if (prev_end > b->postings_len - ti->post_off - hdr) return bad(path, "postings out of range");
    }
    return QAC_OK;
}

qac_status qac_bm25_open(qac_bm25 **out, const char *dir) {
    *out = NULL;
    char path[4096];
    qac_status st = qac_path_join(path, sizeof path, dir, QAC_BM25_FILE);
    if (st != QAC_OK) return st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        /* the other kind of index, given where a BM25 one goes: say so */
        char dense[4096];
        int is_dense = err == ENOENT && !qac_path_join(dense, sizeof dense, dir, "manifest.json") &&
                       access(dense, F_OK) == 0;
        return qac_set_error(err == ENOENT ? QAC_ERR_NOT_FOUND : QAC_ERR_IO, "bm25 index %s: %s%s", path,
                             strerror(err), is_dense ? ": the directory holds a dense index (qac index build), not a BM25 one" : "");
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = qac_set_error(QAC_ERR_IO, "bm25 index %s: %s", path, strerror(errno));
        close(fd);
        return st;
    }
    qac_bm25 *b = calloc(1, sizeof *b);
    if (!b) {
        close(fd);
        return qac_set_error(QAC_ERR_NOMEM, "bm25: out of memory");
    }
    b->map_len = (size_t)sb.st_size;
    if (b->map_len < sizeof(qac_bm25_header)) {
        close(fd);
        free(b);
        return bad(path, "truncated header");
    }
    void *m = mmap(NULL, b->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        free(b);
        return qac_set_error(QAC_ERR_IO, "bm25 index %s: mmap: %s", path, strerror(errno));
    }
    b->map = m;
    b->h = (const qac_bm25_header *)b->map;
    if ((st = validate(b, path)) != QAC_OK) {
        qac_bm25_free(b);
        return st;
    }
    b->norms = malloc(b->h->n_docs ? b->h->n_docs : 1);
    if (!b->norms) {
        qac_bm25_free(b);
        return qac_set_error(QAC_ERR_NOMEM, "bm25: out of memory");
    }
    for (uint64_t d = 0; d < b->h->n_docs; d++) b->norms[d] = qac_bm25_norm_encode(b->dlen[d]);
    /* Lucene: (float)(sumTotalTermFreq / (double)docCount) */
    b->avgdl = b->h->n_docs_nonempty ? (double)(float)((double)b->h->sum_dl / (double)b->h->n_docs_nonempty) : 1.0;
    *out = b;
    return QAC_OK;
}

void qac_bm25_free(qac_bm25 *b) {
    if (!b) return;
    if (b->map) munmap(b->map, b->map_len);
    free(b->norms);
    free(b);
}

int64_t qac_bm25_count(const qac_bm25 *b) { return b ? (int64_t)b->h->n_docs : 0; }
int64_t qac_bm25_num_terms(const qac_bm25 *b) { return b ? (int64_t)b->h->n_terms : 0; }

const char *qac_bm25_docid(const qac_bm25 *b, int64_t row) {
    if (!b || row < 0 || (uint64_t)row >= b->h->n_docs) return NULL;
    return b->docid_blob + b->docid_off[row];
}

int64_t qac_bm25_doc_length(const qac_bm25 *b, int64_t row) {
    if (!b || row < 0 || (uint64_t)row >= b->h->n_docs) return -1;
    return b->dlen[row];
}

/* Index of a term in the sorted vocabulary, or -1. */
static int64_t find_term(const qac_bm25 *b, const char *t, size_t len) {
    int64_t lo = 0, hi = (int64_t)b->h->n_terms - 1;
    while (lo <= hi) {
        int64_t mid = lo + (hi - lo) / 2;
        const char *s = b->term_blob + b->term_off[mid];
        size_t sl = b->term_off[mid + 1] - b->term_off[mid];
        int c = memcmp(s, t, sl < len ? sl : len);
        if (!c) c = (sl > len) - (sl < len);
        if (c == 0) return mid;
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

int64_t qac_bm25_term_df(const qac_bm25 *b, const char *term) {
    if (!b || !term) return 0;
    int64_t t = find_term(b, term, strlen(term));
    return t < 0 ? 0 : b->terms[t].df;
}

/* ---- query preparation ---- */

typedef struct qterm {
    uint32_t term;
    uint32_t count;
} qterm;

typedef struct qcollect {
    const qac_bm25 *b;
    qterm *q;
    size_t n, cap;
    int oom;
} qcollect;

static int collect_token(void *user, const char *tok, size_t len) {
    qcollect *c = user;
    int64_t t = find_term(c->b, tok, len);
    if (t < 0) return 0;
    if (c->n == c->cap) {
        size_t nc = c->cap ? c->cap * 2 : 16;
        qterm *q = realloc(c->q, nc * sizeof *q);
        if (!q) {
            c->oom = 1;
            return 1;
        }
        c->q = q;
        c->cap = nc;
    }
    c->q[c->n++] = (qterm){(uint32_t)t, 1};
    return 0;
}

static int cmp_qterm(const void *a, const void *b) {
    uint32_t x = ((const qterm *)a)->term, y = ((const qterm *)b)->term;
    return (x > y) - (x < y);
}

typedef struct scorer {
    const qac_bm25 *b;
    double k1, bb;
    int exact;
    double ktab[256];
} scorer;

static qac_status scorer_init(scorer *s, const qac_bm25 *b, const qac_bm25_params *p) {
    double k1 = p ? p->k1 : QAC_BM25_K1_DEFAULT, bb = p ? p->b : QAC_BM25_B_DEFAULT;
    if (!(k1 >= 0 && k1 <= 1e6)) return qac_set_error(QAC_ERR_INVALID, "bm25: k1 must be in [0, 1e6], got %g", k1);
    if (!(bb >= 0 && bb <= 1)) return qac_set_error(QAC_ERR_INVALID, "bm25: b must be in [0, 1], got %g", bb);
    s->b = b;
    s->k1 = k1;
    s->bb = bb;
    s->exact = p ? p->exact_lengths != 0 : 0;
    for (int i = 0; i < 256; i++)
        s->ktab[i] = k1 * ((1 - bb) + bb * (double)qac_bm25_norm_decode((uint8_t)i) / b->avgdl);
    return QAC_OK;
}

static inline double k_of_len(const scorer *s, uint32_t dl) {
    return s->exact ? s->k1 * ((1 - s->bb) + s->bb * (double)dl / s->b->avgdl) : s->ktab[qac_bm25_norm_encode(dl)];
}

static inline double k_of_row(const scorer *s, uint32_t row) {
    return s->exact ? s->k1 * ((1 - s->bb) + s->bb * (double)s->b->dlen[row] / s->b->avgdl)
                    : s->ktab[s->b->norms[row]];
}

static inline double term_score(double w, uint32_t tf, double k) { return w * (double)tf / ((double)tf + k); }

/* Analyze the query into distinct vocabulary terms (sorted by term index,
 * which is the canonical summation order) with their repeat counts. */
static qac_status prepare_query(const qac_bm25 *b, const char *query, qterm **out, size_t *n_out) {
    *out = NULL;
    *n_out = 0;
    qac_analyzer *an = NULL;
    qac_status st = qac_analyzer_create(&an);
    if (st != QAC_OK) return st;
    qcollect c = {.b = b};
    st = qac_analyzer_run(an, query, strlen(query), collect_token, &c);
    qac_analyzer_free(an);
    if (st == QAC_OK && c.oom) st = qac_set_error(QAC_ERR_NOMEM, "bm25: out of memory");
    if (st != QAC_OK) {
        free(c.q);
        return st;
    }
    if (c.n) qsort(c.q, c.n, sizeof *c.q, cmp_qterm); /* no terms: c.q is NULL */
    size_t m = 0;
    for (size_t i = 0; i < c.n; i++) {
        if (m && c.q[m - 1].term == c.q[i].term) c.q[m - 1].count++;
        else c.q[m++] = c.q[i];
    }
    *out = c.q;
    *n_out = m;
    return QAC_OK;
}

static double idf(const qac_bm25 *b, uint32_t df) {
    double n = (double)b->h->n_docs_nonempty;
    return log(1.0 + (n - (double)df + 0.5) / ((double)df + 0.5));
}

/* ---- top-k heap: root is the worst kept hit ---- */

typedef struct hit {
    float score;
    uint32_t row;
} hit;

typedef struct topk {
    const qac_bm25 *b;
    hit *h;
    int n, k;
} topk;

/* a ranks below b: lower score, or equal score and smaller docid (strcmp) */
static inline int worse(const qac_bm25 *b, hit x, hit y) {
    if (x.score != y.score) return x.score < y.score;
    return strcmp(qac_bm25_docid(b, x.row), qac_bm25_docid(b, y.row)) < 0;
}

static void sift_down(topk *t, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < t->n && worse(t->b, t->h[l], t->h[m])) m = l;
        if (r < t->n && worse(t->b, t->h[r], t->h[m])) m = r;
        if (m == i) return;
        hit tmp = t->h[i];
        t->h[i] = t->h[m];
        t->h[m] = tmp;
        i = m;
    }
}

static void topk_push(topk *t, uint32_t row, float score) {
    hit x = {score, row};
    if (t->n < t->k) {
        int i = t->n++;
        t->h[i] = x;
        while (i > 0) {
            int p = (i - 1) / 2;
            if (!worse(t->b, t->h[i], t->h[p])) break;
            hit tmp = t->h[i];
            t->h[i] = t->h[p];
            t->h[p] = tmp;
            i = p;
        }
    } else if (worse(t->b, t->h[0], x)) {
        t->h[0] = x;
        sift_down(t, 0);
    }
}

/* Empty the heap into best-first arrays. */
static void topk_finish(topk *t, float *scores, int64_t *rows, int *n_out) {
    int n = t->n;
    while (t->n > 0) {
        hit x = t->h[0];
        t->h[0] = t->h[--t->n];
        sift_down(t, 0);
        scores[t->n] = x.score;
        rows[t->n] = x.row;
    }
    *n_out = n;
}

/* ---- postings cursors ---- */

typedef struct cursor {
    const qac_bm25_block *bk;
    const uint8_t *data;
    uint32_t n_blocks, df, blk, n, pos;
    uint32_t row; /* current row, ROW_END when exhausted */
    int decoded;
    double w, ub;
    int qi;
    uint32_t rows[QAC_BM25_BLOCK], tfs[QAC_BM25_BLOCK];
} cursor;

static void cursor_init(cursor *c, const qac_bm25 *b, uint32_t term) {
    const qac_bm25_term *ti = &b->terms[term];
    c->bk = (const qac_bm25_block *)(b->postings + ti->post_off);
    c->data = b->postings + ti->post_off + (uint64_t)ti->n_blocks * sizeof(qac_bm25_block);
    c->n_blocks = ti->n_blocks;
    c->df = ti->df;
    c->blk = 0;
    c->decoded = 0;
    c->pos = 0;
    c->row = 0;
}

static const uint8_t *varint(const uint8_t *p, const uint8_t *end, uint64_t *v) {
    uint64_t x = 0;
    for (int shift = 0; p < end && shift < 64; shift += 7) {
        uint8_t byte = *p++;
        x |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *v = x;
            return p;
        }
    }
    return NULL;
}

static qac_status decode_block(cursor *c) {
    uint32_t bi = c->blk;
    const uint8_t *p = c->data + (bi ? c->bk[bi - 1].data_end : 0), *end = c->data + c->bk[bi].data_end;
    int64_t prev = bi ? (int64_t)c->bk[bi - 1].last_row : -1;
    uint32_t n = c->df - bi * QAC_BM25_BLOCK;
    if (n > QAC_BM25_BLOCK) n = QAC_BM25_BLOCK;
    for (uint32_t j = 0; j < n; j++) {
        uint64_t gap, tf;
        if (!(p = varint(p, end, &gap)) || !(p = varint(p, end, &tf)) || tf == 0 || tf > UINT32_MAX)
            return qac_set_error(QAC_ERR_FORMAT, "bm25: corrupt postings block");
        prev += 1 + (int64_t)gap;
        if (prev > (int64_t)c->bk[bi].last_row) return qac_set_error(QAC_ERR_FORMAT, "bm25: corrupt postings block");
        c->rows[j] = (uint32_t)prev;
        c->tfs[j] = (uint32_t)tf;
    }
    if (p != end || prev != (int64_t)c->bk[bi].last_row)
        return qac_set_error(QAC_ERR_FORMAT, "bm25: corrupt postings block");
    c->n = n;
    c->pos = 0;
    c->decoded = 1;
    return QAC_OK;
}

/* Move to the first posting with row >= target. */
static qac_status cursor_seek(cursor *c, uint32_t target) {
    if (c->row == ROW_END) return QAC_OK;
    if (c->decoded && c->row >= target) return QAC_OK;
    while (c->blk < c->n_blocks && c->bk[c->blk].last_row < target) {
        c->blk++;
        c->decoded = 0;
    }
    if (c->blk == c->n_blocks) {
        c->row = ROW_END;
        return QAC_OK;
    }
    if (!c->decoded) {
        qac_status st = decode_block(c);
        if (st != QAC_OK) return st;
    }
    while (c->rows[c->pos] < target) c->pos++;
    c->row = c->rows[c->pos];
    return QAC_OK;
}

static qac_status cursor_next(cursor *c) {
    if (c->row == ROW_END) return QAC_OK;
    if (++c->pos < c->n) {
        c->row = c->rows[c->pos];
        return QAC_OK;
    }
    c->blk++;
    c->decoded = 0;
    if (c->blk == c->n_blocks) {
        c->row = ROW_END;
        return QAC_OK;
    }
    qac_status st = decode_block(c);
    if (st == QAC_OK) c->row = c->rows[0];
    return st;
}

static double cursor_bound(const cursor *c, const scorer *s) {
    double ub = 0;
    for (uint32_t i = 0; i < c->n_blocks; i++) {
        double v = term_score(c->w, c->bk[i].max_tf, k_of_len(s, c->bk[i].min_dl));
        if (v > ub) ub = v;
    }
    return ub;
}

static qac_status check_args(const qac_bm25 *b, const char *query, int k, float *scores, int64_t *rows,
                             int *n_out) {
    if (!b || !query || !scores || !rows || !n_out) return qac_set_error(QAC_ERR_INVALID, "bm25 search: NULL argument");
    if (k < 1) return qac_set_error(QAC_ERR_INVALID, "bm25 search: k must be >= 1, got %d", k);
    *n_out = 0;
    return QAC_OK;
}

static int cmp_ub(const void *a, const void *b) {
    const cursor *x = a, *y = b;
    if (x->ub != y->ub) return x->ub < y->ub ? -1 : 1;
    return x->qi - y->qi;
}

qac_status qac_bm25_search(const qac_bm25 *b, const char *query, const qac_bm25_params *p, int k,
                           float *scores, int64_t *rows, int *n_out) {
    qac_status st = check_args(b, query, k, scores, rows, n_out);
    if (st != QAC_OK) return st;
    scorer sc;
    if ((st = scorer_init(&sc, b, p)) != QAC_OK) return st;
    qterm *q;
    size_t m;
    if ((st = prepare_query(b, query, &q, &m)) != QAC_OK) return st;
    if (m == 0) {
        free(q);
        return QAC_OK;
    }
    int kk = (uint64_t)k > b->h->n_docs ? (int)b->h->n_docs : k;
    cursor *cs = malloc(m * sizeof *cs);
    double *cum = malloc(m * sizeof *cum), *contrib = calloc(m, sizeof *contrib);
    topk t = {.b = b, .h = malloc((size_t)(kk ? kk : 1) * sizeof(hit)), .k = kk};
    if (!cs || !cum || !contrib || !t.h) {
        st = qac_set_error(QAC_ERR_NOMEM, "bm25: out of memory");
        goto done;
    }
    for (size_t i = 0; i < m; i++) {
        cursor_init(&cs[i], b, q[i].term);
        cs[i].qi = (int)i;
        cs[i].w = q[i].count * idf(b, b->terms[q[i].term].df);
        cs[i].ub = cursor_bound(&cs[i], &sc);
    }
    qsort(cs, m, sizeof *cs, cmp_ub);
    for (size_t i = 0; i < m; i++) {
        cum[i] = (i ? cum[i - 1] : 0) + cs[i].ub;
        if ((st = cursor_seek(&cs[i], 0)) != QAC_OK) goto done;
    }
    size_t ess = 0; /* cs[0..ess) are non-essential */
    double lo = -INFINITY;
    for (;;) {
        uint32_t cand = ROW_END;
        for (size_t i = ess; i < m; i++)
            if (cs[i].row < cand) cand = cs[i].row;
        if (cand == ROW_END) break;
        double partial = 0;
        for (size_t i = ess; i < m; i++) {
            if (cs[i].row != cand) continue;
            double v = term_score(cs[i].w, cs[i].tfs[cs[i].pos], k_of_row(&sc, cand));
            contrib[cs[i].qi] = v;
            partial += v;
            if ((st = cursor_next(&cs[i])) != QAC_OK) goto done;
        }
        int alive = 1;
        for (size_t i = ess; i-- > 0;) {
            if (partial + cum[i] < lo) {
                alive = 0;
                break;
            }
            if ((st = cursor_seek(&cs[i], cand)) != QAC_OK) goto done;
            if (cs[i].row == cand) {
                double v = term_score(cs[i].w, cs[i].tfs[cs[i].pos], k_of_row(&sc, cand));
                contrib[cs[i].qi] = v;
                partial += v;
            }
        }
        if (alive) {
            double s = 0;
            for (size_t i = 0; i < m; i++) s += contrib[i];
            topk_push(&t, cand, (float)s);
            if (t.n == t.k) {
                double theta = t.h[0].score;
                lo = theta - (fabs(theta) * 1e-6 + 1e-12);
                while (ess < m && cum[ess] < lo) ess++;
            }
        }
        memset(contrib, 0, m * sizeof *contrib);
    }
    topk_finish(&t, scores, rows, n_out);
done:
    free(q);
    free(cs);
    free(cum);
    free(contrib);
    free(t.h);
    return st;
}

qac_status qac_bm25_search_exhaustive(const qac_bm25 *b, const char *query, const qac_bm25_params *p, int k,
                                      float *scores, int64_t *rows, int *n_out) {
    qac_status st = check_args(b, query, k, scores, rows, n_out);
    if (st != QAC_OK) return st;
    scorer sc;
    if ((st = scorer_init(&sc, b, p)) != QAC_OK) return st;
    qterm *q;
    size_t m;
    if ((st = prepare_query(b, query, &q, &m)) != QAC_OK) return st;
    size_t nd = b->h->n_docs;
    int kk = (uint64_t)k > nd ? (int)nd : k;
    double *acc = calloc(nd ? nd : 1, sizeof *acc);
    uint8_t *seen = calloc(nd ? nd : 1, 1);
    cursor *c = malloc(sizeof *c);
    topk t = {.b = b, .h = malloc((size_t)(kk ? kk : 1) * sizeof(hit)), .k = kk};
    if (!acc || !seen || !c || !t.h) {
        st = qac_set_error(QAC_ERR_NOMEM, "bm25: out of memory");
        goto done;
    }
    for (size_t i = 0; i < m; i++) {
        cursor_init(c, b, q[i].term);
        double w = q[i].count * idf(b, b->terms[q[i].term].df);
        if ((st = cursor_seek(c, 0)) != QAC_OK) goto done;
        while (c->row != ROW_END) {
            acc[c->row] += term_score(w, c->tfs[c->pos], k_of_row(&sc, c->row));
            seen[c->row] = 1;
            if ((st = cursor_next(c)) != QAC_OK) goto done;
        }
    }
    if (m)
        for (size_t d = 0; d < nd; d++)
            if (seen[d]) topk_push(&t, (uint32_t)d, (float)acc[d]);
    topk_finish(&t, scores, rows, n_out);
done:
    free(q);
    free(acc);
    free(seen);
    free(c);
    free(t.h);
    return st;
}
