// The CUDA trainer's launchers on the CPU, for a test that runs a whole
// composition of them (kernels/prenorm_layers.cu) without a GPU: each
// launcher below is the one in kernels/ with its `<<<grid, block>>>`
// replaced by emu_launch of the same kernel source over the same grid
// (tests/gpu/cuda_emu.h), and cuBLAS's products (qac_kt_gemm) by a plain
// product with one fp32 accumulator per element, summed in order.
//
// Include it first, in place of cuda_emu.h: it renames each launcher
// (emu_*) before the kernels' headers declare it, so that nothing here
// clashes with the real launchers libqac holds; then include the
// composition's source.
//
// Emulated here, and where from: train_layers.cu (LayerNorm, bias
// gradients, bias + dropout + residual, dropout, the products),
// train_fused.cu (the fused residual LayerNorm forward and backward),
// train_family.cu (rotary and GeGLU backward), family_kernels.cu (rotary
// and GeGLU forward), train_attention.cu (the unfused attention),
// train_embed.cu (embeddings and their scatter). Written plainly: the
// fp32 add qac_kt_add (train_loss.cu, not built for the emulator) and the
// fp32 -> bf16 conversion qac_k_from_f32 (bert_kernels.cu). Not restated:
// the composites of train_layers.cu (linear forward and backward) and
// train_attention.cu (the unfused attention), built from their own source
// (QAC_KT_EMU_COMPOSITES). The fused attention (flash_*.cu) is not
// emulated here: t->fused must be 0.
#ifndef QAC_TRAIN_EMU_LAUNCHERS_H
#define QAC_TRAIN_EMU_LAUNCHERS_H

#include "cuda_emu.h"

#define qac_kt_layernorm_fwd emu_kt_layernorm_fwd
#define qac_kt_layernorm_bwd emu_kt_layernorm_bwd
#define qac_kt_bias_bwd emu_kt_bias_bwd
#define qac_kt_bias_dropout_residual emu_kt_bias_dropout_residual
#define qac_kt_dropout emu_kt_dropout
#define qac_kt_gemm emu_kt_gemm
#define qac_kt_linear_fwd emu_kt_linear_fwd
#define qac_kt_linear_bwd emu_kt_linear_bwd
#define qac_kt_residual_ln_fwd emu_kt_residual_ln_fwd
#define qac_kt_residual_ln_bwd emu_kt_residual_ln_bwd
#define qac_kt_fused_ln_supported emu_kt_fused_ln_supported
#define qac_k_rope emu_k_rope
#define qac_k_geglu emu_k_geglu
#define qac_kt_rope_bwd emu_kt_rope_bwd
#define qac_kt_geglu_bwd emu_kt_geglu_bwd
#define qac_kt_qkv_split emu_kt_qkv_split
#define qac_kt_qkv_merge emu_kt_qkv_merge
#define qac_kt_heads_split emu_kt_heads_split
#define qac_kt_heads_merge emu_kt_heads_merge
#define qac_kt_softmax_fwd emu_kt_softmax_fwd
#define qac_kt_att_dropout emu_kt_att_dropout
#define qac_kt_softmax_bwd emu_kt_softmax_bwd
#define qac_kt_attention_fwd emu_kt_attention_fwd
#define qac_kt_attention_bwd emu_kt_attention_bwd
#define qac_kt_embed_fwd emu_kt_embed_fwd
#define qac_kt_scatter_add emu_kt_scatter_add
#define qac_kt_add emu_kt_add
#define qac_k_from_f32 emu_k_from_f32
#define qac_fa_forward emu_fa_forward
#define qac_fa_backward emu_fa_backward
#define qac_kl_act_w emu_kl_act_w
#define qac_kl_align emu_kl_align
#define qac_kl_pn_bind emu_kl_pn_bind
#define qac_kl_pn_layer_fwd emu_kl_pn_layer_fwd
#define qac_kl_pn_layer_bwd emu_kl_pn_layer_bwd
#define qac_kl_pn_fwd emu_kl_pn_fwd
#define qac_kl_pn_bwd emu_kl_pn_bwd
#define cudaGetErrorString emu_cudaGetErrorString
#define cudaGetErrorName emu_cudaGetErrorName
#define cublasGetStatusString emu_cublasGetStatusString
const char *emu_cudaGetErrorString(cudaError_t e);
const char *emu_cudaGetErrorName(cudaError_t e);

