/* Fine-tuning examples and Tevatron's seeded group sampling
 * (api/qac_finetune.h states the rule). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qac_eval.h"
#include "qac_finetune.h"
#include "qac_jsonl.h"
#include "qac_rng.h"
#include "qac_util.h"
#include "textmap.h"

void qac_ft_sample(uint64_t seed, uint64_t ex, uint64_t epoch, int n_pos, int n_neg, int n, int *pos, int *neg) {
    uint64_t h = qac_rng_key(seed, ex, QAC_FT_STREAM_POS, 0);
    *pos = n_pos > 0 ? (int)((h + epoch) % (uint64_t)n_pos) : 0;
    int k = n - 1;
    if (k <= 0 || n_neg <= 0) return;
    if (n_neg < k) {
        uint64_t r = qac_rng_key(seed, ex, QAC_FT_STREAM_REPL, epoch);
        for (int j = 0; j < k; j++) neg[j] = (int)qac_rng_below(r, (uint64_t)j, (uint64_t)n_neg);
        return;
    }
    /* the shuffle is recomputed per call: pools are tens of passages */
    int stack[256], *perm = n_neg <= 256 ? stack : malloc((size_t)n_neg * sizeof *perm);
    if (!perm) { /* cannot happen for sane pools; fall back to the unshuffled window */
        for (int j = 0; j < k; j++) neg[j] = (int)((epoch * (uint64_t)k + (uint64_t)j) % (uint64_t)n_neg);
        return;
    }
    uint64_t key = qac_rng_key(seed, ex, QAC_FT_STREAM_NEG, 0);
    for (int i = 0; i < n_neg; i++) perm[i] = i;
    for (int i = n_neg - 1; i > 0; i--) {
        int j = (int)qac_rng_below(key, (uint64_t)i, (uint64_t)i + 1), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    uint64_t off = (epoch * (uint64_t)k) % (uint64_t)n_neg;
    for (int j = 0; j < k; j++) neg[j] = perm[(off + (uint64_t)j) % (uint64_t)n_neg];
    if (perm != stack) free(perm);
}

