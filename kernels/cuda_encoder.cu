// The CUDA encoder backend: the BERT forward pass of model/bert_cpu.c on
// the GPU. Weights are uploaded once (the flat fp32 array in one copy, then
// converted on the device into a half-precision mirror with the same
// layout); activation buffers are reused and grown only when a larger batch
// arrives. Matrix products run through cuBLAS in the requested precision
// with fp32 accumulation; the residual stream stays fp32.
//
// With the fused attention (qac_cuda_attention_fused(), bf16 and fp16 at
// head size 32 or 64) a batch is packed: the sequences' real tokens back
// to back with cumulative offsets, as the CPU encoder packs them, so every
// kernel runs over the real tokens only. Otherwise it runs padded [B, T]
// through the unfused attention.
#include <stdlib.h>
#include <string.h>

#include "bert_kernels.cuh"
#include "flash_attention.cuh"

extern "C" {
#include "encoder_backend.h"
}

namespace {

constexpr int DEFAULT_MAX_BATCH = 256;
constexpr size_t CUBLAS_WORKSPACE = 32u << 20;

struct cuda_encoder {
    qac_bert_config cfg;
    int mean_pooling, normalize;
    int model_normalize; // the checkpoint's setting; normalize is it unless raw
    qac_precision prec;
    size_t esize; // bytes per activation element
    int device;
    int fused;          // packed batches through the fused attention
    qac_fa_tiles tiles; // its tile sizes

    cudaStream_t stream;
    cudaEvent_t ev_start, ev_end; // around each forward's work on stream
    double device_s;              // their sum: the GPU's busy time for this encoder
    cublasHandle_t blas;
    void *blas_ws;

    float *d_params;    // fp32 mirror of qac_model.param_mem
    void *d_params_act; // the same layout in prec (NULL for fp32)
    qac_bert_params dp; // views into d_params

