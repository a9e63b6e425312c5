/* The pre-trainer: the encoder plus an objective's heads, one step at a
 * time (TRAINING.md "Pre-training"). A step runs both texts of every pair
 * through the encoder, the heads on top, one MLM loss per head over every
 * masked position of the batch (mean over the union, as one torch call over
 * the stacked batch), then the backward of it all into one gradient block,
 * global-norm clipping and AdamW over [encoder | heads]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pretrainer.h"
#include "qac_rng.h"
#include "qac_safetensors.h"
#include "qac_util.h"

#define STREAM_DROP 0x64726f70u      /* the encoder's dropout, as the fine-tuning trainer's */
#define STREAM_HEAD_DROP 0x68647270u /* the heads' dropout */
#define STREAM_HEAD_INIT 0x68656164u

void qac_pt_objective_opts_default(qac_pt_objective_opts *o) {
    memset(o, 0, sizeof *o);
    o->objective = QAC_PT_COCONDENSER;
    o->skip_from = -1;
    o->mask_rate = 0.15f;
    o->enc_mask_rate = 0.30f;
    o->dec_mask_rate = 0.45f;
    o->tau = 1.0f;
    o->window = 3;
    o->pooling = QAC_PT_POOL_CHECKPOINT;
    o->normalize = QAC_PT_NORM_CHECKPOINT;
}

qac_status qac_pt_pooling_parse(int *pooling, int *normalize, const char *pooling_name, const char *normalize_name) {
    static const char *pools[] = {"cls", "mean"}, *norms[] = {"false", "true"};
    *pooling = QAC_PT_POOL_CHECKPOINT, *normalize = QAC_PT_NORM_CHECKPOINT;
    if (pooling_name && strcmp(pooling_name, "checkpoint")) {
        for (int i = 0; i < 2; i++)
            if (!strcmp(pooling_name, pools[i])) *pooling = i == 0 ? QAC_POOL_CLS : QAC_POOL_MEAN;
        if (*pooling == QAC_PT_POOL_CHECKPOINT)
            return qac_set_error(QAC_ERR_INVALID, "unknown pooling '%s' (checkpoint, cls or mean)", pooling_name);
    }
    if (normalize_name && strcmp(normalize_name, "checkpoint")) {
        for (int i = 0; i < 2; i++)
            if (!strcmp(normalize_name, norms[i])) *normalize = i;
        if (*normalize == QAC_PT_NORM_CHECKPOINT)
            return qac_set_error(QAC_ERR_INVALID, "unknown --normalize '%s' (checkpoint, true or false)", normalize_name);
    }
    return QAC_OK;
}

void qac_pt_pooling_resolve(const qac_pt_objective_opts *o, const qac_model *m, qac_pooling *pooling, int *normalize) {
    *pooling = o->pooling == QAC_PT_POOL_CHECKPOINT ? m->pooling : (qac_pooling)o->pooling;
    *normalize = o->normalize == QAC_PT_NORM_CHECKPOINT ? m->normalize != 0 : o->normalize != 0;
}

void qac_pt_pooling_describe(char *buf, size_t cap, const qac_pt_objective_opts *o, const qac_model *m) {
    qac_pooling pool;
    int norm;
    qac_pt_pooling_resolve(o, m, &pool, &norm);
    const char *pfrom = o->pooling == QAC_PT_POOL_CHECKPOINT ? "the checkpoint's" : "--pooling";
    const char *nfrom = o->normalize == QAC_PT_NORM_CHECKPOINT ? "the checkpoint's" : "--normalize";
    if (o->objective == QAC_PT_COCONDENSER)
        snprintf(buf, cap, "representation: %s pooling (%s), %s (%s); %s on it, the Condenser head reads it "
                 "before normalisation", qac_pooling_name(pool), pfrom, norm ? "L2-normalised" : "not normalised",
                 nfrom, o->alpha > 0 ? "PAIR" : "the contrastive loss");
    else
        snprintf(buf, cap, "representation: %s pooling (%s), the decoder's bottleneck at position 0 (not normalised; "
                 "normalize %s unused by this objective)", qac_pooling_name(pool), pfrom, norm ? "true" : "false");
}

qac_status qac_pt_objective_parse(qac_pt_objective *out, const char *name) {
    static const char *names[] = {"cocondenser", "cotmae", "qgen"};
    for (int i = 0; i < 3; i++)
        if (name && !strcmp(name, names[i])) {
            *out = (qac_pt_objective)i;
            return QAC_OK;
        }
    return qac_set_error(QAC_ERR_INVALID, "unknown objective '%s' (cocondenser, cotmae or qgen)", name ? name : "");
}

/* HF Trainer's rule, per qac_bert_params tensor: no decay on biases and
 * LayerNorm weights. */
static const char enc_decays[QAC_BERT_NUM_TENSORS] = {1, 1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 1, 0};

static float *view(qac_bert_params *p, int i) { return ((float **)p)[i]; }

/* N(0, std) from the counter-based generator (Box-Muller pairs) */
static void normal_fill(float *w, size_t n, double std, uint64_t key) {
    for (size_t i = 0; i < n; i += 2) {
        double u1 = (qac_rng_u64(key, i) >> 11) * 0x1p-53, u2 = (qac_rng_u64(key, i + 1) >> 11) * 0x1p-53;
        double r = sqrt(-2.0 * log(u1 > 0 ? u1 : 0x1p-53)) * std;
        w[i] = (float)(r * cos(2 * M_PI * u2));
        if (i + 1 < n) w[i + 1] = (float)(r * sin(2 * M_PI * u2));
    }
}

/* HF's BertPreTrainedModel._init_weights for fresh layers */
static void init_stack(qac_bert_params *p, const qac_bert_config *c, uint64_t seed) {
    for (int i = QAC_BERT_LAYER_FIRST; i < QAC_BERT_LAYER_END; i++) {
        float *w = view(p, i);
        size_t n = qac_bert_tensor_size(c, i);
        const char *name = qac_bert_tensor_name(i);
        size_t len = strlen(name);
        if (!strcmp(name + len - 2, "_w") && strncmp(name, "ln", 2))
            normal_fill(w, n, 0.02, qac_rng_key(seed, STREAM_HEAD_INIT, (uint64_t)i, 0));
        else
            for (size_t j = 0; j < n; j++) w[j] = strncmp(name, "ln", 2) || name[len - 1] == 'b' ? 0.0f : 1.0f;
    }
}

