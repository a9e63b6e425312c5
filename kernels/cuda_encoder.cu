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
//
// Passes per layer (post-LayerNorm: BERT, RoBERTa, XLM-RoBERTa): the QKV
// product, attention (the QKV bias added on load), the output product, bias
// + residual + LayerNorm in one pass, the FFN input product, bias + GELU in
// one pass, the FFN output product, bias + residual + LayerNorm. The last
// layer's second LayerNorm is fused with the pooling and the normalisation;
// with CLS pooling the last layer after its attention runs on the pooled
// rows only (QAC_CUDA_PRUNE). Pre-LayerNorm (ModernBERT): the QKV product
// on the normed input (layer 0: the embeddings), its bias and the rotary
// positions in one pass, attention (a local layer's within its window),
// the output product, bias + residual with the next LayerNorm in one pass
// (the residual stream stays fp32), the FFN input product, GeGLU, the FFN
// output product, bias + residual with the next layer's first LayerNorm,
// and for the last layer the final LayerNorm fused with the pooling. RoBERTa's
// offset positions are computed on the host with the batch's layout. A
// query-sized packed batch is padded to a bucket (kernels/qac_encoder_plan.h)
// and replayed as one CUDA graph per bucket: its first batch runs the
// launches one by one (which also warms cuBLAS and the kernels' attributes),
// the second captures them, later ones launch the graph. Graph and direct
// launches run the same kernels on the same shapes: the same bits.
//
// With the fused path, cuDNN's fused attention is the measured alternative
// (cudnn_attention.cuh): per shape, the first batch decides between it and
// qac's kernel for the whole process, and any cuDNN failure runs qac's.
#include <stdlib.h>
#include <string.h>

#include "bert_kernels.cuh"
#include "cudnn_attention.cuh"
#include "flash_attention.cuh"

extern "C" {
#include "encoder_backend.h"
#include "qac_cuda_kernels.h"
#include "qac_encoder_plan.h"
}

// Graph launches by every CUDA encoder of the process (for the tests).
static unsigned long g_graph_launches;

extern "C" unsigned long qac_cuda_encoder_graph_launches(void) {
    return __atomic_load_n(&g_graph_launches, __ATOMIC_RELAXED);
}

namespace {

constexpr int DEFAULT_MAX_BATCH = 256;
constexpr size_t CUBLAS_WORKSPACE = 32u << 20;

// One bucket's graph: seen once (its launches warmed), captured, or not
// capturable (then it runs without one).
enum graph_state { GRAPH_WARM, GRAPH_READY, GRAPH_FAILED };
struct graph_entry {
    int rows, batch, flags;
    graph_state state;
    cudaGraphExec_t exec;
};

struct cuda_encoder {
    qac_bert_config cfg;
    int mean_pooling, normalize;
    int model_normalize; // the checkpoint's setting; normalize is it unless raw
    qac_precision prec;
    size_t esize; // bytes per activation element
    int device;
    int fused;          // packed batches through the fused attention
    qac_fa_tiles tiles; // its tile sizes
    qac_cudnn_att *cudnn; // cuDNN's attention, when loaded (NULL: qac's kernel alone)
    qac_enc_tunables tun;
    int ln_warp; // the one-warp-a-row LayerNorms and the fused pooling take this model
    int prune;   // CLS pooling: the last layer after attention on the pooled rows only
    int host_pos; // positions from the host in every layout (offset or rotary families)
    float *d_rope; // [2, rope_P, hs] rotary cos | sin, global theta then local (NULL: none)
    int rope_P;

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
    void *ffn_pre;     // [N,2I] GeGLU's input (NULL without GeGLU)
    void *xn;          // [N,C] pre-LN: the normed input of the next product (NULL post-LN)
    int32_t *d_ids;    // [N]
    int32_t *d_types;  // [N] token types of a typed batch (a cross-encoder's pairs)
    int32_t *d_pos;    // [N] position of each packed row
    int *d_lens;       // [B]
    int *d_from;       // [B] pooling starts (prompt tokens skipped)
    int *d_offs;       // [B+1] first packed row of each sequence
    int *d_cudnn_idx;  // cuDNN's lengths and ragged offsets (qac_cudnn_idx_ints(B))
    float *d_out;      // [B,C]
    float *xg;         // [B,C] pruned last layer: the pooled rows of x
    void *xgh;         // [B,C] act copy (NULL for fp32)
    void *ctxg;        // [B,C] and of the attention output
    int32_t *h_ids;    // pinned mirrors
    int32_t *h_types;
    int32_t *h_pos;
    int *h_lens;
    int *h_from;
    int *h_offs;
    float *h_out;

