/* Pre-training checkpoints: an encoder-only HF directory (loadable for
 * inference and fine-tuning on its own) plus training_state.qts:
 *   char[8] "QACPTST\0"; u32 version (3); u32 objective
 *   u64 step, n_enc, n_head, seed, cursor_len
 *   i32 head_layers, skip_from, hidden_size, vocab_size
 *   f64 lr, weight_decay, beta1, beta2, adam_eps, max_grad_norm
 *   i64 warmup_steps, total_steps; i32 schedule, recompute
 *   f32 mask_rate, enc_mask_rate, dec_mask_rate, tau, alpha, hidden_dropout, attn_dropout, window (qgen)
 *   i32 pooling (0 cls, 1 mean), normalize (0, 1): the representation, resolved
 *       (version 1 had neither: raw [CLS], read as cls and 0)
 *   i32 context (qac_pt_mode), max_len, query_max_len, 0; f64 span_frac, warmup_ratio
 *       (version 3; older states lack them, and a resume cannot hold to them)
 *   u8 cursor[cursor_len]; f32 heads[n_head]
 *   f32 adam_m[n_enc + n_head]; f32 adam_v[n_enc + n_head]
 *   u64 XXH64 of every byte before it
 * Little-endian. The heads live only here: the exported encoder carries
 * none of them. A resume refuses any recorded option that would change the
 * run (check_options); the thread count, --recompute and --save-every are
 * not checked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pretrainer.h"
#include "resume_check.h"
#include "qac_util.h"

#define STATE_VERSION 3u

typedef struct header {
    uint32_t version, objective;
    uint64_t step, n_enc, n_head, seed, cursor_len;
    int32_t head_layers, skip_from, hidden_size, vocab_size;
    double dbl[6];
    int64_t warmup, total;
    int32_t schedule, recompute;
    float fl[8];
    int32_t pooling, normalize;
    int32_t context, max_len, query_max_len, zero;
    double span_frac, warmup_ratio;
} header;

static void fill_header(header *h, const qac_pretrainer *t, size_t cursor_len) {
    const qac_train_opts *o = &t->o;
    memset(h, 0, sizeof *h);
    h->version = STATE_VERSION, h->objective = (uint32_t)t->ob.objective;
    h->step = (uint64_t)t->step, h->n_enc = t->m->n_params, h->n_head = t->n_head, h->seed = o->seed;
    h->cursor_len = cursor_len;
    h->head_layers = t->ob.head_layers, h->skip_from = t->ob.skip_from;
    h->hidden_size = t->m->cfg.hidden_size, h->vocab_size = t->m->cfg.vocab_size;
    double d[6] = {o->lr, o->weight_decay, o->beta1, o->beta2, o->adam_eps, o->max_grad_norm};
    memcpy(h->dbl, d, sizeof d);
    h->warmup = o->warmup_steps, h->total = o->total_steps;
    h->schedule = (int32_t)o->schedule, h->recompute = o->recompute;
    float f[8] = {t->ob.mask_rate, t->ob.enc_mask_rate, t->ob.dec_mask_rate, t->ob.tau, t->ob.alpha, t->drop.hidden,
                  t->drop.attn, t->ob.objective == QAC_PT_QGEN ? (float)t->ob.window : 0};
    memcpy(h->fl, f, sizeof f);
    h->pooling = t->ob.pooling, h->normalize = t->ob.normalize;
    h->context = (int32_t)t->schedule_ctx.mode, h->max_len = t->max_len, h->query_max_len = t->query_max_len;
    h->span_frac = t->schedule_ctx.span_frac, h->warmup_ratio = t->warmup_frac;
}

/* the header field by field (no struct padding in the file) */
static void put_header(qac_state_writer *w, const header *h) {
    qac_state_put(w, &h->version, 4), qac_state_put(w, &h->objective, 4);
    qac_state_put(w, &h->step, 8), qac_state_put(w, &h->n_enc, 8), qac_state_put(w, &h->n_head, 8), qac_state_put(w, &h->seed, 8), qac_state_put(w, &h->cursor_len, 8);
    qac_state_put(w, &h->head_layers, 4), qac_state_put(w, &h->skip_from, 4), qac_state_put(w, &h->hidden_size, 4), qac_state_put(w, &h->vocab_size, 4);
    qac_state_put(w, h->dbl, sizeof h->dbl), qac_state_put(w, &h->warmup, 8), qac_state_put(w, &h->total, 8);
    qac_state_put(w, &h->schedule, 4), qac_state_put(w, &h->recompute, 4), qac_state_put(w, h->fl, sizeof h->fl);
    qac_state_put(w, &h->pooling, 4), qac_state_put(w, &h->normalize, 4);
    qac_state_put(w, &h->context, 4), qac_state_put(w, &h->max_len, 4), qac_state_put(w, &h->query_max_len, 4);
    qac_state_put(w, &h->zero, 4), qac_state_put(w, &h->span_frac, 8), qac_state_put(w, &h->warmup_ratio, 8);
}
#define HEADER_V1_BYTES (4 + 4 + 5 * 8 + 4 * 4 + 6 * 8 + 2 * 8 + 2 * 4 + 8 * 4)
#define HEADER_V2_BYTES (HEADER_V1_BYTES + 2 * 4)
#define HEADER_BYTES (HEADER_V2_BYTES + 4 * 4 + 2 * 8)

