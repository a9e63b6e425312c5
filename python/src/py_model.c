/* Model (a loaded checkpoint: info, tokenizer, prompts) and Encoder (texts
 * to vectors). An Encoder borrows its Model's handle for its life; its
 * encode holds the encoder exclusively, since the library's encoder keeps
 * token and activation buffers between calls (and drives one thread pool):
 * calls from several threads run one after another. What getters report is
 * copied at __init__, so they never wait for an encode in flight. */
#include <string.h>

#include "qac_python.h"
#include "qac_tokenizer.h"

#define MAX_THREADS 1024  /* the thread pool's limit */
#define MAX_BATCH 4096    /* sequences per forward pass, as qac encode --batch */

/* ---- Model ---- */

typedef struct {
    qpy_obj base;
    qac_model *m;
} ModelObject;

static void model_free_handle(qpy_obj *o) {
    ModelObject *self = (ModelObject *)o;
    qac_model *m = self->m;
    self->m = NULL;
    Py_BEGIN_ALLOW_THREADS
    qac_model_free(m);
    Py_END_ALLOW_THREADS
}

static PyObject *model_new(PyTypeObject *t, PyObject *a, PyObject *k) { return qpy_new(t, model_free_handle); }

static void model_dealloc(ModelObject *self) { qpy_dealloc(&self->base); }

static int model_init(ModelObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"path", NULL};
    PyObject *path = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", kwlist, &path)) return -1;
    char buf[4096];
    const char *dir = qpy_model_dir_arg(path, buf, sizeof buf);
    if (!dir || qpy_init_begin(&self->base) < 0) return -1;
    qac_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qac_model_load(&self->m, dir);
    Py_END_ALLOW_THREADS
    if (st) qpy_raise(st);
    return qpy_init_end(&self->base, !st);
}

qac_model *qpy_model_arg(PyObject *o) {
    if (!PyObject_TypeCheck(o, &qpy_ModelType)) {
        PyErr_Format(PyExc_TypeError, "expected a qac._qac.Model, not %.80s", Py_TYPE(o)->tp_name);
        return NULL;
    }
    return qpy_check_open((qpy_obj *)o) < 0 ? NULL : ((ModelObject *)o)->m;
}

/* The model's prompts as `qac info --json` gives them. */
static PyObject *model_prompts(const qac_model *m) {
    PyObject *named = PyDict_New();
    for (int i = 0; named && i < m->n_prompts; i++) {
        PyObject *v = qpy_str_or_empty(m->prompt_texts[i]);
        if (!v || PyDict_SetItemString(named, m->prompt_names[i], v) < 0) Py_CLEAR(named);
        Py_XDECREF(v);
    }
    if (!named) return NULL;
    return Py_BuildValue("{s:N, s:N, s:s, s:N, s:O}", "query", qpy_str_or_empty(qac_model_query_prompt(m)),
                         "passage", qpy_str_or_empty(qac_model_passage_prompt(m)), "default_prompt_name",
                         m->default_prompt_name ? m->default_prompt_name : "", "named", named, "include_prompt",
                         m->include_prompt ? Py_True : Py_False);
}

static PyObject *model_info(ModelObject *self, PyObject *unused) {
    const qac_model *m = qpy_model_arg((PyObject *)self);
    if (!m) return NULL;
    const qac_bert_config *c = &m->cfg;
    PyObject *prompts = model_prompts(m);
    if (!prompts) return NULL;
    return Py_BuildValue("{s:s, s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:O, s:i, s:n, s:s, s:i, s:N}",
                         "name", m->name, "path", m->dir ? m->dir : "", "fingerprint", m->fingerprint, "family",
                         qac_family_name(c->family), "dim", c->hidden_size,
                         "layers", c->num_layers, "heads", c->num_heads, "intermediate_size", c->intermediate_size,
                         "vocab_size", c->vocab_size, "max_position", c->max_position, "max_seq_len",
                         m->max_seq_len, "pooling", qac_pooling_name(m->pooling), "normalize",
                         m->normalize ? Py_True : Py_False, "type_vocab_size", c->type_vocab_size, "parameters",
                         (Py_ssize_t)m->n_params, "tokenizer",
                         m->tok ? qac_tokenizer_kind_name(m->tok) : "none",
                         "vocab", m->tok ? qac_tokenizer_vocab_size(m->tok) : 0, "prompts", prompts);
}

/* set_prompts(query, passage): None leaves one as it is, "" means none.
 * Encoders and builds read the prompts without the GIL: only a model no
 * encoder borrows may change them. */
