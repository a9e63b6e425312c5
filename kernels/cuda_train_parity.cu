// Host-memory wrappers around single training kernels
// (kernels/qac_cuda_train_kernels.h): what the gpu-labelled parity tests
// compare with the CPU twins.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bert_kernels.cuh"
#include "dev_scratch.cuh"
#include "cuda_layers.cuh"
#include "train_kernels.cuh"

extern "C" {
#include "qac_cuda_train_kernels.h"
}

namespace {

qac_status up_f(qac_scratch *s, float **out, const float *host, size_t n) {
    return qac_scratch_up(s, (void **)out, host, n * sizeof(float));
}

qac_status down_f(float *host, const float *dev, size_t n) {
    QAC_CU(cudaMemcpy(host, dev, n * sizeof(float), cudaMemcpyDeviceToHost));
    return QAC_OK;
}

qac_status finish(qac_scratch *s, cublasHandle_t h, qac_status st, const char *what) {
    if (st == QAC_OK) st = qac_cuda_check(cudaDeviceSynchronize(), what);
    if (h) cublasDestroy(h);
    qac_scratch_free(s);
    return st == QAC_OK ? st : qac_wrap_error(st, "%s", what);
}

qac_status start(qac_precision prec) {
    if (!qac_cuda_available()) return qac_set_error(QAC_ERR_UNSUPPORTED, "no usable CUDA GPU");
    if (prec != QAC_PREC_FP32 && prec != QAC_PREC_BF16)
        return qac_set_error(QAC_ERR_UNSUPPORTED, "training kernels run in fp32 or bf16");
    return QAC_OK;
}

qac_status make_blas(cublasHandle_t *h, qac_precision prec) {
    QAC_CUBLAS(cublasCreate(h));
    // as the trainers' (kernels/cuda_layers.cu qac_kl_dev_init)
    QAC_CUBLAS(cublasSetMathMode(*h, prec == QAC_PREC_FP32 ? CUBLAS_PEDANTIC_MATH
                                                           : CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
    return QAC_OK;
}

qac_kt_drop drop_of(float p, uint64_t key) {
    qac_kt_drop d;
    d.p = p;
    d.key = key;
    d.seq_base = 0;
    return d;
}

#define TRY(expr)                                                                          \
    do {                                                                                   \
        st = (expr);                                                                       \
        if (st != QAC_OK) goto done;                                                       \
    } while (0)
#define TRY_CU(expr) TRY(qac_cuda_check((expr), #expr))

} // namespace

extern "C" qac_status qac_cuda_embeddings_backward(float *dword, float *dpos, float *dtype, const float *dout,
                                                   const int32_t *ids, const int32_t *type_ids, int B, int T, int C,
                                                   int V, int P, int Tt) {
    qac_status st = start(QAC_PREC_FP32);
    if (st != QAC_OK) return st;
    qac_scratch s = {{0}, 0};
    const int N = B * T;
    const size_t nplan = qac_scatter_plan_ints(N);
    int32_t *hplan_w = (int32_t *)malloc(nplan * sizeof(int32_t)), *hplan_t = (int32_t *)malloc(nplan * sizeof(int32_t));
    int32_t *counts = (int32_t *)malloc(((size_t)(V > Tt ? V : Tt) + 1) * sizeof(int32_t));
    float *d_word, *d_pos, *d_type, *d_out, *partial;
    void *d_plan_w, *d_plan_t;
    qac_scatter_plan pw, pt;
    if (!hplan_w || !hplan_t || !counts) {
        st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
        goto done;
    }
    pw = qac_scatter_plan_build(hplan_w, ids, N, V, counts);
    pt = qac_scatter_plan_build(hplan_t, type_ids, N, Tt, counts);
    TRY(up_f(&s, &d_word, dword, (size_t)V * C));
    TRY(up_f(&s, &d_pos, dpos, (size_t)P * C));
    TRY(up_f(&s, &d_type, dtype, (size_t)Tt * C));
    TRY(up_f(&s, &d_out, dout, (size_t)N * C));
    TRY(qac_scratch_up(&s, &d_plan_w, hplan_w, nplan * sizeof(int32_t)));
    TRY(qac_scratch_up(&s, &d_plan_t, hplan_t, nplan * sizeof(int32_t)));
    TRY(qac_scratch_alloc(&s, (void **)&partial, (size_t)N * C * sizeof(float)));
    TRY_CU(qac_kt_pos_bwd(d_pos, d_out, B, T, C, 0));
    TRY_CU(qac_kt_scatter_add(d_word, d_out, pw, (const int32_t *)d_plan_w, partial, C, 0));
    TRY_CU(qac_kt_scatter_add(d_type, d_out, pt, (const int32_t *)d_plan_t, partial, C, 0));
    TRY(down_f(dword, d_word, (size_t)V * C));
    TRY(down_f(dpos, d_pos, (size_t)P * C));
    TRY(down_f(dtype, d_type, (size_t)Tt * C));
done:
    free(hplan_w), free(hplan_t), free(counts);
    return finish(&s, NULL, st, "embeddings backward");
}

extern "C" qac_status qac_cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                                 const float *w, const float *b, int N, int C, float eps) {
    qac_status st = start(QAC_PREC_FP32);
    if (st != QAC_OK) return st;
    qac_scratch s = {{0}, 0};
    float *d_out, *d_mean, *d_rstd, *d_inp, *d_w, *d_b;
    TRY(up_f(&s, &d_inp, inp, (size_t)N * C));
    TRY(up_f(&s, &d_w, w, C));
    TRY(up_f(&s, &d_b, b, C));
    TRY(qac_scratch_alloc(&s, (void **)&d_out, (size_t)N * C * sizeof(float)));
    TRY(qac_scratch_alloc(&s, (void **)&d_mean, (size_t)N * sizeof(float)));
    TRY(qac_scratch_alloc(&s, (void **)&d_rstd, (size_t)N * sizeof(float)));
    TRY_CU(qac_kt_layernorm_fwd(d_out, NULL, d_mean, d_rstd, d_inp, d_w, d_b, N, C, eps, QAC_PREC_FP32, 0));
    TRY(down_f(out, d_out, (size_t)N * C));
    TRY(down_f(mean, d_mean, N));
    TRY(down_f(rstd, d_rstd, N));
done:
    return finish(&s, NULL, st, "layernorm forward");
}

extern "C" qac_status qac_cuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                                  const float *inp, const float *mean, const float *rstd,
                                                  const float *w, int N, int C) {
    qac_status st = start(QAC_PREC_FP32);
    if (st != QAC_OK) return st;
    qac_scratch s = {{0}, 0};
    float *d_dinp, *d_dw, *d_db, *d_dout, *d_inp, *d_mean, *d_rstd, *d_w, *partial;
    TRY(up_f(&s, &d_dout, dout, (size_t)N * C));
    TRY(up_f(&s, &d_inp, inp, (size_t)N * C));
    TRY(up_f(&s, &d_mean, mean, N));
    TRY(up_f(&s, &d_rstd, rstd, N));
    TRY(up_f(&s, &d_w, w, C));
    TRY(up_f(&s, &d_dw, dw, C));
    TRY(up_f(&s, &d_db, db, C));
    TRY(qac_scratch_alloc(&s, (void **)&d_dinp, (size_t)N * C * sizeof(float)));
    TRY(qac_scratch_alloc(&s, (void **)&partial, qac_kt_colsum_floats(N, C, 2) * sizeof(float)));
    TRY_CU(qac_kt_layernorm_bwd(d_dinp, d_dw, d_db, d_dout, d_inp, d_mean, d_rstd, d_w, partial, N, C, 0));
    TRY(down_f(dinp, d_dinp, (size_t)N * C));
    TRY(down_f(dw, d_dw, C));
    TRY(down_f(db, d_db, C));
done:
    return finish(&s, NULL, st, "layernorm backward");
}

