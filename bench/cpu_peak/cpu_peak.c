/* Roofline for the CPU kernels: the machine's peak FMA throughput for each
 * ISA path (independent FMA chains in registers, no memory), its read
 * bandwidth, and the achieved GFLOP/s of qac's matrix product on the
 * encoder's shapes (and of the attention products) on each path, as a
 * fraction of that path's peak at the same thread count.
 *   qac_bench_cpu_peak [threads (2)] [rounds (5)] [all|gemm|scan|int8 (all)]
 * Each number is the best of the rounds. Besides wall-clock GFLOP/s, each
 * is also given per core from the process's CPU time (time on a core, not
 * time waiting for one), and %peak compares those: on a shared machine the
 * wall clock counts other programs' turns, CPU time does not. A product's
 * round repeats the call for at least 0.2 s and reads the CPU clock once
 * the pool's workers have gone to sleep: Linux adds a running thread's
 * time to the process's clock only at its next tick or sleep, so a call of
 * a few milliseconds read straight after it missed most of the other
 * threads' time (per-core figures came out near the wall clock's, and the
 * int8 lines at 120-165% of the VNNI peak). Where the
 * CPU has AVX512_BF16, the bf16 mode gets its own lines against the
 * vdpbf16ps peak (two products per lane per instruction). Where it has
 * VNNI, the int8 mode gets its own lines against the VPDPBUSD peak (four
 * u8 x s8 products per 32-bit lane per instruction, 512-bit with
 * AVX512-VNNI, else 256-bit AVX-VNNI), counted as 2 ops per product like a
 * flop: "GOP/s". The VNNI peak is measured, not assumed: 24 (zmm) or 12
 * (ymm, the VEX form) independent vpdpbusd chains, each instruction's
 * inputs fixed registers, against the core's clock taken from a chain of
 * dependent integer adds (one a cycle), so the line also says how many
 * vpdpbusd the core retires a cycle. "int8" alone runs the VNNI lines, the
 * int8 products on the encoder's shapes at 2,048 rows and at BERT-base's
 * batch of 64 x 128 tokens (8,192 rows). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flat_scan.h"
#include "gemm.h"
#include "qac_bf16.h"
#include "qac_cpu.h"
#include "qac_pool.h"
#include "qac_util.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#define FMA_ITERS 20000000L

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* best wall and CPU seconds over the rounds */
typedef struct { double wall, cpu; } best_t;
#define TIMED(best, body)                                        \
    do {                                                         \
        double w0_ = qac_now(), c0_ = cpu_now();                 \
        body;                                                    \
        double w_ = qac_now() - w0_, c_ = cpu_now() - c0_;       \
        if (w_ < (best).wall) (best).wall = w_;                  \
        if (c_ < (best).cpu) (best).cpu = c_;                    \
    } while (0)

/* ---- peak FMA: NACC independent chains of VEC-wide FMAs per thread ---- */
#if defined(__x86_64__) && defined(__GNUC__)
#define PEAK_FN(NAME, TARGET, VT, SET1, FMADD, ADD, NACC, LANES)                                      \
    __attribute__((target(TARGET))) static double NAME(long iters) {                                \
        VT acc[NACC], m = SET1(0.9999999f), c = SET1(1e-7f);                                        \
        for (int i = 0; i < NACC; i++) acc[i] = SET1((float)i);                                     \
        for (long it = 0; it < iters; it++) {                                                       \
            _Pragma("GCC unroll 24") for (int i = 0; i < NACC; i++) acc[i] = FMADD(acc[i], m, c);    \
            __asm__ volatile("" : "+x"(m)); /* keep the loop from being folded */                 \
        }                                                                                           \
        VT s = acc[0];                                                                              \
        for (int i = 1; i < NACC; i++) s = ADD(s, acc[i]);                                          \
        float out[LANES];                                                                           \
        memcpy(out, &s, sizeof out);                                                                \
        return out[0] + (double)iters * NACC * LANES * 2 * 0; /* the flop count is the caller's */ \
    }
