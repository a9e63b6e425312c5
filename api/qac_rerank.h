/* Reranking a first-stage run with a cross-encoder (api/qac_xenc.h), and
 * PAIR's teacher built on it: pseudo-labels for unlabelled queries and
 * RocketQA's denoising of mined hard negatives (qac_label, and
 * qac_mine_opts.denoise in api/qac_finetune.h).
 *
 * A passage's text is what the corpus readers give (api/qac_data.h: the
 * title and the text joined by a space); the pair is (query, passage). */
#ifndef QAC_RERANK_H
#define QAC_RERANK_H

#include <stdio.h>

#include "qac_data.h"
#include "qac_finetune.h"
#include "qac_fusion.h"
#include "qac_index.h"
#include "qac_xenc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qac_rerank_opts {
    const char *run;            /* the first stage: a TREC run */
    const char *queries, *corpus;
    qac_text_format queries_format, corpus_format;
    int depth;                  /* each query's top depth (trec_eval's order) reranked; only those are written */
    qac_pair_opts pair;         /* max_len 0: the model's */
    const char *run_id;         /* the output's last column */
    const char *out;            /* TREC run, written atomically ("-": stdout) */
    qac_progress_fn progress;   /* queries done (may be NULL) */
    void *progress_user;
} qac_rerank_opts;

typedef struct qac_rerank_stats {
    long queries;        /* queries of the run reranked */
    long no_text;        /* run queries absent from the queries file (skipped, counted) */
    long pairs;          /* pairs scored */
    int64_t truncated;   /* pairs cut to the pair length */
} qac_rerank_stats;

void qac_rerank_opts_default(qac_rerank_opts *o);

/* Every query of the run that the queries file has: its top depth scored
 * with r, written in the order of the raw scores rounded to float (highest
 * first), ties by docid descending, trec_eval's and the rest of qac's
 * order; the score column is the raw score (the logit, or l1 - l0). The
 * scores of a query do not depend on the other queries or the batch on
 * the CPU. A run passage missing from the corpus is an error naming it. */
qac_status qac_rerank_run(qac_reranker *r, const qac_rerank_opts *o, qac_rerank_stats *stats);

/* ---- reranking a search's hits (qac search --rerank) ----
 * The passages' texts, looked up by docid (or by dense row): from a corpus
 * read into memory (any qac_data.h format), or from the corpus a dense
 * index was built from, read by offset (qac_index_text; a hit without a
 * dense row, one only BM25 found, is found by its docid among the index's
 * rows). Either gives the text the corpus readers give (the title, a
 * space, the text), as qac_rerank_run does. Not thread-safe. */
typedef struct qac_passage_texts qac_passage_texts;
qac_status qac_passage_texts_corpus(qac_passage_texts **out, const char *corpus, qac_text_format fmt);
/* ix is borrowed (free the texts first). */
qac_status qac_passage_texts_index(qac_passage_texts **out, const qac_index *ix);
void qac_passage_texts_free(qac_passage_texts *t);

/* One query's hits (n of them, any order) scored by r with their passages'
 * texts: each hit's score becomes the raw score rounded to float, and the
 * hits are ordered by qac_hits_sort (score descending, then docid
 * descending: trec_eval's and the rest of qac's order), as
 * qac_rerank_run orders a query's top depth. A passage without a text is
 * an error naming it. po: NULL for the reranker's defaults. */
qac_status qac_rerank_hits(qac_reranker *r, qac_passage_texts *t, const char *query, size_t qlen, qac_hit *hits,
                           int n, const qac_pair_opts *po);

/* ---- PAIR's teacher: pseudo-labels ----
 * PAIR (following RocketQA): each query's first-stage candidates are
 * scored by the cross-encoder; a candidate whose probability (sigmoid of
 * the logit, or softmax(l)[1] with two labels) is above pos_threshold is a
 * positive, one below neg_threshold a hard negative, the rest dropped. The
 * paper's thresholds are 0.9 and 0.1 (its Table 5: the strictest setting
 * gives the cleanest labels and the best retriever). With qrels the judged
 * positives are positives too and never negatives (the paper applies the
 * teacher to the labelled queries as well). A query with no positive is
 * skipped and counted. */
