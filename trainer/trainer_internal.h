/* Internal to trainer/: the trainer's state, shared by the step and the
 * training-state file. */
#ifndef QAC_TRAINER_INTERNAL_H
#define QAC_TRAINER_INTERNAL_H

#include "bert_cpu.h"
#include "qac_cuda_train.h"
#include "qac_train.h"
#include "qac_util.h"

#define QAC_MAX_LAYERS 64

struct qac_trainer {
    qac_model *m;
    qac_train_opts o;
    qac_pool *pool;
    float *grad_mem, *adam_m, *adam_v; /* each n_params floats, parameter layout */
    qac_bert_params g;                 /* views into grad_mem */
    qac_bert_packed pk;
    qac_bert_acts acts_q, acts_p;
    qac_bert_bwd bwd;
    qac_dropout drop;
    float *reps, *dlast;
    size_t reps_cap, dlast_cap, seq_cap;
    uint64_t *seq_ids;
    long step;
    qac_cuda_trainer *gpu;  /* the CUDA backend, or NULL on the CPU */
    int grads_stale;        /* grad_mem lags the device's gradients */
    const void *save_cursor; /* the data cursor of the checkpoint being written */
    size_t save_cursor_len;
};

/* ---- checkpoint directories and state files (ckptfile.c) ----
 * DIR = an HF directory + QAC_STATE_FILE, written as DIR.tmp and renamed
 * over DIR; the state file ends with the XXH64 of every byte before it. */
#define QAC_STATE_FILE "training_state.qts"
#define QAC_STATE_MAGIC_FT "QACTRST" /* the fine-tuning trainer's (state.c) */
#define QAC_STATE_MAGIC_PT "QACPTST" /* the pre-trainer's (pretrain_state.c) */
#define QAC_STATE_MAGIC_XE "QACXEST" /* the cross-encoder trainer's (xenc_state.c) */

typedef struct qac_state_writer {
    qac_atomic_file af;
    qac_xxh64 h;
    int err;
    const char *path;
} qac_state_writer;
qac_status qac_state_writer_open(qac_state_writer *w, const char *path);
void qac_state_put(qac_state_writer *w, const void *p, size_t n);
/* append the checksum and commit (or abort after a failed write) */
qac_status qac_state_writer_close(qac_state_writer *w);
/* test-only: QAC_TEST_KILL_IN_SAVE=N kills the process half-way through
 * writing the state of step N (the resume tests use it) */
void qac_state_test_kill(long step);

/* rm -rf dir (absent is fine) */
qac_status qac_trainer_remove_dir(const char *dir);
/* write m and, through write_state(user, path), the state file into
 * DIR.tmp, then swap it in over DIR */
typedef qac_status (*qac_state_write_fn)(void *user, const char *path);
qac_status qac_ckpt_save(const qac_model *m, const char *dir, qac_state_write_fn write_state, void *user);
/* the same for a model that save(model, dir) writes (a cross-encoder) */
typedef qac_status (*qac_model_write_fn)(const void *model, const char *dir);
qac_status qac_ckpt_save_with(qac_model_write_fn save, const void *model, const char *dir,
                              qac_state_write_fn write_state, void *user);
/* The encoder as an HF checkpoint in dir, beside what dir holds (a run's
 * checkpoints and log), all or nothing for loaders: written into
 * dir/QAC_EXPORT_TMP, dir/config.json removed, every other file renamed into
 * dir, config.json renamed last. A crash leaves dir without config.json
 * (no loader takes it for a model) or with the complete new export;
 * running the export again completes it. */
#define QAC_EXPORT_TMP "export.tmp"
qac_status qac_ckpt_export(const qac_model *m, const char *dir);
qac_status qac_ckpt_export_with(qac_model_write_fn save, const void *model, const char *dir);
/* DIR, or the DIR.old a crash between the renames left (copied to use):
 * its state file read into *data (malloc'd), at least 8 + min_len + 8
 * bytes, with the given magic and a matching checksum */
qac_status qac_ckpt_read_state(const char *dir, const char *magic, size_t min_len, char *use, size_t use_cap,
                               char **data, size_t *len);
/* the checkpoint's weights into `into` (same config required) */
qac_status qac_ckpt_load_weights(qac_model *into, const char *use);

/* ---- the run directory (loop.c): shared by qac_train_run and the pre-training run ---- */
qac_status qac_rundir_read_latest(const char *out, char *name, size_t cap);
qac_status qac_rundir_write_latest(const char *out, const char *name);
/* keep only log lines of steps <= step */
qac_status qac_rundir_trim_log(const char *path, long step);
/* remove checkpoint-N directories other than the newest `keep` (N <= newest) */
qac_status qac_rundir_prune(const char *out, int keep, long newest);

#endif
