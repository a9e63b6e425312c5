// Host-memory wrappers around single kernels (kernels/qac_cuda_kernels.h):
// what the parity tests compare with the CPU twins.
#include <string.h>

#include "bert_kernels.cuh"
#include "dev_scratch.cuh"

extern "C" {
#include "qac_cuda_kernels.h"
}

namespace {

// n host elements of esize bytes on the device.
qac_status upload(qac_scratch *s, void **out, const void *host, size_t n, size_t esize) {
    return qac_scratch_up(s, out, host, n * esize);
}

qac_status finish(qac_scratch *s, qac_status st, const char *what) {
    if (st == QAC_OK) st = qac_cuda_check(cudaDeviceSynchronize(), what);
    qac_scratch_free(s);
    return st;
}

qac_status check_gpu(void) {
    if (!qac_cuda_available()) return qac_set_error(QAC_ERR_UNSUPPORTED, "no usable CUDA GPU");
    return QAC_OK;
}

#define TRY(expr)                                                                          \
    do {                                                                                   \
        st = (expr);                                                                       \
        if (st != QAC_OK) goto done;                                                       \
    } while (0)
#define TRY_CU(expr) TRY(qac_cuda_check((expr), #expr))

} // namespace

// The one-warp-a-row LayerNorm takes C a multiple of 4 up to 1024; the
// pointers here come from cudaMalloc, so alignment follows from C.
static qac_status check_ln_warps(int C, int warps) {
    if (warps > 0 && !qac_k_ln_warp_ok(C, NULL, 0))
        return qac_set_error(QAC_ERR_UNSUPPORTED, "one-warp LayerNorm: C %d not a multiple of 4 up to 1024", C);
    return QAC_OK;
}

extern "C" qac_status qac_cuda_embeddings_layernorm(float *out, float *out_act, const int32_t *ids,
                                                    const float *word_emb, const float *pos_emb,
                                                    const float *type_emb, const float *w, const float *b,
                                                    int B, int T, int C, int V, int P, float eps,
                                                    qac_precision prec, int warps) {
    qac_status st = check_gpu();
    if (st == QAC_OK) st = check_ln_warps(C, warps);
    if (st != QAC_OK) return st;
    qac_scratch s = {{0}, 0};
    void *d_ids, *d_word, *d_pos, *d_type, *d_w, *d_b, *d_x, *d_xh = NULL;
    const size_t N = (size_t)B * T;
    TRY(upload(&s, &d_ids, ids, N, sizeof(int32_t)));
    TRY(upload(&s, &d_word, word_emb, (size_t)V * C, sizeof(float)));
    TRY(upload(&s, &d_pos, pos_emb, (size_t)P * C, sizeof(float)));
    TRY(upload(&s, &d_type, type_emb, (size_t)C, sizeof(float)));
    TRY(upload(&s, &d_w, w, (size_t)C, sizeof(float)));
    TRY(upload(&s, &d_b, b, (size_t)C, sizeof(float)));
    TRY(qac_scratch_alloc(&s, &d_x, N * C * sizeof(float)));
    if (out_act) TRY(qac_scratch_alloc(&s, &d_xh, N * C * qac_prec_size(prec)));
    if (warps > 0)
        TRY_CU(qac_k_embed_ln_warp((float *)d_x, d_xh, (const int32_t *)d_ids, NULL, NULL, (const float *)d_word,
                                   (const float *)d_pos, (const float *)d_type, (const float *)d_w,
                                   (const float *)d_b, (int)N, T, C, eps, prec, warps, 0));
    else
        TRY_CU(qac_k_embed_ln((float *)d_x, d_xh, (const int32_t *)d_ids, NULL, NULL, (const float *)d_word,
                              (const float *)d_pos, (const float *)d_type, (const float *)d_w, (const float *)d_b,
                              (int)N, T, C, eps, prec, 0));
    TRY_CU(cudaMemcpy(out, d_x, N * C * sizeof(float), cudaMemcpyDeviceToHost));
    if (out_act) TRY(qac_scratch_down_act(&s, out_act, d_xh, N * C, prec));
done:
    return finish(&s, st, "embeddings + LayerNorm");
}