static void add_tensor(qac_pretrainer *t, float *p, float *g, size_t n, int decay) {
    if (!n) return; /* a tensor the family lacks */
    size_t off = (size_t)(g - t->grad_mem);
    t->tensors[t->n_tensors++] = (qac_pt_tensor){p, g, t->adam_m + off, t->adam_v + off, n, decay};
}

/* The device copy of [encoder | heads] and its optimiser: the segments of
 * the flat block in order, the untrained pooler a gap between the encoder's
 * trained tensors and the heads. */
static qac_status gpu_create(qac_pretrainer *t) {
    qac_cuda_pt_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.cfg = t->m->cfg;
    sp.objective = t->ob.objective;
    sp.head_layers = t->ob.objective == QAC_PT_QGEN ? t->qc.layers : t->hc.num_layers;
    sp.window = t->qc.window;
    sp.skip_from = t->ob.skip_from;
    sp.mean_pooling = t->ob.pooling == QAC_POOL_MEAN;
    sp.recompute = t->o.recompute;
    sp.normalize = t->ob.normalize != 0;
    sp.tau = t->ob.tau;
    sp.alpha = t->ob.alpha;
    sp.p_hidden = t->drop.hidden, sp.p_attn = t->drop.attn;
    sp.prec = t->o.gpu_precision;
    sp.max_grad_norm = t->o.max_grad_norm, sp.beta1 = t->o.beta1, sp.beta2 = t->o.beta2, sp.eps = t->o.adam_eps;
    sp.wd = t->o.weight_decay;
    sp.n_enc = t->m->n_params, sp.n_head = t->n_head;
    size_t end = 0;
    for (int i = 0; i < t->n_tensors; i++) {
        size_t off = (size_t)(t->tensors[i].g - t->grad_mem);
        if (sp.n_seg + 2 > QAC_CUDA_PT_MAX_SEGMENTS)
            return qac_set_error(QAC_ERR_UNSUPPORTED, "pretrain --device cuda: more than %d tensors",
                                 QAC_CUDA_PT_MAX_SEGMENTS);
        if (off > end) sp.seg_end[sp.n_seg] = off, sp.seg_decay[sp.n_seg++] = -1; /* untrained gap */
        end = off + t->tensors[i].n;
        sp.seg_end[sp.n_seg] = end, sp.seg_decay[sp.n_seg++] = t->tensors[i].decay;
    }
    if (end != t->n_grad) return qac_set_error(QAC_ERR_INTERNAL, "pretrain: the tensors do not cover the flat block");
    return qac_cuda_pretrainer_create(&t->gpu, &sp, t->m->param_mem, t->head_mem);
}

