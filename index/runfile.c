/* TREC run files: writer (api/qac_data.h) and reader (api/qac_eval.h). */
#include "qac_data.h"
#include "qac_eval.h"
#include "qac_util.h"
#include "qid_groups.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ---- run writer ---- */
static int bad_token(const char *s) {
    if (!s || !*s) return 1;
    for (; *s; s++)
        if (isspace((unsigned char)*s)) return 1;
    return 0;
}

qac_status qac_run_write(FILE *f, const char *qid, const char *const *docids, const float *scores, int k,
                         const char *run_id) {
    if (!f || k < 0 || (k > 0 && (!docids || !scores)))
        return qac_set_error(QAC_ERR_INVALID, "run write: bad arguments");
    if (bad_token(qid)) return qac_set_error(QAC_ERR_INVALID, "run write: query id is empty or has whitespace");
    if (bad_token(run_id)) return qac_set_error(QAC_ERR_INVALID, "run write: run id is empty or has whitespace");
    for (int i = 0; i < k; i++) {
        if (bad_token(docids[i]))
            return qac_set_error(QAC_ERR_INVALID, "run write: query %s: docid at rank %d is empty or has whitespace",
                                 qid, i + 1);
        if (scores[i] != scores[i]) return qac_set_error(QAC_ERR_INVALID, "run write: query %s: NaN score", qid);
    }
    for (int i = 0; i < k; i++)
        /* %.9g round-trips a float, so trec_eval sees the same order and ties. */
        if (fprintf(f, "%s Q0 %s %d %.9g %s\n", qid, docids[i], i + 1, (double)scores[i], run_id) < 0)
            return qac_set_error(QAC_ERR_IO, "run write: %s", strerror(errno));
    return QAC_OK;
}

/* ---- run reader ---- */
typedef struct run_entry {
    size_t qid, docid; /* arena offsets */
    double score;
    int64_t line;
    size_t order; /* file order, kept within a query */
} run_entry;

struct qac_run {
    char *arena;
    size_t alen, acap;
    run_entry *e;
    size_t n, cap;
    const char **docids; /* [n], grouped by query */
    double *scores;      /* [n] */
    const char **qids;   /* [nq] */
    size_t *start;       /* [nq + 1] */
    size_t nq;
    char *run_id;        /* the last line's, as trec_eval reports it */
};

static int cmp_run_entry(const void *a, const void *b, void *arena) {
    const run_entry *x = a, *y = b;
    int c = strcmp((const char *)arena + x->qid, (const char *)arena + y->qid);
    if (c) return c;
    return x->order < y->order ? -1 : x->order > y->order;
}

static qac_status run_parse(qac_run *r, FILE *f, const char *path) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int64_t lineno = 0;
    qac_status st = QAC_OK;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (memchr(line, 0, (size_t)len)) {
            st = qac_set_error(QAC_ERR_FORMAT, "%s:%lld: embedded NUL byte", path, (long long)lineno);
            break;
        }
        char *fl[7];
        int nf = qac_split_fields(line, fl, 6);
        if (nf == 0 || fl[0][0] == '#') continue;
        if (nf < 6) {
            st = qac_set_error(QAC_ERR_FORMAT, "%s:%lld: expected 6 columns 'qid Q0 docid rank score run_id', got %d",
                               path, (long long)lineno, nf);
            break;
        }
        char *end;
        errno = 0;
        double score = strtod(fl[4], &end);
        if (end == fl[4] || *end || isnan(score)) {
            st = qac_set_error(QAC_ERR_FORMAT, "%s:%lld: score '%s' is not a number", path, (long long)lineno, fl[4]);
            break;
        }
        if (r->n == r->cap) {
            size_t nc = r->cap ? r->cap * 2 : 4096;
            run_entry *ne = realloc(r->e, nc * sizeof *ne);
            if (!ne) {
                st = qac_set_error(QAC_ERR_NOMEM, "out of memory reading the run");
                break;
            }
            r->e = ne;
            r->cap = nc;
        }
        run_entry *x = &r->e[r->n];
        if ((st = qac_arena_put(&r->arena, &r->alen, &r->acap, fl[0], &x->qid)) ||
            (st = qac_arena_put(&r->arena, &r->alen, &r->acap, fl[2], &x->docid)))
            break;
        if (!r->run_id || strcmp(r->run_id, fl[5]) != 0) {
            free(r->run_id);
            if (!(r->run_id = strdup(fl[5]))) {
                st = qac_set_error(QAC_ERR_NOMEM, "out of memory reading the run");
                break;
            }
        }
        x->score = score;
        x->line = lineno;
        x->order = r->n++;
    }
    if (!st && ferror(f)) st = qac_set_error(QAC_ERR_IO, "read %s: %s", path, strerror(errno));
    free(line);
    return st;
}

qac_status qac_run_load(qac_run **out, const char *path) {
    *out = NULL;
    if (!path) return qac_set_error(QAC_ERR_INVALID, "run: no path");
    FILE *f;
    qac_status ost = qac_open_text_input(&f, path);
    if (ost) return ost;
    qac_run *r = calloc(1, sizeof *r);
    if (!r) {
        fclose(f);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory reading the run");
    }
    qac_status st = run_parse(r, f, path);
    fclose(f);
    if (st) goto fail;
    if (r->n) qsort_r(r->e, r->n, sizeof *r->e, cmp_run_entry, r->arena);
    if ((st = qac_group_by_qid(r->arena, r->e, r->n, sizeof *r->e, offsetof(run_entry, qid), &r->qids, &r->start,
                               &r->nq)))
        goto fail;
    r->docids = malloc((r->n + 1) * sizeof *r->docids);
    r->scores = malloc((r->n + 1) * sizeof *r->scores);
    if (!r->docids || !r->scores) {
        st = qac_set_error(QAC_ERR_NOMEM, "out of memory reading the run");
        goto fail;
    }
    for (size_t i = 0; i < r->n; i++) {
        r->docids[i] = r->arena + r->e[i].docid;
        r->scores[i] = r->e[i].score;
    }
    *out = r;
    return QAC_OK;
fail:
    qac_run_free(r);
    return st;
}

void qac_run_free(qac_run *r) {
    if (!r) return;
    free(r->arena);
    free(r->e);
    free(r->docids);
    free(r->scores);
    free(r->qids);
    free(r->start);
    free(r->run_id);
    free(r);
}

size_t qac_run_num_queries(const qac_run *r) { return r ? r->nq : 0; }
const char *qac_run_qid(const qac_run *r, size_t i) { return r && i < r->nq ? r->qids[i] : NULL; }

size_t qac_run_entries(const qac_run *r, size_t i, const char *const **docids, const double **scores) {
    if (!r || i >= r->nq) {
        if (docids) *docids = NULL;
        if (scores) *scores = NULL;
        return 0;
    }
    if (docids) *docids = r->docids + r->start[i];
    if (scores) *scores = r->scores + r->start[i];
    return r->start[i + 1] - r->start[i];
}

const char *qac_run_id(const qac_run *r) { return r ? r->run_id : NULL; }

int64_t qac_run_line(const qac_run *r, size_t i, size_t j) {
    if (!r || i >= r->nq || r->start[i] + j >= r->start[i + 1]) return 0;
    return r->e[r->start[i] + j].line;
}
