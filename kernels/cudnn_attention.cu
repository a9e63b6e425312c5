// cuDNN's fused attention (its backend API's SDPA forward operation, cuDNN
// 9.13 and later), loaded at run time, as the measured alternative to qac's
// fused attention in the CUDA encoder. Contract: cudnn_attention.cuh.
//
// The library: $QAC_CUDNN_LIBRARY (a libcudnn.so file, or a directory
// holding one), else libcudnn.so.9 / libcudnn.so through the loader, else
// torch's wheel (nvidia/cudnn/lib under a site-packages of $VIRTUAL_ENV,
// $CONDA_PREFIX, ~/.local, /usr/local, /usr or /opt/conda). From a
// directory, cuDNN's sub-libraries there are loaded first, so its own
// loading by name finds them. Only cudnn_graph.h's types and enums are
// compiled in; the eleven functions are looked up with dlsym.
//
// The graph: one SDPA forward node, Q, K, V [B, H, S, D] read straight
// from the packed QKV product (row stride 3C, head stride D, each part at
// its column offset, the sequences found through ragged offsets), O
// written into the attention output [N, C] the same way, the sequence
// lengths as both Q's and KV's (which masks the keys past each sequence),
// the scale 1/sqrt(D) by value. S is the batch's longest sequence rounded
// up to 64, so a few plans serve every batch of a size.
#include <dlfcn.h>
#include <glob.h>
#include <new>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudnn_att_kernels.cuh"
#include "cudnn_attention.cuh"
#include "dev_scratch.cuh"
#include "qac_gpu_defaults.h"

#ifdef QAC_HAVE_CUDNN_HEADERS
#include <cudnn_graph.h>
#endif

namespace {

// ---- the device helpers (cudnn_att_kernels.cuh): their launches ----

using qac_cudnn_k::add_bias_kernel;
using qac_cudnn_k::compare_kernel;
using qac_cudnn_k::ragged_kernel;

template <typename E> cudaError_t launch_bias(void *qkv, const float *bias, int N, int C3, cudaStream_t s) {
    add_bias_kernel<E><<<dim3(qac_div_up(C3, 256), N < 65535 ? N : 65535), 256, 0, s>>>((E *)qkv, bias, N, C3);
    return cudaGetLastError();
}
cudaError_t add_bias(void *qkv, const float *bias, int N, int C3, qac_precision p, cudaStream_t s) {
    if (N <= 0 || !bias) return cudaSuccess;
    return p == QAC_PREC_BF16 ? launch_bias<__nv_bfloat16>(qkv, bias, N, C3, s)
                              : launch_bias<__half>(qkv, bias, N, C3, s);
}

// ---- what was decided per shape, for the whole process ----

struct shape_key {
    int prec, NH, D, B, S;
};
bool same(const shape_key &a, const shape_key &b) {
    return a.prec == b.prec && a.NH == b.NH && a.D == b.D && a.B == b.B && a.S == b.S;
}
enum choice { UNDECIDED, USE_QAC, USE_CUDNN };
struct decision {
    shape_key k;
    choice c;
    float us_qac, us_cudnn; // 0: not timed
    char why[160];          // when qac's kernel was kept for a reason other than speed
};
constexpr int MAX_DECISIONS = 256;
decision g_dec[MAX_DECISIONS];
int g_ndec;
pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
char g_status[512] = "cuDNN not looked for yet";

decision *find_decision(const shape_key &k) { // under g_lock
    for (int i = 0; i < g_ndec; i++)
        if (same(g_dec[i].k, k)) return &g_dec[i];
    return NULL;
}

void record(const shape_key &k, choice c, float us_q, float us_c, const char *why) {
    pthread_mutex_lock(&g_lock);
    decision *d = find_decision(k);
    if (!d && g_ndec < MAX_DECISIONS) d = &g_dec[g_ndec++];
    if (d && !(d->c != UNDECIDED && same(d->k, k))) {
        d->k = k;
        d->c = c;
        d->us_qac = us_q;
        d->us_cudnn = us_c;
        snprintf(d->why, sizeof d->why, "%s", why ? why : "");
    }
    pthread_mutex_unlock(&g_lock);
}

// The shape's choice; a shape the full table cannot take stays with qac's
// kernel (deciding it on every batch would time both every time).
choice lookup(const shape_key &k) {
    pthread_mutex_lock(&g_lock);
    const decision *d = find_decision(k);
    const choice c = d ? d->c : g_ndec == MAX_DECISIONS ? USE_QAC : UNDECIDED;
    pthread_mutex_unlock(&g_lock);
    return c;
}

} // namespace

int qac_cudnn_mode(void) {
    const char *e = getenv("QAC_CUDA_CUDNN");
    if (e && !strcmp(e, "off")) return 0;
    if (e && !strcmp(e, "on")) return 1;
    if (e && !strcmp(e, "auto")) return 2;
    return QAC_CUDNN_MODE_DEFAULT;
}

