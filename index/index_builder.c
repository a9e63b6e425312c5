/* The builder of an index directory (index_builder.h): what every way of
 * making an index shares. The corpus build (index_encode.c), the build from
 * vectors (index_vectors.c) and the merge of parts (index_parts.c) sit above
 * it; it takes nothing from them.
 *
 * Crash safety: every shard, the FAISS file, the docid table and the
 * manifest are written to a temporary name and renamed. A shard counts only
 * once the manifest lists it (with its checksum), so a kill between the two
 * renames just re-encodes that shard. Resuming seeks the reader to the last
 * listed passage, checks its id, and continues after it.
 *
 * In order: the manifest and the checks a build makes before any work
 * (factory, training size); begin (the directory lock, the identity check,
 * the listed shards verified), end, and shards flushed and listed; the
 * FAISS stage every build ends with (train on an evenly spaced sample, add
 * every shard, write index.faiss, docids.qdoc and the manifest's
 * checksums); and the identity a manifest records. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
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

#include "index_builder.h"
#include "index_internal.h"
#include "qac_util.h"

#define QAC_ADD_PIECE 65536     /* rows per faiss add call (progress granularity) */

/* ---- the manifest, and the checks before any work ---- */

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

static qac_status faiss_fail(const char *what) {
    return qac_set_error(QAC_ERR_FAISS, "faiss %s: %s", what, qac_faiss_message());
}

void qac_builder_progress(const qac_builder *b, const char *phase, uint64_t done, uint64_t total) {
    if (b->o->progress) b->o->progress(b->o->progress_user, phase, done, total);
}

qac_status qac_builder_check_cancel(const qac_builder *b, const char *phase, uint64_t done) {
    if (b->o->cancel && b->o->cancel(b->o->cancel_user))
        return qac_set_error(QAC_ERR_CANCELLED, "index %s: cancelled after %llu rows (what is written stays: run it "
                             "again to resume)", phase, (unsigned long long)done);
    return QAC_OK;
}

