/* The CUDA encoder on the encoder families beyond BERT (RoBERTa, XLM-R,
 * ModernBERT with its rotary positions, GeGLU, pre-LayerNorm without biases
 * and local windows) against sentence-transformers, on the checkpoints of
 * tests/reference/gen_family_fixtures.py.
 *
 *  - fp32 (cuBLAS without TF32, the unfused attention): cosine >= 0.99999
 *    against sentence-transformers' float32 embeddings for every text, and
 *    the distance from its float64 forward within 4x torch's own float32
 *    distance plus 2^-20 of the largest value, the CPU encoder's bound
 *    (tests/encoder/test_families.c): both are float32 with sums in other
 *    orders;
 *  - bf16 (the fused attention, packed batches and CUDA graphs for query
 *    batches): cosine >= 0.999 against the float32 embeddings. bf16 keeps 8
 *    bits: each of the about 10 roundings a layer's activations take moves
 *    a vector by up to 2^-9 relative, so a few layers leave 1 - cos about
 *    (10 * 2^-9)^2 / 2 = 2e-4 at worst; and in batches of one (other
 *    layouts, other products' shapes) within the same bound.
 * argv: NAME... The checkpoints: the suite's (family_fixtures in the build
 * directory, beside tests/), else made here by the generator with
 * $QAC_PYTHON (python3 by default; it needs transformers and
 * sentence-transformers), as on a GPU machine that got the build alone.
 * Exits 77 (skipped) without a usable GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "family_check.h"
#include "qac_encoder.h"
#include "qac_model.h"
#include "testutil.h"

static void encode(const qac_model *m, qac_precision prec, int max_batch, const int32_t *const *ids, const int *lens,
                   int n, float *out) {
    qac_encoder_opts o = qac_encoder_default_opts();
    o.device = QAC_DEVICE_CUDA;
    o.precision = prec;
    o.max_batch = max_batch;
    qac_encoder *e = NULL;
    CHECK_OK(qac_encoder_create(&e, m, &o));
    if (!e) exit(1);
    CHECK_OK(qac_encoder_encode_ids(e, ids, lens, n, out));
    qac_encoder_free(e);
}

static void check_family(const char *name, qac_model *m) {
    const qac_st_tensor *tl = fam_need("lens"), *ti = fam_need("ids");
    int n = (int)tl->numel, C = m->cfg.hidden_size;
    const int *lens = (const int *)tl->data;
    const int32_t **ptr = malloc((size_t)n * sizeof *ptr);
    size_t off = 0;
    for (int i = 0; i < n; i++) ptr[i] = (const int32_t *)ti->data + off, off += (size_t)lens[i];
    float *e32 = malloc((size_t)n * C * sizeof *e32), *got = malloc((size_t)n * C * sizeof *got);
    float *one = malloc((size_t)n * C * sizeof *one);
    CHECK_OK(qac_safetensors_read_f32(fam_need("emb32"), e32));
    const double *e64 = (const double *)fam_need("emb64")->data;
    for (int pass = 0; pass < 2; pass++) {
        qac_precision prec = pass ? QAC_PREC_BF16 : QAC_PREC_FP32;
        encode(m, prec, 64, ptr, lens, n, got);
        fam_emb_diff d = fam_emb_compare(got, e32, e64, n, C);
        double mincos = d.min_cos, dq = d.d_qac, dt = d.d_torch, scale = d.scale;
        double cos_min = pass ? 0.999 : 0.99999, bound = FAM_EMB_FACTOR * dt + 0x1p-20 * scale;
        printf("%-16s CUDA %s: min cosine %.9f, max|gpu-f64| %.2e (torch32 %.2e)\n", name, pass ? "bf16" : "fp32",
               mincos, dq, dt);
        CHECK_MSG(mincos >= cos_min, "%s %s: cosine %.9f < %g", name, pass ? "bf16" : "fp32", mincos, cos_min);
        if (!pass) CHECK_MSG(dq <= bound, "%s fp32: %.3e from float64 (bound %.3e)", name, dq, bound);
        /* one text per batch */
        encode(m, prec, 1, ptr, lens, n, one);
        double worst = fam_emb_compare(one, e32, e64, n, C).min_cos;
        CHECK_MSG(worst >= cos_min, "%s %s, batches of one: cosine %.9f < %g", name, pass ? "bf16" : "fp32", worst,
                  cos_min);
    }
    free(ptr), free(e32), free(got), free(one);
}

int main(int argc, char **argv) { return fam_gpu_main(argc, argv, "families", check_family); }
