/* CoT-MAE (TRAINING.md): the decoder's input wiring. The decoder's layers
 * are ordinary BERT layers (qac_bert_layers_forward/backward) and its MLM
 * goes through the tied head of mlm.c. */
#include <string.h>

#include "bert_cpu.h"
#include "qac_heads.h"

void qac_cotmae_input(float *x, float *emb, float *mean, float *rstd, const int32_t *ids, const float *cls,
                      const qac_bert_config *c, const qac_bert_params *p, int B, int T, qac_pool *pool) {
    int C = c->hidden_size;
    qac_embeddings_forward(emb, ids, NULL, p->word_emb, p->pos_emb, p->type_emb, B, T, C, pool);
    qac_layernorm_forward(x, mean, rstd, emb, p->emb_ln_w, p->emb_ln_b, B * T, C, c->layer_norm_eps, pool);
    for (int b = 0; b < B; b++) memcpy(x + (size_t)b * T * C, cls + (size_t)b * C, (size_t)C * sizeof *x);
}

void qac_cotmae_input_backward(float *dcls, qac_bert_params *g, const float *dx, const float *emb, const float *mean,
                               const float *rstd, const int32_t *ids, const qac_bert_config *c, const qac_bert_params *p,
                               int B, int T, float *scratch, qac_pool *pool) {
    int C = c->hidden_size;
    size_t NC = (size_t)B * T * C;
    float *d = scratch, *demb = scratch + NC;
    memcpy(d, dx, NC * sizeof *d);
    for (int b = 0; b < B; b++) {
        float *row = d + (size_t)b * T * C;
        for (int k = 0; k < C; k++) dcls[(size_t)b * C + k] += row[k];
        memset(row, 0, (size_t)C * sizeof *row); /* position 0 was replaced: no gradient to its embedding */
    }
    qac_layernorm_backward(demb, g->emb_ln_w, g->emb_ln_b, d, emb, mean, rstd, p->emb_ln_w, B * T, C, pool);
    qac_embeddings_backward(g->word_emb, g->pos_emb, g->type_emb, demb, ids, NULL, B, T, C);
}
