/* qac_index_build: a corpus through the encoders into an index directory,
 * resumable (the builder below, index_builder.c, makes it crash-safe).
 *
 * The encoding pipeline: a reader thread reads the corpus a chunk at a time
 * (never across a shard boundary, so a resumed run batches exactly like an
 * uninterrupted one) and tokenises each chunk on a pool of threads while
 * the encoders work on the previous ones (QAC_CHUNKS_AHEAD). A chunk is
 * sorted by length and cut into batches, which the encoders take in turn,
 * each from its own thread. A batch is the same whichever encoder runs it,
 * so the vectors depend neither on the number of encoders nor of
 * tokenising threads. A full shard goes to a writer thread while the next
 * one fills.
 *
 * In order: the shard writer, the checks of the corpus, the reader thread
 * and its chunks, the encoder team, and qac_index_build in named steps
 * (check_inputs, open_corpus, init_build, begin_build, then encode_corpus:
 * start_pipeline, run_pipeline, record_stats; close_build). */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "index_builder.h"
#include "qac_index.h"
#include "qac_pool.h"
#include "qac_util.h"

#define QAC_ENCODE_CHUNK 16384  /* passages sorted by length together */

/* ---- the shard writer ---- */

/* Shards are written by a thread of their own while the encoders fill the
 * next, into a second set of buffers. Until it is joined, that thread alone
 * touches the manifest and the directory, and writes shards in order, so a
 * crash leaves what it left before. */
typedef struct shard_writer {
    qac_builder view; /* the builder, with the buffers of the shard being written (else the spare ones) */
    pthread_t th;
    int running;
    qac_status st;
    char err[512];
} shard_writer;

static void *writer_main(void *arg) {
    shard_writer *w = arg;
    w->st = qac_builder_flush_shard(&w->view);
    if (w->st) snprintf(w->err, sizeof w->err, "%s", qac_last_error());
    return NULL;
}

/* Wait for the shard being written; its error, if any. */
static qac_status writer_wait(shard_writer *w) {
    if (!w->running) return QAC_OK;
    pthread_join(w->th, NULL);
    w->running = 0;
    return w->st ? qac_set_error(w->st, "%s", w->err) : QAC_OK;
}

/* Hand b's filled shard to the writer; b continues in the spare buffers. */
static qac_status writer_start(shard_writer *w, qac_builder *b) {
    qac_status st = writer_wait(w);
    if (st) return st;
    qac_builder spare = w->view;
    w->view = *b;
    b->vecs = spare.vecs;
    b->ids = spare.ids;
    b->offsets = spare.offsets;
    b->lines = spare.lines;
    b->fill = 0;
    b->cut = 0;
    w->st = QAC_OK;
    if (pthread_create(&w->th, NULL, writer_main, w) != 0) return qac_builder_flush_shard(&w->view);
    w->running = 1;
    return QAC_OK;
}

static void writer_free(shard_writer *w) {
    writer_wait(w);
    for (uint64_t i = 0; w->view.ids && i < w->view.fill; i++) free(w->view.ids[i]);
    free(w->view.vecs);
    free(w->view.ids);
    free(w->view.offsets);
    free(w->view.lines);
}

/* ---- the corpus, checked before any work ---- */

/* Whether dir holds a manifest whose passages are all encoded (*count of them). */
static int already_encoded(const char *dir, uint64_t *count) {
    char path[4096];
    if (qac_path_join(path, sizeof path, dir, "manifest.json")) return 0;
    json_t *m = json_load_file(path, 0, NULL);
    int yes = m && json_is_true(json_object_get(m, "encoded"));
    if (yes) *count = (uint64_t)json_integer_value(json_object_get(m, "count"));
    json_decref(m);
    return yes;
}

/* Every record read once, before any is encoded: a bad line, a duplicate id
 * or a missing tab is said now rather than hours in, and the count makes the
 * progress exact. */
