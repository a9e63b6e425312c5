/* The CUDA pre-trainer against the CPU pre-trainer (the reference) on a
 * small random BERT with dropout on, the same batch, masks and fresh heads,
 * for the objectives the GPU runs: coCondenser (encoder MLM, the Condenser
 * head and its MLM, the contrastive loss), CoT-MAE (encoder MLM, per side a
 * 1-layer decoder reading the embeddings of the other text with the
 * bottleneck at position 0, its MLM) and query generation (encoder MLM on
 * the passage, a 1-block GPT-2 decoder with the window-3 causal attention
 * generating the query from the passage's bottleneck, next-token loss),
 * and coCondenser with PAIR (alpha 0.1) in place of the contrastive loss:
 *   1. gradient parity of a whole step, per tensor of the flat block
 *      [encoder | head layers or decoder | MLM head], and the three losses: fp32 and
 *      bf16, raw [CLS] (coCondenser: tau 1) and mean pooling (coCondenser:
 *      + normalisation, tau 0.05);
 *   2. trajectories: 10 steps fp32 (loss within 1e-4 relative per step) and
 *      50 steps bf16 against CPU fp32 (within 2% per step);
 *   3. checkpoints across devices: a CUDA run saved and resumed on the CPU,
 *      and the reverse, continue as the uninterrupted run does (the training
 *      state file is the CPU's QACPTST).
 *   4. --recompute on the GPU: the same parity against the CPU, and the
 *      losses and every gradient bit-identical to the GPU keeping every
 *      activation (fp32 and bf16: the same kernels on the same inputs).
 *
 * Tolerances. fp32: max |diff| / max |ref| <= 1e-5 per tensor, the
 * summation-order bound of tests/gpu/test_gpu_train_step.c. bf16: unit
 * roundoff u = 2^-9; between a loss and a parameter gradient lie about 12
 * bf16 roundings per layer (inputs, product outputs, masked gradients) over
 * up to 2 encoder + 2 head layers, plus the MLM head's 6 (rows, GELU
 * output, LayerNorm output, logits' gradient, its LayerNorm gradient,
 * GELU's), about 60 in all: sqrt(60) u ~ 1.5e-2 of a tensor's norm, and a
 * factor of 4 for cancellation in the reductions (the vocabulary scatter,
 * the tied decoder's product over every masked row) gives 6e-2 per tensor
 * on ||diff|| / ||ref||. CoT-MAE's path has fewer: 2 encoder layers and 1
 * decoder layer (its input embeddings and their LayerNorm are fp32, rounded
 * once where the layer reads them, counted in the layer's 12), and the same
 * MLM head, so the same bound holds; so has query generation (2 encoder
 * layers, 1 GPT-2 block with the same dozen roundings: its two LayerNorm
 * outputs, the products and the attention's, the masked gradients); PAIR's
 * loss is fp64 as the contrastive one, so coCondenser's bound holds. The key
 * biases (encoder, head, decoder) are left out: their gradient is zero in
 * exact arithmetic (softmax is shift-invariant per row, causal or not).
 *
 * --selfcheck (no GPU needed; in the default suite): the CPU on both sides,
 * every comparison exact. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_tiny_model.h"
#include "pretrainer.h"
#include "testutil.h"

static const char *tmp;
static int selfcheck;
static float pair_alpha; /* > 0: coCondenser runs with PAIR at this alpha */

enum { V = GPU_TINY_V, HID = GPU_TINY_HID, MASK_ID = 4 };

static float *base_params;

static qac_model *make_model(void) {
    qac_model *m = gpu_tiny_model(tmp, base_params);
    if (!base_params) {
        base_params = gpu_tiny_params(m);
        memcpy(m->param_mem, base_params, m->n_params * sizeof(float));
    }
    qac_model_update_fingerprint(m);
    return m;
}

/* One side: [CLS] w.. padding, about 20% of the inner tokens masked. */
typedef struct side_mem {
    int32_t *ids, *labels;
    int *lens;
} side_mem;

