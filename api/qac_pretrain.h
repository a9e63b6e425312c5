/* Pre-training (DESIGN.md "Pre-training data" and "Pre-training
 * objectives", TRAINING.md "Pre-training"): the data a step draws, the
 * context schedule, and HLP pair mining.
 *
 * Every draw is a pure function of (seed, step, slot): a run resumed at
 * step s sees the same pairs as the uninterrupted run, and the only data
 * cursor is the step. */
#ifndef QAC_PRETRAIN_H
#define QAC_PRETRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "qac_common.h"
#include "qac_model.h"
#include "qac_tokenizer.h"
#include "qac_train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- contexts ---- */

/* What a pair's second text is: one of the passage's candidate queries
 * (query-as-context), or a second span of the same document. */
typedef enum qac_pt_kind { QAC_PT_QUERY = 0, QAC_PT_SPAN = 1 } qac_pt_kind;

typedef enum qac_pt_mode {
    QAC_PT_MODE_QUERY = 0,      /* every pair a (passage, query) pair */
    QAC_PT_MODE_SPAN = 1,       /* every pair two spans */
    QAC_PT_MODE_MIXED = 2,      /* either, with probability 0.5 */
    QAC_PT_MODE_CURRICULUM = 3, /* span pairs first, then query pairs */
} qac_pt_mode;

typedef struct qac_pt_context {
    qac_pt_mode mode;
    double span_frac; /* curriculum: the fraction of steps in the span phase (0.75) */
} qac_pt_context;

/* --context query|span|mixed, and --curriculum span:0.75,query (NULL: none;
 * it overrides the context). Errors name the bad text. */
qac_status qac_pt_context_parse(qac_pt_context *c, const char *context, const char *curriculum);
/* The probability that a slot of step `step` (0-based) of `total` draws a
 * span pair: 0, 1, 0.5, or the curriculum's schedule. */
double qac_pt_span_prob(const qac_pt_context *c, long step, long total);

/* ---- data ---- */

typedef struct qac_pt_data_opts {
    const char *path;      /* pre-training jsonl {"id","text","queries":[...]} (.gz accepted) */
    const char *docs_path; /* documents jsonl {"id","text"} for span pairs; NULL: the texts of `path` */
    int max_len;           /* passage and span cap in tokens, [CLS] and [SEP] included (default 144) */
    int query_max_len;     /* query cap, the same way (default 32) */
    int threads;           /* tokenizing at load; <= 0: one per core */
} qac_pt_data_opts;
void qac_pt_data_opts_default(qac_pt_data_opts *o);

typedef struct qac_pt_data qac_pt_data;
/* Reads and tokenizes everything once. Records without text are skipped
 * and counted; a query-as-context draw from a record without queries falls
 * back to a span pair (counted). */
qac_status qac_pt_data_open(qac_pt_data **out, const qac_pt_data_opts *o, const qac_tokenizer *tok);
void qac_pt_data_free(qac_pt_data *d);
long qac_pt_data_count(const qac_pt_data *d); /* documents a step draws from */

/* One pair: a is the passage (or the first span), b the query (or the
 * second span); token ids with [CLS] first and [SEP] last, unpadded,
 * valid until the next qac_pt_data_batch call. */
typedef struct qac_pt_pair {
    const int32_t *a, *b;
    int a_len, b_len;
    qac_pt_kind kind;
    long doc; /* index of the source record */
} qac_pt_pair;

/* The B pairs of step `step`: documents in a seeded permutation per epoch
 * (slot i of step s is position s*B + i of the epoch stream), each slot a
 * span pair with probability span_prob, the query drawn uniformly from the
 * candidates, spans cut on sentence boundaries; every draw keyed by (seed,
 * step, slot). */
qac_status qac_pt_data_batch(qac_pt_data *d, qac_pt_pair *pairs, int B, long step, double span_prob, uint64_t seed);

/* ---- HLP pairs ---- */

typedef struct qac_hlp_opts {
    const char *path;       /* documents jsonl with "id", "text" and optionally "title", "links" */
    const char *edges_path; /* TSV of edges "from\tto" (NULL: the links field) */
    const char *out_path;   /* pre-training jsonl to write */
    int dual_link, co_mention;  /* which pair kinds to mine (both by default) */
    int max_per_doc;        /* cap on queries written per passage (0: no cap) */
    uint64_t seed;
} qac_hlp_opts;
void qac_hlp_opts_default(qac_hlp_opts *o);

