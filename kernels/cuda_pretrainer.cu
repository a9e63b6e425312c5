// The CUDA pre-trainer (kernels/qac_cuda_pretrain.h): coCondenser's step of
// trainer/pretrain.c on the GPU. Both texts of every pair go through the
// encoder (kernels/cuda_layers.cuh, activations kept), the Condenser head's
// layers through the same layer functions with the head's views, both MLM
// losses through the tied head, the contrastive loss in fp64, then the
// backward of it all into one fp32 gradient block over [encoder | heads];
// clipping and AdamW run on the device over the same block.
//
// Not yet run on a GPU: compiled and reviewed only, until
// scripts/gpu_train_verify.sh passes on a device.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_layers.cuh"

extern "C" {
#include "qac_cuda_pretrain.h"
#include "qac_heads.h"
#include "qac_pretrain.h"
}

namespace {

// One side of the pairs (a or b): inputs, the encoder's and the head's
// activations, the gradients flowing into the encoder.
struct pside {
    void *mem;
    size_t cap; // bytes
    int B, T, M; // M: labelled positions
    qac_kl_acts enc, head;
    int32_t *ids, *plan_w, *plan_t, *idx; // idx [M]: the labelled rows of the side's N
    int *lens;
    float *dlast, *dmid, *dhead, *dtmp; // [N,C]: dL/d last layer, middle layer, head output; scratch
    float *pooled, *rep, *drep;         // [B,C]: bottleneck, representation, a gradient on either
    int32_t *h_stage;                   // pinned: ids, lens, both plans, idx, labels
    size_t h_cap;                       // ints
    qac_scatter_plan pw, pt;
};

// The tied MLM head over M rows gathered from both sides.
struct mlm_buf {
    void *mem;
    size_t cap;
    float *rows, *drows, *act32, *u, *du, *mean, *rstd, *logits; // fp32
    void *rows_act, *pre, *act, *u_act, *du_act, *logits_act;    // act (the fp32 ones alias in fp32 mode)
    int32_t *labels;
    double *rowloss;
    float *partial;
};

// The device state (kernels/cuda_layers.cuh): n_params floats per block
// over [encoder | heads]; d_loss [3].
struct pretrainer : qac_kl_dev {
    qac_cuda_pt_spec sp;
    qac_bert_config hc; // the head's stack: the encoder's shape, head_layers layers
    qac_bert_params w, g, hw, hg;
    qac_mlm_head mh, mg;
    qac_kt_tensors tensors;
    pside sd[2];
    qac_kl_work wk;
    mlm_buf mb;
    float *x, *dx; // [2B,C]
    size_t x_cap, dx_cap; // floats
    char *cl_work;
    size_t cl_cap;
    int32_t *counts;
    int counts_cap;
};

size_t bind_side(const pretrainer *t, pside *s, char *base, int B, int T) {
    const size_t N = (size_t)B * T, C = t->cfg.hidden_size, nplan = qac_scatter_plan_ints((int)N);
    qac_kl_bump b = {base, 0};
    b.take(&s->ids, N * sizeof(int32_t));
    b.take(&s->plan_w, nplan * sizeof(int32_t));
    b.take(&s->plan_t, nplan * sizeof(int32_t));
    b.take(&s->idx, N * sizeof(int32_t));
    b.take(&s->lens, (size_t)B * sizeof(int));
    b.take(&s->dlast, N * C * 4);
    b.take(&s->dmid, N * C * 4);
    b.take(&s->dhead, N * C * 4);
    b.take(&s->dtmp, N * C * 4);
    b.take(&s->pooled, (size_t)B * C * 4);
    b.take(&s->rep, (size_t)B * C * 4);
    b.take(&s->drep, (size_t)B * C * 4);
    qac_kl_acts_bind(t, &s->enc, &b, B, T, t->cfg.num_layers, 1);
    qac_kl_acts_bind(t, &s->head, &b, B, T, t->hc.num_layers, 0);
    s->B = B, s->T = T;
    return b.off;
}

qac_status ensure_side(pretrainer *t, pside *s, int B, int T) {
    const size_t need = bind_side(t, s, NULL, B, T);
    if (need > s->cap) {
        QAC_CU(cudaStreamSynchronize(t->stream));
        cudaFree(s->mem);
        s->mem = NULL;
        s->cap = 0;
        cudaError_t e = cudaMalloc(&s->mem, need);
        if (e != cudaSuccess)
            return qac_set_error(QAC_ERR_NOMEM, "CUDA pre-trainer: cannot allocate %.2f GiB of activations for %d x %d "
                                                "tokens (%s)",
                                 (double)need / (1 << 30), B, T, cudaGetErrorString(e));
        s->cap = need;
    }
    bind_side(t, s, (char *)s->mem, B, T);
    const size_t N = (size_t)B * T, ints = 3 * N + (size_t)B + 2 * qac_scatter_plan_ints((int)N);
    if (ints > s->h_cap) {
        QAC_CU(cudaStreamSynchronize(t->stream));
        cudaFreeHost(s->h_stage);
        s->h_stage = NULL;
        s->h_cap = 0;
        QAC_CU(cudaMallocHost((void **)&s->h_stage, ints * sizeof(int32_t)));
        s->h_cap = ints;
    }
    return QAC_OK;
}

size_t bind_mlm(const pretrainer *t, mlm_buf *m, char *base, size_t M) {
    const size_t C = t->cfg.hidden_size, V = t->cfg.vocab_size, es = t->esize;
    const int f32 = t->prec == QAC_PREC_FP32;
    qac_kl_bump b = {base, 0};
    b.take(&m->rows, M * C * 4);
    b.take(&m->drows, M * C * 4);
    b.take(&m->u, M * C * 4);
    b.take(&m->du, M * C * 4);
    b.take(&m->mean, M * 4);
    b.take(&m->rstd, M * 4);
    b.take(&m->logits, M * V * 4);
    b.take((char **)&m->pre, M * C * es);
    b.take((char **)&m->act, M * C * es);
    if (f32) {
        m->rows_act = m->rows, m->act32 = (float *)m->act, m->u_act = m->u, m->du_act = m->du;
        m->logits_act = m->logits;
    } else {
        b.take((char **)&m->rows_act, M * C * es);
        b.take(&m->act32, M * C * 4);
        b.take((char **)&m->u_act, M * C * es);
        b.take((char **)&m->du_act, M * C * es);
        b.take((char **)&m->logits_act, M * V * es);
    }
    b.take(&m->labels, M * sizeof(int32_t));
    b.take(&m->rowloss, M * sizeof(double));
    size_t np = qac_kt_colsum_floats((int)M, (int)V, 1);
    const size_t n2 = qac_kt_colsum_floats((int)M, (int)C, 2);
    b.take(&m->partial, (np > n2 ? np : n2) * 4);
    return b.off;
}

qac_status ensure_mlm(pretrainer *t, size_t M) {
    mlm_buf *m = &t->mb;
    const size_t need = bind_mlm(t, m, NULL, M);
    if (need > m->cap) {
        QAC_CU(cudaStreamSynchronize(t->stream));
        cudaFree(m->mem);
        m->mem = NULL;
        m->cap = 0;
        cudaError_t e = cudaMalloc(&m->mem, need);
        if (e != cudaSuccess)
            return qac_set_error(QAC_ERR_NOMEM, "CUDA pre-trainer: cannot allocate %.2f GiB for the MLM head over %zu "
                                                "positions (%s)",
                                 (double)need / (1 << 30), M, cudaGetErrorString(e));
        m->cap = need;
    }
    bind_mlm(t, m, (char *)m->mem, M);
    return QAC_OK;
}

template <typename P> qac_status grow(P **p, size_t *cap, size_t n) {
    if (n <= *cap) return QAC_OK;
    cudaFree(*p);
    *p = NULL;
    *cap = 0;
    QAC_CU(cudaMalloc((void **)p, n * sizeof(P)));
    *cap = n;
    return QAC_OK;
}

// The side's inputs to the device: ids, lens, scatter plans, the labelled
// rows; its labels go to labels_dev (the MLM's rows of this side).
qac_status upload_side(pretrainer *t, pside *s, const qac_cuda_pt_seqs *q, int32_t *labels_dev) {
    const int N = s->B * s->T;
    QAC_CU(cudaStreamSynchronize(t->stream)); // the staging may still feed the previous step's copies
    const size_t nplan = qac_scatter_plan_ints(N);
    int32_t *h_ids = s->h_stage, *h_lens = h_ids + N, *h_pw = h_lens + s->B, *h_pt = h_pw + nplan;
    int32_t *h_idx = h_pt + nplan, *h_lab = h_idx + N;
    memcpy(h_ids, q->ids, (size_t)N * sizeof(int32_t));
    memcpy(h_lens, q->lens, (size_t)s->B * sizeof(int));
    int M = 0;
    for (int i = 0; i < N; i++)
        if (q->labels[i] >= 0) h_idx[M] = i, h_lab[M++] = q->labels[i];
    if (M != s->M) return qac_set_error(QAC_ERR_INTERNAL, "CUDA pre-trainer: labels changed under the step");
    s->pw = qac_scatter_plan_build(h_pw, q->ids, N, t->cfg.vocab_size, t->counts);
    s->pt = qac_scatter_plan_build(h_pt, NULL, N, t->cfg.type_vocab_size, t->counts);
    QAC_CU(cudaMemcpyAsync(s->ids, h_ids, (size_t)N * sizeof(int32_t), cudaMemcpyHostToDevice, t->stream));
    QAC_CU(cudaMemcpyAsync(s->lens, h_lens, (size_t)s->B * sizeof(int), cudaMemcpyHostToDevice, t->stream));
    QAC_CU(cudaMemcpyAsync(s->plan_w, h_pw, nplan * sizeof(int32_t), cudaMemcpyHostToDevice, t->stream));
    QAC_CU(cudaMemcpyAsync(s->plan_t, h_pt, nplan * sizeof(int32_t), cudaMemcpyHostToDevice, t->stream));
    if (M) {
        QAC_CU(cudaMemcpyAsync(s->idx, h_idx, (size_t)M * sizeof(int32_t), cudaMemcpyHostToDevice, t->stream));
        QAC_CU(cudaMemcpyAsync(labels_dev, h_lab, (size_t)M * sizeof(int32_t), cudaMemcpyHostToDevice, t->stream));
    }
    return QAC_OK;
}

// The last hidden states of a stack: hidden[L].
float *last_of(const pretrainer *t, const qac_kl_acts *a) {
    return a->hidden + (size_t)a->L * a->B * a->T * t->cfg.hidden_size;
}

// One MLM loss (trainer/mlm.c qac_mlm_loss_ws) over the labelled rows of
// both sides' states[s] [N_s,C]: *loss (device), the head's and the tied
// decoder's gradients accumulated, dL/dstates added into dst[s].
qac_status mlm_run(pretrainer *t, double *loss, const float *const states[2], float *const dst[2]) {
    const int C = t->cfg.hidden_size, V = t->cfg.vocab_size, M = t->sd[0].M + t->sd[1].M;
    const qac_precision p = t->prec;
    mlm_buf *m = &t->mb;
    cudaStream_t st = t->stream;
    if (M == 0) { // the CPU's loss 0 and no gradient
        QAC_CU(cudaMemsetAsync(loss, 0, sizeof(double), st));
        return QAC_OK;
    }
    for (int s = 0, off = 0; s < 2; off += t->sd[s].M, s++)
        QAC_CU(qac_kt_gather_rows(m->rows + (size_t)off * C, states[s], t->sd[s].idx, t->sd[s].M, C, st));
    const size_t MC = (size_t)M * C, MV = (size_t)M * V;
    if (p != QAC_PREC_FP32) QAC_CU(qac_k_from_f32(m->rows_act, m->rows, MC, p, st));
    // u = LN(GELU(rows W^T + b)); logits = u E^T (+ bias in the loss kernel)
    qac_status e = qac_kt_linear_fwd(t->blas, m->pre, m->rows_act, qac_kl_act_w(t, t->mh.dense_w), M, C, C, p);
    if (e) return e;
    QAC_CU(qac_kt_bias_gelu_fwd(m->pre, m->act, t->mh.dense_b, M, C, p, st));
    if (p != QAC_PREC_FP32) QAC_CU(qac_k_to_f32(m->act32, m->act, MC, p, st));
    QAC_CU(qac_kt_layernorm_fwd(m->u, p == QAC_PREC_FP32 ? NULL : m->u_act, m->mean, m->rstd, m->act32, t->mh.ln_w,
                                t->mh.ln_b, M, C, t->cfg.layer_norm_eps, p, st));
    QAC_CUBLAS(qac_kt_gemm(t->blas, 0, 1, M, V, C, 1.0f, m->u_act, C, 0, qac_kl_act_w(t, t->w.word_emb), C, 0, 0.0f,
                           m->logits, V, 0, 1, p, QAC_PREC_FP32));
    QAC_CU(qac_kt_mlm_ce(m->logits, m->rowloss, t->mh.bias, m->labels, M, V, 1, st));
    QAC_CU(qac_kt_mean_loss(loss, m->rowloss, M, st));
    // backward: the tied decoder and the bias, the LayerNorm, GELU, dense
    if (p != QAC_PREC_FP32) QAC_CU(qac_k_from_f32(m->logits_act, m->logits, MV, p, st));
    if ((e = qac_kt_linear_bwd(t->blas, m->du, QAC_PREC_FP32, 0.0f, t->g.word_emb, t->mg.bias, m->logits_act,
                               m->u_act, qac_kl_act_w(t, t->w.word_emb), m->partial, M, C, V, p, st)))
        return e;
    QAC_CU(qac_kt_layernorm_bwd(m->du, t->mg.ln_w, t->mg.ln_b, m->du, m->act32, m->mean, m->rstd, t->mh.ln_w,
                                m->partial, M, C, st));
    if (p != QAC_PREC_FP32) QAC_CU(qac_k_from_f32(m->du_act, m->du, MC, p, st));
    QAC_CU(qac_kt_gelu_bwd(m->du_act, m->du_act, m->pre, MC, p, st));
    if ((e = qac_kt_linear_bwd(t->blas, m->drows, QAC_PREC_FP32, 0.0f, t->mg.dense_w, t->mg.dense_b, m->du_act,
                               m->rows_act, qac_kl_act_w(t, t->mh.dense_w), m->partial, M, C, C, p, st)))
        return e;
    for (int s = 0, off = 0; s < 2; off += t->sd[s].M, s++)
        QAC_CU(qac_kt_scatter_add_rows(dst[s], m->drows + (size_t)off * C, t->sd[s].idx, t->sd[s].M, C, st));
    return QAC_OK;
}

// coCondenser's step (trainer/pretrain.c grads_cocondenser).
qac_status cocondenser_step(pretrainer *t, uint64_t enc_key, uint64_t head_key) {
    const qac_bert_config *c = &t->cfg;
    const int B = t->sd[0].B, C = c->hidden_size, mean = t->sp.mean_pooling;
    cudaStream_t st = t->stream;
    qac_status e;
    for (int s = 0; s < 2; s++) {
        pside *sd = &t->sd[s];
        const int T = sd->T;
        const size_t NC = (size_t)B * T * C;
        const uint64_t base = (uint64_t)s * B;
        if ((e = qac_kl_embed_fwd(t, &sd->enc, sd->ids, &t->w, enc_key, base)) ||
            (e = qac_kl_layers_fwd(t, &sd->enc, &t->wk, &t->w, sd->lens, enc_key, base)))
            return e;
        // the head's input: the bottleneck at position 0, hidden[skip_from] after it
        QAC_CU(qac_k_pool(sd->pooled, last_of(t, &sd->enc), sd->lens, B, T, C, mean, 0, st));
        QAC_CU(cudaMemcpyAsync(sd->head.hidden, sd->enc.hidden + (size_t)t->sp.skip_from * NC, NC * sizeof(float),
                               cudaMemcpyDeviceToDevice, st));
        QAC_CU(cudaMemcpy2DAsync(sd->head.hidden, (size_t)T * C * sizeof(float), sd->pooled, (size_t)C * sizeof(float),
                                 (size_t)C * sizeof(float), B, cudaMemcpyDeviceToDevice, st));
        if ((e = qac_kl_layers_fwd(t, &sd->head, &t->wk, &t->hw, sd->lens, head_key, base))) return e;
        QAC_CU(cudaMemsetAsync(sd->dlast, 0, NC * sizeof(float), st));
        QAC_CU(cudaMemsetAsync(sd->dhead, 0, NC * sizeof(float), st));
    }
    // the head's MLM, then the late MLM on the encoder's last layer
    const float *heads[2] = {last_of(t, &t->sd[0].head), last_of(t, &t->sd[1].head)};
    const float *lasts[2] = {last_of(t, &t->sd[0].enc), last_of(t, &t->sd[1].enc)};
    float *const dheads[2] = {t->sd[0].dhead, t->sd[1].dhead};
    float *const dlasts[2] = {t->sd[0].dlast, t->sd[1].dlast};
    if ((e = mlm_run(t, t->d_loss + 1, heads, dheads)) || (e = mlm_run(t, t->d_loss + 0, lasts, dlasts))) return e;
    // the contrastive loss on the representations, siblings adjacent (row 2i + s)
    const size_t rowb = (size_t)C * sizeof(float);
    for (int s = 0; s < 2; s++) {
        pside *sd = &t->sd[s];
        QAC_CU(qac_k_pool(sd->rep, lasts[s], sd->lens, B, sd->T, C, mean, t->sp.normalize, st));
        QAC_CU(cudaMemcpy2DAsync(t->x + (size_t)s * C, 2 * rowb, sd->rep, rowb, rowb, B, cudaMemcpyDeviceToDevice, st));
    }
    if ((e = qac_kt_cocondenser(t->blas, t->d_loss + 2, t->dx, t->x, 2 * B, C, t->sp.tau, t->cl_work, st))) return e;
    for (int s = 0; s < 2; s++) {
        pside *sd = &t->sd[s];
        const size_t NC = (size_t)B * sd->T * C;
        QAC_CU(cudaMemcpy2DAsync(sd->drep, rowb, t->dx + (size_t)s * C, 2 * rowb, rowb, B, cudaMemcpyDeviceToDevice, st));
        QAC_CU(qac_kt_pool_bwd(sd->dtmp, sd->drep, lasts[s], sd->lens, B, sd->T, C, mean, t->sp.normalize, st));
        QAC_CU(qac_kt_add(sd->dlast, sd->dtmp, NC, st));
    }
    // per side: the head, its input split into the bottleneck and the middle
    // layer, then the encoder with both
    for (int s = 0; s < 2; s++) {
        pside *sd = &t->sd[s];
        const int T = sd->T;
        const size_t NC = (size_t)B * T * C;
        const uint64_t base = (uint64_t)s * B;
        QAC_CU(cudaMemcpyAsync(t->wk.dy, sd->dhead, NC * sizeof(float), cudaMemcpyDeviceToDevice, st));
        if ((e = qac_kl_layers_bwd(t, &sd->head, &t->wk, &t->hw, &t->hg, sd->lens, head_key, base, NULL, 0))) return e;
        QAC_CU(cudaMemcpy2DAsync(sd->drep, rowb, t->wk.dy, (size_t)T * rowb, rowb, B, cudaMemcpyDeviceToDevice, st));
        QAC_CU(cudaMemcpyAsync(sd->dmid, t->wk.dy, NC * sizeof(float), cudaMemcpyDeviceToDevice, st));
        QAC_CU(cudaMemset2DAsync(sd->dmid, (size_t)T * rowb, 0, rowb, B, st));
        QAC_CU(qac_kt_pool_bwd(sd->dtmp, sd->drep, lasts[s], sd->lens, B, T, C, mean, 0, st));
        QAC_CU(qac_kt_add(sd->dlast, sd->dtmp, NC, st));
        QAC_CU(cudaMemcpyAsync(t->wk.dy, sd->dlast, NC * sizeof(float), cudaMemcpyDeviceToDevice, st));
        if ((e = qac_kl_layers_bwd(t, &sd->enc, &t->wk, &t->w, &t->g, sd->lens, enc_key, base, sd->dmid,
                                   t->sp.skip_from)) ||
            (e = qac_kl_embed_bwd(t, &sd->enc, &t->wk, &t->g, &t->w, sd->pw, sd->plan_w, sd->pt, sd->plan_t, enc_key,
                                  base)))
            return e;
    }
    return QAC_OK;
}

void destroy(pretrainer *t) {
    if (!t) return;
    if (t->stream) cudaStreamSynchronize(t->stream);
    for (int i = 0; i < 2; i++) {
        cudaFree(t->sd[i].mem);
        cudaFreeHost(t->sd[i].h_stage);
    }
    cudaFree(t->wk.mem), cudaFree(t->mb.mem), cudaFree(t->x), cudaFree(t->dx), cudaFree(t->cl_work);
    qac_kl_dev_release(t);
    free(t->counts);
    free(t);
}

qac_status init(pretrainer *t, const float *enc, const float *heads) {
    qac_status e = qac_kl_dev_init(t, 3);
    if (e) return e;
    // views: the same binders as the CPU's over the device block
    const size_t n_stack = qac_bert_stack_param_count(&t->hc);
    const int C = t->cfg.hidden_size, V = t->cfg.vocab_size;
    qac_bert_params_bind(&t->w, &t->cfg, t->params);
    qac_bert_params_bind(&t->g, &t->cfg, t->grads);
    qac_bert_stack_bind(&t->hw, &t->hc, t->params + t->sp.n_enc);
    qac_bert_stack_bind(&t->hg, &t->hc, t->grads + t->sp.n_enc);
    qac_mlm_bind(&t->mh, t->params + t->sp.n_enc + n_stack, C, V);
    qac_mlm_bind(&t->mg, t->grads + t->sp.n_enc + n_stack, C, V);
    const float *parts[2] = {enc, heads};
    const size_t ends[2] = {t->sp.n_enc, t->n_params};
    return qac_kl_dev_upload(t, parts, ends, 2, NULL, NULL);
}

qac_status check_seqs(const qac_bert_config *c, const qac_cuda_pt_seqs *q, int B, const char *what) {
    if (!q->ids || !q->labels || !q->lens || q->T < 1 || q->T > c->max_position)
        return qac_set_error(QAC_ERR_INVALID, "CUDA pre-trainer: %s missing or too long (T %d)", what, q->T);
    for (int b = 0; b < B; b++)
        if (q->lens[b] < 1 || q->lens[b] > q->T)
            return qac_set_error(QAC_ERR_INVALID, "CUDA pre-trainer: %s %d has length %d (T=%d)", what, b, q->lens[b],
                                 q->T);
    for (size_t i = 0; i < (size_t)B * q->T; i++) {
        if (q->ids[i] < 0 || q->ids[i] >= c->vocab_size)
            return qac_set_error(QAC_ERR_INVALID, "CUDA pre-trainer: token id %d out of range [0, %d)", q->ids[i],
                                 c->vocab_size);
        if (q->labels[i] >= c->vocab_size || (q->labels[i] < 0 && q->labels[i] != -100))
            return qac_set_error(QAC_ERR_INVALID, "CUDA pre-trainer: MLM label %d out of range", q->labels[i]);
    }
    return QAC_OK;
}

} // namespace

