/* Dynamic batching, TEI-style: the worker gathers queued texts up to a
 * token budget, makes one encode
 * call for them, then one search call for the queries of every job whose
 * texts are now all encoded (depth: the largest k; each job keeps its own
 * k first hits, which is its own top-k because the index orders hits
 * totally).
 *
 * Waiting: batches form while the encoder is busy (whatever queued during
 * a batch goes into the next one). A free encoder starts at once, unless
 * requests are arriving (announced by qac_batcher_expect: inside the
 * server, their body read, not yet queued): then it waits for them, at
 * most max_wait. It never waits blindly, so a lone request pays no wait.
 *
 * Fairness: a job of at most slice_tokens is taken whole; a larger one is
 * cut into slices of slice_tokens, one slice per encoder call, and goes to
 * the back of the queue after each, so a short request waits for at most
 * one slice, never for a whole bulk job. The encoder gives a text the same
 * vector in any batch, so slicing changes no answer. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "srv_internal.h"
#include "qac_util.h"

/* The request this thread serves (set by qac_server_handle): its cancel check. */
_Thread_local const qac_cancel *qac_srv_cancel;

int qac_srv_gone(void) { return qac_srv_cancel && qac_srv_cancel->gone(qac_srv_cancel->ctx); }

typedef enum job_state { JOB_QUEUED = 0, JOB_RUNNING, JOB_DONE } job_state;

typedef struct job {
    const int32_t *const *ids;
    const int32_t *const *types; /* a pair batcher's token types */
    const int *lens;
    const int *pool_from; /* NULL: the pooling skips no tokens */
    int n;
    float *out;
    int k;           /* > 0: also search, into scores/rows [n, k] */
    int raw;         /* the pooled vectors without the model's normalisation */
    float *scores;
    int64_t *rows;
    int taken;       /* texts handed to the worker */
    int encoded;     /* texts whose vectors are in out */
    int busy;        /* a slice of it is being encoded (its buffers are borrowed) */
    int cancelled;   /* the client went away: take no more of it */
    long long tokens_left; /* tokens not yet taken */
    job_state state;
    qac_status status;
    char err[256];
    struct job *next;
} job;

typedef struct seg {
    job *j;
    int from, count;
    int at; /* its first row in the batch's output */
} seg;

struct qac_batcher {
    qac_encode_fn fn;
    qac_pair_fn pair_fn; /* a pair batcher (qac_batcher_create_pairs): fn is NULL */
    qac_encode_fn raw_fn; /* NULL: fn's vectors are the raw ones */
    void *user;
    qac_search_fn search;
    void *search_user;
    qac_batcher_opts o;
    qac_metrics *metrics;
    pthread_mutex_t mu;
    pthread_cond_t work;  /* a job arrived, or stop */
    pthread_cond_t done;  /* a batch finished */
    job *head, *tail;
    int depth;
    int arriving; /* requests announced by qac_batcher_expect, not yet queued */
    int stop;
    int last_sliced; /* the last round encoded a slice of a large job */
    pthread_t worker;
    /* the worker's reusable buffers */
    const int32_t **b_ids, **b_types;
    int *b_lens, *b_from;
    float *b_out;
    int b_cap;
    seg *segs;
    int seg_cap;
    float *s_q, *s_scores; /* search: queries [n, dim], hits [n, kmax] */
    int64_t *s_rows;
    size_t s_qcap, s_hcap;
};

static void abs_deadline(struct timespec *ts, double ms) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    long long ns = ts->tv_nsec + (long long)(ms * 1e6);
    ts->tv_sec += (time_t)(ns / 1000000000LL);
    ts->tv_nsec = (long)(ns % 1000000000LL);
}

