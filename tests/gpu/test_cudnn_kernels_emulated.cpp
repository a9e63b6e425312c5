// The device helpers around cuDNN's attention (kernels/cudnn_att_kernels.cuh)
// run on the CPU (tests/gpu/cuda_emu.h: the kernels' own source, blocks one
// at a time) against their definitions written plainly, in the default
// suite: the QKV bias added in place and rounded once (bf16 rounded by
// util/qac_bf16.h, fp16 by the compiler's _Float16: both round to nearest
// even, as the device's conversions do, so the results must be the same
// bits), rows strided over a grid shorter than the batch, columns past the
// last block's end untouched; the ragged offsets and lengths cuDNN reads
// (an empty sequence, several blocks), the padding between the parts
// untouched; the agreement check's largest difference, largest value and
// NaN count over a grid-strided array (exact: maxima of the same floats).
// What this cannot show, and test_gpu_cudnn does on a GPU: cuDNN itself.
#include "cuda_emu.h"

// blocks run one after another: the atomics are plain updates
inline unsigned atomicMax(unsigned *p, unsigned v) {
    const unsigned o = *p;
    if (v > o) *p = v;
    return o;
}
inline unsigned atomicAdd(unsigned *p, unsigned v) {
    const unsigned o = *p;
    *p = o + v;
    return o;
}
inline unsigned __float_as_uint(float f) {
    unsigned u;
    memcpy(&u, &f, sizeof u);
    return u;
}
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }

#include "../../kernels/cudnn_att_kernels.cuh"

#define EMU_TEST_SEED 0x9E3779B97F4A7C15ull
#include "emu_testutil.h"

extern "C" {
#include "qac_bf16.h"
}

using namespace qac_cudnn_k;

