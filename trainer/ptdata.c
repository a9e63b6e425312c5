/* Pre-training data: the context schedule, the jsonl records tokenized
 * once, and the pairs a step draws (api/qac_pretrain.h states the rules). */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qac_jsonl.h"
#include "qac_pool.h"
#include "qac_pretrain.h"
#include "qac_rng.h"

/* ---- contexts ---- */

static const char *skip_ws(const char *s) {
    while (*s == ' ' || *s == '\t') s++;
    return s;
}

/* "word" exactly, surrounded by optional blanks */
static int is_word(const char *s, size_t n, const char *word) {
    while (n && (*s == ' ' || *s == '\t')) s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
    return n == strlen(word) && !strncmp(s, word, n);
}

qac_status qac_pt_context_parse(qac_pt_context *c, const char *context, const char *curriculum) {
    c->mode = QAC_PT_MODE_QUERY;
    c->span_frac = 0.75;
    if (curriculum && *curriculum) {
        /* span[:FRAC],query */
        const char *comma = strchr(curriculum, ',');
        const char *colon = strchr(curriculum, ':');
        if (!comma || !is_word(comma + 1, strlen(comma + 1), "query"))
            return qac_set_error(QAC_ERR_INVALID, "--curriculum \"%s\": expected span:FRACTION,query", curriculum);
        size_t head = (size_t)((colon && colon < comma ? colon : comma) - curriculum);
        if (!is_word(curriculum, head, "span"))
            return qac_set_error(QAC_ERR_INVALID, "--curriculum \"%s\": the first stage must be span", curriculum);
        if (colon && colon < comma) {
            char *end;
            double f = strtod(skip_ws(colon + 1), &end);
            end = (char *)skip_ws(end);
            if (end == colon + 1 || end != comma || !(f > 0.0 && f < 1.0))
                return qac_set_error(QAC_ERR_INVALID,
                                     "--curriculum \"%s\": the span fraction must be a number in (0, 1)", curriculum);
            c->span_frac = f;
        }
        c->mode = QAC_PT_MODE_CURRICULUM;
        return QAC_OK;
    }
    if (!context || !*context || !strcmp(context, "query")) c->mode = QAC_PT_MODE_QUERY;
    else if (!strcmp(context, "span")) c->mode = QAC_PT_MODE_SPAN;
    else if (!strcmp(context, "mixed")) c->mode = QAC_PT_MODE_MIXED;
    else return qac_set_error(QAC_ERR_INVALID, "--context \"%s\": expected query, span or mixed", context);
    return QAC_OK;
}

long qac_pt_span_steps(const qac_pt_context *c, long total) {
    if (total <= 0) return 0;
    switch (c->mode) {
    case QAC_PT_MODE_SPAN: return total;
    case QAC_PT_MODE_CURRICULUM: {
        long s = (long)floor(c->span_frac * (double)total + 0.5);
        return s < 0 ? 0 : s > total ? total : s;
    }
    default: return 0;
    }
}

double qac_pt_span_prob(const qac_pt_context *c, long step, long total) {
    switch (c->mode) {
    case QAC_PT_MODE_SPAN: return 1.0;
    case QAC_PT_MODE_MIXED: return 0.5;
    case QAC_PT_MODE_CURRICULUM: return step < qac_pt_span_steps(c, total) ? 1.0 : 0.0;
    default: return 0.0;
    }
}

/* Warmup + cosine over n steps as every other schedule (qac_lr_at, the
 * transformers convention: 0 at step 0, warmup llround(frac n) steps, as
 * pretrain_run.c rounds the main schedules' warmup). The curriculum runs it
 * over the span stage, then holds the rate constant. */
double qac_pt_lr_scale(const qac_pt_context *c, long step, long total, double warmup_frac) {
    long n = c->mode == QAC_PT_MODE_CURRICULUM ? qac_pt_span_steps(c, total) : total;
    if (step >= n && c->mode == QAC_PT_MODE_CURRICULUM) return 1.0;
    return qac_lr_at(QAC_SCHED_COSINE, 1.0, step, (long)llround(warmup_frac * (double)n), n);
}

/* ---- data ---- */

