// ModernBERT's training composition on the CUDA trainer
// (kernels/prenorm_layers.cu) run whole on the CPU: the composition's own
// source, its launchers emulated (tests/gpu/train_emu_launchers.h: each
// kernel's source over the launcher's grid, cuBLAS's products as plain fp32
// sums), against autograd through transformers' ModernBertModel on the
// checkpoints tests/reference/gen_family_fixtures.py makes (modernbert:
// gte-modernbert-base's layout without biases, global attention every 3rd
// layer, a local window of 16; modernbert_bias: every bias, mean pooling),
// fp32 and the unfused attention (the path fp32 takes on a GPU):
//
//  - one layer at a time (layer 0, whose attention reads its input without
//    a norm; the local layers 1 and 2; the global layer 3): the fixture's
//    hidden state in, its output compared with the next one, the loss's
//    gradient on that output in, the gradient on the input and the layer's
//    parameter gradients (both sides of the batch) compared;
//  - the whole encoder: token ids in, the final norm's output pooled, the
//    fixture's InfoNCE (tau 0.05, cosine) and its gradient on the pooled
//    vectors computed here on the CPU (trainer/loss.c, model/layers.c), back
//    through the final norm, the layers and the embeddings into every
//    trained tensor.
//
// Bound (tests/encoder/test_families.c's and test_gpu_train_families'):
// both sides compute in float32 with sums in other orders, so each tensor's
// largest difference from autograd in float64, relative to its largest
// value, must stay within 4 times torch's own float32 distance from float64
// on the same tensor, plus 4 sqrt(R) 2^-24 for the R token rows summed into
// a parameter gradient (the floor where torch's float32 happens to land
// closer than the sums' orders allow). For one layer the factor is loose
// (torch's distance there carries every layer above and below it), and a
// broken backward still misses it by orders of magnitude.
//
// And the whole encoder of modernbert in bf16 (the trainer's default):
// within 6.5e-2 of float64 in ||diff|| / ||ref|| per tensor (the bound
// test_gpu_train_families derives; see test_bf16); with dropout on its
// four sites against the CPU trainer's ModernBERT (the same masks from the
// same counters; see test_dropout).
//
// What this cannot show, and test_gpu_train_families does on a GPU: the
// real launchers and cuBLAS, the fused attention (bf16 takes it on a GPU
// where the shape allows; here the unfused one), the trainer's wiring
// around the composition (uploads, pooling kernels, the loss).
//
// Also: --recompute's path (one layer's slot, each layer re-run before its
// backward) must give the kept activations' gradients bit for bit.
//
// argv: the fixture directory (tests/encoder's family_fixtures), NAME...
// [--whole-only NAME...] (the suite: modernbert in full, modernbert_bias's
// whole encoder).
#include "train_emu_launchers.h"

#include "../../kernels/prenorm_layers.cu"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

extern "C" {
#include "family_check.h"
#include "qac_model.h"
#include "qac_safetensors.h"
#include "qac_scatter_plan.h"
#include "qac_train.h"
#include "testutil.h"
}