extern "C" qac_status qac_cuda_gelu_backward(float *dinp, const float *dout, const float *pre, size_t n,
                                             qac_precision prec) {
    qac_status st = start(prec);
    if (st != QAC_OK) return st;
    qac_scratch s = {{0}, 0};
    void *d_dout, *d_pre;
    TRY(qac_scratch_up_act(&s, &d_dout, dout, n, prec));
    TRY(qac_scratch_up_act(&s, &d_pre, pre, n, prec));
    TRY_CU(qac_kt_gelu_bwd(d_dout, d_dout, d_pre, n, prec, 0));
    TRY(qac_scratch_down_act(&s, dinp, d_dout, n, prec));
done:
    return finish(&s, NULL, st, "gelu backward");
}

extern "C" qac_status qac_cuda_bias_gelu_train(float *pre, float *act, const float *inp, const float *bias, int N,
                                               int I, qac_precision prec) {
    qac_status st = start(prec);
    if (st != QAC_OK) return st;
    qac_scratch s = {{0}, 0};
    const size_t n = (size_t)N * I;
    void *d_pre, *d_act;
    float *d_bias;
    TRY(qac_scratch_up_act(&s, &d_pre, inp, n, prec));
    TRY(up_f(&s, &d_bias, bias, I));
    TRY(qac_scratch_alloc(&s, &d_act, n * qac_prec_size(prec)));
    TRY_CU(qac_kt_bias_gelu_fwd(d_pre, d_act, d_bias, N, I, prec, 0));
    TRY(qac_scratch_down_act(&s, pre, d_pre, n, prec));
    TRY(qac_scratch_down_act(&s, act, d_act, n, prec));
done:
    return finish(&s, NULL, st, "bias + gelu (training)");
}

