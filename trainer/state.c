/* Training checkpoints: an HF directory (loadable for inference on its own)
 * plus training_state.qts, our own file:
 *   char[8] "QACTRST\0"; u32 version (1); u32 0
 *   u64 step, n_params, seed, cursor_len
 *   f64 lr, weight_decay, beta1, beta2, adam_eps, max_grad_norm
 *   i64 warmup_steps, total_steps; i32 schedule, sim, chunk, recompute
 *   f32 tau, hidden_dropout, attn_dropout, pair_alpha (0 before PAIR was an option)
 *   u8 cursor[cursor_len]; f32 adam_m[n_params]; f32 adam_v[n_params]
 *   u64 XXH64 of every byte before it
 * Little-endian. The directory is written as DIR.tmp and renamed, so DIR is
 * either the previous complete checkpoint or the new one. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qac_util.h"
#include "trainer_internal.h"

#define STATE_VERSION 1u

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

qac_status qac_trainer_resume(qac_trainer *t, const char *dir, void **cursor, size_t *cursor_len) {
    *cursor = NULL;
    *cursor_len = 0;
    char use[4096], *data = NULL;
    size_t len = 0;
    qac_status st = qac_ckpt_read_state(dir, QAC_STATE_MAGIC_FT, 8 + 32, use, sizeof use, &data, &len);
    if (st) return st;
    hreader r = {(const unsigned char *)data + 8, (const unsigned char *)data + len};
    uint32_t ver = 0, zero = 0;
    uint64_t step = 0, n = 0, seed = 0, cl = 0;
    get(&r, &ver, 4), get(&r, &zero, 4), get(&r, &step, 8), get(&r, &n, 8), get(&r, &seed, 8), get(&r, &cl, 8);
    if (ver != STATE_VERSION) {
        st = qac_set_error(QAC_ERR_UNSUPPORTED, "%s: training state version %u (this qac reads %u)", use, ver,
                           STATE_VERSION);
        goto done;
    }
    if (n != t->m->n_params) {
        st = qac_set_error(QAC_ERR_INVALID, "%s: %llu parameters, the model has %zu", use, (unsigned long long)n,
                           t->m->n_params);
        goto done;
    }
    r.p += 6 * 8 + 2 * 8 + 4 * 4 + 4 * 4; /* options, kept for the record */
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
