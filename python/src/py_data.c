/* Files as Python values: the corpus and queries reader (Reader), qrels
 * and runs as dicts, trec_eval's numbers, and a run written atomically.
 * Reader calls hold the GIL throughout (records become Python objects as
 * they are read), so it needs no lock, only an open object. */
#include <string.h>

#include "qac_eval.h"
#include "qac_python.h"
#include "qac_util.h"

/* ---- Reader ---- */

typedef struct {
    qpy_obj base;
    qac_reader *r;
} ReaderObject;

static void reader_free_handle(qpy_obj *o) {
    ReaderObject *self = (ReaderObject *)o;
    qac_reader_free(self->r);
    self->r = NULL;
}

static PyObject *reader_new(PyTypeObject *t, PyObject *a, PyObject *k) { return qpy_new(t, reader_free_handle); }

static void reader_dealloc(ReaderObject *self) { qpy_dealloc(&self->base); }

static int reader_init(ReaderObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"path", "kind", "format", NULL};
    const char *path, *kind = "corpus", *fmt = "auto";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|ss", kwlist, &path, &kind, &fmt)) return -1;
    qac_text_format f;
    if (qpy_format_of(fmt, &f) < 0) return -1;
    if (strcmp(kind, "corpus") && strcmp(kind, "queries"))
        return PyErr_Format(PyExc_ValueError, "kind must be corpus or queries, not %s", kind), -1;
    if (qpy_init_begin(&self->base) < 0) return -1;
    qac_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qac_reader_open(&self->r, path, !strcmp(kind, "queries") ? QAC_READ_QUERIES : QAC_READ_CORPUS, f);
    Py_END_ALLOW_THREADS
    if (st) qpy_raise(st);
    return qpy_init_end(&self->base, !st);
}

/* next record as (id, title, text, offset, line), or None at the end */
static PyObject *reader_next(ReaderObject *self, PyObject *unused) {
    if (qpy_check_open(&self->base) < 0) return NULL;
    qac_record rec;
    int got = 0;
    qac_status st = qac_reader_next(self->r, &rec, &got);
    if (st) return qpy_raise(st);
    if (!got) Py_RETURN_NONE;
    return Py_BuildValue("(NNNKL)", qpy_str_or_empty(rec.id), qpy_str_or_empty(rec.title),
                         PyUnicode_DecodeUTF8(rec.text, (Py_ssize_t)rec.text_len, "replace"),
                         (unsigned long long)rec.offset, (long long)rec.line);
}

/* next_ids(n): up to n records' (id, offset, line) lists, for planning splits */
static PyObject *reader_next_ids(ReaderObject *self, PyObject *arg) {
    Py_ssize_t want = PyLong_AsSsize_t(arg);
    if (want < 0) return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_ValueError, "n must be >= 0");
    if (qpy_check_open(&self->base) < 0) return NULL;
    PyObject *ids = PyList_New(0), *offs = PyList_New(0), *lines = PyList_New(0);
    qac_status st = QAC_OK;
    for (Py_ssize_t i = 0; ids && offs && lines && i < want; i++) {
        qac_record rec;
        int got = 0;
        if ((st = qac_reader_next(self->r, &rec, &got)) || !got) break;
        PyObject *a = qpy_str_or_empty(rec.id), *b = PyLong_FromUnsignedLongLong(rec.offset),
                 *c = PyLong_FromLongLong(rec.line);
        int bad = !a || !b || !c || PyList_Append(ids, a) || PyList_Append(offs, b) || PyList_Append(lines, c);
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_XDECREF(c);
        if (bad) {
            Py_CLEAR(ids);
            break;
        }
    }
    if (!ids || !offs || !lines || st) {
        Py_XDECREF(ids);
        Py_XDECREF(offs);
        Py_XDECREF(lines);
        return st ? qpy_raise(st) : NULL;
    }
    return Py_BuildValue("(NNN)", ids, offs, lines);
}