static qac_status write_state(void *user, const char *path) {
    qac_pretrainer *t = user;
    qac_state_writer w;
    qac_status st = qac_state_writer_open(&w, path);
    if (st) return st;
    header h;
    fill_header(&h, t, t->save_cursor_len);
    qac_state_put(&w, QAC_STATE_MAGIC_PT, 8);
    put_header(&w, &h);
    qac_state_put(&w, t->save_cursor, t->save_cursor_len);
    qac_state_put(&w, t->head_mem, t->n_head * sizeof(float));
    qac_state_put(&w, t->adam_m, t->n_grad * sizeof(float));
    qac_state_test_kill(t->step);
    qac_state_put(&w, t->adam_v, t->n_grad * sizeof(float));
    return qac_state_writer_close(&w);
}

qac_status qac_pretrainer_save(qac_pretrainer *t, const char *dir, const void *cursor, size_t cursor_len) {
    qac_status st = qac_pretrainer_sync_host(t); /* on CUDA: the device's parameters and state */
    if (st) return st;
    t->save_cursor = cursor, t->save_cursor_len = cursor_len;
    st = qac_ckpt_save(t->m, dir, write_state, t);
    t->save_cursor = NULL, t->save_cursor_len = 0;
    return st;
}

static const char *objective_name(uint32_t o) {
    return o == QAC_PT_COCONDENSER ? "cocondenser" : o == QAC_PT_COTMAE ? "cotmae" : o == QAC_PT_QGEN ? "qgen" : "?";
}

static void context_name(char *buf, size_t cap, int32_t mode, double span_frac) {
    if (mode == QAC_PT_MODE_CURRICULUM) snprintf(buf, cap, "--curriculum span:%g,query", span_frac);
    else
        snprintf(buf, cap, "--context %s",
                 mode == QAC_PT_MODE_QUERY  ? "query"
                 : mode == QAC_PT_MODE_SPAN ? "span"
                 : mode == QAC_PT_MODE_MIXED ? "mixed"
                                             : "?");
}


/* Every recorded option that changes the trajectory, as the run resolved
 * it; the first that differs is refused by name. What the objective does
 * not read is not compared; version-1/2 states lack the context, the
 * curriculum's fraction, the warmup ratio and the lengths, which are then
 * not compared. */
