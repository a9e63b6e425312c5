/* `qac index build`: corpus -> embedding shards -> FAISS index, resumable.
 *
 * Crash safety: every shard, the FAISS file, the docid table and the
 * manifest are written to a temporary name and renamed. A shard counts only
 * once the manifest lists it (with its checksum), so a kill between the two
 * renames just re-encodes that shard. Resuming seeks the reader to the last
 * listed passage, checks its id, and continues after it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <faiss/c_api/Index_c.h>
#include <faiss/c_api/error_c.h>
#include <faiss/c_api/index_factory_c.h>
#include <faiss/c_api/index_io_c.h>

#include "index_internal.h"
#include "qac_index.h"
#include "qac_pool.h"
#include "qac_safetensors.h"
#include "qac_util.h"

#define QAC_ENCODE_CHUNK 16384  /* passages sorted by length together */
#define QAC_ADD_PIECE 65536     /* rows per faiss add call (progress granularity) */

qac_index_build_opts qac_index_default_build_opts(void) {
    qac_index_build_opts o;
    memset(&o, 0, sizeof o);
    o.factory = "Flat";
    o.batch = 64;
    o.max_len = 0;
    o.shard_size = 100000;
    o.format = QAC_FMT_AUTO;
    return o;
}

typedef struct builder {
    const char *dir;
    const qac_index_build_opts *o;
    const char *factory;
    int dim;
    uint32_t dtype;
    json_t *man;   /* the manifest being extended */
    int lock_fd;
    /* the shard being filled */
    float *vecs;
    char **ids;
    uint64_t *offsets;
    int64_t *lines;
    uint64_t fill;
    uint64_t cut; /* passages of the filling shard cut at max_len */
} builder;

static qac_status faiss_fail(const char *what) {
    return qac_set_error(QAC_ERR_FAISS, "faiss %s: %s", what, qac_faiss_message());
}

static void progress(const builder *b, const char *phase, uint64_t done, uint64_t total) {
    if (b->o->progress) b->o->progress(b->o->progress_user, phase, done, total);
}

static qac_status write_manifest(const builder *b) {
    char path[4096];
    qac_status st = qac_path_join(path, sizeof path, b->dir, "manifest.json");
    if (st) return st;
    char *text = json_dumps(b->man, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (!text) return qac_set_error(QAC_ERR_NOMEM, "manifest: out of memory");
    qac_atomic_file af;
    if ((st = qac_atomic_open(&af, path))) {
        free(text);
        return st;
    }
    size_t n = strlen(text);
    int bad = fwrite(text, 1, n, af.f) != n || fputc('\n', af.f) == EOF;
    free(text);
    if (bad) {
        qac_atomic_abort(&af);
        return qac_set_error(QAC_ERR_IO, "write %s: %s", path, strerror(errno));
    }
    return qac_atomic_commit(&af);
}

/* One line per differing key of the build identity, for the refusal. */
static void describe_diff(char *buf, size_t cap, const char *prefix, json_t *had, json_t *want) {
    const char *key;
    json_t *v;
    json_object_foreach(want, key, v) {
        json_t *h = json_object_get(had, key);
        if (h && json_equal(h, v)) continue;
        char name[256];
        snprintf(name, sizeof name, "%s%s", prefix, key);
        if (h && json_is_object(h) && json_is_object(v)) {
            char sub[260];
            snprintf(sub, sizeof sub, "%s.", name);
            describe_diff(buf, cap, sub, h, v);
            continue;
        }
        char *hs = h ? json_dumps(h, JSON_ENCODE_ANY) : NULL, *ws = json_dumps(v, JSON_ENCODE_ANY);
        size_t used = strlen(buf);
        if (used < cap)
            snprintf(buf + used, cap - used, "%s%s: index has %s, this run %s", used ? "; " : "", name,
                     hs ? hs : "(none)", ws ? ws : "?");
        free(hs);
        free(ws);
    }
    /* and what the index has that this run lacks (prompts, a bf16 encoder) */
    json_object_foreach(had, key, v) {
        if (json_object_get(want, key)) continue;
        char *hs = json_dumps(v, JSON_ENCODE_ANY);
        size_t used = strlen(buf);
        if (used < cap)
            snprintf(buf + used, cap - used, "%s%s%s: index has %s, this run (none)", used ? "; " : "", prefix, key,
                     hs ? hs : "?");
        free(hs);
    }
}

/* Remove temporaries left by a killed run ("<name>.tmp.<pid>"). */
static void remove_stale_tmp(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp.") && qac_path_join(path, sizeof path, dir, e->d_name) == QAC_OK) unlink(path);
    closedir(d);
}

static int is_sqbf16(const char *factory) { return !strcmp(factory, QAC_FACTORY_SQBF16); }

static qac_status check_factory(const char *factory, int dim) {
    if (is_sqbf16(factory)) return QAC_OK;
    if (strstr(factory, "bf16"))
        return qac_set_error(QAC_ERR_UNSUPPORTED, "bad --factory '%s': bf16 is supported as the whole factory "
                             "\"SQbf16\" only (exact search)", factory);
    FaissIndex *idx = NULL;
    if (faiss_index_factory(&idx, dim, factory, METRIC_INNER_PRODUCT))
        return qac_set_error(QAC_ERR_INVALID,
                             "bad --factory '%s' for %d-dimensional vectors: %s (examples: Flat, SQfp16, HNSW32, "
                             "IVF1024,PQ32)",
                             factory, dim, qac_faiss_message());
    faiss_Index_free(idx);
    return QAC_OK;
}

static int64_t parse_nlist(const char *factory);

/* The fewest training vectors the factory's k-means runs take (FAISS
 * refuses fewer points than centroids): nlist for IVF<nlist>, 2^bits per
 * PQ<m>[x<bits>] sub-quantizer (8 bits unless given); 0 when untrained. */
static int64_t factory_training_need(const char *factory, char *why, size_t cap) {
    int64_t need = 0, nlist = parse_nlist(factory);
    why[0] = '\0';
    if (nlist > 0) {
        need = nlist;
        snprintf(why, cap, "IVF%lld: a point per list", (long long)nlist);
    }
    for (const char *p = factory; (p = strstr(p, "PQ")); p += 2) {
        if (p > factory && p[-1] != ',' && p[-1] != 'O') continue; /* PQ as a component, or OPQ */
        const char *q = p + 2;
        while (*q >= '0' && *q <= '9') q++;
        long bits = *q == 'x' ? strtol(q + 1, NULL, 10) : 8;
        if (bits < 1 || bits > 16) continue;
        if ((INT64_C(1) << bits) > need) {
            need = INT64_C(1) << bits;
            snprintf(why, cap, "PQ with %ld bits: %lld centroids per sub-quantizer", bits, (long long)need);
        }
    }
    return need;
}

/* Before any encoding: will the factory train on what the corpus gives? */
static qac_status check_training(const char *factory, const qac_index_build_opts *o, uint64_t n) {
    char why[128];
    int64_t need = factory_training_need(factory, why, sizeof why);
    if (need <= 0) return QAC_OK;
    int64_t nlist = parse_nlist(factory);
    uint64_t auto_n = nlist ? (uint64_t)(256 * nlist) : 100000u;
    uint64_t avail = o->train_size > 0 ? (uint64_t)o->train_size : auto_n;
    if (avail > n) avail = n;
    if (avail >= (uint64_t)need) return QAC_OK;
    if (avail < n)
        return qac_set_error(QAC_ERR_INVALID,
                             "--factory %s trains on at least %lld vectors (%s), but --train-size gives %llu; "
                             "raise --train-size",
                             factory, (long long)need, why, (unsigned long long)avail);
    char hint[96];
    if (need > nlist) { /* PQ's k-means is what does not fit */
        snprintf(hint, sizeof hint, "a PQ of fewer bits per code (PQ<m>x4 trains on 16), SQ8 or SQfp16");
    } else if (n < 78) {
        snprintf(hint, sizeof hint, "no IVF at all");
    } else {
        /* FAISS wants about 39 points per list: the largest power of two that keeps it */
        long long fit = 1;
        while (fit * 2 * 39 <= (long long)n) fit *= 2;
        snprintf(hint, sizeof hint, "fewer IVF lists (IVF%lld keeps 39 points per list)", fit);
    }
    return qac_set_error(QAC_ERR_INVALID,
                         "--factory %s trains on at least %lld vectors (%s), but the input has only %llu; use %s, "
                         "or Flat (exact, and fast at this size)",
                         factory, (long long)need, why, (unsigned long long)n, hint);
}

/* Lock the directory, then load or start the manifest. `identity` is
 * consumed. Refuses when an existing manifest has a different identity. */
static qac_status builder_begin(builder *b, const char *dir, const qac_index_build_opts *o, json_t *identity,
                                int dim) {
    memset(b, 0, sizeof *b);
    b->dir = dir;
    b->o = o;
    b->lock_fd = -1;
    b->factory = o->factory && *o->factory ? o->factory : "Flat";
    b->dim = dim;
    b->dtype = o->fp16 ? QAC_DTYPE_F16 : QAC_DTYPE_F32;
    qac_status st;
    if (o->shard_size < 1 || o->batch < 1) {
        json_decref(identity);
        return qac_set_error(QAC_ERR_INVALID, "shard size and batch must be >= 1");
    }
    if ((st = check_factory(b->factory, dim)) || (st = qac_check_output_dir(dir)) || (st = qac_mkdirs(dir))) {
        json_decref(identity);
        return st;
    }
    char path[4096];
    if ((st = qac_path_join(path, sizeof path, dir, ".lock"))) {
        json_decref(identity);
        return st;
    }
    b->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (b->lock_fd < 0) {
        json_decref(identity);
        return qac_set_error(QAC_ERR_IO, "%s: %s", path, strerror(errno));
    }
    if (flock(b->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        json_decref(identity);
        return qac_set_error(QAC_ERR_BUSY, "%s: another qac index build is running on this directory", dir);
    }
    remove_stale_tmp(dir);
    if ((st = qac_path_join(path, sizeof path, dir, "manifest.json"))) {
        json_decref(identity);
        return st;
    }
    if (access(path, F_OK) == 0) {
        json_error_t err;
        json_t *m = json_load_file(path, 0, &err);
        if (!m) {
            json_decref(identity);
            return qac_set_error(QAC_ERR_FORMAT, "%s: %s (line %d)", path, err.text, err.line);
        }
        json_t *fmt = json_object_get(m, "format");
        if (!json_is_string(fmt) || strcmp(json_string_value(fmt), QAC_MANIFEST_FORMAT) != 0 ||
            json_integer_value(json_object_get(m, "version")) != QAC_MANIFEST_VERSION ||
            !json_is_array(json_object_get(m, "shards"))) {
            json_decref(m);
            json_decref(identity);
            return qac_set_error(QAC_ERR_FORMAT, "%s: not a qac index manifest (version %d expected)", path,
                                 QAC_MANIFEST_VERSION);
        }
        json_t *had = json_object_get(m, "build");
        /* a run that failed before its first shard left nothing to keep:
         * this one starts over with its own identity */
        if (!json_equal(had, identity) && json_array_size(json_object_get(m, "shards")) == 0 &&
            !json_is_true(json_object_get(m, "encoded"))) {
            json_decref(m);
            goto fresh;
        }
        if (!json_equal(had, identity)) {
            char diff[2048] = "";
            describe_diff(diff, sizeof diff, "", had, identity);
            json_decref(m);
            json_decref(identity);
            return qac_set_error(QAC_ERR_INVALID,
                                 "%s already holds an index built differently (%s); use a new --out "
                                 "directory or delete this one",
                                 dir, diff);
        }
        json_decref(identity);
        b->man = m;
        /* verify the listed shards are still whole */
        size_t i;
        json_t *sh;
        json_array_foreach(json_object_get(m, "shards"), i, sh) {
            char sp[4096];
            qac_shard_header h;
            if ((st = qac_path_join(sp, sizeof sp, dir, json_string_value(json_object_get(sh, "file")))))
                return st;
            if ((st = qac_shard_peek(sp, &h))) return qac_wrap_error(st, "resume");
            if (h.checksum != (uint64_t)json_integer_value(json_object_get(sh, "checksum")) ||
                h.count != (uint64_t)json_integer_value(json_object_get(sh, "count")))
                return qac_set_error(QAC_ERR_FORMAT, "%s does not match the manifest (modified?)", sp);
        }
        return QAC_OK;
    }
fresh:
    b->man = json_pack("{s:s, s:i, s:o, s:[], s:I, s:b, s:n}", "format", QAC_MANIFEST_FORMAT, "version",
                       QAC_MANIFEST_VERSION, "build", identity, "shards", "count", (json_int_t)0, "encoded", 0,
                       "faiss");
    if (!b->man) return qac_set_error(QAC_ERR_NOMEM, "manifest: out of memory");
    return write_manifest(b);
}

static void builder_end(builder *b) {
    for (uint64_t i = 0; b->ids && i < b->fill; i++) free(b->ids[i]);
    free(b->vecs);
    free(b->ids);
    free(b->offsets);
    free(b->lines);
    json_decref(b->man);
    if (b->lock_fd >= 0) close(b->lock_fd);
    memset(b, 0, sizeof *b);
    b->lock_fd = -1;
}

static uint64_t man_count(const builder *b) { return (uint64_t)json_integer_value(json_object_get(b->man, "count")); }
static size_t man_nshards(const builder *b) { return json_array_size(json_object_get(b->man, "shards")); }

static qac_status alloc_shard_buffers(builder *b) {
    size_t s = (size_t)b->o->shard_size;
    b->vecs = malloc(s * (size_t)b->dim * sizeof(float));
    b->ids = calloc(s, sizeof(char *));
    b->offsets = malloc(s * 8);
    b->lines = malloc(s * 8);
    if (!b->vecs || !b->ids || !b->offsets || !b->lines)
        return qac_set_error(QAC_ERR_NOMEM, "out of memory for a shard of %d x %d", b->o->shard_size, b->dim);
    return QAC_OK;
}

/* Write the filled shard and list it in the manifest. */
static qac_status flush_shard(builder *b) {
    if (!b->fill) return QAC_OK;
    size_t k = man_nshards(b);
    char name[64], path[4096];
    snprintf(name, sizeof name, "emb-%05zu.qemb", k);
    qac_status st = qac_path_join(path, sizeof path, b->dir, name);
    if (st) return st;
    uint64_t first = man_count(b), sum;
    if ((st = qac_shard_write(path, b->dtype, b->dim, first, b->fill, b->vecs, (const char *const *)b->ids,
                              b->offsets, b->lines, NULL, &sum)))
        return st;
    qac_crash_point("shard_unlisted"); /* renamed into place, not yet in the manifest */
    uint64_t last = b->fill - 1;
    json_t *e = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:s}", "file", name, "first_row", (json_int_t)first,
                          "count", (json_int_t)b->fill, "checksum", (json_int_t)sum, "last_offset",
                          (json_int_t)b->offsets[last], "last_line", (json_int_t)b->lines[last], "last_id",
                          b->ids[last]);
    if (!e) return qac_set_error(QAC_ERR_NOMEM, "manifest: out of memory");
    json_array_append_new(json_object_get(b->man, "shards"), e);
    json_object_set_new(b->man, "count", json_integer((json_int_t)(first + b->fill)));
    /* passages cut at max_len, over the listed shards (a resumed run counts on) */
    json_object_set_new(b->man, "truncated",
                        json_integer(json_integer_value(json_object_get(b->man, "truncated")) + (json_int_t)b->cut));
    b->cut = 0;
    for (uint64_t i = 0; i < b->fill; i++) {
        free(b->ids[i]);
        b->ids[i] = NULL;
    }
    b->fill = 0;
    return write_manifest(b);
}

