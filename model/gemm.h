/* Internal to model/: the encoder's matrix product, out = inp W^T (+ bias)
 * (+ resid), with W packed once into 16-column panels.
 *
 * Every output element is one sequential chain of fused multiply-adds over
 * k = 0 .. IC-1, then + bias, then + resid, whatever the number of rows, the
 * row's position in the call, the thread count or the CPU's SIMD level. A
 * sequence's vectors therefore never depend on the other sequences in its
 * batch (OpenBLAS's sgemm changes its summation with the row count). */
#ifndef QAC_GEMM_H
#define QAC_GEMM_H

#include <stdint.h>

#include "qac_common.h"
#include "qac_pool.h"

#define QAC_GEMM_PANEL 16

typedef struct qac_packed_w {
    float *p; /* [ceil(OC / 16), IC, 16]: p[(j * IC + k) * 16 + c] = W[16 j + c][k], zero-padded */
    int IC, OC;
    /* or, in bf16 mode (p NULL): [ceil(OC / 16), ceil(IC / 2), 16, 2]:
     * pb[((j * IC2 + k2) * 16 + c) * 2 + e] = bf16(W[16 j + c][2 k2 + e]) */
    uint16_t *pb;
    /* or, in int8 mode (p, pb NULL; see gemm_int8.c): one allocation of
     * [ceil(OC / 16), ceil(IC / 4), 16, 4] int8 weights,
     * pq[((j * IC4 + k4) * 16 + c) * 4 + e] = q(W[16 j + c][4 k4 + e]), then
     * per output channel (zero-padded to the panels) its scale and the sum
     * of its quantised weights */
    int8_t *pq;
    float *qscale;
    int32_t *qsum;
} qac_packed_w;

/* Pack W [OC, IC] (row-major, torch.nn.Linear layout). */
qac_status qac_gemm_pack(qac_packed_w *pw, const float *w, int OC, int IC);
void qac_gemm_packed_free(qac_packed_w *pw);

/* bf16 mode: W rounded to bf16 (to nearest even). qac_gemm then rounds each
 * inp row to bf16 as well and sums pairs of products in fp32 exactly as
 * AVX512_BF16's vdpbf16ps does (per output: for each k pair, acc += odd
 * product, then acc += even product, each qac_bf16_step of qac_bf16.h:
 * a fused multiply-add, subnormal inputs read as zero, tiny results
 * flushed to zero as the hardware judges them). CPUs without AVX512_BF16
 * get the same bits from a scalar emulation, much slower. */
qac_status qac_gemm_pack_bf16(qac_packed_w *pw, const float *w, int OC, int IC);
uint16_t qac_bf16_round(float x);

/* int8 mode: W quantised symmetrically per output channel (W[o][k] ~
 * qscale[o] q[o][k], q in [-127, 127], qscale[o] = max_k |W[o][k]| / 127).
 * qac_gemm then quantises each inp row on its own (8 bits, its own scale
 * and zero point: a row's result never depends on the other rows), sums
 * the products exactly in int32 (VPDPBUSD where the CPU has VNNI, plain C
 * otherwise: the same integers) and dequantises in the epilogue, before
 * bias and residual. gemm_int8.c has the arithmetic, step by step. */
qac_status qac_gemm_pack_int8(qac_packed_w *pw, const float *w, int OC, int IC);

/* int8 mode with the input rows quantised ahead, by the step that made
 * them while they are still in its cache (the FFN's GELU), instead of
 * inside the product, which reads each float row back from memory:
 * q8 holds qac_gemm_q8_bytes(N, IC) bytes; qac_gemm_q8_quantize writes
 * rows [r0, r1) of x [N, IC] into it (any rows, from any thread, each
 * row's bytes its own); qac_gemm_q8 then gives out exactly the bits
 * qac_gemm gives for x (the same quantiser, kernels and epilogue). No
 * scratch. */
size_t qac_gemm_q8_bytes(int N, int IC);
void qac_gemm_q8_quantize(void *q8, int N, int IC, const float *x, int r0, int r1);
/* the same with rows [r0, r1) of x given from row r0 on: rows holds row r0 */
void qac_gemm_q8_quantize_rows(void *q8, int N, int IC, const float *rows, int r0, int r1);
/* rows [r, r + n) (their floats at rows, IC apart), their ranges [lo[i],
 * hi[i]] (with 0, a NaN ignored: what the quantiser would find) known to
 * the caller; whole groups of the kernels' rows go out together */
void qac_gemm_q8_quantize_ranged(void *q8, int N, int IC, const float *rows, int r, int n, const float *lo,
                                 const float *hi);
qac_status qac_gemm_q8(float *out, const void *q8, const qac_packed_w *pw, const float *bias, const float *resid,
                       int N, qac_pool *pool);

/* Scratch of qac_gemm for weights of IC inputs, on a pool of nthreads
 * threads: bytes, in whatever mode the weights are packed (fp32 weights
 * use none; bf16 ones round each thread's block of input rows into it,
 * int8 ones quantise it there). About 64 KiB a thread for bf16 (a block of
 * rows is about 128 KiB of fp32 input), a little more than 128 KiB for int8. */
size_t qac_gemm_scratch_bytes(int IC, int nthreads);

