// The CUDA encoder's fused passes (kernels/encoder_fused.cu) run on the CPU
// (tests/gpu/cuda_emu.h: the kernels' own source, shuffles and barriers
// emulated) against their CPU twins, in the default suite: the
// one-warp-a-row LayerNorm (embeddings, and bias + residual) against
// qac_layernorm_forward, the last LayerNorm fused with the pooling and the
// normalisation against qac_layernorm_forward + qac_pooling_forward_from
// (packed and padded rows, CLS and mean, prompt rows skipped, empty
// sequences, one gathered row per sequence), the pooled-row gather and the
// row-blocked bias + GELU exactly against the same arithmetic written
// plainly; the families' kernels (kernels/family_kernels.cu: rotary
// positions, GeGLU, the pre-LayerNorm step, and the LayerNorms without
// biases or tables) against their twins in model/family_layers.c. fp32,
// bf16 and fp16; hidden sizes whose rows end inside a lane's
// chunk and inside the last chunk; 1 to 16 rows per block. Outputs start as
// NaN (every element must be written) and shared memory as NaN in every
// block.
//
// Bounds, per element, from the two sides' fp32 sums in different orders
// (|fl(sum) - sum| <= (n - 1) u sum|terms| each, u = 2^-24) and their
// roundings, evaluated in double on the data (see ln_bound and
// pool_bound). What this cannot show, and test_gpu_kernels does on a GPU:
// the real instructions, erff's device implementation, speed.
#include "cuda_emu.h"

namespace qac_enc {
alignas(16) float enc_smem[1 << 16];
}

#include "../../kernels/encoder_fused.cu"
#include "../../kernels/family_kernels.cu"

#define EMU_TEST_SEED 0x2545F4914F6CDD1Dull
#include "emu_testutil.h"

extern "C" {
#include "bert_cpu.h"
}

using namespace qac_enc;

namespace {

constexpr double U = 0x1p-24;

int uint_in(int lo, int hi) { return lo + (int)(uni(0, 1) * (float)(hi - lo + 1) * 0.999999f); }

template <typename E> constexpr double half_ulp() { // relative rounding of one conversion to E
    return std::is_same<E, float>::value ? 0 : std::is_same<E, __half>::value ? 0x1p-11 : 0x1p-8;
}
template <typename E> constexpr double abs_floor() { // fp16's subnormal spacing / 2
    return std::is_same<E, __half>::value ? 0x1p-25 : 0;
}
template <typename E> float round_to(float v) { return qac_to_float<E>(qac_from_float<E>(v)); }

// The largest difference over its bound (<= 1 passes); NaN fails.
double worst(const float *got, const float *want, const double *bound, size_t n, double *max_abs) {
    double w = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - want[i]);
        if (!(d == d)) {
            *max_abs = INFINITY;
            return INFINITY;
        }
        mx = d > mx ? d : mx;
        const double r = d / (bound[i] + 1e-37);
        w = r > w ? r : w;
    }
    *max_abs = mx;
    return w;
}

void check(const char *what, const char *shape, const std::vector<float> &got, const std::vector<float> &want,
           const std::vector<double> &bound) {
    double mx;
    const double w = worst(got.data(), want.data(), bound.data(), got.size(), &mx);
    printf("%-26s %-44s max|d| %.3g, worst d/bound %.3g\n", what, shape, mx, w);
    CHECK_MSG(w <= 1.0, "%s %s: difference %.3g times its bound", what, shape, w);
}