PEAK_FN(peak_avx2, "avx2,fma", __m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, 12, 8)
PEAK_FN(peak_avx512, "avx512f,avx2,fma", __m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, 24, 16)

/* vdpbf16ps: 16 lanes x 2 products per instruction */
__attribute__((target("avx512f,avx512bf16"))) static double peak_bf16(long iters) {
    __m512 acc[24];
    __m512bh m = (__m512bh)_mm512_set1_epi32(0x3f803f80); /* (1.0, 1.0) */
    for (int i = 0; i < 24; i++) acc[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < iters; it++) {
        _Pragma("GCC unroll 24") for (int i = 0; i < 24; i++) acc[i] = _mm512_dpbf16_ps(acc[i], m, m);
        __asm__ volatile("" : "+v"(m));
    }
    __m512 s = acc[0];
    for (int i = 1; i < 24; i++) s = _mm512_add_ps(s, acc[i]);
    float out[16];
    memcpy(out, &s, sizeof out);
    return out[0];
}

/* vpdpbusd: 16 (or 8) lanes x 4 products per instruction. In asm: from
 * intrinsics, GCC merges the integer chains (they add the same products)
 * into a few long ones, and measures their latency instead. */
__attribute__((target("avx512f,avx512vnni"))) static double peak_vnni512(long iters) {
    __asm__ volatile("vpternlogd $0xff, %%zmm30, %%zmm30, %%zmm30\n\tvpternlogd $0xff, %%zmm31, %%zmm31, %%zmm31" ::
                         : "xmm30", "xmm31");
    for (long it = 0; it < iters; it++)
        __asm__ volatile(
        "vpdpbusd %%zmm30, %%zmm31, %%zmm0\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm1\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm2\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm3\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm4\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm5\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm6\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm7\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm8\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm9\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm10\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm11\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm12\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm13\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm14\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm15\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm16\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm17\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm18\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm19\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm20\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm21\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm22\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm23\n\t"
        ::: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23");
    return 0;
}
__attribute__((target("avx2"))) static double peak_vnni256(long iters) {
    __asm__ volatile("vpcmpeqd %%ymm14, %%ymm14, %%ymm14\n\tvpcmpeqd %%ymm15, %%ymm15, %%ymm15" ::: "xmm14", "xmm15");
    for (long it = 0; it < iters; it++)
        __asm__ volatile(
        "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm0\n\t"
        "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm1\n\t"
        "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm2\n\t"
        "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm3\n\t"
        "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm4\n\t"
        "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm5\n\t"
        "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm6\n\t"
        "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm7\n\t"
        "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm8\n\t"
        "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm9\n\t"
        "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm10\n\t"
        "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm11\n\t"
        ::: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11");
    return 0;
}
#endif

/* the core's clock: 8 dependent adds an iteration, one a cycle on every
 * x86 core of the last decade (integer add latency 1) */
static double add_chain(long iters) {
    long x = 0;
    for (long it = 0; it < iters; it++) {
#if defined(__x86_64__) && defined(__GNUC__)
        __asm__ volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                         "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0"
                         : "+r"(x));
#else
        x += 8;
        __asm__ volatile("" : "+r"(x));
#endif
    }
    return (double)x;
}

static double clock_ghz(int rounds) {
    long iters = FMA_ITERS;
    double best = 1e30;
    for (int r = 0; r < rounds; r++) {
        double c0 = cpu_now();
        volatile double sink = add_chain(iters);
        (void)sink;
        double dt = cpu_now() - c0;
        best = dt < best ? dt : best;
    }
    return 8.0 * iters / best / 1e9;
}

static double peak_generic(long iters) { /* scalar chains, as the portable kernels run */
    float acc[8];
    for (int i = 0; i < 8; i++) acc[i] = (float)i;
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < 8; i++) acc[i] = __builtin_fmaf(acc[i], 0.9999999f, 1e-7f);
    return acc[0] + acc[7];
}