typedef struct ptrec {
    char *id, *text;   /* text freed after tokenizing */
    char **qtext;      /* likewise */
    int32_t *tok;      /* the text's tokens, no specials */
    int *sent, *span;  /* starts, each list closed by ntok */
    int32_t **q;       /* query tokens, cut to query_max_len - 2 */
    int *qlen;
    int ntok, nsent, nspan, nq;
    qac_status st;     /* tokenizing failure, reported after the parallel pass */
} ptrec;

typedef struct ptfile {
    ptrec *r;
    long n, cap;
    long *perm;        /* the cached epoch order */
    long perm_epoch;
} ptfile;

struct qac_pt_data {
    ptfile recs, docs; /* docs: the documents file (n = 0 when none) */
    const qac_tokenizer *tok;
    qac_special_ids sp;
    unsigned char *word_start; /* per vocabulary id: 1 where a token begins a word */
    int32_t *qp, *pp;  /* the query and passage prompts' tokens, no specials */
    int nqp, npp;
    int vocab, max_len, qmax;
    int32_t *buf;      /* the last batch's token ids */
    size_t buf_cap;
    qac_pt_data_stats st;
};

void qac_pt_data_opts_default(qac_pt_data_opts *o) {
    memset(o, 0, sizeof *o);
    o->max_len = 144;
    o->query_max_len = 32;
}

static void rec_free(ptrec *r) {
    free(r->id);
    free(r->text);
    for (int i = 0; i < r->nq; i++) {
        if (r->qtext) free(r->qtext[i]);
        if (r->q) free(r->q[i]);
    }
    free(r->qtext);
    free(r->q);
    free(r->qlen);
    free(r->tok);
    free(r->sent);
    free(r->span);
}

static void file_free(ptfile *f) {
    for (long i = 0; i < f->n; i++) rec_free(&f->r[i]);
    free(f->r);
    free(f->perm);
}

void qac_pt_data_free(qac_pt_data *d) {
    if (!d) return;
    file_free(&d->recs);
    file_free(&d->docs);
    free(d->word_start);
    free(d->buf);
    free(d->qp);
    free(d->pp);
    free(d);
}

/* ids may be strings or integers; BEIR and Tevatron corpora name them _id / docid */
static char *dup_id(json_t *o) {
    static const char *keys[] = {"id", "_id", "docid"};
    for (int k = 0; k < 3; k++) {
        json_t *v = json_object_get(o, keys[k]);
        if (json_is_string(v) || json_is_integer(v)) return qac_json_id_dup(v);
    }
    return NULL;
}

static qac_status read_file(ptfile *f, const char *path, int with_queries, qac_pt_data_stats *st,
                            const qac_pt_data_opts *o) {
    qac_lines *lr;
    qac_status s = qac_lines_open(&lr, path);
    if (s) return s;
    json_t *obj;
    int got;
    while (!(s = qac_jsonl_next(lr, &obj, &got)) && got) {
        long ln = qac_lines_lineno(lr);
        if (with_queries) st->records++;
        json_t *text = json_object_get(obj, "text"), *qs = json_object_get(obj, "queries");
        char *id = dup_id(obj);
        if (!id) s = qac_set_error(QAC_ERR_FORMAT, "%s:%ld: missing \"id\" (string or integer)", path, ln);
        else if (text && !json_is_string(text) && !json_is_null(text))
            s = qac_set_error(QAC_ERR_FORMAT, "%s:%ld: \"text\" is not a string", path, ln);
        else if (with_queries && qs && !json_is_array(qs) && !json_is_null(qs))
            s = qac_set_error(QAC_ERR_FORMAT, "%s:%ld: \"queries\" is not an array", path, ln);
        size_t nq = with_queries && json_is_array(qs) ? json_array_size(qs) : 0;
        for (size_t i = 0; !s && i < nq; i++)
            if (!json_is_string(json_array_get(qs, i)))
                s = qac_set_error(QAC_ERR_FORMAT, "%s:%ld: queries[%zu] is not a string", path, ln, i);
        if (s) {
            free(id);
            json_decref(obj);
            break;
        }
        if (f->n == f->cap) {
            long cap = f->cap ? f->cap * 2 : 1024;
            ptrec *r = realloc(f->r, (size_t)cap * sizeof *r);
            if (!r) {
                free(id);
                json_decref(obj);
                s = qac_set_error(QAC_ERR_NOMEM, "%s:%ld: out of memory", path, ln);
                break;
            }
            f->r = r, f->cap = cap;
        }
        ptrec *r = &f->r[f->n++];
        memset(r, 0, sizeof *r);
        r->id = id;
        r->text = strdup(json_is_string(text) ? json_string_value(text) : "");
        if (nq) {
            r->qtext = calloc(nq, sizeof *r->qtext);
            r->q = calloc(nq, sizeof *r->q);
            r->qlen = calloc(nq, sizeof *r->qlen);
        }
        int ok = r->text && (!nq || (r->qtext && r->q && r->qlen));
        for (size_t i = 0; ok && i < nq; i++, r->nq++)
            ok = (r->qtext[i] = strdup(json_string_value(json_array_get(qs, i)))) != NULL;
        json_decref(obj);
        if (!ok) {
            s = qac_set_error(QAC_ERR_NOMEM, "%s:%ld: out of memory", path, ln);
            break;
        }
        if (o->progress && f->n % 4096 == 0) o->progress(o->progress_user, "pretrain read/records", (uint64_t)f->n, 0);
    }
    qac_lines_free(lr);
    return s;
}

