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
#include "qac_progress.h"
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

/* The curriculum, as the document-expansion paper runs it ("75% of the
 * total steps are used for the first stage of pre-training with sampled
 * spans, and the remaining 25% ... with LLM-generated queries. We use the
 * cosine scheduler ... for the first stage, and a constant learning rate
 * for the second stage"): a hard switch, not a blend. With T total steps
 * and f = span_frac, the first S = floor(f*T + 0.5) steps (0-based step
 * < S) draw span pairs only and the rest query pairs only. "Cosine" and
 * "constant" are the two stages' learning-rate schedules, not the mix of
 * pair kinds: qac_pt_lr_scale gives them. */
/* --context query|span|mixed, and --curriculum span:0.75,query (NULL: none;
 * it overrides the context). Errors name the bad text. */
qac_status qac_pt_context_parse(qac_pt_context *c, const char *context, const char *curriculum);
/* The probability that a slot of step `step` (0-based) of `total` draws a
 * span pair: 0, 1, 0.5, or the curriculum's schedule. */
double qac_pt_span_prob(const qac_pt_context *c, long step, long total);

/* S above for the curriculum; otherwise 0 (query, mixed) or total (span). */
long qac_pt_span_steps(const qac_pt_context *c, long total);
/* The learning-rate multiplier of step `step` for the curriculum: stage 1
 * (steps [0, S)) qac_lr_at's warmup + cosine over S steps (from 0 at step
 * 0, warmup llround(warmup_frac*S) steps, decay to 0 at S: transformers'
 * get_cosine_schedule_with_warmup); stage 2 (steps [S, total)) constant 1 (the
 * paper's second run starts again from the peak rate). For the other modes
 * warmup and cosine over the whole run; an engine with its own schedule
 * option may use that instead. A scale in [0, 1]. */
double qac_pt_lr_scale(const qac_pt_context *c, long step, long total, double warmup_frac);

/* ---- data ---- */

typedef struct qac_pt_data_opts {
    const char *path;      /* pre-training jsonl {"id","text","queries":[...]} (.gz accepted) */
    const char *docs_path; /* documents jsonl {"id","text"} for span pairs; NULL: the texts of `path` */
    int max_len;           /* passage and span cap in tokens, [CLS] and [SEP] included (default 144) */
    int query_max_len;     /* query cap, the same way (default 32) */
    int threads;           /* tokenizing at load; <= 0: one per core */
    /* Put after [CLS] of every query (query_prompt) and every passage or
     * span (passage_prompt): the prompt's own tokens (without specials),
     * then the text's, cut so that the whole still fits its cap. NULL or
     * "": none. For WordPiece this equals tokenising prompt + text as one
     * string whenever the prompt ends in a space or punctuation. */
    const char *query_prompt, *passage_prompt;
    qac_progress_fn progress; /* optional: phases "pretrain read/records", "pretrain tokenize/records" */
    void *progress_user;
} qac_pt_data_opts;
void qac_pt_data_opts_default(qac_pt_data_opts *o);

typedef struct qac_pt_data qac_pt_data;
/* Reads and tokenizes everything once. Records without text are skipped
 * and counted; a query-as-context draw from a record without queries falls
 * back to a span pair (counted). */
qac_status qac_pt_data_open(qac_pt_data **out, const qac_pt_data_opts *o, const qac_tokenizer *tok);
void qac_pt_data_free(qac_pt_data *d);
long qac_pt_data_count(const qac_pt_data *d); /* documents a step draws from */

/* What the data holds and what was drawn (counts since open).
 *
 * Sentences: a text is cut after every run of '.', '!' or '?' that is
 * followed by whitespace (space, tab, newline), and at every paragraph
 * break ("\n\n"); pieces without tokens are dropped. Each sentence is
 * tokenized on its own (for WordPiece the concatenation equals the whole
 * text's tokens, since cuts fall on whitespace).
 * Spans: a document's tokens are packed greedily, sentence after sentence,
 * into spans of at most max_len - 2 tokens; a sentence longer than that is
 * cut inside (at the last word start that fits, else at the cap), counted
 * in forced_cuts. A span pair then draws, per (seed, step, slot):
 *   - two different spans uniformly, when the document packs into >= 2
 *     (span_multi);
 *   - otherwise (the document fits in one span) the document split into two
 *     non-empty halves at a sentence boundary drawn uniformly among its
 *     inner boundaries (span_split_sentence);
 *   - a single sentence is split at a word start drawn uniformly among its
 *     inner word starts (span_split_word);
 *   - a one-word document is paired with itself (span_self);
 * and the two sides are swapped with probability 1/2, as coCondenser's
 * random.sample(spans, 2) orders them. */
