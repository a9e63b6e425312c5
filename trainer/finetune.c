/* The fine-tuning run: Tevatron-sampled batches as a resumable batch
 * source for the training loop, and a dev set scored at every save. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "qac_finetune.h"
#include "qac_util.h"
#include "trainer_internal.h"

/* The data cursor: u64 magic, examples, data digest, examples drawn, then
 * (version 2) queries per batch, passages per query, q_max, p_max, then
 * (version 3) the prompts' digest (prompts_digest). A version-1 cursor lacks
 * the batch shape, which is then not compared; a run without prompts writes
 * version 2, which stands for none. */
#define CURSOR_MAGIC 0x5255434654434151ull    /* "QACTFCUR" in the file, version 1 */
#define CURSOR_MAGIC_V2 0x3255434654434151ull /* "QACTFCU2" */
#define CURSOR_MAGIC_V3 0x3355434654434151ull /* "QACTFCU3" */
#define CURSOR_WORDS 9

void qac_finetune_opts_default(qac_finetune_opts *o) {
    memset(o, 0, sizeof *o);
    qac_train_opts_default(&o->train);
    o->train.total_steps = 0;
    o->train.warmup_steps = -1;
    o->epochs = 3;
    o->warmup_ratio = 0.1;
    o->queries_per_batch = 8;
    o->n_passages = 8;
    o->q_max = 32;
    o->p_max = 128;
    o->keep = 2;
    o->dev_depth = 100;
}

/* ---- the batch source ---- */

typedef struct ft_src {
    const qac_ft_data *d;
    const qac_tokenizer *tok;
    uint64_t seed, digest;
    int nq, n, q_max, p_max;
    size_t N;
    int64_t pos; /* examples drawn so far, over all epochs */
    size_t *perm;
    int64_t perm_epoch;
    const char **qt, **pt;
    const char *q_prompt, *p_prompt; /* put before every query / passage ("": none) */
    uint64_t prompts; /* prompts_digest of the two */
    qac_batch_buf bb;
    FILE *dump;
    qac_status deferred; /* an error from the per-step hook, reported at the next batch */
} ft_src;

/* XXH64 of query prompt, NUL, passage prompt: what a resume must keep. */
static uint64_t prompts_digest(const char *q, const char *p) {
    qac_xxh64 h;
    qac_xxh64_init(&h);
    qac_xxh64_update(&h, q, strlen(q) + 1);
    qac_xxh64_update(&h, p, strlen(p));
    return qac_xxh64_digest(&h);
}

/* The dump shows what the encoder reads: prompt and text as one string. */
static json_t *prompted_string(const char *prompt, const char *text) {
    size_t a = strlen(prompt), b = strlen(text);
    char *buf = malloc(a + b + 1);
    if (!buf) return NULL;
    memcpy(buf, prompt, a);
    memcpy(buf + a, text, b + 1);
    json_t *j = json_string(buf);
    free(buf);
    return j;
}

static qac_status fill_texts(ft_src *s) {
    for (int k = 0; k < s->nq; k++) {
        int64_t p = s->pos + k, ep = p / (int64_t)s->N;
        if (ep != s->perm_epoch) {
            qac_ft_order(s->seed, (uint64_t)ep, s->N, s->perm);
            s->perm_epoch = ep;
        }
        size_t ex = s->perm[p % (int64_t)s->N];
        s->qt[k] = qac_ft_data_query(s->d, ex);
        qac_ft_data_group(s->d, s->seed, ex, (uint64_t)ep, s->n, s->pt + (size_t)k * s->n, NULL);
    }
    if (s->dump) {
        json_t *o = json_object(), *qs = json_array(), *ps = json_array();
        for (int k = 0; k < s->nq; k++) {
            json_array_append_new(qs, prompted_string(s->q_prompt, s->qt[k]));
            json_t *g = json_array();
            for (int j = 0; j < s->n; j++)
                json_array_append_new(g, prompted_string(s->p_prompt, s->pt[(size_t)k * s->n + j]));
            json_array_append_new(ps, g);
        }
        json_object_set_new(o, "step", json_integer(s->pos / s->nq + 1));
        json_object_set_new(o, "queries", qs);
        json_object_set_new(o, "passages", ps);
        char *line = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
        json_decref(o);
        if (!line || fprintf(s->dump, "%s\n", line) < 0) {
            free(line);
            return qac_set_error(QAC_ERR_IO, "writing the batch dump failed");
        }
        free(line);
    }
    s->pos += s->nq;
    return QAC_OK;
}

