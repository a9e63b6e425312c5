/* The FAISS C API subset qac calls (our shim over libfaiss when no
 * libfaiss_c exists): factory, train, add, search against brute force,
 * write/read round trip, parameters, and errors reported, not thrown. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <faiss/c_api/AutoTune_c.h>
#include <faiss/c_api/Index_c.h>
#include <faiss/c_api/error_c.h>
#include <faiss/c_api/index_factory_c.h>
#include <faiss/c_api/index_io_c.h>

#include "testutil.h"

#define N 2000
#define D 32
#define NQ 20
#define K 10

static float frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 65536.0f - 0.5f;
}

int main(void) {
    static float x[N * D], q[NQ * D], dist[NQ * K];
    static idx_t lab[NQ * K];
    unsigned seed = 7;
    for (int i = 0; i < N * D; i++) x[i] = frand(&seed);
    for (int i = 0; i < NQ * D; i++) q[i] = frand(&seed);

    FaissIndex *flat = NULL;
    CHECK(faiss_index_factory(&flat, D, "Flat", METRIC_INNER_PRODUCT) == 0 && flat);
    CHECK(faiss_Index_d(flat) == D && faiss_Index_is_trained(flat));
    CHECK(faiss_Index_metric_type(flat) == METRIC_INNER_PRODUCT);
    CHECK(faiss_Index_add(flat, N, x) == 0 && faiss_Index_ntotal(flat) == N);
    CHECK(faiss_Index_search(flat, NQ, q, K, dist, lab) == 0);
    /* brute force: best id and score per query */
    double maxdiff = 0;
    int id_ok = 1;
    for (int i = 0; i < NQ; i++) {
        int best = -1;
        double bs = -1e30;
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int d = 0; d < D; d++) s += (double)q[i * D + d] * x[j * D + d];
            if (s > bs) bs = s, best = j;
        }
        if (lab[i * K] != best) id_ok = 0;
        maxdiff = fmax(maxdiff, fabs(bs - dist[i * K]));
    }
    printf("flat vs brute force: max |score diff| %.3g\n", maxdiff);
    CHECK(id_ok);
    CHECK(maxdiff < 1e-5);

    /* write and read back: same results */
    char path[256];
    snprintf(path, sizeof path, "%s/flat.faiss", qac_test_tmpdir("shim"));
    CHECK(faiss_write_index_fname(flat, path) == 0);
    FaissIndex *back = NULL;
    CHECK(faiss_read_index_fname(path, 0, &back) == 0 && back);
    static float dist2[NQ * K];
    static idx_t lab2[NQ * K];
    CHECK(back && faiss_Index_search(back, NQ, q, K, dist2, lab2) == 0);
    CHECK(!memcmp(lab, lab2, sizeof lab) && !memcmp(dist, dist2, sizeof dist));
    FILE *f = fopen(path, "wb");
    CHECK(f && faiss_write_index(back, f) == 0);
    if (f) fclose(f);
    f = fopen(path, "rb");
    FaissIndex *back2 = NULL;
    CHECK(f && faiss_read_index(f, 0, &back2) == 0 && back2 && faiss_Index_ntotal(back2) == N);
    if (f) fclose(f);
    float rec[D];
    CHECK(back2 && faiss_Index_reconstruct(back2, 5, rec) == 0 && !memcmp(rec, x + 5 * D, sizeof rec));
    faiss_Index_free(back2);
    faiss_Index_free(back);

    /* IVF: untrained until trained; nprobe through ParameterSpace */
    FaissIndex *ivf = NULL;
    CHECK(faiss_index_factory(&ivf, D, "IVF16,Flat", METRIC_INNER_PRODUCT) == 0 && ivf);
    CHECK(!faiss_Index_is_trained(ivf));
    CHECK(faiss_Index_add(ivf, N, x) != 0 && strlen(faiss_get_last_error()) > 0); /* add before train */
    CHECK(faiss_Index_train(ivf, N, x) == 0 && faiss_Index_is_trained(ivf));
    CHECK(faiss_Index_add(ivf, N, x) == 0);
    FaissParameterSpace *ps = NULL;
    CHECK(faiss_ParameterSpace_new(&ps) == 0);
    CHECK(faiss_ParameterSpace_set_index_parameter(ps, ivf, "nprobe", 16) == 0);
    CHECK(faiss_Index_search(ivf, NQ, q, K, dist2, lab2) == 0);
    CHECK(!memcmp(lab, lab2, sizeof lab)); /* all lists visited: exact */
    CHECK(faiss_ParameterSpace_set_index_parameter(ps, flat, "nprobe", 4) != 0);
    printf("unknown parameter error: %s\n", faiss_get_last_error());
    faiss_ParameterSpace_free(ps);

    /* errors are codes and messages, never exceptions */
    FaissIndex *bad = NULL;
    CHECK(faiss_index_factory(&bad, D, "NoSuchIndex99", METRIC_INNER_PRODUCT) != 0);
    printf("bad factory error: %s\n", faiss_get_last_error());
    CHECK(strlen(faiss_get_last_error()) > 0);
    CHECK(faiss_read_index_fname("/nonexistent/x.faiss", 0, &bad) != 0);
    faiss_Index_free(ivf);
    faiss_Index_free(flat);
    return qac_test_summary();
}
