/* trec_eval-compatible scoring (api/qac_eval.h). The semantics follow
 * trec_eval's reference behaviour: ranking, tie-breaking, -M/-c/-l, and the
 * per-measure edge cases (no relevant documents, short rankings). */
#include "qac_eval.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* In trec_eval's table order, which is also its print order. */
enum { M_NUM_Q, M_NUM_RET, M_NUM_REL, M_NUM_REL_RET, M_MAP, M_RECIP_RANK, M_P, M_RECALL, M_NDCG_CUT, M_COUNT };

static const struct {
    const char *name;
    int has_cutoffs, is_count;
} measure_info[M_COUNT] = {
    {"num_q", 0, 1}, {"num_ret", 0, 1}, {"num_rel", 0, 1}, {"num_rel_ret", 0, 1}, {"map", 0, 0},
    {"recip_rank", 0, 0}, {"P", 1, 0}, {"recall", 1, 0}, {"ndcg_cut", 1, 0},
};

static const long default_cutoffs[] = {5, 10, 15, 20, 30, 100, 200, 500, 1000};
#define N_DEFAULT_CUTOFFS (sizeof default_cutoffs / sizeof default_cutoffs[0])

typedef struct measure_set {
    int on[M_COUNT];
    long *cuts[M_COUNT];
    int ncuts[M_COUNT];
} measure_set;

static void measure_set_free(measure_set *m) {
    for (int i = 0; i < M_COUNT; i++) free(m->cuts[i]);
}

static qac_status add_cutoff(measure_set *m, int k, long c) {
    for (int i = 0; i < m->ncuts[k]; i++)
        if (m->cuts[k][i] == c) return QAC_OK;
    long *nc = realloc(m->cuts[k], (size_t)(m->ncuts[k] + 1) * sizeof *nc);
    if (!nc) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    m->cuts[k] = nc;
    int i = m->ncuts[k]++;
    while (i > 0 && nc[i - 1] > c) { nc[i] = nc[i - 1]; i--; }
    nc[i] = c;
    return QAC_OK;
}

static int find_measure(const char *name, size_t len) {
    for (int k = 0; k < M_COUNT; k++)
        if (strlen(measure_info[k].name) == len && strncmp(measure_info[k].name, name, len) == 0) return k;
    return -1;
}

static qac_status parse_cutoffs(measure_set *m, int k, const char *arg, const char *p) {
    for (;;) {
        char *end;
        errno = 0;
        long c = strtol(p, &end, 10);
        if (end == p || c <= 0 || errno || (*end && *end != ','))
            return qac_set_error(QAC_ERR_INVALID, "measure '%s': cutoffs must be positive integers", arg);
        qac_status st = add_cutoff(m, k, c);
        if (st) return st;
        if (!*end) return QAC_OK;
        p = end + 1;
    }
}

static qac_status parse_measure(measure_set *m, const char *arg) {
    if (strcmp(arg, "official") == 0) {
        const char *names[] = {"num_q", "num_ret", "num_rel", "num_rel_ret", "map", "recip_rank", "P"};
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            qac_status st = parse_measure(m, names[i]);
            if (st) return st;
        }
        return QAC_OK;
    }
    const char *dot = strchr(arg, '.');
    size_t len = dot ? (size_t)(dot - arg) : strlen(arg);
    int k = find_measure(arg, len);
    if (k < 0 && !dot) { /* shorthand P_5, recall_1000, ndcg_cut_10 */
        const char *us = strrchr(arg, '_');
        if (us && us[1] && strspn(us + 1, "0123456789") == strlen(us + 1)) {
            k = find_measure(arg, (size_t)(us - arg));
            if (k >= 0 && measure_info[k].has_cutoffs) {
                m->on[k] = 1;
                return parse_cutoffs(m, k, arg, us + 1);
            }
            k = -1;
        }
    }
    if (k < 0)
        return qac_set_error(QAC_ERR_INVALID,
                             "unknown measure '%s' (supported: official, num_q, num_ret, num_rel, num_rel_ret, map, "
                             "recip_rank, P, recall, ndcg_cut)",
                             arg);
    m->on[k] = 1;
    if (dot) {
        if (!measure_info[k].has_cutoffs)
            return qac_set_error(QAC_ERR_INVALID, "measure '%s' takes no parameters", measure_info[k].name);
        return parse_cutoffs(m, k, arg, dot + 1);
    }
    return QAC_OK;
}

/* ---- results ---- */
typedef struct eval_row {
    int slot;        /* index into names */
    const char *qid; /* borrowed from the run, or "all" */
    double value;
} eval_row;

