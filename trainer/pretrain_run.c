/* The pre-training run: pairs from qac_pt_data, masked per objective, as
 * steps of the pre-trainer; the per-step log, checkpoints, resume, and the
 * encoder exported at the end. Every draw (pairs, masks, dropout) is keyed
 * by (seed, step, ...), so the data cursor is the step alone. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pretrainer.h"
#include "qac_rng.h"
#include "qac_util.h"

#define CURSOR_MAGIC 0x5255435450434151ull    /* "QACPTCUR" */
#define CURSOR_MAGIC_V2 0x3255435450434151ull /* "QACPTCU2": and the prompts' digest */
/* mask streams: the encoder's masks of a and b, the decoders' of their targets */
#define STREAM_MASK_A 0x6d61736bu
#define STREAM_MASK_B 0x6d61736cu
#define STREAM_DEC_A 0x6d61736du
#define STREAM_DEC_B 0x6d61736eu

void qac_pretrain_opts_default(qac_pretrain_opts *o) {
    memset(o, 0, sizeof *o);
    qac_train_opts_default(&o->train);
    o->train.lr = 1e-4; /* TRAINING.md: coCondenser's and CoT-MAE's pre-training rate */
    o->train.total_steps = 1000;
    o->train.warmup_steps = -1;
    o->warmup_ratio = 0.1;
    qac_pt_objective_opts_default(&o->obj);
    o->batch = 16;
    o->context.mode = QAC_PT_MODE_QUERY;
    qac_pt_data_opts_default(&o->data);
    o->keep = 2;
}

/* one side's token buffers, padded */
typedef struct side_buf {
    int32_t *ids, *labels;
    int *lens;
    size_t cap;
} side_buf;

typedef struct pt_src {
    qac_pretrainer *t;
    qac_pt_data *d;
    const qac_pretrain_opts *o;
    long total, ndocs;
    uint8_t *word_start;
    qac_special_ids sp;
    int vocab;
    qac_pt_pair *pairs;
    side_buf buf[4]; /* a, b, da, db */
    qac_pt_batch batch;
    double span_frac;
    long tokens;
} pt_src;

static qac_status side_fill(side_buf *sb, const qac_pt_pair *pairs, int B, int which, int *T_out) {
    int T = 1;
    for (int i = 0; i < B; i++) {
        int len = which ? pairs[i].b_len : pairs[i].a_len;
        T = len > T ? len : T;
    }
    size_t need = (size_t)B * T;
    if (need > sb->cap) {
        int32_t *ids = realloc(sb->ids, need * sizeof *ids);
        if (ids) sb->ids = ids;
        int32_t *lab = ids ? realloc(sb->labels, need * sizeof *lab) : NULL;
        if (lab) sb->labels = lab;
        if (!ids || !lab) return qac_set_error(QAC_ERR_NOMEM, "pretrain: out of memory");
        sb->cap = need;
    }
    int *lens = realloc(sb->lens, (size_t)B * sizeof *lens);
    if (!lens) return qac_set_error(QAC_ERR_NOMEM, "pretrain: out of memory");
    sb->lens = lens;
    *T_out = T;
    return QAC_OK;
}

/* side `which` (0: a, 1: b) of the pairs into sb, padded to T, masked at
 * rate with keys (seed, step, stream, pair); rate 0: copied unmasked */
static void side_mask(pt_src *s, side_buf *sb, int which, int T, float rate, uint32_t stream, long step) {
    int B = s->o->batch;
    qac_mask_opts mo = {rate, s->sp.mask, s->vocab};
    int32_t pad = s->sp.pad < 0 ? 0 : s->sp.pad;
    for (int i = 0; i < B; i++) {
        const qac_pt_pair *p = &s->pairs[i];
        int len = which ? p->b_len : p->a_len;
        int32_t *row = sb->ids + (size_t)i * T, *lab = sb->labels + (size_t)i * T;
        memcpy(row, which ? p->b : p->a, (size_t)len * sizeof *row);
        for (int j = len; j < T; j++) row[j] = pad, lab[j] = -100;
        sb->lens[i] = len;
        if (rate > 0)
            qac_mask_whole_words(row, lab, len, s->word_start, &s->sp, &mo,
                                 qac_rng_key(s->o->train.seed, (uint64_t)step, stream, (uint64_t)i));
        else
            for (int j = 0; j < len; j++) lab[j] = -100;
    }
}

