/* The trainers in this process: finetune and pretrain take their options
 * as a dict, looked up in a table of the options structs' fields, and
 * report steps, dev evaluations and notes to a Python callback, which (as
 * Ctrl-C) may stop the run after a step. */
#include <stddef.h>
#include <string.h>

#include "qac_finetune.h"
#include "qac_pretrain.h"
#include "qac_python.h"
#include "qac_rerank.h"
#include "qac_xenc.h"

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
    return qpy_cb_event(user, "{s:s, s:l, s:l, s:d, s:d, s:d, s:d, s:d, s:d, s:l, s:i}", "event", "step", "step", p->step,
                    "total", p->total, "epoch", p->epoch, "loss", p->loss, "lr", p->lr, "grad_norm", p->grad_norm,
                    "seconds", p->seconds, "elapsed", p->elapsed, "steps_run", p->steps_run, "passages", p->passages);
}

static void ft_on_dev(void *user, const qac_ft_dev *r) {
    qpy_cb *c = user;
    if (c->fn)
        qpy_cb_event(c, "{s:s, s:l, s:d, s:d, s:d, s:d, s:d}", "event", "dev", "step", r->step, "ndcg_cut_10", r->ndcg10,
                 "map", r->map, "recall_100", r->recall100, "recip_rank_10", r->mrr10, "seconds", r->seconds);
}

/* cross_encoder=True: a reranker (api/qac_rerank.h) with max_len,
 * num_labels, truncation and dev_run, as qac finetune --cross-encoder. */
typedef struct cross_opts {
    int on, num_labels, labels_given;
    qac_xenc_train_opts xo;
} cross_opts;

static int cross_get(cross_opts *c, PyObject *d, const qac_finetune_opts *fo) {
    memset(c, 0, sizeof *c);
    PyObject *v = PyDict_GetItemString(d, "cross_encoder");
    if (v && (c->on = PyObject_IsTrue(v)) < 0) return -1;
    qac_xenc_train_opts_default(&c->xo);
    c->xo.ft = *fo;
    c->num_labels = 1;
    long ml = 0, nl = 1;
    PyObject *mlo = PyDict_GetItemString(d, "max_len"), *nlo = PyDict_GetItemString(d, "num_labels"),
             *tro = PyDict_GetItemString(d, "truncation"), *dro = PyDict_GetItemString(d, "dev_run");
    if (!c->on) {
        if (mlo || nlo || tro || dro)
            return PyErr_Format(PyExc_TypeError, "finetune: max_len, num_labels, truncation and dev_run are "
                                                 "cross_encoder=True options"), -1;
        return 0;
    }
    if (fo->dry_run || fo->train.device == QAC_DEVICE_CUDA)
        return PyErr_Format(PyExc_ValueError, "finetune: cross_encoder=True trains on the CPU and has no dry_run"), -1;
    if ((mlo && qpy_int_in(mlo, 0, 8192, "max_len (0: q_max_len + p_max_len)", &ml) < 0) ||
        (nlo && qpy_int_in(nlo, 1, 2, "num_labels", &nl) < 0))
        return -1;
    c->xo.max_len = ml ? (int)ml : fo->q_max + fo->p_max;
    c->num_labels = (int)nl;
    c->labels_given = nlo != NULL;
    if (tro) {
        const char *t = PyUnicode_AsUTF8(tro);
        qac_status st = t ? qac_truncation_parse(t, &c->xo.truncation) : QAC_OK;
        if (!t) return -1;
        if (st) return qpy_raise(st), -1;
    }
    if (dro && dro != Py_None && !(c->xo.dev_run = PyUnicode_AsUTF8(dro))) return -1; /* the dict keeps it */
    return 0;
}

/* without the GIL */
static qac_status cross_run(const cross_opts *c, const qac_ft_data *d, const char *model_dir, long *total,
                            long *from) {
    qac_xenc *x = NULL;
    int fresh = 0;
    qac_status st = qac_xenc_open(&x, model_dir, c->num_labels, c->xo.ft.train.seed, &fresh);
    if (!st && !fresh && c->labels_given && c->num_labels != x->num_labels)
        st = qac_set_error(QAC_ERR_INVALID, "%s is a cross-encoder with %d labels, not num_labels %d", model_dir,
                           x->num_labels, c->num_labels);
    if (!st) st = qac_xenc_train_run(x, d, &c->xo, total, from);
    qac_xenc_free(x);
    return st;
}

