/* The small random BERT that the CUDA training and pre-training step tests
 * (test_gpu_train_step.c, test_gpu_pretrain_step.c) run on both devices:
 * 2 layers of 128 (4 heads, FFN 256), 64 positions, dropout 0.1, a
 * vocabulary of BERT's five specials ([PAD] 0, [UNK], [CLS] 2, [SEP] 3,
 * [MASK] 4) and w5..w199. The parameters come from gpu_testutil.h's seeded
 * generator: the LayerNorm weights in [0.9, 1.1), the rest in [-0.06, 0.06). */
#ifndef QAC_GPU_TINY_MODEL_H
#define QAC_GPU_TINY_MODEL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_testutil.h"
#include "qac_model.h"
#include "testutil.h"

enum { GPU_TINY_V = 200, GPU_TINY_HID = 128, GPU_TINY_LAYERS = 2, GPU_TINY_HEADS = 4, GPU_TINY_INTER = 256,
       GPU_TINY_POS = 64 };

/* DIR/vocab.txt, the tokenizer a model made in DIR loads. */
static inline void gpu_tiny_write_vocab(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    fprintf(f, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n");
    for (int i = 5; i < GPU_TINY_V; i++) fprintf(f, "w%d\n", i);
    fclose(f);
}

/* The model in dir (where gpu_tiny_write_vocab wrote the vocabulary) with
 * params, or with qac_model_create's when params is NULL; exits when it
 * cannot be made. */
static inline qac_model *gpu_tiny_model(const char *dir, const float *params) {
    qac_bert_config c = {.vocab_size = GPU_TINY_V, .hidden_size = GPU_TINY_HID, .num_layers = GPU_TINY_LAYERS,
                         .num_heads = GPU_TINY_HEADS, .intermediate_size = GPU_TINY_INTER,
                         .max_position = GPU_TINY_POS, .type_vocab_size = 2, .pad_token_id = 0,
                         .layer_norm_eps = 1e-12f, .hidden_dropout = 0.1f, .attn_dropout = 0.1f};
    qac_model *m = NULL;
    CHECK_OK(qac_model_create(&m, &c, dir));
    if (!m) exit(1);
    if (params) memcpy(m->param_mem, params, m->n_params * sizeof(float));
    return m;
}

/* A malloc'd set of parameters for m drawn from the seeded generator. */
static inline float *gpu_tiny_params(const qac_model *m) {
    float *p = malloc(m->n_params * sizeof(float));
    size_t off = 0;
    for (int i = 0; i < QAC_BERT_NUM_TENSORS; i++) {
        size_t n = qac_bert_tensor_size(&m->cfg, i);
        const char *nm = qac_bert_tensor_name(i);
        int ln_w = !strcmp(nm, "emb_ln_w") || !strcmp(nm, "ln1_w") || !strcmp(nm, "ln2_w");
        for (size_t j = 0; j < n; j++) p[off + j] = ln_w ? gpu_test_uniform(0.9f, 1.1f) : gpu_test_uniform(-0.06f, 0.06f);
        off += n;
    }
    return p;
}

#endif
