/* Host-side plan of the GPU's scatter-add by key: see qac_scatter_plan.h. */
#include "qac_scatter_plan.h"

#include <string.h>

qac_scatter_plan qac_scatter_plan_build(int32_t *mem, const int32_t *keys_of_rows, int n_rows, int n_keys_max,
                                        int32_t *counts) {
    const size_t N = (size_t)n_rows;
    int32_t *rows = mem, *seg_begin = mem + N, *key_seg = mem + 2 * N + 1, *keys = mem + 3 * N + 2;
    memset(counts, 0, ((size_t)n_keys_max + 1) * sizeof *counts);
    int kept = 0;
    for (int r = 0; r < n_rows; r++) {
        const int32_t k = keys_of_rows ? keys_of_rows[r] : 0;
        if (k >= 0) counts[k + 1]++, kept++; /* a negative key: the row is left out */
    }
    for (int k = 0; k < n_keys_max; k++) counts[k + 1] += counts[k]; /* counts[k]: first slot of key k */
    qac_scatter_plan p = {n_rows, 0, 0};
    /* segments key by key, while counts[k] is still each key's start */
    for (int k = 0; k < n_keys_max; k++) {
        const int b = counts[k], e = counts[k + 1];
        if (e == b) continue;
        keys[p.n_keys] = k;
        key_seg[p.n_keys++] = p.n_segs;
        for (int o = b; o < e; o += QAC_SCATTER_SEG) seg_begin[p.n_segs++] = o;
    }
    seg_begin[p.n_segs] = kept;
    key_seg[p.n_keys] = p.n_segs;
    for (int r = 0; r < n_rows; r++) {
        const int32_t k = keys_of_rows ? keys_of_rows[r] : 0;
        if (k >= 0) rows[counts[k]++] = r;
    }
    return p;
}

void qac_scatter_keys_unpadded(int32_t *keys, const int32_t *src, int n_rows, int32_t pad) {
    for (int r = 0; r < n_rows; r++) keys[r] = src[r] == pad ? -1 : src[r];
}