typedef struct qac_label_opts {
    const char *run;            /* the candidates: a first-stage TREC run */
    const char *queries, *corpus;
    qac_text_format queries_format, corpus_format;
    const char *qrels;          /* optional judgements (relevance >= 1 positive) */
    int depth;                  /* candidates scored per query (the run's top, trec_eval's order) */
    int n;                      /* negatives kept per query: the highest-ranked below neg_threshold */
    float pos_threshold, neg_threshold;
    qac_pair_opts pair;
    const char *out;            /* Tevatron jsonl (qac finetune --train), written atomically */
    const char *pretrain_out;   /* optional pre-training jsonl {"id","text","queries"} (qac pretrain --data):
                                   each positive passage with its pseudo-labelled queries */
    qac_progress_fn progress;
    void *progress_user;
} qac_label_opts;

typedef struct qac_label_stats {
    long queries;        /* run queries with a text */
    long written;        /* queries with at least one positive */
    long no_positive;    /* skipped: nothing above pos_threshold (nor judged) */
    long positives, judged_positives, negatives, dropped; /* dropped: between the thresholds */
    long pairs;
    int64_t truncated;
} qac_label_stats;

void qac_label_opts_default(qac_label_opts *o);
qac_status qac_label(qac_reranker *r, const qac_label_opts *o, qac_label_stats *stats);

/* ---- training a reranker ----
 * Tevatron's reranker and RocketQA's cross-encoder: groups of one positive
 * and n-1 negatives (the fine-tuning data of api/qac_finetune.h, sampled by
 * the same rule: a Tevatron jsonl from qac mine over a first-stage run),
 * each pair [CLS] query [SEP] passage [SEP], the softmax cross-entropy of
 * each group's raw scores with the positive as the target, averaged over
 * the groups (trainer/xenc_trainer.h). AdamW over the encoder (pooler and
 * token-type embeddings included) and the classifier. CPU only. */
typedef struct qac_xenc_train_opts {
    /* the run as qac_finetune_run takes it: steps or epochs, groups per step
     * (queries_per_batch), pairs per group (n_passages), the schedule and
     * AdamW, dropout, chunk (GradCache in pairs), seed, out_dir, save_every,
     * keep, resume, dev_queries/qrels/corpus and dev_depth, on_step, on_dev
     * (q_max and p_max unused: the pair has its own length) */
    qac_finetune_opts ft;
    int max_len;                /* pair length, specials included */
    qac_truncation truncation;  /* how a pair over it is cut */
    float head_dropout;         /* < 0: the checkpoint's classifier_dropout, else its hidden dropout */
    const char *dev_run;        /* the dev queries' first-stage run: its top dev_depth reranked at every save */
} qac_xenc_train_opts;

/* The fine-tuning defaults with 8 pairs a group, 8 groups a step, pairs
 * of 160 tokens (a 32-token query and a 128-token passage), lr 2e-5. */
void qac_xenc_train_opts_default(qac_xenc_train_opts *o);

/* Train x in place to o->ft.out_dir as qac_finetune_run trains a
 * bi-encoder: OUT/checkpoint-<step>/ (the reranker's directory plus its
 * training state), OUT/latest, OUT/log.jsonl (one line a step), with a dev
 * run OUT/dev.jsonl (nDCG@10, MAP, R@100, MRR@10 of the reranked dev run at
 * every save; its runs in OUT/dev/), and at the end the reranker itself in
 * OUT (config.json last). A resumed run continues bit for bit; a resume
 * whose options would not is refused with QAC_ERR_MISMATCH, naming the
 * option and both values. */
qac_status qac_xenc_train_run(qac_xenc *x, const qac_ft_data *d, const qac_xenc_train_opts *o, long *total_steps,
                              long *resumed_at);

#ifdef __cplusplus
}
#endif
#endif
