#include "qac_pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Hand-offs: a parallel-for publishes its job by bumping `generation`;
 * workers spin on it for up to SPIN_NS after their last job before they
 * sleep on work_cv, and the caller spins on `busy` as long before it
 * sleeps on done_cv. An encoder layer is a handful of parallel-fors a few
 * hundred microseconds to a few milliseconds long each, back to back: with
 * sleeping alone, each paid a futex wake-up and a scheduler round trip
 * (tens of microseconds, more in a virtual machine), which for a short
 * batch (a few queries in the server) was a large part of its time. */
#define SPIN_NS 100000

/* Callers: the job lives in the pool's fields, so one parallel-for runs at
 * a time. A second caller waits on `call_mu` for the first to finish (two
 * callers used to overwrite each other's job: one's busy count left the
 * other sleeping forever, or returned while workers still ran its chunks
 * on a context gone from its stack). Waiting keeps both results right; a
 * task that called back into its own pool would wait forever, as the
 * header forbids. */

struct qac_pool {
    int n; /* threads including the caller */
    pthread_t *threads;
    pthread_mutex_t call_mu; /* held by the caller whose job the fields below hold */
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    _Atomic uint64_t generation; /* bumped for every parallel-for, after the job's fields are set */
    atomic_int stop;
    atomic_int busy;             /* workers still inside the current job */
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

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Spin until done(p, arg) or SPIN_NS have passed; 1 if done. */
static int spin_until(int (*done)(qac_pool *, uint64_t), qac_pool *p, uint64_t arg) {
    uint64_t t0 = 0;
    for (unsigned i = 0;; i++) {
        if (done(p, arg)) return 1;
        cpu_relax();
        if ((i & 255) == 255) {
            uint64_t t = now_ns();
            if (!t0) t0 = t;
            else if (t - t0 > SPIN_NS) return 0;
        }
    }
}

static int job_posted(qac_pool *p, uint64_t seen) {
    return atomic_load_explicit(&p->stop, memory_order_relaxed) ||
           atomic_load_explicit(&p->generation, memory_order_acquire) != seen;
}

static int job_done(qac_pool *p, uint64_t unused) {
    (void)unused;
    return atomic_load_explicit(&p->busy, memory_order_acquire) == 0;
}

static void *worker_main(void *arg) {
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    qac_pool *p = wa.p;
    uint64_t seen = 0;
    for (;;) {
        if (!spin_until(job_posted, p, seen)) {
            pthread_mutex_lock(&p->mu);
            while (!job_posted(p, seen)) pthread_cond_wait(&p->work_cv, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) break;
        seen = atomic_load_explicit(&p->generation, memory_order_acquire);
        run_chunks(p, wa.tid);
        if (atomic_fetch_sub_explicit(&p->busy, 1, memory_order_acq_rel) == 1) {
            /* the last one out: wake the caller if it went to sleep */
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
    }
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
    pthread_mutex_init(&p->call_mu, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    atomic_init(&p->next, 0);
    atomic_init(&p->generation, 0);
    atomic_init(&p->stop, 0);
    atomic_init(&p->busy, 0);
    if (nthreads > 1) {
        p->threads = calloc((size_t)nthreads - 1, sizeof *p->threads);
        if (!p->threads) {
            p->n = 1; /* no worker to join */
            qac_pool_free(p);
            return qac_set_error(QAC_ERR_NOMEM, "thread pool: out of memory");
        }
        for (int i = 1; i < nthreads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (wa) *wa = (worker_arg){p, i};
            int rc = wa ? pthread_create(&p->threads[i - 1], NULL, worker_main, wa) : ENOMEM;
            if (rc != 0) {
                free(wa);
                p->n = i; /* free joins only the workers that started */
                qac_pool_free(p);
                /* EAGAIN: the system lacks the memory or threads for another */
                return qac_set_error(rc == ENOMEM || rc == EAGAIN ? QAC_ERR_NOMEM : QAC_ERR_INTERNAL,
                                     "thread pool: cannot start thread %d of %d (%s); ask for fewer threads", i,
                                     nthreads, strerror(rc));
            }
        }
    }
    *out = p;
    return QAC_OK;
}

void qac_pool_free(qac_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i - 1], NULL);
    pthread_mutex_destroy(&p->call_mu);
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
    pthread_mutex_lock(&p->call_mu);
    /* every worker is idle here (the last call waited for busy == 0) */
    p->fn = fn;
    p->ctx = ctx;
    p->total = n;
    p->grain = grain;
    atomic_store(&p->next, 0);
    atomic_store(&p->busy, p->n - 1);
    /* publish: a spinning worker sees the fields with the new generation;
     * a sleeping one is woken under the mutex it checks under */
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    run_chunks(p, 0);
    if (!spin_until(job_done, p, 0)) {
        pthread_mutex_lock(&p->mu);
        while (!job_done(p, 0)) pthread_cond_wait(&p->done_cv, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
    pthread_mutex_unlock(&p->call_mu);
}
