/* The int8 mode of the encoder's matrix product (gemm.h): weight packing,
 * the row quantiser and the int32 kernels, one per path (AVX512-VNNI,
 * AVX-VNNI, portable C). Every path computes the same integers and the same
 * float epilogue, so the same bits; gemm.c's block loop calls
 * qac_gemm_int8_rows for each block of rows, on the thread that owns it.
 *
 * Arithmetic, for output element (n, o):
 *  - weights, at load: qscale[o] = max_k |W[o][k]| / 127, q[o][k] =
 *    clamp(rint(W[o][k] / qscale[o]), -127, 127) (a zero row: all 0, scale 0);
 *    qsum[o] = sum_k q[o][k].
 *  - row n of inp, in the product: lo = min(0, min_k x), hi = max(0, max_k x);
 *    inv = 255 / (hi - lo), scale = (hi - lo) / 255, zp = clamp(rint(-lo inv),
 *    0, 255); u_k = clamp(rint(x_k inv) + zp, 0, 255) (a zero row: u = 0,
 *    scale 0, zp 0). The clamp at 255 takes the one finite overflow, a
 *    row's top when both hi inv and -lo inv are ties rounded up (hi = -lo:
 *    128 + 128); nothing finite falls below 0, and a NaN element is 0 (x86
 *    converts it to INT_MIN, which the clamp at 0 takes; range ignores it). Asymmetric, per row: the 256 levels span the row's own
 *    range (a GELU output, nearly all >= -0.17, gets twice the levels of a
 *    symmetric scale), and no row's scale depends on another row.
 *  - acc = sum_k u_k q[o][k] in int32, exact (|u q| <= 255 * 127, so any
 *    IC < 66,000 fits), four products a lane per VPDPBUSD (u8 x s8);
 *  - out = (float)(acc - zp qsum[o]) * qscale[o] * scale (two float
 *    multiplies in that order), then + bias[o], then + resid.
 * The unsigned operand is the activation (VPDPBUSD's u8 x s8); zp qsum[o]
 * takes out the zero point: sum_k (u_k - zp) q = acc - zp qsum.
 *
 * Layout: weights in the panels of 16 output columns the float kernels use,
 * each k step a group of 4 consecutive k: pq[((j IC4 + k4) 16 + c) 4 + e],
 * so one 64-byte load is a panel's 16 columns x 4 k, and a row's 4 bytes
 * u[4 k4 .. 4 k4 + 3], broadcast, pair with it lane for lane. Tiles: 12 rows x
 * 32 columns in 24 zmm accumulators (AVX512-VNNI), 6 x 16 in 12 ymm
 * (AVX-VNNI), as the fp32 kernels. */
#include "gemm_int8.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qac_cpu.h"
#include "qac_util.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define I8_X86 1
#define VNNI512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma")))
#if !defined(__clang__) || __clang_major__ >= 16
#define I8_AVXVNNI 1
#define VNNI256 __attribute__((target("avx2,fma,avxvnni")))
#endif
#endif
#define INLINE static inline __attribute__((always_inline))

#define NP QAC_GEMM_PANEL

static int ic4_of(int IC) { return (IC + 3) / 4; }

/* ---- packing ---- */

qac_status qac_gemm_pack_int8(qac_packed_w *pw, const float *w, int OC, int IC) {
    memset(pw, 0, sizeof *pw);
    if (OC < 1 || IC < 1) return qac_set_error(QAC_ERR_INVALID, "gemm pack: bad shape %d x %d", OC, IC);
    int np = (OC + NP - 1) / NP, IC4 = ic4_of(IC);
    size_t wbytes = (size_t)np * IC4 * NP * 4, cols = (size_t)np * NP;
    size_t bytes = (wbytes + 63) / 64 * 64 + cols * (sizeof(float) + sizeof(int32_t));
    int8_t *mem = qac_malloc_lines(bytes);
    if (!mem) return qac_set_error(QAC_ERR_NOMEM, "out of memory packing a %d x %d weight in int8", OC, IC);
    memset(mem, 0, bytes);
    pw->pq = mem;
    pw->qscale = (float *)(void *)(mem + (wbytes + 63) / 64 * 64);
    pw->qsum = (int32_t *)(void *)(pw->qscale + cols);
    for (int o = 0; o < OC; o++) {
        const float *row = w + (size_t)o * IC;
        float amax = 0.0f;
        for (int k = 0; k < IC; k++) amax = fabsf(row[k]) > amax ? fabsf(row[k]) : amax;
        float s = amax / 127.0f;
        int32_t sum = 0;
        int8_t *panel = mem + (size_t)(o / NP) * IC4 * NP * 4;
        for (int k = 0; s > 0.0f && k < IC; k++) {
            long q = lrintf(row[k] / s);
            q = q > 127 ? 127 : q < -127 ? -127 : q;
            panel[((size_t)(k / 4) * NP + o % NP) * 4 + k % 4] = (int8_t)q;
            sum += (int32_t)q;
        }
        pw->qscale[o] = s;
        pw->qsum[o] = sum;
    }
    pw->IC = IC;
    pw->OC = OC;
    return QAC_OK;
}

