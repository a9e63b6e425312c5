/* qac_index_build_vectors: an index from precomputed vectors, a 2-d .npy
 * array of <f4 or <f2 rows, with ids numbered or read from a file (one a
 * line) or a corpus (its records' ids, in order).
 *
 * Everything is checked before anything is written: the header (shape,
 * dtype, C order) and the file's length against it, the ids' count against
 * the rows, repeats and empty ids, the factory and the training size. Then
 * the rows are copied into shards by the builder (index_builder.c), which
 * makes the build resumable and ends it with the FAISS stage. Its identity
 * names the vectors' file (and the ids' source), so a resumed run must be
 * given the same ones. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "index_builder.h"
#include "qac_index.h"
#include "qac_safetensors.h"
#include "qac_util.h"

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

/* A build from vectors: the .npy file, its ids, and where they come from. */
typedef struct vectors_build {
    const qac_index_build_opts *o;
    const char *npy_path; /* as given, for messages */
    char abs[PATH_MAX];   /* the .npy file's absolute path */
    uint64_t size;
    npy a;
    id_list ids;          /* empty: the rows are numbered */
    const char *ids_src;  /* the ids' file or corpus, or NULL */
    char ids_abs[PATH_MAX];
    uint64_t ids_size;
} vectors_build;

/* The .npy file open, its header read, its width the model's (when one is
 * named). */
static qac_status vectors_open(vectors_build *v) {
    qac_status st = qac_builder_abs_path(v->npy_path, v->abs, sizeof v->abs, &v->size);
    if (st || (st = npy_open(&v->a, v->abs))) return st;
    const qac_model *vm = v->o->vectors_model;
    if (vm && vm->cfg.hidden_size != v->a.dim)
        return qac_set_error(QAC_ERR_INVALID, "%s has dimension %d but model %s has %d", v->abs, v->a.dim, vm->name,
                             vm->cfg.hidden_size);
    return QAC_OK;
}

/* The ids from a file or a corpus (not both), as many as the rows. */
static qac_status vectors_read_ids(vectors_build *v) {
    const qac_index_build_opts *o = v->o;
    v->ids_src = o->ids_path ? o->ids_path : o->ids_corpus;
    if (o->ids_path && o->ids_corpus)
        return qac_set_error(QAC_ERR_INVALID, "give the ids from a file or a corpus, not both");
    if (!v->ids_src) return QAC_OK;
    qac_status st = qac_builder_abs_path(v->ids_src, v->ids_abs, sizeof v->ids_abs, &v->ids_size);
    if (!st && o->ids_path) st = read_id_file(v->ids_abs, &v->ids);
    if (!st && o->ids_corpus) st = read_corpus_ids(v->ids_abs, o->ids_format, &v->ids);
    if (!st && v->ids.n != v->a.rows)
        st = qac_set_error(QAC_ERR_INVALID, "%s holds %llu ids but %s has %llu rows: they must match row for row",
                           v->ids_src, (unsigned long long)v->ids.n, v->npy_path, (unsigned long long)v->a.rows);
    return st;
}

/* The rest of the input, before anything is written: rows, the factory and
 * its training size, the output directory. */
static qac_status vectors_check(const vectors_build *v, const char *out_dir) {
    const char *factory = v->o->factory && *v->o->factory ? v->o->factory : "Flat";
    qac_status st = QAC_OK;
    if (!v->a.rows) st = qac_set_error(QAC_ERR_INVALID, "%s holds no vectors", v->npy_path);
    if (!st) st = qac_builder_check_factory(factory, v->a.dim);
    if (!st) st = qac_builder_check_training(factory, v->o, v->a.rows);
    if (!st) st = qac_check_output_dir(out_dir);
    return st;
}

/* The build's identity: the model the vectors claim (or "precomputed"),
 * the vectors' file, and where the ids came from (absent when numbered, as
 * before ids could be given, so those builds still resume). NULL: out of
 * memory. */
