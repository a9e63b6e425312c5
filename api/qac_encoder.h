/* The encoder: token ids in, pooled (optionally L2-normalised) embeddings
 * out. One interface, two backends: the CPU reference (fp32, batch-invariant:
 * a text gets the same vector in any batch) and CUDA (kernels/). Callers
 * never see which backend runs.
 *
 * Ownership: the encoder borrows the model (free the encoder first). An
 * encoder is not thread-safe: one caller at a time. It keeps its buffers
 * between calls and grows them only when a larger batch arrives. */
#ifndef QAC_ENCODER_H
#define QAC_ENCODER_H

#include "qac_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qac_precision {
    QAC_PREC_FP32 = 0,
    QAC_PREC_FP16 = 1,
    QAC_PREC_BF16 = 2,
    QAC_PREC_INT8 = 3
} qac_precision;

typedef struct qac_encoder_opts {
    qac_device device;       /* AUTO picks CUDA when a GPU is usable */
    int threads;             /* CPU threads; 0 = all cores */
    int max_batch;           /* sequences per forward pass; 0 = backend default */
    qac_precision precision; /* CUDA only */
    /* CPU: QAC_PREC_FP32 (the default, 0); QAC_PREC_BF16: the linear
     * layers' weights and inputs in bf16, products summed in fp32
     * (vdpbf16ps where the CPU has AVX512_BF16); QAC_PREC_INT8: the linear
     * layers' weights in int8 (per output channel) and their inputs in 8
     * bits (per token), products summed in int32 by VPDPBUSD (AVX512-VNNI or
     * AVX-VNNI). The rest (embeddings, LayerNorm, attention, softmax, the
     * residual stream, pooling) stays fp32. int8 on a CPU path without
     * VNNI runs in fp32 instead: qac_encoder_cpu_precision says so and
     * qac_encoder_cpu_note says why. */
    qac_precision cpu_precision;
} qac_encoder_opts;

/* A CPU encoder precision by name: "fp32", "bf16" or "int8"; any other is
 * QAC_ERR_INVALID with a message naming it. */
qac_status qac_precision_parse(const char *name, qac_precision *out);
/* "fp32", "fp16", "bf16" or "int8". */
const char *qac_precision_name(qac_precision p);

/* Defaults: AUTO, all cores, backend batch, bf16 on CUDA. */
qac_encoder_opts qac_encoder_default_opts(void);

typedef struct qac_encoder qac_encoder;

qac_status qac_encoder_create(qac_encoder **out, const qac_model *m, const qac_encoder_opts *o);
void qac_encoder_free(qac_encoder *e);

int qac_encoder_dim(const qac_encoder *e);
qac_device qac_encoder_device(const qac_encoder *e);
/* The precision the CPU encoder's linear layers run in (BF16, INT8 or
 * FP32); FP32 on CUDA. */
qac_precision qac_encoder_cpu_precision(const qac_encoder *e);
/* NULL, or why the CPU encoder runs in another precision than the one asked
 * for (int8 on a CPU path without VNNI runs in fp32), for the program to
 * show: the library prints nothing. Owned by the encoder. */
const char *qac_encoder_cpu_note(const qac_encoder *e);
const qac_model *qac_encoder_model(const qac_encoder *e);

/* raw = 1: the following encode calls return the pooled vectors without
 * the model's L2 normalisation (what sentence-transformers' modules before
 * Normalize give); raw = 0, the default, restores it. A model that does
 * not normalise is unaffected. */
void qac_encoder_set_raw(qac_encoder *e, int raw);

/* Cancellation: fn(user) is asked on the thread that calls an encode
 * function, before each batch and, on the CPU, between layers (a fraction
 * of a second apart); nonzero stops the call with QAC_ERR_CANCELLED. The
 * rows of out are then not all written, and the encoder stays usable. fn
 * NULL (the default): never. qac_index_build asks its first encoder's fn
 * on the thread that called the build, and a cancelled build resumes.
 * Set it while no call runs (the encoder is one caller's at a time). */
typedef int (*qac_encoder_cancel_fn)(void *user);
void qac_encoder_set_cancel(qac_encoder *e, qac_encoder_cancel_fn fn, void *user);

/* Seconds the device has spent on this encoder's batches since it was
 * created, measured on the device (the CUDA backend: events around each
 * batch on its stream); -1 when the backend does not measure it. */
double qac_encoder_device_seconds(const qac_encoder *e);

/* Encode n tokenized sequences (each already [CLS] ... [SEP], lens[i] >= 1,
 * lens[i] <= model max_position). Sequences are sorted by length internally,
 * split into batches and padded to each batch's longest. out is [n, dim],
 * row i for sequence i. */
qac_status qac_encoder_encode_ids(qac_encoder *e, const int32_t *const *ids, const int *lens, int n,
                                  float *out);

/* Tokenize then encode. lens may be NULL (NUL-terminated texts). max_len
 * counts the special tokens; qac_encoder_max_len says the length used. */
/* Texts qac_encoder_encode_texts cut at max_len since the encoder was made
 * (for a command's summary: truncation is never silent). */
int64_t qac_encoder_truncated(const qac_encoder *e);
/* The length encode_texts uses for a max_len: the model's max_seq_len
 * (sentence-transformers' max_seq_length, within max_position) when
 * max_len <= 0; otherwise max_len, up to max_position (as
 * sentence-transformers with its max_seq_length set that high). */
int qac_encoder_max_len(const qac_encoder *e, int max_len);
qac_status qac_encoder_encode_texts(qac_encoder *e, const char *const *texts, const size_t *lens,
                                    int n, int max_len, float *out);

/* encode_ids, with the pooling of sequence i skipping its first
 * pool_from[i] tokens (pool_from NULL: none skipped); see qac_model.h,
 * "Prompts". */
qac_status qac_encoder_encode_ids_from(qac_encoder *e, const int32_t *const *ids, const int *lens,
                                       const int *pool_from, int n, float *out);

/* encode_ids_from with token types: type_ids[i] holds lens[i] types of
 * sequence i (type_ids NULL: type 0 everywhere, as every call above), each
 * below the model's type_vocab_size. What a cross-encoder's pairs need
 * ([CLS] a [SEP] b [SEP], type 1 over b [SEP]; api/qac_pair.h), on either
 * backend; a sequence's vector does not depend on the batch around it. */
qac_status qac_encoder_encode_ids_typed(qac_encoder *e, const int32_t *const *ids, const int32_t *const *type_ids,
                                        const int *lens, const int *pool_from, int n, float *out);

/* encode_texts with a prompt before every text, as sentence-transformers
 * applies it (qac_model.h, "Prompts"): prompt + text tokenised as one
 * string, and the prompt's tokens left out of the pooling when the model's
 * include_prompt is false. prompt NULL or "" is encode_texts. */
qac_status qac_encoder_encode_texts_prompted(qac_encoder *e, const char *prompt, const char *const *texts,
                                             const size_t *lens, int n, int max_len, float *out);

#ifdef __cplusplus
}
#endif
#endif
