/* Fine-tuning a retriever (Tevatron's recipe) and mining hard negatives.
 * See TRAINING.md "Fine-tuning (Tevatron)" of the design.
 *
 * Training data is a set of examples, each a query with its positive and
 * negative passages, read from Tevatron jsonl, MS MARCO qidpidtriples (with
 * queries and a corpus) or qrels (positives only, with queries and a
 * corpus). A passage's text is "title [SEP] text" when it has a title.
 *
 * Sampling rule (qac_ft_sample), per example and seeded; every draw is a
 * pure function of (seed, example, epoch), so a resumed run draws the same:
 *   h     = qac_rng_key(seed, ex, QAC_FT_STREAM_POS, 0)
 *   positive: (h + epoch) mod n_pos                      (uint64 arithmetic)
 *   negatives, k = n - 1 of a pool of m:
 *     m >= k: one fixed shuffle of the pool (Fisher-Yates, i = m-1 .. 1,
 *             j = qac_rng_below(qac_rng_key(seed, ex, QAC_FT_STREAM_NEG, 0), i, i + 1)),
 *             epoch e takes the k entries from (e * k) mod m on, wrapping;
 *     m <  k: with replacement, draw j is pool[qac_rng_below(
 *             qac_rng_key(seed, ex, QAC_FT_STREAM_REPL, epoch), j, m)].
 * Example order: every epoch is a shuffle of all examples (Fisher-Yates
 * with key qac_rng_key(seed, epoch, QAC_FT_STREAM_ORDER, 0)); batches take
 * consecutive examples of that stream and may straddle two epochs; an
 * example's epoch is the one it was drawn in.
 *
 * Ownership: objects are freed with their _free (NULL accepted); strings
 * returned by accessors are borrowed and live as long as the object. */
#ifndef QAC_FINETUNE_H
#define QAC_FINETUNE_H

#include "qac_data.h"
#include "qac_encoder.h"
#include "qac_eval.h"
#include "qac_index.h"
#include "qac_train.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QAC_FT_STREAM_POS 0x46540001u
#define QAC_FT_STREAM_NEG 0x46540002u
#define QAC_FT_STREAM_REPL 0x46540003u
#define QAC_FT_STREAM_ORDER 0x46540004u

/* The group of example `ex` in `epoch`: *pos receives the index of the
 * positive among its n_pos positives, neg[0 .. n-2] indices into its n_neg
 * negatives (n_neg may be 0 only when n == 1). */
void qac_ft_sample(uint64_t seed, uint64_t ex, uint64_t epoch, int n_pos, int n_neg, int n, int *pos, int *neg);
/* Position p of epoch's example order over n_examples (a permutation). */
qac_status qac_ft_order(uint64_t seed, uint64_t epoch, size_t n_examples, size_t *perm);

/* ---- training data ---- */

typedef enum qac_title_join { QAC_TITLE_SEP = 0, QAC_TITLE_SPACE = 1 } qac_title_join;

typedef struct qac_ft_data qac_ft_data;

qac_status qac_ft_data_create(qac_ft_data **out, qac_title_join join);
/* The separator QAC_TITLE_SEP puts between a title and its text (copied;
 * NULL: "[SEP]", BERT's): the model's tokenizer's, so it reads as that
 * special token. Before adding sources. */
qac_status qac_ft_data_set_sep(qac_ft_data *d, const char *sep_token);
void qac_ft_data_free(qac_ft_data *d);
/* Tevatron jsonl: {"query_id","query","positive_passages":[{"docid","title","text"}],
 * "negative_passages":[...]}, plain or gzip-compressed (util/qac_lines.h).
 * A malformed line is an error naming file and line; a query without
 * positives is skipped and counted. */
qac_status qac_ft_data_add_tevatron(qac_ft_data *d, const char *path);
/* MS MARCO qidpidtriples ("qid\tpos_pid\tneg_pid", plain or gzip), grouped
 * by query; ids are looked up in the queries file and the corpus (any
 * qac_data.h format). */
qac_status qac_ft_data_add_triples(qac_ft_data *d, const char *triples, const char *queries, const char *corpus);
/* Qrels (relevance >= 1 is a positive), queries and a corpus: positives
 * only, so these examples train with in-batch negatives (n == 1). */
qac_status qac_ft_data_add_qrels(qac_ft_data *d, const char *qrels, const char *queries, const char *corpus);
/* Freeze the set for groups of n passages: examples without negatives are
 * dropped (and counted) when n > 1. An empty set is an error. */
qac_status qac_ft_data_finish(qac_ft_data *d, int n);

/* The sources of one training set, as `qac finetune` takes them. */
typedef struct qac_ft_sources {
    const char *const *tevatron; /* Tevatron jsonl files */
    int n_tevatron;
    const char *triples;         /* MS MARCO qidpidtriples, or NULL */
    const char *qrels;           /* qrels as positives only, or NULL */
    const char *queries, *corpus; /* for triples and qrels */
    qac_title_join title_join;
    const char *sep_token;        /* QAC_TITLE_SEP joins with the model's separator
                                     (RoBERTa's "</s>"); NULL: "[SEP]" */
} qac_ft_sources;
/* Create, add every source, and finish for groups of n passages. At least
 * one source; triples and qrels need queries and a corpus. On failure *out
 * may still hold the set read so far (its skip counts explain an empty
 * set); the caller frees it either way. */
