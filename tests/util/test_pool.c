/* The thread pool: every index of every parallel-for runs exactly once, on
 * a thread id in range, and its writes are visible to the caller when
 * qac_pool_for returns. Calls come back to back (the workers are still
 * spinning from the last one), after a pause longer than the spin (they
 * are asleep), with every grain, with fewer indices than threads, and with
 * unequal task lengths; pools of 2 to 5 threads, created and freed while
 * busy and idle. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qac_pool.h"
#include "testutil.h"

typedef struct ctx {
    int64_t n;
    int nthreads;
    unsigned char *hits;  /* written by the tasks, plainly: the caller must see them after the call */
    atomic_int bad_tid, overlap;
    int slow;             /* unequal lengths: index i spins for i % 7 rounds */
} ctx;

static void task(void *vc, int64_t b, int64_t e, int tid) {
    ctx *c = vc;
    if (tid < 0 || tid >= c->nthreads) atomic_fetch_add(&c->bad_tid, 1);
    if (b < 0 || e > c->n || b >= e) atomic_fetch_add(&c->overlap, 1);
    for (int64_t i = b; i < e && i < c->n; i++) {
        if (c->hits[i]) atomic_fetch_add(&c->overlap, 1);
        c->hits[i]++;
        if (c->slow)
            for (volatile int k = 0; k < (int)(i % 7) * 200; k++) {
            }
    }
}

static void pause_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static int run_calls(qac_pool *p, int nthreads, int calls, long pause, int slow) {
    int errors = 0;
    for (int call = 0; call < calls; call++) {
        int64_t n = (call * 37) % 301;               /* 0 .. 300, fewer than the threads too */
        int64_t grain = (call % 5 == 0) ? 0 : 1 + (call * 13) % 17;
        ctx c = {n, nthreads, calloc((size_t)n + 1, 1), 0, 0, slow};
        qac_pool_for(p, n, grain, task, &c);
        int missing = 0;
        for (int64_t i = 0; i < n; i++) missing += c.hits[i] != 1;
        if (missing || atomic_load(&c.bad_tid) || atomic_load(&c.overlap)) {
            fprintf(stderr, "pool of %d, call %d (n %lld, grain %lld): %d indices not run once, %d bad tids, %d overlaps\n",
                    nthreads, call, (long long)n, (long long)grain, missing, atomic_load(&c.bad_tid),
                    atomic_load(&c.overlap));
            errors++;
        }
        free(c.hits);
        if (pause) pause_us(pause);
    }
    return errors;
}

int main(void) {
    for (int t = 1; t <= 5; t++) {
        qac_pool *p = NULL;
        CHECK_OK(qac_pool_create(&p, t));
        CHECK(qac_pool_size(p) == t);
        CHECK_MSG(run_calls(p, t, 3000, 0, 0) == 0, "pool of %d: back-to-back calls", t);
        CHECK_MSG(run_calls(p, t, 300, 0, 1) == 0, "pool of %d: unequal task lengths", t);
        /* longer than the spin: the workers go to sleep between calls */
        CHECK_MSG(run_calls(p, t, 40, 3000, 0) == 0, "pool of %d: calls after the workers slept", t);
        CHECK_MSG(run_calls(p, t, 200, (t * 7) % 150, 1) == 0, "pool of %d: pauses around the spin's length", t);
        qac_pool_free(p); /* workers still spinning from the last call */
        CHECK_OK(qac_pool_create(&p, t));
        pause_us(5000);
        qac_pool_free(p); /* workers asleep */
    }
    /* a NULL pool runs everything on the caller */
    CHECK(run_calls(NULL, 1, 50, 0, 0) == 0);
    printf("pool: every index once, in pools of 1 to 5 threads, spinning and sleeping hand-offs\n");
    return qac_test_summary();
}