qac_status qac_ft_order(uint64_t seed, uint64_t epoch, size_t n_examples, size_t *perm) {
    uint64_t key = qac_rng_key(seed, epoch, QAC_FT_STREAM_ORDER, 0);
    for (size_t i = 0; i < n_examples; i++) perm[i] = i;
    for (size_t i = n_examples; i-- > 1;) {
        size_t j = (size_t)qac_rng_below(key, i, i + 1), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    return QAC_OK;
}

typedef struct example {
    size_t qid, query; /* arena offsets */
    size_t pos0, neg0; /* first passage of each list in d->ps */
    int npos, nneg;
} example;

typedef struct passage {
    size_t docid, text;
} passage;

struct qac_ft_data {
    qac_title_join join;
    char sep[64]; /* " <sep token> " */
    char *arena;
    size_t len, cap;
    example *ex;
    size_t n_ex, ex_cap;
    passage *ps;
    size_t n_ps, ps_cap;
    long no_pos, no_neg;
    int finished;
};

qac_status qac_ft_data_create(qac_ft_data **out, qac_title_join join) {
    *out = calloc(1, sizeof **out);
    if (!*out) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    (*out)->join = join;
    return QAC_OK;
}

qac_status qac_ft_data_set_sep(qac_ft_data *d, const char *sep_token) {
    const char *t = sep_token && *sep_token ? sep_token : "[SEP]";
    if (strlen(t) + 3 > sizeof d->sep)
        return qac_set_error(QAC_ERR_INVALID, "training data: separator token \"%.40s\" too long", t);
    snprintf(d->sep, sizeof d->sep, " %s ", t);
    return QAC_OK;
}

void qac_ft_data_free(qac_ft_data *d) {
    if (!d) return;
    free(d->arena), free(d->ex), free(d->ps), free(d);
}

static qac_status put_str(qac_ft_data *d, const char *s, size_t *off) {
    return qac_arena_put(&d->arena, &d->len, &d->cap, s, off);
}

/* append one passage; text is "title [SEP] body", the model's separator
 * token (or joined by a space) */
static qac_status add_passage(qac_ft_data *d, const char *docid, const char *title, const char *body) {
    if (d->n_ps == d->ps_cap) {
        size_t nc = d->ps_cap ? d->ps_cap * 2 : 4096;
        passage *np = realloc(d->ps, nc * sizeof *np);
        if (!np) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        d->ps = np, d->ps_cap = nc;
    }
    passage *p = &d->ps[d->n_ps];
    qac_status st = put_str(d, docid, &p->docid);
    if (st) return st;
    if (title && *title) {
        const char *sep = d->join == QAC_TITLE_SEP ? (d->sep[0] ? d->sep : " [SEP] ") : " ";
        size_t tl = strlen(title), sl = strlen(sep), bl = strlen(body);
        char *joined = malloc(tl + sl + bl + 1);
        if (!joined) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        memcpy(joined, title, tl), memcpy(joined + tl, sep, sl), memcpy(joined + tl + sl, body, bl + 1);
        st = put_str(d, joined, &p->text);
        free(joined);
    } else {
        st = put_str(d, body, &p->text);
    }
    if (!st) d->n_ps++;
    return st;
}

static qac_status begin_example(qac_ft_data *d, const char *qid, const char *query, example **out) {
    if (d->finished) return qac_set_error(QAC_ERR_INVALID, "training data: already finished");
    if (d->n_ex == d->ex_cap) {
        size_t nc = d->ex_cap ? d->ex_cap * 2 : 1024;
        example *ne = realloc(d->ex, nc * sizeof *ne);
        if (!ne) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        d->ex = ne, d->ex_cap = nc;
    }
    example *e = &d->ex[d->n_ex];
    memset(e, 0, sizeof *e);
    qac_status st = put_str(d, qid, &e->qid);
    if (!st) st = put_str(d, query, &e->query);
    *out = e;
    return st;
}

/* ---- Tevatron jsonl ---- */

/* a string or integer field as text into buf (ids may be numbers) */
static qac_status add_psg_list(qac_ft_data *d, json_t *list, const char *key, const char *path, long line,
                               int *count) {
    *count = 0;
    if (!list) {
        if (!strcmp(key, "negative_passages")) return QAC_OK; /* optional */
        return qac_set_error(QAC_ERR_FORMAT, "%s:%ld: missing \"%s\"", path, line, key);
    }
    if (!json_is_array(list)) return qac_set_error(QAC_ERR_FORMAT, "%s:%ld: \"%s\" is not an array", path, line, key);
    size_t i;
    json_t *p;
    json_array_foreach(list, i, p) {
        if (!json_is_object(p))
            return qac_set_error(QAC_ERR_FORMAT, "%s:%ld: %s[%zu] is not an object", path, line, key, i);
        json_t *text = json_object_get(p, "text"), *title = json_object_get(p, "title");
        char buf[QAC_JSON_ID_BUF];
        json_t *docid_v = json_object_get(p, "docid");
        const char *docid = docid_v ? qac_json_id_text(docid_v, buf) : "";
        if (!json_is_string(text))
            return qac_set_error(QAC_ERR_FORMAT, "%s:%ld: %s[%zu] has no string \"text\"", path, line, key, i);
        if (!docid) return qac_set_error(QAC_ERR_FORMAT, "%s:%ld: %s[%zu] \"docid\" is not a string or integer",
                                         path, line, key, i);
        if (title && !json_is_string(title) && !json_is_null(title))
            return qac_set_error(QAC_ERR_FORMAT, "%s:%ld: %s[%zu] \"title\" is not a string", path, line, key, i);
        qac_status st = add_passage(d, docid, json_is_string(title) ? json_string_value(title) : "",
                                    json_string_value(text));
        if (st) return st;
        (*count)++;
    }
    return QAC_OK;
}

qac_status qac_ft_data_add_tevatron(qac_ft_data *d, const char *path) {
    qac_lines *lr;
    qac_status st = qac_lines_open(&lr, path);
    if (st) return st;
    json_t *o;
    for (int got; !st && !(st = qac_jsonl_next(lr, &o, &got)) && got; json_decref(o)) {
        long line = qac_lines_lineno(lr);
        char idb[QAC_JSON_ID_BUF];
        json_t *qv = json_object_get(o, "query"), *qidv = json_object_get(o, "query_id");
        const char *qid = qidv ? qac_json_id_text(qidv, idb) : NULL;
        if (!qid) st = qac_set_error(QAC_ERR_FORMAT, "%s:%ld: missing \"query_id\" (string or integer)", path, line);
        else if (!json_is_string(qv)) st = qac_set_error(QAC_ERR_FORMAT, "%s:%ld: missing string \"query\"", path, line);
        if (st) continue;
        example *e;
        size_t ps0 = d->n_ps, len0 = d->len;
        int np = 0, nn = 0;
        if (!(st = begin_example(d, qid, json_string_value(qv), &e))) {
            e->pos0 = d->n_ps;
            st = add_psg_list(d, json_object_get(o, "positive_passages"), "positive_passages", path, line, &np);
        }
        if (!st) {
            e->neg0 = d->n_ps;
            st = add_psg_list(d, json_object_get(o, "negative_passages"), "negative_passages", path, line, &nn);
        }
        if (!st && np == 0) {
            d->no_pos++; /* skipped: drop what this line added */
            d->n_ps = ps0, d->len = len0;
        } else if (!st) {
            e->npos = np, e->nneg = nn;
            d->n_ex++;
        }
    }
    qac_lines_free(lr);
    return st;
}

/* ---- MS MARCO forms: ids looked up in queries and corpus ---- */

typedef struct staged {
    char **pos, **neg;
    int npos, nneg, cpos, cneg;
} staged;

static qac_status push_id(char ***list, int *n, int *cap, const char *id) {
    for (int i = 0; i < *n; i++)
        if (!strcmp((*list)[i], id)) return QAC_OK;
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 8;
        char **nl = realloc(*list, (size_t)nc * sizeof *nl);
        if (!nl) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        *list = nl, *cap = nc;
    }
    if (!((*list)[*n] = strdup(id))) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    (*n)++;
    return QAC_OK;
}