static int grow(qac_batcher *b, int need) {
    if (need <= b->b_cap) return 1;
    int cap = b->b_cap ? b->b_cap : 64;
    while (cap < need) cap *= 2;
    const int32_t **ids = realloc(b->b_ids, (size_t)cap * sizeof *ids);
    if (!ids) return 0;
    b->b_ids = ids;
    const int32_t **types = realloc(b->b_types, (size_t)cap * sizeof *types);
    if (!types) return 0;
    b->b_types = types;
    int *lens = realloc(b->b_lens, (size_t)cap * sizeof *lens);
    if (!lens) return 0;
    b->b_lens = lens;
    int *from = realloc(b->b_from, (size_t)cap * sizeof *from);
    if (!from) return 0;
    b->b_from = from;
    float *out = realloc(b->b_out, (size_t)cap * (size_t)b->o.dim * sizeof *out);
    if (!out) return 0;
    b->b_out = out;
    b->b_cap = cap;
    return 1;
}

static int grow_search(qac_batcher *b, int nq, int kmax) {
    size_t q = (size_t)nq * (size_t)b->o.dim, h = (size_t)nq * (size_t)kmax;
    if (q > b->s_qcap) {
        float *p = realloc(b->s_q, q * sizeof *p);
        if (!p) return 0;
        b->s_q = p, b->s_qcap = q;
    }
    if (h > b->s_hcap) {
        float *p = realloc(b->s_scores, h * sizeof *p);
        if (!p) return 0;
        b->s_scores = p;
        int64_t *r = realloc(b->s_rows, h * sizeof *r);
        if (!r) return 0;
        b->s_rows = r, b->s_hcap = h;
    }
    return 1;
}

static void unlink_job(qac_batcher *b, job *target) {
    job *prev = NULL;
    for (job *j = b->head; j; prev = j, j = j->next) {
        if (j != target) continue;
        if (prev) prev->next = j->next;
        else b->head = j->next;
        if (b->tail == j) b->tail = prev;
        j->next = NULL;
        b->depth--;
        return;
    }
}

static void push_back(qac_batcher *b, job *j) {
    j->next = NULL;
    if (b->tail) b->tail->next = j;
    else b->head = j;
    b->tail = j;
    b->depth++;
}

/* One search call for the queries of the jobs finished by this batch
 * (segments whose job has every text encoded and wants hits). */
static qac_status search_batch(qac_batcher *b, const seg *segs, int nseg, char *err, size_t errsz) {
    int nq = 0, kmax = 0;
    for (int s = 0; s < nseg; s++) {
        job *j = segs[s].j;
        if (j->k > 0 && segs[s].from + segs[s].count == j->n) {
            nq += j->n;
            if (j->k > kmax) kmax = j->k;
        }
    }
    if (nq == 0) return QAC_OK;
    if (!grow_search(b, nq, kmax)) {
        snprintf(err, errsz, "out of memory for a search of %d queries", nq);
        return QAC_ERR_NOMEM;
    }
    int q = 0, dim = b->o.dim;
    for (int s = 0; s < nseg; s++) {
        job *j = segs[s].j;
        if (j->k > 0 && segs[s].from + segs[s].count == j->n) {
            memcpy(b->s_q + (size_t)q * dim, j->out, (size_t)j->n * dim * sizeof(float));
            q += j->n;
        }
    }
    double t0 = qac_now();
    qac_status st = b->search(b->search_user, b->s_q, nq, kmax, b->s_scores, b->s_rows);
    if (b->metrics) qac_metrics_search_batch(b->metrics, nq, qac_now() - t0);
    if (st) {
        snprintf(err, errsz, "%s", qac_last_error());
        return st;
    }
    q = 0;
    for (int s = 0; s < nseg; s++) {
        job *j = segs[s].j;
        if (!(j->k > 0 && segs[s].from + segs[s].count == j->n)) continue;
        for (int i = 0; i < j->n; i++, q++) {
            memcpy(j->scores + (size_t)i * j->k, b->s_scores + (size_t)q * kmax, (size_t)j->k * sizeof(float));
            memcpy(j->rows + (size_t)i * j->k, b->s_rows + (size_t)q * kmax, (size_t)j->k * sizeof(int64_t));
        }
    }
    return QAC_OK;
}