qac_status qac_pretrainer_create(qac_pretrainer **out, qac_model *m, const qac_train_opts *o,
                                 const qac_pt_objective_opts *ob) {
    *out = NULL;
    const qac_bert_config *c = &m->cfg;
    if (!(o->lr >= 0) || o->total_steps < 1 || o->warmup_steps < 0 || !(o->beta1 >= 0 && o->beta1 < 1) ||
        !(o->beta2 >= 0 && o->beta2 < 1) || !(o->adam_eps > 0))
        return qac_set_error(QAC_ERR_INVALID, "pretrain: bad optimiser options (lr %g, steps %ld, warmup %ld)", o->lr,
                             o->total_steps, o->warmup_steps);
    if (ob->objective != QAC_PT_COCONDENSER && ob->objective != QAC_PT_COTMAE && ob->objective != QAC_PT_QGEN)
        return qac_set_error(QAC_ERR_INVALID, "pretrain: unknown objective %d", (int)ob->objective);
    if (c->num_layers > QAC_MAX_LAYERS) return qac_set_error(QAC_ERR_UNSUPPORTED, "pretrain: more than %d layers", QAC_MAX_LAYERS);
    if (c->family != QAC_FAMILY_BERT)
        return qac_set_error(QAC_ERR_UNSUPPORTED,
                             "pretrain: the model is %s; pre-training runs BERT encoders only (its heads are BERT "
                             "layers and BERT's MLM head): fine-tune a %s model with qac finetune",
                             qac_family_name(c->family), qac_family_name(c->family));
    qac_pretrainer *t = calloc(1, sizeof *t);
    if (!t) return qac_set_error(QAC_ERR_NOMEM, "pretrain: out of memory");
    t->m = m;
    t->o = *o;
    t->ob = *ob;
    if (!(ob->pooling == QAC_PT_POOL_CHECKPOINT || ob->pooling == QAC_POOL_CLS || ob->pooling == QAC_POOL_MEAN) ||
        !(ob->normalize == QAC_PT_NORM_CHECKPOINT || ob->normalize == 0 || ob->normalize == 1)) {
        free(t);
        return qac_set_error(QAC_ERR_INVALID, "pretrain: unknown pooling %d / normalize %d", ob->pooling, ob->normalize);
    }
    { /* from here on t->ob holds the resolved choice */
        qac_pooling pool;
        qac_pt_pooling_resolve(ob, m, &pool, &t->ob.normalize);
        t->ob.pooling = (int)pool;
    }
    if (t->ob.head_layers <= 0) t->ob.head_layers = ob->objective == QAC_PT_COCONDENSER ? 2 : 1;
    if (t->ob.skip_from < 0) t->ob.skip_from = c->num_layers / 2;
    qac_status st = QAC_OK;
    float rate = ob->objective == QAC_PT_COCONDENSER ? ob->mask_rate : ob->enc_mask_rate;
    if (t->ob.head_layers > QAC_MAX_LAYERS)
        st = qac_set_error(QAC_ERR_INVALID, "pretrain: --head-layers %d is more than %d", t->ob.head_layers, QAC_MAX_LAYERS);
    else if (ob->objective == QAC_PT_COCONDENSER && t->ob.skip_from >= c->num_layers)
        st = qac_set_error(QAC_ERR_INVALID, "pretrain: --skip-from %d must be below the encoder's %d layers",
                           t->ob.skip_from, c->num_layers);
    else if (!(rate > 0 && rate <= 1) || (ob->objective == QAC_PT_COTMAE && !(ob->dec_mask_rate > 0 && ob->dec_mask_rate <= 1)))
        st = qac_set_error(QAC_ERR_INVALID, "pretrain: mask rates must be in (0, 1]");
    else if (!(ob->tau > 0) || !(ob->alpha >= 0 && ob->alpha <= 1))
        st = qac_set_error(QAC_ERR_INVALID, "pretrain: tau must be > 0 and alpha in [0, 1]");
    t->drop.hidden = o->hidden_dropout >= 0 ? o->hidden_dropout : c->hidden_dropout;
    t->drop.attn = o->attn_dropout >= 0 ? o->attn_dropout : c->attn_dropout;
    if (!st && !(t->drop.hidden >= 0 && t->drop.hidden < 1 && t->drop.attn >= 0 && t->drop.attn < 1))
        st = qac_set_error(QAC_ERR_INVALID, "pretrain: dropout must be in [0, 1)");
    if (st) {
        free(t);
        return st;
    }
    int C = c->hidden_size, V = c->vocab_size, qgen = ob->objective == QAC_PT_QGEN;
    t->hc = *c;
    t->hc.num_layers = qgen ? 0 : t->ob.head_layers;
    qac_qgen_config_default(&t->qc, c);
    t->qc.layers = t->ob.head_layers;
    t->qc.window = ob->window;
    t->qc.pooling = (qac_pooling)t->ob.pooling;
    size_t n_stack = qgen ? qac_qgen_param_count(&t->qc) : qac_bert_stack_param_count(&t->hc);
    size_t n_mlm = qac_mlm_param_count(C, V);
    t->n_head = n_stack + n_mlm;
    t->n_grad = m->n_params + t->n_head;
    t->head_mem = malloc(t->n_head * sizeof(float));
    t->grad_mem = calloc(t->n_grad, sizeof(float));
    t->adam_m = calloc(t->n_grad, sizeof(float));
    t->adam_v = calloc(t->n_grad, sizeof(float));
    if (!t->head_mem || !t->grad_mem || !t->adam_m || !t->adam_v) {
        qac_pretrainer_free(t);
        return qac_set_error(QAC_ERR_NOMEM, "pretrain: cannot allocate %zu parameters' gradients and optimiser state",
                             t->n_grad);
    }
    qac_mlm_bind(&t->mlm, t->head_mem + n_stack, C, V);
    qac_bert_params_bind(&t->g, c, t->grad_mem);
    qac_mlm_bind(&t->mg, t->grad_mem + m->n_params + n_stack, C, V);
    if (qgen) {
        qac_qgen_bind(&t->qp, &t->qc, t->head_mem);
        qac_qgen_bind(&t->qg, &t->qc, t->grad_mem + m->n_params);
        qac_qgen_init(&t->qp, &t->qc, o->seed);
    } else {
        qac_bert_stack_bind(&t->hp, &t->hc, t->head_mem);
        qac_bert_stack_bind(&t->hg, &t->hc, t->grad_mem + m->n_params);
        init_stack(&t->hp, &t->hc, o->seed);
    }
    qac_mlm_init(&t->mlm, C, V, o->seed);
    /* the trained tensors: the encoder's but the pooler (no gradient, so
     * torch would not update it), the head layers, the MLM head */
    for (int i = 0; i < QAC_BERT_NUM_TENSORS - 2; i++)
        add_tensor(t, view(&m->p, i), view(&t->g, i), qac_bert_tensor_size(c, i), enc_decays[i]);
    for (int i = QAC_BERT_LAYER_FIRST; i < QAC_BERT_LAYER_END && !qgen; i++)
        add_tensor(t, view(&t->hp, i), view(&t->hg, i), qac_bert_tensor_size(&t->hc, i), enc_decays[i]);
    for (int i = 0; i < QAC_QGEN_NUM_TENSORS && qgen; i++) { /* decay on the four matrices */
        const char *name = qac_qgen_tensor_name(i);
        size_t len = strlen(name);
        add_tensor(t, ((float **)&t->qp)[i], ((float **)&t->qg)[i], qac_qgen_tensor_size(&t->qc, i),
                   !strcmp(name + len - 2, "_w") && strncmp(name, "ln", 2));
    }
    float *mp[QAC_MLM_NUM_TENSORS] = {t->mlm.dense_w, t->mlm.dense_b, t->mlm.ln_w, t->mlm.ln_b, t->mlm.bias};
    float *mgv[QAC_MLM_NUM_TENSORS] = {t->mg.dense_w, t->mg.dense_b, t->mg.ln_w, t->mg.ln_b, t->mg.bias};
    size_t mn[QAC_MLM_NUM_TENSORS] = {(size_t)C * C, (size_t)C, (size_t)C, (size_t)C, (size_t)V};
    for (int i = 0; i < QAC_MLM_NUM_TENSORS; i++) add_tensor(t, mp[i], mgv[i], mn[i], i == 0);
    if ((st = qac_pool_create(&t->pool, o->threads)) || (st = qac_bert_pack(&t->pk, c, &m->p)) ||
        (!qgen && (st = qac_bert_pack(&t->hpk, &t->hc, &t->hp))) ||
        (o->device == QAC_DEVICE_CUDA && (st = gpu_create(t)))) {
        qac_pretrainer_free(t);
        return st;
    }
    *out = t;
    return QAC_OK;
}

/* A BertForMaskedLM checkpoint carries the MLM head as cls.predictions.*
 * (older conversions: LayerNorm gamma/beta, decoder.bias); the decoder
 * itself is tied to the word embeddings. */
