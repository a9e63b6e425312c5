#include "qac_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

struct qac_pool {
    int n; /* threads including the caller */
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    uint64_t generation; /* bumped for every parallel-for */
    int stop;
    int busy;            /* workers still inside the current job */
    /* the current job */
    qac_pool_fn fn;
    void *ctx;
    int64_t total, grain;
    atomic_int_fast64_t next;
};

/* Chunks are claimed from a shared counter, so uneven work balances itself. */
static void run_chunks(qac_pool *p, int tid) {
    for (;;) {
        int64_t b = atomic_fetch_add(&p->next, p->grain);
        if (b >= p->total) break;
        int64_t e = b + p->grain < p->total ? b + p->grain : p->total;
        p->fn(p->ctx, b, e, tid);
    }
}

typedef struct worker_arg {
    qac_pool *p;
    int tid;
} worker_arg;

static void *worker_main(void *arg) {
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    qac_pool *p = wa.p;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->generation == seen) pthread_cond_wait(&p->work_cv, &p->mu);
        if (p->stop) break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        run_chunks(p, wa.tid);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0) pthread_cond_signal(&p->done_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

qac_status qac_pool_create(qac_pool **out, int nthreads) {
    *out = NULL;
    if (nthreads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        nthreads = c > 0 ? (int)c : 1;
    }
    if (nthreads > 1024) return qac_set_error(QAC_ERR_INVALID, "thread pool: %d threads is too many", nthreads);
    qac_pool *p = calloc(1, sizeof *p);
    if (!p) return qac_set_error(QAC_ERR_NOMEM, "thread pool: out of memory");
    p->n = nthreads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    atomic_init(&p->next, 0);
    if (nthreads > 1) {
        p->threads = calloc((size_t)nthreads - 1, sizeof *p->threads);
        if (!p->threads) {
            qac_pool_free(p);
            return qac_set_error(QAC_ERR_NOMEM, "thread pool: out of memory");
        }
        for (int i = 1; i < nthreads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (wa) *wa = (worker_arg){p, i};
            int rc = wa ? pthread_create(&p->threads[i - 1], NULL, worker_main, wa) : -1;
            if (rc != 0) {
                free(wa);
                p->n = i; /* free joins only the workers that started */
                qac_pool_free(p);
                return qac_set_error(QAC_ERR_INTERNAL, "thread pool: cannot start thread %d", i);
            }
        }
    }
    *out = p;
    return QAC_OK;
}

void qac_pool_free(qac_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i - 1], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work_cv);
    pthread_cond_destroy(&p->done_cv);
    free(p->threads);
    free(p);
}

int qac_pool_size(const qac_pool *p) { return p ? p->n : 1; }

void qac_pool_for(qac_pool *p, int64_t n, int64_t grain, qac_pool_fn fn, void *ctx) {
    if (n <= 0) return;
    int nt = qac_pool_size(p);
    if (grain <= 0) grain = (n + nt - 1) / nt;
    if (!p || nt == 1 || n <= grain) {
        fn(ctx, 0, n, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->total = n;
    p->grain = grain;
    atomic_store(&p->next, 0);
    p->busy = p->n - 1;
    p->generation++;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    run_chunks(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->busy > 0) pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
