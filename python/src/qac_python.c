/* qac._qac: the CPython extension over libqac. Glue only: every function
 * converts Python values, releases the GIL around the library call, and
 * turns a qac_status into an exception carrying qac_last_error(). The
 * Python layer (qac/__init__.py) shapes the public API and numpy arrays;
 * arrays cross this boundary through the buffer protocol, so results are
 * written straight into the caller's arrays. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include "qac_bm25.h"
#include "qac_common.h"
#include "qac_cpu.h"
#include "qac_data.h"
#include "qac_encoder.h"
#include "qac_eval.h"
#include "qac_finetune.h"
#include "qac_index.h"
#include "qac_model.h"
#include "qac_pretrain.h"
#include "qac_tokenizer.h"
#include "qac_util.h"

/* ---- errors ---- */

static PyObject *err_base, *err_by_status[QAC_ERR_MISMATCH + 1];

static PyObject *raise_qac(qac_status st) {
    PyObject *cls = st > 0 && st <= QAC_ERR_MISMATCH && err_by_status[st] ? err_by_status[st] : err_base;
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

/* None when st is QAC_OK, else the exception for st. */
static PyObject *none_or_raise(qac_status st) {
    if (st) return raise_qac(st);
    Py_RETURN_NONE;
}

/* ---- callbacks from library code that runs without the GIL ---- */

typedef struct pycb {
    PyObject *fn;    /* borrowed; may be NULL */
    int check_signals;
    int failed;      /* the first exception a callback raised is kept: */
    PyObject *type, *value, *tb;
} pycb;

/* Call fn(arg) with the GIL held; remember the first exception. Returns
 * nonzero once something went wrong (or a signal such as Ctrl-C came). */
static int cb_call(pycb *c, PyObject *arg) {
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

/* After the call: the callback's exception wins over the status it caused. */
static PyObject *finish_call(pycb *c, qac_status st) {
    if (c->failed) {
        PyErr_Restore(c->type, c->value, c->tb);
        c->failed = 0;
        return NULL;
    }
    return none_or_raise(st);
}

/* With the GIL: fn(event), the event dict built from fmt (Py_BuildValue's)
 * and the values after it; without fn, only the check for signals. Nonzero
 * once the call should stop, as cb_call. */
static int cb_event(pycb *c, const char *fmt, ...) {
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

static pycb pycb_of(PyObject *fn, int check_signals) {
    return (pycb){fn == Py_None ? NULL : fn, check_signals, 0, NULL, NULL, NULL};
}

static void progress_cb(void *user, const char *phase, uint64_t done, uint64_t total) {
    pycb *c = user;
    if (c->fn)
        cb_event(c, "{s:s, s:s, s:K, s:K}", "event", "progress", "phase", phase, "done", (unsigned long long)done,
                 "total", (unsigned long long)total);
}

/* ---- argument helpers ---- */

/* A sequence of str or bytes as UTF-8 pointers and lengths, valid while
 * *keep (a tuple holding the items) lives. */
typedef struct texts {
    PyObject *keep;
    const char **ptr;
    size_t *len;
    Py_ssize_t n;
} texts;

static void texts_free(texts *t) {
    Py_XDECREF(t->keep);
    PyMem_Free(t->ptr);
    PyMem_Free(t->len);
    memset(t, 0, sizeof *t);
}

static int texts_get(texts *t, PyObject *seq, const char *what) {
    memset(t, 0, sizeof *t);
    if (PyUnicode_Check(seq) || PyBytes_Check(seq)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a sequence of texts, not a single text", what);
        return -1;
    }
    t->keep = PySequence_Tuple(seq);
    if (!t->keep) return -1;
    t->n = PyTuple_GET_SIZE(t->keep);
    t->ptr = PyMem_Calloc((size_t)t->n + 1, sizeof *t->ptr);
    t->len = PyMem_Calloc((size_t)t->n + 1, sizeof *t->len);
    if (!t->ptr || !t->len) {
        texts_free(t);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < t->n; i++) {
        PyObject *o = PyTuple_GET_ITEM(t->keep, i);
        Py_ssize_t len = 0;
        if (PyUnicode_Check(o)) {
            t->ptr[i] = PyUnicode_AsUTF8AndSize(o, &len);
            if (!t->ptr[i]) {
                texts_free(t);
                return -1;
            }
        } else if (PyBytes_Check(o)) {
            char *p;
            PyBytes_AsStringAndSize(o, &p, &len);
            t->ptr[i] = p;
        } else {
            PyErr_Format(PyExc_TypeError, "%s: item %zd is %.80s, not str or bytes", what, i, Py_TYPE(o)->tp_name);
            texts_free(t);
            return -1;
        }
        t->len[i] = (size_t)len;
    }
    return 0;
}

/* A writable C-contiguous buffer of n items of one struct format char. */
static int buf_get(Py_buffer *b, PyObject *o, char fmt, Py_ssize_t itemsize, Py_ssize_t n, int writable,
                   const char *what) {
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0) return -1;
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

static int device_of(const char *name, qac_device *out) {
    if (!name || !strcmp(name, "auto")) *out = QAC_DEVICE_AUTO;
    else if (!strcmp(name, "cpu")) *out = QAC_DEVICE_CPU;
    else if (!strcmp(name, "cuda")) *out = QAC_DEVICE_CUDA;
    else return PyErr_Format(PyExc_ValueError, "device must be auto, cpu or cuda, not %s", name), -1;
    return 0;
}

/* qac_text_format's names, in its order */
static const char *const format_names[] = {"auto", "tsv", "beir", "tevatron", "cranfield"};
#define N_FORMATS (int)(sizeof format_names / sizeof format_names[0])

static int format_of(const char *name, qac_text_format *out) {
    for (int i = 0; i < N_FORMATS; i++)
        if (name && !strcmp(name, format_names[i])) {
            *out = (qac_text_format)i;
            return 0;
        }
    PyErr_Format(PyExc_ValueError, "format must be auto, tsv, beir, tevatron or cranfield, not %s", name ? name : "None");
    return -1;
}

static const char *format_name(qac_text_format f) { return (int)f >= 0 && (int)f < N_FORMATS ? format_names[f] : "?"; }

/* A model argument: a directory (str), or None for the default model, whose
 * directory is written into buf. NULL, with the exception set, on failure. */
static const char *model_dir_arg(PyObject *o, char *buf, size_t cap) {
    if (o != Py_None) return PyUnicode_AsUTF8(o);
    qac_status st = qac_default_model_dir(buf, cap);
    return st ? (raise_qac(st), NULL) : buf;
}

static PyObject *str_or_empty(const char *s) {
    return s ? PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "replace") : PyUnicode_FromString("");
}

/* rows (an int64 buffer) -> list of docid(owner, row), "" where it is NULL */
static PyObject *docids_of(PyObject *arg, const char *(*docid)(const void *owner, int64_t row), const void *owner) {
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
        PyObject *s = str_or_empty(docid(owner, rows[i]));
        if (!s) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, s);
    }
    PyBuffer_Release(&r);
    return out;
}

/* ---- Model ---- */

typedef struct {
    PyObject_HEAD
    qac_model *m;
} ModelObject;

static void model_dealloc(ModelObject *self) {
    qac_model_free(self->m);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int model_init(ModelObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"path", NULL};
    PyObject *path = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", kwlist, &path)) return -1;
    char buf[4096];
    const char *dir = model_dir_arg(path, buf, sizeof buf);
    if (!dir) return -1;
    qac_model_free(self->m);
    self->m = NULL;
    qac_status st;
    Py_BEGIN_ALLOW_THREADS st = qac_model_load(&self->m, dir);
    Py_END_ALLOW_THREADS if (st) return raise_qac(st), -1;
    return 0;
}

/* The model's prompts as `qac info --json` gives them. */
static PyObject *model_prompts(const qac_model *m) {
    PyObject *named = PyDict_New();
    for (int i = 0; named && i < m->n_prompts; i++) {
        PyObject *v = str_or_empty(m->prompt_texts[i]);
        if (!v || PyDict_SetItemString(named, m->prompt_names[i], v) < 0) Py_CLEAR(named);
        Py_XDECREF(v);
    }
    if (!named) return NULL;
    return Py_BuildValue("{s:N, s:N, s:s, s:N, s:O}", "query", str_or_empty(qac_model_query_prompt(m)), "passage",
                         str_or_empty(qac_model_passage_prompt(m)), "default_prompt_name",
                         m->default_prompt_name ? m->default_prompt_name : "", "named", named, "include_prompt",
                         m->include_prompt ? Py_True : Py_False);
}

