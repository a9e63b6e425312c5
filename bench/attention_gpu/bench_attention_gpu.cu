// The attention kernels alone on the GPU: every compiled tile variant of
// the fused (FlashAttention-2) kernels, forward and backward, against the
// unfused kernels they replace, at BERT-base (12 heads x 64) and MiniLM
// (12 x 32) shapes, 256 sequences of 128 tokens, plus a ragged batch
// (lengths 32..128, packed for the fused kernels, padded for the unfused).
// One line per variant:
//   RESULT attention <shape> <prec> <pass> <path> <variant> us <us/call> GBps <floor bytes / time> floor_frac <of peak>
// where the floor is the bytes the pass must move at least: forward, Q, K,
// V read and O written once; backward, Q, K, V, O, dO and the lse read and
// dQ, dK, dV written once. Variants are BQxBKxSTAGES (forward), and for the
// backward dkdv:KVBKxKVBQxS with the dQ kernel at its default, or
// dq:BQxBKxS with the dK/dV kernel at its default; an xM suffix names a
// variant compiled for M blocks per SM (QAC_FA_* take the same names).
// The forward also runs through cuDNN's fused attention as the CUDA encoder
// loads it (path cudnn, on the packed rows), after a NOTE with its largest
// difference from qac's kernel on the same batch, or why it cannot run.
//   bench_attention_gpu [peak_GBps] [reps]
// peak_GBps: the card's memory bandwidth for floor_frac (default 3350, an
// H100 SXM; the H200 copy measured 4265 read + write). Exit 77 without a GPU.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bert_kernels.cuh"
#include "cudnn_attention.cuh"
#include "flash_attention.cuh"
#include "train_kernels.cuh"

namespace {

double g_peak = 3350.0;
int g_reps = 20;

#define CK(call)                                                                                  \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

template <typename F> double time_us(F &&run, cudaStream_t s) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 3; i++) run(); // warm-up (and the shared-memory opt-in)
    CK(cudaStreamSynchronize(s));
    double best = 1e30;
    for (int round = 0; round < 5; round++) {
        CK(cudaEventRecord(a, s));
        for (int i = 0; i < g_reps; i++) run();
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        const double us = ms * 1000.0 / g_reps;
        best = us < best ? us : best;
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return best;
}

float half_bits_to_float(uint16_t h, qac_precision p) {
    if (p == QAC_PREC_BF16) {
        const uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    __half x;
    memcpy((void *)&x, &h, 2);
    return __half2float(x);
}

// "AxBxS" (one block per SM), "AxBxSxM" (M), after a prefix
void variant_name(char *v, size_t n, const char *prefix, const int (&t)[4]) {
    if (t[3] > 1)
        snprintf(v, n, "%s%dx%dx%dx%d", prefix, t[0], t[1], t[2], t[3]);
    else
        snprintf(v, n, "%s%dx%dx%d", prefix, t[0], t[1], t[2]);
}

void report(const char *shape, const char *prec, const char *pass, const char *path, const char *variant, double us,
            double floor_bytes) {
    const double gbps = floor_bytes / (us * 1e-6) / 1e9;
    printf("RESULT attention %s %s %s %s %s us %.1f GBps %.0f floor_frac %.3f\n", shape, prec, pass, path, variant,
           us, gbps, gbps / g_peak);
    fflush(stdout);
}

template <typename E> __global__ void fill_kernel(E *x, size_t n, uint32_t seed, float scale) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        x[i] = qac_from_float<E>(((h & 0xffffff) / 16777216.0f - 0.5f) * scale);
    }
}

// uniform in [-scale/2, scale/2)
void fill(void *x, size_t n, uint32_t seed, float scale, qac_precision prec) {
    if (prec == QAC_PREC_BF16)
        fill_kernel<<<1024, 256>>>((__nv_bfloat16 *)x, n, seed, scale);
    else
        fill_kernel<<<1024, 256>>>((__half *)x, n, seed, scale);
    CK(cudaGetLastError());
}