typedef struct batch_mem {
    qac_pt_batch b;
    side_mem s[4]; /* a, b, and CoT-MAE's decoder targets da, db */
} batch_mem;

static qac_pt_seqs fill_side(side_mem *m, int B, int T) {
    m->ids = malloc(sizeof(int32_t) * B * T), m->labels = malloc(sizeof(int32_t) * B * T);
    m->lens = malloc(sizeof(int) * B);
    for (int b = 0; b < B; b++) {
        int len = m->lens[b] = b == 0 ? T : gpu_test_int(4, T);
        for (int t = 0; t < T; t++) {
            int32_t *id = &m->ids[(size_t)b * T + t], *lab = &m->labels[(size_t)b * T + t];
            *id = t == 0 ? 2 : t == len - 1 ? 3 : t < len ? gpu_test_int(5, V - 1) : 0;
            *lab = -100;
            if ((t > 0 && t < len - 1 && gpu_test_uniform(0, 1) < 0.2f) || (t == 1 && b == 0)) {
                *lab = *id;
                float u = gpu_test_uniform(0, 1);
                *id = u < 0.8f ? MASK_ID : u < 0.9f ? gpu_test_int(5, V - 1) : *id;
            }
        }
    }
    return (qac_pt_seqs){T, m->ids, m->labels, m->lens};
}

/* CoT-MAE: da, what a's decoder reconstructs, has b's length; db a's */
static batch_mem make_batch(qac_pt_objective obj, int B, int Ta, int Tb) {
    batch_mem m;
    memset(&m, 0, sizeof m);
    m.b.B = B;
    m.b.a = fill_side(&m.s[0], B, Ta);
    m.b.b = fill_side(&m.s[1], B, Tb);
    if (obj == QAC_PT_COTMAE) {
        m.b.da = fill_side(&m.s[2], B, Tb);
        m.b.db = fill_side(&m.s[3], B, Ta);
    }
    return m;
}

static void free_batch(batch_mem *m) {
    for (int s = 0; s < 4; s++) free(m->s[s].ids), free(m->s[s].labels), free(m->s[s].lens);
}

static const char *obj_name(qac_pt_objective obj) {
    return obj == QAC_PT_COTMAE ? "cotmae" : obj == QAC_PT_QGEN ? "qgen" : pair_alpha > 0 ? "pair" : "cocondenser";
}

static void opts_for(qac_train_opts *o, qac_pt_objective_opts *ob, qac_pt_objective obj, qac_device dev,
                     qac_precision prec, int mean_norm, long steps) {
    qac_train_opts_default(o);
    o->total_steps = steps;
    o->warmup_steps = steps / 10;
    o->lr = 3e-4;
    o->weight_decay = 0.01;
    o->threads = 2;
    o->seed = 7;
    o->device = selfcheck ? QAC_DEVICE_CPU : dev;
    o->gpu_precision = prec;
    qac_pt_objective_opts_default(ob);
    ob->objective = obj;
    ob->alpha = obj == QAC_PT_COCONDENSER ? pair_alpha : 0;
    ob->pooling = mean_norm ? QAC_POOL_MEAN : QAC_POOL_CLS;
    ob->normalize = mean_norm;
    ob->tau = mean_norm ? 0.05f : 1.0f;
}

/* The name of trained tensor i of a pre-trainer of objective obj ("head."
 * the Condenser head's or CoT-MAE decoder's layers, "gen." the query
 * decoder's blocks). */
