/* Runs the CPU twins of the CUDA trainer's fused passes
 * (qac_residual_layernorm_forward/_backward, qac_bias_gelu_forward/_backward)
 * on seeded random inputs and writes inputs, dropout mask and outputs as raw
 * little-endian float32 files into DIR, for test_fused_twins.py to compare
 * with PyTorch:
 *   fused_twin_driver DIR SEED B T C P DADD N I
 * The mask is what qac_dropout draws at the sublayer's site (the scale
 * 1 / (1 - p) included), a pure input of the reference. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bert_cpu.h"
#include "qac_rng.h"

static uint64_t rng_key;
static uint64_t rng_n;

static void fill(float *a, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++)
        a[i] = lo + (hi - lo) * (float)((qac_rng_u64(rng_key, rng_n++) >> 40) * (1.0 / 16777216.0));
}

static void put(const char *dir, const char *name, const float *a, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.f32", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(a, sizeof(float), n, f) != n || fclose(f)) {
        perror(path);
        exit(1);
    }
}

static float *vec(size_t n) {
    float *a = calloc(n ? n : 1, sizeof(float));
    if (!a) {
        fputs("out of memory\n", stderr);
        exit(1);
    }
    return a;
}

int main(int argc, char **argv) {
    if (argc != 10) {
        fputs("usage: fused_twin_driver DIR SEED B T C P DADD N I\n", stderr);
        return 2;
    }
    const char *dir = argv[1];
    rng_key = strtoull(argv[2], NULL, 10);
    const int B = atoi(argv[3]), T = atoi(argv[4]), C = atoi(argv[5]), with_dadd = atoi(argv[7]);
    const float p = (float)atof(argv[6]);
    const int N = atoi(argv[8]), I = atoi(argv[9]);
    const size_t n = (size_t)B * T * C, R = (size_t)B * T, m = (size_t)N * I;
    const int layer = 3, site = QAC_DROP_ATT_OUT;
    const float eps = 1e-12f;
    qac_dropout d = {p, p, qac_rng_key(rng_key, 1, 2, 3), NULL};

    /* the sublayer tail */
    float *proj = vec(n), *bias = vec(C), *resid = vec(n), *w = vec(C), *b = vec(C), *dout = vec(n);
    float *dadd = with_dadd ? vec(n) : NULL, *dw = vec(C), *db = vec(C), *dbias = vec(C);
    fill(proj, n, -2, 2), fill(bias, C, -0.5f, 0.5f), fill(resid, n, -2, 2), fill(w, C, 0.5f, 1.5f);
    fill(b, C, -0.3f, 0.3f), fill(dout, n, -1, 1), fill(dw, C, -1, 1), fill(db, C, -1, 1), fill(dbias, C, -1, 1);
    if (dadd) fill(dadd, n, -1, 1);
    put(dir, "proj", proj, n), put(dir, "bias", bias, C), put(dir, "resid", resid, n), put(dir, "w", w, C);
    put(dir, "b", b, C), put(dir, "dout", dout, n), put(dir, "dw0", dw, C), put(dir, "db0", db, C);
    put(dir, "dbias0", dbias, C);
    if (dadd) put(dir, "dadd", dadd, n);
    float *ones = vec(n), *mask = vec(n);
    for (size_t i = 0; i < n; i++) ones[i] = 1.0f;
    qac_dropout_forward(mask, ones, NULL, &d, layer, site, B, T, C, NULL);
    put(dir, "mask", mask, n);
    float *res = vec(n), *out = vec(n), *mean = vec(R), *rstd = vec(R), *dres = vec(n), *dproj = vec(n);
    qac_residual_layernorm_forward(res, out, mean, rstd, proj, bias, resid, w, b, &d, layer, site, B, T, C, eps, NULL);
    qac_residual_layernorm_backward(dres, dproj, dw, db, dbias, dout, dadd, res, mean, rstd, w, &d, layer, site, B, T,
                                    C, NULL);
    put(dir, "res", res, n), put(dir, "out", out, n), put(dir, "dres", dres, n), put(dir, "dproj", dproj, n);
    put(dir, "dw", dw, C), put(dir, "db", db, C), put(dir, "dbias", dbias, C);

    /* the FFN's bias + GELU */
    float *pre = vec(m), *gbias = vec(I), *gdout = vec(m), *gdbias = vec(I), *act = vec(m), *dpre = vec(m);
    fill(pre, m, -4, 4), fill(gbias, I, -1, 1), fill(gdout, m, -1, 1), fill(gdbias, I, -1, 1);
    put(dir, "pre", pre, m), put(dir, "gbias", gbias, I), put(dir, "gdout", gdout, m), put(dir, "gdbias0", gdbias, I);
    qac_bias_gelu_forward(act, pre, gbias, N, I, NULL);
    qac_bias_gelu_backward(dpre, gdbias, gdout, pre, gbias, N, I, NULL);
    put(dir, "act", act, m), put(dir, "dpre", dpre, m), put(dir, "gdbias", gdbias, I);
    return 0;
}
