/* Internal to trainer/: the pre-trainer (encoder + an objective's heads)
 * and its step over token ids already masked. The run (pretrain_run.c)
 * builds batches from qac_pt_data; the parity test feeds the fixture's. */
#ifndef QAC_PRETRAINER_H
#define QAC_PRETRAINER_H

#include "bert_cpu.h"
#include "qac_cuda_pretrain.h"
#include "qac_heads.h"
#include "qac_pretrain.h"
#include "qac_train.h"
#include "trainer_internal.h"

/* B sequences of padded length T. labels: the MLM targets (-100: none). */
typedef struct qac_pt_seqs {
    int T;
    const int32_t *ids;    /* [B,T] */
    const int32_t *labels; /* [B,T] */
    const int *lens;       /* [B] */
} qac_pt_seqs;

/* One step's inputs. a: passages (or first spans), b: queries (or second
 * spans), both masked for the encoder; pair i is (a_i, b_i). CoT-MAE: da is
 * what a's decoder reconstructs (b's text masked at the decoder rate), db
 * likewise for b. qgen: a alone goes through the encoder; b is the
 * unmasked query its decoder generates (b's labels unused). */
typedef struct qac_pt_batch {
    int B;
    qac_pt_seqs a, b, da, db;
} qac_pt_batch;

typedef struct qac_pt_losses {
    double total, mlm, head, contrastive;
} qac_pt_losses;

/* One trainable tensor: parameters, gradient and AdamW state. */
typedef struct qac_pt_tensor {
    float *p, *g, *m, *v;
    size_t n;
    int decay;
} qac_pt_tensor;

#define QAC_PT_MAX_TENSORS 48

/* Per-side work: the encoder's and the head's activations and gradients. */
typedef struct qac_pt_side {
    qac_bert_acts enc, head;
    float *dlast, *dmid, *dhead; /* [B,T,C] */
    float *x, *emb, *mean, *rstd; /* the head's input (CoT-MAE: its embedding pass) */
    float *dpool;                /* the pooling's backward, added into dlast */
    size_t cap;                  /* floats in each [B,T,C] buffer above */
    int T, hT;                   /* encoder and head lengths */
} qac_pt_side;

typedef struct qac_pretrainer {
    qac_model *m;     /* borrowed; its parameters are trained in place */
    const void *save_cursor; /* the data cursor of the checkpoint being written */
    size_t save_cursor_len;
    qac_train_opts o;
    qac_pt_objective_opts ob; /* pooling and normalize resolved against m (never QAC_PT_*_CHECKPOINT) */
    qac_pool *pool;
    qac_dropout drop;
    /* heads: one allocation, named views */
    qac_bert_config hc; /* the head's layer stack: the encoder's shape, hc.num_layers layers */
    float *head_mem;
    size_t n_head;
    qac_bert_params hp; /* stack views (qac_bert_stack_bind): Condenser head or CoT-MAE decoder */
    qac_qgen_config qc; /* qgen: the decoder's shape, its views in the same block */
    qac_qgen_params qp, qg;
    qac_qgen_acts qa;
    qac_mlm_head mlm;
    /* gradients and AdamW m, v over [encoder | heads], one allocation each */
    float *grad_mem, *adam_m, *adam_v;
    size_t n_grad;
    qac_bert_params g, hg;
    qac_mlm_head mg;
    qac_pt_tensor tensors[QAC_PT_MAX_TENSORS];
    int n_tensors;
    qac_bert_packed pk, hpk;
    qac_bert_bwd ebwd, hbwd;
    qac_pt_side side[2];
    qac_mlm_ws mlm_ws;
    float *rows, *drows, *cls, *dcls, *scratch;
    float *pooled, *dpooled; /* [2B,C]: side s's pooled vectors (before normalisation) at s*B, their gradients */
    int32_t *rlab;
    size_t rows_cap, scratch_cap;
    uint64_t *seq_ids;
    int seq_cap;
    long step;
    /* o.device == QAC_DEVICE_CUDA: the step runs there (kernels/qac_cuda_pretrain.h)
     * on device copies of [encoder | heads], grads, m and v; the host
     * copies above are brought up to date before a save (host_stale) */
    qac_cuda_pretrainer *gpu;
    int host_stale;
    /* a curriculum's two-stage schedule replaces o.schedule (mode CURRICULUM) */
    qac_pt_context schedule_ctx;
    double warmup_frac;
    int max_len, query_max_len; /* the data's, recorded in the state (a resume holds to them) */
} qac_pretrainer;

/* Validates the options, allocates, and draws the fresh heads from
 * o->seed (HF init: N(0, 0.02), LayerNorm 1 and 0, biases 0). */
qac_status qac_pretrainer_create(qac_pretrainer **out, qac_model *m, const qac_train_opts *o,
                                 const qac_pt_objective_opts *ob);
void qac_pretrainer_free(qac_pretrainer *t);
/* Replace the fresh MLM head with the one a BertForMaskedLM checkpoint in
 * dir carries (cls.predictions.*); *found = 0 when it has none. */
qac_status qac_pretrainer_load_mlm_head(qac_pretrainer *t, const char *dir, int *found);
/* Re-pack the heads after their parameters were changed from outside. */
void qac_pretrainer_heads_changed(qac_pretrainer *t);
/* On CUDA: copy the host's encoder and heads to the device after they were
 * changed from outside (QAC_OK on the CPU). */
qac_status qac_pretrainer_params_changed(qac_pretrainer *t);
/* On CUDA: bring the host's encoder, heads, m and v up to date with the
 * device (QAC_OK on the CPU or when nothing changed since). */
qac_status qac_pretrainer_sync_host(qac_pretrainer *t);

/* Zero the gradients and accumulate the objective's over the batch (on
 * CUDA computed there and copied into grad_mem). */
qac_status qac_pretrainer_grads(qac_pretrainer *t, const qac_pt_batch *b, qac_pt_losses *out);
/* grads, then global-norm clip, AdamW over every tensor, re-pack. */
qac_status qac_pretrainer_step(qac_pretrainer *t, const qac_pt_batch *b, qac_pt_losses *losses,
                               qac_step_stats *out);

/* A checkpoint directory: the encoder (qac_model_save) and
 * training_state.qts with the heads, m, v, step and the cursor. Written as
 * DIR.tmp, renamed over DIR. */
qac_status qac_pretrainer_save(qac_pretrainer *t, const char *dir, const void *cursor, size_t cursor_len);
/* Load what qac_pretrainer_save wrote; the cursor is malloc'd. */
qac_status qac_pretrainer_resume(qac_pretrainer *t, const char *dir, void **cursor, size_t *cursor_len);

#endif