extern "C" qac_status qac_cuda_residual_layernorm(float *out, float *out_act, const float *x, const float *r,
                                                  const float *bias, const float *w, const float *b, int N, int C,
                                                  float eps, qac_precision prec, int warps) {
    qac_status st = check_gpu();
    if (st == QAC_OK) st = check_ln_warps(C, warps);
    if (st != QAC_OK) return st;
    qac_scratch s = {{0}, 0};
    void *d_x, *d_r, *d_bias, *d_w, *d_b, *d_xh = NULL;
    const size_t n = (size_t)N * C;
    TRY(upload(&s, &d_x, x, n, sizeof(float)));
    TRY(qac_scratch_up_act(&s, &d_r, r, n, prec));
    TRY(upload(&s, &d_bias, bias, (size_t)C, sizeof(float)));
    TRY(upload(&s, &d_w, w, (size_t)C, sizeof(float)));
    TRY(upload(&s, &d_b, b, (size_t)C, sizeof(float)));
    if (out_act) TRY(qac_scratch_alloc(&s, &d_xh, n * qac_prec_size(prec)));
    if (warps > 0)
        TRY_CU(qac_k_residual_ln_warp((float *)d_x, d_xh, d_r, (const float *)d_bias, (const float *)d_w,
                                      (const float *)d_b, N, C, eps, prec, warps, 0));
    else
        TRY_CU(qac_k_residual_ln((float *)d_x, d_xh, d_r, (const float *)d_bias, (const float *)d_w,
                                 (const float *)d_b, N, C, eps, prec, 0));
    TRY_CU(cudaMemcpy(out, d_x, n * sizeof(float), cudaMemcpyDeviceToHost));
    if (out_act) TRY(qac_scratch_down_act(&s, out_act, d_xh, n, prec));
done:
    return finish(&s, st, "residual + LayerNorm");
}

extern "C" qac_status qac_cuda_ln_pool(float *out, const float *x, const float *r, const float *bias, const float *w,
                                       const float *b, const int *offs, const int *lens, const int *from, int B, int T,
                                       int N, int C, float eps, qac_pooling pooling, int normalize, qac_precision prec,
                                       int warps) {
    qac_status st = check_gpu();
    if (st == QAC_OK) st = check_ln_warps(C, warps > 0 ? warps : 1);
    if (st != QAC_OK) return st;
    qac_scratch s = {{0}, 0};
    void *d_x, *d_r, *d_bias, *d_w, *d_b, *d_offs = NULL, *d_lens, *d_from = NULL, *d_out;
    const size_t n = (size_t)N * C;
    TRY(upload(&s, &d_x, x, n, sizeof(float)));
    TRY(qac_scratch_up_act(&s, &d_r, r, n, prec));
    TRY(upload(&s, &d_bias, bias, (size_t)C, sizeof(float)));
    TRY(upload(&s, &d_w, w, (size_t)C, sizeof(float)));
    TRY(upload(&s, &d_b, b, (size_t)C, sizeof(float)));
    if (offs) TRY(upload(&s, &d_offs, offs, (size_t)B + 1, sizeof(int)));
    TRY(upload(&s, &d_lens, lens, (size_t)B, sizeof(int)));
    if (from) TRY(upload(&s, &d_from, from, (size_t)B, sizeof(int)));
    TRY(qac_scratch_alloc(&s, &d_out, (size_t)B * C * sizeof(float)));
    TRY_CU(qac_k_ln_pool((float *)d_out, (const float *)d_x, d_r, (const float *)d_bias, (const float *)d_w,
                         (const float *)d_b, (const int *)d_offs, (const int *)d_lens, (const int *)d_from, B, T, C,
                         eps, pooling == QAC_POOL_MEAN, normalize, prec, warps > 0 ? warps : 1, 0));
    TRY_CU(cudaMemcpy(out, d_out, (size_t)B * C * sizeof(float), cudaMemcpyDeviceToHost));
done:
    return finish(&s, st, "LayerNorm + pooling");
}

