/* Training checkpoints: an HF directory (loadable for inference on its own)
 * plus training_state.qts, our own file:
 *   char[8] "QACTRST\0"; u32 version (2); u32 0
 *   u64 step, n_params, seed, cursor_len
 *   f64 lr, weight_decay, beta1, beta2, adam_eps, max_grad_norm
 *   i64 warmup_steps, total_steps; i32 schedule, sim, chunk, recompute
 *   f32 tau, hidden_dropout, attn_dropout, pair_alpha (version 1: 0, unrecorded; 0 is also "no PAIR")
 *   u8 cursor[cursor_len]; f32 adam_m[n_params]; f32 adam_v[n_params]
 *   u64 XXH64 of every byte before it
 * Little-endian. The directory is written as DIR.tmp and renamed, so DIR is
 * either the previous complete checkpoint or the new one. A resume refuses
 * a recorded option that shapes the steps (check_options); --chunk,
 * --recompute, the threads and the device are not checked (they change how
 * a step is computed, not what it computes). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qac_util.h"
#include "trainer_internal.h"
#include "resume_check.h"

#define STATE_VERSION 2u
/* the header after the magic, up to the cursor */
#define HEADER_BYTES (4 + 4 + 4 * 8 + 6 * 8 + 2 * 8 + 4 * 4 + 4 * 4)

static qac_status write_state(void *user, const char *path) {
    qac_trainer *t = user;
    qac_state_writer w;
    qac_status st = qac_state_writer_open(&w, path);
    if (st) return st;
    const qac_train_opts *o = &t->o;
    uint32_t ver = STATE_VERSION, zero = 0;
    uint64_t step = (uint64_t)t->step, n = t->m->n_params, seed = o->seed, cl = t->save_cursor_len;
    int64_t warm = o->warmup_steps, total = o->total_steps;
    int32_t ints[4] = {(int32_t)o->schedule, (int32_t)o->sim, o->chunk, o->recompute};
    float fl[4] = {o->tau, t->drop.hidden, t->drop.attn, o->pair_alpha};
    double dbl[6] = {o->lr, o->weight_decay, o->beta1, o->beta2, o->adam_eps, o->max_grad_norm};
#define PUT(v) qac_state_put(&w, &(v), sizeof(v))
    qac_state_put(&w, QAC_STATE_MAGIC_FT, 8);
    PUT(ver), PUT(zero), PUT(step), PUT(n), PUT(seed), PUT(cl);
    PUT(dbl), PUT(warm), PUT(total), PUT(ints), PUT(fl);
#undef PUT
    qac_state_put(&w, t->save_cursor, t->save_cursor_len);
    qac_state_put(&w, t->adam_m, n * sizeof(float));
    qac_state_test_kill(t->step);
    qac_state_put(&w, t->adam_v, n * sizeof(float));
    return qac_state_writer_close(&w);
}

qac_status qac_trainer_save(qac_trainer *t, const char *dir, const void *cursor, size_t cursor_len) {
    qac_status st;
    if (t->gpu && (st = qac_cuda_trainer_download(t->gpu, t->m->param_mem, NULL, t->adam_m, t->adam_v))) return st;
    t->save_cursor = cursor, t->save_cursor_len = cursor_len;
    st = qac_ckpt_save(t->m, dir, write_state, t);
    t->save_cursor = NULL, t->save_cursor_len = 0;
    return st;
}

typedef struct hreader {
    const unsigned char *p, *end;
} hreader;

static int get(hreader *r, void *out, size_t n) {
    if ((size_t)(r->end - r->p) < n) return -1;
    memcpy(out, r->p, n);
    r->p += n;
    return 0;
}

/* the recorded options (every version reads the same layout) */
typedef struct recorded {
    uint32_t version;
    uint64_t seed;
    double dbl[6]; /* lr, weight_decay, beta1, beta2, adam_eps, max_grad_norm */
    int64_t warmup, total;
    int32_t schedule, sim;
    float tau, hidden_dropout, attn_dropout, pair_alpha;
} recorded;

const char *qac_resume_schedule_name(int32_t s) {
    return s == QAC_SCHED_LINEAR     ? "linear"
           : s == QAC_SCHED_COSINE   ? "cosine"
           : s == QAC_SCHED_CONSTANT ? "constant"
                                     : "?";
}

/* two numbers that differ, printed so that they read differently */
void qac_resume_two_reals(char *a, char *b, size_t cap, double x, double y) {
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(a, cap, "%.*g", digits, x), snprintf(b, cap, "%.*g", digits, y);
        if (strcmp(a, b)) return;
    }
}

qac_status qac_resume_changed(const char *use, const char *option, const char *then, const char *now) {
    return qac_set_error(QAC_ERR_MISMATCH,
                         "%s: the run was written with %s %s, this resume has %s; resume with the same %s (a changed "
                         "option would not continue the run bit for bit), or start a new --out",
                         use, option, then, now, option);
}

/* Every recorded option that shapes the steps, against this trainer's as
 * resolved (steps from epochs, warmup from its ratio, dropout from the
 * checkpoint); the first that differs is refused by name. A version-1
 * state has no PAIR alpha (InfoNCE assumed, not compared). */
