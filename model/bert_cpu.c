/* The CPU encoder composed from the layer math in layers.c: activation
 * layout, weight packing and the forward pass (inference and training). */
#include "bert_cpu.h"

#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "qac_cpu.h"
#include "qac_util.h"

/* ---- activations ---- */

typedef struct acts_layout {
    size_t emb, emb_mean, emb_rstd, hidden, qkv, att, scratch, atty, res1, ln1_mean, ln1_rstd, ln1, ffn_in,
        ffn_pre, ffn_act, res2, ln2_mean, ln2_rstd, final_mean, final_rstd, last, pos, rope, total;
} acts_layout;

#define NONE ((size_t)-1)

static acts_layout layout(const qac_bert_config *c, int B, int T, int keep, int nthreads) {
    acts_layout l;
    size_t N = (size_t)B * T, C = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    size_t F = (size_t)qac_bert_ffn_rows(c), L = (size_t)c->num_layers, NH = (size_t)c->num_heads;
    int pre = c->pre_norm;
    size_t off = 0;
    /* every region starts on a cache line (the block is 64-byte aligned):
     * rows of C floats then never straddle two lines */
#define UP(o) (((o) + 15) & ~(size_t)15)
#define TAKE(field, n) (off = UP(off), l.field = off, off += (n))
    if (keep) {
        size_t Lk = keep == QAC_ACTS_RECOMPUTE ? 1 : L;
        TAKE(emb, N * C);
        TAKE(emb_mean, N);
        TAKE(emb_rstd, N);
        TAKE(hidden, (L + 1) * N * C);
        TAKE(qkv, Lk * N * 3 * C);
        TAKE(att, Lk * B * NH * T * T);
        TAKE(scratch, qac_bert_scratch_floats(c, T, nthreads));
        TAKE(atty, Lk * N * C);
        TAKE(res1, Lk * N * C);
        TAKE(ln1_mean, Lk * N);
        TAKE(ln1_rstd, Lk * N);
        TAKE(ln1, Lk * N * C);
        if (pre) TAKE(ffn_in, Lk * N * C); /* LN2's output; post-LN: LN1's */
        else l.ffn_in = l.ln1;
        TAKE(ffn_pre, Lk * N * F);
        TAKE(ffn_act, Lk * N * I);
        if (pre) l.res2 = NONE; /* the layer's output is the residual sum */
        else TAKE(res2, Lk * N * C);
        TAKE(ln2_mean, Lk * N);
        TAKE(ln2_rstd, Lk * N);
        if (pre) {
            TAKE(final_mean, N);
            TAKE(final_rstd, N);
            TAKE(last, N * C);
        } else {
            l.final_mean = l.final_rstd = NONE;
            l.last = l.hidden + L * N * C;
        }
    } else {
        /* row A: layer input, residual 2, output; row B: residual 1 / LN1
         * (pre-LN: A holds the residual stream throughout, B the norms);
         * "big": Q|K|V and the attention context, later the FFN's
         * pre-activation (GeGLU) and activation */
        size_t A = off;
        off = UP(off + N * C);
        size_t Bq = off;
        off = UP(off + N * C);
        size_t big = off, ffn = c->glu ? F + I : I;
        off += N * (4 * C > ffn ? 4 * C : ffn);
        l.emb = l.hidden = l.res2 = l.last = A;
        l.res1 = pre ? A : Bq;
        l.ln1 = l.ffn_in = Bq;
        l.qkv = big;
        l.ffn_pre = c->glu ? big : NONE;
        l.ffn_act = c->glu ? big + N * F : big;
        l.atty = big + N * 3 * C;
        l.emb_mean = l.emb_rstd = l.ln1_mean = l.ln1_rstd = l.ln2_mean = l.ln2_rstd = NONE;
        l.final_mean = l.final_rstd = NONE;
        l.att = NONE;
        TAKE(scratch, qac_bert_scratch_floats(c, T, nthreads));
    }
    TAKE(pos, N); /* int32 position ids */
    if (c->positions == QAC_POS_ROTARY) TAKE(rope, 2 * (size_t)T * (C / NH));
    else l.rope = NONE;
#undef TAKE
#undef UP
    l.total = off;
    return l;
}

size_t qac_bert_scratch_floats(const qac_bert_config *c, int T, int nthreads) {
    size_t nt = (size_t)(nthreads > 0 ? nthreads : 1);
    size_t att = nt * qac_attention_scratch_floats(T, c->hidden_size, c->num_heads, 1);
    /* the products read C inputs (Q|K|V, the attention output, the FFN's
     * first) or I (the FFN's second); their scratch is not monotone in the
     * inputs (a block's rows are rounded to whole tiles), so both count */
    size_t gc = qac_gemm_scratch_bytes(c->hidden_size, (int)nt);
    size_t gi = qac_gemm_scratch_bytes(c->intermediate_size, (int)nt);
    size_t mm = ((gc > gi ? gc : gi) + sizeof(float) - 1) / sizeof(float);
    return att > mm ? att : mm; /* the attention and the products never run at once */
}

size_t qac_bert_acts_size(const qac_bert_config *c, int B, int T, int keep, int nthreads) {
    return layout(c, B, T, keep, nthreads).total;
}