extern "C" qac_status qac_cuda_matmul_backward(float *dinp, float *dw, float *db, const float *dout,
                                               const float *inp, const float *w, int N, int IC, int OC,
                                               qac_precision prec) {
    qac_status st = start(prec);
    if (st != QAC_OK) return st;
    qac_scratch s = {{0}, 0};
    cublasHandle_t h = NULL;
    void *d_dout, *d_inp, *d_w, *d_dinp = NULL;
    float *d_dw = NULL, *d_db = NULL, *partial = NULL;
    TRY(make_blas(&h, prec));
    TRY(qac_scratch_up_act(&s, &d_dout, dout, (size_t)N * OC, prec));
    TRY(qac_scratch_up_act(&s, &d_inp, inp, (size_t)N * IC, prec));
    TRY(qac_scratch_up_act(&s, &d_w, w, (size_t)OC * IC, prec));
    if (dinp) TRY(qac_scratch_alloc(&s, &d_dinp, (size_t)N * IC * sizeof(float)));
    if (dw) TRY(up_f(&s, &d_dw, dw, (size_t)OC * IC));
    if (db) TRY(up_f(&s, &d_db, db, OC));
    TRY(qac_scratch_alloc(&s, (void **)&partial, qac_kt_colsum_floats(N, OC, 1) * sizeof(float)));
    // dinp accumulates in fp32, as the trainer's residual gradients do
    TRY(qac_kt_linear_bwd(h, d_dinp, QAC_PREC_FP32, 0.0f, d_dw, d_db, d_dout, d_inp, d_w, partial, N, IC, OC, prec,
                          0));
    if (dinp) TRY(down_f(dinp, (const float *)d_dinp, (size_t)N * IC));
    if (dw) TRY(down_f(dw, d_dw, (size_t)OC * IC));
    if (db) TRY(down_f(db, d_db, OC));
done:
    return finish(&s, h, st, "matmul backward");
}

extern "C" qac_status qac_cuda_residual_layernorm_train(float *res, float *out, float *out_act, float *mean,
                                                        float *rstd, float *dres, float *dproj, float *dw, float *db,
                                                        float *dbias, const float *proj, const float *bias,
                                                        const float *resid, const float *w, const float *b,
                                                        const float *dout, const float *dadd, float p, uint64_t key,
                                                        int layer, int site, int B, int T, int C, float eps,
                                                        qac_precision prec) {
    qac_status st = start(prec);
    if (st != QAC_OK) return st;
    qac_scratch s = {{0}, 0};
    const size_t n = (size_t)B * T * C, N = (size_t)B * T, es = qac_prec_size(prec);
    void *d_proj, *d_act = NULL, *d_dproj;
    float *d_bias, *d_resid, *d_w, *d_b, *d_res, *d_out, *d_mean, *d_rstd, *d_dout, *d_dadd = NULL, *d_dres;
    float *d_dw, *d_db, *d_dbias, *partial;
    const qac_kt_drop dr = drop_of(p, key);
    TRY(qac_scratch_up_act(&s, &d_proj, proj, n, prec));
    TRY(up_f(&s, &d_bias, bias, C));
    TRY(up_f(&s, &d_resid, resid, n));
    TRY(up_f(&s, &d_w, w, C));
    TRY(up_f(&s, &d_b, b, C));
    TRY(up_f(&s, &d_dout, dout, n));
    if (dadd) TRY(up_f(&s, &d_dadd, dadd, n));
    TRY(up_f(&s, &d_dw, dw, C));
    TRY(up_f(&s, &d_db, db, C));
    TRY(up_f(&s, &d_dbias, dbias, C));
    TRY(qac_scratch_alloc(&s, (void **)&d_res, n * sizeof(float)));
    TRY(qac_scratch_alloc(&s, (void **)&d_out, n * sizeof(float)));
    if (prec != QAC_PREC_FP32) TRY(qac_scratch_alloc(&s, &d_act, n * es));
    TRY(qac_scratch_alloc(&s, (void **)&d_mean, N * sizeof(float)));
    TRY(qac_scratch_alloc(&s, (void **)&d_rstd, N * sizeof(float)));
    TRY(qac_scratch_alloc(&s, (void **)&d_dres, n * sizeof(float)));
    TRY(qac_scratch_alloc(&s, &d_dproj, n * es));
    TRY(qac_scratch_alloc(&s, (void **)&partial, qac_kt_colsum_floats((int)N, C, 3) * sizeof(float)));
    TRY_CU(qac_kt_residual_ln_fwd(d_res, d_out, d_act, d_mean, d_rstd, d_proj, d_bias, d_resid, d_w, d_b, dr, layer,
                                  site, B, T, C, eps, prec, 0));
    TRY_CU(qac_kt_residual_ln_bwd(d_dres, d_dproj, d_dw, d_db, d_dbias, d_dout, d_dadd, d_res, d_mean, d_rstd, d_w,
                                  partial, dr, layer, site, B, T, C, prec, 0));
    TRY(down_f(res, d_res, n));
    TRY(down_f(out, d_out, n));
    if (out_act) TRY(d_act ? qac_scratch_down_act(&s, out_act, d_act, n, prec) : down_f(out_act, d_out, n));
    TRY(down_f(mean, d_mean, N));
    TRY(down_f(rstd, d_rstd, N));
    TRY(down_f(dres, d_dres, n));
    TRY(qac_scratch_down_act(&s, dproj, d_dproj, n, prec));
    TRY(down_f(dw, d_dw, C));
    TRY(down_f(db, d_db, C));
    TRY(down_f(dbias, d_dbias, C));
done:
    return finish(&s, NULL, st, "bias + dropout + residual + layernorm");
}