struct qac_eval_result {
    char **names; /* [nslots] measure names as printed, e.g. "P_5" */
    int *is_count;
    int nslots;
    eval_row *rows;
    size_t nrows, cap;
    size_t first_summary;
};

void qac_eval_result_free(qac_eval_result *res) {
    if (!res) return;
    for (int i = 0; i < res->nslots; i++) free(res->names[i]);
    free(res->names);
    free(res->is_count);
    free(res->rows);
    free(res);
}

static qac_status add_row(qac_eval_result *res, int slot, const char *qid, double value) {
    if (res->nrows == res->cap) {
        size_t nc = res->cap ? res->cap * 2 : 256;
        eval_row *nr = realloc(res->rows, nc * sizeof *nr);
        if (!nr) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        res->rows = nr;
        res->cap = nc;
    }
    res->rows[res->nrows++] = (eval_row){slot, qid, value};
    return QAC_OK;
}

/* ---- per-query scoring ---- */
typedef struct ranked {
    const char *docid;
    double score;
    size_t entry;
} ranked;

/* Score descending, then docid descending by strcmp: trec_eval's order. */
static int cmp_ranked(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->score > y->score) return -1;
    if (x->score < y->score) return 1;
    return strcmp(y->docid, x->docid);
}

static int cmp_ranked_docid(const void *a, const void *b) {
    return strcmp(((const ranked *)a)->docid, ((const ranked *)b)->docid);
}

static int cmp_long_desc(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return x > y ? -1 : x < y;
}

#define RELV_NONPOOL (-1L)
#define RELV_UNJUDGED (-2L)

typedef struct scratch {
    ranked *rk, *tmp;
    long *relv, *ideal;
    size_t cap_rk, cap_ideal;
} scratch;

static qac_status grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return QAC_OK;
    void *np = realloc(*p, need * elem);
    if (!np) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    *p = np;
    *cap = need;
    return QAC_OK;
}

static double dcg_at(const long *gains, size_t n, long k) {
    double sum = 0.0;
    for (size_t i = 0; i < n && (long)i < k; i++)
        if (gains[i] > 0) sum += (double)gains[i] / log2((double)i + 2.0);
    return sum;
}

/* values[slot] for one query. */
static qac_status score_query(const measure_set *m, const qac_qrels *qrels, size_t qi, const qac_run *run, size_t ri,
                              const qac_eval_params *p, scratch *s, double *values) {
    const char *const *docids;
    const double *scores;
    size_t n = qac_run_entries(run, ri, &docids, &scores);
    size_t cap = s->cap_rk;
    qac_status st;
    if ((st = grow((void **)&s->rk, &cap, n + 1, sizeof *s->rk))) return st;
    cap = s->cap_rk;
    if ((st = grow((void **)&s->tmp, &cap, n + 1, sizeof *s->tmp))) return st;
    cap = s->cap_rk;
    if ((st = grow((void **)&s->relv, &cap, n + 1, sizeof *s->relv))) return st;
    s->cap_rk = cap;
    for (size_t j = 0; j < n; j++) s->rk[j] = (ranked){docids[j], scores[j], j};
    qsort(s->rk, n, sizeof *s->rk, cmp_ranked);
    if (p->max_docs > 0 && n > (size_t)p->max_docs) n = (size_t)p->max_docs;

    memcpy(s->tmp, s->rk, n * sizeof *s->tmp);
    qsort(s->tmp, n, sizeof *s->tmp, cmp_ranked_docid);
    for (size_t j = 1; j < n; j++)
        if (strcmp(s->tmp[j - 1].docid, s->tmp[j].docid) == 0) {
            int64_t a = qac_run_line(run, ri, s->tmp[j - 1].entry), b = qac_run_line(run, ri, s->tmp[j].entry);
            return qac_set_error(QAC_ERR_FORMAT, "run: query %s lists document %s twice (lines %lld and %lld)",
                                 qac_run_qid(run, ri), s->tmp[j].docid, (long long)(a < b ? a : b),
                                 (long long)(a < b ? b : a));
        }

    const long level = p->rel_level;
    const int *rels;
    size_t nj = qac_qrels_judged(qrels, qi, NULL, &rels);
    cap = s->cap_ideal;
    if ((st = grow((void **)&s->ideal, &cap, nj + 1, sizeof *s->ideal))) return st;
    s->cap_ideal = cap;
    long num_rel = 0;
    size_t nideal = 0;
    for (size_t j = 0; j < nj; j++) {
        if (rels[j] >= 0 && rels[j] >= level) num_rel++;
        if (rels[j] > 0) s->ideal[nideal++] = rels[j];
    }
    qsort(s->ideal, nideal, sizeof *s->ideal, cmp_long_desc);

    long num_rel_ret = 0;
    for (size_t j = 0; j < n; j++) {
        int rel;
        if (!qac_qrels_rel(qrels, qi, s->rk[j].docid, &rel)) s->relv[j] = RELV_NONPOOL;
        else if (rel < 0) s->relv[j] = RELV_UNJUDGED;
        else {
            s->relv[j] = rel;
            if (rel >= level) num_rel_ret++;
        }
    }

    int slot = 0;
    for (int k = 0; k < M_COUNT; k++) {
        if (!m->on[k]) continue;
        switch (k) {
        case M_NUM_Q: values[slot++] = 1; break;
        case M_NUM_RET: values[slot++] = (double)n; break;
        case M_NUM_REL: values[slot++] = (double)num_rel; break;
        case M_NUM_REL_RET: values[slot++] = (double)num_rel_ret; break;
        case M_MAP: {
            double sum = 0.0;
            long so_far = 0;
            for (size_t j = 0; j < n; j++)
                if (s->relv[j] >= level) sum += (double)++so_far / (double)(j + 1);
            values[slot++] = so_far ? sum / (double)num_rel : 0.0;
            break;
        }
        case M_RECIP_RANK: {
            double v = 0.0;
            for (size_t j = 0; j < n; j++)
                if (s->relv[j] >= level) {
                    v = 1.0 / (double)(j + 1);
                    break;
                }
            values[slot++] = v;
            break;
        }
        case M_P:
        case M_RECALL:
            for (int c = 0; c < m->ncuts[k]; c++) {
                long cut = m->cuts[k][c], hits = 0;
                for (size_t j = 0; j < n && (long)j < cut; j++)
                    if (s->relv[j] >= level) hits++;
                if (k == M_P) values[slot++] = (double)hits / (double)cut;
                else values[slot++] = num_rel ? (double)hits / (double)num_rel : 0.0;
            }
            break;
        case M_NDCG_CUT:
            for (int c = 0; c < m->ncuts[k]; c++) {
                long cut = m->cuts[k][c];
                double dcg = dcg_at(s->relv, n, cut), idcg = dcg_at(s->ideal, nideal, cut);
                values[slot++] = idcg > 0.0 ? dcg / idcg : dcg;
            }
            break;
        }
    }
    return QAC_OK;
}

