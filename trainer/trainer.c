/* The training step: encoder forward and backward around a contrastive
 * loss, with GradCache, global-norm clipping and AdamW over the flat
 * blocks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bert_cpu.h"
#include "qac_pool.h"
#include "qac_rng.h"
#include "qac_train.h"
#include "qac_util.h"
#include "trainer_internal.h"

void qac_train_opts_default(qac_train_opts *o) {
    memset(o, 0, sizeof *o);
    o->lr = 2e-5;
    o->weight_decay = 0.01;
    o->beta1 = 0.9;
    o->beta2 = 0.999;
    o->adam_eps = 1e-8;
    o->max_grad_norm = 1.0;
    o->schedule = QAC_SCHED_LINEAR;
    o->tau = 1.0f;
    o->sim = QAC_SIM_DOT;
    o->hidden_dropout = o->attn_dropout = -1.0f;
    o->seed = 42;
    o->device = QAC_DEVICE_CPU;
    o->gpu_precision = QAC_PREC_BF16;
}

/* HF Trainer's rule: no decay on biases and LayerNorm weights. The pooler
 * gets no gradient and, as torch skips parameters without one, no update. */
static int tensor_decays(int i) {
    static const char decays[QAC_BERT_NUM_TENSORS] = {1, 1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 1, 0};
    return decays[i];
}
static int tensor_trains(int i) { return i < QAC_BERT_NUM_TENSORS - 2; }

qac_status qac_trainer_create(qac_trainer **out, qac_model *m, const qac_train_opts *o) {
    *out = NULL;
    if (!(o->lr >= 0) || o->total_steps < 1 || o->warmup_steps < 0 || !(o->tau > 0) || o->chunk < 0 ||
        !(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1) || !(o->adam_eps > 0))
        return qac_set_error(QAC_ERR_INVALID,
                             "trainer: bad options (lr %g, steps %ld, warmup %ld, tau %g, chunk %d, betas %g/%g, eps %g)",
                             o->lr, o->total_steps, o->warmup_steps, (double)o->tau, o->chunk, o->beta1, o->beta2,
                             o->adam_eps);
    qac_trainer *t = calloc(1, sizeof *t);
    if (!t) return qac_set_error(QAC_ERR_NOMEM, "trainer: out of memory");
    t->m = m;
    t->o = *o;
    t->drop.hidden = o->hidden_dropout >= 0 ? o->hidden_dropout : m->cfg.hidden_dropout;
    t->drop.attn = o->attn_dropout >= 0 ? o->attn_dropout : m->cfg.attn_dropout;
    if (!(t->drop.hidden >= 0 && t->drop.hidden < 1) || !(t->drop.attn >= 0 && t->drop.attn < 1)) {
        free(t);
        return qac_set_error(QAC_ERR_INVALID, "trainer: dropout must be in [0, 1)");
    }
    if (o->dist_world > 0 && (o->device != QAC_DEVICE_CUDA || o->dist_rank < 0 || o->dist_rank >= o->dist_world)) {
        free(t);
        return qac_set_error(QAC_ERR_INVALID, "trainer: rank %d of %d (several GPUs need the CUDA device)",
                             o->dist_rank, o->dist_world);
    }
    if (o->pair_alpha > 1) {
        free(t);
        return qac_set_error(QAC_ERR_INVALID, "trainer: PAIR alpha %g is past 1", (double)o->pair_alpha);
    }
    size_t n = m->n_params;
    t->grad_mem = calloc(n, sizeof(float));
    t->adam_m = calloc(n, sizeof(float));
    t->adam_v = calloc(n, sizeof(float));
    qac_status st = t->grad_mem && t->adam_m && t->adam_v ? QAC_OK
                                                          : qac_set_error(QAC_ERR_NOMEM, "trainer: cannot allocate "
                                                                                         "gradients and optimiser state "
                                                                                         "(%zu parameters)",
                                                                          n);
    if (!st) {
        qac_bert_params_bind(&t->g, &m->cfg, t->grad_mem);
        st = qac_pool_create(&t->pool, o->threads);
    }
    if (!st && o->device == QAC_DEVICE_CUDA) {
        int decays[QAC_BERT_NUM_TENSORS];
        for (int i = 0; i < QAC_BERT_NUM_TENSORS; i++) decays[i] = tensor_decays(i);
        st = qac_cuda_trainer_create(&t->gpu, m, o, t->drop.hidden, t->drop.attn, decays, QAC_BERT_NUM_TENSORS - 2);
    } else if (!st) {
        st = qac_bert_pack(&t->pk, &m->cfg, &m->p);
    }
    if (st) {
        qac_trainer_free(t);
        return st;
    }
    *out = t;
    return QAC_OK;
}

