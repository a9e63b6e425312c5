/* BM25 index builder: one streaming pass over the corpus reader. Texts are
 * analyzed and dropped; only postings (varint-compressed, per term), the
 * vocabulary, document lengths and docids stay in memory. The file is then
 * written through qac_atomic_open/commit. */
#include <stdlib.h>
#include <string.h>

#include "bm25_format.h"
#include "qac_analyzer.h"
#include "qac_bm25.h"
#include "qac_data.h"
#include "qac_util.h"

typedef struct postvec {
    uint8_t *buf;
    size_t len, cap;
    uint64_t cf;
    uint32_t df, last_row, max_tf, min_dl;
} postvec;

typedef struct builder {
    /* vocabulary: open addressing over term ids, strings in one arena */
    uint32_t *slots; /* term id + 1, 0 = empty */
    uint32_t *hashes;
    size_t n_slots;
    uint64_t *term_off; /* [n_terms + 1] into arena */
    char *arena;
    size_t arena_len, arena_cap;
    postvec *post;
    size_t n_terms, terms_cap;
    /* documents */
    uint32_t *dlen;
    uint64_t *docid_off;
    char *docids;
    size_t docids_len, docids_cap, n_docs, docs_cap;
    /* per-document scratch */
    uint32_t *doc_terms;
    size_t doc_n, doc_cap;
    qac_status err;
} builder;

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 1;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return 0;
    *p = q;
    *cap = c;
    return 1;
}

static uint32_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return (uint32_t)(h ^ (h >> 32));
}

static int rehash(builder *B, size_t n_slots) {
    uint32_t *s = calloc(n_slots, sizeof *s);
    if (!s) return 0;
    for (size_t t = 0; t < B->n_terms; t++) {
        size_t i = B->hashes[t] & (n_slots - 1);
        while (s[i]) i = (i + 1) & (n_slots - 1);
        s[i] = (uint32_t)t + 1;
    }
    free(B->slots);
    B->slots = s;
    B->n_slots = n_slots;
    return 1;
}

/* Term id of a token, adding it to the vocabulary if new; -1 on OOM. */
static int64_t term_id(builder *B, const char *tok, size_t len) {
    uint32_t h = hash_bytes(tok, len);
    size_t mask = B->n_slots - 1, i = h & mask;
    while (B->slots[i]) {
        uint32_t t = B->slots[i] - 1;
        if (B->hashes[t] == h && B->term_off[t + 1] - B->term_off[t] == len &&
            memcmp(B->arena + B->term_off[t], tok, len) == 0)
            return t;
        i = (i + 1) & mask;
    }
    if (B->n_terms >= UINT32_MAX - 1) return -1;
    size_t t = B->n_terms, cap = B->terms_cap;
    if (t + 2 > cap) {
        size_t c1 = cap, c2 = cap, c3 = cap;
        if (!grow((void **)&B->post, &c1, t + 2, sizeof *B->post) ||
            !grow((void **)&B->hashes, &c2, t + 2, sizeof *B->hashes) ||
            !grow((void **)&B->term_off, &c3, t + 2, sizeof *B->term_off))
            return -1;
        B->terms_cap = c1 < c2 ? (c1 < c3 ? c1 : c3) : (c2 < c3 ? c2 : c3);
    }
    if (!grow((void **)&B->arena, &B->arena_cap, B->arena_len + len, 1)) return -1;
    memcpy(B->arena + B->arena_len, tok, len);
    B->arena_len += len;
    B->term_off[t + 1] = B->arena_len;
    B->hashes[t] = h;
    memset(&B->post[t], 0, sizeof B->post[t]);
    B->post[t].min_dl = UINT32_MAX;
    B->slots[i] = (uint32_t)t + 1;
    B->n_terms++;
    if (B->n_terms * 2 > B->n_slots && !rehash(B, B->n_slots * 2)) return -1;
    return (int64_t)t;
}

