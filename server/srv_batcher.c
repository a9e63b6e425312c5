/* Dynamic batching, TEI-style: the worker takes the first queued job, keeps
 * adding jobs while the token budget allows and max_wait has not passed,
 * then makes one encode call for all of them, and one search call for all
 * the batch's queries that asked for one (depth: the largest k; each job
 * keeps its own k first hits, which is its own top-k because the index
 * orders hits totally). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "srv_internal.h"
#include "qac_util.h"

typedef enum job_state { JOB_QUEUED = 0, JOB_RUNNING, JOB_DONE } job_state;

typedef struct job {
    const int32_t *const *ids;
    const int *lens;
    int n, tokens;
    float *out;
    int k;           /* > 0: also search, into scores/rows [n, k] */
    float *scores;
    int64_t *rows;
    job_state state;
    qac_status status;
    char err[256];
    struct job *next;
} job;

struct qac_batcher {
    qac_encode_fn fn;
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
    int stop;
    pthread_t worker;
    /* the worker's reusable buffers */
    const int32_t **b_ids;
    int *b_lens;
    float *b_out;
    int b_cap;
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
    int *lens = realloc(b->b_lens, (size_t)cap * sizeof *lens);
    if (!lens) return 0;
    b->b_lens = lens;
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

/* One search call for every query of the batch's search jobs; b_out holds
 * the batch's vectors in job order. */
static qac_status search_batch(qac_batcher *b, job *batch, char *err, size_t errsz) {
    int nq = 0, kmax = 0;
    for (job *j = batch; j; j = j->next)
        if (j->k > 0) {
            nq += j->n;
            if (j->k > kmax) kmax = j->k;
        }
    if (nq == 0) return QAC_OK;
    if (!grow_search(b, nq, kmax)) {
        snprintf(err, errsz, "out of memory for a search of %d queries", nq);
        return QAC_ERR_NOMEM;
    }
    int at = 0, q = 0, dim = b->o.dim;
    for (job *j = batch; j; at += j->n, j = j->next)
        if (j->k > 0) {
            memcpy(b->s_q + (size_t)q * dim, b->b_out + (size_t)at * dim, (size_t)j->n * dim * sizeof(float));
            q += j->n;
        }
    double t0 = qac_now();
    qac_status st = b->search(b->search_user, b->s_q, nq, kmax, b->s_scores, b->s_rows);
    if (b->metrics) qac_metrics_search_batch(b->metrics, nq, qac_now() - t0);
    if (st) {
        snprintf(err, errsz, "%s", qac_last_error());
        return st;
    }
    q = 0;
    for (job *j = batch; j; j = j->next) {
        if (j->k <= 0) continue;
        for (int i = 0; i < j->n; i++, q++) {
            memcpy(j->scores + (size_t)i * j->k, b->s_scores + (size_t)q * kmax, (size_t)j->k * sizeof(float));
            memcpy(j->rows + (size_t)i * j->k, b->s_rows + (size_t)q * kmax, (size_t)j->k * sizeof(int64_t));
        }
    }
    return QAC_OK;
}

static void *worker_main(void *arg) {
    qac_batcher *b = arg;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        while (!b->head && !b->stop) pthread_cond_wait(&b->work, &b->mu);
        if (!b->head && b->stop) break;
        /* Wait for company, unless the budget is already full or we stop. */
        if (b->o.max_wait_ms > 0 && !b->stop) {
            struct timespec dl;
            abs_deadline(&dl, b->o.max_wait_ms);
            for (;;) {
                int queued_tokens = 0;
                for (job *j = b->head; j; j = j->next) queued_tokens += j->tokens;
                if (queued_tokens >= b->o.max_batch_tokens || b->stop) break;
                if (pthread_cond_timedwait(&b->work, &b->mu, &dl) == ETIMEDOUT) break;
            }
        }
        /* Take jobs in arrival order while they fit; the first always goes. */
        job *batch = NULL, **tailp = &batch;
        int n = 0, tokens = 0;
        while (b->head && (n == 0 || tokens + b->head->tokens <= b->o.max_batch_tokens)) {
            job *j = b->head;
            b->head = j->next;
            if (!b->head) b->tail = NULL;
            b->depth--;
            j->state = JOB_RUNNING;
            j->next = NULL;
            *tailp = j;
            tailp = &j->next;
            n += j->n;
            tokens += j->tokens;
        }
        if (b->metrics) qac_metrics_queue_depth(b->metrics, b->depth);
        pthread_mutex_unlock(&b->mu);

        qac_status st = QAC_OK, sst = QAC_OK;
        char err[256] = "", serr[256] = "";
        double t0 = qac_now();
        if (!grow(b, n)) {
            st = QAC_ERR_NOMEM;
            snprintf(err, sizeof err, "out of memory for a batch of %d texts", n);
        } else {
            int at = 0;
            for (job *j = batch; j; j = j->next)
                for (int i = 0; i < j->n; i++, at++) {
                    b->b_ids[at] = j->ids[i];
                    b->b_lens[at] = j->lens[i];
                }
            st = b->fn(b->user, (const int32_t *const *)b->b_ids, b->b_lens, n, b->b_out);
            if (st) snprintf(err, sizeof err, "%s", qac_last_error());
        }
        double secs = qac_now() - t0;
        if (b->metrics) qac_metrics_batch(b->metrics, n, tokens, secs);
        if (st == QAC_OK && b->search) sst = search_batch(b, batch, serr, sizeof serr);

        pthread_mutex_lock(&b->mu);
        int at = 0;
        for (job *j = batch; j;) {
            job *next = j->next;
            if (st == QAC_OK) memcpy(j->out, b->b_out + (size_t)at * b->o.dim, (size_t)j->n * b->o.dim * sizeof(float));
            at += j->n;
            int failed_search = st == QAC_OK && j->k > 0 && sst != QAC_OK;
            j->status = failed_search ? sst : st;
            memcpy(j->err, failed_search ? serr : err, sizeof err);
            j->state = JOB_DONE;
            j = next;
        }
        pthread_cond_broadcast(&b->done);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

qac_status qac_batcher_create(qac_batcher **out, qac_encode_fn fn, void *user, qac_search_fn search,
                              void *search_user, const qac_batcher_opts *o, qac_metrics *metrics) {
    *out = NULL;
    if (!fn || o->dim <= 0 || o->max_batch_tokens <= 0 || o->queue_size <= 0 || o->max_wait_ms < 0)
        return qac_set_error(QAC_ERR_INVALID, "batcher: bad options");
    qac_batcher *b = calloc(1, sizeof *b);
    if (!b) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    b->fn = fn;
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

static void unlink_job(qac_batcher *b, job *target) {
    job *prev = NULL;
    for (job *j = b->head; j; prev = j, j = j->next) {
        if (j != target) continue;
        if (prev) prev->next = j->next;
        else b->head = j->next;
        if (b->tail == j) b->tail = prev;
        b->depth--;
        return;
    }
}

qac_status qac_batcher_encode(qac_batcher *b, const int32_t *const *ids, const int *lens, int n, float *out,
                              int timeout_ms) {
    return qac_batcher_search(b, ids, lens, n, out, 0, NULL, NULL, timeout_ms);
}

qac_status qac_batcher_search(qac_batcher *b, const int32_t *const *ids, const int *lens, int n, float *out, int k,
                              float *scores, int64_t *rows, int timeout_ms) {
    if (n <= 0) return QAC_OK;
    if (k > 0 && (!b->search || !scores || !rows))
        return qac_set_error(QAC_ERR_INVALID, "batcher: no search function, or no room for the hits");
    job j;
    memset(&j, 0, sizeof j);
    j.ids = ids;
    j.lens = lens;
    j.n = n;
    j.out = out;
    j.k = k > 0 ? k : 0;
    j.scores = scores;
    j.rows = rows;
    for (int i = 0; i < n; i++) j.tokens += lens[i];

    pthread_mutex_lock(&b->mu);
    if (b->stop) {
        pthread_mutex_unlock(&b->mu);
        return qac_set_error(QAC_ERR_CANCELLED, "the server is shutting down");
    }
    if (b->depth >= b->o.queue_size) {
        pthread_mutex_unlock(&b->mu);
        return qac_set_error(QAC_ERR_BUSY, "the encode queue is full (%d requests waiting)", b->o.queue_size);
    }
    if (b->tail) b->tail->next = &j;
    else b->head = &j;
    b->tail = &j;
    b->depth++;
    if (b->metrics) qac_metrics_queue_depth(b->metrics, b->depth);
    pthread_cond_signal(&b->work);

    struct timespec dl;
    if (timeout_ms > 0) abs_deadline(&dl, timeout_ms);
    while (j.state != JOB_DONE) {
        if (timeout_ms > 0 && j.state == JOB_QUEUED) {
            if (pthread_cond_timedwait(&b->done, &b->mu, &dl) == ETIMEDOUT && j.state == JOB_QUEUED) {
                /* Still queued: withdraw it. A running job always completes,
                 * since the worker borrows our buffers. */
                unlink_job(b, &j);
                if (b->metrics) qac_metrics_queue_depth(b->metrics, b->depth);
                pthread_mutex_unlock(&b->mu);
                return qac_set_error(QAC_ERR_CANCELLED, "timed out after %d ms waiting for the encoder",
                                     timeout_ms);
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
    free(b->b_lens);
    free(b->b_out);
    free(b->s_q);
    free(b->s_scores);
    free(b->s_rows);
    free(b);
}
