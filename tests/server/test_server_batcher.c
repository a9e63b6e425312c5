/* The dynamic batcher with a fake encoder: concurrent requests are merged
 * into fewer encode calls, every request gets exactly its own rows, the
 * token budget holds, the encoder never sees two callers, a full queue is
 * refused and a queue wait past the timeout is cancelled. Searches of
 * concurrent requests are merged into fewer search calls (only the rows
 * that asked for hits, as deep as the deepest k), each request gets its
 * own k first hits, and a failing search fails only the searching jobs.
 * A pair batcher (the reranker's) serves a short request between the
 * slices of a large one. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake_backend.h"
#include "srv_internal.h"
#include "qac_util.h"
#include "testutil.h"

#define THREADS 16
#define PER_THREAD 40

typedef struct worker {
    qac_batcher *b;
    int id;
    int mismatches, errors;
} worker;

static qac_server_backend backend;

static qac_status encode_fn(void *user, const int32_t *const *ids, const int *lens, const int *pool_from, int n,
                            float *out) {
    return backend.encode(backend.enc, ids, lens, pool_from, n, out);
}

static void *worker_main(void *arg) {
    worker *w = arg;
    unsigned seed = (unsigned)w->id * 2654435761u + 1;
    for (int it = 0; it < PER_THREAD; it++) {
        int n = 1 + (int)(rand_r(&seed) % 5);
        int32_t ids[5][FAKE_MAX_LEN];
        const int32_t *ptrs[5];
        int lens[5];
        char text[80];
        for (int i = 0; i < n; i++) {
            int len = 1 + (int)(rand_r(&seed) % 60);
            for (int c = 0; c < len; c++) text[c] = (char)('a' + rand_r(&seed) % 26);
            lens[i] = fake_encode_text(text, (size_t)len, FAKE_MAX_LEN, ids[i]);
            ptrs[i] = ids[i];
        }
        float out[5 * FAKE_DIM], want[FAKE_DIM];
        if (qac_batcher_encode(w->b, ptrs, lens, n, out, 0) != QAC_OK) {
            w->errors++;
            continue;
        }
        for (int i = 0; i < n; i++) {
            fake_embed(ids[i], lens[i], want);
            if (memcmp(want, out + i * FAKE_DIM, sizeof want)) w->mismatches++;
        }
    }
    return NULL;
}

static void test_concurrent_batching(void) {
    fake_stats st = {0};
    st.sleep_ms = 2;
    fake_backend_init(&backend, &st, 0, 0);
    qac_batcher *b = NULL;
    qac_batcher_opts o = {FAKE_DIM, 600, 2, 1000, 0};
    CHECK_OK(qac_batcher_create(&b, encode_fn, NULL, NULL, NULL, &o, NULL));
    pthread_t th[THREADS];
    worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){b, i, 0, 0};
        pthread_create(&th[i], NULL, worker_main, &w[i]);
    }
    int mism = 0, errs = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        mism += w[i].mismatches;
        errs += w[i].errors;
    }
    qac_batcher_free(b);
    int requests = THREADS * PER_THREAD;
    printf("batching: %d requests, %d texts in %d encode calls (%.1f texts/call), max %d tokens/call, "
           "max concurrent callers %d, mismatches %d, errors %d\n",
           requests, st.texts, st.calls, (double)st.texts / st.calls, st.max_call_tokens, st.max_concurrent, mism, errs);
    CHECK(mism == 0 && errs == 0);
    CHECK(st.calls < requests / 2); /* requests were merged */
    CHECK(st.max_concurrent == 1);  /* one caller at a time */
    /* a single job may exceed the budget alone (5 texts x 62 tokens max = 310 < 600), batches never */
    CHECK(st.max_call_tokens <= 600);
}

static qac_status encode_raw_fn(void *user, const int32_t *const *ids, const int *lens, const int *pool_from, int n,
                               float *out) {
    return backend.encode_raw(backend.enc, ids, lens, pool_from, n, out);
}

/* Jobs that want the raw vectors (TEI's normalize=false) share rounds with
 * the others, but each kind goes through its own encoder. */