typedef struct stage_set {
    qac_strmap *qids;
    char **qid;
    staged *s;
    size_t n, cap;
} stage_set;

static qac_status stage_get(stage_set *ss, const char *qid, staged **out) {
    long i = qac_strmap_get(ss->qids, qid);
    if (i < 0) {
        if (ss->n == ss->cap) {
            size_t nc = ss->cap ? ss->cap * 2 : 1024;
            staged *ns = realloc(ss->s, nc * sizeof *ns);
            char **nq = ns ? realloc(ss->qid, nc * sizeof *nq) : NULL;
            if (ns) ss->s = ns;
            if (!nq) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
            ss->qid = nq, ss->cap = nc;
        }
        memset(&ss->s[ss->n], 0, sizeof *ss->s);
        if (!(ss->qid[ss->n] = strdup(qid))) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        qac_status st = qac_strmap_put(ss->qids, qid, (long)ss->n);
        if (st) return st;
        i = (long)ss->n++;
    }
    *out = &ss->s[i];
    return QAC_OK;
}

static void stage_free(stage_set *ss) {
    for (size_t i = 0; i < ss->n; i++) {
        for (int j = 0; j < ss->s[i].npos; j++) free(ss->s[i].pos[j]);
        for (int j = 0; j < ss->s[i].nneg; j++) free(ss->s[i].neg[j]);
        free(ss->s[i].pos), free(ss->s[i].neg), free(ss->qid[i]);
    }
    free(ss->s), free(ss->qid);
    qac_strmap_free(ss->qids);
}

