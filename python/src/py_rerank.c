/* Reranker: a cross-encoder (api/qac_xenc.h) scoring query-passage pairs.
 * The object owns the loaded model and its reranker; a scoring call holds
 * it exclusively (the reranker keeps its pair and activation buffers
 * between calls, as an Encoder does), so calls from several threads run
 * one after another, each getting what it would get alone. Ctrl-C stops a
 * call between the encoder's batches and layers; the reranker stays
 * usable. What getters report is copied at __init__. */
#include <string.h>

#include "qac_python.h"
#include "qac_xenc.h"

#define MAX_THREADS 1024 /* the thread pool's limit */
#define MAX_BATCH 4096   /* sequences per forward pass, as qac rerank --batch */

typedef struct {
    qpy_obj base;
    qac_xenc *x;
    qac_reranker *r;
    /* fixed at __init__ */
    int num_labels, max_len;
    qac_device device;
    qac_precision dtype;
    qac_xenc_act activation;
    char fingerprint[17];
    long long truncated; /* qac_reranker_truncated after the last call */
} RerankerObject;

static void reranker_free_handle(qpy_obj *o) {
    RerankerObject *self = (RerankerObject *)o;
    qac_reranker *r = self->r;
    qac_xenc *x = self->x;
    self->r = NULL, self->x = NULL;
    Py_BEGIN_ALLOW_THREADS
    qac_reranker_free(r); /* before the model it borrows */
    qac_xenc_free(x);
    Py_END_ALLOW_THREADS
}

static PyObject *reranker_new(PyTypeObject *t, PyObject *a, PyObject *k) { return qpy_new(t, reranker_free_handle); }

static void reranker_dealloc(RerankerObject *self) { qpy_dealloc(&self->base); }

/* Reranker(path, device='auto', dtype='fp32', threads=0, max_batch=0) */
static int reranker_init(RerankerObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"path", "device", "dtype", "threads", "max_batch", NULL};
    const char *path, *device = "auto", *dtype = "fp32";
    PyObject *threads = NULL, *max_batch = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|ssOO", kwlist, &path, &device, &dtype, &threads, &max_batch))
        return -1;
    qac_encoder_opts o = qac_encoder_default_opts();
    long t = 0, b = 0;
    if (qpy_device_of(device, &o.device) < 0 ||
        (threads && qpy_int_in(threads, 0, MAX_THREADS, "threads (0: one per core)", &t) < 0) ||
        (max_batch && qpy_int_in(max_batch, 0, MAX_BATCH, "max_batch (0: the backend's)", &b) < 0))
        return -1;
    if (strcmp(dtype, "fp32") && strcmp(dtype, "bf16"))
        return PyErr_Format(PyExc_ValueError, "dtype must be fp32 or bf16, not %s", dtype), -1;
    o.cpu_precision = !strcmp(dtype, "bf16") ? QAC_PREC_BF16 : QAC_PREC_FP32;
    o.threads = (int)t;
    o.max_batch = (int)b;
    if (qpy_init_begin(&self->base) < 0) return -1;
    qac_status st;
    qac_xenc *x = NULL;
    qac_reranker *r = NULL;
    Py_BEGIN_ALLOW_THREADS
    st = qac_xenc_load(&x, path);
    if (!st) st = qac_reranker_create(&r, x, &o);
    if (st) qac_xenc_free(x), x = NULL;
    Py_END_ALLOW_THREADS
    if (st) {
        qpy_raise(st);
        return qpy_init_end(&self->base, 0);
    }
    self->x = x, self->r = r;
    self->num_labels = x->num_labels;
    self->max_len = x->max_len;
    self->device = qac_reranker_device(r);
    self->dtype = o.cpu_precision;
    self->activation = x->activation;
    memcpy(self->fingerprint, x->fingerprint, sizeof self->fingerprint);
    self->truncated = 0;
    return qpy_init_end(&self->base, 1);
}

