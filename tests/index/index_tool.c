/* Test driver: search an index with raw float32 queries and dump the
 * results, so Python can compare them with numpy and faiss.
 * usage: [QAC_VERIFY=full|size|none] index_tool DIR QUERIES.f32 NQ K OUT_PREFIX [nprobe|efSearch=V]
 * writes OUT_PREFIX.rows (int64 [nq,k]), .scores (float32 [nq,k]) and
 * .docids (one docid per result line, "-" for none). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qac_index.h"

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: index_tool DIR QUERIES.f32 NQ K OUT_PREFIX [name=value]\n");
        return 2;
    }
    int nq = atoi(argv[3]), k = atoi(argv[4]);
    qac_index *ix = NULL;
    qac_index_verify verify = QAC_VERIFY_FULL; /* QAC_VERIFY=size|none: the corrupt-index sweeps */
    if (getenv("QAC_VERIFY") && qac_index_verify_parse(getenv("QAC_VERIFY"), &verify)) {
        fprintf(stderr, "QAC_VERIFY: %s\n", qac_last_error());
        return 2;
    }
    if (qac_index_open_verified(&ix, argv[1], QAC_DEVICE_CPU, verify)) {
        fprintf(stderr, "open: %s\n", qac_last_error());
        return 1;
    }
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
    if (!f || fread(q, sizeof(float) * dim, (size_t)nq, f) != (size_t)nq) {
        fprintf(stderr, "read %s failed\n", argv[2]);
        return 1;
    }
    fclose(f);
    if (qac_index_search(ix, q, nq, k, s, r)) {
        fprintf(stderr, "search: %s\n", qac_last_error());
        return 1;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s.rows", argv[5]);
    f = fopen(path, "wb");
    fwrite(r, sizeof(int64_t), (size_t)nq * k, f);
    fclose(f);
    snprintf(path, sizeof path, "%s.scores", argv[5]);
    f = fopen(path, "wb");
    fwrite(s, sizeof(float), (size_t)nq * k, f);
    fclose(f);
    snprintf(path, sizeof path, "%s.docids", argv[5]);
    f = fopen(path, "w");
    for (size_t i = 0; i < (size_t)nq * k; i++) fprintf(f, "%s\n", r[i] >= 0 ? qac_index_docid(ix, r[i]) : "-");
    fclose(f);
    printf("count %lld dim %d factory %s\n", (long long)qac_index_count(ix), dim, qac_index_factory(ix));
    qac_index_free(ix);
    free(q);
    free(s);
    free(r);
    return 0;
}
