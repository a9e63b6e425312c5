/* out = inp W^T (+ bias) (+ resid) over packed W (see gemm.h).
 *
 * Loop nest per thread: blocks of MC rows (the block of inp stays in L2),
 * then 16-column panels of W (one panel, IC x 16, stays in L1/L2), then
 * micro-tiles: up to 6 rows x 16 columns in 12 AVX2 registers, or up to
 * 12 rows x 32 columns (two panels) in 24 AVX-512 registers. Each element
 * is a sequential FMA chain over k, so every kernel gives the same bits;
 * the tile shape only changes how many chains run side by side. */
#include "gemm.h"
#include "gemm_int8.h"
#include "qac_bf16.h"
#include "qac_cpu.h"
#include "qac_util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QAC_GEMM_X86 1
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")))
#endif

#define MR 6
#define NP QAC_GEMM_PANEL

size_t qac_gemm_packed_floats(int OC, int IC) { return (size_t)((OC + NP - 1) / NP) * (size_t)IC * NP; }

#ifdef QAC_GEMM_X86
/* r[k] = column k of the 16 x 16 block whose rows are r[0..15] */
AVX512 static inline __attribute__((always_inline)) void transpose16(__m512 r[16]) {
    __m512 t[16];
    _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) { /* pairs of rows, interleaved in each 128-bit lane */
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    _Pragma("GCC unroll 8") for (int i = 0; i < 4; i++) { /* r[4 i + m]: rows 4 i .. 4 i + 3 at column 4 l + m of lane l */
        __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    _Pragma("GCC unroll 8") for (int i = 0; i < 4; i++) { /* then whole 128-bit lanes between groups of rows */
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    }
}

/* one panel (n <= 16 rows of W, each IC long) by 16 x 16 register
 * transposes instead of one scalar store per element (attention packs a
 * head's keys this way for every sequence and layer) */
AVX512 static void pack_panel_avx512(float *dst, const float *w, int n, int IC, int ldw) {
    for (int k0 = 0; k0 < IC; k0 += NP) {
        int kn = IC - k0 < NP ? IC - k0 : NP;
        __mmask16 km = (__mmask16)((1u << kn) - 1);
        __m512 r[NP];
        _Pragma("GCC unroll 16") for (int c = 0; c < NP; c++)
            r[c] = c < n ? _mm512_maskz_loadu_ps(km, w + (size_t)c * ldw + k0) : _mm512_setzero_ps();
        transpose16(r);
        _Pragma("GCC unroll 16") for (int k = 0; k < kn; k++) _mm512_storeu_ps(dst + (size_t)(k0 + k) * NP, r[k]);
    }
}
#endif

/* Panel j holds columns [16 j, 16 j + 16) of W^T: packed[(j IC + k) 16 + c]
 * = W[16 j + c][k], zero past OC. A copy: the loops follow the source's
 * rows (contiguous reads), and the zero tail is written once per panel. */
void qac_gemm_pack_into(float *packed, const float *w, int OC, int IC, int ldw, int transposed) {
    int np = (OC + NP - 1) / NP;
#ifdef QAC_GEMM_X86
    int fast = !transposed && qac_cpu_isa() == QAC_ISA_AVX512;
#endif
    for (int j = 0; j < np; j++) {
        int o0 = j * NP, n = OC - o0 < NP ? OC - o0 : NP;
        float *dst = packed + (size_t)j * IC * NP;
#ifdef QAC_GEMM_X86
        if (fast) {
            pack_panel_avx512(dst, w + (size_t)o0 * ldw, n, IC, ldw);
            continue;
        }
#endif
        if (transposed) { /* row k of W^T holds the panel's 16 values contiguously */
            for (int k = 0; k < IC; k++) {
                memcpy(dst + (size_t)k * NP, w + (size_t)k * ldw + o0, (size_t)n * sizeof *dst);
                if (n < NP) memset(dst + (size_t)k * NP + n, 0, (size_t)(NP - n) * sizeof *dst);
            }
            continue;
        }
        if (n < NP) memset(dst, 0, (size_t)IC * NP * sizeof *dst);
        for (int c = 0; c < n; c++) {
            const float *src = w + (size_t)(o0 + c) * ldw;
            for (int k = 0; k < IC; k++) dst[(size_t)k * NP + c] = src[k];
        }
    }
}

qac_status qac_gemm_pack(qac_packed_w *pw, const float *w, int OC, int IC) {
    memset(pw, 0, sizeof *pw);
    if (OC < 1 || IC < 1) return qac_set_error(QAC_ERR_INVALID, "gemm pack: bad shape %d x %d", OC, IC);
    if (!(pw->p = qac_malloc_lines(qac_gemm_packed_floats(OC, IC) * sizeof(float))))
        return qac_set_error(QAC_ERR_NOMEM, "out of memory packing a %d x %d weight", OC, IC);
    qac_gemm_pack_into(pw->p, w, OC, IC, IC, 0);
    pw->IC = IC;
    pw->OC = OC;
    return QAC_OK;
}

void qac_gemm_packed_free(qac_packed_w *pw) {
    if (!pw) return;
    free(pw->p);
    free(pw->pb);
    free(pw->pq); /* qscale and qsum live in the same block */
    memset(pw, 0, sizeof *pw);
}

/* alpha * acc, + bias, then + resid, for rn rows x the panel's valid columns */
static inline void epilogue(float *out, int ldo, const float acc[MR][NP], int rn, int o0, int ncols, float alpha,
                            const float *bias, const float *resid) {
    for (int r = 0; r < rn; r++)
        for (int c = 0; c < ncols; c++) {
            float v = acc[r][c];
            if (alpha != 1.0f) v = v * alpha;
            if (bias) v = v + bias[o0 + c];
            if (resid) v = v + resid[(size_t)r * ldo + o0 + c];
            out[(size_t)r * ldo + o0 + c] = v;
        }
}

static void micro_portable(const float *a, int lda, int IC, int rn, const float *panel, float acc[MR][NP]) {
    for (int r = 0; r < rn; r++)
        for (int c = 0; c < NP; c++) acc[r][c] = 0.0f;
    for (int k = 0; k < IC; k++)
        for (int r = 0; r < rn; r++) {
            float av = a[(size_t)r * lda + k];
            for (int c = 0; c < NP; c++) acc[r][c] = fmaf(av, panel[(size_t)k * NP + c], acc[r][c]);
        }
}

/* the micro-tile with its epilogue: out rows [rn] x panel columns [ncols] */
static void tile_portable(float *out, int ldo, const float *a, int lda, int IC, int rn, const float *panel, int o0,
                          int ncols, float alpha, const float *bias, const float *resid) {
    float acc[MR][NP];
    micro_portable(a, lda, IC, rn, panel, acc);
    epilogue(out, ldo, acc, rn, o0, ncols, alpha, bias, resid);
}

#ifdef QAC_GEMM_X86
#define AVX2 __attribute__((target("avx2,fma")))

#define MICRO(RN)                                                                           \
    do {                                                                                    \
        __m256 c0[RN], c1[RN];                                                              \
        _Pragma("GCC unroll 6") for (int r = 0; r < RN; r++) c0[r] = c1[r] = _mm256_setzero_ps(); \
        for (int k = 0; k < IC; k++) {                                                      \
            __m256 b0 = _mm256_loadu_ps(panel + (size_t)k * NP);                             \
            __m256 b1 = _mm256_loadu_ps(panel + (size_t)k * NP + 8);                         \
            _Pragma("GCC unroll 6") for (int r = 0; r < RN; r++) {                          \
                __m256 av = _mm256_broadcast_ss(a + (size_t)r * lda + k);                    \
                c0[r] = _mm256_fmadd_ps(av, b0, c0[r]);                                     \
                c1[r] = _mm256_fmadd_ps(av, b1, c1[r]);                                     \
            }                                                                               \
        }                                                                                   \
        if (ncols == NP) {                                                                  \
            __m256 al = _mm256_set1_ps(alpha), z0 = _mm256_setzero_ps(), z1 = z0;           \
            if (bias) z0 = _mm256_loadu_ps(bias + o0), z1 = _mm256_loadu_ps(bias + o0 + 8); \
            _Pragma("GCC unroll 6") for (int r = 0; r < RN; r++) {                          \
                __m256 v0 = c0[r], v1 = c1[r];                                              \
                if (alpha != 1.0f) v0 = _mm256_mul_ps(v0, al), v1 = _mm256_mul_ps(v1, al);  \
                if (bias) v0 = _mm256_add_ps(v0, z0), v1 = _mm256_add_ps(v1, z1);           \
                if (resid) {                                                                \
                    v0 = _mm256_add_ps(v0, _mm256_loadu_ps(resid + (size_t)r * ldo + o0));  \
                    v1 = _mm256_add_ps(v1, _mm256_loadu_ps(resid + (size_t)r * ldo + o0 + 8)); \
                }                                                                           \
                _mm256_storeu_ps(out + (size_t)r * ldo + o0, v0);                           \
                _mm256_storeu_ps(out + (size_t)r * ldo + o0 + 8, v1);                       \
            }                                                                               \
        } else {                                                                            \
            float acc[MR][NP];                                                              \
            _Pragma("GCC unroll 6") for (int r = 0; r < RN; r++) {                          \
                _mm256_storeu_ps(acc[r], c0[r]);                                            \
                _mm256_storeu_ps(acc[r] + 8, c1[r]);                                        \
            }                                                                               \
            epilogue(out, ldo, (const float(*)[NP])acc, RN, o0, ncols, alpha, bias, resid); \
        }                                                                                   \
    } while (0)

AVX2 static void tile_avx2(float *out, int ldo, const float *a, int lda, int IC, int rn, const float *panel, int o0,
                           int ncols, float alpha, const float *bias, const float *resid) {
    switch (rn) {
    case 6: MICRO(6); break;
    case 5: MICRO(5); break;
    case 4: MICRO(4); break;
    case 3: MICRO(3); break;
    case 2: MICRO(2); break;
    default: MICRO(1); break;
    }
}
#undef MICRO
#endif

/* ---- bf16 mode (see gemm.h) ---- */

uint16_t qac_bf16_round(float x) { return qac_bf16_from_float(x); }

qac_status qac_gemm_pack_bf16(qac_packed_w *pw, const float *w, int OC, int IC) {
    memset(pw, 0, sizeof *pw);
    if (OC < 1 || IC < 1) return qac_set_error(QAC_ERR_INVALID, "gemm pack: bad shape %d x %d", OC, IC);
    int np = (OC + NP - 1) / NP, IC2 = (IC + 1) / 2;
    if (!(pw->pb = qac_malloc_lines((size_t)np * IC2 * NP * 2 * sizeof(uint16_t))))
        return qac_set_error(QAC_ERR_NOMEM, "out of memory packing a %d x %d weight", OC, IC);
    for (int j = 0; j < np; j++)
        for (int k2 = 0; k2 < IC2; k2++)
            for (int c = 0; c < NP; c++)
                for (int e = 0; e < 2; e++) {
                    int o = j * NP + c, k = 2 * k2 + e;
                    pw->pb[(((size_t)j * IC2 + k2) * NP + c) * 2 + e] =
                        o < OC && k < IC ? qac_bf16_round(w[(size_t)o * IC + k]) : 0;
                }
    pw->IC = IC;
    pw->OC = OC;
    return QAC_OK;
}

/* rows [0, N) x all OC columns in bf16 mode; a holds the rows in bf16, lda >= 2 IC2 */
typedef void (*rows_bf16_fn)(float *out, int ldo, const uint16_t *a, int lda, const uint16_t *packed, int IC2,
                             int OC, int N, float alpha, const float *bias, const float *resid);

static void rows_bf16_portable(float *out, int ldo, const uint16_t *a, int lda, const uint16_t *packed, int IC2,
                               int OC, int N, float alpha, const float *bias, const float *resid) {
    int np = (OC + NP - 1) / NP;
    for (int j = 0; j < np; j++) {
        const uint16_t *panel = packed + (size_t)j * IC2 * NP * 2;
        int o0 = j * NP, ncols = OC - o0 < NP ? OC - o0 : NP;
        for (int r0 = 0; r0 < N; r0 += MR) {
            int rn = N - r0 < MR ? N - r0 : MR;
            float acc[MR][NP] = {{0}};
            for (int k2 = 0; k2 < IC2; k2++)
                for (int r = 0; r < rn; r++) {
                    const uint16_t *ar = a + (size_t)(r0 + r) * lda + 2 * (size_t)k2;
                    float a0 = qac_bf16_in(ar[0]), a1 = qac_bf16_in(ar[1]);
                    for (int c = 0; c < NP; c++) {
                        const uint16_t *bc = panel + ((size_t)k2 * NP + c) * 2;
                        acc[r][c] = qac_bf16_step(a1, qac_bf16_in(bc[1]), acc[r][c]);
                        acc[r][c] = qac_bf16_step(a0, qac_bf16_in(bc[0]), acc[r][c]);
                    }
                }
            epilogue(out + (size_t)r0 * ldo, ldo, (const float(*)[NP])acc, rn, o0, ncols, alpha, bias,
                     resid ? resid + (size_t)r0 * ldo : NULL);
        }
    }
}

/* rows [0, N) x all OC columns of one call, on one thread */
typedef void (*rows_fn)(float *out, int ldo, const float *a, int lda, const float *packed, int IC, int OC, int N,
                        float alpha, const float *bias, const float *resid);

#define ROWS_BY_TILES(NAME, TILE)                                                                              \
    static void NAME(float *out, int ldo, const float *a, int lda, const float *packed, int IC, int OC, int N, \
                     float alpha, const float *bias, const float *resid) {                                     \
        int np = (OC + NP - 1) / NP;                                                                           \
        for (int j = 0; j < np; j++) {                                                                         \
            int o0 = j * NP, ncols = OC - o0 < NP ? OC - o0 : NP;                                              \
            for (int r = 0; r < N; r += MR) {                                                                  \
                int rn = N - r < MR ? N - r : MR;                                                              \
                TILE(out + (size_t)r * ldo, ldo, a + (size_t)r * lda, lda, IC, rn, packed + (size_t)j * IC * NP, \
                     o0, ncols, alpha, bias, resid ? resid + (size_t)r * ldo : NULL);                          \
            }                                                                                                  \
        }                                                                                                      \
    }
ROWS_BY_TILES(rows_portable, tile_portable)
#ifdef QAC_GEMM_X86
ROWS_BY_TILES(rows_avx2, tile_avx2)

#define MR512 12

/* alpha, bias, then residual on the accumulators c0/c1, stored under masks m0/m1 */
#define EPI512(RN, NPN)                                                                                    \
    do {                                                                                                   \
        __m512 al = _mm512_set1_ps(alpha), z0 = _mm512_maskz_loadu_ps(m0, bias ? bias + o0 : zeros),       \
               z1 = _mm512_maskz_loadu_ps(m1, bias ? bias + o0 + NP : zeros);                              \
        _Pragma("GCC unroll 12") for (int r = 0; r < RN; r++) {                                            \
            _Pragma("GCC unroll 2") for (int h = 0; h < NPN; h++) {                                        \
                __m512 v = h ? c1[r] : c0[r];                                                              \
                __mmask16 m = h ? m1 : m0;                                                                 \
                size_t at = (size_t)r * ldo + o0 + (size_t)h * NP;                                         \
                if (alpha != 1.0f) v = _mm512_mul_ps(v, al);                                               \
                if (bias) v = _mm512_add_ps(v, h ? z1 : z0);                                               \
                if (resid) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, resid + at));                     \
                _mm512_mask_storeu_ps(out + at, m, v);                                                     \
            }                                                                                              \
        }                                                                                                  \
    } while (0)

