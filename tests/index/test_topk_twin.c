/* The GPU flat search's selection, as its CPU twin runs it
 * (kernels/qac_topk.h, topk_twin.c), against a plain sort: the radix
 * selection alone over keys with and without duplicates at every digit
 * width; the whole search (sample threshold, candidate room, fallback,
 * tiles and compactions, passes of queries) over scores with many exact
 * ties, for k 1, 10, 1000 and 2048, batches 1, 16, 17 and 300, the default
 * and a custom tie order. Everything must be identical: the same rows in
 * the same order, the same scores. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qac_topk.h"
#include "qac_topk_twin.h"
#include "testutil.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int cmp_u64_desc(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* ---- the selection ---- */

static void check_select(const char *what, uint64_t *keys, int64_t n, int64_t k, int rb) {
    uint64_t *out = malloc(sizeof(uint64_t) * (size_t)(n + 1)), *ref = malloc(sizeof(uint64_t) * (size_t)(n + 1));
    uint64_t kth;
    int passes;
    int64_t m = qac_topk_select(keys, n, k, rb, out, &kth, &passes);
    memcpy(ref, keys, sizeof(uint64_t) * (size_t)n);
    qsort(ref, (size_t)n, sizeof(uint64_t), cmp_u64_desc);
    int64_t want = k < n ? k : n;
    qsort(out, (size_t)m, sizeof(uint64_t), cmp_u64_desc);
    int same = m == want && (m == 0 || kth == ref[want - 1]);
    for (int64_t i = 0; same && i < m; i++) same = out[i] == ref[i];
    CHECK_MSG(same, "select %s: n %lld k %lld radix %d: %lld selected, want %lld (or different keys)", what,
              (long long)n, (long long)k, rb, (long long)m, (long long)want);
    free(out), free(ref);
}

static void test_select(void) {
    static const int rbs[] = {4, 8, 11, 12};
    static const int64_t ns[] = {1, 2, 7, 1000, 4097, 50000};
    for (int ri = 0; ri < 4; ri++)
        for (int ni = 0; ni < 6; ni++) {
            int64_t n = ns[ni];
            uint64_t *keys = malloc(sizeof(uint64_t) * (size_t)n);
            const int64_t ks[] = {1, 2, n / 3 + 1, n - 1, n, n + 5, 2048};
            for (int kind = 0; kind < 5; kind++) {
                for (int64_t i = 0; i < n; i++) {
                    uint64_t r = next();
                    switch (kind) {
                    case 0: keys[i] = r; break;                                /* distinct, spread */
                    case 1: keys[i] = (r % 5) << 32 | (uint32_t)i; break;      /* few scores, ranks break ties */
                    case 2: keys[i] = 0x8000000000000000ull | (r & 0xff); break; /* only the low bits differ */
                    case 3: keys[i] = r % 3; break;                           /* true duplicates */
                    default: keys[i] = 42; break;                             /* all equal */
                    }
                }
                for (int ki = 0; ki < 7; ki++)
                    if (ks[ki] >= 1) check_select(kind == 0 ? "random" : kind == 1 ? "ties" : kind == 2 ? "low bits" : kind == 3 ? "duplicates" : "equal",
                                                  keys, n, ks[ki], rbs[ri]);
            }
            free(keys);
        }
}

/* ---- keys ---- */

static void test_keys(void) {
    const float v[] = {-INFINITY, -FLT_MAX, -1.5f, -1.0f, -1e-30f, -1e-45f, -0.0f, 0.0f, 1e-45f, 1e-38f, 0.5f,
                       1.0f, 3.0f, FLT_MAX, INFINITY};
    const int n = (int)(sizeof v / sizeof v[0]);
    int bad = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            uint32_t a = qac_topk_score_key(v[i]), b = qac_topk_score_key(v[j]);
            if ((v[i] < v[j]) != (a < b) || (v[i] == v[j]) != (a == b)) bad++;
        }
    CHECK_MSG(bad == 0, "score keys do not order as the floats (%d pairs)", bad);
    for (int i = 0; i < n; i++) CHECK(qac_topk_key_score(qac_topk_score_key(v[i])) == v[i]);
    CHECK(qac_topk_score_key(NAN) < qac_topk_score_key(-INFINITY));
    /* random floats */
    bad = 0;
    for (int i = 0; i < 100000; i++) {
        uint32_t ua = (uint32_t)next(), ub = (uint32_t)next();
        float a, b;
        memcpy(&a, &ua, 4), memcpy(&b, &ub, 4);
        if (isnan(a) || isnan(b)) continue;
        if ((a < b) != (qac_topk_score_key(a) < qac_topk_score_key(b))) bad++;
        if (qac_topk_key_score(qac_topk_score_key(a)) != a) bad++;
    }
    CHECK_MSG(bad == 0, "random floats: %d keys out of order or not round-tripping", bad);
}