extern "C" int qac_cuda_attention_choices(char *buf, size_t cap) {
    size_t at = 0;
    if (cap) buf[0] = 0;
    pthread_mutex_lock(&g_lock);
    const int n = g_ndec;
    for (int i = 0; i < n && at < cap; i++) {
        const decision &d = g_dec[i];
        int w = snprintf(buf + at, cap - at, "%s%s heads %d x %d, %d sequences of up to %d: %s", at ? "; " : "",
                         d.k.prec == QAC_PREC_BF16 ? "bf16" : "fp16", d.k.NH, d.k.D, d.k.B, d.k.S,
                         d.c == USE_CUDNN ? "cuDNN" : "qac");
        if (w > 0 && (size_t)w < cap - at) at += (size_t)w;
        if (d.us_qac > 0 && at < cap) {
            w = snprintf(buf + at, cap - at, " (qac %.1f us, cuDNN %.1f us)", d.us_qac, d.us_cudnn);
            if (w > 0 && (size_t)w < cap - at) at += (size_t)w;
        }
        if (d.why[0] && at < cap) {
            w = snprintf(buf + at, cap - at, " (%s)", d.why);
            if (w > 0 && (size_t)w < cap - at) at += (size_t)w;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return n;
}

extern "C" const char *qac_cudnn_status(char *buf, size_t cap) {
    pthread_mutex_lock(&g_lock);
    snprintf(buf, cap, "%s", g_status);
    pthread_mutex_unlock(&g_lock);
    return buf;
}

#ifndef QAC_HAVE_CUDNN_HEADERS

struct qac_cudnn_att {
    int unused;
};
qac_status qac_cudnn_att_create(qac_cudnn_att **out, cudaStream_t s) {
    *out = NULL;
    snprintf(g_status, sizeof g_status, "cuDNN: not built in (no cudnn_graph.h with the CUDA toolkit at build time)");
    return qac_set_error(QAC_ERR_UNSUPPORTED, "%s", g_status);
}
void qac_cudnn_att_free(qac_cudnn_att *a) { (void)a; }
extern "C" int qac_cudnn_version(void) {
    snprintf(g_status, sizeof g_status, "cuDNN: not built in (no cudnn_graph.h with the CUDA toolkit at build time)");
    return 0;
}
qac_status qac_cudnn_att_run(qac_cudnn_att *a, void *out, void *qkv, const int *offs, int B, int T, int C, int NH,
                             qac_precision prec, int *idx, cudaStream_t s) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, "cuDNN: not built in");
}
const char *qac_cudnn_probe(char *buf, size_t cap) {
    snprintf(buf, cap, "cuDNN: not built in (no cudnn_graph.h with the CUDA toolkit at build time)");
    return buf;
}
extern "C" qac_status qac_cudnn_fa_forward(float *out, const float *qkv, const float *qkv_b, const int *offs, int B,
                                           int T, int C, int NH, qac_precision prec) {
    return qac_set_error(QAC_ERR_UNSUPPORTED, "cuDNN: not built in (no cudnn_graph.h with the CUDA toolkit)");
}
qac_status qac_cudnn_att_forward(qac_cudnn_att *a, void *out, void *qkv, const float *qkv_b, const qac_fa_rows &rows,
                                 int real_rows, int C, int NH, qac_precision prec, const qac_fa_tiles *tiles,
                                 void *scratch, int *idx, cudaStream_t s) {
    const qac_kt_drop none = {0.0f, 0, 0};
    return qac_cuda_check(qac_fa_forward(out, NULL, qkv, qkv_b, rows, C, NH, 0, 0, none, 0, prec, tiles, s),
                          "fused attention forward");
}

#else

namespace {

// ---- the library ----

struct cudnn_api {
    size_t (*version)(void);
    const char *(*error_string)(cudnnStatus_t);
    cudnnStatus_t (*create)(cudnnHandle_t *);
    cudnnStatus_t (*destroy)(cudnnHandle_t);
    cudnnStatus_t (*set_stream)(cudnnHandle_t, cudaStream_t);
    cudnnStatus_t (*create_desc)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t *);
    cudnnStatus_t (*destroy_desc)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*set_attr)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
                              int64_t, const void *);
    cudnnStatus_t (*get_attr)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t,
                              cudnnBackendAttributeType_t, int64_t, int64_t *, void *);
    cudnnStatus_t (*finalize)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*execute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t);
};
cudnn_api g_api;
int g_loaded; // 1: every symbol found
pthread_once_t g_once = PTHREAD_ONCE_INIT;

// cuDNN's sub-libraries in dir, loaded by path before the front library
// so that its loading of them by name finds them (the wheel's directory is
// not on the loader's path).
void preload_dir(const char *dir) {
    static const char *subs[] = {"libcudnn_graph.so.9",      "libcudnn_engines_precompiled.so.9",
                                 "libcudnn_heuristic.so.9",  "libcudnn_engines_runtime_compiled.so.9",
                                 "libcudnn_engines_tensor_ir.so.9", "libcudnn_ops.so.9",
                                 "libcudnn_cnn.so.9",        "libcudnn_adv.so.9"};
    char p[4096 + 64];
    for (size_t i = 0; i < sizeof subs / sizeof *subs; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, subs[i]);
        dlopen(p, RTLD_NOW | RTLD_GLOBAL); // a missing one is cuDNN's to report
    }
}

