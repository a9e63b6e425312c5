/* trec_eval-compatible scoring (api/qac_eval.h). The semantics follow
 * trec_eval 9.0.x's reference behaviour: ranking (scores compared as C
 * floats), tie-breaking, -M/-c/-l, every measure's edge cases (no relevant
 * documents, short rankings, cutoffs past the ranking) and its print order.
 * Each measure keeps trec_eval's order of floating-point operations, so the
 * printed digits are the same, not merely close. */
#include "qac_eval.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the measure table, in trec_eval's order (which is its print order) ---- */
enum {
    M_RUNID, M_NUM_Q, M_NUM_RET, M_NUM_REL, M_NUM_REL_RET, M_MAP, M_GM_MAP, M_RPREC, M_BPREF, M_RECIP_RANK,
    M_IPREC_AT_RECALL, M_P, M_RELSTRING, M_RECALL, M_INFAP, M_GM_BPREF, M_RPREC_MULT, M_UTILITY, M_11PT_AVG,
    M_BING, M_G, M_NDCG, M_NDCG_REL, M_RNDCG, M_NDCG_CUT, M_MAP_CUT, M_RELATIVE_P, M_SUCCESS, M_SET_P,
    M_SET_RELATIVE_P, M_SET_RECALL, M_SET_MAP, M_SET_F, M_NUM_NONREL_JUDGED_RET, M_COUNT
};

typedef enum {
    K_FLOAT,    /* per query and mean */
    K_COUNT,    /* integer per query, summed */
    K_GM,       /* log per query (not printed), geometric mean */
    K_NUMQ,     /* summary only: the number of queries averaged over */
    K_RUNID,    /* summary only: the run's name */
    K_RELSTRING /* per query only: the top ranks' relevance as text */
} value_kind;

typedef enum {
    P_NONE,
    P_CUT_LONG,  /* one value per cutoff, name_<n>; cutoffs given twice merge */
    P_CUT_FLOAT, /* one value per cutoff, name_%3.2f */
    P_FLOATS,    /* one value, numeric parameters; name_<params as given> */
    P_PAIRS      /* one value, rel_level=gain pairs; name_<params as given> */
} param_kind;

static const double cuts_docs[] = {5, 10, 15, 20, 30, 100, 200, 500, 1000};
static const double cuts_success[] = {1, 5, 10};
static const double cuts_recall_pts[] = {0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0};
static const double cuts_rmult[] = {0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0};
static const double par_relstring[] = {10};
static const double par_utility[] = {1.0, -1.0, 0.0, 0.0};
static const double par_set_f[] = {1.0};
#define DEF(a) a, (int)(sizeof a / sizeof a[0])

static const struct {
    const char *name;
    value_kind kind;
    param_kind params;
    const double *defaults;
    int ndefaults;
} measure_info[M_COUNT] = {
    {"runid", K_RUNID, P_NONE, NULL, 0},
    {"num_q", K_NUMQ, P_NONE, NULL, 0},
    {"num_ret", K_COUNT, P_NONE, NULL, 0},
    {"num_rel", K_COUNT, P_NONE, NULL, 0},
    {"num_rel_ret", K_COUNT, P_NONE, NULL, 0},
    {"map", K_FLOAT, P_NONE, NULL, 0},
    {"gm_map", K_GM, P_NONE, NULL, 0},
    {"Rprec", K_FLOAT, P_NONE, NULL, 0},
    {"bpref", K_FLOAT, P_NONE, NULL, 0},
    {"recip_rank", K_FLOAT, P_NONE, NULL, 0},
    {"iprec_at_recall", K_FLOAT, P_CUT_FLOAT, DEF(cuts_recall_pts)},
    {"P", K_FLOAT, P_CUT_LONG, DEF(cuts_docs)},
    {"relstring", K_RELSTRING, P_FLOATS, DEF(par_relstring)},
    {"recall", K_FLOAT, P_CUT_LONG, DEF(cuts_docs)},
    {"infAP", K_FLOAT, P_NONE, NULL, 0},
    {"gm_bpref", K_GM, P_NONE, NULL, 0},
    {"Rprec_mult", K_FLOAT, P_CUT_FLOAT, DEF(cuts_rmult)},
    {"utility", K_FLOAT, P_FLOATS, DEF(par_utility)},
    {"11pt_avg", K_FLOAT, P_FLOATS, DEF(cuts_recall_pts)},
    {"binG", K_FLOAT, P_NONE, NULL, 0},
    {"G", K_FLOAT, P_PAIRS, NULL, 0},
    {"ndcg", K_FLOAT, P_PAIRS, NULL, 0},
    {"ndcg_rel", K_FLOAT, P_PAIRS, NULL, 0},
    {"Rndcg", K_FLOAT, P_PAIRS, NULL, 0},
    {"ndcg_cut", K_FLOAT, P_CUT_LONG, DEF(cuts_docs)},
    {"map_cut", K_FLOAT, P_CUT_LONG, DEF(cuts_docs)},
    {"relative_P", K_FLOAT, P_CUT_LONG, DEF(cuts_docs)},
    {"success", K_FLOAT, P_CUT_LONG, DEF(cuts_success)},
    {"set_P", K_FLOAT, P_NONE, NULL, 0},
    {"set_relative_P", K_FLOAT, P_NONE, NULL, 0},
    {"set_recall", K_FLOAT, P_NONE, NULL, 0},
    {"set_map", K_FLOAT, P_NONE, NULL, 0},
    {"set_F", K_FLOAT, P_FLOATS, DEF(par_set_f)},
    {"num_nonrel_judged_ret", K_COUNT, P_NONE, NULL, 0},
};

/* trec_eval's nicknames: each marks a list of measures. */
static const char *const nick_official[] = {"runid", "num_q", "num_ret", "num_rel", "num_rel_ret", "map", "gm_map",
                                            "Rprec", "bpref", "recip_rank", "iprec_at_recall", "P", NULL};