extern "C" qac_status qac_cuda_bias_gelu(float *out, const float *inp, const float *bias, int N, int I,
                                         qac_precision prec, int rows) {
    qac_status st = check_gpu();
    if (st != QAC_OK) return st;
    qac_scratch s = {{0}, 0};
    void *d_h, *d_bias;
    const size_t n = (size_t)N * I;
    TRY(qac_scratch_up_act(&s, &d_h, inp, n, prec));
    TRY(upload(&s, &d_bias, bias, (size_t)I, sizeof(float)));
    if (rows > 0)
        TRY_CU(qac_k_bias_gelu_rows(d_h, (const float *)d_bias, N, I, prec, rows, 0));
    else
        TRY_CU(qac_k_bias_gelu(d_h, (const float *)d_bias, N, I, prec, 0));
    TRY(qac_scratch_down_act(&s, out, d_h, n, prec));
done:
    return finish(&s, st, "bias + GELU");
}

extern "C" qac_status qac_cuda_attention(float *out, const float *qkv, const float *qkv_b, const int *lens, int B,
                                         int T, int C, int NH, qac_precision prec) {
    qac_status st = check_gpu();
    if (st != QAC_OK) return st;
    if (!qac_k_attention_supported(T, C, NH))
        return qac_set_error(QAC_ERR_UNSUPPORTED, "attention: T %d, C %d, %d heads not supported", T, C, NH);
    qac_scratch s = {{0}, 0};
    void *d_qkv, *d_b, *d_lens, *d_out;
    const size_t N = (size_t)B * T;
    TRY(qac_scratch_up_act(&s, &d_qkv, qkv, N * 3 * C, prec));
    TRY(upload(&s, &d_b, qkv_b, (size_t)3 * C, sizeof(float)));
    TRY(upload(&s, &d_lens, lens, (size_t)B, sizeof(int)));
    TRY(qac_scratch_alloc(&s, &d_out, N * C * qac_prec_size(prec)));
    TRY_CU(qac_k_attention(d_out, d_qkv, (const float *)d_b, (const int *)d_lens, B, T, C, NH, prec, 0));
    TRY(qac_scratch_down_act(&s, out, d_out, N * C, prec));
done:
    return finish(&s, st, "attention");
}

extern "C" qac_status qac_cuda_pooling(float *out, const float *hidden, const int *lens, const int *from, int B,
                                       int T, int C, qac_pooling pooling, int normalize) {
    qac_status st = check_gpu();
    if (st != QAC_OK) return st;
    qac_scratch s = {{0}, 0};
    void *d_x, *d_lens, *d_from = NULL, *d_out;
    TRY(upload(&s, &d_x, hidden, (size_t)B * T * C, sizeof(float)));
    TRY(upload(&s, &d_lens, lens, (size_t)B, sizeof(int)));
    if (from) TRY(upload(&s, &d_from, from, (size_t)B, sizeof(int)));
    TRY(qac_scratch_alloc(&s, &d_out, (size_t)B * C * sizeof(float)));
    TRY_CU(qac_k_pool_from((float *)d_out, (const float *)d_x, (const int *)d_lens, (const int *)d_from, B, T, C,
                           pooling == QAC_POOL_MEAN, normalize, 0));
    TRY_CU(cudaMemcpy(out, d_out, (size_t)B * C * sizeof(float), cudaMemcpyDeviceToHost));
done:
    return finish(&s, st, "pooling");
}

extern "C" qac_status qac_cuda_matmul(float *out, const float *inp, const float *w, int N, int IC, int OC,
                                      qac_precision prec) {
    qac_status st = check_gpu();
    if (st != QAC_OK) return st;
    qac_scratch s = {{0}, 0};
    cublasHandle_t h = NULL;
    void *d_in, *d_w, *d_out;
    TRY(qac_scratch_up_act(&s, &d_in, inp, (size_t)N * IC, prec));
    TRY(qac_scratch_up_act(&s, &d_w, w, (size_t)OC * IC, prec));
    TRY(qac_scratch_alloc(&s, &d_out, (size_t)N * OC * qac_prec_size(prec)));
    TRY(qac_cublas_check(cublasCreate(&h), "cublasCreate"));
    if (prec == QAC_PREC_FP32) TRY(qac_cublas_check(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH), "math mode"));
    TRY(qac_cublas_check(qac_k_matmul(h, d_out, d_in, d_w, N, IC, OC, prec), "matmul"));
    TRY(qac_scratch_down_act(&s, out, d_out, (size_t)N * OC, prec));
done:
    if (h) cublasDestroy(h);
    return finish(&s, st, "matmul");
}