#define MR_A 12 /* rows per group of the quantised block (see A_AT) */

size_t qac_gemm_int8_scratch(int mc, int IC) {
    size_t rows = (size_t)(mc + MR_A - 1) / MR_A * MR_A * ic4_of(IC) * 4;
    return (rows + 63) / 64 * 64 + (size_t)mc * (sizeof(float) + sizeof(int32_t)) + 64;
}

/* ---- the row quantiser (every path: the same bits) ---- */

/* scale, 1 / scale and the zero point from the row's range [lo, hi] */
static void quant_params(float lo, float hi, float *scale, float *inv, int32_t *zp) {
    if (!(hi > lo)) { /* all zero (or not finite: no sensible scale) */
        *scale = hi == lo ? 0.0f : NAN;
        *inv = 0.0f;
        *zp = 0;
        return;
    }
    *scale = (hi - lo) / 255.0f;
    *inv = 255.0f / (hi - lo);
    long z = lrintf(-lo * *inv);
    *zp = (int32_t)(z > 255 ? 255 : z < 0 ? 0 : z);
}

INLINE uint8_t quant_one(float x, float inv, int32_t zp) {
    long v = lrintf(x * inv) + zp;
    return (uint8_t)(v > 255 ? 255 : v < 0 ? 0 : v);
}

/* The quantisers write a row's groups of 4 bytes (k = 4 k4 .. 4 k4 + 3) at
 * u + k4 * stride: stride 4 is a plain row, MR_A * 4 the kernels' layout. */
static void range_portable(float *lo, float *hi, const float *x, int IC) {
    float l = 0.0f, h = 0.0f;
    for (int k = 0; k < IC; k++) {
        l = x[k] < l ? x[k] : l;
        h = x[k] > h ? x[k] : h;
    }
    *lo = l, *hi = h;
}

static void apply_portable(uint8_t *u, size_t stride, const float *x, int IC, float inv, int32_t zp) {
    for (int k = 0; k < ic4_of(IC) * 4; k++) u[(size_t)(k / 4) * stride + k % 4] = k < IC ? quant_one(x[k], inv, zp) : 0;
}

#ifdef I8_X86
VNNI512 static void range_avx512(float *lo_out, float *hi_out, const float *x, int IC) {
    __m512 lo = _mm512_setzero_ps(), hi = lo;
    int full = IC / 16 * 16, k = 0;
    for (; k < full; k += 16) {
        __m512 v = _mm512_loadu_ps(x + k);
        lo = _mm512_min_ps(v, lo); /* a NaN in v keeps lo, as the portable loop does */
        hi = _mm512_max_ps(v, hi);
    }
    if (k < IC) { /* the masked tail reads zeros: within [lo, hi] already */
        __m512 v = _mm512_maskz_loadu_ps((__mmask16)((1u << (IC - k)) - 1), x + k);
        lo = _mm512_min_ps(v, lo);
        hi = _mm512_max_ps(v, hi);
    }
    *lo_out = _mm512_reduce_min_ps(lo), *hi_out = _mm512_reduce_max_ps(hi);
}

VNNI512 static void apply_avx512(uint8_t *u, size_t stride, const float *x, int IC, float inv, int32_t zp) {
    int full = IC / 16 * 16, k;
    __m512 vi = _mm512_set1_ps(inv);
    __m512i vz = _mm512_set1_epi32(zp), z0 = _mm512_setzero_si512();
    /* rint (MXCSR's nearest-even) + zp, clamped below at 0 here and above at
     * 255 by the unsigned saturation of vpmovusdb: the portable clamp */
    for (k = 0; k < full; k += 16) { /* four whole groups of 4, each to its own place */
        __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + k), vi)), vz);
        __m128i b = _mm512_cvtusepi32_epi8(_mm512_max_epi32(q, z0));
        uint8_t *d = u + (size_t)(k / 4) * stride;
        int32_t g0 = _mm_cvtsi128_si32(b), g1 = _mm_extract_epi32(b, 1), g2 = _mm_extract_epi32(b, 2),
                g3 = _mm_extract_epi32(b, 3);
        memcpy(d, &g0, 4);
        memcpy(d + stride, &g1, 4);
        memcpy(d + 2 * stride, &g2, 4);
        memcpy(d + 3 * stride, &g3, 4);
    }
    int n4 = ic4_of(IC) * 4;
    if (k < n4) { /* the tail: past IC, x read as 0 (inv 0 * 0) and u written as 0 */
        __mmask16 mx = (__mmask16)((1u << (IC - k)) - 1);
        __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(mx, x + k), vi)), vz);
        __m128i b = _mm512_cvtusepi32_epi8(_mm512_maskz_mov_epi32(mx, _mm512_max_epi32(q, z0)));
        uint8_t *d = u + (size_t)(k / 4) * stride;
        int32_t g4[4] = {_mm_cvtsi128_si32(b), _mm_extract_epi32(b, 1), _mm_extract_epi32(b, 2), _mm_extract_epi32(b, 3)};
        for (int j = 0; j < (n4 - k) / 4; j++) memcpy(d + (size_t)j * stride, &g4[j], 4);
    }
}