// static in a kernel's body: one array for the block's threads (the
// fibers share the OS thread, and blocks run one after another)
#undef __shared__
#define __shared__ static

// the composites of train_layers.cu and train_attention.cu, built as they
// are over the emulated launchers
#define QAC_KT_EMU_COMPOSITES
#include "../../kernels/family_kernels.cu"
#include "../../kernels/train_attention.cu"
#include "../../kernels/train_embed.cu"
#include "../../kernels/train_family.cu"
#include "../../kernels/train_fused.cu"
#include "../../kernels/train_layers.cu"

#include "../../kernels/cuda_layers.cuh"

const char *emu_cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated launch refused"; }
const char *emu_cudaGetErrorName(cudaError_t e) { return e == cudaSuccess ? "cudaSuccess" : "cudaErrorInvalidValue"; }
const char *emu_cublasGetStatusString(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "success" : "emulated product refused";
}

size_t emu_kl_align(size_t x) { return (x + 255) & ~(size_t)255; } // cuda_layers.cu's qac_kl_align

const void *emu_kl_act_w(const qac_kl_ctx *t, const float *view) { // cuda_layers.cu's qac_kl_act_w
    if (t->prec == QAC_PREC_FP32) return view;
    return t->params_act + (view - t->params);
}

namespace {

template <typename E> float emu_ld(const void *p, size_t i) { return qac_to_float<E>(((const E *)p)[i]); }
template <typename E> void emu_st(void *p, size_t i, float v) { ((E *)p)[i] = qac_from_float<E>(v); }

// fused_k of train_fused.cu, and its dispatch
int emu_fused_k(int C) {
    const int k = (C + LN_THREADS - 1) / LN_THREADS;
    return k <= 4 ? k : k <= 8 ? 8 : 16;
}
#define EMU_FUSED_K(k, ...)                                                                \
    switch (k) {                                                                           \
    case 1: { constexpr int K = 1; __VA_ARGS__; } break;                                   \
    case 2: { constexpr int K = 2; __VA_ARGS__; } break;                                   \
    case 3: { constexpr int K = 3; __VA_ARGS__; } break;                                   \
    case 4: { constexpr int K = 4; __VA_ARGS__; } break;                                   \
    case 8: { constexpr int K = 8; __VA_ARGS__; } break;                                   \
    default: { constexpr int K = 16; __VA_ARGS__; } break;                                 \
    }

} // namespace

// ---- train_layers.cu ----

cudaError_t emu_kt_layernorm_fwd(float *out, void *out_act, float *mean, float *rstd, const float *inp, const float *w,
                                 const float *b, int N, int C, float eps, qac_precision prec, cudaStream_t) {
    if (N <= 0) return cudaSuccess;
    KT_DISPATCH(prec, emu_launch({(unsigned)N, 1, 1}, LN_THREADS,
                                 [&] { ln_fwd_kernel<E>(out, (E *)out_act, mean, rstd, inp, w, b, C, eps); }));
    return cudaSuccess;
}

cudaError_t emu_kt_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                 const float *mean, const float *rstd, const float *w, float *partial, int N, int C,
                                 cudaStream_t) {
    if (N <= 0) return cudaSuccess;
    const int nch = col_chunks(N);
    const unsigned gc = qac_div_up(C, COL_THREADS);
    emu_launch({gc, (unsigned)nch, 1}, COL_THREADS,
               [&] { ln_partial_kernel(partial, dout, inp, mean, rstd, N, C, nch); });
    emu_launch({gc, 1, 1}, COL_THREADS, [&] { colsum_finish_kernel(dw, partial, nch, C); });
    if (db) emu_launch({gc, 1, 1}, COL_THREADS, [&] { colsum_finish_kernel(db, partial + (size_t)nch * C, nch, C); });
    emu_launch({(unsigned)N, 1, 1}, LN_THREADS, [&] { ln_bwd_kernel(dinp, dout, inp, mean, rstd, w, C); });
    return cudaSuccess;
}

