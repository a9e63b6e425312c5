/* The CUDA encoder's host-side plan (kernels/qac_encoder_plan.h), on any
 * machine: a query-sized batch goes to the smallest bucket that holds it
 * (rows and sequences each a power of two), everything else keeps its own
 * shape; a few buckets cover every query batch; the packed inputs hold each
 * sequence's tokens and positions back to back exactly as without a
 * bucket, the padding rows token 0 at position 0 and the padding sequences
 * empty after the last row; the tunables come from the environment only
 * when valid; the encoder's graph cache has room for every bucket and flag
 * combination a query batch can reach. The GPU side (graph and direct launches giving the same
 * bits) is test_gpu_encoder's. */
#include <stdlib.h>
#include <string.h>

#include "qac_encoder_plan.h"
#include "testutil.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static int rnd(int lo, int hi) { /* [lo, hi] */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return lo + (int)((rng >> 33) % (uint64_t)(hi - lo + 1));
}

static int smallest_pow2(int n, int lo) {
    int p = lo;
    while (p < n) p *= 2;
    return p;
}

static void test_tunables(void) {
    static const char *vars[] = {"QAC_CUDA_GRAPHS",     "QAC_CUDA_GRAPH_ROWS", "QAC_CUDA_GRAPH_BATCH",
                                 "QAC_CUDA_LN_WARPS",   "QAC_CUDA_POOL_WARPS", "QAC_CUDA_GELU_ROWS",
                                 "QAC_CUDA_PRUNE"};
    enum { NV = sizeof vars / sizeof *vars };
    for (int i = 0; i < NV; i++) unsetenv(vars[i]);
    const qac_enc_tunables d = qac_enc_tunables_default();
    CHECK(d.graphs == 1 && d.graph_rows == 512 && d.graph_batch == 16 && d.ln_warps == 4 && d.pool_warps == 8 &&
          d.gelu_rows == 4 && d.prune == 1);
    setenv("QAC_CUDA_GRAPHS", "0", 1);
    setenv("QAC_CUDA_GRAPH_ROWS", "256", 1);
    setenv("QAC_CUDA_GRAPH_BATCH", "8", 1);
    setenv("QAC_CUDA_LN_WARPS", "0", 1);
    setenv("QAC_CUDA_POOL_WARPS", "3", 1);
    setenv("QAC_CUDA_GELU_ROWS", "16", 1);
    setenv("QAC_CUDA_PRUNE", "0", 1);
    qac_enc_tunables t = qac_enc_tunables_default();
    CHECK(t.graphs == 0 && t.graph_rows == 256 && t.graph_batch == 8 && t.ln_warps == 0 && t.pool_warps == 3 &&
          t.gelu_rows == 16 && t.prune == 0);
    /* not numbers, out of range, or rows per block the kernels do not take: the default stays */
    setenv("QAC_CUDA_GRAPHS", "yes", 1);
    setenv("QAC_CUDA_GRAPH_ROWS", "-1", 1);
    setenv("QAC_CUDA_GRAPH_BATCH", "12x", 1);
    setenv("QAC_CUDA_LN_WARPS", "3", 1);
    setenv("QAC_CUDA_POOL_WARPS", "17", 1);
    setenv("QAC_CUDA_GELU_ROWS", "0", 1);
    setenv("QAC_CUDA_PRUNE", "2", 1);
    t = qac_enc_tunables_default();
    CHECK(!memcmp(&t, &d, sizeof t));
    for (int i = 0; i < NV; i++) unsetenv(vars[i]);
}

/* One batch: its layout and packed inputs against what they must be. */
static void check_batch(const qac_enc_tunables *tun, int B, int T, const int *lens, const int *from, const int32_t *ids,
                        int *n_keys, int keys[][2]) {
    const qac_enc_layout L = qac_enc_layout_packed(lens, B, tun);
    int real = 0, longest = 0;
    for (int b = 0; b < B; b++) real += lens[b], longest = lens[b] > longest ? lens[b] : longest;
    const int query = tun->graph_rows > 0 && tun->graph_batch > 0 && B <= tun->graph_batch && real <= tun->graph_rows;
    CHECK_MSG(L.real_rows == real && L.real_batch == B && L.bucketed == query, "B %d rows %d: bucketed %d", B, real,
              L.bucketed);
    if (query) {
        CHECK_MSG(L.rows == smallest_pow2(real, QAC_ENC_MIN_ROWS) && L.batch == smallest_pow2(B, 1) &&
                      L.longest == L.rows,
                  "B %d rows %d: bucket %d x %d (longest %d)", B, real, L.rows, L.batch, L.longest);
        int k = 0;
        while (k < *n_keys && !(keys[k][0] == L.rows && keys[k][1] == L.batch)) k++;
        if (k == *n_keys) keys[(*n_keys)++][0] = L.rows, keys[k][1] = L.batch;
    } else {
        CHECK_MSG(L.rows == real && L.batch == B && L.longest == longest, "B %d rows %d: %d x %d", B, real, L.rows,
                  L.batch);
    }
    int32_t *pid = malloc(sizeof(int32_t) * L.rows), *pos = malloc(sizeof(int32_t) * L.rows);
    int *offs = malloc(sizeof(int) * (L.batch + 1)), *pl = malloc(sizeof(int) * L.batch);
    int *pf = malloc(sizeof(int) * L.batch);
    for (int i = 0; i < L.rows; i++) pid[i] = pos[i] = -7;
    for (int b = 0; b < L.batch; b++) offs[b] = pl[b] = pf[b] = -7;
    offs[L.batch] = -7;
    qac_enc_pack(pid, pos, offs, pl, pf, &L, ids, T, lens, from, B);
    int bad = offs[0] != 0;
    for (int b = 0; b < B; b++) {
        bad += offs[b + 1] != offs[b] + lens[b] || pl[b] != lens[b] || pf[b] != (from ? from[b] : -7);
        for (int t = 0; t < lens[b]; t++)
            bad += pid[offs[b] + t] != ids[(size_t)b * T + t] || pos[offs[b] + t] != t;
    }
    for (int b = B; b < L.batch; b++) bad += offs[b + 1] != real || pl[b] != 0 || pf[b] != (from ? 0 : -7);
    for (int r = real; r < L.rows; r++) bad += pid[r] != 0 || pos[r] != 0;
    CHECK_MSG(bad == 0, "B %d rows %d: %d packed inputs wrong", B, real, bad);
    /* token types: ids standing in for them, packed to the same rows */
    for (int i = 0; i < L.rows; i++) pos[i] = -7;
    qac_enc_pack_types(pos, &L, ids, T, lens, B);
    bad = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < lens[b]; t++) bad += pos[offs[b] + t] != ids[(size_t)b * T + t];
    for (int r = real; r < L.rows; r++) bad += pos[r] != 0;
    CHECK_MSG(bad == 0, "B %d rows %d: %d packed token types wrong", B, real, bad);
    free(pid), free(pos), free(offs), free(pl), free(pf);
}