static qac_status build_batch(pt_src *s, long step) {
    const qac_pretrain_opts *o = s->o;
    int B = o->batch, cot = o->obj.objective == QAC_PT_COTMAE, qgen = o->obj.objective == QAC_PT_QGEN;
    double prob = qac_pt_span_prob(&o->context, step, s->total);
    qac_status st = qac_pt_data_batch(s->d, s->pairs, B, step, prob, o->train.seed);
    if (st) return qac_wrap_error(st, "pretrain: the pairs of step %ld", step + 1);
    int spans = 0;
    s->tokens = 0;
    for (int i = 0; i < B; i++) {
        spans += s->pairs[i].kind == QAC_PT_SPAN;
        s->tokens += s->pairs[i].a_len + s->pairs[i].b_len;
        if (s->pairs[i].a_len < 2 || s->pairs[i].b_len < 2)
            return qac_set_error(QAC_ERR_INTERNAL, "pretrain: an empty text in pair %d of step %ld", i, step + 1);
    }
    s->span_frac = (double)spans / B;
    int Ta, Tb;
    float rate = cot || qgen ? o->obj.enc_mask_rate : o->obj.mask_rate;
    if ((st = side_fill(&s->buf[0], s->pairs, B, 0, &Ta)) || (st = side_fill(&s->buf[1], s->pairs, B, 1, &Tb)))
        return st;
    side_mask(s, &s->buf[0], 0, Ta, rate, STREAM_MASK_A, step);
    side_mask(s, &s->buf[1], 1, Tb, qgen ? 0.0f : rate, STREAM_MASK_B, step); /* qgen: the query as it is */
    qac_pt_batch *b = &s->batch;
    memset(b, 0, sizeof *b);
    b->B = B;
    b->a = (qac_pt_seqs){Ta, s->buf[0].ids, s->buf[0].labels, s->buf[0].lens};
    b->b = (qac_pt_seqs){Tb, s->buf[1].ids, s->buf[1].labels, s->buf[1].lens};
    if (cot) {
        /* a's decoder reconstructs b, b's reconstructs a, each masked anew */
        if ((st = side_fill(&s->buf[2], s->pairs, B, 1, &Tb)) || (st = side_fill(&s->buf[3], s->pairs, B, 0, &Ta)))
            return st;
        side_mask(s, &s->buf[2], 1, Tb, o->obj.dec_mask_rate, STREAM_DEC_A, step);
        side_mask(s, &s->buf[3], 0, Ta, o->obj.dec_mask_rate, STREAM_DEC_B, step);
        b->da = (qac_pt_seqs){Tb, s->buf[2].ids, s->buf[2].labels, s->buf[2].lens};
        b->db = (qac_pt_seqs){Ta, s->buf[3].ids, s->buf[3].labels, s->buf[3].lens};
    }
    return QAC_OK;
}

static void src_free(pt_src *s) {
    for (int i = 0; i < 4; i++) free(s->buf[i].ids), free(s->buf[i].labels), free(s->buf[i].lens);
    free(s->word_start), free(s->pairs);
}

/* XXH64 of query prompt, NUL, passage prompt ("" for none). */
static uint64_t prompts_digest(const qac_pt_data_opts *o) {
    const char *q = o->query_prompt ? o->query_prompt : "", *p = o->passage_prompt ? o->passage_prompt : "";
    qac_xxh64 h;
    qac_xxh64_init(&h);
    qac_xxh64_update(&h, q, strlen(q) + 1);
    qac_xxh64_update(&h, p, strlen(p));
    return qac_xxh64_digest(&h);
}

/* the cursor: magic, documents, step, pairs per step, seed, then (version
 * 2) the prompts' digest; a run without prompts writes version 1 */