void qac_trainer_free(qac_trainer *t) {
    if (!t) return;
    free(t->grad_mem), free(t->adam_m), free(t->adam_v);
    qac_bert_packed_free(&t->pk);
    qac_bert_acts_free(&t->acts_q), qac_bert_acts_free(&t->acts_p);
    qac_bert_bwd_free(&t->bwd);
    free(t->reps), free(t->dlast), free(t->seq_ids);
    qac_pool_free(t->pool);
    qac_cuda_trainer_free(t->gpu);
    free(t);
}

const float *qac_trainer_grad_mem(const qac_trainer *t) {
    if (t->gpu && t->grads_stale) {
        qac_trainer *mt = (qac_trainer *)t; /* a cache refresh, not a change of state */
        if (qac_cuda_trainer_download(t->gpu, NULL, t->grad_mem, NULL, NULL)) return NULL;
        mt->grads_stale = 0;
    }
    return t->grad_mem;
}

qac_status qac_trainer_sync_model(qac_trainer *t) {
    if (!t->gpu) return QAC_OK;
    qac_status st = qac_cuda_trainer_download(t->gpu, t->m->param_mem, NULL, NULL, NULL);
    if (!st) qac_model_update_fingerprint(t->m);
    return st;
}
long qac_trainer_steps_done(const qac_trainer *t) { return t->step; }

/* one group of sequences (the queries or the passages of a batch) */
typedef struct seqs {
    const int32_t *ids;
    const int *lens;
    int count, T;
    const uint64_t *seq_ids;
    float *reps, *dreps; /* [count, C] */
} seqs;

/* Sequences [b0, b0+nb) of s through the encoder into a (mode keep) and
 * their pooled representations into s->reps. */
static qac_status forward_range(qac_trainer *t, qac_bert_acts *a, int mode, const seqs *s, int b0, int nb) {
    const qac_model *m = t->m;
    qac_status st = qac_bert_acts_alloc(a, &m->cfg, nb, s->T, mode, qac_pool_size(t->pool));
    if (st) return st;
    qac_dropout d = t->drop;
    d.seq_ids = s->seq_ids + b0;
    const int32_t *ids = s->ids + (size_t)b0 * s->T;
    if ((st = qac_bert_forward_train(a, &m->cfg, &m->p, &t->pk, ids, NULL, s->lens + b0, nb, s->T, &d, t->pool)))
        return st;
    qac_pooling_forward(s->reps + (size_t)b0 * m->cfg.hidden_size, a->last, s->lens + b0, nb, s->T,
                        m->cfg.hidden_size, m->pooling, m->normalize);
    return QAC_OK;
}

/* Back-propagate s->dreps of sequences [b0, b0+nb), whose forward is in a. */
static qac_status backward_range(qac_trainer *t, qac_bert_acts *a, const seqs *s, int b0, int nb) {
    const qac_model *m = t->m;
    int C = m->cfg.hidden_size, L = m->cfg.num_layers;
    size_t need = (size_t)nb * s->T * C;
    if (need > t->dlast_cap) {
        float *d = realloc(t->dlast, need * sizeof *d);
        if (!d) return qac_set_error(QAC_ERR_NOMEM, "trainer: out of memory");
        t->dlast = d;
        t->dlast_cap = need;
    }
    qac_status st = qac_bert_bwd_alloc(&t->bwd, &m->cfg, nb, s->T);
    if (st) return st;
    qac_pooling_backward(t->dlast, s->dreps + (size_t)b0 * C, a->last, s->lens + b0, nb, s->T, C, m->pooling,
                         m->normalize);
    const float *dh[QAC_MAX_LAYERS + 1] = {0};
    dh[L] = t->dlast;
    qac_dropout d = t->drop;
    d.seq_ids = s->seq_ids + b0;
    return qac_bert_backward(&t->g, &t->bwd, dh, a, &m->cfg, &m->p, &t->pk, s->ids + (size_t)b0 * s->T, NULL,
                             s->lens + b0, nb, s->T, &d, t->pool);
}

