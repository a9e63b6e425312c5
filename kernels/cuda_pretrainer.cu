// The CUDA pre-trainer (kernels/qac_cuda_pretrain.h): the coCondenser,
// CoT-MAE and query-generation steps of trainer/pretrain.c and
// trainer/qgen.c on the GPU. The texts go through the encoder
// (kernels/cuda_layers.cuh, activations kept), the head's layers (the
// Condenser head, or CoT-MAE's decoder) through the same layer functions
// with the head's views, or the query-generation decoder's GPT-2 blocks;
// both MLM (or next-token) losses through the tied head, coCondenser's
// contrastive loss in fp64, then the backward of it all into one fp32
// gradient block over [encoder | heads]; clipping and AdamW run on the
// device over the same block.
//
// First run on a GPU (an H200) on 2026-11-26: see bench/RESULTS.md; what
// changed since is checked by scripts/gpu_train_verify.sh on the next one.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_layers.cuh"

extern "C" {
#include "head_nets.h"
#include "qac_cuda_pretrain.h"
#include "qac_pretrain.h"
#include "qac_rng.h"
}

namespace {

// B sequences of length T on the device: ids, lengths, the scatter plans
// of their embeddings' backward and the M labelled rows of the B*T.
struct pinput {
    int T, M;
    int32_t *ids, *plan_w, *plan_t, *idx; // idx [M]
    int *lens;
    qac_scatter_plan pw, pt;
};

// What a side's head reads: the encoder's input (the Condenser head), or
// its own input din of hT tokens: CoT-MAE's decoder (BERT layers) reads
// the other text masked at the decoder's rate, the query-generation decoder
// (GPT-2 blocks) the unmasked query with next-token labels.
enum { HEAD_CONDENSER = 0, HEAD_COTMAE = 1, HEAD_QGEN = 2 };

// One side of the pairs (a or b; query generation: the passage side only):
// inputs, the encoder's and the head's activations, the gradients flowing
// into the encoder.
struct pside {
    void *mem;
    size_t cap; // bytes
    int B, dec; // dec: a HEAD_*
    pinput in, din;
    qac_kl_acts enc, head;
    qac_kl_gpt_acts gen;
    float *dlast, *dmid, *dtmp; // [N,C]: dL/d last layer, middle layer; scratch
    float *dhead;               // [B*hT,C]: dL/d head output
    float *pooled, *rep, *drep; // [B,C]: bottleneck, representation, a gradient on either
    int32_t *h_stage;           // pinned: per input ids, lens, both plans, idx, labels
    size_t h_cap;               // ints
    const pinput *head_in() const { return dec ? &din : &in; }
};

// The tied MLM head over M rows gathered from both sides.
struct mlm_buf {
    void *mem;
    size_t cap;
    float *rows, *drows, *act32, *u, *du, *mean, *rstd, *logits; // fp32
    void *rows_act, *pre, *act, *u_act, *du_act, *logits_act;    // act (the fp32 ones alias in fp32 mode)
    int32_t *labels; // [M_enc + M_dec]: the encoder's labels, then the decoder's
    double *rowloss;
    float *partial;
};

// The device state (kernels/cuda_layers.cuh): n_params floats per block
// over [encoder | heads]; d_loss [3].
struct pretrainer : qac_kl_dev {
    qac_cuda_pt_spec sp;
    qac_bert_config hc; // the head's stack: the encoder's shape, head_layers layers
    qac_qgen_config qc; // query generation: head_layers GPT-2 blocks
    qac_bert_params w, g, hw, hg;
    qac_qgen_params qw, qg;
    qac_mlm_head mh, mg;
    qac_kt_tensors tensors;
    pside sd[2];
    qac_kl_work wk;
    mlm_buf mb;
    float *x, *dx, *dx2; // [2B,C]; dx2: PAIR's second loss's gradient
    size_t x_cap, dx_cap, dx2_cap; // floats
    char *cl_work;
    size_t cl_cap;
    int32_t *counts;
    int counts_cap;
    int32_t *h_targets; // query generation: next-token labels, host
    size_t targets_cap;
    double *d_pair; // PAIR's L_p
};

void bind_input(pinput *in, qac_kl_bump *b, int B, int T) {
    const size_t N = (size_t)B * T, nplan = qac_scatter_plan_ints((int)N);
    b->take(&in->ids, N * sizeof(int32_t));
    b->take(&in->plan_w, nplan * sizeof(int32_t));
    b->take(&in->plan_t, nplan * sizeof(int32_t));
    b->take(&in->idx, N * sizeof(int32_t));
    b->take(&in->lens, (size_t)B * sizeof(int));
    in->T = T;
}

// pinned ints of one input's staging: ids, lens, both plans, idx, labels
size_t stage_ints(int B, int T) { return 3 * (size_t)B * T + (size_t)B + 2 * qac_scatter_plan_ints(B * T); }

// hT: the head's tokens (dec: its own input of hT tokens; else hT == T)
size_t bind_side(const pretrainer *t, pside *s, char *base, int B, int T, int hT, int dec) {
    const size_t N = (size_t)B * T, hN = (size_t)B * hT, C = t->cfg.hidden_size;
    qac_kl_bump b = {base, 0};
    bind_input(&s->in, &b, B, T);
    if (dec) bind_input(&s->din, &b, B, hT);
    b.take(&s->dlast, N * C * 4);
    b.take(&s->dmid, dec ? 0 : N * C * 4);
    b.take(&s->dtmp, N * C * 4);
    b.take(&s->dhead, hN * C * 4);
    b.take(&s->pooled, (size_t)B * C * 4);
    b.take(&s->rep, (size_t)B * C * 4);
    b.take(&s->drep, (size_t)B * C * 4);
    qac_kl_acts_bind(t, &s->enc, &b, B, T, t->cfg.num_layers, 1, t->sp.recompute);
    if (dec == HEAD_QGEN)
        qac_kl_gpt_acts_bind(t, &s->gen, &b, B, hT, t->qc.layers, t->qc.inner);
    else
        qac_kl_acts_bind(t, &s->head, &b, B, hT, t->hc.num_layers, dec == HEAD_COTMAE, t->sp.recompute);
    s->B = B, s->dec = dec;
    return b.off;
}

qac_status ensure_side(pretrainer *t, pside *s, int B, int T, int hT, int dec) {
    const size_t need = bind_side(t, s, NULL, B, T, hT, dec);
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
    bind_side(t, s, (char *)s->mem, B, T, hT, dec);
    const size_t ints = stage_ints(B, T) + (dec ? stage_ints(B, hT) : 0);
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

// M rows (the larger of the two losses'), nlab labels (both losses')
size_t bind_mlm(const pretrainer *t, mlm_buf *m, char *base, size_t M, size_t nlab) {
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
    b.take(&m->labels, nlab * sizeof(int32_t));
    b.take(&m->rowloss, M * sizeof(double));
    size_t np = qac_kt_colsum_floats((int)M, (int)V, 1);
    const size_t n2 = qac_kt_colsum_floats((int)M, (int)C, 2);
    b.take(&m->partial, (np > n2 ? np : n2) * 4);
    return b.off;
}

qac_status ensure_mlm(pretrainer *t, size_t M, size_t nlab) {
    mlm_buf *m = &t->mb;
    const size_t need = bind_mlm(t, m, NULL, M, nlab);
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
    bind_mlm(t, m, (char *)m->mem, M, nlab);
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

// One input to the device from the staging at h (stage_ints ints): ids,
// lens, scatter plans, the labelled rows; its labels go to labels_dev.
qac_status upload_input(pretrainer *t, pinput *in, int32_t *h, const qac_cuda_pt_seqs *q, int B,
                        int32_t *labels_dev) {
    const int N = B * in->T;
    const size_t nplan = qac_scatter_plan_ints(N);
    int32_t *h_ids = h, *h_lens = h_ids + N, *h_pw = h_lens + B, *h_pt = h_pw + nplan;
    int32_t *h_idx = h_pt + nplan, *h_lab = h_idx + N;
    memcpy(h_ids, q->ids, (size_t)N * sizeof(int32_t));
    memcpy(h_lens, q->lens, (size_t)B * sizeof(int));
    int M = 0;
    for (int i = 0; i < N; i++)
        if (q->labels[i] >= 0) h_idx[M] = i, h_lab[M++] = q->labels[i];
    if (M != in->M) return qac_set_error(QAC_ERR_INTERNAL, "CUDA pre-trainer: labels changed under the step");
    in->pw = qac_scatter_plan_build(h_pw, q->ids, N, t->cfg.vocab_size, t->counts);
    in->pt = qac_scatter_plan_build(h_pt, NULL, N, t->cfg.type_vocab_size, t->counts);
    QAC_CU(cudaMemcpyAsync(in->ids, h_ids, (size_t)N * sizeof(int32_t), cudaMemcpyHostToDevice, t->stream));
    QAC_CU(cudaMemcpyAsync(in->lens, h_lens, (size_t)B * sizeof(int), cudaMemcpyHostToDevice, t->stream));
    QAC_CU(cudaMemcpyAsync(in->plan_w, h_pw, nplan * sizeof(int32_t), cudaMemcpyHostToDevice, t->stream));
    QAC_CU(cudaMemcpyAsync(in->plan_t, h_pt, nplan * sizeof(int32_t), cudaMemcpyHostToDevice, t->stream));
    if (M) {
        QAC_CU(cudaMemcpyAsync(in->idx, h_idx, (size_t)M * sizeof(int32_t), cudaMemcpyHostToDevice, t->stream));
        QAC_CU(cudaMemcpyAsync(labels_dev, h_lab, (size_t)M * sizeof(int32_t), cudaMemcpyHostToDevice, t->stream));
    }
    return QAC_OK;
}

// The side's inputs (q; dq: the decoder's, when the side has one).
qac_status upload_side(pretrainer *t, pside *s, const qac_cuda_pt_seqs *q, int32_t *labels_dev,
                       const qac_cuda_pt_seqs *dq, int32_t *dlabels_dev) {
    QAC_CU(cudaStreamSynchronize(t->stream)); // the staging may still feed the previous step's copies
    qac_status e = upload_input(t, &s->in, s->h_stage, q, s->B, labels_dev);
    if (e || !s->dec) return e;
    return upload_input(t, &s->din, s->h_stage + stage_ints(s->B, s->in.T), dq, s->B, dlabels_dev);
}

// The last hidden states of a stack: hidden[L].
float *last_of(const pretrainer *t, const qac_kl_acts *a) {
    return a->hidden + (size_t)a->L * a->B * a->T * t->cfg.hidden_size;
}

// The labelled rows of side s for loss `dec` (0: the encoder's input's,
// 1: the head's input's), and the first of that loss's labels.
const pinput *mlm_input(const pretrainer *t, int s, int dec) { return dec ? t->sd[s].head_in() : &t->sd[s].in; }
int32_t *mlm_labels(const pretrainer *t, int dec) {
    return t->mb.labels + (dec ? t->sd[0].in.M + t->sd[1].in.M : 0);
}

// One MLM loss (trainer/mlm.c qac_mlm_loss_ws) over the labelled rows of
// both sides' states[s] [N_s,C] (dec: the head's input's labels, else the
// encoder's): *loss (device), the head's and the tied decoder's gradients
// accumulated, dL/dstates added into dst[s].
qac_status mlm_run(pretrainer *t, double *loss, const float *const states[2], float *const dst[2], int dec) {
    const pinput *in[2] = {mlm_input(t, 0, dec), mlm_input(t, 1, dec)};
    const int C = t->cfg.hidden_size, V = t->cfg.vocab_size, M = in[0]->M + in[1]->M;
    const qac_precision p = t->prec;
    mlm_buf *m = &t->mb;
    cudaStream_t st = t->stream;
    if (M == 0) { // the CPU's loss 0 and no gradient
        QAC_CU(cudaMemsetAsync(loss, 0, sizeof(double), st));
        return QAC_OK;
    }
    for (int s = 0, off = 0; s < 2; off += in[s]->M, s++)
        QAC_CU(qac_kt_gather_rows(m->rows + (size_t)off * C, states[s], in[s]->idx, in[s]->M, C, st));
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
    QAC_CU(qac_kt_mlm_ce(m->logits, m->rowloss, t->mh.bias, mlm_labels(t, dec), M, V, 1, st));
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
    for (int s = 0, off = 0; s < 2; off += in[s]->M, s++)
        QAC_CU(qac_kt_scatter_add_rows(dst[s], m->drows + (size_t)off * C, in[s]->idx, in[s]->M, C, st));
    return QAC_OK;
}

// Side s's encoder forward (dropout from enc_key, sequence ids s B + i)
// and its bottleneck: the pooled last layer, never normalised.
qac_status encoder_fwd(pretrainer *t, int s, uint64_t enc_key) {
    pside *sd = &t->sd[s];
    const int B = sd->B, T = sd->in.T;
    qac_status e;
    if ((e = qac_kl_embed_fwd(t, &sd->enc, sd->in.ids, &t->w, enc_key, (uint64_t)s * B)) ||
        (e = qac_kl_layers_fwd(t, &sd->enc, &t->wk, &t->w, sd->in.lens, enc_key, (uint64_t)s * B)))
        return e;
    QAC_CU(qac_k_pool(sd->pooled, last_of(t, &sd->enc), sd->in.lens, B, T, t->cfg.hidden_size, t->sp.mean_pooling, 0,
                      t->stream));
    return QAC_OK;
}

// Side s's encoder backward from its dlast plus drep [B,C] through the
// bottleneck's pooling; dmid (NULL: none) on hidden[skip_from].
qac_status encoder_bwd(pretrainer *t, int s, uint64_t enc_key, const float *dmid) {
    pside *sd = &t->sd[s];
    const int B = sd->B, T = sd->in.T, C = t->cfg.hidden_size;
    const size_t NC = (size_t)B * T * C;
    cudaStream_t st = t->stream;
    QAC_CU(qac_kt_pool_bwd(sd->dtmp, sd->drep, last_of(t, &sd->enc), sd->in.lens, B, T, C, t->sp.mean_pooling, 0, st));
    QAC_CU(qac_kt_add(sd->dlast, sd->dtmp, NC, st));
    QAC_CU(cudaMemcpyAsync(t->wk.dy, sd->dlast, NC * sizeof(float), cudaMemcpyDeviceToDevice, st));
    qac_status e = qac_kl_layers_bwd(t, &sd->enc, &t->wk, &t->w, &t->g, sd->in.lens, enc_key, (uint64_t)s * B, dmid,
                                     t->sp.skip_from);
    if (e) return e;
    return qac_kl_embed_bwd(t, &sd->enc, &t->wk, &t->g, &t->w, sd->in.pw, sd->in.plan_w, sd->in.pt, sd->in.plan_t,
                            enc_key, (uint64_t)s * B);
}

// PAIR (trainer/loss.c qac_pair_loss) with one passage per query, as the
// pre-trainer batches it: t->x holds the queries [B,C] then the passages
// [B,C]. L_q is InfoNCE of the queries over the passages and L_p of the
// passages over the queries (no negatives: n = 1), both with raw dot
// products in fp64; loss (1 - alpha) L_q + alpha L_p into d_loss[2] and
// its gradient into t->dx, combined with cuBLAS (no new kernel).
qac_status pair_loss(pretrainer *t, int B) {
    const int C = t->cfg.hidden_size;
    const double a = t->sp.alpha, one_minus = 1.0 - a;
    const float af = (float)a, omf = (float)one_minus;
    const size_t BC = (size_t)B * C;
    float *q = t->x, *p = t->x + BC;
    qac_status e;
    if ((e = qac_kt_infonce(t->blas, t->d_loss + 2, t->dx, t->dx + BC, q, p, B, 1, C, 1.0f, QAC_SIM_DOT, t->cl_work,
                            t->stream)) ||
        (e = qac_kt_infonce(t->blas, t->d_pair, t->dx2 + BC, t->dx2, p, q, B, 1, C, 1.0f, QAC_SIM_DOT, t->cl_work,
                            t->stream)))
        return e;
    QAC_CUBLAS(cublasSetPointerMode(t->blas, CUBLAS_POINTER_MODE_HOST));
    QAC_CUBLAS(cublasDscal(t->blas, 1, &one_minus, t->d_loss + 2, 1));
    QAC_CUBLAS(cublasDaxpy(t->blas, 1, &a, t->d_pair, 1, t->d_loss + 2, 1));
    QAC_CUBLAS(cublasSscal(t->blas, (int)(2 * BC), &omf, t->dx, 1));
    QAC_CUBLAS(cublasSaxpy(t->blas, (int)(2 * BC), &af, t->dx2, 1, t->dx, 1));
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
        const int T = sd->in.T;
        const size_t NC = (size_t)B * T * C;
        const uint64_t base = (uint64_t)s * B;
        if ((e = encoder_fwd(t, s, enc_key))) return e;
        // the head's input: the bottleneck at position 0, hidden[skip_from] after it
        QAC_CU(cudaMemcpyAsync(sd->head.hidden, sd->enc.hidden + (size_t)t->sp.skip_from * NC, NC * sizeof(float),
                               cudaMemcpyDeviceToDevice, st));
        QAC_CU(cudaMemcpy2DAsync(sd->head.hidden, (size_t)T * C * sizeof(float), sd->pooled, (size_t)C * sizeof(float),
                                 (size_t)C * sizeof(float), B, cudaMemcpyDeviceToDevice, st));
        if ((e = qac_kl_layers_fwd(t, &sd->head, &t->wk, &t->hw, sd->in.lens, head_key, base))) return e;
        QAC_CU(cudaMemsetAsync(sd->dlast, 0, NC * sizeof(float), st));
        QAC_CU(cudaMemsetAsync(sd->dhead, 0, NC * sizeof(float), st));
    }
    // the head's MLM, then the late MLM on the encoder's last layer
    const float *heads[2] = {last_of(t, &t->sd[0].head), last_of(t, &t->sd[1].head)};
    const float *lasts[2] = {last_of(t, &t->sd[0].enc), last_of(t, &t->sd[1].enc)};
    float *const dheads[2] = {t->sd[0].dhead, t->sd[1].dhead};
    float *const dlasts[2] = {t->sd[0].dlast, t->sd[1].dlast};
    if ((e = mlm_run(t, t->d_loss + 1, heads, dheads, 0)) || (e = mlm_run(t, t->d_loss + 0, lasts, dlasts, 0)))
        return e;
    // the contrastive loss on the representations, siblings adjacent (row
    // 2i + s); PAIR: the queries (side b) in rows 0..B-1, the passages
    // (side a) in rows B..2B-1
    const size_t rowb = (size_t)C * sizeof(float);
    const int pair = t->sp.alpha > 0;
    for (int s = 0; s < 2; s++) {
        pside *sd = &t->sd[s];
        QAC_CU(qac_k_pool(sd->rep, lasts[s], sd->in.lens, B, sd->in.T, C, mean, t->sp.normalize, st));
        if (pair)
            QAC_CU(cudaMemcpyAsync(t->x + (size_t)(1 - s) * B * C, sd->rep, B * rowb, cudaMemcpyDeviceToDevice, st));
        else
            QAC_CU(cudaMemcpy2DAsync(t->x + (size_t)s * C, 2 * rowb, sd->rep, rowb, rowb, B, cudaMemcpyDeviceToDevice,
                                     st));
    }
    if ((e = pair ? pair_loss(t, B) : qac_kt_cocondenser(t->blas, t->d_loss + 2, t->dx, t->x, 2 * B, C, t->sp.tau,
                                                           t->cl_work, st)))
        return e;
    for (int s = 0; s < 2; s++) {
        pside *sd = &t->sd[s];
        const size_t NC = (size_t)B * sd->in.T * C;
        if (pair)
            QAC_CU(cudaMemcpyAsync(sd->drep, t->dx + (size_t)(1 - s) * B * C, B * rowb, cudaMemcpyDeviceToDevice, st));
        else
            QAC_CU(cudaMemcpy2DAsync(sd->drep, rowb, t->dx + (size_t)s * C, 2 * rowb, rowb, B, cudaMemcpyDeviceToDevice,
                                     st));
        QAC_CU(qac_kt_pool_bwd(sd->dtmp, sd->drep, lasts[s], sd->in.lens, B, sd->in.T, C, mean, t->sp.normalize, st));
        QAC_CU(qac_kt_add(sd->dlast, sd->dtmp, NC, st));
    }
    // per side: the head, its input split into the bottleneck and the middle
    // layer, then the encoder with both
    for (int s = 0; s < 2; s++) {
        pside *sd = &t->sd[s];
        const int T = sd->in.T;
        const size_t NC = (size_t)B * T * C;
        const uint64_t base = (uint64_t)s * B;
        QAC_CU(cudaMemcpyAsync(t->wk.dy, sd->dhead, NC * sizeof(float), cudaMemcpyDeviceToDevice, st));
        if ((e = qac_kl_layers_bwd(t, &sd->head, &t->wk, &t->hw, &t->hg, sd->in.lens, head_key, base, NULL, 0)))
            return e;
        QAC_CU(cudaMemcpy2DAsync(sd->drep, rowb, t->wk.dy, (size_t)T * rowb, rowb, B, cudaMemcpyDeviceToDevice, st));
        QAC_CU(cudaMemcpyAsync(sd->dmid, t->wk.dy, NC * sizeof(float), cudaMemcpyDeviceToDevice, st));
        QAC_CU(cudaMemset2DAsync(sd->dmid, (size_t)T * rowb, 0, rowb, B, st));
        if ((e = encoder_bwd(t, s, enc_key, sd->dmid))) return e;
    }
    return QAC_OK;
}

// CoT-MAE's step (trainer/pretrain.c grads_cotmae): the encoder's MLM, and
// per side a decoder that reconstructs the other text (din, masked at the
// decoder's rate) from this side's bottleneck. The decoder's input is the
// backbone's embedding layer on din's ids with the heads' dropout (layer 0,
// site EMB, as the released code's embedding module in train mode), then
// position 0 replaced by the bottleneck; its layers are the head stack.
qac_status cotmae_step(pretrainer *t, uint64_t enc_key, uint64_t head_key) {
    const int B = t->sd[0].B, C = t->cfg.hidden_size;
    const size_t rowb = (size_t)C * sizeof(float);
    cudaStream_t st = t->stream;
    qac_status e;
    for (int s = 0; s < 2; s++) {
        pside *sd = &t->sd[s];
        const int hT = sd->din.T;
        const uint64_t base = (uint64_t)s * B;
        if ((e = encoder_fwd(t, s, enc_key)) ||
            (e = qac_kl_embed_fwd(t, &sd->head, sd->din.ids, &t->w, head_key, base)))
            return e;
        QAC_CU(cudaMemcpy2DAsync(sd->head.hidden, (size_t)hT * rowb, sd->pooled, rowb, rowb, B,
                                 cudaMemcpyDeviceToDevice, st));
        if ((e = qac_kl_layers_fwd(t, &sd->head, &t->wk, &t->hw, sd->din.lens, head_key, base))) return e;
        QAC_CU(cudaMemsetAsync(sd->dlast, 0, (size_t)B * sd->in.T * rowb, st));
        QAC_CU(cudaMemsetAsync(sd->dhead, 0, (size_t)B * hT * rowb, st));
    }
    // the decoders' MLM on their targets' labels, then the encoder's
    const float *heads[2] = {last_of(t, &t->sd[0].head), last_of(t, &t->sd[1].head)};
    const float *lasts[2] = {last_of(t, &t->sd[0].enc), last_of(t, &t->sd[1].enc)};
    float *const dheads[2] = {t->sd[0].dhead, t->sd[1].dhead};
    float *const dlasts[2] = {t->sd[0].dlast, t->sd[1].dlast};
    if ((e = mlm_run(t, t->d_loss + 1, heads, dheads, 1)) || (e = mlm_run(t, t->d_loss + 0, lasts, dlasts, 0)))
        return e;
    QAC_CU(cudaMemsetAsync(t->d_loss + 2, 0, sizeof(double), st));
    for (int s = 0; s < 2; s++) {
        pside *sd = &t->sd[s];
        const int hT = sd->din.T;
        const uint64_t base = (uint64_t)s * B;
        QAC_CU(cudaMemcpyAsync(t->wk.dy, sd->dhead, (size_t)B * hT * rowb, cudaMemcpyDeviceToDevice, st));
        if ((e = qac_kl_layers_bwd(t, &sd->head, &t->wk, &t->hw, &t->hg, sd->din.lens, head_key, base, NULL, 0)))
            return e;
        // position 0 was the bottleneck: its gradient goes to the pooling,
        // none to that position's embedding
        QAC_CU(cudaMemcpy2DAsync(sd->drep, rowb, t->wk.dy, (size_t)hT * rowb, rowb, B, cudaMemcpyDeviceToDevice, st));
        QAC_CU(cudaMemset2DAsync(t->wk.dy, (size_t)hT * rowb, 0, rowb, B, st));
        if ((e = qac_kl_embed_bwd(t, &sd->head, &t->wk, &t->g, &t->w, sd->din.pw, sd->din.plan_w, sd->din.pt,
                                  sd->din.plan_t, head_key, base)) ||
            (e = encoder_bwd(t, s, enc_key, NULL)))
            return e;
    }
    return QAC_OK;
}

// The query-generation step (trainer/qgen.c qac_qgen_objective_grads):
// the passage (side 0's input) through the encoder with MLM, and the
// decoder generating the unmasked query (side 0's din, next-token labels)
// from the passage's bottleneck. The decoder's input is the backbone's
// embedding pass on the query with its dropout at layer 1 of the decoder's
// key, position 0 replaced by the bottleneck, then GPT-2's input dropout
// (layer 0); the decoder's key is the encoder's salted, sequence ids 0..B-1.
qac_status qgen_step(pretrainer *t, uint64_t enc_key) {
    pside *sd = &t->sd[0];
    qac_kl_gpt_acts *ga = &sd->gen;
    const int B = sd->B, C = t->cfg.hidden_size, hT = sd->din.T;
    const size_t rowb = (size_t)C * sizeof(float), NC = (size_t)B * hT * C;
    const uint64_t dkey = qac_rng_mix(enc_key ^ QAC_QGEN_DROP_SALT);
    const qac_kt_drop din_drop = qac_kl_drop(t->p_hidden, dkey, 0);
    cudaStream_t st = t->stream;
    qac_status e;
    if ((e = encoder_fwd(t, 0, enc_key)) ||
        (e = qac_kl_embed_fwd_into(t, ga->hidden, ga->emb, ga->emb_mean, ga->emb_rstd, sd->din.ids, NULL, &t->w, B, hT,
                                   dkey, 0, 1)))
        return e;
    QAC_CU(cudaMemcpy2DAsync(ga->hidden, (size_t)hT * rowb, sd->pooled, rowb, rowb, B, cudaMemcpyDeviceToDevice, st));
    if (t->p_hidden > 0)
        QAC_CU(qac_kt_dropout(ga->hidden, ga->hidden, din_drop, 0, QAC_DROP_EMB, B, hT, C, QAC_PREC_FP32, st));
    if ((e = qac_kl_gpt_fwd(t, ga, &t->wk, &t->qw, t->qc.window, sd->din.lens, dkey, 0))) return e;
    QAC_CU(cudaMemsetAsync(sd->dlast, 0, (size_t)B * sd->in.T * rowb, st));
    QAC_CU(cudaMemsetAsync(sd->dhead, 0, NC * sizeof(float), st));
    // the next-token loss, then the encoder's MLM, both through the tied head
    const float *outs[2] = {ga->out, NULL}, *lasts[2] = {last_of(t, &sd->enc), NULL};
    float *const douts[2] = {sd->dhead, NULL}, *const dlasts[2] = {sd->dlast, NULL};
    if ((e = mlm_run(t, t->d_loss + 1, outs, douts, 1)) || (e = mlm_run(t, t->d_loss + 0, lasts, dlasts, 0))) return e;
    QAC_CU(cudaMemsetAsync(t->d_loss + 2, 0, sizeof(double), st));
    if ((e = qac_kl_gpt_bwd(t, ga, &t->wk, &t->qw, &t->qg, t->qc.window, sd->din.lens, sd->dhead, dkey, 0))) return e;
    if (t->p_hidden > 0)
        QAC_CU(qac_kt_dropout(t->wk.dy, t->wk.dy, din_drop, 0, QAC_DROP_EMB, B, hT, C, QAC_PREC_FP32, st));
    // position 0 was the bottleneck: its gradient to the pooling, the rest
    // to the query's embeddings
    QAC_CU(cudaMemcpy2DAsync(sd->drep, rowb, t->wk.dy, (size_t)hT * rowb, rowb, B, cudaMemcpyDeviceToDevice, st));
    QAC_CU(cudaMemset2DAsync(t->wk.dy, (size_t)hT * rowb, 0, rowb, B, st));
    if ((e = qac_kl_embed_bwd_from(t, &t->wk, ga->emb, ga->emb_mean, ga->emb_rstd, B, hT, &t->g, &t->w, sd->din.pw,
                                   sd->din.plan_w, sd->din.pt, sd->din.plan_t, qac_scatter_plan{0, 0, 0}, NULL, dkey, 0,
                                   1)))
        return e;
    return encoder_bwd(t, 0, enc_key, NULL);
}

void destroy(pretrainer *t) {
    if (!t) return;
    if (t->stream) cudaStreamSynchronize(t->stream);
    for (int i = 0; i < 2; i++) {
        cudaFree(t->sd[i].mem);
        cudaFreeHost(t->sd[i].h_stage);
    }
    cudaFree(t->wk.mem), cudaFree(t->mb.mem), cudaFree(t->x), cudaFree(t->dx), cudaFree(t->dx2), cudaFree(t->cl_work);
    cudaFree(t->d_pair);
    qac_kl_dev_release(t);
    free(t->counts);
    free(t->h_targets);
    free(t);
}

qac_status init(pretrainer *t, const float *enc, const float *heads) {
    qac_status e = qac_kl_dev_init(t, 3);
    if (e) return e;
    // views: the same binders as the CPU's over the device block
    const int qgen = t->sp.objective == QAC_PT_QGEN;
    const size_t n_stack = qgen ? qac_qgen_param_count(&t->qc) : qac_bert_stack_param_count(&t->hc);
    const int C = t->cfg.hidden_size, V = t->cfg.vocab_size;
    qac_bert_params_bind(&t->w, &t->cfg, t->params);
    qac_bert_params_bind(&t->g, &t->cfg, t->grads);
    if (qgen) {
        qac_qgen_bind(&t->qw, &t->qc, t->params + t->sp.n_enc);
        qac_qgen_bind(&t->qg, &t->qc, t->grads + t->sp.n_enc);
    } else {
        qac_bert_stack_bind(&t->hw, &t->hc, t->params + t->sp.n_enc);
        qac_bert_stack_bind(&t->hg, &t->hc, t->grads + t->sp.n_enc);
    }
    qac_mlm_bind(&t->mh, t->params + t->sp.n_enc + n_stack, C, V);
    qac_mlm_bind(&t->mg, t->grads + t->sp.n_enc + n_stack, C, V);
    if (t->sp.alpha > 0) QAC_CU(cudaMalloc((void **)&t->d_pair, sizeof(double)));
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
    if (spec->objective != QAC_PT_COCONDENSER && spec->objective != QAC_PT_COTMAE && spec->objective != QAC_PT_QGEN)
        return qac_set_error(QAC_ERR_UNSUPPORTED, "CUDA pre-trainer: objective %d does not run on the GPU",
                             spec->objective);
    if (!qac_cuda_available()) return qac_set_error(QAC_ERR_UNSUPPORTED, "no usable CUDA GPU for pre-training");
    if (spec->prec != QAC_PREC_FP32 && spec->prec != QAC_PREC_BF16)
        return qac_set_error(QAC_ERR_UNSUPPORTED, "CUDA pre-trainer: precision must be fp32 or bf16");
    if (c->num_heads <= 0 || c->hidden_size % c->num_heads || !qac_kt_pool_bwd_supported(c->hidden_size) ||
        c->max_position >= (1 << 20))
        return qac_set_error(QAC_ERR_UNSUPPORTED, "CUDA pre-trainer: %d heads over %d hidden units, %d positions",
                             c->num_heads, c->hidden_size, c->max_position);
    if (spec->head_layers < 1 || !(spec->alpha >= 0 && spec->alpha <= 1) ||
        (spec->alpha > 0 && spec->objective != QAC_PT_COCONDENSER) ||
        (spec->objective == QAC_PT_COCONDENSER &&
         (spec->skip_from < 0 || spec->skip_from >= c->num_layers || !(spec->tau > 0))))
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
    t->hc.num_layers = spec->objective == QAC_PT_QGEN ? 0 : spec->head_layers;
    qac_qgen_config_default(&t->qc, c);
    t->qc.layers = spec->head_layers;
    t->qc.window = spec->window;
    t->prec = spec->prec;
    t->esize = qac_prec_size(spec->prec);
    t->p_hidden = spec->p_hidden;
    t->p_attn = spec->p_attn;
    qac_kl_ctx_attention(t);
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
                                                const qac_cuda_pt_seqs *b, const qac_cuda_pt_seqs *da,
                                                const qac_cuda_pt_seqs *db, uint64_t enc_key, uint64_t head_key,
                                                double losses[3]) {
    pretrainer *t = h->t;
    const qac_bert_config *c = &t->cfg;
    const int obj = t->sp.objective;
    const int dec = obj == QAC_PT_COTMAE ? HEAD_COTMAE : obj == QAC_PT_QGEN ? HEAD_QGEN : HEAD_CONDENSER;
    const int nsides = dec == HEAD_QGEN ? 1 : 2;
    qac_status st;
    if (B < (dec == HEAD_CONDENSER && !(t->sp.alpha > 0) ? 2 : 1))
        return qac_set_error(QAC_ERR_INVALID, "CUDA pre-trainer: the contrastive loss needs 2 pairs or more");
    if (dec == HEAD_COTMAE && (!da || !db))
        return qac_set_error(QAC_ERR_INVALID, "CUDA pre-trainer: CoT-MAE needs the decoders' targets");
    if ((st = check_seqs(c, a, B, "first text")) || (dec != HEAD_QGEN && (st = check_seqs(c, b, B, "second text"))) ||
        (dec == HEAD_COTMAE && ((st = check_seqs(c, da, B, "first decoder target")) ||
                                (st = check_seqs(c, db, B, "second decoder target")))))
        return st;
    // query generation: the decoder reads the unmasked query b with its
    // next-token labels (b's own labels are not read)
    qac_cuda_pt_seqs qb;
    if (dec == HEAD_QGEN) {
        if (!b->ids || !b->lens || b->T < 1 || b->T > c->max_position)
            return qac_set_error(QAC_ERR_INVALID, "CUDA pre-trainer: queries missing or too long (T %d)", b->T);
        for (int i = 0; i < B; i++)
            if (b->lens[i] < 1 || b->lens[i] > b->T)
                return qac_set_error(QAC_ERR_INVALID, "CUDA pre-trainer: query %d has length %d (T=%d)", i, b->lens[i],
                                     b->T);
        const size_t n = (size_t)B * b->T;
        if (n > t->targets_cap) {
            int32_t *p = (int32_t *)realloc(t->h_targets, n * sizeof(int32_t));
            if (!p) return qac_set_error(QAC_ERR_NOMEM, "CUDA pre-trainer: out of host memory");
            t->h_targets = p, t->targets_cap = n;
        }
        qac_qgen_targets(t->h_targets, b->ids, b->lens, B, b->T);
        qb = {b->T, b->ids, t->h_targets, b->lens};
        if ((st = check_seqs(c, &qb, B, "query"))) return st;
    }
    QAC_CU(cudaSetDevice(t->device));
    // side s: the encoder reads q[s], the head dq[s] (q[s] itself for the Condenser head)
    const qac_cuda_pt_seqs *q[2] = {a, b};
    const qac_cuda_pt_seqs *dq[2] = {dec == HEAD_COTMAE ? da : dec == HEAD_QGEN ? &qb : a,
                                     dec == HEAD_COTMAE ? db : b};
    const int C = c->hidden_size, NH = c->num_heads;
    size_t Nmax = 0, nPmax = 0, M[2] = {0, 0};
    t->sd[1].in.M = t->sd[1].din.M = 0;
    for (int s = 0; s < nsides; s++) {
        const qac_cuda_pt_seqs *both[2] = {q[s], dq[s]};
        for (int k = 0; k < 2; k++) {
            int m = 0;
            for (size_t i = 0; i < (size_t)B * both[k]->T; i++) m += both[k]->labels[i] >= 0;
            const size_t N = (size_t)B * both[k]->T, nP = (size_t)B * NH * both[k]->T * both[k]->T;
            Nmax = N > Nmax ? N : Nmax;
            nPmax = nP > nPmax ? nP : nPmax;
            if (k == 0) t->sd[s].in.M = m;
            if (k == 1 && dec) t->sd[s].din.M = m;
            M[k] += m;
        }
    }
    // rows: the larger loss's; labels: the encoder's, then the decoders'
    const size_t rows = dec && M[1] > M[0] ? M[1] : M[0], nlab = M[0] + (dec ? M[1] : 0);
    // the work buffers also serve the query decoder's MLP (width qc.inner)
    qac_kl_ctx wide = *t;
    if (dec == HEAD_QGEN && t->qc.inner > wide.cfg.intermediate_size) wide.cfg.intermediate_size = t->qc.inner;
    for (int s = 0; s < nsides; s++)
        if ((st = ensure_side(t, &t->sd[s], B, q[s]->T, dq[s]->T, dec))) return st;
    if ((st = qac_kl_work_ensure(&wide, &t->wk, Nmax, nPmax)) || (st = ensure_mlm(t, rows ? rows : 1, nlab ? nlab : 1)))
        return st;
    const int pair = dec == HEAD_CONDENSER && t->sp.alpha > 0;
    if (dec == HEAD_CONDENSER &&
        ((st = grow(&t->x, &t->x_cap, 2 * (size_t)B * C)) || (st = grow(&t->dx, &t->dx_cap, 2 * (size_t)B * C)) ||
         (pair && (st = grow(&t->dx2, &t->dx2_cap, 2 * (size_t)B * C))) ||
         (st = grow(&t->cl_work, &t->cl_cap,
                    pair ? qac_kt_infonce_scratch(B, 1, C) : qac_kt_cocondenser_scratch(2 * B, C)))))
        return st;
    int32_t *lab = t->mb.labels, *dlab = t->mb.labels + M[0];
    if ((st = upload_side(t, &t->sd[0], a, lab, dq[0], dlab)) ||
        (nsides > 1 &&
         (st = upload_side(t, &t->sd[1], b, lab + t->sd[0].in.M, dq[1], dec ? dlab + t->sd[0].din.M : NULL))))
        return st;
    QAC_CU(cudaMemsetAsync(t->grads, 0, t->n_params * sizeof(float), t->stream));
    st = dec == HEAD_QGEN     ? qgen_step(t, enc_key)
         : dec == HEAD_COTMAE ? cotmae_step(t, enc_key, head_key)
                              : cocondenser_step(t, enc_key, head_key);
    if (st) return qac_wrap_error(st, "CUDA pre-training step");
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
