/* Hard-negative mining: a run (from a file, or searched with a model and
 * an index) minus the judged positives, shuffled, as Tevatron jsonl. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "qac_finetune.h"
#include "qac_rng.h"
#include "qac_util.h"
#include "rerank_internal.h"
#include "textmap.h"

void qac_mine_opts_default(qac_mine_opts *o) {
    memset(o, 0, sizeof *o);
    o->q_max = 0; /* the model's limit, as qac search */
    o->n = 30;
    o->depth = 200;
    o->seed = 42;
    o->neg_threshold = 0.1f;
}

typedef struct cand {
    const char *docid;
    double score;
} cand;

/* trec_eval's order: score descending, then docid descending */
static int by_rank(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? 1 : -1;
    return -strcmp(x->docid, y->docid);
}

static json_t *psg_json(const char *docid, const char *title, const char *body) {
    json_t *p = json_object();
    json_object_set_new(p, "docid", json_string(docid));
    json_object_set_new(p, "title", json_string(title));
    json_object_set_new(p, "text", json_string(body));
    return p;
}

typedef struct mine_ctx {
    const qac_mine_opts *o;
    const qac_qrels *qrels;
    const qac_textmap *corpus;
    FILE *out;
    qac_mine_stats *stats;
    cand *c;
    size_t ccap;
    /* denoising: one chunk's texts, logits and probabilities */
    qac_rr_texts tx;
    qac_rr_cand *rc;
    float *logits, *prob;
} mine_ctx;

/* RocketQA's denoising: cands[0..*nc) in their shuffled order, scored n
 * at a time against the query, those under the threshold kept in order
 * until n are kept; *nc becomes the count kept */
static qac_status denoise(mine_ctx *x, const char *qid, const char *query, cand *cands, size_t *nc) {
    size_t n = (size_t)x->o->n, kept = 0;
    for (size_t j0 = 0; j0 < *nc && kept < n; j0 += n) {
        size_t m = *nc - j0 < n ? *nc - j0 : n;
        for (size_t j = 0; j < m; j++) x->rc[j].docid = cands[j0 + j].docid;
        qac_status st = qac_rr_texts_fill(&x->tx, x->corpus, x->rc, m);
        if (!st)
            st = qac_reranker_logits_one(x->o->denoise, query, strlen(query), x->tx.texts, x->tx.lens, (int)m, NULL,
                                         x->logits);
        if (st) return qac_wrap_error(st, "mine: denoising query '%s'", qid);
        qac_xenc_probabilities(qac_reranker_model(x->o->denoise), x->logits, (int)m, x->prob);
        x->stats->scored += (long)m;
        for (size_t j = 0; j < m && kept < n; j++) {
            if (x->prob[j] >= x->o->neg_threshold) x->stats->denoised++;
            else cands[kept++] = cands[j0 + j];
        }
    }
    *nc = kept;
    return QAC_OK;
}

