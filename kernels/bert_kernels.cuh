// Internal to kernels/: launchers of the BERT forward kernels, on device
// pointers and one stream. Activations typed "act" are in the precision
// `prec` (float, __half or __nv_bfloat16); the residual stream, LayerNorm
// parameters, biases and pooled outputs are always fp32. N = B * T rows.
// Each launcher returns the launch error (cudaGetLastError); the CPU twins
// are in model/bert_cpu.h.
#ifndef QAC_BERT_KERNELS_CUH
#define QAC_BERT_KERNELS_CUH

#include "cuda_common.cuh"

// x = LayerNorm(word[ids] + pos[t] + type[type_ids]) with t = pos_ids[row]
// (packed rows), or row % T when pos_ids is NULL (padded rows); type_ids
// NULL: type 0 everywhere.
// x [N,C] fp32; xh [N,C] act or NULL (not written); ids, type_ids, pos_ids [N].
cudaError_t qac_k_embed_ln(float *x, void *xh, const int32_t *ids, const int32_t *type_ids, const int32_t *pos_ids,
                           const float *word_emb,
                           const float *pos_emb, const float *type_emb, const float *w,
                           const float *b, int N, int T, int C, float eps, qac_precision prec,
                           cudaStream_t s);

// x = LayerNorm(x + r + bias): the residual, the projection bias and the norm
// fused. x [N,C] fp32 in place; r [N,C] act; xh [N,C] act copy or NULL.
cudaError_t qac_k_residual_ln(float *x, void *xh, const void *r, const float *bias,
                              const float *w, const float *b, int N, int C, float eps,
                              qac_precision prec, cudaStream_t s);

// h = GELU_erf(h + bias) in place. h [N,I] act; bias [I].
cudaError_t qac_k_bias_gelu(void *h, const float *bias, int N, int I, qac_precision prec,
                            cudaStream_t s);

// Self-attention with the padding mask: out[b,t,h] = softmax(Q K^T/sqrt(hs),
// keys >= lens[b] masked) V, with the projection bias added to Q, K and V on
// load. qkv [B,T,3C] act (no bias); qkv_b [3C]; lens [B] on the device;
// out [B,T,C] act. Padded query rows are computed too, as in PyTorch.
cudaError_t qac_k_attention(void *out, const void *qkv, const float *qkv_b, const int *lens, int B,
                            int T, int C, int NH, qac_precision prec, cudaStream_t s);
// The same with a local window (window > 0: key j seen from query t when
// |t - j| <= window; the keys outside are not read) and qkv_b NULL allowed
// (the bias added already, or none); a row that sees no key gets zeros.
cudaError_t qac_k_attention_window(void *out, const void *qkv, const float *qkv_b, const int *lens, int window, int B,
                                   int T, int C, int NH, qac_precision prec, cudaStream_t s);
// Whether qac_k_attention supports this shape (head size a multiple of 32
// up to 256, T <= 4096).
int qac_k_attention_supported(int T, int C, int NH);

// out[b] = CLS row or mean of the first lens[b] rows of x, then L2-normalised
// when normalize (x / max(||x||, 1e-12)). out [B,C]; x [B,T,C] fp32.
cudaError_t qac_k_pool(float *out, const float *x, const int *lens, int B, int T, int C,
                       int mean_pooling, int normalize, cudaStream_t s);
// Same over rows [from[b], lens[b]) (from: device [B], or NULL for 0), as
// qac_pooling_forward_from: CLS takes row from[b]; nothing left gives a 0
// mean, or row 0 for CLS.
cudaError_t qac_k_pool_from(float *out, const float *x, const int *lens, const int *from, int B, int T, int C,
                            int mean_pooling, int normalize, cudaStream_t s);
// The same over packed rows: sequence b in rows [offs[b], offs[b] + lens[b])
// of x, pooled from from[b] (NULL: 0).
cudaError_t qac_k_pool_packed(float *out, const float *x, const int *offs, const int *lens, const int *from, int B,
                              int C, int mean_pooling, int normalize, cudaStream_t s);

