/* The networks of the pre-training heads, below both the CPU pre-trainer
 * (trainer/) and the CUDA one (kernels/): the parameters of HF's
 * BertOnlyMLMHead, tied to the word embeddings (its loss is the
 * pre-training objectives'), and the query-generation decoder's GPT-2 blocks:
 * configuration, flat parameter block, initialisation, CPU forward and
 * backward, and its next-token targets. Parameters live in one flat block
 * with named views, like the encoder's. */
#ifndef QAC_HEAD_NETS_H
#define QAC_HEAD_NETS_H

#include <stddef.h>
#include <stdint.h>

#include "qac_common.h"
#include "qac_model.h"
#include "qac_pool.h"

/* ---- the MLM head (BertOnlyMLMHead) ----
 * logits = LN(GELU(h W^T + b)) E^T + bias, E the word embeddings (tied). */
typedef struct qac_mlm_head {
    float *dense_w; /* [C, C] */
    float *dense_b; /* [C] */
    float *ln_w;    /* [C] */
    float *ln_b;    /* [C] */
    float *bias;    /* [V] */
} qac_mlm_head;
#define QAC_MLM_NUM_TENSORS 5
size_t qac_mlm_param_count(int C, int V);
void qac_mlm_bind(qac_mlm_head *h, float *base, int C, int V);
/* HF's initialisation: dense N(0, 0.02) (from seed), LayerNorm 1 and 0,
 * bias 0. */
void qac_mlm_init(qac_mlm_head *h, int C, int V, uint64_t seed);

/* ---- the query-generation decoder ----
 * CoT-MAE with query-as-context as released (TRAINING.md): GPT-2 blocks
 * (pre-LN; attention, then an MLP of width 4 C; a final LayerNorm) fed the
 * backbone's embeddings of the unmasked query (qac_cotmae_input: word +
 * position + type 0, the embedding LayerNorm) with position 0 replaced by
 * the encoder's raw last-layer [CLS] of the passage. Readings of the
 * released code (caskcsg/ir, cotmae-qc):
 *   - no position embeddings of its own: the blocks get the backbone's
 *     embedding output directly (no wpe, only GPT-2's blocks and ln_f);
 *   - GELU is the backbone's hidden_act, "gelu" for BERT, i.e. the erf
 *     form (the same as the encoder's), not GPT-2's tanh approximation;
 *   - heads, LayerNorm eps and init range come from the backbone's config;
 *   - attention: causal, and with window w > 0 row i sees column 0 and
 *     columns i-w+1 .. i (the released mask zeroes columns 1 .. i-w);
 *     padding keys are masked as well, so padded rows only see real keys;
 *   - loss: next-token cross-entropy through the encoder's tied MLM head
 *     (BertOnlyMLMHead, the one the encoder's MLM uses): the output at t
 *     predicts query token t+1, so position 0 (the passage [CLS]) predicts
 *     the first word, the last word predicts [SEP], and [SEP] and padding
 *     predict nothing; mean over the B * (len - 1) predictions;
 *   - total = encoder MLM + 1.0 x decoder loss.
 * Dropout as released (the backbone's rates), all drawn from qac_rng like
 * the encoder's: the backbone's embedding dropout on the query positions
 * 1.., GPT-2's dropout on the decoder input, on the attention
 * probabilities, and on both output projections before their residual. */
struct qac_bert_acts;
struct qac_bert_bwd;
struct qac_bert_packed;
struct qac_dropout;
/* The decoder's dropout key: qac_rng_mix(encoder key ^ this). */
#define QAC_QGEN_DROP_SALT 0x7167656E64726F70ull
typedef struct qac_qgen_config {
    int layers;   /* fresh blocks (1 as released) */
    int hidden;   /* C: the encoder's */
    int heads;    /* NH: the encoder's */
    int inner;    /* MLP width: 4 C (GPT-2's default n_inner) */
    int window;   /* attention window: 3 as released; <= 0 plain causal */
    float ln_eps; /* the encoder's layer_norm_eps, for every LayerNorm */
    qac_pooling pooling; /* the passage's bottleneck at position 0: QAC_POOL_CLS (the raw last-layer [CLS], as
                            released) or QAC_POOL_MEAN (the mean over its real tokens), never normalised */
} qac_qgen_config;
void qac_qgen_config_default(qac_qgen_config *q, const qac_bert_config *enc);

/* One flat block, per-block tensors stacked over layers, matrices in
 * torch.nn.Linear layout [out, in] (an HF GPT-2 Conv1D weight is the
 * transpose). Q, K, V fused as c_attn: rows [0,C) Q, [C,2C) K, [2C,3C) V. */