static PyObject *model_set_prompts(ModelObject *self, PyObject *args) {
    const char *q = NULL, *p = NULL;
    if (!PyArg_ParseTuple(args, "zz", &q, &p)) return NULL;
    qac_model *m = qpy_model_arg((PyObject *)self);
    if (!m) return NULL;
    if (self->base.users)
        return PyErr_Format(qpy_err_by_status[QAC_ERR_BUSY],
                            "set_prompts: %d encoder(s) use this model; set the prompts before making them",
                            self->base.users);
    return qpy_none_or_raise(qac_model_override_prompts(m, q, p));
}

/* One tokenize pass into a buffer of cap ids; *n the ids the text needs. */
static qac_status tokenize_into(const qac_model *m, const Py_buffer *text, const char *prompt, int specials, int ml,
                                int32_t *ids, int cap, int *n) {
    if (prompt) return qac_model_encode_prompted(m, prompt, text->buf, (size_t)text->len, ml, ids, n);
    if (specials) return qac_tokenizer_encode(m->tok, text->buf, (size_t)text->len, ml, ids, n);
    return qac_tokenizer_tokenize(m->tok, text->buf, (size_t)text->len, ids, cap, n);
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
    const qac_model *m = qpy_model_arg((PyObject *)self);
    if (!m) {
        PyBuffer_Release(&text);
        return NULL;
    }
    qac_status st = QAC_OK;
    int n = 0, ml = max_len, cap = 64;
    if (prompt || specials) {
        if (ml == 0 && !prompt) { /* no limit: room for the whole text */
            if (!(st = qac_tokenizer_tokenize(m->tok, text.buf, (size_t)text.len, NULL, 0, &ml)))
                ml += qac_tokenizer_num_special(m->tok, 0) > 2 ? qac_tokenizer_num_special(m->tok, 0) : 2;
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
        st = tokenize_into(m, &text, prompt, specials, ml, ids, cap, &n);
        if (st || n <= cap) break;
        cap = n;
    }
    PyBuffer_Release(&text);
    if (!st && !prompt && !specials && max_len > 0 && n > max_len) n = max_len;
    PyObject *out = st ? qpy_raise(st) : PyList_New(n);
    for (int i = 0; out && i < n; i++) PyList_SET_ITEM(out, i, PyLong_FromLong(ids[i]));
    PyMem_Free(ids);
    return out;
}

static PyObject *model_id_to_token(ModelObject *self, PyObject *arg) {
    long id = PyLong_AsLong(arg);
    if (id == -1 && PyErr_Occurred()) return NULL;
    const qac_model *m = qpy_model_arg((PyObject *)self);
    if (!m) return NULL;
    const char *s = id < INT32_MIN || id > INT32_MAX ? NULL : qac_tokenizer_id_to_token(m->tok, (int32_t)id);
    if (!s) return PyErr_Format(PyExc_IndexError, "token id %ld out of range", id);
    return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "replace");
}

static PyObject *model_token_to_id(ModelObject *self, PyObject *arg) {
    const qac_model *m = qpy_model_arg((PyObject *)self);
    const char *s = m ? PyUnicode_AsUTF8(arg) : NULL;
    return s ? PyLong_FromLong(qac_tokenizer_token_to_id(m->tok, s)) : NULL;
}

static PyMethodDef model_methods[] = {
    {"info", (PyCFunction)model_info, METH_NOARGS, "The model's configuration as a dict."},
    {"tokenize", (PyCFunction)model_tokenize, METH_VARARGS,
     "tokenize(text, max_len, specials, prompt=None) -> list of ids"},
    {"set_prompts", (PyCFunction)model_set_prompts, METH_VARARGS,
     "set_prompts(query, passage): replace the query / passage prompt (None: keep); before any encoder uses it"},
    {"id_to_token", (PyCFunction)model_id_to_token, METH_O, "the token string of an id"},
    {"token_to_id", (PyCFunction)model_token_to_id, METH_O, "the id of a token string, -1 if absent"},
    QPY_LIFECYCLE_METHODS,
    {NULL}};

PyTypeObject qpy_ModelType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "qac._qac.Model",
    .tp_basicsize = sizeof(ModelObject),
    .tp_dealloc = (destructor)model_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Model(path=None): a loaded BERT checkpoint (None: the default model).",
    .tp_methods = model_methods,
    .tp_init = (initproc)model_init,
    .tp_new = model_new,
};

/* ---- Encoder ---- */