void *open_in_dir(const char *dir) {
    char p[4096 + 64];
    snprintf(p, sizeof p, "%s/libcudnn.so.9", dir);
    void *h = NULL;
    FILE *f = fopen(p, "rb");
    if (f) {
        fclose(f);
        preload_dir(dir);
        h = dlopen(p, RTLD_NOW | RTLD_GLOBAL);
    }
    return h;
}

void load_once(void) {
    char where[4096] = "", tried[1024] = "";
    void *h = NULL;
    const char *env = getenv("QAC_CUDNN_LIBRARY");
    if (env && *env) {
        snprintf(tried, sizeof tried, "QAC_CUDNN_LIBRARY=%s", env);
        h = open_in_dir(env); // a directory
        if (h) snprintf(where, sizeof where, "%s/libcudnn.so.9", env);
        if (!h) {
            char dir[4096];
            snprintf(dir, sizeof dir, "%s", env);
            char *slash = strrchr(dir, '/');
            if (slash) *slash = 0, preload_dir(dir);
            if ((h = dlopen(env, RTLD_NOW | RTLD_GLOBAL))) snprintf(where, sizeof where, "%s", env);
        }
    } else {
        static const char *names[] = {"libcudnn.so.9", "libcudnn.so"};
        snprintf(tried, sizeof tried, "libcudnn.so.9, libcudnn.so, torch's nvidia/cudnn/lib");
        for (size_t i = 0; !h && i < 2; i++)
            if ((h = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL))) snprintf(where, sizeof where, "%s", names[i]);
        static const char *roots[] = {"VIRTUAL_ENV", "CONDA_PREFIX", "HOME"};
        char pat[4096];
        for (size_t i = 0; !h && i < 3 + 3; i++) {
            if (i < 3) {
                const char *r = getenv(roots[i]);
                if (!r || !*r) continue;
                snprintf(pat, sizeof pat, "%s/%slib/python3*/site-packages/nvidia/cudnn/lib", r,
                         i == 2 ? ".local/" : "");
            } else {
                static const char *fixed[] = {"/usr/local/lib/python3*/dist-packages/nvidia/cudnn/lib",
                                              "/usr/lib/python3/dist-packages/nvidia/cudnn/lib",
                                              "/opt/conda/lib/python3*/site-packages/nvidia/cudnn/lib"};
                snprintf(pat, sizeof pat, "%s", fixed[i - 3]);
            }
            glob_t g;
            if (glob(pat, 0, NULL, &g) == 0) {
                for (size_t j = 0; !h && j < g.gl_pathc; j++)
                    if ((h = open_in_dir(g.gl_pathv[j]))) snprintf(where, sizeof where, "%s", g.gl_pathv[j]);
                globfree(&g);
            }
        }
    }
    if (!h) {
        snprintf(g_status, sizeof g_status, "cuDNN: not found (tried %s)", tried);
        return;
    }
    struct {
        void **slot;
        const char *name;
    } syms[] = {{(void **)&g_api.version, "cudnnGetVersion"},
                {(void **)&g_api.error_string, "cudnnGetErrorString"},
                {(void **)&g_api.create, "cudnnCreate"},
                {(void **)&g_api.destroy, "cudnnDestroy"},
                {(void **)&g_api.set_stream, "cudnnSetStream"},
                {(void **)&g_api.create_desc, "cudnnBackendCreateDescriptor"},
                {(void **)&g_api.destroy_desc, "cudnnBackendDestroyDescriptor"},
                {(void **)&g_api.set_attr, "cudnnBackendSetAttribute"},
                {(void **)&g_api.get_attr, "cudnnBackendGetAttribute"},
                {(void **)&g_api.finalize, "cudnnBackendFinalize"},
                {(void **)&g_api.execute, "cudnnBackendExecute"}};
    for (size_t i = 0; i < sizeof syms / sizeof *syms; i++)
        if (!(*syms[i].slot = dlsym(h, syms[i].name))) {
            snprintf(g_status, sizeof g_status, "cuDNN at %s lacks %s", where, syms[i].name);
            return;
        }
    const size_t v = g_api.version();
    snprintf(g_status, sizeof g_status, "cuDNN %zu.%zu.%zu (%s)", v / 10000, v / 100 % 100, v % 100, where);
    g_loaded = 1;
}

// "<status>: <what>" as the lasting reason, and the error for the caller.
qac_status fail(const char *what, cudnnStatus_t st) {
    char base[sizeof g_status];
    pthread_mutex_lock(&g_lock);
    snprintf(base, sizeof base, "%s", g_status);
    pthread_mutex_unlock(&g_lock);
    return qac_set_error(QAC_ERR_UNSUPPORTED, "%s: %s: %s", base, what, st ? g_api.error_string(st) : "");
}

// ---- one plan ----

enum uid { U_Q = 1, U_K, U_V, U_O, U_SCALE, U_SEQ, U_ROFF_QKV, U_ROFF_O };

struct descs;
struct plan {
    shape_key k;
    cudnnBackendDescriptor_t exec; // the execution plan
    descs *graph;                  // the descriptors it was built from, kept while it lives
    void *ws;                      // its workspace (device)
    int64_t ws_bytes;
};
constexpr int MAX_PLANS = 48;

} // namespace