static void tensor_name(char *buf, size_t cap, qac_pt_objective obj, int i) {
    static const char *mlm[QAC_MLM_NUM_TENSORS] = {"dense_w", "dense_b", "ln_w", "ln_b", "bias"};
    const int qgen = obj == QAC_PT_QGEN;
    const int enc = QAC_BERT_NUM_TENSORS - 2;
    const int head = qgen ? QAC_QGEN_NUM_TENSORS : QAC_BERT_LAYER_END - QAC_BERT_LAYER_FIRST;
    if (i < enc)
        snprintf(buf, cap, "%s", qac_bert_tensor_name(i));
    else if (i < enc + head && qgen)
        snprintf(buf, cap, "gen.%s", qac_qgen_tensor_name(i - enc));
    else if (i < enc + head)
        snprintf(buf, cap, "head.%s", qac_bert_tensor_name(QAC_BERT_LAYER_FIRST + i - enc));
    else
        snprintf(buf, cap, "mlm.%s", mlm[i - enc - head]);
}

/* ---- 1. gradient parity ---- */

/* recompute: the GPU side runs with --recompute, and must also match a GPU
 * run keeping every activation bit for bit (the same kernels, inputs and
 * dropout keys). */
static void grad_parity(qac_pt_objective obj, qac_precision prec, int mean_norm, int recompute) {
    qac_model *mc = make_model(), *mg = make_model(), *mk = make_model();
    qac_train_opts oc, og, ok;
    qac_pt_objective_opts bc, bg, bk;
    opts_for(&oc, &bc, obj, QAC_DEVICE_CPU, prec, mean_norm, 10);
    opts_for(&og, &bg, obj, QAC_DEVICE_CUDA, prec, mean_norm, 10);
    opts_for(&ok, &bk, obj, QAC_DEVICE_CUDA, prec, mean_norm, 10);
    og.recompute = recompute;
    qac_pretrainer *tc = NULL, *tg = NULL, *tk = NULL;
    CHECK_OK(qac_pretrainer_create(&tc, mc, &oc, &bc));
    CHECK_OK(qac_pretrainer_create(&tg, mg, &og, &bg));
    if (recompute) CHECK_OK(qac_pretrainer_create(&tk, mk, &ok, &bk));
    if (!tc || !tg || (recompute && !tk)) exit(1);
    batch_mem bm = make_batch(obj, 4, 21, 9);
    qac_pt_losses lc, lg, lk;
    CHECK_OK(qac_pretrainer_grads(tc, &bm.b, &lc));
    CHECK_OK(qac_pretrainer_grads(tg, &bm.b, &lg));
    char what[96];
    if (obj != QAC_PT_COCONDENSER)
        snprintf(what, sizeof what, "%s %s %s%s", obj_name(obj), gpu_test_prec_name(prec), mean_norm ? "mean" : "cls",
                 recompute ? " recompute" : "");
    else if (pair_alpha > 0)
        snprintf(what, sizeof what, "pair %s %s%s", gpu_test_prec_name(prec), mean_norm ? "mean+l2" : "cls",
                 recompute ? " recompute" : "");
    else
        snprintf(what, sizeof what, "%s %s%s", gpu_test_prec_name(prec), mean_norm ? "mean+l2 tau 0.05" : "cls tau 1",
                 recompute ? " recompute" : "");
    if (recompute) {
        CHECK_OK(qac_pretrainer_grads(tk, &bm.b, &lk));
        int same = lk.mlm == lg.mlm && lk.head == lg.head && lk.contrastive == lg.contrastive;
        for (int i = 0; i < tk->n_tensors && same; i++)
            same = !memcmp(tk->tensors[i].g, tg->tensors[i].g, tk->tensors[i].n * sizeof(float));
        printf("step parity %-22s losses and gradients %s the keeping run's\n", what,
               same ? "bit-identical to" : "DIFFER from");
        CHECK_MSG(same, "%s: recompute changed the losses or gradients", what);
    }
    const double ltol = selfcheck ? 0 : prec == QAC_PREC_FP32 ? 1e-6 : 1e-2;
    const double parts_c[3] = {lc.mlm, lc.head, lc.contrastive}, parts_g[3] = {lg.mlm, lg.head, lg.contrastive};
    const char *head_loss = obj == QAC_PT_COTMAE ? "decoder mlm" : obj == QAC_PT_QGEN ? "next-token" : "head mlm";
    const char *parts[3] = {"mlm", head_loss, "contrastive"};
    for (int i = 0; i < 3; i++) {
        /* CoT-MAE and qgen have no contrastive term: both 0 */
        const double d = fabs(parts_g[i] - parts_c[i]), rel = parts_c[i] != 0 ? d / fabs(parts_c[i]) : d;
        printf("step parity %-22s %-12s gpu %.9g cpu %.9g rel %.3g (tol %.1g)\n", what, parts[i], parts_g[i],
               parts_c[i], rel, ltol);
        CHECK_MSG(rel <= ltol, "%s: %s loss %g vs %g", what, parts[i], parts_g[i], parts_c[i]);
    }
    CHECK_MSG(tc->n_tensors == tg->n_tensors, "tensor lists differ");
    double worst = 0;
    char worst_name[64] = "";
    for (int i = 0; i < tc->n_tensors; i++) {
        const float *gc = tc->tensors[i].g, *gg = tg->tensors[i].g;
        const size_t n = tc->tensors[i].n;
        char nm[64];
        tensor_name(nm, sizeof nm, obj, i);
        const int key_bias = !strcmp(nm, "qkv_b") || !strcmp(nm, "head.qkv_b") || !strcmp(nm, "gen.qkv_b");
        double md = 0, mr = 0, sd = 0, sr = 0;
        for (size_t j = 0; j < n; j++) {
            if (key_bias && (j % (3 * HID)) / HID == 1) continue; /* zero in exact arithmetic */
            const double d = fabs((double)gg[j] - gc[j]), r = fabs((double)gc[j]);
            if (isnan(gg[j])) md = sd = INFINITY;
            md = d > md ? d : md;
            mr = r > mr ? r : mr;
            sd += d * d;
            sr += r * r;
        }
        const double rel = prec == QAC_PREC_FP32 ? (mr > 0 ? md / mr : md) : (sr > 0 ? sqrt(sd / sr) : sqrt(sd));
        const double tol = selfcheck ? 0 : prec == QAC_PREC_FP32 ? 1e-5 : 6e-2;
        printf("  %-18s %s %.3g (tol %.1g)\n", nm, prec == QAC_PREC_FP32 ? "max|d|/max|ref|" : "||d||/||ref||", rel,
               tol);
        CHECK_MSG(rel <= tol, "%s: gradient of %s off by %g (tol %g)", what, nm, rel, tol);
        if (rel > worst) worst = rel, snprintf(worst_name, sizeof worst_name, "%s", nm);
    }
    printf("step parity %-22s worst tensor %s %.3g\n", what, worst_name, worst);
    free_batch(&bm);
    qac_pretrainer_free(tc), qac_pretrainer_free(tg), qac_pretrainer_free(tk);
    qac_model_free(mc), qac_model_free(mg), qac_model_free(mk);
}

