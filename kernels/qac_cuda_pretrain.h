/* The CUDA backend of the pre-trainer (trainer/pretrainer.h): the encoder
 * and the objective's heads on the GPU, with the parameters, gradients and
 * AdamW m, v in exactly the CPU pre-trainer's flat layout [encoder |
 * heads] (heads: the head's layer stack, then the MLM head), one device
 * allocation each, so a checkpoint or a resume is one copy of each block
 * and the training state file is the CPU's. Internal to the trainer;
 * without CUDA every entry point reports QAC_ERR_UNSUPPORTED.
 *
 * Objectives on the GPU today: coCondenser (MLM on the encoder through the
 * tied head, the Condenser head and its MLM, the symmetric contrastive
 * loss) with either pooling and normalisation, CoT-MAE (MLM on the
 * encoder, and per side a decoder of fresh BERT layers fed the backbone's
 * embeddings of the other text with the bottleneck at position 0, its MLM
 * through the tied head), and query generation (the passage through the
 * encoder with MLM, GPT-2 blocks with the causal windowed attention fed
 * the query's embeddings with the bottleneck at position 0, the next-token
 * loss through the tied head; heads block [qgen decoder | MLM head]), and
 * coCondenser with the PAIR loss in place of the contrastive one (alpha >
 * 0). --recompute keeps only the layer inputs of the encoder and of the
 * head's BERT layers (the query decoder's blocks keep theirs, as on the
 * CPU).
 *
 * Precision: as the fine-tuning backend (kernels/qac_cuda_train.h): fp32
 * throughout for checking, or bf16 products and activations with fp32
 * residual stream, LayerNorm, softmax, losses, gradients, master weights
 * and AdamW state.
 *
 * First run on a GPU (an H200) on 2026-11-26: see bench/RESULTS.md and
 * scripts/gpu_train_verify.sh. */
#ifndef QAC_CUDA_PRETRAIN_H
#define QAC_CUDA_PRETRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "qac_model.h"
#include "qac_train.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QAC_CUDA_PT_MAX_SEGMENTS 48

/* What the pre-trainer resolved: shapes, objective, optimiser. */
typedef struct qac_cuda_pt_spec {
    qac_bert_config cfg;   /* the encoder */
    int objective;         /* a qac_pt_objective */
    int head_layers;       /* the Condenser head's (CoT-MAE, qgen: the decoder's) fresh layers */
    int window;            /* qgen: the attention window (<= 0 plain causal) */
    int skip_from;         /* coCondenser: the head reads hidden[skip_from] (0 <= skip_from < layers) */
    int mean_pooling;      /* the representation and bottleneck: 0 the [CLS] row, 1 the mean */
    int normalize;         /* coCondenser: L2-normalise the representation for the contrastive loss */
    float tau;
    float alpha;           /* > 0: PAIR in place of the contrastive loss (coCondenser only) */
    float p_hidden, p_attn; /* resolved dropout */
    int recompute;         /* keep only the layer inputs of the encoder and the head's layers; re-run
                            * each layer just before its backward (same gradients, bit for bit) */
    qac_precision prec;    /* QAC_PREC_FP32 or QAC_PREC_BF16 */
    double max_grad_norm, beta1, beta2, eps, wd;
    size_t n_enc, n_head;  /* floats of the encoder block and of the heads block */
    /* the flat block's segments in order: segment j ends at seg_end[j] and
     * decays when seg_decay[j] > 0; < 0: not trained (the pooler) */
    int n_seg;
    size_t seg_end[QAC_CUDA_PT_MAX_SEGMENTS];
    int seg_decay[QAC_CUDA_PT_MAX_SEGMENTS];
} qac_cuda_pt_spec;

/* B sequences of padded length T (host memory). */
typedef struct qac_cuda_pt_seqs {
    int T;
    const int32_t *ids;    /* [B,T] */
    const int32_t *labels; /* [B,T], -100: no MLM target */
    const int *lens;       /* [B] */
} qac_cuda_pt_seqs;

typedef struct qac_cuda_pretrainer qac_cuda_pretrainer;

/* Upload the encoder block enc [n_enc] and the heads block heads [n_head];
 * m, v start at zero. */
qac_status qac_cuda_pretrainer_create(qac_cuda_pretrainer **out, const qac_cuda_pt_spec *spec, const float *enc,
                                      const float *heads);
void qac_cuda_pretrainer_free(qac_cuda_pretrainer *g);

/* Zero the gradients and accumulate the objective's over B pairs (a_i,
 * b_i); CoT-MAE: da_i is what a_i's decoder reconstructs, db_i b_i's (NULL
 * otherwise); qgen: a the masked passages, b the unmasked queries (b's
 * labels are not read: the targets are the next tokens). Dropout: the
 * encoder's masks from enc_key, the heads' (CoT-MAE: the decoder's input
 * and layers) from head_key, sequence ids s*B + i for side s (as the
 * CPU's); qgen's decoder from enc_key salted as trainer/qgen.c does.
 * losses[3]: encoder (late) MLM, head (decoder) MLM or next-token loss,
 * contrastive (0 but for coCondenser). */
qac_status qac_cuda_pretrainer_grads(qac_cuda_pretrainer *g, int B, const qac_cuda_pt_seqs *a,
                                     const qac_cuda_pt_seqs *b, const qac_cuda_pt_seqs *da,
                                     const qac_cuda_pt_seqs *db, uint64_t enc_key, uint64_t head_key,
                                     double losses[3]);
/* Global-norm clip (on the device) and AdamW step t (1-based) at rate lr
 * over the trained segments; *grad_norm: the norm before clipping. */
qac_status qac_cuda_pretrainer_update(qac_cuda_pretrainer *g, long t, double lr, double *grad_norm);
/* Copy to the host; any pointer may be NULL. grads, m, v hold n_enc +
 * n_head floats. */
qac_status qac_cuda_pretrainer_download(qac_cuda_pretrainer *g, float *enc, float *heads, float *grads, float *m,
                                        float *v);
/* And back (a resume); NULL leaves that part as it is. */
qac_status qac_cuda_pretrainer_upload(qac_cuda_pretrainer *g, const float *enc, const float *heads, const float *m,
                                      const float *v);

#ifdef __cplusplus
}
#endif
#endif