static const char *const nick_set[] = {"runid", "num_q", "num_ret", "num_rel", "num_rel_ret", "utility", "set_P",
                                       "set_recall", "set_relative_P", "set_map", "set_F", NULL};
static const char *const nick_all_trec[] = {
    "runid", "num_q", "num_ret", "num_rel", "num_rel_ret", "map", "gm_map", "Rprec", "bpref", "recip_rank",
    "iprec_at_recall", "P", "relstring", "recall", "infAP", "gm_bpref", "utility", "11pt_avg", "ndcg",
    "relative_P", "Rprec_mult", "success", "map_cut", "ndcg_cut", "ndcg_rel", "Rndcg", "binG", "G", "set_P",
    "set_recall", "set_relative_P", "set_map", "set_F", "num_nonrel_judged_ret", NULL};
static const struct {
    const char *name;
    const char *const *list;
} nicknames[] = {{"official", nick_official}, {"set", nick_set}, {"all_trec", nick_all_trec}};

#define MIN_GEO_MEAN .00001 /* trec_eval's floor before a log */
#define INFAP_EPSILON .00001

typedef struct measure_set {
    int on[M_COUNT];
    int given[M_COUNT]; /* parameters came from the user */
    double *par[M_COUNT];
    int npar[M_COUNT];
    long *pair_level[M_COUNT]; /* P_PAIRS: the levels named */
    char *printable[M_COUNT];  /* P_FLOATS / P_PAIRS given: the text as typed */
} measure_set;

static void measure_set_free(measure_set *m) {
    for (int i = 0; i < M_COUNT; i++) {
        free(m->par[i]);
        free(m->pair_level[i]);
        free(m->printable[i]);
    }
}

static int find_measure(const char *name, size_t len) {
    for (int k = 0; k < M_COUNT; k++)
        if (strlen(measure_info[k].name) == len && strncmp(measure_info[k].name, name, len) == 0) return k;
    return -1;
}

static int find_nickname(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof nicknames / sizeof nicknames[0]; i++)
        if (strlen(nicknames[i].name) == len && strncmp(nicknames[i].name, name, len) == 0) return (int)i;
    return -1;
}

int qac_eval_measure_known(const char *name, size_t len) {
    if (!name) return 0;
    if (find_measure(name, len) >= 0 || find_nickname(name, len) >= 0) return 1;
    /* the P_5 shorthand */
    const char *us = NULL;
    for (size_t i = 0; i < len; i++)
        if (name[i] == '_') us = name + i;
    if (!us || us + 1 == name + len) return 0;
    for (const char *p = us + 1; p < name + len; p++)
        if (!isdigit((unsigned char)*p)) return 0;
    int k = find_measure(name, (size_t)(us - name));
    return k >= 0 && measure_info[k].params == P_CUT_LONG;
}

static qac_status add_cutoff(measure_set *m, int k, double c) {
    for (int i = 0; i < m->npar[k]; i++)
        if (m->par[k][i] == c) return QAC_OK;
    double *nc = realloc(m->par[k], (size_t)(m->npar[k] + 1) * sizeof *nc);
    if (!nc) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    m->par[k] = nc;
    int i = m->npar[k]++;
    while (i > 0 && nc[i - 1] > c) {
        nc[i] = nc[i - 1];
        i--;
    }
    nc[i] = c;
    return QAC_OK;
}

static qac_status parse_cutoffs(measure_set *m, int k, const char *arg, const char *p) {
    int is_long = measure_info[k].params == P_CUT_LONG;
    for (;;) {
        char *end;
        errno = 0;
        double c;
        if (is_long) {
            long v = strtol(p, &end, 10);
            c = (double)v;
            if (end == p || v <= 0 || errno || (*end && *end != ','))
                return qac_set_error(QAC_ERR_INVALID, "measure '%s': cutoffs must be positive integers", arg);
        } else {
            c = strtod(p, &end);
            if (end == p || errno || !isfinite(c) || (*end && *end != ','))
                return qac_set_error(QAC_ERR_INVALID, "measure '%s': cutoffs must be numbers", arg);
        }
        qac_status st = add_cutoff(m, k, c);
        if (st) return st;
        if (!*end) return QAC_OK;
        p = end + 1;
    }
}

/* "a,b,c" (P_FLOATS) or "l=g,l=g" (P_PAIRS). trec_eval keeps the first
 * parameters given for a measure; so does qac. */