/* ---- 2. trajectories ---- */

static void trajectory(qac_pt_objective obj, qac_precision prec, long steps, double tol) {
    qac_model *mc = make_model(), *mg = make_model();
    qac_train_opts oc, og;
    qac_pt_objective_opts bc, bg;
    opts_for(&oc, &bc, obj, QAC_DEVICE_CPU, QAC_PREC_FP32, 0, steps);
    opts_for(&og, &bg, obj, QAC_DEVICE_CUDA, prec, 0, steps);
    qac_pretrainer *tc = NULL, *tg = NULL;
    CHECK_OK(qac_pretrainer_create(&tc, mc, &oc, &bc));
    CHECK_OK(qac_pretrainer_create(&tg, mg, &og, &bg));
    if (!tc || !tg) exit(1);
    batch_mem bms[4];
    for (int i = 0; i < 4; i++) bms[i] = make_batch(obj, 4, 18, 10);
    double worst = 0, first = 0, last_c = 0, last_g = 0;
    long worst_at = 0;
    for (long s = 0; s < steps; s++) {
        qac_step_stats sc, sg;
        qac_pt_losses lc, lg;
        CHECK_OK(qac_pretrainer_step(tc, &bms[s % 4].b, &lc, &sc));
        CHECK_OK(qac_pretrainer_step(tg, &bms[s % 4].b, &lg, &sg));
        const double rel = fabs(sg.loss - sc.loss) / fabs(sc.loss);
        if (rel > worst) worst = rel, worst_at = s + 1;
        if (s == 0) first = sc.loss;
        last_c = sc.loss, last_g = sg.loss;
        if (s < 3 || s == steps - 1 || (s + 1) % 10 == 0)
            printf("  step %3ld loss cpu %.6f gpu %.6f rel %.2e norm cpu %.4g gpu %.4g\n", s + 1, sc.loss, sg.loss,
                   rel, sc.grad_norm, sg.grad_norm);
    }
    const double t = selfcheck ? 0 : tol;
    printf("trajectory %s %s %ld steps: loss %.5f -> cpu %.5f gpu %.5f, worst rel %.3g at step %ld (tol %.2g)\n",
           obj_name(obj), gpu_test_prec_name(prec), steps, first, last_c, last_g, worst, worst_at, t);
    CHECK_MSG(worst <= t, "trajectory %s %s: loss off by %g at step %ld", obj_name(obj), gpu_test_prec_name(prec),
              worst, worst_at);
    /* the pooler is a gap of the flat block: no update, no decay */
    CHECK_OK(qac_pretrainer_sync_host(tg));
    size_t pooler = (size_t)(mg->p.pooler_w - mg->param_mem), np = mg->n_params - pooler;
    CHECK_MSG(!memcmp(mg->param_mem + pooler, base_params + pooler, np * sizeof(float)),
              "trajectory %s: the untrained pooler changed", gpu_test_prec_name(prec));
    for (int i = 0; i < 4; i++) free_batch(&bms[i]);
    qac_pretrainer_free(tc), qac_pretrainer_free(tg);
    qac_model_free(mc), qac_model_free(mg);
}