/* logits(queries, passages, out, max_len, truncation, side): out a writable
 * float32 buffer of len(passages) * num_labels, filled in place. queries
 * holds one text (every pair's query, tokenized once) or one per passage. */
static PyObject *reranker_logits(RerankerObject *self, PyObject *args) {
    PyObject *qs, *ps, *out, *ret = NULL;
    int max_len = 0;
    const char *trunc = "longest_first", *side = "right";
    if (!PyArg_ParseTuple(args, "OOO|iss", &qs, &ps, &out, &max_len, &trunc, &side) ||
        qpy_check_open(&self->base) < 0)
        return NULL;
    qac_pair_opts po = qac_reranker_default_pair_opts(self->r);
    qac_status st;
    if ((st = qac_truncation_parse(trunc, &po.strategy)) || (st = qac_trunc_side_parse(side, &po.side)))
        return qpy_raise(st);
    if (max_len < 0) return PyErr_Format(PyExc_ValueError, "max_len must be 0 (the model's) or more, not %d", max_len);
    po.max_len = max_len; /* 0 or above the model's: the model's */
    qpy_texts q = {0}, p = {0};
    Py_buffer b = {0};
    if (qpy_texts_get(&q, qs, "queries", QPY_ANY_TEXT) < 0 || qpy_texts_get(&p, ps, "passages", QPY_ANY_TEXT) < 0)
        goto done;
    if (p.n > INT32_MAX / 2) {
        PyErr_Format(PyExc_ValueError, "rerank: %zd pairs in one call (at most %d)", p.n, INT32_MAX / 2);
        goto done;
    }
    if (q.n != 1 && q.n != p.n) {
        PyErr_Format(PyExc_ValueError, "rerank: %zd queries for %zd passages (give one, or one per passage)", q.n,
                     p.n);
        goto done;
    }
    if (qpy_buf_get(&b, out, 'f', 4, p.n * self->num_labels, 1, "rerank output") < 0) goto done;
    if (qpy_enter(&self->base, QPY_EXCLUSIVE) < 0) goto done;
    qpy_cb cb = qpy_cb_of(Py_None, qpy_on_main_thread()); /* Ctrl-C stops it between batches and layers */
    qac_reranker_set_cancel(self->r, qpy_cancel, &cb);
    int one = q.n == 1 && p.n != 1;
    Py_BEGIN_ALLOW_THREADS
    if (one)
        st = qac_reranker_logits_one(self->r, q.ptr[0], q.len[0], p.ptr, p.len, (int)p.n, &po, b.buf);
    else
        st = qac_reranker_logits(self->r, q.ptr, q.len, p.ptr, p.len, (int)p.n, &po, b.buf);
    Py_END_ALLOW_THREADS
    qac_reranker_set_cancel(self->r, NULL, NULL);
    self->truncated = qac_reranker_truncated(self->r);
    qpy_leave(&self->base);
    ret = qpy_cb_finish(&cb, st);
done:
    if (b.obj) PyBuffer_Release(&b);
    qpy_texts_free(&q);
    qpy_texts_free(&p);
    return ret;
}

/* convert(logits, kind, out): from logits [n, num_labels], "raw" (the
 * ranking score, out [n]), "probability" (TEI's score, out [n]) or
 * "activated" (CrossEncoder.predict's, out [n, num_labels]). */
