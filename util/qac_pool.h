/* A persistent thread pool with one operation: a blocking parallel-for.
 *
 * The calling thread takes part in the work, so a pool of n threads starts
 * n - 1 workers. Workers sleep between calls. Callers on several threads may
 * share a pool: their parallel-fors run one after another (a caller waits
 * for the one before it). It is not reentrant: a task must not call
 * qac_pool_for on its own pool. A NULL pool runs everything serially on the
 * caller, so layer functions accept NULL. Per-thread scratch indexed by tid
 * belongs to the caller's context: two callers sharing scratch race on it
 * whatever the pool does. */
#ifndef QAC_POOL_H
#define QAC_POOL_H

#include <stdint.h>

#include "qac_common.h"

typedef struct qac_pool qac_pool;

/* Work on the index range [begin, end); tid in [0, qac_pool_size) names the
 * running thread (0 is the caller), for per-thread scratch buffers. */
typedef void (*qac_pool_fn)(void *ctx, int64_t begin, int64_t end, int tid);

/* nthreads <= 0 means one per online core. */
qac_status qac_pool_create(qac_pool **out, int nthreads);
void qac_pool_free(qac_pool *p);
/* Number of threads including the caller; 1 for a NULL pool. */
int qac_pool_size(const qac_pool *p);

/* Run fn over [0, n) in chunks of at most `grain` indices (grain <= 0: one
 * contiguous chunk per thread) and return when all chunks are done. */
void qac_pool_for(qac_pool *p, int64_t n, int64_t grain, qac_pool_fn fn, void *ctx);

#endif
