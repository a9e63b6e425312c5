// What the emulated kernel tests (tests/gpu/test_*_emulated.cpp) share
// around tests/gpu/cuda_emu.h: the seeded data, the conversions between
// float vectors and the kernels' element types, and the two comparisons
// against a CPU twin (bit for bit, and the relative norm of the difference
// that the GPU tests use, gpu_testutil.h's gpu_test_rel_err).
// Include it after the kernel sources (the conversions are theirs:
// qac_to_float and qac_from_float in kernels/cuda_common.cuh), with
// EMU_TEST_SEED defined first: each test keeps its own data.
#ifndef QAC_EMU_TESTUTIL_H
#define QAC_EMU_TESTUTIL_H

#ifndef EMU_TEST_SEED
#error "define EMU_TEST_SEED (the seed of the test's data) before including emu_testutil.h"
#endif

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <vector>

extern "C" {
#include "gpu_testutil.h"
#include "testutil.h"
}

// the GPU tests' generator (gpu_testutil.h), from the test's own seed
inline uint64_t emu_rng_state = EMU_TEST_SEED;
inline uint64_t emu_next() { return gpu_test_xorshift(&emu_rng_state); }
// Uniform in [lo, hi).
inline float uni(float lo, float hi) { return gpu_test_uniform_of(emu_next(), lo, hi); }
inline std::vector<float> rnd(size_t n, float lo, float hi) {
    std::vector<float> v(n);
    for (auto &x : v) x = uni(lo, hi);
    return v;
}

template <typename E> constexpr bool is_bf16() { return std::is_same<E, __nv_bfloat16>::value; }
template <typename E> const char *pname() {
    return is_bf16<E>() ? "bf16" : std::is_same<E, __half>::value ? "fp16" : "fp32";
}
template <typename E> std::vector<E> to_e(const std::vector<float> &x) {
    std::vector<E> r(x.size());
    for (size_t i = 0; i < x.size(); i++) r[i] = qac_from_float<E>(x[i]);
    return r;
}
template <typename E> std::vector<float> to_f(const std::vector<E> &x) {
    std::vector<float> r(x.size());
    for (size_t i = 0; i < x.size(); i++) r[i] = qac_to_float<E>(x[i]);
    return r;
}
// x as E stores it
template <typename E> std::vector<float> rounded(const std::vector<float> &x) { return to_f<E>(to_e<E>(x)); }

// ||got - want|| / ||want|| within t; NaN fails.
inline void report(const char *what, const char *prec, const char *shape, const float *got, const float *want,
                   size_t n, double t) {
    double mx;
    const double rel = gpu_test_rel_err(got, want, n, &mx);
    printf("%-24s %-5s %-36s rel %.3g max|d| %.3g (tol %.1g)\n", what, prec, shape, rel, mx, t);
    CHECK_MSG(rel <= t, "%s %s %s: relative error %g > %g", what, prec, shape, rel, t);
}
inline void report(const char *what, const char *prec, const char *shape, const std::vector<float> &got,
                   const std::vector<float> &want, double t) {
    report(what, prec, shape, got.data(), want.data(), got.size(), t);
}

// The same bits, element for element.
inline void report_exact(const char *what, const char *prec, const char *shape, const float *got, const float *want,
                         size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp(&got[i], &want[i], sizeof(float)) != 0;
    printf("%-24s %-5s %-36s %zu of %zu differ (must be 0)\n", what, prec, shape, bad, n);
    CHECK_MSG(bad == 0, "%s %s %s: %zu elements differ from the CPU twin", what, prec, shape, bad);
}
inline void report_exact(const char *what, const char *prec, const char *shape, const std::vector<float> &got,
                         const std::vector<float> &want) {
    report_exact(what, prec, shape, got.data(), want.data(), got.size());
}

#endif
