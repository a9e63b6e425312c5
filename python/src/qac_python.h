/* Internal to the extension module qac._qac: what its files share.
 *
 * Files, one job each: qac_python.c (the module: its functions, exception
 * classes and init), py_object.c (every object's lifecycle and lock),
 * py_args.c (errors, callbacks into Python, argument conversion),
 * py_model.c (Model, Encoder), py_index.c (Index, IndexParts, builds),
 * py_bm25.c (BM25), py_data.c (Reader, qrels, runs, evaluation),
 * py_train.c (finetune, pretrain), py_rerank.c (Reranker).
 *
 * Threads. Every call that runs library code releases the GIL, so Python
 * threads can share an object. Each object therefore carries a
 * read-write lock (qpy_obj): a call that only reads its handle takes it
 * shared (Index and BM25 searches run side by side, as the library
 * allows), a call that uses scratch kept in the handle or changes it takes
 * it exclusive (an Encoder's encode: the encoder keeps its token and
 * activation buffers between calls), and close() takes it exclusive, so it
 * waits for the calls in flight. A lock is waited for with the GIL
 * released, checking for signals (Ctrl-C) as it waits. A handle another
 * object borrows (a Model under its Encoders, an Encoder under IndexParts)
 * is freed when the last borrower lets go, so closing the lender first is
 * safe. Calls that run wholly under the GIL (getters, docids) need no lock,
 * only an open object. */
#ifndef QAC_PYTHON_H
#define QAC_PYTHON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>

#include "qac_common.h"
#include "qac_data.h"
#include "qac_encoder.h"
#include "qac_model.h"

/* ---- objects: py_object.c ---- */

typedef enum qpy_state { QPY_NEW = 0, QPY_OPENING, QPY_OPEN, QPY_CLOSED } qpy_state;

typedef struct qpy_obj qpy_obj;
/* Frees the object's library handle (NULL: nothing) and sets it to NULL,
 * then gives back what it borrowed. Called with the GIL held; it releases
 * the GIL around library calls that may take time. */
typedef void (*qpy_free_fn)(qpy_obj *o);

/* The head of every object of the module. */
struct qpy_obj {
    PyObject_HEAD
    pthread_rwlock_t lock;
    qpy_state state;
    int users;          /* borrowers of the handle (other objects, calls in flight) */
    qpy_free_fn free_handle;
};

#define QPY_SHARED 0
#define QPY_EXCLUSIVE 1

/* tp_new of every type: the object, its lock, NEW. */
PyObject *qpy_new(PyTypeObject *type, qpy_free_fn free_handle);
/* tp_dealloc's part: the handle (if still held) and the lock. */
void qpy_dealloc(qpy_obj *o);
/* tp_init: -1 (RuntimeError) unless the object is NEW; then OPENING, so
 * that no other call uses it while it loads. */
int qpy_init_begin(qpy_obj *o);
/* The end of tp_init: OPEN when ok, else NEW again (init may be retried). */
int qpy_init_end(qpy_obj *o, int ok);
/* 0 when o is open, else -1 with ValueError ("closed", "not initialised"). */
int qpy_check_open(qpy_obj *o);
/* Take o's lock and check that o is open; -1 with the exception set
 * (including KeyboardInterrupt while waiting, and RuntimeError when the
 * thread already holds the lock exclusively: a callback calling back). */
int qpy_enter(qpy_obj *o, int mode);
void qpy_leave(qpy_obj *o);
/* close(): waits for the calls in flight, then frees the handle unless
 * borrowed (the last borrower frees it). Closing twice is allowed. */
PyObject *qpy_close(qpy_obj *o, PyObject *unused);
/* A borrower takes o's handle (o open, GIL held) and gives it back. */
void qpy_borrow(qpy_obj *o);
void qpy_give_back(qpy_obj *o);
PyObject *qpy_enter_with(qpy_obj *o, PyObject *unused);
PyObject *qpy_exit_with(qpy_obj *o, PyObject *args);
/* The methods every type has, for its method table: close, __enter__, __exit__. */
#define QPY_LIFECYCLE_METHODS                                                                                          \
    {"close", (PyCFunction)qpy_close, METH_NOARGS,                                                                     \
     "close(): free the object's resources now (after the calls in flight); later calls raise ValueError"},           \
        {"__enter__", (PyCFunction)qpy_enter_with, METH_NOARGS, "with: the object itself"},                           \
        {"__exit__", (PyCFunction)qpy_exit_with, METH_VARARGS, "with: close()"}

/* ---- errors, callbacks and arguments: py_args.c ---- */

PyObject *qpy_raise(qac_status st);
/* None when st is QAC_OK, else the exception for st. */
PyObject *qpy_none_or_raise(qac_status st);
extern PyObject *qpy_err_base, *qpy_err_by_status[QAC_ERR_MISMATCH + 1];