static PyObject *model_info(ModelObject *self, PyObject *unused) {
    const qac_model *m = self->m;
    const qac_bert_config *c = &m->cfg;
    PyObject *prompts = model_prompts(m);
    if (!prompts) return NULL;
    return Py_BuildValue("{s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:O, s:i, s:n, s:s, s:i, s:N}", "name",
                         m->name, "path", m->dir ? m->dir : "", "fingerprint", m->fingerprint, "dim", c->hidden_size,
                         "layers", c->num_layers, "heads", c->num_heads, "intermediate_size", c->intermediate_size,
                         "vocab_size", c->vocab_size, "max_position", c->max_position, "max_seq_len",
                         m->max_seq_len, "pooling", qac_pooling_name(m->pooling), "normalize",
                         m->normalize ? Py_True : Py_False, "type_vocab_size", c->type_vocab_size, "parameters",
                         (Py_ssize_t)m->n_params, "tokenizer",
                         m->tok && qac_tokenizer_get_kind(m->tok) == QAC_TOKENIZER_SENTENCEPIECE ? "sentencepiece"
                                                                                               : "wordpiece",
                         "vocab", m->tok ? qac_tokenizer_vocab_size(m->tok) : 0, "prompts", prompts);
}

/* set_prompts(query, passage): None leaves one as it is, "" means none. */
static PyObject *model_set_prompts(ModelObject *self, PyObject *args) {
    const char *q = NULL, *p = NULL;
    if (!PyArg_ParseTuple(args, "zz", &q, &p)) return NULL;
    return none_or_raise(qac_model_override_prompts(self->m, q, p));
}

/* tokenize(text, max_len, specials, prompt=None): ids, as `qac tokenize`:
 * with specials [CLS] text [SEP] cut at max_len (0: the whole text), else
 * the text's tokens (the first max_len). A prompt (str, "" for none) gives
 * the sequence the encoder reads: [CLS] prompt+text [SEP] cut at max_len. */
static PyObject *model_tokenize(ModelObject *self, PyObject *args) {
    Py_buffer text;
    int max_len = 0, specials = 1;
    const char *prompt = NULL;
    if (!PyArg_ParseTuple(args, "s*ip|z", &text, &max_len, &specials, &prompt)) return NULL;
    const qac_tokenizer *t = self->m->tok;
    qac_status st = QAC_OK;
    int n = 0, ml = max_len, cap = 64;
    if (prompt || specials) {
        if (ml == 0 && !prompt) { /* no limit: room for the whole text */
            if (!(st = qac_tokenizer_tokenize(t, text.buf, (size_t)text.len, NULL, 0, &ml))) ml += 2;
        } else if (ml < 2) {
            st = qac_set_error(QAC_ERR_INVALID, "max_len must be %sat least 2 ([CLS] and [SEP])", prompt ? "" : "0 or ");
        }
        cap = ml > 2 ? ml : 2;
    }
    int32_t *ids = NULL;
    while (!st) {
        PyMem_Free(ids);
        if (!(ids = PyMem_Malloc((size_t)cap * sizeof *ids))) {
            PyBuffer_Release(&text);
            return PyErr_NoMemory();
        }
        if (prompt) st = qac_model_encode_prompted(self->m, prompt, text.buf, (size_t)text.len, ml, ids, &n);
        else if (specials) st = qac_tokenizer_encode(t, text.buf, (size_t)text.len, ml, ids, &n);
        else st = qac_tokenizer_tokenize(t, text.buf, (size_t)text.len, ids, cap, &n);
        if (st || n <= cap) break;
        cap = n;
    }
    PyBuffer_Release(&text);
    if (!st && !prompt && !specials && max_len > 0 && n > max_len) n = max_len;
    PyObject *out = st ? raise_qac(st) : PyList_New(n);
    for (int i = 0; out && i < n; i++) PyList_SET_ITEM(out, i, PyLong_FromLong(ids[i]));
    PyMem_Free(ids);
    return out;
}

static PyObject *model_id_to_token(ModelObject *self, PyObject *arg) {
    long id = PyLong_AsLong(arg);
    if (id == -1 && PyErr_Occurred()) return NULL;
    const char *s = qac_tokenizer_id_to_token(self->m->tok, (int32_t)id);
    if (!s) return PyErr_Format(PyExc_IndexError, "token id %ld out of range", id);
    return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "replace");
}

static PyObject *model_token_to_id(ModelObject *self, PyObject *arg) {
    const char *s = PyUnicode_AsUTF8(arg);
    return s ? PyLong_FromLong(qac_tokenizer_token_to_id(self->m->tok, s)) : NULL;
}

static PyMethodDef model_methods[] = {
    {"info", (PyCFunction)model_info, METH_NOARGS, "The model's configuration as a dict."},
    {"tokenize", (PyCFunction)model_tokenize, METH_VARARGS,
     "tokenize(text, max_len, specials, prompt=None) -> list of ids"},
    {"set_prompts", (PyCFunction)model_set_prompts, METH_VARARGS,
     "set_prompts(query, passage): replace the query / passage prompt (None: keep)"},
    {"id_to_token", (PyCFunction)model_id_to_token, METH_O, "the token string of an id"},
    {"token_to_id", (PyCFunction)model_token_to_id, METH_O, "the id of a token string, -1 if absent"},
    {NULL}};

static PyTypeObject ModelType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "qac._qac.Model",
    .tp_basicsize = sizeof(ModelObject),
    .tp_dealloc = (destructor)model_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Model(path=None): a loaded BERT checkpoint (None: the default model).",
    .tp_methods = model_methods,
    .tp_init = (initproc)model_init,
    .tp_new = PyType_GenericNew,
};

/* ---- Encoder ---- */

typedef struct {
    PyObject_HEAD
    PyObject *model; /* the ModelObject it borrows from */
    qac_encoder *e;
} EncoderObject;

static void encoder_dealloc(EncoderObject *self) {
    qac_encoder_free(self->e);
    Py_XDECREF(self->model);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int encoder_init(EncoderObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"model", "device", "dtype", "threads", "max_batch", NULL};
    PyObject *model;
    const char *device = "auto", *dtype = "fp32";
    int threads = 0, max_batch = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|ssii", kwlist, &ModelType, &model, &device, &dtype, &threads,
                                     &max_batch))
        return -1;
    qac_encoder_opts o = qac_encoder_default_opts();
    if (device_of(device, &o.device) < 0) return -1;
    if (strcmp(dtype, "fp32") && strcmp(dtype, "bf16"))
        return PyErr_Format(PyExc_ValueError, "dtype must be fp32 or bf16, not %s", dtype), -1;
    o.cpu_precision = !strcmp(dtype, "bf16") ? QAC_PREC_BF16 : QAC_PREC_FP32;
    o.threads = threads;
    o.max_batch = max_batch;
    qac_encoder_free(self->e);
    self->e = NULL;
    Py_XDECREF(self->model);
    Py_INCREF(model);
    self->model = model;
    qac_status st;
    const qac_model *m = ((ModelObject *)model)->m;
    if (!m) return PyErr_SetString(PyExc_ValueError, "the model is not loaded"), -1;
    Py_BEGIN_ALLOW_THREADS st = qac_encoder_create(&self->e, m, &o);
    Py_END_ALLOW_THREADS if (st) return raise_qac(st), -1;
    return 0;
}

/* encode(texts, max_len, out, prompt=None): out is a writable float32
 * buffer of len(texts) * dim items, filled in place; the prompt goes
 * before every text (qac_encoder_encode_texts_prompted). */
static PyObject *encoder_encode(EncoderObject *self, PyObject *args) {
    PyObject *seq, *out;
    int max_len;
    const char *prompt = NULL;
    if (!PyArg_ParseTuple(args, "OiO|z", &seq, &max_len, &out, &prompt)) return NULL;
    texts t;
    if (texts_get(&t, seq, "encode") < 0) return NULL;
    if (t.n > INT32_MAX) {
        texts_free(&t);
        return PyErr_Format(PyExc_ValueError, "encode: %zd texts in one call (at most %d)", t.n, INT32_MAX);
    }
    Py_buffer b;
    if (buf_get(&b, out, 'f', 4, t.n * qac_encoder_dim(self->e), 1, "encode output") < 0) {
        texts_free(&t);
        return NULL;
    }
    qac_status st;
    Py_BEGIN_ALLOW_THREADS st = qac_encoder_encode_texts_prompted(self->e, prompt, t.ptr, t.len, (int)t.n, max_len,
                                                                  b.buf);
    Py_END_ALLOW_THREADS PyBuffer_Release(&b);
    texts_free(&t);
    return none_or_raise(st);
}

