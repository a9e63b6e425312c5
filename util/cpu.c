/* SIMD path selection (see qac_cpu.h). */
#include "qac_cpu.h"

#include <stdlib.h>
#include <string.h>

#include "qac_common.h"

static int isa_in_use = -1; /* -1: not decided yet */

qac_isa qac_cpu_isa_best(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
#if defined(__clang__) && __clang_major__ < 16 /* no "f16c" in its __builtin_cpu_supports; every AVX2 CPU has it */
    int v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    int v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#endif
    if (v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return QAC_ISA_AVX512;
    if (v3) return QAC_ISA_AVX2;
#endif
    return QAC_ISA_GENERIC;
}

qac_isa qac_cpu_set_isa(qac_isa want) {
    qac_isa best = qac_cpu_isa_best();
    qac_isa got = want > best ? best : want < QAC_ISA_GENERIC ? QAC_ISA_GENERIC : want;
    __atomic_store_n(&isa_in_use, (int)got, __ATOMIC_RELAXED);
    return got;
}

qac_isa qac_cpu_isa(void) {
    int v = __atomic_load_n(&isa_in_use, __ATOMIC_RELAXED);
    if (v >= 0) return (qac_isa)v;
    return qac_cpu_set_isa(qac_cpu_isa_best());
}

qac_status qac_cpu_isa_parse(const char *name, qac_isa best, qac_isa *out) {
    static const char *names[] = {"generic", "avx2", "avx512"};
    if (!name || !strcmp(name, "auto")) {
        *out = best;
        return QAC_OK;
    }
    for (int i = QAC_ISA_GENERIC; i <= QAC_ISA_AVX512; i++) {
        if (strcmp(name, names[i]) != 0) continue;
        if (i > (int)best)
            return qac_set_error(QAC_ERR_UNSUPPORTED, "CPU path %s: this CPU lacks it (its widest is %s)", name,
                                 qac_cpu_isa_name(best));
        *out = (qac_isa)i;
        return QAC_OK;
    }
    return qac_set_error(QAC_ERR_INVALID, "CPU path '%s': not one of auto|avx512|avx2|generic", name);
}

qac_status qac_cpu_isa_select(const char *name) {
    qac_isa isa;
    qac_status st = qac_cpu_isa_parse(name, qac_cpu_isa_best(), &isa);
    if (!st) qac_cpu_set_isa(isa);
    return st;
}

const char *qac_cpu_isa_name(qac_isa isa) {
    return isa == QAC_ISA_AVX512 ? "avx512" : isa == QAC_ISA_AVX2 ? "avx2" : "generic";
}

int qac_cpu_bf16(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    return qac_cpu_isa() == QAC_ISA_AVX512 && __builtin_cpu_supports("avx512bf16");
#else
    return 0;
#endif
}

int qac_cpu_vnni(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    qac_isa isa = qac_cpu_isa();
    if (isa == QAC_ISA_AVX512 && __builtin_cpu_supports("avx512vnni")) return 512;
#if !defined(__clang__) || __clang_major__ >= 16 /* older clang does not know the name */
    if (isa >= QAC_ISA_AVX2 && __builtin_cpu_supports("avxvnni")) return 256;
#endif
#endif
    return 0;
}
