/* BM25 (Lucene/Anserini flavour) over an English analyzer: lower-casing,
 * stopwords, Porter stemming (libstemmer). Exact top-k with WAND-style
 * pruning.
 *
 * Ownership: qac_bm25_open returns a handle freed with qac_bm25_free.
 * Searching is safe from several threads at once. */
#ifndef QAC_BM25_H
#define QAC_BM25_H

#include "qac_util.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qac_bm25_build_opts {
    qac_progress_fn progress;
    void *progress_user;
} qac_bm25_build_opts;

/* Build an inverted index of a corpus (any qac_data.h format) into out_dir. */
qac_status qac_bm25_build(const char *out_dir, const char *corpus_path, const qac_bm25_build_opts *o);

typedef struct qac_bm25 qac_bm25;
qac_status qac_bm25_open(qac_bm25 **out, const char *dir);
void qac_bm25_free(qac_bm25 *b);
int64_t qac_bm25_count(const qac_bm25 *b);
const char *qac_bm25_docid(const qac_bm25 *b, int64_t row);

typedef struct qac_bm25_params { float k1, b; } qac_bm25_params; /* defaults 0.9, 0.4 */

/* Top-k rows and scores for one query text, best first; *n_out <= k. */
qac_status qac_bm25_search(const qac_bm25 *b, const char *query, const qac_bm25_params *p, int k,
                           float *scores, int64_t *rows, int *n_out);

#ifdef __cplusplus
}
#endif
#endif