static float *view(float *mem, size_t off) { return off == NONE ? NULL : mem + off; }

qac_status qac_bert_acts_alloc(qac_bert_acts *a, const qac_bert_config *c, int B, int T, int keep,
                               int nthreads) {
    if (B < 1 || T < 1 || T > c->max_position)
        return qac_set_error(QAC_ERR_INVALID, "activations: bad shape B=%d T=%d (max %d positions)", B, T,
                             c->max_position);
    if (nthreads < 1) nthreads = 1;
    acts_layout l = layout(c, B, T, keep, nthreads);
    if (l.total > a->n_floats) {
        float *m = qac_malloc_lines(l.total * sizeof(float));
        if (!m)
            return qac_set_error(QAC_ERR_NOMEM, "activations: cannot allocate %.1f MiB for B=%d T=%d",
                                 (double)l.total * 4 / (1 << 20), B, T);
        free(a->mem);
        a->mem = m;
        a->n_floats = l.total;
    }
    float *m = a->mem;
    a->B = B;
    a->T = T;
    a->keep = keep;
    a->layers_kept = keep == QAC_ACTS_KEEP ? c->num_layers : 1;
    a->nthreads = nthreads;
    a->emb = view(m, l.emb);
    a->emb_mean = view(m, l.emb_mean);
    a->emb_rstd = view(m, l.emb_rstd);
    a->hidden = view(m, l.hidden);
    a->qkv = view(m, l.qkv);
    a->att = view(m, l.att);
    a->scratch = view(m, l.scratch);
    a->atty = view(m, l.atty);
    a->res1 = view(m, l.res1);
    a->ln1_mean = view(m, l.ln1_mean);
    a->ln1_rstd = view(m, l.ln1_rstd);
    a->ln1 = view(m, l.ln1);
    a->ffn_pre = view(m, l.ffn_pre);
    a->ffn_act = view(m, l.ffn_act);
    a->res2 = view(m, l.res2);
    a->ln2_mean = view(m, l.ln2_mean);
    a->ln2_rstd = view(m, l.ln2_rstd);
    a->ffn_in = view(m, l.ffn_in);
    a->final_mean = view(m, l.final_mean);
    a->final_rstd = view(m, l.final_rstd);
    a->last = view(m, l.last);
    a->pos = (int32_t *)view(m, l.pos);
    a->rope = view(m, l.rope);
    a->rope_T = 0; /* the rotary tables are filled by the next forward */
    return QAC_OK;
}

void qac_bert_acts_free(qac_bert_acts *a) {
    if (!a) return;
    free(a->mem);
    free(a->q8);
    memset(a, 0, sizeof *a);
}

/* The int8 encoder's room after the FFN's quantised rows (qac_gemm_q8):
 * earlier in each layer the same bytes hold Q|K|V in bf16 [N, 3C], each
 * thread's attention scratch and a count of finished rows a sequence
 * (qkv_attention) */
typedef struct q8_room {
    size_t qkv16, att, att_stride, done, total; /* byte offsets; att_stride in floats */
} q8_room;

static q8_room q8_layout(const qac_bert_config *c, int B, int T, int nthreads) {
    q8_room r;
    size_t N = (size_t)B * T, C = (size_t)c->hidden_size;
    r.qkv16 = 0;
    r.att = (N * 3 * C * sizeof(uint16_t) + 63) / 64 * 64;
    r.att_stride = qac_attention_scratch_floats(T, c->hidden_size, c->num_heads, 1);
    r.done = r.att + (size_t)nthreads * r.att_stride * sizeof(float);
    r.total = r.done + (size_t)B * sizeof(int);
    size_t q8 = qac_gemm_q8_bytes((int)N, c->intermediate_size);
    if (q8 > r.total) r.total = q8;
    return r;
}

qac_status qac_bert_acts_q8(qac_bert_acts *a, const qac_bert_config *c) {
    size_t need = q8_layout(c, a->B, a->T, a->nthreads).total;
    if (need <= a->q8_bytes) return QAC_OK;
    void *m = qac_malloc_lines(need);
    if (!m)
        return qac_set_error(QAC_ERR_NOMEM, "activations: cannot allocate %.1f MiB for the int8 FFN's rows (B=%d T=%d)",
                             (double)need / (1 << 20), a->B, a->T);
    free(a->q8);
    a->q8 = m;
    a->q8_bytes = need;
    return QAC_OK;
}

/* ---- forward ---- */

#define AT(ptr, l, n) ((ptr) ? (ptr) + (size_t)(l) * (n) : NULL)

void qac_bert_packed_free(qac_bert_packed *pk) {
    if (!pk) return;
    for (int l = 0; l < pk->L; l++) {
        if (pk->qkv) qac_gemm_packed_free(&pk->qkv[l]);
        if (pk->attn_out) qac_gemm_packed_free(&pk->attn_out[l]);
        if (pk->ffn_in) qac_gemm_packed_free(&pk->ffn_in[l]);
        if (pk->ffn_out) qac_gemm_packed_free(&pk->ffn_out[l]);
    }
    free(pk->qkv), free(pk->attn_out), free(pk->ffn_in), free(pk->ffn_out);
    memset(pk, 0, sizeof *pk);
}