static long count_positive(const qac_qrels *qrels) {
    long n = 0;
    for (size_t qi = 0; qi < qac_qrels_num_queries(qrels); qi++) {
        const int *rels;
        size_t nj = qac_qrels_judged(qrels, qi, NULL, &rels);
        for (size_t j = 0; j < nj; j++) n += rels[j] > 0;
    }
    return n;
}

qac_status qac_eval_compute(qac_eval_result **out, const qac_qrels *qrels, const qac_run *run,
                            const char *const *measures, int n, const qac_eval_params *params) {
    *out = NULL;
    if (!qrels || !run || n < 0 || (n > 0 && !measures))
        return qac_set_error(QAC_ERR_INVALID, "eval: bad arguments");
    qac_eval_params p = params ? *params : (qac_eval_params){0, 1, 0};
    measure_set m = {0};
    qac_eval_result *res = NULL;
    scratch s = {0};
    double *values = NULL, *sums = NULL;
    qac_status st = QAC_OK;
    if (n == 0) st = parse_measure(&m, "official");
    for (int i = 0; i < n && !st; i++) {
        if (!measures[i]) st = qac_set_error(QAC_ERR_INVALID, "eval: NULL measure");
        else st = parse_measure(&m, measures[i]);
    }
    if (st) goto done;
    for (int k = 0; k < M_COUNT && !st; k++)
        if (m.on[k] && measure_info[k].has_cutoffs && m.ncuts[k] == 0)
            for (size_t c = 0; c < N_DEFAULT_CUTOFFS && !st; c++) st = add_cutoff(&m, k, default_cutoffs[c]);
    if (st) goto done;

    res = calloc(1, sizeof *res);
    int nslots = 0;
    for (int k = 0; k < M_COUNT; k++)
        if (m.on[k]) nslots += measure_info[k].has_cutoffs ? m.ncuts[k] : 1;
    if (!res || !(res->names = calloc((size_t)nslots, sizeof *res->names)) ||
        !(res->is_count = calloc((size_t)nslots, sizeof *res->is_count)) ||
        !(values = calloc((size_t)nslots, sizeof *values)) || !(sums = calloc((size_t)nslots, sizeof *sums))) {
        st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int k = 0; k < M_COUNT; k++) {
        if (!m.on[k]) continue;
        int reps = measure_info[k].has_cutoffs ? m.ncuts[k] : 1;
        for (int c = 0; c < reps; c++) {
            char name[64];
            if (measure_info[k].has_cutoffs) snprintf(name, sizeof name, "%s_%ld", measure_info[k].name, m.cuts[k][c]);
            else snprintf(name, sizeof name, "%s", measure_info[k].name);
            res->is_count[res->nslots] = measure_info[k].is_count;
            if (!(res->names[res->nslots++] = strdup(name))) {
                st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
                goto done;
            }
        }
    }

    long evaluated = 0;
    for (size_t ri = 0; ri < qac_run_num_queries(run); ri++) {
        long qi = qac_qrels_find(qrels, qac_run_qid(run, ri));
        if (qi < 0) continue; /* trec_eval skips run queries without judgements */
        if ((st = score_query(&m, qrels, (size_t)qi, run, ri, &p, &s, values))) goto done;
        for (int j = 0; j < nslots; j++) {
            sums[j] += values[j];
            if ((st = add_row(res, j, qac_run_qid(run, ri), values[j]))) goto done;
        }
        evaluated++;
    }
    if (evaluated == 0) {
        st = qac_set_error(QAC_ERR_INVALID, "no query has both results in the run and judgements in the qrels (do their query ids match?)");
        goto done;
    }
    res->first_summary = res->nrows;
    long denom = p.complete ? (long)qac_qrels_num_queries(qrels) : evaluated;
    int slot = 0;
    for (int k = 0; k < M_COUNT; k++) {
        if (!m.on[k]) continue;
        int reps = measure_info[k].has_cutoffs ? m.ncuts[k] : 1;
        for (int c = 0; c < reps; c++, slot++) {
            double v = sums[slot];
            if (k == M_NUM_Q) v = (double)denom;
            /* trec_eval 9.0.x with -c counts rel > 0 over every qrels query,
             * whatever -l says */
            else if (k == M_NUM_REL && p.complete) v = (double)count_positive(qrels);
            else if (!measure_info[k].is_count && denom > 0) v /= (double)denom;
            if ((st = add_row(res, slot, "all", v))) goto done;
        }
    }
done:
    measure_set_free(&m);
    free(s.rk);
    free(s.tmp);
    free(s.relv);
    free(s.ideal);
    free(values);
    free(sums);
    if (st) qac_eval_result_free(res);
    else *out = res;
    return st;
}