typedef struct {
    qpy_obj base;
    PyObject *model; /* the ModelObject whose handle it borrows */
    qac_encoder *e;
    /* fixed at __init__ */
    int dim;
    qac_device device;
    qac_precision dtype;
    const char *note;    /* qac_encoder_cpu_note: why dtype is not the one asked for, or NULL */
    long long truncated; /* qac_encoder_truncated after the last encode */
} EncoderObject;

static void encoder_free_handle(qpy_obj *o) {
    EncoderObject *self = (EncoderObject *)o;
    qac_encoder *e = self->e;
    self->e = NULL;
    Py_BEGIN_ALLOW_THREADS
    qac_encoder_free(e);
    Py_END_ALLOW_THREADS
    if (self->model) {
        qpy_give_back((qpy_obj *)self->model);
        Py_CLEAR(self->model);
    }
}

static PyObject *encoder_new(PyTypeObject *t, PyObject *a, PyObject *k) { return qpy_new(t, encoder_free_handle); }

static void encoder_dealloc(EncoderObject *self) { qpy_dealloc(&self->base); }

/* The options of Encoder(...), checked. */
static int encoder_opts(qac_encoder_opts *o, const char *device, const char *dtype, PyObject *threads,
                        PyObject *max_batch) {
    *o = qac_encoder_default_opts();
    long t = 0, b = 0;
    if (qpy_device_of(device, &o->device) < 0 ||
        qpy_int_in(threads, 0, MAX_THREADS, "threads (0: one per core)", &t) < 0 ||
        qpy_int_in(max_batch, 0, MAX_BATCH, "max_batch (0: the backend's)", &b) < 0)
        return -1;
    if (qac_precision_parse(dtype, &o->cpu_precision)) {
        qac_clear_error();
        return PyErr_Format(PyExc_ValueError, "dtype must be fp32, bf16 or int8, not %s", dtype), -1;
    }
    o->threads = (int)t;
    o->max_batch = (int)b;
    return 0;
}

static int encoder_init(EncoderObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"model", "device", "dtype", "threads", "max_batch", NULL};
    PyObject *model, *threads = NULL, *max_batch = NULL, *zero = PyLong_FromLong(0);
    const char *device = "auto", *dtype = "fp32";
    if (!zero) return -1;
    int ok = PyArg_ParseTupleAndKeywords(args, kw, "O|ssOO", kwlist, &model, &device, &dtype, &threads, &max_batch);
    qac_encoder_opts o;
    qac_model *m = ok ? qpy_model_arg(model) : NULL;
    ok = m && encoder_opts(&o, device, dtype, threads ? threads : zero, max_batch ? max_batch : zero) == 0 &&
         qpy_init_begin(&self->base) == 0;
    Py_DECREF(zero);
    if (!ok) return -1;
    qpy_borrow((qpy_obj *)model); /* before the GIL goes: a close() of the model now waits for this encoder */
    qac_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qac_encoder_create(&self->e, m, &o);
    Py_END_ALLOW_THREADS
    if (st) {
        qpy_give_back((qpy_obj *)model);
        qpy_raise(st);
        return qpy_init_end(&self->base, 0);
    }
    self->model = Py_NewRef(model);
    self->dim = qac_encoder_dim(self->e);
    self->device = qac_encoder_device(self->e);
    self->dtype = qac_encoder_cpu_precision(self->e);
    self->note = qac_encoder_cpu_note(self->e);
    self->truncated = 0;
    return qpy_init_end(&self->base, 1);
}

qpy_obj *qpy_encoder_obj(PyObject *o) {
    if (!PyObject_TypeCheck(o, &qpy_EncoderType)) {
        PyErr_Format(PyExc_TypeError, "expected a qac._qac.Encoder, not %.80s", Py_TYPE(o)->tp_name);
        return NULL;
    }
    return qpy_check_open((qpy_obj *)o) < 0 ? NULL : (qpy_obj *)o;
}

qac_encoder *qpy_encoder_handle(qpy_obj *o) { return ((EncoderObject *)o)->e; }

void qpy_encoder_watch(qpy_obj *o, qpy_cb *c) {
    qac_encoder_set_cancel(((EncoderObject *)o)->e, c ? qpy_cancel : NULL, c);
}

/* encode(texts, max_len, out, prompt=None): out is a writable float32
 * buffer of len(texts) * dim items, filled in place; the prompt goes
 * before every text (qac_encoder_encode_texts_prompted). Ctrl-C raises
 * KeyboardInterrupt within a layer's time; out is then partly written. */
