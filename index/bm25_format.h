/* On-disk layout of a BM25 index (DIR/bm25.idx), shared by the builder
 * (bm25_build.c) and the searcher (bm25.c). Little-endian, native structs
 * (the endian field rejects a foreign byte order).
 *
 *   header          struct qac_bm25_header (128 bytes)
 *   doc lengths     u32[n_docs]             indexed tokens per document
 *   docid offsets   u64[n_docs + 1]         into the docid blob
 *   docid blob      bytes                   external ids, each NUL-terminated
 *   term offsets    u64[n_terms + 1]        into the term blob
 *   term blob       bytes                   terms, sorted by memcmp
 *   term info       qac_bm25_term[n_terms]  same order as the terms
 *   postings        per term: n_blocks qac_bm25_block headers, then the
 *                   block data: per posting varint(row - prev_row - 1)
 *                   (prev_row = -1 before the term's first posting) and
 *                   varint(tf), then zero padding to 4 bytes. A block
 *                   holds QAC_BM25_BLOCK postings (the last one fewer).
 * Sections start on 8-byte boundaries. checksum covers every byte after the
 * header up to file_size. */
#ifndef QAC_BM25_FORMAT_H
#define QAC_BM25_FORMAT_H

#include <stdint.h>

#define QAC_BM25_MAGIC "QACBM25"
#define QAC_BM25_VERSION 1u
#define QAC_BM25_ENDIAN 0x01020304u
#define QAC_BM25_BLOCK 128
#define QAC_BM25_FILE "bm25.idx"

typedef struct qac_bm25_header {
    char magic[8];
    uint32_t version, endian, analyzer, block;
    uint64_t n_docs, n_docs_nonempty, n_terms, sum_dl;
    uint64_t off_dlen, off_docid_off, off_docid_blob, off_term_off, off_term_blob, off_term_info,
        off_postings, file_size;
    uint64_t checksum;
    uint64_t reserved[1];
} qac_bm25_header;

typedef struct qac_bm25_term {
    uint64_t post_off; /* relative to off_postings */
    uint64_t cf;       /* collection frequency */
    uint32_t df, n_blocks;
    uint32_t max_tf, min_dl; /* over all postings: score bounds */
} qac_bm25_term;

typedef struct qac_bm25_block {
    uint32_t last_row;
    uint32_t data_end; /* end of this block's data, relative to the term's data start */
    uint32_t max_tf, min_dl;
} qac_bm25_block;

/* Streaming 64-bit checksum over a byte sequence (word-at-a-time). */
typedef struct qac_bm25_hash {
    uint64_t h, pending;
    unsigned npend;
    uint64_t total;
} qac_bm25_hash;

static inline void qac_bm25_hash_init(qac_bm25_hash *s) {
    s->h = 0x9E3779B97F4A7C15ull;
    s->pending = 0;
    s->npend = 0;
    s->total = 0;
}
static inline void qac_bm25_hash_word(qac_bm25_hash *s, uint64_t w) {
    s->h = (s->h ^ w) * 0x100000001B3ull;
    s->h ^= s->h >> 29;
}
static inline void qac_bm25_hash_update(qac_bm25_hash *s, const void *data, uint64_t n) {
    const uint8_t *p = data;
    s->total += n;
    while (n && s->npend) {
        s->pending |= (uint64_t)*p++ << (8 * s->npend);
        n--;
        if (++s->npend == 8) { qac_bm25_hash_word(s, s->pending); s->pending = 0; s->npend = 0; }
    }
    while (n >= 8) {
        uint64_t w;
        __builtin_memcpy(&w, p, 8);
        qac_bm25_hash_word(s, w);
        p += 8;
        n -= 8;
    }
    while (n) {
        s->pending |= (uint64_t)*p++ << (8 * s->npend);
        s->npend++;
        n--;
    }
}
static inline uint64_t qac_bm25_hash_final(qac_bm25_hash *s) {
    if (s->npend) qac_bm25_hash_word(s, s->pending);
    qac_bm25_hash_word(s, s->total);
    return s->h;
}

#endif