/* RN rows x NPN panels (1 or 2); partial panels through lane masks. LOADB(h, k)
 * reads panel h's 16 values at step k. */
#define MICRO512(RN, NPN, LOADB)                                                                           \
    do {                                                                                                   \
        __m512 c0[RN], c1[RN];                                                                             \
        _Pragma("GCC unroll 12") for (int r = 0; r < RN; r++) c0[r] = c1[r] = _mm512_setzero_ps();         \
        for (int k = 0; k < IC; k++) {                                                                     \
            __m512 b0 = LOADB(0, k), b1 = b0;                                                              \
            if (NPN == 2) b1 = LOADB(1, k);                                                                \
            _Pragma("GCC unroll 12") for (int r = 0; r < RN; r++) {                                        \
                __m512 av = _mm512_set1_ps(a[(size_t)r * lda + k]);                                        \
                c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);                                                    \
                if (NPN == 2) c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);                                      \
            }                                                                                              \
        }                                                                                                  \
        EPI512(RN, NPN);                                                                                   \
    } while (0)

#define TILE_CASES(LOADB)                                                                                  \
    switch (rn * 2 + npn - 1) {                                                                            \
        CASE(12, LOADB) CASE(11, LOADB) CASE(10, LOADB) CASE(9, LOADB) CASE(8, LOADB) CASE(7, LOADB)       \
        CASE(6, LOADB) CASE(5, LOADB) CASE(4, LOADB) CASE(3, LOADB) CASE(2, LOADB) CASE(1, LOADB)          \
    }