extern "C" qac_status qac_cuda_bias_gelu_fused(float *act, float *dpre, float *dbias, const float *pre,
                                               const float *bias, const float *dout, int N, int I, qac_precision prec) {
    qac_status st = start(prec);
    if (st != QAC_OK) return st;
    qac_scratch s = {{0}, 0};
    const size_t n = (size_t)N * I;
    void *d_pre, *d_act, *d_dout;
    float *d_bias, *d_dbias, *partial;
    TRY(qac_scratch_up_act(&s, &d_pre, pre, n, prec));
    TRY(qac_scratch_up_act(&s, &d_dout, dout, n, prec));
    TRY(up_f(&s, &d_bias, bias, I));
    TRY(up_f(&s, &d_dbias, dbias, I));
    TRY(qac_scratch_alloc(&s, &d_act, n * qac_prec_size(prec)));
    TRY(qac_scratch_alloc(&s, (void **)&partial, qac_kt_colsum_floats(N, I, 1) * sizeof(float)));
    TRY_CU(qac_kt_bias_gelu(d_act, d_pre, d_bias, N, I, prec, 0));
    TRY_CU(qac_kt_bias_gelu_bwd(d_dout, d_dbias, d_dout, d_pre, d_bias, partial, N, I, prec, 0)); // in place
    TRY(qac_scratch_down_act(&s, act, d_act, n, prec));
    TRY(qac_scratch_down_act(&s, dpre, d_dout, n, prec));
    TRY(down_f(dbias, d_dbias, I));
done:
    return finish(&s, NULL, st, "bias + gelu (fused)");
}

extern "C" qac_status qac_cuda_dropout(float *out, const float *inp, const float *resid, float p, uint64_t key,
                                       int layer, int site, int B, int T, int C) {
    qac_status st = start(QAC_PREC_FP32);
    if (st != QAC_OK) return st;
    qac_scratch s = {{0}, 0};
    const size_t n = (size_t)B * T * C;
    float *d_inp, *d_out, *d_res = NULL, *d_zero = NULL;
    TRY(up_f(&s, &d_inp, inp, n));
    TRY(qac_scratch_alloc(&s, (void **)&d_out, n * sizeof(float)));
    if (resid) {
        TRY(up_f(&s, &d_res, resid, n));
        TRY(qac_scratch_alloc(&s, (void **)&d_zero, (size_t)C * sizeof(float)));
        TRY_CU(cudaMemset(d_zero, 0, (size_t)C * sizeof(float)));
        TRY_CU(qac_kt_bias_dropout_residual(d_out, d_inp, d_zero, d_res, drop_of(p, key), layer, site, B, T, C,
                                            QAC_PREC_FP32, 0));
    } else {
        TRY_CU(qac_kt_dropout(d_out, d_inp, drop_of(p, key), layer, site, B, T, C, QAC_PREC_FP32, 0));
    }
    TRY(down_f(out, d_out, n));
done:
    return finish(&s, NULL, st, "dropout");
}