/* 16 floats of a row quantised as apply_avx512 does it */
VNNI512 static inline __attribute__((always_inline)) __m128i quant16(const float *x, __m512 vi, __m512i vz) {
    __m512i w = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x), vi)), vz);
    return _mm512_cvtusepi32_epi8(_mm512_max_epi32(w, _mm512_setzero_si512()));
}

/* apply_avx512 on a whole group of MR_A rows (x rows ldx apart) into the
 * kernels' layout (u: the group's k4 = 0): each row's 16 bytes of a k step
 * quantised as apply_avx512 does it, then transposed 4 rows at a time so
 * that each k4's 4-byte groups of 4 rows go out as one 16-byte store
 * (apply_avx512 writes 4 bytes at a time). A part of a group: row by row.
 * The same bytes. */
VNNI512 static void apply_group_avx512(uint8_t *u, const float *x, size_t ldx, int nrows, int IC, const float *inv,
                                       const int32_t *zp) {
    int full = IC / 16 * 16, k = 0;
    if (nrows == MR_A) {
        __m512 vi[MR_A];
        __m512i vz[MR_A];
#pragma GCC unroll 12
        for (int r = 0; r < MR_A; r++) vi[r] = _mm512_set1_ps(inv[r]), vz[r] = _mm512_set1_epi32(zp[r]);
        for (; k < full; k += 16) {
            uint8_t *d = u + (size_t)(k / 4) * MR_A * 4;
#pragma GCC unroll 3
            for (int g = 0; g < MR_A; g += 4) {
                __m128i q0 = quant16(x + (size_t)g * ldx + k, vi[g], vz[g]);
                __m128i q1 = quant16(x + (size_t)(g + 1) * ldx + k, vi[g + 1], vz[g + 1]);
                __m128i q2 = quant16(x + (size_t)(g + 2) * ldx + k, vi[g + 2], vz[g + 2]);
                __m128i q3 = quant16(x + (size_t)(g + 3) * ldx + k, vi[g + 3], vz[g + 3]);
                __m128i a0 = _mm_unpacklo_epi32(q0, q1), a1 = _mm_unpackhi_epi32(q0, q1);
                __m128i a2 = _mm_unpacklo_epi32(q2, q3), a3 = _mm_unpackhi_epi32(q2, q3);
                _mm_storeu_si128((__m128i *)(void *)(d + (size_t)g * 4), _mm_unpacklo_epi64(a0, a2));
                _mm_storeu_si128((__m128i *)(void *)(d + ((size_t)MR_A + g) * 4), _mm_unpackhi_epi64(a0, a2));
                _mm_storeu_si128((__m128i *)(void *)(d + ((size_t)2 * MR_A + g) * 4), _mm_unpacklo_epi64(a1, a3));
                _mm_storeu_si128((__m128i *)(void *)(d + ((size_t)3 * MR_A + g) * 4), _mm_unpackhi_epi64(a1, a3));
            }
        }
    }
    if (k < ic4_of(IC) * 4) /* the rest: the tail, or every column of a part of a group */
        for (int r = 0; r < nrows; r++)
            apply_avx512(u + (size_t)(k / 4) * MR_A * 4 + (size_t)r * 4, MR_A * 4, x + (size_t)r * ldx + k, IC - k,
                         inv[r], zp[r]);
}

__attribute__((target("avx2,fma"))) static void range_avx2(float *lo_out, float *hi_out, const float *x, int IC) {
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    int k = 0;
    for (; k + 8 <= IC; k += 8) {
        __m256 v = _mm256_loadu_ps(x + k);
        lo = _mm256_min_ps(v, lo);
        hi = _mm256_max_ps(v, hi);
    }
    float l8[8], h8[8], lo_s = 0.0f, hi_s = 0.0f;
    _mm256_storeu_ps(l8, lo);
    _mm256_storeu_ps(h8, hi);
    for (int i = 0; i < 8; i++) lo_s = l8[i] < lo_s ? l8[i] : lo_s, hi_s = h8[i] > hi_s ? h8[i] : hi_s;
    for (int i = k; i < IC; i++) lo_s = x[i] < lo_s ? x[i] : lo_s, hi_s = x[i] > hi_s ? x[i] : hi_s;
    *lo_out = lo_s, *hi_out = hi_s;
}

