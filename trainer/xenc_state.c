/* Cross-encoder training checkpoints: the reranker's directory (loadable
 * for scoring on its own: qac_xenc_save) plus training_state.qts:
 *   char[8] "QACXEST\0"; u32 version (1); u32 num_labels
 *   u64 step, n_encoder, n_classifier, seed, cursor_len
 *   f64 lr, weight_decay, beta1, beta2, adam_eps, max_grad_norm
 *   i64 warmup_steps, total_steps; i32 schedule, 0, 0, 0
 *   f32 hidden_dropout, attn_dropout, head_dropout, 0
 *   u8 cursor[cursor_len]; f32 adam_m[n]; f32 adam_v[n]   (n = n_encoder + n_classifier)
 *   u64 XXH64 of every byte before it
 * Little-endian; written and swapped in as the bi-encoder's (ckptfile.c).
 * A resume refuses a recorded option that shapes the steps; --chunk,
 * --recompute and the threads are not recorded (they change how a step is
 * computed, not what it computes). */
#include <stdlib.h>
#include <string.h>

#include "qac_util.h"
#include "resume_check.h"
#include "xenc_trainer.h"

#define STATE_VERSION 1u
#define HEADER_BYTES (4 + 4 + 5 * 8 + 6 * 8 + 2 * 8 + 4 * 4 + 4 * 4)

static qac_status write_state(void *user, const char *path) {
    qac_xtrainer *t = user;
    qac_state_writer w;
    qac_status st = qac_state_writer_open(&w, path);
    if (st) return st;
    const qac_train_opts *o = &t->o;
    uint32_t ver = STATE_VERSION, nl = (uint32_t)t->x->num_labels;
    uint64_t u[5] = {(uint64_t)t->step, t->n_enc, t->n_cls, o->seed, t->save_cursor_len};
    double dbl[6] = {o->lr, o->weight_decay, o->beta1, o->beta2, o->adam_eps, o->max_grad_norm};
    int64_t steps[2] = {o->warmup_steps, o->total_steps};
    int32_t ints[4] = {(int32_t)o->schedule, 0, 0, 0};
    float fl[4] = {t->drop.hidden, t->drop.attn, t->head_dropout, 0};
    size_t n = t->n_enc + t->n_cls;
    qac_state_put(&w, QAC_STATE_MAGIC_XE, 8);
    qac_state_put(&w, &ver, 4), qac_state_put(&w, &nl, 4), qac_state_put(&w, u, sizeof u);
    qac_state_put(&w, dbl, sizeof dbl), qac_state_put(&w, steps, sizeof steps), qac_state_put(&w, ints, sizeof ints);
    qac_state_put(&w, fl, sizeof fl);
    qac_state_put(&w, t->save_cursor, t->save_cursor_len);
    qac_state_put(&w, t->adam_m, n * sizeof(float));
    qac_state_test_kill(t->step);
    qac_state_put(&w, t->adam_v, n * sizeof(float));
    return qac_state_writer_close(&w);
}

static qac_status save_model(const void *x, const char *dir) { return qac_xenc_save(x, dir); }

qac_status qac_xtrainer_save(qac_xtrainer *t, const char *dir, const void *cursor, size_t cursor_len) {
    t->save_cursor = cursor, t->save_cursor_len = cursor_len;
    qac_xenc_update_fingerprint(t->x);
    qac_status st = qac_ckpt_save_with(save_model, t->x, dir, write_state, t);
    t->save_cursor = NULL, t->save_cursor_len = 0;
    return st;
}

typedef struct hreader {
    const unsigned char *p, *end;
} hreader;

static void get(hreader *r, void *out, size_t n) {
    if ((size_t)(r->end - r->p) < n) {
        memset(out, 0, n);
        r->p = r->end;
        return;
    }
    memcpy(out, r->p, n);
    r->p += n;
}

