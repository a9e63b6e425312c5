// GPU discovery for the CUDA backend. Translates CUDA errors at the boundary.
#include <cuda_runtime.h>

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
}