/* ---- tokenizing, sentences and spans ---- */

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Byte offsets where sentences end (the header's rule); returns the count
 * written to cuts (cap len + 1 suffices). */
static int sentence_cuts(const char *t, size_t n, size_t *cuts) {
    int m = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i] == '\n' && i + 1 < n && t[i + 1] == '\n') {
            cuts[m++] = i;
            while (i + 1 < n && t[i + 1] == '\n') i++;
        } else if ((t[i] == '.' || t[i] == '!' || t[i] == '?') && i + 1 < n && is_space(t[i + 1])) {
            cuts[m++] = i + 1;
        }
    }
    return m;
}

size_t qac_pt_first_sentence(const char *t, size_t n) {
    size_t i = 0;
    while (i < n && is_space(t[i])) i++; /* empty leading pieces */
    for (; i < n; i++) {
        if (t[i] == '\n' && i + 1 < n && t[i + 1] == '\n') return i;
        if ((t[i] == '.' || t[i] == '!' || t[i] == '?') && i + 1 < n && is_space(t[i + 1])) return i + 1;
    }
    return n;
}

static qac_status push_tokens(const qac_tokenizer *tok, const char *s, size_t n, int32_t **ids, int *len, int *cap) {
    for (;;) {
        int got;
        qac_status st = qac_tokenizer_tokenize(tok, s, n, *ids + *len, *cap - *len, &got);
        if (st) return st;
        if (got <= *cap - *len) {
            *len += got;
            return QAC_OK;
        }
        int c = *len + got + 64;
        int32_t *p = realloc(*ids, (size_t)c * sizeof *p);
        if (!p) return qac_set_error(QAC_ERR_NOMEM, "out of memory tokenizing");
        *ids = p, *cap = c;
    }
}

static int last_word_start(const unsigned char *ws, const int32_t *tok, int lo, int hi) {
    for (int t = hi; t > lo; t--)
        if (ws[tok[t]]) return t;
    return -1;
}

/* Greedy packing of sentences into spans of at most L tokens (header rule). */
static qac_status pack_spans(ptrec *r, int L, const unsigned char *ws, long *forced) {
    int cap = r->ntok / (L > 0 ? L : 1) * 2 + 4, n = 0;
    r->span = malloc((size_t)cap * sizeof *r->span);
    if (!r->span) return QAC_ERR_NOMEM;
    int s = 0, j = 1;
    while (s < r->ntok) {
        if (n + 2 > cap) {
            int *p = realloc(r->span, (size_t)(cap *= 2) * sizeof *p);
            if (!p) return QAC_ERR_NOMEM;
            r->span = p;
        }
        r->span[n++] = s;
        if (r->ntok - s <= L) break;
        while (j <= r->nsent && r->sent[j] <= s) j++;
        int b = -1;
        while (j <= r->nsent && r->sent[j] <= s + L) b = r->sent[j++];
        if (b > s) {
            s = b;
        } else {
            int c = last_word_start(ws, r->tok, s, s + L);
            s = c > s ? c : s + L;
            (*forced)++;
        }
    }
    r->nspan = n;
    r->span[n] = r->ntok;
    return QAC_OK;
}