static int add_seg(qac_batcher *b, int nseg, job *j, int from, int count) {
    if (nseg == b->seg_cap) {
        int cap = b->seg_cap ? b->seg_cap * 2 : 64;
        seg *p = realloc(b->segs, (size_t)cap * sizeof *p);
        if (!p) return -1;
        b->segs = p;
        b->seg_cap = cap;
    }
    b->segs[nseg] = (seg){j, from, count, 0};
    return nseg + 1;
}

/* Take this round's texts, under the lock: small jobs whole in arrival
 * order while the budget allows, then one slice of the first large job
 * (which then goes to the back). Returns the number of segments. */
static int take_batch(qac_batcher *b, int *n_texts, int *n_tokens) {
    int budget = b->o.max_batch_tokens;
    int slice = b->o.slice_tokens > 0 && b->o.slice_tokens < budget ? b->o.slice_tokens : budget;
    int nseg = 0, n = 0, tokens = 0;
    job *large = NULL;
    for (job *j = b->head, *next; j; j = next) {
        next = j->next;
        if (j->tokens_left > slice) {
            if (!large) large = j;
            continue;
        }
        if (n > 0 && tokens + j->tokens_left > budget) continue;
        int got = add_seg(b, nseg, j, j->taken, j->n - j->taken);
        if (got < 0) break;
        nseg = got;
        n += j->n - j->taken;
        tokens += (int)j->tokens_left;
        j->taken = j->n;
        j->tokens_left = 0;
        j->busy = 1;
        j->state = JOB_RUNNING;
        unlink_job(b, j);
    }
    /* A round that serves short jobs adds a slice only every other time:
     * a short job then waits for at most the slice already running. */
    if (large && (n == 0 || (!b->last_sliced && tokens < budget))) {
        int room = budget - tokens < slice ? budget - tokens : slice;
        int from = large->taken, cnt = 0, t = 0;
        while (from + cnt < large->n && (cnt == 0 || t + large->lens[from + cnt] <= room)) t += large->lens[from + cnt++];
        int got = add_seg(b, nseg, large, from, cnt);
        if (got >= 0) {
            nseg = got;
            n += cnt;
            tokens += t;
            large->taken += cnt;
            large->tokens_left -= t;
            large->busy = 1;
            large->state = JOB_RUNNING;
            unlink_job(b, large);
            if (large->taken < large->n) push_back(b, large);
        }
        b->last_sliced = 1;
    } else {
        b->last_sliced = 0;
    }
    *n_texts = n;
    *n_tokens = tokens;
    return nseg;
}

