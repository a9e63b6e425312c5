/* Internal to trainer/: what reranking a run, labelling and denoising
 * share (rerank_run.c). */
#ifndef QAC_RERANK_INTERNAL_H
#define QAC_RERANK_INTERNAL_H

#include "qac_eval.h"
#include "qac_rerank.h"
#include "textmap.h"

typedef struct qac_rr_cand {
    const char *docid;
    double score;
} qac_rr_cand;

/* trec_eval's order: score descending, then docid descending */
void qac_rr_sort(qac_rr_cand *c, size_t n);
/* The most entries any query of the run has. */
size_t qac_rr_run_max_entries(const qac_run *run);

/* A passage's text as the corpus readers give it (title, a space, the
 * text; the text alone without a title): borrowed from corpus, or built in
 * *buf (grown; the caller frees it). */
qac_status qac_rr_passage_text(const qac_textmap *corpus, const char *docid, char **buf, size_t *cap,
                               const char **text, size_t *len);

/* The texts of up to n passages, each with its own buffer. */
typedef struct qac_rr_texts {
    char **bufs;
    size_t *caps;
    const char **texts;
    size_t *lens;
    size_t n;
} qac_rr_texts;
qac_status qac_rr_texts_create(qac_rr_texts *t, size_t n);
void qac_rr_texts_free(qac_rr_texts *t);
/* texts[j] of c[j].docid for j < n (<= the created size) */
qac_status qac_rr_texts_fill(qac_rr_texts *t, const qac_textmap *corpus, const qac_rr_cand *c, size_t n);

#endif