/* ---- 3. checkpoints across devices ---- */

static void cross_resume(qac_pt_objective obj, qac_device first, qac_device second) {
    enum { steps = 5, split = 3 };
    qac_model *ma = make_model(), *mb = make_model();
    qac_train_opts oa, ob;
    qac_pt_objective_opts ba, bb;
    opts_for(&oa, &ba, obj, first, QAC_PREC_FP32, 0, steps);
    opts_for(&ob, &bb, obj, second, QAC_PREC_FP32, 0, steps);
    qac_pretrainer *ta = NULL, *tb = NULL;
    CHECK_OK(qac_pretrainer_create(&ta, ma, &oa, &ba));
    CHECK_OK(qac_pretrainer_create(&tb, mb, &ob, &bb));
    if (!ta || !tb) exit(1);
    batch_mem bms[steps];
    for (int i = 0; i < steps; i++) bms[i] = make_batch(obj, 3, 16, 8);
    qac_step_stats s;
    qac_pt_losses l;
    for (long i = 0; i < split; i++) CHECK_OK(qac_pretrainer_step(ta, &bms[i].b, &l, &s));
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ckpt-%s-%d-%d", tmp, obj_name(obj), (int)first, (int)second);
    const char cursor[] = "cursor";
    CHECK_OK(qac_pretrainer_save(ta, dir, cursor, sizeof cursor));
    void *cur = NULL;
    size_t cl = 0;
    CHECK_OK(qac_pretrainer_resume(tb, dir, &cur, &cl));
    CHECK_MSG(cl == sizeof cursor && cur && !memcmp(cur, cursor, cl), "cursor round trip");
    free(cur);
    CHECK_MSG(tb->step == split, "resumed at step %ld", tb->step);
    const char *name[3] = {"auto", "cpu", "cuda"};
    for (long i = split; i < steps; i++) {
        qac_step_stats sa, sb;
        qac_pt_losses la, lb;
        CHECK_OK(qac_pretrainer_step(ta, &bms[i].b, &la, &sa));
        CHECK_OK(qac_pretrainer_step(tb, &bms[i].b, &lb, &sb));
        const double rel = fabs(sb.loss - sa.loss) / fabs(sa.loss), tol = selfcheck ? 0 : 1e-4;
        printf("resume %s %s -> %s step %ld: loss uninterrupted %.9g resumed %.9g rel %.3g (tol %.1g)\n",
               obj_name(obj), name[first], name[second], i + 1, sa.loss, sb.loss, rel, tol);
        CHECK_MSG(rel <= tol, "resume %s %s -> %s: step %ld off by %g", obj_name(obj), name[first], name[second],
                  i + 1, rel);
    }
    for (int i = 0; i < steps; i++) free_batch(&bms[i]);
    qac_pretrainer_free(ta), qac_pretrainer_free(tb);
    qac_model_free(ma), qac_model_free(mb);
}

