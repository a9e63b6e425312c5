/* The GPU flat search's tuning (defaults, checks, "name=value" lists) and
 * the CPU twin of its selection (qac_topk_twin.h). Built with or without
 * CUDA. */
#include <float.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qac_gpu_defaults.h"
#include "qac_topk.h"
#include "qac_topk_twin.h"

/* ---------------- tuning ---------------- */

void qac_gpu_flat_tuning_default(qac_gpu_flat_tuning *t) {
    t->path = QAC_GPU_FLAT_AUTO;
    t->fused_max_nq = 16;
    t->fused_threads = 256;
    t->fused_blocks = 2;
    t->fused_unroll = 8;
    t->oversample = 64;
    t->select_threads = 512;
    t->radix_bits = 11;
    t->tile_rows = 0;
    t->compact_factor = 2;
    t->filter_threads = 256;
    /* the values the GPU sweep chose over these (qac_gpu_defaults.h); one
     * that does not parse leaves the built-in ones */
    if (QAC_GPU_FLAT_TUNING_DEFAULT[0]) {
        qac_gpu_flat_tuning m = *t;
        if (qac_gpu_flat_tuning_parse(&m, QAC_GPU_FLAT_TUNING_DEFAULT) == QAC_OK)
            *t = m;
        else
            qac_clear_error();
    }
}

typedef struct field {
    const char *name;
    size_t off;
    int lo, hi, mult; /* bounds, and a multiple it must be of (0: any) */
} field;

#define F(name, lo, hi, mult) {#name, offsetof(qac_gpu_flat_tuning, name), lo, hi, mult}
static const field fields[] = {
    F(path, 0, 2, 0),
    F(fused_max_nq, 0, QAC_GPU_FLAT_FUSED_MAXQ, 0),
    F(fused_threads, 64, 1024, 32),
    F(fused_blocks, 1, 32, 0),
    F(fused_unroll, 4, 8, 4),
    F(oversample, 2, 65536, 0),
    F(select_threads, 128, 1024, 32),
    F(radix_bits, 4, 12, 0),
    F(tile_rows, 0, 16 << 20, 1024),
    F(compact_factor, 1, 64, 0),
    F(filter_threads, 64, 1024, 32),
};
#undef F
#define N_FIELDS (int)(sizeof fields / sizeof fields[0])

static int *field_ptr(qac_gpu_flat_tuning *t, const field *f) { return (int *)((char *)t + f->off); }

qac_status qac_gpu_flat_tuning_check(const qac_gpu_flat_tuning *t) {
    for (int i = 0; i < N_FIELDS; i++) {
        const field *f = &fields[i];
        int v = *field_ptr((qac_gpu_flat_tuning *)t, f);
        if (v < f->lo || v > f->hi || (f->mult && v % f->mult))
            return qac_set_error(QAC_ERR_INVALID, "GPU flat search tuning: %s %d out of range [%d, %d]%s", f->name, v,
                                 f->lo, f->hi, f->mult ? " or not a multiple of the step" : "");
    }
    return QAC_OK;
}

qac_status qac_gpu_flat_tuning_parse(qac_gpu_flat_tuning *t, const char *spec) {
    if (!spec || !*spec) return QAC_OK;
    qac_gpu_flat_tuning n = *t;
    const char *p = spec;
    while (*p) {
        const char *eq = strchr(p, '='), *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        if (!eq || eq > end)
            return qac_set_error(QAC_ERR_INVALID, "GPU flat search tuning: expected name=value in \"%.*s\"",
                                 (int)(end - p), p);
        const field *f = NULL;
        for (int i = 0; i < N_FIELDS; i++)
            if (strlen(fields[i].name) == (size_t)(eq - p) && !strncmp(fields[i].name, p, (size_t)(eq - p))) f = &fields[i];
        if (!f) return qac_set_error(QAC_ERR_INVALID, "GPU flat search tuning: unknown name \"%.*s\"", (int)(eq - p), p);
        const char *v = eq + 1;
        size_t vl = (size_t)(end - v);
        int value;
        if (f->off == offsetof(qac_gpu_flat_tuning, path) && vl && (v[0] < '0' || v[0] > '9')) {
            if (vl == 4 && !strncmp(v, "auto", 4)) value = QAC_GPU_FLAT_AUTO;
            else if (vl == 5 && !strncmp(v, "fused", 5)) value = QAC_GPU_FLAT_FUSED;
            else if (vl == 5 && !strncmp(v, "tiled", 5)) value = QAC_GPU_FLAT_TILED;
            else return qac_set_error(QAC_ERR_INVALID, "GPU flat search tuning: path \"%.*s\" (auto, fused or tiled)", (int)vl, v);
        } else {
            char buf[32], *rest;
            if (vl == 0 || vl >= sizeof buf)
                return qac_set_error(QAC_ERR_INVALID, "GPU flat search tuning: bad value for %s", f->name);
            memcpy(buf, v, vl);
            buf[vl] = 0;
            long x = strtol(buf, &rest, 10);
            if (*rest || x < -1000000000L || x > 1000000000L)
                return qac_set_error(QAC_ERR_INVALID, "GPU flat search tuning: %s=%s is not an integer", f->name, buf);
            value = (int)x;
        }
        *field_ptr(&n, f) = value;
        p = *end ? end + 1 : end;
    }
    qac_status st = qac_gpu_flat_tuning_check(&n);
    if (st == QAC_OK) *t = n;
    return st;
}