__attribute__((target("avx2,fma"))) static void apply_avx2(uint8_t *u, size_t stride, const float *x, int IC,
                                                            float inv, int32_t zp) {
    __m256 vi = _mm256_set1_ps(inv);
    __m256i vz = _mm256_set1_epi32(zp);
    int k;
    for (k = 0; k + 8 <= IC; k += 8) {
        __m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k), vi)), vz);
        __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)); /* clamps at 0 */
        w = _mm_packus_epi16(w, w);                                                             /* and at 255 */
        int32_t g0 = _mm_cvtsi128_si32(w), g1 = _mm_extract_epi32(w, 1);
        memcpy(u + (size_t)(k / 4) * stride, &g0, 4);
        memcpy(u + (size_t)(k / 4 + 1) * stride, &g1, 4);
    }
    for (; k < ic4_of(IC) * 4; k++) u[(size_t)(k / 4) * stride + k % 4] = k < IC ? quant_one(x[k], inv, zp) : 0;
}
#endif

/* A row's quantiser in two parts: its range (with 0, a NaN ignored), then
 * the bytes from the scale and zero point quant_params makes of it; the
 * range may also come from whoever wrote the row (qac_vm_gelu_q8). */
typedef struct quant_row_fns {
    void (*range)(float *lo, float *hi, const float *x, int IC);
    void (*apply)(uint8_t *u, size_t stride, const float *x, int IC, float inv, int32_t zp);
    /* up to MR_A rows into a group of the kernels' layout (NULL: row by row) */
    void (*group)(uint8_t *u, const float *x, size_t ldx, int nrows, int IC, const float *inv, const int32_t *zp);
} quant_row_fns;

static quant_row_fns pick_quant_row(void) {
#ifdef I8_X86
    int vnni = qac_cpu_vnni();
    if (vnni == 512) return (quant_row_fns){range_avx512, apply_avx512, apply_group_avx512};
    if (qac_cpu_isa() >= QAC_ISA_AVX2) return (quant_row_fns){range_avx2, apply_avx2, NULL};
#endif
    return (quant_row_fns){range_portable, apply_portable, NULL};
}

/* the bytes of row x at u (groups of 4 at stride), from its range */
static void quant_row_ranged(const quant_row_fns *q, uint8_t *u, size_t stride, float *scale, int32_t *zp,
                             const float *x, int IC, float lo, float hi) {
    float inv;
    quant_params(lo, hi, scale, &inv, zp);
    q->apply(u, stride, x, IC, inv, *zp);
}

static void quant_row(const quant_row_fns *q, uint8_t *u, size_t stride, float *scale, int32_t *zp, const float *x,
                      int IC) {
    float lo, hi;
    q->range(&lo, &hi, x, IC);
    quant_row_ranged(q, u, stride, scale, zp, x, IC, lo, hi);
}

/* rows [r, r + n) of a kernels' layout at a (x: row r, rows IC apart;
 * their ranges lo, hi), scales and zero points into sa + r, zp + r: a
 * group's whole rows at once where the path has a group writer */
static void quant_rows_ranged(const quant_row_fns *q, uint8_t *a, float *sa, int32_t *zp, const float *x, int IC,
                              int r, int n, const float *lo, const float *hi) {
    int IC4 = ic4_of(IC);
    for (int i = 0; i < n;) {
        int rr = r + i, g = MR_A - rr % MR_A < n - i ? MR_A - rr % MR_A : n - i; /* rows left in rr's group */
        float inv[MR_A];
        for (int j = 0; j < g; j++) quant_params(lo[i + j], hi[i + j], &sa[rr + j], &inv[j], &zp[rr + j]);
        uint8_t *ga = a + ((size_t)(rr / MR_A) * IC4 * MR_A + (size_t)(rr % MR_A)) * 4;
        if (q->group)
            q->group(ga, x + (size_t)i * IC, (size_t)IC, g, IC, inv, zp + rr);
        else
            for (int j = 0; j < g; j++)
                q->apply(ga + (size_t)j * 4, MR_A * 4, x + (size_t)(i + j) * IC, IC, inv[j], zp[rr + j]);
        i += g;
    }
}