/* ---- the search ---- */

typedef struct ref_ctx {
    const float *s;
    const uint32_t *rank;
} ref_ctx;
static ref_ctx RC;

static uint32_t rank_of(int64_t r) { return RC.rank ? RC.rank[r] : qac_topk_default_rank(r); }

/* score descending (as floats: -0 equals +0), then tie rank descending */
static int cmp_rows(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    if (RC.s[x] != RC.s[y]) return RC.s[x] > RC.s[y] ? -1 : 1;
    return rank_of(x) > rank_of(y) ? -1 : 1;
}

static int check_search(const char *what, const float *scores, int64_t n, int nq, int k, const uint32_t *rank,
                        const qac_gpu_flat_tuning *t, qac_topk_twin_info *info) {
    float *os = malloc(sizeof(float) * (size_t)nq * k);
    int64_t *orow = malloc(sizeof(int64_t) * (size_t)nq * k), *idx = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    CHECK_OK(qac_topk_twin_search(scores, n, nq, k, rank, 768, t, os, orow, info));
    int bad = 0;
    for (int q = 0; q < nq; q++) {
        RC.s = scores + (size_t)q * n;
        RC.rank = rank;
        for (int64_t r = 0; r < n; r++) idx[r] = r;
        qsort(idx, (size_t)n, sizeof(int64_t), cmp_rows);
        for (int i = 0; i < k; i++) {
            const float want_s = i < n ? RC.s[idx[i]] : -FLT_MAX;
            const int64_t want_r = i < n ? idx[i] : -1;
            if (orow[(size_t)q * k + i] != want_r || os[(size_t)q * k + i] != want_s) {
                if (bad < 3)
                    fprintf(stderr, "%s: query %d rank %d: row %lld score %.9g, want row %lld score %.9g\n", what, q, i,
                            (long long)orow[(size_t)q * k + i], os[(size_t)q * k + i], (long long)want_r, want_s);
                bad++;
                break;
            }
        }
    }
    printf("%-34s n %7lld nq %3d k %4d: %s (path %s, fallback %d, sample %lld, candidates <= %lld, compactions %d)\n",
           what, (long long)n, nq, k, bad ? "DIFFERS" : "identical",
           info->path == QAC_GPU_FLAT_FUSED ? "fused" : "tiled", info->fallback, (long long)info->sample,
           (long long)info->candidates_max, info->compactions);
    CHECK_MSG(bad == 0, "%s: %d queries differ from the sort", what, bad);
    free(os), free(orow), free(idx);
    return bad;
}

/* Scores from a few values (many exact ties), some -0 and +0. */
static float *tie_scores(int64_t n, int nq, int levels) {
    float *s = malloc(sizeof(float) * (size_t)n * (size_t)(nq ? nq : 1));
    for (size_t i = 0; i < (size_t)n * nq; i++) {
        int v = (int)(next() % (uint64_t)levels) - levels / 2;
        s[i] = v == 0 ? ((next() & 1) ? -0.0f : 0.0f) : (float)v * 0.125f;
    }
    return s;
}

static float *random_scores(int64_t n, int nq) {
    float *s = malloc(sizeof(float) * (size_t)n * (size_t)(nq ? nq : 1));
    for (size_t i = 0; i < (size_t)n * nq; i++) s[i] = (float)((double)(next() >> 11) / 9007199254740992.0 * 2 - 1);
    return s;
}