cudaError_t emu_kt_bias_bwd(float *db, const void *dout, float *partial, int N, int C, qac_precision prec,
                            cudaStream_t) {
    if (N <= 0) return cudaSuccess;
    const int nch = col_chunks(N);
    const unsigned gc = qac_div_up(C, COL_THREADS);
    KT_DISPATCH(prec, emu_launch({gc, (unsigned)nch, 1}, COL_THREADS,
                                 [&] { bias_partial_kernel<E>(partial, (const E *)dout, N, C); }));
    emu_launch({gc, 1, 1}, COL_THREADS, [&] { colsum_finish_kernel(db, partial, nch, C); });
    return cudaSuccess;
}

cudaError_t emu_kt_bias_dropout_residual(float *out, const void *proj, const float *bias, const float *resid,
                                         qac_kt_drop d, int layer, int site, int B, int T, int C, qac_precision prec,
                                         cudaStream_t) {
    const size_t n = (size_t)B * T * C;
    if (n == 0) return cudaSuccess;
    const drop_consts k = drop_consts_for(d.p);
    const int dropping = d.p > 0.0f;
    KT_DISPATCH(prec, emu_launch({grid_1d(n, 256), 1, 1}, 256, [&] {
                    bias_dropout_residual_kernel<E>(out, (const E *)proj, bias, resid, d.key, d.seq_base, k.thresh,
                                                    k.scale, dropping, layer, site, T, C, n);
                }));
    return cudaSuccess;
}

cudaError_t emu_kt_dropout(void *out, const float *inp, qac_kt_drop d, int layer, int site, int B, int T, int C,
                           qac_precision out_prec, cudaStream_t) {
    const size_t n = (size_t)B * T * C;
    if (n == 0) return cudaSuccess;
    const drop_consts k = drop_consts_for(d.p);
    const int dropping = d.p > 0.0f;
    KT_DISPATCH(out_prec, emu_launch({grid_1d(n, 256), 1, 1}, 256, [&] {
                    dropout_kernel<E>((E *)out, inp, d.key, d.seq_base, k.thresh, k.scale, dropping, layer, site, T,
                                      C, n);
                }));
    return cudaSuccess;
}

// Row-major C [M,N] = alpha op(A) op(B) + beta C per batch, as cuBLAS
// computes it for qac_kt_gemm: one fp32 accumulator per element, k in order.
cublasStatus_t emu_kt_gemm(cublasHandle_t, int transA, int transB, int M, int N, int K, float alpha, const void *A,
                           int lda, long long strideA, const void *B, int ldb, long long strideB, float beta, void *C,
                           int ldc, long long strideC, int batch, qac_precision ab_prec, qac_precision c_prec) {
    if ((ab_prec != QAC_PREC_FP32 && ab_prec != QAC_PREC_BF16) || (c_prec != QAC_PREC_FP32 && c_prec != ab_prec))
        return CUBLAS_STATUS_INVALID_VALUE;
    auto ld = [&](const void *p, size_t i) {
        return ab_prec == QAC_PREC_FP32 ? emu_ld<float>(p, i) : emu_ld<__nv_bfloat16>(p, i);
    };
    for (int bt = 0; bt < batch; bt++) {
        const size_t oa = (size_t)bt * strideA, ob = (size_t)bt * strideB, oc = (size_t)bt * strideC;
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                float acc = 0.f;
                for (int k = 0; k < K; k++) {
                    const float a = ld(A, oa + (transA ? (size_t)k * lda + m : (size_t)m * lda + k));
                    const float b = ld(B, ob + (transB ? (size_t)n * ldb + k : (size_t)k * ldb + n));
                    acc += a * b;
                }
                const size_t ci = oc + (size_t)m * ldc + n;
                float v = alpha * acc;
                if (beta != 0.f)
                    v += beta * (c_prec == QAC_PREC_FP32 ? emu_ld<float>(C, ci) : emu_ld<__nv_bfloat16>(C, ci));
                if (c_prec == QAC_PREC_FP32) emu_st<float>(C, ci, v);
                else emu_st<__nv_bfloat16>(C, ci, v);
            }
    }
    return CUBLAS_STATUS_SUCCESS;
}

// ---- train_fused.cu ----

int emu_kt_fused_ln_supported(int C) { return C >= 1 && C <= LN_THREADS * FUSED_MAX_K; }