qac_status qac_pretrainer_load_mlm_head(qac_pretrainer *t, const char *dir, int *found) {
    *found = 0;
    char path[4096];
    qac_status st = qac_path_join(path, sizeof path, dir, "model.safetensors");
    if (st) return st;
    qac_safetensors *sf = NULL;
    if (qac_safetensors_open(&sf, path) != QAC_OK) return QAC_OK; /* the model loaded; nothing to add */
    static const char *names[QAC_MLM_NUM_TENSORS][2] = {
        {"cls.predictions.transform.dense.weight", NULL},
        {"cls.predictions.transform.dense.bias", NULL},
        {"cls.predictions.transform.LayerNorm.weight", "cls.predictions.transform.LayerNorm.gamma"},
        {"cls.predictions.transform.LayerNorm.bias", "cls.predictions.transform.LayerNorm.beta"},
        {"cls.predictions.bias", "cls.predictions.decoder.bias"}};
    int C = t->m->cfg.hidden_size, V = t->m->cfg.vocab_size;
    float *views[QAC_MLM_NUM_TENSORS] = {t->mlm.dense_w, t->mlm.dense_b, t->mlm.ln_w, t->mlm.ln_b, t->mlm.bias};
    uint64_t sizes[QAC_MLM_NUM_TENSORS] = {(uint64_t)C * C, (uint64_t)C, (uint64_t)C, (uint64_t)C, (uint64_t)V};
    const qac_st_tensor *ts[QAC_MLM_NUM_TENSORS];
    int have = 0;
    for (int i = 0; i < QAC_MLM_NUM_TENSORS; i++) {
        ts[i] = qac_safetensors_find(sf, names[i][0]);
        if (!ts[i] && names[i][1]) ts[i] = qac_safetensors_find(sf, names[i][1]);
        have += ts[i] != NULL;
    }
    if (have == 0) {
        qac_safetensors_close(sf);
        return QAC_OK;
    }
    for (int i = 0; i < QAC_MLM_NUM_TENSORS && !st; i++) {
        if (!ts[i])
            st = qac_set_error(QAC_ERR_FORMAT, "%s: has part of an MLM head but no %s", path, names[i][0]);
        else if (ts[i]->numel != sizes[i])
            st = qac_set_error(QAC_ERR_FORMAT, "%s: %s has %llu values, expected %llu", path, ts[i]->name,
                               (unsigned long long)ts[i]->numel, (unsigned long long)sizes[i]);
        else
            st = qac_safetensors_read_f32(ts[i], views[i]);
    }
    qac_safetensors_close(sf);
    if (!st) *found = 1;
    if (!st && t->gpu) st = qac_cuda_pretrainer_upload(t->gpu, NULL, t->head_mem, NULL, NULL);
    return st;
}

static void side_free(qac_pt_side *s) {
    qac_bert_acts_free(&s->enc), qac_bert_acts_free(&s->head);
    free(s->dlast), free(s->dmid), free(s->dhead), free(s->x), free(s->emb), free(s->mean), free(s->rstd);
    free(s->dpool);
}

void qac_pretrainer_free(qac_pretrainer *t) {
    if (!t) return;
    qac_cuda_pretrainer_free(t->gpu);
    free(t->head_mem), free(t->grad_mem), free(t->adam_m), free(t->adam_v);
    qac_bert_packed_free(&t->pk), qac_bert_packed_free(&t->hpk);
    qac_bert_bwd_free(&t->ebwd), qac_bert_bwd_free(&t->hbwd);
    side_free(&t->side[0]), side_free(&t->side[1]);
    qac_qgen_acts_free(&t->qa);
    qac_mlm_ws_free(&t->mlm_ws);
    free(t->rows), free(t->drows), free(t->cls), free(t->dcls), free(t->scratch), free(t->rlab), free(t->seq_ids);
    free(t->pooled), free(t->dpooled);
    qac_pool_free(t->pool);
    free(t);
}

/* (the qgen decoder packs its weights in every forward) */
void qac_pretrainer_heads_changed(qac_pretrainer *t) {
    if (t->ob.objective != QAC_PT_QGEN) qac_bert_repack(&t->hpk, &t->hc, &t->hp, t->pool);
}

qac_status qac_pretrainer_params_changed(qac_pretrainer *t) {
    if (!t->gpu) return QAC_OK;
    return qac_cuda_pretrainer_upload(t->gpu, t->m->param_mem, t->head_mem, NULL, NULL);
}

qac_status qac_pretrainer_sync_host(qac_pretrainer *t) {
    if (!t->gpu || !t->host_stale) return QAC_OK;
    qac_status st = qac_cuda_pretrainer_download(t->gpu, t->m->param_mem, t->head_mem, NULL, t->adam_m, t->adam_v);
    if (st) return st;
    qac_bert_repack(&t->pk, &t->m->cfg, &t->m->p, t->pool);
    qac_pretrainer_heads_changed(t);
    qac_model_update_fingerprint(t->m);
    t->host_stale = 0;
    return QAC_OK;
}

static qac_status grow(float **p, size_t n) {
    float *q = realloc(*p, (n ? n : 1) * sizeof *q);
    if (!q) return qac_set_error(QAC_ERR_NOMEM, "pretrain: out of memory");
    *p = q;
    return QAC_OK;
}

/* Size one side's buffers for B sequences of length T through the encoder
 * and hT through the head. */
static qac_status side_alloc(qac_pretrainer *t, qac_pt_side *s, int B, int T, int hT) {
    const qac_bert_config *c = &t->m->cfg;
    int mode = t->o.recompute ? QAC_ACTS_RECOMPUTE : QAC_ACTS_KEEP, nt = qac_pool_size(t->pool);
    qac_status st = qac_bert_acts_alloc(&s->enc, c, B, T, mode, nt);
    if (!st) st = qac_bert_acts_alloc(&s->head, &t->hc, B, hT, mode, nt);
    size_t need = (size_t)B * (T > hT ? T : hT) * c->hidden_size;
    if (!st && need > s->cap) {
        if ((st = grow(&s->dlast, need)) || (st = grow(&s->dmid, need)) || (st = grow(&s->dhead, need)) ||
            (st = grow(&s->x, need)) || (st = grow(&s->emb, need)) || (st = grow(&s->dpool, need)) ||
            (st = grow(&s->mean, need / c->hidden_size)) ||
            (st = grow(&s->rstd, need / c->hidden_size)))
            return st;
        s->cap = need;
    }
    s->T = T, s->hT = hT;
    return st;
}

static void dropout_for(const qac_pretrainer *t, qac_dropout *d, uint32_t stream, int side, int B) {
    *d = t->drop;
    d->key = qac_rng_key(t->o.seed, (uint64_t)t->step, stream, 0);
    d->seq_ids = t->seq_ids + (size_t)side * B;
}

