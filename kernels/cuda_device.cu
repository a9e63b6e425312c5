// GPU discovery for the CUDA backend. Translates CUDA errors at the boundary.
#include <stdio.h>

#include <cuda_runtime.h>

#include "cudnn_attention.cuh"

extern "C" {
#include "qac_common.h"

int qac_cuda_available(void) {
    static int cached = -1;
    if (cached < 0) {
        int n = 0;
        cached = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
        if (!cached) cudaGetLastError(); /* clear the sticky "no driver" error */
    }
    return cached;
}

const char *qac_cuda_describe(char *buf, size_t cap) {
    if (!cap) return buf;
    if (!qac_cuda_available()) {
        snprintf(buf, cap, "no usable CUDA GPU");
        return buf;
    }
    int dev = 0;
    cudaDeviceProp p;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
        cudaGetLastError();
        snprintf(buf, cap, "CUDA GPU (its properties unreadable)");
        return buf;
    }
    char cudnn[512];
    snprintf(buf, cap, "%s (sm_%d%d, %.0f GiB); attention: qac's fused kernels, %s", p.name, p.major, p.minor,
             (double)p.totalGlobalMem / (1 << 30), qac_cudnn_probe(cudnn, sizeof cudnn));
    return buf;
}
}