void qac_gemm_int8_quantize_row(uint8_t *u, float *scale, int32_t *zp, const float *x, int IC) {
    quant_row_fns q = pick_quant_row();
    quant_row(&q, u, 4, scale, zp, x, IC);
}

/* ---- the kernels: rows [0, n) of a x all OC columns ----
 * a holds the quantised rows in groups of MR_A: group t's row r, bytes
 * 4 k4 .. 4 k4 + 3 at a + ((t IC4 + k4) MR_A + r) 4. A k step of a tile then
 * reads its rows' 4-byte groups from one 48-byte line at fixed offsets:
 * one pointer, where rows of their own stride would take a register each
 * (12 rows, with the panels' pointers, spill on x86-64). */
#define A_AT(g, r, k4) ((g)->a + (((size_t)((r) / MR_A) * (g)->ic4 + (size_t)(k4)) * MR_A + (size_t)((r) % MR_A)) * 4)

typedef struct i8_args {
    float *out;
    int ldo;
    const uint8_t *a;
    int ic4;
    const float *sa;      /* [n] row scales */
    const int32_t *zp;    /* [n] row zero points */
    const qac_packed_w *pw;
    const float *bias, *resid;
    int n;
} i8_args;

/* the epilogue of one element, written once for every path */
INLINE float dequant(int32_t acc, int32_t zp, int32_t qsum, float qscale, float sa) {
    float v = (float)(acc - zp * qsum) * qscale;
    return v * sa;
}

static void rows_portable(const i8_args *g) {
    const qac_packed_w *pw = g->pw;
    int IC4 = ic4_of(pw->IC), OC = pw->OC;
    for (int r = 0; r < g->n; r++) {
        for (int o = 0; o < OC; o++) {
            const int8_t *panel = pw->pq + (size_t)(o / NP) * IC4 * NP * 4 + (o % NP) * 4;
            int32_t acc = 0;
            for (int k4 = 0; k4 < IC4; k4++)
                for (int e = 0; e < 4; e++) acc += (int32_t)A_AT(g, r, k4)[e] * panel[(size_t)k4 * NP * 4 + e];
            float v = dequant(acc, g->zp[r], pw->qsum[o], pw->qscale[o], g->sa[r]);
            if (g->bias) v = v + g->bias[o];
            if (g->resid) v = v + g->resid[(size_t)r * g->ldo + o];
            g->out[(size_t)r * g->ldo + o] = v;
        }
    }
}

#ifdef I8_X86
#define MR512 12

/* acc += the four u8 x s8 products of each lane, as _mm512_dpbusd_epi32
 * does; through the builtin, GCC 12 copies every accumulator to another
 * register and back at each k step (it does not tie the accumulator to the
 * output), twice the instructions the kernel needs. */
#define DPBUSD(acc, a, b) __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b))

/* The sums of RN rows x NPN (1 or 2) panels into c0/c1: a macro, as the
 * fp32 kernels' MICRO512, so that the 24 accumulators stay in registers. */
#define DOT512(RN, NPN)                                                                                    \
    do {                                                                                                   \
        _Pragma("GCC unroll 12") for (int r = 0; r < RN; r++) c0[r] = c1[r] = _mm512_setzero_si512();      \
        for (int k4 = 0; k4 < IC4; k4++) {                                                                 \
            __m512i b0 = _mm512_loadu_si512((const void *)(p0 + (size_t)k4 * NP * 4)), b1 = b0;            \
            if (NPN == 2) b1 = _mm512_loadu_si512((const void *)(p1 + (size_t)k4 * NP * 4));               \
            _Pragma("GCC unroll 12") for (int r = 0; r < RN; r++) {                                        \
                __m512i av = _mm512_set1_epi32(*(const int32_t *)(const void *)(a + ((size_t)k4 * MR_A + r) * 4)); \
                DPBUSD(c0[r], av, b0);                                                                     \
                if (NPN == 2) DPBUSD(c1[r], av, b1);                                                       \
            }                                                                                              \
        }                                                                                                  \
    } while (0)

/* dequantise, bias, residual: rows [r0, r0 + RN) x the columns [o0, o0 + ncols)
 * (RN and NPN constants: the accumulators stay in registers) */
