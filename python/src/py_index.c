/* Dense indexes: Index (open, search, docids, text, parameters), the
 * builds (from a corpus through an Encoder, from vectors, from parts) and
 * IndexParts (the encoding side of parts). The library searches one index
 * from several threads at once, so searches hold the index shared;
 * set_param and set_threads change it and hold it exclusively. A build
 * and IndexParts.encode hold their Encoder exclusively for the call. */
#include <stdlib.h>
#include <string.h>

#include "qac_index.h"
#include "qac_python.h"

#define MAX_THREADS 1024 /* the thread pool's limit */

/* ---- Index ---- */

typedef struct {
    qpy_obj base;
    qac_index *ix;
} IndexObject;

static void index_free_handle(qpy_obj *o) {
    IndexObject *self = (IndexObject *)o;
    qac_index *ix = self->ix;
    self->ix = NULL;
    Py_BEGIN_ALLOW_THREADS
    qac_index_free(ix);
    Py_END_ALLOW_THREADS
}

static PyObject *index_new(PyTypeObject *t, PyObject *a, PyObject *k) { return qpy_new(t, index_free_handle); }

static void index_dealloc(IndexObject *self) { qpy_dealloc(&self->base); }

static int index_init(IndexObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"dir", "device", "verify", NULL};
    const char *dir, *device = "auto", *verify = "full";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|ss", kwlist, &dir, &device, &verify)) return -1;
    qac_device dev;
    if (qpy_device_of(device, &dev) < 0) return -1;
    qac_index_verify v;
    qac_status st = qac_index_verify_parse(verify, &v);
    if (st) return qpy_raise(st), -1;
    if (qpy_init_begin(&self->base) < 0) return -1;
    Py_BEGIN_ALLOW_THREADS
    st = qac_index_open_verified(&self->ix, dir, dev, v);
    Py_END_ALLOW_THREADS
    if (st) qpy_raise(st);
    return qpy_init_end(&self->base, !st);
}

/* search(queries float32 [nq*dim], nq, k, scores float32 [nq*k], rows int64 [nq*k]);
 * k at most the index's size: the caller's arrays hold nq * k results */
static PyObject *index_search(IndexObject *self, PyObject *args) {
    PyObject *q_o, *s_o, *r_o, *ret = NULL;
    Py_ssize_t nq;
    int k;
    if (!PyArg_ParseTuple(args, "OniOO", &q_o, &nq, &k, &s_o, &r_o) || qpy_check_open(&self->base) < 0)
        return NULL;
    long long count = (long long)qac_index_count(self->ix);
    if (nq < 0 || nq > INT32_MAX || k < 1 || k > count)
        return PyErr_Format(PyExc_ValueError, "search: nq %zd must be 0 to %d and k %d 1 to the index's size, %lld",
                            nq, INT32_MAX, k, count);
    Py_buffer q = {0}, s = {0}, r = {0};
    if (qpy_buf_get(&q, q_o, 'f', 4, nq * qac_index_dim(self->ix), 0, "queries") < 0 ||
        qpy_buf_get(&s, s_o, 'f', 4, nq * k, 1, "scores") < 0 || qpy_buf_get(&r, r_o, 'q', 8, nq * k, 1, "rows") < 0 ||
        qpy_enter(&self->base, QPY_SHARED) < 0)
        goto done;
    qac_status st = QAC_OK;
    if (nq > 0) {
        Py_BEGIN_ALLOW_THREADS
        st = qac_index_search(self->ix, q.buf, (int)nq, k, s.buf, r.buf);
        Py_END_ALLOW_THREADS
    }
    qpy_leave(&self->base);
    ret = qpy_none_or_raise(st);
done:
    if (q.obj) PyBuffer_Release(&q);
    if (s.obj) PyBuffer_Release(&s);
    if (r.obj) PyBuffer_Release(&r);
    return ret;
}

static const char *index_row_docid(const void *ix, int64_t row) {
    return row >= 0 && row < qac_index_count(ix) ? qac_index_docid(ix, row) : NULL;
}

/* docids(rows int64 buffer) -> list of str ("" for rows < 0) */
static PyObject *index_docids(IndexObject *self, PyObject *arg) {
    return qpy_check_open(&self->base) < 0 ? NULL : qpy_docids_of(arg, index_row_docid, self->ix);
}