// LayerNorm of one row v [C] computed twice with its sums in different
// orders: per output element, the bound on the difference.
//   mean: |dm| <= 2 (C - 1) u sum|v| / C + 2 u |m|
//   centred sum q = sum (v - m)^2: |dq| <= 2 |dm| sum|v - m| + C dm^2 + 2 (C + 2) u q
//   rstd: |dr| / r <= |dq| / (2 (q + C eps)) + 6 u (division, sqrt, reciprocal, both sides)
//   y = (v - m) r w + b: |dy| <= |w| r (|dm| + |v - m| |dr| / r) + 4 u (|(v - m) r w| + |y|)
void ln_bound(double *bound, const float *v, const float *w, const float *b, int C, float eps) {
    double s = 0, sa = 0;
    for (int c = 0; c < C; c++) s += v[c], sa += fabs(v[c]);
    const double m = s / C;
    double q = 0, qa = 0;
    for (int c = 0; c < C; c++) q += (v[c] - m) * (v[c] - m), qa += fabs(v[c] - m);
    const double dm = 2.0 * (C - 1) * U * sa / C + 2 * U * fabs(m);
    const double dq = 2 * dm * qa + C * dm * dm + 2.0 * (C + 2) * U * q;
    const double r = 1.0 / sqrt(q / C + eps);
    const double dr = dq / (2 * (q + C * (double)eps)) + 6 * U;
    for (int c = 0; c < C; c++) {
        const double d = fabs(v[c] - m), y = (v[c] - m) * r * w[c] + b[c];
        bound[c] = fabs(w[c]) * r * (dm + d * dr) + 4 * U * (d * r * fabs(w[c]) + fabs(y));
    }
}

// A rounded copy: the two sides' differences grow by one rounding each.
template <typename E> double act_bound(double fp32_bound, float y) {
    return fp32_bound + 2 * half_ulp<E>() * (fabs(y) + fp32_bound) + 2 * abs_floor<E>();
}

// The row's input as both sides compute it.
template <typename E> struct ln_case {
    int N, C;
    std::vector<float> x, rf, bias, w, b; // rf: r rounded to E, as floats
    std::vector<E> r;
    float eps = 1e-12f;
    ln_case(int n, int c) : N(n), C(c), x((size_t)n * c), rf((size_t)n * c), bias(c), w(c), b(c), r((size_t)n * c) {
        for (auto &v : x) v = uni(-2, 2);
        for (size_t i = 0; i < r.size(); i++) r[i] = qac_from_float<E>(uni(-2, 2)), rf[i] = qac_to_float<E>(r[i]);
        for (auto &v : bias) v = uni(-0.5f, 0.5f);
        for (auto &v : w) v = uni(0.5f, 1.5f);
        for (auto &v : b) v = uni(-0.3f, 0.3f);
    }
    float pre(size_t row, int c) const { return x[row * C + c] + (rf[row * C + c] + bias[c]); }
};

template <typename E, int NCH> void run_ln_kernel(const ln_args &a, int warps, bool embed) {
    const unsigned grid = (unsigned)((a.N + warps - 1) / warps);
    if (embed)
        emu_launch({grid, 1, 1}, (unsigned)warps * 32, [&] { ln_warp_kernel<E, NCH, true>(a); });
    else
        emu_launch({grid, 1, 1}, (unsigned)warps * 32, [&] { ln_warp_kernel<E, NCH, false>(a); });
}

