/* Internal to model/: the element-wise SIMD kernels under the layer math
 * (GELU and its derivative, a softmax row, a LayerNorm row).
 *
 * expf and erff from libm are scalar calls; GELU and softmax evaluate them
 * for every FFN and attention element, so these use branch-free polynomial
 * forms the compiler vectorises, compiled for each ISA path (qac_cpu.h),
 * all giving the same bits. Accuracy: exp within 2 ulp (Cephes coefficients);
 * erf within 1.5e-7 absolute (Abramowitz & Stegun 7.1.26, the form
 * PyTorch's vectorised CPU erf uses). */
#ifndef QAC_VECMATH_H
#define QAC_VECMATH_H

#include <stddef.h>

/* out = GELU(inp), erf form. out may alias inp. [n] */
void qac_vm_gelu(float *out, const float *inp, size_t n);
/* v = pre + bias (written back to pre when keep), out = GELU(v). [n] */
void qac_vm_bias_gelu(float *out, float *pre, const float *bias, int n, int keep);
/* The int8 FFN's GELU, in place: x = GELU(x + bias) (bias NULL: none), and
 * the outputs' range for the quantiser that follows: *lo = min(0, min x),
 * *hi = max(0, max x), a NaN ignored. erf from a table of polynomials
 * (gelu_table.h: no division, no exp), within GELU_Q8_E_ERR (6e-8) of
 * libm's: in BERT-base's int8 forward, GELU with the quantiser's range
 * pass went from 5.1% of the time to about 2.7% (bench/RESULTS.md);
 * every path the same bits, but not qac_vm_gelu's. [n] */
void qac_vm_gelu_q8(float *x, const float *bias, int n, float *lo, float *hi);
/* dinp = dout * GELU'(pre). dinp may alias dout. [n] */
void qac_vm_gelu_backward(float *dinp, const float *dout, const float *pre, size_t n);
/* x = softmax(x), in place; n >= 1. [n] */
void qac_vm_softmax_row(float *x, int n);
/* The same for probabilities rounded to bf16 next (the int8 encoder's
 * attention): exp(x) as 2^n p(f) with a degree-4 polynomial, relative error
 * 2.7e-6 (a 700th of bf16's unit roundoff), about half the operations of
 * qac_vm_softmax_row's; every path the same bits. [n] */
void qac_vm_softmax_row_b16(float *x, int n);
/* One LayerNorm row: o = (x - mean) * rstd * w + b (b NULL: no bias); mean,
 * rstd may be NULL. */
void qac_vm_layernorm_row(float *o, float *mean, float *rstd, const float *x, const float *w, const float *b, int C,
                          float eps);

#endif