static PyObject *index_text(IndexObject *self, PyObject *arg) {
    long long row = PyLong_AsLongLong(arg);
    if ((row == -1 && PyErr_Occurred()) || qpy_check_open(&self->base) < 0) return NULL;
    if (row < 0 || row >= qac_index_count(self->ix)) return PyErr_Format(PyExc_IndexError, "row %lld out of range", row);
    if (qpy_enter(&self->base, QPY_SHARED) < 0) return NULL;
    char *text = NULL;
    qac_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qac_index_text(self->ix, (int64_t)row, &text);
    Py_END_ALLOW_THREADS
    qpy_leave(&self->base);
    if (st) return qpy_raise(st);
    PyObject *o = qpy_str_or_empty(text);
    free(text);
    return o;
}

static PyObject *index_set_param(IndexObject *self, PyObject *args) {
    const char *name;
    double v;
    if (!PyArg_ParseTuple(args, "sd", &name, &v) || qpy_enter(&self->base, QPY_EXCLUSIVE) < 0) return NULL;
    qac_status st = qac_index_set_param(self->ix, name, v);
    qpy_leave(&self->base);
    return qpy_none_or_raise(st);
}

static PyObject *index_set_threads(IndexObject *self, PyObject *arg) {
    long n;
    if (qpy_int_in(arg, 0, MAX_THREADS, "threads (0: one per core)", &n) < 0 ||
        qpy_enter(&self->base, QPY_EXCLUSIVE) < 0)
        return NULL;
    qac_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qac_index_set_threads(self->ix, (int)n);
    Py_END_ALLOW_THREADS
    qpy_leave(&self->base);
    return qpy_none_or_raise(st);
}

static PyObject *index_info(IndexObject *self, PyObject *unused) {
    if (qpy_check_open(&self->base) < 0) return NULL;
    const qac_index *ix = self->ix;
    const char *q, *p;
    PyObject *prompts = qac_index_prompts(ix, &q, &p) ? Py_BuildValue("{s:N, s:N}", "query", qpy_str_or_empty(q),
                                                                      "passage", qpy_str_or_empty(p))
                                                      : Py_NewRef(Py_None); /* from vectors: not known */
    if (!prompts) return NULL;
    return Py_BuildValue("{s:L, s:i, s:s, s:s, s:N, s:N, s:N, s:O}", "count", (long long)qac_index_count(ix), "dim",
                         qac_index_dim(ix), "factory", qac_index_factory(ix), "fingerprint",
                         qac_index_model_fingerprint(ix), "model", qpy_str_or_empty(qac_index_model_name(ix)),
                         "model_dir", qpy_str_or_empty(qac_index_model_dir(ix)), "prompts", prompts, "on_gpu",
                         qac_index_on_gpu(ix) ? Py_True : Py_False);
}

/* check_prompts(query_prompt): MismatchError when the index wants another. */
static PyObject *index_check_prompts(IndexObject *self, PyObject *args) {
    const char *q;
    if (!PyArg_ParseTuple(args, "s", &q) || qpy_check_open(&self->base) < 0) return NULL;
    return qpy_none_or_raise(qac_index_check_prompts(self->ix, q));
}

/* check_model(model): MismatchError when the index was built with another. */
static PyObject *index_check_model(IndexObject *self, PyObject *arg) {
    const qac_model *m = qpy_model_arg(arg);
    if (!m || qpy_check_open(&self->base) < 0) return NULL;
    return qpy_none_or_raise(qac_index_check_model(self->ix, m));
}

