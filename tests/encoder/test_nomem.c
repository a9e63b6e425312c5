/* Out of memory: every allocation the CPU layers, the matrix products, the
 * encoder and a training step (forward and backward through every layer)
 * make is failed in turn, and each call answers
 * QAC_ERR_NOMEM (with a message) or, where it could do without, the right
 * result; never an abort, which ends this process and fails the test. After
 * each refusal the next call gives the reference bits again. With the
 * scratch of a plan (qac_bert_acts, qac_gemm_scratch_bytes), the encoder's
 * forward (fp32, bf16, int8) and a bf16 or int8 product allocate nothing.
 *
 * The failures come from this program's own malloc, calloc, realloc,
 * posix_memalign, aligned_alloc and memalign, which the library (linked in
 * statically) calls instead of the C library's: while armed, the k-th
 * allocation fails. A sanitizer build brings its own allocator, so this
 * test is left out of those builds. */
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bert_cpu.h"
#include "gemm.h"
#include "qac_encoder.h"
#include "testutil.h"

/* ---- failing allocations ---- */

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static atomic_int armed;
static atomic_long seen, fail_at;

static int fail_now(void) {
    if (!atomic_load(&armed)) return 0;
    return atomic_fetch_add(&seen, 1) + 1 == atomic_load(&fail_at);
}

void *malloc(size_t n) { return fail_now() ? NULL : __libc_malloc(n); }
void *calloc(size_t n, size_t s) { return fail_now() ? NULL : __libc_calloc(n, s); }
void *realloc(void *p, size_t n) { return fail_now() ? NULL : __libc_realloc(p, n); }
void *memalign(size_t a, size_t n) { return fail_now() ? NULL : __libc_memalign(a, n); }
void *aligned_alloc(size_t a, size_t n) { return fail_now() ? NULL : __libc_memalign(a, n); }
int posix_memalign(void **out, size_t a, size_t n) {
    if (fail_now()) return 12; /* ENOMEM */
    *out = __libc_memalign(a, n);
    return *out ? 0 : 12;
}

static const char *current = "setup"; /* the case running, for the abort handler */

static void on_abort(int sig) {
    char msg[256];
    int n = snprintf(msg, sizeof msg, "FAIL: abort() in \"%s\" (allocation %ld failed)\n", current,
                     atomic_load(&fail_at));
    if (n > 0) write(2, msg, (size_t)n);
    _exit(1);
}

/* ---- the sweep ---- */

typedef struct sweep_case {
    const char *name;
    qac_status (*run)(void *ctx);       /* the call under test */
    int (*right)(void *ctx);            /* after the call: its output equals the reference */
    void *ctx;
} sweep_case;

/* Fail allocation 1, 2, ... of c->run until a run allocates fewer; returns
 * how many allocations a run makes. */
static long sweep(const sweep_case *c) {
    current = c->name;
    long k;
    for (k = 1;; k++) {
        atomic_store(&seen, 0);
        atomic_store(&fail_at, k);
        atomic_store(&armed, 1);
        qac_status st = c->run(c->ctx);
        atomic_store(&armed, 0);
        long made = atomic_load(&seen);
        if (made < k) { /* nothing failed: the full run */
            CHECK_MSG(st == QAC_OK && c->right(c->ctx), "%s: the run without a failure went wrong (%s)", c->name,
                      qac_status_name(st));
            break;
        }
        CHECK_MSG(st == QAC_ERR_NOMEM || (st == QAC_OK && c->right(c->ctx)),
                  "%s: allocation %ld failed, the call answered %s: %s", c->name, k, qac_status_name(st),
                  qac_last_error());
        if (st == QAC_ERR_NOMEM) CHECK_MSG(*qac_last_error(), "%s: out of memory without a message", c->name);
        CHECK_MSG(c->run(c->ctx) == QAC_OK && c->right(c->ctx), "%s: after a refusal the next call goes wrong",
                  c->name);
    }
    printf("%-34s %3ld allocations, each failed in turn: answered, never aborted\n", c->name, k - 1);
    return k - 1;
}

/* Allocations made by one call (none failed). */
static long allocations(qac_status (*run)(void *), void *ctx) {
    atomic_store(&seen, 0);
    atomic_store(&fail_at, -1);
    atomic_store(&armed, 1);
    qac_status st = run(ctx);
    atomic_store(&armed, 0);
    CHECK_OK(st);
    return atomic_load(&seen);
}