/* Shards are written by a thread of their own while the encoders fill the
 * next, into a second set of buffers. Until it is joined, that thread alone
 * touches the manifest and the directory, and writes shards in order, so a
 * crash leaves what it left before. */
typedef struct shard_writer {
    builder view; /* the builder, with the buffers of the shard being written (else the spare ones) */
    pthread_t th;
    int running;
    qac_status st;
    char err[512];
} shard_writer;

static void *writer_main(void *arg) {
    shard_writer *w = arg;
    w->st = flush_shard(&w->view);
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
static qac_status writer_start(shard_writer *w, builder *b) {
    qac_status st = writer_wait(w);
    if (st) return st;
    builder spare = w->view;
    w->view = *b;
    b->vecs = spare.vecs;
    b->ids = spare.ids;
    b->offsets = spare.offsets;
    b->lines = spare.lines;
    b->fill = 0;
    b->cut = 0;
    w->st = QAC_OK;
    if (pthread_create(&w->th, NULL, writer_main, w) != 0) return flush_shard(&w->view);
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

/* ---- FAISS stage: train on a sample, add every shard, write ---- */

static int64_t parse_nlist(const char *factory) {
    const char *p = strstr(factory, "IVF");
    if (!p) return 0;
    long long n = strtoll(p + 3, NULL, 10);
    return n > 0 ? n : 0;
}

static qac_status shard_path(const builder *b, json_t *sh, char *path, size_t cap) {
    return qac_path_join(path, cap, b->dir, json_string_value(json_object_get(sh, "file")));
}

typedef struct docs_table {
    uint64_t *str_off, *offsets;
    int64_t *lines;
    char *blob;
    uint64_t n, blob_len, blob_cap;
} docs_table;

static qac_status docs_append(docs_table *t, const qac_shard *s) {
    for (uint64_t i = 0; i < s->count; i++) {
        size_t len = strlen(s->docids[i]) + 1;
        if (t->blob_len + len > t->blob_cap) {
            uint64_t cap = t->blob_cap ? t->blob_cap * 2 : 1 << 20;
            while (cap < t->blob_len + len) cap *= 2;
            char *nb = realloc(t->blob, cap);
            if (!nb) return qac_set_error(QAC_ERR_NOMEM, "docid table: out of memory");
            t->blob = nb;
            t->blob_cap = cap;
        }
        memcpy(t->blob + t->blob_len, s->docids[i], len);
        t->str_off[t->n] = t->blob_len;
        t->offsets[t->n] = s->offsets[i];
        t->lines[t->n] = s->lines[i];
        t->blob_len += len;
        t->n++;
    }
    return QAC_OK;
}

static qac_status docs_write(const char *path, docs_table *t) {
    t->str_off[t->n] = t->blob_len;
    qac_docs_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, QAC_DOCS_MAGIC, 8);
    h.version = QAC_DOCS_VERSION;
    h.count = t->n;
    h.blob_size = t->blob_len;
    uint64_t sum = QAC_HASH64_INIT;
    sum = qac_index_hash64(sum, t->str_off, (t->n + 1) * 8);
    sum = qac_index_hash64(sum, t->offsets, t->n * 8);
    sum = qac_index_hash64(sum, t->lines, t->n * 8);
    sum = qac_index_hash64(sum, t->blob, t->blob_len);
    h.checksum = sum;
    qac_atomic_file af;
    qac_status st = qac_atomic_open(&af, path);
    if (st) return st;
    if (fwrite(&h, sizeof h, 1, af.f) != 1 || fwrite(t->str_off, 8, t->n + 1, af.f) != t->n + 1 ||
        fwrite(t->offsets, 8, t->n, af.f) != t->n || fwrite(t->lines, 8, t->n, af.f) != t->n ||
        fwrite(t->blob, 1, t->blob_len, af.f) != t->blob_len) {
        st = qac_set_error(QAC_ERR_IO, "write %s: %s", path, strerror(errno));
        qac_atomic_abort(&af);
        return st;
    }
    return qac_atomic_commit(&af);
}

static qac_status build_faiss(builder *b) {
    uint64_t n = man_count(b);
    json_t *shards = json_object_get(b->man, "shards");
    size_t ns = json_array_size(shards), i;
    json_t *sh;
    if (n == 0) return qac_set_error(QAC_ERR_INVALID, "the corpus has no passages");
    /* SQbf16: qac writes FAISS's file itself (index_internal.h), row by row */
    int bf16 = is_sqbf16(b->factory);
    FaissIndex *idx = NULL;
    if (!bf16 && faiss_index_factory(&idx, b->dim, b->factory, METRIC_INNER_PRODUCT)) return faiss_fail("index_factory");
    qac_status st = QAC_OK;
    float *train = NULL;
    docs_table t;
    memset(&t, 0, sizeof t);
    char path[4096];
    qac_atomic_file af;
    int af_open = 0;
    uint64_t train_n = 0;
    if (!bf16 && !faiss_Index_is_trained(idx)) {
        int64_t nlist = parse_nlist(b->factory);
        train_n = b->o->train_size > 0 ? (uint64_t)b->o->train_size
                                       : (nlist ? (uint64_t)(256 * nlist) : 100000u);
        if (train_n > n) train_n = n;
        train = malloc(train_n * (size_t)b->dim * sizeof(float));
        if (!train) {
            st = qac_set_error(QAC_ERR_NOMEM, "out of memory for %" PRIu64 " training vectors", train_n);
            goto done;
        }
        /* evenly spaced rows: deterministic, and spans the whole corpus */
        uint64_t j = 0;
        json_array_foreach(shards, i, sh) {
            uint64_t first = (uint64_t)json_integer_value(json_object_get(sh, "first_row"));
            uint64_t cnt = (uint64_t)json_integer_value(json_object_get(sh, "count"));
            if (j >= train_n || (j * n) / train_n >= first + cnt) continue;
            qac_shard s;
            if ((st = shard_path(b, sh, path, sizeof path)) ||
                (st = qac_shard_read(path, (uint64_t)json_integer_value(json_object_get(sh, "checksum")), &s)))
                goto done;
            for (; j < train_n; j++) {
                uint64_t row = (j * n) / train_n;
                if (row >= first + cnt) break;
                memcpy(train + j * (size_t)b->dim, s.vectors + (row - first) * (size_t)b->dim,
                       (size_t)b->dim * sizeof(float));
            }
            qac_shard_free(&s);
            progress(b, "train-sample/vectors", j, train_n);
        }
        progress(b, "train/steps", 0, 1);
        if (faiss_Index_train(idx, (idx_t)train_n, train)) {
            st = faiss_fail("train");
            goto done;
        }
        progress(b, "train/steps", 1, 1);
        free(train);
        train = NULL;
    }
    t.str_off = malloc((n + 1) * 8);
    t.offsets = malloc(n * 8 + 1);
    t.lines = malloc(n * 8 + 1);
    if (!t.str_off || !t.offsets || !t.lines) {
        st = qac_set_error(QAC_ERR_NOMEM, "docid table: out of memory");
        goto done;
    }
    uint64_t added = 0;
    if (bf16) {
        if ((st = qac_path_join(path, sizeof path, b->dir, "index.faiss")) || (st = qac_atomic_open(&af, path))) goto done;
        af_open = 1;
        if ((st = qac_sqbf16_write_header(af.f, b->dim, n))) goto done;
    }
    progress(b, "add/vectors", 0, n);
    json_array_foreach(shards, i, sh) {
        char spath[4096];
        qac_shard s;
        if ((st = shard_path(b, sh, spath, sizeof spath)) ||
            (st = qac_shard_read(spath, (uint64_t)json_integer_value(json_object_get(sh, "checksum")), &s)))
            goto done;
        if (s.first_row != added || s.dim != b->dim) {
            qac_shard_free(&s);
            st = qac_set_error(QAC_ERR_FORMAT, "%s: rows start at %" PRIu64 ", expected %" PRIu64, spath,
                               s.first_row, added);
            goto done;
        }
        for (uint64_t p = 0; p < s.count; p += QAC_ADD_PIECE) {
            uint64_t m = s.count - p < QAC_ADD_PIECE ? s.count - p : QAC_ADD_PIECE;
            if (bf16 ? (st = qac_sqbf16_write_rows(af.f, s.vectors + p * (size_t)b->dim, m, b->dim)) != QAC_OK
                     : faiss_Index_add(idx, (idx_t)m, s.vectors + p * (size_t)b->dim) != 0) {
                qac_shard_free(&s);
                if (!bf16) st = faiss_fail("add");
                goto done;
            }
            added += m;
            progress(b, "add/vectors", added, n);
        }
        st = docs_append(&t, &s);
        qac_shard_free(&s);
        if (st) goto done;
    }
    (void)ns;
    progress(b, "write/files", 0, 1);
    if (!bf16) {
        if ((st = qac_path_join(path, sizeof path, b->dir, "index.faiss")) || (st = qac_atomic_open(&af, path))) goto done;
        af_open = 1;
        if (faiss_write_index(idx, af.f)) {
            st = faiss_fail("write_index");
            goto done;
        }
    }
    af_open = 0;
    if ((st = qac_atomic_commit(&af))) goto done;
    if ((st = qac_path_join(path, sizeof path, b->dir, "docids.qdoc")) || (st = docs_write(path, &t))) goto done;
    progress(b, "write/files", 1, 1);
    /* Checksums of the FAISS file and the source, verified at open: FAISS
     * itself reads a corrupt file without noticing (or aborts). */
    uint64_t faiss_sum = 0, faiss_bytes = 0, src_sum = 0, src_size = 0;
    const char *src = json_string_value(json_object_get(json_object_get(json_object_get(b->man, "build"), "source"), "path"));
    if ((st = qac_path_join(path, sizeof path, b->dir, "index.faiss")) ||
        (st = qac_index_hash_file(path, &faiss_sum, &faiss_bytes)))
        goto done;
    if (src && (st = qac_index_hash_file(src, &src_sum, &src_size))) goto done;
    json_object_set_new(b->man, "faiss",
                        json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I}", "file", "index.faiss", "factory", b->factory,
                                  "metric", "inner_product", "ntotal", (json_int_t)(bf16 ? (int64_t)n : faiss_Index_ntotal(idx)),
                                  "train_size", (json_int_t)train_n, "bytes", (json_int_t)faiss_bytes,
                                  "checksum", (json_int_t)faiss_sum));
    if (src) json_object_set_new(json_object_get(b->man, "faiss"), "source_checksum", json_integer((json_int_t)src_sum));
    json_object_set_new(b->man, "docids", json_string("docids.qdoc"));
    st = write_manifest(b);
