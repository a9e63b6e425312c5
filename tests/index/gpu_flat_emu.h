// Runs kernels/gpu_flat.cu, kernels and host code, on the CPU: one OS
// thread per CUDA thread, the blocks of a launch one after another, every
// call in stream order at once. __syncthreads and the warp instructions
// (ballot, shuffles, mma.sync m16n8k16) are emulated as the PTX manual
// defines their lanes' operands and results; the CUDA runtime and cuBLAS
// entry points the search calls are host functions over host memory (the
// GEMM in fp32 from the fp16 operands). Every name is renamed to emu_...,
// so nothing here meets the real libraries or libqac's own search. It
// checks what a machine without a GPU can: the kernels' index arithmetic,
// fragment layouts, selection passes, synchronisation points and the host
// code's sequence of launches and copies. Include it before the source.
#ifndef QAC_GPU_FLAT_EMU_H
#define QAC_GPU_FLAT_EMU_H

#define QAC_TOPK_EMULATE 1

// the runtime and cuBLAS entry points gpu_flat.cu calls
#define cudaGetDevice emu_cudaGetDevice
#define cudaSetDevice emu_cudaSetDevice
#define cudaGetDeviceProperties emu_cudaGetDeviceProperties
#define cudaMalloc emu_cudaMalloc
#define cudaFree emu_cudaFree
#define cudaMemcpyAsync emu_cudaMemcpyAsync
#define cudaMemsetAsync emu_cudaMemsetAsync
#define cudaStreamCreateWithFlags emu_cudaStreamCreateWithFlags
#define cudaStreamDestroy emu_cudaStreamDestroy
#define cudaStreamSynchronize emu_cudaStreamSynchronize
#define cudaStreamWaitEvent emu_cudaStreamWaitEvent
#define cudaEventCreate emu_cudaEventCreate
#define cudaEventCreateWithFlags emu_cudaEventCreateWithFlags
#define cudaEventDestroy emu_cudaEventDestroy
#define cudaEventRecord emu_cudaEventRecord
#define cudaEventSynchronize emu_cudaEventSynchronize
#define cudaEventElapsedTime emu_cudaEventElapsedTime
#define cudaGetLastError emu_cudaGetLastError
#define cudaGetErrorString emu_cudaGetErrorString
#define cudaGetErrorName emu_cudaGetErrorName
#define cudaFuncSetAttribute emu_cudaFuncSetAttribute
#define cudaFuncGetAttributes emu_cudaFuncGetAttributes
#define cublasCreate_v2 emu_cublasCreate
#define cublasDestroy_v2 emu_cublasDestroy
#define cublasSetStream_v2 emu_cublasSetStream
#define cublasSetWorkspace_v2 emu_cublasSetWorkspace
#define cublasGemmEx emu_cublasGemmEx
#define cublasGetStatusString emu_cublasGetStatusString
// qac's own CUDA entry points and the search's public functions
#define qac_cuda_available emu_qac_cuda_available
#define qac_k_from_f32 emu_qac_k_from_f32
#define qac_gpu_flat_create emu_qac_gpu_flat_create
#define qac_gpu_flat_add emu_qac_gpu_flat_add
#define qac_gpu_flat_set_tie_order emu_qac_gpu_flat_set_tie_order
#define qac_gpu_flat_set_tuning emu_qac_gpu_flat_set_tuning
#define qac_gpu_flat_get_tuning emu_qac_gpu_flat_get_tuning
#define qac_gpu_flat_search emu_qac_gpu_flat_search
#define qac_gpu_flat_count emu_qac_gpu_flat_count
#define qac_gpu_flat_last_stats emu_qac_gpu_flat_last_stats
#define qac_gpu_flat_read_floor emu_qac_gpu_flat_read_floor
#define qac_gpu_flat_free emu_qac_gpu_flat_free

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __forceinline__ inline
#define __launch_bounds__(...)

#include "qac_encoder.h"

// ---- threads, blocks, warps ----

