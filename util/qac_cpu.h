/* Which SIMD path the CPU kernels take (matrix product, attention,
 * element-wise math, exact scans). Every path computes each output number
 * with the same chain of operations, so they give the same bits; the choice
 * changes speed only.
 *
 * The default is the widest the CPU supports. QAC_CPU_ISA=avx2|avx512|generic
 * in the environment (read once, at first use) forces one, for tests and
 * benchmarks; a request beyond the CPU falls back to the best it has. */
#ifndef QAC_CPU_H
#define QAC_CPU_H

typedef enum qac_isa {
    QAC_ISA_GENERIC = 0, /* portable C */
    QAC_ISA_AVX2 = 1,    /* AVX2 + FMA + F16C (x86-64-v3) */
    QAC_ISA_AVX512 = 2,  /* AVX-512 F/BW/DQ/VL on top of that (x86-64-v4) */
} qac_isa;

qac_isa qac_cpu_isa(void);      /* the path in use */
qac_isa qac_cpu_isa_best(void); /* the widest this CPU runs */
/* Force a path from now on, clamped to qac_cpu_isa_best(); returns the one
 * taken. Not for use while kernels run on other threads. */
qac_isa qac_cpu_set_isa(qac_isa want);
const char *qac_cpu_isa_name(qac_isa isa);
/* The AVX-512 path is in use and the CPU has AVX512_BF16 (vdpbf16ps). */
int qac_cpu_bf16(void);

#endif
