// The GPU flat search's own source (kernels/gpu_flat.cu: the fused scan
// on emulated mma.sync, the radix selection, the tiled filter, the host
// code's launches and copies) run on the CPU by gpu_flat_emu.h, against
// the CPU twin of its selection (kernels/topk_twin.c, tested against a
// plain sort in test_topk_twin): the same rows in the same order, the same
// scores, the same path, fallback and candidate counts. The corpora are
// exact (multiples of 1/8, so every score is exact whatever the summation
// order) with heavy ties; small, since every CUDA thread is an OS thread.
// What this cannot show, and test_gpu_topk does on a GPU: the real
// instructions, memory model and speed.
#include "gpu_flat_emu.h"

#include "../../kernels/gpu_flat.cu"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

extern "C" {
#include "qac_topk_twin.h"
#include "testutil.h"
}

namespace {

uint64_t rng = 0x9E3779B97F4A7C15ull;
uint64_t next() {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
int uniform_int(int lo, int hi) { return lo + (int)(next() % (uint64_t)(hi - lo + 1)); }

struct data {
    int64_t n;
    int dim, nq;
    std::vector<float> x, q, scores; // scores [nq, n], exact
};

// density of nonzero values in {-1, 0, 1} / 8 (sparse: many ties), or dense in [-8, 8] / 8
data make(int64_t n, int dim, int nq, double density) {
    data d{n, dim, nq, std::vector<float>((size_t)n * dim), std::vector<float>((size_t)nq * dim), {}};
    auto val = [&](bool dense) {
        if (!dense && (double)(next() % 1000) >= density * 1000) return 0;
        return dense ? uniform_int(-8, 8) : uniform_int(-1, 1);
    };
    std::vector<int> xi((size_t)n * dim), qi((size_t)nq * dim);
    for (auto &v : xi) v = val(density >= 1);
    for (int i = 0; i < (int)(n / 20); i++) // duplicate rows
        std::copy_n(xi.begin() + (size_t)uniform_int(0, (int)n - 1) * dim, dim,
                    xi.begin() + (size_t)uniform_int(0, (int)n - 1) * dim);
    for (auto &v : qi) v = uniform_int(-8, 8);
    for (size_t i = 0; i < xi.size(); i++) d.x[i] = xi[i] / 8.0f;
    for (size_t i = 0; i < qi.size(); i++) d.q[i] = qi[i] / 8.0f;
    d.scores.resize((size_t)nq * n);
    for (int a = 0; a < nq; a++)
        for (int64_t r = 0; r < n; r++) {
            int acc = 0;
            for (int c = 0; c < dim; c++) acc += qi[(size_t)a * dim + c] * xi[(size_t)r * dim + c];
            d.scores[(size_t)a * n + r] = acc / 64.0f;
        }
    return d;
}

std::vector<uint32_t> shuffled(int64_t n) {
    std::vector<uint32_t> r((size_t)n);
    for (int64_t i = 0; i < n; i++) r[i] = (uint32_t)i;
    for (int64_t i = n - 1; i > 0; i--) std::swap(r[i], r[(size_t)uniform_int(0, (int)i)]);
    return r;
}

void run(const char *name, qac_gpu_flat *g, const data &d, int nq, int k, const uint32_t *rank,
         const qac_gpu_flat_tuning &t) {
    std::vector<float> gs((size_t)nq * k, NAN), ts((size_t)nq * k);
    std::vector<int64_t> gr((size_t)nq * k, -7), tr((size_t)nq * k);
    CHECK_OK(qac_gpu_flat_set_tuning(g, &t));
    CHECK_OK(qac_gpu_flat_search(g, d.q.data(), nq, k, gs.data(), gr.data()));
    qac_gpu_flat_stats st;
    qac_gpu_flat_last_stats(g, &st);
    qac_topk_twin_info info;
    CHECK_OK(qac_topk_twin_search(d.scores.data(), d.n, nq, k, rank, d.dim, &t, ts.data(), tr.data(), &info));
    int bad = 0, first = -1;
    for (size_t i = 0; i < gs.size(); i++)
        if (gr[i] != tr[i] || !(gs[i] == ts[i])) {
            if (first < 0) first = (int)i;
            bad++;
        }
    bool same = st.path == info.path && st.fallback == (info.fallback > 0);
    if (same && st.path == QAC_GPU_FLAT_FUSED && !st.fallback)
        for (int i = 0; i < st.nq; i++) same = same && st.candidates[i] == info.candidates[i];
    printf("%-34s n %6lld dim %3d nq %2d k %4d: %s, %s (%s%s, candidates %lld / twin %lld)\n", name,
           (long long)d.n, d.dim, nq, k, bad ? "DIFFERS" : "identical", same ? "same passes" : "OTHER PASSES",
           st.path == QAC_GPU_FLAT_FUSED ? "fused" : "tiled", st.fallback ? " after fallback" : "",
           (long long)st.candidates[0], (long long)info.candidates[0]);
    if (bad)
        fprintf(stderr, "  first difference: query %d rank %d: row %lld score %g, twin row %lld score %g\n", first / k,
                first % k, (long long)gr[first], gs[first], (long long)tr[first], ts[first]);
    CHECK_MSG(bad == 0, "%s nq %d k %d: %d results differ from the twin", name, nq, k, bad);
    CHECK_MSG(same, "%s nq %d k %d: path, fallback or candidates differ from the twin", name, nq, k);
}

qac_gpu_flat *upload(const data &d) {
    qac_gpu_flat *g = nullptr;
    CHECK_OK(qac_gpu_flat_create(&g, d.dim, d.n));
    if (g) {
        CHECK_OK(qac_gpu_flat_add(g, d.x.data(), d.n / 3));
        CHECK_OK(qac_gpu_flat_add(g, d.x.data() + (size_t)(d.n / 3) * d.dim, d.n - d.n / 3));
        CHECK(qac_gpu_flat_count(g) == d.n);
    }
    return g;
}

// small blocks: every CUDA thread is an OS thread
qac_gpu_flat_tuning small_tuning(const char *spec) {
    qac_gpu_flat_tuning t;
    qac_gpu_flat_tuning_default(&t);
    CHECK_OK(qac_gpu_flat_tuning_parse(&t, "fused_threads=64,fused_blocks=2,select_threads=128,filter_threads=64"));
    CHECK_OK(qac_gpu_flat_tuning_parse(&t, spec));
    return t;
}

} // namespace

int main() {
    { // fused and tiled, default and custom ties; a sample smaller than the corpus
        data d = make(5000, 64, 17, 0.15);
        qac_gpu_flat *g = upload(d);
        std::vector<uint32_t> rank = shuffled(d.n);
        const qac_gpu_flat_tuning fused = small_tuning("oversample=8"), tiled = small_tuning("path=tiled,tile_rows=2048");
        for (int order = 0; order < 2 && g; order++) {
            if (order) CHECK_OK(qac_gpu_flat_set_tie_order(g, rank.data()));
            const uint32_t *rk = order ? rank.data() : nullptr;
            static const int ks[] = {1, 10, 300};
            for (int k : ks) {
                run(order ? "fused, custom ties" : "fused", g, d, 1, k, rk, fused);
                run(order ? "fused b16, custom ties" : "fused b16", g, d, 16, k, rk, fused);
                run(order ? "tiled b17, custom ties" : "tiled b17", g, d, 17, k, rk, tiled);
            }
        }
        qac_gpu_flat_free(g);
    }
    { // k 2048 over 3 tiles, radix digits of 4 and 12 bits
        data d = make(4500, 32, 3, 1.0);
        qac_gpu_flat *g = upload(d);
        if (g) {
            run("k 2048 fused, radix 4", g, d, 3, 2048, nullptr, small_tuning("radix_bits=4,oversample=2"));
            run("k 2048 tiled, radix 12", g, d, 3, 2048, nullptr,
                small_tuning("path=tiled,tile_rows=2048,radix_bits=12,compact_factor=1"));
        }
        qac_gpu_flat_free(g);
    }
    { // widths: 40 (a partial 32-column chunk, one n-tile of queries), 13 (tiled only), unroll 4
        static const int dims[] = {40, 13};
        for (int dim : dims) {
            data d = make(3000, dim, 5, 0.3);
            qac_gpu_flat *g = upload(d);
            if (g) {
                run(dim == 40 ? "width 40, unroll 4" : "width 13", g, d, 5, 10, nullptr, small_tuning("fused_unroll=4"));
                run(dim == 40 ? "width 40, unroll 8" : "width 13", g, d, 5, 100, nullptr, small_tuning("oversample=4"));
            }
            qac_gpu_flat_free(g);
        }
    }
    { // the sampled rows are the worst: the candidates overflow and the pass reruns tiled
        const int64_t n = 70000;
        data d{n, 8, 1, std::vector<float>((size_t)n * 8, 0.0f), std::vector<float>(8, 0.0f), {}};
        qac_gpu_flat_tuning t = small_tuning("fused_blocks=8");
        qac_topk_plan p;
        qac_topk_plan_make(&p, n, 1, 5, &t);
        for (int64_t r = 0; r < n; r++) d.x[(size_t)r * 8] = 0.125f;
        for (int64_t j = 0; j < p.sample; j++) d.x[(size_t)qac_topk_sample_row(j, n, p.sample) * 8] = -1.0f;
        d.q[0] = 1.0f;
        d.scores.resize((size_t)n);
        for (int64_t r = 0; r < n; r++) d.scores[(size_t)r] = d.x[(size_t)r * 8];
        qac_gpu_flat *g = upload(d);
        if (g) {
            run("overflow", g, d, 1, 5, nullptr, t);
            qac_gpu_flat_stats st;
            qac_gpu_flat_last_stats(g, &st);
            CHECK_MSG(st.fallback == 1 && p.cap < n - p.sample, "overflow: no fallback (cap %lld)", (long long)p.cap);
        }
        qac_gpu_flat_free(g);
    }
    { // the read floor's kernel reads every byte
        data d = make(1000, 16, 1, 1.0);
        qac_gpu_flat *g = upload(d);
        double secs = 0, bytes = 0;
        if (g) CHECK_OK(qac_gpu_flat_read_floor(g, 1, &secs, &bytes));
        CHECK(bytes == 1000.0 * 16 * 2);
        qac_gpu_flat_free(g);
    }
    return qac_test_summary();
}
