/* Internal to trainer/: the trainer's state, shared by the step and the
 * training-state file. */
#ifndef QAC_TRAINER_INTERNAL_H
#define QAC_TRAINER_INTERNAL_H

#include "bert_cpu.h"
#include "qac_cuda_train.h"
#include "qac_train.h"

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
};

/* rm -rf dir (absent is fine) */
qac_status qac_trainer_remove_dir(const char *dir);

/* ---- the run directory (loop.c): shared by qac_train_run and the pre-training run ---- */
qac_status qac_rundir_read_latest(const char *out, char *name, size_t cap);
qac_status qac_rundir_write_latest(const char *out, const char *name);
/* keep only log lines of steps <= step */
qac_status qac_rundir_trim_log(const char *path, long step);
/* remove checkpoint-N directories other than the newest `keep` (N <= newest) */
qac_status qac_rundir_prune(const char *out, int keep, long newest);

#endif