struct qac_cuda_pretrainer {
    pretrainer *t;
};

extern "C" qac_status qac_cuda_pretrainer_create(qac_cuda_pretrainer **out, const qac_cuda_pt_spec *spec,
                                                 const float *enc, const float *heads) {
    *out = NULL;
    const qac_bert_config *c = &spec->cfg;
    if (spec->objective != QAC_PT_COCONDENSER)
        return qac_set_error(QAC_ERR_UNSUPPORTED, "CUDA pre-trainer: only the coCondenser objective runs on the GPU");
    if (!qac_cuda_available()) return qac_set_error(QAC_ERR_UNSUPPORTED, "no usable CUDA GPU for pre-training");
    if (spec->prec != QAC_PREC_FP32 && spec->prec != QAC_PREC_BF16)
        return qac_set_error(QAC_ERR_UNSUPPORTED, "CUDA pre-trainer: precision must be fp32 or bf16");
    if (c->num_heads <= 0 || c->hidden_size % c->num_heads || !qac_kt_pool_bwd_supported(c->hidden_size) ||
        c->max_position >= (1 << 20))
        return qac_set_error(QAC_ERR_UNSUPPORTED, "CUDA pre-trainer: %d heads over %d hidden units, %d positions",
                             c->num_heads, c->hidden_size, c->max_position);
    if (spec->head_layers < 1 || spec->skip_from < 0 || spec->skip_from >= c->num_layers || !(spec->tau > 0))
        return qac_set_error(QAC_ERR_INVALID, "CUDA pre-trainer: %d head layers reading layer %d of %d, tau %g",
                             spec->head_layers, spec->skip_from, c->num_layers, (double)spec->tau);
    if (spec->n_seg < 1 || spec->n_seg > QAC_KT_MAX_TENSORS || spec->seg_end[spec->n_seg - 1] != spec->n_enc + spec->n_head)
        return qac_set_error(QAC_ERR_INVALID, "CUDA pre-trainer: %d segments over the flat block", spec->n_seg);
    pretrainer *t = (pretrainer *)calloc(1, sizeof *t);
    qac_cuda_pretrainer *h = (qac_cuda_pretrainer *)calloc(1, sizeof *h);
    if (!t || !h) {
        free(t), free(h);
        return qac_set_error(QAC_ERR_NOMEM, "CUDA pre-trainer: out of host memory");
    }
    t->cfg = *c;
    t->sp = *spec;
    t->hc = *c;
    t->hc.num_layers = spec->head_layers;
    t->prec = spec->prec;
    t->esize = qac_prec_size(spec->prec);
    t->p_hidden = spec->p_hidden;
    t->p_attn = spec->p_attn;
    t->n_params = spec->n_enc + spec->n_head;
    t->tensors.n = spec->n_seg;
    t->tensors.bounds[0] = 0;
    for (int i = 0; i < spec->n_seg; i++) {
        t->tensors.bounds[i + 1] = spec->seg_end[i];
        t->tensors.decays[i] = spec->seg_decay[i];
    }
    t->counts_cap = (c->vocab_size > c->type_vocab_size ? c->vocab_size : c->type_vocab_size) + 1;
    t->counts = (int32_t *)malloc((size_t)t->counts_cap * sizeof(int32_t));
    qac_status st = t->counts ? init(t, enc, heads) : qac_set_error(QAC_ERR_NOMEM, "CUDA pre-trainer: out of host memory");
    if (st != QAC_OK) {
        destroy(t);
        free(h);
        return qac_wrap_error(st, "CUDA pre-trainer (%s)", qac_prec_name(spec->prec));
    }
    h->t = t;
    *out = h;
    return QAC_OK;
}