typedef struct tok_job {
    qac_pt_data *d;
    ptfile *f;
    int with_queries;
    long *forced; /* per thread */
} tok_job;

static qac_status tokenize_rec(qac_pt_data *d, ptrec *r, int with_queries, long *forced) {
    size_t n = strlen(r->text);
    size_t *cuts = malloc((n + 2) * sizeof *cuts);
    int *sent = malloc((n + 2) * sizeof *sent);
    int cap = (int)(n / 2) + 16, len = 0, ns = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    qac_status st = cuts && sent && ids ? QAC_OK : QAC_ERR_NOMEM;
    if (!st) {
        int m = sentence_cuts(r->text, n, cuts);
        cuts[m++] = n;
        size_t from = 0;
        for (int i = 0; !st && i < m; i++) {
            int before = len;
            st = push_tokens(d->tok, r->text + from, cuts[i] - from, &ids, &len, &cap);
            if (!st && len > before) sent[ns++] = before;
            from = cuts[i];
        }
    }
    free(cuts);
    if (!st) {
        sent[ns] = len;
        r->tok = ids, r->ntok = len, r->sent = sent, r->nsent = ns;
        ids = NULL, sent = NULL;
        if (len > 0) st = pack_spans(r, d->max_len - 2, d->word_start, forced);
    }
    free(ids);
    free(sent);
    free(r->text);
    r->text = NULL;
    for (int i = 0; !st && with_queries && i < r->nq; i++) {
        int qc = 64, ql = 0;
        int32_t *q = malloc((size_t)qc * sizeof *q);
        st = q ? push_tokens(d->tok, r->qtext[i], strlen(r->qtext[i]), &q, &ql, &qc) : QAC_ERR_NOMEM;
        r->q[i] = q;
        r->qlen[i] = ql < d->qmax - 2 ? ql : d->qmax - 2;
    }
    for (int i = 0; r->qtext && i < r->nq; i++) free(r->qtext[i]);
    free(r->qtext);
    r->qtext = NULL;
    return st;
}

static void tok_range(void *ctx, int64_t b, int64_t e, int tid) {
    tok_job *j = ctx;
    for (int64_t i = b; i < e; i++) j->f->r[i].st = tokenize_rec(j->d, &j->f->r[i], j->with_queries, &j->forced[tid]);
}

static qac_status tokenize_file(qac_pt_data *d, ptfile *f, int with_queries, qac_pool *pool, const char *path,
                                const qac_pt_data_opts *o, long *forced) {
    int nt = qac_pool_size(pool);
    tok_job j = {d, f, with_queries, calloc((size_t)nt, sizeof(long))};
    if (!j.forced) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    const int64_t chunk = 2048;
    for (int64_t b = 0; b < f->n; b += chunk) {
        int64_t e = b + chunk < f->n ? b + chunk : f->n;
        tok_job sub = j;
        ptfile view = {f->r + b, e - b, e - b, NULL, 0};
        sub.f = &view;
        qac_pool_for(pool, e - b, 64, tok_range, &sub);
        if (o->progress) o->progress(o->progress_user, "pretrain tokenize/records", (uint64_t)e, (uint64_t)f->n);
    }
    for (int t = 0; t < nt; t++) *forced += j.forced[t];
    free(j.forced);
    /* a worker's message stays on its own thread: name the record here */
    for (long i = 0; i < f->n; i++)
        if (f->r[i].st)
            return qac_set_error(f->r[i].st, "%s: record %ld (\"%s\"): tokenizing failed (%s)", path, i + 1,
                                 f->r[i].id, qac_status_name(f->r[i].st));
    return QAC_OK;
}

/* Drop records whose text gives no tokens; returns how many. */
static long drop_empty(ptfile *f) {
    long w = 0, dropped = 0;
    for (long i = 0; i < f->n; i++) {
        if (f->r[i].ntok == 0) {
            rec_free(&f->r[i]);
            dropped++;
        } else {
            f->r[w++] = f->r[i];
        }
    }
    f->n = w;
    return dropped;
}

static int inner_word_starts(const qac_pt_data *d, const ptrec *r) {
    int c = 0;
    for (int t = 1; t < r->ntok; t++) c += d->word_start[r->tok[t]];
    return c;
}

