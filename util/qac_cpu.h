/* Which SIMD path the CPU kernels take (matrix product, attention,
 * element-wise math, exact scans). Every path computes each output number
 * with the same chain of operations, so they give the same bits; the choice
 * changes speed only.
 *
 * The default is the widest the CPU supports. Programs choose another from
 * their configuration table's QAC_CPU_ISA_OPT row (`--cpu-isa`, environment
 * QAC_CPU_ISA) with qac_cpu_isa_select, for tests and benchmarks. */
#ifndef QAC_CPU_H
#define QAC_CPU_H

#include "qac_common.h"

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
/* "auto" (or NULL: best), "avx512", "avx2" or "generic" into *out; an
 * unknown name is QAC_ERR_INVALID, a path beyond best QAC_ERR_UNSUPPORTED,
 * each with a message naming it. */
qac_status qac_cpu_isa_parse(const char *name, qac_isa best, qac_isa *out);
/* qac_cpu_isa_parse against this CPU, then qac_cpu_set_isa. */
qac_status qac_cpu_isa_select(const char *name);

/* The configuration table row (qac_config.h) of every program that runs the
 * CPU kernels; hand its value to qac_cpu_isa_select. */
#define QAC_CPU_ISA_OPT                                                                                        \
    {"cpu-isa", QAC_OPT_ENUM, "auto", 0, -1, "auto|avx512|avx2|generic", "QAC_CPU_ISA",                        \
     "SIMD path of the CPU kernels: auto is the widest this CPU runs; the others (same bits, other speed) "     \
     "are for tests and benchmarks, and one the CPU lacks is an error", 0}
/* The AVX-512 path is in use and the CPU has AVX512_BF16 (vdpbf16ps). */
int qac_cpu_bf16(void);
/* The width in bits of the int8 dot products (VPDPBUSD) on the path in use:
 * 512 (AVX512-VNNI on the AVX-512 path), 256 (AVX-VNNI, on the AVX2 path, or
 * on the AVX-512 path of a CPU with AVX-VNNI but not AVX512-VNNI), or 0: the
 * path has none (the generic path, or a CPU without VNNI). */
int qac_cpu_vnni(void);

#endif