/* A Python callback (and Ctrl-C) seen from library code that runs without
 * the GIL: the first exception raised is kept for the end of the call. */
typedef struct qpy_cb {
    PyObject *fn;      /* borrowed; may be NULL */
    int check_signals; /* the call runs on the main thread: signals can be handled */
    int failed;
    double next_check; /* qpy_cancel: when to look for signals next */
    PyObject *type, *value, *tb;
} qpy_cb;

/* fn may be None; with check_signals, signal handlers run at each event
 * (they can, on the main thread only). */
qpy_cb qpy_cb_of(PyObject *fn, int check_signals);
/* With the GIL: fn(event dict from fmt, as Py_BuildValue); nonzero once
 * the call should stop (an exception, or a signal's). */
int qpy_cb_event(qpy_cb *c, const char *fmt, ...);
/* A library progress callback forwarding {"event": "progress", ...}. */
void qpy_progress(void *user, const char *phase, uint64_t done, uint64_t total);
/* After the call: the callback's exception wins over the status it caused. */
PyObject *qpy_cb_finish(qpy_cb *c, qac_status st);
/* A library cancel hook (qac_encoder_cancel_fn) over c, asked without the
 * GIL: nonzero once c failed, or (on the main thread, at most every 20 ms,
 * taking the GIL briefly) once a signal handler raised, as Ctrl-C's does. */
int qpy_cancel(void *c);
/* Whether the calling thread is the main thread, the one signal handlers
 * run on (qpy_cb_of's check_signals for calls that only stop on signals). */
int qpy_on_main_thread(void);
/* Module init: remember the main thread. */
int qpy_args_init(void);

/* A sequence of str or bytes as UTF-8 pointers and lengths, valid while
 * keep (a tuple holding the items) lives. */
typedef struct qpy_texts {
    PyObject *keep;
    const char **ptr;
    size_t *len;
    Py_ssize_t n;
} qpy_texts;

#define QPY_ANY_TEXT 0
#define QPY_NO_NUL 1 /* the library reads the texts as C strings: a NUL would cut one short */

int qpy_texts_get(qpy_texts *t, PyObject *seq, const char *what, int flags);
void qpy_texts_free(qpy_texts *t);
/* A C-contiguous buffer of n items of one struct format char; -1 with
 * ValueError otherwise. */
int qpy_buf_get(Py_buffer *b, PyObject *o, char fmt, Py_ssize_t itemsize, Py_ssize_t n, int writable,
                const char *what);
int qpy_device_of(const char *name, qac_device *out);
int qpy_format_of(const char *name, qac_text_format *out);
const char *qpy_format_name(qac_text_format f);
/* A model argument: a directory (str), or None for the default model,
 * whose directory is written into buf. NULL, with the exception set, on
 * failure. */
const char *qpy_model_dir_arg(PyObject *o, char *buf, size_t cap);
PyObject *qpy_str_or_empty(const char *s);
/* An int argument within [lo, hi], else ValueError naming it. */
int qpy_int_in(PyObject *o, long lo, long hi, const char *what, long *out);
/* rows (an int64 buffer) -> list of docid(owner, row), "" where NULL */
PyObject *qpy_docids_of(PyObject *rows, const char *(*docid)(const void *owner, int64_t row), const void *owner);

/* ---- the types and module functions of each file ---- */

extern PyTypeObject qpy_ModelType, qpy_EncoderType, qpy_PartsType, qpy_IndexType, qpy_BM25Type, qpy_ReaderType,
    qpy_RerankerType;

/* py_model.c: the open Model / Encoder behind an argument, or NULL with
 * TypeError / ValueError. */
qac_model *qpy_model_arg(PyObject *o);
qpy_obj *qpy_encoder_obj(PyObject *o);
qac_encoder *qpy_encoder_handle(qpy_obj *o);
/* While a call holds the encoder exclusively: Ctrl-C and c's callback stop
 * its encoding between batches and layers (c NULL: nothing does). */
void qpy_encoder_watch(qpy_obj *o, qpy_cb *c);

PyObject *qpy_index_build(PyObject *mod, PyObject *args);
PyObject *qpy_index_build_vectors(PyObject *mod, PyObject *args);
PyObject *qpy_index_merge(PyObject *mod, PyObject *args);
PyObject *qpy_index_defaults(PyObject *mod, PyObject *unused);
PyObject *qpy_bm25_build(PyObject *mod, PyObject *args);
PyObject *qpy_read_qrels(PyObject *mod, PyObject *args);
PyObject *qpy_read_run(PyObject *mod, PyObject *args);
PyObject *qpy_write_run(PyObject *mod, PyObject *args);
PyObject *qpy_evaluate(PyObject *mod, PyObject *args);
PyObject *qpy_finetune(PyObject *mod, PyObject *args);
PyObject *qpy_pretrain(PyObject *mod, PyObject *args);

#endif