static void *worker_main(void *arg) {
    qac_batcher *b = arg;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        while (!b->head && !b->stop) pthread_cond_wait(&b->work, &b->mu);
        if (!b->head && b->stop) break;
        /* Wait for requests already arriving, unless the budget is full. */
        if (b->o.max_wait_ms > 0 && !b->stop && b->arriving > 0) {
            struct timespec dl;
            abs_deadline(&dl, b->o.max_wait_ms);
            for (;;) {
                long long queued_tokens = 0;
                for (job *j = b->head; j; j = j->next) queued_tokens += j->tokens_left;
                if (queued_tokens >= b->o.max_batch_tokens || b->stop || !b->head || b->arriving <= 0) break;
                if (pthread_cond_timedwait(&b->work, &b->mu, &dl) == ETIMEDOUT) break;
            }
            if (!b->head) continue;
        }
        int n = 0, tokens = 0;
        int nseg = take_batch(b, &n, &tokens);
        if (b->metrics) qac_metrics_queue_depth(b->metrics, b->depth);
        pthread_mutex_unlock(&b->mu);

        qac_status st = QAC_OK, sst = QAC_OK;
        char err[256] = "", serr[256] = "";
        double t0 = qac_now();
        if (nseg == 0 || !grow(b, n)) {
            st = QAC_ERR_NOMEM;
            snprintf(err, sizeof err, "out of memory for a batch of %d texts", n);
        } else {
            /* normalised texts first, then the raw ones: one call for each kind */
            int at = 0, n_norm = 0, skips[2] = {0, 0};
            for (int raw = 0; raw < 2; raw++) {
                for (int s = 0; s < nseg; s++) {
                    const job *j = b->segs[s].j;
                    if (j->raw != raw) continue;
                    b->segs[s].at = at;
                    for (int i = 0; i < b->segs[s].count; i++, at++) {
                        b->b_ids[at] = j->ids[b->segs[s].from + i];
                        b->b_types[at] = j->types ? j->types[b->segs[s].from + i] : NULL;
                        b->b_lens[at] = j->lens[b->segs[s].from + i];
                        b->b_from[at] = j->pool_from ? j->pool_from[b->segs[s].from + i] : 0;
                        skips[raw] |= b->b_from[at] != 0;
                    }
                }
                if (!raw) n_norm = at;
            }
            qac_encode_fn raw_fn = b->raw_fn ? b->raw_fn : b->fn;
            if (b->pair_fn)
                st = b->pair_fn(b->user, (const int32_t *const *)b->b_ids, (const int32_t *const *)b->b_types,
                                b->b_lens, n, b->b_out);
            else if (n_norm)
                st = b->fn(b->user, (const int32_t *const *)b->b_ids, b->b_lens, skips[0] ? b->b_from : NULL, n_norm,
                           b->b_out);
            if (!st && !b->pair_fn && n > n_norm)
                st = raw_fn(b->user, (const int32_t *const *)b->b_ids + n_norm, b->b_lens + n_norm,
                            skips[1] ? b->b_from + n_norm : NULL, n - n_norm, b->b_out + (size_t)n_norm * b->o.dim);
            if (st) snprintf(err, sizeof err, "%s", qac_last_error());
        }
        double secs = qac_now() - t0;
        if (b->metrics && nseg) qac_metrics_batch(b->metrics, n, tokens, secs);
        if (st == QAC_OK) {
            for (int s = 0; s < nseg; s++) {
                job *j = b->segs[s].j;
                memcpy(j->out + (size_t)b->segs[s].from * b->o.dim, b->b_out + (size_t)b->segs[s].at * b->o.dim,
                       (size_t)b->segs[s].count * b->o.dim * sizeof(float));
            }
            if (b->search) sst = search_batch(b, b->segs, nseg, serr, sizeof serr);
        }

        pthread_mutex_lock(&b->mu);
        for (int s = 0; s < nseg; s++) {
            job *j = b->segs[s].j;
            j->busy = 0;
            j->encoded += b->segs[s].count;
            int last = j->encoded == j->n;
            int failed_search = st == QAC_OK && last && j->k > 0 && sst != QAC_OK;
            if (st != QAC_OK || failed_search || j->cancelled || last) {
                if (j->taken < j->n) unlink_job(b, j); /* a sliced job still queued */
                j->status = st != QAC_OK ? st : failed_search ? sst : j->cancelled ? QAC_ERR_CANCELLED : QAC_OK;
                snprintf(j->err, sizeof j->err, "%s",
                         st != QAC_OK ? err : failed_search ? serr : j->cancelled ? "the client went away" : "");
                j->state = JOB_DONE;
            } else {
                j->state = JOB_QUEUED; /* more slices to come */
            }
        }
        pthread_cond_broadcast(&b->done);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

static qac_status create(qac_batcher **out, qac_encode_fn fn, qac_pair_fn pair_fn, void *user, qac_search_fn search,
                         void *search_user, const qac_batcher_opts *o, qac_metrics *metrics) {
    *out = NULL;
    if ((!fn && !pair_fn) || o->dim <= 0 || o->max_batch_tokens <= 0 || o->queue_size <= 0 || o->max_wait_ms < 0)
        return qac_set_error(QAC_ERR_INVALID, "batcher: bad options");
    qac_batcher *b = calloc(1, sizeof *b);
    if (!b) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    b->fn = fn;
    b->pair_fn = pair_fn;
    b->user = user;
    b->search = search;
    b->search_user = search_user;
    b->o = *o;
    b->metrics = metrics;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->work, &ca);
    pthread_cond_init(&b->done, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&b->worker, NULL, worker_main, b) != 0) {
        pthread_mutex_destroy(&b->mu);
        pthread_cond_destroy(&b->work);
        pthread_cond_destroy(&b->done);
        free(b);
        return qac_set_error(QAC_ERR_INTERNAL, "batcher: cannot start the worker thread");
    }
    *out = b;
    return QAC_OK;
}