struct qac_cudnn_att {
    cudnnHandle_t h;
    int mode;
    plan plans[MAX_PLANS];
    int nplans;
    unsigned *d_cmp; // the agreement check's three words
};

namespace {

// A list of descriptors destroyed together, last first: a plan's graph (kept
// with the plan), or one execution's variant pack.
struct descs {
    cudnnBackendDescriptor_t d[48];
    int n = 0;
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    const char *what = "";
    cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t t, const char *w) {
        cudnnBackendDescriptor_t x = NULL;
        if (st) return NULL;
        if ((st = g_api.create_desc(t, &x)) != CUDNN_STATUS_SUCCESS) what = w;
        if (x && n < 48) d[n++] = x;
        return x;
    }
    void set(cudnnBackendDescriptor_t x, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t c,
             const void *v, const char *w) {
        if (st) return;
        if ((st = g_api.set_attr(x, a, t, c, v)) != CUDNN_STATUS_SUCCESS) what = w;
    }
    void link(cudnnBackendDescriptor_t x, cudnnBackendAttributeName_t a, cudnnBackendDescriptor_t v, const char *w) {
        set(x, a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v, w);
    }
    void finalize(cudnnBackendDescriptor_t x, const char *w) {
        if (st) return;
        if ((st = g_api.finalize(x)) != CUDNN_STATUS_SUCCESS) what = w;
    }
    ~descs() {
        for (int i = n - 1; i >= 0; i--) g_api.destroy_desc(d[i]);
    }
    // A finalised tensor [d0, d1, d2, d3] with these strides (ragged: its offsets' tensor).
    cudnnBackendDescriptor_t tensor(int64_t id, cudnnDataType_t type, const int64_t (&dims)[4],
                                    const int64_t (&strides)[4], bool by_value, cudnnBackendDescriptor_t ragged,
                                    const char *w) {
        cudnnBackendDescriptor_t x = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, w);
        const int64_t align = by_value ? 4 : 16;
        const bool virt = false;
        set(x, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id, w);
        set(x, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, w);
        set(x, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, w);
        set(x, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, w);
        set(x, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, w);
        set(x, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, w);
        if (by_value) set(x, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, w);
        if (ragged) link(x, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, ragged, w);
        finalize(x, w);
        return x;
    }
};

// The handle attributes cuDNN 9 marks deprecated (the device-property
// descriptor replaces them) but still reads: set by value, not by their
// deprecated names.
const cudnnBackendAttributeName_t ATTR_GRAPH_HANDLE = (cudnnBackendAttributeName_t)800;
const cudnnBackendAttributeName_t ATTR_PLAN_HANDLE = (cudnnBackendAttributeName_t)400;

qac_status build_graph(qac_cudnn_att *a, plan *pl, const shape_key &k, descs &g);

// pl's plan for shape k; on failure nothing is kept.
qac_status build_plan(qac_cudnn_att *a, plan *pl, const shape_key &k) {
    pl->exec = NULL;
    pl->ws = NULL;
    pl->graph = new (std::nothrow) descs;
    if (!pl->graph) return qac_set_error(QAC_ERR_NOMEM, "cuDNN attention: out of host memory");
    const qac_status st = build_graph(a, pl, k, *pl->graph);
    if (st != QAC_OK) {
        if (pl->exec) g_api.destroy_desc(pl->exec);
        pl->exec = NULL;
        delete pl->graph;
        pl->graph = NULL;
    }
    return st;
}