static int count_labels(const qac_pt_seqs *s, int B) {
    int M = 0;
    for (size_t i = 0; i < (size_t)B * s->T; i++) M += s->labels[i] >= 0;
    return M;
}

/* One MLM loss over the labelled positions of both sides: states[s] [B,T_s,C]
 * with seqs[s]'s labels; dL/dstates is added into d[s]. */
static qac_status mlm_both(qac_pretrainer *t, double *loss, const float *const states[2], float *const d[2],
                           const qac_pt_seqs *const seqs[2], int B) {
    int C = t->m->cfg.hidden_size, V = t->m->cfg.vocab_size, M = 0;
    for (int s = 0; s < 2; s++)
        for (size_t i = 0; i < (size_t)B * seqs[s]->T; i++)
            if (seqs[s]->labels[i] >= 0) {
                memcpy(t->rows + (size_t)M * C, states[s] + i * C, (size_t)C * sizeof(float));
                t->rlab[M++] = seqs[s]->labels[i];
            }
    qac_status st = qac_mlm_loss_ws(&t->mlm_ws, loss, t->drows, &t->mg, t->g.word_emb, &t->mlm, t->m->p.word_emb, t->rows, t->rlab, M,
                                 C, V, t->m->cfg.layer_norm_eps, t->pool);
    if (st || M == 0) return st;
    M = 0;
    for (int s = 0; s < 2; s++)
        for (size_t i = 0; i < (size_t)B * seqs[s]->T; i++)
            if (seqs[s]->labels[i] >= 0) {
                float *dst = d[s] + i * C;
                const float *src = t->drows + (size_t)(M++) * C;
                for (int k = 0; k < C; k++) dst[k] += src[k];
            }
    return QAC_OK;
}

static qac_status check_batch(const qac_pretrainer *t, const qac_pt_batch *b) {
    const qac_pt_seqs *all[4] = {&b->a, &b->b, &b->da, &b->db};
    int n = t->ob.objective == QAC_PT_COTMAE ? 4 : 2, V = t->m->cfg.vocab_size;
    if (b->B < 1 || (t->ob.objective == QAC_PT_COCONDENSER && b->B < 2 && t->ob.alpha <= 0))
        return qac_set_error(QAC_ERR_INVALID, "pretrain: a batch needs at least %d pairs",
                             t->ob.objective == QAC_PT_COCONDENSER ? 2 : 1);
    for (int k = 0; k < n; k++) {
        const qac_pt_seqs *s = all[k];
        int labelled = !(t->ob.objective == QAC_PT_QGEN && k == 1);
        if (!s->ids || (labelled && !s->labels) || !s->lens || s->T < 1 || s->T > t->m->cfg.max_position)
            return qac_set_error(QAC_ERR_INVALID, "pretrain: batch part %d missing or too long (T %d)", k, s->T);
        for (size_t i = 0; i < (size_t)b->B * s->T; i++)
            if (s->ids[i] < 0 || s->ids[i] >= V)
                return qac_set_error(QAC_ERR_INVALID, "pretrain: token id %d out of the vocabulary", s->ids[i]);
    }
    return QAC_OK;
}

/* Work buffers for the step: per-side activations, rows for the MLM head,
 * [CLS] vectors, sequence ids for dropout. */
static qac_status step_alloc(qac_pretrainer *t, const qac_pt_batch *b) {
    int B = b->B, C = t->m->cfg.hidden_size, cot = t->ob.objective == QAC_PT_COTMAE;
    if (t->ob.objective == QAC_PT_QGEN) {
        int mode = t->o.recompute ? QAC_ACTS_RECOMPUTE : QAC_ACTS_KEEP;
        qac_status st = qac_bert_acts_alloc(&t->side[0].enc, &t->m->cfg, B, b->a.T, mode, qac_pool_size(t->pool));
        if (!st) st = qac_bert_bwd_alloc(&t->ebwd, &t->m->cfg, B, b->a.T);
        if (!st) st = qac_qgen_acts_alloc(&t->qa, &t->qc, B, b->b.T);
        if (!st && B > t->seq_cap) {
            uint64_t *q = realloc(t->seq_ids, (size_t)B * sizeof *q);
            if (!q) return qac_set_error(QAC_ERR_NOMEM, "pretrain: out of memory");
            t->seq_ids = q, t->seq_cap = B;
        }
        for (int i = 0; i < B && !st; i++) t->seq_ids[i] = (uint64_t)i;
        return st;
    }
    qac_status st = side_alloc(t, &t->side[0], B, b->a.T, cot ? b->da.T : b->a.T);
    if (!st) st = side_alloc(t, &t->side[1], B, b->b.T, cot ? b->db.T : b->b.T);
    if (st) return st;
    int M = count_labels(&b->a, B) + count_labels(&b->b, B);
    if (cot) {
        int Md = count_labels(&b->da, B) + count_labels(&b->db, B);
        M = Md > M ? Md : M;
    }
    if ((size_t)M + 2 * (size_t)B > t->rows_cap) {
        size_t n = (size_t)M + 2 * (size_t)B;
        int32_t *l = realloc(t->rlab, n * sizeof *l);
        if (!l) return qac_set_error(QAC_ERR_NOMEM, "pretrain: out of memory");
        t->rlab = l;
        if ((st = grow(&t->rows, n * C)) || (st = grow(&t->drows, n * C)) || (st = grow(&t->cls, n * C)) ||
            (st = grow(&t->dcls, n * C)) || (st = grow(&t->pooled, n * C)) || (st = grow(&t->dpooled, n * C)))
            return st;
        t->rows_cap = n;
    }
    size_t scratch = 2 * (size_t)B * (b->da.T > b->db.T ? b->da.T : b->db.T) * C;
    if (cot && scratch > t->scratch_cap) {
        if ((st = grow(&t->scratch, scratch))) return st;
        t->scratch_cap = scratch;
    }
    if (2 * B > t->seq_cap) {
        uint64_t *s = realloc(t->seq_ids, 2 * (size_t)B * sizeof *s);
        if (!s) return qac_set_error(QAC_ERR_NOMEM, "pretrain: out of memory");
        t->seq_ids = s;
        t->seq_cap = 2 * B;
    }
    for (int i = 0; i < 2 * B; i++) t->seq_ids[i] = (uint64_t)i;
    return QAC_OK;
}