/* End offset of text's first sentence by the rule above (len when there is
 * no cut); leading blanks belong to it. */
size_t qac_pt_first_sentence(const char *text, size_t len);

typedef struct qac_pt_data_stats {
    long records;          /* lines of the pre-training file */
    long skipped_no_text;  /* records whose text gives no tokens: skipped */
    long no_queries;       /* kept records without queries */
    long queries;          /* candidate queries kept */
    long span_docs;        /* documents span pairs come from (docs_path or the records) */
    long span_multi, span_split_sentence, span_split_word, span_self; /* per document, the rule above */
    long forced_cuts;      /* cuts inside over-long sentences */
    long drawn_query, drawn_span, query_fallback; /* pairs drawn; query slots that fell back to spans */
} qac_pt_data_stats;
void qac_pt_data_stats_get(const qac_pt_data *d, qac_pt_data_stats *s);

/* Inspection (tests, --dry-run): record `doc`'s id, its text's tokens
 * (no specials), its sentence starts (nsent + 1 offsets, the last = ntok)
 * and span starts (nspan + 1 offsets). All borrowed. kind QAC_PT_SPAN with
 * docs_path set reads the documents file. Returns QAC_ERR_INVALID for an
 * index out of range. */
qac_status qac_pt_data_doc(const qac_pt_data *d, qac_pt_kind kind, long doc, const char **id,
                           const int32_t **tokens, int *ntok, const int **sent, int *nsent,
                           const int **span, int *nspan);
/* Record `doc`'s candidate queries: count, and the q-th one's tokens
 * (no specials, already cut to query_max_len - 2). */
int qac_pt_data_nqueries(const qac_pt_data *d, long doc);
qac_status qac_pt_data_query(const qac_pt_data *d, long doc, int q, const int32_t **tokens, int *n);

/* One pair: a is the passage (or the first span), b the query (or the
 * second span); token ids with [CLS] first and [SEP] last, unpadded,
 * valid until the next qac_pt_data_batch call. */
typedef struct qac_pt_pair {
    const int32_t *a, *b;
    int a_len, b_len;
    qac_pt_kind kind;
    long doc; /* index of the source record; of the documents file for span pairs when docs_path is set */
} qac_pt_pair;

/* Random streams: the epoch order is the Fisher-Yates shuffle keyed by
 * qac_rng_key(seed, epoch, QAC_PT_STREAM_ORDER, file) (file 0: the records,
 * 1: the documents file); the slot's kind, query and spans by
 * qac_rng_key(seed, step, slot, QAC_PT_STREAM_KIND / _QUERY / _SPAN).
 * With docs_path, span slots walk the documents file's own stream
 * (position s*B + i of it) and query slots the records'; a query slot whose
 * record has no queries becomes a span slot (the documents file's, or the
 * record's own text without docs_path). */
#define QAC_PT_STREAM_ORDER 0x50540001u
#define QAC_PT_STREAM_KIND 0x50540002u
#define QAC_PT_STREAM_QUERY 0x50540003u
#define QAC_PT_STREAM_SPAN 0x50540004u

/* The B pairs of step `step`: documents in a seeded permutation per epoch
 * (slot i of step s is position s*B + i of the epoch stream), each slot a
 * span pair with probability span_prob, the query drawn uniformly from the
 * candidates, spans cut on sentence boundaries; every draw keyed by (seed,
 * step, slot). */
qac_status qac_pt_data_batch(qac_pt_data *d, qac_pt_pair *pairs, int B, long step, double span_prob, uint64_t seed);