#define CASE(R, LOADB)                       \
    case R * 2: MICRO512(R, 1, LOADB); break; \
    case R * 2 + 1: MICRO512(R, 2, LOADB); break;

/* rn (<= 12) rows x the columns [o0, o0 + ncols), ncols <= 32, of panels j and j + 1 */
AVX512 static void tile_avx512(float *out, int ldo, const float *a, int lda, int IC, int rn, const float *panel,
                               int o0, int ncols, float alpha, const float *bias, const float *resid) {
    static const float zeros[NP] = {0};
    int n0 = ncols < NP ? ncols : NP, n1 = ncols - n0;
    __mmask16 m0 = (__mmask16)((1u << n0) - 1), m1 = (__mmask16)((1u << n1) - 1);
    int npn = n1 > 0 ? 2 : 1;
    const float *p0 = panel, *p1 = panel + (size_t)IC * NP;
#define PACKED(h, k) _mm512_loadu_ps((h ? p1 : p0) + (size_t)(k) * NP)
    TILE_CASES(PACKED)
#undef PACKED
}

/* the same with B [IC, >= o0 + ncols] read in place (row stride ldb): the
 * panel's 16 columns of row k are contiguous, so no packing is needed */
AVX512 static void tile_b_avx512(float *out, int ldo, const float *a, int lda, int IC, int rn, const float *b,
                                 int ldb, int o0, int ncols, float alpha) {
    static const float zeros[NP] = {0};
    const float *bias = NULL, *resid = NULL;
    int n0 = ncols < NP ? ncols : NP, n1 = ncols - n0;
    __mmask16 m0 = (__mmask16)((1u << n0) - 1), m1 = (__mmask16)((1u << n1) - 1);
    int npn = n1 > 0 ? 2 : 1;
    const float *p0 = b + o0, *p1 = p0 + NP;
#define INPLACE(h, k) _mm512_maskz_loadu_ps(h ? m1 : m0, (h ? p1 : p0) + (size_t)(k) * ldb)
    TILE_CASES(INPLACE)
#undef INPLACE
}
#undef CASE
#undef TILE_CASES
#undef MICRO512