static PyMethodDef index_methods[] = {
    {"search", (PyCFunction)index_search, METH_VARARGS, "search(queries, nq, k, scores, rows)"},
    {"docids", (PyCFunction)index_docids, METH_O, "docids(rows) -> list of str"},
    {"text", (PyCFunction)index_text, METH_O, "text(row) -> the passage text from the corpus"},
    {"set_param", (PyCFunction)index_set_param, METH_VARARGS, "set_param(name, value): nprobe, efSearch"},
    {"set_threads", (PyCFunction)index_set_threads, METH_O, "threads of the exact CPU scans (0 to 1024; 0: per core)"},
    {"info", (PyCFunction)index_info, METH_NOARGS, "count, dim, factory, fingerprint, model, model_dir, prompts, on_gpu"},
    {"check_prompts", (PyCFunction)index_check_prompts, METH_VARARGS,
     "check_prompts(query_prompt): MismatchError if the index was built for another"},
    {"check_model", (PyCFunction)index_check_model, METH_O,
     "check_model(model): MismatchError if the index was built with another model"},
    QPY_LIFECYCLE_METHODS,
    {NULL}};

PyTypeObject qpy_IndexType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "qac._qac.Index",
    .tp_basicsize = sizeof(IndexObject),
    .tp_dealloc = (destructor)index_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Index(dir, device='auto', verify='full')",
    .tp_methods = index_methods,
    .tp_init = (initproc)index_init,
    .tp_new = index_new,
};

/* ---- builds ---- */

/* One option of the options dict into o. */
static int build_opt_set(qac_index_build_opts *o, const char *name, PyObject *v) {
    const char **str = !strcmp(name, "factory")      ? &o->factory
                       : !strcmp(name, "ids_path")   ? &o->ids_path
                       : !strcmp(name, "ids_corpus") ? &o->ids_corpus
                                                     : NULL;
    if (str) return (*str = PyUnicode_AsUTF8(v)) ? 0 : -1;
    if (!strcmp(name, "format")) {
        const char *f = PyUnicode_AsUTF8(v);
        return f && qpy_format_of(f, &o->format) == 0 ? 0 : -1;
    }
    if (!strcmp(name, "dtype")) {
        const char *f = PyUnicode_AsUTF8(v);
        if (!f) return -1;
        if (strcmp(f, "fp32") && strcmp(f, "fp16"))
            return PyErr_Format(PyExc_ValueError, "dtype must be fp32 or fp16, not %s", f), -1;
        o->fp16 = !strcmp(f, "fp16");
        return 0;
    }
    long x; /* the bounds of qac index build's options */
    if (!strcmp(name, "batch")) return qpy_int_in(v, 1, 4096, "batch", &x) < 0 ? -1 : (o->batch = (int)x, 0);
    if (!strcmp(name, "max_len")) return qpy_int_in(v, 0, 8192, "max_len", &x) < 0 ? -1 : (o->max_len = (int)x, 0);
    if (!strcmp(name, "shard_size"))
        return qpy_int_in(v, 1, 100000000, "shard_size", &x) < 0 ? -1 : (o->shard_size = (int)x, 0);
    if (!strcmp(name, "train_size")) {
        long long t = PyLong_AsLongLong(v);
        return t == -1 && PyErr_Occurred() ? -1 : (o->train_size = t, 0);
    }
    return PyErr_Format(PyExc_TypeError, "unknown index option '%s'", name), -1;
}

static int build_opts_get(qac_index_build_opts *o, PyObject *d) {
    *o = qac_index_default_build_opts();
    if (d == Py_None) return 0;
    if (!PyDict_Check(d)) return PyErr_SetString(PyExc_TypeError, "options must be a dict"), -1;
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d, &pos, &k, &v)) {
        const char *name = PyUnicode_AsUTF8(k);
        if (!name || build_opt_set(o, name, v) < 0) return -1;
    }
    o->ids_format = o->format; /* a corpus naming the vectors' ids is read like the corpus option says */
    return 0;
}

/* index_defaults() -> qac_index_default_build_opts() as the options dict */
PyObject *qpy_index_defaults(PyObject *mod, PyObject *unused) {
    qac_index_build_opts o = qac_index_default_build_opts();
    return Py_BuildValue("{s:s, s:i, s:i, s:i, s:s, s:L, s:s}", "factory", o.factory ? o.factory : "Flat", "batch",
                         o.batch, "max_len", o.max_len, "shard_size", o.shard_size, "dtype", o.fp16 ? "fp16" : "fp32",
                         "train_size", (long long)o.train_size, "format", qpy_format_name(o.format));
}

/* index_build(out, encoder, corpus, options, progress): the encoder is held
 * for the whole build; KeyboardInterrupt (or progress's exception) leaves
 * a build that resumes */
