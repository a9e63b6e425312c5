/* The training engine: contrastive losses, AdamW and learning-rate
 * schedules over flat parameter blocks, GradCache, and resumable training
 * state. See DESIGN.md "Training".
 *
 * A step is: encoder forward (dropout from counter-based masks) -> pooling
 * -> loss and dL/d(representation) -> pooling and encoder backward into the
 * gradient block -> global-norm clipping -> AdamW -> re-pack the weights.
 * GradCache reorders the same calls (forward without activations, loss,
 * then each chunk re-forwarded with the same masks and back-propagated).
 *
 * Ownership: qac_trainer_create borrows the model and trains its parameters
 * in place; free the trainer before the model. */
#ifndef QAC_TRAIN_H
#define QAC_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "qac_common.h"
#include "qac_encoder.h"
#include "qac_model.h"
#include "qac_tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- losses ---- */

typedef enum qac_similarity { QAC_SIM_DOT = 0, QAC_SIM_COS = 1 } qac_similarity;

/* InfoNCE over Tevatron groups: q [nq,C], p [nq*n,C]; query i's group is
 * passages [i*n, (i+1)*n), its positive passage i*n, and every passage of
 * the batch is a candidate for every query. s = sim(q, p) / tau, loss =
 * mean_i CE(s_i, i*n). Writes the loss and, when not NULL, dq [nq,C] and
 * dp [nq*n,C] = dL/d(representation). */
qac_status qac_infonce(double *loss, float *dq, float *dp, const float *q, const float *p, int nq, int n, int C,
                       float tau, qac_similarity sim);

/* PAIR (passage-centric similarity, pre-training only), raw dot products
 * over the same group layout: L_q = CE of q_i over all passages (target
 * i*n), L_p = CE of the positive p_{i*n} over [every query; every negative
 * passage] (target q_i). Loss = (1 - alpha) mean L_q + alpha mean L_p. */
qac_status qac_pair_loss(double *loss, float *dq, float *dp, const float *q, const float *p, int nq, int n, int C,
                         float alpha);

/* ---- optimiser ---- */

typedef enum qac_schedule { QAC_SCHED_LINEAR = 0, QAC_SCHED_COSINE = 1, QAC_SCHED_CONSTANT = 2 } qac_schedule;

/* Learning rate of optimiser step `step` (0-based), as transformers'
 * get_{linear,cosine,constant}_schedule_with_warmup: step / warmup during
 * warmup, then linear decay to 0 at `total`, half a cosine, or constant. */
double qac_lr_at(qac_schedule s, double base_lr, long step, long warmup, long total);

/* One torch.optim.AdamW update of n parameters (t = 1-based step count):
 * p *= 1 - lr wd; m = lerp(m, g, 1 - b1); v = b2 v + (1 - b2) g^2;
 * p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps). */
void qac_adamw_update(float *p, const float *g, float *m, float *v, size_t n, long t, double lr, double beta1,
                      double beta2, double eps, double wd);

/* ---- the trainer ---- */

