// Internal to kernels/: the device helpers around cuDNN's attention
// (cudnn_attention.cu): the QKV bias added in place, the ragged offsets and
// lengths cuDNN reads, and the check of cuDNN's output against qac's. Kept
// apart so that tests/gpu/test_cudnn_kernels_emulated.cpp runs this source
// on the CPU against their definitions written plainly.
#ifndef QAC_CUDNN_ATT_KERNELS_CUH
#define QAC_CUDNN_ATT_KERNELS_CUH

#include "cuda_common.cuh"

namespace qac_cudnn_k {

// qkv [N, 3C] += bias in place, rounded: the E(E(x) + bias) qac's kernels
// form on load. Blocks of 256 columns (x) over rows strided by gridDim.y.
template <typename E> __global__ void add_bias_kernel(E *qkv, const float *bias, int N, int C3) {
    const int c = blockIdx.x * 256 + threadIdx.x;
    if (c >= C3) return;
    const float b = bias[c];
    for (int r = blockIdx.y; r < N; r += gridDim.y) {
        E *p = qkv + (size_t)r * C3 + c;
        *p = qac_from_float<E>(qac_to_float<E>(*p) + b);
    }
}

// idx (P ints a part, P = qac_cudnn_idx_stride(B)): [0, B) the lengths,
// [P, P + B] the element offsets of each sequence's first QKV row (3C
// elements a row), [2P, 2P + B] those of its first output row (C a row).
__global__ void ragged_kernel(int *idx, const int *offs, int B, int P, int C) {
    const int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b > B) return;
    if (b < B) idx[b] = offs[b + 1] - offs[b];
    idx[P + b] = offs[b] * 3 * C;
    idx[2 * P + b] = offs[b] * C;
}

// out[0] = max |a - b|, out[1] = max |a| (as their float bits: non-negative
// floats order as their bits), out[2] += the NaNs seen, over n values;
// out zeroed by the caller.
template <typename E> __global__ void compare_kernel(unsigned *out, const E *a, const E *b, size_t n) {
    unsigned d = 0, m = 0, nan = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float x = qac_to_float<E>(a[i]), y = qac_to_float<E>(b[i]);
        if (x != x || y != y) {
            nan++;
            continue;
        }
        d = max(d, __float_as_uint(fabsf(x - y)));
        m = max(m, __float_as_uint(fabsf(x)));
    }
    atomicMax(out, d);
    atomicMax(out + 1, m);
    if (nan) atomicAdd(out + 2, nan);
}

} // namespace qac_cudnn_k

#endif
