// The CUDA training backend (kernels/qac_cuda_train.h): the training step
// of trainer/trainer.c and model/bert_backward.c on the GPU. Forward keeps
// every layer's tensors; backward reads them top-down, accumulating into
// one fp32 gradient block; clipping and AdamW run on the device.
//
// Not yet run on a GPU: compiled and reviewed only, until
// scripts/gpu_train_verify.sh passes on a device.
#include <stdlib.h>
#include <string.h>

#include "bert_kernels.cuh"
#include "train_kernels.cuh"

#ifdef QAC_HAVE_NCCL
#include <nccl.h>
#endif

extern "C" {
#include "bert_cpu.h"
#include "qac_cuda_train.h"
}

namespace {

constexpr size_t BLAS_WORKSPACE = 32u << 20;
constexpr size_t ALIGN = 256;

// One side of a batch (the queries or the passages): its inputs and every
// tensor backward reads, bound into one device allocation per (B, T).
struct side {
    int B, T;
    void *mem;
    size_t cap; // bytes of mem
    int32_t *ids, *plan_w, *plan_t;
    int *lens;
    float *emb, *emb_mean, *emb_rstd;
    float *hidden;    // [L+1, N, C]
    void *hidden_act; // [L+1, N, C] act (== hidden in fp32)
    void *q, *k, *v;  // [L, N*C] each, heads split, bias added
    void *P;          // [L, B*NH*T*T]
    void *atty;       // [L, N*C]
    float *res1, *ln1, *res2; // [L, N*C]
    void *ln1_act;            // [L, N*C] (== ln1 in fp32)
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd; // [L, N]
    void *ffn_pre, *ffn_act;                          // [L, N*I]
    float *reps, *dreps; // [B, C]: set by the caller into the whole batch's arrays
    // host side: pinned staging of ids, lens and the two scatter plans
    int32_t *h_stage;
    size_t h_cap; // ints
    qac_scatter_plan pw, pt;
};

// Work buffers shared by both sides (sized for the larger).
struct work {
    void *mem;
    size_t cap;
    void *big;          // [N, max(I, 3C)] act: the QKV product, then dFFN / dQKV
    void *proj;         // [N, C] act: projection outputs, then masked gradients
    float *S;           // [B*NH*T*T] scores, then their gradient
    void *Pd, *dS;      // [B*NH*T*T] act
    void *O, *dq, *dk, *dv, *datty; // [N, C] act
    float *dy, *dres, *dln1;        // [N, C]
    float *partial;                 // column-sum partials
};

struct cuda_trainer {
    qac_bert_config cfg;
    int mean_pooling, normalize;
    qac_precision prec;
    size_t esize;
    int device;
    float p_hidden, p_attn;
    float tau;
    qac_similarity sim;
    double max_grad_norm, beta1, beta2, eps, wd;
    qac_kt_tensors tensors;

    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_ws;

    size_t n_params;
    float *params, *grads, *adam_m, *adam_v; // fp32 blocks, parameter layout
    __nv_bfloat16 *params_act;               // bf16 copy (bf16 mode only)
    qac_bert_params w, g;                    // views into params and grads
    double *norm_partial, *d_norm, *d_loss;
    float *d_scale;
    double *h_scalars; // pinned: [0] loss, [1] norm

