// The fused attention's host side (kernels/qac_cuda_attention.h): the path
// selection and the host-memory entry points of the parity tests. The
// tunables and their defaults are in flash_tiles.cu, below the launchers
// (flash_fwd.cu, flash_bwd.cu) that read them and this file that calls them.
#include <stdlib.h>
#include <string.h>

#include "bert_kernels.cuh"
#include "dev_scratch.cuh"
#include "flash_attention.cuh"

// ---- path ----

// -1: follow the environment; 0 unfused, 1 fused
static int g_att_mode = -1;

qac_status qac_cuda_attention_select(const char *mode) {
    if (!mode) {
        __atomic_store_n(&g_att_mode, -1, __ATOMIC_RELEASE);
        return QAC_OK;
    }
    if (!strcmp(mode, "fused"))
        __atomic_store_n(&g_att_mode, 1, __ATOMIC_RELEASE);
    else if (!strcmp(mode, "unfused"))
        __atomic_store_n(&g_att_mode, 0, __ATOMIC_RELEASE);
    else
        return qac_set_error(QAC_ERR_INVALID, "CUDA attention: unknown path \"%s\" (fused or unfused)", mode);
    return QAC_OK;
}

int qac_cuda_attention_fused(void) {
    const int m = __atomic_load_n(&g_att_mode, __ATOMIC_ACQUIRE);
    if (m >= 0) return m;
    const char *e = getenv("QAC_CUDA_ATTENTION");
    return !(e && !strcmp(e, "unfused"));
}

// ---- host-memory entry points ----

namespace {

qac_status check_args(int B, int T, int C, int NH, qac_precision prec, const qac_fa_tiles *tiles) {
    if (!qac_cuda_available()) return qac_set_error(QAC_ERR_UNSUPPORTED, "no usable CUDA GPU");
    if (!qac_fa_supported(C, NH, prec))
        return qac_set_error(QAC_ERR_UNSUPPORTED, "fused attention: %d heads over %d in %s", NH, C, qac_prec_name(prec));
    if (B < 1 || T < 1) return qac_set_error(QAC_ERR_INVALID, "fused attention: %d x %d", B, T);
    if (tiles && !qac_fa_tiles_valid(tiles))
        return qac_set_error(QAC_ERR_INVALID,
                             "fused attention: tiles %dx%dx%dx%d / %dx%dx%dx%d / %dx%dx%dx%d not compiled", tiles->bq,
                             tiles->bk, tiles->stages, qac_fa_minb(tiles->minb), tiles->kv_bk, tiles->kv_bq,
                             tiles->kv_stages, qac_fa_minb(tiles->kv_minb), tiles->dq_bq, tiles->dq_bk,
                             tiles->dq_stages, qac_fa_minb(tiles->dq_minb));
    return QAC_OK;
}

// the device copies of offs and lens, and the row count
qac_status up_rows(qac_scratch *s, qac_fa_rows *r, const int *offs, const int *lens, int B, int T) {
    r->B = B;
    r->T = T;
    r->N = offs ? offs[B] : B * T;
    r->offs = r->lens = NULL;
    qac_status st = QAC_OK;
    if (offs) st = qac_scratch_up(s, (void **)&r->offs, offs, (size_t)(B + 1) * sizeof(int));
    if (st == QAC_OK && lens) st = qac_scratch_up(s, (void **)&r->lens, lens, (size_t)B * sizeof(int));
    return st;
}

qac_kt_drop drop_of(float p, uint64_t key) {
    qac_kt_drop d;
    d.p = p;
    d.key = key;
    d.seq_base = 0;
    return d;
}

} // namespace

#define FA_TRY(expr)                                                                       \
    do {                                                                                   \
        st = (expr);                                                                       \
        if (st != QAC_OK) goto done;                                                       \
    } while (0)

