/* Internal to model/: the int8 mode of qac_gemm (gemm.h), called by
 * gemm.c's block loop. */
#ifndef QAC_GEMM_INT8_H
#define QAC_GEMM_INT8_H

#include <stddef.h>
#include <stdint.h>

#include "gemm.h"

/* Bytes of scratch one thread needs to quantise a block of mc rows of IC
 * inputs (a multiple of 64). */
size_t qac_gemm_int8_scratch(int mc, int IC);

/* out [n, OC] = dequant(quant(inp [n, IC]) q^T) (+ bias) (+ resid, may alias
 * out), rows quantised into scratch (qac_gemm_int8_scratch(n, IC) bytes),
 * on the calling thread, with the kernel of the path in use. */
void qac_gemm_int8_rows(float *out, const float *inp, const qac_packed_w *pw, const float *bias, const float *resid,
                        int n, void *scratch);

/* Rows [r0, r0 + n) of a qac_gemm_q8 buffer of N rows (r0 a multiple of
 * qac_gemm_int8_group_rows()) times pw, as qac_gemm_int8_rows would give
 * them from the float rows, on the calling thread. */
void qac_gemm_int8_rows_q8(float *out, const void *q8, int N, int r0, int n, const qac_packed_w *pw,
                           const float *bias, const float *resid);
/* Columns [c0, c1) (c0 a multiple of 16) of all N rows of a qac_gemm_q8
 * buffer times pw, as qac_gemm_int8_rows_q8 gives them: out, bias and resid
 * point at column c0, rows ldo apart. */
void qac_gemm_int8_cols_q8(float *out, int ldo, const void *q8, int N, const qac_packed_w *pw, int c0, int c1,
                           const float *bias, const float *resid);
/* the rows of a group of the kernels' quantised layout (12) */
int qac_gemm_int8_group_rows(void);

/* One row quantised as qac_gemm does it: u [ceil(IC / 4) * 4] (zero past
 * IC), its scale and zero point (gemm_int8.c). For tests. */
void qac_gemm_int8_quantize_row(uint8_t *u, float *scale, int32_t *zp, const float *x, int IC);

#endif