/* both sides through the encoder (activations kept) */
static qac_status encode_sides(qac_pretrainer *t, const qac_pt_batch *b) {
    const qac_pt_seqs *seqs[2] = {&b->a, &b->b};
    for (int s = 0; s < 2; s++) {
        qac_dropout d;
        dropout_for(t, &d, STREAM_DROP, s, b->B);
        qac_status st = qac_bert_forward_train(&t->side[s].enc, &t->m->cfg, &t->m->p, &t->pk, seqs[s]->ids, NULL,
                                               seqs[s]->lens, b->B, seqs[s]->T, &d, t->pool);
        if (st) return st;
    }
    return QAC_OK;
}

/* the head stack of side s on x [B,hT,C] */
static qac_status head_forward(qac_pretrainer *t, int s, const float *x, const int *lens, int B) {
    qac_dropout d;
    dropout_for(t, &d, STREAM_HEAD_DROP, s, B);
    return qac_bert_layers_forward(&t->side[s].head, &t->hc, &t->hp, &t->hpk, x, lens, B, t->side[s].hT, &d, t->pool);
}

/* dL/d(head input) of side s into t->hbwd.dy, from side->dhead */
static qac_status head_backward(qac_pretrainer *t, int s, const int *lens, int B) {
    qac_pt_side *sd = &t->side[s];
    qac_dropout d;
    dropout_for(t, &d, STREAM_HEAD_DROP, s, B);
    qac_status st = qac_bert_bwd_alloc(&t->hbwd, &t->hc, B, sd->hT);
    if (!st)
        st = qac_bert_layers_backward(&t->hg, &t->hbwd, sd->dhead, &sd->head, &t->hc, &t->hp, &t->hpk, lens, B, sd->hT,
                                      &d, t->pool);
    return st;
}

static qac_status encoder_backward(qac_pretrainer *t, int s, const qac_pt_seqs *seqs, int B, const float *dmid) {
    qac_pt_side *sd = &t->side[s];
    const float *dh[QAC_MAX_LAYERS + 1] = {0};
    dh[t->m->cfg.num_layers] = sd->dlast;
    if (dmid) dh[t->ob.skip_from] = dmid;
    qac_dropout d;
    dropout_for(t, &d, STREAM_DROP, s, B);
    qac_status st = qac_bert_bwd_alloc(&t->ebwd, &t->m->cfg, B, seqs->T);
    if (!st)
        st = qac_bert_backward(&t->g, &t->ebwd, dh, &sd->enc, &t->m->cfg, &t->m->p, &t->pk, seqs->ids, NULL, seqs->lens,
                               B, seqs->T, &d, t->pool);
    return st;
}

/* Side s's pooled vectors [B,C] (the chosen pooling over its last layer,
 * before normalisation) into t->pooled + s*B*C: the heads' bottleneck. */
static float *pool_side(qac_pretrainer *t, int s, const qac_pt_seqs *seqs, int B) {
    int C = t->m->cfg.hidden_size;
    float *out = t->pooled + (size_t)s * B * C;
    qac_pooling_forward(out, t->side[s].enc.last, seqs->lens, B, seqs->T, C, (qac_pooling)t->ob.pooling, 0);
    return out;
}

/* dL/d(pooled) [B,C] of side s back through the pooling, added into its
 * last-layer gradient */
static void pool_side_backward(qac_pretrainer *t, int s, const float *dpooled, const qac_pt_seqs *seqs, int B) {
    qac_pt_side *sd = &t->side[s];
    int C = t->m->cfg.hidden_size;
    size_t NC = (size_t)B * seqs->T * C;
    qac_pooling_backward(sd->dpool, dpooled, sd->enc.last, seqs->lens, B, seqs->T, C, (qac_pooling)t->ob.pooling, 0);
    for (size_t i = 0; i < NC; i++) sd->dlast[i] += sd->dpool[i];
}

/* coCondenser: MLM on the last layer (late MLM) and on the Condenser head,
 * plus the contrastive (or PAIR) loss over the pairs' representations: the
 * pooled vectors, L2-normalised when t->ob.normalize; the head reads the
 * pooled vector before normalisation at position 0 */