static PyObject *reader_seek(ReaderObject *self, PyObject *args) {
    unsigned long long off;
    long long line;
    if (!PyArg_ParseTuple(args, "KL", &off, &line) || qpy_check_open(&self->base) < 0) return NULL;
    return qpy_none_or_raise(qac_reader_seek(self->r, off, line));
}

static PyObject *reader_format(ReaderObject *self, PyObject *unused) {
    if (qpy_check_open(&self->base) < 0) return NULL;
    return PyUnicode_FromString(qpy_format_name(qac_reader_format(self->r)));
}

static PyMethodDef reader_methods[] = {
    {"next", (PyCFunction)reader_next, METH_NOARGS, "the next (id, title, text, offset, line), or None"},
    {"next_ids", (PyCFunction)reader_next_ids, METH_O, "next_ids(n) -> (ids, offsets, lines) of up to n records"},
    {"seek", (PyCFunction)reader_seek, METH_VARARGS, "seek(offset, line): continue from a record's start"},
    {"format", (PyCFunction)reader_format, METH_NOARGS, "the detected format"},
    QPY_LIFECYCLE_METHODS,
    {NULL}};

PyTypeObject qpy_ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "qac._qac.Reader",
    .tp_basicsize = sizeof(ReaderObject),
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Reader(path, kind='corpus', format='auto')",
    .tp_methods = reader_methods,
    .tp_init = (initproc)reader_init,
    .tp_new = reader_new,
};

/* ---- qrels, runs, evaluation ---- */

/* {docid: value} of one query: ints (relevance) or, when ints is NULL, reals (scores) */
static PyObject *docid_dict(const char *const *docids, const int *ints, const double *reals, size_t n) {
    PyObject *d = PyDict_New();
    for (size_t j = 0; d && j < n; j++) {
        PyObject *v = ints ? PyLong_FromLong(ints[j]) : PyFloat_FromDouble(reals[j]);
        if (!v || PyDict_SetItemString(d, docids[j], v) < 0) Py_CLEAR(d);
        Py_XDECREF(v);
    }
    return d;
}

PyObject *qpy_read_qrels(PyObject *mod, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    qac_qrels *q = NULL;
    qac_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qac_qrels_load(&q, path, QAC_QRELS_AUTO);
    Py_END_ALLOW_THREADS
    if (st) return qpy_raise(st);
    PyObject *out = PyDict_New();
    for (size_t i = 0; out && i < qac_qrels_num_queries(q); i++) {
        const char *const *docids;
        const int *rels;
        size_t n = qac_qrels_judged(q, i, &docids, &rels);
        PyObject *d = docid_dict(docids, rels, NULL, n);
        if (!d || PyDict_SetItemString(out, qac_qrels_qid(q, i), d) < 0) Py_CLEAR(out);
        Py_XDECREF(d);
    }
    qac_qrels_free(q);
    return out;
}

PyObject *qpy_read_run(PyObject *mod, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    qac_run *r = NULL;
    qac_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qac_run_load(&r, path);
    Py_END_ALLOW_THREADS
    if (st) return qpy_raise(st);
    PyObject *out = PyDict_New();
    for (size_t i = 0; out && i < qac_run_num_queries(r); i++) {
        const char *const *docids;
        const double *scores;
        size_t n = qac_run_entries(r, i, &docids, &scores);
        PyObject *d = docid_dict(docids, NULL, scores, n);
        if (!d || PyDict_SetItemString(out, qac_run_qid(r, i), d) < 0) Py_CLEAR(out);
        Py_XDECREF(d);
    }
    qac_run_free(r);
    return out;
}

/* evaluate(qrels_path, run_path, measures, max_docs, rel_level, complete)
 * -> list of (measure, qid, value, is_count) rows in trec_eval's order; value
 * is a str for the text rows (runid, relstring) */