static PyObject *reranker_convert(RerankerObject *self, PyObject *args) {
    PyObject *lo, *out;
    const char *kind;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "OsOn", &lo, &kind, &out, &n) || qpy_check_open(&self->base) < 0) return NULL;
    int act = !strcmp(kind, "activated");
    if (!act && strcmp(kind, "raw") && strcmp(kind, "probability"))
        return PyErr_Format(PyExc_ValueError, "kind must be raw, probability or activated, not %s", kind);
    if (n < 0 || n > INT32_MAX / 2) return PyErr_Format(PyExc_ValueError, "convert: bad count %zd", n);
    Py_buffer l = {0}, o = {0};
    if (qpy_buf_get(&l, lo, 'f', 4, n * self->num_labels, 0, "logits") < 0) return NULL;
    if (qpy_buf_get(&o, out, 'f', 4, act ? n * self->num_labels : n, 1, "scores") < 0) {
        PyBuffer_Release(&l);
        return NULL;
    }
    /* the head's numbers only, from what __init__ copied: no lock, no handle */
    qac_xenc head = {.num_labels = self->num_labels, .activation = self->activation};
    if (act) qac_xenc_activate(&head, l.buf, (int)n, o.buf);
    else if (!strcmp(kind, "raw")) qac_xenc_raw_scores(&head, l.buf, (int)n, o.buf);
    else qac_xenc_probabilities(&head, l.buf, (int)n, o.buf);
    PyBuffer_Release(&l);
    PyBuffer_Release(&o);
    Py_RETURN_NONE;
}

static PyObject *reranker_info(RerankerObject *self, PyObject *unused) {
    if (qpy_check_open(&self->base) < 0) return NULL;
    const qac_model *m = self->x->bert;
    const qac_bert_config *c = &m->cfg;
    return Py_BuildValue("{s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:s, s:s, s:s, s:s, s:s}", "name", m->name, "path",
                         m->dir ? m->dir : "", "fingerprint", self->fingerprint, "num_labels", self->num_labels,
                         "max_len", self->max_len, "layers", c->num_layers, "dim", c->hidden_size, "activation",
                         qac_xenc_act_name(self->activation), "activation_torch",
                         qac_xenc_act_torch(self->activation), "device",
                         self->device == QAC_DEVICE_CUDA ? "cuda" : "cpu", "dtype",
                         self->dtype == QAC_PREC_BF16 ? "bf16" : "fp32", "labels",
                         self->x->labels[self->num_labels - 1] ? self->x->labels[self->num_labels - 1] : "");
}

static PyObject *reranker_get_num_labels(RerankerObject *self, void *c) {
    return qpy_check_open(&self->base) < 0 ? NULL : PyLong_FromLong(self->num_labels);
}
static PyObject *reranker_get_max_len(RerankerObject *self, void *c) {
    return qpy_check_open(&self->base) < 0 ? NULL : PyLong_FromLong(self->max_len);
}
static PyObject *reranker_get_truncated(RerankerObject *self, void *c) {
    return PyLong_FromLongLong(self->truncated); /* after close too: the count of the reranker's life */
}

static PyMethodDef reranker_methods[] = {
    {"logits", (PyCFunction)reranker_logits, METH_VARARGS,
     "logits(queries, passages, out, max_len=0, truncation='longest_first', side='right'): fill "
     "out[len(passages), num_labels]"},
    {"convert", (PyCFunction)reranker_convert, METH_VARARGS,
     "convert(logits, kind, out, n): raw, probability or activated scores of n pairs' logits"},
    {"info", (PyCFunction)reranker_info, METH_NOARGS, "the model's name, path, fingerprint, head and device"},
    QPY_LIFECYCLE_METHODS,
    {NULL}};
static PyGetSetDef reranker_getset[] = {
    {"num_labels", (getter)reranker_get_num_labels, NULL, "logits per pair (1 or 2)", NULL},
    {"max_len", (getter)reranker_get_max_len, NULL, "the model's pair length, specials included", NULL},
    {"truncated", (getter)reranker_get_truncated, NULL, "pairs cut at max_len so far", NULL},
    {NULL}};

PyTypeObject qpy_RerankerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "qac._qac.Reranker",
    .tp_basicsize = sizeof(RerankerObject),
    .tp_dealloc = (destructor)reranker_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Reranker(path, device='auto', dtype='fp32', threads=0, max_batch=0): a cross-encoder",
    .tp_methods = reranker_methods,
    .tp_getset = reranker_getset,
    .tp_init = (initproc)reranker_init,
    .tp_new = reranker_new,
};
