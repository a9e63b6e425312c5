/* Pre-training checkpoints: an encoder-only HF directory (loadable for
 * inference and fine-tuning on its own) plus training_state.qts:
 *   char[8] "QACPTST\0"; u32 version (2); u32 objective
 *   u64 step, n_enc, n_head, seed, cursor_len
 *   i32 head_layers, skip_from, hidden_size, vocab_size
 *   f64 lr, weight_decay, beta1, beta2, adam_eps, max_grad_norm
 *   i64 warmup_steps, total_steps; i32 schedule, recompute
 *   f32 mask_rate, enc_mask_rate, dec_mask_rate, tau, alpha, hidden_dropout, attn_dropout, window (qgen)
 *   i32 pooling (0 cls, 1 mean), normalize (0, 1): the representation, resolved
 *       (version 1 had neither: raw [CLS], read as cls and 0)
 *   u8 cursor[cursor_len]; f32 heads[n_head]
 *   f32 adam_m[n_enc + n_head]; f32 adam_v[n_enc + n_head]
 *   u64 XXH64 of every byte before it
 * Little-endian. The heads live only here: the exported encoder carries
 * none of them. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pretrainer.h"
#include "qac_util.h"

#define STATE_MAGIC "QACPTST"
#define STATE_VERSION 2u
#define STATE_FILE "training_state.qts"

typedef struct hwriter {
    FILE *f;
    qac_xxh64 h;
    int err;
} hwriter;

static void put(hwriter *w, const void *p, size_t n) {
    if (!n || w->err) return;
    if (fwrite(p, 1, n, w->f) != n) w->err = 1;
    qac_xxh64_update(&w->h, p, n);
}

typedef struct header {
    uint32_t version, objective;
    uint64_t step, n_enc, n_head, seed, cursor_len;
    int32_t head_layers, skip_from, hidden_size, vocab_size;
    double dbl[6];
    int64_t warmup, total;
    int32_t schedule, recompute;
    float fl[8];
    int32_t pooling, normalize;
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
}

/* the header field by field (no struct padding in the file) */
static void put_header(hwriter *w, const header *h) {
    put(w, &h->version, 4), put(w, &h->objective, 4);
    put(w, &h->step, 8), put(w, &h->n_enc, 8), put(w, &h->n_head, 8), put(w, &h->seed, 8), put(w, &h->cursor_len, 8);
    put(w, &h->head_layers, 4), put(w, &h->skip_from, 4), put(w, &h->hidden_size, 4), put(w, &h->vocab_size, 4);
    put(w, h->dbl, sizeof h->dbl), put(w, &h->warmup, 8), put(w, &h->total, 8);
    put(w, &h->schedule, 4), put(w, &h->recompute, 4), put(w, h->fl, sizeof h->fl);
    put(w, &h->pooling, 4), put(w, &h->normalize, 4);
}
#define HEADER_V1_BYTES (4 + 4 + 5 * 8 + 4 * 4 + 6 * 8 + 2 * 8 + 2 * 4 + 8 * 4)
#define HEADER_BYTES (HEADER_V1_BYTES + 2 * 4)

/* A test-only hook, as the fine-tuning trainer's: QAC_TEST_KILL_IN_SAVE=N
 * kills the process half-way through writing the state of step N. */
static void maybe_die(const qac_pretrainer *t) {
    const char *e = getenv("QAC_TEST_KILL_IN_SAVE");
    if (e && atol(e) == t->step) raise(SIGKILL);
}

