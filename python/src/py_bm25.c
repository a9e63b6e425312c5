/* BM25: open, search, docids, and the build. The library searches one
 * index from several threads at once: searches hold the object shared. */
#include <string.h>

#include "qac_bm25.h"
#include "qac_python.h"

#define QUERIES_PER_PIECE 64 /* a few milliseconds of searching */

typedef struct {
    qpy_obj base;
    qac_bm25 *b;
} BM25Object;

static void bm25_free_handle(qpy_obj *o) {
    BM25Object *self = (BM25Object *)o;
    qac_bm25 *b = self->b;
    self->b = NULL;
    Py_BEGIN_ALLOW_THREADS
    qac_bm25_free(b);
    Py_END_ALLOW_THREADS
}

static PyObject *bm25_new(PyTypeObject *t, PyObject *a, PyObject *k) { return qpy_new(t, bm25_free_handle); }

static void bm25_dealloc(BM25Object *self) { qpy_dealloc(&self->base); }

static int bm25_init(BM25Object *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"dir", NULL};
    const char *dir;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s", kwlist, &dir) || qpy_init_begin(&self->base) < 0) return -1;
    qac_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qac_bm25_open(&self->b, dir);
    Py_END_ALLOW_THREADS
    if (st) qpy_raise(st);
    return qpy_init_end(&self->base, !st);
}

/* search(queries, k, k1, b, exact_lengths, scores float32 [nq*k], rows int64 [nq*k], counts int32 [nq]);
 * k at most the index's size: the caller's arrays hold nq * k results */
static PyObject *bm25_search(BM25Object *self, PyObject *args) {
    PyObject *seq, *s_o, *r_o, *n_o, *ret = NULL;
    int k, exact;
    float k1, bb;
    if (!PyArg_ParseTuple(args, "OiffpOOO", &seq, &k, &k1, &bb, &exact, &s_o, &r_o, &n_o) ||
        qpy_check_open(&self->base) < 0)
        return NULL;
    long long count = (long long)qac_bm25_count(self->b);
    if (k < 1 || k > count)
        return PyErr_Format(PyExc_ValueError, "search: k %d must be 1 to the index's size, %lld", k, count);
    qpy_texts t = {0};
    Py_buffer s = {0}, r = {0}, n = {0};
    /* the library reads each query as a C string: a NUL would cut it short */
    if (qpy_texts_get(&t, seq, "queries", QPY_NO_NUL) < 0 || qpy_buf_get(&s, s_o, 'f', 4, t.n * k, 1, "scores") < 0 ||
        qpy_buf_get(&r, r_o, 'q', 8, t.n * k, 1, "rows") < 0 || qpy_buf_get(&n, n_o, 'i', 4, t.n, 1, "counts") < 0 ||
        qpy_enter(&self->base, QPY_SHARED) < 0)
        goto done;
    qac_bm25_params p = {k1, bb, exact};
    qac_status st = QAC_OK;
    int held = 1;
    /* queries a piece at a time; between pieces signal handlers run (Ctrl-C),
     * without the lock, which a handler may want */
    for (Py_ssize_t i0 = 0; i0 < t.n && !st; i0 += QUERIES_PER_PIECE) {
        Py_ssize_t i1 = t.n - i0 < QUERIES_PER_PIECE ? t.n : i0 + QUERIES_PER_PIECE;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = i0; i < i1 && !st; i++)
            st = qac_bm25_search(self->b, t.ptr[i], &p, k, (float *)s.buf + i * k, (int64_t *)r.buf + i * k,
                                 (int *)n.buf + i);
        Py_END_ALLOW_THREADS
        if (i1 == t.n || st) break;
        qpy_leave(&self->base);
        if (PyErr_CheckSignals() < 0 || qpy_enter(&self->base, QPY_SHARED) < 0) {
            held = 0;
            break;
        }
    }
    if (!held) goto done;
    qpy_leave(&self->base);
    ret = qpy_none_or_raise(st);
done:
    if (s.obj) PyBuffer_Release(&s);
    if (r.obj) PyBuffer_Release(&r);
    if (n.obj) PyBuffer_Release(&n);
    qpy_texts_free(&t);
    return ret;
}

static const char *bm25_row_docid(const void *b, int64_t row) { return qac_bm25_docid(b, row); }

static PyObject *bm25_docids(BM25Object *self, PyObject *arg) {
    return qpy_check_open(&self->base) < 0 ? NULL : qpy_docids_of(arg, bm25_row_docid, self->b);
}

static PyObject *bm25_count(BM25Object *self, PyObject *unused) {
    return qpy_check_open(&self->base) < 0 ? NULL : PyLong_FromLongLong(qac_bm25_count(self->b));
}

static PyMethodDef bm25_methods[] = {
    {"search", (PyCFunction)bm25_search, METH_VARARGS, "search(queries, k, k1, b, exact, scores, rows, counts)"},
    {"docids", (PyCFunction)bm25_docids, METH_O, "docids(rows) -> list of str"},
    {"count", (PyCFunction)bm25_count, METH_NOARGS, "documents in the index"},
    QPY_LIFECYCLE_METHODS,
    {NULL}};

PyTypeObject qpy_BM25Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "qac._qac.BM25",
    .tp_basicsize = sizeof(BM25Object),
    .tp_dealloc = (destructor)bm25_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "BM25(dir)",
    .tp_methods = bm25_methods,
    .tp_init = (initproc)bm25_init,
    .tp_new = bm25_new,
};

PyObject *qpy_bm25_build(PyObject *mod, PyObject *args) {
    const char *out, *corpus;
    PyObject *progress;
    if (!PyArg_ParseTuple(args, "ssO", &out, &corpus, &progress)) return NULL;
    qpy_cb cb = qpy_cb_of(progress, 0);
    qac_bm25_build_opts o = {qpy_progress, &cb};
    qac_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qac_bm25_build(out, corpus, &o);
    Py_END_ALLOW_THREADS
    return qpy_cb_finish(&cb, st);
}
