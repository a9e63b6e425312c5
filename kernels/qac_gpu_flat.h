/* GPU exact (flat) inner-product search: the corpus lives on the GPU in
 * fp16; k <= 2048, any number of queries per call (run in passes).
 *
 * Two paths (kernels/gpu_flat.cu; the selection's CPU twin is
 * kernels/qac_topk.h + topk_twin.c):
 *  - fused (1 to 16 queries): one pass over the corpus scores every row on
 *    the tensor cores and keeps only the rows at or above a threshold, the
 *    k-th best key of a strided sample of the corpus (a lower bound of the
 *    true k-th), then one radix selection over those candidates;
 *  - tiled (more queries): corpus tiles scored by cuBLAS, each tile
 *    filtered against each query's running k-th key, the survivors appended
 *    to the query's list, which a radix selection cuts back to k when it
 *    grows past compact_factor x k.
 * Both return exactly the k best rows under the total order "score
 * descending, then tie rank descending" (ties included), best first.
 *
 * Ownership: create allocates the device storage; the handle is freed with
 * qac_gpu_flat_free (NULL accepted). Calls on one handle are serialised
 * internally, so it may be shared between threads. */
#ifndef QAC_GPU_FLAT_H
#define QAC_GPU_FLAT_H

#include <stdint.h>

#include "qac_common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QAC_GPU_FLAT_KMAX 2048
#define QAC_GPU_FLAT_FUSED_MAXQ 16

typedef struct qac_gpu_flat qac_gpu_flat;

typedef enum qac_gpu_flat_path {
    QAC_GPU_FLAT_AUTO = 0,  /* fused up to fused_max_nq queries (when the dimension allows), else tiled */
    QAC_GPU_FLAT_FUSED = 1, /* fused for every pass of up to 16 queries (tiled beyond, or where it cannot run) */
    QAC_GPU_FLAT_TILED = 2
} qac_gpu_flat_path;

/* The search's tunables. Defaults from qac_gpu_flat_tuning_default; the
 * benchmark (bench/search_gpu/variants.sh) times alternatives. */
typedef struct qac_gpu_flat_tuning {
    int path;           /* qac_gpu_flat_path */
    int fused_max_nq;   /* AUTO: the fused path up to this many queries, 0..16 (default 16) */
    int fused_threads;  /* fused scan: threads per block, 64..1024, a multiple of 32 (default 256) */
    int fused_blocks;   /* fused scan: blocks per multiprocessor, 1..32 (default 2) */
    int fused_unroll;   /* fused scan: 32-column chunks each warp loads ahead, 4 or 8 (default 8) */
    int oversample;     /* fused: sample rows per k, 2..65536 (default 64): about rows / oversample candidates */
    int select_threads; /* radix selection: threads per block, 128..1024, a multiple of 32 (default 512) */
    int radix_bits;     /* radix selection: digit width, 4..12 (default 11) */
    int tile_rows;      /* tiled: corpus rows per product tile, 0 (auto: 16 M / queries within [64 K, 1 M]) or
                           1024..16 M, a multiple of 1024 */
    int compact_factor; /* tiled: cut a list back to k when it holds more than this many times k, 1..64 (default 2) */
    int filter_threads; /* tiled: threads per filter block, 64..1024, a multiple of 32 (default 256) */
} qac_gpu_flat_tuning;

void qac_gpu_flat_tuning_default(qac_gpu_flat_tuning *t);
/* QAC_ERR_INVALID naming the first field out of range. */
qac_status qac_gpu_flat_tuning_check(const qac_gpu_flat_tuning *t);
/* Apply "name=value,name=value" (the field names above; path=auto|fused|
 * tiled) to *t, then check it. NULL or "" changes nothing. */
qac_status qac_gpu_flat_tuning_parse(qac_gpu_flat_tuning *t, const char *spec);
/* "name=value,..." of every field, for reports. */
void qac_gpu_flat_tuning_format(const qac_gpu_flat_tuning *t, char *buf, size_t cap);

/* QAC_ERR_UNSUPPORTED without CUDA or a usable GPU. The tuning starts as
 * the default. */
qac_status qac_gpu_flat_create(qac_gpu_flat **out, int dim, int64_t capacity);
/* vectors: [n, dim] fp32 on the host, stored rounded to fp16; may be added
 * in pieces. An add resets the tie order to the default. */
qac_status qac_gpu_flat_add(qac_gpu_flat *g, const float *vectors, int64_t n);
/* Ties: of two rows with equal scores, the one with the higher rank comes
 * first. rank: [count] distinct values in [0, count) (a permutation), for
 * the rows added so far. Without one, the lower row comes first. */
qac_status qac_gpu_flat_set_tie_order(qac_gpu_flat *g, const uint32_t *rank);
qac_status qac_gpu_flat_set_tuning(qac_gpu_flat *g, const qac_gpu_flat_tuning *t);
void qac_gpu_flat_get_tuning(const qac_gpu_flat *g, qac_gpu_flat_tuning *t);
/* queries: [nq, dim] fp32 (rounded to fp16 on the device); scores/rows:
 * [nq, k], best first; past the end of the corpus rows are -1 and scores
 * -FLT_MAX. 1 <= k <= QAC_GPU_FLAT_KMAX. */
qac_status qac_gpu_flat_search(qac_gpu_flat *g, const float *queries, int nq, int k, float *scores,
                               int64_t *rows);
int64_t qac_gpu_flat_count(const qac_gpu_flat *g);

/* What the last search did (its last pass of queries). */
typedef struct qac_gpu_flat_stats {
    int path;               /* QAC_GPU_FLAT_FUSED or QAC_GPU_FLAT_TILED: the path that produced the results */
    int fallback;           /* 1: the fused pass found too many or too few candidates and the tiled one reran it */
    int nq;                 /* queries in the pass */
    int64_t sample_rows;    /* fused: rows in the threshold sample */
    int64_t candidates[QAC_GPU_FLAT_FUSED_MAXQ]; /* fused: candidates per query (first nq) */
    int64_t candidate_cap;  /* fused: room per query */
    int tiles;              /* tiled: product tiles */
} qac_gpu_flat_stats;
void qac_gpu_flat_last_stats(const qac_gpu_flat *g, qac_gpu_flat_stats *s);

/* The read floor of any exact search: the best of reps timed read-only
 * passes over the stored vectors (a kernel that reads every byte and
 * reduces). *seconds per pass, *bytes read per pass. For benchmarks. */
qac_status qac_gpu_flat_read_floor(qac_gpu_flat *g, int reps, double *seconds, double *bytes);

void qac_gpu_flat_free(qac_gpu_flat *g);

#ifdef __cplusplus
}
#endif
#endif