static void fill(float *x, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
}

static int same(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof *a) == 0; }

/* ---- the layers, on small random shapes ---- */

enum { B = 2, T = 9, C = 32, NH = 4, I = 48, N = B * T };

typedef struct layers_ctx {
    qac_pool *pool;
    qac_packed_w wb, wq; /* bf16, int8 */
    float *inp, *w, *bias, *out, *pre, *ref, *ref_pre, *qkv, *att, *datty, *dqkv, *dqkv_ref, *dw, *scratch;
    float *flash_lse, *flash_dq;
    int lens[B];
    qac_dropout drop;
} layers_ctx;

static qac_status run_gemm_bf16(void *v) {
    layers_ctx *c = v;
    return qac_gemm(c->out, c->inp, &c->wb, c->bias, NULL, N, NULL, c->pool);
}
static int right_gemm(void *v) {
    layers_ctx *c = v;
    return same(c->out, c->ref, (size_t)N * I);
}
static qac_status run_gemm_planned(void *v) {
    layers_ctx *c = v;
    return qac_gemm(c->out, c->inp, &c->wb, c->bias, NULL, N, c->scratch, c->pool);
}
static qac_status run_gemm_int8(void *v) {
    layers_ctx *c = v;
    return qac_gemm(c->out, c->inp, &c->wq, c->bias, NULL, N, NULL, c->pool);
}
static qac_status run_gemm_int8_planned(void *v) {
    layers_ctx *c = v;
    return qac_gemm(c->out, c->inp, &c->wq, c->bias, NULL, N, c->scratch, c->pool);
}

static qac_status run_gelu(void *v) {
    layers_ctx *c = v;
    return qac_matmul_gelu_forward(c->out, c->pre, c->inp, c->w, c->bias, N, C, I, c->pool);
}
static int right_gelu(void *v) {
    layers_ctx *c = v;
    return same(c->out, c->ref_pre, (size_t)N * I);
}

static qac_status run_mm_backward(void *v) {
    layers_ctx *c = v;
    memset(c->dw, 0, sizeof(float) * I * C);
    return qac_matmul_backward(c->pre, c->dw, NULL, c->out, c->inp, c->w, NULL, N, C, I, c->scratch, c->pool);
}
static int right_mm_backward(void *v) {
    layers_ctx *c = v;
    return same(c->dw, c->ref, (size_t)I * C) && same(c->pre, c->ref_pre, (size_t)N * C);
}

static qac_status run_att(void *v) {
    layers_ctx *c = v;
    return qac_attention_forward_drop(c->out, c->att, NULL, c->qkv, c->lens, &c->drop, 1, B, T, C, NH, c->pool);
}
static int right_att(void *v) {
    layers_ctx *c = v;
    return same(c->out, c->ref, (size_t)N * C);
}
static qac_status run_att_planned(void *v) {
    layers_ctx *c = v;
    int offs[B] = {0, c->lens[0]};
    return qac_attention_forward_packed(c->out, c->scratch, c->qkv, c->lens, offs, B, T, C, NH, c->pool);
}

static qac_status run_att_backward(void *v) {
    layers_ctx *c = v;
    return qac_attention_backward(c->dqkv, c->datty, c->qkv, c->att, c->lens, &c->drop, 1, B, T, C, NH, c->pool);
}
static int right_att_backward(void *v) {
    layers_ctx *c = v;
    return same(c->dqkv, c->dqkv_ref, (size_t)N * 3 * C);
}

static qac_status run_causal(void *v) {
    layers_ctx *c = v;
    return qac_attention_causal_forward(c->out, c->att, c->qkv, c->lens, 3, &c->drop, 1, B, T, C, NH, c->pool);
}
static qac_status run_causal_backward(void *v) {
    layers_ctx *c = v;
    return qac_attention_causal_backward(c->dqkv, c->datty, c->qkv, c->att, c->lens, 3, &c->drop, 1, B, T, C, NH,
                                         c->pool);
}

static qac_status run_flash(void *v) {
    layers_ctx *c = v;
    return qac_flash_attention_forward(c->out, c->flash_lse, c->qkv, NULL, NULL, c->lens, B, T, C, NH, 0, 0, &c->drop,
                                       1, 4, QAC_PREC_FP32, c->pool);
}
static qac_status run_flash_backward(void *v) {
    layers_ctx *c = v;
    return qac_flash_attention_backward(c->dqkv, c->datty, c->ref_pre, c->flash_lse, c->qkv, NULL, NULL, c->lens, B, T,
                                        C, NH, 0, 0, &c->drop, 1, 4, 4, QAC_PREC_FP32, c->pool);
}