static qac_status check_options(const header *h, const header *w, const char *use) {
    char a[64], b[64];
    if (h->total != w->total) {
        snprintf(a, sizeof a, "%lld", (long long)h->total), snprintf(b, sizeof b, "%lld", (long long)w->total);
        return qac_resume_changed(use, "--steps", a, b);
    }
    static const char *const dbl_names[6] = {"--lr", "--weight-decay", "AdamW beta1", "AdamW beta2", "AdamW epsilon",
                                             "--max-grad-norm"};
    for (int i = 0; i < 6; i++)
        if (memcmp(&h->dbl[i], &w->dbl[i], sizeof h->dbl[i])) {
            qac_resume_two_reals(a, b, sizeof a, h->dbl[i], w->dbl[i]);
            return qac_resume_changed(use, dbl_names[i], a, b);
        }
    int curriculum = h->version >= 3 && h->context == QAC_PT_MODE_CURRICULUM;
    if (h->version >= 3) {
        if (h->context != w->context || (curriculum && h->span_frac != w->span_frac)) {
            context_name(a, sizeof a, h->context, h->span_frac), context_name(b, sizeof b, w->context, w->span_frac);
            return qac_set_error(QAC_ERR_MISMATCH,
                                 "%s: the run was written with %s, this resume has %s; resume with the same "
                                 "--context or --curriculum (a changed option would not continue the run bit for "
                                 "bit), or start a new --out",
                                 use, a, b);
        }
        if (h->max_len != w->max_len) {
            snprintf(a, sizeof a, "%d", h->max_len), snprintf(b, sizeof b, "%d", w->max_len);
            return qac_resume_changed(use, "--max-len", a, b);
        }
        if (h->query_max_len != w->query_max_len) {
            snprintf(a, sizeof a, "%d", h->query_max_len), snprintf(b, sizeof b, "%d", w->query_max_len);
            return qac_resume_changed(use, "--query-max-len", a, b);
        }
    }
    /* a curriculum's schedule is its own: warmup as a ratio of the span stage */
    if (curriculum && h->warmup_ratio != w->warmup_ratio) {
        qac_resume_two_reals(a, b, sizeof a, h->warmup_ratio, w->warmup_ratio);
        return qac_resume_changed(use, "--warmup-ratio", a, b);
    }
    if (!curriculum && h->schedule != w->schedule)
        return qac_resume_changed(use, "--schedule", qac_resume_schedule_name(h->schedule),
                                  qac_resume_schedule_name(w->schedule));
    if (!curriculum && h->warmup != w->warmup) {
        snprintf(a, sizeof a, "%lld", (long long)h->warmup), snprintf(b, sizeof b, "%lld", (long long)w->warmup);
        return qac_resume_changed(use, "--warmup-steps (or --warmup-ratio times --steps)", a, b);
    }
    /* fl: mask_rate, enc_mask_rate, dec_mask_rate, tau, alpha, hidden dropout, attention dropout */
    int coco = h->objective == QAC_PT_COCONDENSER, cot = h->objective == QAC_PT_COTMAE;
    int used[7] = {coco, !coco, cot, coco && w->fl[4] <= 0, coco, 1, 1};
    static const char *const fl_names[7] = {"--mask-rate", "--enc-mask-rate", "--dec-mask-rate", "--tau",
                                            "--alpha", "--dropout", "--dropout (attention)"};
    for (int i = 0; i < 7; i++)
        if (used[i] && memcmp(&h->fl[i], &w->fl[i], sizeof h->fl[i])) {
            qac_resume_two_reals(a, b, sizeof a, h->fl[i], w->fl[i]);
            return qac_resume_changed(use, fl_names[i], a, b);
        }
    return QAC_OK;
}