/* one query: cands[0..nc) in any order */
static qac_status mine_query(mine_ctx *x, const char *qid, const char *query, cand *cands, size_t nc) {
    long qi = qac_qrels_find(x->qrels, qid);
    const char *const *judged = NULL;
    const int *rels = NULL;
    size_t nj = qi >= 0 ? qac_qrels_judged(x->qrels, (size_t)qi, &judged, &rels) : 0;
    json_t *pos = json_array(), *neg = json_array();
    qac_status st = QAC_OK;
    for (size_t j = 0; j < nj && !st; j++) {
        const char *title, *body;
        if (rels[j] < 1) continue;
        if (!qac_textmap_get(x->corpus, judged[j], &title, &body))
            st = qac_set_error(QAC_ERR_NOT_FOUND, "qrels: passage '%s' of query '%s' is not in the corpus %s",
                               judged[j], qid, x->o->corpus);
        else
            json_array_append_new(pos, psg_json(judged[j], title, body));
    }
    if (!st && json_array_size(pos) == 0) {
        x->stats->skipped_no_positive++;
        json_decref(pos), json_decref(neg);
        return QAC_OK;
    }
    qsort(cands, nc, sizeof *cands, by_rank);
    size_t keep = 0, top = nc < (size_t)x->o->depth ? nc : (size_t)x->o->depth;
    for (size_t j = 0; j < top; j++) {
        int rel;
        if (qi >= 0 && qac_qrels_rel(x->qrels, (size_t)qi, cands[j].docid, &rel) && rel >= 1) continue;
        cands[keep++] = cands[j];
    }
    qac_xxh64 hs;
    qac_xxh64_init(&hs);
    qac_xxh64_update(&hs, qid, strlen(qid));
    uint64_t key = qac_rng_key(x->o->seed, qac_xxh64_digest(&hs), QAC_FT_STREAM_MINE, 0);
    for (size_t i = keep; i-- > 1;) {
        size_t j = (size_t)qac_rng_below(key, i, i + 1);
        cand t = cands[i];
        cands[i] = cands[j], cands[j] = t;
    }
    if (x->o->denoise && (st = denoise(x, qid, query, cands, &keep))) {
        json_decref(pos), json_decref(neg);
        return st;
    }
    size_t n = keep < (size_t)x->o->n ? keep : (size_t)x->o->n;
    for (size_t j = 0; j < n && !st; j++) {
        const char *title, *body;
        if (!qac_textmap_get(x->corpus, cands[j].docid, &title, &body))
            st = qac_set_error(QAC_ERR_NOT_FOUND, "run: passage '%s' of query '%s' is not in the corpus %s",
                               cands[j].docid, qid, x->o->corpus);
        else
            json_array_append_new(neg, psg_json(cands[j].docid, title, body));
    }
    if (st) {
        json_decref(pos), json_decref(neg);
        return st;
    }
    json_t *o = json_object();
    json_object_set_new(o, "query_id", json_string(qid));
    json_object_set_new(o, "query", json_string(query));
    json_object_set_new(o, "positive_passages", pos);
    json_object_set_new(o, "negative_passages", neg);
    char *line = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(o);
    if (!line || fprintf(x->out, "%s\n", line) < 0) st = qac_set_error(QAC_ERR_IO, "%s: write failed", x->o->out);
    free(line);
    x->stats->written++;
    x->stats->negatives += (long)n;
    if (n < (size_t)x->o->n) x->stats->short_of_negatives++;
    return st;
}

static qac_status grow_cands(mine_ctx *x, size_t n) {
    if (n <= x->ccap) return QAC_OK;
    cand *c = realloc(x->c, n * sizeof *c);
    if (!c) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    x->c = c, x->ccap = n;
    return QAC_OK;
}

#define SEARCH_BATCH 64