static qac_status batch_loss(qac_trainer *t, double *loss, const seqs *q, const seqs *p, int nq, int n) {
    int C = t->m->cfg.hidden_size;
    if (t->o.pair_alpha > 0) return qac_pair_loss(loss, q->dreps, p->dreps, q->reps, p->reps, nq, n, C, t->o.pair_alpha);
    return qac_infonce(loss, q->dreps, p->dreps, q->reps, p->reps, nq, n, C, t->o.tau, t->o.sim);
}

static int kept_mode(const qac_trainer *t) { return t->o.recompute ? QAC_ACTS_RECOMPUTE : QAC_ACTS_KEEP; }

qac_status qac_trainer_grads(qac_trainer *t, const qac_train_batch *b, double *loss) {
    const qac_model *m = t->m;
    int C = m->cfg.hidden_size, nq = b->nq, np = b->nq * b->n;
    if (nq < 1 || b->n < 1 || b->q_T < 1 || b->p_T < 1)
        return qac_set_error(QAC_ERR_INVALID, "trainer: empty batch (nq %d, n %d)", nq, b->n);
    if (m->cfg.num_layers > QAC_MAX_LAYERS)
        return qac_set_error(QAC_ERR_UNSUPPORTED, "trainer: more than %d layers", QAC_MAX_LAYERS);
    size_t need = (size_t)2 * (nq + np) * C;
    if (need > t->reps_cap) {
        float *r = realloc(t->reps, need * sizeof *r);
        if (!r) return qac_set_error(QAC_ERR_NOMEM, "trainer: out of memory");
        t->reps = r;
        t->reps_cap = need;
    }
    if ((size_t)(nq + np) > t->seq_cap) {
        uint64_t *s = realloc(t->seq_ids, (size_t)(nq + np) * sizeof *s);
        if (!s) return qac_set_error(QAC_ERR_NOMEM, "trainer: out of memory");
        t->seq_ids = s;
        t->seq_cap = (size_t)(nq + np);
    }
    /* dropout masks keyed by (seed, step, sequence): the same in every chunk
     * and in GradCache's re-forward */
    for (int i = 0; i < nq + np; i++) t->seq_ids[i] = (uint64_t)i;
    t->drop.key = qac_rng_key(t->o.seed, (uint64_t)t->step, 0x64726f70, 0);
    if (t->gpu) {
        t->grads_stale = 1;
        return qac_cuda_trainer_grads(t->gpu, b, t->drop.key, loss);
    }
    seqs q = {b->q_ids, b->q_lens, nq, b->q_T, t->seq_ids, t->reps, t->reps + (size_t)(nq + np) * C};
    seqs p = {b->p_ids, b->p_lens, np, b->p_T, t->seq_ids + nq, t->reps + (size_t)nq * C,
              t->reps + (size_t)(nq + np) * C + (size_t)nq * C};
    memset(t->grad_mem, 0, m->n_params * sizeof(float));
    qac_status st = QAC_OK;
    int mode = kept_mode(t);
    if (t->o.chunk == 0) {
        /* the whole batch with activations kept for both sides */
        if ((st = forward_range(t, &t->acts_q, mode, &q, 0, nq)) || (st = forward_range(t, &t->acts_p, mode, &p, 0, np)) ||
            (st = batch_loss(t, loss, &q, &p, nq, b->n)) ||
            (st = backward_range(t, &t->acts_p, &p, 0, np)) || (st = backward_range(t, &t->acts_q, &q, 0, nq)))
            return st;
        return QAC_OK;
    }
    /* GradCache: representations without activations, the loss on the whole
     * batch, then each chunk again with activations and its cached gradient */
    int k = t->o.chunk;
    seqs *sides[2] = {&q, &p};
    for (int sd = 0; sd < 2; sd++)
        for (int b0 = 0; b0 < sides[sd]->count && !st; b0 += k)
            st = forward_range(t, &t->acts_q, QAC_ACTS_INFER, sides[sd], b0,
                               sides[sd]->count - b0 < k ? sides[sd]->count - b0 : k);
    if (st || (st = batch_loss(t, loss, &q, &p, nq, b->n))) return st;
    for (int sd = 0; sd < 2; sd++)
        for (int b0 = 0; b0 < sides[sd]->count && !st; b0 += k) {
            int nb = sides[sd]->count - b0 < k ? sides[sd]->count - b0 : k;
            if (!(st = forward_range(t, &t->acts_p, mode, sides[sd], b0, nb)))
                st = backward_range(t, &t->acts_p, sides[sd], b0, nb);
        }
    return st;
}