// nobias: the families' NULL vectors (a LayerNorm and a projection without
// bias, embeddings without position or type table), zeros on the CPU side.
template <typename E, int NCH> void test_ln(int N, int C, int warps, bool embed, bool nobias = false) {
    ln_case<E> k(N, C);
    if (nobias) {
        std::fill(k.b.begin(), k.b.end(), 0.f);
        std::fill(k.bias.begin(), k.bias.end(), 0.f);
    }
    const int V = 13, T = 7;
    const int TT = 2; // token types (a cross-encoder's pairs)
    std::vector<float> word((size_t)V * C), pos((size_t)T * C), type((size_t)TT * C);
    std::vector<int32_t> ids(N), pos_ids(N), type_ids(N);
    for (auto &v : word) v = uni(-1, 1);
    for (auto &v : pos) v = nobias ? 0.f : uni(-0.5f, 0.5f);
    for (auto &v : type) v = nobias ? 0.f : uni(-0.2f, 0.2f);
    for (int i = 0; i < N; i++) ids[i] = uint_in(0, V - 1), pos_ids[i] = uint_in(0, T - 1), type_ids[i] = uint_in(0, 1);
    const bool packed_pos = N % 2; // pos_ids, or row % T
    const bool typed = N % 3 != 0; // type_ids, or type 0 everywhere
    std::vector<float> pre((size_t)N * C), want((size_t)N * C);
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) {
            const int t = packed_pos ? pos_ids[i] : i % T;
            pre[(size_t)i * C + c] =
                embed ? word[(size_t)ids[i] * C + c] + pos[(size_t)t * C + c] + type[(size_t)(typed ? type_ids[i] : 0) * C + c]
                      : k.pre(i, c);
        }
    qac_layernorm_forward(want.data(), NULL, NULL, pre.data(), k.w.data(), k.b.data(), N, C, k.eps, NULL);
    std::vector<double> bound((size_t)N * C), abound((size_t)N * C);
    std::vector<float> want_act((size_t)N * C);
    for (int i = 0; i < N; i++) {
        ln_bound(bound.data() + (size_t)i * C, pre.data() + (size_t)i * C, k.w.data(), k.b.data(), C, k.eps);
        for (int c = 0; c < C; c++) {
            const size_t j = (size_t)i * C + c;
            want_act[j] = round_to<E>(want[j]);
            abound[j] = act_bound<E>(bound[j], want[j]);
        }
    }
    std::vector<float> x(k.x);
    for (auto &v : x) v = embed ? NAN : v; // the embedding kernel writes x, reads nothing of it
    std::vector<E> xh((size_t)N * C, qac_from_float<E>(NAN));
    ln_args a;
    memset(&a, 0, sizeof a);
    a.x = x.data(), a.xh = xh.data(), a.r = k.r.data(), a.bias = k.bias.data();
    a.ids = ids.data(), a.pos_ids = packed_pos ? pos_ids.data() : nullptr, a.word = word.data(), a.pos = pos.data();
    a.type_ids = typed ? type_ids.data() : nullptr;
    a.type = type.data(), a.w = k.w.data(), a.b = k.b.data(), a.N = N, a.C = C, a.T = T, a.eps = k.eps;
    if (nobias) a.b = nullptr, a.bias = nullptr, a.pos = nullptr, a.type = nullptr;
    run_ln_kernel<E, NCH>(a, warps, embed);
    std::vector<float> got_act((size_t)N * C);
    for (size_t j = 0; j < got_act.size(); j++) got_act[j] = qac_to_float<E>(xh[j]);
    char shape[96];
    snprintf(shape, sizeof shape, "%s N%d C%d nch%d w%d%s%s", pname<E>(), N, C, NCH, warps,
             embed && typed ? " typed" : "", nobias ? " no bias" : "");
    check(embed ? "emulated embed+layernorm" : "emulated residual+layernorm", shape, x, want, bound);
    check("  (activation copy)", shape, got_act, want_act, abound);
}

// Pooling (and normalisation) of LayerNorm rows on both sides, with the
// LayerNorm bounds per row: the mean adds the sums' orders (count - 1) u
// sum|y| twice and its scaling 2 u; the norm sum_c p^2 (double on the CPU)
// C u sum p^2 on the GPU plus the p errors; the division 2 u.
struct pool_setup {
    int B, T, C, N;
    std::vector<int> lens, from, offs;
    bool packed;
};

