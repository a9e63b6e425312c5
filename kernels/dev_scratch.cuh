// Internal to kernels/: the device allocations of one call from host memory
// (the parity entry points the CPU tests compare against, the fused
// attention's), made as the call goes and freed together at its end.
#ifndef QAC_DEV_SCRATCH_CUH
#define QAC_DEV_SCRATCH_CUH

#include "bert_kernels.cuh"

#define QAC_SCRATCH_MAX 40

struct qac_scratch {
    void *p[QAC_SCRATCH_MAX];
    int n;
};

static inline void qac_scratch_free(qac_scratch *s) {
    for (int i = 0; i < s->n; i++) cudaFree(s->p[i]);
    s->n = 0;
}

static inline qac_status qac_scratch_alloc(qac_scratch *s, void **out, size_t bytes) {
    if (s->n == QAC_SCRATCH_MAX) return qac_set_error(QAC_ERR_INTERNAL, "device scratch full");
    QAC_CU(cudaMalloc(out, bytes ? bytes : 1));
    s->p[s->n++] = *out;
    return QAC_OK;
}

// A device copy of bytes of host memory.
static inline qac_status qac_scratch_up(qac_scratch *s, void **out, const void *host, size_t bytes) {
    qac_status st = qac_scratch_alloc(s, out, bytes);
    if (st != QAC_OK) return st;
    if (bytes) QAC_CU(cudaMemcpy(*out, host, bytes, cudaMemcpyHostToDevice));
    return QAC_OK;
}

// n fp32 host values rounded to prec on the device.
static inline qac_status qac_scratch_up_act(qac_scratch *s, void **out, const float *host, size_t n,
                                            qac_precision prec) {
    void *f = NULL;
    qac_status st = qac_scratch_up(s, &f, host, n * sizeof(float));
    if (st == QAC_OK) st = qac_scratch_alloc(s, out, n * qac_prec_size(prec));
    if (st != QAC_OK) return st;
    QAC_CU(qac_k_from_f32(*out, (const float *)f, n, prec, 0));
    return QAC_OK;
}

// n prec device values widened to fp32 into host.
static inline qac_status qac_scratch_down_act(qac_scratch *s, float *host, const void *dev, size_t n,
                                              qac_precision prec) {
    void *f = NULL;
    qac_status st = qac_scratch_alloc(s, &f, n * sizeof(float));
    if (st != QAC_OK) return st;
    QAC_CU(qac_k_to_f32((float *)f, dev, n, prec, 0));
    QAC_CU(cudaMemcpy(host, f, n * sizeof(float), cudaMemcpyDeviceToHost));
    return QAC_OK;
}

#endif