static qac_status check_corpus(const char *path, const qac_index_build_opts *o, uint64_t *count) {
    qac_reader *r = NULL;
    *count = 0;
    qac_status st = qac_reader_open(&r, path, QAC_READ_CORPUS, o->format);
    if (o->progress) o->progress(o->progress_user, "check", 0, 0);
    for (int got = 1; !st;) {
        qac_record rec;
        if ((st = qac_reader_next(r, &rec, &got)) || !got) break;
        if (++*count % 65536 == 0 && o->progress) o->progress(o->progress_user, "check", *count, 0);
    }
    if (!st && o->progress) o->progress(o->progress_user, "check", *count, *count);
    qac_reader_free(r);
    return st;
}

/* ---- the reader thread and its chunks ---- */

#define QAC_CHUNKS_AHEAD 2
#define QAC_CHUNK_SLOTS (QAC_CHUNKS_AHEAD + 1)

typedef struct chunk {
    int n, eof;
    int32_t *tok;      /* [cap, max_len] */
    int *lens, *order;
    char **ids;        /* owned until handed to the builder */
    uint64_t *offsets;
    int64_t *lines;
    char **texts;      /* owned copies until tokenised */
    size_t *text_lens;
    uint64_t last_offset;
    uint64_t cut;      /* passages cut at max_len */
    qac_status st;     /* the reader's or a tokeniser's error, its message in err */
    char err[512];
} chunk;

enum { SLOT_FREE = 0, SLOT_FILLED = 1 };

typedef struct feeder {
    qac_reader *r;
    const qac_model *m;
    const char *prompt; /* the passage prompt, or NULL */
    int max_len, cap, shard_size;
    qac_pool *pool;
    chunk slots[QAC_CHUNK_SLOTS];
    int state[QAC_CHUNK_SLOTS];
    int stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} feeder;

static void chunk_free(chunk *c) {
    for (int i = 0; c->ids && i < c->n; i++) free(c->ids[i]);
    for (int i = 0; c->texts && i < c->n; i++) free(c->texts[i]);
    free(c->tok), free(c->lens), free(c->order), free(c->ids), free(c->offsets), free(c->lines), free(c->texts),
        free(c->text_lens);
    memset(c, 0, sizeof *c);
}

static qac_status chunk_alloc(chunk *c, int cap, int max_len) {
    memset(c, 0, sizeof *c);
    c->tok = malloc((size_t)cap * (size_t)max_len * sizeof(int32_t));
    c->lens = malloc((size_t)cap * sizeof(int));
    c->order = malloc((size_t)cap * sizeof(int));
    c->ids = calloc((size_t)cap, sizeof(char *));
    c->offsets = malloc((size_t)cap * 8);
    c->lines = malloc((size_t)cap * 8);
    c->texts = calloc((size_t)cap, sizeof(char *));
    c->text_lens = malloc((size_t)cap * sizeof(size_t));
    if (!c->tok || !c->lens || !c->order || !c->ids || !c->offsets || !c->lines || !c->texts || !c->text_lens)
        return qac_set_error(QAC_ERR_NOMEM, "out of memory for a chunk of %d passages", cap);
    return QAC_OK;
}

static void chunk_fail(chunk *c, qac_status st) {
    if (c->st) return;
    c->st = st;
    snprintf(c->err, sizeof c->err, "%s", qac_last_error());
}

typedef struct tok_job {
    feeder *f;
    chunk *c;
    pthread_mutex_t mu;
} tok_job;

