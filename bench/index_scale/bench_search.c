/* Search timing for bench/index_scale: opens an index, runs raw float32
 * queries in one batch, prints "seconds <t>" and writes the result rows.
 * usage: qac_bench_index_search DIR QUERIES.f32 NQ K OUT.rows [name=value] */
#include <stdio.h>
#include <stdlib.h>

#include "qac_config.h"
#include "qac_cpu.h"
#include "qac_index.h"
#include "qac_util.h"

int main(int argc, char **argv) {
    /* QAC_CPU_ISA picks the scan's path, through the one configuration row */
    static const qac_opt isa_opts[] = {QAC_CPU_ISA_OPT};
    qac_opts isa;
    if (qac_opts_parse(&isa, isa_opts, 1, 0, NULL) || qac_cpu_isa_select(qac_opts_str(&isa, "cpu-isa"))) {
        fprintf(stderr, "%s: %s\n", argv[0], qac_last_error());
        return 2;
    }
    qac_opts_free(&isa);
    if (argc < 6) {
        fprintf(stderr, "usage: qac_bench_index_search DIR QUERIES.f32 NQ K OUT.rows [name=value]\n");
        return 2;
    }
    int nq = atoi(argv[3]), k = atoi(argv[4]);
    double t0 = qac_now();
    qac_index *ix = NULL;
    if (qac_index_open(&ix, argv[1], QAC_DEVICE_CPU)) {
        fprintf(stderr, "open: %s\n", qac_last_error());
        return 1;
    }
    double t_open = qac_now() - t0;
    if (argc > 6) {
        char name[64];
        double v;
        if (sscanf(argv[6], "%63[^=]=%lf", name, &v) != 2 || qac_index_set_param(ix, name, v)) {
            fprintf(stderr, "param %s: %s\n", argv[6], qac_last_error());
            return 1;
        }
    }
    int dim = qac_index_dim(ix);
    float *q = malloc(sizeof(float) * (size_t)nq * dim), *s = malloc(sizeof(float) * (size_t)nq * k);
    int64_t *r = malloc(sizeof(int64_t) * (size_t)nq * k);
    FILE *f = fopen(argv[2], "rb");
    if (!q || !s || !r || !f || fread(q, sizeof(float) * dim, (size_t)nq, f) != (size_t)nq) {
        fprintf(stderr, "read %s failed\n", argv[2]);
        return 1;
    }
    fclose(f);
    t0 = qac_now();
    if (qac_index_search(ix, q, nq, k, s, r)) {
        fprintf(stderr, "search: %s\n", qac_last_error());
        return 1;
    }
    double t = qac_now() - t0;
    f = fopen(argv[5], "wb");
    if (!f || fwrite(r, sizeof(int64_t), (size_t)nq * k, f) != (size_t)nq * k) return 1;
    fclose(f);
    printf("open %.3f\nseconds %.6f\n", t_open, t);
    qac_index_free(ix);
    free(q);
    free(s);
    free(r);
    return 0;
}