qac_status qac_ft_data_load(qac_ft_data **out, const qac_ft_sources *s, int n);

size_t qac_ft_data_count(const qac_ft_data *d);
long qac_ft_data_skipped_no_positive(const qac_ft_data *d);
long qac_ft_data_skipped_no_negative(const qac_ft_data *d);
/* A digest of the examples' content (for checking a resumed run's data). */
uint64_t qac_ft_data_digest(const qac_ft_data *d);
/* Example i's query id and text, and passage texts / docids of a group. */
const char *qac_ft_data_qid(const qac_ft_data *d, size_t i);
const char *qac_ft_data_query(const qac_ft_data *d, size_t i);
/* Group of example i in epoch under seed: texts[0] the positive, then n-1
 * negatives; docids likewise (either may be NULL). */
void qac_ft_data_group(const qac_ft_data *d, uint64_t seed, size_t i, uint64_t epoch, int n, const char **texts,
                       const char **docids);

/* ---- the fine-tuning run ---- */

typedef struct qac_ft_progress {
    long step, total;
    double epoch;     /* examples drawn / examples in the set */
    double loss, lr, grad_norm;
    double seconds;   /* this step */
    double elapsed;   /* since this process started training */
    long steps_run;   /* steps run by this process (for rates after a resume) */
    int passages;     /* passages per step */
} qac_ft_progress;

typedef struct qac_ft_dev {
    long step;
    double ndcg10, map, recall100, mrr10;
    double seconds;
} qac_ft_dev;

typedef struct qac_finetune_opts {
    qac_train_opts train;   /* total_steps 0: from epochs */
    double epochs;
    double warmup_ratio;    /* used when train.warmup_steps < 0 */
    int queries_per_batch, n_passages, q_max, p_max;
    const char *out_dir;
    long save_every;        /* <= 0: only at the end */
    int keep, resume;
    /* optional dev set, scored at every save (all three or none) */
    const char *dev_queries, *dev_qrels, *dev_corpus;
    int dev_depth;
    /* write every step's texts as jsonl and do not train (for other tools) */
    const char *dump_batches;
    int dry_run;
    /* after every step; nonzero stops the run there (its checkpoint is still
     * written when one is due) with QAC_ERR_CANCELLED */
    int (*on_step)(void *user, const qac_ft_progress *p);
    void (*on_dev)(void *user, const qac_ft_dev *r);
    void *user;
} qac_finetune_opts;

void qac_finetune_opts_default(qac_finetune_opts *o);

/* Check everything (data, dev files, the run directory, a resumed
 * checkpoint's architecture), then train m in place to o->out_dir: the
 * engine's checkpoints, log.jsonl, and dev.jsonl with the dev metrics of
 * every save; at the end the trained model itself in o->out_dir (an HF and
 * sentence-transformers directory, written as qac_model_save does, its
 * config.json last so it never looks whole before it is). *total_steps receives the run's length. A resume whose
 * options would not continue the run (README "Fine-tuning") is refused with
 * QAC_ERR_MISMATCH, naming the option and both values. */
qac_status qac_finetune_run(qac_model *m, const qac_ft_data *d, const qac_finetune_opts *o, long *total_steps,
                            long *resumed_at);

/* ---- hard-negative mining ---- */

struct qac_reranker;
typedef struct qac_mine_opts {
    const char *run;                  /* a TREC run, or NULL to search: */
    qac_encoder *enc;                 /*   query encoder and */
    const qac_index *index;           /*   index (same model) */
    int q_max;                        /* query tokens when searching (0: the model's limit) */
    const char *queries, *qrels, *corpus;
    qac_text_format queries_format, corpus_format;
    int n, depth;                     /* negatives kept, ranks considered */
    uint64_t seed;
    const char *out;                  /* Tevatron jsonl, written atomically */
    /* RocketQA's denoising (api/qac_rerank.h): with a cross-encoder, a
     * candidate it scores at or above neg_threshold (its probability) is
     * dropped as a likely false negative; NULL: none */
    struct qac_reranker *denoise;
    float neg_threshold;              /* 0.1, PAIR's and RocketQA's */
    qac_progress_fn progress;
    void *progress_user;
} qac_mine_opts;

typedef struct qac_mine_stats {
    long queries, written, skipped_no_positive, short_of_negatives;
    long negatives;
    long denoised;                    /* candidates the cross-encoder dropped */
    long scored;                      /* candidates it scored */
} qac_mine_stats;

void qac_mine_opts_default(qac_mine_opts *o);
/* For every query of o->queries with a judged positive: the top depth of
 * the run (score descending, ties by docid descending, as trec_eval), minus
 * the judged positives, shuffled with the seed (Fisher-Yates, key
 * qac_rng_key(seed, XXH64(qid), QAC_FT_STREAM_MINE, 0)), first n kept;
 * with denoise, the first n of that order the cross-encoder lets through
 * (candidates are scored n at a time, in that order, until n pass).
 * Writes Tevatron jsonl with the judged positives and texts from the corpus. */
#define QAC_FT_STREAM_MINE 0x46540005u
qac_status qac_mine(const qac_mine_opts *o, qac_mine_stats *stats);

/* ---- training curves ---- */

/* Plot loss (raw and smoothed) and learning rate by step from a log.jsonl
 * into a PNG of width x height (written atomically). */
qac_status qac_plot_log(const char *log_path, const char *png_path, int width, int height);

#ifdef __cplusplus
}
#endif
#endif