template <typename E, int NCH> void test_ln_pool(const pool_setup &ps, int mean, int normalize, bool use_from,
                                                 bool one_row, int warps) {
    const int B = ps.B, C = ps.C, N = ps.N;
    ln_case<E> k(N, C);
    std::vector<float> pre((size_t)N * C), ln((size_t)N * C);
    std::vector<double> lb((size_t)N * C);
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) pre[(size_t)i * C + c] = k.pre(i, c);
    qac_layernorm_forward(ln.data(), NULL, NULL, pre.data(), k.w.data(), k.b.data(), N, C, k.eps, NULL);
    for (int i = 0; i < N; i++)
        ln_bound(lb.data() + (size_t)i * C, pre.data() + (size_t)i * C, k.w.data(), k.b.data(), C, k.eps);
    // the twin on padded rows [B, T]: copy each sequence's rows there
    const int T = one_row ? 1 : ps.T;
    std::vector<float> padded((size_t)B * T * C, 0.f);
    std::vector<double> pb((size_t)B * T * C, 0.0);
    std::vector<int> lens(B), from(B);
    for (int s = 0; s < B; s++) {
        lens[s] = one_row ? 1 : ps.lens[s];
        from[s] = one_row ? 0 : ps.from[s];
        const size_t src = one_row ? (size_t)s : ps.packed ? (size_t)ps.offs[s] : (size_t)s * ps.T;
        for (int t = 0; t < lens[s]; t++)
            for (int c = 0; c < C; c++) {
                padded[((size_t)s * T + t) * C + c] = ln[(src + t) * C + c];
                pb[((size_t)s * T + t) * C + c] = lb[(src + t) * C + c];
            }
    }
    std::vector<float> want((size_t)B * C);
    const int *f = use_from ? from.data() : nullptr;
    // an empty sequence (lens 0) is the kernel's own case: the twin takes one
    // row and its output is replaced by the zeros expected
    std::vector<int> tl(lens);
    for (auto &l : tl) l = l > 0 ? l : 1;
    qac_pooling_forward_from(want.data(), padded.data(), tl.data(), f, B, T, C, mean ? QAC_POOL_MEAN : QAC_POOL_CLS,
                             normalize);
    std::vector<double> bound((size_t)B * C);
    for (int s = 0; s < B; s++) {
        int S = f && f[s] > 0 ? f[s] : 0, L = tl[s];
        if (S >= L) S = mean ? L : 0;
        const int count = mean ? L - S : 1;
        std::vector<double> p(C), dp(C);
        for (int c = 0; c < C; c++) {
            double sum = 0, sa = 0, e = 0;
            for (int t = S; t < S + count; t++) {
                const size_t j = ((size_t)s * T + t) * C + c;
                sum += padded[j], sa += fabs(padded[j]), e += pb[j];
            }
            const double inv = 1.0 / (count > 0 ? count : 1);
            p[c] = sum * inv;
            dp[c] = (e + 2.0 * (count > 1 ? count - 1 : 0) * U * sa) * inv + 2 * U * fabs(p[c]);
        }
        double nn = 0, dn = 0;
        for (int c = 0; c < C; c++) nn += p[c] * p[c], dn += fabs(p[c]) * dp[c];
        const double norm = sqrt(nn) > 1e-12 ? sqrt(nn) : 1e-12;
        const double rel_n = (dn + C * U * nn) / (norm * norm) + 4 * U;
        for (int c = 0; c < C; c++) {
            const size_t j = (size_t)s * C + c;
            bound[j] = normalize ? dp[c] / norm + fabs(p[c]) / norm * rel_n + 2 * U * fabs(p[c]) / norm : dp[c];
            if (lens[s] == 0 && !one_row) want[j] = 0.f, bound[j] = 0;
        }
    }
    std::vector<float> out((size_t)B * C, NAN);
    std::vector<int> lens_k(ps.lens), from_k(ps.from);
    pool_args a = {out.data(), k.x.data(), k.r.data(), k.bias.data(), k.w.data(), k.b.data(),
                   one_row ? nullptr : ps.packed ? ps.offs.data() : nullptr, one_row ? nullptr : lens_k.data(),
                   use_from && !one_row ? from_k.data() : nullptr, one_row ? 1 : ps.T, C, k.eps, mean, normalize};
    emu_smem_bytes = ((size_t)warps * C + 32) * sizeof(float);
    emu_launch({(unsigned)B, 1, 1}, (unsigned)warps * 32, [&] { ln_pool_kernel<E, NCH>(a); });
    char shape[120];
    snprintf(shape, sizeof shape, "%s B%d C%d %s%s%s%s w%d", pname<E>(), B, C, mean ? "mean" : "cls",
             normalize ? "+l2" : "", use_from ? " from" : "",
             one_row ? " one row" : ps.packed ? " packed" : " padded", warps);
    check("emulated layernorm+pool", shape, out, want, bound);
}

pool_setup make_pool(int B, int T, int C, bool packed, bool with_empty) {
    pool_setup ps;
    ps.B = B, ps.T = T, ps.C = C, ps.packed = packed;
    ps.lens.resize(B), ps.from.resize(B), ps.offs.resize(B + 1);
    for (int s = 0; s < B; s++) {
        ps.lens[s] = s == 0 ? T : uint_in(1, T);
        ps.from[s] = s % 3 == 2 ? ps.lens[s] + 1 : uint_in(0, ps.lens[s] - 1);
    }
    if (with_empty) ps.lens[B - 1] = 0, ps.from[B - 1] = 0;
    ps.offs[0] = 0;
    for (int s = 0; s < B; s++) ps.offs[s + 1] = ps.offs[s] + ps.lens[s];
    ps.N = packed ? ps.offs[B] + 3 : B * T; // packed: a bucket's padding rows after the last
    return ps;
}

