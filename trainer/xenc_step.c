/* The cross-encoder's training step (xenc_trainer.h): the encoder over the
 * pairs, the classification head, each group's softmax cross-entropy, and
 * the way back, with GradCache, clipping and AdamW over [encoder |
 * classifier]. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qac_pool.h"
#include "qac_rng.h"
#include "qac_util.h"
#include "xenc_trainer.h"

/* HF Trainer's rule, as the bi-encoder's (trainer.c): no decay on biases
 * and LayerNorm weights; here every encoder tensor trains, the pooler too. */
static int enc_decays(int i) {
    /* ..., ln2_w, ln2_b, final_ln_w, final_ln_b, pooler_w, pooler_b */
    static const char decays[QAC_BERT_NUM_TENSORS] = {1, 1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 1, 0};
    return decays[i];
}

qac_status qac_xtrainer_create(qac_xtrainer **out, qac_xenc *x, const qac_train_opts *o, float head_dropout) {
    *out = NULL;
    if (!(o->lr >= 0) || o->total_steps < 1 || o->warmup_steps < 0 || o->chunk < 0 || !(o->beta1 >= 0 && o->beta1 < 1) ||
        !(o->beta2 >= 0 && o->beta2 < 1) || !(o->adam_eps > 0))
        return qac_set_error(QAC_ERR_INVALID, "cross-encoder trainer: bad options (lr %g, steps %ld, warmup %ld, chunk %d)",
                             o->lr, o->total_steps, o->warmup_steps, o->chunk);
    if (o->device == QAC_DEVICE_CUDA || o->dist_world > 0)
        return qac_set_error(QAC_ERR_UNSUPPORTED,
                             "cross-encoder training runs on the CPU (--device cpu); the trained reranker scores on "
                             "either");
    qac_xtrainer *t = calloc(1, sizeof *t);
    if (!t) return qac_set_error(QAC_ERR_NOMEM, "cross-encoder trainer: out of memory");
    const qac_model *m = x->bert;
    t->x = x;
    t->o = *o;
    t->drop.hidden = o->hidden_dropout >= 0 ? o->hidden_dropout : m->cfg.hidden_dropout;
    t->drop.attn = o->attn_dropout >= 0 ? o->attn_dropout : m->cfg.attn_dropout;
    t->head_dropout = head_dropout >= 0 ? head_dropout : t->drop.hidden;
    qac_status st = QAC_OK;
    if (!(t->drop.hidden >= 0 && t->drop.hidden < 1) || !(t->drop.attn >= 0 && t->drop.attn < 1) ||
        !(t->head_dropout >= 0 && t->head_dropout < 1))
        st = qac_set_error(QAC_ERR_INVALID, "cross-encoder trainer: dropout must be in [0, 1)");
    if (!st && m->cfg.num_layers > QAC_MAX_LAYERS)
        st = qac_set_error(QAC_ERR_UNSUPPORTED, "cross-encoder trainer: more than %d layers", QAC_MAX_LAYERS);
    t->n_enc = m->n_params;
    t->n_cls = (size_t)x->num_labels * (m->cfg.hidden_size + 1);
    size_t n = t->n_enc + t->n_cls;
    if (!st) {
        t->grad_mem = calloc(n, sizeof(float));
        t->adam_m = calloc(n, sizeof(float));
        t->adam_v = calloc(n, sizeof(float));
        if (!t->grad_mem || !t->adam_m || !t->adam_v)
            st = qac_set_error(QAC_ERR_NOMEM, "cross-encoder trainer: cannot allocate the gradients and optimiser "
                                              "state (%zu parameters)", n);
    }
    if (!st) {
        qac_bert_params_bind(&t->g, &m->cfg, t->grad_mem);
        t->g_cls_w = t->grad_mem + t->n_enc;
        t->g_cls_b = t->g_cls_w + (size_t)x->num_labels * m->cfg.hidden_size;
        st = qac_pool_create(&t->pool, o->threads);
    }
    if (!st) st = qac_bert_pack(&t->pk, &m->cfg, &m->p);
    if (st) {
        qac_xtrainer_free(t);
        return st;
    }
    *out = t;
    return QAC_OK;
}