static qac_status check_cursor(const pt_src *s, const void *bytes, size_t len) {
    uint64_t c[6];
    if (len != sizeof c && len != 5 * sizeof *c)
        return qac_set_error(QAC_ERR_FORMAT, "resume: not a pre-training data cursor");
    memcpy(c, bytes, len);
    if (!(c[0] == CURSOR_MAGIC && len == 5 * sizeof *c) && !(c[0] == CURSOR_MAGIC_V2 && len == sizeof c))
        return qac_set_error(QAC_ERR_FORMAT, "resume: not a pre-training data cursor");
    qac_pt_data_opts none = {0};
    if ((c[0] == CURSOR_MAGIC_V2 ? c[5] : prompts_digest(&none)) != prompts_digest(&s->o->data))
        return qac_set_error(QAC_ERR_MISMATCH,
                             "resume: the run was written with other prompts than this resume's; resume with the "
                             "same --query-prompt and --passage-prompt (the model's, unless given; '' for none)");
    if (c[1] != (uint64_t)s->ndocs)
        return qac_set_error(QAC_ERR_MISMATCH,
                             "resume: the pre-training data differ from the run's (%llu documents then, %ld now); "
                             "resume with the same --data and --docs",
                             (unsigned long long)c[1], s->ndocs);
    if (c[3] != (uint64_t)s->o->batch || c[4] != s->o->train.seed)
        return qac_set_error(QAC_ERR_MISMATCH,
                             "resume: the run drew %llu pairs per step with seed %llu; resume with the same --batch and "
                             "--seed (now %d and %llu)",
                             (unsigned long long)c[3], (unsigned long long)c[4], s->o->batch,
                             (unsigned long long)s->o->train.seed);
    if (c[2] != (uint64_t)s->t->step)
        return qac_set_error(QAC_ERR_FORMAT, "resume: the cursor is at step %llu, the state at %ld",
                             (unsigned long long)c[2], s->t->step);
    return QAC_OK;
}

static qac_status save(pt_src *s, const char *out, int keep) {
    char name[64], path[4096];
    snprintf(name, sizeof name, "checkpoint-%ld", s->t->step);
    qac_pt_data_opts none = {0};
    int v2 = prompts_digest(&s->o->data) != prompts_digest(&none); /* version 1 stands for no prompts */
    uint64_t cur[6] = {v2 ? CURSOR_MAGIC_V2 : CURSOR_MAGIC, (uint64_t)s->ndocs,     (uint64_t)s->t->step,
                       (uint64_t)s->o->batch, s->o->train.seed, prompts_digest(&s->o->data)};
    qac_status st = qac_path_join(path, sizeof path, out, name);
    if (!st) st = qac_pretrainer_save(s->t, path, cur, (size_t)(v2 ? 6 : 5) * sizeof *cur);
    if (!st) st = qac_rundir_write_latest(out, name);
    if (!st) st = qac_rundir_prune(out, keep > 0 ? keep : 2, s->t->step);
    return st;
}

static qac_status check_opts(const qac_pretrain_opts *o) {
    if (!o->out_dir) return qac_set_error(QAC_ERR_INVALID, "pretrain: no output directory");
    if (o->batch < 1) return qac_set_error(QAC_ERR_INVALID, "pretrain: --batch must be at least 1");
    if (o->obj.objective == QAC_PT_COCONDENSER && o->obj.alpha <= 0 && o->batch < 2)
        return qac_set_error(QAC_ERR_INVALID, "pretrain: the contrastive loss needs --batch 2 or more (its negatives "
                                              "are the other pairs)");
    if (o->train.total_steps < 1) return qac_set_error(QAC_ERR_INVALID, "pretrain: --steps must be at least 1");
    if (!(o->warmup_ratio >= 0 && o->warmup_ratio <= 1))
        return qac_set_error(QAC_ERR_INVALID, "pretrain: --warmup-ratio must be in [0, 1]");
    return QAC_OK;
}