static void *mixed_main(void *arg) {
    worker *w = arg;
    unsigned seed = (unsigned)w->id * 40503u + 7;
    for (int it = 0; it < PER_THREAD; it++) {
        int raw = (it + w->id) % 2;
        int32_t ids[FAKE_MAX_LEN];
        char text[40];
        int len = 1 + (int)(rand_r(&seed) % 30);
        for (int c = 0; c < len; c++) text[c] = (char)('a' + rand_r(&seed) % 26);
        int n = fake_encode_text(text, (size_t)len, FAKE_MAX_LEN, ids);
        const int32_t *p = ids;
        float out[FAKE_DIM], want[FAKE_DIM];
        if (qac_batcher_run(w->b, &p, &n, NULL, 1, out, 0, NULL, NULL, 0, NULL, raw) != QAC_OK) {
            w->errors++;
            continue;
        }
        fake_embed(ids, n, want); /* the fake raw encoder scales it (fake_backend.c) */
        for (int d = 0; raw && d < FAKE_DIM; d++) want[d] *= 1.0f + (float)ids[0] / 100.0f;
        if (memcmp(want, out, sizeof want)) w->mismatches++;
    }
    return NULL;
}

static void test_raw_jobs(void) {
    fake_stats st = {0};
    st.sleep_ms = 2;
    fake_backend_init(&backend, &st, 0, 0);
    qac_batcher *b = NULL;
    qac_batcher_opts o = {FAKE_DIM, 600, 2, 1000, 0};
    CHECK_OK(qac_batcher_create(&b, encode_fn, NULL, NULL, NULL, &o, NULL));
    qac_batcher_set_raw(b, encode_raw_fn);
    pthread_t th[THREADS];
    worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){b, i, 0, 0};
        pthread_create(&th[i], NULL, mixed_main, &w[i]);
    }
    int mism = 0, errs = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        mism += w[i].mismatches;
        errs += w[i].errors;
    }
    int calls = st.calls;
    qac_batcher_free(b);
    printf("raw and normalised jobs: %d requests in %d encode calls, mismatches %d, errors %d\n", THREADS * PER_THREAD,
           calls, mism, errs);
    CHECK(mism == 0 && errs == 0);
    CHECK(calls < THREADS * PER_THREAD); /* still merged */
    CHECK(st.max_concurrent == 1);
}

typedef struct slow_arg {
    qac_batcher *b;
    qac_status st;
    int timeout_ms;
} slow_arg;

