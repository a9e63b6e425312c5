/* Exact inner-product top-k: score blocks of rows against all queries with
 * one fixed arithmetic (see flat_scan.h), keep a min-heap per query and
 * thread, then merge the threads' heaps.
 *
 * The AVX2 kernel scores 4 queries x 3 rows per step (12 accumulators);
 * the AVX-512 one 4 queries x 8 rows (16 registers, each two queries' 8
 * lanes against one row); the portable kernel does the same sums one pair
 * at a time. Each score is the same 8 lane chains and the same final sum
 * tree in all three: bit-identical scores. fp16 rows are widened exactly (F16C or in
 * software) and then scored like fp32 ones. bf16 rows take vdpbf16ps where
 * the CPU has AVX512_BF16, else its emulation (AVX2 under MXCSR's DAZ/FTZ,
 * or portable C), with the same bits. The SIMD kernels prefetch the
 * thread's next row block while they score this one (see pf_plan). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "flat_scan.h"
#include "qac_bf16.h"
#include "qac_cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QAC_SCAN_X86 1
#endif

#define ROW_BLOCK 128 /* rows scored per step: 128 x 384 fp32 = 192 KiB, fits L2 */

/* ---------------- scoring ---------------- */

static inline float reduce8(const float a[8]) {
    return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

float qac_flat_dot(const float *a, const float *b, int dim) {
    float acc[8] = {0};
    int d = 0;
    for (; d + 8 <= dim; d += 8)
        for (int l = 0; l < 8; l++) acc[l] = fmaf(a[d + l], b[d + l], acc[l]);
    if (d < dim) /* the tail: absent lanes add 0 * 0, as the zero-padded SIMD load does */
        for (int l = 0; l < 8; l++)
            acc[l] = d + l < dim ? fmaf(a[d + l], b[d + l], acc[l]) : fmaf(0.f, 0.f, acc[l]);
    return reduce8(acc);
}

float qac_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, bits;
    if (e == 0) {
        float f = ldexpf((float)m, -24); /* zero or subnormal: exact */
        return sign ? -f : f;
    }
    if (e == 31) bits = sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0); /* inf, quiet NaN */
    else bits = sign | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* out[i * ldo + r] = dot(q_i, x_r) for i < nq, r < m; x is fp32 or fp16 */
/* next/next_bytes: the rows the scan reads after these (to prefetch), or NULL */
typedef void (*score_fn)(const void *x, int m, int dim, const float *q, int nq, float *out, int ldo, const void *next,
                         size_t next_bytes);

static void score_portable_f32(const void *xv, int m, int dim, const float *q, int nq, float *out, int ldo,
                               const void *next, size_t next_bytes) {
    (void)next, (void)next_bytes;
    const float *x = xv;
    for (int i = 0; i < nq; i++)
        for (int r = 0; r < m; r++) out[(size_t)i * ldo + r] = qac_flat_dot(q + (size_t)i * dim, x + (size_t)r * dim, dim);
}

static void score_portable_f16(const void *xv, int m, int dim, const float *q, int nq, float *out, int ldo,
                               const void *next, size_t next_bytes) {
    (void)next, (void)next_bytes;
    const uint16_t *x = xv;
    float row[512], *tmp = dim <= 512 ? row : malloc(sizeof(float) * (size_t)dim);
    if (!tmp) { /* keep going, slower: one element at a time */
        for (int r = 0; r < m; r++)
            for (int i = 0; i < nq; i++) {
                float acc[8] = {0};
                const float *qi = q + (size_t)i * dim;
                const uint16_t *xr = x + (size_t)r * dim;
                int d = 0;
                for (; d + 8 <= dim; d += 8)
                    for (int l = 0; l < 8; l++) acc[l] = fmaf(qi[d + l], qac_half_to_float(xr[d + l]), acc[l]);
                for (int l = 0; l < 8 && d < dim; l++)
                    acc[l] = d + l < dim ? fmaf(qi[d + l], qac_half_to_float(xr[d + l]), acc[l]) : fmaf(0.f, 0.f, acc[l]);
                out[(size_t)i * ldo + r] = reduce8(acc);
            }
        return;
    }
    for (int r = 0; r < m; r++) {
        for (int d = 0; d < dim; d++) tmp[d] = qac_half_to_float(x[(size_t)r * dim + d]);
        for (int i = 0; i < nq; i++) out[(size_t)i * ldo + r] = qac_flat_dot(q + (size_t)i * dim, tmp, dim);
    }
    if (tmp != row) free(tmp);
}

/* bf16 rows. The kernels take q as the queries prepared once per search
 * (prepare_bf16): qs [nq, dpad] floats, each 16-dimension block as its 8
 * odd dimensions then its 8 even ones, subnormals read as zero; then
 * qb [nq, dpad] bf16, in order. dpad is dim rounded up to 16, zero-padded. */
static inline int bf16_dpad(int dim) { return (dim + 15) / 16 * 16; }

static void prepare_bf16(float *qs, int nq, int dim, const float *q) {
    int dpad = bf16_dpad(dim);
    uint16_t *qb = (uint16_t *)(qs + (size_t)nq * dpad);
    for (int i = 0; i < nq; i++)
        for (int d = 0; d < dpad; d++) {
            uint16_t h = d < dim ? qac_bf16_from_float(q[(size_t)i * dim + d]) : 0;
            int l = (d % 16) / 2, odd = d & 1;
            qb[(size_t)i * dpad + d] = h;
            qs[(size_t)i * dpad + d / 16 * 16 + (odd ? l : 8 + l)] = qac_bf16_in(h);
        }
}