cudaError_t emu_kt_residual_ln_fwd(float *res, float *out, void *out_act, float *mean, float *rstd, const void *proj,
                                   const float *bias, const float *resid, const float *w, const float *b,
                                   qac_kt_drop d, int layer, int site, int B, int T, int C, float eps,
                                   qac_precision prec, cudaStream_t) {
    const int N = B * T;
    if (N <= 0) return cudaSuccess;
    if (!qac_kt_fused_ln_supported(C)) return cudaErrorInvalidValue;
    const drop_consts k = drop_consts_for(d.p);
    const int dropping = d.p > 0.0f;
    KT_DISPATCH(prec, EMU_FUSED_K(emu_fused_k(C), emu_launch({(unsigned)N, 1, 1}, LN_THREADS, [&] {
                                      residual_ln_fwd_kernel<E, K>(res, out, (E *)out_act, mean, rstd,
                                                                   (const E *)proj, bias, resid, w, b, d.key,
                                                                   d.seq_base, k.thresh, k.scale, dropping, layer,
                                                                   site, T, C, eps);
                                  })));
    return cudaSuccess;
}

cudaError_t emu_kt_residual_ln_bwd(float *dres, void *dproj, float *dw, float *db, float *dbias, const float *dout,
                                   const float *dadd, const float *res, const float *mean, const float *rstd,
                                   const float *w, float *partial, qac_kt_drop d, int layer, int site, int B, int T,
                                   int C, qac_precision prec, cudaStream_t) {
    const int N = B * T;
    if (N <= 0) return cudaSuccess;
    if (!qac_kt_fused_ln_supported(C)) return cudaErrorInvalidValue;
    const int nch = col_chunks(N);
    const drop_consts k = drop_consts_for(d.p);
    const int dropping = d.p > 0.0f;
    KT_DISPATCH(prec, EMU_FUSED_K(emu_fused_k(C), {
                    constexpr int RB = K <= 4 ? 4 : K <= 8 ? 2 : 1;
                    emu_launch({(unsigned)nch, 1, 1}, LN_THREADS, [&] {
                        residual_ln_bwd_kernel<E, K, RB>(dres, (E *)dproj, partial, dout, dadd, res, mean, rstd, w,
                                                         d.key, d.seq_base, k.thresh, k.scale, dropping, layer, site,
                                                         T, C, N, nch);
                    });
                }));
    const colsum_dsts dst = {{dw, db, dbias}};
    emu_launch({qac_div_up(C, COL_THREADS), 3, 1}, COL_THREADS,
               [&] { colsum_finish_ways_kernel(dst, partial, nch, C); });
    return cudaSuccess;
}

// ---- family_kernels.cu and train_family.cu ----

cudaError_t emu_k_rope(void *qkv, const float *qkv_b, const int32_t *pos, const float *cs, int N, int C, int NH,
                       qac_precision prec, cudaStream_t) {
    if (N <= 0) return cudaSuccess;
    if (NH <= 0 || C % NH || (C / NH) % 2) return cudaErrorInvalidValue;
    const unsigned grid = qac_div_up((size_t)N * C, 256);
    const int hs = C / NH;
    KT_DISPATCH(prec, emu_launch({grid, 1, 1}, 256, [&] { qac_fam::rope_kernel<E>((E *)qkv, qkv_b, pos, cs, N, C, hs); }));
    return cudaSuccess;
}

cudaError_t emu_k_geglu(void *act, const void *pre, const float *bias, int N, int I, qac_precision prec,
                        cudaStream_t) {
    if (N <= 0) return cudaSuccess;
    const unsigned grid = qac_div_up((size_t)N * I, 256);
    KT_DISPATCH(prec, emu_launch({grid, 1, 1}, 256,
                                 [&] { qac_fam::geglu_kernel<E>((E *)act, (const E *)pre, bias, N, I); }));
    return cudaSuccess;
}

cudaError_t emu_kt_rope_bwd(void *dqkv, const int32_t *pos, const float *cs, int N, int C, int NH, qac_precision prec,
                            cudaStream_t) {
    if (N <= 0) return cudaSuccess;
    if (NH <= 0 || C % NH || (C / NH) % 2) return cudaErrorInvalidValue;
    const unsigned grid = grid_1d((size_t)N * C, 256);
    KT_DISPATCH(prec, emu_launch({grid, 1, 1}, 256, [&] { rope_bwd_kernel<E>((E *)dqkv, pos, cs, N, C, C / NH); }));
    return cudaSuccess;
}