VNNI512 INLINE void epi512(const i8_args *g, const __m512i *c0, const __m512i *c1, int r0, int RN, int NPN, int o0,
                           int ncols) {
    const qac_packed_w *pw = g->pw;
    int n0 = ncols < NP ? ncols : NP, n1 = ncols - n0;
    __mmask16 m[2] = {(__mmask16)((1u << n0) - 1), (__mmask16)((1u << n1) - 1)};
    __m512 qs[2], bz[2];
    __m512i qsum[2];
#pragma GCC unroll 2
    for (int h = 0; h < NPN; h++) {
        qs[h] = _mm512_loadu_ps(pw->qscale + o0 + h * NP); /* padded to whole panels */
        qsum[h] = _mm512_loadu_si512((const void *)(pw->qsum + o0 + h * NP));
        bz[h] = g->bias ? _mm512_maskz_loadu_ps(m[h], g->bias + o0 + h * NP) : _mm512_setzero_ps();
    }
#pragma GCC unroll 12
    for (int r = 0; r < RN; r++) {
        __m512i zp = _mm512_set1_epi32(g->zp[r0 + r]);
        __m512 sa = _mm512_set1_ps(g->sa[r0 + r]);
#pragma GCC unroll 2
        for (int h = 0; h < NPN; h++) {
            __m512i d = _mm512_sub_epi32(h ? c1[r] : c0[r], _mm512_mullo_epi32(zp, qsum[h]));
            __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(d), qs[h]), sa);
            size_t at = (size_t)(r0 + r) * g->ldo + o0 + (size_t)h * NP;
            if (g->bias) v = _mm512_add_ps(v, bz[h]);
            if (g->resid) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m[h], g->resid + at));
            _mm512_mask_storeu_ps(g->out + at, m[h], v);
        }
    }
}

/* Into L1 ahead of the epilogue: the lines of a tile's residual (read)
 * and output (written) rows [r0, r0 + rn) x columns [o0, o0 + ncols). Their
 * rows lie a whole output row apart, which the hardware prefetchers do not
 * follow, so without this the epilogue waits on each row's lines (measured
 * on BERT-base: the residual's first add held about 8% of the tiles'
 * samples); issued before the k loop, they arrive during it. */
INLINE void tile_prefetch(const i8_args *g, int r0, int rn, int o0, int ncols) {
    for (int r = 0; r < rn; r++)
        for (int c = 0; c < ncols; c += NP) {
            size_t at = (size_t)(r0 + r) * g->ldo + o0 + c;
            /* asm: GCC 12 at -O2 drops __builtin_prefetch from loops like this one */
            if (g->resid) __asm__ volatile("prefetcht0 %0" : : "m"(g->resid[at]));
            __asm__ volatile("prefetchw %0" : : "m"(g->out[at]));
        }
}

/* rn (<= 12) rows from r0 x the columns [o0, o0 + ncols), ncols <= 32 */
VNNI512 static void tile512(const i8_args *g, int r0, int rn, int o0, int ncols) {
    int IC4 = ic4_of(g->pw->IC);
    const int8_t *p0 = g->pw->pq + (size_t)(o0 / NP) * IC4 * NP * 4, *p1 = p0 + (size_t)IC4 * NP * 4;
    const uint8_t *a = A_AT(g, r0, 0); /* r0: a multiple of MR_A */
    tile_prefetch(g, r0, rn, o0, ncols);
    __m512i c0[MR512], c1[MR512];
    switch (rn * 2 + (ncols > NP)) {
#define CASE(R)                                                          \
    case R * 2: DOT512(R, 1); epi512(g, c0, c1, r0, R, 1, o0, ncols); break; \
    case R * 2 + 1: DOT512(R, 2); epi512(g, c0, c1, r0, R, 2, o0, ncols); break;
        CASE(12) CASE(11) CASE(10) CASE(9) CASE(8) CASE(7) CASE(6) CASE(5) CASE(4) CASE(3) CASE(2) CASE(1)
#undef CASE
    }
}
#undef DOT512

VNNI512 static void rows_avx512(const i8_args *g) {
    int OC = g->pw->OC;
    for (int o0 = 0; o0 < OC; o0 += 2 * NP) {
        int ncols = OC - o0 < 2 * NP ? OC - o0 : 2 * NP;
        for (int r = 0; r < g->n; r += MR512) tile512(g, r, g->n - r < MR512 ? g->n - r : MR512, o0, ncols);
    }
}
#endif

#ifdef I8_AVXVNNI
#define MR256 6
/* the VEX form (AVX-VNNI), in asm for the reason given at DPBUSD */
#define DPBUSD_VEX(acc, a, b) __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(a), "x"(b))