/* lanes[8] of one score: qs as prepared, x bf16 [dim] */
static void lanes_bf16(float acc[8], const float *qs, const uint16_t *x, int dim) {
    for (int l = 0; l < 8; l++) acc[l] = 0.0f;
    for (int d = 0; d < dim; d += 16)
        for (int l = 0; l < 8; l++) {
            int e = d + 2 * l, o = e + 1;
            acc[l] = qac_bf16_step(qs[d + l], o < dim ? qac_bf16_in(x[o]) : 0.0f, acc[l]);
            acc[l] = qac_bf16_step(qs[d + 8 + l], e < dim ? qac_bf16_in(x[e]) : 0.0f, acc[l]);
        }
}

float qac_flat_dot_bf16(const uint16_t *q, const uint16_t *x, int dim) {
    int dpad = bf16_dpad(dim);
    float qs[512] = {0}, *t = dpad <= 512 ? qs : calloc((size_t)dpad, sizeof(float)), acc[8];
    if (!t) return NAN;
    for (int d = 0; d < dpad; d++) {
        int l = (d % 16) / 2;
        t[d / 16 * 16 + (d & 1 ? l : 8 + l)] = d < dim ? qac_bf16_in(q[d]) : 0.0f;
    }
    lanes_bf16(acc, t, x, dim);
    if (t != qs) free(t);
    return reduce8(acc);
}

static void score_portable_bf16(const void *xv, int m, int dim, const float *q, int nq, float *out, int ldo,
                               const void *next, size_t next_bytes) {
    (void)next, (void)next_bytes;
    const uint16_t *x = xv;
    int dpad = bf16_dpad(dim);
    for (int i = 0; i < nq; i++)
        for (int r = 0; r < m; r++) {
            float acc[8];
            lanes_bf16(acc, q + (size_t)i * dpad, x + (size_t)r * dim, dim);
            out[(size_t)i * ldo + r] = reduce8(acc);
        }
}

#ifdef QAC_SCAN_X86
#define AVX2 __attribute__((target("avx2,fma,f16c")))

/* The next row block, pulled into L2 while this one is scored: a block
 * scored against several query groups is read from memory by the first
 * and from L2 by the others, and without this the first group waits on
 * memory while the others compute. The lines are spread evenly over the
 * kernel's steps (ceil(lines / steps) a step). */
typedef struct prefetcher {
    uintptr_t p, end;
    int per_step;
} prefetcher;

static inline prefetcher pf_plan(const void *next, size_t bytes, int64_t steps) {
    prefetcher pf = {(uintptr_t)next, next ? (uintptr_t)next + bytes : 0, 1};
    int64_t lines = (int64_t)(bytes + 63) / 64;
    if (steps > 0) pf.per_step = (int)((lines + steps - 1) / steps);
    return pf;
}

#define PF_STEP(pf)                                                                                          \
    do {                                                                                                     \
        for (int k_ = 0; k_ < (pf).per_step && (pf).p < (pf).end; k_++, (pf).p += 64)                      \
            _mm_prefetch((const char *)(pf).p, _MM_HINT_T1);                                                               \
    } while (0)

/* Four 8-lane sums at once, each ((a0+a4)+(a1+a5)) + ((a2+a6)+(a3+a7)). */
AVX2 static inline __m128 reduce4(__m256 a, __m256 b, __m256 c, __m256 d) {
    __m128 sa = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 sb = _mm_add_ps(_mm256_castps256_ps128(b), _mm256_extractf128_ps(b, 1));
    __m128 sc = _mm_add_ps(_mm256_castps256_ps128(c), _mm256_extractf128_ps(c, 1));
    __m128 sd = _mm_add_ps(_mm256_castps256_ps128(d), _mm256_extractf128_ps(d, 1));
    return _mm_hadd_ps(_mm_hadd_ps(sa, sb), _mm_hadd_ps(sc, sd));
}

/* Eight lanes from p; the tails (n < 8 elements) are zero-padded. */
#define LOAD_F32(p) _mm256_loadu_ps(p)
#define LOAD_F16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p)))
AVX2 static inline __m256 tail_f32(const float *p, int n) {
    float t[8] = {0};
    memcpy(t, p, sizeof(float) * (size_t)n);
    return _mm256_loadu_ps(t);
}
AVX2 static inline __m256 tail_f16(const uint16_t *p, int n) {
    uint16_t t[8] = {0};
    memcpy(t, p, sizeof(uint16_t) * (size_t)n);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)t));
}

/* A QN x RN tile, constant sizes so the loops unroll into registers. The
 * QN*RN sums are reduced four at a time into out[a * ldo + b]. */