static qac_status pack_all(qac_bert_packed *pk, const qac_bert_config *c, const qac_bert_params *p,
                           qac_status (*pack)(qac_packed_w *, const float *, int, int)) {
    memset(pk, 0, sizeof *pk);
    int C = c->hidden_size, I = c->intermediate_size, F = qac_bert_ffn_rows(c), L = c->num_layers;
    pk->qkv = calloc((size_t)L, sizeof *pk->qkv);
    pk->attn_out = calloc((size_t)L, sizeof *pk->attn_out);
    pk->ffn_in = calloc((size_t)L, sizeof *pk->ffn_in);
    pk->ffn_out = calloc((size_t)L, sizeof *pk->ffn_out);
    pk->L = L;
    qac_status st = pk->qkv && pk->attn_out && pk->ffn_in && pk->ffn_out
                        ? QAC_OK
                        : qac_set_error(QAC_ERR_NOMEM, "out of memory packing the encoder weights");
    for (int l = 0; !st && l < L; l++) {
        size_t lc = (size_t)l * C;
        if ((st = pack(&pk->qkv[l], p->qkv_w + lc * 3 * C, 3 * C, C)) ||
            (st = pack(&pk->attn_out[l], p->attn_out_w + lc * C, C, C)) ||
            (st = pack(&pk->ffn_in[l], p->ffn_in_w + (size_t)l * F * C, F, C)))
            break;
        st = pack(&pk->ffn_out[l], p->ffn_out_w + (size_t)l * C * I, C, I);
    }
    if (st) qac_bert_packed_free(pk);
    return st;
}

qac_status qac_bert_pack(qac_bert_packed *pk, const qac_bert_config *c, const qac_bert_params *p) {
    return pack_all(pk, c, p, qac_gemm_pack);
}

qac_status qac_bert_pack_bf16(qac_bert_packed *pk, const qac_bert_config *c, const qac_bert_params *p) {
    return pack_all(pk, c, p, qac_gemm_pack_bf16);
}

qac_status qac_bert_pack_int8(qac_bert_packed *pk, const qac_bert_config *c, const qac_bert_params *p) {
    return pack_all(pk, c, p, qac_gemm_pack_int8);
}

void qac_bert_repack(qac_bert_packed *pk, const qac_bert_config *c, const qac_bert_params *p, qac_pool *pool) {
    int C = c->hidden_size, I = c->intermediate_size, F = qac_bert_ffn_rows(c);
    for (int l = 0; l < pk->L; l++) {
        size_t lc = (size_t)l * C;
        qac_gemm_pack_parallel(pk->qkv[l].p, p->qkv_w + lc * 3 * C, 3 * C, C, C, 0, pool);
        qac_gemm_pack_parallel(pk->attn_out[l].p, p->attn_out_w + lc * C, C, C, C, 0, pool);
        qac_gemm_pack_parallel(pk->ffn_in[l].p, p->ffn_in_w + (size_t)l * F * C, F, C, C, 0, pool);
        qac_gemm_pack_parallel(pk->ffn_out[l].p, p->ffn_out_w + (size_t)l * C * I, C, I, I, 0, pool);
    }
}

static qac_status check_inputs(const qac_bert_acts *a, const qac_bert_config *c, const qac_bert_packed *pk,
                               const int32_t *ids, const int32_t *type_ids, const int *lens, int B, int T,
                               qac_pool *pool) {
    if (!pk || pk->L != c->num_layers) return qac_set_error(QAC_ERR_INVALID, "bert forward: weights not packed");
    if (!a->mem || a->B != B || a->T != T)
        return qac_set_error(QAC_ERR_INVALID, "bert forward: activations not allocated for B=%d T=%d", B, T);
    if (a->nthreads < qac_pool_size(pool))
        return qac_set_error(QAC_ERR_INVALID, "bert forward: activations sized for %d threads, pool has %d",
                             a->nthreads, qac_pool_size(pool));
    int most = qac_bert_max_tokens(c);
    for (int b = 0; b < B; b++)
        if (lens[b] < 1 || lens[b] > T || lens[b] > most)
            return qac_set_error(QAC_ERR_INVALID, "bert forward: sequence %d has length %d (T=%d, at most %d)", b,
                                 lens[b], T, most);
    size_t N = (size_t)B * T;
    int types = c->type_vocab_size > 0 ? c->type_vocab_size : 1; /* none: type 0 only, and unread */
    for (size_t i = 0; i < N; i++) {
        if (ids[i] < 0 || ids[i] >= c->vocab_size)
            return qac_set_error(QAC_ERR_INVALID, "bert forward: token id %d out of range [0, %d)", ids[i],
                                 c->vocab_size);
        if (type_ids && (type_ids[i] < 0 || type_ids[i] >= types))
            return qac_set_error(QAC_ERR_INVALID, "bert forward: token type %d out of range [0, %d)", type_ids[i],
                                 types);
    }
    return QAC_OK;
}

/* Optional per-layer bias views: NULL where the family has none. */
#define BIAS(ptr, off) ((ptr) ? (ptr) + (off) : NULL)

/* The rotary tables of a (global theta, then local) for positions [0, T),
 * filled once per allocation. */