static void tokenize_task(void *arg, int64_t begin, int64_t end, int tid) {
    (void)tid;
    tok_job *j = arg;
    chunk *c = j->c;
    for (int64_t i = begin; i < end; i++) {
        int len = 0, cut = 0;
        qac_status st = qac_tokenizer_encode_prompted_cut(j->f->m->tok, j->f->prompt, c->texts[i], c->text_lens[i],
                                                          j->f->max_len, c->tok + (size_t)i * (size_t)j->f->max_len,
                                                          &len, &cut);
        c->lens[i] = len;
        if (cut) __atomic_fetch_add(&c->cut, (uint64_t)1, __ATOMIC_RELAXED);
        free(c->texts[i]);
        c->texts[i] = NULL;
        if (st) {
            pthread_mutex_lock(&j->mu);
            chunk_fail(c, st);
            pthread_mutex_unlock(&j->mu);
        }
    }
}

/* The reader thread: fill the free slots in ring order until the corpus
 * ends, an error, or stop. */
static void *feeder_main(void *arg) {
    feeder *f = arg;
    int p = 0, fill = 0, ended = 0;
    while (!ended) {
        pthread_mutex_lock(&f->mu);
        while (f->state[p] != SLOT_FREE && !f->stop) pthread_cond_wait(&f->cv, &f->mu);
        int stop = f->stop;
        pthread_mutex_unlock(&f->mu);
        if (stop) break;
        chunk *c = &f->slots[p];
        for (int i = 0; i < c->n; i++) free(c->ids[i]), c->ids[i] = NULL;
        c->n = 0;
        c->eof = 0;
        c->cut = 0;
        c->st = QAC_OK;
        c->err[0] = 0;
        int room = f->shard_size - fill, want = room < f->cap ? room : f->cap;
        while (c->n < want) {
            qac_record rec;
            int got = 0;
            qac_status st = qac_reader_next(f->r, &rec, &got);
            if (st) {
                chunk_fail(c, st);
                break;
            }
            if (!got) {
                c->eof = 1;
                break;
            }
            int i = c->n;
            c->texts[i] = malloc(rec.text_len + 1);
            c->ids[i] = strdup(rec.id);
            if (!c->texts[i] || !c->ids[i]) {
                chunk_fail(c, qac_set_error(QAC_ERR_NOMEM, "out of memory"));
                c->n++;
                break;
            }
            memcpy(c->texts[i], rec.text, rec.text_len);
            c->texts[i][rec.text_len] = 0;
            c->text_lens[i] = rec.text_len;
            c->offsets[i] = rec.offset;
            c->lines[i] = rec.line;
            c->last_offset = rec.offset;
            c->n++;
        }
        if (!c->st && c->n) {
            tok_job j = {f, c, PTHREAD_MUTEX_INITIALIZER};
            qac_pool_for(f->pool, c->n, 64, tokenize_task, &j);
            pthread_mutex_destroy(&j.mu);
        }
        fill = (fill + c->n) % f->shard_size;
        ended = c->eof || c->st;
        pthread_mutex_lock(&f->mu);
        f->state[p] = SLOT_FILLED;
        pthread_cond_broadcast(&f->cv);
        pthread_mutex_unlock(&f->mu);
        p = (p + 1) % QAC_CHUNK_SLOTS;
    }
    return NULL;
}

/* ---- the encoder team: a chunk's batches, taken in turn ---- */

typedef struct enc_team {
    qac_encoder **enc;
    int n_enc;
    int pool_from;                   /* tokens of the passage prompt the pooling skips (0: none) */
    uint64_t done_before, est_total; /* for progress: rows before the chunk, the estimated total */
    int done;                        /* the chunk's rows encoded */
    qac_builder *b;
    const chunk *c;
    int n, max_len, batch;
    uint64_t base; /* the chunk's first row in the shard */
    int next;      /* the next batch's first position in the chunk's order */
    qac_status st;
    char err[512];
    pthread_mutex_t mu;
    double *iv; /* busy intervals: start, end pairs */
    int niv, iv_cap;
} enc_team;

typedef struct enc_worker {
    enc_team *t;
    int idx;
} enc_worker;