static void test_layouts(void) {
    const qac_enc_tunables tun = qac_enc_tunables_default();
    enum { T = 80, BMAX = 40 };
    int32_t *ids = malloc(sizeof(int32_t) * BMAX * T);
    int lens[BMAX], from[BMAX], keys[64][2], n_keys = 0;
    for (int i = 0; i < BMAX * T; i++) ids[i] = rnd(1, 30000);
    for (int trial = 0; trial < 3000; trial++) {
        const int B = trial < 2000 ? rnd(1, 16) : rnd(1, BMAX);
        const int maxlen = trial % 3 == 0 ? 32 : trial % 3 == 1 ? 8 : T;
        for (int b = 0; b < B; b++) lens[b] = rnd(1, maxlen), from[b] = rnd(0, lens[b] + 1);
        check_batch(&tun, B, T, lens, trial % 2 ? from : NULL, ids, &n_keys, keys);
    }
    /* rows 16..512 and sequences 1..16: at most 6 x 5 shapes for every query batch */
    printf("query batches seen: %d buckets\n", n_keys);
    CHECK_MSG(n_keys <= 30, "%d buckets", n_keys);
    /* the edges: exactly the limits, one past them, a bucket filled exactly */
    int full[16];
    for (int b = 0; b < 16; b++) full[b] = 32;
    check_batch(&tun, 16, T, full, NULL, ids, &n_keys, keys); /* 512 rows: the largest bucket */
    full[0] = 33;
    check_batch(&tun, 16, T, full, NULL, ids, &n_keys, keys); /* 513 rows: no bucket */
    int one = 16;
    check_batch(&tun, 1, T, &one, NULL, ids, &n_keys, keys); /* 16 rows, no padding row */
    qac_enc_tunables off = tun;
    off.graph_rows = 0;
    check_batch(&off, 1, T, &one, NULL, ids, &n_keys, keys); /* buckets off */
    free(ids);
}

/* Every (rows, sequences) bucket that some query batch reaches, times the
 * flag combinations, fits in qac_enc_graph_slots: enumerated over every
 * sequence count and total length the tunables let into a bucket. */
static void test_graph_slots(void) {
    const qac_enc_tunables d = qac_enc_tunables_default();
    const int shapes[][2] = {{d.graph_rows, d.graph_batch}, {100, 3}, {16, 1}, {4096, 64}, {600, 17}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        qac_enc_tunables t = d;
        t.graph_rows = shapes[i][0], t.graph_batch = shapes[i][1];
        int keys[512][2], n = 0;
        int *lens = malloc(sizeof(int) * t.graph_batch);
        for (int B = 1; B <= t.graph_batch; B++)
            for (int rows = B; rows <= t.graph_rows; rows++) {
                for (int b = 0; b < B; b++) lens[b] = rows / B + (b < rows % B);
                const qac_enc_layout L = qac_enc_layout_packed(lens, B, &t);
                if (!L.bucketed) continue;
                int k = 0;
                while (k < n && !(keys[k][0] == L.rows && keys[k][1] == L.batch)) k++;
                if (k == n && n < 512) keys[n][0] = L.rows, keys[n][1] = L.batch, n++;
            }
        free(lens);
        const int slots = qac_enc_graph_slots(&t);
        printf("graph rows %d, batch %d: %d buckets x %d flag sets, %d slots\n", t.graph_rows, t.graph_batch, n,
               QAC_ENC_GRAPH_FLAGS, slots);
        CHECK_MSG(n * QAC_ENC_GRAPH_FLAGS <= slots, "rows %d batch %d: %d graphs wanted, room for %d", t.graph_rows,
                  t.graph_batch, n * QAC_ENC_GRAPH_FLAGS, slots);
    }
    qac_enc_tunables off = d;
    off.graph_batch = 0;
    CHECK(qac_enc_graph_slots(&off) == 0);
}

int main(void) {
    test_tunables();
    test_layouts();
    test_graph_slots();
    return qac_test_summary();
}
