// Internal to kernels/: the BERT layer stack of the CUDA training backends
// (fine-tuning, kernels/cuda_trainer.cu, and pre-training,
// kernels/cuda_pretrainer.cu): embeddings, the post-LN layers forward with
// every tensor backward reads kept, and their backward into an fp32
// gradient block. The pre-trainer's Condenser head and CoT-MAE decoder run
// their fresh layers through the same functions, with their own parameter
// views; the query-generation decoder's GPT-2 blocks are here too. With
// them, the device state both trainers share (qac_kl_dev).
//
// CPU twins: model/bert_cpu.c and model/bert_backward.c
// (qac_bert_forward_train, qac_bert_layers_forward, qac_bert_backward,
// qac_bert_layers_backward), model/head_nets.c (qac_qgen_forward,
// qac_qgen_backward) for the GPT-2 blocks.
//
// First run on a GPU (an H200) on 2026-11-26: see bench/RESULTS.md; what
// changed since is checked by scripts/gpu_train_verify.sh on the next one.
#ifndef QAC_CUDA_LAYERS_CUH
#define QAC_CUDA_LAYERS_CUH

#include "bert_kernels.cuh"
#include "flash_attention.cuh"
#include "train_kernels.cuh"

extern "C" {
#include "bert_cpu.h"
#include "head_nets.h"
#include "qac_model.h"
}

// What every layer function needs: the shapes (cfg: hidden, heads,
// intermediate and eps are read; the layer count is passed per call), the
// precision, the stream and cuBLAS handle on it, and the fp32 parameter
// block with its bf16 copy (bf16 mode: the same offsets), so that any view
// into params finds its matrix in params_act.
struct qac_kl_ctx {
    qac_bert_config cfg;
    qac_precision prec;
    size_t esize; // bytes of an act element
    float p_hidden, p_attn;
    cudaStream_t stream;
    cublasHandle_t blas;
    float *params;
    __nv_bfloat16 *params_act;
    // the fused attention (qac_kl_ctx_attention): the layers keep the QKV
    // product and the log-sum-exp instead of q, k, v and the probabilities
    int fused;
    qac_fa_tiles tiles;
};

// Choose the attention path of t (cfg and prec set): fused when selected
// (qac_cuda_attention_fused) and supported for the shape and precision.
void qac_kl_ctx_attention(qac_kl_ctx *t);

// The device side of a trainer (fine-tuning, kernels/cuda_trainer.cu, and
// pre-training, kernels/cuda_pretrainer.cu): the layer context with its
// stream, cuBLAS handle and workspace, and the four parameter-sized fp32
// blocks (params, grads, AdamW m and v: one layout, so a checkpoint, a
// resume or a step is one copy or one loop over each), the bf16 copy of
// params, the norm's buffers and the step's losses.
struct qac_kl_dev : qac_kl_ctx {
    int device;
    size_t n_params; // floats of every block
    float *grads, *adam_m, *adam_v;
    void *blas_ws;
    double *norm_partial, *d_norm, *d_loss; // d_loss [n_loss]
    float *d_scale;
    int n_loss;
    double *h_scalars; // pinned [n_loss + 1]: the losses, then the norm
};

// On the current device (compute capability 8.0 or newer): the stream,
// cuBLAS (pedantic fp32 math in fp32 mode), the blocks for d->n_params
// floats with grads, m and v zeroed, n_loss losses. prec, esize and
// n_params must be set; the parameters are uploaded afterwards
// (qac_kl_dev_upload). A failure leaves what was made for
// qac_kl_dev_release.
qac_status qac_kl_dev_init(qac_kl_dev *d, int n_loss);
// Frees what qac_kl_dev_init made (the caller has synchronised the stream
// and freed its own buffers); clears the sticky CUDA error.
void qac_kl_dev_release(qac_kl_dev *d);
// Host <-> device over the parameter block in parts: part i covers floats
// [ends[i-1], ends[i]) (ends[-1] = 0) of params and comes from (goes to)
// parts[i]; a NULL part, grads, m or v is left alone. An upload of any
// part refreshes the bf16 copy. Both synchronise.
qac_status qac_kl_dev_upload(qac_kl_dev *d, const float *const parts[], const size_t ends[], int n_parts,
                             const float *m, const float *v);
qac_status qac_kl_dev_download(qac_kl_dev *d, float *const parts[], const size_t ends[], int n_parts, float *grads,
                               float *m, float *v);
// The losses of the step just queued into out [n_loss] (synchronises).
qac_status qac_kl_dev_losses(qac_kl_dev *d, double *out);
// Global-norm clip and AdamW step `step` (1-based) over the trained
// tensors; *grad_norm: the norm before clipping (synchronises).
qac_status qac_kl_dev_update(qac_kl_dev *d, const qac_kt_tensors *tensors, long step, double lr, double beta1,
                             double beta2, double eps, double wd, double max_norm, double *grad_norm);

// A weight matrix in the precision of the products.
const void *qac_kl_act_w(const qac_kl_ctx *t, const float *view);