typedef struct qac_train_opts {
    double lr;             /* peak learning rate */
    double weight_decay;   /* on matrices and embeddings; never biases or LayerNorm */
    double beta1, beta2, adam_eps;
    double max_grad_norm;  /* global L2 clip; <= 0 disables */
    qac_schedule schedule;
    long warmup_steps, total_steps;
    float tau;             /* InfoNCE temperature */
    qac_similarity sim;
    float pair_alpha;      /* > 0: the PAIR loss with this alpha instead of InfoNCE (tau, sim unused) */
    int chunk;             /* GradCache chunk in sequences; 0 = no GradCache */
    float hidden_dropout, attn_dropout; /* < 0: the checkpoint's probabilities */
    int recompute;         /* keep only layer inputs; re-run each layer in backward */
    uint64_t seed;
    int threads;           /* <= 0: one per core */
    /* QAC_DEVICE_CPU (the reference; AUTO means CPU too) or QAC_DEVICE_CUDA
     * (an error without a usable GPU; it runs PAIR and recompute too). */
    qac_device device;
    /* CUDA: QAC_PREC_BF16 (mixed precision, the default) or QAC_PREC_FP32
     * (no TF32; for checking against the CPU) */
    qac_precision gpu_precision;
    /* Several GPUs (CUDA builds with QAC_NCCL; README "Several GPUs"):
     * dist_world > 0 makes this trainer rank dist_rank of dist_world, all
     * joined by the same dist_id (from qac_train_dist_id on one rank, shared
     * out of band). Each rank's batch is its equal slice of the global batch
     * (rank r: queries [r nq, (r+1) nq) with their passage groups); the loss
     * covers every rank's representations (in-batch negatives across
     * devices) and the gradients are summed over the ranks, so every replica
     * takes the same step. Select the rank's GPU (qac_train_use_gpu) before
     * qac_trainer_create. 0: one GPU, no NCCL. */
    int dist_world, dist_rank;
    unsigned char dist_id[128];
} qac_train_opts;

/* A fresh NCCL id for dist_id (QAC_ERR_UNSUPPORTED without NCCL). */
qac_status qac_train_dist_id(unsigned char id[128]);
/* GPUs present (0 without CUDA), and the calling thread's GPU. */
int qac_train_gpu_count(void);
qac_status qac_train_use_gpu(int device);

/* Tevatron's defaults where the papers agree: lr 2e-5, wd 0.01, betas (0.9,
 * 0.999), eps 1e-8, clip 1.0, linear schedule, tau 1, dot, checkpoint
 * dropout, seed 42. total_steps and warmup_steps must be set by the caller. */
void qac_train_opts_default(qac_train_opts *o);

/* One batch, tokenized: nq queries of padded length q_T and nq * n passages
 * of padded length p_T (group layout as qac_infonce). */
typedef struct qac_train_batch {
    int nq, n;
    int q_T, p_T;
    const int32_t *q_ids; /* [nq, q_T] */
    const int *q_lens;    /* [nq] */
    const int32_t *p_ids; /* [nq*n, p_T] */
    const int *p_lens;    /* [nq*n] */
} qac_train_batch;

/* A batch tokenized from text, buffers reused across calls: queries cut at
 * q_max tokens and passages at p_max (with [CLS] and [SEP]), each side padded
 * to its longest. */
typedef struct qac_batch_buf {
    qac_train_batch b;
    int32_t *q_ids, *p_ids;
    int *q_lens, *p_lens;
    size_t q_cap, p_cap;
    long tokens; /* real tokens in the batch */
} qac_batch_buf;
qac_status qac_batch_build(qac_batch_buf *bb, const qac_tokenizer *tok, const char *const *queries, int nq,
                           const char *const *passages, int n, int q_max, int p_max);
/* Same, with q_prompt before every query and p_prompt before every passage
 * (NULL or "": none), each tokenised with its text as one string
 * (qac_tokenizer_encode_prompted). */
qac_status qac_batch_build_prompted(qac_batch_buf *bb, const qac_tokenizer *tok, const char *q_prompt,
                                    const char *const *queries, int nq, const char *p_prompt,
                                    const char *const *passages, int n, int q_max, int p_max);
void qac_batch_buf_free(qac_batch_buf *bb);

typedef struct qac_step_stats {
    long step;        /* optimiser steps done, this one included */
    double loss;
    double grad_norm; /* before clipping */
    double lr;        /* the rate this step used */
    double seconds;
} qac_step_stats;

typedef struct qac_trainer qac_trainer;

qac_status qac_trainer_create(qac_trainer **out, qac_model *m, const qac_train_opts *o);
void qac_trainer_free(qac_trainer *t);

/* Zero the gradients and accumulate the batch's loss gradient (with
 * GradCache when opts.chunk > 0). No optimiser step. */
