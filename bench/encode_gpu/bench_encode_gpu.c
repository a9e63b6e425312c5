/* qac's CUDA encoder: passages/s, MFU, the projected time for MS MARCO
 * (8,841,823 passages), and query latency at 32 tokens, batches of 1 and 16.
 *   bench_encode_gpu [bf16|fp16] [passages] [batch] [peak_tflops] [model] [lengths] [tag]
 * model: "bert-base" (a random BERT-base-shaped model: 12 x 768, 12 heads,
 * 3072, CLS pooling; the default) or a model directory (the default model,
 * MiniLM, at $QAC_MODEL). lengths: a number (every passage that many
 * tokens, default 128) or a file of "length count" lines (lengths.txt: the
 * realistic distribution), expanded and taken at evenly spaced places (all
 * of it when passages equals its 16,384). tag: appended to the RESULT keys (empty: the
 * classic BERT-base 128-token figures, with the query latency of one query
 * and of a batch of 16). Token ids
 * are random in [1000, 30000) between [CLS] and [SEP]; reference.py feeds
 * PyTorch the same lengths. Prints one "RESULT key value" line per number. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qac_cuda_attention.h"
#include "qac_encoder.h"
#include "qac_util.h"

#define MSMARCO_PASSAGES 8841823.0

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* lens[0, n) from a number or a "length count" file; 0 on failure */
static int load_lengths(const char *spec, int *lens, int n, int max_len) {
    char *end;
    long fixed = strtol(spec, &end, 10);
    if (*spec && !*end) {
        for (int i = 0; i < n; i++) lens[i] = (int)fixed;
        return fixed >= 2 && fixed <= max_len;
    }
    FILE *f = fopen(spec, "r");
    if (!f) return 0;
    int *all = NULL, total = 0, cap = 0, len, count;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || sscanf(line, "%d %d", &len, &count) != 2) continue;
        if (len < 2 || len > max_len || count < 0) {
            fclose(f);
            free(all);
            return 0;
        }
        for (int c = 0; c < count; c++) {
            if (total == cap) all = realloc(all, sizeof(int) * (size_t)(cap = cap ? 2 * cap : 4096));
            all[total++] = len;
        }
    }
    fclose(f);
    for (int i = 0; i < n && total; i++) lens[i] = all[(int64_t)i * total / n]; /* evenly over the distribution */
    free(all);
    return total > 0;
}

