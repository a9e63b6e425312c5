// Training kernels, the layers ModernBERT adds: the rotary embeddings'
// backward (dq and dk turned back by the transpose of each row's rotation,
// from the global or the local layers' table) and GeGLU's backward (the
// input half through GELU's derivative, the gate half by GELU of the
// input). Their forwards are the encoder's (kernels/family_kernels.cu:
// qac_k_rope, qac_k_geglu). Contracts: train_kernels.cuh; CPU twins:
// model/family_layers.c (qac_rope_backward, qac_geglu_backward).
//
// Products and sums are rounded one by one (no fused multiply-add), as the
// twins compute them, so the rotation's backward agrees bit for bit.
//
// The kernels alone compile for the CPU (QAC_FA_EMULATE):
// tests/gpu/test_train_family_emulated.cpp runs them there against the twins.
#include "train_common.cuh"

namespace {

// One thread per (row, pair), grid-stride: pairs [0, C/2) of the Q part,
// [C/2, C) of the K part (pair i of head h: elements h hs + i and
// h hs + i + hs/2); the V part is left as it is. dx = R^T dy:
// dx1 = dy1 cos + dy2 sin, dx2 = dy2 cos - dy1 sin.
template <typename E>
__global__ void rope_bwd_kernel(E *dqkv, const int32_t *pos, const float *cs, int N, int C, int hs) {
    const size_t n = (size_t)N * C;
    const int h2 = hs / 2, half = C / 2;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += (size_t)gridDim.x * blockDim.x) {
        const size_t r = idx / C;
        const int p = (int)(idx % C);
        const int part = p / half, pp = p % half, h = pp / h2, i = pp % h2;
        E *row = dqkv + r * 3 * C;
        const int c1 = part * C + h * hs + i, c2 = c1 + h2;
        const float y1 = qac_to_float<E>(row[c1]), y2 = qac_to_float<E>(row[c2]);
        const float *co = cs + (size_t)pos[r] * hs, *si = co + h2;
        row[c1] = qac_from_float<E>(__fadd_rn(__fmul_rn(y1, co[i]), __fmul_rn(y2, si[i])));
        row[c2] = qac_from_float<E>(__fsub_rn(__fmul_rn(y2, co[i]), __fmul_rn(y1, si[i])));
    }
}

// dpre [N,2I] from dact [N,I] and pre [N,2I] (input half, then gate half)
// plus bias [2I] (NULL: none, or pre holds it; the encoder's forward adds it
// on the fly): d input = (dact gate) GELU'(input), d gate = GELU(input)
// dact. One thread per (row, i), grid-stride; a thread reads its two
// elements of pre before writing the same two of dpre, so dpre may alias pre.
template <typename E>
__global__ void geglu_bwd_kernel(E *dpre, const E *dact, const E *pre, const float *bias, int N, int I) {
    const size_t n = (size_t)N * I;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += (size_t)gridDim.x * blockDim.x) {
        const size_t r = idx / I;
        const int i = (int)(idx % I);
        float a = qac_to_float<E>(pre[r * 2 * I + i]), g = qac_to_float<E>(pre[r * 2 * I + I + i]);
        if (bias) {
            a = __fadd_rn(a, bias[i]);
            g = __fadd_rn(g, bias[I + i]);
        }
        const float d = qac_to_float<E>(dact[idx]);
        dpre[r * 2 * I + i] = qac_from_float<E>(__fmul_rn(__fmul_rn(d, g), gelu_grad(a)));
        dpre[r * 2 * I + I + i] = qac_from_float<E>(__fmul_rn(gelu_erf(a), d));
    }
}

} // namespace

#ifndef QAC_FA_EMULATE
cudaError_t qac_kt_rope_bwd(void *dqkv, const int32_t *pos, const float *cs, int N, int C, int NH, qac_precision prec,
                            cudaStream_t s) {
    if (N <= 0) return cudaSuccess;
    if (NH <= 0 || C % NH || (C / NH) % 2) return cudaErrorInvalidValue;
    const unsigned grid = grid_1d((size_t)N * C, 256);
    KT_DISPATCH(prec, rope_bwd_kernel<E><<<grid, 256, 0, s>>>((E *)dqkv, pos, cs, N, C, C / NH));
    return cudaGetLastError();
}

cudaError_t qac_kt_geglu_bwd(void *dpre, const void *dact, const void *pre, const float *bias, int N, int I,
                             qac_precision prec, cudaStream_t s) {
    if (N <= 0) return cudaSuccess;
    const unsigned grid = grid_1d((size_t)N * I, 256);
    KT_DISPATCH(prec, geglu_bwd_kernel<E><<<grid, 256, 0, s>>>((E *)dpre, (const E *)dact, (const E *)pre, bias, N, I));
    return cudaGetLastError();
}
#endif