#define TILE(QN, RN, LOADX, TAILX)                                                                       \
    do {                                                                                                 \
        __m256 acc[QN * RN + 3];                                                                         \
        _Pragma("GCC unroll 16") for (int t_ = 0; t_ < QN * RN + 3; t_++) acc[t_] = _mm256_setzero_ps(); \
        int d = 0;                                                                                       \
        for (; d + 8 <= dim; d += 8) {                                                                   \
            PF_STEP(pf);                                                                                 \
            __m256 xv[RN];                                                                               \
            _Pragma("GCC unroll 8") for (int b_ = 0; b_ < RN; b_++) xv[b_] = LOADX(x0 + (size_t)b_ * dim + d); \
            _Pragma("GCC unroll 4") for (int a_ = 0; a_ < QN; a_++) {                                    \
                __m256 qv = _mm256_loadu_ps(q0 + (size_t)a_ * dim + d);                                  \
                _Pragma("GCC unroll 8") for (int b_ = 0; b_ < RN; b_++)                                  \
                    acc[a_ * RN + b_] = _mm256_fmadd_ps(qv, xv[b_], acc[a_ * RN + b_]);                  \
            }                                                                                            \
        }                                                                                                \
        if (d < dim) {                                                                                   \
            __m256 xv[RN];                                                                               \
            for (int b_ = 0; b_ < RN; b_++) xv[b_] = TAILX(x0 + (size_t)b_ * dim + d, dim - d);          \
            for (int a_ = 0; a_ < QN; a_++) {                                                            \
                __m256 qv = tail_f32(q0 + (size_t)a_ * dim + d, dim - d);                                \
                for (int b_ = 0; b_ < RN; b_++)                                                          \
                    acc[a_ * RN + b_] = _mm256_fmadd_ps(qv, xv[b_], acc[a_ * RN + b_]);                  \
            }                                                                                            \
        }                                                                                                \
        _Pragma("GCC unroll 4") for (int t_ = 0; t_ < QN * RN; t_ += 4) {                                \
            float s_[4];                                                                                 \
            _mm_storeu_ps(s_, reduce4(acc[t_], acc[t_ + 1], acc[t_ + 2], acc[t_ + 3]));                  \
            for (int u_ = 0; u_ < 4 && t_ + u_ < QN * RN; u_++)                                          \
                o0[(size_t)((t_ + u_) / RN) * ldo + (t_ + u_) % RN] = s_[u_];                            \
        }                                                                                                \
    } while (0)

/* 4, 3 or 2 queries x 3 rows per tile; a lone query takes 4 rows per step
 * (it is memory-bound, and four row streams prefetch best). */
#define SCORE_AVX2(NAME, XT, LOADX, TAILX)                                                               \
    AVX2 static void NAME(const void *xp, int m, int dim, const float *q, int nq, float *out, int ldo,   \
                          const void *next, size_t next_bytes) {                                         \
        const XT *x = xp;                                                                                \
        prefetcher pf = pf_plan(next, next_bytes,                                                        \
                                (int64_t)(nq >= 2 ? (nq + 3) / 4 * ((m + 2) / 3) : (m + 3) / 4) * (dim / 8)); \
        int i = 0;                                                                                       \
        for (; i + 4 <= nq || (i < nq && nq - i >= 2); i += 4) {                                         \
            int qn = nq - i < 4 ? nq - i : 4;                                                            \
            const float *q0 = q + (size_t)i * dim;                                                       \
            for (int r = 0; r < m; r += 3) {                                                             \
                int rn = m - r < 3 ? m - r : 3;                                                          \
                const XT *x0 = x + (size_t)r * dim;                                                      \
                float *o0 = out + (size_t)i * ldo + r;                                                   \
                switch (qn * 4 + rn) {                                                                   \
                case 4 * 4 + 3: TILE(4, 3, LOADX, TAILX); break;                                         \
                case 4 * 4 + 2: TILE(4, 2, LOADX, TAILX); break;                                         \
                case 4 * 4 + 1: TILE(4, 1, LOADX, TAILX); break;                                         \
                case 3 * 4 + 3: TILE(3, 3, LOADX, TAILX); break;                                         \
                case 3 * 4 + 2: TILE(3, 2, LOADX, TAILX); break;                                         \
                case 3 * 4 + 1: TILE(3, 1, LOADX, TAILX); break;                                         \
                case 2 * 4 + 3: TILE(2, 3, LOADX, TAILX); break;                                         \
                case 2 * 4 + 2: TILE(2, 2, LOADX, TAILX); break;                                         \
                default: TILE(2, 1, LOADX, TAILX); break;                                                \
                }                                                                                        \
            }                                                                                            \
        }                                                                                                \
        if (i < nq) {                                                                                    \
            const float *q0 = q + (size_t)i * dim;                                                       \
            int r = 0;                                                                                   \
            for (; r + 4 <= m; r += 4) {                                                                 \
                const XT *x0 = x + (size_t)r * dim;                                                      \
                float *o0 = out + (size_t)i * ldo + r;                                                   \
                TILE(1, 4, LOADX, TAILX);                                                                \
            }                                                                                            \
            for (; r < m; r++) {                                                                         \
                const XT *x0 = x + (size_t)r * dim;                                                      \
                float *o0 = out + (size_t)i * ldo + r;                                                   \
                TILE(1, 1, LOADX, TAILX);                                                                \
            }                                                                                            \
        }                                                                                                \
    }

SCORE_AVX2(score_avx2_f32, float, LOAD_F32, tail_f32)
SCORE_AVX2(score_avx2_f16, uint16_t, LOAD_F16, tail_f16)
#undef SCORE_AVX2
#undef TILE


/* bf16 without AVX512_BF16: the pairs widened to fp32 (odd dimensions by
 * masking, even ones by shifting) and summed with FMA under MXCSR's
 * denormals-are-zero and flush-to-zero, which judge tininess as vdpbf16ps
 * does. The eight lane sums go to a buffer; the final sums run after MXCSR
 * is restored, in a separate function so that no sum can be moved across. */
#define MXCSR_DAZ_FTZ 0x8040u
#ifdef __clang__
#define NOT_INLINED __attribute__((noinline))
#else
#define NOT_INLINED __attribute__((noinline, noipa))
#endif

/* QN queries x RN rows from row r: lane l of query a, row r + b, goes to
 * lanes[(a * m + r + b) * 8 + l] */