qac_status build_graph(qac_cudnn_att *a, plan *pl, const shape_key &k, descs &g) {
    const int64_t B = k.B, H = k.NH, S = k.S, D = k.D, C = k.NH * k.D;
    const cudnnDataType_t io = k.prec == QAC_PREC_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    const int64_t off_dims[4] = {B + 1, 1, 1, 1}, one4[4] = {1, 1, 1, 1}, seq_dims[4] = {B, 1, 1, 1};
    cudnnBackendDescriptor_t roff_qkv =
        g.tensor(U_ROFF_QKV, CUDNN_DATA_INT32, off_dims, one4, false, NULL, "ragged offsets");
    cudnnBackendDescriptor_t roff_o =
        g.tensor(U_ROFF_O, CUDNN_DATA_INT32, off_dims, one4, false, NULL, "ragged offsets");
    // a sequence's tokens C3 elements apart, its heads D apart; the batch stride is the ragged offsets'
    const int64_t dims[4] = {B, H, S, D}, qkv_str[4] = {S * 3 * C, D, 3 * C, 1}, o_str[4] = {S * C, D, C, 1};
    cudnnBackendDescriptor_t q = g.tensor(U_Q, io, dims, qkv_str, false, roff_qkv, "Q");
    cudnnBackendDescriptor_t kk = g.tensor(U_K, io, dims, qkv_str, false, roff_qkv, "K");
    cudnnBackendDescriptor_t v = g.tensor(U_V, io, dims, qkv_str, false, roff_qkv, "V");
    cudnnBackendDescriptor_t o = g.tensor(U_O, io, dims, o_str, false, roff_o, "O");
    cudnnBackendDescriptor_t scale = g.tensor(U_SCALE, CUDNN_DATA_FLOAT, one4, one4, true, NULL, "scale");
    cudnnBackendDescriptor_t seq =
        g.tensor(U_SEQ, CUDNN_DATA_INT32, seq_dims, one4, false, NULL, "sequence lengths");
    cudnnBackendDescriptor_t op = g.make(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, "the SDPA operation");
    g.link(op, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, q, "SDPA Q");
    g.link(op, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, kk, "SDPA K");
    g.link(op, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, v, "SDPA V");
    g.link(op, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, o, "SDPA O");
    g.link(op, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, scale, "SDPA scale");
    g.link(op, CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_QDESC, seq, "SDPA query lengths");
    g.link(op, CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_KVDESC, seq, "SDPA key lengths");
    g.finalize(op, "the SDPA operation");
    cudnnBackendDescriptor_t graph = g.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "the graph");
    g.set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op, "the graph");
    g.set(graph, ATTR_GRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &a->h, "the graph");
    g.finalize(graph, "the graph");
    cudnnBackendDescriptor_t heur = g.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    g.link(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, "heuristics");
    g.set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics");
    g.finalize(heur, "heuristics");
    if (g.st) return fail(g.what, g.st);
    int64_t n = 0;
    cudnnStatus_t st = g_api.get_attr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL);
    if (st) return fail("heuristics' results", st);
    if (n <= 0) return fail("no engine for the graph", CUDNN_STATUS_SUCCESS);
    cudnnBackendDescriptor_t cfg[16];
    if (n > 16) n = 16;
    for (int64_t i = 0; i < n; i++) cfg[i] = g.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine configurations");
    if (g.st) return fail(g.what, g.st);
    if ((st = g_api.get_attr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &n, cfg)))
        return fail("heuristics' results", st);
    pl->exec = NULL;
    cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
    for (int64_t i = 0; i < n && !pl->exec; i++) {
        cudnnBackendDescriptor_t ex = NULL;
        if ((st = g_api.create_desc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &ex))) return fail("a plan", st);
        st = g_api.set_attr(ex, ATTR_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &a->h);
        if (!st)
            st = g_api.set_attr(ex, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
        if (!st) st = g_api.finalize(ex);
        if (st) {
            last = st;
            g_api.destroy_desc(ex);
        } else {
            pl->exec = ex;
        }
    }
    if (!pl->exec) return fail("no engine configuration finalised", last);
    int64_t got = 0;
    pl->ws_bytes = 0;
    pl->ws = NULL;
    st = g_api.get_attr(pl->exec, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, &pl->ws_bytes);
    cudaError_t ce = cudaSuccess;
    if (!st && pl->ws_bytes > 0) ce = cudaMalloc(&pl->ws, (size_t)pl->ws_bytes);
    if (st || ce != cudaSuccess) // build_plan destroys the plan
        return st ? fail("the plan's workspace size", st) : qac_cuda_check(ce, "cuDNN workspace");
    pl->k = k;
    return QAC_OK;
}

// One execution of pl: out from qkv (its bias already added), the ragged
// offsets and lengths in idx.
qac_status run_plan(qac_cudnn_att *a, const plan *pl, void *out, void *qkv, int *idx, cudaStream_t s) {
    const int C = pl->k.NH * pl->k.D;
    const size_t es = 2, P = qac_cudnn_idx_stride(pl->k.B);
    float scale = 1.0f / sqrtf((float)pl->k.D);
    void *ptrs[8] = {qkv, (char *)qkv + (size_t)C * es, (char *)qkv + (size_t)2 * C * es, out, &scale, idx,
                     idx + P, idx + 2 * P};
    const int64_t ids[8] = {U_Q, U_K, U_V, U_O, U_SCALE, U_SEQ, U_ROFF_QKV, U_ROFF_O};
    descs g;
    cudnnBackendDescriptor_t vp = g.make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "the variant pack");
    g.set(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 8, ids, "the variant pack");
    g.set(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 8, ptrs, "the variant pack");
    g.set(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &pl->ws, "the variant pack");
    g.finalize(vp, "the variant pack");
    if (g.st) return fail(g.what, g.st);
    cudnnStatus_t st = g_api.set_stream(a->h, s);
    if (!st) st = g_api.execute(a->h, pl->exec, vp);
    return st ? fail("execute", st) : QAC_OK;
}

plan *find_plan(qac_cudnn_att *a, const shape_key &k) {
    for (int i = 0; i < a->nplans; i++)
        if (same(a->plans[i].k, k)) return &a->plans[i];
    return NULL;
}

qac_status fa_ours(void *out, void *qkv, const float *qkv_b, const qac_fa_rows &rows, int C, int NH,
                   qac_precision prec, const qac_fa_tiles *tiles, cudaStream_t s) {
    const qac_kt_drop none = {0.0f, 0, 0};
    return qac_cuda_check(qac_fa_forward(out, NULL, qkv, qkv_b, rows, C, NH, 0, 0, none, 0, prec, tiles, s),
                          "fused attention forward");
}

