/* The cross-encoder's training run (api/qac_rerank.h): groups sampled by
 * the fine-tuning rule, assembled into pairs, as steps of the
 * cross-encoder trainer; the per-step log, checkpoints, resume, a dev run
 * reranked at every save, and the reranker exported at the end. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "qac_eval.h"
#include "qac_rerank.h"
#include "qac_util.h"
#include "xenc_trainer.h"

/* the data cursor: magic, examples, data digest, examples drawn, groups per
 * step, pairs per group, pair length, truncation */
#define CURSOR_MAGIC 0x3152554358434151ull /* "QACXCUR1" */
#define CURSOR_WORDS 8

void qac_xenc_train_opts_default(qac_xenc_train_opts *o) {
    memset(o, 0, sizeof *o);
    qac_finetune_opts_default(&o->ft);
    o->max_len = 160;
    o->truncation = QAC_TRUNC_LONGEST_FIRST;
    o->head_dropout = -1;
}

/* ---- the batch source ---- */

typedef struct pair_src {
    const qac_ft_data *d;
    const qac_tokenizer *tok;
    uint64_t seed, digest;
    int groups, n;
    qac_pair_opts po;
    size_t N;
    int64_t pos; /* examples drawn so far, over every epoch */
    size_t *perm;
    int64_t perm_epoch;
    const char **pt;  /* [n] one group's passage texts */
    int32_t *rows, *rtypes; /* [groups*n, max_len] assembled pairs */
    int *lens;
    int32_t *ids, *types; /* [groups*n, T] padded */
    long tokens;
    qac_xenc_batch b;
    FILE *dump;       /* --dump-batches: every step's groups as jsonl, or NULL */
    const char **did; /* [n] one group's docids */
} pair_src;

/* One step's groups as the bi-encoder's dump writes them (queries, and
 * each group's passages, the positive first), with the query ids and the
 * passages' docids: what a reference trainer needs to take the same
 * groups in the same order. */
static qac_status dump_group(json_t *o, const pair_src *s, size_t ex, const char *q) {
    json_t *ps = json_array(), *ds = json_array();
    for (int j = 0; j < s->n; j++) {
        json_array_append_new(ps, json_string(s->pt[j]));
        json_array_append_new(ds, json_string(s->did[j]));
    }
    int bad = json_array_append_new(json_object_get(o, "queries"), json_string(q)) ||
              json_array_append_new(json_object_get(o, "qids"), json_string(qac_ft_data_qid(s->d, ex))) ||
              json_array_append_new(json_object_get(o, "passages"), ps) ||
              json_array_append_new(json_object_get(o, "docids"), ds);
    return bad ? qac_set_error(QAC_ERR_NOMEM, "batch dump: out of memory") : QAC_OK;
}

static qac_status dump_write(pair_src *s, json_t *o) {
    json_object_set_new(o, "step", json_integer(s->pos / s->groups + 1));
    char *line = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
    int bad = !line || fprintf(s->dump, "%s\n", line) < 0 || fflush(s->dump) != 0;
    free(line);
    return bad ? qac_set_error(QAC_ERR_IO, "writing the batch dump failed") : QAC_OK;
}