/* global L2 norm of the trained gradients (torch's clip_grad_norm_) */
static double grad_norm(const qac_trainer *t) {
    double ss = 0;
    const qac_bert_config *c = &t->m->cfg;
    size_t off = 0;
    for (int i = 0; i < QAC_BERT_NUM_TENSORS; i++) {
        size_t n = qac_bert_tensor_size(c, i);
        if (tensor_trains(i)) {
            double s = 0;
            for (size_t j = 0; j < n; j++) s += (double)t->grad_mem[off + j] * t->grad_mem[off + j];
            ss += s;
        }
        off += n;
    }
    return sqrt(ss);
}

qac_status qac_trainer_step(qac_trainer *t, const qac_train_batch *b, qac_step_stats *out) {
    double t0 = qac_now(), loss = 0;
    qac_status st = qac_trainer_grads(t, b, &loss);
    if (st) return st;
    if (!isfinite(loss))
        return qac_set_error(QAC_ERR_INTERNAL, "trainer: loss is %g at step %ld", loss, t->step + 1);
    const qac_train_opts *o = &t->o;
    if (t->gpu) {
        double lr = qac_lr_at(o->schedule, o->lr, t->step, o->warmup_steps, o->total_steps), norm = 0;
        if ((st = qac_cuda_trainer_update(t->gpu, t->step + 1, lr, &norm))) return st;
        t->step++;
        if (out) {
            out->step = t->step;
            out->loss = loss;
            out->grad_norm = norm;
            out->lr = lr;
            out->seconds = qac_now() - t0;
        }
        return QAC_OK;
    }
    double norm = grad_norm(t);
    if (o->max_grad_norm > 0) {
        double coef = o->max_grad_norm / (norm + 1e-6);
        if (coef < 1.0) {
            float fc = (float)coef;
            for (size_t i = 0; i < t->m->n_params; i++) t->grad_mem[i] *= fc;
        }
    }
    double lr = qac_lr_at(o->schedule, o->lr, t->step, o->warmup_steps, o->total_steps);
    long step = t->step + 1;
    size_t off = 0;
    for (int i = 0; i < QAC_BERT_NUM_TENSORS; i++) {
        size_t n = qac_bert_tensor_size(&t->m->cfg, i);
        if (tensor_trains(i))
            qac_adamw_update(t->m->param_mem + off, t->grad_mem + off, t->adam_m + off, t->adam_v + off, n, step, lr,
                             o->beta1, o->beta2, o->adam_eps, tensor_decays(i) ? o->weight_decay : 0.0);
        off += n;
    }
    t->step = step;
    qac_bert_repack(&t->pk, &t->m->cfg, &t->m->p, t->pool);
    if (out) {
        out->step = step;
        out->loss = loss;
        out->grad_norm = norm;
        out->lr = lr;
        out->seconds = qac_now() - t0;
    }
    return QAC_OK;
}