#define TILEB(QN, RN)                                                                                    \
    do {                                                                                                 \
        __m256 acc[QN][RN];                                                                              \
        _Pragma("GCC unroll 4") for (int a_ = 0; a_ < QN; a_++)                                          \
            _Pragma("GCC unroll 4") for (int b_ = 0; b_ < RN; b_++) acc[a_][b_] = _mm256_setzero_ps();   \
        for (int d = 0; d < dpad; d += 16) {                                                             \
            __m256 xo[RN], xe[RN];                                                                       \
            _Pragma("GCC unroll 4") for (int b_ = 0; b_ < RN; b_++) {                                    \
                const uint16_t *p_ = x0 + (size_t)b_ * dim + d;                                          \
                __m256i v_;                                                                              \
                if (d + 16 <= dim) v_ = _mm256_loadu_si256((const __m256i *)(const void *)p_);           \
                else {                                                                                   \
                    uint16_t t_[16] = {0};                                                               \
                    memcpy(t_, p_, sizeof(uint16_t) * (size_t)(dim - d));                                \
                    v_ = _mm256_loadu_si256((const __m256i *)(const void *)t_);                          \
                }                                                                                        \
                xo[b_] = _mm256_castsi256_ps(_mm256_and_si256(v_, hi));                                  \
                xe[b_] = _mm256_castsi256_ps(_mm256_slli_epi32(v_, 16));                                 \
            }                                                                                            \
            _Pragma("GCC unroll 4") for (int a_ = 0; a_ < QN; a_++) {                                    \
                __m256 qo = _mm256_loadu_ps(qs + (size_t)a_ * dpad + d);                                 \
                __m256 qe = _mm256_loadu_ps(qs + (size_t)a_ * dpad + d + 8);                             \
                _Pragma("GCC unroll 4") for (int b_ = 0; b_ < RN; b_++) {                                \
                    acc[a_][b_] = _mm256_fmadd_ps(qo, xo[b_], acc[a_][b_]);                              \
                    acc[a_][b_] = _mm256_fmadd_ps(qe, xe[b_], acc[a_][b_]);                              \
                }                                                                                        \
            }                                                                                            \
        }                                                                                                \
        _Pragma("GCC unroll 4") for (int a_ = 0; a_ < QN; a_++)                                          \
            _Pragma("GCC unroll 4") for (int b_ = 0; b_ < RN; b_++)                                      \
                _mm256_storeu_ps(lanes + ((size_t)a_ * m + r + b_) * 8, acc[a_][b_]);                    \
    } while (0)

/* qn (1..4) queries against m rows, lane sums only; runs under DAZ/FTZ */
AVX2 NOT_INLINED static void lanes_avx2_bf16(const uint16_t *x, int m, int dim,
                                                                   const float *qs, int qn, float *lanes) {
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    int dpad = bf16_dpad(dim), r = 0;
    if (qn == 1)
        for (; r + 4 <= m; r += 4) {
            const uint16_t *x0 = x + (size_t)r * dim;
            TILEB(1, 4);
        }
    for (; r < m; r += 2) {
        const uint16_t *x0 = x + (size_t)r * dim;
        int two = m - r >= 2;
        switch (qn * 2 + two) {
        case 4 * 2 + 1: TILEB(4, 2); break;
        case 4 * 2: TILEB(4, 1); break;
        case 3 * 2 + 1: TILEB(3, 2); break;
        case 3 * 2: TILEB(3, 1); break;
        case 2 * 2 + 1: TILEB(2, 2); break;
        case 2 * 2: TILEB(2, 1); break;
        case 1 * 2 + 1: TILEB(1, 2); break;
        default: TILEB(1, 1); break;
        }
    }
}
#undef TILEB

AVX2 static void score_avx2_bf16(const void *xp, int m, int dim, const float *q, int nq, float *out, int ldo,
                                 const void *next, size_t next_bytes) {
    (void)next, (void)next_bytes;
    float lanes[4 * ROW_BLOCK * 8];
    int dpad = bf16_dpad(dim);
    for (int i = 0; i < nq; i += 4) {
        int qn = nq - i < 4 ? nq - i : 4;
        for (int r0 = 0; r0 < m; r0 += ROW_BLOCK) { /* m <= ROW_BLOCK from the scan; any m works */
            int mm = m - r0 < ROW_BLOCK ? m - r0 : ROW_BLOCK;
            unsigned csr = _mm_getcsr();
            _mm_setcsr(csr | MXCSR_DAZ_FTZ);
            lanes_avx2_bf16((const uint16_t *)xp + (size_t)r0 * dim, mm, dim, q + (size_t)i * dpad, qn, lanes);
            _mm_setcsr(csr);
            for (int a = 0; a < qn; a++)
                for (int r = 0; r < mm; r++)
                    out[(size_t)(i + a) * ldo + r0 + r] = reduce8(lanes + ((size_t)a * mm + r) * 8);
        }
    }
}

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")))

/* One row's 8 dims, broadcast to both halves; the tail zero-padded by mask. */
#define BCAST_F32(p) _mm512_broadcast_f32x8(_mm256_loadu_ps(p))
#define BCAST_F16(p) _mm512_cvtph_ps(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(p))))
#define BTAIL_F32(p, mk) _mm512_broadcast_f32x8(_mm256_maskz_loadu_ps(mk, p))
#define BTAIL_F16(p, mk) _mm512_cvtph_ps(_mm256_broadcastsi128_si256(_mm_maskz_loadu_epi16(mk, p)))

/* The final sums of acc[QN / 2][RN] (query 2a in the low 8 lanes of
 * acc[a][b], query 2a + 1 in the high 8, both against row b) into
 * o0[query * ldo + b]: four at a time, as the AVX2 kernel does them. */
