// The fused attention's tunables (kernels/qac_cuda_attention.h,
// qac_fa_tiles): which tile shapes of each kernel are compiled
// (flash_attention.cuh's QAC_FA_*_VARIANTS), whether a set of tiles names
// compiled ones, and the defaults, each kernel's variant (tile shape,
// stages, minimum blocks per SM) replaceable through the environment.
//
// It sits below the launchers (flash_fwd.cu, flash_bwd.cu), which fall back
// to the defaults, and the host-memory entry points (flash_attention.cu),
// which check the tiles a caller gives: before, the defaults lived in
// flash_attention.cu, and it and the launchers took names from each other.
// nocuda.c holds the same entry points for a build without CUDA.
#include <stdio.h>
#include <stdlib.h>

#include "flash_attention.cuh"
#include "qac_gpu_defaults.h"

static int variants_of(char kind, int (*out)[4], int max) {
    int n = 0;
#define QAC_FA_ADD(A, B, S, M)                                                             \
    if (n < max) out[n][0] = A, out[n][1] = B, out[n][2] = S, out[n][3] = M;               \
    n++;
    if (kind == 'f') {
        QAC_FA_FWD_VARIANTS(QAC_FA_ADD)
    } else if (kind == 'k') {
        QAC_FA_DKDV_VARIANTS(QAC_FA_ADD)
    } else if (kind == 'q') {
        QAC_FA_DQ_VARIANTS(QAC_FA_ADD)
    }
#undef QAC_FA_ADD
    return n;
}

int qac_fa_variants(char kind, int (*out)[4], int max) { return variants_of(kind, out, max); }

static int compiled(char kind, int a, int b, int s, int m) {
    int v[32][4];
    const int n = variants_of(kind, v, 32);
    m = qac_fa_minb(m);
    for (int i = 0; i < n && i < 32; i++)
        if (v[i][0] == a && v[i][1] == b && v[i][2] == s && v[i][3] == m) return 1;
    return 0;
}

int qac_fa_tiles_valid(const qac_fa_tiles *t) {
    return compiled('f', t->bq, t->bk, t->stages, t->minb) &&
           compiled('k', t->kv_bk, t->kv_bq, t->kv_stages, t->kv_minb) &&
           compiled('q', t->dq_bq, t->dq_bk, t->dq_stages, t->dq_minb);
}

// "AxBxS" or "AxBxSxM" from the environment into a, b, s, m when it names a
// compiled variant
static void env_variant(const char *name, char kind, int *a, int *b, int *s, int *m) {
    const char *e = getenv(name);
    int x, y, z, w = 1, c = 0;
    if (!e) return;
    const int n = sscanf(e, "%dx%dx%d%n", &x, &y, &z, &c);
    if (n != 3) return;
    if (e[c] == 'x' && sscanf(e + c, "x%d", &w) != 1) return;
    if (compiled(kind, x, y, z, w)) *a = x, *b = y, *s = z, *m = w;
}

qac_fa_tiles qac_fa_tiles_default(void) {
    // qac_gpu_defaults.h: chosen by the GPU sweep (bench/attention_gpu times
    // every variant, docs/gpu-attention.md); before one has run,
    // FlashAttention-2's shapes for head sizes up to 64 (4 warps, 64-key
    // tiles, double buffering).
    const int f[4] = {QAC_FA_FWD_DEFAULT}, k[4] = {QAC_FA_DKDV_DEFAULT}, q[4] = {QAC_FA_DQ_DEFAULT};
    qac_fa_tiles t = {f[0], f[1], f[2], k[0], k[1], k[2], q[0], q[1], q[2], f[3], k[3], q[3]};
    env_variant("QAC_FA_FWD", 'f', &t.bq, &t.bk, &t.stages, &t.minb);
    env_variant("QAC_FA_DKDV", 'k', &t.kv_bk, &t.kv_bq, &t.kv_stages, &t.kv_minb);
    env_variant("QAC_FA_DQ", 'q', &t.dq_bq, &t.dq_bk, &t.dq_stages, &t.dq_minb);
    return t;
}
