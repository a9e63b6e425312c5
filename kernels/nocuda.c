/* Entry points of the CUDA backend for builds without CUDA: no GPU is ever
 * usable, and asking for one is a clear error. */
#include <stdio.h>
#include <string.h>

#include "encoder_backend.h"
#include "qac_cuda_attention.h"
#include "qac_cuda_kernels.h"
#include "qac_cuda_pretrain.h"
#include "qac_cuda_train.h"
#include "qac_cuda_train_kernels.h"
#include "qac_gpu_defaults.h"
#include "qac_gpu_flat.h"

#define NO_CUDA "qac was built without CUDA (install the CUDA toolkit and rebuild)"

int qac_cuda_available(void) { return 0; }

qac_status qac_cuda_backend_create(qac_encoder_backend *be, const qac_model *m, const qac_encoder_opts *o) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}

qac_status qac_gpu_flat_create(qac_gpu_flat **out, int dim, int64_t capacity) {
    *out = NULL;
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_gpu_flat_add(qac_gpu_flat *g, const float *v, int64_t n) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_gpu_flat_search(qac_gpu_flat *g, const float *q, int nq, int k, float *s, int64_t *r) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
int64_t qac_gpu_flat_count(const qac_gpu_flat *g) { return 0; }
void qac_gpu_flat_free(qac_gpu_flat *g) {}
qac_status qac_gpu_flat_set_tie_order(qac_gpu_flat *g, const uint32_t *rank) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_gpu_flat_set_tuning(qac_gpu_flat *g, const qac_gpu_flat_tuning *t) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
void qac_gpu_flat_get_tuning(const qac_gpu_flat *g, qac_gpu_flat_tuning *t) { qac_gpu_flat_tuning_default(t); }
void qac_gpu_flat_last_stats(const qac_gpu_flat *g, qac_gpu_flat_stats *s) { memset(s, 0, sizeof *s); }
qac_status qac_gpu_flat_read_floor(qac_gpu_flat *g, int reps, double *seconds, double *bytes) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}

qac_status qac_cuda_embeddings_layernorm(float *out, float *out_act, const int32_t *ids,
                                         const float *word_emb, const float *pos_emb,
                                         const float *type_emb, const float *w, const float *b,
                                         int B, int T, int C, int V, int P, float eps,
                                         qac_precision prec, int warps) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_residual_layernorm(float *out, float *out_act, const float *x, const float *r,
                                       const float *bias, const float *w, const float *b, int N, int C,
                                       float eps, qac_precision prec, int warps) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_ln_pool(float *out, const float *x, const float *r, const float *bias, const float *w,
                            const float *b, const int *offs, const int *lens, const int *from, int B, int T, int N,
                            int C, float eps, qac_pooling pooling, int normalize, qac_precision prec, int warps) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_bias_gelu(float *out, const float *inp, const float *bias, int N, int I,
                              qac_precision prec, int rows) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
unsigned long qac_cuda_encoder_graph_launches(void) { return 0; }
qac_status qac_cuda_attention(float *out, const float *qkv, const float *qkv_b, const int *lens,
                              int B, int T, int C, int NH, qac_precision prec) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_pooling(float *out, const float *hidden, const int *lens, const int *from, int B, int T, int C,
                            qac_pooling pooling, int normalize) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_matmul(float *out, const float *inp, const float *w, int N, int IC, int OC,
                           qac_precision prec) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}

qac_status qac_cuda_embeddings_backward(float *dword, float *dpos, float *dtype, const float *dout,
                                        const int32_t *ids, const int32_t *type_ids, int B, int T, int C, int V,
                                        int P, int Tt) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                      const float *b, int N, int C, float eps) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                       const float *mean, const float *rstd, const float *w, int N, int C) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_gelu_backward(float *dinp, const float *dout, const float *pre, size_t n, qac_precision prec) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_bias_gelu_train(float *pre, float *act, const float *inp, const float *bias, int N, int I,
                                    qac_precision prec) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_matmul_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                    const float *w, int N, int IC, int OC, qac_precision prec) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_residual_layernorm_train(float *res, float *out, float *out_act, float *mean, float *rstd,
                                             float *dres, float *dproj, float *dw, float *db, float *dbias,
                                             const float *proj, const float *bias, const float *resid, const float *w,
                                             const float *b, const float *dout, const float *dadd, float p,
                                             uint64_t key, int layer, int site, int B, int T, int C, float eps,
                                             qac_precision prec) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_bias_gelu_fused(float *act, float *dpre, float *dbias, const float *pre, const float *bias,
                              const float *dout, int N, int I, qac_precision prec) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_dropout(float *out, const float *inp, const float *resid, float p, uint64_t key, int layer,
                            int site, int B, int T, int C) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_attention_train(float *out, float *att, const float *qkv, const int *lens, float p_attn,
                                    uint64_t key, int layer, int B, int T, int C, int NH, qac_precision prec) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_attention_backward(float *dqkv, const float *datty, const float *qkv, const int *lens,
                                       float p_attn, uint64_t key, int layer, int B, int T, int C, int NH,
                                       qac_precision prec) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_pooling_backward(float *dhidden, const float *dout, const float *hidden, const int *lens, int B,
                                     int T, int C, qac_pooling pooling, int normalize) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_infonce(double *loss, float *dq, float *dp, const float *q, const float *p, int nq, int n,
                            int C, float tau, qac_similarity sim) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_cocondenser_loss(double *loss, float *dx, const float *x, int n2, int C, float tau) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_mlm_ce(double *loss, float *dlogits, const float *logits, const float *bias,
                           const int32_t *labels, int M, int V) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_clip_adamw(float *p, float *p_bf16, const float *g, float *m, float *v, size_t n,
                               size_t n_decay, long t, double lr, double beta1, double beta2, double eps, double wd,
                               double max_norm, double *norm) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}