static qac_status src_next(void *user, const qac_train_batch **out) {
    ft_src *s = user;
    if (s->deferred) return s->deferred;
    qac_crash_point("finetune_batch"); /* resume tests kill here */
    qac_status st = fill_texts(s);
    if (!st)
        st = qac_batch_build_prompted(&s->bb, s->tok, s->q_prompt, s->qt, s->nq, s->p_prompt, s->pt, s->n, s->q_max,
                                      s->p_max);
    *out = &s->bb.b;
    return st;
}

static qac_status src_get_cursor(void *user, void **bytes, size_t *len) {
    ft_src *s = user;
    uint64_t *c = malloc(CURSOR_WORDS * sizeof *c);
    if (!c) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    int v3 = s->prompts != prompts_digest("", "");
    c[0] = v3 ? CURSOR_MAGIC_V3 : CURSOR_MAGIC_V2, c[1] = s->N, c[2] = s->digest, c[3] = (uint64_t)s->pos;
    c[4] = (uint64_t)s->nq, c[5] = (uint64_t)s->n, c[6] = (uint64_t)s->q_max, c[7] = (uint64_t)s->p_max;
    c[8] = s->prompts;
    *bytes = c, *len = (size_t)(v3 ? CURSOR_WORDS : CURSOR_WORDS - 1) * sizeof *c;
    return QAC_OK;
}

static qac_status src_set_cursor(void *user, const void *bytes, size_t len) {
    ft_src *s = user;
    uint64_t c[CURSOR_WORDS] = {0};
    if (len == 4 * sizeof *c || len == 8 * sizeof *c || len == sizeof c) memcpy(c, bytes, len);
    if (!(c[0] == CURSOR_MAGIC && len == 4 * sizeof *c) && !(c[0] == CURSOR_MAGIC_V2 && len == 8 * sizeof *c) &&
        !(c[0] == CURSOR_MAGIC_V3 && len == sizeof c))
        return qac_set_error(QAC_ERR_FORMAT, "resume: not a fine-tuning data cursor");
    /* runs written before prompts had none */
    uint64_t had = c[0] == CURSOR_MAGIC_V3 ? c[8] : prompts_digest("", "");
    if (had != s->prompts)
        return qac_set_error(QAC_ERR_MISMATCH,
                             "resume: the run was written with other prompts than this resume's (query %s%s%s, "
                             "passage %s%s%s); resume with the same --query-prompt and --passage-prompt (the model's "
                             "prompts, unless given; '' for none), or start a new --out",
                             *s->q_prompt ? "\"" : "", *s->q_prompt ? s->q_prompt : "none", *s->q_prompt ? "\"" : "",
                             *s->p_prompt ? "\"" : "", *s->p_prompt ? s->p_prompt : "none", *s->p_prompt ? "\"" : "");
    if (c[0] != CURSOR_MAGIC) {
        static const char *const names[4] = {"--batch", "--n-passages", "--q-max-len", "--p-max-len"};
        const uint64_t now[4] = {(uint64_t)s->nq, (uint64_t)s->n, (uint64_t)s->q_max, (uint64_t)s->p_max};
        for (int i = 0; i < 4; i++)
            if (c[4 + i] != now[i])
                return qac_set_error(QAC_ERR_MISMATCH,
                                     "resume: the run was written with %s %llu, this resume has %llu; resume with the "
                                     "same %s (a changed option would not continue the run bit for bit), or start a "
                                     "new --out",
                                     names[i], (unsigned long long)c[4 + i], (unsigned long long)now[i], names[i]);
    }
    if (c[1] != s->N || c[2] != s->digest)
        return qac_set_error(QAC_ERR_MISMATCH,
                             "resume: the training data differ from the run's (%llu examples then, %zu now%s); resume "
                             "with the same --train files, --title-join and --n-passages, or start a new --out",
                             (unsigned long long)c[1], s->N, c[1] == s->N ? ", other content" : "");
    s->pos = (int64_t)c[3];
    return QAC_OK;
}