#define PEAK_BF16 3    /* the bf16 line: vdpbf16ps on the AVX-512 path */
#define PEAK_VNNI512 4 /* the int8 lines: vpdpbusd, 512 or 256 bits */
#define PEAK_VNNI256 5

typedef struct {
    int isa; /* a qac_isa, or PEAK_BF16 */
    long iters;
    volatile double sink;
} peak_ctx;

static void peak_task(void *vctx, int64_t b, int64_t e, int tid) {
    peak_ctx *c = vctx;
    double s = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    if (c->isa == PEAK_BF16) s = peak_bf16(c->iters);
    else if (c->isa == PEAK_VNNI512) s = peak_vnni512(c->iters);
    else if (c->isa == PEAK_VNNI256) s = peak_vnni256(c->iters);
    else if (c->isa == QAC_ISA_AVX512) s = peak_avx512(c->iters);
    else if (c->isa == QAC_ISA_AVX2) s = peak_avx2(c->iters);
    else
#endif
        s = peak_generic(c->iters);
    c->sink += s;
}

static double flops_per_iter(int isa) {
    if (isa == PEAK_VNNI512) return 24.0 * 64 * 2;
    if (isa == PEAK_VNNI256) return 12.0 * 32 * 2;
    return isa == PEAK_BF16 ? 24.0 * 32 * 2 : isa == QAC_ISA_AVX512 ? 24.0 * 16 * 2 : isa == QAC_ISA_AVX2 ? 12.0 * 8 * 2 : 8.0 * 2;
}

static void *peak_thread(void *c) {
    peak_task(c, 0, 1, 0);
    return NULL;
}

/* GFLOP/s: .wall for all threads by the wall clock, .cpu per core-second.
 * One plain thread each (a pool's caller may take every task itself). */
static best_t peak_gflops(int isa, int threads, int rounds) {
    peak_ctx c = {isa, isa == QAC_ISA_GENERIC ? FMA_ITERS / 50 : FMA_ITERS / 4, 0};
    best_t b = {1e30, 1e30};
    pthread_t th[64];
    if (threads > 64) threads = 64;
    for (int r = 0; r < rounds; r++)
        TIMED(b, {
            for (int t = 0; t < threads; t++) pthread_create(&th[t], NULL, peak_thread, &c);
            for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);
        });
    double gf = flops_per_iter(isa) * c.iters * threads / 1e9;
    return (best_t){gf / b.wall, gf / b.cpu};
}

/* ---- read bandwidth: sum a buffer far larger than the caches ---- */
typedef struct {
    const float *x;
    int64_t n;
    volatile float sink;
} bw_ctx;

static void bw_task(void *vctx, int64_t b, int64_t e, int tid) {
    bw_ctx *c = vctx;
    float acc[16] = {0};
    for (int64_t i = b * 16; i < e * 16; i += 16)
        for (int l = 0; l < 16; l++) acc[l] += c->x[i + l];
    c->sink += acc[0] + acc[15];
}

static double read_gbps(qac_pool *pool, int rounds) {
    int64_t n = (int64_t)512 << 20 >> 2; /* 512 MiB */
    float *x = malloc(sizeof(float) * (size_t)n);
    if (!x) return 0;
    for (int64_t i = 0; i < n; i++) x[i] = 1.0f;
    bw_ctx c = {x, n, 0};
    double best = 1e30;
    for (int r = 0; r < rounds; r++) {
        double t0 = qac_now();
        qac_pool_for(pool, n / 16, 65536, bw_task, &c);
        double dt = qac_now() - t0;
        best = dt < best ? dt : best;
    }
    free(x);
    return (double)n * 4 / best / 1e9;
}

