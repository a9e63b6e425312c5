/* Data-parallel CUDA training through NCCL against one GPU: W ranks (one
 * thread per GPU, at most 4; a single GPU runs one rank, which still goes
 * through NCCL's collectives) each take their slice of a global batch; the
 * loss over the gathered representations and the summed gradient must equal
 * the single-GPU step on the whole batch (fp32: 1e-5 per tensor, max |diff|
 * / max |ref|; the key bias left out, its gradient being rounding noise).
 * Skipped without NCCL in the build or without a GPU. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_testutil.h"
#include "qac_train.h"
#include "testutil.h"

enum { V = 120, HID = 64, LAYERS = 2, HEADS = 2, INTER = 128, POS = 32, NQ_L = 2, NP = 3, QT = 7, PT = 13 };

static const qac_bert_config CFG = {.vocab_size = V, .hidden_size = HID, .num_layers = LAYERS, .num_heads = HEADS, .intermediate_size = INTER, .max_position = POS, .type_vocab_size = 2, .pad_token_id = 0, .layer_norm_eps = 1e-12f, .hidden_dropout = 0.1f, .attn_dropout = 0.1f};
static float *params;
static int32_t *q_ids, *p_ids;
static int *q_lens, *p_lens;
static unsigned char dist_id[128];

typedef struct rank_job {
    int rank, world;
    double loss;
    float *grads;
    qac_status st;
    char err[512];
} rank_job;

static qac_train_opts opts(int world, int rank) {
    qac_train_opts o;
    qac_train_opts_default(&o);
    o.total_steps = 10;
    o.device = QAC_DEVICE_CUDA;
    o.gpu_precision = QAC_PREC_FP32;
    o.seed = 3;
    if (world > 0) {
        o.dist_world = world;
        o.dist_rank = rank;
        memcpy(o.dist_id, dist_id, sizeof dist_id);
    }
    return o;
}

static qac_status run_rank(rank_job *j, const qac_train_batch *b, int world) {
    qac_status st = qac_train_use_gpu(world > 0 ? j->rank : 0);
    if (st) return st;
    qac_model *m = NULL;
    if ((st = qac_model_create(&m, &CFG, NULL))) return st;
    memcpy(m->param_mem, params, m->n_params * sizeof(float));
    qac_train_opts o = opts(world, j->rank);
    qac_trainer *t = NULL;
    if (!(st = qac_trainer_create(&t, m, &o)) && !(st = qac_trainer_grads(t, b, &j->loss))) {
        const float *g = qac_trainer_grad_mem(t);
        if (g) memcpy(j->grads, g, m->n_params * sizeof(float));
        else st = QAC_ERR_CUDA;
    }
    qac_trainer_free(t);
    qac_model_free(m);
    return st;
}

static void *rank_main(void *arg) {
    rank_job *j = arg;
    const int np_l = NQ_L * NP;
    qac_train_batch b = {NQ_L, NP, QT, PT, q_ids + (size_t)j->rank * NQ_L * QT, q_lens + j->rank * NQ_L,
                         p_ids + (size_t)j->rank * np_l * PT, p_lens + j->rank * np_l};
    j->st = run_rank(j, &b, j->world);
    if (j->st) snprintf(j->err, sizeof j->err, "%s", qac_last_error());
    return NULL;
}

static void fill(int32_t *ids, int *lens, int B, int T) {
    for (int b = 0; b < B; b++) {
        lens[b] = b % 3 == 0 ? T : gpu_test_int(2, T);
        for (int t = 0; t < T; t++) ids[(size_t)b * T + t] = t == 0 ? 2 : t < lens[b] ? gpu_test_int(5, V - 1) : 0;
    }
}

int main(void) {
    if (qac_train_dist_id(dist_id) != QAC_OK) qac_test_skip("built without NCCL (-DQAC_NCCL=ON)");
    int gpus = qac_train_gpu_count();
    if (gpus < 1 || !qac_cuda_available()) qac_test_skip("no usable CUDA GPU");
    gpu_test_seed();
    const int W = gpus > 4 ? 4 : gpus, nq = W * NQ_L, np = nq * NP;
    printf("%d GPU(s): %d rank(s)\n", gpus, W);
    qac_model *m0 = NULL;
    CHECK_OK(qac_model_create(&m0, &CFG, NULL));
    if (!m0) return 1;
    const size_t n = m0->n_params;
    params = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) params[i] = gpu_test_uniform(-0.06f, 0.06f);
    size_t off = 0;
    for (int i = 0; i < QAC_BERT_NUM_TENSORS; i++) { /* LayerNorm weights near 1 */
        const size_t k = qac_bert_tensor_size(&CFG, i);
        const char *nm = qac_bert_tensor_name(i);
        if (!strcmp(nm, "emb_ln_w") || !strcmp(nm, "ln1_w") || !strcmp(nm, "ln2_w"))
            for (size_t j = 0; j < k; j++) params[off + j] = 1.0f + params[off + j];
        off += k;
    }
    q_ids = malloc(sizeof(int32_t) * nq * QT), q_lens = malloc(sizeof(int) * nq);
    p_ids = malloc(sizeof(int32_t) * np * PT), p_lens = malloc(sizeof(int) * np);
    fill(q_ids, q_lens, nq, QT);
    fill(p_ids, p_lens, np, PT);

    /* the reference: one GPU, the whole batch */
    rank_job ref = {0, 0, 0, malloc(n * sizeof(float)), QAC_OK, ""};
    qac_train_batch whole = {nq, NP, QT, PT, q_ids, q_lens, p_ids, p_lens};
    ref.st = run_rank(&ref, &whole, 0);
    CHECK_MSG(ref.st == QAC_OK, "single-GPU step: %s", qac_last_error());

    rank_job jobs[4];
    pthread_t th[4];
    for (int r = 0; r < W; r++) {
        jobs[r] = (rank_job){r, W, 0, malloc(n * sizeof(float)), QAC_OK, ""};
        if (pthread_create(&th[r], NULL, rank_main, &jobs[r])) return 1;
    }
    for (int r = 0; r < W; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < W; r++) {
        CHECK_MSG(jobs[r].st == QAC_OK, "rank %d: %s", r, jobs[r].err);
        if (jobs[r].st || ref.st) continue;
        const double lrel = fabs(jobs[r].loss - ref.loss) / fabs(ref.loss);
        printf("rank %d loss %.9g single GPU %.9g rel %.3g (tol 1e-6)\n", r, jobs[r].loss, ref.loss, lrel);
        CHECK_MSG(lrel <= 1e-6, "rank %d loss %g vs %g", r, jobs[r].loss, ref.loss);
        size_t o = 0;
        for (int i = 0; i < QAC_BERT_NUM_TENSORS - 2; i++) {
            const size_t k = qac_bert_tensor_size(&CFG, i);
            const char *nm = qac_bert_tensor_name(i);
            double md = 0, mr = 0;
            for (size_t j = 0; j < k; j++) {
                if (!strcmp(nm, "qkv_b") && (j % (3 * HID)) / HID == 1) continue;
                const double d = fabs((double)jobs[r].grads[o + j] - ref.grads[o + j]);
                md = d > md || isnan(d) ? d : md;
                mr = fabs(ref.grads[o + j]) > mr ? fabs(ref.grads[o + j]) : mr;
            }
            const double rel = mr > 0 ? md / mr : md;
            printf("  rank %d %-12s max|d|/max|ref| %.3g (tol 1e-5)\n", r, nm, rel);
            CHECK_MSG(rel <= 1e-5, "rank %d: gradient of %s off by %g", r, nm, rel);
            o += k;
        }
    }
    for (int r = 0; r < W; r++) free(jobs[r].grads);
    free(ref.grads), free(params), free(q_ids), free(p_ids), free(q_lens), free(p_lens);
    qac_model_free(m0);
    return qac_test_summary();
}
