/* The precision of the CUDA trainer's gradient against the CPU's, per
 * parameter tensor, on a real model and real batches: for each of the first
 * N batches of a `qac finetune --dump-batches` file, one gradient on the CPU
 * (fp32, the reference) and on the GPU in bf16 and in fp32, from the same
 * weights with the same dropout masks; prints, per tensor (layers stacked;
 * the key bias left out, its gradient is zero in exact arithmetic) and
 * precision, the largest relative error ||g - g_cpu|| / ||g_cpu|| over the
 * batches as "GRADERR prec name value" lines, and the losses. The
 * reference's own figure comes from bench/train_drift/drift.py --grad-err
 * on the same batches: where qac's bf16 error of a tensor stands well above
 * torch's, that tensor's path loses precision that torch's does not.
 *   bench_grad_err MODEL_DIR BATCHES.jsonl [batches 3] [q_max 32] [p_max 128] [tau 0.05]
 * Exits 77 without a GPU. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qac_model.h"
#include "qac_tokenizer.h"
#include "qac_train.h"

static int die(const char *what) {
    fprintf(stderr, "bench_grad_err: %s: %s\n", what, qac_last_error());
    return 1;
}

/* the grads of one trainer on one batch, copied out */
static int grads_of(float *out, qac_model *m, const qac_train_opts *o, const qac_train_batch *b, double *loss) {
    qac_trainer *t = NULL;
    if (qac_trainer_create(&t, m, o)) return die("trainer");
    if (qac_trainer_grads(t, b, loss)) return die("gradient");
    const float *g = qac_trainer_grad_mem(t);
    if (!g) return die("gradient download");
    memcpy(out, g, m->n_params * sizeof(float));
    qac_trainer_free(t);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fputs("usage: bench_grad_err MODEL_DIR BATCHES.jsonl [batches] [q_max] [p_max] [tau]\n", stderr);
        return 2;
    }
    const int nb = argc > 3 ? atoi(argv[3]) : 3, q_max = argc > 4 ? atoi(argv[4]) : 32,
              p_max = argc > 5 ? atoi(argv[5]) : 128;
    const float tau = argc > 6 ? (float)atof(argv[6]) : 0.05f;
    if (!qac_cuda_available()) {
        puts("SKIP: no usable CUDA GPU");
        return 77;
    }
    qac_model *m = NULL;
    qac_tokenizer *tok = NULL;
    if (qac_model_load(&m, argv[1])) return die(argv[1]);
    if (qac_tokenizer_load(&tok, argv[1])) return die("tokenizer");
    FILE *f = fopen(argv[2], "r");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    const size_t n = m->n_params;
    float *ref = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    enum { NPREC = 2 };
    const qac_precision precs[NPREC] = {QAC_PREC_BF16, QAC_PREC_FP32};
    double worst[NPREC][QAC_BERT_NUM_TENSORS] = {{0}};
    qac_batch_buf bb = {0};
    char *line = NULL;
    size_t cap = 0;
    for (int bi = 0; bi < nb && getline(&line, &cap, f) > 0; bi++) {
        json_error_t je;
        json_t *o = json_loads(line, 0, &je), *qs = json_object_get(o, "queries"), *ps = json_object_get(o, "passages");
        if (!json_is_array(qs) || !json_is_array(ps)) {
            fprintf(stderr, "bench_grad_err: batch %d: no queries/passages\n", bi + 1);
            return 1;
        }
        const int nq = (int)json_array_size(qs), np = (int)json_array_size(json_array_get(ps, 0));
        const char **q = malloc(sizeof(char *) * nq), **p = malloc(sizeof(char *) * nq * np);
        for (int i = 0; i < nq; i++) {
            q[i] = json_string_value(json_array_get(qs, i));
            for (int j = 0; j < np; j++) p[i * np + j] = json_string_value(json_array_get(json_array_get(ps, i), j));
        }
        if (qac_batch_build(&bb, tok, q, nq, p, np, q_max, p_max)) return die("batch");
        qac_train_opts opts;
        qac_train_opts_default(&opts);
        opts.total_steps = 100;
        opts.tau = tau;
        opts.threads = 0;
        double lc = 0, lg = 0;
        opts.device = QAC_DEVICE_CPU;
        if (grads_of(ref, m, &opts, &bb.b, &lc)) return 1;
        for (int pi = 0; pi < NPREC; pi++) {
            opts.device = QAC_DEVICE_CUDA;
            opts.gpu_precision = precs[pi];
            if (grads_of(got, m, &opts, &bb.b, &lg)) return 1;
            printf("batch %d: %d x %d passages, loss cpu %.7f gpu %s %.7f\n", bi + 1, nq, np, lc,
                   precs[pi] == QAC_PREC_BF16 ? "bf16" : "fp32", lg);
            size_t off = 0;
            for (int i = 0; i < QAC_BERT_NUM_TENSORS - 2; i++) {
                const size_t sz = qac_bert_tensor_size(&m->cfg, i);
                const int C = m->cfg.hidden_size, key_bias = !strcmp(qac_bert_tensor_name(i), "qkv_b");
                double sd = 0, sr = 0;
                for (size_t j = 0; j < sz; j++) {
                    if (key_bias && (j % (3 * (size_t)C)) / C == 1) continue;
                    const double d = (double)got[off + j] - ref[off + j];
                    sd += d * d;
                    sr += (double)ref[off + j] * ref[off + j];
                }
                const double e = sr > 0 ? sqrt(sd / sr) : sqrt(sd);
                if (!(e <= worst[pi][i])) worst[pi][i] = e; /* NaN sticks */
                off += sz;
            }
        }
        free(q), free(p);
        json_decref(o);
    }
    for (int pi = 0; pi < NPREC; pi++)
        for (int i = 0; i < QAC_BERT_NUM_TENSORS - 2; i++)
            printf("GRADERR %s %s %.4g\n", precs[pi] == QAC_PREC_BF16 ? "bf16" : "fp32", qac_bert_tensor_name(i),
                   worst[pi][i]);
    free(line), free(ref), free(got);
    fclose(f);
    qac_batch_buf_free(&bb);
    qac_tokenizer_free(tok);
    qac_model_free(m);
    return 0;
}