/* ---- HLP pairs ----
 *
 * The graph: documents are the records of `path` (a repeated id is one
 * document: the first record's text and title, every record's links); an edge
 * A -> B for each distinct entry B of A's "links" (or each TSV line
 * "A\tB"; an optional first line "from\tto" is a header). Self links are
 * dropped; a link naming an id not in the file is unresolved (counted,
 * dropped).
 * Pairs (unordered, each kind counted once per pair):
 *   dual-link   A -> B and B -> A;
 *   co-mention  A -> C and B -> C for some third document C that is not a
 *               hub, and {A, B} not dual-link. A hub is a document whose
 *               in-degree exceeds K: hub_degree when > 0, else the paper's
 *               rule (co-mentioned entities in the top 10% of in-degree are
 *               filtered), read as the smallest K such that at most
 *               hub_top * docs documents have an in-degree above K. This
 *               also bounds the work: C contributes at most K(K-1)/2 pairs.
 *               (The paper's pseudo-code also asks that the passage link
 *               the query's document; TRAINING.md and the issue define
 *               co-mention without it, and qac follows them.)
 * Each pair gives each side with text a pre-training record: the passage
 * is the document's text (no title, as in the paper) and a query is the
 * partner's query-side text. The paper's query is the partner's sentence
 * that carries the hyperlink; a link graph without anchors has none, so the
 * query side is the partner's "title" when it has one, else its first
 * sentence (the sentence rule above), else the partner gives no query.
 * Per passage: dual-link partners first, then co-mention, each kind in a
 * seeded shuffle (key qac_rng_key(seed, doc, QAC_HLP_STREAM, kind)), cut to
 * max_per_doc. Output jsonl in file order, one line per passage with at
 * least one query: {"id","text","queries":[...],"partners":[ids],
 * "kinds":["dual-link"|"co-mention",...]} (extra fields are ignored by the
 * pre-training reader). */
#define QAC_HLP_STREAM 0x484c5001u

typedef struct qac_hlp_opts {
    const char *path;       /* documents jsonl with "id", "text" and optionally "title", "links" */
    const char *edges_path; /* TSV of edges "from\tto" (NULL: the links field) */
    const char *out_path;   /* pre-training jsonl to write */
    int dual_link, co_mention;  /* which pair kinds to mine (both by default) */
    int max_per_doc;        /* cap on queries written per passage (0: no cap; default 5, the core paper's C) */
    uint64_t seed;
    qac_progress_fn progress; /* optional: phases "hlp read/records", "hlp write/passages" */
    void *progress_user;
    double hub_top;         /* 0.10: the in-degree share that makes hubs (see above) */
    long hub_degree;        /* > 0: hubs are documents with in-degree above this (overrides hub_top) */
} qac_hlp_opts;
void qac_hlp_opts_default(qac_hlp_opts *o);

typedef struct qac_hlp_stats {
    long docs, edges, edges_unresolved, dual_link_pairs, co_mention_pairs, written;
    long self_links;        /* dropped */
    long hub_degree, hubs;  /* K used and documents above it */
    long no_text;           /* documents without text (never a passage) */
    long queries_written;   /* (passage, query) examples in the output */
    long capped;            /* partners dropped by max_per_doc */
    long duplicate_ids;     /* later records repeating an id: merged into the first (its text, all links) */
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
    QAC_PT_QGEN = 2,        /* encoder MLM (passage) + causal query decoder from the passage [CLS] */
} qac_pt_objective;

typedef struct qac_pt_objective_opts {
    qac_pt_objective objective;
    int head_layers;     /* Condenser head (default 2), CoT-MAE or qgen decoder (default 1); 0: the default */
    int skip_from;       /* Condenser: the states after this encoder layer; < 0: half the depth */
    float mask_rate;     /* coCondenser whole-word MLM rate (0.15) */
    float enc_mask_rate; /* CoT-MAE and qgen encoder rate (0.30) */
    float dec_mask_rate; /* CoT-MAE decoder rate (0.45) */
    float tau;           /* contrastive temperature (1) */
    float alpha;         /* > 0: the PAIR loss (1-a) L_q + a L_p replaces the contrastive loss */
    int window;          /* qgen decoder's attention window (3 as released); <= 0: plain causal */
    int pooling;         /* the representation: QAC_PT_POOL_CHECKPOINT or a qac_pooling (see below) */
    int normalize;       /* QAC_PT_NORM_CHECKPOINT, 0 or 1 */
} qac_pt_objective_opts;