// The activations of L layers over B x T tokens, kept for backward; bound
// into one device allocation. hidden[0] is the stack's input (the
// embeddings' output for the encoder), hidden[l+1] layer l's output.
// recompute (--recompute): hidden and hidden_act hold every layer, the
// other per-layer tensors one layer, which the backward re-runs from its
// kept input just before it needs it (the CPU's QAC_ACTS_RECOMPUTE).
// The attention keeps q, k, v and P (unfused), or the QKV product as the
// GEMM wrote it and the log-sum-exp (fused: nothing of size T x T).
struct qac_kl_acts {
    int B, T, L, recompute;
    float *emb, *emb_mean, *emb_rstd; // [N,C], [N], [N]: the embedding LayerNorm's input and statistics
    float *hidden;    // [L+1, N, C]
    void *hidden_act; // [L+1, N, C] act (== hidden in fp32)
    // the rest: [L, ...], or [1, ...] when recomputed
    void *q, *k, *v;  // unfused: [L, N*C] each, heads split, bias added
    void *P;          // unfused: [L, B*NH*T*T]
    void *qkv;        // fused: [L, N*3C] without the bias
    float *lse;       // fused: [L, NH*N]
    void *atty;       // [L, N*C]
    float *res1, *ln1, *res2; // [L, N*C]
    void *ln1_act;            // [L, N*C] (== ln1 in fp32)
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd; // [L, N]
    void *ffn_pre, *ffn_act;                          // [L, N*I]
    // positions offset past the padding index (RoBERTa, XLM-R): each row's
    // position id and the plan of their gradient's scatter (the padding
    // index's row left out), on the device; NULL: the row's index in its
    // sequence (BERT), the gradient summed over the sequences
    const int32_t *pos_ids, *plan_p;
    qac_scatter_plan pp;
};

// Work buffers of a backward (sized for the largest N = B*T and B*NH*T*T).
struct qac_kl_work {
    void *mem;
    size_t cap;
    void *big;          // [N, max(I, 3C)] act: the QKV product, then dFFN / dQKV
    void *proj;         // [N, C] act: projection outputs, then masked gradients
    float *S;           // [B*NH*T*T] scores, then their gradient (unfused)
    void *Pd, *dS;      // [B*NH*T*T] act (unfused)
    void *O, *dq, *dk, *dv; // [N, C] act (unfused)
    void *datty;        // [N, C] act
    float *dvec;        // [NH*N] the fused backward's rowsum(dO * O)
    float *dy, *dres, *dln1;        // [N, C]: dy carries dL/d(hidden) between layers
    float *partial;                 // column-sum partials
};

size_t qac_kl_align(size_t x);

// Bump allocation over a base that may be NULL (the sizing pass).
struct qac_kl_bump {
    char *base;
    size_t off;
    template <typename P> void take(P **p, size_t bytes) {
        *p = base ? (P *)(base + off) : nullptr;
        off += qac_kl_align(bytes ? bytes : 1);
    }
};

// Bind a's views at b (L layers over B x T; with_emb: the embedding
// buffers too; recompute: see qac_kl_acts); returns nothing, b->off grows
// by the bytes taken.
void qac_kl_acts_bind(const qac_kl_ctx *t, qac_kl_acts *a, qac_kl_bump *b, int B, int T, int L, int with_emb,
                      int recompute);
size_t qac_kl_work_bind(const qac_kl_ctx *t, qac_kl_work *w, char *base, size_t N, size_t nP);
// (Re)allocate w for N rows and nP attention probabilities.
qac_status qac_kl_work_ensure(const qac_kl_ctx *t, qac_kl_work *w, size_t N, size_t nP);

// Dropout of the sites of one pass: the step's key and the first sequence's id.
qac_kt_drop qac_kl_drop(float p, uint64_t key, uint64_t seq_base);

// hidden[0] (and hidden_act[0]) = dropout(LN(word[ids] + pos + type[0])),
// the embedding statistics kept. ids, [B*T] on the device; positions as
// a->pos_ids says.
qac_status qac_kl_embed_fwd(const qac_kl_ctx *t, qac_kl_acts *a, const int32_t *ids, const qac_bert_params *w,
                            uint64_t key, uint64_t seq_base);
// From w->dy = dL/d hidden[0]: the embedding LayerNorm's and the
// embeddings' gradients (the scatter plans of the ids, built on the host;
// the positions' as a->plan_p says).
qac_status qac_kl_embed_bwd(const qac_kl_ctx *t, qac_kl_acts *a, qac_kl_work *k, const qac_bert_params *g,
                            const qac_bert_params *w, qac_scatter_plan pw, const int32_t *plan_w,
                            qac_scatter_plan pt, const int32_t *plan_t, uint64_t key, uint64_t seq_base);

// Layers 0..a->L-1 of the stack w on hidden[0] (hidden_act[0] also set in
// bf16 mode), lens [B] on the device.
qac_status qac_kl_layers_fwd(const qac_kl_ctx *t, qac_kl_acts *a, qac_kl_work *k, const qac_bert_params *w,
                             const int *lens, uint64_t key, uint64_t seq_base);