qac_status qac_cuda_trainer_create(qac_cuda_trainer **out, const qac_model *m, const qac_train_opts *o,
                                   float hidden_dropout, float attn_dropout, const int *decays, int n_trained) {
    *out = NULL;
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
void qac_cuda_trainer_free(qac_cuda_trainer *g) {}
qac_status qac_cuda_trainer_grads(qac_cuda_trainer *g, const qac_train_batch *b, uint64_t drop_key, double *loss) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_trainer_update(qac_cuda_trainer *g, long t, double lr, double *grad_norm) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_trainer_download(qac_cuda_trainer *g, float *params, float *grads, float *adam_m,
                                     float *adam_v) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_trainer_upload(qac_cuda_trainer *g, const float *params, const float *adam_m,
                                   const float *adam_v) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}

qac_status qac_train_dist_id(unsigned char id[128]) {
    memset(id, 0, 128);
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
int qac_train_gpu_count(void) { return 0; }
qac_status qac_train_use_gpu(int device) { return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA); }
qac_status qac_cuda_attention_causal_train(float *out, float *att, const float *qkv, const int *lens, int window,
                                           float p_attn, uint64_t key, int layer, int B, int T, int C, int NH,
                                           qac_precision prec) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_qgen_block(float *out, float *dx, float *dparams, const float *params, const float *x,
                               const float *dout, const int *lens, const qac_qgen_config *q, float p_hidden,
                               float p_attn, uint64_t key, int B, int T, qac_precision prec) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_attention_causal_backward(float *dqkv, const float *datty, const float *qkv, const int *lens,
                                              int window, float p_attn, uint64_t key, int layer, int B, int T, int C,
                                              int NH, qac_precision prec) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}

qac_status qac_cuda_pretrainer_create(qac_cuda_pretrainer **out, const qac_cuda_pt_spec *spec, const float *enc,
                                      const float *heads) {
    *out = NULL;
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
void qac_cuda_pretrainer_free(qac_cuda_pretrainer *g) {}
qac_status qac_cuda_pretrainer_grads(qac_cuda_pretrainer *g, int B, const qac_cuda_pt_seqs *a,
                                     const qac_cuda_pt_seqs *b, const qac_cuda_pt_seqs *da,
                                     const qac_cuda_pt_seqs *db, uint64_t enc_key, uint64_t head_key,
                                     double losses[3]) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_pretrainer_update(qac_cuda_pretrainer *g, long t, double lr, double *grad_norm) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_pretrainer_download(qac_cuda_pretrainer *g, float *enc, float *heads, float *grads, float *m,
                                        float *v) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_pretrainer_upload(qac_cuda_pretrainer *g, const float *enc, const float *heads, const float *m,
                                      const float *v) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}

qac_status qac_cuda_attention_select(const char *mode) {
    if (mode && strcmp(mode, "fused") && strcmp(mode, "unfused"))
        return qac_set_error(QAC_ERR_INVALID, "CUDA attention: unknown path \"%s\" (fused or unfused)", mode);
    return QAC_OK;
}
int qac_cuda_attention_fused(void) { return 1; }
qac_fa_tiles qac_fa_tiles_default(void) {
    const int f[4] = {QAC_FA_FWD_DEFAULT}, k[4] = {QAC_FA_DKDV_DEFAULT}, q[4] = {QAC_FA_DQ_DEFAULT};
    qac_fa_tiles t = {f[0], f[1], f[2], k[0], k[1], k[2], q[0], q[1], q[2], f[3], k[3], q[3]};
    return t;
}
int qac_fa_variants(char kind, int (*out)[4], int max) { return 0; }
int qac_fa_tiles_valid(const qac_fa_tiles *tiles) { return 0; }
qac_status qac_cuda_fa_forward(float *out, float *lse, const float *qkv, const float *qkv_b, const int *offs,
                               const int *lens, int B, int T, int C, int NH, int causal, int window, float p_attn,
                               uint64_t key, int layer, qac_precision prec, const qac_fa_tiles *tiles) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
qac_status qac_cuda_fa_backward(float *dqkv, const float *dout, const float *out, const float *lse, const float *qkv,
                                const float *qkv_b, const int *offs, const int *lens, int B, int T, int C, int NH,
                                int causal, int window, float p_attn, uint64_t key, int layer, qac_precision prec,
                                const qac_fa_tiles *tiles) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}

int qac_cuda_attention_choices(char *buf, size_t cap) {
    if (cap) buf[0] = 0;
    return 0;
}
qac_status qac_cudnn_fa_forward(float *out, const float *qkv, const float *qkv_b, const int *offs, int B, int T,
                                int C, int NH, qac_precision prec) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, NO_CUDA);
}
const char *qac_cuda_describe(char *buf, size_t cap) {
    if (cap) snprintf(buf, cap, "built without CUDA");
    return buf;
}
int qac_cudnn_version(void) { return 0; }
const char *qac_cudnn_status(char *buf, size_t cap) {
    if (cap) snprintf(buf, cap, "built without CUDA");
    return buf;
}