inline thread_local uint3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

struct emu_warp {
    std::barrier<> bar{32};
    uint64_t val[32][8];
};

struct emu_block {
    std::unique_ptr<std::barrier<>> bar;
    std::vector<std::unique_ptr<emu_warp>> warps;
};

inline thread_local emu_block *emu_cur;
alignas(16) inline unsigned char qac_emu_dyn_smem[1 << 18];

inline emu_warp &emu_my_warp() { return *emu_cur->warps[threadIdx.x / 32]; }
inline unsigned emu_lane() { return threadIdx.x & 31; }

inline void __syncthreads() { emu_cur->bar->arrive_and_wait(); }

// Every lane hands over v; f(slots) gives each its result.
template <typename T, typename F> inline T emu_exchange(T v, F f) {
    emu_warp &w = emu_my_warp();
    const unsigned l = emu_lane();
    static_assert(sizeof(T) <= 8, "one slot");
    w.val[l][0] = 0;
    memcpy(&w.val[l][0], &v, sizeof v);
    w.bar.arrive_and_wait();
    T r = f(w, l);
    w.bar.arrive_and_wait(); // nobody overwrites before every lane has read
    return r;
}

template <typename T> inline T emu_slot(const emu_warp &w, unsigned lane) {
    T r;
    memcpy(&r, &w.val[lane][0], sizeof r);
    return r;
}

inline unsigned __ballot_sync(unsigned, int pred) {
    return emu_exchange((uint32_t)(pred != 0), [](emu_warp &w, unsigned) {
        unsigned m = 0;
        for (unsigned i = 0; i < 32; i++)
            if (emu_slot<uint32_t>(w, i)) m |= 1u << i;
        return m;
    });
}
template <typename T> inline T __shfl_sync(unsigned, T v, int src) {
    return emu_exchange(v, [src](emu_warp &w, unsigned) { return emu_slot<T>(w, (unsigned)src & 31); });
}
template <typename T> inline T __shfl_xor_sync(unsigned, T v, int mask) {
    return emu_exchange(v, [mask](emu_warp &w, unsigned l) { return emu_slot<T>(w, l ^ (unsigned)mask); });
}
template <typename T> inline T __shfl_up_sync(unsigned, T v, unsigned d) {
    return emu_exchange(v, [d](emu_warp &w, unsigned l) { return emu_slot<T>(w, l >= d ? l - d : l); });
}
inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }

template <typename T> inline T __ldcs(const T *p) { return *p; }
template <typename T> inline T __ldg(const T *p) { return *p; }

inline int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicAdd(unsigned *p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned long long atomicAnd(unsigned long long *p, unsigned long long v) {
    return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST);
}
inline unsigned long long atomicOr(unsigned long long *p, unsigned long long v) {
    return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST);
}
inline unsigned long long atomicMin(unsigned long long *p, unsigned long long v) {
    unsigned long long old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (v < old && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
    return old;
}

inline float emu_h2f(uint32_t bits16) {
    __half h;
    const uint16_t b = (uint16_t)bits16;
    memcpy((void *)&h, &b, 2);
    return __half2float(h);
}

// mma.m16n8k16.row.col f32 += f16 x f16: lane 4g + t holds a0 = A[g][2t..],
// a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]; b0 = B[2t..][g],
// b1 = B[2t+8..][g]; d0, d1 = D[g][2t, 2t+1], d2, d3 = D[g+8][2t, 2t+1]
// (PTX ISA, "Matrix Fragments for mma.m16n8k16"). The products are summed
// in k order in fp32.
inline void qac_emu_mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                             uint32_t b1) {
    emu_warp &w = emu_my_warp();
    const unsigned l = emu_lane();
    const uint32_t regs[6] = {a0, a1, a2, a3, b0, b1};
    for (int i = 0; i < 6; i++) w.val[l][i] = regs[i];
    w.bar.arrive_and_wait();
    auto A = [&](int row, int k) {
        const int lane = 4 * (row % 8) + (k % 8) / 2, reg = (row >= 8) + 2 * (k >= 8);
        return emu_h2f((uint32_t)(w.val[lane][reg] >> (16 * (k % 2))));
    };
    auto B = [&](int k, int n) {
        const int lane = 4 * n + (k % 8) / 2, reg = 4 + (k >= 8);
        return emu_h2f((uint32_t)(w.val[lane][reg] >> (16 * (k % 2))));
    };
    const int g = (int)l / 4, t = (int)l % 4;
    float out[4];
    for (int e = 0; e < 4; e++) {
        const int row = g + 8 * (e >= 2), col = 2 * t + (e & 1);
        float s = d[e];
        for (int k = 0; k < 16; k++) s += A(row, k) * B(k, col);
        out[e] = s;
    }
    w.bar.arrive_and_wait();
    for (int e = 0; e < 4; e++) d[e] = out[e];
}