template <typename E> void test_gather(int B, int T, int C, bool packed) {
    pool_setup ps = make_pool(B, T, C, packed, true);
    std::vector<float> x((size_t)ps.N * C);
    std::vector<E> ctx((size_t)ps.N * C);
    for (auto &v : x) v = uni(-1, 1);
    for (auto &v : ctx) v = qac_from_float<E>(uni(-1, 1));
    std::vector<float> xg((size_t)B * C, NAN);
    std::vector<E> cg((size_t)B * C, qac_from_float<E>(NAN));
    const int *offs = packed ? ps.offs.data() : nullptr;
    emu_launch({(unsigned)B, 1, 1}, 64, [&] {
        gather_rows_kernel<E>(xg.data(), cg.data(), x.data(), ctx.data(), offs, ps.lens.data(), ps.from.data(), T, C);
    });
    int bad = 0;
    for (int s = 0; s < B; s++) {
        const int L = ps.lens[s], S = ps.from[s] > 0 && ps.from[s] < L ? ps.from[s] : 0;
        const size_t row = (packed ? (size_t)ps.offs[s] : (size_t)s * T) + S;
        for (int c = 0; c < C; c++) {
            const float wx = L > 0 ? x[row * C + c] : 0.f, wc = L > 0 ? qac_to_float<E>(ctx[row * C + c]) : 0.f;
            bad += memcmp(&xg[(size_t)s * C + c], &wx, 4) != 0 || qac_to_float<E>(cg[(size_t)s * C + c]) != wc;
        }
    }
    printf("emulated gather %-5s B%d T%d C%d %s: %d wrong\n", pname<E>(), B, T, C,
           packed ? "packed" : "padded", bad);
    CHECK_MSG(bad == 0, "gather: %d elements differ from the pooled rows", bad);
}

// Every element once, with its own column's bias: the kernel's arithmetic
// written plainly, so the same bits.
template <typename E, int V> void test_gelu_rows(int N, int I, int R) {
    std::vector<E> h((size_t)N * I), ref;
    std::vector<float> bias(I);
    for (auto &v : h) v = qac_from_float<E>(uni(-4, 4));
    for (auto &v : bias) v = uni(-1, 1);
    ref = h;
    for (int i = 0; i < N; i++)
        for (int c = 0; c < I; c++) {
            E &v = ref[(size_t)i * I + c];
            v = qac_from_float<E>(gelu_erf(qac_to_float<E>(v) + bias[c]));
        }
    const unsigned threads = (unsigned)((I / V) * ((N + R - 1) / R));
    emu_launch({(threads + 63) / 64, 1, 1}, 64,
               [&] { gelu_rows_kernel<E, V>(h.data(), bias.data(), N, I, R, threads); });
    const int bad = memcmp(h.data(), ref.data(), h.size() * sizeof(E)) != 0;
    printf("emulated bias+gelu %-5s N%d I%d rows%d: %s\n", pname<E>(), N, I, R,
           bad ? "DIFFERS" : "same bits");
    CHECK_MSG(!bad, "bias+gelu N%d I%d rows%d: bits differ", N, I, R);
}

// ---- the families' kernels (kernels/family_kernels.cu) ----

// Rotary positions with the QKV bias: the twin's arithmetic (the same
// roundings, no fused multiply-add), so the same bits.
template <typename E> void test_rope(int N, int C, int NH, bool bias_on) {
    const int hs = C / NH, P = 300;
    std::vector<float> cs((size_t)P * hs), bias(3 * C), ref((size_t)N * 3 * C);
    qac_rope_table(cs.data(), P, hs, 10000.0f);
    for (auto &v : bias) v = uni(-0.5f, 0.5f);
    std::vector<E> qkv((size_t)N * 3 * C);
    std::vector<int32_t> pos(N);
    for (auto &v : qkv) v = qac_from_float<E>(uni(-2, 2));
    for (auto &v : pos) v = uint_in(0, P - 1);
    for (size_t i = 0; i < ref.size(); i++)
        ref[i] = qac_to_float<E>(qkv[i]) + (bias_on ? bias[i % (3 * C)] : 0.f);
    qac_rope_forward(ref.data(), pos.data(), cs.data(), N, C, NH, NULL);
    const unsigned grid = (unsigned)(((size_t)N * C + 255) / 256);
    emu_launch({grid, 1, 1}, 256, [&] {
        qac_fam::rope_kernel<E>(qkv.data(), bias_on ? bias.data() : nullptr, pos.data(), cs.data(), N, C, hs);
    });
    int bad = 0;
    for (size_t i = 0; i < ref.size(); i++) bad += qac_to_float<E>(qkv[i]) != round_to<E>(ref[i]);
    printf("emulated rope %-5s N%d C%d hs%d%s: %d elements differ\n", pname<E>(), N, C, hs,
           bias_on ? " bias" : "", bad);
    CHECK_MSG(bad == 0, "rope N%d C%d: %d elements differ from the twin", N, C, bad);
}

