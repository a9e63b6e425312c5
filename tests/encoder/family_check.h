/* The family checkpoints of tests/reference/gen_family_fixtures.py (a
 * model directory NAME and its reference NAME.ref.safetensors per family)
 * and the comparisons that the CPU test (tests/encoder/test_families.c)
 * and the GPU tests (tests/gpu/test_gpu_families.c,
 * tests/gpu/test_gpu_train_families.c) make on them, written once:
 *  - finding the checkpoints (the suite's, or made by the generator) and
 *    running one check per NAME with its reference open;
 *  - the embeddings' distances from the float32 and float64 references;
 *  - the fine-tuning gradients of every trained tensor against autograd.
 * Each test keeps its own bounds' reasoning in its file header; the
 * factors both sides share are here. */
#ifndef QAC_TEST_FAMILY_CHECK_H
#define QAC_TEST_FAMILY_CHECK_H

#include <stddef.h>

#include "qac_model.h"
#include "qac_safetensors.h"
#include "qac_train.h"

/* torch's own float32 distance from float64, times this, bounds qac's (both
 * sides float32 with sums in other orders: each lands about as far from the
 * exact value as the other; 4x is room for the order, a wrong term moves
 * it by orders of magnitude). FAM_EMB_FACTOR for embeddings and the loss,
 * FAM_GRAD_FACTOR for gradients relative to the tensor's largest. */
#define FAM_EMB_FACTOR 4.0
#define FAM_GRAD_FACTOR 4.0

/* The reference of the checkpoint being checked (open during a check). */
extern qac_safetensors *fam_ref;

/* The reference's tensor NAME; a missing one fails the test (exits 1). */
const qac_st_tensor *fam_need(const char *name);
size_t fam_numel(const char *name);
/* A malloc'd copy of tensor NAME: elem 4 gives int32 for I32 tensors and
 * float32 otherwise, elem 8 the float64 values as stored. */
void *fam_read_all(const char *name, size_t elem);

typedef void (*fam_check_fn)(const char *name, qac_model *m);

/* For each of names[0..n): opens DIR/NAME.ref.safetensors as fam_ref, loads
 * the model DIR/NAME without a tokenizer, runs check, frees both. Returns
 * the test's exit status (qac_test_summary(), or 1 when a reference does
 * not open). */
int fam_run(const char *dir, char **names, int n, fam_check_fn check);

/* The main of the GPU tests: argv NAME...; skips (77) without a usable CUDA
 * GPU; the checkpoints are BUILD/family_fixtures (made by the suite's
 * family_fixtures step, beside tests/), else made here into a temporary
 * directory named tmp_name by the generator with $QAC_PYTHON (python3 by
 * default; it needs transformers and sentence-transformers), as on a GPU
 * machine that got the build alone. */
int fam_gpu_main(int argc, char **argv, const char *tmp_name, fam_check_fn check);

/* Embeddings got [n, C] against the reference's float32 e32 and float64 e64. */
typedef struct fam_emb_diff {
    double min_cos; /* the smallest cosine of got against e32 (-1 for a NaN) */
    double d_qac;   /* max |got - e64| (infinite for a NaN) */
    double d_torch; /* max |e32 - e64| */
    double scale;   /* max |e64| */
    int worst;      /* the text of d_qac */
} fam_emb_diff;
fam_emb_diff fam_emb_compare(const float *got, const float *e32, const double *e64, int n, int C);

/* The reference's training batch (q_ids [nq, q_T], q_lens, p_ids
 * [nq n, p_T], p_lens: a pad token inside a passage), read into b;
 * fam_batch_free frees what it read. */
void fam_batch(qac_train_batch *b);
void fam_batch_free(qac_train_batch *b);

/* The fine-tuning options of the reference's gradients: InfoNCE, tau 0.05,
 * cosine, no dropout, one step; the caller sets the device and threads. */
void fam_train_opts(qac_train_opts *o);

/* The loss and the gradient of every trained tensor (the pooler's never
 * is) of the reference's batch (q_ids, q_lens, p_ids, p_lens: a pad token
 * inside a passage) from a trainer made with o, against autograd in float64
 * (loss64, grad64.*): the loss within FAM_EMB_FACTOR times torch's float32
 * distance (loss32) plus 1e-6 relative; each tensor's largest difference,
 * relative to its largest gradient, within FAM_GRAD_FACTOR times torch's
 * (grad32.*) plus 4 sqrt(R) 2^-24 for the batch's R token rows (row-ordered
 * sums of bias and LayerNorm gradients round like sqrt(R) units of float32;
 * 4 deviations). label prefixes the lines and messages ("CUDA "). */
void fam_check_grads(const char *name, qac_model *m, const qac_train_opts *o, const char *label);

#endif