static void *encode_worker(void *arg) {
    enc_worker *w = arg;
    enc_team *t = w->t;
    const int dim = t->b->dim, batch = t->batch;
    float *out = malloc((size_t)batch * (size_t)dim * sizeof(float));
    const int32_t **ptrs = malloc((size_t)batch * sizeof *ptrs);
    int *lens = malloc((size_t)batch * sizeof(int)), *from = malloc((size_t)batch * sizeof(int));
    if (!out || !ptrs || !lens || !from) {
        pthread_mutex_lock(&t->mu);
        if (!t->st) {
            t->st = QAC_ERR_NOMEM;
            snprintf(t->err, sizeof t->err, "out of memory for a batch of %d", batch);
        }
        pthread_mutex_unlock(&t->mu);
    }
    for (;;) {
        pthread_mutex_lock(&t->mu);
        int s = t->next, failed = t->st != QAC_OK;
        t->next += batch;
        pthread_mutex_unlock(&t->mu);
        if (failed || s >= t->n) break;
        int nb = t->n - s < batch ? t->n - s : batch;
        for (int j = 0; j < nb; j++) {
            int r = t->c->order[s + j];
            ptrs[j] = t->c->tok + (size_t)r * (size_t)t->max_len;
            lens[j] = t->c->lens[r];
            from[j] = t->pool_from;
        }
        double t0 = qac_now();
        qac_status st =
            qac_encoder_encode_ids_from(t->enc[w->idx], ptrs, lens, t->pool_from ? from : NULL, nb, out);
        double t1 = qac_now();
        pthread_mutex_lock(&t->mu);
        if (st) {
            if (!t->st) {
                t->st = st;
                snprintf(t->err, sizeof t->err, "%s", qac_last_error());
            }
        } else if (t->niv + 2 <= t->iv_cap) {
            t->iv[t->niv++] = t0;
            t->iv[t->niv++] = t1;
        }
        pthread_mutex_unlock(&t->mu);
        if (st) break;
        for (int j = 0; j < nb; j++)
            memcpy(t->b->vecs + (t->base + (uint64_t)t->c->order[s + j]) * (size_t)dim, out + (size_t)j * dim,
                   (size_t)dim * sizeof(float));
        pthread_mutex_lock(&t->mu);
        t->done += nb;
        int done = t->done;
        pthread_mutex_unlock(&t->mu);
        if (w->idx == 0) qac_builder_progress(t->b, "encode", t->done_before + (uint64_t)done, t->est_total); /* the caller's thread */
    }
    free(out);
    free(ptrs);
    free(lens);
    free(from);
    return NULL;
}