/* staged queries in first-seen order become examples */
static qac_status stage_emit(qac_ft_data *d, stage_set *ss, const qac_textmap *queries, const qac_textmap *corpus,
                             const char *what, const char *qpath, const char *cpath) {
    for (size_t i = 0; i < ss->n; i++) {
        staged *s = &ss->s[i];
        const char *qtext;
        if (!qac_textmap_get(queries, ss->qid[i], NULL, &qtext))
            return qac_set_error(QAC_ERR_NOT_FOUND, "%s: query id '%s' is not in %s", what, ss->qid[i], qpath);
        if (s->npos == 0) {
            d->no_pos++;
            continue;
        }
        example *e;
        qac_status st = begin_example(d, ss->qid[i], qtext, &e);
        if (st) return st;
        e->pos0 = d->n_ps;
        for (int k = 0; k < s->npos + s->nneg && !st; k++) {
            const char *id = k < s->npos ? s->pos[k] : s->neg[k - s->npos], *title, *body;
            if (k == s->npos) e->neg0 = d->n_ps;
            if (!qac_textmap_get(corpus, id, &title, &body))
                return qac_set_error(QAC_ERR_NOT_FOUND, "%s: passage id '%s' is not in %s", what, id, cpath);
            st = add_passage(d, id, title, body);
        }
        if (s->nneg == 0) e->neg0 = d->n_ps;
        if (st) return st;
        e->npos = s->npos, e->nneg = s->nneg;
        d->n_ex++;
    }
    return QAC_OK;
}

static qac_status load_maps(const char *queries, const char *corpus, qac_textmap **q, qac_textmap **c) {
    *q = *c = NULL;
    qac_status st = qac_textmap_load(q, queries, QAC_READ_QUERIES, QAC_FMT_AUTO);
    if (!st) st = qac_textmap_load(c, corpus, QAC_READ_CORPUS, QAC_FMT_AUTO);
    return st;
}

qac_status qac_ft_data_add_triples(qac_ft_data *d, const char *triples, const char *queries, const char *corpus) {
    qac_textmap *q, *c;
    stage_set ss = {0};
    qac_lines *lr = NULL;
    char *buf = NULL; /* the line, cut at its tabs */
    size_t cap = 0;
    qac_status st = load_maps(queries, corpus, &q, &c);
    if (!st) st = qac_strmap_create(&ss.qids);
    if (!st) st = qac_lines_open(&lr, triples);
    const char *line;
    size_t n;
    for (int got; !st && !(st = qac_lines_next(lr, &line, &n, &got)) && got;) {
        if (n == 0) continue;
        if (n + 1 > cap) {
            char *nb = realloc(buf, n + 1);
            if (!nb) {
                st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
                break;
            }
            buf = nb, cap = n + 1;
        }
        memcpy(buf, line, n + 1);
        char *save = NULL, *a = strtok_r(buf, "\t", &save), *b = strtok_r(NULL, "\t", &save),
             *c3 = strtok_r(NULL, "\t", &save), *extra = strtok_r(NULL, "\t", &save);
        staged *s;
        if (!a || !b || !c3 || extra)
            st = qac_set_error(QAC_ERR_FORMAT, "%s:%ld: expected 'qid<TAB>positive pid<TAB>negative pid'", triples,
                               qac_lines_lineno(lr));
        else if (!(st = stage_get(&ss, a, &s)) && !(st = push_id(&s->pos, &s->npos, &s->cpos, b)))
            st = push_id(&s->neg, &s->nneg, &s->cneg, c3);
    }
    free(buf);
    qac_lines_free(lr);
    if (!st) st = stage_emit(d, &ss, q, c, triples, queries, corpus);
    stage_free(&ss);
    qac_textmap_free(q), qac_textmap_free(c);
    return st;
}

qac_status qac_ft_data_add_qrels(qac_ft_data *d, const char *qrels_path, const char *queries, const char *corpus) {
    qac_textmap *q, *c;
    qac_qrels *qr = NULL;
    stage_set ss = {0};
    qac_status st = load_maps(queries, corpus, &q, &c);
    if (!st) st = qac_strmap_create(&ss.qids);
    if (!st) st = qac_qrels_load(&qr, qrels_path, QAC_QRELS_AUTO);
    for (size_t i = 0; !st && qr && i < qac_qrels_num_queries(qr); i++) {
        const char *const *docids;
        const int *rels;
        size_t nj = qac_qrels_judged(qr, i, &docids, &rels);
        staged *s;
        st = stage_get(&ss, qac_qrels_qid(qr, i), &s);
        for (size_t j = 0; j < nj && !st; j++)
            if (rels[j] >= 1) st = push_id(&s->pos, &s->npos, &s->cpos, docids[j]);
    }
    if (!st) st = stage_emit(d, &ss, q, c, qrels_path, queries, corpus);
    stage_free(&ss);
    qac_qrels_free(qr);
    qac_textmap_free(q), qac_textmap_free(c);
    return st;
}

