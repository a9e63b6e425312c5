// GPU exact inner-product search (kernels/qac_gpu_flat.h).
//
// The corpus lives on the device in fp16. A search scores corpus tiles with
// cuBLAS (fp16 in, fp32 accumulate and out) on one stream while a second
// stream selects: each query keeps a running list of its k best (order-
// preserving uint32 keys of the fp32 scores, and rows). A tile element can
// only enter the list when it beats the list's current k-th key, so after
// the first tiles most tiles are dismissed by a single counting pass. When
// a tile has candidates, they are merged with the list by an exact radix
// select (4 passes of 8 bits, warp-aggregated shared-memory histograms):
// in shared memory when the list plus candidates fit in CAND_CAP, else
// straight from the score tile. Two score buffers let tile i+1's product
// run while tile i is selected. A final kernel sorts each list (bitonic).
//
// Device memory: capacity x dim x 2 bytes for the corpus (8,841,823 x 768:
// 13.6 GB), 2 score tiles of max(64 MiB, nq x 65,536 x 4 bytes) (at most
// 2 x 256 MiB for 1,024 queries), a 64 K-row fp32 staging buffer for adds
// (dim x 256 KiB), the cuBLAS workspace (32 MiB), and lists and queries
// (under 20 MiB for 1,024 queries).
//
// Scores equal exact search over the fp16-rounded corpus and queries, up to
// fp32 summation order; ties at the k-th score are broken arbitrarily.
#include <float.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "bert_kernels.cuh"

extern "C" {
#include "qac_gpu_flat.h"
}