qac_status qac_mine(const qac_mine_opts *o, qac_mine_stats *stats) {
    memset(stats, 0, sizeof *stats);
    if (!o->run == !(o->enc && o->index))
        return qac_set_error(QAC_ERR_INVALID, "mine: give a run, or a model and an index");
    if (o->n < 1 || o->depth < 1 || !o->queries || !o->qrels || !o->corpus || !o->out)
        return qac_set_error(QAC_ERR_INVALID, "mine: queries, qrels, corpus and out are required; n, depth >= 1");
    if (!o->run && o->depth > 1000) return qac_set_error(QAC_ERR_INVALID, "mine: depth is at most 1000 when searching");
    mine_ctx x = {o, NULL, NULL, NULL, stats, NULL, 0, {0}, NULL, NULL, NULL};
    qac_qrels *qrels = NULL;
    qac_textmap *corpus = NULL;
    qac_run *run = NULL;
    qac_strmap *run_q = NULL;
    qac_reader *r = NULL;
    qac_atomic_file af = {0};
    char *qids[SEARCH_BATCH] = {0}, *texts[SEARCH_BATCH] = {0};
    float *qv = NULL, *scores = NULL;
    int64_t *rows = NULL;
    int nb = 0;
    qac_status st = qac_qrels_load(&qrels, o->qrels, QAC_QRELS_AUTO);
    if (!st && o->denoise) {
        int NL = qac_reranker_model(o->denoise)->num_labels;
        st = qac_rr_texts_create(&x.tx, (size_t)o->n);
        x.rc = malloc((size_t)o->n * sizeof *x.rc);
        x.logits = malloc((size_t)o->n * NL * sizeof *x.logits);
        x.prob = malloc((size_t)o->n * sizeof *x.prob);
        if (!st && (!x.rc || !x.logits || !x.prob)) st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    if (!st) st = qac_textmap_load(&corpus, o->corpus, QAC_READ_CORPUS, o->corpus_format);
    if (!st && o->run) {
        st = qac_run_load(&run, o->run);
        if (!st) st = qac_strmap_create(&run_q);
        for (size_t i = 0; !st && i < qac_run_num_queries(run); i++) st = qac_strmap_put(run_q, qac_run_qid(run, i), (long)i);
    } else if (!st) {
        int dim = qac_index_dim(o->index);
        if (qac_encoder_dim(o->enc) != dim)
            st = qac_set_error(QAC_ERR_INVALID, "mine: model dimension %d differs from the index's %d",
                               qac_encoder_dim(o->enc), dim);
        qv = malloc((size_t)SEARCH_BATCH * dim * sizeof *qv);
        scores = malloc((size_t)SEARCH_BATCH * o->depth * sizeof *scores);
        rows = malloc((size_t)SEARCH_BATCH * o->depth * sizeof *rows);
        if (!st && (!qv || !scores || !rows)) st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    if (!st) st = qac_reader_open(&r, o->queries, QAC_READ_QUERIES, o->queries_format);
    if (!st) st = qac_atomic_open(&af, o->out);
    x.qrels = qrels, x.corpus = corpus, x.out = af.f;
    for (int eof = 0; !st && !eof;) {
        qac_record rec;
        int got;
        if ((st = qac_reader_next(r, &rec, &got))) break;
        if (!got) eof = 1;
        else stats->queries++;
        if (got && o->run) {
            long ri = run_q ? qac_strmap_get(run_q, rec.id) : -1;
            const char *const *docids = NULL;
            const double *sc = NULL;
            size_t ne = ri >= 0 ? qac_run_entries(run, (size_t)ri, &docids, &sc) : 0;
            if (!(st = grow_cands(&x, ne + 1))) {
                for (size_t j = 0; j < ne; j++) x.c[j].docid = docids[j], x.c[j].score = sc[j];
                char *q = strndup(rec.text, rec.text_len);
                st = q ? mine_query(&x, rec.id, q, x.c, ne) : qac_set_error(QAC_ERR_NOMEM, "out of memory");
                free(q);
            }
        } else if (got) {
            qids[nb] = strdup(rec.id), texts[nb] = strndup(rec.text, rec.text_len);
            if (!qids[nb++] || !texts[nb - 1]) st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
        }
        if (!st && !o->run && nb && (nb == SEARCH_BATCH || eof)) {
            st = qac_encoder_encode_texts_prompted(o->enc, qac_model_query_prompt(qac_encoder_model(o->enc)),
                                                   (const char *const *)texts, NULL, nb, o->q_max, qv);
            if (!st) st = qac_index_search(o->index, qv, nb, o->depth, scores, rows);
            if (!st) st = grow_cands(&x, (size_t)o->depth);
            for (int q = 0; q < nb && !st; q++) {
                size_t nc = 0;
                for (int j = 0; j < o->depth; j++) {
                    int64_t row = rows[(size_t)q * o->depth + j];
                    if (row < 0) break;
                    x.c[nc].docid = qac_index_docid(o->index, row);
                    x.c[nc++].score = scores[(size_t)q * o->depth + j];
                }
                st = mine_query(&x, qids[q], texts[q], x.c, nc);
            }
            for (int q = 0; q < nb; q++) free(qids[q]), free(texts[q]), qids[q] = texts[q] = NULL;
            nb = 0;
        }
        if (!st && o->progress) o->progress(o->progress_user, "mine", (uint64_t)stats->queries, 0);
    }
    for (int q = 0; q < nb; q++) free(qids[q]), free(texts[q]);
    if (!st && stats->written == 0)
        st = qac_set_error(QAC_ERR_INVALID, "mine: no query of %s has a judged positive in %s", o->queries, o->qrels);
    if (af.f) {
        if (st) qac_atomic_abort(&af);
        else st = qac_atomic_commit(&af);
    }
    free(x.c), free(qv), free(scores), free(rows);
    qac_rr_texts_free(&x.tx);
    free(x.rc), free(x.logits), free(x.prob);
    qac_reader_free(r);
    qac_strmap_free(run_q);
    qac_run_free(run);
    qac_textmap_free(corpus);
    qac_qrels_free(qrels);
    return st;
}
