/* Relevance judgements: TREC, BEIR and Cranfield qrels (api/qac_eval.h). */
#include "qac_eval.h"
#include "qac_util.h"
#include "qid_groups.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct qrel_entry {
    size_t qid, docid; /* arena offsets, later turned into pointers */
    int rel;
    int64_t line;
} qrel_entry;

struct qac_qrels {
    qac_qrels_format fmt;
    char *arena;
    qrel_entry *e;
    size_t n;
    const char **docids; /* [n], entries grouped by query, sorted by docid */
    int *rels;           /* [n] */
    const char **qids;   /* [nq] */
    size_t *start;       /* [nq + 1] */
    size_t nq;
};

static int cmp_entry(const void *a, const void *b, void *arena) {
    const qrel_entry *x = a, *y = b;
    const char *s = arena;
    int c = strcmp(s + x->qid, s + y->qid);
    return c ? c : strcmp(s + x->docid, s + y->docid);
}

static int parse_int(const char *s, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < INT_MIN || v > INT_MAX) return 0;
    *out = (int)v;
    return 1;
}

typedef struct qbuild {
    char *arena;
    size_t alen, acap;
    qrel_entry *e;
    size_t n, cap;
} qbuild;

static qac_status add_entry(qbuild *b, const char *qid, const char *docid, int rel, int64_t line) {
    if (b->n == b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 1024;
        qrel_entry *ne = realloc(b->e, nc * sizeof *ne);
        if (!ne) return qac_set_error(QAC_ERR_NOMEM, "out of memory reading qrels");
        b->e = ne;
        b->cap = nc;
    }
    qrel_entry *x = &b->e[b->n];
    qac_status st;
    if ((st = qac_arena_put(&b->arena, &b->alen, &b->acap, qid, &x->qid)) ||
        (st = qac_arena_put(&b->arena, &b->alen, &b->acap, docid, &x->docid)))
        return st;
    x->rel = rel;
    x->line = line;
    b->n++;
    return QAC_OK;
}

static const char *fmt_name(qac_qrels_format f) {
    switch (f) {
    case QAC_QRELS_TREC: return "TREC qrels (qid iter docid rel)";
    case QAC_QRELS_BEIR: return "BEIR qrels (query-id corpus-id score)";
    case QAC_QRELS_CRANFIELD: return "Cranfield qrels (qid docid rel)";
    default: return "qrels";
    }
}

static qac_status parse_file(qbuild *b, FILE *f, const char *path, qac_qrels_format *fmt) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int64_t lineno = 0;
    int first = 1;
    qac_status st = QAC_OK;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (memchr(line, 0, (size_t)len)) {
            st = qac_set_error(QAC_ERR_FORMAT, "%s:%lld: embedded NUL byte", path, (long long)lineno);
            break;
        }
        char *s = line;
        if (lineno == 1 && (unsigned char)s[0] == 0xEF && (unsigned char)s[1] == 0xBB && (unsigned char)s[2] == 0xBF)
            s += 3;
        char *fl[5];
        int nf = qac_split_fields(s, fl, 4);
        if (nf == 0 || fl[0][0] == '#') continue;
        if (first) {
            first = 0;
            int header = strcmp(fl[0], "query-id") == 0;
            if (*fmt == QAC_QRELS_AUTO) {
                if (header) *fmt = QAC_QRELS_BEIR;
                else if (nf == 4) *fmt = QAC_QRELS_TREC;
                else if (nf == 3) *fmt = QAC_QRELS_CRANFIELD;
                else if (nf > 4) {
                    st = qac_set_error(QAC_ERR_FORMAT,
                                       "%s:%lld: cannot detect the qrels format: more than 4 columns (want 4 for "
                                       "TREC, 3 for Cranfield, or a BEIR 'query-id' header); a TREC run has 6 "
                                       "(qid Q0 docid rank score tag): are the qrels and the run swapped?",
                                       path, (long long)lineno);
                    break;
                } else {
                    st = qac_set_error(QAC_ERR_FORMAT,
                                       "%s:%lld: cannot detect the qrels format: %d column%s (want 4 for TREC, 3 "
                                       "for Cranfield, or a BEIR 'query-id' header)",
                                       path, (long long)lineno, nf, nf == 1 ? "" : "s");
                    break;
                }
            }
            if (*fmt == QAC_QRELS_BEIR) {
                if (!header) {
                    st = qac_set_error(QAC_ERR_FORMAT, "%s:%lld: BEIR qrels must start with a query-id header",
                                       path, (long long)lineno);
                    break;
                }
                continue;
            }
        }
        int want = *fmt == QAC_QRELS_TREC ? 4 : 3;
        if (nf != want) {
            st = qac_set_error(QAC_ERR_FORMAT, "%s:%lld: expected %d columns for %s, got %s%d", path,
                               (long long)lineno, want, fmt_name(*fmt), nf > 4 ? "more than " : "",
                               nf > 4 ? 4 : nf);
            break;
        }
        const char *docid = fl[want - 2], *rels = fl[want - 1];
        int rel;
        if (!parse_int(rels, &rel)) {
            st = qac_set_error(QAC_ERR_FORMAT, "%s:%lld: relevance '%s' is not an integer", path, (long long)lineno,
                               rels);
            break;
        }
        if (*fmt == QAC_QRELS_CRANFIELD) {
            if (rel == -1) rel = 0;
            else if (rel >= 1 && rel <= 4) rel = 5 - rel;
            else {
                st = qac_set_error(QAC_ERR_FORMAT, "%s:%lld: Cranfield relevance must be 1..4 or -1, got %d", path,
                                   (long long)lineno, rel);
                break;
            }
        }
        if ((st = add_entry(b, fl[0], docid, rel, lineno))) break;
    }
    if (!st && ferror(f)) st = qac_set_error(QAC_ERR_IO, "read %s: %s", path, strerror(errno));
    free(line);
    if (!st && *fmt == QAC_QRELS_AUTO) *fmt = QAC_QRELS_TREC; /* empty file */
    return st;
}

