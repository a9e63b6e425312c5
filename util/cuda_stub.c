/* Without the CUDA backend, no GPU is ever usable. */
#include "qac_common.h"
#ifndef QAC_HAVE_CUDA
int qac_cuda_available(void) { return 0; }
#endif
