/* Combining ranked lists: the hybrid (dense + BM25) search that the server's
 * /search and `qac search --mode hybrid` share, so both give the same run.
 *
 * Reciprocal-rank fusion (Cormack, Clarke and Buettcher, SIGIR 2009) with
 * k = 60: a document's score is the sum, over the lists that hold it, of
 * 1 / (60 + its rank in that list), ranks from 1, summed in double, dense
 * list first, then rounded to a float (as every score qac answers or
 * writes, so that JSON, runs and trec_eval see one order). Each list is
 * fetched max(k, 100) deep. Fused hits are ordered by score descending,
 * then docid descending (strcmp), trec_eval's order, and cut at k. */
#ifndef QAC_FUSION_H
#define QAC_FUSION_H

#include "qac_common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QAC_RRF_K 60
#define QAC_HYBRID_MIN_DEPTH 100

/* One ranked document. docid is borrowed; row is the dense index row, or
 * -1 when unknown (a document only the BM25 list holds). */
typedef struct qac_hit {
    const char *docid;
    double score;
    int64_t row;
} qac_hit;

/* How deep each list is fetched for a hybrid top k: max(k, 100). */
int qac_hybrid_depth(int k);

/* Fuse a dense list (dense_rows [n_dense], best first, -1 entries skipped;
 * docids from dense_docids) with a BM25 list (sparse_docids [n_sparse], best
 * first) into out, which must hold n_dense + n_sparse hits. Returns the
 * number of fused hits, sorted by qac_hits_sort. */
int qac_rrf_fuse(const int64_t *dense_rows, const char *const *dense_docids, int n_dense,
                 const char *const *sparse_docids, int n_sparse, qac_hit *out);

/* Score descending, then docid descending by strcmp. */
void qac_hits_sort(qac_hit *hits, int n);

/* Which lists a search reads: the dense index's, BM25's, or both fused. */
typedef enum qac_search_mode { QAC_SEARCH_DENSE = 0, QAC_SEARCH_BM25, QAC_SEARCH_HYBRID } qac_search_mode;

/* A row's docid in a dense index or a BM25 index (borrowed, as long as it). */
typedef const char *(*qac_docid_fn)(void *index, int64_t row);

/* One query's ranked lists as the searches returned them, best first, and
 * how to name their rows. The dense list is read unless the mode is BM25,
 * the BM25 list unless it is dense. */
typedef struct qac_hit_lists {
    qac_search_mode mode;
    const int64_t *dense_rows;  /* [n_dense]; -1: no hit there */
    const float *dense_scores;  /* [n_dense] */
    int n_dense;
    const int64_t *bm25_rows;   /* [n_bm25] */
    const float *bm25_scores;   /* [n_bm25] */
    int n_bm25;
    qac_docid_fn dense_docid;
    void *dense_index;
    qac_docid_fn bm25_docid;
    void *bm25_index;
    const char **names;         /* scratch: [n_dense + n_bm25] docids, for the fusion */
} qac_hit_lists;

/* The query's hits into out [n_dense + n_bm25]: the dense list (row: its
 * dense row), the BM25 list (row -1), or their fusion (qac_rrf_fuse),
 * ordered by qac_hits_sort and cut at k. Returns how many. The one place
 * where `qac search` and the server's /search turn lists into hits. */
int qac_hits_collect(const qac_hit_lists *l, int k, qac_hit *out);

#ifdef __cplusplus
}
#endif
#endif