// GeGLU: the kernel's arithmetic written plainly (the same bits), and the
// twin (qac_geglu_forward, whose erf is within 1.5e-7 of the exact: vecmath.h)
// within GELU's |x| / 2 * 2 * 1.5e-7 times the gate, plus each side's
// float32 roundings (4 units) and the output's rounding to the type.
template <typename E> void test_geglu(int N, int I, bool bias_on) {
    std::vector<E> pre((size_t)N * 2 * I), act((size_t)N * I, qac_from_float<E>(NAN)), plain((size_t)N * I);
    std::vector<float> bias(2 * I), pf((size_t)N * 2 * I), twin((size_t)N * I);
    std::vector<double> bound((size_t)N * I);
    for (auto &v : pre) v = qac_from_float<E>(uni(-4, 4));
    for (auto &v : bias) v = uni(-1, 1);
    for (int r = 0; r < N; r++)
        for (int i = 0; i < 2 * I; i++) {
            const size_t j = (size_t)r * 2 * I + i;
            pf[j] = qac_to_float<E>(pre[j]) + (bias_on ? bias[i] : 0.f);
        }
    for (int r = 0; r < N; r++)
        for (int i = 0; i < I; i++) {
            const float a = pf[(size_t)r * 2 * I + i], g = pf[(size_t)r * 2 * I + I + i];
            const float y = qac_fam::gelu_erf(a) * g;
            plain[(size_t)r * I + i] = qac_from_float<E>(y);
            bound[(size_t)r * I + i] = (fabs(a) * 1.5e-7 + 4 * U * fabs(qac_fam::gelu_erf(a))) * fabs(g) +
                                       4 * U * fabs(y) + 2 * half_ulp<E>() * fabs(y) + 2 * abs_floor<E>();
        }
    qac_geglu_forward(twin.data(), pf.data(), N, I, NULL);
    emu_launch({(unsigned)(((size_t)N * I + 255) / 256), 1, 1}, 256, [&] {
        qac_fam::geglu_kernel<E>(act.data(), pre.data(), bias_on ? bias.data() : nullptr, N, I);
    });
    const int bad = memcmp(act.data(), plain.data(), act.size() * sizeof(E)) != 0;
    std::vector<float> got((size_t)N * I);
    for (size_t j = 0; j < got.size(); j++) got[j] = qac_to_float<E>(act[j]);
    char shape[64];
    snprintf(shape, sizeof shape, "%s N%d I%d%s", pname<E>(), N, I, bias_on ? " bias" : "");
    printf("emulated geglu %-30s %s as written plainly\n", shape, bad ? "DIFFERS" : "same bits");
    CHECK_MSG(!bad, "geglu %s: bits differ from its arithmetic", shape);
    check("emulated geglu vs twin", shape, got, twin, bound);
}