qac_status qac_trainer_grads(qac_trainer *t, const qac_train_batch *b, double *loss);
/* qac_trainer_grads, then clip, AdamW and re-pack. */
qac_status qac_trainer_step(qac_trainer *t, const qac_train_batch *b, qac_step_stats *out);

/* The gradient block (same layout as the model's parameters); on CUDA it is
 * copied from the device first (NULL if that fails: see qac_last_error). */
const float *qac_trainer_grad_mem(const qac_trainer *t);
/* Make the model's parameters current: a no-op on the CPU, which trains
 * them in place; on CUDA a copy from the device. qac_trainer_save and the
 * training loop's checkpoints do it themselves. */
qac_status qac_trainer_sync_model(qac_trainer *t);
long qac_trainer_steps_done(const qac_trainer *t);

/* Save: an HF checkpoint directory (qac_model_save) plus `training_state.qts`
 * (optimiser m and v, step, options, RNG seed and the caller's data cursor,
 * checksummed), every file written atomically. The directory is complete or
 * absent: it is written as DIR.tmp and renamed over DIR. */
qac_status qac_trainer_save(qac_trainer *t, const char *dir, const void *cursor, size_t cursor_len);
/* Load a directory that qac_trainer_save wrote into t (whose model must have
 * the same shape): parameters, optimiser state and step. The options the
 * state records that shape the steps (steps, seed, AdamW, clip, schedule,
 * warmup, loss, dropout) must equal t's: the first that differs is refused
 * with QAC_ERR_MISMATCH, naming it and both values. The cursor is copied
 * into a malloc'd buffer the caller frees. */
qac_status qac_trainer_resume(qac_trainer *t, const char *dir, void **cursor, size_t *cursor_len);

/* ---- the training loop ---- */

/* Batches with a resumable position. next gives the batch of the coming
 * step (valid until the following call); the cursor is an opaque snapshot
 * of the position, saved with every checkpoint and handed back on resume. */
typedef struct qac_batch_source {
    void *user;
    qac_status (*next)(void *user, const qac_train_batch **out);
    qac_status (*get_cursor)(void *user, void **bytes, size_t *len); /* malloc'd */
    qac_status (*set_cursor)(void *user, const void *bytes, size_t len);
} qac_batch_source;

typedef struct qac_run_opts {
    const char *out_dir;  /* checkpoints, log.jsonl, and `latest` */
    long save_every;      /* steps between checkpoints; <= 0: only the last */
    int keep;             /* checkpoints kept (the newest); <= 0: 2 */
    int resume;           /* continue from out_dir/latest; without it an existing run is an error */
    /* called after every step (NULL: nothing); nonzero stops the run after
     * that step's checkpoint, if one is due, with QAC_ERR_CANCELLED */
    int (*on_step)(void *user, const qac_step_stats *st, long total);
    /* called once before the first step with the step the run continues
     * from (0: a fresh run), after a resume was accepted, so that the
     * caller's own per-step files are trimmed as log.jsonl is (a refused
     * resume never calls it); an error stops the run. NULL: nothing. */
    qac_status (*on_start)(void *user, long step);
    void *user;
} qac_run_opts;

/* Train until opts.total_steps. out_dir/checkpoint-<step>/ is written every
 * save_every steps and at the end (qac_trainer_save), then out_dir/latest
 * names it (written atomically), then older checkpoints beyond `keep` are
 * removed. out_dir/log.jsonl gets one line per step (step, loss, lr,
 * grad_norm, seconds); on resume, lines past the checkpoint are dropped so
 * the log reads as one uninterrupted run. A refused resume (another run's
 * options, a damaged state) writes nothing into out_dir. A kill at any
 * moment loses at most the steps since the last checkpoint. *resumed_at
 * (may be NULL) receives the step the run continued from (0 for a fresh
 * run). */
qac_status qac_train_run(qac_trainer *t, const qac_batch_source *src, const qac_run_opts *ro, long *resumed_at);

#ifdef __cplusplus
}
#endif
#endif