/* Arguments: --selfcheck (see above), and/or one group to run: parity,
 * recompute, trajectory or resume (the sanitizer run uses parity). */
int main(int argc, char **argv) {
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--selfcheck"))
            selfcheck = 1;
        else
            only = argv[i];
    }
    if (!selfcheck && !qac_cuda_available()) qac_test_skip("no usable CUDA GPU");
    gpu_test_seed();
    tmp = qac_test_tmpdir("gpupretrain");
    gpu_tiny_write_vocab(tmp);

    static const qac_pt_objective objs[3] = {QAC_PT_COCONDENSER, QAC_PT_COTMAE, QAC_PT_QGEN};
    for (int k = 0; k < 3; k++) {
        const qac_pt_objective obj = objs[k];
        if (!only || !strcmp(only, "parity")) {
            grad_parity(obj, QAC_PREC_FP32, 0, 0);
            grad_parity(obj, QAC_PREC_FP32, 1, 0);
            grad_parity(obj, QAC_PREC_BF16, 0, 0);
            grad_parity(obj, QAC_PREC_BF16, 1, 0);
        }
        if (!only || !strcmp(only, "recompute")) {
            grad_parity(obj, QAC_PREC_FP32, 0, 1);
            grad_parity(obj, QAC_PREC_BF16, 1, 1);
        }
        if (!only || !strcmp(only, "trajectory")) {
            trajectory(obj, QAC_PREC_FP32, 10, 1e-4);
            trajectory(obj, QAC_PREC_BF16, selfcheck ? 10 : 50, 2e-2);
        }
        if (!only || !strcmp(only, "resume")) {
            cross_resume(obj, QAC_DEVICE_CUDA, QAC_DEVICE_CPU);
            cross_resume(obj, QAC_DEVICE_CPU, QAC_DEVICE_CUDA);
        }
    }
    /* PAIR: the coCondenser step with its loss in place of the contrastive one */
    pair_alpha = 0.1f;
    if (!only || !strcmp(only, "parity")) {
        grad_parity(QAC_PT_COCONDENSER, QAC_PREC_FP32, 0, 0);
        grad_parity(QAC_PT_COCONDENSER, QAC_PREC_FP32, 1, 0);
        grad_parity(QAC_PT_COCONDENSER, QAC_PREC_BF16, 0, 0);
        grad_parity(QAC_PT_COCONDENSER, QAC_PREC_BF16, 1, 0);
    }
    if (!only || !strcmp(only, "recompute")) grad_parity(QAC_PT_COCONDENSER, QAC_PREC_FP32, 1, 1);
    if (!only || !strcmp(only, "trajectory")) trajectory(QAC_PT_COCONDENSER, QAC_PREC_FP32, 10, 1e-4);
    if (!only || !strcmp(only, "resume")) cross_resume(QAC_PT_COCONDENSER, QAC_DEVICE_CUDA, QAC_DEVICE_CPU);
    pair_alpha = 0;

    free(base_params);
    return qac_test_summary();
}
