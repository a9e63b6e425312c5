// The CUDA training backend (kernels/qac_cuda_train.h): the training step
// of trainer/trainer.c and model/bert_backward.c on the GPU. Forward keeps
// every layer's tensors (with --recompute only each layer's input, the
// layer re-run just before its backward); backward reads them top-down,
// accumulating into one fp32 gradient block; clipping and AdamW run on the
// device.
//
// First run on a GPU (an H200) on 2026-11-26: see bench/RESULTS.md; what
// changed since is checked by scripts/gpu_train_verify.sh on the next one.
#include <stdlib.h>
#include <string.h>

#include "bert_kernels.cuh"
#include "cuda_layers.cuh"
#include "prenorm_layers.cuh"

#ifdef QAC_HAVE_NCCL
#include <nccl.h>
#endif

extern "C" {
#include "bert_cpu.h"
#include "qac_cuda_train.h"
}

namespace {

// One side of a batch (the queries or the passages): its inputs and the
// layer stack's activations, bound into one device allocation per (B, T):
// BERT's post-LN stack (the base) or ModernBERT's pre-LN one (pn).
struct side : qac_kl_acts {
    void *mem;
    size_t cap; // bytes of mem
    int32_t *ids, *plan_w, *plan_t;
    int32_t *pos, *plan_pos; // offset positions (RoBERTa, XLM-R) and their plan, or the
                             // rotary ones (ModernBERT, no plan); NULL otherwise
    qac_kl_pn_acts pn;
    int *lens;
    float *reps, *dreps; // [B, C]: set by the caller into the whole batch's arrays
    // host side: pinned staging of ids, lens and the two scatter plans
    int32_t *h_stage;
    size_t h_cap; // ints
    qac_scatter_plan pw, pt;
};

typedef qac_kl_work work;

// The device state (kernels/cuda_layers.cuh) holds the shapes, precision,
// stream, cuBLAS handle and the four parameter-sized blocks.
struct cuda_trainer : qac_kl_dev {
    int mean_pooling, normalize;
    float tau;
    qac_similarity sim;
    float pair_alpha; // > 0: PAIR in place of InfoNCE
    int recompute;    // keep only the layer inputs; re-run each layer in backward
    double max_grad_norm, beta1, beta2, eps, wd;
    qac_kt_tensors tensors;
    qac_bert_params w, g; // views into params and grads