static void *one_job(void *arg) {
    slow_arg *a = arg;
    int32_t ids[3] = {1, 150, 2};
    const int32_t *p = ids;
    int len = 3;
    float out[FAKE_DIM];
    a->st = qac_batcher_encode(a->b, &p, &len, 1, out, a->timeout_ms);
    return NULL;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_queue_full_and_timeout(void) {
    fake_stats st = {0};
    st.sleep_ms = 300;
    fake_backend_init(&backend, &st, 0, 0);
    qac_batcher *b = NULL;
    /* budget of 3 tokens: each job runs alone */
    qac_batcher_opts o = {FAKE_DIM, 3, 0, 1, 0};
    CHECK_OK(qac_batcher_create(&b, encode_fn, NULL, NULL, NULL, &o, NULL));
    slow_arg a1 = {b, QAC_OK, 0}, a2 = {b, QAC_OK, 100};
    pthread_t t1, t2;
    pthread_create(&t1, NULL, one_job, &a1);
    sleep_ms(50); /* a1 is now being encoded */
    pthread_create(&t2, NULL, one_job, &a2);
    sleep_ms(30); /* a2 waits in the queue, which is full */
    slow_arg a3 = {b, QAC_OK, 0};
    one_job(&a3);
    CHECK_MSG(a3.st == QAC_ERR_BUSY, "third job: %s", qac_status_name(a3.st));
    pthread_join(t2, NULL);
    CHECK_MSG(a2.st == QAC_ERR_CANCELLED, "queued job past its timeout: %s", qac_status_name(a2.st));
    pthread_join(t1, NULL);
    CHECK(a1.st == QAC_OK);
    CHECK(qac_batcher_queue_depth(b) == 0);
    qac_batcher_free(b);
    CHECK(st.calls == 1); /* the timed-out job never reached the encoder */
}

/* ---- batched search ---- */

static pthread_mutex_t search_mu = PTHREAD_MUTEX_INITIALIZER;
static int search_calls, search_queries, search_inside, search_max_inside, search_fail;

/* Hits that depend only on the query vector, deeper k extending shallower. */
static void fake_hits(const float *v, int k, float *scores, int64_t *rows) {
    int64_t base = (int64_t)(v[0] * 1e6f) & 0xffff;
    for (int j = 0; j < k; j++) {
        scores[j] = v[1] - (float)j;
        rows[j] = base * 100 + j;
    }
}

static qac_status search_fn(void *user, const float *q, int nq, int k, float *scores, int64_t *rows) {
    (void)user;
    pthread_mutex_lock(&search_mu);
    search_calls++;
    search_queries += nq;
    if (++search_inside > search_max_inside) search_max_inside = search_inside;
    pthread_mutex_unlock(&search_mu);
    struct timespec ts = {0, 2000000L};
    nanosleep(&ts, NULL);
    for (int i = 0; i < nq; i++) fake_hits(q + (size_t)i * FAKE_DIM, k, scores + (size_t)i * k, rows + (size_t)i * k);
    pthread_mutex_lock(&search_mu);
    search_inside--;
    pthread_mutex_unlock(&search_mu);
    if (search_fail) return qac_set_error(QAC_ERR_FAISS, "fake search failure");
    return QAC_OK;
}

typedef struct sworker {
    qac_batcher *b;
    int id;
    int mismatches, errors, searched;
} sworker;

static void *sworker_main(void *arg) {
    sworker *w = arg;
    unsigned seed = (unsigned)w->id * 40503u + 7;
    for (int it = 0; it < PER_THREAD; it++) {
        int n = 1 + (int)(rand_r(&seed) % 3), k = (int)(rand_r(&seed) % 9); /* k 0: encode only */
        int32_t ids[3][FAKE_MAX_LEN];
        const int32_t *ptrs[3];
        int lens[3];
        char text[40];
        for (int i = 0; i < n; i++) {
            int len = 1 + (int)(rand_r(&seed) % 30);
            for (int c = 0; c < len; c++) text[c] = (char)('a' + rand_r(&seed) % 26);
            lens[i] = fake_encode_text(text, (size_t)len, FAKE_MAX_LEN, ids[i]);
            ptrs[i] = ids[i];
        }
        float out[3 * FAKE_DIM], sc[3 * 8], want_sc[8], vec[FAKE_DIM];
        int64_t rows[3 * 8], want_rows[8];
        if (qac_batcher_search(w->b, ptrs, lens, n, out, k, sc, rows, 0) != QAC_OK) {
            w->errors++;
            continue;
        }
        if (k > 0) w->searched += n;
        for (int i = 0; i < n; i++) {
            fake_embed(ids[i], lens[i], vec);
            if (memcmp(vec, out + i * FAKE_DIM, sizeof vec)) w->mismatches++;
            if (k == 0) continue;
            fake_hits(vec, k, want_sc, want_rows);
            if (memcmp(want_sc, sc + i * k, sizeof(float) * k) || memcmp(want_rows, rows + i * k, sizeof(int64_t) * k))
                w->mismatches++;
        }
    }
    return NULL;
}

static void test_batched_search(void) {
    fake_stats st = {0};
    st.sleep_ms = 2;
    fake_backend_init(&backend, &st, 0, 0);
    qac_batcher *b = NULL;
    qac_batcher_opts o = {FAKE_DIM, 600, 2, 1000, 0};
    CHECK_OK(qac_batcher_create(&b, encode_fn, NULL, search_fn, NULL, &o, NULL));
    pthread_t th[THREADS];
    sworker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (sworker){b, i, 0, 0, 0};
        pthread_create(&th[i], NULL, sworker_main, &w[i]);
    }
    int mism = 0, errs = 0, searched = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        mism += w[i].mismatches;
        errs += w[i].errors;
        searched += w[i].searched;
    }
    printf("batched search: %d queries searched in %d search calls (%.1f per call), max concurrent %d, "
           "mismatches %d, errors %d\n",
           search_queries, search_calls, (double)search_queries / search_calls, search_max_inside, mism, errs);
    CHECK(mism == 0 && errs == 0);
    CHECK_MSG(search_queries == searched, "searched %d query rows for %d asked", search_queries, searched);
    CHECK(search_calls < THREADS * PER_THREAD / 2); /* searches were merged */
    CHECK(search_max_inside == 1);

    /* a failing search fails the searching job, with the index's message */
    search_fail = 1;
    int32_t ids[3] = {1, 150, 2};
    const int32_t *p = ids;
    int len = 3;
    float out[FAKE_DIM], sc[4];
    int64_t rows[4];
    qac_status rs = qac_batcher_search(b, &p, &len, 1, out, 4, sc, rows, 0);
    CHECK_MSG(rs == QAC_ERR_FAISS && strstr(qac_last_error(), "fake search failure"), "failing search: %s: %s",
              qac_status_name(rs), qac_last_error());
    CHECK_OK(qac_batcher_encode(b, &p, &len, 1, out, 0)); /* encode alone is unaffected */
    search_fail = 0;
    qac_batcher_free(b);

    /* an encode-only batcher refuses a search */
    CHECK_OK(qac_batcher_create(&b, encode_fn, NULL, NULL, NULL, &o, NULL));
    CHECK_ERR(qac_batcher_search(b, &p, &len, 1, out, 4, sc, rows, 0), QAC_ERR_INVALID, "no search");
    qac_batcher_free(b);
}