struct shape {
    const char *name;
    int B, T, NH, D;
    int ragged; // lengths 32..128 (fused: packed)
};

void run_shape(const shape &sh, qac_precision prec, cudaStream_t s, cublasHandle_t blas) {
    const int B = sh.B, T = sh.T, NH = sh.NH, D = sh.D, C = NH * D;
    const char *pn = prec == QAC_PREC_BF16 ? "bf16" : "fp16";
    // lengths, padded offsets and packed offsets
    int *lens = (int *)malloc(sizeof(int) * B), *offs = (int *)malloc(sizeof(int) * (B + 1));
    uint32_t r = 12345;
    offs[0] = 0;
    for (int b = 0; b < B; b++) {
        r = r * 1664525u + 1013904223u;
        lens[b] = sh.ragged ? 32 + (int)((r >> 8) % 97) : T;
        offs[b + 1] = offs[b] + lens[b];
    }
    const size_t Np = (size_t)B * T, Nr = (size_t)offs[B], es = 2;
    void *qkv, *out, *dout, *dqkv;
    float *qkv_b, *lse, *dvec;
    int *d_lens, *d_offs;
    CK(cudaMalloc(&qkv, Np * 3 * C * es));
    CK(cudaMalloc(&out, Np * C * es));
    CK(cudaMalloc(&dout, Np * C * es));
    CK(cudaMalloc(&dqkv, Np * 3 * C * es));
    CK(cudaMalloc((void **)&qkv_b, 3 * C * sizeof(float)));
    CK(cudaMalloc((void **)&lse, Np * NH * sizeof(float)));
    CK(cudaMalloc((void **)&dvec, Np * NH * sizeof(float)));
    CK(cudaMalloc((void **)&d_lens, B * sizeof(int)));
    CK(cudaMalloc((void **)&d_offs, (B + 1) * sizeof(int)));
    CK(cudaMemcpy(d_lens, lens, B * sizeof(int), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_offs, offs, (B + 1) * sizeof(int), cudaMemcpyHostToDevice));
    CK(cudaMemset(qkv_b, 0, 3 * C * sizeof(float)));
    fill(qkv, Np * 3 * C, 1, 2.0f, prec);
    fill(dout, Np * C, 2, 1.0f, prec);
    // the fused path reads real tokens only: packed when ragged
    const qac_fa_rows rows = sh.ragged ? qac_fa_rows{d_offs, NULL, B, T, (int)Nr} : qac_fa_rows{NULL, d_lens, B, T, (int)Np};
    const double Nf = (double)(sh.ragged ? Nr : Np);
    const double fwd_floor = 4.0 * Nf * C * es, bwd_floor = 8.0 * Nf * C * es + Nf * NH * 4.0;
    const qac_kt_drop none = {0.0f, 0, 0}, drop = {0.1f, 0x5eedull, 0};
    qac_fa_tiles t = qac_fa_tiles_default();
    char v[64];

    // forward, inference (no lse, no dropout): every variant
    int fv[32][4];
    const int nf = qac_fa_variants('f', fv, 32);
    for (int i = 0; i < nf; i++) {
        qac_fa_tiles x = t;
        x.bq = fv[i][0], x.bk = fv[i][1], x.stages = fv[i][2], x.minb = fv[i][3];
        variant_name(v, sizeof v, "", fv[i]);
        const double us = time_us([&] { CK(qac_fa_forward(out, NULL, qkv, qkv_b, rows, C, NH, 0, 0, none, 0, prec, &x, s)); }, s);
        report(sh.name, pn, "fwd", "fused", v, us, fwd_floor);
    }
    // cuDNN's fused attention, as the encoder would run it (packed rows; bias zero here)
    {
        qac_cudnn_att *cd = NULL;
        int *idx = NULL;
        void *out2 = NULL;
        qac_status st = qac_cudnn_att_create(&cd, s);
        if (st == QAC_OK) CK(cudaMalloc((void **)&idx, qac_cudnn_idx_ints(B) * sizeof(int)));
        if (st == QAC_OK) CK(cudaMalloc(&out2, Np * C * es));
        if (st == QAC_OK) st = qac_cudnn_att_run(cd, out2, qkv, d_offs, B, T, C, NH, prec, idx, s);
        if (st == QAC_OK) { // against qac's kernel on the same rows
            CK(qac_fa_forward(out, NULL, qkv, qkv_b, rows, C, NH, 0, 0, none, 0, prec, &t, s));
            CK(cudaStreamSynchronize(s));
            const size_t n = (size_t)Nr * C;
            uint16_t *a = (uint16_t *)malloc(n * 2), *b = (uint16_t *)malloc(n * 2);
            CK(cudaMemcpy(a, out, n * 2, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(b, out2, n * 2, cudaMemcpyDeviceToHost));
            double mx = 0, mo = 0;
            for (size_t i = 0; i < n; i++) {
                const float x = half_bits_to_float(a[i], prec), y = half_bits_to_float(b[i], prec);
                if (x != x || y != y)
                    mx = INFINITY;
                else if (fabs(x - y) > mx)
                    mx = fabs(x - y);
                mo = fabs(x) > mo ? fabs(x) : mo;
            }
            printf("NOTE attention %s %s cudnn against qac: max |d| %.3g of max |o| %.3g\n", sh.name, pn, mx, mo);
            free(a), free(b);
            const double us = time_us([&] {
                if (qac_cudnn_att_run(cd, out2, qkv, d_offs, B, T, C, NH, prec, idx, s) != QAC_OK) exit(1);
            }, s);
            report(sh.name, pn, "fwd", "cudnn", "-", us, fwd_floor);
        } else {
            printf("NOTE attention %s %s cudnn unavailable: %s\n", sh.name, pn, qac_last_error());
            qac_clear_error();
        }
        qac_cudnn_att_free(cd);
        cudaFree(idx), cudaFree(out2);
    }
    // the encoder's unfused kernel, padded
    {
        const double us = time_us([&] { CK(qac_k_attention(out, qkv, qkv_b, d_lens, B, T, C, NH, prec, s)); }, s);
        report(sh.name, pn, "fwd", "unfused-encoder", "-", us, fwd_floor);
    }
    if (prec == QAC_PREC_BF16) {
        // training: forward with lse and dropout at the default tiles, then the backward's variants
        double us = time_us([&] { CK(qac_fa_forward(out, lse, qkv, qkv_b, rows, C, NH, 0, 0, drop, 0, prec, &t, s)); }, s);
        const int tf[4] = {t.bq, t.bk, t.stages, qac_fa_minb(t.minb)};
        variant_name(v, sizeof v, "", tf);
        report(sh.name, pn, "fwd-train", "fused", v, us, fwd_floor);
        int kv[32][4], qv[32][4];
        const int nk = qac_fa_variants('k', kv, 32), nq = qac_fa_variants('q', qv, 32);
        for (int i = 0; i < nk; i++) {
            qac_fa_tiles x = t;
            x.kv_bk = kv[i][0], x.kv_bq = kv[i][1], x.kv_stages = kv[i][2], x.kv_minb = kv[i][3];
            variant_name(v, sizeof v, "dkdv:", kv[i]);
            us = time_us([&] {
                CK(qac_fa_backward(dqkv, dvec, dout, out, lse, qkv, qkv_b, rows, C, NH, 0, 0, drop, 0, prec, &x, s));
            }, s);
            report(sh.name, pn, "bwd", "fused", v, us, bwd_floor);
        }
        for (int i = 0; i < nq; i++) {
            qac_fa_tiles x = t;
            x.dq_bq = qv[i][0], x.dq_bk = qv[i][1], x.dq_stages = qv[i][2], x.dq_minb = qv[i][3];
            variant_name(v, sizeof v, "dq:", qv[i]);
            us = time_us([&] {
                CK(qac_fa_backward(dqkv, dvec, dout, out, lse, qkv, qkv_b, rows, C, NH, 0, 0, drop, 0, prec, &x, s));
            }, s);
            report(sh.name, pn, "bwd", "fused", v, us, bwd_floor);
        }
        // the trainer's unfused kernels (padded): split, scores, softmax + dropout, P V, merge; and back
        const size_t nP = (size_t)B * NH * T * T, NC = Np * C;
        void *q, *k, *vv, *P, *Pd, *O, *dS, *dO, *dq, *dk, *dv;
        float *S;
        CK(cudaMalloc(&q, NC * es));
        CK(cudaMalloc(&k, NC * es));
        CK(cudaMalloc(&vv, NC * es));
        CK(cudaMalloc(&O, NC * es));
        CK(cudaMalloc(&dO, NC * es));
        CK(cudaMalloc(&dq, NC * es));
        CK(cudaMalloc(&dk, NC * es));
        CK(cudaMalloc(&dv, NC * es));
        CK(cudaMalloc(&P, nP * es));
        CK(cudaMalloc(&Pd, nP * es));
        CK(cudaMalloc(&dS, nP * es));
        CK(cudaMalloc((void **)&S, nP * sizeof(float)));
        us = time_us([&] {
            if (qac_kt_attention_fwd(blas, out, q, k, vv, P, S, Pd, O, qkv, qkv_b, d_lens, drop, 0, B, T, C, NH, 0, 0,
                                     prec, s) != QAC_OK)
                exit(1);
        }, s);
        report(sh.name, pn, "fwd-train", "unfused-train", "-", us, fwd_floor);
        us = time_us([&] {
            if (qac_kt_attention_bwd(blas, dqkv, dout, q, k, vv, P, S, Pd, dS, dO, dq, dk, dv, d_lens, drop, 0, B, T, C,
                                     NH, prec, s) != QAC_OK)
                exit(1);
        }, s);
        report(sh.name, pn, "bwd", "unfused-train", "-", us, bwd_floor);
        cudaFree(q), cudaFree(k), cudaFree(vv), cudaFree(O), cudaFree(dO), cudaFree(dq), cudaFree(dk), cudaFree(dv);
        cudaFree(P), cudaFree(Pd), cudaFree(dS), cudaFree(S);
    }
    cudaFree(qkv), cudaFree(out), cudaFree(dout), cudaFree(dqkv), cudaFree(qkv_b), cudaFree(lse), cudaFree(dvec);
    cudaFree(d_lens), cudaFree(d_offs);
    free(lens), free(offs);
}

} // namespace

int main(int argc, char **argv) {
    if (argc > 1) g_peak = atof(argv[1]);
    if (argc > 2) g_reps = atoi(argv[2]);
    if (!qac_cuda_available()) {
        fprintf(stderr, "bench_attention_gpu: no usable CUDA GPU\n");
        return 77;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("# %s, %d SMs; floor bandwidth %.0f GB/s; best of 5 x %d calls\n", prop.name, prop.multiProcessorCount,
           g_peak, g_reps);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cublasHandle_t blas;
    if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(blas, s) != CUBLAS_STATUS_SUCCESS) return 1;
    const shape shapes[] = {
        {"bert-base-256x128", 256, 128, 12, 64, 0},
        {"minilm-256x128", 256, 128, 12, 32, 0},
        {"bert-base-ragged-256x32..128", 256, 128, 12, 64, 1},
    };
    for (const shape &sh : shapes) {
        run_shape(sh, QAC_PREC_BF16, s, blas);
        if (!sh.ragged) run_shape(sh, QAC_PREC_FP16, s, blas);
    }
    cublasDestroy(blas);
    cudaStreamDestroy(s);
    return 0;
}