static int on_token(void *user, const char *tok, size_t len) {
    builder *B = user;
    int64_t t = term_id(B, tok, len);
    if (t < 0 || !grow((void **)&B->doc_terms, &B->doc_cap, B->doc_n + 1, sizeof *B->doc_terms)) {
        B->err = QAC_ERR_NOMEM;
        return 1;
    }
    B->doc_terms[B->doc_n++] = (uint32_t)t;
    return 0;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static size_t put_varint(uint8_t *p, uint64_t v) {
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

static const uint8_t *get_varint(const uint8_t *p, uint64_t *v) {
    uint64_t x = 0;
    int shift = 0;
    while (*p & 0x80) {
        x |= (uint64_t)(*p++ & 0x7f) << shift;
        shift += 7;
    }
    *v = x | ((uint64_t)*p++ << shift);
    return p;
}

static qac_status add_document(builder *B, const char *id, uint32_t row) {
    uint32_t dl = (uint32_t)B->doc_n;
    if (B->doc_n > 1) qsort(B->doc_terms, B->doc_n, sizeof *B->doc_terms, cmp_u32);
    for (size_t i = 0; i < B->doc_n;) {
        size_t j = i + 1;
        while (j < B->doc_n && B->doc_terms[j] == B->doc_terms[i]) j++;
        uint32_t tf = (uint32_t)(j - i);
        postvec *pv = &B->post[B->doc_terms[i]];
        if (!grow((void **)&pv->buf, &pv->cap, pv->len + 10, 1)) return qac_set_error(QAC_ERR_NOMEM, "bm25: out of memory");
        uint64_t gap = pv->df ? (uint64_t)row - pv->last_row - 1 : row;
        pv->len += put_varint(pv->buf + pv->len, gap);
        pv->len += put_varint(pv->buf + pv->len, tf);
        pv->df++;
        pv->cf += tf;
        pv->last_row = row;
        if (tf > pv->max_tf) pv->max_tf = tf;
        if (dl < pv->min_dl) pv->min_dl = dl;
        i = j;
    }
    size_t idl = strlen(id) + 1; /* stored with its NUL */
    if (!grow((void **)&B->dlen, &B->docs_cap, B->n_docs + 2, sizeof *B->dlen)) goto oom;
    if (!grow((void **)&B->docids, &B->docids_cap, B->docids_len + idl, 1)) goto oom;
    B->dlen[B->n_docs] = dl;
    memcpy(B->docids + B->docids_len, id, idl);
    B->docids_len += idl;
    B->n_docs++;
    return QAC_OK;
oom:
    return qac_set_error(QAC_ERR_NOMEM, "bm25: out of memory");
}

static void builder_free(builder *B) {
    for (size_t t = 0; t < B->n_terms; t++) free(B->post[t].buf);
    free(B->post);
    free(B->slots);
    free(B->hashes);
    free(B->term_off);
    free(B->arena);
    free(B->dlen);
    free(B->docid_off);
    free(B->docids);
    free(B->doc_terms);
}

/* ---- writing ---- */

typedef struct writer {
    FILE *f;
    qac_bm25_hash hash;
    uint64_t pos;
    int failed;
} writer;

static void w_bytes(writer *w, const void *p, size_t n) {
    if (!n || w->failed) return;
    if (fwrite(p, 1, n, w->f) != n) w->failed = 1;
    qac_bm25_hash_update(&w->hash, p, n);
    w->pos += n;
}

static void w_align(writer *w) {
    static const uint8_t zeros[8];
    if (w->pos % 8) w_bytes(w, zeros, 8 - w->pos % 8);
}

static int cmp_term(const void *a, const void *b, void *ctx) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    const builder *B = ctx;
    size_t lx = B->term_off[x + 1] - B->term_off[x], ly = B->term_off[y + 1] - B->term_off[y];
    int c = memcmp(B->arena + B->term_off[x], B->arena + B->term_off[y], lx < ly ? lx : ly);
    return c ? c : (lx > ly) - (lx < ly);
}

static qac_status write_index(builder *B, const char *path, const qac_bm25_build_opts *o) {
    qac_status st = QAC_OK;
    uint32_t *order = malloc((B->n_terms ? B->n_terms : 1) * sizeof *order);
    qac_bm25_term *info = calloc(B->n_terms ? B->n_terms : 1, sizeof *info);
    qac_bm25_block *blocks = NULL;
    uint8_t *data = NULL;
    size_t blocks_cap = 0, data_cap = 0;
    if (!order || !info) { st = qac_set_error(QAC_ERR_NOMEM, "bm25: out of memory"); goto done; }
    for (size_t t = 0; t < B->n_terms; t++) order[t] = (uint32_t)t;
    qsort_r(order, B->n_terms, sizeof *order, cmp_term, B);
    for (size_t t = 0; t < B->n_terms; t++)
        if (B->post[t].len > UINT32_MAX) {
            st = qac_set_error(QAC_ERR_UNSUPPORTED, "bm25: postings of one term exceed 4 GiB");
            goto done;
        }

    qac_atomic_file af;
    if ((st = qac_atomic_open(&af, path)) != QAC_OK) goto done;
    writer w = {.f = af.f};
    qac_bm25_hash_init(&w.hash);
    qac_bm25_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, QAC_BM25_MAGIC, sizeof QAC_BM25_MAGIC);
    h.version = QAC_BM25_VERSION;
    h.endian = QAC_BM25_ENDIAN;
    h.analyzer = QAC_ANALYZER_VERSION;
    h.block = QAC_BM25_BLOCK;
    h.n_docs = B->n_docs;
    h.n_terms = B->n_terms;
    for (size_t d = 0; d < B->n_docs; d++) {
        h.sum_dl += B->dlen[d];
        h.n_docs_nonempty += B->dlen[d] > 0;
    }
    /* header placeholder: not hashed, rewritten at the end */
    if (fwrite(&h, sizeof h, 1, af.f) != 1) w.failed = 1;
    w.pos = sizeof h;

    h.off_dlen = w.pos;
    w_bytes(&w, B->dlen, B->n_docs * sizeof *B->dlen);
    w_align(&w);
    h.off_docid_off = w.pos;
    {
        uint64_t off = 0;
        w_bytes(&w, &off, sizeof off);
        for (size_t d = 0; d < B->n_docs; d++) {
            off = B->docid_off[d + 1];
            w_bytes(&w, &off, sizeof off);
        }
    }
    h.off_docid_blob = w.pos;
    w_bytes(&w, B->docids, B->docids_len);
    w_align(&w);
    h.off_term_off = w.pos;
    {
        uint64_t off = 0;
        w_bytes(&w, &off, sizeof off);
        for (size_t i = 0; i < B->n_terms; i++) {
            off += B->term_off[order[i] + 1] - B->term_off[order[i]];
            w_bytes(&w, &off, sizeof off);
        }
    }
    h.off_term_blob = w.pos;
    for (size_t i = 0; i < B->n_terms; i++)
        w_bytes(&w, B->arena + B->term_off[order[i]], B->term_off[order[i] + 1] - B->term_off[order[i]]);
    w_align(&w);

    /* Term info needs postings offsets: compute block layouts first. */
    uint64_t post_off = 0;
    for (size_t i = 0; i < B->n_terms; i++) {
        const postvec *pv = &B->post[order[i]];
        qac_bm25_term *ti = &info[i];
        ti->post_off = post_off;
        ti->cf = pv->cf;
        ti->df = pv->df;
        ti->n_blocks = (pv->df + QAC_BM25_BLOCK - 1) / QAC_BM25_BLOCK;
        ti->max_tf = pv->max_tf;
        ti->min_dl = pv->min_dl;
        /* block data re-encodes the same varints: its size equals pv->len */
        /* padded to 4 bytes so the next term's block headers are aligned */
        post_off += ((uint64_t)ti->n_blocks * sizeof(qac_bm25_block) + pv->len + 3) & ~(uint64_t)3;
    }
    h.off_term_info = w.pos;
    w_bytes(&w, info, B->n_terms * sizeof *info);
    w_align(&w);
    h.off_postings = w.pos;
    for (size_t i = 0; i < B->n_terms && !w.failed; i++) {
        const postvec *pv = &B->post[order[i]];
        uint32_t nb = info[i].n_blocks;
        if (!grow((void **)&blocks, &blocks_cap, nb, sizeof *blocks) ||
            !grow((void **)&data, &data_cap, pv->len, 1)) {
            st = qac_set_error(QAC_ERR_NOMEM, "bm25: out of memory");
            break;
        }
        const uint8_t *p = pv->buf;
        size_t dlen = 0;
        int64_t prev = -1;
        for (uint32_t bi = 0; bi < nb; bi++) {
            qac_bm25_block *bk = &blocks[bi];
            bk->max_tf = 0;
            bk->min_dl = UINT32_MAX;
            uint32_t n = pv->df - bi * QAC_BM25_BLOCK;
            if (n > QAC_BM25_BLOCK) n = QAC_BM25_BLOCK;
            for (uint32_t j = 0; j < n; j++) {
                uint64_t gap, tf;
                p = get_varint(p, &gap);
                p = get_varint(p, &tf);
                int64_t row = prev + 1 + (int64_t)gap;
                dlen += put_varint(data + dlen, gap);
                dlen += put_varint(data + dlen, tf);
                if (tf > bk->max_tf) bk->max_tf = (uint32_t)tf;
                if (B->dlen[row] < bk->min_dl) bk->min_dl = B->dlen[row];
                prev = row;
            }
            bk->last_row = (uint32_t)prev;
            bk->data_end = (uint32_t)dlen;
        }
        w_bytes(&w, blocks, nb * sizeof *blocks);
        w_bytes(&w, data, dlen);
        static const uint8_t pad[4];
        if (dlen % 4) w_bytes(&w, pad, 4 - dlen % 4);
        if (o && o->progress && (i % 65536 == 0 || i + 1 == B->n_terms))
            o->progress(o->progress_user, "bm25 write/terms", i + 1, B->n_terms);
    }
    w_align(&w);
    h.file_size = w.pos;
    h.checksum = qac_bm25_hash_final(&w.hash);
    if (st == QAC_OK && !w.failed) {
        if (fseek(af.f, 0, SEEK_SET) != 0 || fwrite(&h, sizeof h, 1, af.f) != 1) w.failed = 1;
    }
    if (st != QAC_OK || w.failed) {
        qac_atomic_abort(&af);
        if (st == QAC_OK) st = qac_set_error(QAC_ERR_IO, "bm25: write %s failed", path);
        goto done;
    }
    st = qac_atomic_commit(&af);
done:
    free(order);
    free(info);
    free(blocks);
    free(data);
    return st;
}

