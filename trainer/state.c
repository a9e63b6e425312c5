/* Training checkpoints: an HF directory (loadable for inference on its own)
 * plus training_state.qts, our own file:
 *   char[8] "QACTRST\0"; u32 version (1); u32 0
 *   u64 step, n_params, seed, cursor_len
 *   f64 lr, weight_decay, beta1, beta2, adam_eps, max_grad_norm
 *   i64 warmup_steps, total_steps; i32 schedule, sim, chunk, recompute
 *   f32 tau, hidden_dropout, attn_dropout, 0
 *   u8 cursor[cursor_len]; f32 adam_m[n_params]; f32 adam_v[n_params]
 *   u64 XXH64 of every byte before it
 * Little-endian. The directory is written as DIR.tmp and renamed, so DIR is
 * either the previous complete checkpoint or the new one. */
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qac_util.h"
#include "trainer_internal.h"

#define STATE_MAGIC "QACTRST"
#define STATE_VERSION 1u
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

#define PUT(w, v) put((w), &(v), sizeof(v))

/* A test-only hook: QAC_TEST_KILL_IN_SAVE=N kills the process half-way
 * through writing the checkpoint of step N (the resume test uses it). */
static void maybe_die(const qac_trainer *t, const char *where) {
    const char *e = getenv("QAC_TEST_KILL_IN_SAVE");
    if (e && atol(e) == t->step && strcmp(where, "state") == 0) raise(SIGKILL);
}

static qac_status write_state(qac_trainer *t, const char *path, const void *cursor, size_t cursor_len) {
    qac_atomic_file af;
    qac_status st = qac_atomic_open(&af, path);
    if (st) return st;
    hwriter w;
    memset(&w, 0, sizeof w);
    w.f = af.f;
    qac_xxh64_init(&w.h);
    const qac_train_opts *o = &t->o;
    uint32_t ver = STATE_VERSION, zero = 0;
    uint64_t step = (uint64_t)t->step, n = t->m->n_params, seed = o->seed, cl = cursor_len;
    int64_t warm = o->warmup_steps, total = o->total_steps;
    int32_t ints[4] = {(int32_t)o->schedule, (int32_t)o->sim, o->chunk, o->recompute};
    float fl[4] = {o->tau, t->drop.hidden, t->drop.attn, 0};
    double dbl[6] = {o->lr, o->weight_decay, o->beta1, o->beta2, o->adam_eps, o->max_grad_norm};
    put(&w, STATE_MAGIC, 8);
    PUT(&w, ver), PUT(&w, zero), PUT(&w, step), PUT(&w, n), PUT(&w, seed), PUT(&w, cl);
    put(&w, dbl, sizeof dbl), PUT(&w, warm), PUT(&w, total), put(&w, ints, sizeof ints), put(&w, fl, sizeof fl);
    put(&w, cursor, cursor_len);
    put(&w, t->adam_m, n * sizeof(float));
    maybe_die(t, "state");
    put(&w, t->adam_v, n * sizeof(float));
    uint64_t sum = qac_xxh64_digest(&w.h);
    if (!w.err && fwrite(&sum, sizeof sum, 1, af.f) != 1) w.err = 1;
    if (w.err) {
        qac_atomic_abort(&af);
        return qac_set_error(QAC_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    }
    return qac_atomic_commit(&af);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* rm -rf dir (absent is fine) */
qac_status qac_trainer_remove_dir(const char *dir) {
    struct stat sb;
    if (lstat(dir, &sb) != 0) return QAC_OK;
    if (nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return qac_set_error(QAC_ERR_IO, "cannot remove %s: %s", dir, strerror(errno));
    return QAC_OK;
}

qac_status qac_trainer_save(qac_trainer *t, const char *dir, const void *cursor, size_t cursor_len) {
    char tmp[4096], old[4096], path[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", dir) >= (int)sizeof tmp ||
        snprintf(old, sizeof old, "%s.old", dir) >= (int)sizeof old)
        return qac_set_error(QAC_ERR_INVALID, "checkpoint path too long: %s", dir);
    qac_status st = qac_trainer_remove_dir(tmp);
    if (st) return st;
    if (t->gpu && (st = qac_cuda_trainer_download(t->gpu, t->m->param_mem, NULL, t->adam_m, t->adam_v))) return st;
    if ((st = qac_model_save(t->m, tmp))) return st;
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
    hreader r = {(const unsigned char *)data, (const unsigned char *)data + len};
    char magic[8];
    uint32_t ver = 0, zero = 0;
    uint64_t step = 0, n = 0, seed = 0, cl = 0, sum = 0;
    qac_xxh64 h;
    qac_xxh64_init(&h);
    if (len >= 8) qac_xxh64_update(&h, data, len - 8);
    if (len < 8 + 8 + 32 + 8 || get(&r, magic, 8) || memcmp(magic, STATE_MAGIC, 8) != 0) {
        st = qac_set_error(QAC_ERR_FORMAT, "%s: not a qac training state (bad magic)", path);
        goto done;
    }
    memcpy(&sum, data + len - 8, 8);
    if (sum != qac_xxh64_digest(&h)) {
        st = qac_set_error(QAC_ERR_FORMAT, "%s: checksum mismatch (truncated or corrupt)", path);
        goto done;
    }
    get(&r, &ver, 4), get(&r, &zero, 4), get(&r, &step, 8), get(&r, &n, 8), get(&r, &seed, 8), get(&r, &cl, 8);
    if (ver != STATE_VERSION) {
        st = qac_set_error(QAC_ERR_UNSUPPORTED, "%s: training state version %u (this qac reads %u)", path, ver,
                           STATE_VERSION);
        goto done;
    }
    if (n != t->m->n_params) {
        st = qac_set_error(QAC_ERR_INVALID, "%s: %llu parameters, the model has %zu", path, (unsigned long long)n,
                           t->m->n_params);
        goto done;
    }
    r.p += 6 * 8 + 2 * 8 + 4 * 4 + 4 * 4; /* options, kept for the record */
    if ((size_t)(r.end - r.p) != cl + 2 * n * sizeof(float) + 8) {
        st = qac_set_error(QAC_ERR_FORMAT, "%s: sizes do not add up", path);
        goto done;
    }
    if (cl) {
        if (!(*cursor = malloc(cl))) {
            st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
            goto done;
        }
        get(&r, *cursor, cl);
    }
    qac_model *m = NULL;
    if ((st = qac_model_load(&m, use))) {
        st = qac_wrap_error(st, "%s: checkpoint weights", use);
        goto done;
    }
    if (m->n_params != n || memcmp(&m->cfg, &t->m->cfg, sizeof m->cfg) != 0) {
        qac_model_free(m);
        st = qac_set_error(QAC_ERR_INVALID, "%s: the checkpoint's config differs from the model being trained", use);
        goto done;
    }
    memcpy(t->m->param_mem, m->param_mem, n * sizeof(float));
    qac_model_free(m);
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