/* RN rows x one panel (16 columns, two ymm) from column o0, ncols valid */
VNNI256 INLINE void tile256(const i8_args *g, int r0, int RN, int o0, int ncols) {
    const qac_packed_w *pw = g->pw;
    int IC4 = ic4_of(pw->IC);
    const int8_t *p = pw->pq + (size_t)(o0 / NP) * IC4 * NP * 4;
    const uint8_t *a = A_AT(g, r0, 0); /* r0: a multiple of MR256, its rows within one group */
    __m256i c0[MR256], c1[MR256];
    tile_prefetch(g, r0, RN, o0, ncols);
#pragma GCC unroll 6
    for (int r = 0; r < RN; r++) c0[r] = c1[r] = _mm256_setzero_si256();
    for (int k4 = 0; k4 < IC4; k4++) {
        __m256i b0 = _mm256_loadu_si256((const __m256i *)(const void *)(p + (size_t)k4 * NP * 4));
        __m256i b1 = _mm256_loadu_si256((const __m256i *)(const void *)(p + (size_t)k4 * NP * 4 + 32));
#pragma GCC unroll 6
        for (int r = 0; r < RN; r++) {
            int32_t quad;
            memcpy(&quad, a + ((size_t)k4 * MR_A + r) * 4, sizeof quad);
            __m256i av = _mm256_set1_epi32(quad);
            DPBUSD_VEX(c0[r], av, b0);
            DPBUSD_VEX(c1[r], av, b1);
        }
    }
    __m256 qs0 = _mm256_loadu_ps(pw->qscale + o0), qs1 = _mm256_loadu_ps(pw->qscale + o0 + 8);
    __m256i qm0 = _mm256_loadu_si256((const __m256i *)(const void *)(pw->qsum + o0));
    __m256i qm1 = _mm256_loadu_si256((const __m256i *)(const void *)(pw->qsum + o0 + 8));
#pragma GCC unroll 6
    for (int r = 0; r < RN; r++) {
        __m256i zp = _mm256_set1_epi32(g->zp[r0 + r]);
        __m256 sa = _mm256_set1_ps(g->sa[r0 + r]);
        float v[NP];
        _mm256_storeu_ps(v, _mm256_mul_ps(
                                _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(c0[r], _mm256_mullo_epi32(zp, qm0))), qs0), sa));
        _mm256_storeu_ps(v + 8, _mm256_mul_ps(
                                    _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(c1[r], _mm256_mullo_epi32(zp, qm1))), qs1), sa));
        float *o = g->out + (size_t)(r0 + r) * g->ldo + o0;
        const float *res = g->resid ? g->resid + (size_t)(r0 + r) * g->ldo + o0 : NULL;
        for (int c = 0; c < ncols; c++) {
            float x = v[c];
            if (g->bias) x = x + g->bias[o0 + c];
            if (res) x = x + res[c];
            o[c] = x;
        }
    }
}

VNNI256 static void rows_avx2(const i8_args *g) {
    int OC = g->pw->OC;
    for (int o0 = 0; o0 < OC; o0 += NP) {
        int ncols = OC - o0 < NP ? OC - o0 : NP;
        for (int r = 0; r < g->n; r += MR256) {
            switch (g->n - r < MR256 ? g->n - r : MR256) {
            case 6: tile256(g, r, 6, o0, ncols); break;
            case 5: tile256(g, r, 5, o0, ncols); break;
            case 4: tile256(g, r, 4, o0, ncols); break;
            case 3: tile256(g, r, 3, o0, ncols); break;
            case 2: tile256(g, r, 2, o0, ncols); break;
            default: tile256(g, r, 1, o0, ncols); break;
            }
        }
    }
}
#endif

typedef void (*rows_i8_fn)(const i8_args *g);

static rows_i8_fn pick_rows(void) {
    switch (qac_cpu_vnni()) {
#ifdef I8_X86
    case 512: return rows_avx512;
#endif
#ifdef I8_AVXVNNI
    case 256: return rows_avx2;
#endif
    default: return rows_portable;
    }
}

/* rows [0, n) of inp quantised into a (the kernels' groups of MR_A rows,
 * from row 0 of a), their scales into sa and zero points into zp */
static void quantize_into(uint8_t *a, float *sa, int32_t *zp, const float *inp, int IC, int n) {
    quant_row_fns q = pick_quant_row();
    for (int r0 = 0; r0 < n; r0 += MR_A) { /* a group of rows: their ranges, then their bytes */
        int g = n - r0 < MR_A ? n - r0 : MR_A;
        float lo[MR_A], hi[MR_A];
        for (int j = 0; j < g; j++) {
            int r = r0 + j;
            if (r + 1 < n) /* the next row's lines, on their way while this one is read */
                for (int k = 0; k < IC; k += 16) __builtin_prefetch(inp + (size_t)(r + 1) * IC + k);
            q.range(&lo[j], &hi[j], inp + (size_t)r * IC, IC);
        }
        quant_rows_ranged(&q, a, sa, zp, inp + (size_t)r0 * IC, IC, r0, g, lo, hi);
    }
}