static void count_span_rules(qac_pt_data *d, const ptfile *f) {
    for (long i = 0; i < f->n; i++) {
        const ptrec *r = &f->r[i];
        if (r->nspan >= 2) d->st.span_multi++;
        else if (r->nsent >= 2) d->st.span_split_sentence++;
        else if (inner_word_starts(d, r) >= 1) d->st.span_split_word++;
        else d->st.span_self++;
    }
    d->st.span_docs = f->n;
}

qac_status qac_pt_data_open(qac_pt_data **out, const qac_pt_data_opts *o, const qac_tokenizer *tok) {
    *out = NULL;
    if (!o->path || !*o->path) return qac_set_error(QAC_ERR_INVALID, "pre-training data: no file given");
    if (o->max_len < 4 || o->max_len > 1 << 20)
        return qac_set_error(QAC_ERR_INVALID, "pre-training data: max_len %d out of range [4, 1048576]", o->max_len);
    if (o->query_max_len < 3 || o->query_max_len > 1 << 20)
        return qac_set_error(QAC_ERR_INVALID, "pre-training data: query_max_len %d out of range [3, 1048576]",
                             o->query_max_len);
    qac_pt_data *d = calloc(1, sizeof *d);
    if (!d) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    d->tok = tok;
    d->sp = qac_tokenizer_specials(tok);
    d->max_len = o->max_len, d->qmax = o->query_max_len;
    d->recs.perm_epoch = d->docs.perm_epoch = -1;
    d->vocab = qac_tokenizer_vocab_size(tok);
    d->word_start = calloc((size_t)(d->vocab > 0 ? d->vocab : 1), 1);
    if (!d->word_start) {
        qac_pt_data_free(d);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    int sp = qac_tokenizer_get_kind(tok) == QAC_TOKENIZER_SENTENCEPIECE;
    for (int32_t i = 0; i < d->vocab; i++) {
        const char *s = qac_tokenizer_id_to_token(tok, i);
        d->word_start[i] = s && (sp ? !strncmp(s, "\xE2\x96\x81", 3) : strncmp(s, "##", 2) != 0);
    }
    const char *prompts[2] = {o->query_prompt, o->passage_prompt};
    int32_t **ptok[2] = {&d->qp, &d->pp};
    int *np[2] = {&d->nqp, &d->npp}, room[2] = {d->qmax - 3, d->max_len - 3};
    for (int i = 0; i < 2; i++) {
        size_t pl = prompts[i] ? strlen(prompts[i]) : 0;
        int n = 0;
        int32_t scratch[1];
        qac_status pst = pl ? qac_tokenizer_tokenize(tok, prompts[i], pl, scratch, 0, &n) : QAC_OK;
        if (!pst && n > room[i])
            pst = qac_set_error(QAC_ERR_INVALID, "pre-training data: the %s prompt has %d tokens, leaving no room "
                                "for text within %d", i ? "passage" : "query", n, i ? d->max_len : d->qmax);
        if (!pst && n && !(*ptok[i] = malloc((size_t)n * sizeof(int32_t))))
            pst = qac_set_error(QAC_ERR_NOMEM, "out of memory");
        if (!pst && n) pst = qac_tokenizer_tokenize(tok, prompts[i], pl, *ptok[i], n, np[i]);
        if (pst) {
            qac_pt_data_free(d);
            return pst;
        }
    }
    qac_pool *pool = NULL;
    qac_status st = qac_pool_create(&pool, o->threads);
    long forced = 0;
    if (!st) st = read_file(&d->recs, o->path, 1, &d->st, o);
    if (!st) st = tokenize_file(d, &d->recs, 1, pool, o->path, o, &forced);
    if (!st) {
        d->st.skipped_no_text = drop_empty(&d->recs);
        if (d->recs.n == 0)
            st = qac_set_error(QAC_ERR_FORMAT, "%s: no record with text (%ld read)", o->path, d->st.records);
    }
    if (!st && o->docs_path && *o->docs_path) {
        qac_pt_data_stats scratch = {0};
        forced = 0; /* the counts describe the documents spans come from */
        st = read_file(&d->docs, o->docs_path, 0, &scratch, o);
        if (!st) st = tokenize_file(d, &d->docs, 0, pool, o->docs_path, o, &forced);
        if (!st) {
            drop_empty(&d->docs);
            if (d->docs.n == 0) st = qac_set_error(QAC_ERR_FORMAT, "%s: no document with text", o->docs_path);
        }
    }
    qac_pool_free(pool);
    if (st) {
        qac_pt_data_free(d);
        return st;
    }
    for (long i = 0; i < d->recs.n; i++) {
        d->st.queries += d->recs.r[i].nq;
        d->st.no_queries += d->recs.r[i].nq == 0;
    }
    d->st.forced_cuts = forced;
    count_span_rules(d, d->docs.n ? &d->docs : &d->recs);
    *out = d;
    return QAC_OK;
}

long qac_pt_data_count(const qac_pt_data *d) { return d->recs.n; }

void qac_pt_data_stats_get(const qac_pt_data *d, qac_pt_data_stats *s) { *s = d->st; }

qac_status qac_pt_data_doc(const qac_pt_data *d, qac_pt_kind kind, long doc, const char **id,
                           const int32_t **tokens, int *ntok, const int **sent, int *nsent, const int **span,
                           int *nspan) {
    const ptfile *f = kind == QAC_PT_SPAN && d->docs.n ? &d->docs : &d->recs;
    if (doc < 0 || doc >= f->n) return qac_set_error(QAC_ERR_INVALID, "document %ld out of range [0, %ld)", doc, f->n);
    const ptrec *r = &f->r[doc];
    if (id) *id = r->id;
    if (tokens) *tokens = r->tok;
    if (ntok) *ntok = r->ntok;
    if (sent) *sent = r->sent;
    if (nsent) *nsent = r->nsent;
    if (span) *span = r->span;
    if (nspan) *nspan = r->nspan;
    return QAC_OK;
}

int qac_pt_data_nqueries(const qac_pt_data *d, long doc) {
    return doc >= 0 && doc < d->recs.n ? d->recs.r[doc].nq : 0;
}

qac_status qac_pt_data_query(const qac_pt_data *d, long doc, int q, const int32_t **tokens, int *n) {
    if (doc < 0 || doc >= d->recs.n || q < 0 || q >= d->recs.r[doc].nq)
        return qac_set_error(QAC_ERR_INVALID, "query %d of record %ld out of range", q, doc);
    *tokens = d->recs.r[doc].q[q];
    *n = d->recs.r[doc].qlen[q];
    return QAC_OK;
}

/* ---- drawing ---- */

static double unit(uint64_t key, uint64_t ctr) { return (double)(qac_rng_u64(key, ctr) >> 11) * 0x1p-53; }

static long doc_at(ptfile *f, uint64_t seed, int which, uint64_t pos) {
    uint64_t n = (uint64_t)f->n, epoch = pos / n;
    if (f->perm_epoch != (long)epoch) {
        uint64_t key = qac_rng_key(seed, epoch, QAC_PT_STREAM_ORDER, (uint64_t)which);
        for (uint64_t i = 0; i < n; i++) f->perm[i] = (long)i;
        for (uint64_t i = n; i-- > 1;) {
            uint64_t j = qac_rng_below(key, i, i + 1);
            long t = f->perm[i];
            f->perm[i] = f->perm[j], f->perm[j] = t;
        }
        f->perm_epoch = (long)epoch;
    }
    return f->perm[pos % n];
}

/* [CLS] prompt tok[lo, hi) [SEP] into out, the text cut to cap - np tokens;
 * returns the length */
static int wrap(const qac_pt_data *d, int32_t *out, const int32_t *prompt, int np, const int32_t *tok, int lo,
                int hi, int cap) {
    int n = 0;
    if (d->sp.cls >= 0) out[n++] = d->sp.cls;
    if (np) memcpy(out + n, prompt, (size_t)np * sizeof *out);
    n += np;
    if (hi - lo > cap - np) hi = lo + cap - np;
    memcpy(out + n, tok + lo, (size_t)(hi - lo) * sizeof *out);
    n += hi - lo;
    if (d->sp.sep >= 0) out[n++] = d->sp.sep;
    return n;
}

static void draw_spans(const qac_pt_data *d, const ptrec *r, uint64_t key, int *a0, int *a1, int *b0, int *b1) {
    if (r->nspan >= 2) {
        int i = (int)qac_rng_below(key, 0, (uint64_t)r->nspan);
        int j = (int)qac_rng_below(key, 1, (uint64_t)r->nspan - 1);
        if (j >= i) j++;
        *a0 = r->span[i], *a1 = r->span[i + 1], *b0 = r->span[j], *b1 = r->span[j + 1];
        return; /* two distinct spans in a drawn order: no swap needed */
    }
    int cut = -1;
    if (r->nsent >= 2) {
        cut = r->sent[1 + qac_rng_below(key, 0, (uint64_t)r->nsent - 1)];
    } else {
        int w = inner_word_starts(d, r);
        if (w > 0) {
            int k = (int)qac_rng_below(key, 0, (uint64_t)w);
            for (int t = 1; t < r->ntok; t++)
                if (d->word_start[r->tok[t]] && k-- == 0) {
                    cut = t;
                    break;
                }
        }
    }
    if (cut < 0) {
        *a0 = *b0 = 0, *a1 = *b1 = r->ntok;
        return;
    }
    if (qac_rng_u64(key, 2) & 1) *a0 = cut, *a1 = r->ntok, *b0 = 0, *b1 = cut;
    else *a0 = 0, *a1 = cut, *b0 = cut, *b1 = r->ntok;
}

qac_status qac_pt_data_batch(qac_pt_data *d, qac_pt_pair *pairs, int B, long step, double span_prob, uint64_t seed) {
    if (B <= 0 || step < 0) return qac_set_error(QAC_ERR_INVALID, "pre-training batch: B %d, step %ld", B, step);
    int side = d->max_len > d->qmax ? d->max_len : d->qmax;
    size_t need = (size_t)B * 2 * (size_t)side;
    if (need > d->buf_cap) {
        int32_t *b = realloc(d->buf, need * sizeof *b);
        if (!b) return qac_set_error(QAC_ERR_NOMEM, "pre-training batch: out of memory");
        d->buf = b, d->buf_cap = need;
    }
    ptfile *files[2] = {&d->recs, d->docs.n ? &d->docs : &d->recs};
    for (int w = 0; w < 2; w++)
        if (!files[w]->perm) {
            files[w]->perm = malloc((size_t)files[w]->n * sizeof(long));
            if (!files[w]->perm) return qac_set_error(QAC_ERR_NOMEM, "pre-training batch: out of memory");
        }
    int L = d->max_len - 2;
    for (int i = 0; i < B; i++) {
        uint64_t pos = (uint64_t)step * (uint64_t)B + (uint64_t)i;
        int span = unit(qac_rng_key(seed, (uint64_t)step, (uint64_t)i, QAC_PT_STREAM_KIND), 0) < span_prob;
        long doc = doc_at(files[span], seed, span && d->docs.n, pos);
        const ptrec *r = &files[span]->r[doc];
        if (!span && r->nq == 0) {
            span = 1; /* the slot becomes a span slot, from the span source's stream */
            d->st.query_fallback++;
            doc = doc_at(files[1], seed, d->docs.n > 0, pos);
            r = &files[1]->r[doc];
        }
        int32_t *a = d->buf + (size_t)i * 2 * (size_t)side, *b = a + side;
        qac_pt_pair *p = &pairs[i];
        p->doc = doc;
        p->a = a, p->b = b;
        if (!span) {
            int q = (int)qac_rng_below(qac_rng_key(seed, (uint64_t)step, (uint64_t)i, QAC_PT_STREAM_QUERY), 0,
                                       (uint64_t)r->nq);
            p->kind = QAC_PT_QUERY;
            p->a_len = wrap(d, a, d->pp, d->npp, r->tok, 0, r->ntok, L);
            p->b_len = wrap(d, b, d->qp, d->nqp, r->q[q], 0, r->qlen[q], d->qmax - 2);
            d->st.drawn_query++;
        } else {
            int a0, a1, b0, b1;
            draw_spans(d, r, qac_rng_key(seed, (uint64_t)step, (uint64_t)i, QAC_PT_STREAM_SPAN), &a0, &a1, &b0, &b1);
            p->kind = QAC_PT_SPAN;
            p->a_len = wrap(d, a, d->pp, d->npp, r->tok, a0, a1, L);
            p->b_len = wrap(d, b, d->pp, d->npp, r->tok, b0, b1, L);
            d->st.drawn_span++;
        }
    }
    return QAC_OK;
}
