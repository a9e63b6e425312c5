/* The CUDA trainer on the families it takes beyond BERT (RoBERTa and
 * XLM-RoBERTa: BERT's post-LayerNorm stack with positions offset past the
 * padding index and one token type), and its refusal of ModernBERT, on the
 * checkpoints of tests/reference/gen_family_fixtures.py.
 *
 *  - fine-tuning gradients (InfoNCE, tau 0.05, cosine, fp32, no dropout) of
 *    every trained tensor against autograd in float64, with
 *    tests/encoder/test_families.c's bound (fam_check_grads in
 *    tests/encoder/family_check.h: 4 times torch's own float32
 *    distance from float64, relative to the tensor's largest gradient, plus
 *    4 sqrt(R) 2^-24 for the batch's R token rows): both sides are float32
 *    with sums in other orders. The batch holds a pad token inside a
 *    passage, so the word row of the padding id and the position row
 *    padding_idx, which torch leaves without a gradient, are compared too;
 *  - ModernBERT: qac_trainer_create on CUDA answers QAC_ERR_UNSUPPORTED
 *    naming the CPU path (--device cpu).
 * argv: NAME... (a ModernBERT name checks the refusal). Checkpoints as
 * test_gpu_families finds or makes them. Exits 77 (skipped) without a
 * usable GPU. */
#include <stdio.h>
#include <string.h>

#include "family_check.h"
#include "qac_model.h"
#include "qac_train.h"
#include "testutil.h"

static void opts_of(qac_train_opts *o) {
    fam_train_opts(o);
    o->device = QAC_DEVICE_CUDA;
    o->gpu_precision = QAC_PREC_FP32;
}

static void check_refusal(const char *name, qac_model *m) {
    qac_train_opts o;
    opts_of(&o);
    qac_trainer *t = NULL;
    qac_status st = qac_trainer_create(&t, m, &o);
    const char *msg = qac_last_error();
    printf("%-16s CUDA trainer: %s\n", name, st ? msg : "created");
    CHECK_MSG(st == QAC_ERR_UNSUPPORTED && strstr(msg, "--device cpu"),
              "%s: the CUDA trainer must refuse ModernBERT naming the CPU path (status %d)", name, (int)st);
    qac_trainer_free(t);
}

static void check_family(const char *name, qac_model *m) {
    qac_train_opts o;
    opts_of(&o);
    if (m->cfg.family == QAC_FAMILY_MODERNBERT)
        check_refusal(name, m);
    else
        fam_check_grads(name, m, &o, "CUDA ");
}

int main(int argc, char **argv) { return fam_gpu_main(argc, argv, "train-families", check_family); }