/* A request that announced itself (qac_batcher_expect), then submits late. */
typedef struct late_arg {
    qac_batcher *b;
    int delay_ms, submit;
    qac_status st;
} late_arg;

static void *late_job(void *arg) {
    late_arg *a = arg;
    qac_batcher_expect(a->b);
    sleep_ms(a->delay_ms);
    if (a->submit) {
        slow_arg s = {a->b, QAC_OK, 0};
        one_job(&s);
        a->st = s.st;
    }
    qac_batcher_expect_done(a->b); /* a no-op once the job was queued */
    return NULL;
}

/* The wait policy: a free encoder starts a lone request at once (no blind
 * wait, whatever max_wait), waits for requests announced as arriving, and
 * stops waiting when an announced request leaves without submitting. */
static void test_wait_policy(void) {
    fake_stats st = {0};
    fake_backend_init(&backend, &st, 0, 0);
    qac_batcher *b = NULL;
    qac_batcher_opts o = {FAKE_DIM, 600, 400, 100, 0};
    CHECK_OK(qac_batcher_create(&b, encode_fn, NULL, NULL, NULL, &o, NULL));
    slow_arg lone = {b, QAC_OK, 0};
    double t0 = qac_now();
    one_job(&lone);
    double lone_ms = (qac_now() - t0) * 1000;
    printf("wait policy: a lone request took %.1f ms (max_wait 400 ms)\n", lone_ms);
    CHECK(lone.st == QAC_OK);
    CHECK_MSG(lone_ms < 200, "a lone request waited %.1f ms for company that was not coming", lone_ms);

    /* announced, submits 60 ms later: merged with a job queued meanwhile */
    int calls0 = st.calls;
    late_arg late = {b, 60, 1, QAC_OK};
    pthread_t th;
    pthread_create(&th, NULL, late_job, &late);
    while (qac_batcher_arriving(b) == 0) sleep_ms(1);
    slow_arg early = {b, QAC_OK, 0};
    t0 = qac_now();
    one_job(&early);
    double early_ms = (qac_now() - t0) * 1000;
    pthread_join(th, NULL);
    printf("wait policy: a queued job waited %.1f ms for an announced one; %d encode call(s) for both\n", early_ms,
           st.calls - calls0);
    CHECK(early.st == QAC_OK && late.st == QAC_OK);
    CHECK_MSG(st.calls - calls0 == 1, "the announced request was not merged (%d calls)", st.calls - calls0);
    CHECK_MSG(early_ms >= 40 && early_ms < 300, "the wait for the announced request took %.1f ms", early_ms);

    /* announced, then leaves without submitting after 60 ms: the wait ends then */
    late = (late_arg){b, 60, 0, QAC_OK};
    pthread_create(&th, NULL, late_job, &late);
    while (qac_batcher_arriving(b) == 0) sleep_ms(1);
    t0 = qac_now();
    one_job(&early);
    early_ms = (qac_now() - t0) * 1000;
    pthread_join(th, NULL);
    printf("wait policy: a withdrawn announcement ended the wait after %.1f ms\n", early_ms);
    CHECK(early.st == QAC_OK);
    CHECK_MSG(early_ms < 300, "the worker waited %.1f ms for a request that left", early_ms);
    CHECK(qac_batcher_arriving(b) == 0);
    qac_batcher_free(b);
}

/* ---- a pair batcher (the reranker's): a small request is not starved ---- */

#define BIG_PAIRS 48
#define BIG_LEN 200
#define SMALL_MARK 7777
#define MAX_CALLS 256

static pthread_mutex_t pair_mu = PTHREAD_MUTEX_INITIALIZER;
static int pair_calls, big_in_call[MAX_CALLS], small_call = -1, pair_bad;

/* scores each pair by its first id and length, 4 ms a pair (a slow encoder) */
static qac_status pair_fn(void *user, const int32_t *const *ids, const int32_t *const *types, const int *lens, int n,
                          float *out) {
    (void)user;
    pthread_mutex_lock(&pair_mu);
    int c = pair_calls++;
    for (int i = 0; i < n; i++) {
        if (ids[i][0] == SMALL_MARK) small_call = c;
        else if (c < MAX_CALLS) big_in_call[c]++;
        if (!types || types[i][0] != ids[i][0] % 2) pair_bad++;
    }
    pthread_mutex_unlock(&pair_mu);
    sleep_ms(4 * n);
    for (int i = 0; i < n; i++) out[2 * i] = (float)ids[i][0], out[2 * i + 1] = (float)lens[i];
    return QAC_OK;
}