cudaError_t emu_kt_geglu_bwd(void *dpre, const void *dact, const void *pre, const float *bias, int N, int I,
                             qac_precision prec, cudaStream_t) {
    if (N <= 0) return cudaSuccess;
    const unsigned grid = grid_1d((size_t)N * I, 256);
    KT_DISPATCH(prec, emu_launch({grid, 1, 1}, 256, [&] {
                    geglu_bwd_kernel<E>((E *)dpre, (const E *)dact, (const E *)pre, bias, N, I);
                }));
    return cudaSuccess;
}

// ---- train_attention.cu ----

cudaError_t emu_kt_qkv_split(void *q, void *k, void *v, const void *qkv, const float *qkv_b, int B, int T, int C,
                             int NH, qac_precision prec, cudaStream_t) {
    const size_t n = (size_t)B * T * 3 * C;
    if (n == 0) return cudaSuccess;
    if (NH <= 0 || C % NH) return cudaErrorInvalidValue;
    KT_DISPATCH(prec, emu_launch({grid_1d(n, 256), 1, 1}, 256, [&] {
                    qkv_split_kernel<E>((E *)q, (E *)k, (E *)v, (const E *)qkv, qkv_b, T, C, NH, n);
                }));
    return cudaSuccess;
}

cudaError_t emu_kt_qkv_merge(void *dqkv, const void *dq, const void *dk, const void *dv, int B, int T, int C, int NH,
                             qac_precision prec, cudaStream_t) {
    const size_t n = (size_t)B * T * 3 * C;
    if (n == 0) return cudaSuccess;
    if (NH <= 0 || C % NH) return cudaErrorInvalidValue;
    KT_DISPATCH(prec, emu_launch({grid_1d(n, 256), 1, 1}, 256, [&] {
                    qkv_merge_kernel<E>((E *)dqkv, (const E *)dq, (const E *)dk, (const E *)dv, T, C, NH, n);
                }));
    return cudaSuccess;
}

cudaError_t emu_kt_heads_split(void *dst, const void *src, int B, int T, int C, int NH, qac_precision prec,
                               cudaStream_t) {
    const size_t n = (size_t)B * T * C;
    if (n == 0) return cudaSuccess;
    if (NH <= 0 || C % NH) return cudaErrorInvalidValue;
    KT_DISPATCH(prec, emu_launch({grid_1d(n, 256), 1, 1}, 256,
                                 [&] { heads_kernel<E>((E *)dst, (const E *)src, T, C, NH, 0, n); }));
    return cudaSuccess;
}

cudaError_t emu_kt_heads_merge(void *dst, const void *src, int B, int T, int C, int NH, qac_precision prec,
                               cudaStream_t) {
    const size_t n = (size_t)B * T * C;
    if (n == 0) return cudaSuccess;
    if (NH <= 0 || C % NH) return cudaErrorInvalidValue;
    KT_DISPATCH(prec, emu_launch({grid_1d(n, 256), 1, 1}, 256,
                                 [&] { heads_kernel<E>((E *)dst, (const E *)src, T, C, NH, 1, n); }));
    return cudaSuccess;
}

cudaError_t emu_kt_softmax_fwd(void *P, void *Pd, const float *S, const int *lens, qac_kt_drop d, int layer, int B,
                               int NH, int T, int causal, int window, qac_precision prec, cudaStream_t) {
    const size_t rows = (size_t)B * NH * T;
    if (rows == 0) return cudaSuccess;
    if (T >= (1 << 20) || NH >= (1 << 23)) return cudaErrorInvalidValue;
    const drop_consts k = drop_consts_for(d.p);
    void *pd = d.p > 0.0f ? Pd : NULL;
    KT_DISPATCH(prec, emu_launch({qac_div_up(rows, SM_WARPS), 1, 1}, SM_WARPS * 32, [&] {
                    softmax_fwd_kernel<E>((E *)P, (E *)pd, S, lens, d.key, d.seq_base, k.thresh,
                                          k.scale, layer, NH, T, causal, window, rows);
                }));
    return cudaSuccess;
}

