/* safetensors (Hugging Face's tensor file format) reader and writer.
 *
 * Layout: an 8-byte little-endian header length N, N bytes of JSON
 * ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
 * "__metadata__": {"k": "v"}}), then the data buffer; offsets are relative
 * to the start of the data buffer. The format is HF's, so it carries no qac
 * magic: we follow it exactly.
 *
 * Reader: qac_safetensors_open maps the file read-only (mmap) and validates
 * the whole header up front: header length within the file, JSON object of
 * objects, known or at least well-formed dtypes, shapes whose byte size
 * matches data_offsets, offsets inside the data buffer and not overlapping.
 * After a successful open every tensor's data pointer is safe to read.
 *
 * Ownership: the handle owns the mapping; tensor records, names and data
 * pointers stay valid until qac_safetensors_close (NULL accepted). A handle
 * is immutable after open and may be read from many threads. */
#ifndef QAC_SAFETENSORS_H
#define QAC_SAFETENSORS_H

#include "qac_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qac_st_dtype {
    QAC_ST_F32 = 0,
    QAC_ST_F16,
    QAC_ST_BF16,
    QAC_ST_F64,
    QAC_ST_I64,
    QAC_ST_I32,
    QAC_ST_I16,
    QAC_ST_I8,
    QAC_ST_U8,
    QAC_ST_U16,
    QAC_ST_U32,
    QAC_ST_U64,
    QAC_ST_BOOL,
    QAC_ST_F8_E4M3,
    QAC_ST_F8_E5M2,
    QAC_ST_UNKNOWN /* a dtype string qac does not know: kept, never converted */
} qac_st_dtype;

#define QAC_ST_MAX_DIMS 8
/* Headers larger than this are rejected (HF's own limit is 100 MB). */
#define QAC_ST_MAX_HEADER (100u * 1024u * 1024u)

typedef struct qac_st_tensor {
    const char *name;
    qac_st_dtype dtype;
    const char *dtype_name; /* as written in the file */
    int ndim;
    int64_t shape[QAC_ST_MAX_DIMS];
    uint64_t numel;
    const void *data;       /* nbytes bytes, little-endian, possibly unaligned */
    uint64_t nbytes;
} qac_st_tensor;

typedef struct qac_safetensors qac_safetensors;

/* Open and validate a file. Errors name the file and the problem. */
qac_status qac_safetensors_open(qac_safetensors **out, const char *path);
/* Same validation over bytes the caller owns (they must outlive the handle);
 * `label` names the source in error messages. */
qac_status qac_safetensors_open_memory(qac_safetensors **out, const void *data, size_t len,
                                       const char *label);
void qac_safetensors_close(qac_safetensors *st);

int qac_safetensors_count(const qac_safetensors *st);
/* Tensors in data-offset order (i < count). */
const qac_st_tensor *qac_safetensors_get(const qac_safetensors *st, int i);
/* Exact name lookup; NULL when absent (no error set). */
const qac_st_tensor *qac_safetensors_find(const qac_safetensors *st, const char *name);
/* A string value of "__metadata__", NULL when absent. */
const char *qac_safetensors_metadata(const qac_safetensors *st, const char *key);

/* Convert a floating tensor (F32, F16, BF16, F64) to fp32 into out[numel].
 * F16 and BF16 convert exactly; F64 rounds to nearest like torch's .float().
 * Other dtypes are QAC_ERR_UNSUPPORTED naming the tensor. */
qac_status qac_safetensors_read_f32(const qac_st_tensor *t, float *out);

/* Tell the kernel the mapped pages of t will not be read again, so they
 * leave this process's resident set (loading stays near 1x the fp32 size).
 * A no-op for memory-backed handles. */
void qac_safetensors_release(const qac_safetensors *st, const qac_st_tensor *t);

const char *qac_st_dtype_name(qac_st_dtype d);
/* Bytes per element; 0 for QAC_ST_UNKNOWN. */
size_t qac_st_dtype_size(qac_st_dtype d);

/* fp32 <-> half conversions with round-to-nearest-even (NaN stays NaN),
 * matching torch's Tensor.to(torch.float16 / torch.bfloat16). */
uint16_t qac_f32_to_f16(float f);
float qac_f16_to_f32(uint16_t h);
uint16_t qac_f32_to_bf16(float f);
float qac_bf16_to_f32(uint16_t h);

/* ---- writer ---- */
typedef struct qac_st_write_tensor {
    const char *name;
    qac_st_dtype dtype;    /* stored dtype */
    int ndim;
    int64_t shape[QAC_ST_MAX_DIMS];
    const float *data;     /* fp32 source converted to dtype (F32, F16 or BF16) ... */
    const void *raw;       /* ... or, when data is NULL, bytes already in dtype */
} qac_st_write_tensor;

/* Write tensors in the given order, with "__metadata__" from the
 * NULL-terminated key/value list `metadata` (may be NULL). The header is
 * padded with spaces to a multiple of 8 bytes like HF's writer, so the data
 * buffer stays aligned. Crash-safe: temporary file, fsync, rename.
 * Duplicate names, names starting "__", and bad shapes are QAC_ERR_INVALID. */
qac_status qac_safetensors_write(const char *path, const qac_st_write_tensor *tensors, int n,
                                 const char *const *metadata);

#ifdef __cplusplus
}
#endif
#endif