namespace {

constexpr int KMAX = 1024;
constexpr int QMAX = 1024;              // queries per pass
constexpr int SEL_THREADS = 512;
constexpr int CAND_CAP = 4096;          // list + candidates merged in shared memory
constexpr size_t SCORE_BUDGET = 16u << 20; // floats per score tile (64 MiB)
constexpr int MIN_TILE = 65536, MAX_TILE = 1 << 20;
constexpr int STAGE_ROWS = 65536;
constexpr size_t CUBLAS_WORKSPACE = 32u << 20;

__device__ __forceinline__ uint32_t key_of(float f) {
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float float_of(uint32_t k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// Histogram increment aggregated over the lanes of a warp that share a
// bucket. Every lane of the warp must call it.
__device__ __forceinline__ void hist_add(int *hist, int bucket, bool take) {
    const int lane = threadIdx.x & 31;
    const int b = take ? bucket : -1 - lane;
    const unsigned m = __match_any_sync(0xffffffffu, b);
    if (take && lane == __ffs(m) - 1) atomicAdd(&hist[bucket], __popc(m));
}

// Slot in an append-only array for lanes with take, -1 for the others.
// Every lane of the warp must call it.
__device__ __forceinline__ int warp_append(int *counter, bool take) {
    const int lane = threadIdx.x & 31;
    const unsigned bal = __ballot_sync(0xffffffffu, take);
    if (!bal) return -1;
    const int leader = __ffs(bal) - 1;
    int base = 0;
    if (lane == leader) base = atomicAdd(counter, __popc(bal));
    base = __shfl_sync(0xffffffffu, base, leader);
    return take ? base + __popc(bal & ((1u << lane) - 1u)) : -1;
}

struct sel_shared {
    uint32_t key[CAND_CAP];
    int32_t row[CAND_CAP];
    int hist[256];
    int count, eq_count, out_count;
    uint32_t prefix, min_key;
    int remaining;
};

// One radix digit: given the histogram of the elements matching the prefix
// so far, fix the digit of the k-th largest key.
__device__ void radix_step(sel_shared &sh, int shift) {
    if (threadIdx.x == 0) {
        int acc = 0, d = 255;
        for (; d > 0; d--) {
            if (acc + sh.hist[d] >= sh.remaining) break;
            acc += sh.hist[d];
        }
        sh.prefix |= (uint32_t)d << shift;
        sh.remaining -= acc;
    }
    __syncthreads();
}

__device__ void hist_clear(sel_shared &sh) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) sh.hist[i] = 0;
    __syncthreads();
}

// Merge one score tile into each query's running top-k list. One block per
// query. scores: [nq, ld] with tile_n valid columns; row0: corpus row of
// column 0. lists: key/row [nq, k], count [nq], thr [nq] (the k-th key once
// the list is full).
__global__ void __launch_bounds__(SEL_THREADS)
select_tile_kernel(const float *scores, int ld, int tile_n, int row0, uint32_t *lkey, int32_t *lrow,
                   int *lcount, uint32_t *lthr, int k) {
    __shared__ sel_shared sh;
    const int q = blockIdx.x;
    const float *srow = scores + (size_t)q * ld;
    uint32_t *mykey = lkey + (size_t)q * k;
    int32_t *myrow = lrow + (size_t)q * k;
    const int cur = lcount[q];
    const bool full = cur == k;
    const uint32_t thr = full ? lthr[q] : 0u;
    const int bd = blockDim.x;

    if (threadIdx.x == 0) sh.count = 0;
    __syncthreads();
    // Count the tile's candidates (and the top digit's histogram for the
    // large-merge path in the same pass).
    hist_clear(sh);
    for (int base = 0; base < tile_n; base += bd) {
        const int i = base + threadIdx.x;
        const uint32_t key = i < tile_n ? key_of(srow[i]) : 0u;
        const bool take = i < tile_n && (!full || key > thr);
        const unsigned bal = __ballot_sync(0xffffffffu, take);
        if ((threadIdx.x & 31) == 0 && bal) atomicAdd(&sh.count, __popc(bal));
        hist_add(sh.hist, (int)(key >> 24), take);
    }
    __syncthreads();
    const int count = sh.count;
    if (count == 0) return;
    const int total = cur + count;

    if (total <= CAND_CAP) {
        // Small merge: list + candidates into shared memory.
        for (int i = threadIdx.x; i < cur; i += bd) {
            sh.key[i] = mykey[i];
            sh.row[i] = myrow[i];
        }
        if (threadIdx.x == 0) sh.count = cur;
        __syncthreads();
        for (int base = 0; base < tile_n; base += bd) {
            const int i = base + threadIdx.x;
            const uint32_t key = i < tile_n ? key_of(srow[i]) : 0u;
            const bool take = i < tile_n && (!full || key > thr);
            const int pos = warp_append(&sh.count, take);
            if (take) {
                sh.key[pos] = key;
                sh.row[pos] = row0 + i;
            }
        }
        __syncthreads();
        const int M = sh.count;
        if (M <= k) {
            if (threadIdx.x == 0) sh.min_key = 0xffffffffu;
            __syncthreads();
            for (int i = threadIdx.x; i < M; i += bd) {
                mykey[i] = sh.key[i];
                myrow[i] = sh.row[i];
                atomicMin(&sh.min_key, sh.key[i]);
            }
            __syncthreads();
            if (threadIdx.x == 0) {
                lcount[q] = M;
                lthr[q] = M == k ? sh.min_key : 0u;
            }
            return;
        }
        if (threadIdx.x == 0) {
            sh.prefix = 0;
            sh.remaining = k;
        }
        uint32_t mask = 0;
        for (int shift = 24; shift >= 0; shift -= 8) {
            hist_clear(sh);
            const uint32_t prefix = sh.prefix;
            for (int base = 0; base < M; base += bd) {
                const int i = base + threadIdx.x;
                const uint32_t key = i < M ? sh.key[i] : 0u;
                hist_add(sh.hist, (int)((key >> shift) & 255u), i < M && (key & mask) == prefix);
            }
            __syncthreads();
            radix_step(sh, shift);
            mask |= 255u << shift;
        }
        const uint32_t kth = sh.prefix;
        const int need_eq = sh.remaining;
        if (threadIdx.x == 0) {
            sh.eq_count = 0;
            sh.out_count = 0;
        }
        __syncthreads();
        for (int base = 0; base < M; base += bd) {
            const int i = base + threadIdx.x;
            const uint32_t key = i < M ? sh.key[i] : 0u;
            const bool eq = i < M && key == kth;
            const int pe = warp_append(&sh.eq_count, eq);
            const bool take = i < M && (key > kth || (eq && pe < need_eq));
            const int pos = warp_append(&sh.out_count, take);
            if (take) {
                mykey[pos] = key;
                myrow[pos] = sh.row[i];
            }
        }
        if (threadIdx.x == 0) {
            lcount[q] = k;
            lthr[q] = kth;
        }
        return;
    }

    // Large merge (the first tiles, or adversarial corpus orders): radix
    // select over the list and the tile in place; the top digit's histogram
    // over the tile is already there.
    for (int base = 0; base < cur; base += bd) {
        const int i = base + threadIdx.x;
        const uint32_t key = i < cur ? mykey[i] : 0u;
        hist_add(sh.hist, (int)(key >> 24), i < cur);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        sh.prefix = 0;
        sh.remaining = k;
    }
    __syncthreads();
    radix_step(sh, 24);
    uint32_t mask = 0xff000000u;
    for (int shift = 16; shift >= 0; shift -= 8) {
        hist_clear(sh);
        const uint32_t prefix = sh.prefix;
        for (int base = 0; base < cur; base += bd) {
            const int i = base + threadIdx.x;
            const uint32_t key = i < cur ? mykey[i] : 0u;
            hist_add(sh.hist, (int)((key >> shift) & 255u), i < cur && (key & mask) == prefix);
        }
        for (int base = 0; base < tile_n; base += bd) {
            const int i = base + threadIdx.x;
            const uint32_t key = i < tile_n ? key_of(srow[i]) : 0u;
            const bool take = i < tile_n && (!full || key > thr) && (key & mask) == prefix;
            hist_add(sh.hist, (int)((key >> shift) & 255u), take);
        }
        __syncthreads();
        radix_step(sh, shift);
        mask |= 255u << shift;
    }
    const uint32_t kth = sh.prefix;
    const int need_eq = sh.remaining;
    if (threadIdx.x == 0) {
        sh.eq_count = 0;
        sh.out_count = 0;
    }
    __syncthreads();
    // Gather into shared memory first: the old list is still being read.
    for (int base = 0; base < cur; base += bd) {
        const int i = base + threadIdx.x;
        const uint32_t key = i < cur ? mykey[i] : 0u;
        const bool eq = i < cur && key == kth;
        const int pe = warp_append(&sh.eq_count, eq);
        const bool take = i < cur && (key > kth || (eq && pe < need_eq));
        const int pos = warp_append(&sh.out_count, take);
        if (take) {
            sh.key[pos] = key;
            sh.row[pos] = myrow[i];
        }
    }
    for (int base = 0; base < tile_n; base += bd) {
        const int i = base + threadIdx.x;
        const uint32_t key = i < tile_n ? key_of(srow[i]) : 0u;
        const bool eq = i < tile_n && key == kth;
        const int pe = warp_append(&sh.eq_count, eq);
        const bool take = i < tile_n && (key > kth || (eq && pe < need_eq));
        const int pos = warp_append(&sh.out_count, take);
        if (take) {
            sh.key[pos] = key;
            sh.row[pos] = row0 + i;
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < k; i += bd) {
        mykey[i] = sh.key[i];
        myrow[i] = sh.row[i];
    }
    if (threadIdx.x == 0) {
        lcount[q] = k;
        lthr[q] = kth;
    }
}

// Sort each list best first (ties: lower row first) and write the results;
// slots past the list hold -FLT_MAX and row -1. P: power of two >= k.
__global__ void __launch_bounds__(SEL_THREADS)
finalize_kernel(const uint32_t *lkey, const int32_t *lrow, const int *lcount, int k, int P, float *out_scores,
                int64_t *out_rows) {
    __shared__ unsigned long long v[KMAX];
    const int q = blockIdx.x;
    const int cur = lcount[q];
    for (int i = threadIdx.x; i < P; i += blockDim.x)
        v[i] = i < cur ? ((unsigned long long)lkey[(size_t)q * k + i] << 32) |
                             (0xffffffffu - (uint32_t)lrow[(size_t)q * k + i])
                       : 0ull;
    __syncthreads();
    for (int size = 2; size <= P; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < P; i += blockDim.x) {
                const int j = i ^ stride;
                if (j <= i) continue;
                const unsigned long long a = v[i], b = v[j];
                const bool desc = (i & size) == 0;
                if (desc ? a < b : a > b) {
                    v[i] = b;
                    v[j] = a;
                }
            }
            __syncthreads();
        }
    }
    for (int i = threadIdx.x; i < k; i += blockDim.x) {
        const size_t o = (size_t)q * k + i;
        if (i < cur) {
            out_scores[o] = float_of((uint32_t)(v[i] >> 32));
            out_rows[o] = (int64_t)(0xffffffffu - (uint32_t)(v[i] & 0xffffffffu));
        } else {
            out_scores[o] = -FLT_MAX;
            out_rows[o] = -1;
        }
    }
}