static qac_status parse_params(measure_set *m, int k, const char *arg, const char *p) {
    if (m->given[k]) return QAC_OK;
    int pairs = measure_info[k].params == P_PAIRS, n = 1;
    for (const char *s = p; *s; s++) n += *s == ',';
    double *v = calloc((size_t)n, sizeof *v);
    long *lv = pairs ? calloc((size_t)n, sizeof *lv) : NULL;
    char *text = strdup(p);
    if (!v || (pairs && !lv) || !text) {
        free(v);
        free(lv);
        free(text);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    const char *s = p;
    for (int i = 0; i < n; i++) {
        char *end;
        if (pairs) {
            errno = 0;
            long lvl = strtol(s, &end, 10);
            if (end == s || *end != '=' || errno) goto bad;
            lv[i] = lvl;
            s = end + 1;
        }
        errno = 0;
        v[i] = strtod(s, &end);
        if (end == s || errno || !isfinite(v[i]) || (*end && *end != ',')) goto bad;
        s = end + 1;
    }
    if (k == M_UTILITY && n != 4) {
        free(v);
        free(lv);
        free(text);
        return qac_set_error(QAC_ERR_INVALID, "measure '%s': utility takes 4 coefficients", arg);
    }
    m->par[k] = v;
    m->pair_level[k] = lv;
    m->npar[k] = n;
    m->printable[k] = text;
    m->given[k] = 1;
    return QAC_OK;
bad:
    free(v);
    free(lv);
    free(text);
    return qac_set_error(QAC_ERR_INVALID, "measure '%s': parameters must be %s", arg,
                         pairs ? "rel_level=gain pairs, comma separated" : "numbers, comma separated");
}

static qac_status parse_measure(measure_set *m, const char *arg) {
    const char *dot = strchr(arg, '.');
    size_t len = dot ? (size_t)(dot - arg) : strlen(arg);
    int nick = find_nickname(arg, len);
    if (nick >= 0) {
        if (dot) return qac_set_error(QAC_ERR_INVALID, "measure '%s': a nickname takes no parameters", arg);
        for (const char *const *nm = nicknames[nick].list; *nm; nm++) m->on[find_measure(*nm, strlen(*nm))] = 1;
        return QAC_OK;
    }
    int k = find_measure(arg, len);
    if (k < 0 && !dot && qac_eval_measure_known(arg, len)) { /* shorthand P_5, recall_1000, ndcg_cut_10 */
        const char *us = strrchr(arg, '_');
        k = find_measure(arg, (size_t)(us - arg));
        m->on[k] = 1;
        return parse_cutoffs(m, k, arg, us + 1);
    }
    if (k < 0)
        return qac_set_error(QAC_ERR_INVALID,
                             "unknown measure '%s' (supported: trec_eval's names and the nicknames official, set, "
                             "all_trec; see 'qac eval --help')",
                             arg);
    m->on[k] = 1;
    if (!dot) return QAC_OK;
    switch (measure_info[k].params) {
    case P_NONE: return qac_set_error(QAC_ERR_INVALID, "measure '%s' takes no parameters", measure_info[k].name);
    case P_CUT_LONG:
    case P_CUT_FLOAT: return parse_cutoffs(m, k, arg, dot + 1);
    default: return parse_params(m, k, arg, dot + 1);
    }
}

/* Measures switched on without parameters take trec_eval's defaults. */
static qac_status apply_defaults(measure_set *m) {
    for (int k = 0; k < M_COUNT; k++) {
        if (!m->on[k] || m->npar[k] || !measure_info[k].ndefaults) continue;
        m->par[k] = malloc((size_t)measure_info[k].ndefaults * sizeof(double));
        if (!m->par[k]) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        memcpy(m->par[k], measure_info[k].defaults, (size_t)measure_info[k].ndefaults * sizeof(double));
        m->npar[k] = measure_info[k].ndefaults;
    }
    return QAC_OK;
}

static int nslots_of(const measure_set *m, int k) {
    param_kind pk = measure_info[k].params;
    return pk == P_CUT_LONG || pk == P_CUT_FLOAT ? m->npar[k] : 1;
}

/* ---- results ---- */
typedef struct eval_row {
    int slot;        /* index into names */
    const char *qid; /* borrowed from the run, or "all" */
    double value;
    char *text; /* runid and relstring rows, owned */
} eval_row;

struct qac_eval_result {
    char **names; /* [nslots] measure names as printed, e.g. "P_5" */
    value_kind *kind;
    int nslots;
    eval_row *rows;
    size_t nrows, cap;
    size_t first_summary;
};

void qac_eval_result_free(qac_eval_result *res) {
    if (!res) return;
    for (int i = 0; i < res->nslots; i++) free(res->names[i]);
    for (size_t i = 0; i < res->nrows; i++) free(res->rows[i].text);
    free(res->names);
    free(res->kind);
    free(res->rows);
    free(res);
}

static qac_status add_row(qac_eval_result *res, int slot, const char *qid, double value, const char *text) {
    if (res->nrows == res->cap) {
        size_t nc = res->cap ? res->cap * 2 : 256;
        eval_row *nr = realloc(res->rows, nc * sizeof *nr);
        if (!nr) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        res->rows = nr;
        res->cap = nc;
    }
    char *t = NULL;
    if (text && !(t = strdup(text))) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    res->rows[res->nrows++] = (eval_row){slot, qid, value, t};
    return QAC_OK;
}

/* ---- one query ---- */
typedef struct ranked {
    const char *docid;
    float score; /* trec_eval 9.0.x reads scores into a C float */
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

#define RELV_NONPOOL (-1L)
#define RELV_UNJUDGED (-2L)

/* What every measure reads, as trec_eval's form_res_rels gives it. */
typedef struct qctx {
    const long *relv;         /* [num_ret] relevance by rank, or RELV_* */
    long num_ret;
    const long *rel_levels;   /* [num_rel_levels] judged docs per level >= 0 */
    long num_rel_levels;
    long num_rel, num_rel_ret, num_nonpool, num_unjudged;
    long level; /* -l */
} qctx;

typedef struct scratch {
    ranked *rk, *tmp;
    long *relv, *levels;
    size_t cap_rk, cap_levels;
    char *str;
    size_t cap_str;
} scratch;

static qac_status grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return QAC_OK;
    void *np = realloc(*p, need * elem);
    if (!np) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    *p = np;
    *cap = need;
    return QAC_OK;
}

/* ---- gains for ndcg, ndcg_rel, Rndcg and G ---- */
typedef struct rel_gain {
    long rel_level, num_at_level;
    double gain;
} rel_gain;

/* trec_eval orders gains with a comparator returning (int)(g1 - g2) through
 * glibc's qsort, a top-down merge sort; the same merge, so that gains closer
 * than 1 keep the order trec_eval gives them. */
static int gain_cmp(const rel_gain *a, const rel_gain *b) { return (int)(a->gain - b->gain); }

static void gain_msort(rel_gain *b, size_t n, rel_gain *t) {
    if (n <= 1) return;
    size_t n1 = n / 2, n2 = n - n1;
    rel_gain *b1 = b, *b2 = b + n1, *out = t;
    gain_msort(b1, n1, t);
    gain_msort(b2, n2, t);
    while (n1 > 0 && n2 > 0) {
        if (gain_cmp(b1, b2) <= 0) {
            *out++ = *b1++;
            n1--;
        } else {
            *out++ = *b2++;
            n2--;
        }
    }
    if (n1 > 0) memcpy(out, b1, n1 * sizeof *out);
    memcpy(b, t, (n - n2) * sizeof *b);
}

typedef struct gains {
    rel_gain *g, *tmp;
    long n, cap;
} gains;

static qac_status setup_gains(gains *gs, const qctx *q, const measure_set *m, int k) {
    long need = q->num_rel_levels + m->npar[k] + 1;
    if (need > gs->cap) {
        rel_gain *ng = realloc(gs->g, (size_t)need * sizeof *ng), *nt = ng ? realloc(gs->tmp, (size_t)need * sizeof *nt) : NULL;
        if (ng) gs->g = ng;
        if (nt) gs->tmp = nt;
        if (!ng || !nt) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        gs->cap = need;
    }
    long n = 0;
    for (int i = 0; i < m->npar[k]; i++) gs->g[n++] = (rel_gain){m->pair_level[k][i], 0, m->par[k][i]};
    for (long i = 0; i < q->num_rel_levels; i++) {
        long j = 0;
        while (j < n && gs->g[j].rel_level != i) j++;
        if (j < n) gs->g[j].num_at_level = q->rel_levels[i];
        else gs->g[n++] = (rel_gain){i, q->rel_levels[i], (double)i};
    }
    gain_msort(gs->g, (size_t)n, gs->tmp);
    gs->n = n;
    return QAC_OK;
}

static double get_gain(const gains *gs, long rel_level) {
    for (long i = 0; i < gs->n; i++)
        if (gs->g[i].rel_level == rel_level) return gs->g[i].gain;
    return 0.0;
}

/* The ideal ranking walks the gains from the highest level down. */
typedef struct ideal_walk {
    long cur, at;
    double gain;
} ideal_walk;

static void ideal_start(ideal_walk *w, const gains *gs) {
    w->cur = gs->n - 1;
    w->gain = w->cur >= 0 ? gs->g[w->cur].gain : 0.0;
    w->at = 0;
}

static void ideal_step(ideal_walk *w, const gains *gs) {
    w->at++;
    while (w->cur >= 0 && w->at > gs->g[w->cur].num_at_level) {
        w->at = 1;
        w->cur--;
        w->gain = w->cur >= 0 ? gs->g[w->cur].gain : 0.0;
    }
}

static double m_ndcg(const qctx *q, const gains *gs) {
    double rdcg = 0.0, idcg = 0.0;
    ideal_walk w;
    ideal_start(&w, gs);
    long i = 0;
    for (; i < q->num_ret && w.gain > 0.0; i++) {
        double g = get_gain(gs, q->relv[i]);
        if (g != 0) rdcg += g / log2((double)(i + 2));
        ideal_step(&w, gs);
        if (w.gain > 0.0) idcg += w.gain / log2((double)(i + 2));
    }
    for (; i < q->num_ret; i++) {
        double g = get_gain(gs, q->relv[i]);
        if (g != 0) rdcg += g / log2((double)(i + 2));
    }
    for (; w.gain > 0.0; i++) {
        ideal_step(&w, gs);
        if (w.gain > 0.0) idcg += w.gain / log2((double)(i + 2));
    }
    return idcg > 0.0 ? rdcg / idcg : 0.0;
}

static double m_ndcg_rel(const qctx *q, const gains *gs) {
    double rdcg = 0.0, idcg = 0.0, sum = 0.0;
    long num_rel_ret = 0, num_rel = 0;
    ideal_walk w;
    ideal_start(&w, gs);
    long i = 0;
    for (; i < q->num_ret && w.gain > 0.0; i++) {
        double g = get_gain(gs, q->relv[i]);
        if (g != 0) rdcg += g / log2((double)(i + 2));
        ideal_step(&w, gs);
        if (w.gain > 0.0) {
            num_rel++;
            idcg += w.gain / log2((double)(i + 2));
        }
        if (g > 0) {
            sum += rdcg / idcg;
            num_rel_ret++;
        }
    }
    for (; i < q->num_ret; i++) {
        double g = get_gain(gs, q->relv[i]);
        if (g != 0) rdcg += g / log2((double)(i + 2));
        if (g > 0) {
            sum += rdcg / idcg;
            num_rel_ret++;
        }
    }
    for (; w.gain > 0.0; i++) {
        ideal_step(&w, gs);
        if (w.gain > 0.0) {
            num_rel++;
            idcg += w.gain / log2((double)(i + 2));
        }
    }
    sum += ((double)(num_rel - num_rel_ret)) * rdcg / idcg;
    return sum > 0.0 ? sum / num_rel : 0.0;
}

static double m_rndcg(const qctx *q, const gains *gs) {
    if (q->num_rel == 0) return 0.0;
    double rdcg = 0.0, idcg = 0.0, sum = 0.0;
    long changes = 0;
    ideal_walk w;
    ideal_start(&w, gs);
    double old = w.gain;
    long i = 0;
    for (; i < q->num_ret && w.gain > 0.0; i++) {
        double g = get_gain(gs, q->relv[i]);
        ideal_step(&w, gs);
        if (old != w.gain) { /* at an R level: ndcg here joins the average */
            if (idcg > 0.0) {
                sum += rdcg / idcg;
                changes++;
            }
            old = w.gain;
        }
        if (g != 0) rdcg += g / log2((double)(i + 2));
        if (w.gain > 0.0) idcg += w.gain / log2((double)(i + 2));
    }
    if (i < q->num_ret) {
        for (; i < q->num_ret; i++) {
            double g = get_gain(gs, q->relv[i]);
            if (g != 0) rdcg += g / log2((double)(i + 2));
        }
        if (idcg > 0.0) {
            sum += rdcg / idcg;
            changes++;
        }
    }
    for (; w.gain > 0.0; i++) {
        ideal_step(&w, gs);
        if (old != w.gain) {
            if (idcg > 0.0) {
                sum += rdcg / idcg;
                changes++;
            }
            old = w.gain;
        }
        if (w.gain > 0.0) idcg += w.gain / log2((double)(i + 2));
    }
    return sum / changes;
}

static double m_g(const qctx *q, const gains *gs) {
    double sum_results = 0.0, sum_ideal = 0.0, sum_cost = 0.0, results_g = 0.0;
    const double min_cost = 1.0;
    ideal_walk w;
    ideal_start(&w, gs);
    long i = 0;
    for (; i < q->num_ret && w.gain > 0.0; i++) {
        double g = get_gain(gs, q->relv[i]);
        sum_results += g;
        ideal_step(&w, gs);
        if (w.gain > 0.0) sum_ideal += w.gain;
        if (w.gain >= min_cost) sum_cost += w.gain;
        else sum_cost += min_cost;
        if (g != 0) results_g += g / log2((double)(2 + sum_cost - sum_results));
    }
    for (; i < q->num_ret; i++) {
        double g = get_gain(gs, q->relv[i]);
        sum_results += g;
        sum_cost += min_cost;
        if (g != 0) results_g += g / log2((double)(2 + sum_cost - sum_results));
    }
    while (w.gain > 0.0) {
        ideal_step(&w, gs);
        if (w.gain > 0.0) sum_ideal += w.gain;
    }
    return sum_ideal > 0.0 ? results_g / sum_ideal : 0.0;
}

/* ---- the other measures ---- */
static double m_ap(const qctx *q) {
    double sum = 0.0;
    long so_far = 0;
    for (long i = 0; i < q->num_ret; i++)
        if (q->relv[i] >= q->level) {
            so_far++;
            sum += (double)so_far / (double)(i + 1);
        }
    return so_far ? sum / (double)q->num_rel : 0.0;
}

static double m_bpref(const qctx *q) {
    long num_nonrel = 0, nonrel_so_far = 0;
    double bpref = 0.0;
    for (long j = 0; j < q->level && j < q->num_rel_levels; j++) num_nonrel += q->rel_levels[j];
    for (long j = 0; j < q->num_ret; j++) {
        long r = q->relv[j];
        if (r == RELV_NONPOOL || r == RELV_UNJUDGED) continue;
        if (r >= 0 && r < q->level) nonrel_so_far++;
        else if (nonrel_so_far > 0) {
            long a = nonrel_so_far < q->num_rel ? nonrel_so_far : q->num_rel;
            long b = num_nonrel < q->num_rel ? num_nonrel : q->num_rel;
            bpref += 1.0 - (((double)a) / (double)b);
        } else bpref += 1.0;
    }
    if (q->num_rel) bpref /= q->num_rel;
    return bpref;
}

static double m_infap(const qctx *q) {
    long nonrel_so_far = 0, rel_so_far = 0, unjudged_so_far = 0;
    double inf_ap = 0.0;
    for (long j = 0; j < q->num_ret; j++) {
        long r = q->relv[j];
        if (r == RELV_NONPOOL) continue;
        if (r == RELV_UNJUDGED) {
            unjudged_so_far++;
            continue;
        }
        if (r >= 0 && r < q->level) {
            nonrel_so_far++;
            continue;
        }
        rel_so_far++;
        if (j == 0) inf_ap += 1.0;
        else {
            double fj = (double)j;
            inf_ap += 1.0 / (fj + 1.0) + (fj / (fj + 1.0)) * ((rel_so_far - 1 + nonrel_so_far + unjudged_so_far) / fj) *
                                             ((rel_so_far - 1 + INFAP_EPSILON) /
                                              (rel_so_far - 1 + nonrel_so_far + 2 * INFAP_EPSILON));
        }
    }
    if (q->num_rel) inf_ap /= q->num_rel;
    return inf_ap;
}

/* iprec_at_recall and 11pt_avg: interpolated precision at recall points. */
static void iprec(const qctx *q, const double *pts, int npts, double *out, long *cut) {
    for (int i = 0; i < npts; i++) {
        cut[i] = (long)(pts[i] * q->num_rel + 0.9);
        out[i] = 0.0; /* points past the relevant retrieved stay 0 */
    }
    long cc = npts - 1;
    while (cc >= 0 && cut[cc] > q->num_rel_ret) cc--;
    double precis = (double)q->num_rel_ret / (double)q->num_ret, int_precis = precis;
    long rel_so_far = q->num_rel_ret;
    for (long i = q->num_ret; i > 0 && rel_so_far > 0; i--) {
        precis = (double)rel_so_far / (double)i;
        if (int_precis < precis) int_precis = precis;
        if (q->relv[i - 1] >= q->level) {
            while (cc >= 0 && rel_so_far == cut[cc]) out[cc--] = int_precis;
            rel_so_far--;
        }
    }
    while (cc >= 0) out[cc--] = int_precis;
}

static void m_rprec_mult(const qctx *q, const double *pts, int npts, double *out, long *cut) {
    for (int i = 0; i < npts; i++) {
        cut[i] = (long)(pts[i] * q->num_rel + 0.9);
        out[i] = 0.0;
    }
    long cc = npts - 1;
    while (cc >= 0 && cut[cc] > q->num_ret) {
        out[cc] = (double)q->num_rel_ret / (double)cut[cc];
        cc--;
    }
    long rel_so_far = q->num_rel_ret;
    for (long i = q->num_ret; i > 0 && rel_so_far > 0; i--) {
        double precis = (double)rel_so_far / (double)i;
        while (cc >= 0 && i == cut[cc]) out[cc--] = precis;
        if (q->relv[i - 1] >= q->level) rel_so_far--;
    }
}

/* P, recall, map_cut, relative_P, success: a value at each cutoff; a
 * cutoff past the ranking counts the missing ranks as non-relevant. */
static double cut_value(int k, const qctx *q, long at, long rel_so_far, double sum) {
    switch (k) {
    case M_P: return (double)rel_so_far / (double)at;
    case M_RECALL: return (double)rel_so_far / (double)q->num_rel;
    case M_MAP_CUT: return sum / (double)q->num_rel;
    case M_RELATIVE_P: return (double)rel_so_far / (double)(at > q->num_rel ? q->num_rel : at);
    default: return rel_so_far ? 1.0 : 0.0; /* success */
    }
}

static void at_cutoffs(int k, const qctx *q, const double *cuts, int ncuts, double *out) {
    for (int c = 0; c < ncuts; c++) out[c] = 0.0;
    if ((k == M_RECALL || k == M_MAP_CUT || k == M_RELATIVE_P) && q->num_rel == 0) return;
    long rel_so_far = 0;
    double sum = 0.0;
    int c = 0;
    for (long i = 0; i < q->num_ret; i++) {
        if (i == (long)cuts[c]) {
            out[c] = cut_value(k, q, i, rel_so_far, sum);
            if (++c == ncuts) return;
        }
        if (q->relv[i] >= q->level) {
            rel_so_far++;
            sum += (double)rel_so_far / (double)(i + 1);
        }
    }
    for (; c < ncuts; c++) out[c] = cut_value(k, q, (long)cuts[c], rel_so_far, sum);
}

static void m_ndcg_cut(const qctx *q, const double *cuts, int ncuts, double *out) {
    double sum = 0.0;
    int c = 0;
    for (long i = 0; i < q->num_ret; i++) {
        if (i == (long)cuts[c]) {
            out[c] = sum;
            if (++c == ncuts) break;
        }
        double gain = (double)q->relv[i];
        if (gain > 0) sum += gain / log2((double)(i + 2));
    }
    for (; c < ncuts; c++) out[c] = sum;
    /* the ideal DCG from the judged levels, normalising each value */
    c = 0;
    long lvl = q->num_rel_levels - 1, count = 0;
    double ideal = 0.0;
    for (long i = 0;; i++) {
        count++;
        while (lvl > 0 && count > q->rel_levels[lvl]) {
            lvl--;
            count = 1;
        }
        if (lvl <= 0) break;
        if (i == (long)cuts[c]) {
            if (ideal > 0.0) out[c] /= ideal;
            if (++c == ncuts) break;
        }
        ideal += (double)lvl / (double)log2((double)(i + 2));
    }
    for (; c < ncuts; c++)
        if (ideal > 0.0) out[c] /= ideal;
}

static void m_relstring(const qctx *q, double len_param, char *s) {
    long len = (long)len_param < q->num_ret ? (long)len_param : q->num_ret;
    if (len < 0) len = 0;
    for (long i = 0; i < len; i++) {
        long r = q->relv[i];
        s[i] = r > 9 ? '>' : r >= 0 ? (char)('0' + r) : r == RELV_NONPOOL ? '-' : r == RELV_UNJUDGED ? '.' : '<';
    }
    s[len] = '\0';
}

/* values[slot] (and texts for relstring) for one query. */
static qac_status score_query(const measure_set *m, const qac_qrels *qrels, size_t qi, const qac_run *run, size_t ri,
                              const qac_eval_params *p, scratch *s, gains *gs, long *cutbuf, double *values,
                              const char **text) {
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
    for (size_t j = 0; j < n; j++) s->rk[j] = (ranked){docids[j], (float)scores[j], j};
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

    qctx q = {0};
    q.level = p->rel_level;
    q.num_ret = (long)n;
    q.relv = s->relv;
    const int *rels;
    size_t nj = qac_qrels_judged(qrels, qi, NULL, &rels);
    long max_rel = -1;
    for (size_t j = 0; j < nj; j++)
        if (rels[j] > max_rel) max_rel = rels[j];
    cap = s->cap_levels;
    if ((st = grow((void **)&s->levels, &cap, (size_t)max_rel + 2, sizeof *s->levels))) return st;
    s->cap_levels = cap;
    memset(s->levels, 0, ((size_t)max_rel + 1) * sizeof *s->levels);
    for (size_t j = 0; j < nj; j++)
        if (rels[j] >= 0) s->levels[rels[j]]++;
    q.rel_levels = s->levels;
    q.num_rel_levels = max_rel + 1; /* the top level is always populated */
    for (long i = 0; i <= max_rel; i++)
        if (i >= q.level) q.num_rel += s->levels[i];
    for (size_t j = 0; j < n; j++) {
        int rel;
        if (!qac_qrels_rel(qrels, qi, s->rk[j].docid, &rel)) {
            s->relv[j] = RELV_NONPOOL;
            q.num_nonpool++;
        } else if (rel < 0) {
            s->relv[j] = RELV_UNJUDGED;
            q.num_unjudged++;
        } else {
            s->relv[j] = rel;
            if (rel >= q.level) q.num_rel_ret++;
        }
    }

    int slot = 0;
    for (int k = 0; k < M_COUNT; k++) {
        if (!m->on[k]) continue;
        double *v = values + slot;
        const double *par = m->par[k];
        int np = m->npar[k];
        switch (k) {
        case M_RUNID:
        case M_NUM_Q: v[0] = 1; break;
        case M_NUM_RET: v[0] = (double)q.num_ret; break;
        case M_NUM_REL: v[0] = (double)q.num_rel; break;
        case M_NUM_REL_RET: v[0] = (double)q.num_rel_ret; break;
        case M_MAP: v[0] = m_ap(&q); break;
        case M_GM_MAP: {
            double ap = m_ap(&q);
            v[0] = log(ap > MIN_GEO_MEAN ? ap : MIN_GEO_MEAN);
            break;
        }
        case M_RPREC: {
            long look = q.num_ret < q.num_rel ? q.num_ret : q.num_rel, so_far = 0;
            for (long i = 0; i < look; i++) so_far += q.relv[i] >= q.level;
            v[0] = look ? (double)so_far / (double)q.num_rel : 0.0;
            break;
        }
        case M_BPREF: v[0] = m_bpref(&q); break;
        case M_GM_BPREF: {
            double b = m_bpref(&q);
            v[0] = log(b > MIN_GEO_MEAN ? b : MIN_GEO_MEAN);
            break;
        }
        case M_RECIP_RANK: {
            v[0] = 0.0;
            for (long i = 0; i < q.num_ret; i++)
                if (q.relv[i] >= q.level) {
                    v[0] = 1.0 / (double)(i + 1);
                    break;
                }
            break;
        }
        case M_IPREC_AT_RECALL: iprec(&q, par, np, v, cutbuf); break;
        case M_11PT_AVG: {
            double sum = 0.0, tmpv[64], *t = np <= 64 ? tmpv : malloc((size_t)np * sizeof *t);
            if (!t) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
            iprec(&q, par, np, t, cutbuf);
            for (int i = np - 1; i >= 0; i--) sum += t[i];
            if (t != tmpv) free(t);
            v[0] = sum / (double)np;
            break;
        }
        case M_RPREC_MULT: m_rprec_mult(&q, par, np, v, cutbuf); break;
        case M_P:
        case M_RECALL:
        case M_MAP_CUT:
        case M_RELATIVE_P:
        case M_SUCCESS: at_cutoffs(k, &q, par, np, v); break;
        case M_NDCG_CUT: m_ndcg_cut(&q, par, np, v); break;
        case M_RELSTRING: {
            long len = (long)par[0] < q.num_ret ? (long)par[0] : q.num_ret;
            size_t need = (size_t)(len > 0 ? len : 0) + 1;
            cap = s->cap_str;
            if ((st = grow((void **)&s->str, &cap, need, 1))) return st;
            s->cap_str = cap;
            m_relstring(&q, par[0], s->str);
            text[slot] = s->str;
            v[0] = 0;
            break;
        }
        case M_INFAP: v[0] = m_infap(&q); break;
        case M_UTILITY:
            v[0] = par[0] * q.num_rel_ret + par[1] * (q.num_ret - q.num_rel_ret) + par[2] * (q.num_rel - q.num_rel_ret) +
                   par[3] * (0 /* -N, the collection size: not supported */ + q.num_rel_ret - q.num_ret - q.num_rel);
            break;
        case M_BING: {
            double sum = 0.0;
            long so_far = 0;
            for (long i = 0; i < q.num_ret; i++)
                if (q.relv[i] >= q.level) {
                    so_far++;
                    sum += (double)1.0 / (double)log2((double)(3 + i - so_far));
                }
            v[0] = so_far ? sum / (double)q.num_rel : 0.0;
            break;
        }
        case M_G:
        case M_NDCG:
        case M_NDCG_REL:
        case M_RNDCG:
            if ((st = setup_gains(gs, &q, m, k))) return st;
            v[0] = k == M_G ? m_g(&q, gs) : k == M_NDCG ? m_ndcg(&q, gs) : k == M_NDCG_REL ? m_ndcg_rel(&q, gs)
                                                                                       : m_rndcg(&q, gs);
            break;
        case M_SET_P: v[0] = q.num_ret ? (double)q.num_rel_ret / (double)q.num_ret : 0.0; break;
        case M_SET_RELATIVE_P:
            v[0] = q.num_ret && q.num_rel
                       ? (double)q.num_rel_ret / (double)(q.num_ret < q.num_rel ? q.num_ret : q.num_rel)
                       : 0.0;
            break;
        case M_SET_RECALL: v[0] = q.num_rel ? (double)q.num_rel_ret / (double)q.num_rel : 0.0; break;
        case M_SET_MAP:
            v[0] = q.num_ret && q.num_rel ? ((double)q.num_rel_ret * (double)q.num_rel_ret) /
                                                ((double)q.num_ret * (double)q.num_rel)
                                          : 0.0;
            break;
        case M_SET_F:
            v[0] = 0.0;
            if (q.num_rel_ret) {
                double P = (double)q.num_rel_ret / (double)q.num_ret, R = (double)q.num_rel_ret / (double)q.num_rel,
                       x = par[0];
                v[0] = (x + 1.0) * P * R / (x * P + R);
            }
            break;
        case M_NUM_NONREL_JUDGED_RET:
            v[0] = (double)(q.num_ret - q.num_nonpool - q.num_unjudged - q.num_rel_ret);
            break;
        }
        slot += nslots_of(m, k);
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

/* A slot's printed name, as trec_eval builds it. */
static qac_status slot_name(char **out, const measure_set *m, int k, int c) {
    char name[512];
    const char *base = measure_info[k].name;
    switch (measure_info[k].params) {
    case P_CUT_LONG: snprintf(name, sizeof name, "%s_%ld", base, (long)m->par[k][c]); break;
    case P_CUT_FLOAT: snprintf(name, sizeof name, "%s_%3.2f", base, m->par[k][c]); break;
    case P_FLOATS:
    case P_PAIRS:
        if (m->printable[k]) snprintf(name, sizeof name, "%s_%s", base, m->printable[k]);
        else snprintf(name, sizeof name, "%s", base);
        break;
    default: snprintf(name, sizeof name, "%s", base); break;
    }
    *out = strdup(name);
    return *out ? QAC_OK : qac_set_error(QAC_ERR_NOMEM, "out of memory");
}

qac_status qac_eval_compute(qac_eval_result **out, const qac_qrels *qrels, const qac_run *run,
                            const char *const *measures, int n, const qac_eval_params *params) {
    *out = NULL;
    if (!qrels || !run || n < 0 || (n > 0 && !measures))
        return qac_set_error(QAC_ERR_INVALID, "eval: bad arguments");
    qac_eval_params p = params ? *params : (qac_eval_params){0, 1, 0};
    measure_set m;
    memset(&m, 0, sizeof m);
    qac_eval_result *res = NULL;
    scratch s = {0};
    gains gs = {0};
    double *values = NULL, *sums = NULL;
    const char **texts = NULL;
    long *cutbuf = NULL;
    qac_status st = QAC_OK;
    if (n == 0) st = parse_measure(&m, "official");
    for (int i = 0; i < n && !st; i++) {
        if (!measures[i]) st = qac_set_error(QAC_ERR_INVALID, "eval: NULL measure");
        else st = parse_measure(&m, measures[i]);
    }
    if (st || (st = apply_defaults(&m))) goto done;

    res = calloc(1, sizeof *res);
    int nslots = 0, maxpar = 1;
    for (int k = 0; k < M_COUNT; k++)
        if (m.on[k]) {
            nslots += nslots_of(&m, k);
            if (m.npar[k] > maxpar) maxpar = m.npar[k];
        }
    if (!res || !(res->names = calloc((size_t)nslots, sizeof *res->names)) ||
        !(res->kind = calloc((size_t)nslots, sizeof *res->kind)) ||
        !(values = calloc((size_t)nslots, sizeof *values)) || !(sums = calloc((size_t)nslots, sizeof *sums)) ||
        !(texts = calloc((size_t)nslots, sizeof *texts)) || !(cutbuf = calloc((size_t)maxpar, sizeof *cutbuf))) {
        st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int k = 0; k < M_COUNT; k++) {
        if (!m.on[k]) continue;
        for (int c = 0; c < nslots_of(&m, k); c++) {
            res->kind[res->nslots] = measure_info[k].kind;
            if ((st = slot_name(&res->names[res->nslots++], &m, k, c))) goto done;
        }
    }

    long evaluated = 0;
    for (size_t ri = 0; ri < qac_run_num_queries(run); ri++) {
        long qi = qac_qrels_find(qrels, qac_run_qid(run, ri));
        if (qi < 0) continue; /* trec_eval skips run queries without judgements */
        if ((st = score_query(&m, qrels, (size_t)qi, run, ri, &p, &s, &gs, cutbuf, values, texts))) goto done;
        for (int j = 0; j < nslots; j++) {
            sums[j] += values[j];
            value_kind kd = res->kind[j];
            /* trec_eval prints neither num_q, the geometric means nor runid per query */
            if (kd == K_NUMQ || kd == K_GM || kd == K_RUNID) continue;
            if ((st = add_row(res, j, qac_run_qid(run, ri), values[j], kd == K_RELSTRING ? texts[j] : NULL)))
                goto done;
        }
        evaluated++;
    }
    if (evaluated == 0) {
        st = qac_set_error(QAC_ERR_INVALID, "no query has both results in the run and judgements in the qrels (do their query ids match?)");
        goto done;
    }
    res->first_summary = res->nrows;
    long nq_qrels = (long)qac_qrels_num_queries(qrels), denom = p.complete ? nq_qrels : evaluated;
    int slot = 0;
    for (int k = 0; k < M_COUNT; k++) {
        if (!m.on[k]) continue;
        for (int c = 0; c < nslots_of(&m, k); c++, slot++) {
            double v = sums[slot];
            switch (measure_info[k].kind) {
            case K_RELSTRING: continue; /* per query only */
            case K_RUNID:
                if ((st = add_row(res, slot, "all", 0, qac_run_id(run)))) goto done;
                continue;
            case K_NUMQ: v = (double)denom; break;
            case K_COUNT:
                /* trec_eval 9.0.x with -c counts rel > 0 over every qrels query, whatever -l says */
                if (k == M_NUM_REL && p.complete) v = (double)count_positive(qrels);
                break;
            case K_GM:
                /* -c: each missing query counts as the floor, since 0 would be perfection */
                if (p.complete) v += (double)(denom - evaluated) * log(MIN_GEO_MEAN);
                v = exp((double)(v / denom));
                break;
            case K_FLOAT: v /= (double)denom; break;
            }
            if ((st = add_row(res, slot, "all", v, NULL))) goto done;
        }
    }
done:
    measure_set_free(&m);
    free(s.rk);
    free(s.tmp);
    free(s.relv);
    free(s.levels);
    free(s.str);
    free(gs.g);
    free(gs.tmp);
    free(values);
    free(sums);
    free(texts);
    free(cutbuf);
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
    if (is_count) *is_count = r ? res->kind[r->slot] == K_COUNT || res->kind[r->slot] == K_NUMQ : 0;
}

const char *qac_eval_row_text(const qac_eval_result *res, size_t i) {
    return res && i < res->nrows ? res->rows[i].text : NULL;
}

qac_status qac_eval_summary(const qac_eval_result *res, const char *measure, double *value) {
    if (!res || !measure) return qac_set_error(QAC_ERR_INVALID, "eval: bad arguments");
    for (size_t i = res->first_summary; i < res->nrows; i++)
        if (strcmp(res->names[res->rows[i].slot], measure) == 0 && !res->rows[i].text) {
            if (value) *value = res->rows[i].value;
            return QAC_OK;
        }
    return qac_set_error(QAC_ERR_NOT_FOUND, "measure '%s' was not computed", measure);
}

qac_status qac_eval_write(FILE *f, const qac_eval_result *res, int per_query, int digits) {
    if (!f || !res || digits < 0 || digits > 17) return qac_set_error(QAC_ERR_INVALID, "eval: bad arguments");
    for (size_t i = per_query ? 0 : res->first_summary; i < res->nrows; i++) {
        const eval_row *r = &res->rows[i];
        const char *name = res->names[r->slot];
        int rc;
        switch (res->kind[r->slot]) {
        case K_COUNT:
        case K_NUMQ: rc = fprintf(f, "%-22s\t%s\t%ld\n", name, r->qid, (long)r->value); break;
        case K_RUNID: rc = fprintf(f, "%-22s\t%s\t%s\n", name, r->qid, r->text); break;
        case K_RELSTRING: rc = fprintf(f, "%-22s\t%s\t'%s'\n", name, r->qid, r->text); break;
        default: rc = fprintf(f, "%-22s\t%s\t%*.*f\n", name, r->qid, digits + 2, digits, r->value); break;
        }
        if (rc < 0) return qac_set_error(QAC_ERR_IO, "writing the measures: %s", strerror(errno));
    }
    return QAC_OK;
}