PyObject *qpy_index_build(PyObject *mod, PyObject *args) {
    const char *out, *corpus;
    PyObject *enc_o, *opts, *progress;
    if (!PyArg_ParseTuple(args, "sOsOO", &out, &enc_o, &corpus, &opts, &progress)) return NULL;
    qpy_obj *enc = qpy_encoder_obj(enc_o);
    qac_index_build_opts o;
    if (!enc || build_opts_get(&o, opts) < 0 || qpy_enter(enc, QPY_EXCLUSIVE) < 0) return NULL;
    /* Ctrl-C, or an exception from progress, stops the encoding within a
     * layer's time (the build asks its encoder on this thread); what is
     * written stays, and the next build resumes from it */
    qpy_cb cb = qpy_cb_of(progress, qpy_on_main_thread());
    o.progress = qpy_progress;
    o.progress_user = &cb;
    qpy_encoder_watch(enc, &cb);
    qac_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qac_index_build(out, qpy_encoder_handle(enc), corpus, &o);
    Py_END_ALLOW_THREADS
    qpy_encoder_watch(enc, NULL);
    qpy_leave(enc);
    return qpy_cb_finish(&cb, st);
}

/* index_build_vectors(out, npy_path, model or None, options, progress) */
PyObject *qpy_index_build_vectors(PyObject *mod, PyObject *args) {
    const char *out, *npy;
    PyObject *model, *opts, *progress;
    if (!PyArg_ParseTuple(args, "ssOOO", &out, &npy, &model, &opts, &progress)) return NULL;
    qac_index_build_opts o;
    if (build_opts_get(&o, opts) < 0) return NULL;
    if (model != Py_None && !(o.vectors_model = qpy_model_arg(model))) return NULL;
    /* Ctrl-C (or progress's exception) stops it between shards and FAISS's
     * pieces; what is written stays for the next call to resume */
    qpy_cb cb = qpy_cb_of(progress, qpy_on_main_thread());
    o.progress = qpy_progress;
    o.progress_user = &cb;
    o.cancel = qpy_cancel;
    o.cancel_user = &cb;
    if (model != Py_None) qpy_borrow((qpy_obj *)model); /* a close() meanwhile leaves the handle to this call */
    qac_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qac_index_build_vectors(out, npy, &o);
    Py_END_ALLOW_THREADS
    if (model != Py_None) qpy_give_back((qpy_obj *)model);
    return qpy_cb_finish(&cb, st);
}

/* index_merge(out, parts_dir, options, progress) */
PyObject *qpy_index_merge(PyObject *mod, PyObject *args) {
    const char *out, *parts;
    PyObject *opts, *progress;
    if (!PyArg_ParseTuple(args, "ssOO", &out, &parts, &opts, &progress)) return NULL;
    qac_index_build_opts o;
    if (build_opts_get(&o, opts) < 0) return NULL;
    qpy_cb cb = qpy_cb_of(progress, qpy_on_main_thread()); /* Ctrl-C: as build_vectors */
    o.progress = qpy_progress;
    o.progress_user = &cb;
    o.cancel = qpy_cancel;
    o.cancel_user = &cb;
    qac_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qac_index_merge(out, parts, &o);
    Py_END_ALLOW_THREADS
    return qpy_cb_finish(&cb, st);
}

/* ---- IndexParts: borrows its Encoder's handle for its life ---- */

typedef struct {
    qpy_obj base;
    PyObject *encoder;
    qac_index_parts *p;
} PartsObject;

static void parts_free_handle(qpy_obj *o) {
    PartsObject *self = (PartsObject *)o;
    qac_index_parts *p = self->p;
    self->p = NULL;
    Py_BEGIN_ALLOW_THREADS
    qac_index_parts_free(p);
    Py_END_ALLOW_THREADS
    if (self->encoder) {
        qpy_give_back((qpy_obj *)self->encoder);
        Py_CLEAR(self->encoder);
    }
}

static PyObject *parts_new(PyTypeObject *t, PyObject *a, PyObject *k) { return qpy_new(t, parts_free_handle); }

static void parts_dealloc(PartsObject *self) { qpy_dealloc(&self->base); }

