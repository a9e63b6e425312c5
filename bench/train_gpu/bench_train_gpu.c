/* qac's CUDA trainer on a BERT-base-shaped model (12 x 768, 12 heads, 3072,
 * vocabulary 30522): fine-tuning steps of Q queries x N passages at q_len /
 * p_len tokens (every sequence full, as in the reference), InfoNCE on the
 * [CLS] vectors (dot, tau 1), dropout 0.1, clip 1.0, AdamW. Prints "RESULT
 * key value" lines for run.sh: tokens/s, step time, achieved TFLOP/s and MFU
 * against peak_tflops, and the loss of every timed step.
 *   bench_train_gpu [bf16|fp32] [queries] [passages] [q_len] [p_len] [steps] [peak_tflops] [init_dir]
 * init_dir (written by reference.py --init): the model both sides start
 * from (an HF directory: BertModel's own initialisation, seed 0) and the
 * batch's ids (batch.i32: queries then passages, int32), so qac and torch
 * train the same model on the same tokens. Without it, the model gets
 * BertModel's initialisation scheme here (weights N(0, 0.02), LayerNorm 1
 * and 0, biases 0, the padding row 0) and random ids.
 * FLOPs per step, as for the reference: 6 x (matrix parameters) x tokens
 * + 12 x L x C x T^2 per sequence (attention scores and context, forward
 * and backward); the embeddings' gather and the loss are not counted. */
#include <math.h>
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
static double uniform(void) { return ((double)(next() >> 11) + 0.5) / 9007199254740992.0; }

static void fill(int32_t *ids, int *lens, int B, int T) {
    for (int b = 0; b < B; b++) {
        int32_t *s = ids + (size_t)b * T;
        s[0] = 101;
        for (int t = 1; t < T - 1; t++) s[t] = 1000 + (int32_t)(next() % 29000);
        s[T - 1] = 102;
        lens[b] = T;
    }
}

/* BertPreTrainedModel._init_weights: Linear and Embedding weights N(0,
 * 0.02), biases 0, LayerNorm weight 1 and bias 0, the padding_idx row 0. */
static void bert_init(qac_model *m) {
    const qac_bert_config *c = &m->cfg;
    float *p = m->param_mem;
    for (int i = 0; i < QAC_BERT_NUM_TENSORS; i++) {
        const char *name = qac_bert_tensor_name(i);
        const size_t n = qac_bert_tensor_size(c, i);
        const size_t len = strlen(name);
        const int is_ln_w = strstr(name, "ln") && len > 2 && !strcmp(name + len - 2, "_w");
        const int is_bias = len > 2 && !strcmp(name + len - 2, "_b");
        for (size_t j = 0; j < n; j++) {
            if (is_ln_w) p[j] = 1.0f;
            else if (is_bias) p[j] = 0.0f;
            else p[j] = (float)(0.02 * sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform()));
        }
        p += n;
    }
    memset(m->p.word_emb + (size_t)c->pad_token_id * c->hidden_size, 0, sizeof(float) * c->hidden_size);
}

static int read_ids(const char *path, int32_t *q, size_t nq, int32_t *p, size_t np) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    const int ok = fread(q, sizeof(int32_t), nq, f) == nq && fread(p, sizeof(int32_t), np, f) == np &&
                   fgetc(f) == EOF;
    fclose(f);
    return ok ? 0 : -1;
}