static qac_status grads_cocondenser(qac_pretrainer *t, const qac_pt_batch *b, qac_pt_losses *out) {
    const qac_bert_config *c = &t->m->cfg;
    int B = b->B, C = c->hidden_size, norm = t->ob.normalize;
    const qac_pt_seqs *seqs[2] = {&b->a, &b->b};
    qac_status st = encode_sides(t, b);
    for (int s = 0; s < 2 && !st; s++) {
        qac_pt_side *sd = &t->side[s];
        size_t NC = (size_t)B * sd->T * C;
        const float *bottleneck = pool_side(t, s, seqs[s], B);
        qac_condenser_input(sd->x, bottleneck, sd->enc.hidden + (size_t)t->ob.skip_from * NC, B, sd->T, C);
        st = head_forward(t, s, sd->x, seqs[s]->lens, B);
        memset(sd->dlast, 0, NC * sizeof(float)), memset(sd->dmid, 0, NC * sizeof(float));
        memset(sd->dhead, 0, NC * sizeof(float));
    }
    if (st) return st;
    const float *heads[2] = {t->side[0].head.last, t->side[1].head.last};
    const float *lasts[2] = {t->side[0].enc.last, t->side[1].enc.last};
    float *const dheads[2] = {t->side[0].dhead, t->side[1].dhead};
    float *const dlasts[2] = {t->side[0].dlast, t->side[1].dlast};
    if ((st = mlm_both(t, &out->head, heads, dheads, seqs, B)) || (st = mlm_both(t, &out->mlm, lasts, dlasts, seqs, B)))
        return st;
    /* the representations: rep[s] [B,C] (normalised when asked) in dpooled
     * for now; cls gets them in the loss's row order, dcls its gradient */
    float *cls = t->cls, *dcls = t->dcls, *rep = t->dpooled;
    for (int s = 0; s < 2; s++)
        qac_pooling_forward(rep + (size_t)s * B * C, lasts[s], seqs[s]->lens, B, seqs[s]->T, C,
                            (qac_pooling)t->ob.pooling, norm);
    /* row of side s, pair i: PAIR takes queries (b) as q and passages (a)
     * as their one positive each; the contrastive loss siblings adjacent */
#define REP_ROW(s, i) (t->ob.alpha > 0 ? (size_t)(1 - (s)) * B + (i) : 2 * (size_t)(i) + (s))
    for (int i = 0; i < B; i++)
        for (int s = 0; s < 2; s++)
            memcpy(cls + REP_ROW(s, i) * C, rep + ((size_t)s * B + i) * C, (size_t)C * sizeof(float));
    if (t->ob.alpha > 0)
        st = qac_pair_loss(&out->contrastive, dcls, dcls + (size_t)B * C, cls, cls + (size_t)B * C, B, 1, C, t->ob.alpha);
    else
        st = qac_cocondenser_loss(&out->contrastive, dcls, cls, 2 * B, C, t->ob.tau);
    /* back through the normalisation (x: the pooled vector) and the pooling */
    for (int s = 0; s < 2 && !st; s++) {
        float *dp = t->dpooled + (size_t)s * B * C;
        for (int i = 0; i < B; i++) {
            const float *g = dcls + REP_ROW(s, i) * C;
            if (norm)
                qac_l2norm_backward(dp + (size_t)i * C, g, t->pooled + ((size_t)s * B + i) * C, C);
            else
                memcpy(dp + (size_t)i * C, g, (size_t)C * sizeof(float));
        }
        pool_side_backward(t, s, dp, seqs[s], B);
    }
#undef REP_ROW
    for (int s = 0; s < 2 && !st; s++) {
        qac_pt_side *sd = &t->side[s];
        if (!(st = head_backward(t, s, seqs[s]->lens, B))) {
            float *dp = t->dpooled + (size_t)s * B * C;
            memset(dp, 0, (size_t)B * C * sizeof(float));
            qac_condenser_input_backward(dp, sd->dmid, t->hbwd.dy, B, sd->T, C);
            pool_side_backward(t, s, dp, seqs[s], B);
            st = encoder_backward(t, s, seqs[s], B, sd->dmid);
        }
    }
    return st;
}

/* The released CoT-MAE decoder reads the other text through the encoder's
 * embedding module in train mode, so its embedding dropout applies to
 * positions 1.. (position 0 is the [CLS] put in afterwards). Masks: the
 * heads' stream at (layer 0, site EMB), which their layers never draw.
 * The same call on dL/dx is the backward. */
static void decoder_input_dropout(qac_pretrainer *t, float *x, int s, int B, int T) {
    qac_dropout d;
    dropout_for(t, &d, STREAM_HEAD_DROP, s, B);
    if (!qac_dropout_active(&d, QAC_DROP_EMB)) return;
    int C = t->m->cfg.hidden_size;
    float *keep = t->dcls + (size_t)B * C; /* position 0 of every row, put back after */
    for (int b = 0; b < B; b++) memcpy(keep + (size_t)b * C, x + (size_t)b * T * C, (size_t)C * sizeof(float));
    qac_dropout_forward(x, x, NULL, &d, 0, QAC_DROP_EMB, B, T, C, t->pool);
    for (int b = 0; b < B; b++) memcpy(x + (size_t)b * T * C, keep + (size_t)b * C, (size_t)C * sizeof(float));
}

/* CoT-MAE: encoder MLM, and a decoder per side that reconstructs the other
 * text (masked at the decoder rate) from this side's bottleneck (its [CLS],
 * or its mean for a mean-pooled choice) */
static qac_status grads_cotmae(qac_pretrainer *t, const qac_pt_batch *b, qac_pt_losses *out) {
    const qac_bert_config *c = &t->m->cfg;
    int B = b->B, C = c->hidden_size;
    const qac_pt_seqs *seqs[2] = {&b->a, &b->b}, *dseqs[2] = {&b->da, &b->db};
    qac_status st = encode_sides(t, b);
    for (int s = 0; s < 2 && !st; s++) {
        qac_pt_side *sd = &t->side[s];
        const float *cls = pool_side(t, s, seqs[s], B); /* the bottleneck, never normalised */
        qac_cotmae_input(sd->x, sd->emb, sd->mean, sd->rstd, dseqs[s]->ids, cls, c, &t->m->p, B, sd->hT, t->pool);
        decoder_input_dropout(t, sd->x, s, B, sd->hT);
        st = head_forward(t, s, sd->x, dseqs[s]->lens, B);
        memset(sd->dlast, 0, (size_t)B * sd->T * C * sizeof(float));
        memset(sd->dhead, 0, (size_t)B * sd->hT * C * sizeof(float));
    }
    if (st) return st;
    const float *heads[2] = {t->side[0].head.last, t->side[1].head.last};
    const float *lasts[2] = {t->side[0].enc.last, t->side[1].enc.last};
    float *const dheads[2] = {t->side[0].dhead, t->side[1].dhead};
    float *const dlasts[2] = {t->side[0].dlast, t->side[1].dlast};
    if ((st = mlm_both(t, &out->head, heads, dheads, dseqs, B)) || (st = mlm_both(t, &out->mlm, lasts, dlasts, seqs, B)))
        return st;
    out->contrastive = 0;
    for (int s = 0; s < 2 && !st; s++) {
        qac_pt_side *sd = &t->side[s];
        if ((st = head_backward(t, s, dseqs[s]->lens, B))) break;
        memset(t->dcls, 0, (size_t)B * C * sizeof(float));
        decoder_input_dropout(t, t->hbwd.dy, s, B, sd->hT);
        qac_cotmae_input_backward(t->dcls, &t->g, t->hbwd.dy, sd->emb, sd->mean, sd->rstd, dseqs[s]->ids, c, &t->m->p,
                                  B, sd->hT, t->scratch, t->pool);
        pool_side_backward(t, s, t->dcls, seqs[s], B);
        st = encoder_backward(t, s, seqs[s], B, NULL);
    }
    return st;
}

/* query generation: the passage (a) through the encoder with MLM, the
 * decoder generating its unmasked query (b) from the passage [CLS]
 * (trainer/qgen.c runs the whole objective) */