/* ---- the dev set ---- */

typedef struct dev_set {
    char **qid, **qtext, **did, **dtext;
    size_t nq, nd, qcap, dcap;
    qac_qrels *qrels;
} dev_set;

static void dev_free(dev_set *v) {
    for (size_t i = 0; i < v->nq; i++) free(v->qid[i]), free(v->qtext[i]);
    for (size_t i = 0; i < v->nd; i++) free(v->did[i]), free(v->dtext[i]);
    free(v->qid), free(v->qtext), free(v->did), free(v->dtext);
    qac_qrels_free(v->qrels);
}

static qac_status read_all(const char *path, qac_reader_kind kind, char ***ids, char ***texts, size_t *n,
                           size_t *cap) {
    qac_reader *r;
    qac_status st = qac_reader_open(&r, path, kind, QAC_FMT_AUTO);
    for (int got = 1; !st;) {
        qac_record rec;
        if ((st = qac_reader_next(r, &rec, &got)) || !got) break;
        if (*n == *cap) {
            size_t nc = *cap ? *cap * 2 : 256;
            char **a = realloc(*ids, nc * sizeof *a), **b = a ? realloc(*texts, nc * sizeof *b) : NULL;
            if (a) *ids = a;
            if (!b) {
                st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
                break;
            }
            *texts = b, *cap = nc;
        }
        (*ids)[*n] = strdup(rec.id);
        (*texts)[*n] = strndup(rec.text, rec.text_len);
        (*n)++;
        if (!(*ids)[*n - 1] || !(*texts)[*n - 1]) st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    qac_reader_free(r);
    if (st) return st;
    if (*n == 0) return qac_set_error(QAC_ERR_INVALID, "%s: no records", path);
    return QAC_OK;
}

static qac_status dev_load(dev_set *v, const qac_finetune_opts *o) {
    memset(v, 0, sizeof *v);
    qac_status st = read_all(o->dev_queries, QAC_READ_QUERIES, &v->qid, &v->qtext, &v->nq, &v->qcap);
    if (!st) st = read_all(o->dev_corpus, QAC_READ_CORPUS, &v->did, &v->dtext, &v->nd, &v->dcap);
    if (!st) st = qac_qrels_load(&v->qrels, o->dev_qrels, QAC_QRELS_AUTO);
    return st ? qac_wrap_error(st, "dev set") : QAC_OK;
}

typedef struct scored {
    float s;
    size_t i;
} scored;

static int by_score(const void *a, const void *b) {
    const scored *x = a, *y = b;
    return x->s < y->s ? 1 : x->s > y->s ? -1 : (x->i > y->i) - (x->i < y->i);
}

/* encode the dev set with the weights of this step, rank exhaustively,
 * write out/dev/run-<step>.trec and score it */
static qac_status dev_eval(const qac_model *m, const dev_set *v, const qac_finetune_opts *o, long step,
                           qac_ft_dev *res) {
    double t0 = qac_now();
    qac_encoder *enc = NULL;
    qac_encoder_opts eo = qac_encoder_default_opts();
    eo.device = QAC_DEVICE_CPU;
    eo.threads = o->train.threads > 0 ? o->train.threads : 0;
    qac_status st = qac_encoder_create(&enc, m, &eo);
    if (st) return st;
    int dim = qac_encoder_dim(enc), k = o->dev_depth < (int)v->nd ? o->dev_depth : (int)v->nd;
    float *D = malloc(v->nd * (size_t)dim * sizeof *D), *Q = malloc(v->nq * (size_t)dim * sizeof *Q);
    scored *sc = malloc(v->nd * sizeof *sc);
    const char **ids = malloc((size_t)k * sizeof *ids);
    float *ks = malloc((size_t)k * sizeof *ks);
    char dir[4096], path[4096], name[64];
    qac_atomic_file af = {0};
    qac_run *run = NULL;
    qac_eval_result *er = NULL;
    if (!D || !Q || !sc || !ids || !ks) st = qac_set_error(QAC_ERR_NOMEM, "dev set: out of memory");
    if (!st)
        st = qac_encoder_encode_texts_prompted(enc, qac_model_passage_prompt(m), (const char *const *)v->dtext, NULL,
                                               (int)v->nd, o->p_max, D);
    if (!st)
        st = qac_encoder_encode_texts_prompted(enc, qac_model_query_prompt(m), (const char *const *)v->qtext, NULL,
                                               (int)v->nq, o->q_max, Q);
    snprintf(name, sizeof name, "run-%ld.trec", step);
    if (!st) st = qac_path_join(dir, sizeof dir, o->out_dir, "dev");
    if (!st) st = qac_mkdirs(dir);
    if (!st) st = qac_path_join(path, sizeof path, dir, name);
    if (!st) st = qac_atomic_open(&af, path);
    for (size_t q = 0; q < v->nq && !st; q++) {
        for (size_t d = 0; d < v->nd; d++) {
            float s = 0;
            for (int c = 0; c < dim; c++) s += Q[q * dim + c] * D[d * dim + c];
            sc[d].s = s, sc[d].i = d;
        }
        qsort(sc, v->nd, sizeof *sc, by_score);
        for (int j = 0; j < k; j++) ids[j] = v->did[sc[j].i], ks[j] = sc[j].s;
        st = qac_run_write(af.f, v->qid[q], ids, ks, k, "dev");
    }
    if (af.f) {
        if (st) qac_atomic_abort(&af);
        else st = qac_atomic_commit(&af);
    }
    static const char *measures[] = {"ndcg_cut.10", "map", "recall.100", "recip_rank"};
    qac_eval_params ep = {0, 1, 1};
    if (!st) st = qac_run_load(&run, path);
    if (!st) st = qac_eval_compute(&er, v->qrels, run, measures, 4, &ep);
    if (!st) st = qac_eval_summary(er, "ndcg_cut_10", &res->ndcg10);
    if (!st) st = qac_eval_summary(er, "map", &res->map);
    if (!st) st = qac_eval_summary(er, "recall_100", &res->recall100);
    qac_eval_result_free(er);
    er = NULL;
    ep.max_docs = 10;
    if (!st) st = qac_eval_compute(&er, v->qrels, run, measures + 3, 1, &ep);
    if (!st) st = qac_eval_summary(er, "recip_rank", &res->mrr10);
    res->step = step;
    res->seconds = qac_now() - t0;
    qac_eval_result_free(er);
    qac_run_free(run);
    free(D), free(Q), free(sc), free(ids), free(ks);
    qac_encoder_free(enc);
    return st ? qac_wrap_error(st, "dev set at step %ld", step) : QAC_OK;
}

/* ---- the run ---- */

typedef struct hook {
    ft_src *src;
    const qac_finetune_opts *o;
    qac_model *m;
    const dev_set *dev;
    double t0;
    long steps_run;
    char dev_log[4096];
} hook;

static int on_step(void *user, const qac_step_stats *st, long total) {
    hook *h = user;
    h->steps_run++;
    int stop = 0;
    if (h->o->on_step) {
        qac_ft_progress p = {st->step, total, (double)h->src->pos / (double)h->src->N, st->loss, st->lr,
                             st->grad_norm, st->seconds, qac_now() - h->t0, h->steps_run,
                             h->src->nq * h->src->n};
        stop = h->o->on_step(h->o->user, &p);
    }
    int saving = (h->o->save_every > 0 && st->step % h->o->save_every == 0) || st->step == total;
    if (!h->dev || !saving || h->src->deferred) return stop;
    qac_ft_dev r;
    qac_status s = dev_eval(h->m, h->dev, h->o, st->step, &r);
    FILE *f = s ? NULL : fopen(h->dev_log, "a");
    if (!s && !f) s = qac_set_error(QAC_ERR_IO, "%s: %s", h->dev_log, strerror(errno));
    if (f) {
        fprintf(f, "{\"step\":%ld,\"ndcg_cut_10\":%.6f,\"map\":%.6f,\"recall_100\":%.6f,\"recip_rank_10\":%.6f}\n",
                r.step, r.ndcg10, r.map, r.recall100, r.mrr10);
        if (fclose(f) != 0) s = qac_set_error(QAC_ERR_IO, "%s: write failed", h->dev_log);
    }
    if (s) h->src->deferred = s; /* the loop stops at the next batch */
    else if (h->o->on_dev) h->o->on_dev(h->o->user, &r);
    return stop;
}

/* The step of OUT/latest, or -1 without one; a checkpoint whose
 * architecture differs from m is an error. */
static qac_status check_latest(const qac_model *m, const char *out, long *step) {
    char path[4096], cfgp[4096], *text = NULL, *cfgtext = NULL;
    size_t len, clen;
    *step = -1;
    struct stat sb;
    if (qac_path_join(path, sizeof path, out, "latest") || stat(path, &sb) != 0) return QAC_OK;
    qac_status st = qac_read_file(path, &text, &len);
    if (st) return st;
    while (len && (text[len - 1] == '\n' || text[len - 1] == ' ')) text[--len] = '\0';
    char dir[4096];
    if (sscanf(text, "checkpoint-%ld", step) != 1) st = qac_set_error(QAC_ERR_FORMAT, "%s: not a checkpoint name", path);
    if (!st) st = qac_path_join(dir, sizeof dir, out, text);
    free(text);
    if (!st) st = qac_path_join(cfgp, sizeof cfgp, dir, "config.json");
    if (!st) st = qac_read_file(cfgp, &cfgtext, &clen);
    qac_bert_config c;
    if (!st) st = qac_bert_config_parse(&c, cfgtext, clen);
    free(cfgtext);
    if (st) return qac_wrap_error(st, "resume: checkpoint %s", dir);
    const qac_bert_config *a = &m->cfg;
    struct {
        const char *name;
        int ck, model;
    } f[] = {{"vocab_size", c.vocab_size, a->vocab_size},
             {"hidden_size", c.hidden_size, a->hidden_size},
             {"num_hidden_layers", c.num_layers, a->num_layers},
             {"num_attention_heads", c.num_heads, a->num_heads},
             {"intermediate_size", c.intermediate_size, a->intermediate_size},
             {"max_position_embeddings", c.max_position, a->max_position},
             {"type_vocab_size", c.type_vocab_size, a->type_vocab_size}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].ck != f[i].model)
            return qac_set_error(QAC_ERR_INVALID,
                                 "resume: checkpoint %s is another architecture: %s %d, but the model %s has %d", dir,
                                 f[i].name, f[i].ck, m->dir ? m->dir : "(in memory)", f[i].model);
    return QAC_OK;
}