#define PAIR_SUMS(QN, RN)                                                                                     \
    do {                                                                                                     \
        __m256 h_[QN * RN + 3];                                                                              \
        float *dst_[QN * RN + 3];                                                                            \
        float sink_[4];                                                                                      \
        int nh_ = 0;                                                                                         \
        _Pragma("GCC unroll 2") for (int a_ = 0; a_ < QN / 2; a_++)                                          \
            _Pragma("GCC unroll 8") for (int b_ = 0; b_ < RN; b_++) {                                        \
                h_[nh_] = _mm512_castps512_ps256(acc[a_][b_]), dst_[nh_++] = o0 + (size_t)(2 * a_) * ldo + b_; \
                h_[nh_] = _mm512_extractf32x8_ps(acc[a_][b_], 1);                                             \
                dst_[nh_++] = o0 + (size_t)(2 * a_ + 1) * ldo + b_;                                          \
            }                                                                                                \
        for (int t_ = nh_; t_ < QN * RN + 3; t_++) h_[t_] = _mm256_setzero_ps(), dst_[t_] = sink_;           \
        for (int t_ = 0; t_ < nh_; t_ += 4) {                                                                \
            float s_[4];                                                                                     \
            _mm_storeu_ps(s_, reduce4(h_[t_], h_[t_ + 1], h_[t_ + 2], h_[t_ + 3]));                          \
            for (int u_ = 0; u_ < 4; u_++) *dst_[t_ + u_] = s_[u_];                                          \
        }                                                                                                    \
    } while (0)

/* QN (2 or 4) queries x RN rows: acc[a][b] holds query 2a in its low
 * 8 lanes and query 2a + 1 in its high 8, both against row b. */
#define TILE512(QN, RN, BX, BTX)                                                                             \
    do {                                                                                                     \
        __m512 acc[QN / 2][RN];                                                                              \
        _Pragma("GCC unroll 2") for (int a_ = 0; a_ < QN / 2; a_++)                                          \
            _Pragma("GCC unroll 8") for (int b_ = 0; b_ < RN; b_++) acc[a_][b_] = _mm512_setzero_ps();        \
        int d = 0;                                                                                           \
        for (; d + 8 <= dim; d += 8) {                                                                       \
            PF_STEP(pf);                                                                                     \
            __m512 qv[QN / 2];                                                                               \
            _Pragma("GCC unroll 2") for (int a_ = 0; a_ < QN / 2; a_++) qv[a_] = _mm512_insertf32x8(         \
                _mm512_castps256_ps512(_mm256_loadu_ps(q0 + (size_t)(2 * a_) * dim + d)),                    \
                _mm256_loadu_ps(q0 + (size_t)(2 * a_ + 1) * dim + d), 1);                                     \
            _Pragma("GCC unroll 8") for (int b_ = 0; b_ < RN; b_++) {                                        \
                __m512 xv = BX(x0 + (size_t)b_ * dim + d);                                                   \
                _Pragma("GCC unroll 2") for (int a_ = 0; a_ < QN / 2; a_++)                                  \
                    acc[a_][b_] = _mm512_fmadd_ps(qv[a_], xv, acc[a_][b_]);                                  \
            }                                                                                                \
        }                                                                                                    \
        if (d < dim) {                                                                                       \
            __mmask8 mk = (__mmask8)((1u << (dim - d)) - 1);                                                 \
            __m512 qv[QN / 2];                                                                               \
            for (int a_ = 0; a_ < QN / 2; a_++) qv[a_] = _mm512_insertf32x8(                                 \
                _mm512_castps256_ps512(_mm256_maskz_loadu_ps(mk, q0 + (size_t)(2 * a_) * dim + d)),          \
                _mm256_maskz_loadu_ps(mk, q0 + (size_t)(2 * a_ + 1) * dim + d), 1);                           \
            for (int b_ = 0; b_ < RN; b_++) {                                                                \
                __m512 xv = BTX(x0 + (size_t)b_ * dim + d, mk);                                              \
                for (int a_ = 0; a_ < QN / 2; a_++) acc[a_][b_] = _mm512_fmadd_ps(qv[a_], xv, acc[a_][b_]);  \
            }                                                                                                \
        }                                                                                                    \
        PAIR_SUMS(QN, RN);                                                                                   \
    } while (0)