// Microseconds a call of f takes: one warm-up, then the best of three.
template <typename F> qac_status time_us(cudaStream_t s, float *us, F f) {
    cudaEvent_t e0 = NULL, e1 = NULL;
    qac_status st = qac_cuda_check(cudaEventCreate(&e0), "cudaEventCreate");
    if (st == QAC_OK) st = qac_cuda_check(cudaEventCreate(&e1), "cudaEventCreate");
    if (st == QAC_OK) st = f();
    *us = 1e30f;
    for (int r = 0; r < 3 && st == QAC_OK; r++) {
        float ms = 0;
        st = qac_cuda_check(cudaEventRecord(e0, s), "cudaEventRecord");
        if (st == QAC_OK) st = f();
        if (st == QAC_OK) st = qac_cuda_check(cudaEventRecord(e1, s), "cudaEventRecord");
        if (st == QAC_OK) st = qac_cuda_check(cudaEventSynchronize(e1), "cudaEventSynchronize");
        if (st == QAC_OK) st = qac_cuda_check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
        if (st == QAC_OK && ms * 1000.0f < *us) *us = ms * 1000.0f;
    }
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    return st;
}

// The shape's first batch: build the plan, run both, check, time (auto),
// decide. out ends with the chosen path's output; qkv with its bias added.
qac_status decide(qac_cudnn_att *a, const shape_key &k, void *out, void *qkv, const float *qkv_b,
                  const qac_fa_rows &rows, int real_rows, int C, int NH, qac_precision prec, const qac_fa_tiles *tiles,
                  void *scratch, int *idx, cudaStream_t s) {
    float us_q = 0, us_c = 0;
    auto ours = [&] { return fa_ours(out, qkv, qkv_b, rows, C, NH, prec, tiles, s); };
    qac_status st = a->mode == 2 ? time_us(s, &us_q, ours) : ours();
    if (st != QAC_OK) return st;
    st = qac_cuda_check(add_bias(qkv, qkv_b, rows.N, 3 * C, prec, s), "QKV bias");
    if (st != QAC_OK) return st;
    // from here qkv holds its bias: qac's kernel must not add it again
    plan *pl = a->nplans < MAX_PLANS ? &a->plans[a->nplans] : NULL;
    char why[160] = "";
    qac_status cs = pl ? build_plan(a, pl, k) : qac_set_error(QAC_ERR_UNSUPPORTED, "no room for another plan");
    if (cs == QAC_OK) {
        a->nplans++;
        auto run = [&] { return run_plan(a, pl, scratch, qkv, idx, s); };
        cs = a->mode == 2 ? time_us(s, &us_c, run) : run();
    }
    if (cs == QAC_OK) { // cuDNN's output against qac's on the real rows
        unsigned h[3] = {0, 0, 0};
        const size_t n = (size_t)real_rows * C;
        cs = qac_cuda_check(cudaMemsetAsync(a->d_cmp, 0, 3 * sizeof(unsigned), s), "cudaMemsetAsync");
        if (cs == QAC_OK) {
            if (prec == QAC_PREC_BF16)
                compare_kernel<__nv_bfloat16><<<256, 256, 0, s>>>(a->d_cmp, (const __nv_bfloat16 *)out,
                                                                 (const __nv_bfloat16 *)scratch, n);
            else
                compare_kernel<__half><<<256, 256, 0, s>>>(a->d_cmp, (const __half *)out, (const __half *)scratch, n);
            cs = qac_cuda_check(cudaGetLastError(), "the agreement check");
        }
        if (cs == QAC_OK)
            cs = qac_cuda_check(cudaMemcpyAsync(h, a->d_cmp, sizeof h, cudaMemcpyDeviceToHost, s), "copy");
        if (cs == QAC_OK) cs = qac_cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
        float d, m;
        memcpy(&d, &h[0], 4);
        memcpy(&m, &h[1], 4);
        // Two correct results differ by a few roundings of values no larger
        // than the largest output (both are averages of the same V rows):
        // 2^-6 of it is far above that and far below a misread layout.
        if (cs == QAC_OK && (h[2] || d > 0x1p-6f * (m > 0x1p-10f ? m : 0x1p-10f))) {
            snprintf(why, sizeof why, "cuDNN disagreed with qac's kernel: max |d| %.3g of max |o| %.3g, %u NaN", d, m,
                     h[2]);
            cs = qac_set_error(QAC_ERR_UNSUPPORTED, "%s", why);
        }
    }
    if (cs != QAC_OK) {
        if (!why[0]) snprintf(why, sizeof why, "%s", qac_last_error());
        record(k, USE_QAC, us_q, us_c, why);
        qac_clear_error();
        return QAC_OK; // out holds qac's
    }
    const bool pick = a->mode == 1 || us_c < us_q;
    record(k, pick ? USE_CUDNN : USE_QAC, us_q, us_c, NULL);
    if (pick)
        return qac_cuda_check(cudaMemcpyAsync(out, scratch, (size_t)real_rows * C * 2, cudaMemcpyDeviceToDevice, s),
                              "copy");
    return QAC_OK;
}

} // namespace