qac_status qac_ft_data_finish(qac_ft_data *d, int n) {
    if (n < 1) return qac_set_error(QAC_ERR_INVALID, "training data: passages per query must be >= 1");
    size_t k = 0;
    for (size_t i = 0; i < d->n_ex; i++) {
        if (n > 1 && d->ex[i].nneg == 0) {
            d->no_neg++;
            continue;
        }
        d->ex[k++] = d->ex[i];
    }
    d->n_ex = k;
    d->finished = 1;
    if (k == 0)
        return qac_set_error(QAC_ERR_INVALID,
                             "the training set is empty (%ld queries without a positive, %ld without negatives "
                             "for --n-passages %d)",
                             d->no_pos, d->no_neg, n);
    return QAC_OK;
}

size_t qac_ft_data_count(const qac_ft_data *d) { return d->n_ex; }
long qac_ft_data_skipped_no_positive(const qac_ft_data *d) { return d->no_pos; }
long qac_ft_data_skipped_no_negative(const qac_ft_data *d) { return d->no_neg; }
const char *qac_ft_data_qid(const qac_ft_data *d, size_t i) { return d->arena + d->ex[i].qid; }
const char *qac_ft_data_query(const qac_ft_data *d, size_t i) { return d->arena + d->ex[i].query; }

uint64_t qac_ft_data_digest(const qac_ft_data *d) {
    qac_xxh64 h;
    qac_xxh64_init(&h);
    for (size_t i = 0; i < d->n_ex; i++) {
        const example *e = &d->ex[i];
        const char *q = d->arena + e->query;
        qac_xxh64_update(&h, q, strlen(q) + 1);
        int counts[2] = {e->npos, e->nneg};
        qac_xxh64_update(&h, counts, sizeof counts);
        for (int j = 0; j < e->npos + e->nneg; j++) {
            const passage *p = &d->ps[(j < e->npos ? e->pos0 + j : e->neg0 + j - e->npos)];
            qac_xxh64_update(&h, d->arena + p->text, strlen(d->arena + p->text) + 1);
        }
    }
    return qac_xxh64_digest(&h);
}

void qac_ft_data_group(const qac_ft_data *d, uint64_t seed, size_t i, uint64_t epoch, int n, const char **texts,
                       const char **docids) {
    const example *e = &d->ex[i];
    int pos, negs[1024];
    qac_ft_sample(seed, i, epoch, e->npos, e->nneg, n, &pos, negs);
    for (int j = 0; j < n; j++) {
        const passage *p = &d->ps[j == 0 ? e->pos0 + pos : e->neg0 + negs[j - 1]];
        if (texts) texts[j] = d->arena + p->text;
        if (docids) docids[j] = d->arena + p->docid;
    }
}

qac_status qac_ft_data_load(qac_ft_data **out, const qac_ft_sources *s, int n) {
    *out = NULL;
    if (s->n_tevatron <= 0 && !s->triples && !s->qrels)
        return qac_set_error(QAC_ERR_INVALID, "no training data: give Tevatron files, triples or qrels");
    if ((s->triples || s->qrels) && (!s->queries || !s->corpus))
        return qac_set_error(QAC_ERR_INVALID, "triples and qrels need a queries file and a corpus");
    qac_status st = qac_ft_data_create(out, s->title_join);
    if (!st && s->sep_token) st = qac_ft_data_set_sep(*out, s->sep_token);
    for (int i = 0; !st && i < s->n_tevatron; i++) st = qac_ft_data_add_tevatron(*out, s->tevatron[i]);
    if (!st && s->triples) st = qac_ft_data_add_triples(*out, s->triples, s->queries, s->corpus);
    if (!st && s->qrels) st = qac_ft_data_add_qrels(*out, s->qrels, s->queries, s->corpus);
    if (!st) st = qac_ft_data_finish(*out, n);
    return st;
}