    size_t cap_tokens; // rows the activation buffers hold
    int cap_batch;
    float *x;          // [N,C] residual stream
    void *xh;          // [N,C] act copy of x (NULL for fp32)
    void *qkv;         // [N,3C]
    void *ctx;         // [N,C] attention output
    void *proj;        // [N,C] output projections
    void *ffn;         // [N,I]
    int32_t *d_ids;    // [N]
    int32_t *d_pos;    // [N] position of each packed row
    int *d_lens;       // [B]
    int *d_from;       // [B] pooling starts (prompt tokens skipped)
    int *d_offs;       // [B+1] first packed row of each sequence
    float *d_out;      // [B,C]
    int32_t *h_ids;    // pinned mirrors
    int32_t *h_pos;
    int *h_lens;
    int *h_from;
    int *h_offs;
    float *h_out;
};

// Device view in prec of the fp32 tensor `t` (a view into dp).
const void *act_weight(const cuda_encoder *e, const float *t) {
    if (e->prec == QAC_PREC_FP32) return t;
    return (const char *)e->d_params_act + (size_t)(t - e->d_params) * e->esize;
}

void free_buffers(cuda_encoder *e) {
    cudaFree(e->x);
    cudaFree(e->xh);
    cudaFree(e->qkv);
    cudaFree(e->ctx);
    cudaFree(e->proj);
    cudaFree(e->ffn);
    cudaFree(e->d_ids);
    cudaFree(e->d_pos);
    cudaFree(e->d_lens);
    cudaFree(e->d_from);
    cudaFree(e->d_offs);
    cudaFree(e->d_out);
    cudaFreeHost(e->h_ids);
    cudaFreeHost(e->h_pos);
    cudaFreeHost(e->h_lens);
    cudaFreeHost(e->h_from);
    cudaFreeHost(e->h_offs);
    cudaFreeHost(e->h_out);
    e->x = NULL;
    e->xh = e->qkv = e->ctx = e->proj = e->ffn = NULL;
    e->d_ids = e->d_pos = NULL;
    e->d_lens = e->d_offs = e->d_from = NULL;
    e->d_out = NULL;
    e->h_ids = e->h_pos = NULL;
    e->h_lens = e->h_offs = e->h_from = NULL;
    e->h_out = NULL;
    e->cap_tokens = 0;
    e->cap_batch = 0;
}

void encoder_destroy(void *impl) {
    cuda_encoder *e = (cuda_encoder *)impl;
    if (!e) return;
    if (e->stream) cudaStreamSynchronize(e->stream);
    free_buffers(e);
    if (e->blas) cublasDestroy(e->blas);
    cudaFree(e->blas_ws);
    cudaFree(e->d_params);
    cudaFree(e->d_params_act);
    if (e->ev_start) cudaEventDestroy(e->ev_start);
    if (e->ev_end) cudaEventDestroy(e->ev_end);
    if (e->stream) cudaStreamDestroy(e->stream);
    cudaGetLastError();
    free(e);
}

qac_status grow_buffers(cuda_encoder *e, int B, int T) {
    const size_t N = (size_t)B * T;
    if (N <= e->cap_tokens && B <= e->cap_batch) return QAC_OK;
    const size_t ntok = N > e->cap_tokens ? N : e->cap_tokens;
    const int nb = B > e->cap_batch ? B : e->cap_batch;
    const size_t C = e->cfg.hidden_size, I = e->cfg.intermediate_size, es = e->esize;
    QAC_CU(cudaStreamSynchronize(e->stream));
    free_buffers(e);
    qac_status st = QAC_OK;
    QAC_CU_GOTO(st, cudaMalloc((void **)&e->x, ntok * C * sizeof(float)), fail);
    if (e->prec != QAC_PREC_FP32) QAC_CU_GOTO(st, cudaMalloc(&e->xh, ntok * C * es), fail);
    QAC_CU_GOTO(st, cudaMalloc(&e->qkv, ntok * 3 * C * es), fail);
    QAC_CU_GOTO(st, cudaMalloc(&e->ctx, ntok * C * es), fail);
    QAC_CU_GOTO(st, cudaMalloc(&e->proj, ntok * C * es), fail);
    QAC_CU_GOTO(st, cudaMalloc(&e->ffn, ntok * I * es), fail);
    QAC_CU_GOTO(st, cudaMalloc((void **)&e->d_ids, ntok * sizeof(int32_t)), fail);
    QAC_CU_GOTO(st, cudaMalloc((void **)&e->d_pos, ntok * sizeof(int32_t)), fail);
    QAC_CU_GOTO(st, cudaMalloc((void **)&e->d_lens, nb * sizeof(int)), fail);
    QAC_CU_GOTO(st, cudaMalloc((void **)&e->d_from, nb * sizeof(int)), fail);
    QAC_CU_GOTO(st, cudaMalloc((void **)&e->d_offs, (nb + 1) * sizeof(int)), fail);
    QAC_CU_GOTO(st, cudaMalloc((void **)&e->d_out, (size_t)nb * C * sizeof(float)), fail);
    QAC_CU_GOTO(st, cudaMallocHost((void **)&e->h_ids, ntok * sizeof(int32_t)), fail);
    QAC_CU_GOTO(st, cudaMallocHost((void **)&e->h_pos, ntok * sizeof(int32_t)), fail);
    QAC_CU_GOTO(st, cudaMallocHost((void **)&e->h_lens, nb * sizeof(int)), fail);
    QAC_CU_GOTO(st, cudaMallocHost((void **)&e->h_from, nb * sizeof(int)), fail);
    QAC_CU_GOTO(st, cudaMallocHost((void **)&e->h_offs, (nb + 1) * sizeof(int)), fail);
    QAC_CU_GOTO(st, cudaMallocHost((void **)&e->h_out, (size_t)nb * C * sizeof(float)), fail);
    e->cap_tokens = ntok;
    e->cap_batch = nb;
    return QAC_OK;
fail:
    free_buffers(e);
    return qac_wrap_error(st, "CUDA encoder: activations for %d x %d tokens", B, T);
}

// N rows: B * T padded, or the packed sum of the lengths (the longest T);
// skip_prompt: pool from d_from's rows.
qac_status run_layers(cuda_encoder *e, int B, int T, int N, int skip_prompt) {
    const qac_bert_config *c = &e->cfg;
    const int C = c->hidden_size, I = c->intermediate_size, NH = c->num_heads;
    const qac_precision p = e->prec;
    const qac_bert_params *w = &e->dp;
    const float eps = c->layer_norm_eps;
    void *xin = p == QAC_PREC_FP32 ? (void *)e->x : e->xh; // matrix-product input
    qac_fa_rows rows = {e->d_offs, NULL, B, T, N};
    qac_kt_drop none = {0.0f, 0, 0};

    QAC_CU(qac_k_embed_ln(e->x, e->xh, e->d_ids, e->fused ? e->d_pos : NULL, w->word_emb, w->pos_emb, w->type_emb,
                          w->emb_ln_w, w->emb_ln_b, N, T, C, eps, p, e->stream));
    for (int l = 0; l < c->num_layers; l++) {
        const size_t lc = (size_t)l * C;
        QAC_CUBLAS(qac_k_matmul(e->blas, e->qkv, xin, act_weight(e, w->qkv_w + lc * 3 * C), N, C, 3 * C, p));
        if (e->fused)
            QAC_CU(qac_fa_forward(e->ctx, NULL, e->qkv, w->qkv_b + lc * 3, rows, C, NH, 0, 0, none, 0, p, &e->tiles,
                                  e->stream));
        else
            QAC_CU(qac_k_attention(e->ctx, e->qkv, w->qkv_b + lc * 3, e->d_lens, B, T, C, NH, p, e->stream));
        QAC_CUBLAS(qac_k_matmul(e->blas, e->proj, e->ctx, act_weight(e, w->attn_out_w + lc * C), N, C, C, p));
        QAC_CU(qac_k_residual_ln(e->x, e->xh, e->proj, w->attn_out_b + lc, w->ln1_w + lc, w->ln1_b + lc, N, C,
                                 eps, p, e->stream));
        QAC_CUBLAS(qac_k_matmul(e->blas, e->ffn, xin, act_weight(e, w->ffn_in_w + lc * I), N, C, I, p));
        QAC_CU(qac_k_bias_gelu(e->ffn, w->ffn_in_b + (size_t)l * I, N, I, p, e->stream));
        QAC_CUBLAS(qac_k_matmul(e->blas, e->proj, e->ffn, act_weight(e, w->ffn_out_w + lc * I), N, I, C, p));
        QAC_CU(qac_k_residual_ln(e->x, e->xh, e->proj, w->ffn_out_b + lc, w->ln2_w + lc, w->ln2_b + lc, N, C,
                                 eps, p, e->stream));
    }
    const int *from = skip_prompt ? e->d_from : NULL;
    if (e->fused)
        QAC_CU(qac_k_pool_packed(e->d_out, e->x, e->d_offs, e->d_lens, from, B, C, e->mean_pooling, e->normalize,
                                 e->stream));
    else
        QAC_CU(qac_k_pool_from(e->d_out, e->x, e->d_lens, from, B, T, C, e->mean_pooling, e->normalize,
                               e->stream));
    return QAC_OK;
}

void encoder_set_raw(void *impl, int raw) {
    cuda_encoder *e = (cuda_encoder *)impl;
    e->normalize = e->model_normalize && !raw;
}

qac_status encoder_forward(void *impl, const int32_t *ids, const int *lens, const int *pool_from, int B, int T,
                           float *out) {
    cuda_encoder *e = (cuda_encoder *)impl;
    const qac_bert_config *c = &e->cfg;
    if (B < 1 || T < 1) return qac_set_error(QAC_ERR_INVALID, "CUDA encoder: empty batch (%d x %d)", B, T);
    if (T > c->max_position)
        return qac_set_error(QAC_ERR_INVALID, "CUDA encoder: %d tokens exceed the model's %d positions", T,
                             c->max_position);
    for (int b = 0; b < B; b++)
        if (lens[b] < 1 || lens[b] > T)
            return qac_set_error(QAC_ERR_INVALID, "CUDA encoder: sequence %d has length %d (padded length %d)",
                                 b, lens[b], T);
    const size_t N = (size_t)B * T;
    for (size_t i = 0; i < N; i++)
        if (ids[i] < 0 || ids[i] >= c->vocab_size)
            return qac_set_error(QAC_ERR_INVALID, "CUDA encoder: token id %d outside the vocabulary (%d)",
                                 (int)ids[i], c->vocab_size);
    QAC_CU(cudaSetDevice(e->device));
    qac_status st = grow_buffers(e, B, T);
    if (st != QAC_OK) return st;

    memcpy(e->h_lens, lens, (size_t)B * sizeof(int));
    QAC_CU(cudaEventRecord(e->ev_start, e->stream));
    QAC_CU(cudaMemcpyAsync(e->d_lens, e->h_lens, (size_t)B * sizeof(int), cudaMemcpyHostToDevice, e->stream));
    if (pool_from) {
        memcpy(e->h_from, pool_from, (size_t)B * sizeof(int));
        QAC_CU(cudaMemcpyAsync(e->d_from, e->h_from, (size_t)B * sizeof(int), cudaMemcpyHostToDevice, e->stream));
    }
    size_t rows = N;
    int longest = T;
    if (e->fused) { // the real tokens back to back, each with its position
        rows = 0;
        longest = 0;
        for (int b = 0; b < B; b++) {
            e->h_offs[b] = (int)rows;
            for (int t = 0; t < lens[b]; t++, rows++) {
                e->h_ids[rows] = ids[(size_t)b * T + t];
                e->h_pos[rows] = t;
            }
            longest = lens[b] > longest ? lens[b] : longest;
        }
        e->h_offs[B] = (int)rows;
        QAC_CU(cudaMemcpyAsync(e->d_pos, e->h_pos, rows * sizeof(int32_t), cudaMemcpyHostToDevice, e->stream));
        QAC_CU(cudaMemcpyAsync(e->d_offs, e->h_offs, (size_t)(B + 1) * sizeof(int), cudaMemcpyHostToDevice,
                               e->stream));
    } else {
        memcpy(e->h_ids, ids, N * sizeof(int32_t));
    }
    QAC_CU(cudaMemcpyAsync(e->d_ids, e->h_ids, rows * sizeof(int32_t), cudaMemcpyHostToDevice, e->stream));
    st = run_layers(e, B, longest, (int)rows, pool_from != NULL);
    if (st != QAC_OK) return qac_wrap_error(st, "CUDA encoder");
    const size_t out_bytes = (size_t)B * c->hidden_size * sizeof(float);
    QAC_CU(cudaMemcpyAsync(e->h_out, e->d_out, out_bytes, cudaMemcpyDeviceToHost, e->stream));
    QAC_CU(cudaEventRecord(e->ev_end, e->stream));
    QAC_CU(cudaStreamSynchronize(e->stream));
    float ms = 0.f;
    if (cudaEventElapsedTime(&ms, e->ev_start, e->ev_end) == cudaSuccess) e->device_s += ms * 1e-3;
    memcpy(out, e->h_out, out_bytes);
    return QAC_OK;
}

// The GPU time of the forwards so far, from copies in to copies out.
double encoder_device_seconds(void *impl) { return ((cuda_encoder *)impl)->device_s; }

qac_status upload_weights(cuda_encoder *e, const qac_model *m) {
    const size_t n = m->n_params;
    QAC_CU(cudaMalloc((void **)&e->d_params, n * sizeof(float)));
    QAC_CU(cudaMemcpy(e->d_params, m->param_mem, n * sizeof(float), cudaMemcpyHostToDevice));
    qac_bert_params_bind(&e->dp, &m->cfg, e->d_params);
    if (e->prec != QAC_PREC_FP32) {
        QAC_CU(cudaMalloc(&e->d_params_act, n * e->esize));
        QAC_CU(qac_k_from_f32(e->d_params_act, e->d_params, n, e->prec, e->stream));
    }
    QAC_CU(cudaStreamSynchronize(e->stream));
    return QAC_OK;
}

qac_status encoder_init(cuda_encoder *e, const qac_model *m) {
    QAC_CU(cudaGetDevice(&e->device));
    cudaDeviceProp prop;
    QAC_CU(cudaGetDeviceProperties(&prop, e->device));
    if (prop.major < 8)
        return qac_set_error(QAC_ERR_UNSUPPORTED, "GPU %s has compute capability %d.%d; qac needs 8.0 or newer",
                             prop.name, prop.major, prop.minor);
    QAC_CU(cudaStreamCreateWithFlags(&e->stream, cudaStreamNonBlocking));
    QAC_CU(cudaEventCreate(&e->ev_start));
    QAC_CU(cudaEventCreate(&e->ev_end));
    QAC_CUBLAS(cublasCreate(&e->blas));
    QAC_CUBLAS(cublasSetStream(e->blas, e->stream));
    QAC_CU(cudaMalloc(&e->blas_ws, CUBLAS_WORKSPACE));
    QAC_CUBLAS(cublasSetWorkspace(e->blas, e->blas_ws, CUBLAS_WORKSPACE));
    if (e->prec == QAC_PREC_FP32) QAC_CUBLAS(cublasSetMathMode(e->blas, CUBLAS_PEDANTIC_MATH));
    return upload_weights(e, m);
}

} // namespace