static qac_status src_next(pair_src *s) {
    int P = s->groups * s->n, L = s->po.max_len, T = 1;
    s->tokens = 0;
    json_t *dump = NULL;
    if (s->dump && !(dump = json_pack("{s:[], s:[], s:[], s:[]}", "queries", "qids", "passages", "docids")))
        return qac_set_error(QAC_ERR_NOMEM, "batch dump: out of memory");
    for (int k = 0; k < s->groups; k++) {
        int64_t p = s->pos + k, ep = p / (int64_t)s->N;
        if (ep != s->perm_epoch) {
            qac_status st = qac_ft_order(s->seed, (uint64_t)ep, s->N, s->perm);
            if (st) {
                json_decref(dump);
                return st;
            }
            s->perm_epoch = ep;
        }
        size_t ex = s->perm[p % (int64_t)s->N];
        const char *q = qac_ft_data_query(s->d, ex);
        qac_ft_data_group(s->d, s->seed, ex, (uint64_t)ep, s->n, s->pt, s->did);
        qac_status st = dump ? dump_group(dump, s, ex, q) : QAC_OK;
        for (int j = 0; j < s->n && !st; j++) {
            int r = k * s->n + j;
            st = qac_pair_encode(s->tok, q, strlen(q), s->pt[j], strlen(s->pt[j]), &s->po, s->rows + (size_t)r * L,
                                 s->rtypes + (size_t)r * L, &s->lens[r], NULL);
            if (st) st = qac_wrap_error(st, "training example %zu (query '%s')", ex, qac_ft_data_qid(s->d, ex));
            else T = s->lens[r] > T ? s->lens[r] : T, s->tokens += s->lens[r];
        }
        if (st) {
            json_decref(dump);
            return st;
        }
    }
    if (dump) {
        qac_status st = dump_write(s, dump);
        json_decref(dump);
        if (st) return st;
    }
    s->pos += s->groups;
    int32_t pad = qac_tokenizer_specials(s->tok).pad;
    for (int r = 0; r < P; r++) {
        int32_t *row = s->ids + (size_t)r * T, *ty = s->types + (size_t)r * T;
        memcpy(row, s->rows + (size_t)r * L, (size_t)s->lens[r] * sizeof *row);
        memcpy(ty, s->rtypes + (size_t)r * L, (size_t)s->lens[r] * sizeof *ty);
        for (int t = s->lens[r]; t < T; t++) row[t] = pad < 0 ? 0 : pad, ty[t] = 0;
    }
    s->b = (qac_xenc_batch){s->groups, s->n, T, s->ids, s->types, s->lens};
    return QAC_OK;
}

static void cursor_words(const pair_src *s, uint64_t *c) {
    c[0] = CURSOR_MAGIC, c[1] = s->N, c[2] = s->digest, c[3] = (uint64_t)s->pos, c[4] = (uint64_t)s->groups;
    c[5] = (uint64_t)s->n, c[6] = (uint64_t)s->po.max_len, c[7] = (uint64_t)s->po.strategy;
}

static qac_status set_cursor(pair_src *s, const void *bytes, size_t len) {
    uint64_t c[CURSOR_WORDS], now[CURSOR_WORDS];
    if (len != sizeof c) return qac_set_error(QAC_ERR_FORMAT, "resume: not a cross-encoder data cursor");
    memcpy(c, bytes, sizeof c);
    cursor_words(s, now);
    if (c[0] != CURSOR_MAGIC) return qac_set_error(QAC_ERR_FORMAT, "resume: not a cross-encoder data cursor");
    static const char *const names[4] = {"--batch", "--n-passages", "--max-len", "--truncation"};
    for (int i = 4; i < CURSOR_WORDS; i++)
        if (c[i] != now[i]) {
            char a[64], b[64];
            if (i == 7) snprintf(a, sizeof a, "%s", qac_truncation_name((qac_truncation)c[i])),
                        snprintf(b, sizeof b, "%s", qac_truncation_name((qac_truncation)now[i]));
            else snprintf(a, sizeof a, "%llu", (unsigned long long)c[i]), snprintf(b, sizeof b, "%llu",
                                                                                  (unsigned long long)now[i]);
            return qac_set_error(QAC_ERR_MISMATCH,
                                 "resume: the run was written with %s %s, this resume has %s; resume with the same %s "
                                 "(a changed option would not continue the run bit for bit), or start a new --out",
                                 names[i - 4], a, b, names[i - 4]);
        }
    if (c[1] != s->N || c[2] != s->digest)
        return qac_set_error(QAC_ERR_MISMATCH,
                             "resume: the training data differ from the run's (%llu examples then, %zu now%s); resume "
                             "with the same --train files, --title-join and --n-passages, or start a new --out",
                             (unsigned long long)c[1], s->N, c[1] == s->N ? ", other content" : "");
    s->pos = (int64_t)c[3];
    return QAC_OK;
}

static void src_free(pair_src *s) {
    free(s->perm), free(s->pt), free(s->did), free(s->rows), free(s->rtypes), free(s->lens), free(s->ids), free(s->types);
}

