// Internal to kernels/: cuDNN's fused attention as the measured alternative
// to qac's own (flash_fwd.cu) in the CUDA encoder's forward. cuDNN is never
// linked: libcudnn is loaded at run time when present (QAC_CUDNN_LIBRARY,
// the loader's path, or torch's wheel directory), so every binary runs on a
// machine without it, and qac's kernel is the path that always works.
//
// Per shape (precision, heads, head size, sequences, padded length in
// steps of 64) the first batch seen outside a graph capture decides, once
// per process: cuDNN's plan is built, both run on that batch, cuDNN's
// output must agree with qac's (or the shape stays with qac's, the reason
// kept), and in mode auto both are timed and the faster is kept; mode on
// keeps cuDNN whenever it agrees, off never tries it (QAC_CUDA_CUDNN, default
// QAC_CUDNN_MODE_DEFAULT from qac_gpu_defaults.h). Any cuDNN failure falls
// back to qac's kernel; what was decided, with its timings or its reason, is
// in qac_cuda_attention_choices and qac_cuda_describe.
#ifndef QAC_CUDNN_ATTENTION_CUH
#define QAC_CUDNN_ATTENTION_CUH

#include "flash_attention.cuh"

struct qac_cudnn_att;

// 0 off, 1 on, 2 auto: QAC_CUDA_CUDNN, else the committed default.
int qac_cudnn_mode(void);

// A cuDNN context for one encoder's stream: QAC_ERR_UNSUPPORTED (with the
// reason) when the mode is off or cuDNN cannot be loaded or lacks the
// fused attention; the encoder then runs qac's kernel alone.
qac_status qac_cudnn_att_create(qac_cudnn_att **out, cudaStream_t s);
void qac_cudnn_att_free(qac_cudnn_att *a);

// Ints of device scratch qac_cudnn_att_forward needs for B sequences: the
// lengths, the QKV rows' and the output rows' element offsets, each from a
// 16-byte boundary.
inline size_t qac_cudnn_idx_stride(int B) { return ((size_t)B + 1 + 3) / 4 * 4; }
inline size_t qac_cudnn_idx_ints(int B) { return 3 * qac_cudnn_idx_stride(B); }

// cuDNN alone (the benchmark's timing): out [N,C] from qkv [N,3C] whose
// bias is already in, packed rows (offs on the device), its plan built on
// the first call for the shape; QAC_ERR_UNSUPPORTED naming why when it
// cannot run. idx as for qac_cudnn_att_forward.
qac_status qac_cudnn_att_run(qac_cudnn_att *a, void *out, void *qkv, const int *offs, int B, int T, int C, int NH,
                             qac_precision prec, int *idx, cudaStream_t s);

// What cuDNN's SDPA does here, in a line: loads the library and builds a
// plan for a small shape on the current device (qac_cuda_describe).
const char *qac_cudnn_probe(char *buf, size_t cap);

// out [N,C] (prec) = the attention of qkv [N,3C] + qkv_b [3C] over the
// packed rows (rows.offs on the device, no lens), as qac_fa_forward
// computes it at inference (no lse, no dropout): by cuDNN when this
// shape's choice is cuDNN (qkv then gets its bias added in place), else by
// qac's kernel (tiles). real_rows: offs[B] (the rows that belong to a
// sequence); scratch [N,C] of prec and idx (qac_cudnn_idx_ints(B) ints) on
// the device, both held by the caller for as long as a graph that captured
// this call may replay. a may be NULL (qac's kernel).
qac_status qac_cudnn_att_forward(qac_cudnn_att *a, void *out, void *qkv, const float *qkv_b, const qac_fa_rows &rows,
                                 int real_rows, int C, int NH, qac_precision prec, const qac_fa_tiles *tiles,
                                 void *scratch, int *idx, cudaStream_t s);

#endif
