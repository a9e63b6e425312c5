/* Reciprocal-rank fusion of a dense and a BM25 list (api/qac_fusion.h). */
#include "qac_fusion.h"

#include <stdlib.h>
#include <string.h>

int qac_hybrid_depth(int k) { return k > QAC_HYBRID_MIN_DEPTH ? k : QAC_HYBRID_MIN_DEPTH; }

static int hit_cmp(const void *a, const void *b) {
    const qac_hit *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return -strcmp(x->docid, y->docid); /* ties: docid descending, like trec_eval */
}

void qac_hits_sort(qac_hit *hits, int n) {
    if (n > 1) qsort(hits, (size_t)n, sizeof *hits, hit_cmp);
}

int qac_rrf_fuse(const int64_t *dense_rows, const char *const *dense_docids, int n_dense,
                 const char *const *sparse_docids, int n_sparse, qac_hit *out) {
    int nh = 0, rank = 0;
    for (int i = 0; i < n_dense; i++) {
        if (dense_rows[i] < 0) continue;
        out[nh++] = (qac_hit){dense_docids[i], 1.0 / (QAC_RRF_K + ++rank), dense_rows[i]};
    }
    int dense_n = nh;
    /* lists are at most a few thousand deep: a linear look-up is enough */
    for (int i = 0; i < n_sparse; i++) {
        const char *d = sparse_docids[i];
        double add = 1.0 / (QAC_RRF_K + i + 1);
        int j = 0;
        while (j < dense_n && strcmp(out[j].docid, d) != 0) j++;
        if (j < dense_n) out[j].score += add;
        else out[nh++] = (qac_hit){d, add, -1};
    }
    /* a float, as every score qac answers or writes: the JSON, the run and
     * trec_eval then see one order, ties included */
    for (int i = 0; i < nh; i++) out[i].score = (double)(float)out[i].score;
    qac_hits_sort(out, nh);
    return nh;
}

int qac_hits_collect(const qac_hit_lists *l, int k, qac_hit *out) {
    int nh = 0;
    if (l->mode == QAC_SEARCH_HYBRID) {
        const char **dense = l->names, **sparse = l->names + l->n_dense;
        for (int i = 0; i < l->n_dense; i++)
            dense[i] = l->dense_rows[i] >= 0 ? l->dense_docid(l->dense_index, l->dense_rows[i]) : NULL;
        for (int i = 0; i < l->n_bm25; i++) sparse[i] = l->bm25_docid(l->bm25_index, l->bm25_rows[i]);
        nh = qac_rrf_fuse(l->dense_rows, dense, l->n_dense, sparse, l->n_bm25, out);
    } else if (l->mode == QAC_SEARCH_DENSE) {
        for (int i = 0; i < l->n_dense; i++)
            if (l->dense_rows[i] >= 0)
                out[nh++] = (qac_hit){l->dense_docid(l->dense_index, l->dense_rows[i]), l->dense_scores[i],
                                      l->dense_rows[i]};
        qac_hits_sort(out, nh);
    } else {
        for (int i = 0; i < l->n_bm25; i++)
            out[nh++] = (qac_hit){l->bm25_docid(l->bm25_index, l->bm25_rows[i]), l->bm25_scores[i], -1};
        qac_hits_sort(out, nh);
    }
    return nh < k ? nh : k;
}
