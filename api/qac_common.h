/* qac: shared status codes, error reporting and small enums.
 *
 * Library code never prints and never exits. Every fallible function returns
 * a qac_status (0 = success); on failure it stores a human-readable message
 * in a per-thread buffer that qac_last_error() returns. The message stays
 * valid until the next failing qac call on the same thread. */
#ifndef QAC_COMMON_H
#define QAC_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QAC_VERSION_STRING "0.1.0"

typedef enum qac_status {
    QAC_OK = 0,
    QAC_ERR_INVALID = 1,      /* bad argument or value out of range */
    QAC_ERR_IO = 2,           /* open/read/write/rename failed */
    QAC_ERR_NOMEM = 3,        /* allocation failed */
    QAC_ERR_FORMAT = 4,       /* malformed file or input */
    QAC_ERR_UNSUPPORTED = 5,  /* valid input that qac does not handle */
    QAC_ERR_NOT_FOUND = 6,    /* missing file, tensor, key or id */
    QAC_ERR_CUDA = 7,         /* CUDA runtime or cuBLAS failure */
    QAC_ERR_FAISS = 8,        /* FAISS raised an error */
    QAC_ERR_INTERNAL = 9,     /* a bug: an invariant did not hold */
    QAC_ERR_BUSY = 10,        /* a queue or resource is full */
    QAC_ERR_CANCELLED = 11,   /* stopped by a signal or a caller */
    QAC_ERR_MISMATCH = 12     /* a resume whose options differ from the run it would continue */
} qac_status;

/* Message of the last failure on this thread ("" if none). */
const char *qac_last_error(void);
/* Short constant name of a status ("invalid", "io", ...). */
const char *qac_status_name(qac_status s);

/* Record an error message for this thread and return `code` unchanged, so a
 * caller can write `return qac_set_error(QAC_ERR_IO, "open %s: %s", p, e);`. */
qac_status qac_set_error(qac_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Prefix the current message with context: "ctx: <old message>". */
qac_status qac_wrap_error(qac_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void qac_clear_error(void);

typedef enum qac_device {
    QAC_DEVICE_AUTO = 0,
    QAC_DEVICE_CPU = 1,
    QAC_DEVICE_CUDA = 2
} qac_device;

/* Directory of the default model (all-MiniLM-L6-v2): $QAC_MODEL if set,
 * else $QAC_HOME/models/all-MiniLM-L6-v2, else
 * ~/.local/share/qac/models/all-MiniLM-L6-v2 (where scripts/setup.sh puts
 * it). Returns QAC_ERR_NOT_FOUND with a hint when no config.json is there. */
qac_status qac_default_model_dir(char *buf, size_t cap);

/* Whether this build has CUDA support compiled in and a usable GPU exists. */
int qac_cuda_available(void);

/* One line on the GPU path, for `qac info` and logs: the device, and the
 * attention the CUDA encoder may run besides qac's own (cuDNN's: its
 * version and where it was loaded from, or why it is not used). Writes at
 * most cap bytes into buf and returns it. */
const char *qac_cuda_describe(char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