PyObject *qpy_evaluate(PyObject *mod, PyObject *args) {
    const char *qp, *rp;
    PyObject *measures;
    long max_docs, rel_level;
    int complete;
    if (!PyArg_ParseTuple(args, "ssOllp", &qp, &rp, &measures, &max_docs, &rel_level, &complete)) return NULL;
    qpy_texts m;
    if (qpy_texts_get(&m, measures, "measures", QPY_NO_NUL) < 0) return NULL;
    qac_qrels *q = NULL;
    qac_run *r = NULL;
    qac_eval_result *res = NULL;
    qac_eval_params p = {max_docs, rel_level, complete};
    qac_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qac_qrels_load(&q, qp, QAC_QRELS_AUTO);
    if (!st) st = qac_run_load(&r, rp);
    if (!st) st = qac_eval_compute(&res, q, r, m.ptr, (int)m.n, &p);
    Py_END_ALLOW_THREADS
    qpy_texts_free(&m);
    PyObject *out = st ? qpy_raise(st) : PyList_New((Py_ssize_t)qac_eval_num_rows(res));
    for (size_t i = 0; out && i < qac_eval_num_rows(res); i++) {
        const char *measure, *qid;
        double v;
        int is_count;
        qac_eval_row(res, i, &measure, &qid, &v, &is_count);
        const char *text = qac_eval_row_text(res, i);
        PyObject *row = text ? Py_BuildValue("(sssO)", measure, qid, text, Py_False)
                             : Py_BuildValue("(ssdO)", measure, qid, v, is_count ? Py_True : Py_False);
        if (!row) Py_CLEAR(out);
        else PyList_SET_ITEM(out, (Py_ssize_t)i, row);
    }
    qac_eval_result_free(res);
    qac_run_free(r);
    qac_qrels_free(q);
    return out;
}

/* write_run(path, qids, docids (a list per query), scores float32 [nq*k], k, run_id):
 * qac_run_write's lines, written atomically */
PyObject *qpy_write_run(PyObject *mod, PyObject *args) {
    const char *path, *run_id;
    PyObject *qids_o, *docids_o, *s_o;
    int k;
    if (!PyArg_ParseTuple(args, "sOOOis", &path, &qids_o, &docids_o, &s_o, &k, &run_id)) return NULL;
    qpy_texts qids;
    if (qpy_texts_get(&qids, qids_o, "qids", QPY_NO_NUL) < 0) return NULL;
    PyObject *lists = PySequence_Tuple(docids_o);
    Py_buffer sc;
    if (!lists || PyTuple_GET_SIZE(lists) != qids.n ||
        qpy_buf_get(&sc, s_o, 'f', 4, qids.n * (Py_ssize_t)k, 0, "scores") < 0) {
        if (lists && !PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "one docid list per query");
        Py_XDECREF(lists);
        qpy_texts_free(&qids);
        return NULL;
    }
    qac_atomic_file af;
    qac_status st = qac_atomic_open(&af, path);
    PyObject *ret = NULL;
    for (Py_ssize_t q = 0; !st && q < qids.n; q++) {
        qpy_texts d;
        if (qpy_texts_get(&d, PyTuple_GET_ITEM(lists, q), "docids", QPY_NO_NUL) < 0) break;
        if (d.n > k) PyErr_SetString(PyExc_ValueError, "more docids than k");
        else st = qac_run_write(af.f, qids.ptr[q], d.ptr, (const float *)sc.buf + q * k, (int)d.n, run_id);
        qpy_texts_free(&d);
        if (PyErr_Occurred()) break;
    }
    if (!st && !PyErr_Occurred()) {
        if ((st = qac_atomic_commit(&af))) qpy_raise(st);
        else ret = Py_NewRef(Py_None);
    } else {
        if (st) qpy_raise(st);
        qac_atomic_abort(&af);
    }
    PyBuffer_Release(&sc);
    Py_DECREF(lists);
    qpy_texts_free(&qids);
    return ret;
}

