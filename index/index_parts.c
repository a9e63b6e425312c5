/* Distributed builds (qac.ray): parts encoded by many processes, merged
 * into one index.
 *
 * qac_index_parts_open writes (or checks) DIR/parts.json, the identity
 * every process computes alike: model, corpus, max_len, dim and device (the
 * CUDA encoder's last bits depend on the batch). qac_index_parts_encode
 * encodes passages with their corpus rows and writes one part per run of
 * consecutive rows, "part-<first row>-<count>.qemb" (a shard with its
 * passages' cut flags, index_internal.h), so a batch done twice writes the
 * same file. qac_index_merge walks the corpus and takes every passage from
 * a part, as the same passage (id, offset, line) with the same bits where
 * two parts overlap, into a builder (index_builder.c): the merged index is
 * the one a single process builds, and a merge resumes like a build. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "index_builder.h"
#include "index_internal.h"
#include "qac_index.h"
#include "qac_util.h"

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
    qac_status st = qac_builder_max_len(qac_encoder_model(enc), max_len_opt, &max_len);
    char corpus_abs[PATH_MAX], path[4096];
    uint64_t size;
    if (st || (st = qac_builder_abs_path(corpus_path, corpus_abs, sizeof corpus_abs, &size))) return st;
    qac_reader *r = NULL;
    if ((st = qac_reader_open(&r, corpus_abs, QAC_READ_CORPUS, fmt))) return st;
    fmt = qac_reader_format(r);
    qac_reader_free(r);
    json_t *model = qac_builder_model_identity(enc), *source = qac_builder_corpus_identity(corpus_abs, size, fmt);
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
            qac_builder_describe_diff(diff, sizeof diff, "", had, want);
            st = qac_set_error(QAC_ERR_INVALID, "%s holds parts of another build (%s); use another directory", dir,
                               diff);
        }
        json_decref(had);
    } else {
        json_t *mdir = qac_builder_model_dir(qac_encoder_model(enc));
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

/* A merge: parts.json, the corpus the parts came from, the parts found, and
 * the builder they go into. */
typedef struct merge {
    const char *parts_dir;
    const qac_index_build_opts *o;
    json_t *parts;  /* parts.json */
    json_t *source; /* its "source": the corpus's path, size and format */
    int dim, max_len;
    char corpus_abs[PATH_MAX];
    qac_reader *r;
    part_file *pv; /* the parts, by first row */
    size_t np;
    qac_builder b;
    qac_shard cur; /* the part being read, when `have` */
    int have;
    size_t next;   /* the next part of pv to read */
} merge;

/* parts_dir/parts.json, checked to be a parts description of this
 * version. */
static qac_status merge_read_description(merge *m) {
    char path[4096];
    qac_status st = qac_path_join(path, sizeof path, m->parts_dir, "parts.json");
    if (st || (st = read_json(path, &m->parts))) return st;
    const char *fmtname = json_string_value(json_object_get(m->parts, "format"));
    m->source = json_object_get(m->parts, "source");
    m->dim = (int)json_integer_value(json_object_get(m->parts, "dim"));
    m->max_len = (int)json_integer_value(json_object_get(m->parts, "max_len"));
    if (!fmtname || strcmp(fmtname, QAC_PARTS_FORMAT) != 0 ||
        json_integer_value(json_object_get(m->parts, "version")) != QAC_PARTS_VERSION ||
        !json_string_value(json_object_get(m->source, "path")) || m->dim < 1 ||
        !json_is_object(json_object_get(m->parts, "model")))
        return qac_set_error(QAC_ERR_FORMAT, "%s: not a qac parts description (version %d expected)", path,
                             QAC_PARTS_VERSION);
    return QAC_OK;
}

/* The corpus the parts were encoded from, unchanged since (its size), open
 * in the format they recorded. */
static qac_status merge_open_corpus(merge *m) {
    uint64_t size;
    const char *src_path = json_string_value(json_object_get(m->source, "path"));
    qac_status st = qac_builder_abs_path(src_path, m->corpus_abs, sizeof m->corpus_abs, &size);
    if (st) return st;
    json_int_t had = json_integer_value(json_object_get(m->source, "size"));
    if (size != (uint64_t)had)
        return qac_set_error(QAC_ERR_INVALID, "%s changed since the parts were encoded (%llu bytes, the parts saw "
                             "%lld)", m->corpus_abs, (unsigned long long)size, (long long)had);
    qac_text_format fmt = QAC_FMT_AUTO;
    const char *sf = json_string_value(json_object_get(m->source, "format"));
    for (int f = QAC_FMT_TSV; f <= QAC_FMT_CRANFIELD; f++)
        if (sf && !strcmp(sf, qac_builder_format_name((qac_text_format)f))) fmt = (qac_text_format)f;
    return qac_reader_open(&m->r, m->corpus_abs, QAC_READ_CORPUS, fmt);
}

/* The builder on out_dir, with the identity the parts record (a resumed
 * merge, or a build of the same identity, continues). */
static qac_status merge_begin(merge *m, const char *out_dir) {
    json_t *identity = qac_builder_identity(json_deep_copy(json_object_get(m->parts, "model")),
                                            json_deep_copy(m->source), m->max_len, m->dim, m->o);
    if (!identity) return qac_set_error(QAC_ERR_NOMEM, "manifest: out of memory");
    qac_status st = qac_builder_begin(&m->b, out_dir, m->o, identity, m->dim);
    if (st) return st;
    json_t *dev = json_object_get(m->parts, "device"), *mdir = json_object_get(m->parts, "model_dir");
    json_object_set_new(m->b.man, "device", json_string(json_is_string(dev) ? json_string_value(dev) : "cpu"));
    if (json_is_string(mdir)) json_object_set(m->b.man, "model_dir", mdir); /* where a build records it */
    return QAC_OK;
}

