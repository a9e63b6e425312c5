/* The CUDA trainer on the families it takes beyond BERT (RoBERTa and
 * XLM-RoBERTa: BERT's post-LayerNorm stack with positions offset past the
 * padding index and one token type; ModernBERT: the pre-LayerNorm stack of
 * kernels/prenorm_layers.cu), on the checkpoints of
 * tests/reference/gen_family_fixtures.py.
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
 *  - ModernBERT, besides: GradCache (--chunk 2: each chunk re-forwarded and
 *    back-propagated with its cached gradient) against autograd with the
 *    same bound; --recompute (each layer re-run before its
 *    backward) gives the kept activations' gradients bit for bit (the same
 *    kernels on the same inputs); bf16 within 6.5e-2 of float64 in
 *    ||diff|| / ||ref|| per tensor: bf16 keeps 8 significant bits (u =
 *    2^-9), and between the loss and a gradient lie about 14 rounded stages
 *    per layer (LN1's output, the rotated QKV product, the context, the
 *    projections, LN2's output, the GeGLU product and activation, and the
 *    masked gradients of each, stored in bf16 once) over 4 layers, plus the
 *    pooling and the embeddings: about 62 roundings adding like a random
 *    walk, sqrt(62) u = 1.5e-2, and a factor of 4 for cancellation in the
 *    reductions (test_gpu_train_step's derivation for BERT's 2 layers, 5e-2,
 *    with this count); and a ModernBERT config its kernels do not take (no
 *    GeGLU) is refused naming the CPU path (--device cpu).
 * argv: NAME.... Checkpoints as test_gpu_families finds or makes them.
 * Exits 77 (skipped) without a usable GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "family_check.h"
#include "qac_model.h"
#include "qac_train.h"
#include "testutil.h"

static void opts_of(qac_train_opts *o, qac_precision prec, int recompute) {
    fam_train_opts(o);
    o->device = QAC_DEVICE_CUDA;
    o->gpu_precision = prec;
    o->recompute = recompute;
}

/* ModernBERT without GeGLU: no kernels for that mix, so a refusal naming
 * the CPU path. */
static void check_refusal(const char *name, qac_model *m) {
    qac_train_opts o;
    opts_of(&o, QAC_PREC_FP32, 0);
    const int glu = m->cfg.glu;
    m->cfg.glu = 0;
    qac_trainer *t = NULL;
    qac_status st = qac_trainer_create(&t, m, &o);
    const char *msg = qac_last_error();
    m->cfg.glu = glu;
    printf("%-16s CUDA trainer without GeGLU: %s\n", name, st ? msg : "created");
    CHECK_MSG(st == QAC_ERR_UNSUPPORTED && strstr(msg, "--device cpu"),
              "%s: the CUDA trainer must refuse a ModernBERT without GeGLU naming the CPU path (status %d)", name,
              (int)st);
    qac_trainer_free(t);
}

/* One step's gradients on the reference's batch: a malloc'd copy. */
static float *step_grads(qac_model *m, qac_precision prec, int recompute) {
    qac_train_batch b;
    fam_batch(&b);
    qac_train_opts o;
    opts_of(&o, prec, recompute);
    qac_trainer *t = NULL;
    CHECK_OK(qac_trainer_create(&t, m, &o));
    if (!t) exit(1);
    double loss = 0;
    CHECK_OK(qac_trainer_grads(t, &b, &loss));
    float *g = malloc(m->n_params * sizeof(float));
    if (!g) exit(1);
    memcpy(g, qac_trainer_grad_mem(t), m->n_params * sizeof(float));
    qac_trainer_free(t);
    fam_batch_free(&b);
    return g;
}

/* ModernBERT: --recompute bit for bit, and bf16 against float64. */
static void check_modernbert(const char *name, qac_model *m) {
    float *gk = step_grads(m, QAC_PREC_FP32, 0), *gr = step_grads(m, QAC_PREC_FP32, 1);
    size_t differ = 0;
    for (size_t j = 0; j < m->n_params; j++) differ += memcmp(&gr[j], &gk[j], sizeof(float)) != 0;
    printf("%-16s --recompute: %zu of %zu gradients differ from the kept activations' (must be 0)\n", name, differ,
           m->n_params);
    CHECK_MSG(differ == 0, "%s: --recompute changes %zu gradients", name, differ);
    free(gk), free(gr);
    float *gb = step_grads(m, QAC_PREC_BF16, 0);
    size_t off = 0;
    for (int i = 0; i < QAC_BERT_NUM_TENSORS; i++) {
        size_t n = qac_bert_tensor_size(&m->cfg, i);
        const char *tn = qac_bert_tensor_name(i);
        if (!n) continue;
        char k64[64];
        snprintf(k64, sizeof k64, "grad64.%s", tn);
        double *r64 = fam_read_all(k64, 8), num = 0, den = 0;
        for (size_t j = 0; j < n; j++) {
            double d = gb[off + j] - r64[j];
            num += d * d, den += r64[j] * r64[j];
        }
        double rel = isnan(num) ? INFINITY : den > 0 ? sqrt(num / den) : sqrt(num);
        printf("  bf16 grad %-10s ||diff|| / ||ref|| %.2e (bound 6.5e-2)\n", tn, rel);
        CHECK_MSG(rel <= 6.5e-2, "%s: bf16 gradient of %s off by %.3e", name, tn, rel);
        off += n;
        free(r64);
    }
    free(gb);
}

static void check_family(const char *name, qac_model *m) {
    qac_train_opts o;
    opts_of(&o, QAC_PREC_FP32, 0);
    fam_check_grads(name, m, &o, "CUDA ");
    if (m->cfg.family == QAC_FAMILY_MODERNBERT) {
        o.chunk = 2;
        fam_check_grads(name, m, &o, "CUDA --chunk 2 ");
        check_modernbert(name, m);
        check_refusal(name, m);
    }
}

int main(int argc, char **argv) { return fam_gpu_main(argc, argv, "train-families", check_family); }