AVX512 static void rows_avx512(float *out, int ldo, const float *a, int lda, const float *packed, int IC, int OC,
                               int N, float alpha, const float *bias, const float *resid) {
    for (int o0 = 0; o0 < OC; o0 += 2 * NP) {
        int ncols = OC - o0 < 2 * NP ? OC - o0 : 2 * NP;
        const float *panel = packed + (size_t)(o0 / NP) * IC * NP;
        for (int r = 0; r < N; r += MR512) {
            int rn = N - r < MR512 ? N - r : MR512;
            tile_avx512(out + (size_t)r * ldo, ldo, a + (size_t)r * lda, lda, IC, rn, panel, o0, ncols, alpha, bias,
                        resid ? resid + (size_t)r * ldo : NULL);
        }
    }
}

AVX512 static void rows_b_avx512(float *out, int ldo, const float *a, int lda, const float *b, int ldb, int IC, int OC,
                                 int N, float alpha) {
    for (int o0 = 0; o0 < OC; o0 += 2 * NP) {
        int ncols = OC - o0 < 2 * NP ? OC - o0 : 2 * NP;
        for (int r = 0; r < N; r += MR512) {
            int rn = N - r < MR512 ? N - r : MR512;
            tile_b_avx512(out + (size_t)r * ldo, ldo, a + (size_t)r * lda, lda, IC, rn, b, ldb, o0, ncols, alpha);
        }
    }
}

/* bf16 mode: RN rows x NPN panels, one vdpbf16ps per k pair */
#define AVX512BF __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx2,fma")))
#define MICROBF(RN, NPN)                                                                                   \
    do {                                                                                                   \
        __m512 c0[RN], c1[RN];                                                                             \
        _Pragma("GCC unroll 12") for (int r = 0; r < RN; r++) c0[r] = c1[r] = _mm512_setzero_ps();         \
        const uint16_t *p0 = panel, *p1 = panel + (size_t)IC2 * NP * 2;                                    \
        for (int k2 = 0; k2 < IC2; k2++) {                                                                 \
            __m512bh b0 = (__m512bh)_mm512_loadu_si512(p0 + (size_t)k2 * NP * 2), b1 = b0;                 \
            if (NPN == 2) b1 = (__m512bh)_mm512_loadu_si512(p1 + (size_t)k2 * NP * 2);                     \
            _Pragma("GCC unroll 12") for (int r = 0; r < RN; r++) {                                        \
                int32_t pair;                                                                              \
                memcpy(&pair, a + (size_t)r * lda + 2 * (size_t)k2, sizeof pair);                          \
                __m512bh av = (__m512bh)_mm512_set1_epi32(pair);                                           \
                c0[r] = _mm512_dpbf16_ps(c0[r], av, b0);                                                   \
                if (NPN == 2) c1[r] = _mm512_dpbf16_ps(c1[r], av, b1);                                     \
            }                                                                                              \
        }                                                                                                  \
        EPI512(RN, NPN);                                                                                   \
    } while (0)

AVX512BF static void tile_bf16_avx512(float *out, int ldo, const uint16_t *a, int lda, int IC2, int rn,
                                      const uint16_t *panel, int o0, int ncols, float alpha, const float *bias,
                                      const float *resid) {
    static const float zeros[NP] = {0};
    int n0 = ncols < NP ? ncols : NP, n1 = ncols - n0;
    __mmask16 m0 = (__mmask16)((1u << n0) - 1), m1 = (__mmask16)((1u << n1) - 1);
    int npn = n1 > 0 ? 2 : 1;
    switch (rn * 2 + npn - 1) {
#define CASE(R) \
    case R * 2: MICROBF(R, 1); break; \
    case R * 2 + 1: MICROBF(R, 2); break;
        CASE(12) CASE(11) CASE(10) CASE(9) CASE(8) CASE(7) CASE(6) CASE(5) CASE(4) CASE(3) CASE(2) CASE(1)
#undef CASE
    }
}
#undef MICROBF

AVX512BF static void rows_bf16_avx512(float *out, int ldo, const uint16_t *a, int lda, const uint16_t *packed,
                                      int IC2, int OC, int N, float alpha, const float *bias, const float *resid) {
    for (int o0 = 0; o0 < OC; o0 += 2 * NP) {
        int ncols = OC - o0 < 2 * NP ? OC - o0 : 2 * NP;
        const uint16_t *panel = packed + (size_t)(o0 / NP) * IC2 * NP * 2;
        for (int r = 0; r < N; r += MR512) {
            int rn = N - r < MR512 ? N - r : MR512;
            tile_bf16_avx512(out + (size_t)r * ldo, ldo, a + (size_t)r * lda, lda, IC2, rn, panel, o0, ncols, alpha,
                             bias, resid ? resid + (size_t)r * ldo : NULL);
        }
    }
}
#endif

static rows_fn pick_rows(void) {
#ifdef QAC_GEMM_X86
    switch (qac_cpu_isa()) {
    case QAC_ISA_AVX512: return rows_avx512;
    case QAC_ISA_AVX2: return rows_avx2;
    default: break;
    }
#endif
    return rows_portable;
}

/* A row rounded to bf16 as qac_bf16_round does it, 16 at a time on AVX-512
 * (the same integer formula, so the same bits). */
typedef void (*round_row_fn)(uint16_t *d, const float *x, int n);

