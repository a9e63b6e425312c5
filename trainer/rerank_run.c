/* Reranking a first-stage run with a cross-encoder (api/qac_rerank.h). */
#include <stdlib.h>
#include <string.h>

#include "qac_eval.h"
#include "qac_rerank.h"
#include "qac_util.h"
#include "rerank_internal.h"
#include "textmap.h"

void qac_rerank_opts_default(qac_rerank_opts *o) {
    memset(o, 0, sizeof *o);
    o->depth = 100;
    o->pair.strategy = QAC_TRUNC_LONGEST_FIRST;
    o->pair.side = QAC_TRUNC_RIGHT;
    o->run_id = "qac-rerank";
}

/* trec_eval's order: score descending, then docid descending */
static int by_trec(const void *a, const void *b) {
    const qac_rr_cand *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? 1 : -1;
    return -strcmp(x->docid, y->docid);
}

void qac_rr_sort(qac_rr_cand *c, size_t n) { qsort(c, n, sizeof *c, by_trec); }

size_t qac_rr_run_max_entries(const qac_run *run) {
    size_t m = 0;
    for (size_t q = 0; q < qac_run_num_queries(run); q++) {
        const char *const *d;
        const double *s;
        size_t n = qac_run_entries(run, q, &d, &s);
        m = n > m ? n : m;
    }
    return m;
}

qac_status qac_rr_passage_text(const qac_textmap *corpus, const char *docid, char **buf, size_t *cap,
                               const char **text, size_t *len) {
    const char *title, *body;
    if (!qac_textmap_get(corpus, docid, &title, &body))
        return qac_set_error(QAC_ERR_NOT_FOUND, "passage '%s' is not in the corpus", docid);
    size_t tl = strlen(title), bl = strlen(body);
    if (!tl) {
        *text = body, *len = bl;
        return QAC_OK;
    }
    /* the readers' join: title, a space, the text */
    if (tl + bl + 2 > *cap) {
        char *n = realloc(*buf, tl + bl + 2);
        if (!n) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        *buf = n, *cap = tl + bl + 2;
    }
    memcpy(*buf, title, tl);
    (*buf)[tl] = ' ';
    memcpy(*buf + tl + 1, body, bl + 1);
    *text = *buf, *len = tl + 1 + bl;
    return QAC_OK;
}

qac_status qac_rr_texts_create(qac_rr_texts *t, size_t n) {
    memset(t, 0, sizeof *t);
    t->bufs = calloc(n ? n : 1, sizeof *t->bufs);
    t->caps = calloc(n ? n : 1, sizeof *t->caps);
    t->texts = calloc(n ? n : 1, sizeof *t->texts);
    t->lens = calloc(n ? n : 1, sizeof *t->lens);
    t->n = n;
    if (!t->bufs || !t->caps || !t->texts || !t->lens) {
        qac_rr_texts_free(t);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    return QAC_OK;
}

void qac_rr_texts_free(qac_rr_texts *t) {
    for (size_t i = 0; t->bufs && i < t->n; i++) free(t->bufs[i]);
    free(t->bufs), free(t->caps), free(t->texts), free(t->lens);
    memset(t, 0, sizeof *t);
}

qac_status qac_rr_texts_fill(qac_rr_texts *t, const qac_textmap *corpus, const qac_rr_cand *c, size_t n) {
    qac_status st = QAC_OK;
    for (size_t j = 0; j < n && !st; j++)
        st = qac_rr_passage_text(corpus, c[j].docid, &t->bufs[j], &t->caps[j], &t->texts[j], &t->lens[j]);
    return st;
}

qac_status qac_rerank_run(qac_reranker *r, const qac_rerank_opts *o, qac_rerank_stats *stats) {
    memset(stats, 0, sizeof *stats);
    if (!o->run || !o->queries || !o->corpus || !o->out || o->depth < 1)
        return qac_set_error(QAC_ERR_INVALID, "rerank: a run, queries, a corpus and an output are required; depth >= 1");
    int64_t cut0 = qac_reranker_truncated(r);
    qac_run *run = NULL;
    qac_textmap *queries = NULL, *corpus = NULL;
    qac_atomic_file af = {0};
    FILE *out = NULL;
    qac_rr_cand *c = NULL;
    float *logits = NULL, *raw = NULL, *sc = NULL;
    const char **ids = NULL;
    qac_rr_texts tx = {0};
    size_t D = (size_t)o->depth;
    int NL = qac_reranker_model(r)->num_labels;
    qac_status st = qac_run_load(&run, o->run);
    if (!st) st = qac_textmap_load(&queries, o->queries, QAC_READ_QUERIES, o->queries_format);
    if (!st) st = qac_textmap_load(&corpus, o->corpus, QAC_READ_CORPUS, o->corpus_format);
    if (!st) st = qac_rr_texts_create(&tx, D);
    c = malloc(sizeof *c * (run ? qac_rr_run_max_entries(run) + 1 : 1));
    logits = malloc(D * NL * sizeof *logits), raw = malloc(D * sizeof *raw), sc = malloc(D * sizeof *sc);
    ids = malloc(D * sizeof *ids);
    if (!st && (!c || !logits || !raw || !sc || !ids)) st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
    if (!st && !strcmp(o->out, "-")) out = stdout;
    else if (!st && !(st = qac_atomic_open(&af, o->out))) out = af.f;
    size_t nq = run ? qac_run_num_queries(run) : 0;
    for (size_t q = 0; q < nq && !st; q++) {
        const char *qid = qac_run_qid(run, q), *title, *qtext;
        const char *const *docids;
        const double *scores;
        size_t ne = qac_run_entries(run, q, &docids, &scores);
        if (!qac_textmap_get(queries, qid, &title, &qtext)) {
            stats->no_text++;
            continue;
        }
        for (size_t j = 0; j < ne; j++) c[j].docid = docids[j], c[j].score = scores[j];
        qac_rr_sort(c, ne);
        size_t n = ne < D ? ne : D;
        if ((st = qac_rr_texts_fill(&tx, corpus, c, n))) {
            st = qac_wrap_error(st, "rerank: query '%s'", qid);
            break;
        }
        if ((st = qac_reranker_logits_one(r, qtext, strlen(qtext), tx.texts, tx.lens, (int)n, &o->pair, logits)))
            break;
        qac_xenc_raw_scores(qac_reranker_model(r), logits, (int)n, raw);
        for (size_t j = 0; j < n; j++) c[j].score = raw[j];
        qac_rr_sort(c, n);
        for (size_t j = 0; j < n; j++) ids[j] = c[j].docid, sc[j] = (float)c[j].score;
        st = qac_run_write(out, qid, ids, sc, (int)n, o->run_id);
        stats->queries++;
        stats->pairs += (long)n;
        if (!st && o->progress) o->progress(o->progress_user, "rerank", (uint64_t)(q + 1), (uint64_t)nq);
    }
    if (!st && stats->queries == 0)
        st = qac_set_error(QAC_ERR_INVALID, "rerank: no query of the run %s is in the queries file %s", o->run,
                           o->queries);
    if (af.f) {
        if (st) qac_atomic_abort(&af);
        else st = qac_atomic_commit(&af);
    } else if (out && fflush(out) != 0 && !st) {
        st = qac_set_error(QAC_ERR_IO, "rerank: writing the run failed");
    }
    stats->truncated = qac_reranker_truncated(r) - cut0;
    qac_rr_texts_free(&tx);
    free(c), free(logits), free(raw), free(sc), free(ids);
    qac_textmap_free(queries), qac_textmap_free(corpus);
    qac_run_free(run);
    return st;
}