namespace {

// The attention forward's buffers on the device, for both wrappers.
struct att_dev {
    void *qkv, *q, *k, *v, *P, *Pd, *O, *atty;
    float *S;
    int *lens;
};

qac_status att_forward(qac_scratch *s, cublasHandle_t h, att_dev *a, const float *qkv, const int *lens,
                       float p_attn, uint64_t key, int layer, int B, int T, int C, int NH, int causal, int window,
                       qac_precision prec) {
    const size_t N = (size_t)B * T, es = qac_prec_size(prec), nP = (size_t)B * NH * T * T;
    qac_status st;
    if ((st = qac_scratch_up_act(s, &a->qkv, qkv, N * 3 * C, prec)) || (st = qac_scratch_up(s, (void **)&a->lens, lens, B * sizeof(int))) ||
        (st = qac_scratch_alloc(s, &a->q, N * C * es)) || (st = qac_scratch_alloc(s, &a->k, N * C * es)) ||
        (st = qac_scratch_alloc(s, &a->v, N * C * es)) || (st = qac_scratch_alloc(s, &a->P, nP * es)) ||
        (st = qac_scratch_alloc(s, &a->Pd, nP * es)) || (st = qac_scratch_alloc(s, &a->O, N * C * es)) ||
        (st = qac_scratch_alloc(s, &a->atty, N * C * es)) || (st = qac_scratch_alloc(s, (void **)&a->S, nP * sizeof(float))))
        return st;
    return qac_kt_attention_fwd(h, a->atty, a->q, a->k, a->v, a->P, a->S, a->Pd, a->O, a->qkv, NULL, a->lens,
                                drop_of(p_attn, key), layer, B, T, C, NH, causal, window, prec, 0);
}

} // namespace

static qac_status attention_train(float *out, float *att, const float *qkv, const int *lens, float p_attn,
                                  uint64_t key, int layer, int B, int T, int C, int NH, int causal, int window,
                                  qac_precision prec) {
    qac_status st = start(prec);
    if (st != QAC_OK) return st;
    if (NH <= 0 || C % NH) return qac_set_error(QAC_ERR_INVALID, "attention: %d heads over %d", NH, C);
    qac_scratch s = {{0}, 0};
    cublasHandle_t h = NULL;
    att_dev a;
    memset(&a, 0, sizeof a);
    TRY(make_blas(&h, prec));
    TRY(att_forward(&s, h, &a, qkv, lens, p_attn, key, layer, B, T, C, NH, causal, window, prec));
    TRY(qac_scratch_down_act(&s, out, a.atty, (size_t)B * T * C, prec));
    if (att) TRY(qac_scratch_down_act(&s, att, a.P, (size_t)B * NH * T * T, prec));
done:
    return finish(&s, h, st, "attention (training forward)");
}

static qac_status attention_backward(float *dqkv, const float *datty, const float *qkv, const int *lens,
                                     float p_attn, uint64_t key, int layer, int B, int T, int C, int NH, int causal,
                                     int window, qac_precision prec) {
    qac_status st = start(prec);
    if (st != QAC_OK) return st;
    if (NH <= 0 || C % NH) return qac_set_error(QAC_ERR_INVALID, "attention: %d heads over %d", NH, C);
    qac_scratch s = {{0}, 0};
    cublasHandle_t h = NULL;
    att_dev a;
    memset(&a, 0, sizeof a);
    const size_t N = (size_t)B * T, es = qac_prec_size(prec), nP = (size_t)B * NH * T * T;
    void *d_datty, *d_dqkv, *dS, *dO, *dq, *dk, *dv;
    TRY(make_blas(&h, prec));
    TRY(att_forward(&s, h, &a, qkv, lens, p_attn, key, layer, B, T, C, NH, causal, window, prec));
    TRY(qac_scratch_up_act(&s, &d_datty, datty, N * C, prec));
    TRY(qac_scratch_alloc(&s, &d_dqkv, N * 3 * C * es));
    TRY(qac_scratch_alloc(&s, &dS, nP * es));
    TRY(qac_scratch_alloc(&s, &dO, N * C * es));
    TRY(qac_scratch_alloc(&s, &dq, N * C * es));
    TRY(qac_scratch_alloc(&s, &dk, N * C * es));
    TRY(qac_scratch_alloc(&s, &dv, N * C * es));
    // a.S is free after the forward: it holds dP
    TRY(qac_kt_attention_bwd(h, d_dqkv, d_datty, a.q, a.k, a.v, a.P, a.S, a.Pd, dS, dO, dq, dk, dv, a.lens,
                             drop_of(p_attn, key), layer, B, T, C, NH, prec, 0));
    TRY(qac_scratch_down_act(&s, dqkv, d_dqkv, N * 3 * C, prec));
done:
    return finish(&s, h, st, "attention backward");
}