static qac_status src_init(pair_src *s, const qac_xenc *x, const qac_ft_data *d, const qac_xenc_train_opts *o) {
    memset(s, 0, sizeof *s);
    s->d = d, s->tok = x->bert->tok, s->seed = o->ft.train.seed, s->digest = qac_ft_data_digest(d);
    s->groups = o->ft.queries_per_batch, s->n = o->ft.n_passages;
    s->po = (qac_pair_opts){o->max_len, o->truncation, QAC_TRUNC_RIGHT};
    s->N = qac_ft_data_count(d), s->perm_epoch = -1;
    size_t P = (size_t)s->groups * s->n, L = (size_t)o->max_len;
    s->perm = malloc(s->N * sizeof *s->perm);
    s->pt = malloc((size_t)s->n * sizeof *s->pt);
    s->did = malloc((size_t)s->n * sizeof *s->did);
    s->rows = malloc(P * L * sizeof *s->rows), s->rtypes = malloc(P * L * sizeof *s->rtypes);
    s->ids = malloc(P * L * sizeof *s->ids), s->types = malloc(P * L * sizeof *s->types);
    s->lens = malloc(P * sizeof *s->lens);
    if (!s->perm || !s->pt || !s->did || !s->rows || !s->rtypes || !s->ids || !s->types || !s->lens)
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    return QAC_OK;
}

/* ---- the dev run ---- */

static qac_status dev_eval(qac_xenc *x, const qac_xenc_train_opts *o, long step, qac_ft_dev *res) {
    double t0 = qac_now();
    char dir[4096], path[4096], name[64];
    snprintf(name, sizeof name, "run-%ld.trec", step);
    qac_status st = qac_path_join(dir, sizeof dir, o->ft.out_dir, "dev");
    if (!st) st = qac_mkdirs(dir);
    if (!st) st = qac_path_join(path, sizeof path, dir, name);
    qac_encoder_opts eo = qac_encoder_default_opts();
    eo.device = QAC_DEVICE_CPU;
    eo.threads = o->ft.train.threads > 0 ? o->ft.train.threads : 0;
    qac_reranker *r = NULL;
    qac_rerank_opts ro;
    qac_rerank_opts_default(&ro);
    ro.run = o->dev_run, ro.queries = o->ft.dev_queries, ro.corpus = o->ft.dev_corpus, ro.depth = o->ft.dev_depth;
    ro.pair = (qac_pair_opts){o->max_len, o->truncation, QAC_TRUNC_RIGHT};
    ro.run_id = "dev", ro.out = path;
    qac_rerank_stats rs;
    qac_qrels *qrels = NULL;
    qac_run *run = NULL;
    qac_eval_result *er = NULL;
    static const char *measures[] = {"ndcg_cut.10", "map", "recall.100", "recip_rank"};
    qac_eval_params ep = {0, 1, 1};
    if (!st) st = qac_reranker_create(&r, x, &eo);
    if (!st) st = qac_rerank_run(r, &ro, &rs);
    if (!st) st = qac_qrels_load(&qrels, o->ft.dev_qrels, QAC_QRELS_AUTO);
    if (!st) st = qac_run_load(&run, path);
    if (!st) st = qac_eval_compute(&er, qrels, run, measures, 4, &ep);
    if (!st) st = qac_eval_summary(er, "ndcg_cut_10", &res->ndcg10);
    if (!st) st = qac_eval_summary(er, "map", &res->map);
    if (!st) st = qac_eval_summary(er, "recall_100", &res->recall100);
    qac_eval_result_free(er);
    er = NULL;
    ep.max_docs = 10;
    if (!st) st = qac_eval_compute(&er, qrels, run, measures + 3, 1, &ep);
    if (!st) st = qac_eval_summary(er, "recip_rank", &res->mrr10);
    res->step = step;
    res->seconds = qac_now() - t0;
    qac_eval_result_free(er);
    qac_run_free(run);
    qac_qrels_free(qrels);
    qac_reranker_free(r);
    return st ? qac_wrap_error(st, "dev run at step %ld", step) : QAC_OK;
}

