/* PAIR's teacher (api/qac_rerank.h, qac_label): a first-stage run scored by
 * a cross-encoder and turned into pseudo-labelled training data, Tevatron
 * jsonl for qac finetune and, optionally, pre-training jsonl for
 * qac pretrain. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "qac_rerank.h"
#include "qac_util.h"
#include "rerank_internal.h"

void qac_label_opts_default(qac_label_opts *o) {
    memset(o, 0, sizeof *o);
    o->depth = 100;
    o->n = 30;
    o->pos_threshold = 0.9f;
    o->neg_threshold = 0.1f;
    o->pair.strategy = QAC_TRUNC_LONGEST_FIRST;
    o->pair.side = QAC_TRUNC_RIGHT;
}

static json_t *psg_json(const qac_textmap *corpus, const char *docid) {
    const char *title = "", *body = "";
    qac_textmap_get(corpus, docid, &title, &body);
    return json_pack("{s:s, s:s, s:s}", "docid", docid, "title", title, "text", body);
}

/* passage -> its pseudo-labelled queries, for the pre-training jsonl */
typedef struct by_passage {
    qac_strmap *index;
    json_t *list; /* [{"id","text","queries"}] in first-seen order */
} by_passage;

static qac_status add_query(by_passage *bp, const qac_textmap *corpus, const char *docid, const char *query) {
    long i = qac_strmap_get(bp->index, docid);
    if (i < 0) {
        char *buf = NULL;
        size_t cap = 0, len;
        const char *text;
        qac_status st = qac_rr_passage_text(corpus, docid, &buf, &cap, &text, &len);
        if (st) return st;
        json_t *o = json_pack("{s:s, s:s%, s:[]}", "id", docid, "text", text, len, "queries");
        free(buf);
        if (!o) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        i = (long)json_array_size(bp->list);
        json_array_append_new(bp->list, o);
        if ((st = qac_strmap_put(bp->index, docid, i))) return st;
    }
    json_array_append_new(json_object_get(json_array_get(bp->list, (size_t)i), "queries"), json_string(query));
    return QAC_OK;
}

static qac_status write_line(FILE *f, json_t *o, const char *path) {
    char *line = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
    qac_status st = line && fprintf(f, "%s\n", line) >= 0 ? QAC_OK : qac_set_error(QAC_ERR_IO, "%s: write failed", path);
    free(line);
    return st;
}