extern "C" qac_status qac_cuda_attention_train(float *out, float *att, const float *qkv, const int *lens,
                                               float p_attn, uint64_t key, int layer, int B, int T, int C, int NH,
                                               qac_precision prec) {
    return attention_train(out, att, qkv, lens, p_attn, key, layer, B, T, C, NH, 0, 0, prec);
}

extern "C" qac_status qac_cuda_attention_backward(float *dqkv, const float *datty, const float *qkv,
                                                  const int *lens, float p_attn, uint64_t key, int layer, int B,
                                                  int T, int C, int NH, qac_precision prec) {
    return attention_backward(dqkv, datty, qkv, lens, p_attn, key, layer, B, T, C, NH, 0, 0, prec);
}

extern "C" qac_status qac_cuda_attention_causal_train(float *out, float *att, const float *qkv, const int *lens,
                                                      int window, float p_attn, uint64_t key, int layer, int B,
                                                      int T, int C, int NH, qac_precision prec) {
    return attention_train(out, att, qkv, lens, p_attn, key, layer, B, T, C, NH, 1, window, prec);
}

extern "C" qac_status qac_cuda_attention_causal_backward(float *dqkv, const float *datty, const float *qkv,
                                                         const int *lens, int window, float p_attn, uint64_t key,
                                                         int layer, int B, int T, int C, int NH,
                                                         qac_precision prec) {
    return attention_backward(dqkv, datty, qkv, lens, p_attn, key, layer, B, T, C, NH, 1, window, prec);
}

extern "C" qac_status qac_cuda_qgen_block(float *out, float *dx, float *dparams, const float *params,
                                          const float *x, const float *dout, const int *lens, const qac_qgen_config *q,
                                          float p_hidden, float p_attn, uint64_t key, int B, int T,
                                          qac_precision prec) {
    qac_status st = start(prec);
    if (st != QAC_OK) return st;
    if (q->heads <= 0 || q->hidden % q->heads || q->layers < 1)
        return qac_set_error(QAC_ERR_INVALID, "qgen block: %d heads over %d, %d layers", q->heads, q->hidden,
                             q->layers);
    qac_scratch s = {{0}, 0};
    qac_kl_ctx t;
    memset(&t, 0, sizeof t);
    qac_kl_work wk;
    memset(&wk, 0, sizeof wk);
    qac_kl_gpt_acts a;
    memset(&a, 0, sizeof a);
    const int C = q->hidden;
    const size_t N = (size_t)B * T, NC = N * C, np = qac_qgen_param_count(q), nP = (size_t)B * q->heads * T * T;
    const qac_kt_drop d0 = drop_of(p_hidden, key);
    qac_qgen_params w, g;
    float *d_grads = NULL, *d_dout = NULL;
    int *d_lens = NULL;
    void *acts = NULL;
    qac_kl_bump sizing = {NULL, 0}, bind = {NULL, 0};
    // the context: the decoder's shapes (the work buffers sized for its MLP)
    t.cfg.hidden_size = C;
    t.cfg.num_heads = q->heads;
    t.cfg.intermediate_size = q->inner;
    t.cfg.layer_norm_eps = q->ln_eps;
    t.prec = prec;
    t.esize = qac_prec_size(prec);
    t.p_hidden = p_hidden;
    t.p_attn = p_attn;
    qac_kl_ctx_attention(&t);
    t.stream = 0;
    TRY(make_blas(&t.blas, prec));
    TRY(up_f(&s, &t.params, params, np));
    if (prec != QAC_PREC_FP32) {
        TRY(qac_scratch_alloc(&s, (void **)&t.params_act, np * sizeof(__nv_bfloat16)));
        TRY_CU(qac_k_from_f32(t.params_act, t.params, np, prec, 0));
    }
    TRY(up_f(&s, &d_grads, dparams, np));
    qac_qgen_bind(&w, q, t.params);
    qac_qgen_bind(&g, q, d_grads);
    qac_kl_gpt_acts_bind(&t, &a, &sizing, B, T, q->layers, q->inner);
    TRY(qac_scratch_alloc(&s, &acts, sizing.off));
    bind.base = (char *)acts;
    qac_kl_gpt_acts_bind(&t, &a, &bind, B, T, q->layers, q->inner);
    TRY(qac_kl_work_ensure(&t, &wk, N, nP));
    TRY(qac_scratch_up(&s, (void **)&d_lens, lens, (size_t)B * sizeof(int)));
    TRY(up_f(&s, &d_dout, dout, NC));
    // hidden[0] = dropout(x) at (0, QAC_DROP_EMB), as qac_qgen_forward
    TRY_CU(cudaMemcpy(a.hidden, x, NC * sizeof(float), cudaMemcpyHostToDevice));
    if (p_hidden > 0) TRY_CU(qac_kt_dropout(a.hidden, a.hidden, d0, 0, QAC_DROP_EMB, B, T, C, QAC_PREC_FP32, 0));
    TRY(qac_kl_gpt_fwd(&t, &a, &wk, &w, q->window, d_lens, key, 0));
    TRY(down_f(out, a.out, NC));
    TRY(qac_kl_gpt_bwd(&t, &a, &wk, &w, &g, q->window, d_lens, d_dout, key, 0));
    if (p_hidden > 0) TRY_CU(qac_kt_dropout(wk.dy, wk.dy, d0, 0, QAC_DROP_EMB, B, T, C, QAC_PREC_FP32, 0));
    TRY(down_f(dx, wk.dy, NC));
    TRY(down_f(dparams, d_grads, np));
done:
    if (st == QAC_OK) st = qac_cuda_check(cudaDeviceSynchronize(), "qgen block");
    cudaFree(wk.mem);
    return finish(&s, t.blas, st, "qgen decoder blocks");
}