static qac_status append_dev(const char *path, const qac_ft_dev *r) {
    FILE *f = fopen(path, "a");
    if (!f) return qac_set_error(QAC_ERR_IO, "%s: %s", path, strerror(errno));
    fprintf(f, "{\"step\":%ld,\"ndcg_cut_10\":%.6f,\"map\":%.6f,\"recall_100\":%.6f,\"recip_rank_10\":%.6f}\n", r->step,
            r->ndcg10, r->map, r->recall100, r->mrr10);
    return fclose(f) ? qac_set_error(QAC_ERR_IO, "%s: write failed", path) : QAC_OK;
}

/* ---- the run ---- */

static qac_status check_opts(const qac_ft_data *d, const qac_xenc_train_opts *o, const qac_xenc *x) {
    const qac_finetune_opts *f = &o->ft;
    if (qac_ft_data_count(d) == 0) return qac_set_error(QAC_ERR_INVALID, "the training set is empty");
    if (!f->out_dir) return qac_set_error(QAC_ERR_INVALID, "no output directory");
    if (f->queries_per_batch < 1 || f->n_passages < 2 || f->n_passages > 1024)
        return qac_set_error(QAC_ERR_INVALID,
                             "a reranker trains on groups of one positive and at least one negative: --n-passages %d "
                             "must be 2 to 1024 (and --batch at least 1)", f->n_passages);
    int specials = qac_pair_specials_of(x->bert->tok);
    if (o->max_len <= specials || o->max_len > x->bert->cfg.max_position)
        return qac_set_error(QAC_ERR_INVALID, "--max-len %d: a pair takes more than its %d specials and at most the "
                                              "model's %d positions", o->max_len, specials,
                             x->bert->cfg.max_position);
    int ndev = !!f->dev_queries + !!f->dev_qrels + !!f->dev_corpus + !!o->dev_run;
    if (ndev != 0 && ndev != 4)
        return qac_set_error(QAC_ERR_INVALID,
                             "a reranker's dev set needs all of --dev-queries, --dev-qrels, --dev-corpus and --dev-run "
                             "(the first-stage run it reranks)");
    if (f->dry_run)
        return qac_set_error(QAC_ERR_UNSUPPORTED, "--dry-run is for bi-encoders");
    return QAC_OK;
}

typedef struct run_state {
    qac_xtrainer *t;
    pair_src s;
    char log_path[4096], dev_path[4096];
} run_state;

static qac_status save(run_state *rs, const qac_xenc_train_opts *o) {
    char name[64], path[4096];
    uint64_t c[CURSOR_WORDS];
    cursor_words(&rs->s, c);
    snprintf(name, sizeof name, "checkpoint-%ld", rs->t->step);
    qac_status st = qac_path_join(path, sizeof path, o->ft.out_dir, name);
    if (!st) st = qac_xtrainer_save(rs->t, path, c, sizeof c);
    if (!st) st = qac_rundir_write_latest(o->ft.out_dir, name);
    if (!st) st = qac_rundir_prune(o->ft.out_dir, o->ft.keep > 0 ? o->ft.keep : 2, rs->t->step);
    return st;
}

/* continue OUT/latest, or start; the logs trimmed to where the run stands */
static qac_status start(run_state *rs, const qac_xenc_train_opts *o, long *resumed_at) {
    char name[256], path[4096];
    int have = qac_rundir_read_latest(o->ft.out_dir, name, sizeof name) == QAC_OK;
    if (have && !o->ft.resume)
        return qac_set_error(QAC_ERR_INVALID, "%s already holds a training run (%s); --resume it or choose another --out",
                             o->ft.out_dir, name);
    qac_status st = QAC_OK;
    if (have) {
        void *cur = NULL;
        size_t cl = 0;
        if (!(st = qac_path_join(path, sizeof path, o->ft.out_dir, name)) &&
            !(st = qac_xtrainer_resume(rs->t, path, &cur, &cl)))
            st = set_cursor(&rs->s, cur, cl);
        free(cur);
        if (!st && resumed_at) *resumed_at = rs->t->step;
    }
    if (!st) st = qac_rundir_trim_log(rs->log_path, rs->t->step);
    if (!st) st = qac_rundir_trim_log(rs->dev_path, rs->t->step);
    return st;
}

static qac_status save_model(const void *x, const char *dir) { return qac_xenc_save(x, dir); }