    graph_entry *graphs; // room for every bucket and flag combination (qac_enc_graph_slots)
    int n_graphs, max_graphs;
};

// Device view in prec of the fp32 tensor `t` (a view into dp).
const void *act_weight(const cuda_encoder *e, const float *t) {
    if (e->prec == QAC_PREC_FP32) return t;
    return (const char *)e->d_params_act + (size_t)(t - e->d_params) * e->esize;
}

// The graphs hold the buffers' addresses: dropped whenever those change.
void drop_graphs(cuda_encoder *e) {
    for (int i = 0; i < e->n_graphs; i++)
        if (e->graphs[i].exec) cudaGraphExecDestroy(e->graphs[i].exec);
    e->n_graphs = 0;
}

void free_buffers(cuda_encoder *e) {
    drop_graphs(e);
    cudaFree(e->x);
    cudaFree(e->xh);
    cudaFree(e->qkv);
    cudaFree(e->ctx);
    cudaFree(e->proj);
    cudaFree(e->ffn);
    cudaFree(e->ffn_pre);
    cudaFree(e->xn);
    cudaFree(e->d_ids);
    cudaFree(e->d_types);
    cudaFree(e->d_pos);
    cudaFree(e->d_lens);
    cudaFree(e->d_from);
    cudaFree(e->d_offs);
    cudaFree(e->d_cudnn_idx);
    cudaFree(e->d_out);
    cudaFree(e->xg);
    cudaFree(e->xgh);
    cudaFree(e->ctxg);
    cudaFreeHost(e->h_ids);
    cudaFreeHost(e->h_types);
    cudaFreeHost(e->h_pos);
    cudaFreeHost(e->h_lens);
    cudaFreeHost(e->h_from);
    cudaFreeHost(e->h_offs);
    cudaFreeHost(e->h_out);
    e->x = NULL;
    e->xh = e->qkv = e->ctx = e->proj = e->ffn = e->ffn_pre = e->xn = NULL;
    e->d_ids = e->d_types = e->d_pos = NULL;
    e->d_lens = e->d_offs = e->d_from = e->d_cudnn_idx = NULL;
    e->d_out = e->xg = NULL;
    e->xgh = e->ctxg = NULL;
    e->h_ids = e->h_types = e->h_pos = NULL;
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
    qac_cudnn_att_free(e->cudnn);
    if (e->blas) cublasDestroy(e->blas);
    cudaFree(e->blas_ws);
    cudaFree(e->d_params);
    cudaFree(e->d_params_act);
    cudaFree(e->d_rope);
    if (e->ev_start) cudaEventDestroy(e->ev_start);
    if (e->ev_end) cudaEventDestroy(e->ev_end);
    if (e->stream) cudaStreamDestroy(e->stream);
    cudaGetLastError();
    free(e->graphs);
    free(e);
}

// Room for `rows` token rows and `batch` sequences. Fresh buffers start as
// zeros: rows a batch leaves unwritten (a bucket's padding) hold finite values.
qac_status grow_buffers(cuda_encoder *e, size_t rows, int batch) {
    if (rows <= e->cap_tokens && batch <= e->cap_batch) return QAC_OK;
    const size_t ntok = rows > e->cap_tokens ? rows : e->cap_tokens;
    const int nb = batch > e->cap_batch ? batch : e->cap_batch;
    const size_t C = e->cfg.hidden_size, I = e->cfg.intermediate_size, es = e->esize;
    QAC_CU(cudaStreamSynchronize(e->stream));
    free_buffers(e);
    qac_status st = QAC_OK;
    struct {
        void **p;
        size_t bytes;
    } dev[] = {{(void **)&e->x, ntok * C * sizeof(float)},
               {&e->xh, e->prec != QAC_PREC_FP32 ? ntok * C * es : 0},
               {&e->qkv, ntok * 3 * C * es},
               {&e->ctx, ntok * C * es},
               {&e->proj, ntok * C * es},
               {&e->ffn, ntok * I * es},
               {&e->ffn_pre, e->cfg.glu ? ntok * 2 * I * es : 0},
               {&e->xn, e->cfg.pre_norm ? ntok * C * es : 0},
               {(void **)&e->d_ids, ntok * sizeof(int32_t)},
               {(void **)&e->d_types, ntok * sizeof(int32_t)},
               {(void **)&e->d_pos, ntok * sizeof(int32_t)},
               {(void **)&e->d_lens, nb * sizeof(int)},
               {(void **)&e->d_from, nb * sizeof(int)},
               {(void **)&e->d_offs, (nb + 1) * sizeof(int)},
               {(void **)&e->d_cudnn_idx, e->cudnn ? qac_cudnn_idx_ints(nb) * sizeof(int) : 0},
               {(void **)&e->d_out, (size_t)nb * C * sizeof(float)},
               {(void **)&e->xg, e->prune ? (size_t)nb * C * sizeof(float) : 0},
               {&e->xgh, e->prune && e->prec != QAC_PREC_FP32 ? (size_t)nb * C * es : 0},
               {&e->ctxg, e->prune ? (size_t)nb * C * es : 0}};
    for (auto &d : dev) {
        if (!d.bytes) continue;
        QAC_CU_GOTO(st, cudaMalloc(d.p, d.bytes), fail);
        QAC_CU_GOTO(st, cudaMemsetAsync(*d.p, 0, d.bytes, e->stream), fail); // ordered before the batch
    }
    QAC_CU_GOTO(st, cudaMallocHost((void **)&e->h_ids, ntok * sizeof(int32_t)), fail);
    QAC_CU_GOTO(st, cudaMallocHost((void **)&e->h_types, ntok * sizeof(int32_t)), fail);
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
    return qac_wrap_error(st, "CUDA encoder: activations for %zu tokens in %d sequences", rows, batch);
}

// One LayerNorm after a sub-layer: x = LayerNorm(x + (r + bias)).
qac_status residual_ln(cuda_encoder *e, float *x, void *xh, const void *r, const float *bias, const float *w,
                       const float *b, int n) {
    const int C = e->cfg.hidden_size;
    const float eps = e->cfg.layer_norm_eps;
    if (e->ln_warp)
        QAC_CU(qac_k_residual_ln_warp(x, xh, r, bias, w, b, n, C, eps, e->prec, e->tun.ln_warps, e->stream));
    else
        QAC_CU(qac_k_residual_ln(x, xh, r, bias, w, b, n, C, eps, e->prec, e->stream));
    return QAC_OK;
}

// The forward of one batch on the stream: L->rows token rows (B * T padded,
// or packed) in L->batch sequences, the attention over keys up to
// L->longest; skip_prompt: pool from d_from's rows; typed: token types from
// d_types (else type 0). Leaves d_out [batch, C].
// The family's fields choose the steps (the file's header lists both orders).
qac_status run_layers(cuda_encoder *e, const qac_enc_layout *Lay, int skip_prompt, int typed) {
    const qac_bert_config *c = &e->cfg;
    const int C = c->hidden_size, I = c->intermediate_size, F = qac_bert_ffn_rows(c), NH = c->num_heads,
              NL = c->num_layers, pre = c->pre_norm, hs = C / NH;
    const int B = Lay->batch, T = Lay->longest, N = Lay->rows;
    const qac_precision p = e->prec;
    const qac_bert_params *w = &e->dp;
    const float eps = c->layer_norm_eps;
    const qac_fa_rows rows = {e->d_offs, NULL, B, T, N};
    const qac_kt_drop none = {0.0f, 0, 0};
    const int *offs = e->fused ? e->d_offs : NULL; // the pooling's view of the rows
    const int *from = skip_prompt ? e->d_from : NULL;
    const int32_t *types = typed ? e->d_types : NULL;
    const int32_t *pos = e->fused || e->host_pos ? e->d_pos : NULL;
#define VEC(ptr, l, n) ((ptr) ? (ptr) + (size_t)(l) * (n) : NULL) /* a bias the family may lack */

    if (e->ln_warp)
        QAC_CU(qac_k_embed_ln_warp(e->x, e->xh, e->d_ids, types, pos, w->word_emb, w->pos_emb, w->type_emb,
                                   w->emb_ln_w, w->emb_ln_b, N, T, C, eps, p, e->tun.ln_warps, e->stream));
    else
        QAC_CU(qac_k_embed_ln(e->x, e->xh, e->d_ids, types, pos, w->word_emb, w->pos_emb, w->type_emb, w->emb_ln_w,
                              w->emb_ln_b, N, T, C, eps, p, e->stream));
    for (int l = 0; l < NL; l++) {
        const size_t lc = (size_t)l * C;
        const int last = l == NL - 1, window = qac_bert_layer_window(c, l);
        const float *qkv_b = VEC(w->qkv_b, l, 3 * C);
        // the QKV product's input: the residual stream (post-LN, and pre-LN's
        // layer 0), else its LayerNorm written by the step before
        const void *xin = pre && l > 0 ? e->xn : p == QAC_PREC_FP32 ? (void *)e->x : e->xh;
        QAC_CUBLAS(qac_k_matmul(e->blas, e->qkv, xin, act_weight(e, w->qkv_w + lc * 3 * C), N, C, 3 * C, p));
        if (c->positions == QAC_POS_ROTARY) { // the bias goes in before the rotation
            QAC_CU(qac_k_rope(e->qkv, qkv_b, e->d_pos, e->d_rope + (window ? (size_t)e->rope_P * hs : 0), N, C, NH, p,
                              e->stream));
            qkv_b = NULL;
        }
        if (e->fused && !window) { // proj is free until the output product: cuDNN's scratch
            const qac_status st = qac_cudnn_att_forward(e->cudnn, e->ctx, e->qkv, qkv_b, rows, Lay->real_rows, C, NH, p,
                                                        &e->tiles, e->proj, e->d_cudnn_idx, e->stream);
            if (st != QAC_OK) return st;
        } else if (e->fused) { // local windows: qac's fused kernel (cuDNN's is not asked for them)
            QAC_CU(qac_fa_forward(e->ctx, NULL, e->qkv, qkv_b, rows, C, NH, 0, window, none, 0, p, &e->tiles,
                                  e->stream));
        } else if (window || !qkv_b) {
            QAC_CU(qac_k_attention_window(e->ctx, e->qkv, qkv_b, e->d_lens, window, B, T, C, NH, p, e->stream));
        } else {
            QAC_CU(qac_k_attention(e->ctx, e->qkv, qkv_b, e->d_lens, B, T, C, NH, p, e->stream));
        }
        // the rest of the layer over n rows of xs (its act copy xsh) and att
        int n = N;
        float *xs = e->x;
        void *xsh = e->xh;
        const void *att = e->ctx;
        if (last && e->prune) { // only the pooled rows are read past this point
            QAC_CU(qac_k_gather_rows(e->xg, e->ctxg, e->x, e->ctx, offs, e->d_lens, from, B, T, C, p, e->stream));
            n = B, xs = e->xg, xsh = e->xgh, att = e->ctxg;
        }
        QAC_CUBLAS(qac_k_matmul(e->blas, e->proj, att, act_weight(e, w->attn_out_w + lc * C), n, C, C, p));
        qac_status st;
        if (pre) // xs = xs + proj + bo; xn = LN2(xs)
            QAC_CU(qac_k_add_ln(xs, e->xn, e->proj, VEC(w->attn_out_b, l, C), w->ln2_w + lc, VEC(w->ln2_b, l, C), n,
                                C, eps, p, e->stream));
        else if ((st = residual_ln(e, xs, xsh, e->proj, w->attn_out_b + lc, w->ln1_w + lc, w->ln1_b + lc, n)))
            return st;
        const void *fin = pre ? e->xn : p == QAC_PREC_FP32 ? (void *)xs : xsh; // the FFN's input
        if (c->glu) {
            QAC_CUBLAS(qac_k_matmul(e->blas, e->ffn_pre, fin, act_weight(e, w->ffn_in_w + (size_t)l * F * C), n, C, F,
                                    p));
            QAC_CU(qac_k_geglu(e->ffn, e->ffn_pre, VEC(w->ffn_in_b, l, F), n, I, p, e->stream));
        } else {
            QAC_CUBLAS(qac_k_matmul(e->blas, e->ffn, fin, act_weight(e, w->ffn_in_w + (size_t)l * I * C), n, C, I, p));
            QAC_CU(qac_k_bias_gelu_rows(e->ffn, w->ffn_in_b + (size_t)l * I, n, I, p, e->tun.gelu_rows, e->stream));
        }
        QAC_CUBLAS(qac_k_matmul(e->blas, e->proj, e->ffn, act_weight(e, w->ffn_out_w + lc * I), n, I, C, p));
        // the norm after the FFN: post-LN the layer's second, pre-LN the
        // next layer's first or, after the last, the final one
        const float *bo = VEC(w->ffn_out_b, l, C);
        const float *g2 = pre ? (last ? w->final_ln_w : w->ln1_w + lc + C) : w->ln2_w + lc;
        const float *b2 = pre ? (last ? w->final_ln_b : VEC(w->ln1_b, l + 1, C)) : w->ln2_b + lc;
        if (!last) {
            if (pre)
                QAC_CU(qac_k_add_ln(xs, e->xn, e->proj, bo, g2, b2, n, C, eps, p, e->stream));
            else if ((st = residual_ln(e, xs, xsh, e->proj, bo, g2, b2, n)))
                return st;
        } else if (e->prune) { // one gathered row per sequence
            QAC_CU(qac_k_ln_pool(e->d_out, xs, e->proj, bo, g2, b2, NULL, NULL, NULL, B, 1, C, eps, 0, e->normalize, p,
                                 1, e->stream));
        } else if (e->ln_warp) {
            QAC_CU(qac_k_ln_pool(e->d_out, xs, e->proj, bo, g2, b2, offs, e->d_lens, from, B, T, C, eps,
                                 e->mean_pooling, e->normalize, p, e->mean_pooling ? e->tun.pool_warps : 1, e->stream));
        } else {
            QAC_CU(qac_k_residual_ln(xs, NULL, e->proj, bo, g2, b2, n, C, eps, p, e->stream));
            const int Br = Lay->real_batch; // the pooling kernel reads a row even of an empty sequence
            if (e->fused)
                QAC_CU(qac_k_pool_packed(e->d_out, e->x, e->d_offs, e->d_lens, from, Br, C, e->mean_pooling,
                                         e->normalize, e->stream));
            else
                QAC_CU(qac_k_pool_from(e->d_out, e->x, e->d_lens, from, Br, T, C, e->mean_pooling, e->normalize,
                                       e->stream));
        }
    }
#undef VEC
    return QAC_OK;
}

// A batch's copies in, its forward and its copy out, queued on the stream
// (directly or into a graph being captured): the host buffers hold the
// inputs of layout L.
qac_status enqueue_batch(cuda_encoder *e, const qac_enc_layout *L, int skip_prompt, int typed) {
    const size_t B = (size_t)L->batch, rows = (size_t)L->rows;
    const cudaMemcpyKind h2d = cudaMemcpyHostToDevice;
    QAC_CU(cudaMemcpyAsync(e->d_lens, e->h_lens, B * sizeof(int), h2d, e->stream));
    if (skip_prompt) QAC_CU(cudaMemcpyAsync(e->d_from, e->h_from, B * sizeof(int), h2d, e->stream));
    if (e->fused || e->host_pos)
        QAC_CU(cudaMemcpyAsync(e->d_pos, e->h_pos, rows * sizeof(int32_t), h2d, e->stream));
    if (e->fused) QAC_CU(cudaMemcpyAsync(e->d_offs, e->h_offs, (B + 1) * sizeof(int), h2d, e->stream));
    QAC_CU(cudaMemcpyAsync(e->d_ids, e->h_ids, rows * sizeof(int32_t), h2d, e->stream));
    if (typed) QAC_CU(cudaMemcpyAsync(e->d_types, e->h_types, rows * sizeof(int32_t), h2d, e->stream));
    qac_status st = run_layers(e, L, skip_prompt, typed);
    if (st != QAC_OK) return st;
    QAC_CU(cudaMemcpyAsync(e->h_out, e->d_out, B * e->cfg.hidden_size * sizeof(float), cudaMemcpyDeviceToHost,
                           e->stream));
    return QAC_OK;
}

// enqueue_batch captured into a graph (*out NULL when that fails; the
// stream is left out of capture either way).
qac_status capture_batch(cuda_encoder *e, const qac_enc_layout *L, int skip_prompt, int typed,
                         cudaGraphExec_t *out) {
    *out = NULL;
    QAC_CU(cudaStreamBeginCapture(e->stream, cudaStreamCaptureModeThreadLocal));
    qac_status st = enqueue_batch(e, L, skip_prompt, typed);
    cudaGraph_t g = NULL;
    const cudaError_t ce = cudaStreamEndCapture(e->stream, &g);
    if (st == QAC_OK) st = qac_cuda_check(ce, "cudaStreamEndCapture");
    if (st == QAC_OK) st = qac_cuda_check(cudaGraphInstantiate(out, g, 0), "cudaGraphInstantiate");
    if (g) cudaGraphDestroy(g);
    if (st != QAC_OK) {
        *out = NULL;
        cudaGetLastError();
    }
    return st;
}

// The bucket's graph entry, added when there is room (NULL: none).
graph_entry *graph_for(cuda_encoder *e, const qac_enc_layout *L, int flags, int *added) {
    *added = 0;
    for (int i = 0; i < e->n_graphs; i++) {
        graph_entry *g = &e->graphs[i];
        if (g->rows == L->rows && g->batch == L->batch && g->flags == flags) return g;
    }
    if (e->n_graphs == e->max_graphs) return NULL;
    graph_entry *g = &e->graphs[e->n_graphs++];
    *g = {L->rows, L->batch, flags, GRAPH_WARM, NULL};
    *added = 1;
    return g;
}

// Runs the batch whose inputs the host buffers hold: by its bucket's graph
// when there is one, else launch by launch.
qac_status run_batch(cuda_encoder *e, const qac_enc_layout *L, int skip_prompt, int typed) {
    if (!(L->bucketed && e->tun.graphs)) return enqueue_batch(e, L, skip_prompt, typed);
    int added;
    graph_entry *g = graph_for(e, L, (skip_prompt ? 1 : 0) | (e->normalize ? 2 : 0) | (typed ? 4 : 0), &added);
    if (!g || added || g->state == GRAPH_FAILED) return enqueue_batch(e, L, skip_prompt, typed);
    if (g->state == GRAPH_WARM) {
        if (capture_batch(e, L, skip_prompt, typed, &g->exec) != QAC_OK) {
            g->state = GRAPH_FAILED; // this bucket runs without a graph from now on
            return enqueue_batch(e, L, skip_prompt, typed);
        }
        g->state = GRAPH_READY;
    }
    QAC_CU(cudaGraphLaunch(g->exec, e->stream));
    __atomic_fetch_add(&g_graph_launches, 1ul, __ATOMIC_RELAXED);
    return QAC_OK;
}

void encoder_set_raw(void *impl, int raw) {
    cuda_encoder *e = (cuda_encoder *)impl;
    e->normalize = e->model_normalize && !raw;
}

qac_status encoder_forward(void *impl, const int32_t *ids, const int32_t *type_ids, const int *lens,
                           const int *pool_from, int B, int T, float *out) {
    cuda_encoder *e = (cuda_encoder *)impl;
    const qac_bert_config *c = &e->cfg;
    if (B < 1 || T < 1) return qac_set_error(QAC_ERR_INVALID, "CUDA encoder: empty batch (%d x %d)", B, T);
    if (T > qac_bert_max_tokens(c))
        return qac_set_error(QAC_ERR_INVALID, "CUDA encoder: %d tokens exceed the model's %d positions", T,
                             qac_bert_max_tokens(c));
    if (!e->fused && !qac_k_attention_supported(T, c->hidden_size, c->num_heads))
        return qac_set_error(QAC_ERR_UNSUPPORTED,
                             "CUDA encoder: %d tokens need the fused attention (bf16 or fp16, head size 32 or 64)",
                             T);
    for (int b = 0; b < B; b++)
        if (lens[b] < 1 || lens[b] > T)
            return qac_set_error(QAC_ERR_INVALID, "CUDA encoder: sequence %d has length %d (padded length %d)",
                                 b, lens[b], T);
    const size_t N = (size_t)B * T;
    for (size_t i = 0; i < N; i++) {
        if (ids[i] < 0 || ids[i] >= c->vocab_size)
            return qac_set_error(QAC_ERR_INVALID, "CUDA encoder: token id %d outside the vocabulary (%d)",
                                 (int)ids[i], c->vocab_size);
        if (type_ids && (type_ids[i] < 0 || type_ids[i] >= c->type_vocab_size))
            return qac_set_error(QAC_ERR_INVALID, "CUDA encoder: token type %d outside the model's %d types",
                                 (int)type_ids[i], c->type_vocab_size);
    }
    QAC_CU(cudaSetDevice(e->device));
    qac_enc_layout L = {B, B, (int)N, (int)N, T, 0}; // padded
    if (e->fused) L = qac_enc_layout_packed(lens, B, &e->tun);
    size_t want_rows = (size_t)L.rows;
    int want_batch = L.batch;
    if (L.bucketed) { // room for every bucket at once: graphs survive other buckets
        int r = QAC_ENC_MIN_ROWS, b = 1;
        while (r < e->tun.graph_rows) r *= 2;
        while (b < e->tun.graph_batch) b *= 2;
        if ((size_t)r > want_rows) want_rows = (size_t)r;
        if (b > want_batch) want_batch = b;
    }
    qac_status st = grow_buffers(e, want_rows, want_batch);
    if (st != QAC_OK) return st;

    if (e->fused) {
        qac_enc_pack(e->h_ids, e->h_pos, e->h_offs, e->h_lens, e->h_from, &L, ids, T, lens, pool_from, B);
        if (type_ids) qac_enc_pack_types(e->h_types, &L, type_ids, T, lens, B);
        if (e->host_pos) qac_positions_fill(e->h_pos, e->h_ids, lens, e->h_offs, B, T, c);
    } else {
        memcpy(e->h_lens, lens, (size_t)B * sizeof(int));
        if (pool_from) memcpy(e->h_from, pool_from, (size_t)B * sizeof(int));
        memcpy(e->h_ids, ids, N * sizeof(int32_t));
        if (type_ids) memcpy(e->h_types, type_ids, N * sizeof(int32_t));
        if (e->host_pos) qac_positions_fill(e->h_pos, ids, lens, NULL, B, T, c);
    }
    QAC_CU(cudaEventRecord(e->ev_start, e->stream));
    st = run_batch(e, &L, pool_from != NULL, type_ids != NULL);
    if (st != QAC_OK) return qac_wrap_error(st, "CUDA encoder");
    QAC_CU(cudaEventRecord(e->ev_end, e->stream));
    QAC_CU(cudaStreamSynchronize(e->stream));
    float ms = 0.f;
    if (cudaEventElapsedTime(&ms, e->ev_start, e->ev_end) == cudaSuccess) e->device_s += ms * 1e-3;
    memcpy(out, e->h_out, (size_t)B * c->hidden_size * sizeof(float));
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
    if (m->cfg.positions == QAC_POS_ROTARY) { // the CPU's tables, so both turn by the same angles
        const int hs = m->cfg.hidden_size / m->cfg.num_heads;
        e->rope_P = qac_bert_max_tokens(&m->cfg);
        const size_t nr = (size_t)e->rope_P * hs;
        float *h = (float *)malloc(2 * nr * sizeof(float));
        if (!h) return qac_set_error(QAC_ERR_NOMEM, "CUDA encoder: out of host memory for the rotary tables");
        qac_rope_table(h, e->rope_P, hs, m->cfg.rope_theta);
        qac_rope_table(h + nr, e->rope_P, hs, m->cfg.rope_theta_local);
        cudaError_t ce = cudaMalloc((void **)&e->d_rope, 2 * nr * sizeof(float));
        if (ce == cudaSuccess) ce = cudaMemcpy(e->d_rope, h, 2 * nr * sizeof(float), cudaMemcpyHostToDevice);
        free(h);
        QAC_CU(ce);
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
    qac_status st = upload_weights(e, m);
    if (st != QAC_OK) return st;
    // every layer's vectors lie C floats apart: the first layer's stand for all
    const qac_bert_params *w = &e->dp;
    const void *vec[] = {w->word_emb, w->pos_emb, w->type_emb,  w->emb_ln_w, w->emb_ln_b,   w->attn_out_b, w->ln1_w,
                         w->ln1_b,    w->ffn_out_b, w->ln2_w, w->ln2_b,    w->final_ln_w, w->final_ln_b};
    e->ln_warp = e->tun.ln_warps > 0 && qac_k_ln_warp_ok(e->cfg.hidden_size, vec, (int)(sizeof vec / sizeof *vec));
    e->prune = e->tun.prune && !e->mean_pooling && e->ln_warp;
    return QAC_OK;
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
    if (!qac_k_attention_supported(1, c->hidden_size, c->num_heads))
        return qac_set_error(QAC_ERR_UNSUPPORTED,
                             "CUDA encoder: %d heads over %d hidden units (head size must be a multiple of 32 "
                             "up to 256)",
                             c->num_heads, c->hidden_size);
    if (c->hidden_size > 16384 || (c->type_vocab_size < 1 && c->positions != QAC_POS_ROTARY) ||
        (c->pre_norm && c->hidden_size * sizeof(float) > 48 * 1024))
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
    e->host_pos = c->positions != QAC_POS_LEARNED;
    e->tiles = qac_fa_tiles_default();
    e->tun = qac_enc_tunables_default();
    e->max_graphs = qac_enc_graph_slots(&e->tun);
    if (e->max_graphs && !(e->graphs = (graph_entry *)calloc((size_t)e->max_graphs, sizeof *e->graphs))) {
        free(e);
        return qac_set_error(QAC_ERR_NOMEM, "CUDA encoder: out of host memory");
    }
    qac_status st = encoder_init(e, m);
    if (st != QAC_OK) {
        encoder_destroy(e);
        return qac_wrap_error(st, "CUDA encoder (%s)", qac_prec_name(prec));
    }
    // cuDNN's attention where it loads (why not: qac_cuda_describe)
    if (e->fused && qac_cudnn_att_create(&e->cudnn, e->stream) != QAC_OK) qac_clear_error();
    be->impl = e;
    be->forward = encoder_forward;
    be->free = encoder_destroy;
    be->set_raw = encoder_set_raw;
    be->device_seconds = encoder_device_seconds;
    be->max_batch = o && o->max_batch > 0 ? o->max_batch : DEFAULT_MAX_BATCH;
    return QAC_OK;
}