/* Run once for the reference, then sweep. */
static void check_case(layers_ctx *c, const char *name, qac_status (*run)(void *), float *out, size_t n_out,
                       float *ref, int (*right)(void *)) {
    CHECK_OK(run(c));
    memcpy(ref, out, n_out * sizeof *out);
    sweep(&(sweep_case){name, run, right, c});
}

static void test_layers(qac_pool *pool) {
    layers_ctx c = {.pool = pool, .lens = {T, 5}, .drop = {0.1f, 0.1f, 7, NULL}};
    size_t big = (size_t)N * 3 * C > (size_t)N * I ? (size_t)N * 3 * C : (size_t)N * I;
    float *mem = calloc(16 * big + (size_t)B * NH * T * T, sizeof(float));
    c.inp = mem, c.w = c.inp + big, c.bias = c.w + big, c.out = c.bias + big, c.pre = c.out + big;
    c.ref = c.pre + big, c.ref_pre = c.ref + big, c.qkv = c.ref_pre + big, c.datty = c.qkv + big;
    c.dqkv = c.datty + big, c.dqkv_ref = c.dqkv + big, c.dw = c.dqkv_ref + big, c.flash_lse = c.dw + big;
    c.flash_dq = c.flash_lse + big, c.att = c.flash_dq + big;
    fill(c.inp, (size_t)N * C, 1), fill(c.w, (size_t)I * C, 2), fill(c.bias, I, 3), fill(c.qkv, (size_t)N * 3 * C, 4);
    fill(c.datty, (size_t)N * C, 5);
    CHECK_OK(qac_gemm_pack_bf16(&c.wb, c.w, I, C));
    CHECK_OK(qac_gemm_pack_int8(&c.wq, c.w, I, C));
    size_t att_floats = (size_t)qac_pool_size(pool) * qac_attention_scratch_floats(T, C, NH, 1);
    size_t mm_floats = qac_matmul_backward_scratch(N, C, I), gemm_floats = qac_gemm_scratch_bytes(C, qac_pool_size(pool));
    size_t scratch_floats = att_floats > mm_floats ? att_floats : mm_floats;
    c.scratch = calloc(scratch_floats > gemm_floats ? scratch_floats : gemm_floats, sizeof(float));

    check_case(&c, "bf16 product, scratch of its own", run_gemm_bf16, c.out, (size_t)N * I, c.ref, right_gemm);
    long planned = allocations(run_gemm_planned, &c);
    CHECK_MSG(planned == 0 && right_gemm(&c), "bf16 product with a plan's scratch: %ld allocations", planned);
    check_case(&c, "int8 product, scratch of its own", run_gemm_int8, c.out, (size_t)N * I, c.ref, right_gemm);
    planned = allocations(run_gemm_int8_planned, &c);
    CHECK_MSG(planned == 0 && right_gemm(&c), "int8 product with a plan's scratch: %ld allocations", planned);
    check_case(&c, "matmul + GELU (packs its weights)", run_gelu, c.out, (size_t)N * I, c.ref_pre, right_gelu);
    /* backward: dw [I, C] in ref, dinp [N, C] in ref_pre */
    CHECK_OK(run_mm_backward(&c));
    memcpy(c.ref, c.dw, sizeof(float) * I * C);
    memcpy(c.ref_pre, c.pre, sizeof(float) * N * C);
    sweep(&(sweep_case){"matmul backward (dW blocks)", run_mm_backward, right_mm_backward, &c});
    check_case(&c, "attention, dropout, no scratch", run_att, c.out, (size_t)N * C, c.ref, right_att);
    check_case(&c, "attention backward", run_att_backward, c.dqkv, (size_t)N * 3 * C, c.dqkv_ref, right_att_backward);
    long packed = allocations(run_att_planned, &c);
    CHECK_MSG(packed == 0, "packed attention with a plan's scratch: %ld allocations", packed);
    check_case(&c, "causal attention, dropout", run_causal, c.out, (size_t)N * C, c.ref, right_att);
    check_case(&c, "causal attention backward", run_causal_backward, c.dqkv, (size_t)N * 3 * C, c.dqkv_ref,
               right_att_backward);
    check_case(&c, "fused attention", run_flash, c.out, (size_t)N * C, c.ref, right_att);
    memcpy(c.ref_pre, c.out, sizeof(float) * N * C); /* the forward's out, which the backward reads */
    check_case(&c, "fused attention backward", run_flash_backward, c.dqkv, (size_t)N * 3 * C, c.dqkv_ref,
               right_att_backward);
    /* pooling backward with normalisation: worked out in its output */
    current = "pooling backward";
    atomic_store(&seen, 0), atomic_store(&fail_at, -1), atomic_store(&armed, 1);
    qac_pooling_backward(c.out, c.datty, c.qkv, c.lens, B, T, C, QAC_POOL_MEAN, 1);
    atomic_store(&armed, 0);
    CHECK_MSG(atomic_load(&seen) == 0, "pooling backward allocated %ld times", atomic_load(&seen));
    qac_gemm_packed_free(&c.wb);
    qac_gemm_packed_free(&c.wq);
    free(c.scratch);
    free(mem);
}