namespace {

constexpr double FACTOR = 4.0;

// The reference's tensors (fam_read_all, tests/encoder/family_check.h;
// the hidden states are there when the fixtures are this generator's).
template <typename V> std::vector<V> read(const char *name) {
    V *p = (V *)fam_read_all(name, sizeof(V));
    std::vector<V> v(p, p + fam_numel(name));
    free(p);
    return v;
}
std::vector<float> f32(const char *name) { return read<float>(name); }
std::vector<double> f64(const char *name) { return read<double>(name); }
std::vector<int32_t> i32(const char *name) { return read<int32_t>(name); }

// got [n] against r64 with torch's r32 as the measure of float32's error;
// rows: the token rows summed into each value (0: none)
void compare(const char *what, const float *got, const float *r32, const double *r64, size_t n, double rows) {
    double mq = 0, mt = 0, mr = 0;
    for (size_t j = 0; j < n; j++) {
        const double a = fabs(got[j] - r64[j]), c = fabs(r32[j] - r64[j]);
        if (!(a <= mq)) mq = std::isnan(a) ? INFINITY : a;
        mt = c > mt ? c : mt;
        mr = fabs(r64[j]) > mr ? fabs(r64[j]) : mr;
    }
    const double rq = mr > 0 ? mq / mr : mq, rt = mr > 0 ? mt / mr : mt;
    const double bound = FACTOR * rt + 4 * sqrt(rows) * 0x1p-24;
    printf("  %-26s qac %.2e  torch32 %.2e  (bound %.2e)\n", what, rq, rt, bound);
    CHECK_MSG(rq <= bound, "%s off by %.3e relative (torch's float32 %.3e)", what, rq, rt);
}

// The composition's device state, on the host.
struct harness {
    qac_model *m = nullptr;
    qac_kl_ctx t{};
    qac_bert_params w{}, g{};
    std::vector<float> grads;
    qac_kl_work k{};
    std::vector<float> work;
    std::vector<__nv_bfloat16> params_act; // bf16: the weights' copy the products read
    std::vector<float> rope;
    int rope_P = 0;
};

struct side {
    int B = 0, T = 0;
    std::vector<int32_t> ids, pos;
    std::vector<int> lens;
    qac_kl_pn_acts a{};
    void *mem = nullptr;
    ~side() { free(mem); }
};

// Every buffer starts as NaN: a read of what nothing wrote shows.
void nan_fill(void *p, size_t bytes) { memset(p, 0xff, bytes); }

void bind_side(harness &h, side &s, const std::vector<int32_t> &ids, const std::vector<int32_t> &lens, int B, int T,
               int recompute = 0) {
    s.B = B, s.T = T;
    s.ids = ids;
    s.lens.assign(lens.begin(), lens.end());
    s.pos.resize((size_t)B * T);
    qac_positions_fill(s.pos.data(), s.ids.data(), s.lens.data(), NULL, B, T, &h.t.cfg);
    qac_kl_bump b = {nullptr, 0};
    qac_kl_pn_bind(&h.t, &s.a, &b, B, T, recompute);
    s.mem = aligned_alloc(256, b.off);
    nan_fill(s.mem, b.off);
    b = {(char *)s.mem, 0};
    qac_kl_pn_bind(&h.t, &s.a, &b, B, T, recompute);
    s.a.pos = s.pos.data();
    s.a.rope = h.rope.data();
    s.a.rope_P = h.rope_P;
}

// The work buffers as qac_kl_work_bind sizes them (unfused, fp32) for N rows.
void bind_work(harness &h, size_t N, size_t nP) {
    const qac_bert_config *c = &h.t.cfg;
    const size_t C = c->hidden_size, I = c->intermediate_size, NH = c->num_heads;
    const size_t big = (3 * I > 3 * C ? 3 * I : 3 * C) * N, NC = N * C;
    const size_t cols = 3 * C > 2 * I ? 3 * C : 2 * I, partial = (size_t)col_chunks((int)N) * cols;
    const size_t sizes[] = {big, NC, nP, nP, nP, NC, NC, NC, NC, NC, NH * N, NC, NC, NC, partial};
    size_t total = 0;
    for (size_t z : sizes) total += z;
    h.work.assign(total, NAN);
    float *p = h.work.data();
    auto take = [&](size_t n) {
        float *r = p;
        p += n;
        return r;
    };
    qac_kl_work &k = h.k;
    k.big = take(big);
    k.proj = take(NC);
    k.S = take(nP);
    k.Pd = take(nP);
    k.dS = take(nP);
    k.O = take(NC);
    k.dq = take(NC);
    k.dk = take(NC);
    k.dv = take(NC);
    k.datty = take(NC);
    k.dvec = take(NH * N);
    k.dy = take(NC);
    k.dres = take(NC);
    k.dln1 = take(NC);
    k.partial = take(partial);
}

bool setup(harness &h, const char *dir, int maxT) {
    if (qac_model_load_untokenized(&h.m, dir) != QAC_OK) {
        fprintf(stderr, "FAIL: %s\n", qac_last_error());
        return false;
    }
    const qac_bert_config *c = &h.m->cfg;
    h.t.cfg = *c;
    h.t.prec = QAC_PREC_FP32;
    h.t.esize = 4;
    h.t.params = h.m->param_mem;
    h.t.fused = 0;
    qac_bert_params_bind(&h.w, c, h.m->param_mem);
    h.grads.assign(h.m->n_params, 0.f);
    qac_bert_params_bind(&h.g, c, h.grads.data());
    const int hs = c->hidden_size / c->num_heads;
    h.rope_P = maxT;
    h.rope.resize((size_t)2 * maxT * hs);
    qac_rope_table(h.rope.data(), maxT, hs, c->rope_theta);
    qac_rope_table(h.rope.data() + (size_t)maxT * hs, maxT, hs, c->rope_theta_local);
    return true;
}

// The layers' hidden states and gradients of one side: [L+1, B, T, C].
struct states {
    std::vector<float> h32, d32;
    std::vector<double> h64, d64;
};
states states_of(const char *s) {
    char a[32], b[32], c[32], d[32];
    snprintf(a, sizeof a, "hid32.%s", s), snprintf(b, sizeof b, "dhid32.%s", s);
    snprintf(c, sizeof c, "hid64.%s", s), snprintf(d, sizeof d, "dhid64.%s", s);
    return {f32(a), f32(b), f64(c), f64(d)};
}

// Layer l on both sides from the fixture's states: its output, its input's
// gradient and its parameters' gradients.
void test_layer(const char *name, harness &h, side *sides[2], states *st[2], int l) {
    const qac_bert_config *c = &h.t.cfg;
    const int C = c->hidden_size, L = c->num_layers;
    printf("%s layer %d (%s attention%s)\n", name, l, qac_bert_layer_window(c, l) ? "local" : "global",
           l ? "" : ", no attention norm");
    std::fill(h.grads.begin(), h.grads.end(), 0.f);
    double rows = 0;
    for (int sd = 0; sd < 2; sd++) {
        side &s = *sides[sd];
        states &x = *st[sd];
        const size_t NC = (size_t)s.B * s.T * C;
        rows += (double)s.B * s.T;
        for (size_t i = 0; i < NC; i++) s.a.hidden[(size_t)l * NC + i] = (float)x.h64[(size_t)l * NC + i];
        CHECK_OK(qac_kl_pn_layer_fwd(&h.t, &s.a, &h.k, &h.w, s.lens.data(), 0, 0, l));
        char what[64];
        snprintf(what, sizeof what, "%s output", sd ? "p" : "q");
        compare(what, s.a.hidden + (size_t)(l + 1) * NC, &x.h32[(size_t)(l + 1) * NC], &x.h64[(size_t)(l + 1) * NC], NC,
                0);
        for (size_t i = 0; i < NC; i++) h.k.dy[i] = (float)x.d64[(size_t)(l + 1) * NC + i];
        CHECK_OK(qac_kl_pn_layer_bwd(&h.t, &s.a, &h.k, &h.w, &h.g, s.lens.data(), 0, 0, l));
        snprintf(what, sizeof what, "%s d input", sd ? "p" : "q");
        compare(what, h.k.dy, &x.d32[(size_t)l * NC], &x.d64[(size_t)l * NC], NC, 0);
    }
    // the layer's slice of each per-layer tensor
    size_t off = 0;
    for (int i = 0; i < QAC_BERT_NUM_TENSORS; i++) {
        const size_t n = qac_bert_tensor_size(c, i);
        if (i >= QAC_BERT_LAYER_FIRST && i < QAC_BERT_LAYER_END && n) {
            const size_t per = n / L;
            char k32[64], k64[64], what[64];
            snprintf(k32, sizeof k32, "grad32.%s", qac_bert_tensor_name(i));
            snprintf(k64, sizeof k64, "grad64.%s", qac_bert_tensor_name(i));
            const std::vector<float> r32 = f32(k32);
            const std::vector<double> r64 = f64(k64);
            snprintf(what, sizeof what, "grad %s[%d]", qac_bert_tensor_name(i), l);
            compare(what, &h.grads[off + (size_t)l * per], &r32[(size_t)l * per], &r64[(size_t)l * per], per, rows);
        }
        off += n;
    }
}

// One step of the whole encoder on the fixture's batch, through the
// InfoNCE loss: the gradients in h.grads, the loss returned.
double step(harness &h, side &q, side &p) {
    const qac_bert_config *c = &h.t.cfg;
    const int C = c->hidden_size, nq = q.B, n = p.B / q.B;
    std::fill(h.grads.begin(), h.grads.end(), 0.f);
    side *sd[2] = {&q, &p};
    std::vector<float> reps[2], dreps[2];
    for (int i = 0; i < 2; i++) {
        side &s = *sd[i];
        CHECK_OK(qac_kl_pn_fwd(&h.t, &s.a, &h.k, &h.w, s.ids.data(), s.lens.data(), 0, 0));
        reps[i].resize((size_t)s.B * C);
        dreps[i].resize((size_t)s.B * C);
        qac_pooling_forward(reps[i].data(), s.a.last, s.lens.data(), s.B, s.T, C, h.m->pooling, h.m->normalize);
    }
    double loss = 0;
    CHECK_OK(qac_infonce(&loss, dreps[0].data(), dreps[1].data(), reps[0].data(), reps[1].data(), nq, n, C, 0.05f,
                         QAC_SIM_COS));
    for (int i = 1; i >= 0; i--) { // the passages first, as the trainer runs them
        side &s = *sd[i];
        const int N = s.B * s.T;
        std::vector<float> dlast((size_t)N * C);
        qac_pooling_backward(dlast.data(), dreps[i].data(), s.a.last, s.lens.data(), s.B, s.T, C, h.m->pooling,
                             h.m->normalize);
        std::vector<int32_t> keys(N), plan(qac_scatter_plan_ints(N)), counts((size_t)c->vocab_size + 1);
        qac_scatter_keys_unpadded(keys.data(), s.ids.data(), N, c->pad_token_id);
        const qac_scatter_plan pw = qac_scatter_plan_build(plan.data(), keys.data(), N, c->vocab_size, counts.data());
        CHECK_OK(qac_kl_pn_bwd(&h.t, &s.a, &h.k, &h.w, &h.g, s.lens.data(), dlast.data(), pw, plan.data(), 0, 0));
    }
    return loss;
}

// The whole encoder against autograd.
void test_model(const char *name, harness &h, side &q, side &p) {
    const qac_bert_config *c = &h.t.cfg;
    printf("%s whole encoder (%d queries x %d tokens, %d passages x %d tokens)\n", name, q.B, q.T, p.B, p.T);
    const double loss = step(h, q, p);
    const double l64 = f64("loss64")[0], l32 = f64("loss32")[0];
    const double lq = fabs(loss - l64), lt = fabs(l32 - l64);
    printf("  loss %.9f (float64 %.9f, torch32 off by %.1e, qac %.1e)\n", loss, l64, lt, lq);
    CHECK_MSG(lq <= FACTOR * lt + 1e-6 * fabs(l64), "%s: loss %.9f, float64 %.9f", name, loss, l64);
    const double rows = (double)q.B * q.T + (double)p.B * p.T;
    size_t off = 0;
    int compared = 0;
    for (int i = 0; i < QAC_BERT_NUM_TENSORS; i++) {
        const size_t sz = qac_bert_tensor_size(c, i);
        if (sz) {
            char k32[64], k64[64], what[64];
            snprintf(k32, sizeof k32, "grad32.%s", qac_bert_tensor_name(i));
            snprintf(k64, sizeof k64, "grad64.%s", qac_bert_tensor_name(i));
            snprintf(what, sizeof what, "grad %s", qac_bert_tensor_name(i));
            compare(what, &h.grads[off], f32(k32).data(), f64(k64).data(), sz, rows);
            compared++;
        }
        off += sz;
    }
    CHECK(compared >= 8);
}

// whole_only: the whole encoder against autograd alone (no layer by layer,
// no recompute: the suite's time goes to one checkpoint's full set)
// bf16, as the trainer runs it by default: activations and products in
// bf16 (the products' fp32 sums rounded once), the residual stream,
// statistics and gradients in fp32. Bound 6.5e-2 on ||diff|| / ||ref|| per
// tensor against float64: test_gpu_train_families derives it (about 62
// bf16 roundings between the loss and a gradient over 4 layers, sqrt(62)
// 2^-9 = 1.5e-2, times 4 for cancellation in the reductions).
void test_bf16(const char *name, harness &h, const side &q0, const side &p0) {
    const qac_bert_config *c = &h.t.cfg;
    h.t.prec = QAC_PREC_BF16;
    h.t.esize = 2;
    h.params_act.resize(h.m->n_params);
    for (size_t j = 0; j < h.m->n_params; j++) h.params_act[j] = __float2bfloat16_rn(h.m->param_mem[j]);
    h.t.params_act = h.params_act.data();
    side q, p;
    bind_side(h, q, q0.ids, i32("q_lens"), q0.B, q0.T);
    bind_side(h, p, p0.ids, i32("p_lens"), p0.B, p0.T);
    const double loss = step(h, q, p), l64 = f64("loss64")[0];
    printf("%s bf16 whole encoder: loss %.6f (float64 %.6f)\n", name, loss, l64);
    size_t off = 0;
    for (int i = 0; i < QAC_BERT_NUM_TENSORS; i++) {
        const size_t n = qac_bert_tensor_size(c, i);
        if (!n) continue;
        char k64[64];
        snprintf(k64, sizeof k64, "grad64.%s", qac_bert_tensor_name(i));
        const std::vector<double> r64 = f64(k64);
        double num = 0, den = 0;
        for (size_t j = 0; j < n; j++) {
            const double d = h.grads[off + j] - r64[j];
            num += d * d, den += r64[j] * r64[j];
        }
        const double rel = std::isnan(num) ? INFINITY : den > 0 ? sqrt(num / den) : sqrt(num);
        printf("  bf16 grad %-16s ||diff|| / ||ref|| %.2e (bound 6.5e-2)\n", qac_bert_tensor_name(i), rel);
        CHECK_MSG(rel <= 6.5e-2, "%s: bf16 gradient of %s off by %.3e", name, qac_bert_tensor_name(i), rel);
        off += n;
    }
    h.t.prec = QAC_PREC_FP32;
    h.t.esize = 4;
    h.t.params_act = nullptr;
}

// Dropout (hidden 0.1, attention 0.1) against the CPU trainer's ModernBERT
// forward and backward (model/bert_cpu.c, model/bert_backward.c) with the
// same key: autograd cannot draw qac's masks, the CPU twin draws the same
// ones from the same counters, so a site, layer or key wired wrongly
// changes about a tenth of a tensor's terms by their own size. The queries'
// side, dL/d last a fixed draw in [-1, 1]. Bound 1e-4 of each tensor's
// largest value: both sides are float32 with sums in other orders, which
// without dropout land within 5e-6 of float64 on every tensor here (the
// checks above, qac and torch alike), so within 1e-5 of each other; 10
// times that for room, and a wrong mask moves them by 1e-2 and more.
void test_dropout(const char *name, harness &h, const side &q0) {
    const qac_bert_config *c = &h.t.cfg;
    const int B = q0.B, T = q0.T, N = B * T, C = c->hidden_size, L = c->num_layers;
    const uint64_t key = qac_rng_key(7, 3, 0, 0);
    printf("%s dropout 0.1 (queries' side) against the CPU trainer's\n", name);
    std::vector<float> dlast((size_t)N * C);
    uint64_t r = 0x9E3779B97F4A7C15ull;
    for (float &x : dlast) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        x = (float)((double)(r >> 11) * 0x1p-53 * 2 - 1);
    }
    // the emulated composition
    h.t.p_hidden = h.t.p_attn = 0.1f;
    side q;
    bind_side(h, q, q0.ids, i32("q_lens"), B, T);
    std::fill(h.grads.begin(), h.grads.end(), 0.f);
    CHECK_OK(qac_kl_pn_fwd(&h.t, &q.a, &h.k, &h.w, q.ids.data(), q.lens.data(), key, 0));
    std::vector<int32_t> keys(N), plan(qac_scatter_plan_ints(N)), counts((size_t)c->vocab_size + 1);
    qac_scatter_keys_unpadded(keys.data(), q.ids.data(), N, c->pad_token_id);
    const qac_scatter_plan pw = qac_scatter_plan_build(plan.data(), keys.data(), N, c->vocab_size, counts.data());
    CHECK_OK(qac_kl_pn_bwd(&h.t, &q.a, &h.k, &h.w, &h.g, q.lens.data(), dlast.data(), pw, plan.data(), key, 0));
    h.t.p_hidden = h.t.p_attn = 0.f;
    // the CPU trainer's
    const qac_dropout drop = {0.1f, 0.1f, key, NULL};
    qac_bert_acts a{};
    qac_bert_packed pk{};
    qac_bert_bwd bw{};
    std::vector<float> cg(h.m->n_params, 0.f);
    qac_bert_params g{};
    qac_bert_params_bind(&g, c, cg.data());
    CHECK_OK(qac_bert_acts_alloc(&a, c, B, T, QAC_ACTS_KEEP, 1));
    CHECK_OK(qac_bert_pack(&pk, c, &h.w));
    CHECK_OK(qac_bert_bwd_alloc(&bw, c, B, T));
    CHECK_OK(qac_bert_forward_train(&a, c, &h.w, &pk, q.ids.data(), NULL, q.lens.data(), B, T, &drop, NULL));
    std::vector<const float *> dh(L + 1, nullptr);
    dh[L] = dlast.data();
    CHECK_OK(qac_bert_backward(&g, &bw, dh.data(), &a, c, &h.w, &pk, q.ids.data(), NULL, q.lens.data(), B, T, &drop,
                               NULL));
    auto within = [&](const char *what, const float *got, const float *want, size_t n) {
        double md = 0, mr = 0;
        for (size_t j = 0; j < n; j++) {
            const double d = fabs((double)got[j] - want[j]);
            if (!(d <= md)) md = std::isnan(d) ? INFINITY : d;
            mr = fabs(want[j]) > mr ? fabs(want[j]) : mr;
        }
        const double rel = mr > 0 ? md / mr : md;
        printf("  %-26s %.2e of the largest (bound 1e-4)\n", what, rel);
        CHECK_MSG(rel <= 1e-4, "%s: %s off the CPU trainer's by %.3e", name, what, rel);
    };
    within("output (final norm)", q.a.last, a.last, (size_t)N * C);
    size_t off = 0;
    for (int i = 0; i < QAC_BERT_NUM_TENSORS; i++) {
        const size_t n = qac_bert_tensor_size(c, i);
        char what[64];
        snprintf(what, sizeof what, "grad %s", qac_bert_tensor_name(i));
        if (n) within(what, &h.grads[off], &cg[off], n);
        off += n;
    }
    qac_bert_acts_free(&a);
    qac_bert_packed_free(&pk);
    qac_bert_bwd_free(&bw);
}