void qac_xtrainer_free(qac_xtrainer *t) {
    if (!t) return;
    free(t->grad_mem), free(t->adam_m), free(t->adam_v);
    qac_bert_packed_free(&t->pk);
    qac_bert_acts_free(&t->acts);
    qac_bert_bwd_free(&t->bwd);
    free(t->cls), free(t->pooled), free(t->kept), free(t->dcls), free(t->scratch);
    free(t->logits), free(t->dlogits), free(t->scores), free(t->dscores), free(t->dlast), free(t->seq_ids);
    qac_pool_free(t->pool);
    free(t);
}

static qac_status reserve(qac_xtrainer *t, int pairs) {
    if ((size_t)pairs <= t->cap_pairs) return QAC_OK;
    size_t P = (size_t)pairs, C = (size_t)t->x->bert->cfg.hidden_size, NL = (size_t)t->x->num_labels;
    float **f[] = {&t->cls, &t->pooled, &t->kept, &t->dcls, &t->scratch};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
        free(*f[i]);
        *f[i] = malloc(P * C * sizeof(float));
    }
    free(t->logits), free(t->dlogits), free(t->scores), free(t->dscores), free(t->seq_ids);
    t->logits = malloc(P * NL * sizeof(float));
    t->dlogits = malloc(P * NL * sizeof(float));
    t->scores = malloc(P * sizeof(double));
    t->dscores = malloc(P * sizeof(double));
    t->seq_ids = malloc(P * sizeof(uint64_t));
    t->cap_pairs = P;
    if (!t->cls || !t->pooled || !t->kept || !t->dcls || !t->scratch || !t->logits || !t->dlogits || !t->scores ||
        !t->dscores || !t->seq_ids) {
        t->cap_pairs = 0;
        return qac_set_error(QAC_ERR_NOMEM, "cross-encoder trainer: out of memory for %d pairs", pairs);
    }
    return QAC_OK;
}

static qac_cls_head head_of(const qac_xtrainer *t) {
    const qac_xenc *x = t->x;
    const qac_bert_params *p = &x->bert->p;
    return (qac_cls_head){.pool_w = p->pooler_w, .pool_b = p->pooler_b, .w = x->cls_w, .b = x->cls_b,
                             .C = x->bert->cfg.hidden_size, .NL = x->num_labels, .drop_layer = x->bert->cfg.num_layers};
}

/* pairs [b0, b0+nb) through the encoder (mode) into t->acts; their [CLS]
 * rows into t->cls */
static qac_status forward_range(qac_xtrainer *t, const qac_xenc_batch *b, int mode, int b0, int nb) {
    const qac_model *m = t->x->bert;
    int C = m->cfg.hidden_size, T = b->T;
    qac_status st = qac_bert_acts_alloc(&t->acts, &m->cfg, nb, T, mode, qac_pool_size(t->pool));
    if (st) return st;
    qac_dropout d = t->drop;
    d.seq_ids = t->seq_ids + b0;
    size_t off = (size_t)b0 * T;
    if ((st = qac_bert_forward_train(&t->acts, &m->cfg, &m->p, &t->pk, b->ids + off, b->types + off, b->lens + b0, nb,
                                     T, &d, t->pool)))
        return st;
    for (int i = 0; i < nb; i++)
        memcpy(t->cls + (size_t)(b0 + i) * C, t->acts.last + (size_t)i * T * C, (size_t)C * sizeof(float));
    return QAC_OK;
}

/* dcls of pairs [b0, b0+nb) into their last hidden state's [CLS] rows, and
 * the encoder's backward (t->acts holds their forward, activations kept) */