const char *qac_cudnn_probe(char *buf, size_t cap) {
    qac_cudnn_att *a = NULL;
    const int mode = qac_cudnn_mode();
    if (qac_cudnn_att_create(&a, 0) != QAC_OK) {
        snprintf(buf, cap, "%s", qac_last_error());
        qac_clear_error();
        return buf;
    }
    const shape_key k = {(int)QAC_PREC_BF16, 1, 64, 1, 64};
    char st[512];
    qac_cudnn_status(st, sizeof st);
    if (build_plan(a, &a->plans[0], k) == QAC_OK) {
        a->nplans = 1;
        snprintf(buf, cap, "%s: SDPA forward plans build, mode %s", st, mode == 1 ? "on" : "auto");
    } else {
        snprintf(buf, cap, "%s (mode %s)", qac_last_error(), mode == 1 ? "on" : "auto");
        qac_clear_error();
    }
    qac_cudnn_att_free(a);
    return buf;
}

namespace {
qac_status create_mode(qac_cudnn_att **out, cudaStream_t s, int mode);
}

qac_status qac_cudnn_att_run(qac_cudnn_att *a, void *out, void *qkv, const int *offs, int B, int T, int C, int NH,
                             qac_precision prec, int *idx, cudaStream_t s) {
    if (!a) return qac_set_error(QAC_ERR_UNSUPPORTED, "cuDNN attention: not loaded");
    const shape_key k = {(int)prec, NH, C / NH, B, (T + 63) / 64 * 64};
    plan *pl = find_plan(a, k);
    if (!pl) {
        if (a->nplans == MAX_PLANS) return qac_set_error(QAC_ERR_UNSUPPORTED, "cuDNN attention: plans full");
        pl = &a->plans[a->nplans];
        qac_status st = build_plan(a, pl, k);
        if (st != QAC_OK) return st;
        a->nplans++;
    }
    ragged_kernel<<<qac_div_up((size_t)B + 1, 256), 256, 0, s>>>(idx, offs, B, (int)qac_cudnn_idx_stride(B), C);
    QAC_CU(cudaGetLastError());
    return run_plan(a, pl, out, qkv, idx, s);
}

extern "C" int qac_cudnn_version(void) {
    pthread_once(&g_once, load_once);
    return g_loaded ? (int)g_api.version() : 0;
}

qac_status qac_cudnn_att_create(qac_cudnn_att **out, cudaStream_t s) {
    *out = NULL;
    const int mode = qac_cudnn_mode();
    if (mode == 0) return qac_set_error(QAC_ERR_UNSUPPORTED, "cuDNN attention off (QAC_CUDA_CUDNN=off)");
    return create_mode(out, s, mode);
}

extern "C" qac_status qac_cudnn_fa_forward(float *out, const float *qkv, const float *qkv_b, const int *offs, int B,
                                           int T, int C, int NH, qac_precision prec) {
    int ndev = 0; // asked here, not of cuda_device.cu, which takes qac_cudnn_probe from this file
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        cudaGetLastError(); // the sticky "no driver" error
        return qac_set_error(QAC_ERR_UNSUPPORTED, "no usable CUDA GPU");
    }
    if (!qac_fa_supported(C, NH, prec) || B < 1 || T < 1)
        return qac_set_error(QAC_ERR_INVALID, "cuDNN attention: %d x %d, %d heads over %d in %s", B, T, NH, C,
                             qac_prec_name(prec));
    const int N = offs[B];
    if ((int64_t)N * 3 * C >= ((int64_t)1 << 31))
        return qac_set_error(QAC_ERR_INVALID, "cuDNN attention: %d rows of %d: past int32 offsets", N, 3 * C);
    qac_cudnn_att *a = NULL;
    qac_status st = create_mode(&a, 0, 1);
    if (st != QAC_OK) return st;
    qac_scratch sc = {{0}, 0};
    void *d_qkv = NULL, *d_b = NULL, *d_offs = NULL, *d_idx = NULL, *d_out = NULL;
    const shape_key k = {(int)prec, NH, C / NH, B, (T + 63) / 64 * 64};
    plan *pl = &a->plans[0];
    st = qac_scratch_up_act(&sc, &d_qkv, qkv, (size_t)N * 3 * C, prec);
    if (st == QAC_OK && qkv_b) st = qac_scratch_up(&sc, &d_b, qkv_b, (size_t)3 * C * sizeof(float));
    if (st == QAC_OK) st = qac_scratch_up(&sc, &d_offs, offs, (size_t)(B + 1) * sizeof(int));
    if (st == QAC_OK) st = qac_scratch_alloc(&sc, &d_idx, qac_cudnn_idx_ints(B) * sizeof(int));
    if (st == QAC_OK) st = qac_scratch_alloc(&sc, &d_out, (size_t)N * C * 2);
    if (st == QAC_OK) st = qac_cuda_check(cudaMemset(d_out, 0xff, (size_t)N * C * 2), "poison"); // all written
    if (st == QAC_OK) st = qac_cuda_check(add_bias(d_qkv, (const float *)d_b, N, 3 * C, prec, 0), "QKV bias");
    if (st == QAC_OK) {
        ragged_kernel<<<qac_div_up((size_t)B + 1, 256), 256>>>((int *)d_idx, (const int *)d_offs, B,
                                                               (int)qac_cudnn_idx_stride(B), C);
        st = qac_cuda_check(cudaGetLastError(), "ragged offsets");
    }
    if (st == QAC_OK && (st = build_plan(a, pl, k)) == QAC_OK) a->nplans = 1;
    if (st == QAC_OK) st = run_plan(a, pl, d_out, d_qkv, (int *)d_idx, 0);
    if (st == QAC_OK) st = qac_cuda_check(cudaDeviceSynchronize(), "cuDNN attention");
    if (st == QAC_OK) st = qac_scratch_down_act(&sc, out, d_out, (size_t)N * C, prec);
    qac_scratch_free(&sc);
    qac_cudnn_att_free(a);
    return st;
}