qac_status qac_label(qac_reranker *r, const qac_label_opts *o, qac_label_stats *stats) {
    memset(stats, 0, sizeof *stats);
    if (!o->run || !o->queries || !o->corpus || !o->out || o->depth < 1 || o->n < 1)
        return qac_set_error(QAC_ERR_INVALID, "label: a run, queries, a corpus and an output are required; depth, n >= 1");
    if (!(o->pos_threshold > o->neg_threshold) || o->pos_threshold > 1 || o->neg_threshold < 0)
        return qac_set_error(QAC_ERR_INVALID,
                             "label: the thresholds must satisfy 0 <= --neg-threshold (%g) < --pos-threshold (%g) <= 1",
                             (double)o->neg_threshold, (double)o->pos_threshold);
    int64_t cut0 = qac_reranker_truncated(r);
    const qac_xenc *x = qac_reranker_model(r);
    qac_run *run = NULL;
    qac_textmap *queries = NULL, *corpus = NULL;
    qac_qrels *qrels = NULL;
    qac_atomic_file af = {0}, pf = {0};
    qac_rr_cand *c = NULL;
    qac_rr_texts tx = {0};
    size_t D = (size_t)o->depth;
    float *logits = malloc(D * x->num_labels * sizeof *logits), *prob = malloc(D * sizeof *prob);
    by_passage bp = {NULL, json_array()};
    qac_status st = qac_run_load(&run, o->run);
    if (!st) st = qac_textmap_load(&queries, o->queries, QAC_READ_QUERIES, o->queries_format);
    if (!st) st = qac_textmap_load(&corpus, o->corpus, QAC_READ_CORPUS, o->corpus_format);
    if (!st && o->qrels) st = qac_qrels_load(&qrels, o->qrels, QAC_QRELS_AUTO);
    if (!st) st = qac_rr_texts_create(&tx, D);
    if (!st) st = qac_strmap_create(&bp.index);
    c = malloc(sizeof *c * (run ? qac_rr_run_max_entries(run) + 1 : 1));
    if (!st && (!c || !logits || !prob || !bp.list)) st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
    if (!st) st = qac_atomic_open(&af, o->out);
    if (!st && o->pretrain_out) st = qac_atomic_open(&pf, o->pretrain_out);
    size_t nq = run ? qac_run_num_queries(run) : 0;
    for (size_t q = 0; q < nq && !st; q++) {
        const char *qid = qac_run_qid(run, q), *qtext;
        const char *const *docids;
        const double *scores;
        size_t ne = qac_run_entries(run, q, &docids, &scores);
        if (!qac_textmap_get(queries, qid, NULL, &qtext)) continue;
        stats->queries++;
        for (size_t j = 0; j < ne; j++) c[j].docid = docids[j], c[j].score = scores[j];
        qac_rr_sort(c, ne);
        size_t n = ne < D ? ne : D;
        if ((st = qac_rr_texts_fill(&tx, corpus, c, n)) ||
            (st = qac_reranker_logits_one(r, qtext, strlen(qtext), tx.texts, tx.lens, (int)n, &o->pair, logits))) {
            st = qac_wrap_error(st, "label: query '%s'", qid);
            break;
        }
        stats->pairs += (long)n;
        qac_xenc_probabilities(x, logits, (int)n, prob);
        long qi = qrels ? qac_qrels_find(qrels, qid) : -1;
        json_t *pos = json_array(), *neg = json_array();
        /* the judged positives first, then the teacher's, in the run's order */
        const char *const *judged = NULL;
        const int *rels = NULL;
        size_t nj = qi >= 0 ? qac_qrels_judged(qrels, (size_t)qi, &judged, &rels) : 0;
        for (size_t j = 0; j < nj && !st; j++) {
            if (rels[j] < 1) continue;
            const char *t, *b;
            if (!qac_textmap_get(corpus, judged[j], &t, &b))
                st = qac_set_error(QAC_ERR_NOT_FOUND, "label: qrels passage '%s' of query '%s' is not in the corpus",
                                   judged[j], qid);
            else json_array_append_new(pos, psg_json(corpus, judged[j])), stats->judged_positives++;
        }
        for (size_t j = 0; j < n && !st; j++) {
            int rel = 0, is_judged = qi >= 0 && qac_qrels_rel(qrels, (size_t)qi, c[j].docid, &rel);
            if (is_judged && rel >= 1) continue; /* already a positive */
            if (prob[j] > o->pos_threshold) {
                json_array_append_new(pos, psg_json(corpus, c[j].docid));
                stats->positives++;
            } else if (prob[j] < o->neg_threshold) {
                if (json_array_size(neg) < (size_t)o->n) json_array_append_new(neg, psg_json(corpus, c[j].docid));
                stats->negatives++;
            } else {
                stats->dropped++;
            }
        }
        if (!st && json_array_size(pos) == 0) {
            stats->no_positive++;
        } else if (!st) {
            json_t *line = json_pack("{s:s, s:s, s:O, s:O}", "query_id", qid, "query", qtext, "positive_passages", pos,
                                     "negative_passages", neg);
            st = line ? write_line(af.f, line, o->out) : qac_set_error(QAC_ERR_NOMEM, "out of memory");
            json_decref(line);
            stats->written++;
            for (size_t j = 0; j < json_array_size(pos) && !st && o->pretrain_out; j++)
                st = add_query(&bp, corpus, json_string_value(json_object_get(json_array_get(pos, j), "docid")), qtext);
        }
        json_decref(pos), json_decref(neg);
        if (!st && o->progress) o->progress(o->progress_user, "label", (uint64_t)(q + 1), (uint64_t)nq);
    }
    for (size_t i = 0; !st && pf.f && i < json_array_size(bp.list); i++)
        st = write_line(pf.f, json_array_get(bp.list, i), o->pretrain_out);
    if (!st && stats->written == 0)
        st = qac_set_error(QAC_ERR_INVALID,
                           "label: no query has a candidate the teacher scores above %g (nor a judged positive): "
                           "nothing to write", (double)o->pos_threshold);
    if (af.f) {
        if (st) qac_atomic_abort(&af);
        else st = qac_atomic_commit(&af);
    }
    if (pf.f) {
        if (st) qac_atomic_abort(&pf);
        else st = qac_atomic_commit(&pf);
    }
    stats->truncated = qac_reranker_truncated(r) - cut0;
    qac_rr_texts_free(&tx);
    free(c), free(logits), free(prob);
    json_decref(bp.list);
    qac_strmap_free(bp.index);
    qac_textmap_free(queries), qac_textmap_free(corpus);
    qac_qrels_free(qrels);
    qac_run_free(run);
    return st;
}