inline dim3 emu_dim3(dim3 d) { return d; }
inline dim3 emu_dim3(unsigned x) { return dim3(x, 1, 1); }
inline dim3 emu_dim3(int x) { return dim3((unsigned)x, 1, 1); }

// kernel<<<grid, block, smem>>>(args...) as qac_emu_launcher(kernel, grid, block, smem)(args...)
template <typename... P> struct emu_launch {
    void (*kernel)(P...);
    dim3 grid;
    unsigned threads;
    template <typename... A> void operator()(A... args) const {
        gridDim = grid;
        blockDim = dim3(threads, 1, 1);
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                emu_block blk;
                blk.bar = std::make_unique<std::barrier<>>((std::ptrdiff_t)threads);
                for (unsigned wi = 0; wi < (threads + 31) / 32; wi++) blk.warps.push_back(std::make_unique<emu_warp>());
                std::vector<std::thread> th;
                th.reserve(threads);
                for (unsigned t = 0; t < threads; t++)
                    th.emplace_back([&, t] {
                        threadIdx = make_uint3(t, 0, 0);
                        blockIdx = make_uint3(x, y, 0);
                        emu_cur = &blk;
                        kernel(args...);
                        // a finished thread no longer holds up the others' barriers
                        emu_cur->warps[t / 32]->bar.arrive_and_drop();
                        emu_cur->bar->arrive_and_drop();
                    });
                for (auto &t : th) t.join();
            }
    }
};
template <typename... P, typename G>
emu_launch<P...> qac_emu_launcher(void (*kernel)(P...), G grid, int threads, size_t) {
    return emu_launch<P...>{kernel, emu_dim3(grid), (unsigned)threads};
}

// ---- the runtime and cuBLAS, on host memory ----

struct CUstream_st {
    int id;
};
struct CUevent_st {
    double t;
};
struct cublasContext {
    int id;
};

inline double emu_now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

