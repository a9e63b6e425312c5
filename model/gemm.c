/* out = inp W^T (+ bias) (+ resid) over packed W (see gemm.h).
 *
 * Loop nest per thread: blocks of MC rows (the block of inp stays in L2),
 * then 16-column panels of W (one panel, IC x 16, stays in L1/L2), then
 * micro-tiles of up to 6 rows x 16 columns held in 12 AVX2 registers.
 * Each element is a sequential FMA chain over k, so the AVX2 kernel and the
 * portable one give the same bits. */
#include "gemm.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QAC_GEMM_X86 1
#endif

#define MR 6
#define NP QAC_GEMM_PANEL

size_t qac_gemm_packed_floats(int OC, int IC) { return (size_t)((OC + NP - 1) / NP) * (size_t)IC * NP; }

void qac_gemm_pack_into(float *packed, const float *w, int OC, int IC, int ldw, int transposed) {
    int np = (OC + NP - 1) / NP;
    for (int j = 0; j < np; j++)
        for (int k = 0; k < IC; k++) {
            float *dst = packed + ((size_t)j * IC + k) * NP;
            for (int c = 0; c < NP; c++) {
                int o = j * NP + c;
                dst[c] = o >= OC ? 0.0f : transposed ? w[(size_t)k * ldw + o] : w[(size_t)o * ldw + k];
            }
        }
}

qac_status qac_gemm_pack(qac_packed_w *pw, const float *w, int OC, int IC) {
    memset(pw, 0, sizeof *pw);
    if (OC < 1 || IC < 1) return qac_set_error(QAC_ERR_INVALID, "gemm pack: bad shape %d x %d", OC, IC);
    if (posix_memalign((void **)&pw->p, 64, qac_gemm_packed_floats(OC, IC) * sizeof(float)) != 0)
        return qac_set_error(QAC_ERR_NOMEM, "out of memory packing a %d x %d weight", OC, IC);
    qac_gemm_pack_into(pw->p, w, OC, IC, IC, 0);
    pw->IC = IC;
    pw->OC = OC;
    return QAC_OK;
}

void qac_gemm_packed_free(qac_packed_w *pw) {
    if (!pw) return;
    free(pw->p);
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
typedef void (*tile_fn)(float *out, int ldo, const float *a, int lda, int IC, int rn, const float *panel, int o0,
                        int ncols, float alpha, const float *bias, const float *resid);

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

static tile_fn pick_tile(void) {
#ifdef QAC_GEMM_X86
    if (!getenv("QAC_GEMM_PORTABLE") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return tile_avx2;
#endif
    return tile_portable;
}

typedef struct gemm_ctx {
    float *out;
    const float *inp, *bias, *resid;
    const qac_packed_w *pw;
    int N, mc;
    tile_fn tile;
} gemm_ctx;

static void gemm_task(void *vctx, int64_t begin, int64_t end, int tid) {
    const gemm_ctx *g = vctx;
    int IC = g->pw->IC, OC = g->pw->OC, np = (OC + NP - 1) / NP;
    for (int64_t blk = begin; blk < end; blk++) {
        int r0 = (int)blk * g->mc, r1 = r0 + g->mc < g->N ? r0 + g->mc : g->N;
        for (int j = 0; j < np; j++) {
            const float *panel = g->pw->p + (size_t)j * IC * NP;
            int o0 = j * NP, ncols = OC - o0 < NP ? OC - o0 : NP;
            for (int r = r0; r < r1; r += MR) {
                int rn = r1 - r < MR ? r1 - r : MR;
                g->tile(g->out + (size_t)r * OC, OC, g->inp + (size_t)r * IC, IC, IC, rn, panel, o0, ncols, 1.0f,
                        g->bias, g->resid ? g->resid + (size_t)r * OC : NULL);
            }
        }
    }
}

void qac_gemm(float *out, const float *inp, const qac_packed_w *pw, const float *bias, const float *resid, int N,
              qac_pool *pool) {
    if (N <= 0) return;
    /* rows per block: the block of inp fits in about 128 KiB (a multiple of MR) */
    int mc = 32768 / pw->IC / MR * MR;
    if (mc < MR) mc = MR;
    int nt = qac_pool_size(pool);
    /* enough blocks for every thread */
    while (mc > MR && (N + mc - 1) / mc < nt) mc -= MR;
    gemm_ctx g = {out, inp, bias, resid, pw, N, mc, pick_tile()};
    qac_pool_for(pool, (N + mc - 1) / mc, 1, gemm_task, &g);
}

void qac_gemm_strided(float *out, int ldo, const float *inp, int ldi, const float *packed, int IC, int OC,
                      float alpha, int N) {
    tile_fn tile = pick_tile();
    int np = (OC + NP - 1) / NP;
    for (int j = 0; j < np; j++) {
        int o0 = j * NP, ncols = OC - o0 < NP ? OC - o0 : NP;
        for (int r = 0; r < N; r += MR) {
            int rn = N - r < MR ? N - r : MR;
            tile(out + (size_t)r * ldo, ldo, inp + (size_t)r * ldi, ldi, IC, rn, packed + (size_t)j * IC * NP, o0,
                 ncols, alpha, NULL, NULL);
        }
    }
}
