/* The parts of a training checkpoint that the fine-tuning trainer
 * (state.c) and the pre-trainer (pretrain_state.c) share: a state file
 * written atomically with an XXH64 trailer, the directory written as
 * DIR.tmp and swapped in over DIR (DIR.old while swapping), and the way
 * back: DIR or the DIR.old a crash between the renames left, its state
 * file checked, its weights loaded. And the encoder exported into a run
 * directory: all its files appear together (qac_ckpt_export). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qac_util.h"
#include "trainer_internal.h"

qac_status qac_state_writer_open(qac_state_writer *w, const char *path) {
    memset(w, 0, sizeof *w);
    w->path = path;
    qac_xxh64_init(&w->h);
    return qac_atomic_open(&w->af, path);
}

void qac_state_put(qac_state_writer *w, const void *p, size_t n) {
    if (!n || w->err) return;
    if (fwrite(p, 1, n, w->af.f) != n) w->err = 1;
    qac_xxh64_update(&w->h, p, n);
}

qac_status qac_state_writer_close(qac_state_writer *w) {
    uint64_t sum = qac_xxh64_digest(&w->h);
    if (!w->err && fwrite(&sum, sizeof sum, 1, w->af.f) != 1) w->err = 1;
    if (w->err) {
        qac_atomic_abort(&w->af);
        return qac_set_error(QAC_ERR_IO, "%s: write failed: %s", w->path, strerror(errno));
    }
    return qac_atomic_commit(&w->af);
}

void qac_state_test_kill(long step) {
    const char *e = getenv("QAC_TEST_KILL_IN_SAVE");
    if (e && atol(e) == step) raise(SIGKILL);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

qac_status qac_trainer_remove_dir(const char *dir) {
    struct stat sb;
    if (lstat(dir, &sb) != 0) return QAC_OK;
    if (nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return qac_set_error(QAC_ERR_IO, "cannot remove %s: %s", dir, strerror(errno));
    return QAC_OK;
}

static qac_status save_encoder(const void *model, const char *dir) { return qac_model_save(model, dir); }

qac_status qac_ckpt_save(const qac_model *m, const char *dir, qac_state_write_fn write_state, void *user) {
    return qac_ckpt_save_with(save_encoder, m, dir, write_state, user);
}

qac_status qac_ckpt_save_with(qac_model_write_fn save, const void *model, const char *dir,
                              qac_state_write_fn write_state, void *user) {
    char tmp[4096], old[4096], path[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", dir) >= (int)sizeof tmp ||
        snprintf(old, sizeof old, "%s.old", dir) >= (int)sizeof old)
        return qac_set_error(QAC_ERR_INVALID, "checkpoint path too long: %s", dir);
    qac_status st = qac_trainer_remove_dir(tmp);
    if (st || (st = save(model, tmp))) return st;
    if ((st = qac_path_join(path, sizeof path, tmp, QAC_STATE_FILE)) || (st = write_state(user, path))) return st;
    struct stat sb;
    if (stat(dir, &sb) == 0) {
        if ((st = qac_trainer_remove_dir(old))) return st;
        if (rename(dir, old) != 0) return qac_set_error(QAC_ERR_IO, "rename %s: %s", dir, strerror(errno));
    }
    if (rename(tmp, dir) != 0) return qac_set_error(QAC_ERR_IO, "rename %s -> %s: %s", tmp, dir, strerror(errno));
    return qac_trainer_remove_dir(old);
}

/* fsync a directory, so the renames in it so far outlast a crash */
static void sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* rename every entry of src into dst, directories merged entry by entry;
 * `last` (a top-level name) is left in src */
static qac_status move_entries(const char *src, const char *dst, const char *last) {
    DIR *d = opendir(src);
    if (!d) return qac_set_error(QAC_ERR_IO, "%s: %s", src, strerror(errno));
    qac_status st = QAC_OK;
    struct dirent *e;
    while (!st && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || (last && !strcmp(e->d_name, last))) continue;
        char from[4096], to[4096];
        struct stat fs, ts;
        if ((st = qac_path_join(from, sizeof from, src, e->d_name)) ||
            (st = qac_path_join(to, sizeof to, dst, e->d_name)))
            break;
        if (lstat(from, &fs) != 0) {
            st = qac_set_error(QAC_ERR_IO, "%s: %s", from, strerror(errno));
        } else if (S_ISDIR(fs.st_mode) && lstat(to, &ts) == 0 && S_ISDIR(ts.st_mode)) {
            if (!(st = move_entries(from, to, NULL))) sync_dir(to);
        } else if (rename(from, to) != 0) {
            st = qac_set_error(QAC_ERR_IO, "rename %s -> %s: %s", from, to, strerror(errno));
        }
    }
    closedir(d);
    return st;
}