qac_status qac_batcher_create(qac_batcher **out, qac_encode_fn fn, void *user, qac_search_fn search,
                              void *search_user, const qac_batcher_opts *o, qac_metrics *metrics) {
    return create(out, fn, NULL, user, search, search_user, o, metrics);
}

qac_status qac_batcher_create_pairs(qac_batcher **out, qac_pair_fn fn, void *user, const qac_batcher_opts *o,
                                    qac_metrics *metrics) {
    return create(out, NULL, fn, user, NULL, NULL, o, metrics);
}

void qac_batcher_set_raw(qac_batcher *b, qac_encode_fn raw_fn) { b->raw_fn = raw_fn; }

qac_status qac_batcher_encode(qac_batcher *b, const int32_t *const *ids, const int *lens, int n, float *out,
                              int timeout_ms) {
    return qac_batcher_search(b, ids, lens, n, out, 0, NULL, NULL, timeout_ms);
}

qac_status qac_batcher_search(qac_batcher *b, const int32_t *const *ids, const int *lens, int n, float *out, int k,
                              float *scores, int64_t *rows, int timeout_ms) {
    return qac_batcher_run(b, ids, lens, NULL, n, out, k, scores, rows, timeout_ms, NULL, 0);
}

/* The request this thread serves announced itself to this batcher. */
static _Thread_local qac_batcher *expected_by;

void qac_batcher_expect(qac_batcher *b) {
    if (!b || expected_by) return;
    pthread_mutex_lock(&b->mu);
    b->arriving++;
    pthread_mutex_unlock(&b->mu);
    expected_by = b;
}

/* Under b->mu: the announcement, if any, is used up (queued or withdrawn). */
static int consume_expectation(qac_batcher *b) {
    if (expected_by != b) return 0;
    expected_by = NULL;
    b->arriving--;
    return 1;
}

void qac_batcher_expect_done(qac_batcher *b) {
    if (!b || expected_by != b) return;
    pthread_mutex_lock(&b->mu);
    consume_expectation(b);
    pthread_cond_signal(&b->work); /* a worker waiting for it stops waiting */
    pthread_mutex_unlock(&b->mu);
}

int qac_batcher_arriving(qac_batcher *b) {
    pthread_mutex_lock(&b->mu);
    int n = b->arriving;
    pthread_mutex_unlock(&b->mu);
    return n;
}

#define CANCEL_POLL_MS 50 /* how often a waiting request checks its client */

static qac_status run(qac_batcher *b, const int32_t *const *ids, const int32_t *const *types, const int *lens,
                      const int *pool_from, int n, float *out, int k, float *scores, int64_t *rows, int timeout_ms,
                      const qac_cancel *cancel, int raw);

qac_status qac_batcher_run(qac_batcher *b, const int32_t *const *ids, const int *lens, const int *pool_from, int n,
                           float *out, int k, float *scores, int64_t *rows, int timeout_ms, const qac_cancel *cancel,
                           int raw) {
    if (b->pair_fn) return qac_set_error(QAC_ERR_INVALID, "batcher: a pair batcher takes pairs");
    return run(b, ids, NULL, lens, pool_from, n, out, k, scores, rows, timeout_ms, cancel, raw);
}

qac_status qac_batcher_run_pairs(qac_batcher *b, const int32_t *const *ids, const int32_t *const *types,
                                 const int *lens, int n, float *out, int timeout_ms, const qac_cancel *cancel) {
    if (!b->pair_fn || !types) return qac_set_error(QAC_ERR_INVALID, "batcher: not a pair batcher, or no token types");
    return run(b, ids, types, lens, NULL, n, out, 0, NULL, NULL, timeout_ms, cancel, 0);
}