/* ---- the kernels ---- */
static float frand(unsigned long long *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return (float)((double)(*s >> 11) / 9007199254740992.0 - 0.5);
}

/* Let the pool's workers finish spinning and sleep (pool.c: up to 100 us
 * after their last job), so that the process's CPU clock holds their time. */
static void settle(void) {
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
}

/* bf16: 0 fp32, 1 bf16, 2 int8. Each round repeats the call for at least
 * 0.2 s (see the top of the file for why). */
static best_t gemm_gflops(int N, int IC, int OC, int bf16, qac_pool *pool, int rounds) {
    unsigned long long s = 42;
    float *a = malloc(sizeof(float) * (size_t)N * IC), *w = malloc(sizeof(float) * (size_t)OC * IC);
    float *out = malloc(sizeof(float) * (size_t)N * OC), *bias = malloc(sizeof(float) * OC);
    best_t b = {1e30, 1e30};
    qac_packed_w pw;
    if (!a || !w || !out || !bias) goto out;
    for (size_t i = 0; i < (size_t)N * IC; i++) a[i] = frand(&s);
    for (size_t i = 0; i < (size_t)OC * IC; i++) w[i] = frand(&s);
    for (int i = 0; i < OC; i++) bias[i] = frand(&s);
    if ((bf16 == 2   ? qac_gemm_pack_int8(&pw, w, OC, IC)
         : bf16 == 1 ? qac_gemm_pack_bf16(&pw, w, OC, IC)
                     : qac_gemm_pack(&pw, w, OC, IC)) != QAC_OK)
        goto out;
    double t0 = qac_now();
    qac_gemm(out, a, &pw, bias, NULL, N, NULL, pool); /* warm, and how long a call takes */
    double one = qac_now() - t0;
    int reps = one > 0 ? (int)(0.2 / one) + 1 : 1;
    for (int r = 0; r < rounds; r++) {
        settle();
        double w0 = qac_now(), c0 = cpu_now();
        for (int i = 0; i < reps; i++) qac_gemm(out, a, &pw, bias, NULL, N, NULL, pool);
        double wt = qac_now() - w0;
        settle();
        double ct = cpu_now() - c0;
        if (wt < b.wall) b.wall = wt;
        if (ct < b.cpu) b.cpu = ct;
    }
    qac_gemm_packed_free(&pw);
    b.wall /= reps, b.cpu /= reps;
out:
    free(a), free(w), free(out), free(bias);
    double gf = 2.0 * N * IC * OC / 1e9;
    return (best_t){gf / b.wall, gf / b.cpu};
}

/* Flat scan: nq queries against n x dim rows (fp32, or bf16 codes), top 10;
 * 2 * n * dim * nq flops. The rows are evicted from the caches before each
 * round (a sweep over 64 MiB), as the encoder's weights evict them between
 * the server's batches. */
static int row_less(const void *ctx, int64_t a, int64_t b) {
    (void)ctx;
    return a > b;
}

static best_t scan_gflops(int64_t n, int dim, int nq, int bf16, qac_pool *pool, int rounds) {
    unsigned long long s = 11;
    float *x = malloc(sizeof(float) * (size_t)n * dim), *q = malloc(sizeof(float) * (size_t)nq * dim);
    uint16_t *xb = bf16 ? malloc(sizeof(uint16_t) * (size_t)n * dim) : NULL;
    float *sc = malloc(sizeof(float) * (size_t)nq * 10);
    uint64_t *evict = calloc(((size_t)64 << 20) / sizeof(uint64_t), sizeof(uint64_t));
    int64_t *rows = malloc(sizeof(int64_t) * (size_t)nq * 10);
    best_t b = {1e30, 1e30};
    if (!x || !q || (bf16 && !xb) || !sc || !evict || !rows) goto out;
    for (size_t i = 0; i < (size_t)n * dim; i++) x[i] = frand(&s);
    for (size_t i = 0; i < (size_t)nq * dim; i++) q[i] = frand(&s);
    if (bf16)
        for (size_t i = 0; i < (size_t)n * dim; i++) xb[i] = qac_bf16_from_float(x[i]);
    qac_flat f = {bf16 ? NULL : x, NULL, n, dim, row_less, NULL, xb};
    for (int r = 0; r < rounds; r++) {
        for (size_t i = 0; i < ((size_t)64 << 20) / sizeof(uint64_t); i++) evict[i] += (uint64_t)r; /* not memset: its streaming stores bypass the caches */
        TIMED(b, qac_flat_topk(&f, q, nq, 10, pool, sc, rows));
    }
out:
    free(x), free(q), free(xb), free(sc), free(evict), free(rows);
    double gf = 2.0 * n * dim * nq / 1e9;
    return (best_t){gf / b.wall, gf / b.cpu};
}