static void rope_prepare(qac_bert_acts *a, const qac_bert_config *c, int T) {
    if (!a->rope || a->rope_T >= T) return;
    int hs = c->hidden_size / c->num_heads;
    qac_rope_table(a->rope, T, hs, c->rope_theta);
    qac_rope_table(a->rope + (size_t)T * hs, T, hs, c->rope_theta_local);
    a->rope_T = T;
}

/* The int8 encoder's attention (packed rows, global layers): P V in bf16
 * where the head size is even (QK^T, the softmax and the rest in fp32;
 * qac_attention_forward_packed_bf16); 0: the fp32 attention. */
static int att_bf16(const qac_bert_packed *pk, int l, int C, int NH) {
    return pk->qkv[l].pq && (C / NH) % 2 == 0 ? QAC_ATT_BF16_PV : 0;
}

/* The int8 encoder's Q|K|V in bf16 and its attention fused
 * (qkv_attention): packed rows, global layers, absolute positions, an
 * even head size, AVX512_BF16, and a->q8 sized for them (qac_bert_acts_q8,
 * for the acts' shape: B sequences of T rows at most). */
static int att_qkv16(const qac_bert_acts *a, const qac_bert_config *c, const qac_bert_packed *pk, int l,
                     const int *offs, int B, int T) {
    int C = c->hidden_size, NH = c->num_heads;
    return pk->qkv[l].pq && offs && a->q8 && B <= a->B && T <= a->T &&
           a->q8_bytes >= q8_layout(c, a->B, a->T, a->nthreads).total && !qac_bert_layer_window(c, l) &&
           c->positions != QAC_POS_ROTARY && (C / NH) % 2 == 0 && qac_cpu_bf16();
}

typedef struct qkv_att_ctx {
    uint16_t *qkv16;
    float *out, *att_scratch;
    size_t att_stride;
    int *done;
    const int *lens, *offs, *rows;
    int B, T, C, NH;
} qkv_att_ctx;

/* Q|K|V rows rounded to bf16 into qkv16 (rows: in fp32) */
static void qkv_round_at(void *vctx, int r0, int r1, float *rows, int tid) {
    const qkv_att_ctx *c = vctx;
    int OC = 3 * c->C;
    (void)tid;
    for (int r = 0; r < r1 - r0; r++)
        qac_gemm_round_bf16(c->qkv16 + (size_t)(r0 + r) * OC, rows + (size_t)r * OC, OC, 1.0f);
}

/* A block of finished Q|K|V rows [r0, r1) (at rows, in fp32): rounded to
 * bf16 into qkv16, then each sequence whose last rows these were gets its
 * attention here, while its rows are still in this core's caches (a
 * sequence's rows may come from blocks of both threads: the count of its
 * finished rows says which block is the last). */
static void qkv_att_at(void *vctx, int r0, int r1, float *rows, int tid) {
    const qkv_att_ctx *c = vctx;
    qkv_round_at(vctx, r0, r1, rows, tid);
    int lo = 0, hi = c->B; /* the first sequence ending past r0 */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (c->offs[mid] + c->lens[mid] > r0) hi = mid;
        else lo = mid + 1;
    }
    for (int b = lo; b < c->B && c->offs[b] < r1; b++) {
        int s0 = r0 > c->offs[b] ? r0 : c->offs[b], e = c->offs[b] + c->lens[b], s1 = r1 < e ? r1 : e;
        /* acquire-release: the thread that completes a sequence sees the other's rows */
        if (s1 > s0 && __atomic_add_fetch(&c->done[b], s1 - s0, __ATOMIC_ACQ_REL) == c->lens[b])
            qac_attention_bf16_qkv_seq(c->out, c->att_scratch + (size_t)tid * c->att_stride, c->qkv16, c->lens,
                                       c->offs, c->rows, b, c->T, c->C, c->NH);
    }
}

/* out = the attention (qac_attention_forward_bf16_qkv's bits; rows: one
 * query row a sequence) of Q|K|V = x Wqkv + b. With at least 4 sequences
 * a thread, in one parallel loop: each block of Q|K|V rows is rounded to
 * bf16 as it is finished, and each sequence attended as soon as all its
 * rows are, so that the attention reads them from cache instead of memory
 * (BERT-base's int8 passages +3-4%: bench/RESULTS.md). With fewer (a few
 * queries) a sequence's heads are shared between the threads instead, after
 * the product. The same bits either way. qkv: the product's staging. */
static qac_status qkv_attention(qac_bert_acts *a, const qac_bert_config *c, float *out, float *qkv, const float *x,
                                const qac_packed_w *pw, const float *bias, const int *lens, const int *offs,
                                const int *rows, int B, int T, size_t N, qac_pool *pool) {
    q8_room room = q8_layout(c, a->B, a->T, a->nthreads);
    unsigned char *m = a->q8;
    qkv_att_ctx ctx = {(uint16_t *)(void *)(m + room.qkv16), out, (float *)(void *)(m + room.att), room.att_stride,
                       (int *)(void *)(m + room.done), lens, offs, rows, B, T, c->hidden_size, c->num_heads};
    if (B >= 4 * qac_pool_size(pool)) {
        memset(ctx.done, 0, (size_t)B * sizeof(int));
        return qac_gemm_then_local(qkv, x, pw, bias, (int)N, a->scratch, pool, qkv_att_at, &ctx);
    }
    qac_status st = qac_gemm_then_local(qkv, x, pw, bias, (int)N, a->scratch, pool, qkv_round_at, &ctx);
    if (st) return st;
    return qac_attention_forward_bf16_qkv(out, ctx.att_scratch, ctx.qkv16, lens, offs, rows, B, T, c->hidden_size,
                                          c->num_heads, pool);
}