qac_status qac_builder_write_manifest(const qac_builder *b) {
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
void qac_builder_describe_diff(char *buf, size_t cap, const char *prefix, json_t *had, json_t *want) {
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
            qac_builder_describe_diff(buf, cap, sub, h, v);
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

qac_status qac_builder_check_factory(const char *factory, int dim) {
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
qac_status qac_builder_check_training(const char *factory, const qac_index_build_opts *o, uint64_t n) {
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

/* The options a builder checks, then dir made and locked against a second
 * build, and the temporaries of a killed one removed. */
static qac_status builder_lock(qac_builder *b, const char *dir) {
    if (b->o->shard_size < 1 || b->o->batch < 1)
        return qac_set_error(QAC_ERR_INVALID, "shard size and batch must be >= 1");
    qac_status st;
    if ((st = qac_builder_check_factory(b->factory, b->dim)) || (st = qac_check_output_dir(dir)) ||
        (st = qac_mkdirs(dir)))
        return st;
    char path[4096];
    if ((st = qac_path_join(path, sizeof path, dir, ".lock"))) return st;
    b->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (b->lock_fd < 0) return qac_set_error(QAC_ERR_IO, "%s: %s", path, strerror(errno));
    if (flock(b->lock_fd, LOCK_EX | LOCK_NB) != 0)
        return qac_set_error(QAC_ERR_BUSY, "%s: another qac index build is running on this directory", dir);
    remove_stale_tmp(dir);
    return QAC_OK;
}

/* *out: dir's manifest when it is one to continue (the same identity), or
 * NULL to start afresh (none, or a run that failed before its first shard
 * left nothing to keep). Refuses a manifest of another identity. */
static qac_status builder_load_manifest(const char *dir, json_t *identity, json_t **out) {
    *out = NULL;
    char path[4096];
    qac_status st = qac_path_join(path, sizeof path, dir, "manifest.json");
    if (st || access(path, F_OK) != 0) return st;
    json_error_t err;
    json_t *m = json_load_file(path, 0, &err);
    if (!m) return qac_set_error(QAC_ERR_FORMAT, "%s: %s (line %d)", path, err.text, err.line);
    json_t *fmt = json_object_get(m, "format");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), QAC_MANIFEST_FORMAT) != 0 ||
        json_integer_value(json_object_get(m, "version")) != QAC_MANIFEST_VERSION ||
        !json_is_array(json_object_get(m, "shards"))) {
        json_decref(m);
        return qac_set_error(QAC_ERR_FORMAT, "%s: not a qac index manifest (version %d expected)", path,
                             QAC_MANIFEST_VERSION);
    }
    json_t *had = json_object_get(m, "build");
    if (json_equal(had, identity)) {
        *out = m;
        return QAC_OK;
    }
    if (json_array_size(json_object_get(m, "shards")) == 0 && !json_is_true(json_object_get(m, "encoded"))) {
        json_decref(m);
        return QAC_OK;
    }
    char diff[2048] = "";
    qac_builder_describe_diff(diff, sizeof diff, "", had, identity);
    json_decref(m);
    return qac_set_error(QAC_ERR_INVALID,
                         "%s already holds an index built differently (%s); use a new --out directory or delete "
                         "this one",
                         dir, diff);
}

/* The shards a continued manifest lists are still whole. */
static qac_status builder_verify_shards(const qac_builder *b) {
    size_t i;
    json_t *sh;
    json_array_foreach(json_object_get(b->man, "shards"), i, sh) {
        char sp[4096];
        qac_shard_header h;
        qac_status st = qac_path_join(sp, sizeof sp, b->dir, json_string_value(json_object_get(sh, "file")));
        if (st) return st;
        if ((st = qac_shard_peek(sp, &h))) return qac_wrap_error(st, "resume");
        if (h.checksum != (uint64_t)json_integer_value(json_object_get(sh, "checksum")) ||
            h.count != (uint64_t)json_integer_value(json_object_get(sh, "count")))
            return qac_set_error(QAC_ERR_FORMAT, "%s does not match the manifest (modified?)", sp);
    }
    return QAC_OK;
}

/* Lock the directory, then load or start the manifest. `identity` is
 * consumed. Refuses when an existing manifest has a different identity. */
qac_status qac_builder_begin(qac_builder *b, const char *dir, const qac_index_build_opts *o, json_t *identity,
                                int dim) {
    memset(b, 0, sizeof *b);
    b->dir = dir;
    b->o = o;
    b->lock_fd = -1;
    b->factory = o->factory && *o->factory ? o->factory : "Flat";
    b->dim = dim;
    b->dtype = o->fp16 ? QAC_DTYPE_F16 : QAC_DTYPE_F32;
    json_t *had = NULL;
    qac_status st = builder_lock(b, dir);
    if (!st) st = builder_load_manifest(dir, identity, &had);
    if (st || had) {
        json_decref(identity);
        b->man = had;
        return st ? st : builder_verify_shards(b);
    }
    b->man = json_pack("{s:s, s:i, s:o, s:[], s:I, s:b, s:n}", "format", QAC_MANIFEST_FORMAT, "version",
                       QAC_MANIFEST_VERSION, "build", identity, "shards", "count", (json_int_t)0, "encoded", 0,
                       "faiss");
    if (!b->man) return qac_set_error(QAC_ERR_NOMEM, "manifest: out of memory");
    return qac_builder_write_manifest(b);
}

void qac_builder_end(qac_builder *b) {
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

uint64_t qac_builder_count(const qac_builder *b) {
    return (uint64_t)json_integer_value(json_object_get(b->man, "count"));
}
size_t qac_builder_nshards(const qac_builder *b) { return json_array_size(json_object_get(b->man, "shards")); }

qac_status qac_builder_alloc_shard(qac_builder *b) {
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
qac_status qac_builder_flush_shard(qac_builder *b) {
    if (!b->fill) return QAC_OK;
    size_t k = qac_builder_nshards(b);
    char name[64], path[4096];
    snprintf(name, sizeof name, "emb-%05zu.qemb", k);
    qac_status st = qac_path_join(path, sizeof path, b->dir, name);
    if (st) return st;
    uint64_t first = qac_builder_count(b), sum;
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
    return qac_builder_write_manifest(b);
}

/* ---- FAISS stage: train on a sample, add every shard, write ---- */

static int64_t parse_nlist(const char *factory) {
    const char *p = strstr(factory, "IVF");
    if (!p) return 0;
    long long n = strtoll(p + 3, NULL, 10);
    return n > 0 ? n : 0;
}

static qac_status shard_path(const qac_builder *b, json_t *sh, char *path, size_t cap) {
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

/* The FAISS stage of one build: the index FAISS makes (NULL for SQbf16,
 * whose file qac writes row by row, index_internal.h), the docid table
 * filled beside it, and index.faiss while it is being written. */
typedef struct faiss_stage {
    qac_builder *b;
    uint64_t n;       /* rows the manifest lists */
    int bf16;
    FaissIndex *idx;
    uint64_t train_n; /* vectors trained on; 0 when the factory needs no training */
    docs_table docs;
    qac_atomic_file af;
    int af_open;
} faiss_stage;

static qac_status faiss_stage_init(faiss_stage *fs, qac_builder *b) {
    memset(fs, 0, sizeof *fs);
    fs->b = b;
    fs->n = qac_builder_count(b);
    if (fs->n == 0) return qac_set_error(QAC_ERR_INVALID, "the corpus has no passages");
    fs->bf16 = is_sqbf16(b->factory);
    if (!fs->bf16 && faiss_index_factory(&fs->idx, b->dim, b->factory, METRIC_INNER_PRODUCT))
        return faiss_fail("index_factory");
    return QAC_OK;
}

static void faiss_stage_free(faiss_stage *fs) {
    if (fs->af_open) qac_atomic_abort(&fs->af);
    free(fs->docs.str_off);
    free(fs->docs.offsets);
    free(fs->docs.lines);
    free(fs->docs.blob);
    if (fs->idx) faiss_Index_free(fs->idx);
}

/* A shard the manifest lists, read and checked against its checksum. */
static qac_status faiss_read_shard(const faiss_stage *fs, json_t *sh, char *path, size_t cap, qac_shard *s) {
    qac_status st = shard_path(fs->b, sh, path, cap);
    return st ? st : qac_shard_read(path, (uint64_t)json_integer_value(json_object_get(sh, "checksum")), s);
}

/* train_n evenly spaced rows of the whole corpus into train: deterministic,
 * and a sample of every part of it. */
static qac_status faiss_sample(const faiss_stage *fs, float *train) {
    const qac_builder *b = fs->b;
    uint64_t n = fs->n, train_n = fs->train_n, j = 0;
    size_t i;
    json_t *sh;
    json_array_foreach(json_object_get(b->man, "shards"), i, sh) {
        uint64_t first = (uint64_t)json_integer_value(json_object_get(sh, "first_row"));
        uint64_t cnt = (uint64_t)json_integer_value(json_object_get(sh, "count"));
        if (j >= train_n || (j * n) / train_n >= first + cnt) continue;
        char path[4096];
        qac_shard s;
        qac_status st = qac_builder_check_cancel(b, "train-sample", j);
        if (st || (st = faiss_read_shard(fs, sh, path, sizeof path, &s))) return st;
        for (; j < train_n; j++) {
            uint64_t row = (j * n) / train_n;
            if (row >= first + cnt) break;
            memcpy(train + j * (size_t)b->dim, s.vectors + (row - first) * (size_t)b->dim,
                   (size_t)b->dim * sizeof(float));
        }
        qac_shard_free(&s);
        qac_builder_progress(b, "train-sample/vectors", j, train_n);
    }
    return QAC_OK;
}

/* Train the index on a sample when its factory needs training (IVF, PQ):
 * the option's size, else 256 per IVF list, else 100,000, at most n. */
static qac_status faiss_train(faiss_stage *fs) {
    const qac_builder *b = fs->b;
    if (fs->bf16 || faiss_Index_is_trained(fs->idx)) return QAC_OK;
    int64_t nlist = parse_nlist(b->factory);
    fs->train_n = b->o->train_size > 0 ? (uint64_t)b->o->train_size : (nlist ? (uint64_t)(256 * nlist) : 100000u);
    if (fs->train_n > fs->n) fs->train_n = fs->n;
    float *train = malloc(fs->train_n * (size_t)b->dim * sizeof(float));
    if (!train) return qac_set_error(QAC_ERR_NOMEM, "out of memory for %" PRIu64 " training vectors", fs->train_n);
    qac_status st = faiss_sample(fs, train);
    if (!st) {
        qac_builder_progress(b, "train/steps", 0, 1);
        if (faiss_Index_train(fs->idx, (idx_t)fs->train_n, train)) st = faiss_fail("train");
        else qac_builder_progress(b, "train/steps", 1, 1);
    }
    free(train);
    return st;
}

/* Open index.faiss for writing. */
static qac_status faiss_open_file(faiss_stage *fs) {
    char path[4096];
    qac_status st = qac_path_join(path, sizeof path, fs->b->dir, "index.faiss");
    if (st || (st = qac_atomic_open(&fs->af, path))) return st;
    fs->af_open = 1;
    return QAC_OK;
}

/* One shard's rows into the index (or SQbf16's file), in pieces of
 * QAC_ADD_PIECE for progress, and its passages into the docid table. */
static qac_status faiss_add_shard(faiss_stage *fs, const qac_shard *s, uint64_t *added) {
    const qac_builder *b = fs->b;
    for (uint64_t p = 0; p < s->count; p += QAC_ADD_PIECE) {
        uint64_t m = s->count - p < QAC_ADD_PIECE ? s->count - p : QAC_ADD_PIECE;
        const float *rows = s->vectors + p * (size_t)b->dim;
        qac_status cst = qac_builder_check_cancel(b, "add", *added);
        if (cst) return cst;
        if (fs->bf16) {
            qac_status st = qac_sqbf16_write_rows(fs->af.f, rows, m, b->dim);
            if (st) return st;
        } else if (faiss_Index_add(fs->idx, (idx_t)m, rows)) {
            return faiss_fail("add");
        }
        *added += m;
        qac_builder_progress(b, "add/vectors", *added, fs->n);
    }
    return docs_append(&fs->docs, s);
}

/* Every listed shard, in row order, into the index and the docid table. */
static qac_status faiss_add(faiss_stage *fs) {
    const qac_builder *b = fs->b;
    uint64_t n = fs->n, added = 0;
    fs->docs.str_off = malloc((n + 1) * 8);
    fs->docs.offsets = malloc(n * 8 + 1);
    fs->docs.lines = malloc(n * 8 + 1);
    if (!fs->docs.str_off || !fs->docs.offsets || !fs->docs.lines)
        return qac_set_error(QAC_ERR_NOMEM, "docid table: out of memory");
    qac_status st;
    if (fs->bf16 && ((st = faiss_open_file(fs)) || (st = qac_sqbf16_write_header(fs->af.f, b->dim, n)))) return st;
    qac_builder_progress(b, "add/vectors", 0, n);
    size_t i;
    json_t *sh;
    json_array_foreach(json_object_get(b->man, "shards"), i, sh) {
        char path[4096];
        qac_shard s;
        if ((st = faiss_read_shard(fs, sh, path, sizeof path, &s))) return st;
        if (s.first_row != added || s.dim != b->dim)
            st = qac_set_error(QAC_ERR_FORMAT, "%s: rows start at %" PRIu64 ", expected %" PRIu64, path, s.first_row,
                               added);
        else
            st = faiss_add_shard(fs, &s, &added);
        qac_shard_free(&s);
        if (st) return st;
    }
    return QAC_OK;
}

/* index.faiss (FAISS writes it; SQbf16's rows are already there) and
 * docids.qdoc, each renamed into place. */
static qac_status faiss_write(faiss_stage *fs) {
    qac_builder_progress(fs->b, "write/files", 0, 1);
    qac_status st;
    if (!fs->bf16) {
        if ((st = faiss_open_file(fs))) return st;
        if (faiss_write_index(fs->idx, fs->af.f)) return faiss_fail("write_index");
    }
    fs->af_open = 0;
    if ((st = qac_atomic_commit(&fs->af))) return st;
    char path[4096];
    if ((st = qac_path_join(path, sizeof path, fs->b->dir, "docids.qdoc")) || (st = docs_write(path, &fs->docs)))
        return st;
    qac_builder_progress(fs->b, "write/files", 1, 1);
    return QAC_OK;
}

/* The manifest's "faiss" and "docids": the checksums of the FAISS file and
 * the source, verified at open (FAISS itself reads a corrupt file without
 * noticing, or aborts). */
static qac_status faiss_record(const faiss_stage *fs) {
    qac_builder *b = fs->b;
    uint64_t faiss_sum = 0, faiss_bytes = 0, src_sum = 0, src_size = 0;
    json_t *source = json_object_get(json_object_get(b->man, "build"), "source");
    const char *src = json_string_value(json_object_get(source, "path"));
    char path[4096];
    qac_status st = qac_path_join(path, sizeof path, b->dir, "index.faiss");
    if (st || (st = qac_index_hash_file(path, &faiss_sum, &faiss_bytes))) return st;
    if (src && (st = qac_index_hash_file(src, &src_sum, &src_size))) return st;
    json_int_t ntotal = fs->bf16 ? (json_int_t)fs->n : (json_int_t)faiss_Index_ntotal(fs->idx);
    json_t *faiss = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I}", "file", "index.faiss", "factory", b->factory,
                              "metric", "inner_product", "ntotal", ntotal, "train_size", (json_int_t)fs->train_n,
                              "bytes", (json_int_t)faiss_bytes, "checksum", (json_int_t)faiss_sum);
    if (faiss && src) json_object_set_new(faiss, "source_checksum", json_integer((json_int_t)src_sum));
    json_object_set_new(b->man, "faiss", faiss);
    json_object_set_new(b->man, "docids", json_string("docids.qdoc"));
    return qac_builder_write_manifest(b);
}

/* The FAISS stage, in named steps: train, add every shard, write the files,
 * record them in the manifest. */
static qac_status build_faiss(qac_builder *b) {
    faiss_stage fs;
    qac_status st = faiss_stage_init(&fs, b);
    if (!st) st = faiss_train(&fs);
    if (!st) st = faiss_add(&fs);
    if (!st) st = faiss_write(&fs);
    if (!st) st = faiss_record(&fs);
    faiss_stage_free(&fs);
    return st;
}

/* After encoding: build the FAISS index unless one with this factory exists. */
qac_status qac_builder_finish(qac_builder *b) {
    json_t *fa = json_object_get(b->man, "faiss");
    if (json_is_object(fa)) {
        const char *had = json_string_value(json_object_get(fa, "factory"));
        char path[4096];
        if (had && !strcmp(had, b->factory) && qac_path_join(path, sizeof path, b->dir, "index.faiss") == QAC_OK &&
            access(path, R_OK) == 0)
            return QAC_OK;
        /* another factory: embeddings are reused, only the FAISS index is rebuilt */
        json_object_set_new(b->man, "faiss", json_null());
        qac_status st = qac_builder_write_manifest(b);
        if (st) return st;
    }
    return build_faiss(b);
}

/* ---- the build's identity: its source, its model, its options ---- */

qac_status qac_builder_abs_path(const char *p, char *out, size_t cap, uint64_t *size) {
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
json_t *qac_builder_model_dir(const qac_model *m) {
    char real[PATH_MAX];
    return m->dir && realpath(m->dir, real) ? json_string(real) : NULL;
}

void qac_builder_set_model_dir(qac_builder *b, const qac_model *m) {
    json_t *d = qac_builder_model_dir(m);
    if (d) json_object_set_new(b->man, "model_dir", d);
}

/* The passage length of a build: the option, else the model's, within the
 * model's limits. */
qac_status qac_builder_max_len(const qac_model *m, int want, int *out) {
    int max_len = want > 0 ? want : m->max_seq_len;
    if (max_len > m->max_seq_len) max_len = m->max_seq_len;
    if (max_len > m->cfg.max_position) max_len = m->cfg.max_position;
    if (max_len < 2) return qac_set_error(QAC_ERR_INVALID, "max_len %d: must be >= 2", max_len);
    *out = max_len;
    return QAC_OK;
}

const char *qac_builder_format_name(qac_text_format fmt) {
    static const char *names[] = {"auto", "tsv", "beir", "tevatron", "cranfield"};
    return (int)fmt >= 0 && (int)fmt <= 4 ? names[fmt] : "?";
}

/* The "model" and "source" objects of a corpus build's identity. */
json_t *qac_builder_model_identity(const qac_encoder *enc) {
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

json_t *qac_builder_corpus_identity(const char *corpus_abs, uint64_t size, qac_text_format fmt) {
    return json_pack("{s:s, s:s, s:I, s:s}", "kind", "corpus", "path", corpus_abs, "size", (json_int_t)size, "format",
                     qac_builder_format_name(fmt));
}

/* The whole identity a manifest's "build" records; takes the references. */
json_t *qac_builder_identity(json_t *model, json_t *source, int max_len, int dim, const qac_index_build_opts *o) {
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
qac_status qac_builder_resume_reader(qac_builder *b, qac_reader *r, const char *corpus_abs) {
    size_t ns = qac_builder_nshards(b);
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