static qac_status check_options(const recorded *h, const qac_trainer *t, const char *use) {
    const qac_train_opts *o = &t->o;
    char a[64], b[64];
    if (h->total != o->total_steps) {
        snprintf(a, sizeof a, "%lld", (long long)h->total), snprintf(b, sizeof b, "%ld", o->total_steps);
        return qac_resume_changed(use, "--steps (or --epochs)", a, b);
    }
    if (h->seed != o->seed) {
        snprintf(a, sizeof a, "%llu", (unsigned long long)h->seed);
        snprintf(b, sizeof b, "%llu", (unsigned long long)o->seed);
        return qac_resume_changed(use, "--seed", a, b);
    }
    const double want[6] = {o->lr, o->weight_decay, o->beta1, o->beta2, o->adam_eps, o->max_grad_norm};
    static const char *const dbl_names[6] = {"--lr", "--weight-decay", "AdamW beta1", "AdamW beta2", "AdamW epsilon",
                                             "--max-grad-norm"};
    for (int i = 0; i < 6; i++)
        if (memcmp(&h->dbl[i], &want[i], sizeof want[i])) {
            qac_resume_two_reals(a, b, sizeof a, h->dbl[i], want[i]);
            return qac_resume_changed(use, dbl_names[i], a, b);
        }
    if (h->schedule != (int32_t)o->schedule)
        return qac_resume_changed(use, "--schedule", qac_resume_schedule_name(h->schedule),
                                  qac_resume_schedule_name((int32_t)o->schedule));
    if (h->warmup != o->warmup_steps) {
        snprintf(a, sizeof a, "%lld", (long long)h->warmup), snprintf(b, sizeof b, "%ld", o->warmup_steps);
        return qac_resume_changed(use, "--warmup-steps (or --warmup-ratio times the steps)", a, b);
    }
    float alpha = h->version >= 2 ? h->pair_alpha : o->pair_alpha;
    if (memcmp(&alpha, &o->pair_alpha, sizeof alpha)) {
        qac_resume_two_reals(a, b, sizeof a, alpha, o->pair_alpha);
        return qac_resume_changed(use, "the PAIR alpha", a, b);
    }
    if (!(o->pair_alpha > 0)) { /* InfoNCE: PAIR reads neither */
        if (memcmp(&h->tau, &o->tau, sizeof o->tau)) {
            qac_resume_two_reals(a, b, sizeof a, h->tau, o->tau);
            return qac_resume_changed(use, "--tau", a, b);
        }
        if (h->sim != (int32_t)o->sim)
            return qac_resume_changed(use, "--sim", h->sim == QAC_SIM_COS ? "cos" : "dot",
                                      o->sim == QAC_SIM_COS ? "cos" : "dot");
    }
    const float drop[2] = {t->drop.hidden, t->drop.attn}, was[2] = {h->hidden_dropout, h->attn_dropout};
    static const char *const drop_names[2] = {"--dropout", "--dropout (attention)"};
    for (int i = 0; i < 2; i++)
        if (memcmp(&was[i], &drop[i], sizeof drop[i])) {
            qac_resume_two_reals(a, b, sizeof a, was[i], drop[i]);
            return qac_resume_changed(use, drop_names[i], a, b);
        }
    return QAC_OK;
}

qac_status qac_trainer_resume(qac_trainer *t, const char *dir, void **cursor, size_t *cursor_len) {
    *cursor = NULL;
    *cursor_len = 0;
    char use[4096], *data = NULL;
    size_t len = 0;
    qac_status st = qac_ckpt_read_state(dir, QAC_STATE_MAGIC_FT, HEADER_BYTES, use, sizeof use, &data, &len);
    if (st) return st;
    hreader r = {(const unsigned char *)data + 8, (const unsigned char *)data + len};
    recorded h = {0};
    uint32_t zero = 0;
    uint64_t step = 0, n = 0, cl = 0;
    int32_t ints[4];
    float fl[4];
    get(&r, &h.version, 4), get(&r, &zero, 4), get(&r, &step, 8), get(&r, &n, 8), get(&r, &h.seed, 8), get(&r, &cl, 8);
    get(&r, h.dbl, sizeof h.dbl), get(&r, &h.warmup, 8), get(&r, &h.total, 8), get(&r, ints, sizeof ints);
    get(&r, fl, sizeof fl);
    h.schedule = ints[0], h.sim = ints[1];
    h.tau = fl[0], h.hidden_dropout = fl[1], h.attn_dropout = fl[2], h.pair_alpha = fl[3];
    if (h.version < 1 || h.version > STATE_VERSION) {
        st = qac_set_error(QAC_ERR_UNSUPPORTED, "%s: training state version %u (this qac reads 1 to %u)", use,
                           h.version, STATE_VERSION);
        goto done;
    }
    if ((st = check_options(&h, t, use))) goto done;
    if (n != t->m->n_params) {
        st = qac_set_error(QAC_ERR_INVALID, "%s: %llu parameters, the model has %zu", use, (unsigned long long)n,
                           t->m->n_params);
        goto done;
    }
    if ((size_t)(r.end - r.p) != cl + 2 * n * sizeof(float) + 8) {
        st = qac_set_error(QAC_ERR_FORMAT, "%s: sizes do not add up", use);
        goto done;
    }
    if (cl) {
        if (!(*cursor = malloc(cl))) {
            st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
            goto done;
        }
        get(&r, *cursor, cl);
    }
    if ((st = qac_ckpt_load_weights(t->m, use))) goto done;
    get(&r, t->adam_m, n * sizeof(float));
    get(&r, t->adam_v, n * sizeof(float));
    t->step = (long)step;
    *cursor_len = cl;
    qac_bert_repack(&t->pk, &t->m->cfg, &t->m->p, t->pool);
    qac_model_update_fingerprint(t->m);
    if (t->gpu) st = qac_cuda_trainer_upload(t->gpu, t->m->param_mem, t->adam_m, t->adam_v);
done:
    if (st) {
        free(*cursor);
        *cursor = NULL;
    }
    free(data);
    return st;
}