static qac_status run(qac_batcher *b, const int32_t *const *ids, const int32_t *const *types, const int *lens,
                      const int *pool_from, int n, float *out, int k, float *scores, int64_t *rows, int timeout_ms,
                      const qac_cancel *cancel, int raw) {
    if (n <= 0) return QAC_OK;
    if (k > 0 && (raw || !b->search || !scores || !rows))
        return qac_set_error(QAC_ERR_INVALID, "batcher: no search function, no room for the hits, or raw vectors");
    job j;
    memset(&j, 0, sizeof j);
    j.ids = ids;
    j.types = types;
    j.lens = lens;
    j.pool_from = pool_from;
    j.n = n;
    j.out = out;
    j.k = k > 0 ? k : 0;
    j.scores = scores;
    j.rows = rows;
    j.raw = raw != 0;
    for (int i = 0; i < n; i++) j.tokens_left += lens[i];
    if (cancel && !cancel->gone) cancel = NULL;

    pthread_mutex_lock(&b->mu);
    int announced = consume_expectation(b);
    if (b->stop) {
        if (announced) pthread_cond_signal(&b->work);
        pthread_mutex_unlock(&b->mu);
        return qac_set_error(QAC_ERR_CANCELLED, "the server is shutting down");
    }
    if (b->depth >= b->o.queue_size) {
        if (announced) pthread_cond_signal(&b->work);
        pthread_mutex_unlock(&b->mu);
        return qac_set_error(QAC_ERR_BUSY, "the encode queue is full (%d requests waiting)", b->o.queue_size);
    }
    push_back(b, &j);
    if (b->metrics) qac_metrics_queue_depth(b->metrics, b->depth);
    pthread_cond_signal(&b->work);

    double start = qac_now();
    while (j.state != JOB_DONE) {
        int started = j.encoded > 0 || j.busy;
        if ((timeout_ms > 0 && !started) || cancel) {
            struct timespec dl;
            double wait_ms = cancel ? CANCEL_POLL_MS : 1e9;
            if (timeout_ms > 0 && !started) {
                double left = timeout_ms - (qac_now() - start) * 1000.0;
                if (left < wait_ms) wait_ms = left > 0 ? left : 0;
            }
            abs_deadline(&dl, wait_ms);
            pthread_cond_timedwait(&b->done, &b->mu, &dl);
            if (j.state == JOB_DONE) break;
            started = j.encoded > 0 || j.busy;
            int gone = cancel && !j.cancelled && cancel->gone(cancel->ctx);
            if (gone) j.cancelled = 1;
            int timed_out = timeout_ms > 0 && !started && (qac_now() - start) * 1000.0 >= timeout_ms;
            if ((j.cancelled || timed_out) && !j.busy) {
                /* Not being encoded: withdraw it. A running slice always
                 * completes first, since the worker borrows our buffers. */
                if (j.taken < j.n) unlink_job(b, &j);
                if (b->metrics) qac_metrics_queue_depth(b->metrics, b->depth);
                pthread_mutex_unlock(&b->mu);
                if (j.cancelled) return qac_set_error(QAC_ERR_CANCELLED, "the client went away");
                return qac_set_error(QAC_ERR_CANCELLED, "timed out after %d ms waiting for the encoder", timeout_ms);
            }
        } else {
            pthread_cond_wait(&b->done, &b->mu);
        }
    }
    pthread_mutex_unlock(&b->mu);
    if (j.status) return qac_set_error(j.status, "%s", j.err);
    return QAC_OK;
}

int qac_batcher_queue_depth(qac_batcher *b) {
    pthread_mutex_lock(&b->mu);
    int d = b->depth;
    pthread_mutex_unlock(&b->mu);
    return d;
}

void qac_batcher_free(qac_batcher *b) {
    if (!b) return;
    pthread_mutex_lock(&b->mu);
    b->stop = 1;
    pthread_cond_broadcast(&b->work);
    pthread_mutex_unlock(&b->mu);
    pthread_join(b->worker, NULL);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->work);
    pthread_cond_destroy(&b->done);
    free(b->b_ids);
    free(b->b_types);
    free(b->b_lens);
    free(b->b_from);
    free(b->b_out);
    free(b->segs);
    free(b->s_q);
    free(b->s_scores);
    free(b->s_rows);
    free(b);
}