static qac_status backward_range(qac_xtrainer *t, const qac_xenc_batch *b, int b0, int nb) {
    const qac_model *m = t->x->bert;
    int C = m->cfg.hidden_size, T = b->T, L = m->cfg.num_layers;
    size_t need = (size_t)nb * T * C;
    if (need > t->cap_last) {
        free(t->dlast);
        if (!(t->dlast = malloc(need * sizeof(float)))) {
            t->cap_last = 0;
            return qac_set_error(QAC_ERR_NOMEM, "cross-encoder trainer: out of memory");
        }
        t->cap_last = need;
    }
    memset(t->dlast, 0, need * sizeof(float));
    for (int i = 0; i < nb; i++)
        memcpy(t->dlast + (size_t)i * T * C, t->dcls + (size_t)(b0 + i) * C, (size_t)C * sizeof(float));
    qac_status st = qac_bert_bwd_alloc(&t->bwd, &m->cfg, nb, T);
    if (st) return st;
    const float *dh[QAC_MAX_LAYERS + 1] = {0};
    dh[L] = t->dlast;
    qac_dropout d = t->drop;
    d.seq_ids = t->seq_ids + b0;
    size_t off = (size_t)b0 * T;
    return qac_bert_backward(&t->g, &t->bwd, dh, &t->acts, &m->cfg, &m->p, &t->pk, b->ids + off, b->types + off,
                             b->lens + b0, nb, T, &d, t->pool);
}

/* the head forward over every pair, the groups' loss, the head's backward
 * into dcls and the head's gradients */
static double head_and_loss(qac_xtrainer *t, const qac_xenc_batch *b) {
    int P = b->groups * b->n, n = b->n, NL = t->x->num_labels;
    qac_cls_head h = head_of(t);
    qac_dropout hd = t->drop;
    hd.hidden = t->head_dropout;
    hd.seq_ids = t->seq_ids;
    qac_cls_head_forward(t->logits, t->pooled, t->kept, t->cls, &h, &hd, P);
    for (int i = 0; i < P; i++)
        t->scores[i] = NL == 1 ? t->logits[i] : (double)t->logits[2 * i + 1] - t->logits[2 * i];
    double loss = 0;
    for (int g = 0; g < b->groups; g++) {
        const double *s = t->scores + (size_t)g * n;
        double mx = s[0], sum = 0;
        for (int j = 1; j < n; j++) mx = s[j] > mx ? s[j] : mx;
        for (int j = 0; j < n; j++) sum += exp(s[j] - mx);
        loss += mx + log(sum) - s[0];
        for (int j = 0; j < n; j++)
            t->dscores[(size_t)g * n + j] = (exp(s[j] - mx) / sum - (j == 0)) / b->groups;
    }
    for (int i = 0; i < P; i++) {
        if (NL == 1) {
            t->dlogits[i] = (float)t->dscores[i];
        } else {
            t->dlogits[2 * i] = (float)-t->dscores[i];
            t->dlogits[2 * i + 1] = (float)t->dscores[i];
        }
    }
    qac_cls_head_backward(t->dcls, t->g.pooler_w, t->g.pooler_b, t->g_cls_w, t->g_cls_b, t->dlogits, t->pooled,
                          t->kept, t->cls, &h, &hd, P, t->scratch);
    return loss / b->groups;
}

static qac_status check_batch(const qac_xtrainer *t, const qac_xenc_batch *b) {
    if (b->groups < 1 || b->n < 1 || b->T < 1 || !b->ids || !b->types || !b->lens)
        return qac_set_error(QAC_ERR_INVALID, "cross-encoder trainer: empty batch (%d groups of %d)", b->groups, b->n);
    (void)t;
    return QAC_OK;
}