void qac_gpu_flat_tuning_format(const qac_gpu_flat_tuning *t, char *buf, size_t cap) {
    size_t used = 0;
    if (cap) buf[0] = 0;
    for (int i = 0; i < N_FIELDS && used < cap; i++) {
        int n = snprintf(buf + used, cap - used, "%s%s=%d", i ? "," : "", fields[i].name,
                         *field_ptr((qac_gpu_flat_tuning *)t, &fields[i]));
        if (n < 0) break;
        used += (size_t)n;
    }
}

/* ---------------- the radix selection ---------------- */

int64_t qac_topk_select(const uint64_t *keys, int64_t n, int64_t k, int radix_bits, uint64_t *out, uint64_t *kth,
                        int *passes) {
    *passes = 0;
    *kth = 0;
    if (k <= 0 || n <= 0) return 0;
    if (k >= n) {
        uint64_t lo = ~(uint64_t)0;
        for (int64_t i = 0; i < n; i++) {
            out[i] = keys[i];
            if (keys[i] < lo) lo = keys[i];
        }
        *kth = lo;
        return n;
    }
    uint64_t all_and = ~(uint64_t)0, all_or = 0;
    for (int64_t i = 0; i < n; i++) all_and &= keys[i], all_or |= keys[i];
    qac_topk_radix r;
    qac_topk_radix_start(&r, all_and, all_or, k);
    uint32_t hist[1 << 12];
    while (!r.done) {
        const int bits = qac_topk_radix_bits(&r, radix_bits), nb = 1 << bits, shift = r.shift - bits;
        memset(hist, 0, sizeof(uint32_t) * (size_t)nb);
        for (int64_t i = 0; i < n; i++)
            if ((keys[i] & r.mask) == r.prefix) hist[(keys[i] >> shift) & (uint64_t)(nb - 1)]++;
        int64_t above;
        const int d = qac_topk_pick_digit(hist, nb, r.remaining, &above);
        qac_topk_radix_step(&r, bits, d, above, hist[d]);
        (*passes)++;
    }
    int64_t m = 0, eq = 0;
    uint64_t lo = ~(uint64_t)0;
    for (int64_t i = 0; i < n; i++) {
        const uint64_t v = keys[i] & r.mask;
        if (v > r.prefix || (v == r.prefix && eq++ < r.remaining)) {
            out[m++] = keys[i];
            if (keys[i] < lo) lo = keys[i];
        }
    }
    *kth = lo;
    return m;
}

/* ---------------- the search ---------------- */