extern "C" void qac_cuda_pretrainer_free(qac_cuda_pretrainer *h) {
    if (!h) return;
    destroy(h->t);
    free(h);
}

extern "C" qac_status qac_cuda_pretrainer_grads(qac_cuda_pretrainer *h, int B, const qac_cuda_pt_seqs *a,
                                                const qac_cuda_pt_seqs *b, uint64_t enc_key, uint64_t head_key,
                                                double losses[3]) {
    pretrainer *t = h->t;
    const qac_bert_config *c = &t->cfg;
    qac_status st;
    if (B < 2) return qac_set_error(QAC_ERR_INVALID, "CUDA pre-trainer: the contrastive loss needs 2 pairs or more");
    if ((st = check_seqs(c, a, B, "first text")) || (st = check_seqs(c, b, B, "second text"))) return st;
    QAC_CU(cudaSetDevice(t->device));
    const qac_cuda_pt_seqs *q[2] = {a, b};
    const int C = c->hidden_size, NH = c->num_heads;
    size_t Nmax = 0, nPmax = 0;
    for (int s = 0; s < 2; s++) {
        int M = 0;
        for (size_t i = 0; i < (size_t)B * q[s]->T; i++) M += q[s]->labels[i] >= 0;
        t->sd[s].M = M;
        const size_t N = (size_t)B * q[s]->T, nP = (size_t)B * NH * q[s]->T * q[s]->T;
        Nmax = N > Nmax ? N : Nmax;
        nPmax = nP > nPmax ? nP : nPmax;
    }
    const size_t M = (size_t)t->sd[0].M + t->sd[1].M;
    if ((st = ensure_side(t, &t->sd[0], B, a->T)) || (st = ensure_side(t, &t->sd[1], B, b->T)) ||
        (st = qac_kl_work_ensure(t, &t->wk, Nmax, nPmax)) || (st = ensure_mlm(t, M ? M : 1)) ||
        (st = grow(&t->x, &t->x_cap, 2 * (size_t)B * C)) || (st = grow(&t->dx, &t->dx_cap, 2 * (size_t)B * C)) ||
        (st = grow(&t->cl_work, &t->cl_cap, qac_kt_cocondenser_scratch(2 * B, C))))
        return st;
    if ((st = upload_side(t, &t->sd[0], a, t->mb.labels)) ||
        (st = upload_side(t, &t->sd[1], b, t->mb.labels + t->sd[0].M)))
        return st;
    QAC_CU(cudaMemsetAsync(t->grads, 0, t->n_params * sizeof(float), t->stream));
    if ((st = cocondenser_step(t, enc_key, head_key))) return qac_wrap_error(st, "CUDA pre-training step");
    return qac_kl_dev_losses(t, losses);
}

extern "C" qac_status qac_cuda_pretrainer_update(qac_cuda_pretrainer *h, long step, double lr, double *grad_norm) {
    pretrainer *t = h->t;
    return qac_kl_dev_update(t, &t->tensors, step, lr, t->sp.beta1, t->sp.beta2, t->sp.eps, t->sp.wd,
                             t->sp.max_grad_norm, grad_norm);
}

extern "C" qac_status qac_cuda_pretrainer_download(qac_cuda_pretrainer *h, float *enc, float *heads, float *grads,
                                                   float *m, float *v) {
    pretrainer *t = h->t;
    float *const parts[2] = {enc, heads};
    const size_t ends[2] = {t->sp.n_enc, t->n_params};
    return qac_kl_dev_download(t, parts, ends, 2, grads, m, v);
}

extern "C" qac_status qac_cuda_pretrainer_upload(qac_cuda_pretrainer *h, const float *enc, const float *heads,
                                                 const float *m, const float *v) {
    pretrainer *t = h->t;
    const float *const parts[2] = {enc, heads};
    const size_t ends[2] = {t->sp.n_enc, t->n_params};
    return qac_kl_dev_upload(t, parts, ends, 2, m, v);
}