/* out [N, OC] = inp [N, IC] W^T, then + bias [OC] when not NULL, then
 * + resid [N, OC] when not NULL (resid may alias out). scratch holds
 * qac_gemm_scratch_bytes(pw->IC, qac_pool_size(pool)) bytes from the
 * caller's plan, or is NULL: then weights that need it have it allocated
 * for the call, and QAC_ERR_NOMEM when it cannot be (fp32 weights never
 * fail). */
qac_status qac_gemm(float *out, const float *inp, const qac_packed_w *pw, const float *bias, const float *resid, int N,
                    void *scratch, qac_pool *pool);

/* qac_gemm, then post(post_ctx, r0, r1) for each block of finished rows
 * [r0, r1), on the thread that computed them while they are still in its
 * cache: an element-wise step fused into the product without a second
 * pass over memory or a second parallel loop (the FFN's bias and GELU).
 * A short batch (fewer than 4 tiles of 12 rows a thread) is split by
 * columns instead, so that every thread gets an equal share: then post
 * runs after the product, on blocks of rows, in a second parallel loop. */
typedef void (*qac_gemm_post_fn)(void *post_ctx, int r0, int r1);
qac_status qac_gemm_then(float *out, const float *inp, const qac_packed_w *pw, const float *bias, const float *resid,
                         int N, void *scratch, qac_pool *pool, qac_gemm_post_fn post, void *post_ctx);

/* The same for a product whose rows only feed post (the int8 FFN's
 * activation, quantised by its GELU step): each block's rows [r0, r1) are
 * written at rows, the start of the calling thread's own part of out
 * (thread t's at out + t (N / threads) OC, rounded down to a cache line),
 * not at out + r0 OC, so that every block reuses the same lines instead of
 * sending N x OC floats to memory; post_at(post_ctx, r0, r1, rows, tid)
 * then reads them there (tid: the calling thread's index in the pool).
 * out [N, OC] is scratch: afterwards it holds no row in its place. Where
 * a thread's part is smaller than a block (a few rows on many threads) the
 * rows go to out + r0 OC as in qac_gemm_then, and a short batch split by
 * columns has every row in its place when post_at runs. */
typedef void (*qac_gemm_post_at_fn)(void *post_ctx, int r0, int r1, float *rows, int tid);
qac_status qac_gemm_then_local(float *out, const float *inp, const qac_packed_w *pw, const float *bias, int N,
                               void *scratch, qac_pool *pool, qac_gemm_post_at_fn post_at, void *post_ctx);

/* The general form, for strided operands (attention heads):
 * packed holds qac_gemm_packed_floats(OC, IC) floats, filled by
 * qac_gemm_pack_into from W [OC, IC] with row stride ldw, or, when
 * transposed, from W^T [IC, OC] with row stride ldw. Then
 * out[n * ldo + o] = alpha * (inp[n * ldi + .] . W[o]), (+ bias[o]), and no
 * residual. Runs on the calling thread. */
size_t qac_gemm_packed_floats(int OC, int IC);
void qac_gemm_pack_into(float *packed, const float *w, int OC, int IC, int ldw, int transposed);
void qac_gemm_strided(float *out, int ldo, const float *inp, int ldi, const float *packed, int IC, int OC,
                      float alpha, int N);
/* The same with the right operand given as B = W^T [IC, OC] (row stride
 * ldb) and packed here only where the path needs it (into scratch, of
 * qac_gemm_packed_floats(OC, IC) floats); the AVX-512 path reads B in
 * place. The same bits as packing B with qac_gemm_pack_into(.., 1) and
 * calling qac_gemm_strided. */
void qac_gemm_strided_b(float *out, int ldo, const float *inp, int ldi, const float *b, int ldb, int IC, int OC,
                        float alpha, int N, float *scratch);

/* bf16 operands for the attention's products, packed per call: the
 * panels of qac_gemm_pack_bf16 (pairs of k), qac_gemm_bf16_packed_elems
 * uint16 elements, from W [OC, IC] (row stride ldw) or, transposed, from
 * W^T [IC, OC]; rows rounded to bf16 after one multiply by scale (1: none),
 * zero-padded to an even length; then out [N, OC] (row stride ldo) =
 * alpha a [N, IC] (bf16 rows, stride lda >= IC rounded up to even) W^T,
 * summed as qac_gemm's bf16 mode does (vdpbf16ps, or the same bits
 * emulated), each sum then multiplied by alpha (one fp32 multiply; none at
 * 1). */
size_t qac_gemm_bf16_packed_elems(int OC, int IC);
void qac_gemm_pack_bf16_into(uint16_t *packed, const float *w, int OC, int IC, int ldw, int transposed);
/* The same panels from operands already in bf16 (w: uint16 rows of
 * stride ldw): the bits qac_gemm_pack_bf16_into gives for the floats these
 * are. */
void qac_gemm_pack_bf16_from16(uint16_t *packed, const uint16_t *w, int OC, int IC, int ldw, int transposed);
void qac_gemm_round_bf16(uint16_t *d, const float *x, int n, float scale);
void qac_gemm_bf16_strided(float *out, int ldo, const uint16_t *a, int lda, const uint16_t *packed, int IC, int OC,
                           float alpha, int N);

#endif