static int cmp_interval(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Seconds covered by the union of the intervals (pairs) in iv. */
static double interval_union(double *iv, int niv) {
    qsort(iv, (size_t)niv / 2, 2 * sizeof(double), cmp_interval);
    double total = 0, s = 0, e = -1e300;
    for (int i = 0; i < niv; i += 2) {
        if (iv[i] > e) {
            if (e > s) total += e - s;
            s = iv[i];
            e = iv[i + 1];
        } else if (iv[i + 1] > e) {
            e = iv[i + 1];
        }
    }
    if (e > s) total += e - s;
    return total;
}

static int by_len(const void *a, const void *b, void *keys) {
    const int *len = keys;
    int x = *(const int *)a, y = *(const int *)b;
    if (len[x] != len[y]) return len[x] < len[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Encode a chunk whose rows are the shard's last n; *busy_s grows by the
 * time at least one encoder had a batch. */
static qac_status encode_chunk(enc_team *t, qac_builder *b, chunk *c, int max_len, double *busy_s) {
    const int n = c->n;
    for (int i = 0; i < n; i++) c->order[i] = i;
    qsort_r(c->order, (size_t)n, sizeof(int), by_len, c->lens);
    t->b = b;
    t->c = c;
    t->n = n;
    t->max_len = max_len;
    t->base = b->fill - (uint64_t)n;
    t->next = 0;
    t->done = 0;
    t->st = QAC_OK;
    t->err[0] = 0;
    t->niv = 0;
    int need = 2 * (n / t->batch + 1 + t->n_enc);
    if (need > t->iv_cap) {
        double *iv = realloc(t->iv, (size_t)need * sizeof(double));
        if (!iv) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        t->iv = iv;
        t->iv_cap = need;
    }
    enc_worker w[64];
    pthread_t th[64];
    int started = 0;
    for (int i = 1; i < t->n_enc; i++) {
        w[i] = (enc_worker){t, i};
        if (pthread_create(&th[i], NULL, encode_worker, &w[i]) != 0) break;
        started = i;
    }
    w[0] = (enc_worker){t, 0};
    encode_worker(&w[0]);
    for (int i = 1; i <= started; i++) pthread_join(th[i], NULL);
    *busy_s += interval_union(t->iv, t->niv);
    if (t->st) return qac_set_error(t->st, "%s", t->err);
    return QAC_OK;
}

/* ---- qac_index_build, step by step ---- */

/* One corpus build: what qac_index_build holds from its checks to its
 * cleanup. */
typedef struct corpus_build {
    const qac_index_build_opts *o;
    qac_encoder *enc;
    const qac_model *m;
    const char *factory;
    const char *prompt; /* the passage prompt ("" for none) */
    int max_len, dim;
    char corpus_abs[PATH_MAX];
    uint64_t corpus_size;
    uint64_t total; /* passages the check counted; 0 when only the FAISS index is (re)built */
    qac_reader *r;
    /* the encoders, the reader thread and its chunks, the shard writer */
    int n_enc;
    qac_encoder *encs[64];
    double dev0[64]; /* each encoder's device seconds before the build */
    enc_team team;
    feeder feed;
    pthread_t feed_thread;
    int feeding; /* feed_thread runs */
    shard_writer writer;
    qac_builder b;
    /* the encoding loop's account, for the stats */
    uint64_t first_row, done_rows;
    double t_start, busy_s, wait_s, flush_s;
} corpus_build;

/* Everything checked before any work: the length, the corpus (every record
 * read once, unless its passages are all encoded already), the factory,
 * the output directory and the training size. Nothing to undo. */
static qac_status check_inputs(corpus_build *cb, const char *out_dir, const char *corpus_path) {
    const qac_index_build_opts *o = cb->o;
    qac_status st = qac_builder_max_len(cb->m, o->max_len, &cb->max_len);
    if (st) return st;
    if ((st = qac_builder_abs_path(corpus_path, cb->corpus_abs, sizeof cb->corpus_abs, &cb->corpus_size))) return st;
    cb->factory = o->factory && *o->factory ? o->factory : "Flat";
    if ((st = qac_builder_check_factory(cb->factory, cb->dim)) || (st = qac_check_output_dir(out_dir))) return st;
    uint64_t encoded = 0;
    int done_before = already_encoded(out_dir, &encoded); /* only the FAISS index is (re)built */
    if ((!done_before && (st = check_corpus(cb->corpus_abs, o, &cb->total))) ||
        (st = qac_builder_check_training(cb->factory, o, done_before ? encoded : cb->total)))
        return st;
    return QAC_OK;
}

/* The corpus reader and the build's identity: both, or neither. */
static qac_status open_corpus(corpus_build *cb, json_t **identity) {
    qac_status st = qac_reader_open(&cb->r, cb->corpus_abs, QAC_READ_CORPUS, cb->o->format);
    if (st) return st;
    *identity = qac_builder_identity(qac_builder_model_identity(cb->enc),
                                     qac_builder_corpus_identity(cb->corpus_abs, cb->corpus_size,
                                                                 qac_reader_format(cb->r)),
                                     cb->max_len, cb->dim, cb->o);
    if (!*identity) {
        qac_reader_free(cb->r);
        cb->r = NULL;
        return qac_set_error(QAC_ERR_NOMEM, "manifest: out of memory");
    }
    return QAC_OK;
}

/* The encoder team, the feeder's locks, the stats and an empty builder:
 * from here on, every exit goes through close_build. */
static void init_build(corpus_build *cb) {
    const qac_index_build_opts *o = cb->o;
    cb->prompt = qac_model_passage_prompt(cb->m);
    cb->n_enc = 1 + (o->more_encoders && o->n_more_encoders > 0
                         ? (o->n_more_encoders < 63 ? o->n_more_encoders : 63)
                         : 0);
    cb->encs[0] = cb->enc;
    for (int i = 1; i < cb->n_enc; i++) cb->encs[i] = o->more_encoders[i - 1];
    for (int i = 0; i < cb->n_enc; i++) cb->dev0[i] = qac_encoder_device_seconds(cb->encs[i]);
    cb->team.enc = cb->encs;
    cb->team.n_enc = cb->n_enc;
    cb->team.batch = o->batch > 4096 ? 4096 : o->batch;
    pthread_mutex_init(&cb->team.mu, NULL);
    pthread_mutex_init(&cb->feed.mu, NULL);
    pthread_cond_init(&cb->feed.cv, NULL);
    if (o->stats) {
        memset(o->stats, 0, sizeof *o->stats);
        o->stats->encoders = cb->n_enc;
    }
    cb->b.lock_fd = -1;
}

/* The prompt's pooling skip, the further encoders' model, then the builder
 * on out_dir (which consumes identity) and what the manifest says beside
 * the identity. */
static qac_status begin_build(corpus_build *cb, const char *out_dir, json_t *identity) {
    qac_status st = qac_model_prompt_skip(cb->m, cb->prompt, cb->max_len, &cb->team.pool_from);
    if (st) {
        json_decref(identity);
        return st;
    }
    for (int i = 1; i < cb->n_enc; i++)
        if (qac_encoder_model(cb->encs[i]) != cb->m || qac_encoder_dim(cb->encs[i]) != cb->dim) {
            json_decref(identity);
            return qac_set_error(QAC_ERR_INVALID, "index build: the further encoders must share the first one's model");
        }
    if ((st = qac_builder_begin(&cb->b, out_dir, cb->o, identity, cb->dim))) return st;
    json_object_set_new(cb->b.man, "device",
                        json_string(qac_encoder_device(cb->enc) == QAC_DEVICE_CUDA ? "cuda" : "cpu"));
    qac_builder_set_model_dir(&cb->b, cb->m);
    return QAC_OK;
}

/* Tokenising threads: the option, else 1 beside CPU encoders (they take
 * the cores) and up to 8 when a GPU encodes. */
static int tokenize_threads(const corpus_build *cb) {
    int n = cb->o->tokenize_threads;
    if (n > 0) return n;
    n = 1;
    for (int i = 0; i < cb->n_enc; i++)
        if (qac_encoder_device(cb->encs[i]) == QAC_DEVICE_CUDA) n = 0;
    if (!n) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        n = cores < 1 ? 1 : cores > 8 ? 8 : (int)cores;
    }
    return n;
}

/* Seek the reader past what is listed, make both sets of shard buffers and
 * the chunks, and start the reader thread. */
static qac_status start_pipeline(corpus_build *cb) {
    qac_builder *b = &cb->b;
    feeder *feed = &cb->feed;
    qac_status st;
    if ((st = qac_builder_resume_reader(b, cb->r, cb->corpus_abs))) return st;
    if ((st = qac_builder_alloc_shard(b))) return st;
    cb->writer.view = *b;
    cb->writer.view.vecs = NULL, cb->writer.view.ids = NULL, cb->writer.view.offsets = NULL,
    cb->writer.view.lines = NULL, cb->writer.view.fill = 0;
    cb->writer.view.cut = 0;
    if ((st = qac_builder_alloc_shard(&cb->writer.view))) return st;
    int chunk_cap = QAC_ENCODE_CHUNK < cb->o->shard_size ? QAC_ENCODE_CHUNK : cb->o->shard_size;
    for (int i = 0; i < QAC_CHUNK_SLOTS; i++)
        if ((st = chunk_alloc(&feed->slots[i], chunk_cap, cb->max_len))) return st;
    int tok_threads = tokenize_threads(cb);
    if (tok_threads > 1 && (st = qac_pool_create(&feed->pool, tok_threads))) return st;
    feed->r = cb->r;
    feed->m = cb->m;
    feed->prompt = cb->prompt;
    feed->max_len = cb->max_len;
    feed->cap = chunk_cap;
    feed->shard_size = cb->o->shard_size;
    if (pthread_create(&cb->feed_thread, NULL, feeder_main, feed) != 0)
        return qac_set_error(QAC_ERR_INTERNAL, "index build: cannot start the reader thread");
    cb->feeding = 1;
    return QAC_OK;
}

/* Wait for the reader to fill slot c_next; its chunk. */
static chunk *take_chunk(corpus_build *cb, int c_next) {
    double t0 = qac_now();
    pthread_mutex_lock(&cb->feed.mu);
    while (cb->feed.state[c_next] != SLOT_FILLED) pthread_cond_wait(&cb->feed.cv, &cb->feed.mu);
    pthread_mutex_unlock(&cb->feed.mu);
    cb->wait_s += qac_now() - t0;
    return &cb->feed.slots[c_next];
}

/* Hand slot c_next back to the reader. */
static void release_chunk(corpus_build *cb, int c_next) {
    pthread_mutex_lock(&cb->feed.mu);
    cb->feed.state[c_next] = SLOT_FREE;
    pthread_cond_broadcast(&cb->feed.cv);
    pthread_mutex_unlock(&cb->feed.mu);
}

/* The chunk's passages become the filling shard's last rows (the builder
 * takes their ids), then are encoded into it. */
static qac_status encode_into_shard(corpus_build *cb, chunk *c) {
    qac_builder *b = &cb->b;
    const int n = c->n;
    for (int i = 0; i < n; i++) {
        b->ids[b->fill] = c->ids[i];
        c->ids[i] = NULL;
        b->offsets[b->fill] = c->offsets[i];
        b->lines[b->fill] = c->lines[i];
        b->fill++;
    }
    b->cut += c->cut;
    if (!n) return QAC_OK;
    uint64_t done_rows = cb->done_rows;
    cb->team.done_before = done_rows;
    cb->team.est_total = cb->total ? cb->total
                         : c->last_offset ? (uint64_t)((double)(done_rows + n) * (double)cb->corpus_size /
                                                       (double)c->last_offset)
                                          : 0;
    qac_status st = encode_chunk(&cb->team, b, c, cb->max_len, &cb->busy_s);
    if (st) return st;
    cb->done_rows += (uint64_t)n;
    return QAC_OK;
}

/* The loop: each chunk in ring order, encoded into the filling shard; a
 * full shard (or the last) goes to the writer while the next fills. */
static qac_status run_pipeline(corpus_build *cb) {
    qac_builder *b = &cb->b;
    qac_status st;
    cb->done_rows = cb->first_row = qac_builder_count(b);
    qac_builder_progress(b, "encode", cb->done_rows, cb->total); /* the phase's clock starts here */
    cb->t_start = qac_now();
    for (int c_next = 0, eof = 0; !eof; c_next = (c_next + 1) % QAC_CHUNK_SLOTS) {
        chunk *c = take_chunk(cb, c_next);
        if (c->st) return qac_set_error(c->st, "%s", c->err);
        eof = c->eof;
        if ((st = encode_into_shard(cb, c))) return st;
        release_chunk(cb, c_next);
        if (b->fill == (uint64_t)cb->o->shard_size || (eof && b->fill)) {
            double t0 = qac_now();
            if ((st = writer_start(&cb->writer, b))) return st;
            cb->flush_s += qac_now() - t0;
        }
    }
    double t0_wait = qac_now();
    if ((st = writer_wait(&cb->writer))) return st;
    cb->flush_s += qac_now() - t0_wait;
    return QAC_OK;
}

/* The encoding's account into o->stats, when asked for. */
static void record_stats(const corpus_build *cb) {
    qac_index_build_stats *bs = cb->o->stats;
    if (!bs) return;
    bs->passages = cb->done_rows - cb->first_row;
    bs->encode_s = qac_now() - cb->t_start;
    bs->busy_s = cb->busy_s;
    bs->wait_s = cb->wait_s;
    bs->flush_s = cb->flush_s;
    bs->device_s = 0;
    for (int i = 0; i < cb->n_enc; i++) {
        double d = qac_encoder_device_seconds(cb->team.enc[i]);
        if (d < 0 || cb->dev0[i] < 0) bs->device_s = -1;
        else if (bs->device_s >= 0) bs->device_s += d - cb->dev0[i];
    }
}

/* Encode every passage not yet listed, mark the manifest "encoded", and
 * build the FAISS index. */
static qac_status encode_corpus(corpus_build *cb) {
    qac_status st;
    if ((st = start_pipeline(cb)) || (st = run_pipeline(cb))) return st;
    record_stats(cb);
    qac_builder_progress(&cb->b, "encode", cb->done_rows, cb->done_rows);
    json_object_set_new(cb->b.man, "encoded", json_true());
    if ((st = qac_builder_write_manifest(&cb->b))) return st;
    return qac_builder_finish(&cb->b);
}

/* Stop the reader thread, then free in the order each part needs. */
static void close_build(corpus_build *cb) {
    if (cb->feeding) {
        pthread_mutex_lock(&cb->feed.mu);
        cb->feed.stop = 1;
        pthread_cond_broadcast(&cb->feed.cv);
        pthread_mutex_unlock(&cb->feed.mu);
        pthread_join(cb->feed_thread, NULL);
    }
    writer_free(&cb->writer); /* before the builder: it writes the manifest */
    if (cb->o->stats) cb->o->stats->tokenize_threads = cb->feed.pool ? qac_pool_size(cb->feed.pool) : 1;
    for (int i = 0; i < QAC_CHUNK_SLOTS; i++) chunk_free(&cb->feed.slots[i]);
    qac_pool_free(cb->feed.pool);
    pthread_mutex_destroy(&cb->feed.mu);
    pthread_cond_destroy(&cb->feed.cv);
    pthread_mutex_destroy(&cb->team.mu);
    free(cb->team.iv);
    qac_builder_end(&cb->b);
    qac_reader_free(cb->r);
}

qac_status qac_index_build(const char *out_dir, qac_encoder *enc, const char *corpus_path,
                           const qac_index_build_opts *opts) {
    qac_index_build_opts defaults = qac_index_default_build_opts();
    const qac_index_build_opts *o = opts ? opts : &defaults;
    if (!out_dir || !enc || !corpus_path) return qac_set_error(QAC_ERR_INVALID, "index build: missing argument");
    corpus_build cb;
    memset(&cb, 0, sizeof cb);
    cb.o = o;
    cb.enc = enc;
    cb.m = qac_encoder_model(enc);
    cb.dim = qac_encoder_dim(enc);
    json_t *identity = NULL;
    qac_status st = check_inputs(&cb, out_dir, corpus_path);
    if (st || (st = open_corpus(&cb, &identity))) return st;
    init_build(&cb);
    if (!(st = begin_build(&cb, out_dir, identity))) {
        if (json_is_true(json_object_get(cb.b.man, "encoded")))
            st = qac_builder_finish(&cb.b); /* only the FAISS index is (re)built */
        else
            st = encode_corpus(&cb);
    }
    close_build(&cb);
    return st;
}