static void log_line(FILE *f, const qac_pretrain_opts *o, const qac_step_stats *ss, const qac_pt_losses *l,
                     const pt_src *s) {
    fprintf(f, "{\"step\":%ld,\"loss\":%.17g,\"lr\":%.17g,\"grad_norm\":%.17g,\"seconds\":%.3f,\"mlm\":%.17g", ss->step,
            ss->loss, ss->lr, ss->grad_norm, ss->seconds, l->mlm);
    if (o->obj.objective == QAC_PT_COCONDENSER)
        fprintf(f, ",\"head_mlm\":%.17g,\"%s\":%.17g", l->head, o->obj.alpha > 0 ? "pair" : "contrastive",
                l->contrastive);
    else
        fprintf(f, ",\"%s\":%.17g", o->obj.objective == QAC_PT_COTMAE ? "dec_mlm" : "next_token", l->head);
    fprintf(f, ",\"span_frac\":%.6g,\"tokens\":%ld}\n", s->span_frac, s->tokens);
}

qac_status qac_pretrain_run(qac_model *m, const qac_pretrain_opts *o, long *resumed_at) {
    if (resumed_at) *resumed_at = 0;
    qac_status st = check_opts(o);
    if (st) return st;
    if (!m->include_prompt && ((o->data.query_prompt && *o->data.query_prompt) ||
                               (o->data.passage_prompt && *o->data.passage_prompt)))
        return qac_set_error(QAC_ERR_UNSUPPORTED,
                             "the model's pooling leaves prompt tokens out (1_Pooling include_prompt false), which "
                             "pre-training does not do; pre-train without prompts (--query-prompt '' "
                             "--passage-prompt '')");
    qac_train_opts to = o->train;
    if (to.warmup_steps < 0) to.warmup_steps = (long)llround(o->warmup_ratio * (double)to.total_steps);
    pt_src s = {0};
    s.o = o;
    s.total = to.total_steps;
    s.sp = qac_tokenizer_specials(m->tok);
    s.vocab = qac_tokenizer_vocab_size(m->tok);
    if (s.sp.mask < 0 || s.sp.cls < 0 || s.sp.sep < 0)
        return qac_set_error(QAC_ERR_UNSUPPORTED, "pretrain: the tokenizer has no [MASK], [CLS] or [SEP] token");
    if (s.vocab > m->cfg.vocab_size)
        return qac_set_error(QAC_ERR_INVALID, "pretrain: the tokenizer has %d tokens, the model's embeddings %d",
                             s.vocab, m->cfg.vocab_size);
    int longest = o->data.max_len > o->data.query_max_len ? o->data.max_len : o->data.query_max_len;
    if (longest > m->cfg.max_position)
        return qac_set_error(QAC_ERR_INVALID, "pretrain: --max-len %d is longer than the model's %d positions", longest,
                             m->cfg.max_position);
    char name[256], path[4096], log_path[4096];
    int have = qac_rundir_read_latest(o->out_dir, name, sizeof name) == QAC_OK;
    if (have && !o->resume)
        return qac_set_error(QAC_ERR_INVALID, "%s already holds a pre-training run (%s); --resume it or choose another "
                                              "--out",
                             o->out_dir, name);
    if ((st = qac_pretrainer_create(&s.t, m, &to, &o->obj))) return st;
    s.t->schedule_ctx = o->context;
    s.t->warmup_frac = o->warmup_ratio;
    s.t->max_len = o->data.max_len, s.t->query_max_len = o->data.query_max_len;
    if (!(st = qac_word_starts(&s.word_start, m->tok)) && !(st = qac_pt_data_open(&s.d, &o->data, m->tok))) {
        s.ndocs = qac_pt_data_count(s.d);
        s.pairs = malloc((size_t)o->batch * sizeof *s.pairs);
        if (!s.pairs) st = qac_set_error(QAC_ERR_NOMEM, "pretrain: out of memory");
        else if (s.ndocs < 1) st = qac_set_error(QAC_ERR_INVALID, "%s: no documents to draw pairs from", o->data.path);
    }
    if (!st) st = qac_mkdirs(o->out_dir);
    if (!st) st = qac_path_join(log_path, sizeof log_path, o->out_dir, "log.jsonl");
    if (!st && have) {
        void *cur = NULL;
        size_t cl = 0;
        if (!(st = qac_path_join(path, sizeof path, o->out_dir, name)) &&
            !(st = qac_pretrainer_resume(s.t, path, &cur, &cl)))
            st = check_cursor(&s, cur, cl);
        free(cur);
        if (!st) st = qac_rundir_trim_log(log_path, s.t->step);
        if (!st && resumed_at) *resumed_at = s.t->step;
    } else if (!st) {
        st = qac_rundir_trim_log(log_path, 0);
    }
    int head_read = 0;
    if (!st && !have && m->dir) st = qac_pretrainer_load_mlm_head(s.t, m->dir, &head_read);
    if (!st && o->on_note) {
        qac_pt_data_stats ds;
        qac_pt_data_stats_get(s.d, &ds);
        char note[512];
        snprintf(note, sizeof note,
                 "data: %ld records, %ld skipped without text, %ld without queries (their query slots draw span "
                 "pairs), %ld candidate queries; %ld documents for span pairs",
                 ds.records, ds.skipped_no_text, ds.no_queries, ds.queries, ds.span_docs);
        o->on_note(o->user, note);
    }
    if (!st && o->on_note && !have) {
        char note[512];
        snprintf(note, sizeof note, "heads: %d fresh %s layer%s (HF init, seed %llu); MLM head %s",
                 s.t->ob.head_layers, o->obj.objective == QAC_PT_COCONDENSER ? "Condenser-head" : "decoder",
                 s.t->ob.head_layers == 1 ? "" : "s", (unsigned long long)to.seed,
                 head_read ? "read from the checkpoint (cls.predictions), decoder tied to the word embeddings"
                           : "created fresh, decoder tied to the word embeddings (the checkpoint has none, as "
                             "sentence-transformers checkpoints never do)");
        o->on_note(o->user, note);
    }
    /* the exported encoder keeps the initial model's pooling files: say so
     * when the trained representation is another one */
    if (!st && o->on_note &&
        (s.t->ob.pooling != (int)m->pooling ||
         (o->obj.objective == QAC_PT_COCONDENSER && s.t->ob.normalize != (m->normalize != 0)))) {
        char note[512];
        snprintf(note, sizeof note,
                 "training %s pooling%s, but the exported encoder keeps the checkpoint's %s pooling%s (its "
                 "sentence-transformers files), which retrieval with it will use",
                 qac_pooling_name((qac_pooling)s.t->ob.pooling), s.t->ob.normalize ? ", normalised" : "",
                 qac_pooling_name(m->pooling), m->normalize ? ", normalised" : "");
        o->on_note(o->user, note);
    }
    FILE *log = NULL;
    if (!st && !(log = fopen(log_path, "a"))) st = qac_set_error(QAC_ERR_IO, "%s: %s", log_path, strerror(errno));
    double t0 = qac_now();
    long run = 0;
    while (!st && s.t->step < s.total) {
        qac_crash_point("pretrain_batch"); /* resume tests kill here */
        qac_step_stats ss;
        qac_pt_losses l;
        if ((st = build_batch(&s, s.t->step)) || (st = qac_pretrainer_step(s.t, &s.batch, &l, &ss))) break;
        log_line(log, o, &ss, &l, &s);
        if (fflush(log) != 0) st = qac_set_error(QAC_ERR_IO, "%s: %s", log_path, strerror(errno));
        run++;
        int stop = 0;
        if (o->on_step) {
            qac_pt_progress p = {ss.step, s.total, l.total, l.mlm, l.head, l.contrastive, s.span_frac, ss.lr,
                                 ss.grad_norm, ss.seconds, qac_now() - t0, run, o->batch, s.tokens};
            stop = o->on_step(o->user, &p);
        }
        if (!st && ((o->save_every > 0 && ss.step % o->save_every == 0) || ss.step == s.total))
            st = save(&s, o->out_dir, o->keep);
        if (!st && stop) st = qac_set_error(QAC_ERR_CANCELLED, "pre-training stopped by the caller after step %ld", ss.step);
    }
    if (log && fclose(log) != 0 && !st) st = qac_set_error(QAC_ERR_IO, "%s: %s", log_path, strerror(errno));
    /* the encoder alone, in OUT itself: what fine-tuning and encode read;
     * its files appear together (config.json last), checkpoints untouched */
    if (!st) st = qac_pretrainer_sync_host(s.t);
    if (!st) st = qac_ckpt_export(m, o->out_dir);
    qac_pretrainer_free(s.t);
    qac_pt_data_free(s.d);
    src_free(&s);
    return st;
}