// The pre-LayerNorm step: x += r + bias exactly (the same sums), xn =
// LayerNorm(x) against qac_add_layernorm_forward within ln_bound (sums in
// other orders) and the rounding to the type.
template <typename E> void test_add_ln(int N, int C, bool with_r, bool bias_on) {
    ln_case<E> k(N, C);
    if (!bias_on) std::fill(k.b.begin(), k.b.end(), 0.f);
    std::vector<float> x(k.x), tx(k.x), txn((size_t)N * C), rf(k.rf);
    qac_add_layernorm_forward(tx.data(), txn.data(), with_r ? rf.data() : NULL, bias_on ? k.bias.data() : NULL,
                              k.w.data(), bias_on ? k.b.data() : NULL, N, C, k.eps, NULL);
    std::vector<E> xn((size_t)N * C, qac_from_float<E>(NAN));
    static float row[4096], red[32];
    emu_launch({(unsigned)N, 1, 1}, 256, [&] {
        qac_fam::add_ln_kernel<E>(x.data(), xn.data(), with_r ? k.r.data() : nullptr, bias_on ? k.bias.data() : nullptr,
                                  k.w.data(), bias_on ? k.b.data() : nullptr, C, k.eps, row, red);
    });
    std::vector<double> bound((size_t)N * C);
    std::vector<float> got((size_t)N * C);
    for (int i = 0; i < N; i++) {
        ln_bound(bound.data() + (size_t)i * C, tx.data() + (size_t)i * C, k.w.data(), k.b.data(), C, k.eps);
        for (int c = 0; c < C; c++) {
            const size_t j = (size_t)i * C + c;
            got[j] = qac_to_float<E>(xn[j]);
            bound[j] = act_bound<E>(bound[j], txn[j]);
        }
    }
    const int xbad = memcmp(x.data(), tx.data(), x.size() * sizeof(float)) != 0;
    char shape[64];
    snprintf(shape, sizeof shape, "%s N%d C%d%s%s", pname<E>(), N, C, with_r ? " +r" : "",
             bias_on ? " bias" : "");
    printf("emulated add+layernorm %-24s residual %s\n", shape, xbad ? "DIFFERS" : "same bits");
    CHECK_MSG(!xbad, "add+layernorm %s: the residual sum differs", shape);
    check("emulated add+layernorm", shape, got, txn, bound);
}

template <typename E> void test_families() {
    test_rope<E>(7, 64, 2, true);
    test_rope<E>(5, 96, 3, false);
    test_geglu<E>(6, 40, true);
    test_geglu<E>(3, 96, false);
    test_add_ln<E>(5, 100, true, true);
    test_add_ln<E>(4, 384, true, false);
    test_add_ln<E>(3, 64, false, false);
    test_ln<E, 1>(7, 100, 4, false, true); // the warp LayerNorms without biases or tables
    test_ln<E, 3>(5, 384, 2, true, true);
}

template <typename E> void test_precision() {
    // C: 100 (a lane's chunk past the row), 384, 768, 1000 (the last chunk cut)
    test_ln<E, 1>(9, 100, 4, false);
    test_ln<E, 1>(5, 100, 1, true);
    test_ln<E, 3>(6, 384, 16, false);
    test_ln<E, 6>(11, 768, 4, false);
    test_ln<E, 6>(4, 768, 2, true);
    test_ln<E, 3>(6, 384, 4, true); // type 0 everywhere
    test_ln<E, 8>(3, 1000, 1, false);
    for (int packed = 0; packed < 2; packed++) {
        const pool_setup ps = make_pool(5, 19, 384, packed, packed);
        const pool_setup big = make_pool(3, 70, 768, packed, false);
        for (int mode = 0; mode < 8; mode++) {
            const int mean = mode & 1, norm = (mode >> 1) & 1;
            const bool from = (mode >> 2) & 1;
            test_ln_pool<E, 3>(ps, mean, norm, from, false, mode % 2 ? 4 : 3);
            if (mode < 4) test_ln_pool<E, 6>(big, mean, norm, from, false, 8);
        }
    }
    const pool_setup rows = make_pool(4, 1, 100, false, false);
    test_ln_pool<E, 1>(rows, 0, 1, false, true, 4); // the pruned layer's gathered rows
    test_gather<E>(5, 12, 100, true);
    test_gather<E>(3, 9, 384, false);
}

} // namespace

int main() {
    emu_smem = reinterpret_cast<unsigned char *>(enc_smem);
    emu_smem_bytes = sizeof enc_smem;
    test_precision<float>();
    test_precision<__nv_bfloat16>();
    test_precision<__half>();
    test_families<float>();
    test_families<__nv_bfloat16>();
    test_families<__half>();
    test_gelu_rows<__nv_bfloat16, 8>(7, 64, 3);
    test_gelu_rows<__half, 8>(5, 24, 4);
    test_gelu_rows<float, 4>(9, 12, 1);
    test_gelu_rows<__nv_bfloat16, 8>(3, 1536, 64);
    return qac_test_summary();
}
