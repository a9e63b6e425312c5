/* Several callers driving one thread pool at once: each caller's every
 * index runs exactly once, on a thread id in range, and every call returns
 * (two callers used to overwrite each other's job: the busy count of one
 * left the other waiting forever, or returned while workers still ran its
 * chunks on a context gone from its stack). Calls come back to back and
 * after pauses longer than the workers' spin. Built twice: against libqac,
 * and, where the compiler has it, with ThreadSanitizer over the pool's own
 * source, which also checks the hand-offs for data races. Standalone (no
 * test utilities), so the sanitized build needs only the pool and the
 * error functions. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "qac_pool.h"

#define CALLERS 4
#define CALLS 1500
#define POOL_THREADS 3

typedef struct job {
    int64_t n;
    unsigned char *hits; /* written plainly by the tasks: visible to the caller after the call */
    atomic_int bad;      /* a tid out of range, a chunk out of [0, n), an index run twice */
} job;

static void task(void *vj, int64_t b, int64_t e, int tid) {
    job *j = vj;
    if (tid < 0 || tid >= POOL_THREADS || b < 0 || e > j->n || b >= e) atomic_fetch_add(&j->bad, 1);
    for (int64_t i = b; i < e && i < j->n; i++) {
        if (j->hits[i]) atomic_fetch_add(&j->bad, 1);
        j->hits[i] = 1;
    }
}

typedef struct caller {
    qac_pool *pool;
    int id;
    int errors;
} caller;

static void *caller_main(void *arg) {
    caller *c = arg;
    for (int call = 0; call < CALLS; call++) {
        int64_t n = 1 + (call * 37 + c->id * 11) % 400;
        int64_t grain = (call + c->id) % 4 == 0 ? 0 : 1 + (call * 13 + c->id) % 9;
        job j = {n, calloc((size_t)n, 1), 0};
        if (!j.hits) {
            c->errors++;
            break;
        }
        qac_pool_for(c->pool, n, grain, task, &j); /* j lives on this stack: the call must not return early */
        int64_t missing = 0;
        for (int64_t i = 0; i < n; i++) missing += !j.hits[i];
        if (missing || atomic_load(&j.bad)) {
            if (c->errors < 5)
                fprintf(stderr, "caller %d, call %d (n %lld, grain %lld): %lld indices not run, %d bad chunks\n",
                        c->id, call, (long long)n, (long long)grain, (long long)missing, atomic_load(&j.bad));
            c->errors++;
        }
        free(j.hits);
        if (call % 300 == 299) { /* longer than the spin: the workers go to sleep */
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

static void *watchdog(void *arg) {
    (void)arg;
    sleep(100);
    fprintf(stderr, "FAIL: callers still waiting after 100 s (a lost wake-up or a deadlock)\n");
    fflush(stderr);
    _exit(1);
}

int main(void) {
    pthread_t dog;
    pthread_create(&dog, NULL, watchdog, NULL);
    pthread_detach(dog);
    qac_pool *pool = NULL;
    if (qac_pool_create(&pool, POOL_THREADS) != QAC_OK) {
        fprintf(stderr, "FAIL: pool of %d\n", POOL_THREADS);
        return 1;
    }
    caller cs[CALLERS];
    pthread_t th[CALLERS];
    for (int i = 0; i < CALLERS; i++) {
        cs[i] = (caller){pool, i, 0};
        if (pthread_create(&th[i], NULL, caller_main, &cs[i]) != 0) {
            fprintf(stderr, "FAIL: cannot start caller %d\n", i);
            return 1;
        }
    }
    int errors = 0;
    for (int i = 0; i < CALLERS; i++) {
        pthread_join(th[i], NULL);
        errors += cs[i].errors;
    }
    qac_pool_free(pool);
    if (errors) {
        fprintf(stderr, "FAIL: %d calls of %d went wrong\n", errors, CALLERS * CALLS);
        return 1;
    }
    printf("pool: %d callers x %d calls on one pool of %d threads, every index once\n", CALLERS, CALLS,
           POOL_THREADS);
    return 0;
}