int main(int argc, char **argv) {
    const char *precs = argc > 1 ? argv[1] : "bf16";
    const int nq = argc > 2 ? atoi(argv[2]) : 64, n = argc > 3 ? atoi(argv[3]) : 8;
    const int qT = argc > 4 ? atoi(argv[4]) : 32, pT = argc > 5 ? atoi(argv[5]) : 128;
    const int steps = argc > 6 ? atoi(argv[6]) : 20;
    const double peak = argc > 7 ? atof(argv[7]) : 989.0; /* H100 SXM dense bf16 TFLOP/s */
    const char *init = argc > 8 ? argv[8] : NULL;
    if (!qac_cuda_available()) {
        fprintf(stderr, "bench_train_gpu: no usable CUDA GPU\n");
        return 77;
    }
    qac_model *m = NULL;
    if (init) {
        if (qac_model_load(&m, init)) {
            fprintf(stderr, "model: %s\n", qac_last_error());
            return 1;
        }
    } else {
        const qac_bert_config cfg = {.vocab_size = 30522, .hidden_size = 768, .num_layers = 12, .num_heads = 12,
                                     .intermediate_size = 3072, .max_position = 512, .type_vocab_size = 2,
                                     .pad_token_id = 0, .layer_norm_eps = 1e-12f, .hidden_dropout = 0.1f,
                                     .attn_dropout = 0.1f};
        if (qac_model_create(&m, &cfg, NULL)) {
            fprintf(stderr, "model: %s\n", qac_last_error());
            return 1;
        }
        bert_init(m);
    }
    m->pooling = QAC_POOL_CLS;
    m->normalize = 0;
    qac_train_opts o;
    qac_train_opts_default(&o);
    o.device = QAC_DEVICE_CUDA;
    o.gpu_precision = strcmp(precs, "fp32") == 0 ? QAC_PREC_FP32 : QAC_PREC_BF16;
    o.total_steps = steps + 3;
    o.warmup_steps = 0;
    o.lr = 1e-5;
    o.weight_decay = 0.01;
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
    if (init) {
        char path[4096];
        snprintf(path, sizeof path, "%s/batch.i32", init);
        if (read_ids(path, q_ids, (size_t)nq * qT, p_ids, (size_t)np * pT)) {
            fprintf(stderr, "bench_train_gpu: %s does not hold %d x %d + %d x %d ids\n", path, nq, qT, np, pT);
            return 1;
        }
    }
    qac_train_batch b = {nq, n, qT, pT, q_ids, q_lens, p_ids, p_lens};
    qac_step_stats st;
    double first_loss = 0;
    for (int i = 0; i < 3; i++) { /* warm-up: allocations, cuBLAS heuristics */
        if (qac_trainer_step(t, &b, &st)) {
            fprintf(stderr, "step: %s\n", qac_last_error());
            return 1;
        }
        if (i == 0) first_loss = st.loss;
    }
    double *loss = malloc(sizeof(double) * steps);
    const double t0 = qac_now();
    for (int i = 0; i < steps; i++) {
        if (qac_trainer_step(t, &b, &st)) {
            fprintf(stderr, "step: %s\n", qac_last_error());
            return 1;
        }
        loss[i] = st.loss;
    }
    const double sec = (qac_now() - t0) / steps;
    const double C = 768, I = 3072, L = 12, tokens = (double)nq * qT + (double)np * pT;
    const double flop = 6.0 * L * (4 * C * C + 2 * C * I) * tokens +
                        12.0 * L * C * ((double)nq * qT * qT + (double)np * pT * pT);
    printf("RESULT qac_%s_step_ms %.2f\n", precs, sec * 1e3);
    printf("RESULT qac_%s_tokens_per_s %.0f\n", precs, tokens / sec);
    printf("RESULT qac_%s_tflops %.1f\n", precs, flop / sec / 1e12);
    printf("RESULT qac_%s_mfu %.3f\n", precs, flop / sec / 1e12 / peak);
    printf("RESULT qac_loss_first %.4f\n", first_loss);
    printf("RESULT qac_loss_last %.4f\n", loss[steps - 1]);
    printf("LOSSES qac");
    for (int i = 0; i < steps; i++) printf(" %.4f", loss[i]);
    printf("\nNOTE qac loss %.4f -> %.4f over %d steps (%s)\n", first_loss, loss[steps - 1], steps + 3,
           init ? init : "BERT initialisation, random ids");
    free(loss);
    qac_trainer_free(t);
    qac_model_free(m);
    free(q_ids), free(p_ids), free(q_lens), free(p_lens);
    return 0;
}