typedef struct qac_qgen_params {
    float *ln1_w, *ln1_b;             /* [L,C] */
    float *qkv_w, *qkv_b;             /* [L,3C,C], [L,3C] (attn.c_attn) */
    float *attn_proj_w, *attn_proj_b; /* [L,C,C], [L,C] (attn.c_proj) */
    float *ln2_w, *ln2_b;             /* [L,C] */
    float *fc_w, *fc_b;               /* [L,I,C], [L,I] (mlp.c_fc) */
    float *fc_proj_w, *fc_proj_b;     /* [L,C,I], [L,C] (mlp.c_proj) */
    float *lnf_w, *lnf_b;             /* [C] (ln_f) */
} qac_qgen_params;
#define QAC_QGEN_NUM_TENSORS 14
size_t qac_qgen_param_count(const qac_qgen_config *q);
/* Tensor i's size and name in block order ("ln1_w", ..., "lnf_b"). */
size_t qac_qgen_tensor_size(const qac_qgen_config *q, int i);
const char *qac_qgen_tensor_name(int i);
void qac_qgen_bind(qac_qgen_params *p, const qac_qgen_config *q, float *base);
/* GPT-2's initialisation: matrices N(0, 0.02), the two output projections
 * (attn.c_proj, mlp.c_proj) N(0, 0.02 / sqrt(2 layers)), biases 0,
 * LayerNorms 1 and 0. Draws from qac_rng keyed by seed. */
void qac_qgen_init(qac_qgen_params *p, const qac_qgen_config *q, uint64_t seed);

/* Activations for (B, T), every layer kept for the backward, plus the
 * packed weights (packed by each forward) and the backward's buffers: one
 * allocation. a must be zeroed before its first alloc; alloc reuses a large
 * enough allocation. */
typedef struct qac_qgen_acts {
    int B, T;
    float *mem;
    size_t n_floats;
    float *hidden;                 /* [L+1,B,T,C]: [0] the input, [l+1] block l's output */
    float *ln1, *ln1_mean, *ln1_rstd; /* [L,B,T,C], [L,B,T] x2 */
    float *qkv;                    /* [L,B,T,3C] */
    float *att;                    /* [L,B,NH,T,T] probabilities, 0 where masked */
    float *atty;                   /* [L,B,T,C] attention context */
    float *res1;                   /* [L,B,T,C] input + attention output (LN2 input) */
    float *ln2, *ln2_mean, *ln2_rstd; /* [L,B,T,C], [L,B,T] x2 */
    float *fc_pre, *fc_act;        /* [L,B,T,I] before and after GELU */
    float *out, *lnf_mean, *lnf_rstd; /* [B,T,C] the decoder's output (after ln_f), [B,T] x2 */
    float *packed;                 /* the four matrices of every layer, gemm-packed */
    float *dh, *dr, *dtmp, *datty, *dbig, *scratch; /* backward */
} qac_qgen_acts;
qac_status qac_qgen_acts_alloc(qac_qgen_acts *a, const qac_qgen_config *q, int B, int T);
void qac_qgen_acts_free(qac_qgen_acts *a);

/* x [B,T,C] -> a->out [B,T,C], lens [B] (1..T) the real lengths. drop
 * (NULL: none): the decoder's masks, sites as the encoder's (bert_cpu.h)
 * with the block index as layer: QAC_DROP_EMB at layer 0 on the input,
 * QAC_DROP_ATT on the probabilities, QAC_DROP_ATT_OUT and QAC_DROP_FFN_OUT
 * on the attention and MLP output projections. */
qac_status qac_qgen_forward(qac_qgen_acts *a, const qac_qgen_config *q, const qac_qgen_params *p, const float *x,
                            const int *lens, const struct qac_dropout *drop, int B, int T, qac_pool *pool);
/* From dout [B,T,C] (dL/d a->out): dx [B,T,C] written, the parameter
 * gradients accumulated (+=) into g. a holds the forward of the same
 * inputs, parameters and dropout. */
qac_status qac_qgen_backward(float *dx, qac_qgen_params *g, qac_qgen_acts *a, const float *dout,
                             const qac_qgen_config *q, const qac_qgen_params *p, const int *lens,
                             const struct qac_dropout *drop, int B, int T, qac_pool *pool);

/* Next-token labels [B,T] from the query ids [B,T]: labels[b,t] =
 * ids[b,t+1] for t + 1 < lens[b], else -100 (ignored). */
void qac_qgen_targets(int32_t *labels, const int32_t *ids, const int *lens, int B, int T);

#endif
