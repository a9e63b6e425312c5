/* Errors, callbacks into Python, and argument conversion: the boundary
 * between Python values and the library's C types. One exception class per
 * status (qpy_raise), carrying qac_last_error(). */
#include <stdarg.h>
#include <string.h>
#include <time.h>

#include "qac_model.h"
#include "qac_python.h"

/* ---- errors ---- */

PyObject *qpy_err_base, *qpy_err_by_status[QAC_ERR_MISMATCH + 1];

PyObject *qpy_raise(qac_status st) {
    PyObject *cls = st > 0 && st <= QAC_ERR_MISMATCH && qpy_err_by_status[st] ? qpy_err_by_status[st] : qpy_err_base;
    const char *msg = qac_last_error();
    PyObject *exc = PyObject_CallFunction(cls, "s", msg && *msg ? msg : qac_status_name(st));
    if (!exc) return NULL;
    PyObject *name = PyUnicode_FromString(qac_status_name(st));
    if (name) {
        PyObject_SetAttrString(exc, "status", name);
        Py_DECREF(name);
    }
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

PyObject *qpy_none_or_raise(qac_status st) {
    if (st) return qpy_raise(st);
    Py_RETURN_NONE;
}

/* ---- callbacks from library code that runs without the GIL ---- */

static unsigned long main_thread;

int qpy_args_init(void) {
    PyObject *threading = PyImport_ImportModule("threading");
    PyObject *main = threading ? PyObject_CallMethod(threading, "main_thread", NULL) : NULL;
    PyObject *ident = main ? PyObject_GetAttrString(main, "ident") : NULL;
    if (ident) main_thread = PyLong_AsUnsignedLong(ident);
    Py_XDECREF(ident);
    Py_XDECREF(main);
    Py_XDECREF(threading);
    return ident && !PyErr_Occurred() ? 0 : -1;
}

int qpy_on_main_thread(void) { return PyThread_get_thread_ident() == main_thread; }

qpy_cb qpy_cb_of(PyObject *fn, int check_signals) {
    return (qpy_cb){fn == Py_None ? NULL : fn, check_signals, 0, 0.0, NULL, NULL, NULL};
}

/* Call fn(arg) with the GIL held; remember the first exception. Returns
 * nonzero once something went wrong (or a signal such as Ctrl-C came). */
static int cb_call(qpy_cb *c, PyObject *arg) {
    if (c->failed) return 1;
    if (c->fn && arg) {
        PyObject *r = PyObject_CallOneArg(c->fn, arg);
        Py_XDECREF(r);
    } /* else: no callback, or building its argument failed (an exception is set) */
    if (!PyErr_Occurred() && c->check_signals) PyErr_CheckSignals();
    if (PyErr_Occurred()) {
        PyErr_Fetch(&c->type, &c->value, &c->tb);
        c->failed = 1;
        return 1;
    }
    return 0;
}

PyObject *qpy_cb_finish(qpy_cb *c, qac_status st) {
    if (c->failed) {
        PyErr_Restore(c->type, c->value, c->tb);
        c->failed = 0;
        return NULL;
    }
    return qpy_none_or_raise(st);
}

int qpy_cb_event(qpy_cb *c, const char *fmt, ...) {
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *arg = NULL;
    if (c->fn) {
        va_list ap;
        va_start(ap, fmt);
        arg = Py_VaBuildValue(fmt, ap);
        va_end(ap);
    }
    int stop = cb_call(c, arg);
    Py_XDECREF(arg);
    PyGILState_Release(g);
    return stop;
}

#define CANCEL_CHECK_S 0.02 /* signals are looked for at most this often: the GIL is not free */

int qpy_cancel(void *user) {
    qpy_cb *c = user;
    if (c->failed) return 1; /* written on this thread, under the GIL it took */
    if (!c->check_signals) return 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double now = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    if (now < c->next_check) return 0;
    c->next_check = now + CANCEL_CHECK_S;
    PyGILState_STATE g = PyGILState_Ensure();
    int stop = cb_call(c, NULL);
    PyGILState_Release(g);
    return stop;
}

void qpy_progress(void *user, const char *phase, uint64_t done, uint64_t total) {
    qpy_cb *c = user;
    if (c->fn)
        qpy_cb_event(c, "{s:s, s:s, s:K, s:K}", "event", "progress", "phase", phase, "done",
                     (unsigned long long)done, "total", (unsigned long long)total);
}

/* ---- texts and buffers ---- */

void qpy_texts_free(qpy_texts *t) {
    Py_XDECREF(t->keep);
    PyMem_Free(t->ptr);
    PyMem_Free(t->len);
    memset(t, 0, sizeof *t);
}

/* Item i of t->keep into t->ptr[i], t->len[i]. */
static int text_at(qpy_texts *t, Py_ssize_t i, const char *what, int flags) {
    PyObject *o = PyTuple_GET_ITEM(t->keep, i);
    Py_ssize_t len = 0;
    if (PyUnicode_Check(o)) {
        if (!(t->ptr[i] = PyUnicode_AsUTF8AndSize(o, &len))) return -1;
    } else if (PyBytes_Check(o)) {
        char *p;
        PyBytes_AsStringAndSize(o, &p, &len);
        t->ptr[i] = p;
    } else {
        PyErr_Format(PyExc_TypeError, "%s: item %zd is %.80s, not str or bytes", what, i, Py_TYPE(o)->tp_name);
        return -1;
    }
    if ((flags & QPY_NO_NUL) && memchr(t->ptr[i], 0, (size_t)len)) {
        PyErr_Format(PyExc_ValueError, "%s: item %zd holds a NUL character", what, i);
        return -1;
    }
    t->len[i] = (size_t)len;
    return 0;
}

int qpy_texts_get(qpy_texts *t, PyObject *seq, const char *what, int flags) {
    memset(t, 0, sizeof *t);
    if (PyUnicode_Check(seq) || PyBytes_Check(seq)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a sequence of texts, not a single text", what);
        return -1;
    }
    if (!(t->keep = PySequence_Tuple(seq))) return -1;
    t->n = PyTuple_GET_SIZE(t->keep);
    t->ptr = PyMem_Calloc((size_t)t->n + 1, sizeof *t->ptr);
    t->len = PyMem_Calloc((size_t)t->n + 1, sizeof *t->len);
    if (!t->ptr || !t->len) {
        qpy_texts_free(t);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < t->n; i++)
        if (text_at(t, i, what, flags) < 0) {
            qpy_texts_free(t);
            return -1;
        }
    return 0;
}

int qpy_buf_get(Py_buffer *b, PyObject *o, char fmt, Py_ssize_t itemsize, Py_ssize_t n, int writable,
                const char *what) {
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0) {
        b->obj = NULL; /* nothing to release */
        return -1;
    }
    const char *f = b->format ? b->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    int ok = b->itemsize == itemsize && (f[0] == fmt || (fmt == 'q' && (f[0] == 'l' && itemsize == sizeof(long))) ||
                                         (fmt == 'Q' && (f[0] == 'L' && itemsize == sizeof(long)))) &&
             f[1] == '\0';
    if (!ok || b->len != n * itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd items of format '%c', got %zd bytes of format '%s'", what, n,
                     fmt, b->len, b->format ? b->format : "B");
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

/* ---- names and small values ---- */

int qpy_device_of(const char *name, qac_device *out) {
    if (!name || !strcmp(name, "auto")) *out = QAC_DEVICE_AUTO;
    else if (!strcmp(name, "cpu")) *out = QAC_DEVICE_CPU;
    else if (!strcmp(name, "cuda")) *out = QAC_DEVICE_CUDA;
    else return PyErr_Format(PyExc_ValueError, "device must be auto, cpu or cuda, not %s", name), -1;
    return 0;
}

/* qac_text_format's names, in its order */
static const char *const format_names[] = {"auto", "tsv", "beir", "tevatron", "cranfield"};
#define N_FORMATS (int)(sizeof format_names / sizeof format_names[0])

int qpy_format_of(const char *name, qac_text_format *out) {
    for (int i = 0; i < N_FORMATS; i++)
        if (name && !strcmp(name, format_names[i])) {
            *out = (qac_text_format)i;
            return 0;
        }
    PyErr_Format(PyExc_ValueError, "format must be auto, tsv, beir, tevatron or cranfield, not %s",
                 name ? name : "None");
    return -1;
}

const char *qpy_format_name(qac_text_format f) {
    return (int)f >= 0 && (int)f < N_FORMATS ? format_names[f] : "?";
}

const char *qpy_model_dir_arg(PyObject *o, char *buf, size_t cap) {
    if (o != Py_None) {
        Py_ssize_t len;
        const char *s = PyUnicode_AsUTF8AndSize(o, &len);
        if (s && strlen(s) != (size_t)len) return PyErr_SetString(PyExc_ValueError, "model: the path holds a NUL"), NULL;
        return s;
    }
    qac_status st = qac_default_model_dir(buf, cap);
    return st ? (qpy_raise(st), NULL) : buf;
}

PyObject *qpy_str_or_empty(const char *s) {
    return s ? PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "replace") : PyUnicode_FromString("");
}

int qpy_int_in(PyObject *o, long lo, long hi, const char *what, long *out) {
    int overflow = 0;
    long v = PyLong_AsLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (overflow || v < lo || v > hi) {
        PyObject *r = PyObject_Repr(o);
        PyErr_Format(PyExc_ValueError, "%s must be %ld to %ld, not %s", what, lo, hi, r ? PyUnicode_AsUTF8(r) : "?");
        Py_XDECREF(r);
        return -1;
    }
    *out = v;
    return 0;
}

PyObject *qpy_docids_of(PyObject *arg, const char *(*docid)(const void *owner, int64_t row), const void *owner) {
    Py_buffer r;
    if (PyObject_GetBuffer(arg, &r, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    if (r.itemsize != 8) {
        PyBuffer_Release(&r);
        return PyErr_Format(PyExc_ValueError, "rows must be int64");
    }
    Py_ssize_t n = r.len / 8;
    PyObject *out = PyList_New(n);
    const int64_t *rows = r.buf;
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *s = qpy_str_or_empty(docid(owner, rows[i]));
        if (!s) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, s);
    }
    PyBuffer_Release(&r);
    return out;
}