/* max_len(n): the length encode uses for max_len n (0: the model's limit). */
static PyObject *encoder_max_len(EncoderObject *self, PyObject *arg) {
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    return PyLong_FromLong(qac_encoder_max_len(self->e, n > INT32_MAX ? INT32_MAX : (int)n));
}

static PyObject *encoder_get_dim(EncoderObject *self, void *c) { return PyLong_FromLong(qac_encoder_dim(self->e)); }
static PyObject *encoder_get_truncated(EncoderObject *self, void *c) {
    return PyLong_FromLongLong((long long)qac_encoder_truncated(self->e));
}
static PyObject *encoder_get_device(EncoderObject *self, void *c) {
    return PyUnicode_FromString(qac_encoder_device(self->e) == QAC_DEVICE_CUDA ? "cuda" : "cpu");
}
static PyObject *encoder_get_dtype(EncoderObject *self, void *c) {
    return PyUnicode_FromString(qac_encoder_cpu_precision(self->e) == QAC_PREC_BF16 ? "bf16" : "fp32");
}

static PyMethodDef encoder_methods[] = {
    {"encode", (PyCFunction)encoder_encode, METH_VARARGS,
     "encode(texts, max_len, out, prompt=None): fill out[len(texts), dim]"},
    {"max_len", (PyCFunction)encoder_max_len, METH_O, "max_len(n) -> the length encode uses (0: the model's limit)"},
    {NULL}};
static PyGetSetDef encoder_getset[] = {{"dim", (getter)encoder_get_dim, NULL, "embedding size", NULL},
                                       {"device", (getter)encoder_get_device, NULL, "cpu or cuda", NULL},
                                       {"dtype", (getter)encoder_get_dtype, NULL, "fp32 or bf16 (CPU)", NULL},
                                       {"truncated", (getter)encoder_get_truncated, NULL,
                                        "texts encode cut at max_len so far", NULL},
                                       {NULL}};

static PyTypeObject EncoderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "qac._qac.Encoder",
    .tp_basicsize = sizeof(EncoderObject),
    .tp_dealloc = (destructor)encoder_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Encoder(model, device='auto', dtype='fp32', threads=0, max_batch=0)",
    .tp_methods = encoder_methods,
    .tp_getset = encoder_getset,
    .tp_init = (initproc)encoder_init,
    .tp_new = PyType_GenericNew,
};

static qac_encoder *encoder_arg(PyObject *o) {
    if (!PyObject_TypeCheck(o, &EncoderType) || !((EncoderObject *)o)->e) {
        PyErr_SetString(PyExc_TypeError, "expected a qac._qac.Encoder");
        return NULL;
    }
    return ((EncoderObject *)o)->e;
}

/* ---- index build options ---- */

static int build_opts_get(qac_index_build_opts *o, PyObject *d) {
    *o = qac_index_default_build_opts();
    if (d == Py_None) return 0;
    if (!PyDict_Check(d)) return PyErr_SetString(PyExc_TypeError, "options must be a dict"), -1;
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d, &pos, &k, &v)) {
        const char *name = PyUnicode_AsUTF8(k);
        if (!name) return -1;
        if (!strcmp(name, "factory")) {
            if (!(o->factory = PyUnicode_AsUTF8(v))) return -1;
        } else if (!strcmp(name, "ids_path")) {
            if (!(o->ids_path = PyUnicode_AsUTF8(v))) return -1;
        } else if (!strcmp(name, "ids_corpus")) {
            if (!(o->ids_corpus = PyUnicode_AsUTF8(v))) return -1;
        } else if (!strcmp(name, "format")) {
            const char *f = PyUnicode_AsUTF8(v);
            if (!f || format_of(f, &o->format) < 0) return -1;
        } else if (!strcmp(name, "dtype")) {
            const char *f = PyUnicode_AsUTF8(v);
            if (!f) return -1;
            if (strcmp(f, "fp32") && strcmp(f, "fp16"))
                return PyErr_Format(PyExc_ValueError, "dtype must be fp32 or fp16, not %s", f), -1;
            o->fp16 = !strcmp(f, "fp16");
        } else {
            long long x = PyLong_AsLongLong(v);
            if (x == -1 && PyErr_Occurred()) return -1;
            if (!strcmp(name, "batch")) o->batch = (int)x;
            else if (!strcmp(name, "max_len")) o->max_len = (int)x;
            else if (!strcmp(name, "shard_size")) o->shard_size = (int)x;
            else if (!strcmp(name, "train_size")) o->train_size = x;
            else return PyErr_Format(PyExc_TypeError, "unknown index option '%s'", name), -1;
        }
    }
    o->ids_format = o->format; /* a corpus naming the vectors' ids is read like the corpus option says */
    return 0;
}

/* index_defaults() -> qac_index_default_build_opts() as the options dict */
static PyObject *py_index_defaults(PyObject *mod, PyObject *unused) {
    qac_index_build_opts o = qac_index_default_build_opts();
    return Py_BuildValue("{s:s, s:i, s:i, s:i, s:s, s:L, s:s}", "factory", o.factory ? o.factory : "Flat", "batch",
                         o.batch, "max_len", o.max_len, "shard_size", o.shard_size, "dtype", o.fp16 ? "fp16" : "fp32",
                         "train_size", (long long)o.train_size, "format", format_name(o.format));
}

/* index_build(out, encoder, corpus, options, progress) */
static PyObject *py_index_build(PyObject *mod, PyObject *args) {
    const char *out, *corpus;
    PyObject *enc_obj, *opts, *progress;
    if (!PyArg_ParseTuple(args, "sOsOO", &out, &enc_obj, &corpus, &opts, &progress)) return NULL;
    qac_encoder *enc = encoder_arg(enc_obj);
    qac_index_build_opts o;
    if (!enc || build_opts_get(&o, opts) < 0) return NULL;
    pycb cb = pycb_of(progress, 0);
    o.progress = progress_cb;
    o.progress_user = &cb;
    qac_status st;
    Py_BEGIN_ALLOW_THREADS st = qac_index_build(out, enc, corpus, &o);
    Py_END_ALLOW_THREADS return finish_call(&cb, st);
}

/* index_build_vectors(out, npy_path, model or None, options, progress) */
static PyObject *py_index_build_vectors(PyObject *mod, PyObject *args) {
    const char *out, *npy;
    PyObject *model, *opts, *progress;
    if (!PyArg_ParseTuple(args, "ssOOO", &out, &npy, &model, &opts, &progress)) return NULL;
    qac_index_build_opts o;
    if (build_opts_get(&o, opts) < 0) return NULL;
    if (model != Py_None) {
        if (!PyObject_TypeCheck(model, &ModelType)) return PyErr_Format(PyExc_TypeError, "model: expected a Model");
        o.vectors_model = ((ModelObject *)model)->m;
    }
    pycb cb = pycb_of(progress, 0);
    o.progress = progress_cb;
    o.progress_user = &cb;
    qac_status st;
    Py_BEGIN_ALLOW_THREADS st = qac_index_build_vectors(out, npy, &o);
    Py_END_ALLOW_THREADS return finish_call(&cb, st);
}

/* index_merge(out, parts_dir, options, progress) */
static PyObject *py_index_merge(PyObject *mod, PyObject *args) {
    const char *out, *parts;
    PyObject *opts, *progress;
    if (!PyArg_ParseTuple(args, "ssOO", &out, &parts, &opts, &progress)) return NULL;
    qac_index_build_opts o;
    if (build_opts_get(&o, opts) < 0) return NULL;
    pycb cb = pycb_of(progress, 0);
    o.progress = progress_cb;
    o.progress_user = &cb;
    qac_status st;
    Py_BEGIN_ALLOW_THREADS st = qac_index_merge(out, parts, &o);
    Py_END_ALLOW_THREADS return finish_call(&cb, st);
}

/* ---- IndexParts ---- */

