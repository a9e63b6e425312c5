#include "qac_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define QAC_ERR_CAP 1024
static _Thread_local char err_buf[QAC_ERR_CAP];

const char *qac_last_error(void) { return err_buf; }

void qac_clear_error(void) { err_buf[0] = '\0'; }

const char *qac_status_name(qac_status s) {
    switch (s) {
    case QAC_OK: return "ok";
    case QAC_ERR_INVALID: return "invalid";
    case QAC_ERR_IO: return "io";
    case QAC_ERR_NOMEM: return "nomem";
    case QAC_ERR_FORMAT: return "format";
    case QAC_ERR_UNSUPPORTED: return "unsupported";
    case QAC_ERR_NOT_FOUND: return "not_found";
    case QAC_ERR_CUDA: return "cuda";
    case QAC_ERR_FAISS: return "faiss";
    case QAC_ERR_INTERNAL: return "internal";
    case QAC_ERR_BUSY: return "busy";
    case QAC_ERR_CANCELLED: return "cancelled";
    case QAC_ERR_MISMATCH: return "mismatch";
    }
    return "unknown";
}

qac_status qac_set_error(qac_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    va_end(ap);
    return code;
}

qac_status qac_wrap_error(qac_status code, const char *fmt, ...) {
    char old[QAC_ERR_CAP];
    memcpy(old, err_buf, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    va_end(ap);
    /* append ": <old message>", cut to fit */
    if (n >= 0 && (size_t)n < sizeof err_buf - 3) {
        size_t room = sizeof err_buf - (size_t)n - 3;
        size_t olen = strnlen(old, room);
        err_buf[n] = ':';
        err_buf[n + 1] = ' ';
        memcpy(err_buf + n + 2, old, olen);
        err_buf[n + 2 + olen] = '\0';
    }
    return code;
}