qac_status qac_xenc_train_run(qac_xenc *x, const qac_ft_data *d, const qac_xenc_train_opts *o, long *total_steps,
                              long *resumed_at) {
    if (resumed_at) *resumed_at = 0;
    qac_status st = check_opts(d, o, x);
    if (st) return st;
    const qac_finetune_opts *f = &o->ft;
    qac_train_opts to = f->train;
    size_t N = qac_ft_data_count(d);
    if (to.total_steps <= 0) {
        if (!(f->epochs > 0)) return qac_set_error(QAC_ERR_INVALID, "give a number of steps or epochs");
        to.total_steps = (long)ceil(f->epochs * (double)N / f->queries_per_batch - 1e-9);
    }
    if (to.warmup_steps < 0) to.warmup_steps = (long)llround(f->warmup_ratio * (double)to.total_steps);
    if (total_steps) *total_steps = to.total_steps;
    run_state rs = {0};
    float head_drop = o->head_dropout >= 0 ? o->head_dropout : x->classifier_dropout;
    if (!(st = qac_mkdirs(f->out_dir)) && !(st = qac_path_join(rs.log_path, sizeof rs.log_path, f->out_dir, "log.jsonl")))
        st = qac_path_join(rs.dev_path, sizeof rs.dev_path, f->out_dir, "dev.jsonl");
    if (!st) st = src_init(&rs.s, x, d, o);
    if (!st) st = qac_xtrainer_create(&rs.t, x, &to, head_drop);
    if (!st) st = start(&rs, o, resumed_at);
    qac_atomic_file dump = {0};
    if (!st && f->dump_batches && !(st = qac_atomic_open(&dump, f->dump_batches))) rs.s.dump = dump.f;
    FILE *log = NULL;
    if (!st && !(log = fopen(rs.log_path, "a"))) st = qac_set_error(QAC_ERR_IO, "%s: %s", rs.log_path, strerror(errno));
    double t0 = qac_now();
    long run = 0, total = to.total_steps;
    while (!st && rs.t->step < total) {
        qac_crash_point("xenc_batch"); /* resume tests kill here */
        qac_step_stats ss;
        if ((st = src_next(&rs.s)) || (st = qac_xtrainer_step(rs.t, &rs.s.b, &ss))) break;
        fprintf(log, "{\"step\":%ld,\"loss\":%.17g,\"lr\":%.17g,\"grad_norm\":%.17g,\"seconds\":%.3f,\"tokens\":%ld}\n",
                ss.step, ss.loss, ss.lr, ss.grad_norm, ss.seconds, rs.s.tokens);
        if (fflush(log) != 0) st = qac_set_error(QAC_ERR_IO, "%s: %s", rs.log_path, strerror(errno));
        run++;
        int stop = 0;
        if (f->on_step) {
            qac_ft_progress p = {ss.step, total, (double)rs.s.pos / (double)N, ss.loss, ss.lr, ss.grad_norm,
                                 ss.seconds, qac_now() - t0, run, rs.s.groups * rs.s.n};
            stop = f->on_step(f->user, &p);
        }
        int saving = (f->save_every > 0 && ss.step % f->save_every == 0) || ss.step == total;
        if (!st && saving && o->dev_run) {
            qac_ft_dev r;
            if (!(st = dev_eval(x, o, ss.step, &r)) && !(st = append_dev(rs.dev_path, &r)) && f->on_dev)
                f->on_dev(f->user, &r);
        }
        if (!st && saving) st = save(&rs, o);
        if (!st && stop)
            st = qac_set_error(QAC_ERR_CANCELLED, "training stopped by the caller after step %ld", ss.step);
    }
    if (log && fclose(log) != 0 && !st) st = qac_set_error(QAC_ERR_IO, "%s: %s", rs.log_path, strerror(errno));
    if (dump.f) {
        if (st) qac_atomic_abort(&dump);
        else st = qac_atomic_commit(&dump);
    }
    /* the reranker itself in OUT: its files appear together (config.json
     * last), the checkpoints beside it untouched */
    if (!st) {
        qac_xenc_update_fingerprint(x);
        st = qac_ckpt_export_with(save_model, x, f->out_dir);
    }
    qac_xtrainer_free(rs.t);
    src_free(&rs.s);
    return st;
}