size_t qac_eval_num_rows(const qac_eval_result *res) { return res ? res->nrows : 0; }

void qac_eval_row(const qac_eval_result *res, size_t i, const char **measure, const char **qid, double *value,
                  int *is_count) {
    const eval_row *r = res && i < res->nrows ? &res->rows[i] : NULL;
    if (measure) *measure = r ? res->names[r->slot] : NULL;
    if (qid) *qid = r ? r->qid : NULL;
    if (value) *value = r ? r->value : 0.0;
    if (is_count) *is_count = r ? res->is_count[r->slot] : 0;
}

qac_status qac_eval_summary(const qac_eval_result *res, const char *measure, double *value) {
    if (!res || !measure) return qac_set_error(QAC_ERR_INVALID, "eval: bad arguments");
    for (size_t i = res->first_summary; i < res->nrows; i++)
        if (strcmp(res->names[res->rows[i].slot], measure) == 0) {
            if (value) *value = res->rows[i].value;
            return QAC_OK;
        }
    return qac_set_error(QAC_ERR_NOT_FOUND, "measure '%s' was not computed", measure);
}

qac_status qac_eval_write(FILE *f, const qac_eval_result *res, int per_query, int digits) {
    if (!f || !res || digits < 0 || digits > 17) return qac_set_error(QAC_ERR_INVALID, "eval: bad arguments");
    for (size_t i = per_query ? 0 : res->first_summary; i < res->nrows; i++) {
        const eval_row *r = &res->rows[i];
        /* trec_eval prints num_q only in the summary */
        if (i < res->first_summary && strcmp(res->names[r->slot], "num_q") == 0) continue;
        int rc = res->is_count[r->slot]
                     ? fprintf(f, "%-22s\t%s\t%ld\n", res->names[r->slot], r->qid, (long)r->value)
                     : fprintf(f, "%-22s\t%s\t%*.*f\n", res->names[r->slot], r->qid, digits + 2, digits, r->value);
        if (rc < 0) return qac_set_error(QAC_ERR_IO, "writing the measures: %s", strerror(errno));
    }
    return QAC_OK;
}