done:
    if (af_open) qac_atomic_abort(&af);
    free(train);
    free(t.str_off);
    free(t.offsets);
    free(t.lines);
    free(t.blob);
    if (idx) faiss_Index_free(idx);
    return st;
}

/* After encoding: build the FAISS index unless one with this factory exists. */
static qac_status finish(builder *b) {
    json_t *fa = json_object_get(b->man, "faiss");
    if (json_is_object(fa)) {
        const char *had = json_string_value(json_object_get(fa, "factory"));
        char path[4096];
        if (had && !strcmp(had, b->factory) && qac_path_join(path, sizeof path, b->dir, "index.faiss") == QAC_OK &&
            access(path, R_OK) == 0)
            return QAC_OK;
        /* another factory: embeddings are reused, only the FAISS index is rebuilt */
        json_object_set_new(b->man, "faiss", json_null());
        qac_status st = write_manifest(b);
        if (st) return st;
    }
    return build_faiss(b);
}

static qac_status abs_path(const char *p, char *out, size_t cap, uint64_t *size) {
    char buf[PATH_MAX];
    if (!realpath(p, buf))
        return qac_set_error(errno == ENOENT ? QAC_ERR_NOT_FOUND : QAC_ERR_IO, "%s: %s", p, strerror(errno));
    struct stat sb;
    if (stat(buf, &sb) != 0) return qac_set_error(QAC_ERR_IO, "stat %s: %s", buf, strerror(errno));
    if (snprintf(out, cap, "%s", buf) >= (int)cap) return qac_set_error(QAC_ERR_INVALID, "path too long: %s", buf);
    *size = (uint64_t)sb.st_size;
    return QAC_OK;
}

/* Where the model is, beside the build identity (a moved model is the same
 * model): what a mismatch error tells the user to pass as --model. NULL
 * when the model has no directory. */