namespace {

// E's bits of a float, rounded to nearest even, without qac's device code
template <typename E> uint16_t bits_of(float x);
template <> uint16_t bits_of<__nv_bfloat16>(float x) { return qac_bf16_from_float(x); }
template <> uint16_t bits_of<__half>(float x) {
    const _Float16 h = (_Float16)x;
    uint16_t b;
    memcpy(&b, &h, 2);
    return b;
}
template <typename E> float value_of(uint16_t b);
template <> float value_of<__nv_bfloat16>(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
template <> float value_of<__half>(uint16_t b) {
    _Float16 h;
    memcpy(&h, &b, 2);
    return (float)h;
}

// qkv [N, C3] += bias, rounded once, over grid rows gy (< N: each block row strides)
template <typename E> void test_add_bias(int N, int C3, unsigned gy) {
    const int guard = 40;
    std::vector<uint16_t> q((size_t)N * C3 + guard);
    std::vector<float> bias(C3 + 256, NAN); // past C3: NaN, which any read there would spread
    for (int c = 0; c < C3; c++) bias[c] = uni(-2, 2);
    for (auto &x : q) x = bits_of<E>(uni(-3, 3));
    std::vector<uint16_t> want(q);
    for (int r = 0; r < N; r++)
        for (int c = 0; c < C3; c++) {
            uint16_t &w = want[(size_t)r * C3 + c];
            w = bits_of<E>(value_of<E>(w) + bias[c]);
        }
    E *qe = reinterpret_cast<E *>(q.data());
    emu_launch({(unsigned)((C3 + 255) / 256), gy, 1}, 256, [&] { add_bias_kernel<E>(qe, bias.data(), N, C3); });
    size_t bad = 0, first = (size_t)-1;
    for (size_t i = 0; i < q.size(); i++)
        if (q[i] != want[i]) {
            bad++;
            if (first == (size_t)-1) first = i;
        }
    CHECK_MSG(bad == 0, "add_bias %s N %d C3 %d grid.y %u: %zu of %zu elements differ (first at %zu%s)", pname<E>(), N,
              C3, gy, bad, q.size(), first, first >= (size_t)N * C3 ? ", past the end" : "");
}

void test_ragged(const std::vector<int> &lens, int C, unsigned threads) {
    const int B = (int)lens.size(), P = (int)(((size_t)B + 1 + 3) / 4 * 4);
    std::vector<int> offs(B + 1, 0), idx(3 * P, -7);
    for (int b = 0; b < B; b++) offs[b + 1] = offs[b] + lens[b];
    emu_launch({(unsigned)((B + 1 + threads - 1) / threads), 1, 1}, threads,
               [&] { ragged_kernel(idx.data(), offs.data(), B, P, C); });
    int bad = 0;
    for (int i = 0; i < 3 * P; i++) {
        const int part = i / P, b = i % P;
        int want = -7; // the padding of each part stays as it was
        if (part == 0 && b < B) want = lens[b];
        if (part == 1 && b <= B) want = offs[b] * 3 * C;
        if (part == 2 && b <= B) want = offs[b] * C;
        if (idx[i] != want) bad++;
    }
    CHECK_MSG(bad == 0, "ragged offsets B %d C %d, %u threads a block: %d of %d ints wrong", B, C, threads, bad, 3 * P);
}

template <typename E> void test_compare(size_t n, unsigned blocks, unsigned threads, int nans) {
    std::vector<uint16_t> a(n), b(n);
    for (size_t i = 0; i < n; i++) {
        a[i] = bits_of<E>(uni(-5, 5));
        b[i] = bits_of<E>(value_of<E>(a[i]) + uni(-0.1f, 0.1f));
    }
    for (int k = 0; k < nans; k++) (k % 2 ? a : b)[(size_t)(uni(0, 1) * (float)(n - 1))] = bits_of<E>(NAN);
    double d = 0, m = 0;
    unsigned nn = 0;
    for (size_t i = 0; i < n; i++) {
        const float x = value_of<E>(a[i]), y = value_of<E>(b[i]);
        if (std::isnan(x) || std::isnan(y)) {
            nn++;
            continue;
        }
        d = std::max(d, (double)std::fabs(x - y));
        m = std::max(m, (double)std::fabs(x));
    }
    unsigned out[3] = {0, 0, 0};
    emu_launch({blocks, 1, 1}, threads, [&] {
        compare_kernel<E>(out, reinterpret_cast<const E *>(a.data()), reinterpret_cast<const E *>(b.data()), n);
    });
    float gd, gm;
    memcpy(&gd, &out[0], 4);
    memcpy(&gm, &out[1], 4);
    CHECK_MSG(gd == (float)d && gm == (float)m && out[2] == nn,
              "compare %s n %zu, %u x %u threads: max |a-b| %g (want %g), max |a| %g (want %g), NaN %u (want %u)",
              pname<E>(), n, blocks, threads, gd, d, gm, m, out[2], nn);
}

} // namespace

int main(void) {
    // BERT-base's 3C and MiniLM's, a width ending inside the last block; grid
    // rows as launched (N, under 65,535) and fewer (the rows strided)
    for (unsigned gy : {1u, 3u, 7u}) {
        test_add_bias<__nv_bfloat16>(7, 3 * 768, gy);
        test_add_bias<__half>(7, 3 * 384, gy);
        test_add_bias<__nv_bfloat16>(7, 300, gy);
        test_add_bias<__half>(7, 300, gy);
    }
    test_ragged({5}, 768, 256);
    test_ragged({3, 0, 128, 17, 64, 1, 9, 33, 2}, 384, 4); // an empty sequence; three blocks
    test_ragged({128, 128, 128, 128}, 768, 256);            // B + 1 = 5: the offsets' part one past B
    test_compare<__nv_bfloat16>(1000, 3, 64, 0);
    test_compare<__nv_bfloat16>(1000, 3, 64, 5);
    test_compare<__half>(4099, 2, 256, 3);
    test_compare<__half>(7, 1, 32, 0); // fewer values than threads
    return qac_test_summary();
}