static json_t *vectors_identity(const vectors_build *v) {
    const qac_model *vm = v->o->vectors_model;
    json_t *identity = json_pack("{s:{s:s, s:s, s:i, s:s, s:b}, s:{s:s, s:s, s:I, s:s}, s:i, s:i, s:s, s:i}",
                                 "model", "name", vm ? vm->name : "precomputed", "fingerprint",
                                 vm ? vm->fingerprint : "none", "dim", v->a.dim, "pooling",
                                 vm ? qac_pooling_name(vm->pooling) : "none", "normalize", vm ? vm->normalize : 0,
                                 "source", "kind", "vectors", "path", v->abs, "size", (json_int_t)v->size, "format",
                                 v->a.fp16 ? "npy-f2" : "npy-f4", "max_len", 0, "dim", v->a.dim, "dtype",
                                 v->o->fp16 ? "fp16" : "fp32", "shard_size", v->o->shard_size);
    if (identity && v->ids_src)
        json_object_set_new(json_object_get(identity, "source"), "ids",
                            json_pack("{s:s, s:s, s:I}", "kind", v->o->ids_path ? "file" : "corpus", "path",
                                      v->ids_abs, "size", (json_int_t)v->ids_size));
    return identity;
}

/* n rows from `row` into the builder's shard, with their ids, and flushed. */
static qac_status vectors_load_shard(vectors_build *v, qac_builder *b, uint64_t row, uint64_t n) {
    qac_status st = npy_read(&v->a, row, n, b->vecs, v->abs);
    if (st) return st;
    for (uint64_t i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof id, "%" PRIu64, row + i);
        if (!(b->ids[i] = strdup(v->ids.n ? v->ids.ids[row + i] : id))) {
            b->fill = i;
            return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        }
        b->offsets[i] = row + i;
        b->lines[i] = 0;
    }
    b->fill = n;
    return qac_builder_flush_shard(b);
}

/* Every row from the builder's count into shards, then the manifest marked
 * "encoded". */
static qac_status vectors_load(vectors_build *v, qac_builder *b) {
    uint64_t rows = v->a.rows, shard = (uint64_t)v->o->shard_size;
    qac_status st = qac_builder_alloc_shard(b);
    if (st) return st;
    uint64_t row = qac_builder_count(b);
    qac_builder_progress(b, "load", row, rows); /* the phase's clock starts here */
    while (row < rows) {
        uint64_t n = rows - row < shard ? rows - row : shard;
        if ((st = qac_builder_check_cancel(b, "load", row)) || (st = vectors_load_shard(v, b, row, n))) return st;
        row += n;
        qac_builder_progress(b, "load", row, rows);
    }
    json_object_set_new(b->man, "encoded", json_true());
    return qac_builder_write_manifest(b);
}

qac_status qac_index_build_vectors(const char *out_dir, const char *npy_path, const qac_index_build_opts *opts) {
    qac_index_build_opts defaults = qac_index_default_build_opts();
    if (!out_dir || !npy_path) return qac_set_error(QAC_ERR_INVALID, "index build: missing argument");
    vectors_build v;
    memset(&v, 0, sizeof v);
    v.o = opts ? opts : &defaults;
    v.npy_path = npy_path;
    qac_builder b;
    memset(&b, 0, sizeof b);
    b.lock_fd = -1;
    /* the vectors, their ids, the factory and the output, all before
     * anything is written */
    qac_status st = vectors_open(&v);
    if (!st) st = vectors_read_ids(&v);
    if (!st) st = vectors_check(&v, out_dir);
    json_t *identity = st ? NULL : vectors_identity(&v);
    if (!st && !identity) st = qac_set_error(QAC_ERR_NOMEM, "manifest: out of memory");
    if (!st) st = qac_builder_begin(&b, out_dir, v.o, identity, v.a.dim);
    if (!st && v.o->vectors_model) qac_builder_set_model_dir(&b, v.o->vectors_model);
    if (!st && !json_is_true(json_object_get(b.man, "encoded"))) st = vectors_load(&v, &b);
    if (!st) st = qac_builder_finish(&b);
    qac_builder_end(&b);
    id_list_free(&v.ids);
    if (v.a.f) fclose(v.a.f);
    return st;
}