void qac_gemm_int8_rows(float *out, const float *inp, const qac_packed_w *pw, const float *bias, const float *resid,
                        int n, void *scratch) {
    int IC = pw->IC, IC4 = ic4_of(IC);
    uint8_t *a = scratch;
    size_t groups = (size_t)(n + MR_A - 1) / MR_A;
    float *sa = (float *)(void *)(a + (groups * MR_A * IC4 * 4 + 63) / 64 * 64);
    int32_t *zp = (int32_t *)(void *)(sa + n);
    quantize_into(a, sa, zp, inp, IC, n);
    i8_args g = {out, pw->OC, a, IC4, sa, zp, pw, bias, resid, n};
    pick_rows()(&g);
}

/* ---- rows quantised ahead of the product (gemm.h: qac_gemm_q8) ----
 * One buffer for N rows: the groups of MR_A rows of the kernels (as the
 * scratch of qac_gemm_int8_rows, from row 0), padded to a cache line, then
 * the N row scales, then the N zero points. */
static size_t q8_rows_bytes(int N, int IC) {
    return ((size_t)(N + MR_A - 1) / MR_A * MR_A * ic4_of(IC) * 4 + 63) / 64 * 64;
}

size_t qac_gemm_q8_bytes(int N, int IC) {
    return q8_rows_bytes(N, IC) + (size_t)N * (sizeof(float) + sizeof(int32_t));
}

void qac_gemm_q8_quantize(void *q8, int N, int IC, const float *x, int r0, int r1) {
    qac_gemm_q8_quantize_rows(q8, N, IC, x + (size_t)r0 * IC, r0, r1);
}

/* row r's quantised bytes, scale and zero point in a q8 buffer of N rows,
 * from the row's range */
static void q8_put_row(const quant_row_fns *q, void *q8, int N, int IC, const float *row, int r, float lo, float hi) {
    uint8_t *a = q8;
    float *sa = (float *)(void *)(a + q8_rows_bytes(N, IC));
    int32_t *zp = (int32_t *)(void *)(sa + N);
    quant_row_ranged(q, a + ((size_t)(r / MR_A) * ic4_of(IC) * MR_A + (size_t)(r % MR_A)) * 4, MR_A * 4, sa + r,
                     zp + r, row, IC, lo, hi);
}

void qac_gemm_q8_quantize_rows(void *q8, int N, int IC, const float *rows, int r0, int r1) {
    quant_row_fns q = pick_quant_row();
    for (int r = r0; r < r1; r++) {
        float lo, hi;
        q.range(&lo, &hi, rows + (size_t)(r - r0) * IC, IC);
        q8_put_row(&q, q8, N, IC, rows + (size_t)(r - r0) * IC, r, lo, hi);
    }
}

void qac_gemm_q8_quantize_ranged(void *q8, int N, int IC, const float *rows, int r, int n, const float *lo,
                                 const float *hi) {
    quant_row_fns q = pick_quant_row();
    uint8_t *a = q8;
    float *sa = (float *)(void *)(a + q8_rows_bytes(N, IC));
    quant_rows_ranged(&q, a, sa, (int32_t *)(void *)(sa + N), rows, IC, r, n, lo, hi);
}

int qac_gemm_int8_group_rows(void) { return MR_A; }

/* rows [r0, r0 + n) x columns [c0, c1) of a q8 buffer of N rows times pw
 * (c0 a multiple of NP; out, bias and resid at column c0, rows ldo apart) */
static void q8_product(float *out, int ldo, const void *q8, int N, int r0, int n, const qac_packed_w *pw, int c0,
                       int c1, const float *bias, const float *resid) {
    int IC4 = ic4_of(pw->IC);
    const uint8_t *a = q8;
    const float *sa = (const float *)(const void *)(a + q8_rows_bytes(N, pw->IC));
    const int32_t *zp = (const int32_t *)(const void *)(sa + N);
    qac_packed_w v = *pw; /* the columns [c0, c1): their panels, scales and sums */
    v.pq = pw->pq + (size_t)(c0 / NP) * IC4 * NP * 4;
    v.qscale = pw->qscale + c0;
    v.qsum = pw->qsum + c0;
    v.OC = c1 - c0;
    i8_args g = {out, ldo, a + (size_t)(r0 / MR_A) * IC4 * MR_A * 4, IC4, sa + r0, zp + r0, &v, bias, resid, n};
    pick_rows()(&g);
}

void qac_gemm_int8_cols_q8(float *out, int ldo, const void *q8, int N, const qac_packed_w *pw, int c0, int c1,
                           const float *bias, const float *resid) {
    q8_product(out, ldo, q8, N, 0, N, pw, c0, c1, bias, resid);
}

void qac_gemm_int8_rows_q8(float *out, const void *q8, int N, int r0, int n, const qac_packed_w *pw,
                           const float *bias, const float *resid) {
    q8_product(out, pw->OC, q8, N, r0, n, pw, 0, pw->OC, bias, resid);
}