static int parts_init(PartsObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"dir", "encoder", "corpus", "max_len", "format", NULL};
    const char *dir, *corpus, *fmt = "auto";
    PyObject *enc_o;
    int max_len = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sOs|is", kwlist, &dir, &enc_o, &corpus, &max_len, &fmt)) return -1;
    qpy_obj *enc = qpy_encoder_obj(enc_o);
    qac_text_format f;
    if (!enc || qpy_format_of(fmt, &f) < 0 || qpy_init_begin(&self->base) < 0) return -1;
    if (qpy_enter(enc, QPY_SHARED) < 0) return qpy_init_end(&self->base, 0);
    qac_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qac_index_parts_open(&self->p, dir, qpy_encoder_handle(enc), corpus, max_len, f);
    Py_END_ALLOW_THREADS
    if (!st) {
        qpy_borrow(enc);
        self->encoder = Py_NewRef(enc_o);
    }
    qpy_leave(enc);
    if (st) qpy_raise(st);
    return qpy_init_end(&self->base, !st);
}

/* encode(rows int64, ids, texts, offsets uint64, lines int64): holds the
 * parts and their encoder exclusively, in that order */
static PyObject *parts_encode(PartsObject *self, PyObject *args) {
    PyObject *rows_o, *ids_o, *texts_o, *offs_o, *lines_o, *ret = NULL;
    if (!PyArg_ParseTuple(args, "OOOOO", &rows_o, &ids_o, &texts_o, &offs_o, &lines_o) ||
        qpy_check_open(&self->base) < 0)
        return NULL;
    qpy_texts ids = {0}, tx = {0};
    Py_buffer rows = {0}, offs = {0}, lines = {0};
    /* ids are read as C strings */
    if (qpy_texts_get(&ids, ids_o, "ids", QPY_NO_NUL) < 0 || qpy_texts_get(&tx, texts_o, "texts", QPY_ANY_TEXT) < 0)
        goto done;
    if (tx.n != ids.n || tx.n > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "ids and texts differ in length (or pass 2^31)");
        goto done;
    }
    if (qpy_buf_get(&rows, rows_o, 'q', 8, tx.n, 0, "rows") < 0 ||
        qpy_buf_get(&offs, offs_o, 'Q', 8, tx.n, 0, "offsets") < 0 ||
        qpy_buf_get(&lines, lines_o, 'q', 8, tx.n, 0, "lines") < 0 || qpy_enter(&self->base, QPY_EXCLUSIVE) < 0)
        goto done;
    qpy_obj *enc = (qpy_obj *)self->encoder;
    if (qpy_enter(enc, QPY_EXCLUSIVE) < 0) { /* closed: its handle is still here, but not to be used */
        qpy_leave(&self->base);
        goto done;
    }
    qpy_cb cb = qpy_cb_of(Py_None, qpy_on_main_thread());
    qpy_encoder_watch(enc, &cb);
    qac_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qac_index_parts_encode(self->p, (int)tx.n, rows.buf, ids.ptr, tx.ptr, tx.len, offs.buf, lines.buf);
    Py_END_ALLOW_THREADS
    qpy_encoder_watch(enc, NULL);
    qpy_leave(enc);
    qpy_leave(&self->base);
    ret = qpy_cb_finish(&cb, st);
done:
    if (rows.obj) PyBuffer_Release(&rows);
    if (offs.obj) PyBuffer_Release(&offs);
    if (lines.obj) PyBuffer_Release(&lines);
    qpy_texts_free(&ids);
    qpy_texts_free(&tx);
    return ret;
}

static PyMethodDef parts_methods[] = {
    {"encode", (PyCFunction)parts_encode, METH_VARARGS, "encode(rows, ids, texts, offsets, lines): write parts"},
    QPY_LIFECYCLE_METHODS,
    {NULL}};

PyTypeObject qpy_PartsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "qac._qac.IndexParts",
    .tp_basicsize = sizeof(PartsObject),
    .tp_dealloc = (destructor)parts_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "IndexParts(dir, encoder, corpus, max_len=0, format='auto')",
    .tp_methods = parts_methods,
    .tp_init = (initproc)parts_init,
    .tp_new = parts_new,
};
