/* HLP pairs: dual-link and co-mention pairs mined from a link graph and
 * written as pre-training jsonl (api/qac_pretrain.h states the rule). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "qac_jsonl.h"
#include "qac_pretrain.h"
#include "qac_rng.h"
#include "qac_util.h"
#include "textmap.h"

typedef struct hdoc {
    char *id, *text, *title;
    char **links;  /* raw link ids, until resolved */
    int nlinks;
    long out0, in0; /* CSR offsets */
    int nout, nin;
} hdoc;

typedef struct graph {
    hdoc *d;
    long n, cap;
    qac_strmap *ids;
    long *out, *in; /* sorted neighbour lists */
    long duplicates;
} graph;

void qac_hlp_opts_default(qac_hlp_opts *o) {
    memset(o, 0, sizeof *o);
    o->dual_link = o->co_mention = 1;
    o->max_per_doc = 5;
    o->seed = 42;
    o->hub_top = 0.10;
}

static void graph_free(graph *g) {
    for (long i = 0; i < g->n; i++) {
        hdoc *h = &g->d[i];
        free(h->id), free(h->text), free(h->title);
        for (int k = 0; k < h->nlinks; k++) free(h->links[k]);
        free(h->links);
    }
    free(g->d), free(g->out), free(g->in);
    qac_strmap_free(g->ids);
}

static qac_status read_docs(graph *g, const qac_hlp_opts *o, int want_links) {
    qac_lines *lr;
    qac_status s = qac_lines_open(&lr, o->path);
    if (s) return s;
    json_t *obj;
    int got;
    while (!(s = qac_jsonl_next(lr, &obj, &got)) && got) {
        long ln = qac_lines_lineno(lr);
        json_t *text = json_object_get(obj, "text"), *title = json_object_get(obj, "title"),
               *links = json_object_get(obj, "links");
        char *id = qac_json_id_dup(json_object_get(obj, "id"));
        if (!id) s = qac_set_error(QAC_ERR_FORMAT, "%s:%ld: missing \"id\" (string or integer)", o->path, ln);
        else if (text && !json_is_string(text) && !json_is_null(text))
            s = qac_set_error(QAC_ERR_FORMAT, "%s:%ld: \"text\" is not a string", o->path, ln);
        else if (title && !json_is_string(title) && !json_is_null(title))
            s = qac_set_error(QAC_ERR_FORMAT, "%s:%ld: \"title\" is not a string", o->path, ln);
        else if (want_links && links && !json_is_array(links) && !json_is_null(links))
            s = qac_set_error(QAC_ERR_FORMAT, "%s:%ld: \"links\" is not an array", o->path, ln);
        size_t nl = want_links && json_is_array(links) ? json_array_size(links) : 0;
        for (size_t i = 0; !s && i < nl; i++) {
            json_t *v = json_array_get(links, i);
            if (!json_is_string(v) && !json_is_integer(v))
                s = qac_set_error(QAC_ERR_FORMAT, "%s:%ld: links[%zu] is not a string or integer", o->path, ln, i);
        }
        long dup = s ? -1 : qac_strmap_get(g->ids, id);
        if (dup >= 0) {
            /* a repeated id (Debian lists some packages once per architecture):
             * one node, the first record's text and title, the links of all */
            hdoc *h = &g->d[dup];
            char **l = nl ? realloc(h->links, (size_t)(h->nlinks + (int)nl) * sizeof *l) : h->links;
            if (nl && !l) s = qac_set_error(QAC_ERR_NOMEM, "out of memory");
            else h->links = l;
            for (size_t i = 0; !s && i < nl; i++)
                if (!(h->links[h->nlinks++] = qac_json_id_dup(json_array_get(links, i))))
                    s = qac_set_error(QAC_ERR_NOMEM, "out of memory");
            g->duplicates++;
            free(id);
            json_decref(obj);
            if (s) break;
            continue;
        }
        if (!s && g->n == g->cap) {
            long cap = g->cap ? g->cap * 2 : 1024;
            hdoc *d = realloc(g->d, (size_t)cap * sizeof *d);
            if (!d) s = qac_set_error(QAC_ERR_NOMEM, "out of memory");
            else g->d = d, g->cap = cap;
        }
        if (s) {
            free(id);
            json_decref(obj);
            break;
        }
        hdoc *h = &g->d[g->n++];
        memset(h, 0, sizeof *h);
        h->id = id;
        h->text = strdup(json_is_string(text) ? json_string_value(text) : "");
        h->title = strdup(json_is_string(title) ? json_string_value(title) : "");
        h->links = nl ? calloc(nl, sizeof *h->links) : NULL;
        int ok = h->text && h->title && (!nl || h->links);
        for (size_t i = 0; ok && i < nl; i++) ok = (h->links[h->nlinks++] = qac_json_id_dup(json_array_get(links, i))) != NULL;
        json_decref(obj);
        if (ok) s = qac_strmap_put(g->ids, id, g->n - 1);
        else s = qac_set_error(QAC_ERR_NOMEM, "out of memory");
        if (s) break;
        if (o->progress && g->n % 4096 == 0) o->progress(o->progress_user, "hlp read/records", (uint64_t)g->n, 0);
    }
    qac_lines_free(lr);
    return s;
}