/* keep dev.jsonl lines of steps <= step (a resumed run redoes the rest) */
static qac_status trim_dev_log(const char *path, long step) {
    struct stat sb;
    if (stat(path, &sb) != 0) return QAC_OK;
    char *text = NULL;
    size_t len;
    qac_atomic_file af;
    qac_status st = qac_read_file(path, &text, &len);
    if (st || (st = qac_atomic_open(&af, path))) {
        free(text);
        return st;
    }
    for (char *line = text, *nl; line < text + len && (nl = strchr(line, '\n')); line = nl + 1) {
        long s;
        if (sscanf(line, "{\"step\":%ld", &s) == 1 && s <= step) fwrite(line, 1, (size_t)(nl - line + 1), af.f);
    }
    free(text);
    return qac_atomic_commit(&af);
}

/* dev.jsonl is trimmed only once the resume was accepted: a refused one
 * leaves the run as it was */
static qac_status on_start(void *user, long step) {
    hook *h = user;
    return trim_dev_log(h->dev_log, step);
}

qac_status qac_finetune_run(qac_model *m, const qac_ft_data *d, const qac_finetune_opts *o, long *total_steps,
                            long *resumed_at) {
    if (resumed_at) *resumed_at = 0;
    size_t N = qac_ft_data_count(d);
    if (N == 0) return qac_set_error(QAC_ERR_INVALID, "the training set is empty");
    if (o->queries_per_batch < 1 || o->n_passages < 1 || o->n_passages > 1024 || o->q_max < 2 || o->p_max < 2)
        return qac_set_error(QAC_ERR_INVALID, "bad batch shape");
    int ndev = !!o->dev_queries + !!o->dev_qrels + !!o->dev_corpus;
    if (ndev != 0 && ndev != 3)
        return qac_set_error(QAC_ERR_INVALID, "a dev set needs all of --dev-queries, --dev-qrels and --dev-corpus");
    qac_train_opts to = o->train;
    if (to.total_steps <= 0) {
        if (!(o->epochs > 0)) return qac_set_error(QAC_ERR_INVALID, "give a number of steps or epochs");
        to.total_steps = (long)ceil(o->epochs * (double)N / o->queries_per_batch - 1e-9);
    }
    if (to.warmup_steps < 0) to.warmup_steps = (long)llround(o->warmup_ratio * (double)to.total_steps);
    if (total_steps) *total_steps = to.total_steps;

    dev_set dev = {0};
    int have_dev = ndev == 3;
    ft_src s = {0};
    qac_trainer *t = NULL;
    hook h = {0};
    qac_status st = QAC_OK;
    long latest = -1;
    if (have_dev) st = dev_load(&dev, o);
    if (!st && !o->dry_run) st = check_latest(m, o->out_dir, &latest);
    if (!st && latest >= 0 && !o->resume)
        st = qac_set_error(QAC_ERR_INVALID,
                           "%s already holds a training run (checkpoint-%ld); --resume it or choose another --out",
                           o->out_dir, latest);
    s.d = d, s.tok = m->tok, s.seed = to.seed, s.digest = qac_ft_data_digest(d);
    s.q_prompt = qac_model_query_prompt(m), s.p_prompt = qac_model_passage_prompt(m);
    s.prompts = prompts_digest(s.q_prompt, s.p_prompt);
    if (!st && !m->include_prompt && (*s.q_prompt || *s.p_prompt))
        st = qac_set_error(QAC_ERR_UNSUPPORTED,
                           "the model's pooling leaves prompt tokens out (1_Pooling include_prompt false), which "
                           "training does not do; train without prompts (--query-prompt '' --passage-prompt '') or "
                           "with include_prompt true");
    s.nq = o->queries_per_batch, s.n = o->n_passages, s.q_max = o->q_max, s.p_max = o->p_max;
    s.N = N, s.perm_epoch = -1;
    s.perm = malloc(N * sizeof *s.perm);
    s.qt = malloc((size_t)s.nq * sizeof *s.qt);
    s.pt = malloc((size_t)s.nq * s.n * sizeof *s.pt);
    if (!st && (!s.perm || !s.qt || !s.pt)) st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
    qac_atomic_file dump = {0};
    if (!st && o->dump_batches && !(st = qac_atomic_open(&dump, o->dump_batches))) s.dump = dump.f;
    if (!st && o->dry_run) {
        for (long i = 0; i < to.total_steps && !st; i++) st = fill_texts(&s);
    } else if (!st) {
        if (!(st = qac_mkdirs(o->out_dir))) st = qac_path_join(h.dev_log, sizeof h.dev_log, o->out_dir, "dev.jsonl");
        if (!st) st = qac_trainer_create(&t, m, &to);
        h.src = &s, h.o = o, h.m = m, h.dev = have_dev ? &dev : NULL, h.t0 = qac_now();
        qac_batch_source bs = {&s, src_next, src_get_cursor, src_set_cursor};
        qac_run_opts ro = {.out_dir = o->out_dir,
                           .save_every = o->save_every,
                           .keep = o->keep,
                           .resume = o->resume,
                           .on_step = on_step,
                           .on_start = on_start,
                           .user = &h};
        if (!st) st = qac_train_run(t, &bs, &ro, resumed_at);
        if (!st && s.deferred) st = s.deferred;
        /* the final model in OUT itself, as pre-training leaves it: what
         * --model OUT, transformers and sentence-transformers load; its files
         * appear together (config.json last), checkpoints untouched */
        if (!st) st = qac_trainer_sync_model(t);
        if (!st) st = qac_ckpt_export(m, o->out_dir);
    }
    if (dump.f) {
        if (st) qac_atomic_abort(&dump);
        else st = qac_atomic_commit(&dump);
    }
    qac_trainer_free(t);
    qac_batch_buf_free(&s.bb);
    free(s.perm), free(s.qt), free(s.pt);
    dev_free(&dev);
    return st;
}
