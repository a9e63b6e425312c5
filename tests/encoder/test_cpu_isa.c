/* The CPU path's configuration (util/cpu.c): every name, "auto", an unknown
 * name and a path beyond what the CPU runs, each with a message naming it;
 * a selected path is the one the kernels then take. */
#include <string.h>

#include "qac_cpu.h"
#include "testutil.h"

int main(void) {
    qac_isa got = QAC_ISA_GENERIC;
    static const char *names[] = {"generic", "avx2", "avx512"};
    for (int best = QAC_ISA_GENERIC; best <= QAC_ISA_AVX512; best++) {
        CHECK_OK(qac_cpu_isa_parse("auto", (qac_isa)best, &got));
        CHECK(got == (qac_isa)best);
        CHECK_OK(qac_cpu_isa_parse(NULL, (qac_isa)best, &got));
        CHECK(got == (qac_isa)best);
        for (int want = QAC_ISA_GENERIC; want <= QAC_ISA_AVX512; want++) {
            qac_status st = qac_cpu_isa_parse(names[want], (qac_isa)best, &got);
            if (want <= best) CHECK(st == QAC_OK && got == (qac_isa)want);
            else
                CHECK_MSG(st == QAC_ERR_UNSUPPORTED && strstr(qac_last_error(), names[want]) &&
                              strstr(qac_last_error(), "lacks") && strstr(qac_last_error(), names[best]),
                          "%s on a %s CPU: %s", names[want], names[best], qac_last_error());
        }
    }
    CHECK_ERR(qac_cpu_isa_parse("avx3", QAC_ISA_AVX512, &got), QAC_ERR_INVALID, "'avx3'");
    CHECK_ERR(qac_cpu_isa_parse("", QAC_ISA_AVX512, &got), QAC_ERR_INVALID, "not one of");
    for (int want = QAC_ISA_GENERIC; want <= (int)qac_cpu_isa_best(); want++) {
        CHECK_OK(qac_cpu_isa_select(names[want]));
        CHECK(qac_cpu_isa() == (qac_isa)want);
    }
    CHECK_OK(qac_cpu_isa_select("auto"));
    CHECK(qac_cpu_isa() == qac_cpu_isa_best());
    if (qac_cpu_isa_best() < QAC_ISA_AVX512) {
        CHECK_ERR(qac_cpu_isa_select("avx512"), QAC_ERR_UNSUPPORTED, "lacks");
        CHECK(qac_cpu_isa() == qac_cpu_isa_best());
    }
    return qac_test_summary();
}