typedef struct {
    PyObject_HEAD
    PyObject *encoder;
    qac_index_parts *p;
} PartsObject;

static void parts_dealloc(PartsObject *self) {
    qac_index_parts_free(self->p);
    Py_XDECREF(self->encoder);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int parts_init(PartsObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"dir", "encoder", "corpus", "max_len", "format", NULL};
    const char *dir, *corpus, *fmt = "auto";
    PyObject *enc_obj;
    int max_len = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sOs|is", kwlist, &dir, &enc_obj, &corpus, &max_len, &fmt)) return -1;
    qac_encoder *enc = encoder_arg(enc_obj);
    qac_text_format f;
    if (!enc || format_of(fmt, &f) < 0) return -1;
    qac_index_parts_free(self->p);
    self->p = NULL;
    Py_XDECREF(self->encoder);
    Py_INCREF(enc_obj);
    self->encoder = enc_obj;
    qac_status st;
    Py_BEGIN_ALLOW_THREADS st = qac_index_parts_open(&self->p, dir, enc, corpus, max_len, f);
    Py_END_ALLOW_THREADS if (st) return raise_qac(st), -1;
    return 0;
}

/* encode(rows int64, ids, texts, offsets uint64, lines int64) */
static PyObject *parts_encode(PartsObject *self, PyObject *args) {
    PyObject *rows_o, *ids_o, *texts_o, *offs_o, *lines_o;
    if (!PyArg_ParseTuple(args, "OOOOO", &rows_o, &ids_o, &texts_o, &offs_o, &lines_o)) return NULL;
    texts ids, tx;
    if (texts_get(&ids, ids_o, "ids") < 0) return NULL;
    if (texts_get(&tx, texts_o, "texts") < 0) {
        texts_free(&ids);
        return NULL;
    }
    Py_buffer rows = {0}, offs = {0}, lines = {0};
    PyObject *ret = NULL;
    int have_rows = 0, have_offs = 0, have_lines = 0;
    if (tx.n != ids.n) {
        PyErr_SetString(PyExc_ValueError, "ids and texts differ in length");
        goto done;
    }
    /* ids must be NUL-terminated: str's UTF-8 and bytes objects both are */
    if (buf_get(&rows, rows_o, 'q', 8, tx.n, 0, "rows") < 0) goto done;
    have_rows = 1;
    if (buf_get(&offs, offs_o, 'Q', 8, tx.n, 0, "offsets") < 0) goto done;
    have_offs = 1;
    if (buf_get(&lines, lines_o, 'q', 8, tx.n, 0, "lines") < 0) goto done;
    have_lines = 1;
    qac_status st;
    Py_BEGIN_ALLOW_THREADS st = qac_index_parts_encode(self->p, (int)tx.n, rows.buf, ids.ptr, tx.ptr, tx.len, offs.buf,
                                                       lines.buf);
    Py_END_ALLOW_THREADS if (st) raise_qac(st);
    else ret = Py_NewRef(Py_None);
done:
    if (have_rows) PyBuffer_Release(&rows);
    if (have_offs) PyBuffer_Release(&offs);
    if (have_lines) PyBuffer_Release(&lines);
    texts_free(&ids);
    texts_free(&tx);
    return ret;
}

static PyMethodDef parts_methods[] = {
    {"encode", (PyCFunction)parts_encode, METH_VARARGS, "encode(rows, ids, texts, offsets, lines): write parts"},
    {NULL}};

static PyTypeObject PartsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "qac._qac.IndexParts",
    .tp_basicsize = sizeof(PartsObject),
    .tp_dealloc = (destructor)parts_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "IndexParts(dir, encoder, corpus, max_len=0, format='auto')",
    .tp_methods = parts_methods,
    .tp_init = (initproc)parts_init,
    .tp_new = PyType_GenericNew,
};

/* ---- Index ---- */

typedef struct {
    PyObject_HEAD
    qac_index *ix;
} IndexObject;

static void index_dealloc(IndexObject *self) {
    qac_index_free(self->ix);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int index_init(IndexObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"dir", "device", "verify", NULL};
    const char *dir, *device = "auto", *verify = "full";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|ss", kwlist, &dir, &device, &verify)) return -1;
    qac_device dev;
    if (device_of(device, &dev) < 0) return -1;
    qac_index_verify v;
    qac_status st = qac_index_verify_parse(verify, &v);
    if (st) return raise_qac(st), -1;
    qac_index_free(self->ix);
    self->ix = NULL;
    Py_BEGIN_ALLOW_THREADS st = qac_index_open_verified(&self->ix, dir, dev, v);
    Py_END_ALLOW_THREADS if (st) return raise_qac(st), -1;
    return 0;
}

/* search(queries float32 [nq*dim], nq, k, scores float32 [nq*k], rows int64 [nq*k]) */
static PyObject *index_search(IndexObject *self, PyObject *args) {
    PyObject *q_o, *s_o, *r_o;
    Py_ssize_t nq;
    int k;
    if (!PyArg_ParseTuple(args, "OniOO", &q_o, &nq, &k, &s_o, &r_o)) return NULL;
    if (nq < 0 || nq > INT32_MAX || k < 1) return PyErr_Format(PyExc_ValueError, "bad nq %zd or k %d", nq, k);
    Py_buffer q, s, r;
    if (buf_get(&q, q_o, 'f', 4, nq * qac_index_dim(self->ix), 0, "queries") < 0) return NULL;
    if (buf_get(&s, s_o, 'f', 4, nq * k, 1, "scores") < 0) {
        PyBuffer_Release(&q);
        return NULL;
    }
    if (buf_get(&r, r_o, 'q', 8, nq * k, 1, "rows") < 0) {
        PyBuffer_Release(&q);
        PyBuffer_Release(&s);
        return NULL;
    }
    qac_status st = QAC_OK;
    if (nq > 0) {
        Py_BEGIN_ALLOW_THREADS st = qac_index_search(self->ix, q.buf, (int)nq, k, s.buf, r.buf);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&q);
    PyBuffer_Release(&s);
    PyBuffer_Release(&r);
    return none_or_raise(st);
}

static const char *index_row_docid(const void *ix, int64_t row) {
    return row >= 0 && row < qac_index_count(ix) ? qac_index_docid(ix, row) : NULL;
}

/* docids(rows int64 buffer) -> list of str ("" for rows < 0) */
static PyObject *index_docids(IndexObject *self, PyObject *arg) { return docids_of(arg, index_row_docid, self->ix); }

static PyObject *index_text(IndexObject *self, PyObject *arg) {
    long long row = PyLong_AsLongLong(arg);
    if (row == -1 && PyErr_Occurred()) return NULL;
    if (row < 0 || row >= qac_index_count(self->ix)) return PyErr_Format(PyExc_IndexError, "row %lld out of range", row);
    char *text = NULL;
    qac_status st;
    Py_BEGIN_ALLOW_THREADS st = qac_index_text(self->ix, (int64_t)row, &text);
    Py_END_ALLOW_THREADS if (st) return raise_qac(st);
    PyObject *o = str_or_empty(text);
    free(text);
    return o;
}

static PyObject *index_set_param(IndexObject *self, PyObject *args) {
    const char *name;
    double v;
    if (!PyArg_ParseTuple(args, "sd", &name, &v)) return NULL;
    return none_or_raise(qac_index_set_param(self->ix, name, v));
}

static PyObject *index_set_threads(IndexObject *self, PyObject *arg) {
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    return none_or_raise(qac_index_set_threads(self->ix, (int)n));
}

static PyObject *index_info(IndexObject *self, PyObject *unused) {
    const char *q, *p;
    PyObject *prompts = qac_index_prompts(self->ix, &q, &p)
                            ? Py_BuildValue("{s:N, s:N}", "query", str_or_empty(q), "passage", str_or_empty(p))
                            : Py_NewRef(Py_None); /* from vectors: not known */
    if (!prompts) return NULL;
    return Py_BuildValue("{s:L, s:i, s:s, s:s, s:N, s:N, s:N, s:O}", "count", (long long)qac_index_count(self->ix),
                         "dim", qac_index_dim(self->ix), "factory", qac_index_factory(self->ix), "fingerprint",
                         qac_index_model_fingerprint(self->ix), "model", str_or_empty(qac_index_model_name(self->ix)),
                         "model_dir", str_or_empty(qac_index_model_dir(self->ix)), "prompts", prompts, "on_gpu",
                         qac_index_on_gpu(self->ix) ? Py_True : Py_False);
}