static qac_status write_state(qac_pretrainer *t, const char *path, const void *cursor, size_t cursor_len) {
    qac_atomic_file af;
    qac_status st = qac_atomic_open(&af, path);
    if (st) return st;
    hwriter w;
    memset(&w, 0, sizeof w);
    w.f = af.f;
    qac_xxh64_init(&w.h);
    header h;
    fill_header(&h, t, cursor_len);
    put(&w, STATE_MAGIC, 8);
    put_header(&w, &h);
    put(&w, cursor, cursor_len);
    put(&w, t->head_mem, t->n_head * sizeof(float));
    put(&w, t->adam_m, t->n_grad * sizeof(float));
    maybe_die(t);
    put(&w, t->adam_v, t->n_grad * sizeof(float));
    uint64_t sum = qac_xxh64_digest(&w.h);
    if (!w.err && fwrite(&sum, sizeof sum, 1, af.f) != 1) w.err = 1;
    if (w.err) {
        qac_atomic_abort(&af);
        return qac_set_error(QAC_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    }
    return qac_atomic_commit(&af);
}

qac_status qac_pretrainer_save(qac_pretrainer *t, const char *dir, const void *cursor, size_t cursor_len) {
    char tmp[4096], old[4096], path[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", dir) >= (int)sizeof tmp ||
        snprintf(old, sizeof old, "%s.old", dir) >= (int)sizeof old)
        return qac_set_error(QAC_ERR_INVALID, "checkpoint path too long: %s", dir);
    qac_status st = qac_trainer_remove_dir(tmp);
    if (st || (st = qac_model_save(t->m, tmp))) return st;
    if ((st = qac_path_join(path, sizeof path, tmp, STATE_FILE)) || (st = write_state(t, path, cursor, cursor_len)))
        return st;
    struct stat sb;
    if (stat(dir, &sb) == 0) {
        if ((st = qac_trainer_remove_dir(old))) return st;
        if (rename(dir, old) != 0) return qac_set_error(QAC_ERR_IO, "rename %s: %s", dir, strerror(errno));
    }
    if (rename(tmp, dir) != 0) return qac_set_error(QAC_ERR_IO, "rename %s -> %s: %s", tmp, dir, strerror(errno));
    return qac_trainer_remove_dir(old);
}

static const char *objective_name(uint32_t o) {
    return o == QAC_PT_COCONDENSER ? "cocondenser" : o == QAC_PT_COTMAE ? "cotmae" : o == QAC_PT_QGEN ? "qgen" : "?";
}

qac_status qac_pretrainer_resume(qac_pretrainer *t, const char *dir, void **cursor, size_t *cursor_len) {
    *cursor = NULL;
    *cursor_len = 0;
    char path[4096], use[4096];
    struct stat sb;
    /* a crash between the two renames of a save leaves only DIR.old */
    if (snprintf(use, sizeof use, "%s", dir) >= (int)sizeof use) return qac_set_error(QAC_ERR_INVALID, "path too long");
    if (stat(use, &sb) != 0 && snprintf(use, sizeof use, "%s.old", dir) < (int)sizeof use && stat(use, &sb) != 0)
        return qac_set_error(QAC_ERR_NOT_FOUND, "%s: no checkpoint there", dir);
    qac_status st = qac_path_join(path, sizeof path, use, STATE_FILE);
    char *data = NULL;
    size_t len = 0;
    if (st || (st = qac_read_file(path, &data, &len)))
        return qac_wrap_error(st ? st : QAC_ERR_IO, "%s: not a training checkpoint (no readable %s)", use, STATE_FILE);
    const unsigned char *p = (const unsigned char *)data;
    header h, want;
    qac_xxh64 x;
    qac_xxh64_init(&x);
    if (len < 8 + HEADER_V1_BYTES + 8 || memcmp(p, STATE_MAGIC, 8) != 0) {
        st = qac_set_error(QAC_ERR_FORMAT, "%s: not a qac pre-training state (bad magic%s)", path,
                           len >= 8 && !memcmp(p, "QACTRST", 8) ? "; it is a fine-tuning run's" : "");
        goto done;
    }
    qac_xxh64_update(&x, data, len - 8);
    uint64_t sum;
    memcpy(&sum, data + len - 8, 8);
    if (sum != qac_xxh64_digest(&x)) {
        st = qac_set_error(QAC_ERR_FORMAT, "%s: checksum mismatch (truncated or corrupt)", path);
        goto done;
    }
    p += 8;
#define GET(field, n) (memcpy(&(field), p, n), p += (n))
    GET(h.version, 4), GET(h.objective, 4), GET(h.step, 8), GET(h.n_enc, 8), GET(h.n_head, 8), GET(h.seed, 8);
    GET(h.cursor_len, 8), GET(h.head_layers, 4), GET(h.skip_from, 4), GET(h.hidden_size, 4), GET(h.vocab_size, 4);
    GET(h.dbl, sizeof h.dbl), GET(h.warmup, 8), GET(h.total, 8), GET(h.schedule, 4), GET(h.recompute, 4);
    GET(h.fl, sizeof h.fl);
    h.pooling = QAC_POOL_CLS, h.normalize = 0; /* version 1: the raw [CLS] */
    if (h.version >= 2 && len >= 8 + HEADER_BYTES + 8) GET(h.pooling, 4), GET(h.normalize, 4);
#undef GET
    fill_header(&want, t, 0);
    if (h.version != STATE_VERSION && h.version != 1) {
        st = qac_set_error(QAC_ERR_UNSUPPORTED, "%s: pre-training state version %u (this qac reads %u)", path, h.version,
                           STATE_VERSION);
        goto done;
    }
    if (h.objective != want.objective || h.head_layers != want.head_layers ||
        (h.objective == QAC_PT_COCONDENSER && h.skip_from != want.skip_from) || h.fl[7] != want.fl[7]) {
        st = qac_set_error(QAC_ERR_INVALID,
                           "%s: the run was %s with %d head layers (skip-from %d, qgen window %g); resume it with the "
                           "same --objective, --head-layers, --skip-from and --qgen-window",
                           use, objective_name(h.objective), h.head_layers, h.skip_from, (double)h.fl[7]);
        goto done;
    }
    if (h.pooling != want.pooling || (h.normalize != want.normalize && h.objective == QAC_PT_COCONDENSER)) {
        st = qac_set_error(QAC_ERR_INVALID,
                           "%s: the run's representation was %s pooling%s, this one is %s pooling%s; resume it with "
                           "the same --pooling and --normalize",
                           use, qac_pooling_name((qac_pooling)h.pooling), h.normalize ? ", L2-normalised" : "",
                           qac_pooling_name((qac_pooling)want.pooling), want.normalize ? ", L2-normalised" : "");
        goto done;
    }
    if (h.n_enc != t->m->n_params || h.n_head != t->n_head || h.hidden_size != want.hidden_size ||
        h.vocab_size != want.vocab_size) {
        st = qac_set_error(QAC_ERR_INVALID, "%s: %llu + %llu parameters, the model and heads have %zu + %zu", path,
                           (unsigned long long)h.n_enc, (unsigned long long)h.n_head, t->m->n_params, t->n_head);
        goto done;
    }
    if ((size_t)((const unsigned char *)data + len - p) != h.cursor_len + (t->n_head + 2 * t->n_grad) * sizeof(float) + 8) {
        st = qac_set_error(QAC_ERR_FORMAT, "%s: sizes do not add up", path);
        goto done;
    }
    qac_model *m = NULL;
    if ((st = qac_model_load(&m, use))) {
        st = qac_wrap_error(st, "%s: checkpoint weights", use);
        goto done;
    }
    if (m->n_params != t->m->n_params || memcmp(&m->cfg, &t->m->cfg, sizeof m->cfg) != 0) {
        qac_model_free(m);
        st = qac_set_error(QAC_ERR_INVALID, "%s: the checkpoint's config differs from the model being trained", use);
        goto done;
    }
    memcpy(t->m->param_mem, m->param_mem, m->n_params * sizeof(float));
    qac_model_free(m);
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
done:
    if (st) {
        free(*cursor);
        *cursor = NULL;
    }
    free(data);
    return st;
}