/* Layer l from x [N,C] to y, its tensors in slot s of a (s = 0 unless
 * every layer is kept); N rows: B*T padded (offs NULL), or the packed rows
 * of offs. The family's fields choose the steps:
 *   post-LN (BERT, RoBERTa): y = LN2(h + FFN(h)), h = LN1(x + Attn(x));
 *   pre-LN (ModernBERT):     y = r + FFN(LN2(r)),  r = x + Attn(LN1(x))
 *                            (layer 0: Attn(x));
 * Attn rotates Q and K first with rotary positions and sees a window of
 * keys in local layers; FFN is GELU or GeGLU. Without dropout the output
 * projections fuse their residual into the matrix product. Every step
 * takes its scratch from a (so none fails for memory; the status is
 * passed on all the same). */
static qac_status layer_forward(qac_bert_acts *a, int l, int s, const float *x, float *y, const qac_bert_config *c,
                                const qac_bert_params *p, const qac_bert_packed *pk, const int *lens, const int *offs,
                                int B, int T, size_t N, const qac_dropout *drop, qac_pool *pool) {
    int C = c->hidden_size, I = c->intermediate_size, F = qac_bert_ffn_rows(c), NH = c->num_heads;
    int pre = c->pre_norm, window = qac_bert_layer_window(c, l);
    size_t NC = N * C, lc = (size_t)l * C;
    float eps = c->layer_norm_eps;
    float *qkv = AT(a->qkv, s, N * 3 * C), *atty = AT(a->atty, s, NC), *res1 = AT(a->res1, s, NC);
    float *ln1 = AT(a->ln1, s, NC), *ffn_in = AT(a->ffn_in, s, NC), *res2 = AT(a->res2, s, NC);
    float *ffn_pre = AT(a->ffn_pre, s, N * F), *ffn_act = AT(a->ffn_act, s, N * I);
    float *att = offs ? NULL : AT(a->att, s, (size_t)B * NH * T * T);
    int drop_out = qac_dropout_active(drop, QAC_DROP_ATT_OUT);
    /* the int8 FFN's activation quantised once, by the GELU step: inference
     * (no pre-activation kept, no dropout), plain GELU, room for all N rows */
    int q8 = a->q8 && !c->glu && !ffn_pre && !drop_out && pk->ffn_in[l].pq && pk->ffn_out[l].pq &&
             qac_gemm_q8_bytes((int)N, I) <= a->q8_bytes;
    qac_status st;

    const float *ain = x; /* the attention's input */
    if (pre && l > 0) {
        qac_layernorm_forward(ln1, AT(a->ln1_mean, s, N), AT(a->ln1_rstd, s, N), x, p->ln1_w + lc,
                              BIAS(p->ln1_b, lc), (int)N, C, eps, pool);
        ain = ln1;
    }
    if (att_qkv16(a, c, pk, l, offs, B, T)) { /* int8: Q|K|V in bf16, each sequence attended from cache */
        if ((st = qkv_attention(a, c, atty, qkv, ain, &pk->qkv[l], BIAS(p->qkv_b, lc * 3), lens, offs, NULL, B, T, N,
                                pool)))
            return st;
    } else {
        if ((st = qac_gemm(qkv, ain, &pk->qkv[l], BIAS(p->qkv_b, lc * 3), NULL, (int)N, a->scratch, pool))) return st;
        if (c->positions == QAC_POS_ROTARY)
            qac_rope_forward(qkv, a->pos, a->rope + (window ? (size_t)T * (C / NH) : 0), (int)N, C, NH, pool);
        if (offs && !window && att_bf16(pk, l, C, NH))
            st = qac_attention_forward_packed_bf16(atty, a->scratch, qkv, lens, offs, B, T, C, NH,
                                                   att_bf16(pk, l, C, NH), pool);
        else
            st = qac_attention_forward_window(atty, att, a->scratch, qkv, lens, offs, window, offs ? NULL : drop, l, B,
                                              T, C, NH, pool);
        if (st) return st;
    }
    /* res1 = x + dropout(atty Wo + bo) */
    if (drop_out) {
        if ((st = qac_gemm(res1, atty, &pk->attn_out[l], BIAS(p->attn_out_b, lc), NULL, (int)N, a->scratch, pool)))
            return st;
        qac_dropout_forward(res1, res1, x, drop, l, QAC_DROP_ATT_OUT, B, T, C, pool);
    } else if ((st = qac_gemm(res1, atty, &pk->attn_out[l], BIAS(p->attn_out_b, lc), x, (int)N, a->scratch, pool))) {
        return st;
    }
    /* the FFN's input, and what its output adds to */
    const float *fres;
    if (pre) {
        qac_layernorm_forward(ffn_in, AT(a->ln2_mean, s, N), AT(a->ln2_rstd, s, N), res1, p->ln2_w + lc,
                              BIAS(p->ln2_b, lc), (int)N, C, eps, pool);
        fres = res1;
    } else {
        qac_layernorm_forward(ln1, AT(a->ln1_mean, s, N), AT(a->ln1_rstd, s, N), res1, p->ln1_w + lc,
                              BIAS(p->ln1_b, lc), (int)N, C, eps, pool);
        ffn_in = ln1;
        fres = ln1;
    }
    if (c->glu) {
        if ((st = qac_gemm(ffn_pre, ffn_in, &pk->ffn_in[l], BIAS(p->ffn_in_b, (size_t)l * F), NULL, (int)N, a->scratch,
                           pool)))
            return st;
        qac_geglu_forward(ffn_act, ffn_pre, (int)N, I, pool);
    } else if (q8) { /* int8: GELU's rows quantised while in cache, for the output product */
        if ((st = qac_matmul_gelu_q8(ffn_act, ffn_in, &pk->ffn_in[l], BIAS(p->ffn_in_b, (size_t)l * I), (int)N,
                                     a->scratch, a->q8, pool)))
            return st;
    } else if ((st = qac_matmul_gelu_packed(ffn_act, ffn_pre, ffn_in, &pk->ffn_in[l], BIAS(p->ffn_in_b, (size_t)l * I),
                                            (int)N, a->scratch, pool))) {
        return st;
    }
    float *sum = pre ? y : res2; /* pre-LN: the layer's output itself */
    if (q8) {
        if ((st = qac_gemm_q8(sum, a->q8, &pk->ffn_out[l], BIAS(p->ffn_out_b, lc), fres, (int)N, pool))) return st;
    } else if (drop_out) {
        if ((st = qac_gemm(sum, ffn_act, &pk->ffn_out[l], BIAS(p->ffn_out_b, lc), NULL, (int)N, a->scratch, pool)))
            return st;
        qac_dropout_forward(sum, sum, fres, drop, l, QAC_DROP_FFN_OUT, B, T, C, pool);
    } else if ((st = qac_gemm(sum, ffn_act, &pk->ffn_out[l], BIAS(p->ffn_out_b, lc), fres, (int)N, a->scratch,
                              pool))) {
        return st;
    }
    if (!pre)
        qac_layernorm_forward(y, AT(a->ln2_mean, s, N), AT(a->ln2_rstd, s, N), res2, p->ln2_w + lc,
                              BIAS(p->ln2_b, lc), (int)N, C, eps, pool);
    return QAC_OK;
}