/* check_prompts(query_prompt): MismatchError when the index wants another. */
static PyObject *index_check_prompts(IndexObject *self, PyObject *args) {
    const char *q;
    if (!PyArg_ParseTuple(args, "s", &q)) return NULL;
    return none_or_raise(qac_index_check_prompts(self->ix, q));
}

/* check_model(model): MismatchError when the index was built with another. */
static PyObject *index_check_model(IndexObject *self, PyObject *arg) {
    if (!PyObject_TypeCheck(arg, &ModelType)) return PyErr_Format(PyExc_TypeError, "expected a qac._qac.Model");
    return none_or_raise(qac_index_check_model(self->ix, ((ModelObject *)arg)->m));
}

static PyMethodDef index_methods[] = {
    {"search", (PyCFunction)index_search, METH_VARARGS, "search(queries, nq, k, scores, rows)"},
    {"docids", (PyCFunction)index_docids, METH_O, "docids(rows) -> list of str"},
    {"text", (PyCFunction)index_text, METH_O, "text(row) -> the passage text from the corpus"},
    {"set_param", (PyCFunction)index_set_param, METH_VARARGS, "set_param(name, value): nprobe, efSearch"},
    {"set_threads", (PyCFunction)index_set_threads, METH_O, "threads of the exact CPU scans"},
    {"info", (PyCFunction)index_info, METH_NOARGS, "count, dim, factory, fingerprint, model, model_dir, prompts, on_gpu"},
    {"check_prompts", (PyCFunction)index_check_prompts, METH_VARARGS,
     "check_prompts(query_prompt): MismatchError if the index was built for another"},
    {"check_model", (PyCFunction)index_check_model, METH_O,
     "check_model(model): MismatchError if the index was built with another model"},
    {NULL}};

static PyTypeObject IndexType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "qac._qac.Index",
    .tp_basicsize = sizeof(IndexObject),
    .tp_dealloc = (destructor)index_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Index(dir, device='auto', verify='full')",
    .tp_methods = index_methods,
    .tp_init = (initproc)index_init,
    .tp_new = PyType_GenericNew,
};

/* ---- BM25 ---- */

typedef struct {
    PyObject_HEAD
    qac_bm25 *b;
} BM25Object;

static void bm25_dealloc(BM25Object *self) {
    qac_bm25_free(self->b);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int bm25_init(BM25Object *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"dir", NULL};
    const char *dir;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s", kwlist, &dir)) return -1;
    qac_bm25_free(self->b);
    self->b = NULL;
    qac_status st;
    Py_BEGIN_ALLOW_THREADS st = qac_bm25_open(&self->b, dir);
    Py_END_ALLOW_THREADS if (st) return raise_qac(st), -1;
    return 0;
}

/* search(queries, k, k1, b, exact_lengths, scores float32 [nq*k], rows int64 [nq*k], counts int32 [nq]) */
static PyObject *bm25_search(BM25Object *self, PyObject *args) {
    PyObject *seq, *s_o, *r_o, *n_o;
    int k, exact;
    float k1, bb;
    if (!PyArg_ParseTuple(args, "OiffpOOO", &seq, &k, &k1, &bb, &exact, &s_o, &r_o, &n_o)) return NULL;
    if (k < 1) return PyErr_Format(PyExc_ValueError, "k must be >= 1");
    texts t;
    if (texts_get(&t, seq, "queries") < 0) return NULL;
    Py_buffer s, r, n;
    if (buf_get(&s, s_o, 'f', 4, t.n * k, 1, "scores") < 0) {
        texts_free(&t);
        return NULL;
    }
    if (buf_get(&r, r_o, 'q', 8, t.n * k, 1, "rows") < 0) {
        PyBuffer_Release(&s);
        texts_free(&t);
        return NULL;
    }
    if (buf_get(&n, n_o, 'i', 4, t.n, 1, "counts") < 0) {
        PyBuffer_Release(&s);
        PyBuffer_Release(&r);
        texts_free(&t);
        return NULL;
    }
    qac_bm25_params p = {k1, bb, exact};
    qac_status st = QAC_OK;
    /* the query text must be NUL-terminated: str's UTF-8 and bytes are */
    Py_BEGIN_ALLOW_THREADS for (Py_ssize_t i = 0; i < t.n && !st; i++) st =
        qac_bm25_search(self->b, t.ptr[i], &p, k, (float *)s.buf + i * k, (int64_t *)r.buf + i * k, (int *)n.buf + i);
    Py_END_ALLOW_THREADS PyBuffer_Release(&s);
    PyBuffer_Release(&r);
    PyBuffer_Release(&n);
    texts_free(&t);
    return none_or_raise(st);
}

static const char *bm25_row_docid(const void *b, int64_t row) { return qac_bm25_docid(b, row); }

static PyObject *bm25_docids(BM25Object *self, PyObject *arg) { return docids_of(arg, bm25_row_docid, self->b); }

static PyObject *bm25_count(BM25Object *self, PyObject *unused) { return PyLong_FromLongLong(qac_bm25_count(self->b)); }

static PyMethodDef bm25_methods[] = {
    {"search", (PyCFunction)bm25_search, METH_VARARGS, "search(queries, k, k1, b, exact, scores, rows, counts)"},
    {"docids", (PyCFunction)bm25_docids, METH_O, "docids(rows) -> list of str"},
    {"count", (PyCFunction)bm25_count, METH_NOARGS, "documents in the index"},
    {NULL}};

static PyTypeObject BM25Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "qac._qac.BM25",
    .tp_basicsize = sizeof(BM25Object),
    .tp_dealloc = (destructor)bm25_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "BM25(dir)",
    .tp_methods = bm25_methods,
    .tp_init = (initproc)bm25_init,
    .tp_new = PyType_GenericNew,
};

static PyObject *py_bm25_build(PyObject *mod, PyObject *args) {
    const char *out, *corpus;
    PyObject *progress;
    if (!PyArg_ParseTuple(args, "ssO", &out, &corpus, &progress)) return NULL;
    pycb cb = pycb_of(progress, 0);
    qac_bm25_build_opts o = {progress_cb, &cb};
    qac_status st;
    Py_BEGIN_ALLOW_THREADS st = qac_bm25_build(out, corpus, &o);
    Py_END_ALLOW_THREADS return finish_call(&cb, st);
}

/* ---- Reader ---- */

typedef struct {
    PyObject_HEAD
    qac_reader *r;
} ReaderObject;

static void reader_dealloc(ReaderObject *self) {
    qac_reader_free(self->r);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int reader_init(ReaderObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"path", "kind", "format", NULL};
    const char *path, *kind = "corpus", *fmt = "auto";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|ss", kwlist, &path, &kind, &fmt)) return -1;
    qac_text_format f;
    if (format_of(fmt, &f) < 0) return -1;
    if (strcmp(kind, "corpus") && strcmp(kind, "queries"))
        return PyErr_Format(PyExc_ValueError, "kind must be corpus or queries, not %s", kind), -1;
    qac_reader_free(self->r);
    self->r = NULL;
    qac_status st;
    Py_BEGIN_ALLOW_THREADS st =
        qac_reader_open(&self->r, path, !strcmp(kind, "queries") ? QAC_READ_QUERIES : QAC_READ_CORPUS, f);
    Py_END_ALLOW_THREADS if (st) return raise_qac(st), -1;
    return 0;
}

/* next record as (id, title, text, offset, line), or None at the end */
static PyObject *reader_next(ReaderObject *self, PyObject *unused) {
    qac_record rec;
    int got = 0;
    qac_status st = qac_reader_next(self->r, &rec, &got);
    if (st) return raise_qac(st);
    if (!got) Py_RETURN_NONE;
    return Py_BuildValue("(NNNKL)", str_or_empty(rec.id), str_or_empty(rec.title),
                         PyUnicode_DecodeUTF8(rec.text, (Py_ssize_t)rec.text_len, "replace"),
                         (unsigned long long)rec.offset, (long long)rec.line);
}