qac_status qac_xtrainer_grads(qac_xtrainer *t, const qac_xenc_batch *b, double *loss) {
    qac_status st = check_batch(t, b);
    int P = b->groups * b->n;
    if (st || (st = reserve(t, P))) return st;
    for (int i = 0; i < P; i++) t->seq_ids[i] = (uint64_t)i;
    t->drop.key = qac_rng_key(t->o.seed, (uint64_t)t->step, 0x64726f70, 0);
    memset(t->grad_mem, 0, (t->n_enc + t->n_cls) * sizeof(float));
    int mode = t->o.recompute ? QAC_ACTS_RECOMPUTE : QAC_ACTS_KEEP, k = t->o.chunk;
    if (k <= 0 || k >= P) {
        if ((st = forward_range(t, b, mode, 0, P))) return st;
        *loss = head_and_loss(t, b);
        return backward_range(t, b, 0, P);
    }
    /* GradCache: every [CLS] without activations, the head and the loss on
     * the whole batch, then each chunk again with activations */
    for (int b0 = 0; b0 < P && !st; b0 += k) st = forward_range(t, b, QAC_ACTS_INFER, b0, P - b0 < k ? P - b0 : k);
    if (st) return st;
    *loss = head_and_loss(t, b);
    for (int b0 = 0; b0 < P && !st; b0 += k) {
        int nb = P - b0 < k ? P - b0 : k;
        if (!(st = forward_range(t, b, mode, b0, nb))) st = backward_range(t, b, b0, nb);
    }
    return st;
}

qac_status qac_xtrainer_step(qac_xtrainer *t, const qac_xenc_batch *b, qac_step_stats *out) {
    double t0 = qac_now(), loss = 0;
    qac_status st = qac_xtrainer_grads(t, b, &loss);
    if (st) return st;
    if (!isfinite(loss))
        return qac_set_error(QAC_ERR_INTERNAL, "cross-encoder trainer: loss is %g at step %ld", loss, t->step + 1);
    const qac_train_opts *o = &t->o;
    size_t n = t->n_enc + t->n_cls;
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)t->grad_mem[i] * t->grad_mem[i];
    double norm = sqrt(ss);
    if (o->max_grad_norm > 0) {
        double coef = o->max_grad_norm / (norm + 1e-6);
        if (coef < 1.0) {
            float fc = (float)coef;
            for (size_t i = 0; i < n; i++) t->grad_mem[i] *= fc;
        }
    }
    double lr = qac_lr_at(o->schedule, o->lr, t->step, o->warmup_steps, o->total_steps);
    long step = t->step + 1;
    const qac_model *m = t->x->bert;
    size_t off = 0;
    for (int i = 0; i < QAC_BERT_NUM_TENSORS; i++) {
        size_t k = qac_bert_tensor_size(&m->cfg, i);
        qac_adamw_update(m->param_mem + off, t->grad_mem + off, t->adam_m + off, t->adam_v + off, k, step, lr, o->beta1,
                         o->beta2, o->adam_eps, enc_decays(i) ? o->weight_decay : 0.0);
        off += k;
    }
    /* the classifier: its weight decays, its bias does not */
    size_t nw = (size_t)t->x->num_labels * m->cfg.hidden_size;
    qac_adamw_update(t->x->cls_w, t->g_cls_w, t->adam_m + off, t->adam_v + off, nw, step, lr, o->beta1, o->beta2,
                     o->adam_eps, o->weight_decay);
    qac_adamw_update(t->x->cls_b, t->g_cls_b, t->adam_m + off + nw, t->adam_v + off + nw, (size_t)t->x->num_labels,
                     step, lr, o->beta1, o->beta2, o->adam_eps, 0.0);
    t->step = step;
    qac_bert_repack(&t->pk, &m->cfg, &m->p, t->pool);
    if (out) {
        out->step = step;
        out->loss = loss;
        out->grad_norm = norm;
        out->lr = lr;
        out->seconds = qac_now() - t0;
    }
    return QAC_OK;
}
