/* The host-built plan of the GPU's atomic-free embedding-gradient scatter
 * (kernels/qac_scatter_plan.h), checked on any machine: the rows are a
 * stable grouping by key, the segments cover every key's rows in order in
 * runs of at most QAC_SCATTER_SEG, and summing by the plan as the kernels do
 * equals qac_embeddings_backward's word gradient (bit for bit where a key
 * fits one segment and the gradient starts at zero, as in a training step);
 * rows of a negative key are left out, as the CPU leaves the padding
 * index's rows without a gradient (qac_embeddings_backward_at). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bert_cpu.h"
#include "qac_scatter_plan.h"
#include "testutil.h"

static uint64_t rng = 12345;
static uint32_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static void check_plan(const int32_t *keys_of_rows, int N, int K) {
    int32_t *mem = malloc(qac_scatter_plan_ints(N) * sizeof *mem), *counts = malloc((size_t)(K + 1) * 4);
    qac_scatter_plan p = qac_scatter_plan_build(mem, keys_of_rows, N, K, counts);
    const int32_t *rows = mem, *seg = mem + N, *key_seg = mem + 2 * (size_t)N + 1, *keys = mem + 3 * (size_t)N + 2;
#define KEY(r) (keys_of_rows ? keys_of_rows[r] : 0)
    char *seen = calloc((size_t)N, 1);
    int kept = 0;
    for (int r = 0; r < N; r++) kept += KEY(r) >= 0;
    int ok = p.n_rows == N && p.n_segs <= N && p.n_keys <= K;
    for (int i = 0; ok && i < kept; i++) {
        ok = rows[i] >= 0 && rows[i] < N && !seen[rows[i]];
        if (ok) seen[rows[i]] = 1;
        if (ok && i > 0) /* grouped by ascending key, stable within a key */
            ok = KEY(rows[i - 1]) < KEY(rows[i]) || (KEY(rows[i - 1]) == KEY(rows[i]) && rows[i - 1] < rows[i]);
        if (ok) ok = KEY(rows[i]) >= 0; /* a negative key's row is left out */
    }
    CHECK_MSG(ok, "rows: not a stable grouping of the kept rows by key (N %d, %d kept)", N, kept);
    ok = seg[0] == 0 && seg[p.n_segs] == kept && key_seg[0] == 0 && key_seg[p.n_keys] == p.n_segs;
    for (int k = 0; ok && k < p.n_keys; k++) {
        ok = (k == 0 || keys[k - 1] < keys[k]) && key_seg[k] < key_seg[k + 1];
        for (int s = key_seg[k]; ok && s < key_seg[k + 1]; s++) {
            ok = seg[s] < seg[s + 1] && seg[s + 1] - seg[s] <= QAC_SCATTER_SEG;
            for (int i = seg[s]; ok && i < seg[s + 1]; i++) ok = KEY(rows[i]) == keys[k];
            /* only a key's last segment may be short */
            if (ok && s + 1 < key_seg[k + 1]) ok = seg[s + 1] - seg[s] == QAC_SCATTER_SEG;
        }
    }
    CHECK_MSG(ok, "segments or keys inconsistent (N %d, %d keys, %d segments)", N, p.n_keys, p.n_segs);

    /* the kernels' arithmetic, on the host: per segment in row order, then
     * per key in segment order, added to a zero gradient */
    const int C = 5;
    float *dout = malloc(sizeof(float) * N * C), *want = calloc((size_t)K * C, 4), *got = calloc((size_t)K * C, 4);
    float *dpos = calloc((size_t)N * C, 4), *dtype = calloc((size_t)C, 4);
    for (int i = 0; i < N * C; i++) dout[i] = (float)(next() % 2001) / 1000.0f - 1.0f;
    int32_t *ids = malloc(sizeof(int32_t) * N);
    const int any_frozen = kept < N;
    /* a negative key is the padding id 0, whose row the CPU freezes */
    for (int r = 0; r < N; r++) ids[r] = KEY(r) < 0 ? 0 : KEY(r);
    qac_embeddings_backward_at(want, NULL, NULL, dout, ids, NULL, NULL, any_frozen ? 0 : -1, -1, 1, N, C);
    int exact_keys = 0, bad_exact = 0;
    double maxd = 0;
    for (int k = 0; k < p.n_keys; k++)
        for (int c = 0; c < C; c++) {
            float acc = 0;
            for (int s = key_seg[k]; s < key_seg[k + 1]; s++) {
                float part = 0;
                for (int i = seg[s]; i < seg[s + 1]; i++) part += dout[(size_t)rows[i] * C + c];
                acc += part;
            }
            got[(size_t)keys[k] * C + c] += acc;
            const double d = fabs((double)got[(size_t)keys[k] * C + c] - want[(size_t)keys[k] * C + c]);
            maxd = d > maxd ? d : maxd;
            if (key_seg[k + 1] - key_seg[k] == 1) {
                exact_keys += c == 0;
                bad_exact += got[(size_t)keys[k] * C + c] != want[(size_t)keys[k] * C + c];
            }
        }
    double maxw = 0;
    for (int i = 0; i < K * C; i++) maxw = fabs(want[i]) > maxw ? fabs(want[i]) : maxw;
    const double rel = maxw > 0 ? maxd / maxw : maxd;
    printf("N %6d keys %5d segments %5d: max |diff| / max |sum| %.3g, %d single-segment keys, %d inexact\n", N,
           p.n_keys, p.n_segs, rel, exact_keys, bad_exact);
    CHECK_MSG(bad_exact == 0, "single-segment keys must sum exactly as the CPU does");
    CHECK_MSG(rel <= 1e-5, "plan sums off by %g", rel);
    free(mem), free(counts), free(seen), free(dout), free(want), free(got), free(dpos), free(dtype), free(ids);
#undef KEY
}

int main(void) {
    for (int trial = 0; trial < 4; trial++) {
        const int N = trial == 0 ? 1 : trial == 1 ? 97 : trial == 2 ? 5000 : 65536;
        const int K = trial == 3 ? 30522 : 300;
        int32_t *keys = malloc(sizeof(int32_t) * N);
        for (int r = 0; r < N; r++) /* a few heavy keys (padding, [CLS]) past several segments */
            keys[r] = next() % 4 == 0 ? 0 : next() % 8 == 0 ? 1 : (int32_t)(next() % (uint32_t)K);
        check_plan(keys, N, K);
        free(keys);
    }
    check_plan(NULL, 1000, 2); /* token types absent: every row key 0 */
    /* the frozen padding rows (key -1), a heavy key past several segments,
     * and every row frozen */
    for (int trial = 0; trial < 2; trial++) {
        const int N = 5000, K = 300;
        int32_t *keys = malloc(sizeof(int32_t) * N);
        for (int r = 0; r < N; r++)
            keys[r] = trial ? -1 : next() % 4 == 0 ? -1 : next() % 8 == 0 ? 1 : 1 + (int32_t)(next() % (uint32_t)(K - 1));
        check_plan(keys, N, K);
        free(keys);
    }
    return qac_test_summary();
}