qac_status qac_qrels_load(qac_qrels **out, const char *path, qac_qrels_format fmt) {
    *out = NULL;
    if (!path || fmt < QAC_QRELS_AUTO || fmt > QAC_QRELS_CRANFIELD)
        return qac_set_error(QAC_ERR_INVALID, "qrels: bad arguments");
    FILE *f;
    qac_status ost = qac_open_text_input(&f, path);
    if (ost) return ost;
    qbuild b = {0};
    qac_status st = parse_file(&b, f, path, &fmt);
    fclose(f);
    qac_qrels *q = NULL;
    if (st) goto fail;
    if (b.n) qsort_r(b.e, b.n, sizeof *b.e, cmp_entry, b.arena);
    for (size_t i = 1; i < b.n; i++)
        if (cmp_entry(&b.e[i - 1], &b.e[i], b.arena) == 0) {
            int64_t l1 = b.e[i - 1].line < b.e[i].line ? b.e[i - 1].line : b.e[i].line;
            int64_t l2 = b.e[i - 1].line < b.e[i].line ? b.e[i].line : b.e[i - 1].line;
            st = qac_set_error(QAC_ERR_FORMAT, "%s:%lld: duplicate judgement for query %s doc %s (first on line %lld)",
                               path, (long long)l2, b.arena + b.e[i].qid, b.arena + b.e[i].docid, (long long)l1);
            goto fail;
        }
    q = calloc(1, sizeof *q);
    if (!q) goto nomem;
    q->fmt = fmt;
    q->arena = b.arena;
    q->e = b.e;
    q->n = b.n;
    b.arena = NULL;
    b.e = NULL;
    if ((st = qac_group_by_qid(q->arena, q->e, q->n, sizeof *q->e, offsetof(qrel_entry, qid), &q->qids, &q->start,
                               &q->nq)))
        goto fail;
    q->docids = malloc((q->n + 1) * sizeof *q->docids);
    q->rels = malloc((q->n + 1) * sizeof *q->rels);
    if (!q->docids || !q->rels) goto nomem;
    for (size_t i = 0; i < q->n; i++) {
        q->docids[i] = q->arena + q->e[i].docid;
        q->rels[i] = q->e[i].rel;
    }
    *out = q;
    return QAC_OK;
nomem:
    st = qac_set_error(QAC_ERR_NOMEM, "out of memory reading qrels");
fail:
    free(b.arena);
    free(b.e);
    qac_qrels_free(q);
    return st;
}

void qac_qrels_free(qac_qrels *q) {
    if (!q) return;
    free(q->arena);
    free(q->e);
    free(q->docids);
    free(q->rels);
    free(q->qids);
    free(q->start);
    free(q);
}

qac_qrels_format qac_qrels_get_format(const qac_qrels *q) { return q ? q->fmt : QAC_QRELS_AUTO; }
size_t qac_qrels_num_queries(const qac_qrels *q) { return q ? q->nq : 0; }
const char *qac_qrels_qid(const qac_qrels *q, size_t i) { return q && i < q->nq ? q->qids[i] : NULL; }

size_t qac_qrels_judged(const qac_qrels *q, size_t i, const char *const **docids, const int **rels) {
    if (!q || i >= q->nq) {
        if (docids) *docids = NULL;
        if (rels) *rels = NULL;
        return 0;
    }
    if (docids) *docids = q->docids + q->start[i];
    if (rels) *rels = q->rels + q->start[i];
    return q->start[i + 1] - q->start[i];
}

long qac_qrels_find(const qac_qrels *q, const char *qid) {
    if (!q || !qid) return -1;
    size_t lo = 0, hi = q->nq;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(q->qids[mid], qid);
        if (c == 0) return (long)mid;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

int qac_qrels_rel(const qac_qrels *q, size_t i, const char *docid, int *rel) {
    if (!q || i >= q->nq || !docid) return 0;
    size_t lo = q->start[i], hi = q->start[i + 1];
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(q->docids[mid], docid);
        if (c == 0) {
            if (rel) *rel = q->rels[mid];
            return 1;
        }
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return 0;
}