static json_t *model_dir_json(const qac_model *m) {
    char real[PATH_MAX];
    return m->dir && realpath(m->dir, real) ? json_string(real) : NULL;
}

static void set_model_dir(builder *b, const qac_model *m) {
    json_t *d = model_dir_json(m);
    if (d) json_object_set_new(b->man, "model_dir", d);
}

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

/* ---- from a corpus, through the encoders ----
 *
 * A reader thread reads the corpus a chunk at a time (never across a shard
 * boundary, so a resumed run batches exactly like an uninterrupted one)
 * and tokenises each chunk on a pool of threads while the encoders work on
 * the previous ones (QAC_CHUNKS_AHEAD). A chunk is sorted by length and cut
 * into batches, which the encoders take in turn, each from its own thread.
 * A batch is the same whichever encoder runs it, so the vectors depend
 * neither on the number of encoders nor of tokenising threads. */

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

typedef struct enc_team {
    qac_encoder **enc;
    int n_enc;
    int pool_from;                   /* tokens of the passage prompt the pooling skips (0: none) */
    uint64_t done_before, est_total; /* for progress: rows before the chunk, the estimated total */
    int done;                        /* the chunk's rows encoded */
    builder *b;
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
        if (w->idx == 0) progress(t->b, "encode", t->done_before + (uint64_t)done, t->est_total); /* the caller's thread */
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
static qac_status encode_chunk(enc_team *t, builder *b, chunk *c, int max_len, double *busy_s) {
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


/* The passage length of a build: the option, else the model's, within the
 * model's limits. */
static qac_status build_max_len(const qac_model *m, int want, int *out) {
    int max_len = want > 0 ? want : m->max_seq_len;
    if (max_len > m->max_seq_len) max_len = m->max_seq_len;
    if (max_len > m->cfg.max_position) max_len = m->cfg.max_position;
    if (max_len < 2) return qac_set_error(QAC_ERR_INVALID, "max_len %d: must be >= 2", max_len);
    *out = max_len;
    return QAC_OK;
}

static const char *fmt_name(qac_text_format fmt) {
    static const char *names[] = {"auto", "tsv", "beir", "tevatron", "cranfield"};
    return (int)fmt >= 0 && (int)fmt <= 4 ? names[fmt] : "?";
}

/* The "model" and "source" objects of a corpus build's identity. */
static json_t *model_identity(const qac_encoder *enc) {
    const qac_model *m = qac_encoder_model(enc);
    json_t *j = json_pack("{s:s, s:s, s:i, s:s, s:b}", "name", m->name, "fingerprint", m->fingerprint, "dim",
                          qac_encoder_dim(enc), "pooling", m->pooling == QAC_POOL_MEAN ? "mean" : "cls", "normalize",
                          m->normalize);
    /* bf16 or int8 encoder weights give other vectors: part of the identity
     * (absent for fp32, so that earlier indexes still resume) */
    if (j && qac_encoder_cpu_precision(enc) != QAC_PREC_FP32)
        json_object_set_new(j, "encoder_dtype", json_string(qac_precision_name(qac_encoder_cpu_precision(enc))));
    /* the prompts the passages get, and the query prompt that goes with
     * them: absent when both are empty, as in indexes built before prompts */
    const char *qprompt = qac_model_query_prompt(m), *pprompt = qac_model_passage_prompt(m);
    if (j && (*qprompt || *pprompt))
        json_object_set_new(j, "prompts", json_pack("{s:s, s:s}", "query", qprompt, "passage", pprompt));
    return j;
}

static json_t *corpus_identity(const char *corpus_abs, uint64_t size, qac_text_format fmt) {
    return json_pack("{s:s, s:s, s:I, s:s}", "kind", "corpus", "path", corpus_abs, "size", (json_int_t)size, "format",
                     fmt_name(fmt));
}

/* The whole identity a manifest's "build" records; takes the references. */
static json_t *build_identity(json_t *model, json_t *source, int max_len, int dim, const qac_index_build_opts *o) {
    if (!model || !source) {
        json_decref(model);
        json_decref(source);
        return NULL;
    }
    return json_pack("{s:o, s:o, s:i, s:i, s:s, s:i}", "model", model, "source", source, "max_len", max_len, "dim", dim,
                     "dtype", o->fp16 ? "fp16" : "fp32", "shard_size", o->shard_size);
}

/* A resumed build continues after the last listed passage: seek the reader
 * there and check that the passage is still the one listed. */
static qac_status resume_reader(builder *b, qac_reader *r, const char *corpus_abs) {
    size_t ns = man_nshards(b);
    if (!ns) return QAC_OK;
    json_t *last = json_array_get(json_object_get(b->man, "shards"), ns - 1);
    const char *last_id = json_string_value(json_object_get(last, "last_id"));
    qac_record rec;
    int got = 0;
    qac_status st;
    if ((st = qac_reader_seek(r, (uint64_t)json_integer_value(json_object_get(last, "last_offset")),
                              (int64_t)json_integer_value(json_object_get(last, "last_line")))) ||
        (st = qac_reader_next(r, &rec, &got)))
        return st;
    if (!got || !last_id || strcmp(rec.id, last_id) != 0)
        return qac_set_error(QAC_ERR_INVALID, "%s changed since the last run: passage %s is not where it was",
                             corpus_abs, last_id ? last_id : "?");
    return QAC_OK;
}

qac_status qac_index_build(const char *out_dir, qac_encoder *enc, const char *corpus_path,
                           const qac_index_build_opts *opts) {
    qac_index_build_opts defaults = qac_index_default_build_opts();
    const qac_index_build_opts *o = opts ? opts : &defaults;
    if (!out_dir || !enc || !corpus_path) return qac_set_error(QAC_ERR_INVALID, "index build: missing argument");
    const qac_model *m = qac_encoder_model(enc);
    int max_len = 0;
    qac_status st = build_max_len(m, o->max_len, &max_len);
    if (st) return st;
    char corpus_abs[PATH_MAX];
    uint64_t corpus_size, total = 0;
    if ((st = abs_path(corpus_path, corpus_abs, sizeof corpus_abs, &corpus_size))) return st;
    const char *factory = o->factory && *o->factory ? o->factory : "Flat";
    if ((st = check_factory(factory, qac_encoder_dim(enc))) || (st = qac_check_output_dir(out_dir))) return st;
    uint64_t encoded = 0;
    int done_before = already_encoded(out_dir, &encoded); /* only the FAISS index is (re)built */
    if ((!done_before && (st = check_corpus(corpus_abs, o, &total))) ||
        (st = check_training(factory, o, done_before ? encoded : total)))
        return st;
    qac_reader *r = NULL;
    if ((st = qac_reader_open(&r, corpus_abs, QAC_READ_CORPUS, o->format))) return st;
    int dim = qac_encoder_dim(enc);
    json_t *identity = build_identity(model_identity(enc), corpus_identity(corpus_abs, corpus_size,
                                                                           qac_reader_format(r)),
                                      max_len, dim, o);
    if (!identity) {
        qac_reader_free(r);
        return qac_set_error(QAC_ERR_NOMEM, "manifest: out of memory");
    }
    const char *pprompt = qac_model_passage_prompt(m);
    builder b;
    /* the encoders, the reader thread and its chunks, the shard writer */
    const int n_enc = 1 + (o->more_encoders && o->n_more_encoders > 0 ? (o->n_more_encoders < 63 ? o->n_more_encoders : 63) : 0);
    qac_encoder *encs[64];
    double dev0[64];
    encs[0] = enc;
    for (int i = 1; i < n_enc; i++) encs[i] = o->more_encoders[i - 1];
    for (int i = 0; i < n_enc; i++) dev0[i] = qac_encoder_device_seconds(encs[i]);
    enc_team team;
    memset(&team, 0, sizeof team);
    team.enc = encs;
    team.n_enc = n_enc;
    team.batch = o->batch > 4096 ? 4096 : o->batch;
    pthread_mutex_init(&team.mu, NULL);
    feeder fd;
    memset(&fd, 0, sizeof fd);
    pthread_mutex_init(&fd.mu, NULL);
    pthread_cond_init(&fd.cv, NULL);
    pthread_t feeder_thread;
    int feeding = 0;
    shard_writer wr;
    memset(&wr, 0, sizeof wr);
    if (o->stats) {
        memset(o->stats, 0, sizeof *o->stats);
        o->stats->encoders = n_enc;
    }
    memset(&b, 0, sizeof b);
    b.lock_fd = -1;
    if ((st = qac_model_prompt_skip(m, pprompt, max_len, &team.pool_from))) {
        json_decref(identity);
        goto done;
    }
    for (int i = 1; i < n_enc; i++)
        if (qac_encoder_model(encs[i]) != m || qac_encoder_dim(encs[i]) != dim) {
            json_decref(identity);
            st = qac_set_error(QAC_ERR_INVALID, "index build: the further encoders must share the first one's model");
            goto done;
        }
    if ((st = builder_begin(&b, out_dir, o, identity, dim))) goto done;
    json_object_set_new(b.man, "device", json_string(qac_encoder_device(enc) == QAC_DEVICE_CUDA ? "cuda" : "cpu"));
    set_model_dir(&b, m);
    if (json_is_true(json_object_get(b.man, "encoded"))) {
        st = finish(&b);
        goto done;
    }
    if ((st = resume_reader(&b, r, corpus_abs))) goto done;
    if ((st = alloc_shard_buffers(&b))) goto done;
    wr.view = b;
    wr.view.vecs = NULL, wr.view.ids = NULL, wr.view.offsets = NULL, wr.view.lines = NULL, wr.view.fill = 0;
    wr.view.cut = 0;
    if ((st = alloc_shard_buffers(&wr.view))) goto done;
    int chunk_cap = QAC_ENCODE_CHUNK < o->shard_size ? QAC_ENCODE_CHUNK : o->shard_size;
    for (int i = 0; i < QAC_CHUNK_SLOTS; i++)
        if ((st = chunk_alloc(&fd.slots[i], chunk_cap, max_len))) goto done;
    int tok_threads = o->tokenize_threads;
    if (tok_threads <= 0) {
        tok_threads = 1;
        for (int i = 0; i < n_enc; i++)
            if (qac_encoder_device(encs[i]) == QAC_DEVICE_CUDA) tok_threads = 0;
        if (!tok_threads) {
            long cores = sysconf(_SC_NPROCESSORS_ONLN);
            tok_threads = cores < 1 ? 1 : cores > 8 ? 8 : (int)cores;
        }
    }
    if (tok_threads > 1 && (st = qac_pool_create(&fd.pool, tok_threads))) goto done;
    fd.r = r;
    fd.m = m;
    fd.prompt = pprompt;
    fd.max_len = max_len;
    fd.cap = chunk_cap;
    fd.shard_size = o->shard_size;
    if (pthread_create(&feeder_thread, NULL, feeder_main, &fd) != 0) {
        st = qac_set_error(QAC_ERR_INTERNAL, "index build: cannot start the reader thread");
        goto done;
    }
    feeding = 1;
    uint64_t done_rows = man_count(&b), first_row = done_rows;
    progress(&b, "encode", done_rows, total); /* the phase's clock starts here */
    const double t_start = qac_now();
    double busy_s = 0, wait_s = 0, flush_s = 0, t0_wait;
    for (int c_next = 0, eof = 0; !eof; c_next = (c_next + 1) % QAC_CHUNK_SLOTS) {
        double t0 = qac_now();
        pthread_mutex_lock(&fd.mu);
        while (fd.state[c_next] != SLOT_FILLED) pthread_cond_wait(&fd.cv, &fd.mu);
        pthread_mutex_unlock(&fd.mu);
        wait_s += qac_now() - t0;
        chunk *c = &fd.slots[c_next];
        if (c->st) {
            st = qac_set_error(c->st, "%s", c->err);
            goto done;
        }
        eof = c->eof;
        const int n = c->n;
        for (int i = 0; i < n; i++) {
            b.ids[b.fill] = c->ids[i];
            c->ids[i] = NULL;
            b.offsets[b.fill] = c->offsets[i];
            b.lines[b.fill] = c->lines[i];
            b.fill++;
        }
        b.cut += c->cut;
        if (n) {
            team.done_before = done_rows;
            team.est_total = total ? total
                             : c->last_offset ? (uint64_t)((double)(done_rows + n) * (double)corpus_size /
                                                           (double)c->last_offset)
                                              : 0;
            if ((st = encode_chunk(&team, &b, c, max_len, &busy_s))) goto done;
            done_rows += (uint64_t)n;
        }
        pthread_mutex_lock(&fd.mu);
        fd.state[c_next] = SLOT_FREE;
        pthread_cond_broadcast(&fd.cv);
        pthread_mutex_unlock(&fd.mu);
        if (b.fill == (uint64_t)o->shard_size || (eof && b.fill)) {
            t0 = qac_now();
            if ((st = writer_start(&wr, &b))) goto done;
            flush_s += qac_now() - t0;
        }
    }
    t0_wait = qac_now();
    if ((st = writer_wait(&wr))) goto done;
    flush_s += qac_now() - t0_wait;
    if (o->stats) {
        qac_index_build_stats *bs = o->stats;
        bs->passages = done_rows - first_row;
        bs->encode_s = qac_now() - t_start;
        bs->busy_s = busy_s;
        bs->wait_s = wait_s;
        bs->flush_s = flush_s;
        bs->device_s = 0;
        for (int i = 0; i < n_enc; i++) {
            double d = qac_encoder_device_seconds(team.enc[i]);
            if (d < 0 || dev0[i] < 0) bs->device_s = -1;
            else if (bs->device_s >= 0) bs->device_s += d - dev0[i];
        }
    }
    progress(&b, "encode", done_rows, done_rows);
    json_object_set_new(b.man, "encoded", json_true());
    if ((st = write_manifest(&b))) goto done;
    st = finish(&b);
done:
    if (feeding) {
        pthread_mutex_lock(&fd.mu);
        fd.stop = 1;
        pthread_cond_broadcast(&fd.cv);
        pthread_mutex_unlock(&fd.mu);
        pthread_join(feeder_thread, NULL);
    }
    writer_free(&wr); /* before the builder: it writes the manifest */
    if (o->stats) o->stats->tokenize_threads = fd.pool ? qac_pool_size(fd.pool) : 1;
    for (int i = 0; i < QAC_CHUNK_SLOTS; i++) chunk_free(&fd.slots[i]);
    qac_pool_free(fd.pool);
    pthread_mutex_destroy(&fd.mu);
    pthread_cond_destroy(&fd.cv);
    pthread_mutex_destroy(&team.mu);
    free(team.iv);
    builder_end(&b);
    qac_reader_free(r);
    return st;
}

/* ---- from precomputed vectors (.npy) ---- */

typedef struct npy {
    FILE *f;
    uint64_t rows, data_off;
    int dim, fp16;
} npy;

static qac_status npy_open(npy *a, const char *path) {
    memset(a, 0, sizeof *a);
    qac_status ost = qac_open_input(&a->f, path);
    if (ost) return ost;
    unsigned char pre[12];
    if (fread(pre, 1, 10, a->f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0)
        return qac_set_error(QAC_ERR_FORMAT, "%s: not a .npy file", path);
    uint32_t hlen;
    if (pre[6] == 1) hlen = pre[8] | (uint32_t)pre[9] << 8;
    else {
        if (fread(pre + 10, 1, 2, a->f) != 2) return qac_set_error(QAC_ERR_FORMAT, "%s: truncated header", path);
        hlen = pre[8] | (uint32_t)pre[9] << 8 | (uint32_t)pre[10] << 16 | (uint32_t)pre[11] << 24;
    }
    if (hlen > 1 << 20) return qac_set_error(QAC_ERR_FORMAT, "%s: header too long", path);
    char *h = calloc(1, hlen + 1);
    if (!h) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    if (fread(h, 1, hlen, a->f) != hlen) {
        free(h);
        return qac_set_error(QAC_ERR_FORMAT, "%s: truncated header", path);
    }
    a->data_off = (uint64_t)ftello(a->f);
    qac_status st = QAC_OK;
    const char *d = strstr(h, "'descr':"), *fo = strstr(h, "'fortran_order':"), *sh = strstr(h, "'shape':");
    unsigned long long rows = 0;
    int dim = 0;
    if (!d || !fo || !sh || sscanf(sh + 8, " (%llu, %d)", &rows, &dim) != 2 || dim < 1)
        st = qac_set_error(QAC_ERR_FORMAT, "%s: expected a 2-d array header, got %s", path, h);
    else if (strncmp(fo + 16, " False", 6) != 0)
        st = qac_set_error(QAC_ERR_UNSUPPORTED, "%s: Fortran-order arrays are not supported", path);
    else if (!strncmp(d + 8, " '<f4'", 6)) a->fp16 = 0;
    else if (!strncmp(d + 8, " '<f2'", 6)) a->fp16 = 1;
    else st = qac_set_error(QAC_ERR_UNSUPPORTED, "%s: dtype must be <f4 or <f2", path);
    free(h);
    a->rows = rows;
    a->dim = dim;
    /* a file cut short is said now, not when its last shard is read */
    struct stat sb;
    uint64_t need = a->data_off + (uint64_t)rows * (uint64_t)dim * (a->fp16 ? 2u : 4u);
    if (!st && fstat(fileno(a->f), &sb) == 0 && (uint64_t)sb.st_size < need)
        st = qac_set_error(QAC_ERR_FORMAT, "%s: truncated: its header promises %llu x %d values, %llu bytes, the file "
                           "has %llu", path, rows, dim, (unsigned long long)need, (unsigned long long)sb.st_size);
    return st;
}

static qac_status npy_read(npy *a, uint64_t row, uint64_t n, float *out, const char *path) {
    size_t es = a->fp16 ? 2 : 4, nv = (size_t)n * (size_t)a->dim;
    if (fseeko(a->f, (off_t)(a->data_off + row * (uint64_t)a->dim * es), SEEK_SET) != 0)
        return qac_set_error(QAC_ERR_IO, "seek %s: %s", path, strerror(errno));
    if (!a->fp16) {
        if (fread(out, 4, nv, a->f) != nv) return qac_set_error(QAC_ERR_FORMAT, "%s: truncated data", path);
        return QAC_OK;
    }
    uint16_t buf[4096];
    for (size_t i = 0; i < nv; i += 4096) {
        size_t m = nv - i < 4096 ? nv - i : 4096;
        if (fread(buf, 2, m, a->f) != m) return qac_set_error(QAC_ERR_FORMAT, "%s: truncated data", path);
        for (size_t j = 0; j < m; j++) out[i + j] = qac_f16_to_f32(buf[j]);
    }
    return QAC_OK;
}

/* The row ids of a vectors build, read whole before anything is written. */
typedef struct id_list {
    char **ids;
    uint64_t n;
} id_list;

static void id_list_free(id_list *l) {
    for (uint64_t i = 0; i < l->n; i++) free(l->ids[i]);
    free(l->ids);
    memset(l, 0, sizeof *l);
}

static qac_status id_list_add(id_list *l, const char *id, size_t len, uint64_t *cap) {
    if (l->n == *cap) {
        uint64_t nc = *cap ? *cap * 2 : 1024;
        char **ni = realloc(l->ids, nc * sizeof *ni);
        if (!ni) return qac_set_error(QAC_ERR_NOMEM, "out of memory for the ids");
        l->ids = ni;
        *cap = nc;
    }
    if (!(l->ids[l->n] = strndup(id, len))) return qac_set_error(QAC_ERR_NOMEM, "out of memory for the ids");
    l->n++;
    return QAC_OK;
}

static int str_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* One id per line; an empty line or a repeated id is an error naming it. */
static qac_status read_id_file(const char *path, id_list *l) {
    FILE *f;
    qac_status st = qac_open_input(&f, path);
    if (st) return st;
    char *line = NULL;
    size_t lcap = 0;
    uint64_t cap = 0;
    ssize_t len;
    while (!st && (len = getline(&line, &lcap, f)) >= 0) {
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (!len) st = qac_set_error(QAC_ERR_FORMAT, "%s:%llu: empty id", path, (unsigned long long)l->n + 1);
        else st = id_list_add(l, line, (size_t)len, &cap);
    }
    free(line);
    fclose(f);
    if (st) return st;
    char **sorted = malloc((l->n ? l->n : 1) * sizeof *sorted);
    if (!sorted) return qac_set_error(QAC_ERR_NOMEM, "out of memory for the ids");
    memcpy(sorted, l->ids, l->n * sizeof *sorted);
    qsort(sorted, l->n, sizeof *sorted, str_cmp);
    for (uint64_t i = 1; i < l->n && !st; i++)
        if (!strcmp(sorted[i - 1], sorted[i])) st = qac_set_error(QAC_ERR_FORMAT, "%s: id '%s' appears twice", path, sorted[i]);
    free(sorted);
    return st;
}

/* The ids of a corpus's records, in order (its reader rejects repeats). */
static qac_status read_corpus_ids(const char *path, qac_text_format fmt, id_list *l) {
    qac_reader *r = NULL;
    uint64_t cap = 0;
    qac_status st = qac_reader_open(&r, path, QAC_READ_CORPUS, fmt);
    for (int got = 1; !st;) {
        qac_record rec;
        if ((st = qac_reader_next(r, &rec, &got)) || !got) break;
        st = id_list_add(l, rec.id, strlen(rec.id), &cap);
    }
    qac_reader_free(r);
    return st;
}

qac_status qac_index_build_vectors(const char *out_dir, const char *npy_path, const qac_index_build_opts *opts) {
    qac_index_build_opts defaults = qac_index_default_build_opts();
    const qac_index_build_opts *o = opts ? opts : &defaults;
    if (!out_dir || !npy_path) return qac_set_error(QAC_ERR_INVALID, "index build: missing argument");
    char abs[PATH_MAX];
    uint64_t size;
    qac_status st = abs_path(npy_path, abs, sizeof abs, &size);
    if (st) return st;
    npy a;
    if ((st = npy_open(&a, abs))) {
        if (a.f) fclose(a.f);
        return st;
    }
    const qac_model *vm = o->vectors_model;
    if (vm && vm->cfg.hidden_size != a.dim) {
        fclose(a.f);
        return qac_set_error(QAC_ERR_INVALID, "%s has dimension %d but model %s has %d", abs, a.dim, vm->name,
                             vm->cfg.hidden_size);
    }
    /* ids, the factory and the output, all before anything is written */
    id_list ids = {0};
    const char *ids_src = o->ids_path ? o->ids_path : o->ids_corpus;
    char ids_abs[PATH_MAX] = "";
    uint64_t ids_size = 0;
    if (o->ids_path && o->ids_corpus) st = qac_set_error(QAC_ERR_INVALID, "give the ids from a file or a corpus, not both");
    if (!st && ids_src) st = abs_path(ids_src, ids_abs, sizeof ids_abs, &ids_size);
    if (!st && o->ids_path) st = read_id_file(ids_abs, &ids);
    if (!st && o->ids_corpus) st = read_corpus_ids(ids_abs, o->ids_format, &ids);
    if (!st && ids_src && ids.n != a.rows)
        st = qac_set_error(QAC_ERR_INVALID, "%s holds %llu ids but %s has %llu rows: they must match row for row",
                           ids_src, (unsigned long long)ids.n, npy_path, (unsigned long long)a.rows);
    const char *factory = o->factory && *o->factory ? o->factory : "Flat";
    if (!st && !a.rows) st = qac_set_error(QAC_ERR_INVALID, "%s holds no vectors", npy_path);
    if (!st) st = check_factory(factory, a.dim);
    if (!st) st = check_training(factory, o, a.rows);
    if (!st) st = qac_check_output_dir(out_dir);
    if (st) {
        id_list_free(&ids);
        fclose(a.f);
        return st;
    }
    json_t *identity = json_pack("{s:{s:s, s:s, s:i, s:s, s:b}, s:{s:s, s:s, s:I, s:s}, s:i, s:i, s:s, s:i}",
                                 "model", "name", vm ? vm->name : "precomputed", "fingerprint",
                                 vm ? vm->fingerprint : "none", "dim", a.dim, "pooling",
                                 vm ? qac_pooling_name(vm->pooling) : "none", "normalize", vm ? vm->normalize : 0,
                                 "source", "kind", "vectors", "path", abs, "size",
                                 (json_int_t)size, "format", a.fp16 ? "npy-f2" : "npy-f4", "max_len", 0, "dim",
                                 a.dim, "dtype", o->fp16 ? "fp16" : "fp32", "shard_size", o->shard_size);
    /* where the ids came from is part of what was built (absent when numbered,
     * as before ids could be given, so those builds still resume) */
    if (identity && ids_src)
        json_object_set_new(json_object_get(identity, "source"), "ids",
                            json_pack("{s:s, s:s, s:I}", "kind", o->ids_path ? "file" : "corpus", "path", ids_abs,
                                      "size", (json_int_t)ids_size));
    if (!identity) {
        id_list_free(&ids);
        fclose(a.f);
        return qac_set_error(QAC_ERR_NOMEM, "manifest: out of memory");
    }
    builder b;
    if ((st = builder_begin(&b, out_dir, o, identity, a.dim))) goto done;
    if (vm) set_model_dir(&b, vm);
    if (!json_is_true(json_object_get(b.man, "encoded"))) {
        if ((st = alloc_shard_buffers(&b))) goto done;
        uint64_t row = man_count(&b);
        progress(&b, "load", row, a.rows); /* the phase's clock starts here */
        while (row < a.rows) {
            uint64_t n = a.rows - row < (uint64_t)o->shard_size ? a.rows - row : (uint64_t)o->shard_size;
            if ((st = npy_read(&a, row, n, b.vecs, abs))) goto done;
            for (uint64_t i = 0; i < n; i++) {
                char id[32];
                snprintf(id, sizeof id, "%" PRIu64, row + i);
                if (!(b.ids[i] = strdup(ids.n ? ids.ids[row + i] : id))) {
                    b.fill = i;
                    st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
                    goto done;
                }
                b.offsets[i] = row + i;
                b.lines[i] = 0;
            }
            b.fill = n;
            if ((st = flush_shard(&b))) goto done;
            row += n;
            progress(&b, "load", row, a.rows);
        }
        json_object_set_new(b.man, "encoded", json_true());
        if ((st = write_manifest(&b))) goto done;
    }
    st = finish(&b);
done:
    builder_end(&b);
    id_list_free(&ids);
    fclose(a.f);
    return st;
}

/* ---- distributed builds: parts from many processes, merged into one index ---- */

#define QAC_PARTS_FORMAT "qac-index-parts"
/* 2: parts record which passages were cut (QAC_SHARD_CUT), parts.json the
 * model's directory; the merge needs both to write a build's manifest */
#define QAC_PARTS_VERSION 2

struct qac_index_parts {
    char *dir;
    qac_encoder *enc;
    int max_len, dim;
    /* grown on demand */
    int32_t *tok;
    int *lens, *order;
    const int32_t **ptrs;
    float *vecs, *run_vecs;
    const char **run_ids;
    uint64_t *run_offsets;
    int64_t *run_lines;
    uint8_t *cut, *run_cut; /* passages cut at max_len, recorded in the parts */
    size_t cap;
};

static qac_status read_json(const char *path, json_t **out) {
    json_error_t err;
    *out = json_load_file(path, 0, &err);
    if (!*out)
        return qac_set_error(access(path, F_OK) == 0 ? QAC_ERR_FORMAT : QAC_ERR_NOT_FOUND, "%s: %s", path, err.text);
    return QAC_OK;
}

static qac_status write_json(const char *path, json_t *j) {
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (!text) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    qac_atomic_file af;
    qac_status st = qac_atomic_open(&af, path);
    if (!st) {
        size_t n = strlen(text);
        if (fwrite(text, 1, n, af.f) != n || fputc('\n', af.f) == EOF) {
            st = qac_set_error(QAC_ERR_IO, "write %s: %s", path, strerror(errno));
            qac_atomic_abort(&af);
        } else {
            st = qac_atomic_commit(&af);
        }
    }
    free(text);
    return st;
}

qac_status qac_index_parts_open(qac_index_parts **out, const char *dir, qac_encoder *enc, const char *corpus_path,
                                int max_len_opt, qac_text_format fmt) {
    *out = NULL;
    if (!dir || !enc || !corpus_path) return qac_set_error(QAC_ERR_INVALID, "index parts: missing argument");
    int max_len = 0;
    qac_status st = build_max_len(qac_encoder_model(enc), max_len_opt, &max_len);
    char corpus_abs[PATH_MAX], path[4096];
    uint64_t size;
    if (st || (st = abs_path(corpus_path, corpus_abs, sizeof corpus_abs, &size))) return st;
    qac_reader *r = NULL;
    if ((st = qac_reader_open(&r, corpus_abs, QAC_READ_CORPUS, fmt))) return st;
    fmt = qac_reader_format(r);
    qac_reader_free(r);
    json_t *model = model_identity(enc), *source = corpus_identity(corpus_abs, size, fmt);
    /* the device is part of it: the CUDA encoder's last bits depend on the batch */
    json_t *want = model && source ? json_pack("{s:s, s:i, s:O, s:O, s:i, s:i, s:s}", "format", QAC_PARTS_FORMAT,
                                               "version", QAC_PARTS_VERSION, "model", model, "source", source,
                                               "max_len", max_len, "dim", qac_encoder_dim(enc), "device",
                                               qac_encoder_device(enc) == QAC_DEVICE_CUDA ? "cuda" : "cpu")
                                   : NULL;
    json_decref(model);
    json_decref(source);
    if (!want) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    if ((st = qac_mkdirs(dir)) || (st = qac_path_join(path, sizeof path, dir, "parts.json"))) {
        json_decref(want);
        return st;
    }
    /* every process computes the same identity: the first one to get here
     * writes it (atomically), the others must agree with it. The model's
     * directory is beside it, as in a build's manifest (a moved model is the
     * same model): the first process's is the one the merge records. */
    json_t *had = NULL;
    if (access(path, F_OK) == 0) {
        if (!(st = read_json(path, &had))) json_object_del(had, "model_dir");
        if (!st && !json_equal(had, want)) {
            char diff[2048] = "";
            describe_diff(diff, sizeof diff, "", had, want);
            st = qac_set_error(QAC_ERR_INVALID, "%s holds parts of another build (%s); use another directory", dir,
                               diff);
        }
        json_decref(had);
    } else {
        json_t *mdir = model_dir_json(qac_encoder_model(enc));
        if (mdir) json_object_set_new(want, "model_dir", mdir);
        st = write_json(path, want);
    }
    json_decref(want);
    if (st) return st;
    qac_index_parts *p = calloc(1, sizeof *p);
    if (!p || !(p->dir = strdup(dir))) {
        free(p);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    p->enc = enc;
    p->max_len = max_len;
    p->dim = qac_encoder_dim(enc);
    *out = p;
    return QAC_OK;
}

void qac_index_parts_free(qac_index_parts *p) {
    if (!p) return;
    free(p->dir);
    free(p->tok);
    free(p->lens);
    free(p->order);
    free(p->ptrs);
    free(p->vecs);
    free(p->run_vecs);
    free(p->run_ids);
    free(p->run_offsets);
    free(p->run_lines);
    free(p->cut);
    free(p->run_cut);
    free(p);
}

static qac_status parts_grow(qac_index_parts *p, size_t n) {
    if (n <= p->cap) return QAC_OK;
    size_t d = (size_t)p->dim, L = (size_t)p->max_len;
#define QAC_GROW(f, per)                                                                                               \
    do {                                                                                                               \
        void *q = realloc((void *)p->f, n * (per) * sizeof *p->f);                                                     \
        if (!q) return qac_set_error(QAC_ERR_NOMEM, "index parts: out of memory for %zu passages", n);                \
        p->f = q;                                                                                                      \
    } while (0)
    QAC_GROW(tok, L);
    QAC_GROW(lens, 1);
    QAC_GROW(order, 1);
    QAC_GROW(ptrs, 1);
    QAC_GROW(vecs, d);
    QAC_GROW(run_vecs, d);
    QAC_GROW(run_ids, 1);
    QAC_GROW(run_offsets, 1);
    QAC_GROW(run_lines, 1);
    QAC_GROW(cut, 1);
    QAC_GROW(run_cut, 1);
#undef QAC_GROW
    p->cap = n;
    return QAC_OK;
}

static int by_row(const void *a, const void *b, void *keys) {
    const int64_t *row = keys;
    int64_t x = row[*(const int *)a], y = row[*(const int *)b];
    return (x > y) - (x < y);
}

qac_status qac_index_parts_encode(qac_index_parts *p, int n, const int64_t *rows, const char *const *ids,
                                  const char *const *texts, const size_t *lens, const uint64_t *offsets,
                                  const int64_t *lines) {
    if (n < 0) return qac_set_error(QAC_ERR_INVALID, "index parts: negative count %d", n);
    if (n == 0) return QAC_OK;
    qac_status st = parts_grow(p, (size_t)n);
    if (st) return st;
    const qac_model *m = qac_encoder_model(p->enc);
    /* the passage prompt, as qac index build applies it */
    const char *pprompt = qac_model_passage_prompt(m);
    int skip = 0;
    if ((st = qac_model_prompt_skip(m, pprompt, p->max_len, &skip))) return st;
    for (int i = 0; i < n; i++) {
        if (rows[i] < 0) return qac_set_error(QAC_ERR_INVALID, "index parts: passage %s has row %lld", ids[i],
                                              (long long)rows[i]);
        size_t len = lens ? lens[i] : strlen(texts[i]);
        int32_t *tok = p->tok + (size_t)i * (size_t)p->max_len;
        int cut = 0;
        if ((st = qac_tokenizer_encode_prompted_cut(m->tok, pprompt, texts[i], len, p->max_len, tok, &p->lens[i],
                                                    &cut)))
            return qac_wrap_error(st, "passage %s", ids[i]);
        p->cut[i] = (uint8_t)cut;
        p->ptrs[i] = tok;
        p->order[i] = i;
    }
    if (skip) {
        int *from = malloc((size_t)n * sizeof *from);
        if (!from) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        for (int i = 0; i < n; i++) from[i] = skip;
        st = qac_encoder_encode_ids_from(p->enc, p->ptrs, p->lens, from, n, p->vecs);
        free(from);
    } else {
        st = qac_encoder_encode_ids(p->enc, p->ptrs, p->lens, n, p->vecs);
    }
    if (st) return st;
    qsort_r(p->order, (size_t)n, sizeof(int), by_row, (void *)rows);
    /* one part per run of consecutive rows; its name says which rows it
     * holds, so a batch done twice (a retried worker) writes the same file */
    size_t d = (size_t)p->dim;
    for (int s = 0; s < n;) {
        int e = s + 1;
        while (e < n && rows[p->order[e]] == rows[p->order[e - 1]] + 1) e++;
        if (e < n && rows[p->order[e]] == rows[p->order[e - 1]])
            return qac_set_error(QAC_ERR_INVALID, "index parts: row %lld given twice in one call",
                                 (long long)rows[p->order[e]]);
        for (int j = s; j < e; j++) {
            int i = p->order[j];
            memcpy(p->run_vecs + (size_t)(j - s) * d, p->vecs + (size_t)i * d, d * sizeof(float));
            p->run_ids[j - s] = ids[i];
            p->run_offsets[j - s] = offsets[i];
            p->run_lines[j - s] = lines[i];
            p->run_cut[j - s] = p->cut[i];
        }
        char name[64], path[4096];
        uint64_t first = (uint64_t)rows[p->order[s]], count = (uint64_t)(e - s), sum;
        snprintf(name, sizeof name, "part-%012" PRIu64 "-%" PRIu64 ".qemb", first, count);
        if ((st = qac_path_join(path, sizeof path, p->dir, name)) ||
            (st = qac_shard_write(path, QAC_DTYPE_F32, p->dim, first, count, p->run_vecs, p->run_ids,
                                  p->run_offsets, p->run_lines, p->run_cut, &sum)))
            return st;
        s = e;
    }
    return QAC_OK;
}

typedef struct part_file {
    char name[256];
    uint64_t first, count;
} part_file;

static int part_cmp(const void *a, const void *b) {
    const part_file *x = a, *y = b;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    return (x->count < y->count) - (x->count > y->count); /* the longer first */
}

/* The part files of dir, sorted by first row, each header checked. */
static qac_status list_parts(const char *dir, int dim, part_file **out, size_t *n_out) {
    *out = NULL;
    *n_out = 0;
    DIR *d = opendir(dir);
    if (!d) return qac_set_error(errno == ENOENT ? QAC_ERR_NOT_FOUND : QAC_ERR_IO, "%s: %s", dir, strerror(errno));
    part_file *v = NULL;
    size_t n = 0, cap = 0;
    qac_status st = QAC_OK;
    struct dirent *e;
    while (!st && (e = readdir(d))) {
        unsigned long long first, count;
        int used = -1;
        if (sscanf(e->d_name, "part-%12llu-%llu.qemb%n", &first, &count, &used) != 2 || used < 0 ||
            e->d_name[used] != '\0')
            continue; /* parts.json, a writer's temporary file */
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            part_file *nv = realloc(v, cap * sizeof *v);
            if (!nv) {
                st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
                break;
            }
            v = nv;
        }
        char path[4096];
        qac_shard_header h;
        snprintf(v[n].name, sizeof v[n].name, "%s", e->d_name);
        if ((st = qac_path_join(path, sizeof path, dir, e->d_name)) || (st = qac_shard_peek(path, &h))) break;
        if (h.first_row != first || h.count != count || (int)h.dim != dim)
            st = qac_set_error(QAC_ERR_FORMAT, "%s: holds %llu rows from %llu of dimension %u, not what its name "
                               "says (or not dimension %d)", path, (unsigned long long)h.count,
                               (unsigned long long)h.first_row, h.dim, dim);
        v[n].first = first;
        v[n].count = count;
        n++;
    }
    closedir(d);
    if (st) {
        free(v);
        return st;
    }
    if (n) qsort(v, n, sizeof *v, part_cmp);
    *out = v;
    *n_out = n;
    return QAC_OK;
}

static qac_status read_part(const char *dir, const part_file *pf, qac_shard *s) {
    char path[4096];
    qac_status st = qac_path_join(path, sizeof path, dir, pf->name);
    if (st || (st = qac_shard_read(path, 0, s))) return st;
    if (!s->cut) {
        qac_shard_free(s);
        return qac_set_error(QAC_ERR_FORMAT, "%s: a part without its passages' cut flags (not a part?)", path);
    }
    return QAC_OK;
}

/* Rows held by two parts (a batch a retried worker split differently) must
 * be the same passages with the same bits. */
static qac_status check_overlaps(const char *dir, const part_file *v, size_t n) {
    size_t far = 0; /* the part reaching furthest so far */
    for (size_t i = 1; i < n; i++) {
        uint64_t end = v[far].first + v[far].count;
        if (v[i].first < end) {
            qac_shard a, b;
            qac_status st = read_part(dir, &v[far], &a);
            if (st) return st;
            if ((st = read_part(dir, &v[i], &b))) {
                qac_shard_free(&a);
                return st;
            }
            uint64_t to = end < v[i].first + v[i].count ? end : v[i].first + v[i].count;
            for (uint64_t r = v[i].first; r < to && !st; r++) {
                uint64_t ia = r - a.first_row, ib = r - b.first_row;
                if (strcmp(a.docids[ia], b.docids[ib]) || a.offsets[ia] != b.offsets[ib] ||
                    a.cut[ia] != b.cut[ib] ||
                    memcmp(a.vectors + ia * (size_t)a.dim, b.vectors + ib * (size_t)b.dim, (size_t)a.dim * 4))
                    st = qac_set_error(QAC_ERR_FORMAT, "%s and %s disagree on row %llu (passage %s): parts of "
                                       "different runs?", v[far].name, v[i].name, (unsigned long long)r, a.docids[ia]);
            }
            qac_shard_free(&a);
            qac_shard_free(&b);
            if (st) return st;
        }
        if (v[i].first + v[i].count > end) far = i;
    }
    return QAC_OK;
}

qac_status qac_index_merge(const char *out_dir, const char *parts_dir, const qac_index_build_opts *opts) {
    qac_index_build_opts defaults = qac_index_default_build_opts();
    const qac_index_build_opts *o = opts ? opts : &defaults;
    if (!out_dir || !parts_dir) return qac_set_error(QAC_ERR_INVALID, "index merge: missing argument");
    char path[4096], corpus_abs[PATH_MAX];
    json_t *parts = NULL;
    qac_status st = qac_path_join(path, sizeof path, parts_dir, "parts.json");
    if (st || (st = read_json(path, &parts))) return st;
    const char *fmtname = json_string_value(json_object_get(parts, "format"));
    json_t *source = json_object_get(parts, "source");
    const char *src_path = json_string_value(json_object_get(source, "path"));
    int dim = (int)json_integer_value(json_object_get(parts, "dim"));
    int max_len = (int)json_integer_value(json_object_get(parts, "max_len"));
    if (!fmtname || strcmp(fmtname, QAC_PARTS_FORMAT) != 0 ||
        json_integer_value(json_object_get(parts, "version")) != QAC_PARTS_VERSION || !src_path || dim < 1 ||
        !json_is_object(json_object_get(parts, "model"))) {
        json_decref(parts);
        return qac_set_error(QAC_ERR_FORMAT, "%s: not a qac parts description (version %d expected)", path,
                             QAC_PARTS_VERSION);
    }
    uint64_t size;
    part_file *pv = NULL;
    size_t np = 0;
    qac_reader *r = NULL;
    builder b;
    memset(&b, 0, sizeof b);
    b.lock_fd = -1;
    if ((st = abs_path(src_path, corpus_abs, sizeof corpus_abs, &size))) goto done;
    if (size != (uint64_t)json_integer_value(json_object_get(source, "size"))) {
        st = qac_set_error(QAC_ERR_INVALID, "%s changed since the parts were encoded (%llu bytes, the parts saw %lld)",
                           corpus_abs, (unsigned long long)size,
                           (long long)json_integer_value(json_object_get(source, "size")));
        goto done;
    }
    qac_text_format fmt = QAC_FMT_AUTO;
    const char *sf = json_string_value(json_object_get(source, "format"));
    for (int f = QAC_FMT_TSV; f <= QAC_FMT_CRANFIELD; f++)
        if (sf && !strcmp(sf, fmt_name((qac_text_format)f))) fmt = (qac_text_format)f;
    if ((st = qac_reader_open(&r, corpus_abs, QAC_READ_CORPUS, fmt))) goto done;
    if ((st = list_parts(parts_dir, dim, &pv, &np)) || (st = check_overlaps(parts_dir, pv, np))) goto done;
    json_t *identity = build_identity(json_deep_copy(json_object_get(parts, "model")), json_deep_copy(source),
                                      max_len, dim, o);
    if (!identity) {
        st = qac_set_error(QAC_ERR_NOMEM, "manifest: out of memory");
        goto done;
    }
    if ((st = builder_begin(&b, out_dir, o, identity, dim))) goto done;
    json_t *dev = json_object_get(parts, "device"), *mdir = json_object_get(parts, "model_dir");
    json_object_set_new(b.man, "device", json_string(json_is_string(dev) ? json_string_value(dev) : "cpu"));
    if (json_is_string(mdir)) json_object_set(b.man, "model_dir", mdir); /* where a build records it */
    if (json_is_true(json_object_get(b.man, "encoded"))) {
        st = finish(&b);
        goto done;
    }
    if ((st = resume_reader(&b, r, corpus_abs)) || (st = alloc_shard_buffers(&b))) goto done;
    /* Walk the corpus: every passage must be in a part, as the same passage
     * (id, offset, line), which is what makes the merged index the one a
     * single process builds. */
    uint64_t row = man_count(&b);
    size_t next = 0;
    qac_shard cur;
    int have = 0;
    memset(&cur, 0, sizeof cur);
    for (;;) {
        qac_record rec;
        int got = 0;
        if ((st = qac_reader_next(r, &rec, &got)) || !got) break;
        if (!have || row >= cur.first_row + cur.count) {
            if (have) qac_shard_free(&cur);
            have = 0;
            while (next < np && pv[next].first + pv[next].count <= row) next++; /* inside rows already taken */
            if (next == np || pv[next].first > row) {
                st = qac_set_error(QAC_ERR_NOT_FOUND, "%s: no part holds row %llu (passage %s, line %lld of %s)%s",
                                   parts_dir, (unsigned long long)row, rec.id, (long long)rec.line, corpus_abs,
                                   next == np ? "" : "; encode the missing rows and merge again");
                break;
            }
            if ((st = read_part(parts_dir, &pv[next], &cur))) break;
            have = 1;
            next++;
        }
        uint64_t i = row - cur.first_row;
        if (strcmp(cur.docids[i], rec.id) || cur.offsets[i] != rec.offset || cur.lines[i] != rec.line) {
            st = qac_set_error(QAC_ERR_INVALID, "row %llu: the parts hold passage %s (offset %llu), the corpus %s "
                               "(offset %llu): parts of another corpus?", (unsigned long long)row, cur.docids[i],
                               (unsigned long long)cur.offsets[i], rec.id, (unsigned long long)rec.offset);
            break;
        }
        if (!(b.ids[b.fill] = strdup(rec.id))) {
            st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
            break;
        }
        memcpy(b.vecs + b.fill * (size_t)dim, cur.vectors + i * (size_t)dim, (size_t)dim * sizeof(float));
        b.cut += cur.cut[i];
        b.offsets[b.fill] = rec.offset;
        b.lines[b.fill] = rec.line;
        b.fill++;
        row++;
        if (b.fill == (uint64_t)o->shard_size && (st = flush_shard(&b))) break;
        if (row % 65536 == 0) progress(&b, "merge", row, 0);
    }
    if (have) qac_shard_free(&cur);
    if (st) goto done;
    for (size_t k = 0; k < np; k++)
        if (pv[k].first + pv[k].count > row) {
            st = qac_set_error(QAC_ERR_INVALID, "%s/%s holds rows past the corpus's %llu passages: parts of another "
                               "corpus?", parts_dir, pv[k].name, (unsigned long long)row);
            goto done;
        }
    if ((st = flush_shard(&b))) goto done;
    progress(&b, "merge", row, row);
    json_object_set_new(b.man, "encoded", json_true());
    if ((st = write_manifest(&b))) goto done;
    st = finish(&b);
done:
    builder_end(&b);
    qac_reader_free(r);
    free(pv);
    json_decref(parts);
    return st;
}
