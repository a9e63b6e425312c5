/* Prints what the CUDA encoder would load of cuDNN: its version (0: none)
 * and where from or why not, one line each (tests/gpu/test_cudnn_load.sh
 * runs it under different environments; needs no GPU). */
#include <stdio.h>

#include "qac_cuda_attention.h"

int main(void) {
    char why[512];
    printf("version %d\n", qac_cudnn_version());
    printf("status %s\n", qac_cudnn_status(why, sizeof why));
    return 0;
}
