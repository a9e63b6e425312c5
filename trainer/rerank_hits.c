/* Reranking a search's hits with a cross-encoder (api/qac_rerank.h): the
 * passages' texts from a corpus or a dense index's corpus, and one query's
 * hits rescored and reordered. */
#include <stdlib.h>
#include <string.h>

#include "qac_rerank.h"
#include "qac_util.h"
#include "rerank_internal.h"
#include "textmap.h"

struct qac_passage_texts {
    qac_textmap *corpus;    /* a corpus read into memory, or */
    const qac_index *ix;    /* a dense index's corpus, by row */
    qac_strmap *rows;       /* docid -> dense row, made on first need */
    qac_rr_texts tx;        /* the texts of the hits at hand */
    char **owned;           /* [tx.n] texts read from the index (freed at the next call) */
    float *logits, *raw;    /* [tx.n * 2], [tx.n] */
};

qac_status qac_passage_texts_corpus(qac_passage_texts **out, const char *corpus, qac_text_format fmt) {
    *out = NULL;
    qac_passage_texts *t = calloc(1, sizeof *t);
    if (!t) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    qac_status st = qac_textmap_load(&t->corpus, corpus, QAC_READ_CORPUS, fmt);
    if (st) {
        free(t);
        return st;
    }
    *out = t;
    return QAC_OK;
}

qac_status qac_passage_texts_index(qac_passage_texts **out, const qac_index *ix) {
    *out = NULL;
    if (!qac_index_has_text(ix))
        return qac_set_error(QAC_ERR_INVALID, "the dense index was built from vectors and holds no passage text: "
                                              "give the corpus (--corpus)");
    qac_passage_texts *t = calloc(1, sizeof *t);
    if (!t) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    t->ix = ix;
    *out = t;
    return QAC_OK;
}

static void drop_owned(qac_passage_texts *t) {
    for (size_t i = 0; t->owned && i < t->tx.n; i++) {
        free(t->owned[i]);
        t->owned[i] = NULL;
    }
}

void qac_passage_texts_free(qac_passage_texts *t) {
    if (!t) return;
    drop_owned(t);
    qac_rr_texts_free(&t->tx);
    free(t->owned), free(t->logits), free(t->raw);
    qac_textmap_free(t->corpus);
    qac_strmap_free(t->rows);
    free(t);
}

/* room for n hits */
static qac_status reserve(qac_passage_texts *t, size_t n) {
    if (n <= t->tx.n && t->logits) return QAC_OK;
    drop_owned(t);
    qac_rr_texts_free(&t->tx);
    free(t->owned), free(t->logits), free(t->raw);
    t->owned = calloc(n ? n : 1, sizeof *t->owned);
    t->logits = malloc((n ? n : 1) * 2 * sizeof *t->logits);
    t->raw = malloc((n ? n : 1) * sizeof *t->raw);
    qac_status st = qac_rr_texts_create(&t->tx, n);
    if (!st && (!t->owned || !t->logits || !t->raw)) st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
    if (st) {
        free(t->owned), free(t->logits), free(t->raw);
        t->owned = NULL, t->logits = t->raw = NULL;
    }
    return st;
}

/* the dense row of a docid (-1: none) */
static qac_status row_of(qac_passage_texts *t, const char *docid, int64_t *row) {
    if (!t->rows) {
        qac_status st = qac_strmap_create(&t->rows);
        for (int64_t r = 0; !st && r < qac_index_count(t->ix); r++)
            st = qac_strmap_put(t->rows, qac_index_docid(t->ix, r), (long)r);
        if (st) {
            qac_strmap_free(t->rows);
            t->rows = NULL;
            return st;
        }
    }
    *row = qac_strmap_get(t->rows, docid);
    return QAC_OK;
}

static qac_status hit_text(qac_passage_texts *t, const qac_hit *h, size_t j) {
    if (t->corpus)
        return qac_rr_passage_text(t->corpus, h->docid, &t->tx.bufs[j], &t->tx.caps[j], &t->tx.texts[j],
                                   &t->tx.lens[j]);
    int64_t row = h->row;
    qac_status st = row >= 0 ? QAC_OK : row_of(t, h->docid, &row);
    if (!st && row < 0)
        st = qac_set_error(QAC_ERR_NOT_FOUND, "passage '%s' is not in the dense index, whose corpus holds the texts "
                                              "(give the corpus: --corpus)", h->docid);
    if (!st) st = qac_index_text(t->ix, row, &t->owned[j]);
    if (!st) t->tx.texts[j] = t->owned[j], t->tx.lens[j] = strlen(t->owned[j]);
    return st;
}

qac_status qac_rerank_hits(qac_reranker *r, qac_passage_texts *t, const char *query, size_t qlen, qac_hit *hits,
                           int n, const qac_pair_opts *po) {
    if (n < 1) return QAC_OK;
    const qac_xenc *x = qac_reranker_model(r);
    qac_status st = reserve(t, (size_t)n);
    for (int j = 0; j < n && !st; j++) st = hit_text(t, &hits[j], (size_t)j);
    if (!st) st = qac_reranker_logits_one(r, query, qlen, t->tx.texts, t->tx.lens, n, po, t->logits);
    if (!st) {
        qac_xenc_raw_scores(x, t->logits, n, t->raw);
        for (int j = 0; j < n; j++) hits[j].score = (double)t->raw[j];
        qac_hits_sort(hits, n);
    }
    drop_owned(t);
    return st;
}