static qac_status check_options(const qac_xtrainer *t, const char *use, uint32_t nl, const uint64_t *u,
                                const double *dbl, const int64_t *steps, const int32_t *ints, const float *fl) {
    const qac_train_opts *o = &t->o;
    char a[64], b[64];
    if (nl != (uint32_t)t->x->num_labels) {
        snprintf(a, sizeof a, "%u", nl), snprintf(b, sizeof b, "%d", t->x->num_labels);
        return qac_resume_changed(use, "--num-labels", a, b);
    }
    if (steps[1] != o->total_steps) {
        snprintf(a, sizeof a, "%lld", (long long)steps[1]), snprintf(b, sizeof b, "%ld", o->total_steps);
        return qac_resume_changed(use, "--steps (or --epochs)", a, b);
    }
    if (u[3] != o->seed) {
        snprintf(a, sizeof a, "%llu", (unsigned long long)u[3]), snprintf(b, sizeof b, "%llu", (unsigned long long)o->seed);
        return qac_resume_changed(use, "--seed", a, b);
    }
    const double want[6] = {o->lr, o->weight_decay, o->beta1, o->beta2, o->adam_eps, o->max_grad_norm};
    static const char *const names[6] = {"--lr", "--weight-decay", "AdamW beta1", "AdamW beta2", "AdamW epsilon",
                                         "--max-grad-norm"};
    for (int i = 0; i < 6; i++)
        if (memcmp(&dbl[i], &want[i], sizeof want[i])) {
            qac_resume_two_reals(a, b, sizeof a, dbl[i], want[i]);
            return qac_resume_changed(use, names[i], a, b);
        }
    if (ints[0] != (int32_t)o->schedule)
        return qac_resume_changed(use, "--schedule", qac_resume_schedule_name(ints[0]),
                                  qac_resume_schedule_name((int32_t)o->schedule));
    if (steps[0] != o->warmup_steps) {
        snprintf(a, sizeof a, "%lld", (long long)steps[0]), snprintf(b, sizeof b, "%ld", o->warmup_steps);
        return qac_resume_changed(use, "--warmup-steps (or --warmup-ratio times the steps)", a, b);
    }
    const float now[3] = {t->drop.hidden, t->drop.attn, t->head_dropout};
    static const char *const dnames[3] = {"--dropout", "--dropout (attention)", "the classifier's dropout"};
    for (int i = 0; i < 3; i++)
        if (memcmp(&fl[i], &now[i], sizeof now[i])) {
            qac_resume_two_reals(a, b, sizeof a, fl[i], now[i]);
            return qac_resume_changed(use, dnames[i], a, b);
        }
    return QAC_OK;
}

qac_status qac_xtrainer_resume(qac_xtrainer *t, const char *dir, void **cursor, size_t *cursor_len) {
    *cursor = NULL;
    *cursor_len = 0;
    char use[4096], *data = NULL;
    size_t len = 0;
    qac_status st = qac_ckpt_read_state(dir, QAC_STATE_MAGIC_XE, HEADER_BYTES, use, sizeof use, &data, &len);
    if (st) return st;
    hreader r = {(const unsigned char *)data + 8, (const unsigned char *)data + len - 8};
    uint32_t ver = 0, nl = 0;
    uint64_t u[5];
    double dbl[6];
    int64_t steps[2];
    int32_t ints[4];
    float fl[4];
    get(&r, &ver, 4), get(&r, &nl, 4), get(&r, u, sizeof u), get(&r, dbl, sizeof dbl), get(&r, steps, sizeof steps);
    get(&r, ints, sizeof ints), get(&r, fl, sizeof fl);
    size_t n = t->n_enc + t->n_cls;
    qac_xenc *ck = NULL;
    if (ver != STATE_VERSION) {
        st = qac_set_error(QAC_ERR_UNSUPPORTED, "%s: cross-encoder training state version %u (this qac reads %u)", use,
                           ver, STATE_VERSION);
    } else if (!(st = check_options(t, use, nl, u, dbl, steps, ints, fl))) {
        if (u[1] != t->n_enc || u[2] != t->n_cls)
            st = qac_set_error(QAC_ERR_INVALID, "%s: %llu + %llu parameters, the model has %zu + %zu", use,
                               (unsigned long long)u[1], (unsigned long long)u[2], t->n_enc, t->n_cls);
        else if ((size_t)(r.end - r.p) != u[4] + 2 * n * sizeof(float))
            st = qac_set_error(QAC_ERR_FORMAT, "%s: sizes do not add up", use);
    }
    if (!st && u[4] && !(*cursor = malloc(u[4]))) st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
    if (!st) st = qac_xenc_load(&ck, use);
    if (!st && (ck->bert->n_params != t->n_enc || memcmp(&ck->bert->cfg, &t->x->bert->cfg, sizeof ck->bert->cfg) ||
                ck->num_labels != t->x->num_labels))
        st = qac_set_error(QAC_ERR_INVALID, "%s: the checkpoint's config differs from the model being trained", use);
    if (!st) {
        if (u[4]) get(&r, *cursor, u[4]);
        memcpy(t->x->bert->param_mem, ck->bert->param_mem, t->n_enc * sizeof(float));
        memcpy(t->x->cls_mem, ck->cls_mem, t->n_cls * sizeof(float));
        get(&r, t->adam_m, n * sizeof(float));
        get(&r, t->adam_v, n * sizeof(float));
        t->step = (long)u[0];
        *cursor_len = u[4];
        qac_bert_repack(&t->pk, &t->x->bert->cfg, &t->x->bert->p, t->pool);
        qac_xenc_update_fingerprint(t->x);
    }
    qac_xenc_free(ck);
    if (st) {
        free(*cursor);
        *cursor = NULL;
    }
    free(data);
    return st;
}