typedef struct edge {
    long from, to;
} edge;

static int edge_cmp(const void *a, const void *b) {
    const edge *x = a, *y = b;
    if (x->from != y->from) return x->from < y->from ? -1 : 1;
    return (x->to > y->to) - (x->to < y->to);
}

typedef struct edges {
    edge *e;
    long n, cap;
} edges;

static qac_status add_edge(edges *es, graph *g, const char *from, const char *to, qac_hlp_stats *st) {
    long a = qac_strmap_get(g->ids, from);
    long b = qac_strmap_get(g->ids, to);
    if (a < 0 || b < 0) {
        st->edges_unresolved++;
        return QAC_OK;
    }
    if (a == b) {
        st->self_links++;
        return QAC_OK;
    }
    if (es->n == es->cap) {
        long cap = es->cap ? es->cap * 2 : 4096;
        edge *e = realloc(es->e, (size_t)cap * sizeof *e);
        if (!e) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        es->e = e, es->cap = cap;
    }
    es->e[es->n++] = (edge){a, b};
    return QAC_OK;
}

static qac_status read_tsv(edges *es, graph *g, const char *path, qac_hlp_stats *st) {
    qac_lines *lr;
    qac_status s = qac_lines_open(&lr, path);
    if (s) return s;
    const char *line;
    size_t len;
    int got;
    while (!(s = qac_lines_next(lr, &line, &len, &got)) && got) {
        long ln = qac_lines_lineno(lr);
        if (len == 0) continue;
        char *tab = memchr(line, '\t', len);
        if (!tab || memchr(tab + 1, '\t', len - (size_t)(tab + 1 - line))) {
            s = qac_set_error(QAC_ERR_FORMAT, "%s:%ld: expected \"from<TAB>to\"", path, ln);
            break;
        }
        *tab = '\0';
        if (ln == 1 && !strcmp(line, "from") && !strcmp(tab + 1, "to")) continue;
        if (!*line || !tab[1]) {
            s = qac_set_error(QAC_ERR_FORMAT, "%s:%ld: empty id", path, ln);
            break;
        }
        if ((s = add_edge(es, g, line, tab + 1, st))) break;
    }
    qac_lines_free(lr);
    return s;
}

