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
#include <unistd.h>

#include "qac_encoder.h"
#include "qac_model.h"
#include "qac_safetensors.h"
#include "testutil.h"

static qac_safetensors *ref;

static const qac_st_tensor *need(const char *name) {
    const qac_st_tensor *t = qac_safetensors_find(ref, name);
    if (!t) {
        fprintf(stderr, "FAIL: the fixture has no tensor %s\n", name);
        exit(1);
    }
    return t;
}

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

static void check_family(const char *name, const qac_model *m) {
    const qac_st_tensor *tl = need("lens"), *ti = need("ids");
    int n = (int)tl->numel, C = m->cfg.hidden_size;
    const int *lens = (const int *)tl->data;
    const int32_t **ptr = malloc((size_t)n * sizeof *ptr);
    size_t off = 0;
    for (int i = 0; i < n; i++) ptr[i] = (const int32_t *)ti->data + off, off += (size_t)lens[i];
    float *e32 = malloc((size_t)n * C * sizeof *e32), *got = malloc((size_t)n * C * sizeof *got);
    float *one = malloc((size_t)n * C * sizeof *one);
    CHECK_OK(qac_safetensors_read_f32(need("emb32"), e32));
    const double *e64 = (const double *)need("emb64")->data;
    for (int pass = 0; pass < 2; pass++) {
        qac_precision prec = pass ? QAC_PREC_BF16 : QAC_PREC_FP32;
        encode(m, prec, 64, ptr, lens, n, got);
        double mincos = 1, dq = 0, dt = 0, scale = 0;
        for (int i = 0; i < n; i++) {
            double dot = 0, ng = 0, nr = 0;
            for (int k = 0; k < C; k++) {
                size_t j = (size_t)i * C + k;
                double a = fabs(got[j] - e64[j]), b = fabs(e32[j] - e64[j]);
                if (!(a <= dq)) dq = isnan(a) ? INFINITY : a;
                dt = b > dt ? b : dt;
                scale = fabs(e64[j]) > scale ? fabs(e64[j]) : scale;
                dot += got[j] * (double)e32[j];
                ng += (double)got[j] * got[j];
                nr += (double)e32[j] * e32[j];
            }
            double cs = dot / (sqrt(ng * nr) + 1e-300);
            if (!(cs >= mincos)) mincos = isnan(cs) ? -1 : cs;
        }
        double cos_min = pass ? 0.999 : 0.99999, bound = 4 * dt + 0x1p-20 * scale;
        printf("%-16s CUDA %s: min cosine %.9f, max|gpu-f64| %.2e (torch32 %.2e)\n", name, pass ? "bf16" : "fp32",
               mincos, dq, dt);
        CHECK_MSG(mincos >= cos_min, "%s %s: cosine %.9f < %g", name, pass ? "bf16" : "fp32", mincos, cos_min);
        if (!pass) CHECK_MSG(dq <= bound, "%s fp32: %.3e from float64 (bound %.3e)", name, dq, bound);
        /* one text per batch */
        encode(m, prec, 1, ptr, lens, n, one);
        double worst = 1;
        for (int i = 0; i < n; i++) {
            double dot = 0, na = 0, nb = 0;
            for (int k = 0; k < C; k++) {
                size_t j = (size_t)i * C + k;
                dot += (double)one[j] * e32[j], na += (double)one[j] * one[j], nb += (double)e32[j] * e32[j];
            }
            double cs = dot / (sqrt(na * nb) + 1e-300);
            if (!(cs >= worst)) worst = isnan(cs) ? -1 : cs;
        }
        CHECK_MSG(worst >= cos_min, "%s %s, batches of one: cosine %.9f < %g", name, pass ? "bf16" : "fp32", worst,
                  cos_min);
    }
    free(ptr), free(e32), free(got), free(one);
}

/* The fixture directory: BUILD/family_fixtures, or made into a fresh one. */
static const char *fixtures(void) {
    static char dir[4200];
    char exe[4000], path[4300];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return NULL;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return NULL;
    *slash = '\0'; /* BUILD/tests/gpu */
    snprintf(dir, sizeof dir, "%s/../../family_fixtures", exe);
    snprintf(path, sizeof path, "%s/texts.txt", dir);
    if (access(path, R_OK) == 0) return dir;
    snprintf(dir, sizeof dir, "%s", qac_test_tmpdir("families"));
    const char *py = getenv("QAC_PYTHON");
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "'%s' '%s/../../../tests/reference/gen_family_fixtures.py' --out '%s' >/dev/null",
             py && *py ? py : "python3", exe, dir);
    printf("making the checkpoints: %s\n", cmd);
    return system(cmd) == 0 ? dir : NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s NAME...\n", argv[0]);
        return 2;
    }
    if (!qac_cuda_available()) qac_test_skip("no usable CUDA GPU");
    const char *fx = fixtures();
    if (!fx) {
        fprintf(stderr, "FAIL: no family checkpoints, and the generator failed (QAC_PYTHON needs transformers and "
                        "sentence-transformers)\n");
        return 1;
    }
    for (int i = 1; i < argc; i++) {
        char dir[4500], path[4600];
        snprintf(dir, sizeof dir, "%s/%s", fx, argv[i]);
        snprintf(path, sizeof path, "%s/%s.ref.safetensors", fx, argv[i]);
        if (qac_safetensors_open(&ref, path) != QAC_OK) {
            fprintf(stderr, "FAIL: %s\n", qac_last_error());
            return 1;
        }
        qac_model *m = NULL;
        CHECK_OK(qac_model_load_untokenized(&m, dir));
        if (!m) return qac_test_summary();
        check_family(argv[i], m);
        qac_model_free(m);
        qac_safetensors_close(ref);
    }
    return qac_test_summary();
}