extern "C" qac_status qac_cuda_pooling_backward(float *dhidden, const float *dout, const float *hidden,
                                                const int *lens, int B, int T, int C, qac_pooling pooling,
                                                int normalize) {
    qac_status st = start(QAC_PREC_FP32);
    if (st != QAC_OK) return st;
    if (!qac_kt_pool_bwd_supported(C)) return qac_set_error(QAC_ERR_UNSUPPORTED, "pooling backward: C = %d", C);
    qac_scratch s = {{0}, 0};
    float *d_dh, *d_dout, *d_h;
    int *d_lens;
    TRY(up_f(&s, &d_dout, dout, (size_t)B * C));
    TRY(up_f(&s, &d_h, hidden, (size_t)B * T * C));
    TRY(qac_scratch_up(&s, (void **)&d_lens, lens, (size_t)B * sizeof(int)));
    TRY(qac_scratch_alloc(&s, (void **)&d_dh, (size_t)B * T * C * sizeof(float)));
    TRY_CU(qac_kt_pool_bwd(d_dh, d_dout, d_h, d_lens, B, T, C, pooling == QAC_POOL_MEAN, normalize, 0));
    TRY(down_f(dhidden, d_dh, (size_t)B * T * C));
done:
    return finish(&s, NULL, st, "pooling backward");
}

extern "C" qac_status qac_cuda_infonce(double *loss, float *dq, float *dp, const float *q, const float *p, int nq,
                                       int n, int C, float tau, qac_similarity sim) {
    qac_status st = start(QAC_PREC_FP32);
    if (st != QAC_OK) return st;
    qac_scratch s = {{0}, 0};
    cublasHandle_t h = NULL;
    const int np = nq * n;
    float *d_q, *d_p, *d_dq, *d_dp;
    double *d_loss;
    void *work;
    TRY(make_blas(&h, QAC_PREC_FP32));
    TRY(up_f(&s, &d_q, q, (size_t)nq * C));
    TRY(up_f(&s, &d_p, p, (size_t)np * C));
    TRY(qac_scratch_alloc(&s, (void **)&d_dq, (size_t)nq * C * sizeof(float)));
    TRY(qac_scratch_alloc(&s, (void **)&d_dp, (size_t)np * C * sizeof(float)));
    TRY(qac_scratch_alloc(&s, (void **)&d_loss, sizeof(double)));
    TRY(qac_scratch_alloc(&s, &work, qac_kt_infonce_scratch(nq, n, C)));
    TRY(qac_kt_infonce(h, d_loss, d_dq, d_dp, d_q, d_p, nq, n, C, tau, sim, work, 0));
    TRY_CU(cudaMemcpy(loss, d_loss, sizeof(double), cudaMemcpyDeviceToHost));
    if (dq) TRY(down_f(dq, d_dq, (size_t)nq * C));
    if (dp) TRY(down_f(dp, d_dp, (size_t)np * C));
done:
    return finish(&s, h, st, "infonce");
}