/* query pairs (4, then 2) x 8 rows; a last odd query through the AVX2 kernel */
#define SCORE_AVX512(NAME, XT, BX, BTX, AVX2_NAME)                                                         \
    AVX512 static void NAME(const void *xp, int m, int dim, const float *q, int nq, float *out, int ldo,   \
                            const void *next, size_t next_bytes) {                                         \
        const XT *x = xp;                                                                                  \
        prefetcher pf = pf_plan(next, next_bytes, (int64_t)(m + 7) / 8 * ((nq + 2) / 4) * (dim / 8));     \
        int i = 0;                                                                                         \
        for (; i + 2 <= nq; i += 4) {                                                                      \
            int qn = nq - i < 4 ? 2 : 4;                                                                   \
            const float *q0 = q + (size_t)i * dim;                                                         \
            for (int r = 0; r < m; r += 8) {                                                               \
                int rn = m - r < 8 ? m - r : 8;                                                            \
                const XT *x0 = x + (size_t)r * dim;                                                        \
                float *o0 = out + (size_t)i * ldo + r;                                                     \
                switch (qn * 8 + rn) {                                                                     \
                case 4 * 8 + 8: TILE512(4, 8, BX, BTX); break;                                             \
                case 4 * 8 + 7: TILE512(4, 7, BX, BTX); break;                                             \
                case 4 * 8 + 6: TILE512(4, 6, BX, BTX); break;                                             \
                case 4 * 8 + 5: TILE512(4, 5, BX, BTX); break;                                             \
                case 4 * 8 + 4: TILE512(4, 4, BX, BTX); break;                                             \
                case 4 * 8 + 3: TILE512(4, 3, BX, BTX); break;                                             \
                case 4 * 8 + 2: TILE512(4, 2, BX, BTX); break;                                             \
                case 4 * 8 + 1: TILE512(4, 1, BX, BTX); break;                                             \
                case 2 * 8 + 8: TILE512(2, 8, BX, BTX); break;                                             \
                case 2 * 8 + 7: TILE512(2, 7, BX, BTX); break;                                             \
                case 2 * 8 + 6: TILE512(2, 6, BX, BTX); break;                                             \
                case 2 * 8 + 5: TILE512(2, 5, BX, BTX); break;                                             \
                case 2 * 8 + 4: TILE512(2, 4, BX, BTX); break;                                             \
                case 2 * 8 + 3: TILE512(2, 3, BX, BTX); break;                                             \
                case 2 * 8 + 2: TILE512(2, 2, BX, BTX); break;                                             \
                default: TILE512(2, 1, BX, BTX); break;                                                    \
                }                                                                                          \
            }                                                                                              \
            if (qn == 2) i -= 2;                                                                           \
        }                                                                                                  \
        if (i < nq) /* a last odd query; the prefetching is its own when it is the only one */            \
            AVX2_NAME(xp, m, dim, q + (size_t)i * dim, 1, out + (size_t)i * ldo, ldo, nq == 1 ? next : NULL, \
                      nq == 1 ? next_bytes : 0);                                                           \
    }

SCORE_AVX512(score_avx512_f32, float, BCAST_F32, BTAIL_F32, score_avx2_f32)
SCORE_AVX512(score_avx512_f16, uint16_t, BCAST_F16, BTAIL_F16, score_avx2_f16)
#undef SCORE_AVX512
#undef TILE512

/* bf16 with vdpbf16ps: zmm accumulators hold query 2a's 8 lanes low and
 * query 2a + 1's high, against one row's 16 dimensions broadcast to both
 * halves; a last odd query runs on ymm. */
#define AVX512BF __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx2,fma,f16c")))

#define TILE512B(QN, RN)                                                                                  \
    do {                                                                                                  \
        __m512 acc[QN / 2][RN];                                                                           \
        _Pragma("GCC unroll 2") for (int a_ = 0; a_ < QN / 2; a_++)                                       \
            _Pragma("GCC unroll 8") for (int b_ = 0; b_ < RN; b_++) acc[a_][b_] = _mm512_setzero_ps();     \
        for (int d = 0; d < dpad; d += 16) {                                                              \
            PF_STEP(pf);                                                                                  \
            __mmask16 mk = d + 16 <= dim ? (__mmask16)0xffff : (__mmask16)((1u << (dim - d)) - 1);       \
            __m512i qv[QN / 2];                                                                           \
            _Pragma("GCC unroll 2") for (int a_ = 0; a_ < QN / 2; a_++) qv[a_] = _mm512_inserti64x4(      \
                _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)(qb0 + (size_t)(2 * a_) * dpad + d))), \
                _mm256_loadu_si256((const __m256i *)(const void *)(qb0 + (size_t)(2 * a_ + 1) * dpad + d)), 1); \
            _Pragma("GCC unroll 8") for (int b_ = 0; b_ < RN; b_++) {                                     \
                __m512i xv = _mm512_broadcast_i64x4(_mm256_maskz_loadu_epi16(mk, x0 + (size_t)b_ * dim + d)); \
                _Pragma("GCC unroll 2") for (int a_ = 0; a_ < QN / 2; a_++)                               \
                    acc[a_][b_] = _mm512_dpbf16_ps(acc[a_][b_], (__m512bh)qv[a_], (__m512bh)xv);          \
            }                                                                                             \
        }                                                                                                 \
        PAIR_SUMS(QN, RN);                                                                                \
    } while (0)

/* one query x RN rows on ymm */
#define TILE256B(RN)                                                                                      \
    do {                                                                                                  \
        __m256 acc[RN + 3];                                                                               \
        _Pragma("GCC unroll 8") for (int b_ = 0; b_ < RN + 3; b_++) acc[b_] = _mm256_setzero_ps();         \
        for (int d = 0; d < dpad; d += 16) {                                                              \
            PF_STEP(pf);                                                                                  \
            __mmask16 mk = d + 16 <= dim ? (__mmask16)0xffff : (__mmask16)((1u << (dim - d)) - 1);       \
            __m256i qv = _mm256_loadu_si256((const __m256i *)(const void *)(qb0 + d));                    \
            _Pragma("GCC unroll 8") for (int b_ = 0; b_ < RN; b_++) {                                     \
                __m256i xv = _mm256_maskz_loadu_epi16(mk, x0 + (size_t)b_ * dim + d);                     \
                acc[b_] = _mm256_dpbf16_ps(acc[b_], (__m256bh)qv, (__m256bh)xv);                          \
            }                                                                                             \
        }                                                                                                 \
        float s_[4];                                                                                      \
        _mm_storeu_ps(s_, reduce4(acc[0], acc[1], acc[2], acc[3]));                                       \
        for (int u_ = 0; u_ < RN; u_++) o0[u_] = s_[u_];                                                  \
    } while (0)

