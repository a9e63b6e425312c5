/* Internal: what an encoder backend implements. model/encoder.c owns
 * tokenisation, length sorting, batching and output ordering; a backend only
 * runs one padded batch. Backends: CPU (model/cpu_backend.c) and CUDA
 * (kernels/cuda_encoder.cu, compiled when nvcc is present;
 * kernels/nocuda.c otherwise). kernels/encoder_dispatch.c, above both,
 * picks one and attaches it to a front end. */
#ifndef QAC_ENCODER_BACKEND_H
#define QAC_ENCODER_BACKEND_H

#include "qac_encoder.h"

typedef struct qac_encoder_backend {
    void *impl;
    /* ids: [B, T] row-major, padded with pad_token_id past lens[b];
     * type_ids: [B, T] the token types in the same layout (padding 0), or
     * NULL for type 0 everywhere (a cross-encoder's pairs give 1 over the
     * second text); lens: [B], 1 <= lens[b] <= T; pool_from: [B] tokens the
     * pooling skips at the start (qac_pooling_forward_from), or NULL for
     * none; out: [B, C] pooled (and normalised when the model says so) fp32
     * embeddings. */
    qac_status (*forward)(void *impl, const int32_t *ids, const int32_t *type_ids, const int *lens,
                          const int *pool_from, int B, int T, float *out);
    void (*free)(void *impl);
    /* raw = 1: forward skips the model's L2 normalisation until set back to 0. */
    void (*set_raw)(void *impl, int raw);
    /* Optional (NULL: asked only between batches, by the front end): the
     * encoder's cancel hook (qac_encoder_set_cancel), asked within a batch. */
    void (*set_cancel)(void *impl, qac_encoder_cancel_fn fn, void *user);
    int max_batch; /* largest B the backend wants per call */
    /* Optional (NULL: not measured): seconds the device spent on forward
     * calls so far, timed on the device (CUDA: events on the stream). */
    double (*device_seconds)(void *impl);
    /* The precision the backend's linear layers run in, and NULL or why it
     * differs from the one asked for (a static string). */
    qac_precision precision;
    const char *note;
} qac_encoder_backend;

/* A front end over be (taken over: freed with the encoder, or here on
 * failure) for m. cpu_precision is what qac_encoder_cpu_precision reports
 * when device is QAC_DEVICE_CPU (the backend's own be->precision: the one
 * it runs in), and be->note what qac_encoder_cpu_note does. */
qac_status qac_encoder_attach(qac_encoder **out, const qac_model *m, const qac_encoder_backend *be,
                              qac_device device, qac_precision cpu_precision);

qac_status qac_cpu_backend_create(qac_encoder_backend *be, const qac_model *m, const qac_encoder_opts *o);
/* Returns QAC_ERR_UNSUPPORTED when built without CUDA or no GPU is usable. */
qac_status qac_cuda_backend_create(qac_encoder_backend *be, const qac_model *m, const qac_encoder_opts *o);

#endif
