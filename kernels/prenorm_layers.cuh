// Internal to kernels/: ModernBERT's encoder on the training device, forward
// and backward side by side (kernels/prenorm_layers.cu): the embeddings
// (word rows alone, LayerNorm without a table of positions or types), the
// pre-LayerNorm layers (LN1 before the attention but in layer 0, rotary
// positions on Q and K with the global or the local table, the local
// layers' window, LN2 before the GeGLU MLP, both residuals on the fp32
// stream) and the final LayerNorm. Built from the training kernels
// (train_kernels.cuh), the encoder's rotary and GeGLU forwards
// (bert_kernels.cuh) and their backwards (kernels/train_family.cu).
//
// CPU twins: model/bert_cpu.c (layer_forward, final_norm) and
// model/bert_backward.c (qac_bert_layer_backward, qac_bert_backward) with
// the family's fields (pre_norm, glu, rotary positions, global_every).
// Dropout at the CPU's sites and counters: the embeddings' (layer 0,
// QAC_DROP_EMB), the probabilities' (l, QAC_DROP_ATT), the attention's and
// the MLP's outputs (l, QAC_DROP_ATT_OUT), (l, QAC_DROP_FFN_OUT).
//
// The composition calls launchers only (no kernel of its own, no copy), so
// tests/gpu/test_prenorm_emulated.cpp runs it whole on the CPU with the
// kernels emulated.
#ifndef QAC_PRENORM_LAYERS_CUH
#define QAC_PRENORM_LAYERS_CUH

#include "cuda_layers.cuh"

// What the forward keeps over B x T tokens (N = B T rows), in one
// allocation (qac_kl_pn_bind). Per-layer tensors: [L, ...], or [1, ...]
// with recompute (the backward re-runs each layer from its kept input).
struct qac_kl_pn_acts {
    int B, T, L, recompute;
    float *emb, *emb_mean, *emb_rstd; // [N,C], [N], [N]: the word rows (the embedding LayerNorm's input)
    float *hidden;                    // [L+1,N,C]: [0] the embeddings' output, [l+1] layer l's
    void *x0_act;                     // [N,C] act: hidden[0] as layer 0's QKV product reads it (== hidden in fp32)
    void *ln1_act;                    // [L,N,C] act: LN1(hidden[l]), the QKV product's input (slot 0 unused)
    float *ln1_mean, *ln1_rstd;       // [L,N]
    void *qkv;                        // fused: [L,N,3C] act, rotated, the bias added
    float *lse;                       // fused: [L,NH,N]
    void *q, *k, *v, *P;              // unfused: [L,N,C] each (heads split), [L,B*NH*T*T]
    void *atty;                       // [L,N,C] act
    float *res1;                      // [L,N,C]: hidden[l] + the attention's output
    void *ln2_act;                    // [L,N,C] act: LN2(res1), the MLP's input
    float *ln2_mean, *ln2_rstd;       // [L,N]
    void *ffn_pre;                    // [L,N,2I] act: the input and gate halves, without the bias
    void *ffn_act;                    // [L,N,I] act: GELU(input) * gate
    float *last, *fin_mean, *fin_rstd; // [N,C], [N], [N]: the final LayerNorm's output (pooled) and statistics
    // set by the caller: each row's position in its sequence [N] and the
    // rotary tables [2, rope_P, hs] (qac_rope_table of the global theta,
    // then the local), on the device
    const int32_t *pos;
    const float *rope;
    int rope_P;
};

// Bind a's views at b (B x T tokens, cfg's layer count; recompute: one
// layer's slot); b->off grows by the bytes taken (b->base NULL: sizing).
void qac_kl_pn_bind(const qac_kl_ctx *t, qac_kl_pn_acts *a, qac_kl_bump *b, int B, int T, int recompute);
// The work buffers: qac_kl_work_ensure's (its big block holds the GeGLU
// gradients [N,2I] and [N,I] side by side).

// Forward of layer l on hidden[l] into hidden[l+1], its tensors in slot l
// (0 with recompute). lens [B] on the device.
qac_status qac_kl_pn_layer_fwd(const qac_kl_ctx *t, qac_kl_pn_acts *a, qac_kl_work *k, const qac_bert_params *w,
                               const int *lens, uint64_t key, uint64_t seq_base, int l);
// Its backward: k->dy = dL/d hidden[l+1] in, dL/d hidden[l] out; the
// parameter gradients accumulated into g. With recompute the layer is run
// forward again first (the same kernels, inputs and dropout keys).
qac_status qac_kl_pn_layer_bwd(const qac_kl_ctx *t, qac_kl_pn_acts *a, qac_kl_work *k, const qac_bert_params *w,
                               const qac_bert_params *g, const int *lens, uint64_t key, uint64_t seq_base, int l);

// The whole encoder: ids [B*T] on the device -> a->last.
qac_status qac_kl_pn_fwd(const qac_kl_ctx *t, qac_kl_pn_acts *a, qac_kl_work *k, const qac_bert_params *w,
                         const int32_t *ids, const int *lens, uint64_t key, uint64_t seq_base);
// From dlast = dL/d a->last [N,C] fp32 (may be k->dln1) to every gradient
// in g: the final LayerNorm, the layers top-down, the embedding LayerNorm
// and the word rows (the scatter plan of the ids, the padding id's rows
// left out, as qac_scatter_keys_unpadded makes it).
qac_status qac_kl_pn_bwd(const qac_kl_ctx *t, qac_kl_pn_acts *a, qac_kl_work *k, const qac_bert_params *w,
                         const qac_bert_params *g, const int *lens, const float *dlast, qac_scatter_plan pw,
                         const int32_t *plan_w, uint64_t key, uint64_t seq_base);

#endif