/* next_ids(n): up to n records' (id, offset, line) lists, for planning splits */
static PyObject *reader_next_ids(ReaderObject *self, PyObject *arg) {
    Py_ssize_t want = PyLong_AsSsize_t(arg);
    if (want < 0) return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_ValueError, "n must be >= 0");
    PyObject *ids = PyList_New(0), *offs = PyList_New(0), *lines = PyList_New(0);
    qac_status st = QAC_OK;
    for (Py_ssize_t i = 0; ids && offs && lines && i < want; i++) {
        qac_record rec;
        int got = 0;
        if ((st = qac_reader_next(self->r, &rec, &got)) || !got) break;
        PyObject *a = str_or_empty(rec.id), *b = PyLong_FromUnsignedLongLong(rec.offset),
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
        return st ? raise_qac(st) : NULL;
    }
    return Py_BuildValue("(NNN)", ids, offs, lines);
}

static PyObject *reader_seek(ReaderObject *self, PyObject *args) {
    unsigned long long off;
    long long line;
    if (!PyArg_ParseTuple(args, "KL", &off, &line)) return NULL;
    return none_or_raise(qac_reader_seek(self->r, off, line));
}

static PyObject *reader_format(ReaderObject *self, PyObject *unused) {
    return PyUnicode_FromString(format_name(qac_reader_format(self->r)));
}

static PyMethodDef reader_methods[] = {
    {"next", (PyCFunction)reader_next, METH_NOARGS, "the next (id, title, text, offset, line), or None"},
    {"next_ids", (PyCFunction)reader_next_ids, METH_O, "next_ids(n) -> (ids, offsets, lines) of up to n records"},
    {"seek", (PyCFunction)reader_seek, METH_VARARGS, "seek(offset, line): continue from a record's start"},
    {"format", (PyCFunction)reader_format, METH_NOARGS, "the detected format"},
    {NULL}};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "qac._qac.Reader",
    .tp_basicsize = sizeof(ReaderObject),
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Reader(path, kind='corpus', format='auto')",
    .tp_methods = reader_methods,
    .tp_init = (initproc)reader_init,
    .tp_new = PyType_GenericNew,
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