int main(int argc, char **argv) {
    const char *precs = argc > 1 ? argv[1] : "bf16";
    const int n = argc > 2 ? atoi(argv[2]) : 16384;
    const int batch = argc > 3 ? atoi(argv[3]) : 256;
    const double peak = argc > 4 ? atof(argv[4]) : 989.0; /* H100 SXM dense bf16/fp16 TFLOP/s */
    const char *model_spec = argc > 5 ? argv[5] : "bert-base";
    const char *len_spec = argc > 6 ? argv[6] : "128";
    const char *tag = argc > 7 ? argv[7] : "";
    if (!qac_cuda_available()) {
        fprintf(stderr, "bench_encode_gpu: no usable CUDA GPU\n");
        return 77;
    }
    qac_model *m = NULL;
    if (!strcmp(model_spec, "bert-base")) {
        const qac_bert_config cfg = {.vocab_size = 30522, .hidden_size = 768, .num_layers = 12, .num_heads = 12,
                                     .intermediate_size = 3072, .max_position = 512, .type_vocab_size = 2,
                                     .pad_token_id = 0, .layer_norm_eps = 1e-12f, .hidden_dropout = 0.1f,
                                     .attn_dropout = 0.1f};
        if (qac_model_create(&m, &cfg, NULL)) {
            fprintf(stderr, "model: %s\n", qac_last_error());
            return 1;
        }
        for (size_t i = 0; i < m->n_params; i++) m->param_mem[i] = ((float)(next() >> 40) / 16777216.0f - 0.5f) * 0.1f;
        m->pooling = QAC_POOL_CLS;
        m->normalize = 0;
    } else if (qac_model_load(&m, model_spec)) {
        fprintf(stderr, "model %s: %s\n", model_spec, qac_last_error());
        return 1;
    }
    const qac_bert_config cfg = m->cfg;
    qac_encoder_opts o = qac_encoder_default_opts();
    o.device = QAC_DEVICE_CUDA;
    o.precision = strcmp(precs, "fp16") == 0 ? QAC_PREC_FP16 : QAC_PREC_BF16;
    o.max_batch = batch;
    qac_encoder *e = NULL;
    if (qac_encoder_create(&e, m, &o)) {
        fprintf(stderr, "encoder: %s\n", qac_last_error());
        return 1;
    }
    int *lens = malloc(sizeof(int) * n);
    if (!load_lengths(len_spec, lens, n, cfg.max_position)) {
        fprintf(stderr, "bench_encode_gpu: bad lengths %s\n", len_spec);
        return 2;
    }
    int tmax = 0;
    double tokens = 0, flop = 0;
    const double C = cfg.hidden_size, I = cfg.intermediate_size, L = cfg.num_layers;
    for (int i = 0; i < n; i++) {
        if (lens[i] > tmax) tmax = lens[i];
        const double T = lens[i];
        tokens += T;
        /* matrix products: 2 T L (4 C^2 + 2 C I) + attention 4 T^2 C per layer */
        flop += 2.0 * T * L * (4 * C * C + 2 * C * I) + L * 4.0 * T * T * C;
    }
    int32_t *buf = malloc(sizeof(int32_t) * (size_t)n * tmax);
    const int32_t **ids = malloc(sizeof(int32_t *) * n);
    float *out = malloc(sizeof(float) * (size_t)n * cfg.hidden_size);
    for (int i = 0; i < n; i++) {
        int32_t *s = buf + (size_t)i * tmax;
        s[0] = 101;
        for (int t = 1; t < lens[i] - 1; t++) s[t] = 1000 + (int32_t)(next() % 29000);
        s[lens[i] - 1] = 102;
        ids[i] = s;
    }
    /* warm-up: cuBLAS heuristics, buffers at full size (the longest first) */
    if (qac_encoder_encode_ids(e, ids, lens, n < batch ? n : batch, out) || qac_encoder_encode_ids(e, ids, lens, n, out)) {
        fprintf(stderr, "encode: %s\n", qac_last_error());
        return 1;
    }
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        const double t0 = qac_now();
        if (qac_encoder_encode_ids(e, ids, lens, n, out)) {
            fprintf(stderr, "encode: %s\n", qac_last_error());
            return 1;
        }
        const double dt = qac_now() - t0;
        if (dt < best) best = dt;
    }
    const double pps = n / best;
    printf("RESULT qac_%s%s_passages_per_s %.1f\n", precs, tag, pps);
    printf("RESULT qac_%s%s_mean_tokens %.2f\n", precs, tag, tokens / n);
    printf("RESULT qac_%s%s_tflops %.1f\n", precs, tag, flop / best / 1e12);
    printf("RESULT qac_%s%s_mfu %.3f\n", precs, tag, flop / best / 1e12 / peak);
    printf("RESULT qac_%s%s_msmarco_hours %.3f\n", precs, tag, MSMARCO_PASSAGES / pps / 3600);
    printf("RESULT qac_%s%s_msmarco_minutes %.2f\n", precs, tag, MSMARCO_PASSAGES / pps / 60);

    if (!*tag) { /* query latency: one query, and a batch of 16 (what qac serve gathers), of 32 tokens */
        enum { LAT_REPS = 200, NQB = 16, TQ = 32 };
        double lat[LAT_REPS];
        int32_t q[NQB][TQ];
        const int32_t *qp[NQB];
        int ql[NQB];
        for (int b = 0; b < NQB; b++) {
            q[b][0] = 101;
            for (int t = 1; t < TQ - 1; t++) q[b][t] = 2000 + t + 37 * b;
            q[b][TQ - 1] = 102;
            qp[b] = q[b];
            ql[b] = TQ;
        }
        for (int k = 0; k < 2; k++) {
            const int nb = k ? NQB : 1;
            for (int i = 0; i < 20; i++) qac_encoder_encode_ids(e, qp, ql, nb, out);
            for (int i = 0; i < LAT_REPS; i++) {
                const double t0 = qac_now();
                qac_encoder_encode_ids(e, qp, ql, nb, out);
                lat[i] = qac_now() - t0;
            }
            qsort(lat, LAT_REPS, sizeof(double), cmp_double);
            const char *what = nb == 1 ? "query" : "query16";
            printf("RESULT qac_%s_%s_latency_ms_p50 %.3f\n", precs, what, lat[LAT_REPS / 2] * 1e3);
            printf("RESULT qac_%s_%s_latency_ms_p99 %.3f\n", precs, what, lat[LAT_REPS * 99 / 100] * 1e3);
        }
    }
    char choices[2048]; /* qac's attention or cuDNN's, per shape, with the timings that chose */
    if (qac_cuda_attention_choices(choices, sizeof choices) > 0) printf("NOTE attention: %s\n", choices);
    qac_encoder_free(e);
    qac_model_free(m);
    free(buf), free(ids), free(lens), free(out);
    return 0;
}