qac_status qac_pretrainer_resume(qac_pretrainer *t, const char *dir, void **cursor, size_t *cursor_len) {
    *cursor = NULL;
    *cursor_len = 0;
    char use[4096], *data = NULL;
    size_t len = 0;
    qac_status st = qac_ckpt_read_state(dir, QAC_STATE_MAGIC_PT, HEADER_V1_BYTES, use, sizeof use, &data, &len);
    if (st) return st;
    const unsigned char *p = (const unsigned char *)data;
    header h = {0}, want;
    p += 8;
#define GET(field, n) (memcpy(&(field), p, n), p += (n))
    GET(h.version, 4), GET(h.objective, 4), GET(h.step, 8), GET(h.n_enc, 8), GET(h.n_head, 8), GET(h.seed, 8);
    GET(h.cursor_len, 8), GET(h.head_layers, 4), GET(h.skip_from, 4), GET(h.hidden_size, 4), GET(h.vocab_size, 4);
    GET(h.dbl, sizeof h.dbl), GET(h.warmup, 8), GET(h.total, 8), GET(h.schedule, 4), GET(h.recompute, 4);
    GET(h.fl, sizeof h.fl);
    h.pooling = QAC_POOL_CLS, h.normalize = 0; /* version 1: the raw [CLS] */
    if (h.version >= 2 && len >= 8 + HEADER_V2_BYTES + 8) GET(h.pooling, 4), GET(h.normalize, 4);
    if (h.version >= 3 && len >= 8 + HEADER_BYTES + 8) {
        GET(h.context, 4), GET(h.max_len, 4), GET(h.query_max_len, 4), GET(h.zero, 4);
        GET(h.span_frac, 8), GET(h.warmup_ratio, 8);
    }
#undef GET
    fill_header(&want, t, 0);
    if (h.version < 1 || h.version > STATE_VERSION) {
        st = qac_set_error(QAC_ERR_UNSUPPORTED, "%s: pre-training state version %u (this qac reads %u)", use, h.version,
                           STATE_VERSION);
        goto done;
    }
    if (h.objective != want.objective || h.head_layers != want.head_layers ||
        (h.objective == QAC_PT_COCONDENSER && h.skip_from != want.skip_from) || h.fl[7] != want.fl[7]) {
        st = qac_set_error(QAC_ERR_MISMATCH,
                           "%s: the run was %s with %d head layers (skip-from %d, qgen window %g); resume it with the "
                           "same --objective, --head-layers, --skip-from and --qgen-window",
                           use, objective_name(h.objective), h.head_layers, h.skip_from, (double)h.fl[7]);
        goto done;
    }
    if (h.pooling != want.pooling || (h.normalize != want.normalize && h.objective == QAC_PT_COCONDENSER)) {
        st = qac_set_error(QAC_ERR_MISMATCH,
                           "%s: the run's representation was %s pooling%s, this one is %s pooling%s; resume it with "
                           "the same --pooling and --normalize",
                           use, qac_pooling_name((qac_pooling)h.pooling), h.normalize ? ", L2-normalised" : "",
                           qac_pooling_name((qac_pooling)want.pooling), want.normalize ? ", L2-normalised" : "");
        goto done;
    }
    if ((st = check_options(&h, &want, use))) goto done;
    if (h.n_enc != t->m->n_params || h.n_head != t->n_head || h.hidden_size != want.hidden_size ||
        h.vocab_size != want.vocab_size) {
        st = qac_set_error(QAC_ERR_INVALID, "%s: %llu + %llu parameters, the model and heads have %zu + %zu", use,
                           (unsigned long long)h.n_enc, (unsigned long long)h.n_head, t->m->n_params, t->n_head);
        goto done;
    }
    if ((size_t)((const unsigned char *)data + len - p) != h.cursor_len + (t->n_head + 2 * t->n_grad) * sizeof(float) + 8) {
        st = qac_set_error(QAC_ERR_FORMAT, "%s: sizes do not add up", use);
        goto done;
    }
    if ((st = qac_ckpt_load_weights(t->m, use))) goto done;
    if (h.cursor_len) {
        if (!(*cursor = malloc(h.cursor_len))) {
            st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
            goto done;
        }
        memcpy(*cursor, p, h.cursor_len);
        p += h.cursor_len;
    }
    memcpy(t->head_mem, p, t->n_head * sizeof(float));
    p += t->n_head * sizeof(float);
    memcpy(t->adam_m, p, t->n_grad * sizeof(float));
    p += t->n_grad * sizeof(float);
    memcpy(t->adam_v, p, t->n_grad * sizeof(float));
    t->step = (long)h.step;
    *cursor_len = h.cursor_len;
    qac_bert_repack(&t->pk, &t->m->cfg, &t->m->p, t->pool);
    qac_pretrainer_heads_changed(t);
    qac_model_update_fingerprint(t->m);
    if (t->gpu) { /* the same blocks on the device: a CPU run resumes on CUDA */
        st = qac_cuda_pretrainer_upload(t->gpu, t->m->param_mem, t->head_mem, t->adam_m, t->adam_v);
        t->host_stale = 0;
    }
done:
    if (st) {
        free(*cursor);
        *cursor = NULL;
    }
    free(data);
    return st;
}