// ---- the fused passes (encoder_fused.cu) ----
// The LayerNorms above, one warp per row (`warps` rows per block, 1 to 16)
// with the row in registers: the same contract, the sums in another order.
// They need C a multiple of 4 up to 1024 and 16-byte aligned vectors:
// qac_k_ln_warp_ok(C, the n pointers the call reads or writes).
int qac_k_ln_warp_ok(int C, const void *const *ptrs, int n);
cudaError_t qac_k_embed_ln_warp(float *x, void *xh, const int32_t *ids, const int32_t *type_ids, const int32_t *pos_ids,
                                const float *word_emb,
                                const float *pos_emb, const float *type_emb, const float *w, const float *b, int N,
                                int T, int C, float eps, qac_precision prec, int warps, cudaStream_t s);
cudaError_t qac_k_residual_ln_warp(float *x, void *xh, const void *r, const float *bias, const float *w, const float *b,
                                   int N, int C, float eps, qac_precision prec, int warps, cudaStream_t s);
// The last LayerNorm, pooling and L2 normalisation in one pass: out[b] =
// pool over sequence b's rows of LayerNorm(x + (r + bias)), normalised when
// normalize, nothing else written. Rows of b: offs[b].. (packed) or b*T..
// (offs NULL); lens NULL: one row per sequence; from as qac_k_pool_from;
// an empty sequence (lens[b] = 0) gets zeros. Needs qac_k_ln_warp_ok(C, ...).
cudaError_t qac_k_ln_pool(float *out, const float *x, const void *r, const float *bias, const float *w, const float *b,
                          const int *offs, const int *lens, const int *from, int B, int T, int C, float eps,
                          int mean_pooling, int normalize, qac_precision prec, int warps, cudaStream_t s);
// xg [B,C] fp32, ctxg [B,C] act = the CLS row of each sequence (row from[b]
// when from[b] < lens[b], else its first; zeros when lens[b] = 0) of x and
// ctx, laid out as for qac_k_ln_pool.
cudaError_t qac_k_gather_rows(float *xg, void *ctxg, const float *x, const void *ctx, const int *offs, const int *lens,
                              const int *from, int B, int T, int C, qac_precision prec, cudaStream_t s);
// qac_k_bias_gelu with each thread on `rows` rows of one 16-byte column
// chunk (its biases loaded once): the same arithmetic, the same bits.
cudaError_t qac_k_bias_gelu_rows(void *h, const float *bias, int N, int I, qac_precision prec, int rows,
                                 cudaStream_t s);

// ---- the families beyond BERT (family_kernels.cu) ----
// Rotary positions on qkv [N,3C] act in place: with qkv_b [3C] (may be
// NULL) added to Q, K and V first, row r's Q and K heads turned by position
// pos[r]'s angles from cs [P, hs] (cos | sin, qac_rope_table). The
// attention then runs without a bias. Twin: qac_rope_forward.
cudaError_t qac_k_rope(void *qkv, const float *qkv_b, const int32_t *pos, const float *cs, int N, int C, int NH,
                       qac_precision prec, cudaStream_t s);
// act [N,I] = GELU(pre[:, :I] + b) * (pre[:, I:] + b') with bias [2I] (may
// be NULL); act, pre in prec. Twin: qac_geglu_forward.
cudaError_t qac_k_geglu(void *act, const void *pre, const float *bias, int N, int I, qac_precision prec,
                        cudaStream_t s);
// The pre-LayerNorm step: x [N,C] fp32 += r + bias (r NULL: x unchanged;
// bias may be NULL), then xn [N,C] act = LayerNorm(x) (b may be NULL).
// Twin: qac_add_layernorm_forward.
cudaError_t qac_k_add_ln(float *x, void *xn, const void *r, const float *bias, const float *w, const float *b, int N,
                         int C, float eps, qac_precision prec, cudaStream_t s);

// dst = (act) src, and back. n elements.
cudaError_t qac_k_from_f32(void *dst, const float *src, size_t n, qac_precision prec, cudaStream_t s);
cudaError_t qac_k_to_f32(float *dst, const void *src, size_t n, qac_precision prec, cudaStream_t s);

// out [N,OC] = inp [N,IC] W^T with W [OC,IC] (nn.Linear layout), all act,
// fp32 accumulation (fp32 stays fp32: no TF32). The handle's stream is used.
cublasStatus_t qac_k_matmul(cublasHandle_t h, void *out, const void *inp, const void *w, int N,
                            int IC, int OC, qac_precision prec);

#endif