qac_status qac_ckpt_export(const qac_model *m, const char *dir) { return qac_ckpt_export_with(save_encoder, m, dir); }

qac_status qac_ckpt_export_with(qac_model_write_fn save, const void *model, const char *dir) {
    char tmp[4096], from[4096], to[4096];
    qac_status st = qac_path_join(tmp, sizeof tmp, dir, QAC_EXPORT_TMP);
    if (st || (st = qac_path_join(from, sizeof from, tmp, "config.json")) ||
        (st = qac_path_join(to, sizeof to, dir, "config.json")))
        return st;
    if ((st = qac_trainer_remove_dir(tmp)) || (st = save(model, tmp))) return st;
    /* from here until the last rename dir holds no config.json: no loader
     * takes it for a model, half old and half new */
    if (unlink(to) != 0 && errno != ENOENT) return qac_set_error(QAC_ERR_IO, "remove %s: %s", to, strerror(errno));
    sync_dir(dir);
    if ((st = move_entries(tmp, dir, "config.json"))) return st;
    sync_dir(dir);
    qac_crash_point("export_commit"); /* tests kill here: every file moved but config.json */
    if (rename(from, to) != 0) return qac_set_error(QAC_ERR_IO, "rename %s -> %s: %s", from, to, strerror(errno));
    sync_dir(dir);
    return qac_trainer_remove_dir(tmp);
}

static const char *magic_owner(const char *data, size_t len) {
    if (len < 8) return NULL;
    if (!memcmp(data, QAC_STATE_MAGIC_FT, 8)) return "a fine-tuning run's";
    if (!memcmp(data, QAC_STATE_MAGIC_PT, 8)) return "a pre-training run's";
    if (!memcmp(data, QAC_STATE_MAGIC_XE, 8)) return "a cross-encoder run's";
    return NULL;
}

qac_status qac_ckpt_read_state(const char *dir, const char *magic, size_t min_len, char *use, size_t use_cap,
                               char **data, size_t *len) {
    char path[4096];
    struct stat sb;
    *data = NULL;
    *len = 0;
    if (snprintf(use, use_cap, "%s", dir) >= (int)use_cap) return qac_set_error(QAC_ERR_INVALID, "path too long");
    if (stat(use, &sb) != 0 && snprintf(use, use_cap, "%s.old", dir) < (int)use_cap && stat(use, &sb) != 0)
        return qac_set_error(QAC_ERR_NOT_FOUND, "%s: no checkpoint there", dir);
    qac_status st = qac_path_join(path, sizeof path, use, QAC_STATE_FILE);
    if (st || (st = qac_read_file(path, data, len)))
        return qac_wrap_error(st ? st : QAC_ERR_IO, "%s: not a training checkpoint (no readable %s)", use,
                              QAC_STATE_FILE);
    const char *owner = magic_owner(*data, *len);
    if (*len < 8 + min_len + 8 || memcmp(*data, magic, 8) != 0) {
        st = qac_set_error(QAC_ERR_FORMAT, "%s: not a qac %s state (bad magic%s%s)", path,
                           !memcmp(magic, QAC_STATE_MAGIC_PT, 8)   ? "pre-training"
                           : !memcmp(magic, QAC_STATE_MAGIC_XE, 8) ? "cross-encoder training"
                                                                   : "training",
                           owner ? "; it is " : "",
                           owner ? owner : "");
    } else {
        qac_xxh64 h;
        uint64_t sum;
        qac_xxh64_init(&h);
        qac_xxh64_update(&h, *data, *len - 8);
        memcpy(&sum, *data + *len - 8, 8);
        if (sum != qac_xxh64_digest(&h))
            st = qac_set_error(QAC_ERR_FORMAT, "%s: checksum mismatch (truncated or corrupt)", path);
    }
    if (st) {
        free(*data);
        *data = NULL;
    }
    return st;
}

qac_status qac_ckpt_load_weights(qac_model *into, const char *use) {
    qac_model *m = NULL;
    qac_status st = qac_model_load(&m, use);
    if (st) return qac_wrap_error(st, "%s: checkpoint weights", use);
    if (m->n_params != into->n_params || memcmp(&m->cfg, &into->cfg, sizeof m->cfg) != 0) {
        qac_model_free(m);
        return qac_set_error(QAC_ERR_INVALID, "%s: the checkpoint's config differs from the model being trained", use);
    }
    memcpy(into->param_mem, m->param_mem, m->n_params * sizeof(float));
    qac_model_free(m);
    return QAC_OK;
}
