/* The training loop: steps, the per-step log, periodic checkpoints and
 * resume (see qac_train_run). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "qac_util.h"
#include "trainer_internal.h"

#define LATEST "latest"
#define LOG "log.jsonl"

qac_status qac_rundir_read_latest(const char *out, char *name, size_t cap) {
    char path[4096];
    char *text = NULL;
    size_t len = 0;
    qac_status st = qac_path_join(path, sizeof path, out, LATEST);
    if (st || (st = qac_read_file(path, &text, &len))) return st;
    while (len && (text[len - 1] == '\n' || text[len - 1] == ' ')) text[--len] = '\0';
    if (!len || len >= cap || strchr(text, '/')) {
        free(text);
        return qac_set_error(QAC_ERR_FORMAT, "%s: not a checkpoint name", path);
    }
    memcpy(name, text, len + 1);
    free(text);
    return QAC_OK;
}

qac_status qac_rundir_write_latest(const char *out, const char *name) {
    char path[4096];
    qac_atomic_file af;
    qac_status st = qac_path_join(path, sizeof path, out, LATEST);
    if (st || (st = qac_atomic_open(&af, path))) return st;
    fprintf(af.f, "%s\n", name);
    return qac_atomic_commit(&af);
}

qac_status qac_rundir_trim_log(const char *path, long step) {
    char *text = NULL;
    size_t len = 0;
    struct stat sb;
    if (stat(path, &sb) != 0) return QAC_OK;
    qac_status st = qac_read_file(path, &text, &len);
    if (st) return st;
    qac_atomic_file af;
    if ((st = qac_atomic_open(&af, path))) {
        free(text);
        return st;
    }
    for (char *line = text, *nl; line < text + len; line = nl + 1) {
        nl = strchr(line, '\n');
        if (!nl) break; /* a line cut by the kill */
        long s = -1;
        if (sscanf(line, "{\"step\":%ld", &s) == 1 && s >= 1 && s <= step) fwrite(line, 1, (size_t)(nl - line + 1), af.f);
    }
    free(text);
    return qac_atomic_commit(&af);
}

static int checkpoint_step(const char *name, long *step) {
    char *end;
    if (strncmp(name, "checkpoint-", 11) != 0) return 0;
    *step = strtol(name + 11, &end, 10);
    return *end == '\0' && end != name + 11;
}

qac_status qac_rundir_prune(const char *out, int keep, long newest) {
    DIR *d = opendir(out);
    if (!d) return qac_set_error(QAC_ERR_IO, "%s: %s", out, strerror(errno));
    long steps[4096];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 4096;) {
        long s;
        if (checkpoint_step(e->d_name, &s) && s <= newest) steps[n++] = s;
    }
    closedir(d);
    qac_status st = QAC_OK;
    for (int i = 0; i < n && !st; i++) {
        int newer = 0;
        for (int j = 0; j < n; j++) newer += steps[j] > steps[i];
        if (newer >= keep) {
            char path[4096];
            snprintf(path, sizeof path, "%s/checkpoint-%ld", out, steps[i]);
            st = qac_trainer_remove_dir(path);
        }
    }
    return st;
}

static qac_status save(qac_trainer *t, const qac_batch_source *src, const qac_run_opts *ro) {
    char name[64], path[4096];
    snprintf(name, sizeof name, "checkpoint-%ld", t->step);
    void *cur = NULL;
    size_t cl = 0;
    qac_status st = src->get_cursor(src->user, &cur, &cl);
    if (!st && !(st = qac_path_join(path, sizeof path, ro->out_dir, name)) &&
        !(st = qac_trainer_save(t, path, cur, cl)) && !(st = qac_rundir_write_latest(ro->out_dir, name)))
        st = qac_rundir_prune(ro->out_dir, ro->keep > 0 ? ro->keep : 2, t->step);
    free(cur);
    return st;
}

qac_status qac_train_run(qac_trainer *t, const qac_batch_source *src, const qac_run_opts *ro, long *resumed_at) {
    if (resumed_at) *resumed_at = 0;
    char name[256], path[4096], log_path[4096];
    qac_status st = qac_mkdirs(ro->out_dir);
    if (st || (st = qac_path_join(log_path, sizeof log_path, ro->out_dir, LOG))) return st;
    int have = qac_rundir_read_latest(ro->out_dir, name, sizeof name) == QAC_OK;
    if (have && !ro->resume)
        return qac_set_error(QAC_ERR_INVALID, "%s already holds a training run (%s); resume it or choose another "
                                              "directory",
                             ro->out_dir, name);
    if (have) {
        void *cur = NULL;
        size_t cl = 0;
        if ((st = qac_path_join(path, sizeof path, ro->out_dir, name)) ||
            (st = qac_trainer_resume(t, path, &cur, &cl)))
            return st;
        st = src->set_cursor(src->user, cur, cl);
        free(cur);
        if (st || (st = qac_rundir_trim_log(log_path, t->step))) return st;
        if (resumed_at) *resumed_at = t->step;
    } else if ((st = qac_rundir_trim_log(log_path, 0))) {
        return st;
    }
    if (ro->on_start && (st = ro->on_start(ro->user, t->step))) return st;
    FILE *log = fopen(log_path, "a");
    if (!log) return qac_set_error(QAC_ERR_IO, "%s: %s", log_path, strerror(errno));
    long total = t->o.total_steps, every = ro->save_every;
    while (t->step < total && !st) {
        const qac_train_batch *b;
        qac_step_stats ss;
        if ((st = src->next(src->user, &b)) || (st = qac_trainer_step(t, b, &ss))) break;
        fprintf(log, "{\"step\":%ld,\"loss\":%.17g,\"lr\":%.17g,\"grad_norm\":%.17g,\"seconds\":%.3f}\n", ss.step,
                ss.loss, ss.lr, ss.grad_norm, ss.seconds);
        if (fflush(log) != 0) st = qac_set_error(QAC_ERR_IO, "%s: %s", log_path, strerror(errno));
        int saving = (every > 0 && t->step % every == 0) || t->step == total;
        /* the hook may read the model (a dev evaluation at checkpoints) */
        if (!st && saving) st = qac_trainer_sync_model(t);
        int stop = ro->on_step ? ro->on_step(ro->user, &ss, total) : 0;
        if (!st && saving) st = save(t, src, ro);
        if (!st && stop) st = qac_set_error(QAC_ERR_CANCELLED, "training stopped by the caller after step %ld", t->step);
    }
    if (fclose(log) != 0 && !st) st = qac_set_error(QAC_ERR_IO, "%s: %s", log_path, strerror(errno));
    return st;
}