static void round_row_portable(uint16_t *d, const float *x, int n) {
    for (int k = 0; k < n; k++) d[k] = qac_bf16_from_float(x[k]);
}

#ifdef QAC_GEMM_X86
AVX512 static void round_row_avx512(uint16_t *d, const float *x, int n) {
    const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
    const __m512i magnitude = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    const __m512i quiet = _mm512_set1_epi32(0x40);
    int k = 0;
    for (; k + 16 <= n; k += 16) {
        __m512i u = _mm512_loadu_si512((const void *)(x + k)), hi = _mm512_srli_epi32(u, 16);
        __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, magnitude), inf);
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, bias), _mm512_and_si512(hi, one)), 16);
        r = _mm512_mask_or_epi32(r, nan, hi, quiet);
        _mm256_storeu_si256((__m256i *)(void *)(d + k), _mm512_cvtepi32_epi16(r));
    }
    round_row_portable(d + k, x + k, n - k);
}

/* With AVX512_BF16, vcvtneps2bf16 rounds 32 at a time. It differs from the
 * integer formula only on fp32 subnormals (it reads them as zero, the
 * formula keeps a bf16 subnormal), and vdpbf16ps reads a bf16 subnormal as
 * zero: the products, and so the outputs, are the same bits. */
AVX512BF static void round_row_cvt(uint16_t *d, const float *x, int n) {
    int k = 0;
    for (; k + 32 <= n; k += 32) {
        __m512bh r = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + k + 16), _mm512_loadu_ps(x + k));
        _mm512_storeu_si512((void *)(d + k), (__m512i)r);
    }
    round_row_portable(d + k, x + k, n - k);
}
/* x * scale (one float multiply, skipped at 1) rounded as round_row_cvt */
AVX512BF static void round_scaled_cvt(uint16_t *d, const float *x, int n, float scale) {
    __m512 s = _mm512_set1_ps(scale);
    int k = 0;
    for (; k + 32 <= n; k += 32) {
        __m512 a = _mm512_loadu_ps(x + k), b = _mm512_loadu_ps(x + k + 16);
        if (scale != 1.0f) a = _mm512_mul_ps(a, s), b = _mm512_mul_ps(b, s);
        _mm512_storeu_si512((void *)(d + k), (__m512i)_mm512_cvtne2ps_pbh(b, a));
    }
    if (k < n) {
        int r = n - k;
        __mmask16 m0 = (__mmask16)(r >= 16 ? 0xffff : (1u << r) - 1), m1 = (__mmask16)(r <= 16 ? 0 : (1u << (r - 16)) - 1);
        __m512 a = _mm512_maskz_loadu_ps(m0, x + k), b = _mm512_maskz_loadu_ps(m1, x + k + 16);
        if (scale != 1.0f) a = _mm512_mul_ps(a, s), b = _mm512_mul_ps(b, s);
        _mm512_mask_storeu_epi16((void *)(d + k), (__mmask32)(((uint64_t)1 << r) - 1), (__m512i)_mm512_cvtne2ps_pbh(b, a));
    }
}
#endif

static round_row_fn pick_round_row(void) {
#ifdef QAC_GEMM_X86
    if (qac_cpu_bf16()) return round_row_cvt; /* only with rows_bf16_avx512 */
    if (qac_cpu_isa() == QAC_ISA_AVX512) return round_row_avx512;
#endif
    return round_row_portable;
}

static rows_bf16_fn pick_rows_bf16(void) {
#ifdef QAC_GEMM_X86
    if (qac_cpu_bf16()) return rows_bf16_avx512;
#endif
    return rows_bf16_portable;
}

/* rows per tile of a block: a multiple of both kernels' tile heights */
#define MBLK 12

typedef struct gemm_ctx {
    float *out;
    const float *inp, *bias, *resid;
    const qac_packed_w *pw;
    int N, mc;          /* rows; the most rows of a block */
    int64_t tiles, nb;  /* MBLK-row tiles of N, blocks */
    rows_fn rows;
    rows_bf16_fn rows_bf16;
    round_row_fn round_row;
    uint16_t *abuf; /* bf16 mode: per thread abuf_stride elements, the block's rows in bf16 */
    size_t abuf_stride;
    unsigned char *qbuf; /* int8 mode: per thread qbuf_stride bytes, the block's rows quantised */
    size_t qbuf_stride;
    qac_gemm_post_fn post;
    void *post_ctx;
    const void *q8; /* int8 mode, rows quantised ahead (qac_gemm_q8) */
    qac_gemm_post_at_fn post_at; /* qac_gemm_then_local */
    size_t local_stride; /* > 0: each block's rows at out + tid local_stride */
    int cols; /* split_cols: blocks of columns over all N rows (from the rows prepared in q8 or abuf) */
} gemm_ctx;

/* rows [r0, r1) of inp rounded to bf16 at ab, each zero-padded to even length */
static void round_rows(const gemm_ctx *g, uint16_t *ab, int r0, int r1) {
    int IC = g->pw->IC, IC2 = (IC + 1) / 2;
    for (int r = r0; r < r1; r++) {
        uint16_t *d = ab + (size_t)(r - r0) * IC2 * 2;
        g->round_row(d, g->inp + (size_t)r * IC, IC);
        if (IC & 1) d[IC] = 0;
    }
}

/* Block blk of the column split: all rows x whole pairs of panels */
static void gemm_cols(const gemm_ctx *g, int64_t blk) {
    int IC = g->pw->IC, OC = g->pw->OC, units = (OC + 2 * NP - 1) / (2 * NP);
    int c0 = (int)(blk * units / g->nb) * 2 * NP, c1 = (int)((blk + 1) * units / g->nb) * 2 * NP;
    if (c1 > OC) c1 = OC;
    const float *bias = g->bias ? g->bias + c0 : NULL, *resid = g->resid ? g->resid + c0 : NULL;
    if (g->q8) {
        qac_gemm_int8_cols_q8(g->out + c0, OC, g->q8, g->N, g->pw, c0, c1, bias, resid);
    } else if (g->abuf) {
        int IC2 = (IC + 1) / 2;
        g->rows_bf16(g->out + c0, OC, g->abuf, IC2 * 2, g->pw->pb + (size_t)(c0 / NP) * IC2 * NP * 2, IC2, c1 - c0,
                     g->N, 1.0f, bias, resid);
    } else {
        g->rows(g->out + c0, OC, g->inp, IC, g->pw->p + (size_t)(c0 / NP) * IC * NP, IC, c1 - c0, g->N, 1.0f, bias,
                resid);
    }
}