static PyObject *py_read_qrels(PyObject *mod, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    qac_qrels *q = NULL;
    qac_status st;
    Py_BEGIN_ALLOW_THREADS st = qac_qrels_load(&q, path, QAC_QRELS_AUTO);
    Py_END_ALLOW_THREADS if (st) return raise_qac(st);
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

static PyObject *py_read_run(PyObject *mod, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    qac_run *r = NULL;
    qac_status st;
    Py_BEGIN_ALLOW_THREADS st = qac_run_load(&r, path);
    Py_END_ALLOW_THREADS if (st) return raise_qac(st);
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
static PyObject *py_evaluate(PyObject *mod, PyObject *args) {
    const char *qp, *rp;
    PyObject *measures;
    long max_docs, rel_level;
    int complete;
    if (!PyArg_ParseTuple(args, "ssOllp", &qp, &rp, &measures, &max_docs, &rel_level, &complete)) return NULL;
    texts m;
    if (texts_get(&m, measures, "measures") < 0) return NULL;
    qac_qrels *q = NULL;
    qac_run *r = NULL;
    qac_eval_result *res = NULL;
    qac_eval_params p = {max_docs, rel_level, complete};
    qac_status st;
    Py_BEGIN_ALLOW_THREADS st = qac_qrels_load(&q, qp, QAC_QRELS_AUTO);
    if (!st) st = qac_run_load(&r, rp);
    if (!st) st = qac_eval_compute(&res, q, r, m.ptr, (int)m.n, &p);
    Py_END_ALLOW_THREADS texts_free(&m);
    PyObject *out = st ? raise_qac(st) : PyList_New((Py_ssize_t)qac_eval_num_rows(res));
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
static PyObject *py_write_run(PyObject *mod, PyObject *args) {
    const char *path, *run_id;
    PyObject *qids_o, *docids_o, *s_o;
    int k;
    if (!PyArg_ParseTuple(args, "sOOOis", &path, &qids_o, &docids_o, &s_o, &k, &run_id)) return NULL;
    texts qids;
    if (texts_get(&qids, qids_o, "qids") < 0) return NULL;
    PyObject *lists = PySequence_Tuple(docids_o);
    Py_buffer sc;
    if (!lists || PyTuple_GET_SIZE(lists) != qids.n ||
        buf_get(&sc, s_o, 'f', 4, qids.n * (Py_ssize_t)k, 0, "scores") < 0) {
        if (lists && !PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "one docid list per query");
        Py_XDECREF(lists);
        texts_free(&qids);
        return NULL;
    }
    qac_atomic_file af;
    qac_status st = qac_atomic_open(&af, path);
    PyObject *ret = NULL;
    for (Py_ssize_t q = 0; !st && q < qids.n; q++) {
        texts d;
        if (texts_get(&d, PyTuple_GET_ITEM(lists, q), "docids") < 0) break;
        if (d.n > k) PyErr_SetString(PyExc_ValueError, "more docids than k");
        else st = qac_run_write(af.f, qids.ptr[q], d.ptr, (const float *)sc.buf + q * k, (int)d.n, run_id);
        texts_free(&d);
        if (PyErr_Occurred()) break;
    }
    if (!st && !PyErr_Occurred()) {
        if ((st = qac_atomic_commit(&af))) raise_qac(st);
        else ret = Py_NewRef(Py_None);
    } else {
        if (st) raise_qac(st);
        qac_atomic_abort(&af);
    }
    PyBuffer_Release(&sc);
    Py_DECREF(lists);
    texts_free(&qids);
    return ret;
}

/* ---- training ---- */

/* Options of a training struct, by the Python keyword's name. */
typedef enum { F_INT, F_LONG, F_DOUBLE, F_FLOAT, F_U64, F_BOOL, F_STR } ftype;
typedef struct field {
    const char *name;
    ftype type;
    size_t off;
} field;

static int fields_set(void *base, const field *table, PyObject *d, PyObject *keep) {
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d, &pos, &k, &v)) {
        const char *name = PyUnicode_AsUTF8(k);
        if (!name) return -1;
        const field *f = table;
        while (f->name && strcmp(f->name, name)) f++;
        if (!f->name) continue; /* handled by the caller */
        char *p = (char *)base + f->off;
        switch (f->type) {
        case F_INT: *(int *)p = (int)PyLong_AsLong(v); break;
        case F_LONG: *(long *)p = PyLong_AsLong(v); break;
        case F_U64: *(uint64_t *)p = (uint64_t)PyLong_AsUnsignedLongLong(v); break;
        case F_DOUBLE: *(double *)p = PyFloat_AsDouble(v); break;
        case F_FLOAT: *(float *)p = (float)PyFloat_AsDouble(v); break;
        case F_BOOL: *(int *)p = PyObject_IsTrue(v); break;
        case F_STR:
            if (v == Py_None) *(const char **)p = NULL;
            else if ((*(const char **)p = PyUnicode_AsUTF8(v)) && PyList_Append(keep, v) < 0) return -1;
            break;
        }
        if (PyErr_Occurred()) {
            PyErr_Format(PyExc_TypeError, "bad value for option '%s'", name);
            return -1;
        }
    }
    return 0;
}

static int choice(PyObject *d, const char *key, const char *const *names, int n, int *out) {
    PyObject *v = PyDict_GetItemString(d, key);
    if (!v) return 0;
    const char *s = PyUnicode_AsUTF8(v);
    if (!s) return -1;
    for (int i = 0; i < n; i++)
        if (!strcmp(s, names[i])) {
            *out = i;
            return 0;
        }
    PyErr_Format(PyExc_ValueError, "bad value '%s' for option '%s'", s, key);
    return -1;
}

static int train_common(qac_train_opts *t, PyObject *d) {
    static const char *sched[] = {"linear", "cosine", "constant"}, *sim[] = {"dot", "cos"},
                      *dev[] = {"auto", "cpu", "cuda"}, *prec[] = {"fp32", "fp16", "bf16"};
    int v;
    v = (int)t->schedule;
    if (choice(d, "schedule", sched, 3, &v) < 0) return -1;
    t->schedule = (qac_schedule)v;
    v = (int)t->sim;
    if (choice(d, "sim", sim, 2, &v) < 0) return -1;
    t->sim = (qac_similarity)v;
    v = (int)t->device;
    if (choice(d, "device", dev, 3, &v) < 0) return -1;
    t->device = v == QAC_DEVICE_CUDA ? QAC_DEVICE_CUDA : QAC_DEVICE_CPU;
    v = (int)t->gpu_precision;
    if (choice(d, "train_precision", prec, 3, &v) < 0) return -1;
    t->gpu_precision = (qac_precision)v;
    PyObject *dr = PyDict_GetItemString(d, "dropout");
    if (dr) {
        double x = PyFloat_AsDouble(dr);
        if (x == -1.0 && PyErr_Occurred()) return -1;
        t->hidden_dropout = t->attn_dropout = (float)x;
    }
    return 0;
}

#define TRAIN_FIELDS(S)                                                                                                \
    {"lr", F_DOUBLE, offsetof(S, train.lr)}, {"weight_decay", F_DOUBLE, offsetof(S, train.weight_decay)},             \
        {"max_grad_norm", F_DOUBLE, offsetof(S, train.max_grad_norm)},                                                 \
        {"warmup_steps", F_LONG, offsetof(S, train.warmup_steps)}, {"warmup_ratio", F_DOUBLE, offsetof(S, warmup_ratio)}, \
        {"recompute", F_BOOL, offsetof(S, train.recompute)}, {"seed", F_U64, offsetof(S, train.seed)},                 \
        {"threads", F_INT, offsetof(S, train.threads)}, {"save_every", F_LONG, offsetof(S, save_every)},               \
        {"keep", F_INT, offsetof(S, keep)}, {"resume", F_BOOL, offsetof(S, resume)}

static const field ft_fields[] = {
    TRAIN_FIELDS(qac_finetune_opts),
    {"steps", F_LONG, offsetof(qac_finetune_opts, train.total_steps)},
    {"epochs", F_DOUBLE, offsetof(qac_finetune_opts, epochs)},
    {"batch", F_INT, offsetof(qac_finetune_opts, queries_per_batch)},
    {"n_passages", F_INT, offsetof(qac_finetune_opts, n_passages)},
    {"q_max_len", F_INT, offsetof(qac_finetune_opts, q_max)},
    {"p_max_len", F_INT, offsetof(qac_finetune_opts, p_max)},
    {"tau", F_FLOAT, offsetof(qac_finetune_opts, train.tau)},
    {"alpha", F_FLOAT, offsetof(qac_finetune_opts, train.pair_alpha)},
    {"chunk", F_INT, offsetof(qac_finetune_opts, train.chunk)},
    {"dev_queries", F_STR, offsetof(qac_finetune_opts, dev_queries)},
    {"dev_qrels", F_STR, offsetof(qac_finetune_opts, dev_qrels)},
    {"dev_corpus", F_STR, offsetof(qac_finetune_opts, dev_corpus)},
    {"dev_depth", F_INT, offsetof(qac_finetune_opts, dev_depth)},
    {"dump_batches", F_STR, offsetof(qac_finetune_opts, dump_batches)},
    {"dry_run", F_BOOL, offsetof(qac_finetune_opts, dry_run)},
    {NULL}};

static const field pt_fields[] = {
    TRAIN_FIELDS(qac_pretrain_opts),
    {"steps", F_LONG, offsetof(qac_pretrain_opts, train.total_steps)},
    {"batch", F_INT, offsetof(qac_pretrain_opts, batch)},
    {"mask_rate", F_FLOAT, offsetof(qac_pretrain_opts, obj.mask_rate)},
    {"enc_mask_rate", F_FLOAT, offsetof(qac_pretrain_opts, obj.enc_mask_rate)},
    {"dec_mask_rate", F_FLOAT, offsetof(qac_pretrain_opts, obj.dec_mask_rate)},
    {"skip_from", F_INT, offsetof(qac_pretrain_opts, obj.skip_from)},
    {"head_layers", F_INT, offsetof(qac_pretrain_opts, obj.head_layers)},
    {"qgen_window", F_INT, offsetof(qac_pretrain_opts, obj.window)},
    {"tau", F_FLOAT, offsetof(qac_pretrain_opts, obj.tau)},
    {"alpha", F_FLOAT, offsetof(qac_pretrain_opts, obj.alpha)},
    {"max_len", F_INT, offsetof(qac_pretrain_opts, data.max_len)},
    {"query_max_len", F_INT, offsetof(qac_pretrain_opts, data.query_max_len)},
    {"docs", F_STR, offsetof(qac_pretrain_opts, data.docs_path)},
    {NULL}};

static int ft_on_step(void *user, const qac_ft_progress *p) {
    return cb_event(user, "{s:s, s:l, s:l, s:d, s:d, s:d, s:d, s:d, s:d, s:l, s:i}", "event", "step", "step", p->step,
                    "total", p->total, "epoch", p->epoch, "loss", p->loss, "lr", p->lr, "grad_norm", p->grad_norm,
                    "seconds", p->seconds, "elapsed", p->elapsed, "steps_run", p->steps_run, "passages", p->passages);
}

static void ft_on_dev(void *user, const qac_ft_dev *r) {
    pycb *c = user;
    if (c->fn)
        cb_event(c, "{s:s, s:l, s:d, s:d, s:d, s:d, s:d}", "event", "dev", "step", r->step, "ndcg_cut_10", r->ndcg10,
                 "map", r->map, "recall_100", r->recall100, "recip_rank_10", r->mrr10, "seconds", r->seconds);
}

/* finetune(model_dir or None, sources dict, options dict, callback) -> (total, resumed_at) */
static PyObject *py_finetune(PyObject *mod, PyObject *args) {
    PyObject *model_o, *src_d, *opt_d, *callback;
    if (!PyArg_ParseTuple(args, "OO!O!O", &model_o, &PyDict_Type, &src_d, &PyDict_Type, &opt_d, &callback)) return NULL;
    PyObject *keep = PyList_New(0);
    if (!keep) return NULL;
    qac_finetune_opts fo;
    qac_finetune_opts_default(&fo);
    if (fields_set(&fo, ft_fields, opt_d, keep) < 0 || train_common(&fo.train, opt_d) < 0) {
        Py_DECREF(keep);
        return NULL;
    }
    PyObject *out_o = PyDict_GetItemString(opt_d, "out");
    fo.out_dir = out_o ? PyUnicode_AsUTF8(out_o) : NULL;
    if (!fo.out_dir) {
        Py_DECREF(keep);
        return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_ValueError, "finetune: out is required");
    }
    /* sources: tevatron (list), triples, qrels, queries, corpus, title_join */
    texts tev = {0};
    PyObject *tev_o = PyDict_GetItemString(src_d, "tevatron");
    if (tev_o && tev_o != Py_None && texts_get(&tev, tev_o, "train") < 0) {
        Py_DECREF(keep);
        return NULL;
    }
    static const char *joins[] = {"sep", "space"};
    int join = 0;
    PyObject *ps[4];
    const char *names[4] = {"triples", "qrels", "queries", "corpus"}, *vals[4] = {0};
    int bad = choice(src_d, "title_join", joins, 2, &join) < 0;
    for (int i = 0; i < 4 && !bad; i++) {
        ps[i] = PyDict_GetItemString(src_d, names[i]);
        if (ps[i] && ps[i] != Py_None && !(vals[i] = PyUnicode_AsUTF8(ps[i]))) bad = 1;
    }
    char buf[4096];
    const char *model_dir = bad ? NULL : model_dir_arg(model_o, buf, sizeof buf);
    if (!model_dir) {
        texts_free(&tev);
        Py_DECREF(keep);
        return NULL;
    }
    pycb cb = pycb_of(callback, 1);
    fo.on_step = ft_on_step;
    fo.on_dev = ft_on_dev;
    fo.user = &cb;
    qac_ft_sources src = {tev.ptr, (int)tev.n, vals[0], vals[1], vals[2], vals[3], (qac_title_join)join};
    qac_ft_data *d = NULL;
    qac_model *m = NULL;
    long total = 0, from = 0;
    qac_status st;
    Py_BEGIN_ALLOW_THREADS st = qac_ft_data_load(&d, &src, fo.n_passages);
    if (!st) st = qac_model_load(&m, model_dir);
    if (!st) st = qac_finetune_run(m, d, &fo, &total, &from);
    qac_model_free(m);
    qac_ft_data_free(d);
    Py_END_ALLOW_THREADS texts_free(&tev);
    Py_DECREF(keep);
    PyObject *r = finish_call(&cb, st);
    if (!r) return NULL;
    Py_DECREF(r);
    return Py_BuildValue("(ll)", total, from);
}