typedef struct pair_job {
    qac_batcher *b;
    int first, n, len;
    int32_t *ids, *types;
    const int32_t **pid, **pty;
    int *lens;
    float *out;
    qac_status st;
    double done_at;
} pair_job;

static void pair_job_init(pair_job *j, qac_batcher *b, int first, int n, int len) {
    *j = (pair_job){b, first, n, len, calloc((size_t)n * len, 4), calloc((size_t)n * len, 4), calloc((size_t)n, sizeof(void *)),
                    calloc((size_t)n, sizeof(void *)), calloc((size_t)n, sizeof(int)), calloc((size_t)n * 2, 4), QAC_OK, 0};
    for (int i = 0; i < n; i++) {
        j->ids[(size_t)i * len] = first + i;
        j->types[(size_t)i * len] = (first + i) % 2;
        j->pid[i] = j->ids + (size_t)i * len, j->pty[i] = j->types + (size_t)i * len, j->lens[i] = len;
    }
}

static void *pair_job_main(void *arg) {
    pair_job *j = arg;
    j->st = qac_batcher_run_pairs(j->b, j->pid, j->pty, j->lens, j->n, j->out, 0, NULL);
    j->done_at = qac_now();
    return NULL;
}

static int pair_job_check(const pair_job *j) {
    int ok = j->st == QAC_OK;
    for (int i = 0; i < j->n; i++) ok &= j->out[2 * i] == (float)(j->first + i) && j->out[2 * i + 1] == (float)j->len;
    free(j->ids), free(j->types), free(j->pid), free(j->pty), free(j->lens), free(j->out);
    return ok;
}

/* The server's defaults (a budget of 8192 tokens, slices of 256): a rerank
 * request of 48 pairs of 200 tokens is encoded a slice at a time, so one of
 * a single short pair sent while it runs waits for the slice being
 * encoded (and at most one more), not for the large request's remaining
 * pairs; both get their own scores. */
static void test_pair_fairness(void) {
    qac_batcher *b = NULL;
    qac_batcher_opts o = {2, 8192, 2, 64, 256};
    CHECK_OK(qac_batcher_create_pairs(&b, pair_fn, NULL, &o, NULL));
    pair_job big, small;
    pair_job_init(&big, b, 1, BIG_PAIRS, BIG_LEN);
    pair_job_init(&small, b, SMALL_MARK, 1, 20);
    pthread_t tb, ts;
    pthread_create(&tb, NULL, pair_job_main, &big);
    sleep_ms(30); /* the large request's first slices are being encoded */
    pthread_mutex_lock(&pair_mu);
    int at_submit = pair_calls; /* call at_submit - 1 is running (or just done) */
    pthread_mutex_unlock(&pair_mu);
    pthread_create(&ts, NULL, pair_job_main, &small);
    pthread_join(ts, NULL);
    pthread_join(tb, NULL);
    qac_batcher_free(b);
    int waited = 0; /* the large request's pairs encoded from its submission to its call */
    for (int c = at_submit > 0 ? at_submit - 1 : 0; c < small_call && c < MAX_CALLS; c++) waited += big_in_call[c];
    printf("pair fairness: %d calls, the short request in call %d (submitted during call %d), after %d of the "
           "large request's %d pairs; done %.0f ms before it\n", pair_calls, small_call, at_submit - 1, waited,
           BIG_PAIRS, (big.done_at - small.done_at) * 1e3);
    CHECK_MSG(at_submit >= 1 && at_submit < BIG_PAIRS / 2, "the short request came while the large one ran (call %d)",
              at_submit);
    CHECK_MSG(small_call >= 0 && waited <= 2,
              "the short request waited for %d of the large request's pairs (at most the slice running and one more)",
              waited);
    CHECK(small.done_at < big.done_at);
    CHECK(pair_bad == 0);
    CHECK_MSG(pair_job_check(&big) && pair_job_check(&small), "each request gets its own pairs' scores");
}

int main(void) {
    test_raw_jobs();
    test_wait_policy();
    test_concurrent_batching();
    test_queue_full_and_timeout();
    test_batched_search();
    test_pair_fairness();
    return qac_test_summary();
}