/* attention on one thread: per head, S = Q K^T (T x T, k = hs), then P V */
static best_t attention_gflops(int T, int hs, int heads, int rounds) {
    unsigned long long s = 7;
    float *q = malloc(sizeof(float) * (size_t)T * hs), *k = malloc(sizeof(float) * (size_t)T * hs);
    float *att = malloc(sizeof(float) * (size_t)T * T), *o = malloc(sizeof(float) * (size_t)T * hs);
    float *pk = malloc(sizeof(float) * qac_gemm_packed_floats(T, T > hs ? T : hs));
    for (size_t i = 0; i < (size_t)T * hs; i++) q[i] = frand(&s), k[i] = frand(&s);
    best_t b = {1e30, 1e30};
    for (int r = 0; r < rounds; r++)
        TIMED(b, for (int h = 0; h < heads; h++) {
            qac_gemm_pack_into(pk, k, T, hs, hs, 0);
            qac_gemm_strided(att, T, q, hs, pk, hs, T, 0.125f, T);
            qac_gemm_pack_into(pk, k, hs, T, hs, 1);
            qac_gemm_strided(o, hs, att, T, pk, T, hs, 1.0f, T);
        });
    free(q), free(k), free(att), free(o), free(pk);
    double gf = 4.0 * T * T * hs * heads / 1e9;
    return (best_t){gf / b.wall, gf / b.cpu};
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2, rounds = argc > 2 ? atoi(argv[2]) : 5;
    const char *which = argc > 3 ? argv[3] : "all";
    int do_int8 = !strcmp(which, "int8");
    int do_gemm = !strcmp(which, "all") || !strcmp(which, "gemm"), do_scan = !strcmp(which, "all") || !strcmp(which, "scan");
    if (!do_gemm && !do_scan && !do_int8) {
        fprintf(stderr, "usage: qac_bench_cpu_peak [threads] [rounds] [all|gemm|scan|int8]\n");
        return 2;
    }
    qac_pool *pool = NULL;
    if (threads < 1 || qac_pool_create(&pool, threads) != QAC_OK) return 2;
    qac_isa best = qac_cpu_isa_best();
    printf("cpu_peak: threads=%d rounds=%d best_isa=%s\n", threads, rounds, qac_cpu_isa_name(best));
    double ghz = clock_ghz(rounds);
    printf("clock (dependent integer adds, 1 thread): %.2f GHz\n", ghz);
    best_t peak[4] = {{0, 0}};
    for (int isa = QAC_ISA_GENERIC; !do_int8 && isa <= (int)best; isa++) {
        best_t p1 = peak_gflops(isa, 1, rounds);
        peak[isa] = peak_gflops(isa, threads, rounds);
        printf("peak %-7s fma GFLOP/s: %d threads %7.1f (wall), per core %7.1f (1 thread %7.1f)\n",
               qac_cpu_isa_name((qac_isa)isa), threads, peak[isa].wall, peak[isa].cpu, p1.cpu);
    }
    int bf16 = !do_int8 && best == QAC_ISA_AVX512 && qac_cpu_bf16();
    if (bf16) {
        best_t p1 = peak_gflops(PEAK_BF16, 1, rounds);
        peak[PEAK_BF16] = peak_gflops(PEAK_BF16, threads, rounds);
        printf("peak %-7s dot GFLOP/s: %d threads %7.1f (wall), per core %7.1f (1 thread %7.1f)\n", "bf16", threads,
               peak[PEAK_BF16].wall, peak[PEAK_BF16].cpu, p1.cpu);
    }
    /* both VNNI widths the CPU has (the VEX form needs AVX-VNNI, which
     * AVX512-VNNI does not imply); the products are measured against the
     * width the int8 kernels use */
    int vnni = qac_cpu_vnni(), pv = vnni == 512 ? PEAK_VNNI512 : PEAK_VNNI256;
    qac_cpu_set_isa(best >= QAC_ISA_AVX2 ? QAC_ISA_AVX2 : best); /* the AVX2 path's VNNI: AVX-VNNI or none */
    int avxvnni = qac_cpu_vnni() == 256;
    qac_cpu_set_isa(best);
    best_t peak_i8 = {0, 0};
    for (int w = PEAK_VNNI512; vnni && w <= PEAK_VNNI256; w++) {
        if (w == PEAK_VNNI512 && vnni != 512) continue;
        if (w == PEAK_VNNI256 && !avxvnni) continue;
        best_t p1 = peak_gflops(w, 1, rounds), pt = peak_gflops(w, threads, rounds);
        if (w == pv) peak_i8 = pt;
        printf("peak %-7s dot GOP/s:   %d threads %7.1f (wall), per core %7.1f (1 thread %7.1f): %.2f vpdpbusd a "
               "cycle\n",
               w == PEAK_VNNI512 ? "vnni512" : "vnni256", threads, pt.wall, pt.cpu, p1.cpu,
               p1.cpu / (ghz * (w == PEAK_VNNI512 ? 128 : 64)));
        /* each thread alone on a core retires what one thread does: a
         * per-core figure well below the 1-thread one means another
         * program held a core during these rounds, and every %peak below
         * (against it) would read high */
        if (threads > 1 && pt.cpu < 0.9 * p1.cpu)
            printf("warning: %d threads reached %.0f%% of one thread's per-core peak: a core was busy; this run's "
                   "%%peak figures are void, rerun on a quiet machine\n",
                   threads, 100 * pt.cpu / p1.cpu);
    }
    if (!do_int8) printf("peak read bandwidth, %d threads: %.1f GB/s\n", threads, read_gbps(pool, rounds));
    /* the encoder's products at 2,048 rows, and BERT-base's at a batch of
     * 64 passages of 128 tokens (8,192 rows; int8 only) */
    static const struct { const char *name; int N, IC, OC; } shapes[] = {
        {"minilm qkv", 2048, 384, 1152},    {"minilm attn-out", 2048, 384, 384}, {"minilm ffn-up", 2048, 384, 1536},
        {"minilm ffn-down", 2048, 1536, 384}, {"bert qkv", 2048, 768, 2304},    {"bert attn-out", 2048, 768, 768},
        {"bert ffn-up", 2048, 768, 3072},   {"bert ffn-down", 2048, 3072, 768}, {"bert qkv b64", 8192, 768, 2304},
        {"bert attn-out b64", 8192, 768, 768}, {"bert ffn-up b64", 8192, 768, 3072},
        {"bert ffn-down b64", 8192, 3072, 768},
    };
    printf("%-22s %18s %-7s %12s %13s %6s\n", "kernel", "N x IC x OC", "isa", "GFLOP/s wall", "GFLOP/s /core",
           "%peak");
    for (size_t i = 0; (do_gemm || do_int8) && i < sizeof shapes / sizeof shapes[0]; i++) {
        int big = shapes[i].N > 2048;
        for (int isa = QAC_ISA_GENERIC; !do_int8 && !big && isa <= (int)best; isa++) {
            if (isa == QAC_ISA_GENERIC && i > 0) continue; /* one line is enough for the portable path */
            qac_cpu_set_isa((qac_isa)isa);
            best_t g = gemm_gflops(shapes[i].N, shapes[i].IC, shapes[i].OC, 0, isa ? pool : NULL, isa ? rounds : 1);
            printf("%-22s %5d x%5d x%5d %-7s %12.1f %13.1f %5.1f%%\n", shapes[i].name, shapes[i].N, shapes[i].IC,
                   shapes[i].OC, qac_cpu_isa_name((qac_isa)isa), g.wall, g.cpu, 100 * g.cpu / peak[isa].cpu);
            if (isa == (int)best && bf16) {
                g = gemm_gflops(shapes[i].N, shapes[i].IC, shapes[i].OC, 1, pool, rounds);
                printf("%-22s %5d x%5d x%5d %-7s %12.1f %13.1f %5.1f%%\n", shapes[i].name, shapes[i].N, shapes[i].IC,
                       shapes[i].OC, "bf16", g.wall, g.cpu, 100 * g.cpu / peak[PEAK_BF16].cpu);
            }
        }
        if (vnni) {
            qac_cpu_set_isa(best);
            best_t g = gemm_gflops(shapes[i].N, shapes[i].IC, shapes[i].OC, 2, pool, rounds);
            printf("%-22s %5d x%5d x%5d %-7s %12.1f %13.1f %5.1f%%  (GOP/s, of the VNNI peak)\n", shapes[i].name,
                   shapes[i].N, shapes[i].IC, shapes[i].OC, "int8", g.wall, g.cpu, 100 * g.cpu / peak_i8.cpu);
        }
    }
    for (int hs = 32; do_gemm && hs <= 64; hs += 32)
        for (int isa = QAC_ISA_GENERIC; isa <= (int)best; isa++) {
            qac_cpu_set_isa((qac_isa)isa);
            best_t g = attention_gflops(128, hs, isa ? 12 : 1, rounds);
            printf("attention (1 thread) %5d x%5d x%5d %-7s %12.1f %13.1f %5.1f%%\n", 128, hs, 128,
                   qac_cpu_isa_name((qac_isa)isa), g.wall, g.cpu, 100 * g.cpu / peak[isa].cpu);
        }
    /* the server's scan (20,000 x 384, a batch of 1, 16 or 64 queries) and a corpus far past the caches */
    static const struct { int64_t n; int dim, nq; } scans[] = {
        {20000, 384, 1}, {20000, 384, 16}, {20000, 384, 64}, {1000000, 384, 16}, {1000000, 384, 64},
    };
    for (size_t i = 0; do_scan && i < sizeof scans / sizeof scans[0]; i++)
        for (int isa = QAC_ISA_AVX2 <= best ? QAC_ISA_AVX2 : QAC_ISA_GENERIC; isa <= (int)best + bf16; isa++) {
            int isb = isa > (int)best;
            qac_cpu_set_isa(isb ? best : (qac_isa)isa);
            best_t g = scan_gflops(scans[i].n, scans[i].dim, scans[i].nq, isb, pool, rounds);
            double bytes = (double)scans[i].n * scans[i].dim * (isb ? 2 : 4);
            printf("flat scan nq %-3d %7lld x%5d %-7s %12.1f %13.1f %5.1f%%  %6.1f GB/s\n", scans[i].nq,
                   (long long)scans[i].n, scans[i].dim, isb ? "bf16" : qac_cpu_isa_name((qac_isa)isa), g.wall, g.cpu,
                   100 * g.cpu / peak[isb ? PEAK_BF16 : isa].cpu,
                   bytes * g.wall / (2.0 * scans[i].n * scans[i].dim * scans[i].nq));
        }
    qac_pool_free(pool);
    return 0;
}