static int cmp_key_desc(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

typedef struct twin {
    const float *scores;
    int64_t n;
    const uint32_t *rank;
    int64_t *row_of; /* rank -> row, with a custom rank */
    const qac_gpu_flat_tuning *t;
    uint64_t *a, *b; /* scratch: candidates and the selection */
} twin;

static inline uint64_t key_of(const twin *w, const float *s, int64_t row) {
    return qac_topk_key(s[row], w->rank ? w->rank[row] : qac_topk_default_rank(row));
}

static inline int64_t row_of_key(const twin *w, uint64_t key) {
    const uint32_t r = (uint32_t)key;
    return w->rank ? w->row_of[r] : (int64_t)(0xffffffffu - r);
}

/* The k best of list[0, m) sorted into the outputs (k slots). */
static void finish(const twin *w, const qac_topk_plan *p, uint64_t *list, int64_t m, int k, float *os, int64_t *orow) {
    uint64_t kth;
    int passes;
    if (m > p->keff) m = qac_topk_select(list, m, p->keff, w->t->radix_bits, w->b, &kth, &passes);
    else memcpy(w->b, list, sizeof(uint64_t) * (size_t)m);
    qsort(w->b, (size_t)m, sizeof(uint64_t), cmp_key_desc);
    for (int i = 0; i < k; i++) {
        if (i < m) {
            os[i] = qac_topk_key_score((uint32_t)(w->b[i] >> 32));
            orow[i] = row_of_key(w, w->b[i]);
        } else {
            os[i] = -FLT_MAX;
            orow[i] = -1;
        }
    }
}

/* One query on the fused path; 0 when the candidates overflow or fall
 * short (the GPU then reruns the pass tiled). */
static int fused_query(const twin *w, const qac_topk_plan *p, const float *s, int k, float *os, int64_t *orow,
                       int64_t *ncand) {
    uint64_t t0 = 0;
    int passes;
    if (p->sample > p->keff) {
        for (int64_t j = 0; j < p->sample; j++) w->a[j] = key_of(w, s, qac_topk_sample_row(j, p->n, p->sample));
        qac_topk_select(w->a, p->sample, p->keff, w->t->radix_bits, w->b, &t0, &passes);
    }
    int64_t m = 0;
    for (int64_t r = 0; r < p->n; r++) {
        const uint64_t key = key_of(w, s, r);
        if (key >= t0) {
            if (m < p->cap) w->a[m] = key;
            m++;
        }
    }
    *ncand = m;
    if (m > p->cap || m < p->keff) return 0;
    finish(w, p, w->a, m, k, os, orow);
    return 1;
}

static void tiled_query(const twin *w, const qac_topk_plan *p, const float *s, int k, float *os, int64_t *orow,
                        int *compactions) {
    uint64_t thr = 0;
    int64_t m = 0;
    for (int64_t r0 = 0; r0 < p->n; r0 += p->tile) {
        const int64_t r1 = r0 + p->tile < p->n ? r0 + p->tile : p->n;
        for (int64_t r = r0; r < r1; r++) {
            const uint64_t key = key_of(w, s, r);
            if (key > thr) w->a[m++] = key;
        }
        if (m > p->compact_at) {
            int passes;
            m = qac_topk_select(w->a, m, p->keff, w->t->radix_bits, w->b, &thr, &passes);
            memcpy(w->a, w->b, sizeof(uint64_t) * (size_t)m);
            (*compactions)++;
        }
    }
    finish(w, p, w->a, m, k, os, orow);
}

qac_status qac_topk_twin_search(const float *scores, int64_t n, int nq, int k, const uint32_t *rank, int dim,
                                const qac_gpu_flat_tuning *t, float *out_scores, int64_t *out_rows,
                                qac_topk_twin_info *info) {
    qac_topk_twin_info dummy;
    if (!info) info = &dummy;
    memset(info, 0, sizeof *info);
    if (k < 1 || k > QAC_GPU_FLAT_KMAX || nq < 0 || n < 0 || n > INT32_MAX)
        return qac_set_error(QAC_ERR_INVALID, "top-k twin: bad arguments (k %d, nq %d, n %lld)", k, nq, (long long)n);
    qac_status st = qac_gpu_flat_tuning_check(t);
    if (st) return st;
    twin w = {scores, n, rank, NULL, t, NULL, NULL};
    /* scratch: the largest of a sample, a candidate list, a tiled list */
    int64_t room = n + (int64_t)k * t->compact_factor + 1;
    w.a = malloc(sizeof(uint64_t) * (size_t)room);
    w.b = malloc(sizeof(uint64_t) * (size_t)room);
    if (rank) w.row_of = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    if (!w.a || !w.b || (rank && !w.row_of)) {
        free(w.a), free(w.b), free(w.row_of);
        return qac_set_error(QAC_ERR_NOMEM, "top-k twin: out of memory for %lld rows", (long long)n);
    }
    if (rank)
        for (int64_t r = 0; r < n; r++) w.row_of[rank[r]] = r;
    const int path = qac_topk_pick_path(t, nq, dim);
    for (int q0 = 0; q0 < nq;) {
        int m = nq - q0, per = qac_topk_pass_queries(path);
        if (m > per) m = per;
        qac_topk_plan p;
        qac_topk_plan_make(&p, n, m, k, t);
        int ok = path == QAC_GPU_FLAT_FUSED;
        if (ok) {
            info->sample = p.sample;
            info->cap = p.cap;
            for (int i = 0; i < m && ok; i++) {
                int64_t c = 0;
                ok = fused_query(&w, &p, scores + (size_t)(q0 + i) * (size_t)n, k, out_scores + (size_t)(q0 + i) * k,
                                 out_rows + (size_t)(q0 + i) * k, &c);
                info->candidates[i] = c;
                if (c > info->candidates_max) info->candidates_max = c;
            }
            if (!ok) info->fallback++;
            info->path = QAC_GPU_FLAT_FUSED;
        }
        if (!ok) {
            info->tiles = (int)((n + p.tile - 1) / p.tile);
            for (int i = 0; i < m; i++)
                tiled_query(&w, &p, scores + (size_t)(q0 + i) * (size_t)n, k, out_scores + (size_t)(q0 + i) * k,
                            out_rows + (size_t)(q0 + i) * k, &info->compactions);
            info->path = QAC_GPU_FLAT_TILED;
        }
        q0 += m;
    }
    free(w.a), free(w.b), free(w.row_of);
    return QAC_OK;
}