static uint32_t *shuffled_ranks(int64_t n) {
    uint32_t *r = malloc(sizeof(uint32_t) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) r[i] = (uint32_t)i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(next() % (uint64_t)(i + 1));
        uint32_t t = r[i];
        r[i] = r[j], r[j] = t;
    }
    return r;
}

static void test_search(void) {
    qac_gpu_flat_tuning fused, tiled, autot;
    qac_gpu_flat_tuning_default(&autot);
    fused = tiled = autot;
    fused.path = QAC_GPU_FLAT_FUSED;
    tiled.path = QAC_GPU_FLAT_TILED;
    tiled.tile_rows = 4096; /* many tiles, many compactions */
    tiled.compact_factor = 1;
    qac_topk_twin_info info;
    static const int ks[] = {1, 10, 1000, 2048};
    { /* fused and tiled over 60000 rows of tied scores, batch 1 and 16 */
        const int64_t n = 60000;
        float *s = tie_scores(n, 16, 41);
        uint32_t *rank = shuffled_ranks(n);
        for (int ki = 0; ki < 4; ki++)
            for (int ri = 0; ri < 2; ri++) {
                const uint32_t *rk = ri ? rank : NULL;
                check_search(ri ? "fused ties, custom order" : "fused ties", s, n, 1, ks[ki], rk, &fused, &info);
                CHECK(info.path == QAC_GPU_FLAT_FUSED && info.fallback == 0);
                check_search(ri ? "fused ties b16, custom order" : "fused ties b16", s, n, 16, ks[ki], rk, &fused, &info);
                CHECK(info.path == QAC_GPU_FLAT_FUSED && info.fallback == 0);
                check_search(ri ? "tiled ties b16, custom order" : "tiled ties b16", s, n, 16, ks[ki], rk, &tiled, &info);
                CHECK(info.path == QAC_GPU_FLAT_TILED && (ks[ki] * 1 >= n || info.compactions > 0));
            }
        free(s), free(rank);
    }
    { /* large k with a sample smaller than the corpus: oversample 8 */
        const int64_t n = 100000;
        float *s = tie_scores(n, 4, 301);
        uint32_t *rank = shuffled_ranks(n);
        qac_gpu_flat_tuning f8 = fused;
        f8.oversample = 8;
        for (int ki = 2; ki < 4; ki++) {
            check_search("fused ties, oversample 8", s, n, 4, ks[ki], rank, &f8, &info);
            CHECK(info.path == QAC_GPU_FLAT_FUSED && info.fallback == 0 && info.sample < n && info.candidates_max > ks[ki]);
        }
        free(s), free(rank);
    }
    { /* the candidate count is the rows at or above the sample's k-th key */
        const int64_t n = 200000;
        const int k = 100;
        float *s = random_scores(n, 1);
        check_search("fused random", s, n, 1, k, NULL, &fused, &info);
        qac_topk_plan p;
        qac_topk_plan_make(&p, n, 1, k, &fused);
        uint64_t *sample = malloc(sizeof(uint64_t) * (size_t)p.sample);
        for (int64_t j = 0; j < p.sample; j++) {
            int64_t r = qac_topk_sample_row(j, n, p.sample);
            sample[j] = qac_topk_key(s[r], qac_topk_default_rank(r));
        }
        qsort(sample, (size_t)p.sample, sizeof(uint64_t), cmp_u64_desc);
        int64_t want = 0;
        for (int64_t r = 0; r < n; r++) want += qac_topk_key(s[r], qac_topk_default_rank(r)) >= sample[k - 1];
        CHECK_MSG(info.candidates[0] == want, "fused random: %lld candidates, %lld rows at or above the sample's k-th",
                  (long long)info.candidates[0], (long long)want);
        CHECK(info.sample == (int64_t)k * fused.oversample);
        free(sample), free(s);
    }
    { /* adversarial: the sampled rows score lowest, so nearly every row passes the threshold: the
       * candidates overflow their room and the pass is rerun tiled */
        const int64_t n = 200000;
        const int k = 10;
        qac_topk_plan p;
        qac_topk_plan_make(&p, n, 1, k, &fused);
        float *s = malloc(sizeof(float) * n);
        for (int64_t r = 0; r < n; r++) s[r] = 1.0f;
        for (int64_t j = 0; j < p.sample; j++) s[qac_topk_sample_row(j, n, p.sample)] = -1.0f;
        check_search("fused overflow", s, n, 1, k, NULL, &fused, &info);
        CHECK_MSG(info.fallback == 1 && info.path == QAC_GPU_FLAT_TILED, "the overflow did not fall back (fallback %d)",
                  info.fallback);
        free(s);
    }
    { /* ascending scores: every tile replaces the list */
        const int64_t n = 50000;
        float *s = malloc(sizeof(float) * n * 2);
        for (int64_t r = 0; r < n; r++) s[r] = (float)r, s[n + r] = (float)(r / 7);
        for (int ki = 0; ki < 4; ki++) {
            check_search("tiled ascending", s, n, 2, ks[ki], NULL, &tiled, &info);
            check_search("fused ascending", s, n, 2, ks[ki], NULL, &fused, &info);
        }
        free(s);
    }
    { /* k past the corpus; tiny corpora */
        static const int64_t ns[] = {1, 5, 999, 1000, 1001, 2047, 2049};
        for (int ni = 0; ni < 7; ni++) {
            float *s = tie_scores(ns[ni], 3, 5);
            for (int ki = 0; ki < 4; ki++) {
                check_search("small fused", s, ns[ni], 3, ks[ki], NULL, &fused, &info);
                check_search("small tiled", s, ns[ni], 3, ks[ki], NULL, &tiled, &info);
            }
            free(s);
        }
    }
    { /* passes: 17 queries (auto: tiled), 300 (two tiled passes; forced fused: 19 passes) */
        const int64_t n = 5000;
        float *s = tie_scores(n, 300, 9);
        uint32_t *rank = shuffled_ranks(n);
        check_search("auto b17", s, n, 17, 10, rank, &autot, &info);
        CHECK(info.path == QAC_GPU_FLAT_TILED);
        check_search("auto b16", s, n, 16, 10, rank, &autot, &info);
        CHECK(info.path == QAC_GPU_FLAT_FUSED);
        check_search("auto b300", s, n, 300, 1000, rank, &autot, &info);
        check_search("fused b300", s, n, 300, 2048, rank, &fused, &info);
        free(s), free(rank);
    }
}