cudaError_t emu_kt_att_dropout(void *Pd, const void *P, const int *lens, qac_kt_drop d, int layer, int B, int NH,
                               int T, qac_precision prec, cudaStream_t) {
    const size_t n = (size_t)B * NH * T * T;
    if (n == 0) return cudaSuccess;
    const drop_consts k = drop_consts_for(d.p);
    KT_DISPATCH(prec, emu_launch({grid_1d(n, 256), 1, 1}, 256, [&] {
                    att_dropout_kernel<E>((E *)Pd, (const E *)P, lens, d.key, d.seq_base, k.thresh, k.scale, layer, NH,
                                          T, n);
                }));
    return cudaSuccess;
}

cudaError_t emu_kt_softmax_bwd(void *dS, const void *P, const float *dPd, const int *lens, qac_kt_drop d, int layer,
                               int B, int NH, int T, float scale, qac_precision prec, cudaStream_t) {
    const size_t rows = (size_t)B * NH * T;
    if (rows == 0) return cudaSuccess;
    const drop_consts k = drop_consts_for(d.p);
    const int dropping = d.p > 0.0f;
    KT_DISPATCH(prec, emu_launch({qac_div_up(rows, SM_WARPS), 1, 1}, SM_WARPS * 32, [&] {
                    softmax_bwd_kernel<E>((E *)dS, (const E *)P, dPd, lens, d.key, d.seq_base, k.thresh, k.scale,
                                          dropping, layer, NH, T, scale, rows);
                }));
    return cudaSuccess;
}

// the fused attention is not emulated: the caller sets t->fused = 0
cudaError_t emu_fa_forward(void *, float *, const void *, const float *, qac_fa_rows, int, int, int, int, qac_kt_drop,
                           int, qac_precision, const qac_fa_tiles *, cudaStream_t) {
    return cudaErrorNotSupported;
}
cudaError_t emu_fa_backward(void *, float *, const void *, const void *, const float *, const void *, const float *,
                            qac_fa_rows, int, int, int, int, qac_kt_drop, int, qac_precision, const qac_fa_tiles *,
                            cudaStream_t) {
    return cudaErrorNotSupported;
}

// ---- train_embed.cu ----

cudaError_t emu_kt_embed_fwd(float *emb, const int32_t *ids, const int32_t *type_ids, const int32_t *pos_ids,
                             const float *word, const float *pos, const float *type, int N, int T, int C,
                             cudaStream_t) {
    if (N <= 0) return cudaSuccess;
    emu_launch({(unsigned)N, 1, 1}, 256,
               [&] { embed_fwd_kernel(emb, ids, type_ids, pos_ids, word, pos, type, T, C); });
    return cudaSuccess;
}

cudaError_t emu_kt_scatter_add(float *dst, const float *dout, qac_scatter_plan plan, const int32_t *d_plan,
                               float *partial, int C, cudaStream_t) {
    if (plan.n_rows <= 0 || plan.n_keys <= 0) return cudaSuccess;
    const size_t N = (size_t)plan.n_rows;
    const int32_t *rows = d_plan, *seg_begin = d_plan + N, *key_seg = d_plan + 2 * N + 1, *keys = d_plan + 3 * N + 2;
    if (plan.n_segs > 65535 * 64 || plan.n_keys > 65535) return cudaErrorInvalidValue;
    for (int s0 = 0; s0 < plan.n_segs; s0 += 65535) {
        const int ns = plan.n_segs - s0 < 65535 ? plan.n_segs - s0 : 65535;
        emu_launch({qac_div_up(C, COL_THREADS), (unsigned)ns, 1}, COL_THREADS,
                   [&] { scatter_partial_kernel(partial + (size_t)s0 * C, dout, rows, seg_begin + s0, C); });
    }
    emu_launch({qac_div_up(C, COL_THREADS), (unsigned)plan.n_keys, 1}, COL_THREADS,
               [&] { scatter_finish_kernel(dst, partial, key_seg, keys, C); });
    return cudaSuccess;
}

// ---- written plainly ----

cudaError_t emu_kt_add(float *y, const float *x, size_t n, cudaStream_t) { // train_loss.cu's add_kernel
    for (size_t i = 0; i < n; i++) y[i] += x[i];
    return cudaSuccess;
}

cudaError_t emu_k_from_f32(void *dst, const float *src, size_t n, qac_precision prec, cudaStream_t) {
    KT_DISPATCH(prec, for (size_t i = 0; i < n; i++) emu_st<E>(dst, i, src[i]));
    return cudaSuccess;
}

#endif