qac_status qac_bert_layer_forward(qac_bert_acts *a, int l, int s, const float *x, float *y, const qac_bert_config *c,
                                  const qac_bert_params *p, const qac_bert_packed *pk, const int *lens, int B, int T,
                                  const qac_dropout *drop, qac_pool *pool) {
    if (a->nthreads < qac_pool_size(pool)) /* the scratch is a thread's share each */
        return qac_set_error(QAC_ERR_INVALID, "bert layer: activations sized for %d threads, pool has %d", a->nthreads,
                             qac_pool_size(pool));
    return layer_forward(a, l, s, x, y, c, p, pk, lens, NULL, B, T, (size_t)B * T, drop, pool);
}

/* hidden[0] = dropout(LN(embeddings)) over N rows whose positions a->pos
 * already holds. */
static void embed(qac_bert_acts *a, const qac_bert_config *c, const qac_bert_params *p, const int32_t *ids,
                  const int32_t *type_ids, int B, int T, size_t N, const qac_dropout *drop, qac_pool *pool) {
    int C = c->hidden_size;
    qac_embeddings_forward_at(a->emb, ids, type_ids, a->pos, p->word_emb, p->pos_emb, p->type_emb, 1, (int)N, C,
                              pool);
    qac_layernorm_forward(a->hidden, a->emb_mean, a->emb_rstd, a->emb, p->emb_ln_w, p->emb_ln_b, (int)N, C,
                          c->layer_norm_eps, pool);
    if (qac_dropout_active(drop, QAC_DROP_EMB))
        qac_dropout_forward(a->hidden, a->hidden, NULL, drop, 0, QAC_DROP_EMB, B, T, C, pool);
}

/* pre-LN: last = LN_final(x) (x may be a->last) */
static void final_norm(qac_bert_acts *a, const qac_bert_config *c, const qac_bert_params *p, const float *x,
                       size_t N, qac_pool *pool) {
    if (c->pre_norm)
        qac_layernorm_forward(a->last, a->final_mean, a->final_rstd, x, p->final_ln_w, p->final_ln_b, (int)N,
                              c->hidden_size, c->layer_norm_eps, pool);
}

/* The last layer for row rows[b] of each sequence alone (the infer
 * layout: x is a->hidden, row A; qkv in "big"): attention of the chosen
 * rows over all keys into the context's first B rows, the chosen rows of x
 * gathered to the front of row A (row b comes from offs[b] + rows[b] >= b,
 * so in order nothing is overwritten before it is read), then the rest of
 * the layer on B rows; the output is row A's first B rows. BERT's post-LN
 * layer only (qac_bert_prunes_last). */