/* The representation r of a text (TRAINING.md "Representations"): the
 * pooling over the last layer's states with the padding mask, --pooling
 * checkpoint|cls|mean (default: the checkpoint's, which is what retrieval
 * with the exported encoder uses), then, for the contrastive and PAIR
 * losses, L2 normalisation when --normalize says so (true|false|checkpoint,
 * default the checkpoint's flag; the two choices are independent, each
 * defaulting to the checkpoint's). The heads' bottleneck (what the
 * Condenser head, the CoT-MAE decoder and the qgen decoder read at position
 * 0) is the same pooled vector before normalisation: for cls exactly the
 * released code's raw last-layer [CLS]; for mean it is qac's adaptation of
 * the released code to mean-pooled checkpoints. The released recipe on a
 * BERT checkpoint (cls, no normalisation) is what the default gives there. */
#define QAC_PT_POOL_CHECKPOINT (-1)
#define QAC_PT_NORM_CHECKPOINT (-1)
/* --pooling checkpoint|cls|mean and --normalize checkpoint|true|false (NULL:
 * checkpoint). Errors name the bad text. */
qac_status qac_pt_pooling_parse(int *pooling, int *normalize, const char *pooling_name, const char *normalize_name);
/* The choice resolved against model m. */
void qac_pt_pooling_resolve(const qac_pt_objective_opts *o, const qac_model *m, qac_pooling *pooling, int *normalize);
/* "mean pooling, L2-normalised (the checkpoint's)" and the like, for logs. */
void qac_pt_pooling_describe(char *buf, size_t cap, const qac_pt_objective_opts *o, const qac_model *m);

typedef struct qac_pt_progress {
    long step, total;
    double loss;         /* the sum of the parts below */
    double mlm;          /* encoder MLM (coCondenser: the late MLM) */
    double head;         /* Condenser-head MLM, or the decoder's loss (MLM or next-token) */
    double contrastive;  /* contrastive or PAIR; 0 for the generative objectives */
    double span_frac;    /* share of this step's pairs that were span pairs */
    double lr, grad_norm;
    double seconds, elapsed;
    long steps_run;
    int pairs;
    long tokens;         /* real tokens through the encoder this step */
} qac_pt_progress;

typedef struct qac_pretrain_opts {
    qac_train_opts train;   /* lr 1e-4, wd 0.01, clip 1.0, linear (a curriculum uses its own two-stage
                               schedule, qac_pt_lr_scale); tau, sim, pair_alpha, chunk unused */
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
    /* after every step; nonzero stops the run there (its checkpoint is still
     * written when one is due) with QAC_ERR_CANCELLED */
    int (*on_step)(void *user, const qac_pt_progress *p);
    void *user;
} qac_pretrain_opts;

void qac_pt_objective_opts_default(qac_pt_objective_opts *o);
void qac_pretrain_opts_default(qac_pretrain_opts *o);
/* train.device QAC_DEVICE_CUDA runs the step of every objective on the GPU
 * (train.gpu_precision fp32 or bf16). */
/* "cocondenser" | "cotmae" | "qgen" */
qac_status qac_pt_objective_parse(qac_pt_objective *out, const char *name);

/* Check everything (options, data, the run directory), then train m in
 * place: OUT/checkpoint-<step>/ (encoder checkpoint + training_state.qts
 * with the heads and optimiser state), OUT/latest, OUT/log.jsonl (per step:
 * loss and its parts, lr, grad norm, span fraction), and at the end the
 * encoder alone as an HF checkpoint in OUT itself. o->resume continues
 * from OUT/latest and refuses any recorded option that differs (steps,
 * batch, seed, rates, schedule, context, lengths, objective settings): the
 * error names the option and both values. */
qac_status qac_pretrain_run(qac_model *m, const qac_pretrain_opts *o, long *resumed_at);

#ifdef __cplusplus
}
#endif

#endif