namespace {
qac_status create_mode(qac_cudnn_att **out, cudaStream_t s, int mode) {
    *out = NULL;
    pthread_once(&g_once, load_once);
    if (!g_loaded) {
        char b[512];
        return qac_set_error(QAC_ERR_UNSUPPORTED, "%s", qac_cudnn_status(b, sizeof b));
    }
    qac_cudnn_att *a = (qac_cudnn_att *)calloc(1, sizeof *a);
    if (!a) return qac_set_error(QAC_ERR_NOMEM, "cuDNN attention: out of host memory");
    a->mode = mode;
    cudnnStatus_t st = g_api.create(&a->h);
    if (!st) st = g_api.set_stream(a->h, s);
    if (st) {
        qac_status r = fail("cudnnCreate", st);
        qac_cudnn_att_free(a);
        return r;
    }
    if (cudaMalloc((void **)&a->d_cmp, 3 * sizeof(unsigned)) != cudaSuccess) {
        cudaGetLastError();
        qac_cudnn_att_free(a);
        return qac_set_error(QAC_ERR_CUDA, "cuDNN attention: no device memory for its check");
    }
    *out = a;
    return QAC_OK;
}
} // namespace

void qac_cudnn_att_free(qac_cudnn_att *a) {
    if (!a) return;
    for (int i = 0; i < a->nplans; i++) {
        if (a->plans[i].exec) g_api.destroy_desc(a->plans[i].exec);
        delete a->plans[i].graph;
        cudaFree(a->plans[i].ws);
    }
    if (a->h) g_api.destroy(a->h);
    cudaFree(a->d_cmp);
    free(a);
}

qac_status qac_cudnn_att_forward(qac_cudnn_att *a, void *out, void *qkv, const float *qkv_b, const qac_fa_rows &rows,
                                 int real_rows, int C, int NH, qac_precision prec, const qac_fa_tiles *tiles,
                                 void *scratch, int *idx, cudaStream_t s) {
    const bool io16 = prec == QAC_PREC_BF16 || prec == QAC_PREC_FP16;
    // int32 element offsets: the batch's QKV must stay under 2^31 elements
    if (!a || !io16 || !rows.offs || rows.lens || (int64_t)rows.N * 3 * C >= ((int64_t)1 << 31) || NH <= 0)
        return fa_ours(out, qkv, qkv_b, rows, C, NH, prec, tiles, s);
    const shape_key k = {(int)prec, NH, C / NH, rows.B, (rows.T + 63) / 64 * 64};
    choice c = lookup(k);
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s, &cap) != cudaSuccess) cap = cudaStreamCaptureStatusActive;
    if (c == USE_QAC || (c == UNDECIDED && cap != cudaStreamCaptureStatusNone))
        return fa_ours(out, qkv, qkv_b, rows, C, NH, prec, tiles, s);
    ragged_kernel<<<qac_div_up((size_t)rows.B + 1, 256), 256, 0, s>>>(idx, rows.offs, rows.B,
                                                                      (int)qac_cudnn_idx_stride(rows.B), C);
    QAC_CU(cudaGetLastError());
    plan *pl = find_plan(a, k);
    if (c == UNDECIDED || !pl) {
        if (cap != cudaStreamCaptureStatusNone) return fa_ours(out, qkv, qkv_b, rows, C, NH, prec, tiles, s);
        if (c == UNDECIDED) return decide(a, k, out, qkv, qkv_b, rows, real_rows, C, NH, prec, tiles, scratch, idx, s);
        // decided cuDNN by another encoder: this one's own plan first
        pl = a->nplans < MAX_PLANS ? &a->plans[a->nplans] : NULL;
        if (!pl || build_plan(a, pl, k) != QAC_OK) {
            qac_clear_error();
            return fa_ours(out, qkv, qkv_b, rows, C, NH, prec, tiles, s);
        }
        a->nplans++;
    }
    QAC_CU(add_bias(qkv, qkv_b, rows.N, 3 * C, prec, s));
    if (run_plan(a, pl, out, qkv, idx, s) == QAC_OK) return QAC_OK;
    // the bias is in: qac's kernel without it gives the same E(E(x) + bias)
    qac_clear_error();
    return fa_ours(out, qkv, NULL, rows, C, NH, prec, tiles, s);
}

#endif