/* ---- the encoder, and the forward from a plan ---- */

typedef struct enc_ctx {
    const qac_model *m;
    qac_encoder_opts o;
    qac_encoder *e; /* made by the run (a new encoder allocates all it needs) */
    const char **texts;
    int n;
    float *out, *ref;
} enc_ctx;

static qac_status run_encoder(void *v) {
    enc_ctx *c = v;
    qac_encoder_free(c->e);
    c->e = NULL;
    qac_status st = qac_encoder_create(&c->e, c->m, &c->o);
    if (!st) st = qac_encoder_encode_texts(c->e, c->texts, NULL, c->n, 0, c->out);
    return st;
}
static int right_encoder(void *v) {
    enc_ctx *c = v;
    return same(c->out, c->ref, (size_t)c->n * c->m->cfg.hidden_size);
}

typedef struct fwd_ctx {
    const qac_model *m;
    qac_bert_acts *a;
    qac_bert_packed *pk;
    const int32_t *ids;
    const int *lens, *offs;
    int B, T;
    qac_pool *pool;
} fwd_ctx;

static qac_status run_forward(void *v) {
    fwd_ctx *c = v;
    return qac_bert_forward_packed(c->a, &c->m->cfg, &c->m->p, c->pk, c->ids, NULL, c->lens, c->offs, c->B, c->T,
                                   c->pool);
}

/* A training step's forward and backward through every layer: the matrix
 * products' dW blocks and the attention's scratch are allocated per call,
 * and a refusal deep in layer l must come back up as the step's status. */
typedef struct step_ctx {
    const qac_model *m;
    qac_bert_acts *a;
    qac_bert_bwd *w;
    qac_bert_packed *pk;
    qac_bert_params g;
    float *grad, *dlast, *ref;
    const int32_t *ids;
    const int *lens;
    int B, T;
    qac_dropout drop;
    qac_pool *pool;
} step_ctx;

static qac_status run_step(void *v) {
    step_ctx *c = v;
    const qac_bert_config *cfg = &c->m->cfg;
    memset(c->grad, 0, c->m->n_params * sizeof(float));
    qac_status st = qac_bert_forward_train(c->a, cfg, &c->m->p, c->pk, c->ids, NULL, c->lens, c->B, c->T, &c->drop,
                                           c->pool);
    if (st) return st;
    const float *dh[64] = {0};
    dh[cfg->num_layers] = c->dlast;
    return qac_bert_backward(&c->g, c->w, dh, c->a, cfg, &c->m->p, c->pk, c->ids, NULL, c->lens, c->B, c->T, &c->drop,
                             c->pool);
}
static int right_step(void *v) {
    step_ctx *c = v;
    return same(c->grad, c->ref, c->m->n_params);
}