typedef struct qac_hlp_stats {
    long docs, edges, edges_unresolved, dual_link_pairs, co_mention_pairs, written;
} qac_hlp_stats;
qac_status qac_hlp_mine(const qac_hlp_opts *o, qac_hlp_stats *stats);

/* ---- the pre-training run ----
 * A pre-trainer owns the heads an objective needs (fresh, HF init from the
 * seed) and trains them with the encoder: gradients and AdamW m, v over
 * [encoder | heads] in one block each, global-norm clipping over all of
 * them, no weight decay on biases or LayerNorm. Only the encoder is
 * exported; the heads live in each checkpoint's training state. A
 * sentence-transformers checkpoint has no MLM head, so the tied head's
 * transform and bias are always created fresh. */

typedef enum qac_pt_objective {
    QAC_PT_COCONDENSER = 0, /* MLM + Condenser head MLM + contrastive (or PAIR) */
    QAC_PT_COTMAE = 1,      /* encoder MLM + masked decoder MLM, symmetric */
    QAC_PT_QGEN = 2,        /* encoder MLM + causal query decoder */
} qac_pt_objective;

typedef struct qac_pt_objective_opts {
    qac_pt_objective objective;
    int head_layers;     /* Condenser head (default 2) or CoT-MAE decoder (default 1); 0: the default */
    int skip_from;       /* Condenser: the states after this encoder layer; < 0: half the depth */
    float mask_rate;     /* coCondenser whole-word MLM rate (0.15) */
    float enc_mask_rate; /* CoT-MAE and QGen encoder rate (0.30) */
    float dec_mask_rate; /* CoT-MAE decoder rate (0.45) */
    float tau;           /* contrastive temperature (1) */
    float alpha;         /* > 0: the PAIR loss (1-a) L_q + a L_p replaces the contrastive loss */
} qac_pt_objective_opts;

typedef struct qac_pt_progress {
    long step, total;
    double loss;         /* the sum of the parts below */
    double mlm;          /* encoder MLM (coCondenser: the late MLM) */
    double head;         /* Condenser-head MLM, or the decoder's loss */
    double contrastive;  /* contrastive or PAIR; 0 for the generative objectives */
    double span_frac;    /* share of this step's pairs that were span pairs */
    double lr, grad_norm;
    double seconds, elapsed;
    long steps_run;
    int pairs;
    long tokens;         /* real tokens through the encoder this step */
} qac_pt_progress;

typedef struct qac_pretrain_opts {
    qac_train_opts train;   /* lr 1e-4, wd 0.01, clip 1.0, linear; tau, sim, pair_alpha, chunk unused */
    qac_pt_objective_opts obj;
    double warmup_ratio;    /* used when train.warmup_steps < 0 (0.1) */
    int batch;              /* pairs per step */
    qac_pt_context context;
    qac_pt_data_opts data;
    const char *out_dir;
    long save_every;        /* <= 0: only at the end */
    int keep, resume;
    /* called once before the first step with a line worth showing (NULL: none) */
    void (*on_note)(void *user, const char *line);
    void (*on_step)(void *user, const qac_pt_progress *p);
    void *user;
} qac_pretrain_opts;

void qac_pt_objective_opts_default(qac_pt_objective_opts *o);
void qac_pretrain_opts_default(qac_pretrain_opts *o);
/* "cocondenser" | "cotmae" | "qgen" */
qac_status qac_pt_objective_parse(qac_pt_objective *out, const char *name);

/* Check everything (options, data, the run directory), then train m in
 * place: OUT/checkpoint-<step>/ (encoder checkpoint + training_state.qts
 * with the heads and optimiser state), OUT/latest, OUT/log.jsonl (per step:
 * loss and its parts, lr, grad norm, span fraction), and at the end the
 * encoder alone as an HF checkpoint in OUT itself. */
qac_status qac_pretrain_run(qac_model *m, const qac_pretrain_opts *o, long *resumed_at);

#ifdef __cplusplus
}
#endif

#endif
