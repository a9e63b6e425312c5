/* qac._qac: the CPython extension over libqac, this file its module:
 * the module's functions, its exception classes (one per status) and its
 * init. Glue only: every function converts Python values, releases the
 * GIL around the library call, and turns a qac_status into an exception
 * carrying qac_last_error(). The Python layer (qac/__init__.py) shapes the
 * public API and numpy arrays; arrays cross this boundary through the
 * buffer protocol, so results are written straight into the caller's
 * arrays. The objects and their files are listed in qac_python.h, with
 * how they are shared between threads. */
#include <string.h>

#include "qac_cpu.h"
#include "qac_python.h"

/* ---- module ---- */

static PyObject *py_default_model_dir(PyObject *mod, PyObject *unused) {
    char buf[4096];
    qac_status st = qac_default_model_dir(buf, sizeof buf);
    return st ? qpy_raise(st) : PyUnicode_FromString(buf);
}

static PyObject *py_cuda_available(PyObject *mod, PyObject *unused) { return PyBool_FromLong(qac_cuda_available()); }

static PyObject *py_cpu_isa(PyObject *mod, PyObject *args) {
    const char *name = NULL;
    if (!PyArg_ParseTuple(args, "|z", &name)) return NULL;
    if (name) {
        qac_status st = qac_cpu_isa_select(name);
        if (st) return qpy_raise(st);
    }
    return PyUnicode_FromString(qac_cpu_isa_name(qac_cpu_isa()));
}

static PyMethodDef module_methods[] = {
    {"index_build", qpy_index_build, METH_VARARGS, "index_build(out, encoder, corpus, options, progress)"},
    {"index_build_vectors", qpy_index_build_vectors, METH_VARARGS,
     "index_build_vectors(out, npy_path, model, options, progress)"},
    {"index_merge", qpy_index_merge, METH_VARARGS, "index_merge(out, parts_dir, options, progress)"},
    {"index_defaults", qpy_index_defaults, METH_NOARGS, "the index build options' defaults, as a dict"},
    {"bm25_build", qpy_bm25_build, METH_VARARGS, "bm25_build(out, corpus, progress)"},
    {"read_qrels", qpy_read_qrels, METH_VARARGS, "read_qrels(path) -> {qid: {docid: rel}}"},
    {"read_run", qpy_read_run, METH_VARARGS, "read_run(path) -> {qid: {docid: score}}"},
    {"write_run", qpy_write_run, METH_VARARGS, "write_run(path, qids, docids, scores, k, run_id)"},
    {"evaluate", qpy_evaluate, METH_VARARGS, "evaluate(qrels, run, measures, max_docs, rel_level, complete) -> rows"},
    {"finetune", qpy_finetune, METH_VARARGS, "finetune(model, sources, options, callback) -> (total, resumed_at)"},
    {"pretrain", qpy_pretrain, METH_VARARGS, "pretrain(model, options, callback) -> resumed_at"},
    {"default_model_dir", py_default_model_dir, METH_NOARGS, "the default model's directory"},
    {"cuda_available", py_cuda_available, METH_NOARGS, "whether a usable CUDA GPU and CUDA support exist"},
    {"cpu_isa", py_cpu_isa, METH_VARARGS, "cpu_isa(name=None): select (auto|avx512|avx2|generic) and return the path"},
    {NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "qac._qac", "libqac bindings (use the qac package)",
                                        -1, module_methods, NULL, NULL, NULL, NULL};

static int add_error(PyObject *m, const char *name, qac_status st, PyObject *extra) {
    char full[64];
    snprintf(full, sizeof full, "qac.%s", name);
    PyObject *bases = extra ? PyTuple_Pack(2, qpy_err_base, extra) : PyTuple_Pack(1, qpy_err_base);
    if (!bases) return -1;
    PyObject *cls = PyErr_NewException(full, bases, NULL);
    Py_DECREF(bases);
    if (!cls) return -1;
    if (st) qpy_err_by_status[st] = cls;
    return PyModule_AddObjectRef(m, name, cls);
}

PyMODINIT_FUNC PyInit__qac(void) {
    if (qpy_args_init() < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    PyTypeObject *types[] = {&qpy_ModelType, &qpy_EncoderType, &qpy_PartsType,   &qpy_IndexType,
                             &qpy_BM25Type,  &qpy_ReaderType,  &qpy_RerankerType};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (PyType_Ready(types[i]) < 0 || PyModule_AddObjectRef(m, strrchr(types[i]->tp_name, '.') + 1,
                                                                 (PyObject *)types[i]) < 0)
            goto fail;
    qpy_err_base = PyErr_NewExceptionWithDoc("qac.QacError", "An error reported by qac; .status names its kind.", NULL,
                                         NULL);
    if (!qpy_err_base || PyModule_AddObjectRef(m, "QacError", qpy_err_base) < 0) goto fail;
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