static void test_train_step(const qac_model *m, qac_pool *pool) {
    enum { SB = 2, ST = 6 };
    const qac_bert_config *cfg = &m->cfg;
    if (cfg->num_layers >= 64) return;
    int32_t ids[SB * ST] = {101, 2023, 2003, 1037, 3231, 102, 101, 7597, 102, 0, 0, 0};
    int lens[SB] = {6, 3};
    qac_bert_packed pk;
    qac_bert_acts a = {0};
    qac_bert_bwd w = {0};
    CHECK_OK(qac_bert_pack(&pk, cfg, &m->p));
    CHECK_OK(qac_bert_acts_alloc(&a, cfg, SB, ST, QAC_ACTS_KEEP, qac_pool_size(pool)));
    CHECK_OK(qac_bert_bwd_alloc(&w, cfg, SB, ST));
    step_ctx c = {m, &a, &w, &pk, {0}, calloc(m->n_params, sizeof(float)),
                  malloc(sizeof(float) * SB * ST * cfg->hidden_size), malloc(m->n_params * sizeof(float)), ids, lens,
                  SB, ST, {0.1f, 0.1f, 11, NULL}, pool};
    qac_bert_params_bind(&c.g, cfg, c.grad);
    fill(c.dlast, (size_t)SB * ST * cfg->hidden_size, 9);
    CHECK_OK(run_step(&c));
    memcpy(c.ref, c.grad, m->n_params * sizeof(float));
    sweep(&(sweep_case){"training step (forward + backward)", run_step, right_step, &c});
    free(c.grad), free(c.dlast), free(c.ref);
    qac_bert_acts_free(&a);
    qac_bert_bwd_free(&w);
    qac_bert_packed_free(&pk);
}

static void test_encoder(qac_pool *pool) {
    qac_model *m = NULL;
    CHECK_OK(qac_model_load(&m, qac_test_model_dir()));
    if (!m) return;
    const char *texts[] = {"wing", "the boundary layer on a flat plate at high mach numbers", "shock waves"};
    int n = 3, dim = m->cfg.hidden_size;
    float *out = malloc(sizeof(float) * n * dim), *ref = malloc(sizeof(float) * n * dim);
    static const qac_precision precs[] = {QAC_PREC_FP32, QAC_PREC_BF16, QAC_PREC_INT8};
    static const char *const names[] = {"CPU encoder, fp32", "CPU encoder, bf16", "CPU encoder, int8"};
    for (int k = 0; k < 3; k++) {
        enc_ctx c = {m, qac_encoder_default_opts(), NULL, texts, n, out, ref};
        c.o.device = QAC_DEVICE_CPU;
        c.o.threads = 2;
        c.o.cpu_precision = precs[k];
        CHECK_OK(run_encoder(&c));
        memcpy(ref, out, sizeof(float) * n * dim);
        sweep(&(sweep_case){names[k], run_encoder, right_encoder, &c});
        qac_encoder_free(c.e);
    }
    /* the forward takes all its memory from the activations' plan */
    qac_bert_packed pk[3];
    CHECK_OK(qac_bert_pack(&pk[0], &m->cfg, &m->p));
    CHECK_OK(qac_bert_pack_bf16(&pk[1], &m->cfg, &m->p));
    CHECK_OK(qac_bert_pack_int8(&pk[2], &m->cfg, &m->p));
    int32_t ids[] = {101, 2023, 2003, 1037, 3231, 102, 101, 7597, 102};
    int lens[] = {6, 3}, offs[] = {0, 6};
    qac_bert_acts a = {0};
    CHECK_OK(qac_bert_acts_alloc(&a, &m->cfg, 2, 6, QAC_ACTS_INFER, qac_pool_size(pool)));
    static const char *const modes[] = {"fp32", "bf16", "int8"};
    for (int k = 0; k < 3; k++) {
        fwd_ctx f = {m, &a, &pk[k], ids, lens, offs, 2, 6, pool};
        long made = allocations(run_forward, &f);
        printf("encoder forward from its plan (%s): %ld allocations\n", modes[k], made);
        CHECK_MSG(made == 0, "the %s forward allocated %ld times", modes[k], made);
    }
    { /* int8 with the FFN's rows quantised by its GELU step (qac_bert_acts_q8) */
        CHECK_OK(qac_bert_acts_q8(&a, &m->cfg));
        fwd_ctx f = {m, &a, &pk[2], ids, lens, offs, 2, 6, pool};
        long made = allocations(run_forward, &f);
        printf("encoder forward from its plan (int8, the FFN's rows quantised ahead): %ld allocations\n", made);
        CHECK_MSG(made == 0, "the int8 forward with q8 allocated %ld times", made);
    }
    qac_bert_acts_free(&a);
    test_train_step(m, pool);
    for (int k = 0; k < 3; k++) qac_bert_packed_free(&pk[k]);
    free(out), free(ref);
    qac_model_free(m);
}

int main(void) {
    signal(SIGABRT, on_abort);
    qac_pool *pool = NULL;
    CHECK_OK(qac_pool_create(&pool, 2));
    test_layers(pool);
    test_encoder(pool);
    qac_pool_free(pool);
    return qac_test_summary();
}