static qac_status last_layer_rows(qac_bert_acts *a, const qac_bert_config *c, const qac_bert_params *p,
                                  const qac_bert_packed *pk, const int *lens, const int *offs, const int *rows, int B,
                                  int T, size_t N, qac_pool *pool) {
    int C = c->hidden_size, I = c->intermediate_size, NH = c->num_heads, l = c->num_layers - 1;
    size_t lc = (size_t)l * C;
    float eps = c->layer_norm_eps, *x = a->hidden, *sc = a->scratch;
    qac_status st;
    if (att_qkv16(a, c, pk, l, offs, B, T))
        st = qkv_attention(a, c, a->atty, a->qkv, x, &pk->qkv[l], BIAS(p->qkv_b, lc * 3), lens, offs, rows, B, T, N,
                           pool);
    else if (!(st = qac_gemm(a->qkv, x, &pk->qkv[l], BIAS(p->qkv_b, lc * 3), NULL, (int)N, sc, pool)))
        st = qac_attention_forward_packed_rows(a->atty, sc, a->qkv, lens, offs, rows, B, T, C, NH,
                                               att_bf16(pk, l, C, NH), pool);
    if (st) return st;
    for (int b = 0; b < B; b++) {
        size_t from = (size_t)offs[b] + (size_t)rows[b];
        if (from != (size_t)b) memmove(x + (size_t)b * C, x + from * C, (size_t)C * sizeof *x);
    }
    if ((st = qac_gemm(a->res1, a->atty, &pk->attn_out[l], BIAS(p->attn_out_b, lc), x, B, sc, pool))) return st;
    qac_layernorm_forward(a->ln1, NULL, NULL, a->res1, p->ln1_w + lc, BIAS(p->ln1_b, lc), B, C, eps, pool);
    if ((st = qac_matmul_gelu_packed(a->ffn_act, NULL, a->ln1, &pk->ffn_in[l], BIAS(p->ffn_in_b, (size_t)l * I), B, sc,
                                     pool)) ||
        (st = qac_gemm(a->res2, a->ffn_act, &pk->ffn_out[l], BIAS(p->ffn_out_b, lc), a->ln1, B, sc, pool)))
        return st;
    qac_layernorm_forward(x, NULL, NULL, a->res2, p->ln2_w + lc, BIAS(p->ln2_b, lc), B, C, eps, pool);
    return QAC_OK;
}

int qac_bert_prunes_last(const qac_bert_config *c) {
    return c->num_layers > 0 && !c->pre_norm && !c->glu && c->positions != QAC_POS_ROTARY &&
           qac_bert_layer_window(c, c->num_layers - 1) == 0;
}

static qac_status forward_packed(qac_bert_acts *a, const qac_bert_config *c, const qac_bert_params *p,
                                 const qac_bert_packed *pk, const int32_t *packed_ids, const int32_t *packed_types,
                                 const int *lens, const int *offs, const int *rows, int B, int T, qac_pool *pool) {
    if (!pk || pk->L != c->num_layers) return qac_set_error(QAC_ERR_INVALID, "bert forward: weights not packed");
    if (!a->mem || a->B != B || a->T != T || a->keep != QAC_ACTS_INFER)
        return qac_set_error(QAC_ERR_INVALID, "bert forward: activations not allocated for B=%d T=%d", B, T);
    if (a->nthreads < qac_pool_size(pool))
        return qac_set_error(QAC_ERR_INVALID, "bert forward: activations sized for %d threads, pool has %d",
                             a->nthreads, qac_pool_size(pool));
    size_t N = 0;
    int most = qac_bert_max_tokens(c);
    for (int b = 0; b < B; b++) {
        if (lens[b] < 1 || lens[b] > T || lens[b] > most || offs[b] != (int)N)
            return qac_set_error(QAC_ERR_INVALID, "bert forward: sequence %d has length %d at row %d (T=%d)", b,
                                 lens[b], offs[b], T);
        N += (size_t)lens[b];
    }
    for (size_t i = 0; i < N; i++) {
        if (packed_ids[i] < 0 || packed_ids[i] >= c->vocab_size)
            return qac_set_error(QAC_ERR_INVALID, "bert forward: token id %d out of range [0, %d)", packed_ids[i],
                                 c->vocab_size);
        if (packed_types && (packed_types[i] < 0 || packed_types[i] >= c->type_vocab_size))
            return qac_set_error(QAC_ERR_INVALID, "bert forward: token type %d out of range [0, %d)",
                                 packed_types[i], c->type_vocab_size);
    }
    for (int b = 0; rows && b < B; b++)
        if (rows[b] < 0 || rows[b] >= lens[b])
            return qac_set_error(QAC_ERR_INVALID, "bert forward: row %d of sequence %d is outside its %d tokens",
                                 rows[b], b, lens[b]);
    /* positions restart with each sequence */
    qac_positions_fill(a->pos, packed_ids, lens, offs, B, T, c);
    rope_prepare(a, c, T);
    embed(a, c, p, packed_ids, packed_types, B, T, N, NULL, pool);
    int L = c->num_layers;
    for (int l = 0; l < (rows ? L - 1 : L); l++) {
        if (a->cancel && a->cancel(a->cancel_user))
            return qac_set_error(QAC_ERR_CANCELLED, "encode: cancelled before layer %d of %d", l, L);
        qac_status st = layer_forward(a, l, 0, a->hidden, a->hidden, c, p, pk, lens, offs, B, T, N, NULL, pool);
        if (st) return st;
    }
    if (rows) {
        if (a->cancel && a->cancel(a->cancel_user))
            return qac_set_error(QAC_ERR_CANCELLED, "encode: cancelled before layer %d of %d", L - 1, L);
        return last_layer_rows(a, c, p, pk, lens, offs, rows, B, T, N, pool);
    }
    final_norm(a, c, p, a->hidden, N, pool);
    return QAC_OK;
}