    side sq, sp;
    work wk;
    // the loss's work buffer, and the whole batch's representations and
    // their gradients (a GradCache chunk's side points into them)
    char *loss_work;
    size_t loss_cap;
    float *reps_q, *reps_p, *dreps_q, *dreps_p;
    size_t cap_rq, cap_rp, cap_dq, cap_dp;
    int chunk;
    // several GPUs: this trainer is rank `rank` of `world` (0: alone)
    int world, rank;
    unsigned char dist_id[128];
#ifdef QAC_HAVE_NCCL
    ncclComm_t comm;
#endif
    int32_t *counts; // host scratch of the scatter plans
    int counts_cap;
};

size_t align_up(size_t x) { return (x + ALIGN - 1) & ~(ALIGN - 1); }

// Bump allocation over a base that may be NULL (sizing pass).
struct bump {
    char *base;
    size_t off;
    template <typename P> void take(P **p, size_t bytes) {
        *p = base ? (P *)(base + off) : nullptr;
        off += align_up(bytes ? bytes : 1);
    }
};

const void *act_w(const cuda_trainer *t, const float *view) {
    if (t->prec == QAC_PREC_FP32) return view;
    return t->params_act + (view - t->params);
}

size_t big_cols(const qac_bert_config *c) {
    return (size_t)(c->intermediate_size > 3 * c->hidden_size ? c->intermediate_size : 3 * c->hidden_size);
}

size_t bind_side(const cuda_trainer *t, side *s, char *base, int B, int T) {
    const qac_bert_config *c = &t->cfg;
    const size_t N = (size_t)B * T, C = c->hidden_size, I = c->intermediate_size, L = c->num_layers;
    const size_t NH = c->num_heads, es = t->esize, nP = (size_t)B * NH * T * T;
    const size_t nplan = qac_scatter_plan_ints((int)N);
    bump b = {base, 0};
    b.take(&s->ids, N * sizeof(int32_t));
    b.take(&s->plan_w, nplan * sizeof(int32_t));
    b.take(&s->plan_t, nplan * sizeof(int32_t));
    b.take(&s->lens, (size_t)B * sizeof(int));
    b.take(&s->emb, N * C * 4);
    b.take(&s->emb_mean, N * 4);
    b.take(&s->emb_rstd, N * 4);
    b.take(&s->hidden, (L + 1) * N * C * 4);
    if (t->prec == QAC_PREC_FP32)
        s->hidden_act = s->hidden;
    else
        b.take((char **)&s->hidden_act, (L + 1) * N * C * es);
    b.take((char **)&s->q, L * N * C * es);
    b.take((char **)&s->k, L * N * C * es);
    b.take((char **)&s->v, L * N * C * es);
    b.take((char **)&s->P, L * nP * es);
    b.take((char **)&s->atty, L * N * C * es);
    b.take(&s->res1, L * N * C * 4);
    b.take(&s->ln1, L * N * C * 4);
    b.take(&s->res2, L * N * C * 4);
    if (t->prec == QAC_PREC_FP32)
        s->ln1_act = s->ln1;
    else
        b.take((char **)&s->ln1_act, L * N * C * es);
    b.take(&s->ln1_mean, L * N * 4);
    b.take(&s->ln1_rstd, L * N * 4);
    b.take(&s->ln2_mean, L * N * 4);
    b.take(&s->ln2_rstd, L * N * 4);
    b.take((char **)&s->ffn_pre, L * N * I * es);
    b.take((char **)&s->ffn_act, L * N * I * es);
    s->B = B;
    s->T = T;
    return b.off;
}

size_t bind_work(const cuda_trainer *t, work *w, char *base, size_t N, size_t nP) {
    const qac_bert_config *c = &t->cfg;
    const size_t C = c->hidden_size, I = c->intermediate_size, es = t->esize;
    bump b = {base, 0};
    b.take((char **)&w->big, N * big_cols(c) * es);
    b.take((char **)&w->proj, N * C * es);
    b.take(&w->S, nP * 4);
    b.take((char **)&w->Pd, nP * es);
    b.take((char **)&w->dS, nP * es);
    b.take((char **)&w->O, N * C * es);
    b.take((char **)&w->dq, N * C * es);
    b.take((char **)&w->dk, N * C * es);
    b.take((char **)&w->dv, N * C * es);
    b.take((char **)&w->datty, N * C * es);
    b.take(&w->dy, N * C * 4);
    b.take(&w->dres, N * C * 4);
    b.take(&w->dln1, N * C * 4);
    size_t np = qac_kt_colsum_floats((int)N, (int)C, 2);
    const size_t n2 = qac_kt_colsum_floats((int)N, (int)I, 1), n3 = qac_kt_colsum_floats((int)N, (int)(3 * C), 1);
    np = np > n2 ? np : n2;
    np = np > n3 ? np : n3;
    b.take(&w->partial, np * 4);
    return b.off;
}

qac_status ensure_side(cuda_trainer *t, side *s, int B, int T) {
    const size_t need = bind_side(t, s, NULL, B, T);
    if (need > s->cap) {
        QAC_CU(cudaStreamSynchronize(t->stream));
        cudaFree(s->mem);
        s->mem = NULL;
        s->cap = 0;
        cudaError_t e = cudaMalloc(&s->mem, need);
        if (e != cudaSuccess)
            return qac_set_error(QAC_ERR_NOMEM, "CUDA trainer: cannot allocate %.2f GiB of activations for %d x %d "
                                                "tokens (%s)",
                                 (double)need / (1 << 30), B, T, cudaGetErrorString(e));
        s->cap = need;
    }
    bind_side(t, s, (char *)s->mem, B, T);
    const size_t ints = 2 + (size_t)B * T + (size_t)B + 2 * qac_scatter_plan_ints(B * T);
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

qac_status ensure_work(cuda_trainer *t, size_t N, size_t nP) {
    const size_t need = bind_work(t, &t->wk, NULL, N, nP);
    if (need > t->wk.cap) {
        QAC_CU(cudaStreamSynchronize(t->stream));
        cudaFree(t->wk.mem);
        t->wk.mem = NULL;
        t->wk.cap = 0;
        cudaError_t e = cudaMalloc(&t->wk.mem, need);
        if (e != cudaSuccess)
            return qac_set_error(QAC_ERR_NOMEM, "CUDA trainer: cannot allocate %.2f GiB of work buffers (%s)",
                                 (double)need / (1 << 30), cudaGetErrorString(e));
        t->wk.cap = need;
    }
    bind_work(t, &t->wk, (char *)t->wk.mem, N, nP);
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

// Copy ids and lens to the device and build both scatter plans there.
qac_status upload_side(cuda_trainer *t, side *s, const int32_t *ids, const int *lens) {
    const int N = s->B * s->T;
    // the staging buffer may still feed the previous chunk's copies
    QAC_CU(cudaStreamSynchronize(t->stream));
    const size_t nplan = qac_scatter_plan_ints(N);
    int32_t *h_ids = s->h_stage, *h_lens = h_ids + N, *h_pw = h_lens + s->B, *h_pt = h_pw + nplan;
    memcpy(h_ids, ids, (size_t)N * sizeof(int32_t));
    memcpy(h_lens, lens, (size_t)s->B * sizeof(int));
    s->pw = qac_scatter_plan_build(h_pw, ids, N, t->cfg.vocab_size, t->counts);
    s->pt = qac_scatter_plan_build(h_pt, NULL, N, t->cfg.type_vocab_size, t->counts);
    QAC_CU(cudaMemcpyAsync(s->ids, h_ids, (size_t)N * sizeof(int32_t), cudaMemcpyHostToDevice, t->stream));
    QAC_CU(cudaMemcpyAsync(s->lens, h_lens, (size_t)s->B * sizeof(int), cudaMemcpyHostToDevice, t->stream));
    QAC_CU(cudaMemcpyAsync(s->plan_w, h_pw, nplan * sizeof(int32_t), cudaMemcpyHostToDevice, t->stream));
    QAC_CU(cudaMemcpyAsync(s->plan_t, h_pt, nplan * sizeof(int32_t), cudaMemcpyHostToDevice, t->stream));
    return QAC_OK;
}

#define AT(ptr, l, n) ((ptr) + (size_t)(l) * (n))
// element offset into an act-typed buffer
#define ACT(ptr, l, n) ((void *)((char *)(ptr) + (size_t)(l) * (n) * t->esize))

qac_kt_drop drop_at(const cuda_trainer *t, float p, uint64_t key, uint64_t seq_base) {
    qac_kt_drop d;
    d.p = p;
    d.key = key;
    d.seq_base = seq_base;
    return d;
}

qac_status forward_side(cuda_trainer *t, side *s, uint64_t key, uint64_t seq_base) {
    const qac_bert_config *c = &t->cfg;
    const int B = s->B, T = s->T, N = B * T, C = c->hidden_size, I = c->intermediate_size, NH = c->num_heads;
    const size_t NC = (size_t)N * C, NI = (size_t)N * I, nP = (size_t)B * NH * T * T;
    const qac_precision p = t->prec;
    const float eps = c->layer_norm_eps;
    const qac_kt_drop dh = drop_at(t, t->p_hidden, key, seq_base), da = drop_at(t, t->p_attn, key, seq_base);
    const qac_bert_params *w = &t->w;
    work *k = &t->wk;
    cudaStream_t st = t->stream;

    QAC_CU(qac_kt_embed_fwd(s->emb, s->ids, NULL, w->word_emb, w->pos_emb, w->type_emb, N, T, C, st));
    QAC_CU(qac_kt_layernorm_fwd(s->hidden, NULL, s->emb_mean, s->emb_rstd, s->emb, w->emb_ln_w, w->emb_ln_b, N, C, eps,
                                p, st));
    if (t->p_hidden > 0) QAC_CU(qac_kt_dropout(s->hidden, s->hidden, dh, 0, QAC_DROP_EMB, B, T, C, QAC_PREC_FP32, st));
    if (p != QAC_PREC_FP32) QAC_CU(qac_k_from_f32(s->hidden_act, s->hidden, NC, p, st));

    for (int l = 0; l < c->num_layers; l++) {
        const size_t lc = (size_t)l * C;
        const float *x = AT(s->hidden, l, NC);
        const void *xa = ACT(s->hidden_act, l, NC);
        void *q = ACT(s->q, l, NC), *kk = ACT(s->k, l, NC), *v = ACT(s->v, l, NC), *P = ACT(s->P, l, nP);
        void *atty = ACT(s->atty, l, NC), *ln1_act = ACT(s->ln1_act, l, NC);
        void *ffn_pre = ACT(s->ffn_pre, l, NI), *ffn_act = ACT(s->ffn_act, l, NI);
        float *res1 = AT(s->res1, l, NC), *ln1 = AT(s->ln1, l, NC), *res2 = AT(s->res2, l, NC);

        qac_status e = qac_kt_linear_fwd(t->blas, k->big, xa, act_w(t, w->qkv_w + lc * 3 * C), N, C, 3 * C, p);
        if (e) return e;
        if ((e = qac_kt_attention_fwd(t->blas, atty, q, kk, v, P, k->S, k->Pd, k->O, k->big, w->qkv_b + lc * 3, s->lens,
                                      da, l, B, T, C, NH, 0, 0, p, st)))
            return e;
        if ((e = qac_kt_linear_fwd(t->blas, k->proj, atty, act_w(t, w->attn_out_w + lc * C), N, C, C, p))) return e;
        QAC_CU(qac_kt_bias_dropout_residual(res1, k->proj, w->attn_out_b + lc, x, dh, l, QAC_DROP_ATT_OUT, B, T, C, p,
                                            st));
        QAC_CU(qac_kt_layernorm_fwd(ln1, p == QAC_PREC_FP32 ? NULL : ln1_act, AT(s->ln1_mean, l, N),
                                    AT(s->ln1_rstd, l, N), res1, w->ln1_w + lc, w->ln1_b + lc, N, C, eps, p, st));
        if ((e = qac_kt_linear_fwd(t->blas, ffn_pre, ln1_act, act_w(t, w->ffn_in_w + (size_t)l * I * C), N, C, I, p)))
            return e;
        QAC_CU(qac_kt_bias_gelu_fwd(ffn_pre, ffn_act, w->ffn_in_b + (size_t)l * I, N, I, p, st));
        if ((e = qac_kt_linear_fwd(t->blas, k->proj, ffn_act, act_w(t, w->ffn_out_w + lc * I), N, I, C, p))) return e;
        QAC_CU(qac_kt_bias_dropout_residual(res2, k->proj, w->ffn_out_b + lc, ln1, dh, l, QAC_DROP_FFN_OUT, B, T, C, p,
                                            st));
        QAC_CU(qac_kt_layernorm_fwd(AT(s->hidden, l + 1, NC), p == QAC_PREC_FP32 ? NULL : ACT(s->hidden_act, l + 1, NC),
                                    AT(s->ln2_mean, l, N), AT(s->ln2_rstd, l, N), res2, w->ln2_w + lc, w->ln2_b + lc, N,
                                    C, eps, p, st));
    }
    QAC_CU(qac_k_pool(s->reps, AT(s->hidden, c->num_layers, NC), s->lens, B, T, C, t->mean_pooling, t->normalize, st));
    return QAC_OK;
}

qac_status backward_side(cuda_trainer *t, side *s, uint64_t key, uint64_t seq_base) {
    const qac_bert_config *c = &t->cfg;
    const int B = s->B, T = s->T, N = B * T, C = c->hidden_size, I = c->intermediate_size, NH = c->num_heads;
    const size_t NC = (size_t)N * C, NI = (size_t)N * I, nP = (size_t)B * NH * T * T;
    const qac_precision p = t->prec;
    const qac_kt_drop dh = drop_at(t, t->p_hidden, key, seq_base), da = drop_at(t, t->p_attn, key, seq_base);
    const qac_bert_params *w = &t->w, *g = &t->g;
    work *k = &t->wk;
    cudaStream_t st = t->stream;
    qac_status e;

    QAC_CU(qac_kt_pool_bwd(k->dy, s->dreps, AT(s->hidden, c->num_layers, NC), s->lens, B, T, C, t->mean_pooling,
                           t->normalize, st));
    for (int l = c->num_layers - 1; l >= 0; l--) {
        const size_t lc = (size_t)l * C, li = (size_t)l * I;
        // y = LN2(res2), res2 = ln1 + dropout(ffn_act W2^T + b2)
        QAC_CU(qac_kt_layernorm_bwd(k->dres, g->ln2_w + lc, g->ln2_b + lc, k->dy, AT(s->res2, l, NC),
                                    AT(s->ln2_mean, l, N), AT(s->ln2_rstd, l, N), w->ln2_w + lc, k->partial, N, C, st));
        QAC_CU(qac_kt_dropout(k->proj, k->dres, dh, l, QAC_DROP_FFN_OUT, B, T, C, p, st));
        if ((e = qac_kt_linear_bwd(t->blas, k->big, p, 0.0f, g->ffn_out_w + lc * I, g->ffn_out_b + lc, k->proj,
                                   ACT(s->ffn_act, l, NI), act_w(t, w->ffn_out_w + lc * I), k->partial, N, I, C, p, st)))
            return e;
        // ffn_act = GELU(ln1 W1^T + b1)
        QAC_CU(qac_kt_gelu_bwd(k->big, k->big, ACT(s->ffn_pre, l, NI), NI, p, st));
        QAC_CU(cudaMemcpyAsync(k->dln1, k->dres, NC * sizeof(float), cudaMemcpyDeviceToDevice, st));
        if ((e = qac_kt_linear_bwd(t->blas, k->dln1, QAC_PREC_FP32, 1.0f, g->ffn_in_w + li * C, g->ffn_in_b + li, k->big,
                                   ACT(s->ln1_act, l, NC), act_w(t, w->ffn_in_w + li * C), k->partial, N, C, I, p, st)))
            return e;
        // ln1 = LN1(res1), res1 = x + dropout(atty Wo^T + bo)
        QAC_CU(qac_kt_layernorm_bwd(k->dres, g->ln1_w + lc, g->ln1_b + lc, k->dln1, AT(s->res1, l, NC),
                                    AT(s->ln1_mean, l, N), AT(s->ln1_rstd, l, N), w->ln1_w + lc, k->partial, N, C, st));
        QAC_CU(qac_kt_dropout(k->proj, k->dres, dh, l, QAC_DROP_ATT_OUT, B, T, C, p, st));
        if ((e = qac_kt_linear_bwd(t->blas, k->datty, p, 0.0f, g->attn_out_w + lc * C, g->attn_out_b + lc, k->proj,
                                   ACT(s->atty, l, NC), act_w(t, w->attn_out_w + lc * C), k->partial, N, C, C, p, st)))
            return e;
        // atty = attention(x Wqkv^T + bqkv)
        if ((e = qac_kt_attention_bwd(t->blas, k->big, k->datty, ACT(s->q, l, NC), ACT(s->k, l, NC), ACT(s->v, l, NC),
                                      ACT(s->P, l, nP), k->S, k->Pd, k->dS, k->O, k->dq, k->dk, k->dv, s->lens, da, l,
                                      B, T, C, NH, p, st)))
            return e;
        QAC_CU(cudaMemcpyAsync(k->dy, k->dres, NC * sizeof(float), cudaMemcpyDeviceToDevice, st));
        if ((e = qac_kt_linear_bwd(t->blas, k->dy, QAC_PREC_FP32, 1.0f, g->qkv_w + lc * 3 * C, g->qkv_b + lc * 3, k->big,
                                   ACT(s->hidden_act, l, NC), act_w(t, w->qkv_w + lc * 3 * C), k->partial, N, C, 3 * C,
                                   p, st)))
            return e;
    }
    // hidden[0] = dropout(LN(word + pos + type))
    if (t->p_hidden > 0) QAC_CU(qac_kt_dropout(k->dy, k->dy, dh, 0, QAC_DROP_EMB, B, T, C, QAC_PREC_FP32, st));
    QAC_CU(qac_kt_layernorm_bwd(k->dres, g->emb_ln_w, g->emb_ln_b, k->dy, s->emb, s->emb_mean, s->emb_rstd, w->emb_ln_w,
                                k->partial, N, C, st));
    QAC_CU(qac_kt_pos_bwd(g->pos_emb, k->dres, B, T, C, st));
    // dln1 (N*C floats) holds the scatter partials: at most one segment per row
    QAC_CU(qac_kt_scatter_add(g->word_emb, k->dres, s->pw, s->plan_w, k->dln1, C, st));
    QAC_CU(qac_kt_scatter_add(g->type_emb, k->dres, s->pt, s->plan_t, k->dln1, C, st));
    return QAC_OK;
}

// InfoNCE over the two sides' representations: both sides' dreps and the
// loss in t->d_loss.
qac_status loss_fwd_bwd(cuda_trainer *t, int nq, int n) {
    qac_status e = grow(&t->loss_work, &t->loss_cap, qac_kt_infonce_scratch(nq, n, t->cfg.hidden_size));
    if (e) return e;
    return qac_kt_infonce(t->blas, t->d_loss, t->dreps_q, t->dreps_p, t->reps_q, t->reps_p, nq, n,
                          t->cfg.hidden_size, t->tau, t->sim, t->loss_work, t->stream);
}

#ifdef QAC_HAVE_NCCL
qac_status nccl_check(ncclResult_t r, const char *what) {
    if (r == ncclSuccess) return QAC_OK;
    return qac_set_error(QAC_ERR_CUDA, "%s: NCCL %s", what, ncclGetErrorString(r));
}
#define QAC_NCCL(call)                                                      \
    do {                                                                    \
        qac_status st_ = nccl_check((call), #call);                         \
        if (st_ != QAC_OK) return st_;                                      \
    } while (0)
#endif

// Every rank's representations into every rank's arrays (in place: each
// rank's own rows are already at its offset).
qac_status gather_reps(cuda_trainer *t, int nq_l, int np_l) {
    if (t->world <= 0) return QAC_OK;
#ifdef QAC_HAVE_NCCL
    const size_t C = t->cfg.hidden_size;
    QAC_NCCL(ncclAllGather(t->reps_q + (size_t)t->rank * nq_l * C, t->reps_q, (size_t)nq_l * C, ncclFloat, t->comm,
                           t->stream));
    QAC_NCCL(ncclAllGather(t->reps_p + (size_t)t->rank * np_l * C, t->reps_p, (size_t)np_l * C, ncclFloat, t->comm,
                           t->stream));
    return QAC_OK;
#else
    return qac_set_error(QAC_ERR_UNSUPPORTED, "CUDA trainer: built without NCCL");
#endif
}

// The ranks' gradient blocks summed (the global loss is the same mean on
// every rank, so its gradient is the sum of the ranks' contributions).
qac_status reduce_grads(cuda_trainer *t) {
    if (t->world <= 0) return QAC_OK;
#ifdef QAC_HAVE_NCCL
    QAC_NCCL(ncclAllReduce(t->grads, t->grads, t->tensors.bounds[t->tensors.n], ncclFloat, ncclSum, t->comm,
                           t->stream));
    return QAC_OK;
#else
    return qac_set_error(QAC_ERR_UNSUPPORTED, "CUDA trainer: built without NCCL");
#endif
}

void trainer_destroy(cuda_trainer *t) {
    if (!t) return;
    if (t->stream) cudaStreamSynchronize(t->stream);
#ifdef QAC_HAVE_NCCL
    if (t->comm) ncclCommDestroy(t->comm);
#endif
    side *sides[2] = {&t->sq, &t->sp};
    for (int i = 0; i < 2; i++) {
        cudaFree(sides[i]->mem);
        cudaFreeHost(sides[i]->h_stage);
    }
    cudaFree(t->wk.mem);
    cudaFree(t->loss_work);
    cudaFree(t->reps_q), cudaFree(t->reps_p), cudaFree(t->dreps_q), cudaFree(t->dreps_p);
    cudaFree(t->params), cudaFree(t->grads), cudaFree(t->adam_m), cudaFree(t->adam_v), cudaFree(t->params_act);
    cudaFree(t->norm_partial), cudaFree(t->d_norm), cudaFree(t->d_loss), cudaFree(t->d_scale);
    cudaFreeHost(t->h_scalars);
    if (t->blas) cublasDestroy(t->blas);
    cudaFree(t->blas_ws);
    if (t->stream) cudaStreamDestroy(t->stream);
    cudaGetLastError();
    free(t->counts);
    free(t);
}

qac_status trainer_init(cuda_trainer *t, const qac_model *m) {
    QAC_CU(cudaGetDevice(&t->device));
    cudaDeviceProp prop;
    QAC_CU(cudaGetDeviceProperties(&prop, t->device));
    if (prop.major < 8)
        return qac_set_error(QAC_ERR_UNSUPPORTED, "GPU %s has compute capability %d.%d; training needs 8.0 or newer",
                             prop.name, prop.major, prop.minor);
    QAC_CU(cudaStreamCreateWithFlags(&t->stream, cudaStreamNonBlocking));
    QAC_CUBLAS(cublasCreate(&t->blas));
    QAC_CUBLAS(cublasSetStream(t->blas, t->stream));
    QAC_CU(cudaMalloc(&t->blas_ws, BLAS_WORKSPACE));
    QAC_CUBLAS(cublasSetWorkspace(t->blas, t->blas_ws, BLAS_WORKSPACE));
    if (t->prec == QAC_PREC_FP32) QAC_CUBLAS(cublasSetMathMode(t->blas, CUBLAS_PEDANTIC_MATH));
    const size_t n = t->n_params, bytes = n * sizeof(float);
    QAC_CU(cudaMalloc((void **)&t->params, bytes));
    QAC_CU(cudaMalloc((void **)&t->grads, bytes));
    QAC_CU(cudaMalloc((void **)&t->adam_m, bytes));
    QAC_CU(cudaMalloc((void **)&t->adam_v, bytes));
    if (t->prec != QAC_PREC_FP32) QAC_CU(cudaMalloc((void **)&t->params_act, n * sizeof(__nv_bfloat16)));
    QAC_CU(cudaMalloc((void **)&t->norm_partial, QAC_KT_NORM_BLOCKS * sizeof(double)));
    QAC_CU(cudaMalloc((void **)&t->d_norm, sizeof(double)));
    QAC_CU(cudaMalloc((void **)&t->d_loss, sizeof(double)));
    QAC_CU(cudaMalloc((void **)&t->d_scale, sizeof(float)));
    QAC_CU(cudaMallocHost((void **)&t->h_scalars, 2 * sizeof(double)));
    qac_bert_params_bind(&t->w, &t->cfg, t->params);
    qac_bert_params_bind(&t->g, &t->cfg, t->grads);
    QAC_CU(cudaMemsetAsync(t->grads, 0, bytes, t->stream));
    QAC_CU(cudaMemsetAsync(t->adam_m, 0, bytes, t->stream));
    QAC_CU(cudaMemsetAsync(t->adam_v, 0, bytes, t->stream));
    QAC_CU(cudaMemcpy(t->params, m->param_mem, bytes, cudaMemcpyHostToDevice));
    if (t->params_act) QAC_CU(qac_k_from_f32(t->params_act, t->params, n, t->prec, t->stream));
    QAC_CU(cudaStreamSynchronize(t->stream));
    if (t->world > 0) {
#ifdef QAC_HAVE_NCCL
        ncclUniqueId id;
        memcpy(&id, t->dist_id, sizeof id);
        QAC_NCCL(ncclCommInitRank(&t->comm, t->world, id, t->rank));
#else
        return qac_set_error(QAC_ERR_UNSUPPORTED, "CUDA trainer: several GPUs need a build with QAC_NCCL");
#endif
    }
    return QAC_OK;
}

} // namespace

struct qac_cuda_trainer {
    cuda_trainer t;
};

extern "C" qac_status qac_cuda_trainer_create(qac_cuda_trainer **out, const qac_model *m, const qac_train_opts *o,
                                              float hidden_dropout, float attn_dropout, const int *decays,
                                              int n_trained) {
    *out = NULL;
    if (!qac_cuda_available()) return qac_set_error(QAC_ERR_UNSUPPORTED, "no usable CUDA GPU for training");
    const qac_bert_config *c = &m->cfg;
    const qac_precision prec = o->gpu_precision;
    if (prec != QAC_PREC_FP32 && prec != QAC_PREC_BF16)
        return qac_set_error(QAC_ERR_UNSUPPORTED, "CUDA trainer: precision must be fp32 or bf16");
    if (n_trained < 1 || n_trained > QAC_KT_MAX_TENSORS || n_trained > QAC_BERT_NUM_TENSORS)
        return qac_set_error(QAC_ERR_INVALID, "CUDA trainer: %d trained tensors", n_trained);
    if (c->num_heads <= 0 || c->hidden_size % c->num_heads || !qac_kt_pool_bwd_supported(c->hidden_size) ||
        c->max_position >= (1 << 20))
        return qac_set_error(QAC_ERR_UNSUPPORTED, "CUDA trainer: %d heads over %d hidden units, %d positions",
                             c->num_heads, c->hidden_size, c->max_position);
    qac_cuda_trainer *h = (qac_cuda_trainer *)calloc(1, sizeof *h);
    if (!h) return qac_set_error(QAC_ERR_NOMEM, "CUDA trainer: out of host memory");
    cuda_trainer *t = &h->t;
    t->cfg = *c;
    t->mean_pooling = m->pooling == QAC_POOL_MEAN;
    t->normalize = m->normalize;
    t->prec = prec;
    t->esize = qac_prec_size(prec);
    t->p_hidden = hidden_dropout;
    t->p_attn = attn_dropout;
    t->tau = o->tau;
    t->sim = o->sim;
    t->max_grad_norm = o->max_grad_norm;
    t->chunk = o->chunk;
    t->world = o->dist_world > 0 ? o->dist_world : 0;
    t->rank = o->dist_rank;
    memcpy(t->dist_id, o->dist_id, sizeof t->dist_id);
    t->beta1 = o->beta1, t->beta2 = o->beta2, t->eps = o->adam_eps, t->wd = o->weight_decay;
    t->n_params = m->n_params;
    t->tensors.n = n_trained;
    t->tensors.bounds[0] = 0;
    for (int i = 0; i < n_trained; i++) {
        t->tensors.bounds[i + 1] = t->tensors.bounds[i] + qac_bert_tensor_size(c, i);
        t->tensors.decays[i] = decays[i];
    }
    t->counts_cap = (c->vocab_size > c->type_vocab_size ? c->vocab_size : c->type_vocab_size) + 1;
    t->counts = (int32_t *)malloc((size_t)t->counts_cap * sizeof(int32_t));
    qac_status st = t->counts ? trainer_init(t, m) : qac_set_error(QAC_ERR_NOMEM, "CUDA trainer: out of host memory");
    if (st != QAC_OK) {
        trainer_destroy(t);
        return qac_wrap_error(st, "CUDA trainer (%s)", qac_prec_name(prec));
    }
    *out = h;
    return QAC_OK;
}

extern "C" void qac_cuda_trainer_free(qac_cuda_trainer *h) {
    if (h) trainer_destroy(&h->t);
}

static qac_status check_side(const qac_bert_config *c, const int32_t *ids, const int *lens, int B, int T,
                             const char *what) {
    if (B < 1 || T < 1 || T > c->max_position)
        return qac_set_error(QAC_ERR_INVALID, "CUDA trainer: %s batch %d x %d (at most %d positions)", what, B, T,
                             c->max_position);
    for (int b = 0; b < B; b++)
        if (lens[b] < 1 || lens[b] > T)
            return qac_set_error(QAC_ERR_INVALID, "CUDA trainer: %s %d has length %d (T=%d)", what, b, lens[b], T);
    for (size_t i = 0; i < (size_t)B * T; i++)
        if (ids[i] < 0 || ids[i] >= c->vocab_size)
            return qac_set_error(QAC_ERR_INVALID, "CUDA trainer: token id %d out of range [0, %d)", ids[i],
                                 c->vocab_size);
    return QAC_OK;
}

extern "C" qac_status qac_cuda_trainer_grads(qac_cuda_trainer *h, const qac_train_batch *b, uint64_t drop_key,
                                             double *loss) {
    cuda_trainer *t = &h->t;
    const qac_bert_config *c = &t->cfg;
    const int nq = b->nq, np = b->nq * b->n;
    qac_status st;
    if ((st = check_side(c, b->q_ids, b->q_lens, nq, b->q_T, "query")) ||
        (st = check_side(c, b->p_ids, b->p_lens, np, b->p_T, "passage")))
        return st;
    QAC_CU(cudaSetDevice(t->device));
    const int C = c->hidden_size, NH = c->num_heads;
    // the global batch across ranks (one rank: the batch itself); this
    // rank's sequences sit at offsets r nq (queries) and r np (passages)
    const int W = t->world > 0 ? t->world : 1, r = t->world > 0 ? t->rank : 0;
    const int nqg = W * nq, npg = W * np;
    // sequences per pass: the whole side, or GradCache chunks
    const int kq = t->chunk > 0 && t->chunk < nq ? t->chunk : nq, kp = t->chunk > 0 && t->chunk < np ? t->chunk : np;
    const size_t Nq = (size_t)kq * b->q_T, Np = (size_t)kp * b->p_T;
    const size_t nPq = (size_t)kq * NH * b->q_T * b->q_T, nPp = (size_t)kp * NH * b->p_T * b->p_T;
    if ((st = ensure_side(t, &t->sq, kq, b->q_T)) || (st = ensure_side(t, &t->sp, kp, b->p_T)) ||
        (st = ensure_work(t, Nq > Np ? Nq : Np, nPq > nPp ? nPq : nPp)) ||
        (st = grow(&t->reps_q, &t->cap_rq, (size_t)nqg * C)) || (st = grow(&t->reps_p, &t->cap_rp, (size_t)npg * C)) ||
        (st = grow(&t->dreps_q, &t->cap_dq, (size_t)nqg * C)) || (st = grow(&t->dreps_p, &t->cap_dp, (size_t)npg * C)))
        return st;
    QAC_CU(cudaMemsetAsync(t->grads, 0, t->n_params * sizeof(float), t->stream));
    struct pass {
        side *s;
        const int32_t *ids;
        const int *lens;
        int count, T, k;
        uint64_t base; // dropout id of the side's first sequence
        float *reps, *dreps;
    } sides[2] = {{&t->sq, b->q_ids, b->q_lens, nq, b->q_T, kq, (uint64_t)r * nq, t->reps_q + (size_t)r * nq * C,
                   t->dreps_q + (size_t)r * nq * C},
                  {&t->sp, b->p_ids, b->p_lens, np, b->p_T, kp, (uint64_t)nqg + (uint64_t)r * np,
                   t->reps_p + (size_t)r * np * C, t->dreps_p + (size_t)r * np * C}};
    // chunk b0 of side x: bind, upload and point at the batch's representations
    auto select = [&](pass &x, int b0) -> qac_status {
        const int nb = x.count - b0 < x.k ? x.count - b0 : x.k;
        qac_status e = ensure_side(t, x.s, nb, x.T);
        if (e) return e;
        if ((e = upload_side(t, x.s, x.ids + (size_t)b0 * x.T, x.lens + b0))) return e;
        x.s->reps = x.reps + (size_t)b0 * C;
        x.s->dreps = x.dreps + (size_t)b0 * C;
        return QAC_OK;
    };
    if (t->chunk <= 0 || (kq == nq && kp == np)) {
        // the whole batch, activations kept for both sides
        if ((st = select(sides[0], 0)) || (st = select(sides[1], 0)) ||
            (st = forward_side(t, &t->sq, drop_key, sides[0].base)) ||
            (st = forward_side(t, &t->sp, drop_key, sides[1].base)) || (st = gather_reps(t, nq, np)) ||
            (st = loss_fwd_bwd(t, nqg, b->n)) || (st = backward_side(t, &t->sp, drop_key, sides[1].base)) ||
            (st = backward_side(t, &t->sq, drop_key, sides[0].base)) || (st = reduce_grads(t)))
            return qac_wrap_error(st, "CUDA training step");
    } else {
        // GradCache: every chunk forward for its representations, the loss on
        // the whole batch, then each chunk again with its cached gradient
        // (the same dropout masks: they are keyed by the sequence's index)
        for (int sd = 0; sd < 2 && !st; sd++)
            for (int b0 = 0; b0 < sides[sd].count && !st; b0 += sides[sd].k)
                if (!(st = select(sides[sd], b0))) st = forward_side(t, sides[sd].s, drop_key, sides[sd].base + b0);
        if (!st) st = gather_reps(t, nq, np);
        if (!st) st = loss_fwd_bwd(t, nqg, b->n);
        for (int sd = 0; sd < 2 && !st; sd++)
            for (int b0 = 0; b0 < sides[sd].count && !st; b0 += sides[sd].k)
                if (!(st = select(sides[sd], b0)) &&
                    !(st = forward_side(t, sides[sd].s, drop_key, sides[sd].base + b0)))
                    st = backward_side(t, sides[sd].s, drop_key, sides[sd].base + b0);
        if (!st) st = reduce_grads(t);
        if (st) return qac_wrap_error(st, "CUDA training step (GradCache)");
    }
    QAC_CU(cudaMemcpyAsync(&t->h_scalars[0], t->d_loss, sizeof(double), cudaMemcpyDeviceToHost, t->stream));
    QAC_CU(cudaStreamSynchronize(t->stream));
    *loss = t->h_scalars[0];
    return QAC_OK;
}

extern "C" qac_status qac_cuda_trainer_update(qac_cuda_trainer *h, long step, double lr, double *grad_norm) {
    cuda_trainer *t = &h->t;
    const size_t n_train = t->tensors.bounds[t->tensors.n];
    // the scalars exactly as qac_adamw_update derives them
    qac_kt_adamw a;
    a.decay = (float)(1.0 - lr * t->wd);
    a.w1 = (float)(1.0 - t->beta1);
    a.b2 = (float)t->beta2;
    a.w2 = (float)(1.0 - t->beta2);
    a.step_size = (float)(-(lr / (1.0 - pow(t->beta1, (double)step))));
    a.bc2_sqrt = (float)sqrt(1.0 - pow(t->beta2, (double)step));
    a.eps = (float)t->eps;
    QAC_CU(qac_kt_sumsq(t->norm_partial, t->grads, n_train, t->stream));
    QAC_CU(qac_kt_clip_scale(t->d_scale, t->d_norm, t->norm_partial, t->max_grad_norm, t->stream));
    QAC_CU(qac_kt_adamw_step(t->params, t->params_act, t->grads, t->adam_m, t->adam_v, t->d_scale, &t->tensors, a,
                             t->stream));
    QAC_CU(cudaMemcpyAsync(&t->h_scalars[1], t->d_norm, sizeof(double), cudaMemcpyDeviceToHost, t->stream));
    QAC_CU(cudaStreamSynchronize(t->stream));
    *grad_norm = t->h_scalars[1];
    return QAC_OK;
}

extern "C" qac_status qac_cuda_trainer_download(qac_cuda_trainer *h, float *params, float *grads, float *adam_m,
                                                float *adam_v) {
    cuda_trainer *t = &h->t;
    const size_t bytes = t->n_params * sizeof(float);
    QAC_CU(cudaStreamSynchronize(t->stream));
    if (params) QAC_CU(cudaMemcpy(params, t->params, bytes, cudaMemcpyDeviceToHost));
    if (grads) QAC_CU(cudaMemcpy(grads, t->grads, bytes, cudaMemcpyDeviceToHost));
    if (adam_m) QAC_CU(cudaMemcpy(adam_m, t->adam_m, bytes, cudaMemcpyDeviceToHost));
    if (adam_v) QAC_CU(cudaMemcpy(adam_v, t->adam_v, bytes, cudaMemcpyDeviceToHost));
    return QAC_OK;
}

extern "C" qac_status qac_cuda_trainer_upload(qac_cuda_trainer *h, const float *params, const float *adam_m,
                                              const float *adam_v) {
    cuda_trainer *t = &h->t;
    const size_t bytes = t->n_params * sizeof(float);
    QAC_CU(cudaStreamSynchronize(t->stream));
    if (params) QAC_CU(cudaMemcpy(t->params, params, bytes, cudaMemcpyHostToDevice));
    if (adam_m) QAC_CU(cudaMemcpy(t->adam_m, adam_m, bytes, cudaMemcpyHostToDevice));
    if (adam_v) QAC_CU(cudaMemcpy(t->adam_v, adam_v, bytes, cudaMemcpyHostToDevice));
    if (params && t->params_act) QAC_CU(qac_k_from_f32(t->params_act, t->params, t->n_params, t->prec, t->stream));
    QAC_CU(cudaStreamSynchronize(t->stream));
    return QAC_OK;
}

extern "C" qac_status qac_train_dist_id(unsigned char id[128]) {
#ifdef QAC_HAVE_NCCL
    ncclUniqueId u;
    static_assert(sizeof u <= 128, "NCCL id larger than qac_train_opts.dist_id");
    memset(id, 0, 128);
    QAC_NCCL(ncclGetUniqueId(&u));
    memcpy(id, &u, sizeof u);
    return QAC_OK;
#else
    memset(id, 0, 128);
    return qac_set_error(QAC_ERR_UNSUPPORTED, "qac was built without NCCL (configure with -DQAC_NCCL=ON)");
#endif
}

extern "C" int qac_train_gpu_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" qac_status qac_train_use_gpu(int device) {
    QAC_CU(cudaSetDevice(device));
    return QAC_OK;
}