static qac_status grads_qgen(qac_pretrainer *t, const qac_pt_batch *b, qac_pt_losses *out) {
    qac_dropout d;
    dropout_for(t, &d, STREAM_DROP, 0, b->B);
    qac_qgen_batch qb = {b->B, b->a.T, b->b.T, b->a.ids, b->a.labels, b->a.lens, b->b.ids, b->b.lens};
    qac_qgen_losses l;
    qac_status st = qac_qgen_objective_grads(&l, &qb, &t->m->cfg, &t->m->p, &t->pk, &t->g, &t->side[0].enc, &t->ebwd,
                                             &d, &t->qc, &t->qp, &t->qg, &t->qa, &t->mlm, &t->mg, t->pool);
    out->mlm = l.enc_mlm, out->head = l.dec, out->contrastive = 0;
    return st;
}

/* the step on the GPU, its gradients left there */
static qac_status gpu_grads(qac_pretrainer *t, const qac_pt_batch *b, qac_pt_losses *out) {
    memset(out, 0, sizeof *out);
    qac_status st = check_batch(t, b);
    if (st) return st;
    qac_cuda_pt_seqs a = {b->a.T, b->a.ids, b->a.labels, b->a.lens}, bb = {b->b.T, b->b.ids, b->b.labels, b->b.lens};
    qac_cuda_pt_seqs da = {b->da.T, b->da.ids, b->da.labels, b->da.lens};
    qac_cuda_pt_seqs db = {b->db.T, b->db.ids, b->db.labels, b->db.lens};
    const int cot = t->ob.objective == QAC_PT_COTMAE;
    double l[3];
    st = qac_cuda_pretrainer_grads(t->gpu, b->B, &a, &bb, cot ? &da : NULL, cot ? &db : NULL,
                                   qac_rng_key(t->o.seed, (uint64_t)t->step, STREAM_DROP, 0),
                                   qac_rng_key(t->o.seed, (uint64_t)t->step, STREAM_HEAD_DROP, 0), l);
    out->mlm = l[0], out->head = l[1], out->contrastive = l[2];
    out->total = out->mlm + out->head + out->contrastive;
    return st;
}

qac_status qac_pretrainer_grads(qac_pretrainer *t, const qac_pt_batch *b, qac_pt_losses *out) {
    if (t->gpu) {
        qac_status st = gpu_grads(t, b, out);
        return st ? st : qac_cuda_pretrainer_download(t->gpu, NULL, NULL, t->grad_mem, NULL, NULL);
    }
    memset(out, 0, sizeof *out);
    qac_status st = check_batch(t, b);
    if (!st) st = step_alloc(t, b);
    if (st) return st;
    memset(t->grad_mem, 0, t->n_grad * sizeof(float));
    st = t->ob.objective == QAC_PT_COTMAE ? grads_cotmae(t, b, out)
         : t->ob.objective == QAC_PT_QGEN ? grads_qgen(t, b, out)
                                          : grads_cocondenser(t, b, out);
    out->total = out->mlm + out->head + out->contrastive;
    return st;
}

static double lr_now(const qac_pretrainer *t) {
    const qac_train_opts *o = &t->o;
    return t->schedule_ctx.mode == QAC_PT_MODE_CURRICULUM
               ? o->lr * qac_pt_lr_scale(&t->schedule_ctx, t->step, o->total_steps, t->warmup_frac)
               : qac_lr_at(o->schedule, o->lr, t->step, o->warmup_steps, o->total_steps);
}

/* clip and AdamW on the device: the host copies are stale after it */
static qac_status gpu_update(qac_pretrainer *t, const qac_pt_losses *losses, qac_step_stats *out, double t0) {
    double lr = lr_now(t), norm = 0;
    long step = t->step + 1;
    qac_status st = qac_cuda_pretrainer_update(t->gpu, step, lr, &norm);
    if (st) return st;
    t->step = step;
    t->host_stale = 1;
    if (out) {
        out->step = step;
        out->loss = losses->total;
        out->grad_norm = norm;
        out->lr = lr;
        out->seconds = qac_now() - t0;
    }
    return QAC_OK;
}

qac_status qac_pretrainer_step(qac_pretrainer *t, const qac_pt_batch *b, qac_pt_losses *losses,
                               qac_step_stats *out) {
    double t0 = qac_now();
    qac_status st = t->gpu ? gpu_grads(t, b, losses) : qac_pretrainer_grads(t, b, losses);
    if (st) return st;
    if (!isfinite(losses->total))
        return qac_set_error(QAC_ERR_INTERNAL, "pretrain: loss is %g at step %ld", losses->total, t->step + 1);
    if (t->gpu) return gpu_update(t, losses, out, t0);
    /* torch's clip_grad_norm_ over every trained tensor */
    double ss = 0;
    for (int i = 0; i < t->n_tensors; i++) {
        double s = 0;
        const float *g = t->tensors[i].g;
        for (size_t j = 0; j < t->tensors[i].n; j++) s += (double)g[j] * g[j];
        ss += s;
    }
    double norm = sqrt(ss);
    const qac_train_opts *o = &t->o;
    if (o->max_grad_norm > 0) {
        double coef = o->max_grad_norm / (norm + 1e-6);
        if (coef < 1.0) {
            float fc = (float)coef;
            for (size_t i = 0; i < t->n_grad; i++) t->grad_mem[i] *= fc;
        }
    }
    double lr = lr_now(t);
    long step = t->step + 1;
    for (int i = 0; i < t->n_tensors; i++) {
        qac_pt_tensor *x = &t->tensors[i];
        qac_adamw_update(x->p, x->g, x->m, x->v, x->n, step, lr, o->beta1, o->beta2, o->adam_eps,
                         x->decay ? o->weight_decay : 0.0);
    }
    t->step = step;
    qac_bert_repack(&t->pk, &t->m->cfg, &t->m->p, t->pool);
    qac_pretrainer_heads_changed(t);
    if (out) {
        out->step = step;
        out->loss = losses->total;
        out->grad_norm = norm;
        out->lr = lr;
        out->seconds = qac_now() - t0;
    }
    return QAC_OK;
}