qac_status qac_bert_forward_packed(qac_bert_acts *a, const qac_bert_config *c, const qac_bert_params *p,
                                   const qac_bert_packed *pk, const int32_t *packed_ids, const int32_t *packed_types,
                                   const int *lens, const int *offs, int B, int T, qac_pool *pool) {
    return forward_packed(a, c, p, pk, packed_ids, packed_types, lens, offs, NULL, B, T, pool);
}

qac_status qac_bert_forward_packed_rows(qac_bert_acts *a, const qac_bert_config *c, const qac_bert_params *p,
                                        const qac_bert_packed *pk, const int32_t *packed_ids,
                                        const int32_t *packed_types, const int *lens, const int *offs,
                                        const int *rows, int B, int T, qac_pool *pool) {
    if (!rows || !qac_bert_prunes_last(c))
        return qac_set_error(QAC_ERR_UNSUPPORTED, "bert forward: no rows, or a last layer that is not BERT's post-LN "
                                                  "one with global attention (qac_bert_prunes_last)");
    return forward_packed(a, c, p, pk, packed_ids, packed_types, lens, offs, rows, B, T, pool);
}

static qac_status forward(qac_bert_acts *a, const qac_bert_config *c, const qac_bert_params *p,
                          const qac_bert_packed *pk, const int32_t *ids, const int32_t *type_ids, const int *lens,
                          int B, int T, const qac_dropout *drop, float *hidden_out, qac_pool *pool) {
    qac_status st = check_inputs(a, c, pk, ids, type_ids, lens, B, T, pool);
    if (st != QAC_OK) return st;
    int C = c->hidden_size, L = c->num_layers;
    size_t N = (size_t)B * T, NC = N * C;
    int hist = a->keep != QAC_ACTS_INFER;

    qac_positions_fill(a->pos, ids, lens, NULL, B, T, c);
    rope_prepare(a, c, T);
    embed(a, c, p, ids, type_ids, B, T, N, drop, pool);
    if (hidden_out) memcpy(hidden_out, a->hidden, NC * sizeof(float));

    for (int l = 0; l < L; l++) {
        const float *x = hist ? a->hidden + (size_t)l * NC : a->hidden;
        float *y = hist ? a->hidden + (size_t)(l + 1) * NC : a->hidden;
        st = qac_bert_layer_forward(a, l, a->keep == QAC_ACTS_KEEP ? l : 0, x, y, c, p, pk, lens, B, T, drop, pool);
        if (st) return st;
        if (hidden_out) memcpy(hidden_out + (size_t)(l + 1) * NC, y, NC * sizeof(float));
    }
    final_norm(a, c, p, hist ? a->hidden + (size_t)L * NC : a->hidden, N, pool);
    return QAC_OK;
}

qac_status qac_bert_layers_forward(qac_bert_acts *a, const qac_bert_config *c, const qac_bert_params *p,
                                   const qac_bert_packed *pk, const float *x, const int *lens, int B, int T,
                                   const qac_dropout *drop, qac_pool *pool) {
    if (!pk || pk->L != c->num_layers) return qac_set_error(QAC_ERR_INVALID, "layer stack: weights not packed");
    if (!a->mem || a->B != B || a->T != T || a->keep == QAC_ACTS_INFER)
        return qac_set_error(QAC_ERR_INVALID, "layer stack: activations not kept for B=%d T=%d", B, T);
    if (c->pre_norm || c->positions == QAC_POS_ROTARY)
        return qac_set_error(QAC_ERR_UNSUPPORTED, "layer stack: BERT layers only (the pre-training heads)");
    size_t NC = (size_t)B * T * c->hidden_size;
    memcpy(a->hidden, x, NC * sizeof(float));
    for (int l = 0; l < c->num_layers; l++) {
        qac_status st = qac_bert_layer_forward(a, l, a->keep == QAC_ACTS_KEEP ? l : 0, a->hidden + (size_t)l * NC,
                                               a->hidden + (size_t)(l + 1) * NC, c, p, pk, lens, B, T, drop, pool);
        if (st) return st;
    }
    return QAC_OK;
}

qac_status qac_bert_forward(qac_bert_acts *a, const qac_bert_config *c, const qac_bert_params *p,
                            const qac_bert_packed *pk, const int32_t *ids, const int *lens, int B, int T,
                            float *hidden_out, qac_pool *pool) {
    return forward(a, c, p, pk, ids, NULL, lens, B, T, NULL, hidden_out, pool);
}

qac_status qac_bert_forward_train(qac_bert_acts *a, const qac_bert_config *c, const qac_bert_params *p,
                                  const qac_bert_packed *pk, const int32_t *ids, const int32_t *type_ids,
                                  const int *lens, int B, int T, const qac_dropout *drop, qac_pool *pool) {
    return forward(a, c, p, pk, ids, type_ids, lens, B, T, drop, NULL, pool);
}
