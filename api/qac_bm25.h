/* BM25 (Lucene/Anserini flavour) over an English analyzer: lower-casing,
 * stopwords, Porter stemming (Lucene's PorterStemmer); see index/qac_analyzer.h.
 * Exact top-k with MaxScore dynamic pruning over block-skipping postings.
 *
 * Scoring is Lucene >= 8 BM25Similarity, as used by Anserini:
 *   idf(t)   = ln(1 + (N - df + 0.5) / (df + 0.5))
 *   s(t, d)  = idf * tf / (tf + k1 * (1 - b + b * dl / avgdl))
 *   score(d) = sum over query terms (a term repeated n times counts n times)
 * N is the number of documents with at least one indexed token (Lucene's
 * docCount) and avgdl = total tokens / N, exact. By default dl is Lucene's
 * lossy one-byte norm: the token count encoded with SmallFloat.intToByte4
 * and decoded with byte4ToInt (exact up to 40; beyond, len - 24 keeps 4
 * significant bits, so 41 reads as 40 and 100 as 96), which is what makes
 * scores match Anserini.
 * qac_bm25_params.exact_lengths = 1 uses the exact token count instead.
 * Scores are computed in double, summed over the distinct query terms in
 * vocabulary order, and returned as float.
 *
 * Ranking order is score descending, then external docid descending by
 * strcmp (trec_eval's tie order), so results are fully deterministic.
 *
 * Index: one file DIR/bm25.idx (magic "QACBM25", version, checksum; see
 * index/bm25.c), written atomically.
 *
 * Ownership: qac_bm25_open returns a handle freed with qac_bm25_free (NULL
 * ok). Strings returned by qac_bm25_docid live as long as the handle.
 * Searching is safe from several threads at once. */
#ifndef QAC_BM25_H
#define QAC_BM25_H

#include "qac_common.h"
#include "qac_progress.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qac_bm25_build_opts {
    qac_progress_fn progress; /* phases "bm25 index" (documents) and "bm25 write/terms" */
    void *progress_user;
} qac_bm25_build_opts;

/* Build an inverted index of a corpus (any qac_data.h format) into out_dir
 * (created if missing). o may be NULL. */
qac_status qac_bm25_build(const char *out_dir, const char *corpus_path, const qac_bm25_build_opts *o);

typedef struct qac_bm25 qac_bm25;
/* Open (memory-map) and validate an index directory. */
qac_status qac_bm25_open(qac_bm25 **out, const char *dir);
void qac_bm25_free(qac_bm25 *b);
int64_t qac_bm25_count(const qac_bm25 *b);
/* External id of a row, or NULL when row is out of range. */
const char *qac_bm25_docid(const qac_bm25 *b, int64_t row);

typedef struct qac_bm25_params {
    float k1, b;       /* defaults 0.9, 0.4; k1 >= 0, 0 <= b <= 1 */
    int exact_lengths; /* 0: Lucene's quantised lengths (default); 1: exact */
} qac_bm25_params;
#define QAC_BM25_K1_DEFAULT 0.9f
#define QAC_BM25_B_DEFAULT 0.4f

/* Top-k rows and scores for one query text, best first; *n_out <= k.
 * p NULL means the defaults. Documents matching no query term are never
 * returned. */
qac_status qac_bm25_search(const qac_bm25 *b, const char *query, const qac_bm25_params *p, int k,
                           float *scores, int64_t *rows, int *n_out);

/* Same contract and results as qac_bm25_search, scoring every posting of
 * every query term (no pruning). For tests and benchmarks. */
qac_status qac_bm25_search_exhaustive(const qac_bm25 *b, const char *query, const qac_bm25_params *p,
                                      int k, float *scores, int64_t *rows, int *n_out);

/* Index statistics. */
int64_t qac_bm25_num_terms(const qac_bm25 *b);
/* Indexed token count of a row (exact, not quantised); -1 if out of range. */
int64_t qac_bm25_doc_length(const qac_bm25 *b, int64_t row);
/* Document frequency of an analyzed term (0 if absent). */
int64_t qac_bm25_term_df(const qac_bm25 *b, const char *term);

/* Lucene's SmallFloat.intToByte4 / byte4ToInt: the one-byte length norm. */
uint8_t qac_bm25_norm_encode(uint32_t len);
uint32_t qac_bm25_norm_decode(uint8_t norm);

#ifdef __cplusplus
}
#endif
#endif