static void gemm_task(void *vctx, int64_t begin, int64_t end, int tid) {
    const gemm_ctx *g = vctx;
    int IC = g->pw->IC, OC = g->pw->OC;
    for (int64_t blk = begin; blk < end; blk++) {
        if (g->cols) {
            gemm_cols(g, blk);
            continue;
        }
        /* block blk: tiles [blk tiles / nb, (blk + 1) tiles / nb) */
        int r0 = (int)(blk * g->tiles / g->nb) * MBLK, r1 = (int)((blk + 1) * g->tiles / g->nb) * MBLK;
        if (r1 > g->N) r1 = g->N;
        float *out = g->local_stride ? g->out + (size_t)tid * g->local_stride : g->out + (size_t)r0 * OC;
        if (g->q8) {
            qac_gemm_int8_rows_q8(out, g->q8, g->N, r0, r1 - r0, g->pw, g->bias,
                                  g->resid ? g->resid + (size_t)r0 * OC : NULL);
        } else if (g->qbuf) {
            qac_gemm_int8_rows(out, g->inp + (size_t)r0 * IC, g->pw, g->bias,
                               g->resid ? g->resid + (size_t)r0 * OC : NULL, r1 - r0, g->qbuf + (size_t)tid * g->qbuf_stride);
        } else if (g->abuf) {
            int IC2 = (IC + 1) / 2;
            uint16_t *ab = g->abuf + (size_t)tid * g->abuf_stride;
            round_rows(g, ab, r0, r1);
            g->rows_bf16(out, OC, ab, IC2 * 2, g->pw->pb, IC2, OC, r1 - r0, 1.0f, g->bias,
                         g->resid ? g->resid + (size_t)r0 * OC : NULL);
        } else
            g->rows(out, OC, g->inp + (size_t)r0 * IC, IC, g->pw->p, IC, OC, r1 - r0, 1.0f,
                    g->bias, g->resid ? g->resid + (size_t)r0 * OC : NULL);
        if (g->post) g->post(g->post_ctx, r0, r1);
        if (g->post_at) g->post_at(g->post_ctx, r0, r1, out, tid);
    }
}

qac_status qac_gemm(float *out, const float *inp, const qac_packed_w *pw, const float *bias, const float *resid,
                    int N, void *scratch, qac_pool *pool) {
    return qac_gemm_then(out, inp, pw, bias, resid, N, scratch, pool, NULL, NULL);
}

/* The most rows of a block: a block of inp fits in about 128 KiB of L2; in
 * int8 mode, as bytes: four times the rows, so that each panel of weights
 * (from L3 when the matrix outgrows L2: BERT-base's FFN) serves that many
 * more rows. The blocks qac_gemm_then makes never hold more (see there). */
static int block_rows(int IC, int int8) {
    int mc = (int8 ? 131072 : 32768) / (IC > 0 ? IC : 1) / MBLK * MBLK;
    return mc < MBLK ? MBLK : mc;
}

/* bf16 rows of one thread, in uint16 elements, a whole number of cache lines */
static size_t bf16_rows_stride(int IC) {
    size_t n = (size_t)block_rows(IC, 0) * ((IC + 1) / 2) * 2;
    return (n + 31) & ~(size_t)31;
}

/* int8 rows (and their scales) of one thread, in bytes, whole cache lines */
static size_t int8_rows_stride(int IC) { return (qac_gemm_int8_scratch(block_rows(IC, 1), IC) + 63) & ~(size_t)63; }

size_t qac_gemm_scratch_bytes(int IC, int nthreads) {
    size_t b = bf16_rows_stride(IC) * sizeof(uint16_t), q = int8_rows_stride(IC);
    return (b > q ? b : q) * (size_t)(nthreads > 0 ? nthreads : 1);
}

/* the blocks of a call over N rows: see qac_gemm_then */
static void split_blocks(gemm_ctx *g, int IC, int int8, int N, int nt) {
    int mc = block_rows(IC, int8);
    /* blocks: a multiple of the threads, each a whole number of tiles, their
     * sizes within one tile of each other, so a short batch (a few queries)
     * keeps every thread busy for the same time. The split never changes a
     * result: each output element is one FMA chain over k. A block never
     * outgrows block_rows: with q = ceil(N / mc) blocks at least, q * mc >= N
     * > (tiles - 1) * MBLK, so ceil(tiles / q) tiles of MBLK rows <= mc. */
    int64_t tiles = (N + MBLK - 1) / MBLK, nb = (N + mc - 1) / mc;
    nb = (nb + nt - 1) / nt * nt;
    if (nb > tiles) nb = tiles;
    g->mc = (int)((tiles + nb - 1) / nb) * MBLK;
    g->tiles = tiles;
    g->nb = nb;
}

/* A short batch (fewer than 4 tiles of rows a thread: a few queries) splits
 * the columns instead, in whole pairs of panels, 4 blocks a thread: split
 * by rows, 32 rows on 2 threads were 12 and 20 (the tile's 12 rows), and
 * up to 12 rows ran on one thread; by columns each thread takes an equal
 * share, and reads only its share of the weights. The rows are made ready
 * once, before the blocks (quantised, or rounded to bf16, into the
 * scratch: only where all N fit). No result changes: each output element
 * is the same chain over k. */
static int split_cols(gemm_ctx *g, int N, int nt) {
    const qac_packed_w *pw = g->pw;
    int64_t tiles = (N + MBLK - 1) / MBLK, units = (pw->OC + 2 * NP - 1) / (2 * NP);
    if (nt < 2 || tiles >= 4 * nt || units < 2 * nt) return 0;
    size_t room = qac_gemm_scratch_bytes(pw->IC, nt);
    if (pw->pq && !g->q8 && qac_gemm_q8_bytes(N, pw->IC) > room) return 0;
    if (pw->pb && (size_t)N * ((pw->IC + 1) / 2) * 2 * sizeof(uint16_t) > room) return 0;
    g->cols = 1;
    g->nb = units < 4 * nt ? units : 4 * nt;
    return 1;
}

