/* The layer math the families beyond BERT add, each forward beside its
 * backward: position ids (RoBERTa's offset), rotary embeddings and the
 * GeGLU feed-forward (ModernBERT). Contracts in bert_cpu.h; the CUDA twins
 * are in kernels/family_kernels.cu. Compiled without contraction (see
 * CMakeLists.txt): each product and sum rounds on its own, as transformers'
 * element-wise tensor operations do. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bert_cpu.h"
#include "vecmath.h"

/* ---- position ids ---- */

void qac_positions_fill(int32_t *pos, const int32_t *ids, const int *lens, const int *offs, int B, int T,
                        const qac_bert_config *c) {
    int pad = c->pad_token_id;
    for (int b = 0; b < B; b++) {
        size_t row0 = offs ? (size_t)offs[b] : (size_t)b * T;
        int rows = offs ? lens[b] : T, seen = 0;
        for (int t = 0; t < rows; t++) {
            size_t r = row0 + (size_t)t;
            if (c->positions != QAC_POS_OFFSET) pos[r] = t;
            else if (t >= lens[b] || ids[r] == pad) pos[r] = pad;
            else pos[r] = pad + ++seen;
        }
    }
}

/* ---- rotary embeddings ---- */

void qac_rope_table(float *cs, int P, int hs, float theta) {
    int h2 = hs / 2;
    for (int i = 0; i < h2; i++) {
        float inv = 1.0f / powf(theta, (float)(2 * i) / (float)hs);
        for (int p = 0; p < P; p++) {
            float a = (float)p * inv;
            cs[(size_t)p * hs + i] = cosf(a);
            cs[(size_t)p * hs + h2 + i] = sinf(a);
        }
    }
}

typedef struct rope_ctx {
    float *qkv;
    const int32_t *pos;
    const float *cs;
    int C, NH, inverse;
} rope_ctx;

/* Each row's Q and K heads turned by its position's angles (or back). */
static void rope_task(void *vctx, int64_t begin, int64_t end, int tid) {
    const rope_ctx *c = vctx;
    int C = c->C, hs = C / c->NH, h2 = hs / 2;
    for (int64_t r = begin; r < end; r++) {
        const float *co = c->cs + (size_t)c->pos[r] * hs, *si = co + h2;
        float *row = c->qkv + (size_t)r * 3 * C;
        for (int part = 0; part < 2; part++)
            for (int h = 0; h < c->NH; h++) {
                float *x = row + (size_t)part * C + (size_t)h * hs;
                for (int i = 0; i < h2; i++) {
                    float x1 = x[i], x2 = x[i + h2];
                    if (c->inverse) { /* the transpose: dx = R^T dy */
                        x[i] = x1 * co[i] + x2 * si[i];
                        x[i + h2] = x2 * co[i] - x1 * si[i];
                    } else {
                        x[i] = x1 * co[i] + -x2 * si[i];
                        x[i + h2] = x2 * co[i] + x1 * si[i];
                    }
                }
            }
    }
}

void qac_rope_forward(float *qkv, const int32_t *pos, const float *cs, int N, int C, int NH, qac_pool *pool) {
    rope_ctx c = {qkv, pos, cs, C, NH, 0};
    qac_pool_for(pool, N, 0, rope_task, &c);
}

void qac_rope_backward(float *dqkv, const int32_t *pos, const float *cs, int N, int C, int NH, qac_pool *pool) {
    rope_ctx c = {dqkv, pos, cs, C, NH, 1};
    qac_pool_for(pool, N, 0, rope_task, &c);
}

/* ---- GeGLU ---- */

typedef struct glu_ctx {
    float *out;
    const float *in, *pre;
    int I;
} glu_ctx;

static void geglu_task(void *vctx, int64_t begin, int64_t end, int tid) {
    const glu_ctx *c = vctx;
    int I = c->I;
    for (int64_t r = begin; r < end; r++) {
        const float *x = c->pre + (size_t)r * 2 * I, *gate = x + I;
        float *o = c->out + (size_t)r * I;
        qac_vm_gelu(o, x, (size_t)I);
        for (int i = 0; i < I; i++) o[i] *= gate[i];
    }
}

void qac_geglu_forward(float *act, const float *pre, int N, int I, qac_pool *pool) {
    glu_ctx c = {act, NULL, pre, I};
    qac_pool_for(pool, N, 0, geglu_task, &c);
}

/* d input = GELU'(x) (dact gate), d gate = dact GELU(x): autograd's order. */
static void geglu_bwd_task(void *vctx, int64_t begin, int64_t end, int tid) {
    const glu_ctx *c = vctx;
    int I = c->I;
    for (int64_t r = begin; r < end; r++) {
        const float *x = c->pre + (size_t)r * 2 * I, *gate = x + I, *g = c->in + (size_t)r * I;
        float *dx = c->out + (size_t)r * 2 * I, *dgate = dx + I;
        qac_vm_gelu(dgate, x, (size_t)I);
        for (int i = 0; i < I; i++) {
            dx[i] = g[i] * gate[i];
            dgate[i] *= g[i];
        }
        qac_vm_gelu_backward(dx, dx, x, (size_t)I);
    }
}

void qac_geglu_backward(float *dpre, const float *dact, const float *pre, int N, int I, qac_pool *pool) {
    glu_ctx c = {dpre, dact, pre, I};
    qac_pool_for(pool, N, 0, geglu_bwd_task, &c);
}

/* ---- the pre-LayerNorm step (the CUDA encoder's fused pass) ---- */

typedef struct addln_ctx {
    float *x, *xn;
    const float *r, *bias, *w, *b;
    int C;
    float eps;
} addln_ctx;

static void addln_task(void *vctx, int64_t begin, int64_t end, int tid) {
    const addln_ctx *c = vctx;
    int C = c->C;
    for (int64_t r = begin; r < end; r++) {
        float *x = c->x + (size_t)r * C;
        if (c->r) {
            const float *p = c->r + (size_t)r * C;
            for (int i = 0; i < C; i++) x[i] = x[i] + (c->bias ? p[i] + c->bias[i] : p[i]);
        }
        qac_vm_layernorm_row(c->xn + (size_t)r * C, NULL, NULL, x, c->w, c->b, C, c->eps);
    }
}

void qac_add_layernorm_forward(float *x, float *xn, const float *r, const float *bias, const float *w, const float *b,
                               int N, int C, float eps, qac_pool *pool) {
    addln_ctx c = {x, xn, r, bias, w, b, C, eps};
    qac_pool_for(pool, N, 0, addln_task, &c);
}