/* finetune(model_dir or None, sources dict, options dict, callback) -> (total, resumed_at) */
PyObject *qpy_finetune(PyObject *mod, PyObject *args) {
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
    qpy_texts tev = {0};
    PyObject *tev_o = PyDict_GetItemString(src_d, "tevatron");
    if (tev_o && tev_o != Py_None && qpy_texts_get(&tev, tev_o, "train", QPY_NO_NUL) < 0) {
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
    const char *model_dir = bad ? NULL : qpy_model_dir_arg(model_o, buf, sizeof buf);
    if (!model_dir) {
        qpy_texts_free(&tev);
        Py_DECREF(keep);
        return NULL;
    }
    qpy_cb cb = qpy_cb_of(callback, 1);
    fo.on_step = ft_on_step;
    fo.on_dev = ft_on_dev;
    fo.user = &cb;
    qac_ft_sources src = {tev.ptr, (int)tev.n, vals[0], vals[1], vals[2], vals[3], (qac_title_join)join, NULL};
    qac_ft_data *d = NULL;
    qac_model *m = NULL;
    long total = 0, from = 0;
    qac_status st;
    cross_opts xc;
    if (cross_get(&xc, opt_d, &fo) < 0) {
        qpy_texts_free(&tev);
        Py_DECREF(keep);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    /* the model first: a title joins its text with the model's separator */
    st = qac_model_load(&m, model_dir);
    if (!st && m->tok) src.sep_token = qac_tokenizer_id_to_token(m->tok, qac_tokenizer_specials(m->tok).sep);
    if (!st) st = qac_ft_data_load(&d, &src, fo.n_passages);
    if (!st && xc.on)
        st = cross_run(&xc, d, model_dir, &total, &from); /* the reranker reads the checkpoint itself */
    else if (!st)
        st = qac_finetune_run(m, d, &fo, &total, &from);
    qac_model_free(m);
    qac_ft_data_free(d);
    Py_END_ALLOW_THREADS
    qpy_texts_free(&tev);
    Py_DECREF(keep);
    PyObject *r = qpy_cb_finish(&cb, st);
    if (!r) return NULL;
    Py_DECREF(r);
    return Py_BuildValue("(ll)", total, from);
}

static int pt_on_step(void *user, const qac_pt_progress *p) {
    return qpy_cb_event(user, "{s:s, s:l, s:l, s:d, s:d, s:d, s:d, s:d, s:d, s:d, s:d, s:d, s:l, s:i, s:l}", "event",
                    "step", "step", p->step, "total", p->total, "loss", p->loss, "mlm", p->mlm, "head", p->head,
                    "contrastive", p->contrastive, "span_frac", p->span_frac, "lr", p->lr, "grad_norm", p->grad_norm,
                    "seconds", p->seconds, "elapsed", p->elapsed, "steps_run", p->steps_run, "pairs", p->pairs,
                    "tokens", p->tokens);
}

static void pt_on_note(void *user, const char *line) {
    qpy_cb *c = user;
    if (c->fn) qpy_cb_event(c, "{s:s, s:s}", "event", "note", "note", line);
}

/* pretrain(model_dir or None, options dict, callback) -> resumed_at */
PyObject *qpy_pretrain(PyObject *mod, PyObject *args) {
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
            qpy_raise(st);
            bad = 1;
        }
    }
    char buf[4096];
    const char *model_dir = bad ? NULL : qpy_model_dir_arg(model_o, buf, sizeof buf);
    if (!model_dir) {
        Py_DECREF(keep);
        return NULL;
    }
    po.data.path = strs[5];
    po.out_dir = strs[6];
    po.data.threads = po.train.threads;
    qpy_cb cb = qpy_cb_of(callback, 1);
    po.data.progress = qpy_progress;
    po.data.progress_user = &cb;
    po.on_note = pt_on_note;
    po.on_step = pt_on_step;
    po.user = &cb;
    qac_model *m = NULL;
    long from = 0;
    Py_BEGIN_ALLOW_THREADS
    st = qac_model_load(&m, model_dir);
    if (!st) st = qac_pretrain_run(m, &po, &from);
    qac_model_free(m);
    Py_END_ALLOW_THREADS
    Py_DECREF(keep);
    PyObject *r = qpy_cb_finish(&cb, st);
    if (!r) return NULL;
    Py_DECREF(r);
    return PyLong_FromLong(from);
}