static PyObject *encoder_encode(EncoderObject *self, PyObject *args) {
    PyObject *seq, *out, *ret = NULL;
    int max_len;
    const char *prompt = NULL;
    if (!PyArg_ParseTuple(args, "OiO|z", &seq, &max_len, &out, &prompt) || qpy_check_open(&self->base) < 0)
        return NULL;
    qpy_texts t;
    if (qpy_texts_get(&t, seq, "encode", QPY_ANY_TEXT) < 0) return NULL;
    Py_buffer b = {0};
    if (t.n > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "encode: %zd texts in one call (at most %d)", t.n, INT32_MAX);
        goto done;
    }
    if (qpy_buf_get(&b, out, 'f', 4, t.n * self->dim, 1, "encode output") < 0) goto done;
    if (qpy_enter(&self->base, QPY_EXCLUSIVE) < 0) goto done;
    qpy_cb cb = qpy_cb_of(Py_None, qpy_on_main_thread()); /* Ctrl-C stops it between batches and layers */
    qpy_encoder_watch(&self->base, &cb);
    qac_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qac_encoder_encode_texts_prompted(self->e, prompt, t.ptr, t.len, (int)t.n, max_len, b.buf);
    Py_END_ALLOW_THREADS
    qpy_encoder_watch(&self->base, NULL);
    self->truncated = qac_encoder_truncated(self->e);
    qpy_leave(&self->base);
    ret = qpy_cb_finish(&cb, st);
done:
    if (b.obj) PyBuffer_Release(&b);
    qpy_texts_free(&t);
    return ret;
}

/* max_len(n): the length encode uses for max_len n (0: the model's limit). */
static PyObject *encoder_max_len(EncoderObject *self, PyObject *arg) {
    long n = PyLong_AsLong(arg);
    if ((n == -1 && PyErr_Occurred()) || qpy_check_open(&self->base) < 0) return NULL;
    return PyLong_FromLong(qac_encoder_max_len(self->e, n > INT32_MAX ? INT32_MAX : n < 0 ? 0 : (int)n));
}

static PyObject *encoder_get_dim(EncoderObject *self, void *c) {
    return qpy_check_open(&self->base) < 0 ? NULL : PyLong_FromLong(self->dim);
}
static PyObject *encoder_get_truncated(EncoderObject *self, void *c) {
    return PyLong_FromLongLong(self->truncated); /* after close too: the count of the encoder's life */
}
static PyObject *encoder_get_device(EncoderObject *self, void *c) {
    if (qpy_check_open(&self->base) < 0) return NULL;
    return PyUnicode_FromString(self->device == QAC_DEVICE_CUDA ? "cuda" : "cpu");
}
static PyObject *encoder_get_dtype(EncoderObject *self, void *c) {
    if (qpy_check_open(&self->base) < 0) return NULL;
    return PyUnicode_FromString(qac_precision_name(self->dtype));
}
static PyObject *encoder_get_note(EncoderObject *self, void *c) {
    if (qpy_check_open(&self->base) < 0) return NULL;
    if (!self->note) Py_RETURN_NONE;
    return PyUnicode_FromString(self->note);
}

static PyMethodDef encoder_methods[] = {
    {"encode", (PyCFunction)encoder_encode, METH_VARARGS,
     "encode(texts, max_len, out, prompt=None): fill out[len(texts), dim]"},
    {"max_len", (PyCFunction)encoder_max_len, METH_O, "max_len(n) -> the length encode uses (0: the model's limit)"},
    QPY_LIFECYCLE_METHODS,
    {NULL}};
static PyGetSetDef encoder_getset[] = {{"dim", (getter)encoder_get_dim, NULL, "embedding size", NULL},
                                       {"device", (getter)encoder_get_device, NULL, "cpu or cuda", NULL},
                                       {"dtype", (getter)encoder_get_dtype, NULL,
                                        "fp32, bf16 or int8: what the CPU encoder runs in", NULL},
                                       {"note", (getter)encoder_get_note, NULL,
                                        "why dtype differs from the one asked for, or None", NULL},
                                       {"truncated", (getter)encoder_get_truncated, NULL,
                                        "texts encode cut at max_len so far", NULL},
                                       {NULL}};

PyTypeObject qpy_EncoderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "qac._qac.Encoder",
    .tp_basicsize = sizeof(EncoderObject),
    .tp_dealloc = (destructor)encoder_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Encoder(model, device='auto', dtype='fp32', threads=0, max_batch=0)",
    .tp_methods = encoder_methods,
    .tp_getset = encoder_getset,
    .tp_init = (initproc)encoder_init,
    .tp_new = encoder_new,
};
