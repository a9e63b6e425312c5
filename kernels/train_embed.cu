// Training kernels, embeddings: the forward gather (word + position + token
// type, positions the row's index in its sequence or given per row: RoBERTa
// and XLM-R offset them past the padding index) and the backward (learned
// positions summed over the sequences in order; the word, token-type and
// offset-position rows gathered from plans built on the host, no atomics).
// Contracts: train_kernels.cuh; CPU twins: model/layers.c and
// model/family_layers.c (qac_embeddings_forward_at, qac_embeddings_backward_at).
//
// The kernels alone compile for the CPU (QAC_FA_EMULATE):
// tests/gpu/test_embed_emulated.cpp runs them there against the twins.
#include "train_common.cuh"

namespace {

// emb[r] = word[ids[r]] + pos[pos_ids ? pos_ids[r] : r % T] + type[types ? types[r] : 0];
// a NULL pos or type table adds nothing (the rotary families, ModernBERT:
// the word vector alone), as the twin's branches.
__global__ void embed_fwd_kernel(float *emb, const int32_t *ids, const int32_t *types, const int32_t *pos_ids,
                                 const float *word, const float *pos, const float *type, int T_, int C) {
    const size_t r = blockIdx.x;
    const float *w = word + (size_t)ids[r] * C;
    const float *p = pos ? pos + (size_t)(pos_ids ? pos_ids[r] : (int32_t)(r % T_)) * C : nullptr;
    const float *t = type ? type + (size_t)(types ? types[r] : 0) * C : nullptr;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        emb[r * C + c] = p && t ? w[c] + p[c] + t[c] : p || t ? w[c] + (p ? p : t)[c] : w[c];
}

// one thread per (t, c): the sequences' rows in order, as the CPU adds them
__global__ void pos_bwd_kernel(float *dpos, const float *dout, int B, int T_, int C) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T_ * C) return;
    float acc = dpos[i];
    for (int b = 0; b < B; b++) acc += dout[(size_t)b * T_ * C + i];
    dpos[i] = acc;
}

// partial[seg, c] = sum of the segment's rows (in order)
__global__ void scatter_partial_kernel(float *partial, const float *dout, const int32_t *rows,
                                       const int32_t *seg_begin, int C) {
    const int seg = blockIdx.y;
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.f;
    for (int i = seg_begin[seg]; i < seg_begin[seg + 1]; i++) acc += dout[(size_t)rows[i] * C + c];
    partial[(size_t)seg * C + c] = acc;
}

// dst[key, c] += the key's segments in order
__global__ void scatter_finish_kernel(float *dst, const float *partial, const int32_t *key_seg,
                                      const int32_t *keys, int C) {
    const int k = blockIdx.y;
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.f;
    for (int s = key_seg[k]; s < key_seg[k + 1]; s++) acc += partial[(size_t)s * C + c];
    dst[(size_t)keys[k] * C + c] += acc;
}

} // namespace

#ifndef QAC_FA_EMULATE
cudaError_t qac_kt_embed_fwd(float *emb, const int32_t *ids, const int32_t *type_ids, const int32_t *pos_ids,
                             const float *word, const float *pos, const float *type, int N, int T, int C,
                             cudaStream_t s) {
    if (N <= 0) return cudaSuccess;
    embed_fwd_kernel<<<N, 256, 0, s>>>(emb, ids, type_ids, pos_ids, word, pos, type, T, C);
    return cudaGetLastError();
}

cudaError_t qac_kt_pos_bwd(float *dpos, const float *dout, int B, int T, int C, cudaStream_t s) {
    if (B <= 0) return cudaSuccess;
    pos_bwd_kernel<<<qac_div_up((size_t)T * C, 256), 256, 0, s>>>(dpos, dout, B, T, C);
    return cudaGetLastError();
}

cudaError_t qac_kt_scatter_add(float *dst, const float *dout, qac_scatter_plan plan, const int32_t *d_plan,
                               float *partial, int C, cudaStream_t s) {
    if (plan.n_rows <= 0 || plan.n_keys <= 0) return cudaSuccess; // no row kept: nothing to add
    const size_t N = (size_t)plan.n_rows;
    const int32_t *rows = d_plan, *seg_begin = d_plan + N, *key_seg = d_plan + 2 * N + 1, *keys = d_plan + 3 * N + 2;
    if (plan.n_segs > 65535 * 64 || plan.n_keys > 65535) return cudaErrorInvalidValue;
    dim3 g1(qac_div_up(C, COL_THREADS), 1);
    // gridDim.y is limited to 65535: launch the segments in slices
    for (int s0 = 0; s0 < plan.n_segs; s0 += 65535) {
        const int ns = plan.n_segs - s0 < 65535 ? plan.n_segs - s0 : 65535;
        g1.y = ns;
        scatter_partial_kernel<<<g1, COL_THREADS, 0, s>>>(partial + (size_t)s0 * C, dout, rows, seg_begin + s0, C);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    dim3 g2(qac_div_up(C, COL_THREADS), plan.n_keys);
    scatter_finish_kernel<<<g2, COL_THREADS, 0, s>>>(dst, partial, key_seg, keys, C);
    return cudaGetLastError();
}
#endif