/* sorted unique edges -> CSR out and in lists */
static qac_status build_csr(graph *g, edges *es, qac_hlp_stats *st) {
    qsort(es->e, (size_t)es->n, sizeof *es->e, edge_cmp);
    long w = 0;
    for (long i = 0; i < es->n; i++)
        if (!w || es->e[i].from != es->e[w - 1].from || es->e[i].to != es->e[w - 1].to) es->e[w++] = es->e[i];
    es->n = w;
    st->edges = w;
    g->out = malloc((size_t)(w ? w : 1) * sizeof *g->out);
    g->in = malloc((size_t)(w ? w : 1) * sizeof *g->in);
    if (!g->out || !g->in) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    for (long i = 0; i < w; i++) g->d[es->e[i].from].nout++, g->d[es->e[i].to].nin++;
    long o = 0, in = 0;
    for (long i = 0; i < g->n; i++) {
        g->d[i].out0 = o, g->d[i].in0 = in;
        o += g->d[i].nout, in += g->d[i].nin;
    }
    long *fill = calloc((size_t)(g->n ? g->n : 1), sizeof *fill);
    long *ofill = calloc((size_t)(g->n ? g->n : 1), sizeof *ofill);
    if (!fill || !ofill) {
        free(fill), free(ofill);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    /* edges sorted by (from, to): both lists come out sorted */
    for (long i = 0; i < w; i++) {
        long a = es->e[i].from, b = es->e[i].to;
        g->out[g->d[a].out0 + ofill[a]++] = b;
        g->in[g->d[b].in0 + fill[b]++] = a;
    }
    free(fill), free(ofill);
    return QAC_OK;
}

static int has_out(const graph *g, long a, long b) {
    const long *v = g->out + g->d[a].out0;
    int lo = 0, hi = g->d[a].nout;
    while (lo < hi) {
        int m = (lo + hi) / 2;
        if (v[m] < b) lo = m + 1;
        else hi = m;
    }
    return lo < g->d[a].nout && v[lo] == b;
}

static long hub_threshold(const graph *g, const qac_hlp_opts *o, long *hubs) {
    long K;
    if (o->hub_degree > 0) {
        K = o->hub_degree;
    } else {
        int maxd = 0;
        for (long i = 0; i < g->n; i++)
            if (g->d[i].nin > maxd) maxd = g->d[i].nin;
        long *cnt = calloc((size_t)maxd + 2, sizeof *cnt);
        if (!cnt) return -1;
        for (long i = 0; i < g->n; i++) cnt[g->d[i].nin]++;
        /* smallest K with #{in-degree > K} <= hub_top * n */
        double allowed = o->hub_top * (double)g->n;
        long above = 0;
        K = maxd;
        for (long v = maxd; v >= 0; v--) {
            if ((double)above > allowed) break;
            K = v;
            above += cnt[v];
        }
        free(cnt);
    }
    *hubs = 0;
    for (long i = 0; i < g->n; i++) *hubs += g->d[i].nin > K;
    return K;
}

/* the partner's query-side text (borrowed or into buf), NULL when none */
static const char *query_side(const hdoc *h, char **buf) {
    if (*h->title) return h->title;
    size_t n = strlen(h->text), e = qac_pt_first_sentence(h->text, n), b = 0;
    while (b < e && (h->text[b] == ' ' || h->text[b] == '\t' || h->text[b] == '\n' || h->text[b] == '\r')) b++;
    while (e > b && (h->text[e - 1] == ' ' || h->text[e - 1] == '\t' || h->text[e - 1] == '\n' || h->text[e - 1] == '\r'))
        e--;
    if (e == b) return NULL;
    char *s = realloc(*buf, e - b + 1);
    if (!s) return NULL;
    memcpy(s, h->text + b, e - b);
    s[e - b] = '\0';
    *buf = s;
    return s;
}

static int long_cmp(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

static void shuffle(long *v, long n, uint64_t key) {
    for (long i = n - 1; i > 0; i--) {
        long j = (long)qac_rng_below(key, (uint64_t)i, (uint64_t)i + 1), t = v[i];
        v[i] = v[j], v[j] = t;
    }
}

static int has_text(const hdoc *h) {
    for (const char *p = h->text; *p; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') return 1;
    return 0;
}

qac_status qac_hlp_mine(const qac_hlp_opts *o, qac_hlp_stats *st) {
    memset(st, 0, sizeof *st);
    if (!o->path || !*o->path) return qac_set_error(QAC_ERR_INVALID, "hlp: no documents file given");
    if (!o->out_path || !*o->out_path) return qac_set_error(QAC_ERR_INVALID, "hlp: no output file given");
    if (!o->dual_link && !o->co_mention) return qac_set_error(QAC_ERR_INVALID, "hlp: no pair kind selected");
    if (o->max_per_doc < 0) return qac_set_error(QAC_ERR_INVALID, "hlp: max_per_doc %d < 0", o->max_per_doc);
    if (o->hub_degree <= 0 && !(o->hub_top >= 0.0 && o->hub_top <= 1.0))
        return qac_set_error(QAC_ERR_INVALID, "hlp: hub_top %g out of [0, 1]", o->hub_top);
    graph g = {0};
    edges es = {0};
    long *dl = NULL, *cm = NULL, *mark = NULL;
    char *qbuf = NULL;
    qac_atomic_file af = {0};
    int opened = 0;
    qac_status s = qac_strmap_create(&g.ids);
    if (!s) s = read_docs(&g, o, !o->edges_path);
    if (!s) st->docs = g.n, st->duplicate_ids = g.duplicates;
    if (!s && o->edges_path) s = read_tsv(&es, &g, o->edges_path, st);
    for (long i = 0; !s && !o->edges_path && i < g.n; i++)
        for (int k = 0; !s && k < g.d[i].nlinks; k++) s = add_edge(&es, &g, g.d[i].id, g.d[i].links[k], st);
    if (!s) s = build_csr(&g, &es, st);
    free(es.e);
    if (!s) {
        st->hub_degree = hub_threshold(&g, o, &st->hubs);
        if (st->hub_degree < 0) s = qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    if (!s) {
        dl = malloc((size_t)(g.n ? g.n : 1) * sizeof *dl);
        cm = malloc((size_t)(g.n ? g.n : 1) * sizeof *cm);
        mark = malloc((size_t)(g.n ? g.n : 1) * sizeof *mark);
        if (!dl || !cm || !mark) s = qac_set_error(QAC_ERR_NOMEM, "out of memory");
        else
            for (long i = 0; i < g.n; i++) mark[i] = -1;
    }
    if (!s) {
        s = qac_atomic_open(&af, o->out_path);
        opened = !s;
    }
    long K = st->hub_degree;
    for (long p = 0; !s && p < g.n; p++) {
        const hdoc *h = &g.d[p];
        long ndl = 0, ncm = 0;
        /* dual-link partners, marked so co-mention skips them */
        for (int k = 0; k < h->nout; k++) {
            long q = g.out[h->out0 + k];
            if (has_out(&g, q, p)) {
                mark[q] = 2 * p; /* 2p: dual-link partner of p; 2p+1: co-mention partner */
                if (o->dual_link) dl[ndl++] = q;
                if (q > p) st->dual_link_pairs++;
            }
        }
        for (int k = 0; k < h->nout; k++) {
            long c = g.out[h->out0 + k];
            if (g.d[c].nin > K) continue;
            for (int j = 0; j < g.d[c].nin; j++) {
                long q = g.in[g.d[c].in0 + j];
                if (q == p || mark[q] == 2 * p || mark[q] == 2 * p + 1) continue;
                mark[q] = 2 * p + 1;
                if (o->co_mention) cm[ncm++] = q;
                if (q > p) st->co_mention_pairs++;
            }
        }
        if (!has_text(h)) {
            st->no_text++;
            continue;
        }
        /* file order first, so the shuffle alone decides what the cap keeps */
        for (int kind = 0; kind < 2; kind++) {
            long *v = kind ? cm : dl, n = kind ? ncm : ndl;
            qsort(v, (size_t)n, sizeof *v, long_cmp);
            shuffle(v, n, qac_rng_key(o->seed, (uint64_t)p, QAC_HLP_STREAM, (uint64_t)kind));
        }
        json_t *qs = json_array(), *ps = json_array(), *ks = json_array();
        long nw = 0;
        for (int kind = 0; kind < 2 && qs && ps && ks; kind++) {
            long *v = kind ? cm : dl, n = kind ? ncm : ndl;
            for (long i = 0; i < n; i++) {
                const char *qt = query_side(&g.d[v[i]], &qbuf);
                if (!qt) continue;
                if (o->max_per_doc && nw >= o->max_per_doc) {
                    st->capped++;
                    continue;
                }
                json_array_append_new(qs, json_string(qt));
                json_array_append_new(ps, json_string(g.d[v[i]].id));
                json_array_append_new(ks, json_string(kind ? "co-mention" : "dual-link"));
                nw++;
            }
        }
        if (!qs || !ps || !ks) s = qac_set_error(QAC_ERR_NOMEM, "out of memory");
        if (!s && nw) {
            json_t *rec = json_object();
            if (!rec) s = qac_set_error(QAC_ERR_NOMEM, "out of memory");
            else {
                json_object_set_new(rec, "id", json_string(h->id));
                json_object_set_new(rec, "text", json_string(h->text));
                json_object_set(rec, "queries", qs);
                json_object_set(rec, "partners", ps);
                json_object_set(rec, "kinds", ks);
                if (json_dumpf(rec, af.f, JSON_COMPACT) || fputc('\n', af.f) == EOF)
                    s = qac_set_error(QAC_ERR_IO, "%s: write failed", o->out_path);
                json_decref(rec);
            }
            st->written++;
            st->queries_written += nw;
        }
        json_decref(qs), json_decref(ps), json_decref(ks);
        if (o->progress && (p + 1) % 4096 == 0)
            o->progress(o->progress_user, "hlp write/passages", (uint64_t)p + 1, (uint64_t)g.n);
    }
    if (!s && opened) s = qac_atomic_commit(&af);
    else if (opened) qac_atomic_abort(&af);
    if (!s && o->progress) o->progress(o->progress_user, "hlp write/passages", (uint64_t)g.n, (uint64_t)g.n);
    free(dl), free(cm), free(mark), free(qbuf);
    graph_free(&g);
    return s;
}