static qac_status gemm_run(gemm_ctx *gp, void *scratch, qac_pool *pool);

qac_status qac_gemm_then(float *out, const float *inp, const qac_packed_w *pw, const float *bias, const float *resid,
                         int N, void *scratch, qac_pool *pool, qac_gemm_post_fn post, void *post_ctx) {
    if (N <= 0) return QAC_OK;
    gemm_ctx g = {out, inp, bias, resid, pw, N, 0, 0, 0, pick_rows(), pick_rows_bf16(), pick_round_row(), NULL,
                  bf16_rows_stride(pw->IC), NULL, int8_rows_stride(pw->IC), post, post_ctx, NULL, NULL, 0, 0};
    if (!split_cols(&g, N, qac_pool_size(pool))) split_blocks(&g, pw->IC, pw->pq != NULL, N, qac_pool_size(pool));
    return gemm_run(&g, scratch, pool);
}

qac_status qac_gemm_then_local(float *out, const float *inp, const qac_packed_w *pw, const float *bias, int N,
                               void *scratch, qac_pool *pool, qac_gemm_post_at_fn post_at, void *post_ctx) {
    if (N <= 0) return QAC_OK;
    int nt = qac_pool_size(pool), OC = pw->OC;
    gemm_ctx g = {out, inp, bias, NULL, pw, N, 0, 0, 0, pick_rows(), pick_rows_bf16(), pick_round_row(), NULL,
                  bf16_rows_stride(pw->IC), NULL, int8_rows_stride(pw->IC), NULL, post_ctx, NULL, post_at, 0, 0};
    if (split_cols(&g, N, nt)) return gemm_run(&g, scratch, pool); /* the rows in their places */
    split_blocks(&g, pw->IC, pw->pq != NULL, N, nt);
    size_t part = (size_t)(N / nt) * OC / 16 * 16; /* a thread's part of out, whole cache lines */
    if (part >= (size_t)g.mc * OC) g.local_stride = part;
    return gemm_run(&g, scratch, pool);
}

static void post_task(void *vctx, int64_t b, int64_t e, int tid) {
    const gemm_ctx *g = vctx;
    if (g->post) g->post(g->post_ctx, (int)b, (int)e);
    if (g->post_at) g->post_at(g->post_ctx, (int)b, (int)e, g->out + (size_t)b * g->pw->OC, tid);
}

static qac_status gemm_run(gemm_ctx *gp, void *scratch, qac_pool *pool) {
    gemm_ctx g = *gp;
    const qac_packed_w *pw = g.pw;
    int nt = qac_pool_size(pool);
    void *own = NULL; /* scratch of this call, when the caller's plan has none */
    if (pw->pb || pw->pq) { /* the rows in bf16, or quantised to int8 */
        if (!scratch && !(scratch = own = qac_malloc_lines(qac_gemm_scratch_bytes(pw->IC, nt))))
            return qac_set_error(QAC_ERR_NOMEM, "matrix product: cannot allocate %zu bytes of %s rows for %d threads",
                                 qac_gemm_scratch_bytes(pw->IC, nt), pw->pq ? "int8" : "bf16", nt);
        if (pw->pq) g.qbuf = scratch;
        else g.abuf = scratch;
    }
    if (g.cols && !g.q8 && g.qbuf) { /* the column split's rows, made once (split_cols) */
        qac_gemm_q8_quantize(g.qbuf, g.N, pw->IC, g.inp, 0, g.N);
        g.q8 = g.qbuf;
    } else if (g.cols && g.abuf) {
        round_rows(&g, g.abuf, 0, g.N);
    }
    qac_pool_for(pool, g.nb, 1, gemm_task, &g);
    if (g.cols && (g.post || g.post_at)) /* the finished rows' step, on blocks of rows */
        qac_pool_for(pool, g.N, 0, post_task, &g);
    free(own);
    return QAC_OK;
}

qac_status qac_gemm_q8(float *out, const void *q8, const qac_packed_w *pw, const float *bias, const float *resid,
                       int N, qac_pool *pool) {
    if (N <= 0) return QAC_OK;
    if (!pw->pq) return qac_set_error(QAC_ERR_INVALID, "matrix product: quantised rows need int8 weights");
    gemm_ctx g = {out, NULL, bias, resid, pw, N, 0, 0, 0, NULL, NULL, NULL, NULL, 0, NULL, 0, NULL, NULL, q8, NULL,
                  0, 0};
    if (!split_cols(&g, N, qac_pool_size(pool))) split_blocks(&g, pw->IC, 1, N, qac_pool_size(pool));
    qac_pool_for(pool, g.nb, 1, gemm_task, &g);
    return QAC_OK;
}

void qac_gemm_strided(float *out, int ldo, const float *inp, int ldi, const float *packed, int IC, int OC,
                      float alpha, int N) {
    if (N <= 0) return;
    pick_rows()(out, ldo, inp, ldi, packed, IC, OC, N, alpha, NULL, NULL);
}

void qac_gemm_strided_b(float *out, int ldo, const float *inp, int ldi, const float *b, int ldb, int IC, int OC,
                        float alpha, int N, float *scratch) {
    if (N <= 0) return;
#ifdef QAC_GEMM_X86
    if (qac_cpu_isa() == QAC_ISA_AVX512) {
        rows_b_avx512(out, ldo, inp, ldi, b, ldb, IC, OC, N, alpha);
        return;
    }
#endif
    qac_gemm_pack_into(scratch, b, OC, IC, ldb, 1);
    pick_rows()(out, ldo, inp, ldi, scratch, IC, OC, N, alpha, NULL, NULL);
}

/* ---- bf16 operands for the attention's products (gemm.h) ---- */

size_t qac_gemm_bf16_packed_elems(int OC, int IC) { return (size_t)((OC + NP - 1) / NP) * (size_t)((IC + 1) / 2) * NP * 2; }

#ifdef QAC_GEMM_X86
/* 32 elements of a row from k on (kn of them, the rest 0) as bf16: floats
 * (w) rounded, or bf16 (w16) as they are */