AVX512BF static void score_avx512_bf16(const void *xp, int m, int dim, const float *q, int nq, float *out,
                                       int ldo, const void *next, size_t next_bytes) {
    const uint16_t *x = xp;
    int dpad = bf16_dpad(dim);
    const uint16_t *qb = (const uint16_t *)(q + (size_t)nq * dpad);
    prefetcher pf = pf_plan(next, next_bytes, (int64_t)(nq >= 2 ? (m + 7) / 8 * ((nq + 2) / 4) : (m + 3) / 4) * (dpad / 16));
    int i = 0;
    for (; i + 2 <= nq; i += 4) {
        int qn = nq - i < 4 ? 2 : 4;
        const uint16_t *qb0 = qb + (size_t)i * dpad;
        for (int r = 0; r < m; r += 8) {
            int rn = m - r < 8 ? m - r : 8;
            const uint16_t *x0 = x + (size_t)r * dim;
            float *o0 = out + (size_t)i * ldo + r;
            switch (qn * 8 + rn) {
            case 4 * 8 + 8: TILE512B(4, 8); break;
            case 4 * 8 + 7: TILE512B(4, 7); break;
            case 4 * 8 + 6: TILE512B(4, 6); break;
            case 4 * 8 + 5: TILE512B(4, 5); break;
            case 4 * 8 + 4: TILE512B(4, 4); break;
            case 4 * 8 + 3: TILE512B(4, 3); break;
            case 4 * 8 + 2: TILE512B(4, 2); break;
            case 4 * 8 + 1: TILE512B(4, 1); break;
            case 2 * 8 + 8: TILE512B(2, 8); break;
            case 2 * 8 + 7: TILE512B(2, 7); break;
            case 2 * 8 + 6: TILE512B(2, 6); break;
            case 2 * 8 + 5: TILE512B(2, 5); break;
            case 2 * 8 + 4: TILE512B(2, 4); break;
            case 2 * 8 + 3: TILE512B(2, 3); break;
            case 2 * 8 + 2: TILE512B(2, 2); break;
            default: TILE512B(2, 1); break;
            }
        }
        if (qn == 2) i -= 2;
    }
    if (i < nq) {
        const uint16_t *qb0 = qb + (size_t)i * dpad;
        int r = 0;
        for (; r + 4 <= m; r += 4) {
            const uint16_t *x0 = x + (size_t)r * dim;
            float *o0 = out + (size_t)i * ldo + r;
            TILE256B(4);
        }
        for (; r < m; r++) {
            const uint16_t *x0 = x + (size_t)r * dim;
            float *o0 = out + (size_t)i * ldo + r;
            TILE256B(1);
        }
    }
}
#undef TILE512B
#undef TILE256B
#undef PAIR_SUMS
#endif

static score_fn pick_kernel(int f16, int bf16) {
#ifdef QAC_SCAN_X86
    if (bf16) return qac_cpu_bf16() ? score_avx512_bf16 : qac_cpu_isa() >= QAC_ISA_AVX2 ? score_avx2_bf16 : score_portable_bf16;
    switch (qac_cpu_isa()) {
    case QAC_ISA_AVX512: return f16 ? score_avx512_f16 : score_avx512_f32;
    case QAC_ISA_AVX2: return f16 ? score_avx2_f16 : score_avx2_f32;
    default: break;
    }
#endif
    if (bf16) return score_portable_bf16;
    return f16 ? score_portable_f16 : score_portable_f32;
}

/* ---------------- top-k ---------------- */

/* x ranks below y: lower score, or equal score and smaller docid. */
static inline int worse(const qac_flat *f, float xs, int64_t xr, float ys, int64_t yr) {
    if (xs != ys) return xs < ys;
    return f->id_less(f->ctx, xr, yr);
}

/* Min-heap of the best n hits so far: the root is the worst kept. */
static void heap_down(const qac_flat *f, float *hs, int64_t *hr, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && worse(f, hs[l], hr[l], hs[m], hr[m])) m = l;
        if (r < n && worse(f, hs[r], hr[r], hs[m], hr[m])) m = r;
        if (m == i) return;
        float ts = hs[i];
        int64_t tr = hr[i];
        hs[i] = hs[m], hr[i] = hr[m], hs[m] = ts, hr[m] = tr;
        i = m;
    }
}

static void heap_push(const qac_flat *f, float *hs, int64_t *hr, int n, float s, int64_t r) {
    int i = n;
    hs[i] = s, hr[i] = r;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!worse(f, hs[i], hr[i], hs[p], hr[p])) break;
        float ts = hs[i];
        int64_t tr = hr[i];
        hs[i] = hs[p], hr[i] = hr[p], hs[p] = ts, hr[p] = tr;
        i = p;
    }
}

/* Offer a hit to a heap of capacity kk holding *n. */
static inline void heap_offer(const qac_flat *f, float *hs, int64_t *hr, int *n, int kk, float s, int64_t r) {
    if (*n < kk) heap_push(f, hs, hr, (*n)++, s, r);
    else if (s >= hs[0] && worse(f, hs[0], hr[0], s, r)) {
        hs[0] = s, hr[0] = r;
        heap_down(f, hs, hr, *n, 0);
    }
}

typedef struct scan_ctx {
    const qac_flat *f;
    const float *q;
    int nq, k, kk;
    score_fn score;
    float *buf;  /* per thread [nq, ROW_BLOCK] */
    float *hs;   /* per thread [nq, kk] */
    int64_t *hr; /* per thread [nq, kk] */
    int *nh;     /* per thread [nq] */
} scan_ctx;

