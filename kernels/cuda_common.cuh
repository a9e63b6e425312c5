// Internal to kernels/: error translation at the CUDA/cuBLAS boundary and
// the element types behind qac_precision.
#ifndef QAC_CUDA_COMMON_CUH
#define QAC_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

extern "C" {
#include "qac_common.h"
#include "qac_encoder.h"
}

// Turn a failed CUDA runtime call into QAC_ERR_CUDA naming the call.
static inline qac_status qac_cuda_check(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return QAC_OK;
    return qac_set_error(QAC_ERR_CUDA, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

static inline qac_status qac_cublas_check(cublasStatus_t s, const char *what) {
    if (s == CUBLAS_STATUS_SUCCESS) return QAC_OK;
    return qac_set_error(QAC_ERR_CUDA, "%s: cuBLAS %s", what, cublasGetStatusString(s));
}

#define QAC_CU(call)                                                        \
    do {                                                                    \
        qac_status st_ = qac_cuda_check((call), #call);                     \
        if (st_ != QAC_OK) return st_;                                      \
    } while (0)

#define QAC_CUBLAS(call)                                                    \
    do {                                                                    \
        qac_status st_ = qac_cublas_check((call), #call);                   \
        if (st_ != QAC_OK) return st_;                                      \
    } while (0)

// Same, but jumps to a cleanup label instead of returning.
#define QAC_CU_GOTO(st, call, label)                                        \
    do {                                                                    \
        (st) = qac_cuda_check((call), #call);                               \
        if ((st) != QAC_OK) goto label;                                     \
    } while (0)

static inline size_t qac_prec_size(qac_precision p) { return p == QAC_PREC_FP32 ? 4 : 2; }

static inline cudaDataType_t qac_prec_cuda_type(qac_precision p) {
    return p == QAC_PREC_FP16 ? CUDA_R_16F : p == QAC_PREC_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static inline const char *qac_prec_name(qac_precision p) {
    return p == QAC_PREC_FP16 ? "fp16" : p == QAC_PREC_BF16 ? "bf16" : "fp32";
}

// Element conversions usable from templated kernels.
template <typename T> __device__ __forceinline__ float qac_to_float(T v);
template <> __device__ __forceinline__ float qac_to_float<float>(float v) { return v; }
template <> __device__ __forceinline__ float qac_to_float<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float qac_to_float<__nv_bfloat16>(__nv_bfloat16 v) {
    return __bfloat162float(v);
}

template <typename T> __device__ __forceinline__ T qac_from_float(float v);
template <> __device__ __forceinline__ float qac_from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half qac_from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 qac_from_float<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

static inline unsigned qac_div_up(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }

#endif