extern "C" qac_status qac_cuda_backend_create(qac_encoder_backend *be, const qac_model *m,
                                              const qac_encoder_opts *o) {
    memset(be, 0, sizeof *be);
    if (!qac_cuda_available()) return qac_set_error(QAC_ERR_UNSUPPORTED, "no usable CUDA GPU");
    const qac_bert_config *c = &m->cfg;
    const qac_precision prec = o ? o->precision : QAC_PREC_BF16;
    if (prec != QAC_PREC_FP32 && prec != QAC_PREC_FP16 && prec != QAC_PREC_BF16)
        return qac_set_error(QAC_ERR_INVALID, "CUDA encoder: unknown precision %d", (int)prec);
    if (!qac_k_attention_supported(c->max_position, c->hidden_size, c->num_heads))
        return qac_set_error(QAC_ERR_UNSUPPORTED,
                             "CUDA encoder: %d heads over %d hidden units (head size must be a multiple of 32 "
                             "up to 256) with %d positions (at most 4096)",
                             c->num_heads, c->hidden_size, c->max_position);
    if (c->hidden_size > 16384 || c->type_vocab_size < 1)
        return qac_set_error(QAC_ERR_UNSUPPORTED, "CUDA encoder: hidden size %d / %d token types",
                             c->hidden_size, c->type_vocab_size);
    cuda_encoder *e = (cuda_encoder *)calloc(1, sizeof *e);
    if (!e) return qac_set_error(QAC_ERR_NOMEM, "CUDA encoder: out of host memory");
    e->cfg = *c;
    e->mean_pooling = m->pooling == QAC_POOL_MEAN;
    e->normalize = e->model_normalize = m->normalize;
    e->prec = prec;
    e->esize = qac_prec_size(prec);
    e->fused = qac_cuda_attention_fused() && qac_fa_supported(c->hidden_size, c->num_heads, prec);
    e->tiles = qac_fa_tiles_default();
    qac_status st = encoder_init(e, m);
    if (st != QAC_OK) {
        encoder_destroy(e);
        return qac_wrap_error(st, "CUDA encoder (%s)", qac_prec_name(prec));
    }
    be->impl = e;
    be->forward = encoder_forward;
    be->free = encoder_destroy;
    be->set_raw = encoder_set_raw;
    be->device_seconds = encoder_device_seconds;
    be->max_batch = o && o->max_batch > 0 ? o->max_batch : DEFAULT_MAX_BATCH;
    return QAC_OK;
}