AVX512BF static inline __attribute__((always_inline)) __m512i row32(const float *w, const uint16_t *w16, size_t k,
                                                                    int kn) {
    if (w16) return _mm512_maskz_loadu_epi16((__mmask32)(kn >= 2 * NP ? 0xffffffffu : (1u << kn) - 1), w16 + k);
    __mmask16 m0 = (__mmask16)(kn >= NP ? 0xffff : (1u << kn) - 1);
    __mmask16 m1 = (__mmask16)(kn <= NP ? 0 : kn >= 2 * NP ? 0xffff : (1u << (kn - NP)) - 1);
    return (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, w + k + NP), _mm512_maskz_loadu_ps(m0, w + k));
}

/* panel rows c < n (each IC elements at stride ldw: floats w, or bf16 w16)
 * to bf16 pairs, 16 x 16 pairs at a time through a 32-bit transpose */
AVX512BF static void pack_bf16_panel(uint16_t *dst, const float *w, const uint16_t *w16, int n, int IC, int ldw) {
    for (int k0 = 0; k0 < IC; k0 += 2 * NP) { /* 16 pairs of k */
        int kn = IC - k0 < 2 * NP ? IC - k0 : 2 * NP;
        __m512 r[NP];
        for (int c = 0; c < NP; c++)
            r[c] = c < n ? (__m512)row32(w ? w + (size_t)c * ldw : NULL, w16 ? w16 + (size_t)c * ldw : NULL,
                                         (size_t)k0, kn)
                         : _mm512_setzero_ps();
        transpose16(r); /* r[p] = pair p of the 16 rows */
        int pn = (kn + 1) / 2;
        for (int p = 0; p < pn; p++) _mm512_storeu_ps((float *)(void *)(dst + ((size_t)(k0 / 2 + p) * NP) * 2), r[p]);
    }
}

/* 16 columns from o0 (n of them, the rest 0) of a row as bf16: floats (b)
 * rounded, or bf16 (b16) as they are; in the low half of the register */
AVX512BF static inline __attribute__((always_inline)) __m256i cols16(const float *b, const uint16_t *b16, size_t at,
                                                                     __mmask16 m) {
    if (b16) return _mm256_maskz_loadu_epi16(m, b16 + at);
    return (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, b + at));
}

/* rows [0, IC) of V-like B [IC, >= OC] (row stride ldb; floats b, or bf16
 * b16), as pairs of rows: panel j, pair k2: 16 columns x (row 2 k2, row
 * 2 k2 + 1) */
AVX512BF static void pack_bf16_t_avx512(uint16_t *packed, const float *b, const uint16_t *b16, int OC, int IC,
                                        int ldb) {
    int IC2 = (IC + 1) / 2;
    const __m512i inter = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                           21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    for (int j = 0; j < (OC + NP - 1) / NP; j++) {
        int o0 = j * NP, n = OC - o0 < NP ? OC - o0 : NP;
        __mmask16 m = (__mmask16)((1u << n) - 1);
        for (int k2 = 0; k2 < IC2; k2++) {
            __m256i lo = cols16(b, b16, (size_t)(2 * k2) * ldb + o0, m);
            __m256i hi = 2 * k2 + 1 < IC ? cols16(b, b16, (size_t)(2 * k2 + 1) * ldb + o0, m) : _mm256_setzero_si256();
            __m512i v = _mm512_permutexvar_epi16(inter, _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
            _mm512_storeu_si512((void *)(packed + (((size_t)j * IC2 + k2) * NP) * 2), v);
        }
    }
}
#endif

/* the panels from floats (w, rounded here) or from bf16 (w16, as they are) */
static void pack_bf16(uint16_t *packed, const float *w, const uint16_t *w16, int OC, int IC, int ldw, int transposed) {
    int np = (OC + NP - 1) / NP, IC2 = (IC + 1) / 2;
#ifdef QAC_GEMM_X86
    if (qac_cpu_bf16()) {
        if (transposed) {
            pack_bf16_t_avx512(packed, w, w16, OC, IC, ldw);
            return;
        }
        for (int j = 0; j < np; j++) {
            int o0 = j * NP, n = OC - o0 < NP ? OC - o0 : NP;
            size_t at = (size_t)o0 * ldw;
            pack_bf16_panel(packed + (size_t)j * IC2 * NP * 2, w ? w + at : NULL, w16 ? w16 + at : NULL, n, IC, ldw);
        }
        return;
    }
#endif
    for (int j = 0; j < np; j++)
        for (int k2 = 0; k2 < IC2; k2++)
            for (int c = 0; c < NP; c++)
                for (int e = 0; e < 2; e++) {
                    int o = j * NP + c, k = 2 * k2 + e;
                    size_t at = transposed ? (size_t)k * ldw + o : (size_t)o * ldw + k;
                    packed[(((size_t)j * IC2 + k2) * NP + c) * 2 + e] =
                        !(o < OC && k < IC) ? 0 : w16 ? w16[at] : qac_bf16_from_float(w[at]);
                }
}

void qac_gemm_pack_bf16_into(uint16_t *packed, const float *w, int OC, int IC, int ldw, int transposed) {
    pack_bf16(packed, w, NULL, OC, IC, ldw, transposed);
}

void qac_gemm_pack_bf16_from16(uint16_t *packed, const uint16_t *w, int OC, int IC, int ldw, int transposed) {
    pack_bf16(packed, NULL, w, OC, IC, ldw, transposed);
}

void qac_gemm_round_bf16(uint16_t *d, const float *x, int n, float scale) {
    int n2 = (n + 1) / 2 * 2;
#ifdef QAC_GEMM_X86
    if (qac_cpu_bf16()) {
        round_scaled_cvt(d, x, n, scale);
        if (n2 > n) d[n] = 0;
        return;
    }
#endif
    for (int k = 0; k < n; k++) d[k] = qac_bf16_from_float(scale == 1.0f ? x[k] : x[k] * scale);
    if (n2 > n) d[n] = 0;
}

void qac_gemm_bf16_strided(float *out, int ldo, const uint16_t *a, int lda, const uint16_t *packed, int IC, int OC,
                           float alpha, int N) {
    if (N <= 0) return;
    pick_rows_bf16()(out, ldo, a, lda, packed, (IC + 1) / 2, OC, N, alpha, NULL, NULL);
}