// From k->dy = dL/d hidden[L] to k->dy = dL/d hidden[0], the parameter
// gradients accumulated into g. When a recomputes, each layer is run
// forward again first (the same kernels on the same input with the same
// dropout keys, so the gradients are the keeping path's bit for bit, as
// long as cuBLAS picks the same algorithm for slot 0 as for slot l: equal
// shapes, both 16-byte aligned when a layer's P is; it uses k's forward
// buffers, never k->dy, and rewrites hidden[l+1] with the values it
// holds). dh_add (may be NULL): a gradient on
// hidden[add_at] (0 <= add_at < L) from outside the stack, added when the
// backward reaches it (the Condenser head's read of a middle layer).
qac_status qac_kl_layers_bwd(const qac_kl_ctx *t, qac_kl_acts *a, qac_kl_work *k, const qac_bert_params *w,
                             const qac_bert_params *g, const int *lens, uint64_t key, uint64_t seq_base,
                             const float *dh_add, int add_at);

// The embedding pass on its own buffers: out [B*T,C] (fp32) =
// dropout(LN(word[ids] + pos + type[0])) with the dropout at (drop_layer,
// QAC_DROP_EMB), emb, mean, rstd kept; and its backward from k->dy = dL/d
// out (k->dy overwritten). The encoder's pass is drop_layer 0; the
// query-generation decoder's input draws the backbone's embedding dropout
// at layer 1 (trainer/qgen.c). pos_ids / plan_p: as qac_kl_acts's (NULL:
// the row's index in its sequence).
qac_status qac_kl_embed_fwd_into(const qac_kl_ctx *t, float *out, float *emb, float *mean, float *rstd,
                                 const int32_t *ids, const int32_t *pos_ids, const qac_bert_params *w, int B, int T,
                                 uint64_t key, uint64_t seq_base, int drop_layer);
qac_status qac_kl_embed_bwd_from(const qac_kl_ctx *t, qac_kl_work *k, const float *emb, const float *mean,
                                 const float *rstd, int B, int T, const qac_bert_params *g, const qac_bert_params *w,
                                 qac_scatter_plan pw, const int32_t *plan_w, qac_scatter_plan pt,
                                 const int32_t *plan_t, qac_scatter_plan pp, const int32_t *plan_p, uint64_t key,
                                 uint64_t seq_base, int drop_layer);

// The query-generation decoder (model/head_nets.c, qac_qgen_forward and
// qac_qgen_backward): L pre-LN GPT-2 blocks of MLP width I with the causal
// windowed attention, then the final LayerNorm. Its activations over B x T
// tokens, with the embedding pass of its input (emb*), kept for backward.
struct qac_kl_gpt_acts {
    int B, T, L, I;
    float *emb, *emb_mean, *emb_rstd;                 // [N,C], [N], [N]
    float *hidden;                                    // [L+1,N,C]: [0] the blocks' input, [l+1] block l's output
    float *ln1, *ln2;                                 // [L,N,C]
    void *ln1_act, *ln2_act;                          // [L,N,C] act (== ln1, ln2 in fp32)
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd; // [L,N]
    void *q, *k, *v, *atty;                           // [L,N*C] act (q, k, v unfused)
    void *P;                                          // [L,B*NH*T*T] act (unfused)
    void *qkv;                                        // [L,N*3C] act (fused)
    float *lse;                                       // [L,NH*N] (fused)
    float *res1;                                      // [L,N,C]: input + attention output
    void *fc_pre, *fc_act;                            // [L,N*I] act
    float *out, *lnf_mean, *lnf_rstd;                 // [N,C], [N], [N]: after the final LayerNorm
};
void qac_kl_gpt_acts_bind(const qac_kl_ctx *t, qac_kl_gpt_acts *a, qac_kl_bump *b, int B, int T, int L, int I);
// hidden[0] (set by the caller: the input after its dropout) -> out. The
// work buffers must hold N rows of width max(I, 3C). Dropout as the CPU's:
// attention probabilities at (l, QAC_DROP_ATT), the two output projections
// at (l, QAC_DROP_ATT_OUT) and (l, QAC_DROP_FFN_OUT), rate t->p_attn and
// t->p_hidden.
qac_status qac_kl_gpt_fwd(const qac_kl_ctx *t, qac_kl_gpt_acts *a, qac_kl_work *k, const qac_qgen_params *w,
                          int window, const int *lens, uint64_t key, uint64_t seq_base);
// From dout = dL/d out [N,C] (fp32) to k->dy = dL/d hidden[0], the
// parameter gradients accumulated into g.
qac_status qac_kl_gpt_bwd(const qac_kl_ctx *t, qac_kl_gpt_acts *a, qac_kl_work *k, const qac_qgen_params *w,
                          const qac_qgen_params *g, int window, const int *lens, const float *dout, uint64_t key,
                          uint64_t seq_base);

// element offset into an act-typed buffer
#define QAC_KL_ACT(t, ptr, l, n) ((void *)((char *)(ptr) + (size_t)(l) * (n) * (t)->esize))
#define QAC_KL_AT(ptr, l, n) ((ptr) + (size_t)(l) * (n))

#endif