    side sq, sp;
    work wk;
    // the loss's work buffer, and the whole batch's representations and
    // their gradients (a GradCache chunk's side points into them)
    char *loss_work;
    size_t loss_cap;
    float *reps_q, *reps_p, *dreps_q, *dreps_p;
    size_t cap_rq, cap_rp, cap_dq, cap_dp;
    // PAIR's second loss: its anchors and candidates, their gradients, the
    // queries' share of it ([nq | np | nq | np | nq] x C), and its value
    float *pair;
    size_t cap_pair;
    double *d_pair;
    int chunk;
    // several GPUs: this trainer is rank `rank` of `world` (0: alone)
    int world, rank;
    unsigned char dist_id[128];
#ifdef QAC_HAVE_NCCL
    ncclComm_t comm;
#endif
    int32_t *counts; // host scratch of the scatter plans
    int counts_cap;
    // ModernBERT: the rotary tables [2, rope_P, hs] (global theta, then local)
    int prenorm;
    float *rope;
    int rope_P;
};

size_t bind_side(const cuda_trainer *t, side *s, char *base, int B, int T) {
    const size_t N = (size_t)B * T, nplan = qac_scatter_plan_ints((int)N);
    qac_kl_bump b = {base, 0};
    b.take(&s->ids, N * sizeof(int32_t));
    b.take(&s->plan_w, nplan * sizeof(int32_t));
    b.take(&s->plan_t, nplan * sizeof(int32_t));
    s->pos = s->plan_pos = NULL;
    if (t->cfg.positions == QAC_POS_OFFSET) {
        b.take(&s->pos, N * sizeof(int32_t));
        b.take(&s->plan_pos, nplan * sizeof(int32_t));
    } else if (t->prenorm) {
        b.take(&s->pos, N * sizeof(int32_t));
    }
    b.take(&s->lens, (size_t)B * sizeof(int));
    if (t->prenorm) {
        qac_kl_pn_bind(t, &s->pn, &b, B, T, t->recompute);
        s->pn.pos = s->pos;
        s->pn.rope = t->rope;
        s->pn.rope_P = t->rope_P;
        s->B = B, s->T = T; // the base's shapes: the uploads read them
    } else {
        qac_kl_acts_bind(t, s, &b, B, T, t->cfg.num_layers, 1, t->recompute);
    }
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
    const size_t ints = 2 + 3 * (size_t)B * T + (size_t)B + 3 * qac_scatter_plan_ints(B * T);
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

qac_status ensure_work(cuda_trainer *t, size_t N, size_t nP) { return qac_kl_work_ensure(t, &t->wk, N, nP); }

template <typename P> qac_status grow(P **p, size_t *cap, size_t n) {
    if (n <= *cap) return QAC_OK;
    cudaFree(*p);
    *p = NULL;
    *cap = 0;
    QAC_CU(cudaMalloc((void **)p, n * sizeof(P)));
    *cap = n;
    return QAC_OK;
}

// Copy ids and lens to the device and build the scatter plans there: the
// padding index's rows are left out of the word plan (and, where positions
// are offset past it, of the positions' plan), as the CPU's backward
// (model/bert_backward.c) and torch's nn.Embedding(padding_idx=...) give
// them no gradient.
qac_status upload_side(cuda_trainer *t, side *s, const int32_t *ids, const int *lens) {
    const qac_bert_config *c = &t->cfg;
    const int N = s->B * s->T, pad = c->pad_token_id;
    // the staging buffer may still feed the previous chunk's copies
    QAC_CU(cudaStreamSynchronize(t->stream));
    const size_t nplan = qac_scatter_plan_ints(N);
    int32_t *h_ids = s->h_stage, *h_lens = h_ids + N, *h_pw = h_lens + s->B, *h_pt = h_pw + nplan;
    int32_t *h_pp = h_pt + nplan, *h_pos = h_pp + nplan, *h_keys = h_pos + N;
    memcpy(h_ids, ids, (size_t)N * sizeof(int32_t));
    memcpy(h_lens, lens, (size_t)s->B * sizeof(int));
    qac_scatter_keys_unpadded(h_keys, ids, N, pad);
    s->pw = qac_scatter_plan_build(h_pw, h_keys, N, c->vocab_size, t->counts);
    s->pt = qac_scatter_plan{0, 0, 0};
    if (c->type_vocab_size > 0) s->pt = qac_scatter_plan_build(h_pt, NULL, N, c->type_vocab_size, t->counts);
    s->pos_ids = s->plan_p = NULL;
    s->pp = qac_scatter_plan{0, 0, 0};
    if (s->pos && t->prenorm) { // rotary: each row's position in its sequence, no table
        qac_positions_fill(h_pos, ids, lens, NULL, s->B, s->T, c);
        QAC_CU(cudaMemcpyAsync(s->pos, h_pos, (size_t)N * sizeof(int32_t), cudaMemcpyHostToDevice, t->stream));
    } else if (s->pos) {
        qac_positions_fill(h_pos, ids, lens, NULL, s->B, s->T, c);
        qac_scatter_keys_unpadded(h_keys, h_pos, N, pad);
        s->pp = qac_scatter_plan_build(h_pp, h_keys, N, c->max_position, t->counts);
        QAC_CU(cudaMemcpyAsync(s->pos, h_pos, (size_t)N * sizeof(int32_t), cudaMemcpyHostToDevice, t->stream));
        QAC_CU(cudaMemcpyAsync(s->plan_pos, h_pp, nplan * sizeof(int32_t), cudaMemcpyHostToDevice, t->stream));
        s->pos_ids = s->pos;
        s->plan_p = s->plan_pos;
    }
    QAC_CU(cudaMemcpyAsync(s->ids, h_ids, (size_t)N * sizeof(int32_t), cudaMemcpyHostToDevice, t->stream));
    QAC_CU(cudaMemcpyAsync(s->lens, h_lens, (size_t)s->B * sizeof(int), cudaMemcpyHostToDevice, t->stream));
    QAC_CU(cudaMemcpyAsync(s->plan_w, h_pw, nplan * sizeof(int32_t), cudaMemcpyHostToDevice, t->stream));
    if (c->type_vocab_size > 0)
        QAC_CU(cudaMemcpyAsync(s->plan_t, h_pt, nplan * sizeof(int32_t), cudaMemcpyHostToDevice, t->stream));
    return QAC_OK;
}

qac_status forward_side(cuda_trainer *t, side *s, uint64_t key, uint64_t seq_base) {
    const qac_bert_config *c = &t->cfg;
    const size_t NC = (size_t)s->B * s->T * c->hidden_size;
    qac_status e;
    if (t->prenorm) { // ModernBERT: pooled after the final LayerNorm
        if ((e = qac_kl_pn_fwd(t, &s->pn, &t->wk, &t->w, s->ids, s->lens, key, seq_base))) return e;
        QAC_CU(qac_k_pool(s->reps, s->pn.last, s->lens, s->B, s->T, c->hidden_size, t->mean_pooling, t->normalize,
                          t->stream));
        return QAC_OK;
    }
    if ((e = qac_kl_embed_fwd(t, s, s->ids, &t->w, key, seq_base)) ||
        (e = qac_kl_layers_fwd(t, s, &t->wk, &t->w, s->lens, key, seq_base)))
        return e;
    QAC_CU(qac_k_pool(s->reps, QAC_KL_AT(s->hidden, c->num_layers, NC), s->lens, s->B, s->T, c->hidden_size,
                      t->mean_pooling, t->normalize, t->stream));
    return QAC_OK;
}

qac_status backward_side(cuda_trainer *t, side *s, uint64_t key, uint64_t seq_base) {
    const qac_bert_config *c = &t->cfg;
    const size_t NC = (size_t)s->B * s->T * c->hidden_size;
    if (t->prenorm) {
        QAC_CU(qac_kt_pool_bwd(t->wk.dln1, s->dreps, s->pn.last, s->lens, s->B, s->T, c->hidden_size,
                               t->mean_pooling, t->normalize, t->stream));
        return qac_kl_pn_bwd(t, &s->pn, &t->wk, &t->w, &t->g, s->lens, t->wk.dln1, s->pw, s->plan_w, key, seq_base);
    }
    QAC_CU(qac_kt_pool_bwd(t->wk.dy, s->dreps, QAC_KL_AT(s->hidden, c->num_layers, NC), s->lens, s->B, s->T,
                           c->hidden_size, t->mean_pooling, t->normalize, t->stream));
    qac_status e = qac_kl_layers_bwd(t, s, &t->wk, &t->w, &t->g, s->lens, key, seq_base, NULL, 0);
    if (e) return e;
    return qac_kl_embed_bwd(t, s, &t->wk, &t->g, &t->w, s->pw, s->plan_w, s->pt, s->plan_t, key, seq_base);
}

// PAIR (trainer/loss.c qac_pair_loss): L_q is InfoNCE of every query over
// every passage; L_p is the cross-entropy of each positive p_{i n} over the
// queries and the negatives, its own query the target. The softmax does not
// care about the order of the candidates, so L_p is InfoNCE too: anchors
// the positives, candidates the passage groups with each positive replaced
// by its query (the target, at i n). Both with raw dot products (tau and
// sim unused, as on the CPU), in fp64; loss (1 - alpha) L_q + alpha L_p
// and its gradients combined with cuBLAS.
qac_status pair_fwd_bwd(cuda_trainer *t, int nq, int n) {
    const int C = t->cfg.hidden_size, np = nq * n;
    const size_t QC = (size_t)nq * C, PC = (size_t)np * C, row = (size_t)C * sizeof(float), group = n * row;
    qac_status e = grow(&t->pair, &t->cap_pair, 3 * QC + 2 * PC);
    if (e) return e;
    float *anc = t->pair, *cand = anc + QC, *danc = cand + PC, *dcand = danc + QC, *dq2 = dcand + PC;
    cudaStream_t st = t->stream;
    if ((e = qac_kt_infonce(t->blas, t->d_loss, t->dreps_q, t->dreps_p, t->reps_q, t->reps_p, nq, n, C, 1.0f,
                            QAC_SIM_DOT, t->loss_work, st)))
        return e;
    QAC_CU(cudaMemcpy2DAsync(anc, row, t->reps_p, group, row, nq, cudaMemcpyDeviceToDevice, st));
    QAC_CU(cudaMemcpyAsync(cand, t->reps_p, PC * sizeof(float), cudaMemcpyDeviceToDevice, st));
    QAC_CU(cudaMemcpy2DAsync(cand, group, t->reps_q, row, row, nq, cudaMemcpyDeviceToDevice, st));
    if ((e = qac_kt_infonce(t->blas, t->d_pair, danc, dcand, anc, cand, nq, n, C, 1.0f, QAC_SIM_DOT, t->loss_work,
                            st)))
        return e;
    // the queries' rows of dcand go to dq2; the positives' take their place
    QAC_CU(cudaMemcpy2DAsync(dq2, row, dcand, group, row, nq, cudaMemcpyDeviceToDevice, st));
    QAC_CU(cudaMemcpy2DAsync(dcand, group, danc, row, row, nq, cudaMemcpyDeviceToDevice, st));
    const double a = t->pair_alpha, one_minus = 1.0 - a;
    const float af = (float)a, omf = (float)one_minus;
    QAC_CUBLAS(cublasSetPointerMode(t->blas, CUBLAS_POINTER_MODE_HOST));
    QAC_CUBLAS(cublasDscal(t->blas, 1, &one_minus, t->d_loss, 1));
    QAC_CUBLAS(cublasDaxpy(t->blas, 1, &a, t->d_pair, 1, t->d_loss, 1));
    QAC_CUBLAS(cublasSscal(t->blas, (int)QC, &omf, t->dreps_q, 1));
    QAC_CUBLAS(cublasSaxpy(t->blas, (int)QC, &af, dq2, 1, t->dreps_q, 1));
    QAC_CUBLAS(cublasSscal(t->blas, (int)PC, &omf, t->dreps_p, 1));
    QAC_CUBLAS(cublasSaxpy(t->blas, (int)PC, &af, dcand, 1, t->dreps_p, 1));
    return QAC_OK;
}

// The batch's loss over the two sides' representations: both sides' dreps
// and the loss in t->d_loss.
qac_status loss_fwd_bwd(cuda_trainer *t, int nq, int n) {
    qac_status e = grow(&t->loss_work, &t->loss_cap, qac_kt_infonce_scratch(nq, n, t->cfg.hidden_size));
    if (e) return e;
    if (t->pair_alpha > 0) return pair_fwd_bwd(t, nq, n);
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
    cudaFree(t->pair), cudaFree(t->d_pair);
    cudaFree(t->rope);
    qac_kl_dev_release(t);
    free(t->counts);
    free(t);
}

qac_status trainer_init(cuda_trainer *t, const qac_model *m) {
    qac_status e = qac_kl_dev_init(t, 1);
    if (e) return e;
    if (t->pair_alpha > 0) QAC_CU(cudaMalloc((void **)&t->d_pair, sizeof(double)));
    qac_bert_params_bind(&t->w, &t->cfg, t->params);
    qac_bert_params_bind(&t->g, &t->cfg, t->grads);
    const float *parts[1] = {m->param_mem};
    const size_t ends[1] = {t->n_params};
    if ((e = qac_kl_dev_upload(t, parts, ends, 1, NULL, NULL))) return e;
    if (t->prenorm) { // the rotary tables for every position the batches may hold
        const qac_bert_config *c = &t->cfg;
        const int hs = c->hidden_size / c->num_heads, P = qac_bert_max_tokens(c);
        const size_t n = (size_t)P * hs;
        float *h = (float *)malloc(2 * n * sizeof(float));
        if (!h) return qac_set_error(QAC_ERR_NOMEM, "CUDA trainer: out of host memory for the rotary tables");
        qac_rope_table(h, P, hs, c->rope_theta);
        qac_rope_table(h + n, P, hs, c->rope_theta_local);
        cudaError_t ce = cudaMalloc((void **)&t->rope, 2 * n * sizeof(float));
        if (ce == cudaSuccess) ce = cudaMemcpy(t->rope, h, 2 * n * sizeof(float), cudaMemcpyHostToDevice);
        free(h);
        QAC_CU(ce);
        t->rope_P = P;
    }
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
    // BERT, RoBERTa and XLM-R are one post-LayerNorm stack (positions offset
    // past the padding index in the last two); ModernBERT's is the pre-LN
    // one of kernels/prenorm_layers.cu: rotary positions, GeGLU, the final
    // norm, no position or type table. Any other mix of those is refused.
    const int prenorm = c->pre_norm || c->glu || c->positions == QAC_POS_ROTARY;
    if (prenorm && !(c->family == QAC_FAMILY_MODERNBERT && c->pre_norm && c->glu &&
                     c->positions == QAC_POS_ROTARY && c->type_vocab_size == 0))
        return qac_set_error(QAC_ERR_UNSUPPORTED,
                             "CUDA trainer: a %s model with pre_norm %d, GeGLU %d, rotary %d and %d token types "
                             "trains on the CPU only (qac finetune --device cpu); on CUDA: BERT, RoBERTa, "
                             "XLM-RoBERTa and ModernBERT",
                             qac_family_name(c->family), c->pre_norm, c->glu, c->positions == QAC_POS_ROTARY,
                             c->type_vocab_size);
    if (!qac_kt_fused_ln_supported(c->hidden_size))
        return qac_set_error(QAC_ERR_UNSUPPORTED,
                             "CUDA trainer: hidden size %d is wider than its fused LayerNorm passes take "
                             "(qac finetune --device cpu trains it)",
                             c->hidden_size);
    qac_cuda_trainer *h = (qac_cuda_trainer *)calloc(1, sizeof *h);
    if (!h) return qac_set_error(QAC_ERR_NOMEM, "CUDA trainer: out of host memory");
    cuda_trainer *t = &h->t;
    t->cfg = *c;
    t->prenorm = prenorm;
    t->mean_pooling = m->pooling == QAC_POOL_MEAN;
    t->normalize = m->normalize;
    t->prec = prec;
    t->esize = qac_prec_size(prec);
    t->p_hidden = hidden_dropout;
    t->p_attn = attn_dropout;
    qac_kl_ctx_attention(t);
    t->tau = o->tau;
    t->sim = o->sim;
    t->pair_alpha = o->pair_alpha;
    t->recompute = o->recompute;
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
    if (c->max_position + 1 > t->counts_cap) t->counts_cap = c->max_position + 1;
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
    const int limit = qac_bert_max_tokens(c); // RoBERTa's table less its padding offset
    if (B < 1 || T < 1 || T > limit)
        return qac_set_error(QAC_ERR_INVALID, "CUDA trainer: %s batch %d x %d (at most %d positions)", what, B, T,
                             limit);
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
    return qac_kl_dev_losses(t, loss);
}

extern "C" qac_status qac_cuda_trainer_update(qac_cuda_trainer *h, long step, double lr, double *grad_norm) {
    cuda_trainer *t = &h->t;
    return qac_kl_dev_update(t, &t->tensors, step, lr, t->beta1, t->beta2, t->eps, t->wd, t->max_grad_norm,
                             grad_norm);
}

extern "C" qac_status qac_cuda_trainer_download(qac_cuda_trainer *h, float *params, float *grads, float *adam_m,
                                                float *adam_v) {
    cuda_trainer *t = &h->t;
    float *const parts[1] = {params};
    const size_t ends[1] = {t->n_params};
    return qac_kl_dev_download(t, parts, ends, 1, grads, adam_m, adam_v);
}

extern "C" qac_status qac_cuda_trainer_upload(qac_cuda_trainer *h, const float *params, const float *adam_m,
                                              const float *adam_v) {
    cuda_trainer *t = &h->t;
    const float *const parts[1] = {params};
    const size_t ends[1] = {t->n_params};
    return qac_kl_dev_upload(t, parts, ends, 1, adam_m, adam_v);
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
