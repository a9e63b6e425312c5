/* qac's CUDA trainer on a random BERT-base-shaped model (12 x 768, 12
 * heads, 3072, vocabulary 30522): fine-tuning steps of Q queries x N
 * passages at q_len / p_len tokens (every sequence full, as in the
 * reference), InfoNCE on the [CLS] vectors (dot, tau 1), dropout 0.1,
 * clip 1.0, AdamW. Prints "RESULT key value" lines for run.sh:
 * tokens/s, step time, achieved TFLOP/s and MFU against peak_tflops.
 *   bench_train_gpu [bf16|fp32] [queries] [passages] [q_len] [p_len] [steps] [peak_tflops]
 * FLOPs per step, as for the reference: 6 x (matrix parameters) x tokens
 * + 12 x L x C x T^2 per sequence (attention scores and context, forward
 * and backward); the embeddings' gather and the loss are not counted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qac_train.h"
#include "qac_util.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void fill(int32_t *ids, int *lens, int B, int T) {
    for (int b = 0; b < B; b++) {
        int32_t *s = ids + (size_t)b * T;
        s[0] = 101;
        for (int t = 1; t < T - 1; t++) s[t] = 1000 + (int32_t)(next() % 29000);
        s[T - 1] = 102;
        lens[b] = T;
    }
}

int main(int argc, char **argv) {
    const char *precs = argc > 1 ? argv[1] : "bf16";
    const int nq = argc > 2 ? atoi(argv[2]) : 64, n = argc > 3 ? atoi(argv[3]) : 8;
    const int qT = argc > 4 ? atoi(argv[4]) : 32, pT = argc > 5 ? atoi(argv[5]) : 128;
    const int steps = argc > 6 ? atoi(argv[6]) : 20;
    const double peak = argc > 7 ? atof(argv[7]) : 989.0; /* H100 SXM dense bf16 TFLOP/s */
    if (!qac_cuda_available()) {
        fprintf(stderr, "bench_train_gpu: no usable CUDA GPU\n");
        return 77;
    }
    const qac_bert_config cfg = {.vocab_size = 30522, .hidden_size = 768, .num_layers = 12, .num_heads = 12,
                                 .intermediate_size = 3072, .max_position = 512, .type_vocab_size = 2,
                                 .pad_token_id = 0, .layer_norm_eps = 1e-12f, .hidden_dropout = 0.1f,
                                 .attn_dropout = 0.1f};
    qac_model *m = NULL;
    if (qac_model_create(&m, &cfg, NULL)) {
        fprintf(stderr, "model: %s\n", qac_last_error());
        return 1;
    }
    for (size_t i = 0; i < m->n_params; i++) m->param_mem[i] = ((float)(next() >> 40) / 16777216.0f - 0.5f) * 0.04f;
    m->pooling = QAC_POOL_CLS;
    m->normalize = 0;
    qac_train_opts o;
    qac_train_opts_default(&o);
    o.device = QAC_DEVICE_CUDA;
    o.gpu_precision = strcmp(precs, "fp32") == 0 ? QAC_PREC_FP32 : QAC_PREC_BF16;
    o.total_steps = steps + 3;
    o.warmup_steps = 0;
    o.lr = 1e-5;
    qac_trainer *t = NULL;
    if (qac_trainer_create(&t, m, &o)) {
        fprintf(stderr, "trainer: %s\n", qac_last_error());
        return 1;
    }
    const int np = nq * n;
    int32_t *q_ids = malloc(sizeof(int32_t) * nq * qT), *p_ids = malloc(sizeof(int32_t) * (size_t)np * pT);
    int *q_lens = malloc(sizeof(int) * nq), *p_lens = malloc(sizeof(int) * np);
    fill(q_ids, q_lens, nq, qT);
    fill(p_ids, p_lens, np, pT);
    qac_train_batch b = {nq, n, qT, pT, q_ids, q_lens, p_ids, p_lens};
    qac_step_stats st;
    for (int i = 0; i < 3; i++) /* warm-up: allocations, cuBLAS heuristics */
        if (qac_trainer_step(t, &b, &st)) {
            fprintf(stderr, "step: %s\n", qac_last_error());
            return 1;
        }
    const double first_loss = st.loss, t0 = qac_now();
    for (int i = 0; i < steps; i++)
        if (qac_trainer_step(t, &b, &st)) {
            fprintf(stderr, "step: %s\n", qac_last_error());
            return 1;
        }
    const double sec = (qac_now() - t0) / steps;
    const double C = 768, I = 3072, L = 12, tokens = (double)nq * qT + (double)np * pT;
    const double flop = 6.0 * L * (4 * C * C + 2 * C * I) * tokens +
                        12.0 * L * C * ((double)nq * qT * qT + (double)np * pT * pT);
    printf("RESULT qac_%s_step_ms %.2f\n", precs, sec * 1e3);
    printf("RESULT qac_%s_tokens_per_s %.0f\n", precs, tokens / sec);
    printf("RESULT qac_%s_tflops %.1f\n", precs, flop / sec / 1e12);
    printf("RESULT qac_%s_mfu %.3f\n", precs, flop / sec / 1e12 / peak);
    printf("NOTE qac loss %.4f -> %.4f over %d steps\n", first_loss, st.loss, steps);
    qac_trainer_free(t);
    qac_model_free(m);
    free(q_ids), free(p_ids), free(q_lens), free(p_lens);
    return 0;
}