/* m->cur: the part that holds `row` (rec is the corpus's passage there, for
 * the refusal when none does). */
static qac_status merge_part_for(merge *m, uint64_t row, const qac_record *rec) {
    if (m->have && row < m->cur.first_row + m->cur.count) return QAC_OK;
    if (m->have) qac_shard_free(&m->cur);
    m->have = 0;
    while (m->next < m->np && m->pv[m->next].first + m->pv[m->next].count <= row) m->next++; /* rows already taken */
    if (m->next == m->np || m->pv[m->next].first > row)
        return qac_set_error(QAC_ERR_NOT_FOUND, "%s: no part holds row %llu (passage %s, line %lld of %s)%s",
                             m->parts_dir, (unsigned long long)row, rec->id, (long long)rec->line, m->corpus_abs,
                             m->next == m->np ? "" : "; encode the missing rows and merge again");
    qac_status st = read_part(m->parts_dir, &m->pv[m->next], &m->cur);
    if (st) return st;
    m->have = 1;
    m->next++;
    return QAC_OK;
}

/* Row `row` of the part into the builder's shard, once it is checked to be
 * the corpus's passage there. */
static qac_status merge_take_row(merge *m, uint64_t row, const qac_record *rec) {
    const qac_shard *cur = &m->cur;
    qac_builder *b = &m->b;
    uint64_t i = row - cur->first_row;
    if (strcmp(cur->docids[i], rec->id) || cur->offsets[i] != rec->offset || cur->lines[i] != rec->line)
        return qac_set_error(QAC_ERR_INVALID, "row %llu: the parts hold passage %s (offset %llu), the corpus %s "
                             "(offset %llu): parts of another corpus?", (unsigned long long)row, cur->docids[i],
                             (unsigned long long)cur->offsets[i], rec->id, (unsigned long long)rec->offset);
    if (!(b->ids[b->fill] = strdup(rec->id))) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    memcpy(b->vecs + b->fill * (size_t)m->dim, cur->vectors + i * (size_t)m->dim, (size_t)m->dim * sizeof(float));
    b->cut += cur->cut[i];
    b->offsets[b->fill] = rec->offset;
    b->lines[b->fill] = rec->line;
    b->fill++;
    return QAC_OK;
}

/* Walk the corpus from the builder's count: every passage must be in a
 * part, as the same passage (id, offset, line), which is what makes the
 * merged index the one a single process builds. *rows: the corpus's. */
static qac_status merge_rows(merge *m, uint64_t *rows) {
    uint64_t row = qac_builder_count(&m->b);
    qac_status st;
    for (;;) {
        qac_record rec;
        int got = 0;
        if ((st = qac_reader_next(m->r, &rec, &got)) || !got) break;
        if ((st = merge_part_for(m, row, &rec)) || (st = merge_take_row(m, row, &rec))) break;
        row++;
        /* the cancel hook: before each shard written, and every 1,024 rows of a large one */
        if (m->b.fill == (uint64_t)m->o->shard_size &&
            ((st = qac_builder_check_cancel(&m->b, "merge", row)) || (st = qac_builder_flush_shard(&m->b))))
            break;
        if (row % 65536 == 0) qac_builder_progress(&m->b, "merge", row, 0);
        if (row % 1024 == 0 && (st = qac_builder_check_cancel(&m->b, "merge", row))) break;
    }
    *rows = row;
    return st;
}

/* No part holds rows past the corpus's end. */
static qac_status merge_check_tail(const merge *m, uint64_t rows) {
    for (size_t k = 0; k < m->np; k++)
        if (m->pv[k].first + m->pv[k].count > rows)
            return qac_set_error(QAC_ERR_INVALID, "%s/%s holds rows past the corpus's %llu passages: parts of another "
                                 "corpus?", m->parts_dir, m->pv[k].name, (unsigned long long)rows);
    return QAC_OK;
}

/* Every row from the parts into the builder's shards, then the manifest
 * marked "encoded". */
static qac_status merge_encode(merge *m) {
    uint64_t rows = 0;
    qac_status st = qac_builder_resume_reader(&m->b, m->r, m->corpus_abs);
    if (!st) st = qac_builder_alloc_shard(&m->b);
    if (!st) st = merge_rows(m, &rows);
    if (!st) st = merge_check_tail(m, rows);
    if (!st) st = qac_builder_flush_shard(&m->b);
    if (st) return st;
    qac_builder_progress(&m->b, "merge", rows, rows);
    json_object_set_new(m->b.man, "encoded", json_true());
    return qac_builder_write_manifest(&m->b);
}

qac_status qac_index_merge(const char *out_dir, const char *parts_dir, const qac_index_build_opts *opts) {
    qac_index_build_opts defaults = qac_index_default_build_opts();
    if (!out_dir || !parts_dir) return qac_set_error(QAC_ERR_INVALID, "index merge: missing argument");
    merge m;
    memset(&m, 0, sizeof m);
    m.parts_dir = parts_dir;
    m.o = opts ? opts : &defaults;
    m.b.lock_fd = -1;
    qac_status st = merge_read_description(&m);
    if (!st) st = merge_open_corpus(&m);
    if (!st) st = list_parts(parts_dir, m.dim, &m.pv, &m.np);
    if (!st) st = check_overlaps(parts_dir, m.pv, m.np);
    if (!st) st = merge_begin(&m, out_dir);
    if (!st && !json_is_true(json_object_get(m.b.man, "encoded"))) st = merge_encode(&m);
    if (!st) st = qac_builder_finish(&m.b);
    if (m.have) qac_shard_free(&m.cur);
    qac_builder_end(&m.b);
    qac_reader_free(m.r);
    free(m.pv);
    json_decref(m.parts);
    return st;
}