void run(const char *fx, const char *name, bool whole_only) {
    char dir[4200], path[4300];
    snprintf(dir, sizeof dir, "%s/%s", fx, name);
    snprintf(path, sizeof path, "%s/%s.ref.safetensors", fx, name);
    if (qac_safetensors_open(&fam_ref, path) != QAC_OK) {
        fprintf(stderr, "FAIL: %s\n", qac_last_error());
        exit(1);
    }
    const qac_st_tensor *qt = fam_need("q_ids"), *pt = fam_need("p_ids");
    const int qB = (int)qt->shape[0], qT = (int)qt->shape[1], pB = (int)pt->shape[0], pT = (int)pt->shape[1];
    harness h;
    const size_t maxN = (size_t)(qB * qT > pB * pT ? qB * qT : pB * pT);
    if (!setup(h, dir, qT > pT ? qT : pT)) exit(1);
    const qac_bert_config *c = &h.t.cfg;
    int local = 0;
    for (int l = 0; l < c->num_layers; l++) local += qac_bert_layer_window(c, l) > 0;
    CHECK_MSG(c->family == QAC_FAMILY_MODERNBERT && local > 0 && local < c->num_layers,
              "%s: the fixture's ModernBERT has local and global layers", name);
    const size_t nP = (size_t)(pB > qB ? pB : qB) * c->num_heads * (pT > qT ? pT : qT) * (pT > qT ? pT : qT);
    bind_work(h, maxN, nP);
    side q, p;
    bind_side(h, q, i32("q_ids"), i32("q_lens"), qB, qT);
    bind_side(h, p, i32("p_ids"), i32("p_lens"), pB, pT);
    states sq = states_of("q"), sp = states_of("p");
    side *sides[2] = {&q, &p};
    states *st[2] = {&sq, &sp};
    if (!whole_only)
        for (int l = 0; l < c->num_layers; l++) test_layer(name, h, sides, st, l);
    test_model(name, h, q, p);
    if (whole_only) {
        qac_model_free(h.m);
        qac_safetensors_close(fam_ref);
        return;
    }
    // --recompute: one layer's slot, each layer re-run before its backward:
    // the same kernels on the same inputs, so the same bits
    const std::vector<float> kept = h.grads;
    side q1, p1;
    bind_side(h, q1, q.ids, i32("q_lens"), qB, qT, 1);
    bind_side(h, p1, p.ids, i32("p_lens"), pB, pT, 1);
    step(h, q1, p1);
    size_t differ = 0;
    for (size_t j = 0; j < kept.size(); j++) differ += memcmp(&kept[j], &h.grads[j], sizeof(float)) != 0;
    printf("%s recompute: %zu of %zu gradients differ from the kept activations' (must be 0)\n", name, differ,
           kept.size());
    CHECK_MSG(differ == 0, "%s: recomputing the layers changes %zu gradients", name, differ);
    test_bf16(name, h, q, p);
    test_dropout(name, h, q);
    qac_model_free(h.m);
    qac_safetensors_close(fam_ref);
}

} // namespace

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s FIXTURE_DIR NAME... [--whole-only NAME...]\n", argv[0]);
        return 2;
    }
    bool whole_only = false;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--whole-only")) whole_only = true;
        else run(argv[1], argv[i], whole_only);
    }
    return qac_test_summary();
}