static void test_tuning(void) {
    qac_gpu_flat_tuning t, d;
    qac_gpu_flat_tuning_default(&t);
    d = t;
    CHECK_OK(qac_gpu_flat_tuning_check(&t));
    CHECK_OK(qac_gpu_flat_tuning_parse(&t, "oversample=128,radix_bits=8,path=tiled,tile_rows=32768"));
    CHECK(t.oversample == 128 && t.radix_bits == 8 && t.path == QAC_GPU_FLAT_TILED && t.tile_rows == 32768);
    char buf[512];
    qac_gpu_flat_tuning_format(&t, buf, sizeof buf);
    qac_gpu_flat_tuning u = d;
    CHECK_OK(qac_gpu_flat_tuning_parse(&u, buf));
    CHECK(memcmp(&u, &t, sizeof t) == 0);
    u = d;
    CHECK_ERR(qac_gpu_flat_tuning_parse(&u, "radix_bits=13"), QAC_ERR_INVALID, "radix_bits");
    CHECK_ERR(qac_gpu_flat_tuning_parse(&u, "fused_threads=100"), QAC_ERR_INVALID, "fused_threads");
    CHECK_ERR(qac_gpu_flat_tuning_parse(&u, "nonsense=1"), QAC_ERR_INVALID, "unknown");
    CHECK_ERR(qac_gpu_flat_tuning_parse(&u, "oversample"), QAC_ERR_INVALID, "name=value");
    CHECK_ERR(qac_gpu_flat_tuning_parse(&u, "path=fast"), QAC_ERR_INVALID, "path");
    CHECK_ERR(qac_gpu_flat_tuning_parse(&u, "oversample=12x"), QAC_ERR_INVALID, "integer");
    CHECK(memcmp(&u, &d, sizeof d) == 0); /* a refused spec changes nothing */
}

int main(void) {
    test_keys();
    test_select();
    test_tuning();
    test_search();
    return qac_test_summary();
}