extern "C" qac_status qac_cuda_cocondenser_loss(double *loss, float *dx, const float *x, int n2, int C, float tau) {
    qac_status st = start(QAC_PREC_FP32);
    if (st != QAC_OK) return st;
    qac_scratch s = {{0}, 0};
    cublasHandle_t h = NULL;
    float *d_x, *d_dx;
    double *d_loss;
    void *work;
    TRY(make_blas(&h, QAC_PREC_FP32));
    TRY(up_f(&s, &d_x, x, (size_t)n2 * C));
    TRY(qac_scratch_alloc(&s, (void **)&d_dx, (size_t)n2 * C * sizeof(float)));
    TRY(qac_scratch_alloc(&s, (void **)&d_loss, sizeof(double)));
    TRY(qac_scratch_alloc(&s, &work, qac_kt_cocondenser_scratch(n2, C)));
    TRY(qac_kt_cocondenser(h, d_loss, d_dx, d_x, n2, C, tau, work, 0));
    TRY_CU(cudaMemcpy(loss, d_loss, sizeof(double), cudaMemcpyDeviceToHost));
    if (dx) TRY(down_f(dx, d_dx, (size_t)n2 * C));
done:
    return finish(&s, h, st, "cocondenser loss");
}

extern "C" qac_status qac_cuda_mlm_ce(double *loss, float *dlogits, const float *logits, const float *bias,
                                      const int32_t *labels, int M, int V) {
    qac_status st = start(QAC_PREC_FP32);
    if (st != QAC_OK) return st;
    qac_scratch s = {{0}, 0};
    float *d_logits, *d_bias;
    void *d_labels;
    double *d_rows, *d_loss;
    TRY(up_f(&s, &d_logits, logits, (size_t)M * V));
    TRY(up_f(&s, &d_bias, bias, V));
    TRY(qac_scratch_up(&s, &d_labels, labels, (size_t)M * sizeof(int32_t)));
    TRY(qac_scratch_alloc(&s, (void **)&d_rows, (size_t)M * sizeof(double)));
    TRY(qac_scratch_alloc(&s, (void **)&d_loss, sizeof(double)));
    TRY_CU(qac_kt_mlm_ce(d_logits, d_rows, d_bias, (const int32_t *)d_labels, M, V, 1, 0));
    TRY_CU(qac_kt_mean_loss(d_loss, d_rows, M, 0));
    TRY_CU(cudaMemcpy(loss, d_loss, sizeof(double), cudaMemcpyDeviceToHost));
    if (dlogits) TRY(down_f(dlogits, d_logits, (size_t)M * V));
done:
    return finish(&s, NULL, st, "mlm cross-entropy");
}

extern "C" qac_status qac_cuda_clip_adamw(float *p, float *p_bf16, const float *g, float *m, float *v, size_t n,
                                          size_t n_decay, long t, double lr, double beta1, double beta2, double eps,
                                          double wd, double max_norm, double *norm) {
    qac_status st = start(QAC_PREC_FP32);
    if (st != QAC_OK) return st;
    qac_scratch s = {{0}, 0};
    float *d_p, *d_g, *d_m, *d_v, *d_scale;
    void *d_pb = NULL;
    double *partial, *d_norm;
    qac_kt_tensors tens;
    memset(&tens, 0, sizeof tens);
    tens.n = n_decay < n ? 2 : 1;
    tens.bounds[0] = 0;
    tens.bounds[1] = n_decay < n ? n_decay : n;
    tens.bounds[2] = n;
    tens.decays[0] = 1;
    tens.decays[1] = 0;
    TRY(up_f(&s, &d_p, p, n));
    TRY(up_f(&s, &d_g, g, n));
    TRY(up_f(&s, &d_m, m, n));
    TRY(up_f(&s, &d_v, v, n));
    TRY(qac_scratch_alloc(&s, (void **)&d_scale, sizeof(float)));
    TRY(qac_scratch_alloc(&s, (void **)&partial, QAC_KT_NORM_BLOCKS * sizeof(double)));
    TRY(qac_scratch_alloc(&s, (void **)&d_norm, sizeof(double)));
    if (p_bf16) TRY(qac_scratch_alloc(&s, &d_pb, n * 2));
    TRY_CU(qac_kt_clip_adamw(d_p, d_pb, d_g, d_m, d_v, partial, d_norm, d_scale, &tens, t, lr, beta1, beta2, eps, wd,
                             max_norm, 0));
    TRY(down_f(p, d_p, n));
    TRY(down_f(m, d_m, n));
    TRY(down_f(v, d_v, n));
    TRY_CU(cudaMemcpy(norm, d_norm, sizeof(double), cudaMemcpyDeviceToHost));
    if (p_bf16) TRY(qac_scratch_down_act(&s, p_bf16, d_pb, n, QAC_PREC_BF16));
done:
    return finish(&s, NULL, st, "clip + adamw");
}