qac_status qac_cuda_fa_forward(float *out, float *lse, const float *qkv, const float *qkv_b, const int *offs,
                               const int *lens, int B, int T, int C, int NH, int causal, int window, float p_attn,
                               uint64_t key, int layer, qac_precision prec, const qac_fa_tiles *tiles) {
    qac_status st = check_args(B, T, C, NH, prec, tiles);
    if (st != QAC_OK) return st;
    qac_scratch s = {{0}, 0};
    qac_fa_rows rows;
    void *d_qkv, *d_b = NULL, *d_out, *d_lse;
    FA_TRY(up_rows(&s, &rows, offs, lens, B, T));
    FA_TRY(qac_scratch_up_act(&s, &d_qkv, qkv, (size_t)rows.N * 3 * C, prec));
    if (qkv_b) FA_TRY(qac_scratch_up(&s, &d_b, qkv_b, (size_t)3 * C * sizeof(float)));
    FA_TRY(qac_scratch_alloc(&s, &d_out, (size_t)rows.N * C * qac_prec_size(prec)));
    FA_TRY(qac_scratch_alloc(&s, &d_lse, (size_t)rows.N * NH * sizeof(float)));
    FA_TRY(qac_cuda_check(qac_fa_forward(d_out, (float *)d_lse, d_qkv, (const float *)d_b, rows, C, NH, causal, window,
                                         drop_of(p_attn, key), layer, prec, tiles, 0),
                          "fused attention forward"));
    FA_TRY(qac_cuda_check(cudaDeviceSynchronize(), "fused attention forward"));
    FA_TRY(qac_scratch_down_act(&s, out, d_out, (size_t)rows.N * C, prec));
    if (lse)
        FA_TRY(qac_cuda_check(cudaMemcpy(lse, d_lse, (size_t)rows.N * NH * sizeof(float), cudaMemcpyDeviceToHost),
                              "download"));
done:
    qac_scratch_free(&s);
    return st;
}

qac_status qac_cuda_fa_backward(float *dqkv, const float *dout, const float *out, const float *lse, const float *qkv,
                                const float *qkv_b, const int *offs, const int *lens, int B, int T, int C, int NH,
                                int causal, int window, float p_attn, uint64_t key, int layer, qac_precision prec,
                                const qac_fa_tiles *tiles) {
    qac_status st = check_args(B, T, C, NH, prec, tiles);
    if (st != QAC_OK) return st;
    qac_scratch s = {{0}, 0};
    qac_fa_rows rows;
    void *d_qkv, *d_b = NULL, *d_out, *d_dout, *d_lse, *d_dvec, *d_dqkv;
    size_t N = 0;
    FA_TRY(up_rows(&s, &rows, offs, lens, B, T));
    N = (size_t)rows.N;
    FA_TRY(qac_scratch_up_act(&s, &d_qkv, qkv, N * 3 * C, prec));
    if (qkv_b) FA_TRY(qac_scratch_up(&s, &d_b, qkv_b, (size_t)3 * C * sizeof(float)));
    FA_TRY(qac_scratch_up_act(&s, &d_out, out, N * C, prec));
    FA_TRY(qac_scratch_up_act(&s, &d_dout, dout, N * C, prec));
    FA_TRY(qac_scratch_up(&s, &d_lse, lse, N * NH * sizeof(float)));
    FA_TRY(qac_scratch_alloc(&s, &d_dvec, N * NH * sizeof(float)));
    FA_TRY(qac_scratch_alloc(&s, &d_dqkv, N * 3 * C * qac_prec_size(prec)));
    // poison: every element must be written
    FA_TRY(qac_cuda_check(cudaMemset(d_dqkv, 0xff, N * 3 * C * qac_prec_size(prec)), "poison"));
    FA_TRY(qac_cuda_check(qac_fa_backward(d_dqkv, (float *)d_dvec, d_dout, d_out, (const float *)d_lse, d_qkv,
                                          (const float *)d_b, rows, C, NH, causal, window, drop_of(p_attn, key), layer,
                                          prec, tiles, 0),
                          "fused attention backward"));
    FA_TRY(qac_cuda_check(cudaDeviceSynchronize(), "fused attention backward"));
    FA_TRY(qac_scratch_down_act(&s, dqkv, d_dqkv, N * 3 * C, prec));
done:
    qac_scratch_free(&s);
    return st;
}