extern "C" {
cudaError_t emu_cudaGetDevice(int *d) {
    *d = 0;
    return cudaSuccess;
}
cudaError_t emu_cudaSetDevice(int) { return cudaSuccess; }
cudaError_t emu_cudaGetDeviceProperties(cudaDeviceProp *p, int) {
    memset((void *)p, 0, sizeof *p);
    p->multiProcessorCount = 3;
    p->sharedMemPerBlockOptin = 227 * 1024;
    p->major = 9;
    return cudaSuccess;
}
cudaError_t emu_cudaMalloc(void **p, size_t n) {
    *p = aligned_alloc(256, (n + 255) / 256 * 256);
    if (*p) memset(*p, 0xa5, n); // garbage, as device memory is
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t emu_cudaFree(void *p) {
    free(p);
    return cudaSuccess;
}
cudaError_t emu_cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind, cudaStream_t) {
    memcpy(dst, src, n);
    return cudaSuccess;
}
cudaError_t emu_cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t) {
    memset(p, v, n);
    return cudaSuccess;
}
cudaError_t emu_cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
    *s = new CUstream_st{1};
    return cudaSuccess;
}
cudaError_t emu_cudaStreamDestroy(cudaStream_t s) {
    delete s;
    return cudaSuccess;
}
cudaError_t emu_cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t emu_cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
cudaError_t emu_cudaEventCreate(cudaEvent_t *e) {
    *e = new CUevent_st{0};
    return cudaSuccess;
}
cudaError_t emu_cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { return emu_cudaEventCreate(e); }
cudaError_t emu_cudaEventDestroy(cudaEvent_t e) {
    delete e;
    return cudaSuccess;
}
cudaError_t emu_cudaEventRecord(cudaEvent_t e, cudaStream_t) {
    e->t = emu_now();
    return cudaSuccess;
}
cudaError_t emu_cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t emu_cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    *ms = (float)((b->t - a->t) * 1e3);
    return cudaSuccess;
}
cudaError_t emu_cudaGetLastError(void) { return cudaSuccess; }
const char *emu_cudaGetErrorString(cudaError_t) { return "emulated error"; }
const char *emu_cudaGetErrorName(cudaError_t) { return "emulated"; }
cudaError_t emu_cudaFuncSetAttribute(const void *, cudaFuncAttribute, int) { return cudaSuccess; }
cudaError_t emu_cudaFuncGetAttributes(cudaFuncAttributes *a, const void *) {
    memset((void *)a, 0, sizeof *a);
    a->maxThreadsPerBlock = 1024;
    return cudaSuccess;
}
cublasStatus_t emu_cublasCreate(cublasHandle_t *h) {
    *h = new cublasContext{1};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t emu_cublasDestroy(cublasHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t emu_cublasSetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t emu_cublasSetWorkspace(cublasHandle_t, void *, size_t) { return CUBLAS_STATUS_SUCCESS; }
const char *emu_cublasGetStatusString(cublasStatus_t) { return "emulated"; }
// The search's one product: C [m, n] (column-major, ldc) = A^T B with A
// [k, m] (lda) and B [k, n] (ldb) fp16, C fp32.
cublasStatus_t emu_cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                       int k, const void *alpha, const void *A, cudaDataType at, int lda, const void *B,
                                       cudaDataType bt, int ldb, const void *beta, void *C, cudaDataType ct, int ldc,
                                       cublasComputeType_t, cublasGemmAlgo_t) {
    if (ta != CUBLAS_OP_T || tb != CUBLAS_OP_N || at != CUDA_R_16F || bt != CUDA_R_16F || ct != CUDA_R_32F ||
        *(const float *)alpha != 1.0f || *(const float *)beta != 0.0f)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    const __half *a = (const __half *)A, *b = (const __half *)B;
    float *c = (float *)C;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float s = 0;
            for (int l = 0; l < k; l++) s += __half2float(a[(size_t)i * lda + l]) * __half2float(b[(size_t)j * ldb + l]);
            c[(size_t)j * ldc + i] = s;
        }
    return CUBLAS_STATUS_SUCCESS;
}
int emu_qac_cuda_available(void) { return 1; }
}

// the runtime's C++ overloads on kernel pointers (cuda_runtime.h has them only for nvcc)
template <typename T> cudaError_t emu_cudaFuncSetAttribute(T *f, cudaFuncAttribute a, int v) {
    return emu_cudaFuncSetAttribute((const void *)f, a, v);
}
template <typename T> cudaError_t emu_cudaFuncGetAttributes(cudaFuncAttributes *a, T *f) {
    return emu_cudaFuncGetAttributes(a, (const void *)f);
}

inline cudaError_t emu_qac_k_from_f32(void *dst, const float *src, size_t n, qac_precision prec, cudaStream_t) {
    if (prec != QAC_PREC_FP16) return cudaErrorInvalidValue;
    __half *d = (__half *)dst;
    for (size_t i = 0; i < n; i++) d[i] = __float2half_rn(src[i]);
    return cudaSuccess;
}

#endif