static void scan_task(void *arg, int64_t begin, int64_t end, int tid) {
    scan_ctx *c = arg;
    const qac_flat *f = c->f;
    int nq = c->nq, kk = c->kk;
    float *buf = c->buf + (size_t)tid * nq * ROW_BLOCK;
    float *hs = c->hs + (size_t)tid * nq * kk;
    int64_t *hr = c->hr + (size_t)tid * nq * kk;
    int *nh = c->nh + (size_t)tid * nq;
    for (int64_t blk = begin; blk < end; blk++) {
        int64_t r0 = blk * ROW_BLOCK;
        int m = (int)(f->n - r0 < ROW_BLOCK ? f->n - r0 : ROW_BLOCK);
        const void *rows = f->x     ? (const void *)(f->x + (size_t)r0 * f->dim)
                           : f->x16 ? (const void *)(f->x16 + (size_t)r0 * f->dim)
                                    : (const void *)(f->xb + (size_t)r0 * f->dim);
        /* the next block, if this thread scores it: prefetched while this one is scored */
        int64_t nm = blk + 1 < end ? (f->n - r0 - m < ROW_BLOCK ? f->n - r0 - m : ROW_BLOCK) : 0;
        size_t width = f->x ? sizeof(float) : sizeof(uint16_t);
        c->score(rows, m, f->dim, c->q, nq, buf, ROW_BLOCK, nm > 0 ? (const char *)rows + (size_t)m * f->dim * width : NULL,
                 (size_t)nm * f->dim * width);
        for (int i = 0; i < nq; i++) {
            const float *sc = buf + (size_t)i * ROW_BLOCK;
            float *h = hs + (size_t)i * kk;
            int64_t *hrow = hr + (size_t)i * kk;
            for (int j = 0; j < m; j++) heap_offer(f, h, hrow, &nh[i], kk, sc[j], r0 + j);
        }
    }
}

qac_status qac_flat_topk(const qac_flat *f, const float *queries, int nq, int k, qac_pool *pool, float *scores,
                         int64_t *rows) {
    if (nq <= 0) return QAC_OK;
    if (k < 1 || (f->x != NULL) + (f->x16 != NULL) + (f->xb != NULL) != 1 || f->n < 0 || f->dim < 1)
        return qac_set_error(QAC_ERR_INVALID, "flat search: bad arguments (k %d, dim %d)", k, f->dim);
    int kk = (int64_t)k < f->n ? k : (int)f->n;
    int64_t nblocks = (f->n + ROW_BLOCK - 1) / ROW_BLOCK;
    int threads = qac_pool_size(pool);
    if (threads > nblocks) threads = nblocks > 0 ? (int)nblocks : 1;
    scan_ctx c = {f, queries, nq, k, kk, pick_kernel(f->x16 != NULL, f->xb != NULL), NULL, NULL, NULL, NULL};
    int T = qac_pool_size(pool);
    float *prepared = NULL;
    if (f->xb) { /* the queries in bf16, once (see prepare_bf16) */
        size_t dpad = (size_t)bf16_dpad(f->dim);
        prepared = malloc((sizeof(float) + sizeof(uint16_t)) * (size_t)nq * dpad);
        if (!prepared) return qac_set_error(QAC_ERR_NOMEM, "out of memory for a search of %d queries", nq);
        prepare_bf16(prepared, nq, f->dim, queries);
        c.q = prepared;
    }
    c.buf = malloc(sizeof(float) * (size_t)T * nq * ROW_BLOCK);
    c.hs = malloc(sizeof(float) * ((size_t)T * nq * kk + 1));
    c.hr = malloc(sizeof(int64_t) * ((size_t)T * nq * kk + 1));
    c.nh = calloc((size_t)T * nq, sizeof(int));
    if (!c.buf || !c.hs || !c.hr || !c.nh) {
        free(c.buf), free(c.hs), free(c.hr), free(c.nh), free(prepared);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory for a search of %d queries, k %d", nq, k);
    }
    /* a few chunks per thread, for balance */
    int64_t grain = threads > 1 ? (nblocks + 4 * threads - 1) / (4 * threads) : nblocks;
    if (nblocks > 0) qac_pool_for(threads > 1 ? pool : NULL, nblocks, grain, scan_task, &c);
    /* merge the threads' heaps into thread 0's, then pop best-first */
    for (int i = 0; i < nq; i++) {
        float *h = c.hs + (size_t)i * kk;
        int64_t *hrow = c.hr + (size_t)i * kk;
        int n = c.nh[i];
        for (int t = 1; t < T; t++) {
            const float *ts = c.hs + ((size_t)t * nq + i) * kk;
            const int64_t *tr = c.hr + ((size_t)t * nq + i) * kk;
            for (int j = 0; j < c.nh[(size_t)t * nq + i]; j++) heap_offer(f, h, hrow, &n, kk, ts[j], tr[j]);
        }
        float *os = scores + (size_t)i * k;
        int64_t *orow = rows + (size_t)i * k;
        for (int left = n; left > 0; left--) { /* the root is the worst: it goes last */
            os[left - 1] = h[0], orow[left - 1] = hrow[0];
            h[0] = h[left - 1], hrow[0] = hrow[left - 1];
            heap_down(f, h, hrow, left - 1, 0);
        }
        for (int j = n; j < k; j++) os[j] = -INFINITY, orow[j] = -1;
    }
    free(c.buf), free(c.hs), free(c.hr), free(c.nh), free(prepared);
    return QAC_OK;
}