static int pt_on_step(void *user, const qac_pt_progress *p) {
    return cb_event(user, "{s:s, s:l, s:l, s:d, s:d, s:d, s:d, s:d, s:d, s:d, s:d, s:d, s:l, s:i, s:l}", "event",
                    "step", "step", p->step, "total", p->total, "loss", p->loss, "mlm", p->mlm, "head", p->head,
                    "contrastive", p->contrastive, "span_frac", p->span_frac, "lr", p->lr, "grad_norm", p->grad_norm,
                    "seconds", p->seconds, "elapsed", p->elapsed, "steps_run", p->steps_run, "pairs", p->pairs,
                    "tokens", p->tokens);
}

static void pt_on_note(void *user, const char *line) {
    pycb *c = user;
    if (c->fn) cb_event(c, "{s:s, s:s}", "event", "note", "note", line);
}

/* pretrain(model_dir or None, options dict, callback) -> resumed_at */
static PyObject *py_pretrain(PyObject *mod, PyObject *args) {
    PyObject *model_o, *opt_d, *callback;
    if (!PyArg_ParseTuple(args, "OO!O", &model_o, &PyDict_Type, &opt_d, &callback)) return NULL;
    PyObject *keep = PyList_New(0);
    if (!keep) return NULL;
    qac_pretrain_opts po;
    qac_pretrain_opts_default(&po);
    int bad = fields_set(&po, pt_fields, opt_d, keep) < 0 || train_common(&po.train, opt_d) < 0;
    const char *strs[7] = {0}, *keys[7] = {"objective", "pooling", "normalize", "context", "curriculum", "data", "out"};
    for (int i = 0; i < 7 && !bad; i++) {
        PyObject *v = PyDict_GetItemString(opt_d, keys[i]);
        if (v && v != Py_None && !(strs[i] = PyUnicode_AsUTF8(v))) bad = 1;
    }
    qac_status st = QAC_OK;
    if (!bad) {
        if (!strs[5] || !strs[6]) {
            PyErr_SetString(PyExc_ValueError, "pretrain: data and out are required");
            bad = 1;
        } else if ((strs[0] && (st = qac_pt_objective_parse(&po.obj.objective, strs[0]))) ||
                   (st = qac_pt_pooling_parse(&po.obj.pooling, &po.obj.normalize, strs[1], strs[2])) ||
                   (st = qac_pt_context_parse(&po.context, strs[3] ? strs[3] : "query", strs[4]))) {
            raise_qac(st);
            bad = 1;
        }
    }
    char buf[4096];
    const char *model_dir = bad ? NULL : model_dir_arg(model_o, buf, sizeof buf);
    if (!model_dir) {
        Py_DECREF(keep);
        return NULL;
    }
    po.data.path = strs[5];
    po.out_dir = strs[6];
    po.data.threads = po.train.threads;
    pycb cb = pycb_of(callback, 1);
    po.data.progress = progress_cb;
    po.data.progress_user = &cb;
    po.on_note = pt_on_note;
    po.on_step = pt_on_step;
    po.user = &cb;
    qac_model *m = NULL;
    long from = 0;
    Py_BEGIN_ALLOW_THREADS st = qac_model_load(&m, model_dir);
    if (!st) st = qac_pretrain_run(m, &po, &from);
    qac_model_free(m);
    Py_END_ALLOW_THREADS Py_DECREF(keep);
    PyObject *r = finish_call(&cb, st);
    if (!r) return NULL;
    Py_DECREF(r);
    return PyLong_FromLong(from);
}

/* ---- module ---- */

static PyObject *py_default_model_dir(PyObject *mod, PyObject *unused) {
    char buf[4096];
    qac_status st = qac_default_model_dir(buf, sizeof buf);
    return st ? raise_qac(st) : PyUnicode_FromString(buf);
}

static PyObject *py_cuda_available(PyObject *mod, PyObject *unused) { return PyBool_FromLong(qac_cuda_available()); }

static PyObject *py_cpu_isa(PyObject *mod, PyObject *args) {
    const char *name = NULL;
    if (!PyArg_ParseTuple(args, "|z", &name)) return NULL;
    if (name) {
        qac_status st = qac_cpu_isa_select(name);
        if (st) return raise_qac(st);
    }
    return PyUnicode_FromString(qac_cpu_isa_name(qac_cpu_isa()));
}

static PyMethodDef module_methods[] = {
    {"index_build", py_index_build, METH_VARARGS, "index_build(out, encoder, corpus, options, progress)"},
    {"index_build_vectors", py_index_build_vectors, METH_VARARGS,
     "index_build_vectors(out, npy_path, model, options, progress)"},
    {"index_merge", py_index_merge, METH_VARARGS, "index_merge(out, parts_dir, options, progress)"},
    {"index_defaults", py_index_defaults, METH_NOARGS, "the index build options' defaults, as a dict"},
    {"bm25_build", py_bm25_build, METH_VARARGS, "bm25_build(out, corpus, progress)"},
    {"read_qrels", py_read_qrels, METH_VARARGS, "read_qrels(path) -> {qid: {docid: rel}}"},
    {"read_run", py_read_run, METH_VARARGS, "read_run(path) -> {qid: {docid: score}}"},
    {"write_run", py_write_run, METH_VARARGS, "write_run(path, qids, docids, scores, k, run_id)"},
    {"evaluate", py_evaluate, METH_VARARGS, "evaluate(qrels, run, measures, max_docs, rel_level, complete) -> rows"},
    {"finetune", py_finetune, METH_VARARGS, "finetune(model, sources, options, callback) -> (total, resumed_at)"},
    {"pretrain", py_pretrain, METH_VARARGS, "pretrain(model, options, callback) -> resumed_at"},
    {"default_model_dir", py_default_model_dir, METH_NOARGS, "the default model's directory"},
    {"cuda_available", py_cuda_available, METH_NOARGS, "whether a usable CUDA GPU and CUDA support exist"},
    {"cpu_isa", py_cpu_isa, METH_VARARGS, "cpu_isa(name=None): select (auto|avx512|avx2|generic) and return the path"},
    {NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "qac._qac", "libqac bindings (use the qac package)",
                                        -1, module_methods, NULL, NULL, NULL, NULL};

static int add_error(PyObject *m, const char *name, qac_status st, PyObject *extra) {
    char full[64];
    snprintf(full, sizeof full, "qac.%s", name);
    PyObject *bases = extra ? PyTuple_Pack(2, err_base, extra) : PyTuple_Pack(1, err_base);
    if (!bases) return -1;
    PyObject *cls = PyErr_NewException(full, bases, NULL);
    Py_DECREF(bases);
    if (!cls) return -1;
    if (st) err_by_status[st] = cls;
    return PyModule_AddObjectRef(m, name, cls);
}

PyMODINIT_FUNC PyInit__qac(void) {
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    PyTypeObject *types[] = {&ModelType, &EncoderType, &PartsType, &IndexType, &BM25Type, &ReaderType};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (PyType_Ready(types[i]) < 0 || PyModule_AddObjectRef(m, strrchr(types[i]->tp_name, '.') + 1,
                                                                 (PyObject *)types[i]) < 0)
            goto fail;
    err_base = PyErr_NewExceptionWithDoc("qac.QacError", "An error reported by qac; .status names its kind.", NULL,
                                         NULL);
    if (!err_base || PyModule_AddObjectRef(m, "QacError", err_base) < 0) goto fail;
    if (add_error(m, "InvalidError", QAC_ERR_INVALID, PyExc_ValueError) < 0 ||
        add_error(m, "QacIOError", QAC_ERR_IO, PyExc_OSError) < 0 ||
        add_error(m, "QacMemoryError", QAC_ERR_NOMEM, PyExc_MemoryError) < 0 ||
        add_error(m, "FormatError", QAC_ERR_FORMAT, PyExc_ValueError) < 0 ||
        add_error(m, "UnsupportedError", QAC_ERR_UNSUPPORTED, PyExc_ValueError) < 0 ||
        add_error(m, "NotFoundError", QAC_ERR_NOT_FOUND, PyExc_FileNotFoundError) < 0 ||
        add_error(m, "BusyError", QAC_ERR_BUSY, NULL) < 0 ||
        add_error(m, "CancelledError", QAC_ERR_CANCELLED, NULL) < 0 ||
        add_error(m, "MismatchError", QAC_ERR_MISMATCH, PyExc_ValueError) < 0)
        goto fail;
    if (PyModule_AddStringConstant(m, "version", QAC_VERSION_STRING) < 0) goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