qac_status qac_bm25_build(const char *out_dir, const char *corpus_path, const qac_bm25_build_opts *o) {
    if (!out_dir || !corpus_path) return qac_set_error(QAC_ERR_INVALID, "bm25 build: missing path");
    builder B;
    memset(&B, 0, sizeof B);
    qac_reader *r = NULL;
    qac_analyzer *an = NULL;
    qac_status st;
    char path[4096];
    if ((st = qac_path_join(path, sizeof path, out_dir, QAC_BM25_FILE)) != QAC_OK) return st;
    if ((st = qac_check_output_dir(out_dir)) != QAC_OK) return st; /* before the corpus is read */
    if ((st = qac_analyzer_create(&an)) != QAC_OK) return st;
    if ((st = qac_analyzer_enable_cache(an, 1 << 16)) != QAC_OK) goto done;
    if ((st = qac_reader_open(&r, corpus_path, QAC_READ_CORPUS, QAC_FMT_AUTO)) != QAC_OK) goto done;
    B.n_slots = 1 << 16;
    B.slots = calloc(B.n_slots, sizeof *B.slots);
    size_t c0 = 0;
    if (!B.slots || !grow((void **)&B.term_off, &c0, 1, sizeof *B.term_off)) {
        st = qac_set_error(QAC_ERR_NOMEM, "bm25: out of memory");
        goto done;
    }
    B.term_off[0] = 0;
    /* docid offsets grow with their own capacity */
    size_t docoff_cap = 0;
    if (!grow((void **)&B.docid_off, &docoff_cap, 1, sizeof *B.docid_off)) {
        st = qac_set_error(QAC_ERR_NOMEM, "bm25: out of memory");
        goto done;
    }
    B.docid_off[0] = 0;
    if (o && o->progress) o->progress(o->progress_user, "bm25 index", 0, 0);
    for (;;) {
        qac_record rec;
        int got = 0;
        if ((st = qac_reader_next(r, &rec, &got)) != QAC_OK) goto done;
        if (!got) break;
        if (B.n_docs >= UINT32_MAX - 1) {
            st = qac_set_error(QAC_ERR_UNSUPPORTED, "bm25: more than %u documents", UINT32_MAX - 1);
            goto done;
        }
        B.doc_n = 0;
        if ((st = qac_analyzer_run(an, rec.text, rec.text_len, on_token, &B)) != QAC_OK) goto done;
        if (B.err) { st = qac_set_error(B.err, "bm25: out of memory"); goto done; }
        if ((st = add_document(&B, rec.id, (uint32_t)B.n_docs)) != QAC_OK) goto done;
        if (!grow((void **)&B.docid_off, &docoff_cap, B.n_docs + 1, sizeof *B.docid_off)) {
            st = qac_set_error(QAC_ERR_NOMEM, "bm25: out of memory");
            goto done;
        }
        B.docid_off[B.n_docs] = B.docids_len;
        if (o && o->progress && B.n_docs % 10000 == 0) o->progress(o->progress_user, "bm25 index", B.n_docs, 0);
    }
    if (o && o->progress) o->progress(o->progress_user, "bm25 index", B.n_docs, B.n_docs);
    if ((st = qac_mkdirs(out_dir)) != QAC_OK) goto done;
    st = write_index(&B, path, o);
done:
    qac_reader_free(r);
    qac_analyzer_free(an);
    builder_free(&B);
    return st;
}