int tile_rows(int nq) {
    size_t t = SCORE_BUDGET / (size_t)nq;
    if (t < (size_t)MIN_TILE) t = MIN_TILE;
    if (t > (size_t)MAX_TILE) t = MAX_TILE;
    return (int)(t & ~(size_t)1023);
}

} // namespace

struct qac_gpu_flat {
    pthread_mutex_t lock;
    int dim, device;
    int64_t capacity, n;
    __half *corpus;      // [capacity, dim]
    float *stage;        // [STAGE_ROWS, dim] fp32 staging for adds
    cudaStream_t s_gemm, s_sel;
    cudaEvent_t gemm_done[2], sel_done[2];
    cublasHandle_t blas;
    void *blas_ws;
    float *q32;          // [QMAX, dim]
    __half *q16;         // [QMAX, dim]
    float *scores[2];    // [QMAX? , tile] sized by score_cap floats each
    size_t score_cap;
    uint32_t *lkey;      // [QMAX, KMAX]
    int32_t *lrow;
    int *lcount;         // [QMAX]
    uint32_t *lthr;
    float *out_scores;   // [QMAX, KMAX]
    int64_t *out_rows;
};

namespace {

qac_status flat_init(qac_gpu_flat *g) {
    QAC_CU(cudaGetDevice(&g->device));
    QAC_CU(cudaMalloc((void **)&g->corpus, (size_t)g->capacity * g->dim * sizeof(__half)));
    QAC_CU(cudaMalloc((void **)&g->stage, (size_t)STAGE_ROWS * g->dim * sizeof(float)));
    QAC_CU(cudaStreamCreateWithFlags(&g->s_gemm, cudaStreamNonBlocking));
    QAC_CU(cudaStreamCreateWithFlags(&g->s_sel, cudaStreamNonBlocking));
    for (int i = 0; i < 2; i++) {
        QAC_CU(cudaEventCreateWithFlags(&g->gemm_done[i], cudaEventDisableTiming));
        QAC_CU(cudaEventCreateWithFlags(&g->sel_done[i], cudaEventDisableTiming));
    }
    QAC_CUBLAS(cublasCreate(&g->blas));
    QAC_CUBLAS(cublasSetStream(g->blas, g->s_gemm));
    QAC_CU(cudaMalloc(&g->blas_ws, CUBLAS_WORKSPACE));
    QAC_CUBLAS(cublasSetWorkspace(g->blas, g->blas_ws, CUBLAS_WORKSPACE));
    QAC_CU(cudaMalloc((void **)&g->q32, (size_t)QMAX * g->dim * sizeof(float)));
    QAC_CU(cudaMalloc((void **)&g->q16, (size_t)QMAX * g->dim * sizeof(__half)));
    QAC_CU(cudaMalloc((void **)&g->lkey, (size_t)QMAX * KMAX * sizeof(uint32_t)));
    QAC_CU(cudaMalloc((void **)&g->lrow, (size_t)QMAX * KMAX * sizeof(int32_t)));
    QAC_CU(cudaMalloc((void **)&g->lcount, (size_t)QMAX * sizeof(int)));
    QAC_CU(cudaMalloc((void **)&g->lthr, (size_t)QMAX * sizeof(uint32_t)));
    QAC_CU(cudaMalloc((void **)&g->out_scores, (size_t)QMAX * KMAX * sizeof(float)));
    QAC_CU(cudaMalloc((void **)&g->out_rows, (size_t)QMAX * KMAX * sizeof(int64_t)));
    return QAC_OK;
}

qac_status ensure_scores(qac_gpu_flat *g, size_t floats) {
    if (floats <= g->score_cap) return QAC_OK;
    QAC_CU(cudaStreamSynchronize(g->s_gemm));
    QAC_CU(cudaStreamSynchronize(g->s_sel));
    for (int i = 0; i < 2; i++) {
        cudaFree(g->scores[i]);
        g->scores[i] = NULL;
    }
    g->score_cap = 0;
    for (int i = 0; i < 2; i++) QAC_CU(cudaMalloc((void **)&g->scores[i], floats * sizeof(float)));
    g->score_cap = floats;
    return QAC_OK;
}

// One pass of at most QMAX queries.
qac_status search_pass(qac_gpu_flat *g, const float *queries, int nq, int k, float *scores, int64_t *rows) {
    const int dim = g->dim;
    const int tile = tile_rows(nq);
    qac_status st = ensure_scores(g, (size_t)nq * tile);
    if (st != QAC_OK) return st;
    QAC_CU(cudaMemcpyAsync(g->q32, queries, (size_t)nq * dim * sizeof(float), cudaMemcpyHostToDevice, g->s_gemm));
    QAC_CU(qac_k_from_f32(g->q16, g->q32, (size_t)nq * dim, QAC_PREC_FP16, g->s_gemm));
    QAC_CU(cudaMemsetAsync(g->lcount, 0, (size_t)nq * sizeof(int), g->s_gemm));
    const float one = 1.0f, zero = 0.0f;
    int t = 0;
    for (int64_t start = 0; start < g->n; start += tile, t++) {
        const int b = t & 1;
        const int rows_t = (int)(g->n - start < tile ? g->n - start : tile);
        QAC_CU(cudaStreamWaitEvent(g->s_gemm, g->sel_done[b], 0));
        // Column-major: S^T [rows_t, nq] (ld tile) = X_tile [rows_t, dim] x Q^T [dim, nq].
        QAC_CUBLAS(cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, rows_t, nq, dim, &one,
                                g->corpus + (size_t)start * dim, CUDA_R_16F, dim, g->q16, CUDA_R_16F, dim, &zero,
                                g->scores[b], CUDA_R_32F, tile, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        QAC_CU(cudaEventRecord(g->gemm_done[b], g->s_gemm));
        QAC_CU(cudaStreamWaitEvent(g->s_sel, g->gemm_done[b], 0));
        select_tile_kernel<<<nq, SEL_THREADS, 0, g->s_sel>>>(g->scores[b], tile, rows_t, (int)start, g->lkey,
                                                             g->lrow, g->lcount, g->lthr, k);
        QAC_CU(cudaGetLastError());
        QAC_CU(cudaEventRecord(g->sel_done[b], g->s_sel));
    }
    // The list counts were reset on the product stream.
    QAC_CU(cudaEventRecord(g->gemm_done[0], g->s_gemm));
    QAC_CU(cudaStreamWaitEvent(g->s_sel, g->gemm_done[0], 0));
    int P = 1;
    while (P < k) P <<= 1;
    finalize_kernel<<<nq, SEL_THREADS, 0, g->s_sel>>>(g->lkey, g->lrow, g->lcount, k, P, g->out_scores, g->out_rows);
    QAC_CU(cudaGetLastError());
    QAC_CU(cudaMemcpyAsync(scores, g->out_scores, (size_t)nq * k * sizeof(float), cudaMemcpyDeviceToHost, g->s_sel));
    QAC_CU(cudaMemcpyAsync(rows, g->out_rows, (size_t)nq * k * sizeof(int64_t), cudaMemcpyDeviceToHost, g->s_sel));
    QAC_CU(cudaStreamSynchronize(g->s_sel));
    QAC_CU(cudaStreamSynchronize(g->s_gemm));
    return QAC_OK;
}

} // namespace

extern "C" void qac_gpu_flat_free(qac_gpu_flat *g) {
    if (!g) return;
    if (g->s_gemm) cudaStreamSynchronize(g->s_gemm);
    if (g->s_sel) cudaStreamSynchronize(g->s_sel);
    cudaFree(g->corpus);
    cudaFree(g->stage);
    cudaFree(g->q32);
    cudaFree(g->q16);
    cudaFree(g->scores[0]);
    cudaFree(g->scores[1]);
    cudaFree(g->lkey);
    cudaFree(g->lrow);
    cudaFree(g->lcount);
    cudaFree(g->lthr);
    cudaFree(g->out_scores);
    cudaFree(g->out_rows);
    cudaFree(g->blas_ws);
    if (g->blas) cublasDestroy(g->blas);
    for (int i = 0; i < 2; i++) {
        if (g->gemm_done[i]) cudaEventDestroy(g->gemm_done[i]);
        if (g->sel_done[i]) cudaEventDestroy(g->sel_done[i]);
    }
    if (g->s_gemm) cudaStreamDestroy(g->s_gemm);
    if (g->s_sel) cudaStreamDestroy(g->s_sel);
    cudaGetLastError();
    pthread_mutex_destroy(&g->lock);
    free(g);
}

extern "C" qac_status qac_gpu_flat_create(qac_gpu_flat **out, int dim, int64_t capacity) {
    *out = NULL;
    if (!qac_cuda_available()) return qac_set_error(QAC_ERR_UNSUPPORTED, "GPU flat search: no usable CUDA GPU");
    if (dim < 1 || dim > 65536)
        return qac_set_error(QAC_ERR_INVALID, "GPU flat search: dimension %d out of range [1, 65536]", dim);
    if (capacity < 1 || capacity > INT32_MAX)
        return qac_set_error(QAC_ERR_INVALID, "GPU flat search: capacity %lld out of range [1, %d]",
                             (long long)capacity, INT32_MAX);
    qac_gpu_flat *g = (qac_gpu_flat *)calloc(1, sizeof *g);
    if (!g) return qac_set_error(QAC_ERR_NOMEM, "GPU flat search: out of host memory");
    pthread_mutex_init(&g->lock, NULL);
    g->dim = dim;
    g->capacity = capacity;
    qac_status st = flat_init(g);
    if (st != QAC_OK) {
        qac_gpu_flat_free(g);
        return qac_wrap_error(st, "GPU flat search: %lld x %d fp16 vectors (%.2f GB)", (long long)capacity, dim,
                              (double)capacity * dim * 2 / 1e9);
    }
    *out = g;
    return QAC_OK;
}

extern "C" qac_status qac_gpu_flat_add(qac_gpu_flat *g, const float *vectors, int64_t n) {
    if (n < 0) return qac_set_error(QAC_ERR_INVALID, "GPU flat search: negative count %lld", (long long)n);
    pthread_mutex_lock(&g->lock);
    qac_status st = QAC_OK;
    if (g->n + n > g->capacity) {
        st = qac_set_error(QAC_ERR_INVALID, "GPU flat search: adding %lld vectors to %lld exceeds capacity %lld",
                           (long long)n, (long long)g->n, (long long)g->capacity);
        goto done;
    }
    QAC_CU_GOTO(st, cudaSetDevice(g->device), done);
    for (int64_t i = 0; i < n; i += STAGE_ROWS) {
        const int64_t m = n - i < STAGE_ROWS ? n - i : STAGE_ROWS;
        const size_t elems = (size_t)m * g->dim;
        QAC_CU_GOTO(st, cudaMemcpyAsync(g->stage, vectors + (size_t)i * g->dim, elems * sizeof(float),
                                        cudaMemcpyHostToDevice, g->s_gemm), done);
        QAC_CU_GOTO(st, qac_k_from_f32(g->corpus + (size_t)(g->n + i) * g->dim, g->stage, elems, QAC_PREC_FP16,
                                       g->s_gemm), done);
    }
    QAC_CU_GOTO(st, cudaStreamSynchronize(g->s_gemm), done);
    g->n += n;
done:
    pthread_mutex_unlock(&g->lock);
    return st == QAC_OK ? st : qac_wrap_error(st, "GPU flat search: add");
}

extern "C" qac_status qac_gpu_flat_search(qac_gpu_flat *g, const float *queries, int nq, int k, float *scores,
                                          int64_t *rows) {
    if (nq < 0) return qac_set_error(QAC_ERR_INVALID, "GPU flat search: negative query count %d", nq);
    if (k < 1 || k > KMAX) return qac_set_error(QAC_ERR_INVALID, "GPU flat search: k %d out of range [1, %d]", k, KMAX);
    if (nq == 0) return QAC_OK;
    pthread_mutex_lock(&g->lock);
    qac_status st = QAC_OK;
    if (g->n == 0) {
        for (size_t i = 0; i < (size_t)nq * k; i++) {
            scores[i] = -FLT_MAX;
            rows[i] = -1;
        }
        goto done;
    }
    QAC_CU_GOTO(st, cudaSetDevice(g->device), done);
    for (int q0 = 0; q0 < nq; q0 += QMAX) {
        const int m = nq - q0 < QMAX ? nq - q0 : QMAX;
        st = search_pass(g, queries + (size_t)q0 * g->dim, m, k, scores + (size_t)q0 * k, rows + (size_t)q0 * k);
        if (st != QAC_OK) break;
    }
done:
    pthread_mutex_unlock(&g->lock);
    return st == QAC_OK ? st : qac_wrap_error(st, "GPU flat search");
}

extern "C" int64_t qac_gpu_flat_count(const qac_gpu_flat *g) { return g ? g->n : 0; }
