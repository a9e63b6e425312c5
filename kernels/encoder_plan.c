/* The CUDA encoder's tunables and batch layout: see qac_encoder_plan.h. */
#include "qac_encoder_plan.h"
#include "qac_gpu_defaults.h"

#include <stdlib.h>
#include <string.h>

/* An integer from the environment when it parses whole and lies in [lo, hi]. */
static void env_int(const char *name, int lo, int hi, int *v) {
    const char *e = getenv(name);
    if (!e || !*e) return;
    char *end;
    const long x = strtol(e, &end, 10);
    if (!*end && x >= lo && x <= hi) *v = (int)x;
}

qac_enc_tunables qac_enc_tunables_default(void) {
    /* qac_gpu_defaults.h: chosen by the GPU sweep
     * (bench/encode_gpu/variants.sh times the alternatives); before one has
     * run: a query batch is what `qac serve` gathers (up to 16 queries of up
     * to 32 tokens), four rows per LayerNorm block as Apex-style kernels
     * use, eight warps to a sequence's mean (256 sequences then fill an
     * H100's SMs twice over with 16 warps each), four rows per GELU thread
     * to reuse its bias. */
    qac_enc_tunables t = {QAC_ENC_TUNABLES_DEFAULT};
    env_int("QAC_CUDA_GRAPHS", 0, 1, &t.graphs);
    env_int("QAC_CUDA_GRAPH_ROWS", 0, 1 << 16, &t.graph_rows);
    env_int("QAC_CUDA_GRAPH_BATCH", 0, 1 << 10, &t.graph_batch);
    int w = t.ln_warps;
    env_int("QAC_CUDA_LN_WARPS", 0, 16, &w);
    if (w == 0 || w == 1 || w == 2 || w == 4 || w == 8 || w == 16) t.ln_warps = w;
    env_int("QAC_CUDA_POOL_WARPS", 1, 16, &t.pool_warps);
    env_int("QAC_CUDA_GELU_ROWS", 1, 64, &t.gelu_rows);
    env_int("QAC_CUDA_PRUNE", 0, 1, &t.prune);
    return t;
}

static int pow2_at_least(int n, int lo) {
    int p = lo;
    while (p < n) p *= 2;
    return p;
}

qac_enc_layout qac_enc_layout_packed(const int *lens, int B, const qac_enc_tunables *t) {
    qac_enc_layout L = {B, B, 0, 0, 0, 0};
    for (int b = 0; b < B; b++) {
        L.real_rows += lens[b];
        if (lens[b] > L.longest) L.longest = lens[b];
    }
    L.rows = L.real_rows;
    if (t && t->graph_rows > 0 && t->graph_batch > 0 && B <= t->graph_batch && L.real_rows <= t->graph_rows) {
        L.bucketed = 1;
        L.rows = pow2_at_least(L.real_rows, QAC_ENC_MIN_ROWS);
        L.batch = pow2_at_least(B, 1);
        /* a fixed attention grid for the bucket: no sequence is longer than its rows */
        L.longest = L.rows;
    }
    return L;
}

int qac_enc_graph_slots(const qac_enc_tunables *t) {
    if (t->graph_rows <= 0 || t->graph_batch <= 0) return 0;
    int rows = 0, batches = 0;
    for (int r = QAC_ENC_MIN_ROWS; r < 2 * pow2_at_least(t->graph_rows, QAC_ENC_MIN_ROWS); r *= 2) rows++;
    for (int b = 1; b < 2 * pow2_at_least(t->graph_batch, 1); b *= 2) batches++;
    return rows * batches * QAC_ENC_GRAPH_FLAGS;
}

void qac_enc_pack(int32_t *ids_out, int32_t *pos_out, int *offs, int *lens_out, int *from_out,
                  const qac_enc_layout *L, const int32_t *ids, int T, const int *lens, const int *from, int B) {
    int r = 0;
    for (int b = 0; b < B; b++) {
        offs[b] = r;
        lens_out[b] = lens[b];
        if (from && from_out) from_out[b] = from[b];
        for (int t = 0; t < lens[b]; t++, r++) {
            ids_out[r] = ids[(size_t)b * T + t];
            pos_out[r] = t;
        }
    }
    for (int b = B; b < L->batch; b++) { /* empty sequences after the last row */
        offs[b] = r;
        lens_out[b] = 0;
        if (from && from_out) from_out[b] = 0;
    }
    offs[L->batch] = r;
    memset(ids_out + r, 0, (size_t)(L->rows - r) * sizeof *ids_out);
    memset(pos_out + r, 0, (size_t)(L->rows - r) * sizeof *pos_out);
}

void qac_enc_pack_types(int32_t *types_out, const qac_enc_layout *L, const int32_t *types, int T, const int *lens,
                        int B) {
    int r = 0;
    for (int b = 0; b < B; b++) {
        memcpy(types_out + r, types + (size_t)b * T, (size_t)lens[b] * sizeof *types_out);
        r += lens[b];
    }
    memset(types_out + r, 0, (size_t)(L->rows - r) * sizeof *types_out);
}
