/* Training engine against PyTorch autograd (fixtures from
 * tests/reference/gen_train_fixtures.py): per-tensor gradient parity of
 * the encoder + InfoNCE on a real Cranfield batch, GradCache against the
 * full batch, and a 10-step AdamW trajectory.
 *
 * Tolerances: gradients 1e-4 relative per tensor (max |diff| / max |ref|),
 * losses 1e-6 relative; trajectory losses and final weights within twice
 * the distance of torch's own fp32 run from a float64 run (see
 * trajectory()). The worst tensor of every case is printed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../encoder/fixture.h"
#include "bert_cpu.h"
#include "pretrainer.h"
#include "qac_heads.h"
#include "qac_pool.h"
#include "qac_rng.h"
#include "qac_safetensors.h"
#include "qac_train.h"
#include "testutil.h"

#define QAC_MAX_LAYERS_TEST 64

static qac_safetensors *fx;
static int NQ, NP;
static int32_t *q_ids, *p_ids;
static int *q_lens, *p_lens, q_T, p_T;

static const qac_st_tensor *need(const char *name) { return qac_test_tensor(fx, name); }

static double f64_at(const char *name, int i) {
    double v;
    memcpy(&v, (const char *)need(name)->data + 8 * i, 8);
    return v;
}

static int *ints(const char *name, int *rows, int *cols) {
    const qac_st_tensor *t = need(name);
    int *out = malloc(t->numel * sizeof *out);
    memcpy(out, t->data, t->numel * 4);
    *rows = (int)t->shape[0];
    if (cols) *cols = t->ndim > 1 ? (int)t->shape[1] : 1;
    return out;
}

/* max |a - ref| / max |ref| per tensor over the trained tensors (not the
 * pooler); returns the worst and names it */
static double compare_tensors_each(const qac_model *m, const float *got, const char *prefix, const char **worst_name,
                                   int skip_key_bias, double *each) {
    double worst = 0;
    size_t off = 0;
    float *ref = NULL;
    for (int i = 0; i < QAC_BERT_NUM_TENSORS; i++) {
        size_t n = qac_bert_tensor_size(&m->cfg, i);
        if (i < QAC_BERT_NUM_TENSORS - 2 && n) { /* n 0: a tensor BERT lacks */
            char name[128];
            snprintf(name, sizeof name, "%s%s", prefix, qac_bert_tensor_name(i));
            const qac_st_tensor *t = need(name);
            if (t->numel != n) {
                fprintf(stderr, "%s: %llu values, qac has %zu\n", name, (unsigned long long)t->numel, n);
                exit(1);
            }
            ref = realloc(ref, n * sizeof *ref);
            qac_safetensors_read_f32(t, ref);
            double md = 0, mr = 0;
            int C = m->cfg.hidden_size;
            for (size_t j = 0; j < n; j++) {
                if (skip_key_bias && !strcmp(qac_bert_tensor_name(i), "qkv_b") && (j % (3 * C)) / C == 1) continue;
                double d = fabs((double)got[off + j] - ref[j]);
                md = d > md ? d : md;
                mr = fabs(ref[j]) > mr ? fabs(ref[j]) : mr;
            }
            double rel = mr > 0 ? md / mr : md;
            if (each) each[i] = rel;
            if (rel >= worst) {
                worst = rel;
                *worst_name = qac_bert_tensor_name(i);
            }
        }
        off += n;
    }
    free(ref);
    return worst;
}

static double compare_tensors(const qac_model *m, const float *got, const char *prefix, const char **worst_name,
                              int skip_key_bias) {
    return compare_tensors_each(m, got, prefix, worst_name, skip_key_bias, NULL);
}

/* the fixture's tensors "<prefix><name>" in the model's parameter layout
 * (the pooler, never trained, copied from m) */
static float *fixture_params(const qac_model *m, const char *prefix) {
    float *out = malloc(m->n_params * sizeof *out);
    memcpy(out, m->param_mem, m->n_params * sizeof *out);
    size_t off = 0;
    for (int i = 0; i < QAC_BERT_NUM_TENSORS; i++) {
        size_t n = qac_bert_tensor_size(&m->cfg, i);
        if (i < QAC_BERT_NUM_TENSORS - 2 && n) {
            char name[128];
            snprintf(name, sizeof name, "%s%s", prefix, qac_bert_tensor_name(i));
            qac_safetensors_read_f32(need(name), out + off);
        }
        off += n;
    }
    return out;
}

static qac_train_batch batch(void) {
    qac_train_batch b = {NQ, NP, q_T, p_T, q_ids, q_lens, p_ids, p_lens};
    return b;
}

static qac_model *load_model(const char *which) {
    qac_model *m = NULL;
    if (!strcmp(which, "tiny")) {
        qac_bert_config c = {.vocab_size = 30522, .hidden_size = 64, .num_layers = 2, .num_heads = 4, .intermediate_size = 128, .max_position = 128, .type_vocab_size = 2, .pad_token_id = 0, .layer_norm_eps = 1e-12f, .hidden_dropout = 0.0f, .attn_dropout = 0.0f};
        CHECK_OK(qac_model_create(&m, &c, qac_test_model_dir()));
        enc_fill_random_params(m, ENC_FIXTURE_SEED);
        /* x8 but LayerNorm weights, as the fixture script does (exact) */
        size_t off = 0;
        for (int i = 0; i < QAC_BERT_NUM_TENSORS; i++) {
            size_t n = qac_bert_tensor_size(&m->cfg, i);
            const char *nm = qac_bert_tensor_name(i);
            if (strcmp(nm, "emb_ln_w") && strcmp(nm, "ln1_w") && strcmp(nm, "ln2_w"))
                for (size_t j = 0; j < n; j++) m->param_mem[off + j] *= 8.0f;
            off += n;
        }
    } else {
        CHECK_OK(qac_model_load(&m, qac_test_model_dir()));
    }
    if (!m) exit(1);
    return m;
}

static void opts_for(qac_train_opts *o, float tau, qac_similarity sim) {
    qac_train_opts_default(o);
    o->total_steps = 10;
    o->tau = tau;
    o->sim = sim;
    o->hidden_dropout = o->attn_dropout = 0.0f;
    o->threads = 2;
}

static void grad_parity(const char *which) {
    qac_model *m = load_model(which);
    static const struct { const char *name; float tau; qac_similarity sim; float drop; } cases[] = {
        {"tau1_dot", 1.0f, QAC_SIM_DOT, 0}, {"tau1_cos", 1.0f, QAC_SIM_COS, 0},
        {"tau005_dot", 0.05f, QAC_SIM_DOT, 0}, {"tau005_cos", 0.05f, QAC_SIM_COS, 0},
        {"dropout", 0.05f, QAC_SIM_COS, 0.1f}, {"pair", 1.0f, QAC_SIM_DOT, 0}};
    int ncases = strcmp(which, "tiny") ? 4 : 6;
    for (int c = 0; c < ncases; c++) {
        qac_train_opts o;
        opts_for(&o, cases[c].tau, cases[c].sim);
        o.hidden_dropout = o.attn_dropout = cases[c].drop; /* the fixture's torch run used qac's masks */
        if (!strcmp(cases[c].name, "pair")) o.pair_alpha = 0.1f;
        qac_trainer *t = NULL;
        CHECK_OK(qac_trainer_create(&t, m, &o));
        if (!t) exit(1);
        qac_train_batch b = batch();
        double loss = 0;
        CHECK_OK(qac_trainer_grads(t, &b, &loss));
        char key[128];
        snprintf(key, sizeof key, "%s.%s.loss", which, cases[c].name);
        /* A float32 loss over logits of size |s| carries about eps32 |s| of
         * rounding whatever the order of operations: 1e-6 relative, or a
         * few of those units where the logits are large (tiny, dot, tau
         * 0.05: |s| ~ 1e3). */
        double ref = f64_at(key, 0), lrel = fabs(loss - ref) / fabs(ref);
        double ltol = fmax(1e-6, 4 * 0x1p-24 * f64_at(key, 1) / fabs(ref));
        snprintf(key, sizeof key, "%s.%s.grad.", which, cases[c].name);
        const char *wn = "?";
        double worst = compare_tensors(m, qac_trainer_grad_mem(t), key, &wn, 0);
        printf("grad %-6s %-10s loss %.9f (ref %.9f, rel %.2e, tol %.1e)  worst tensor %-10s rel %.2e\n", which,
               cases[c].name, loss, ref, lrel, ltol, wn, worst);
        CHECK_MSG(lrel <= ltol, "%s %s: loss relative error %.3e > %.1e", which, cases[c].name, lrel, ltol);
        CHECK_MSG(worst <= 1e-4, "%s %s: gradient of %s off by %.3e relative (> 1e-4)", which, cases[c].name, wn,
                  worst);
        qac_trainer_free(t);
    }
    qac_model_free(m);
}

/* GradCache with chunks of 1, 3 and the whole batch equals the full-batch
 * gradient, with dropout on (the re-forward must redraw the same masks). */
static void gradcache(void) {
    qac_model *m = load_model("tiny");
    size_t n = m->n_params;
    float *full = malloc(n * sizeof *full);
    int chunks[] = {0, 1, 3, NQ * NP};
    for (int k = 0; k < 4; k++) {
        qac_train_opts o;
        opts_for(&o, 0.05f, QAC_SIM_COS);
        o.hidden_dropout = o.attn_dropout = 0.1f;
        o.chunk = chunks[k];
        qac_trainer *t = NULL;
        CHECK_OK(qac_trainer_create(&t, m, &o));
        qac_train_batch b = batch();
        double loss = 0;
        CHECK_OK(qac_trainer_grads(t, &b, &loss));
        const float *g = qac_trainer_grad_mem(t);
        if (k == 0) {
            memcpy(full, g, n * sizeof *full);
        } else {
            double md = 0, mr = 0;
            for (size_t i = 0; i < n; i++) {
                double d = fabs((double)g[i] - full[i]);
                md = d > md ? d : md;
                mr = fabs(full[i]) > mr ? fabs(full[i]) : mr;
            }
            printf("gradcache chunk %2d: max |diff| / max |g| = %.2e (loss %.9f)\n", chunks[k], md / mr, loss);
            CHECK_MSG(md / mr <= 1e-5, "GradCache chunk %d differs from the full batch by %.3e", chunks[k], md / mr);
        }
        qac_trainer_free(t);
    }
    /* Recomputing each layer in backward, and running on one thread instead
     * of two, change nothing: the same operations in the same order */
    for (int k = 0; k < 2; k++) {
        qac_train_opts o;
        opts_for(&o, 0.05f, QAC_SIM_COS);
        o.hidden_dropout = o.attn_dropout = 0.1f;
        if (k == 0) o.recompute = 1;
        else o.threads = 1;
        qac_trainer *t = NULL;
        CHECK_OK(qac_trainer_create(&t, m, &o));
        qac_train_batch b = batch();
        double loss = 0;
        CHECK_OK(qac_trainer_grads(t, &b, &loss));
        int same = !memcmp(qac_trainer_grad_mem(t), full, n * sizeof *full);
        printf("%s: gradients %s the full batch's\n", k == 0 ? "recompute" : "1 thread", same ? "bit-identical to" : "DIFFER from");
        CHECK_MSG(same, "%s changed the gradients", k == 0 ? "recompute" : "one thread");
        qac_trainer_free(t);
    }
    free(full);
    qac_model_free(m);
}

/* 10 AdamW steps with warmup and clipping against torch's trajectory.
 * The bound is torch's own rounding error: the fixture runs the trajectory
 * twice, in fp32 (torch's) and in float64 (near exact). AdamW amplifies
 * rounding (lr m / sqrt(v) of a small gradient), so torch's fp32 run ends
 * up to ~1e-5 (weights) and ~5e-6 (losses) away from float64, on whichever
 * elements happen to have near-zero second moments (per tensor the figure
 * is luck: 9e-7 for one tensor in torch's run, 4e-6 in qac's, and the
 * reverse for another). qac's fp32 run must stay within twice torch's
 * distance from float64, worst step against worst step and worst tensor
 * against worst tensor. */
static void trajectory(void) {
    qac_model *m = load_model("tiny");
    qac_train_opts o;
    opts_for(&o, 0.05f, QAC_SIM_COS);
    o.lr = 1e-3;
    o.warmup_steps = 3;
    o.total_steps = 10;
    o.weight_decay = 0.01;
    o.max_grad_norm = 1.0;
    qac_trainer *t = NULL;
    CHECK_OK(qac_trainer_create(&t, m, &o));
    qac_train_batch b = batch();
    double worst_loss = 0, torch_loss = 0;
    for (int s = 0; s < 10; s++) {
        qac_step_stats st;
        CHECK_OK(qac_trainer_step(t, &b, &st));
        double exact = f64_at("traj64.loss", s), ref = f64_at("traj.loss", s);
        double rel = fabs(st.loss - exact) / fabs(exact), trel = fabs(ref - exact) / fabs(exact);
        printf("traj step %2d loss %.9f torch %.9f float64 %.9f: qac %.2e, torch %.2e from float64\n", s + 1,
               st.loss, ref, exact, rel, trel);
        worst_loss = rel > worst_loss ? rel : worst_loss;
        torch_loss = trel > torch_loss ? trel : torch_loss;
    }
    CHECK_MSG(worst_loss <= 2 * torch_loss + 1e-7, "trajectory loss %.3e from float64, torch's fp32 %.3e", worst_loss,
              torch_loss);
    const char *wn = "?";
    /* The key bias adds the same q.b_k to every score of a row, which the
     * softmax cancels: its gradient is zero up to rounding, and AdamW turns
     * rounding noise into full-size steps of either sign (lr m / sqrt(v)).
     * Those 3 x 64 values cannot follow torch and are left out here; their
     * gradients are checked by the parity cases. */
    double ours[QAC_BERT_NUM_TENSORS] = {0}, theirs[QAC_BERT_NUM_TENSORS] = {0};
    float *torch32 = fixture_params(m, "traj.param.");
    compare_tensors_each(m, m->param_mem, "traj64.param.", &wn, 1, ours);
    compare_tensors_each(m, torch32, "traj64.param.", &wn, 1, theirs);
    double worst = compare_tensors(m, m->param_mem, "traj.param.", &wn, 1);
    printf("traj weights after 10 steps: worst tensor against torch's fp32 %s rel %.2e\n", wn, worst);
    double qw = 0, tw = 0;
    const char *qn = "?", *tn = "?";
    for (int i = 0; i < QAC_BERT_NUM_TENSORS - 2; i++) {
        if (!qac_bert_tensor_size(&m->cfg, i)) continue;
        printf("  %-10s from float64: qac %.2e, torch %.2e\n", qac_bert_tensor_name(i), ours[i], theirs[i]);
        if (ours[i] > qw) qw = ours[i], qn = qac_bert_tensor_name(i);
        if (theirs[i] > tw) tw = theirs[i], tn = qac_bert_tensor_name(i);
    }
    CHECK_MSG(qw <= 2 * tw, "weights after 10 steps: %s %.3e from float64, torch's fp32 at most %.3e (%s)", qn, qw, tw,
              tn);
    free(torch32);
    qac_trainer_free(t);
    qac_model_free(m);
}

/* max |got - ref| / max |ref| of one named fixture tensor */
static double compare_named(const float *got, const char *name, size_t n) {
    const qac_st_tensor *t = need(name);
    if (t->numel != n) {
        fprintf(stderr, "%s: %llu values, expected %zu\n", name, (unsigned long long)t->numel, n);
        exit(1);
    }
    float *ref = malloc(n * sizeof *ref);
    qac_safetensors_read_f32(t, ref);
    double md = 0, mr = 0;
    for (size_t j = 0; j < n; j++) {
        double d = fabs((double)got[j] - ref[j]);
        md = d > md ? d : md;
        mr = fabs(ref[j]) > mr ? fabs(ref[j]) : mr;
    }
    free(ref);
    return mr > 0 ? md / mr : md;
}

/* The tiny encoder + the tied MLM head against torch, on masked passages. */
static void mlm(void) {
    qac_model *m = load_model("tiny");
    const qac_bert_config *c = &m->cfg;
    int C = c->hidden_size, V = c->vocab_size, L = c->num_layers, B = NQ * NP, T = p_T;
    qac_pool *pool = NULL;
    CHECK_OK(qac_pool_create(&pool, 2));
    float *head = calloc(qac_mlm_param_count(C, V), sizeof(float)), *hgrad = calloc(qac_mlm_param_count(C, V), sizeof(float));
    float *grad = calloc(m->n_params, sizeof(float));
    qac_mlm_head h, hg;
    qac_bert_params g;
    qac_mlm_bind(&h, head, C, V);
    qac_mlm_bind(&hg, hgrad, C, V);
    qac_bert_params_bind(&g, c, grad);
    float *hv[QAC_MLM_NUM_TENSORS] = {h.dense_w, h.dense_b, h.ln_w, h.ln_b, h.bias};
    float *gv[QAC_MLM_NUM_TENSORS] = {hg.dense_w, hg.dense_b, hg.ln_w, hg.ln_b, hg.bias};
    size_t hn[QAC_MLM_NUM_TENSORS] = {(size_t)C * C, (size_t)C, (size_t)C, (size_t)C, (size_t)V};
    const char *names[QAC_MLM_NUM_TENSORS] = {"dense_w", "dense_b", "ln_w", "ln_b", "bias"};
    char key[128];
    for (int i = 0; i < QAC_MLM_NUM_TENSORS; i++) {
        snprintf(key, sizeof key, "mlm.init.%s", names[i]);
        qac_safetensors_read_f32(need(key), hv[i]);
    }
    int rows, cols;
    int32_t *ids = ints("mlm.ids", &rows, &cols), *labels = ints("mlm.labels", &rows, &cols);
    qac_bert_packed pk;
    qac_bert_acts a = {0};
    qac_bert_bwd w = {0};
    CHECK_OK(qac_bert_pack(&pk, c, &m->p));
    CHECK_OK(qac_bert_acts_alloc(&a, c, B, T, QAC_ACTS_KEEP, 2));
    CHECK_OK(qac_bert_bwd_alloc(&w, c, B, T));
    CHECK_OK(qac_bert_forward_train(&a, c, &m->p, &pk, ids, NULL, p_lens, B, T, NULL, pool));
    /* gather the labelled positions, run the head, scatter its gradient */
    int M = 0;
    for (int i = 0; i < B * T; i++) M += labels[i] >= 0;
    float *states = malloc((size_t)M * C * sizeof(float)), *dstates = malloc((size_t)M * C * sizeof(float));
    float *dlast = calloc((size_t)B * T * C, sizeof(float));
    int32_t *lab = malloc((size_t)M * sizeof *lab);
    for (int i = 0, k = 0; i < B * T; i++)
        if (labels[i] >= 0) {
            memcpy(states + (size_t)k * C, a.last + (size_t)i * C, (size_t)C * sizeof(float));
            lab[k++] = labels[i];
        }
    double loss = 0;
    CHECK_OK(qac_mlm_loss(&loss, dstates, &hg, g.word_emb, &h, m->p.word_emb, states, lab, M, C, V,
                          c->layer_norm_eps, pool));
    for (int i = 0, k = 0; i < B * T; i++)
        if (labels[i] >= 0) memcpy(dlast + (size_t)i * C, dstates + (size_t)(k++) * C, (size_t)C * sizeof(float));
    const float *dh[QAC_MAX_LAYERS_TEST + 1] = {0};
    dh[L] = dlast;
    CHECK_OK(qac_bert_backward(&g, &w, dh, &a, c, &m->p, &pk, ids, NULL, p_lens, B, T, NULL, pool));
    double ref = f64_at("mlm.loss", 0), lrel = fabs(loss - ref) / fabs(ref);
    double ltol = fmax(1e-6, 4 * 0x1p-24 * f64_at("mlm.loss", 1) / fabs(ref));
    const char *wn = "?";
    double worst = compare_tensors(m, grad, "mlm.grad.", &wn, 0);
    double hworst = 0;
    const char *hwn = "?";
    for (int i = 0; i < QAC_MLM_NUM_TENSORS; i++) {
        snprintf(key, sizeof key, "mlm.head_grad.%s", names[i]);
        double r = compare_named(gv[i], key, hn[i]);
        if (r >= hworst) hworst = r, hwn = names[i];
    }
    printf("mlm: %d masked positions, loss %.9f (ref %.9f, rel %.2e, tol %.1e); encoder worst %s %.2e; head worst %s "
           "%.2e\n",
           M, loss, ref, lrel, ltol, wn, worst, hwn, hworst);
    CHECK_MSG(lrel <= ltol, "mlm loss off by %.3e relative", lrel);
    CHECK_MSG(worst <= 1e-4, "mlm: encoder gradient of %s off by %.3e relative", wn, worst);
    CHECK_MSG(hworst <= 1e-4, "mlm: head gradient of %s off by %.3e relative", hwn, hworst);
    free(states), free(dstates), free(dlast), free(lab), free(ids), free(labels), free(head), free(hgrad), free(grad);
    qac_bert_acts_free(&a);
    qac_bert_bwd_free(&w);
    qac_bert_packed_free(&pk);
    qac_pool_free(pool);
    qac_model_free(m);
}

static const char *mlm_names[QAC_MLM_NUM_TENSORS] = {"dense_w", "dense_b", "ln_w", "ln_b", "bias"};

static float **mlm_views(qac_mlm_head *h) {
    static float *v[QAC_MLM_NUM_TENSORS];
    v[0] = h->dense_w, v[1] = h->dense_b, v[2] = h->ln_w, v[3] = h->ln_b, v[4] = h->bias;
    return v;
}

/* qac_bert_params is 19 float pointers in tensor order */
static float *param_view(qac_bert_params *p, int i) { return ((float **)p)[i]; }

/* The representation of case `prefix` ({prefix}.rep: mean pooling?,
 * normalised?; the cls cases are the released code's raw [CLS]), chosen
 * either as the checkpoint's (m's pooling and normalize set to it, the
 * options left at QAC_PT_*_CHECKPOINT, as --pooling checkpoint on the
 * default model) or explicitly (--pooling mean --normalize true on a
 * cls checkpoint). */
static void representation(qac_model *m, qac_pt_objective_opts *ob, const char *prefix, int via_checkpoint) {
    char key[128];
    int two;
    snprintf(key, sizeof key, "%s.rep", prefix);
    int *rep = ints(key, &two, NULL);
    qac_pooling pool = rep[0] ? QAC_POOL_MEAN : QAC_POOL_CLS;
    if (via_checkpoint)
        m->pooling = pool, m->normalize = rep[1];
    else
        ob->pooling = (int)pool, ob->normalize = rep[1];
    free(rep);
}

/* The production pre-trainer on the tiny model, its fresh heads replaced
 * by the fixture's initial values. */
static qac_pretrainer *pretrainer_for(qac_model *m, qac_pt_objective obj, int head_layers, float alpha, float dropout,
                                      const char *prefix, float tau, int via_checkpoint) {
    qac_train_opts o;
    opts_for(&o, 1.0f, QAC_SIM_DOT);
    o.hidden_dropout = o.attn_dropout = dropout; /* the fixture's masks are qac's, seed 42, step 0 */
    qac_pt_objective_opts ob;
    qac_pt_objective_opts_default(&ob);
    ob.objective = obj;
    ob.head_layers = head_layers;
    ob.alpha = alpha;
    ob.tau = tau;
    representation(m, &ob, prefix, via_checkpoint);
    qac_pretrainer *t = NULL;
    CHECK_OK(qac_pretrainer_create(&t, m, &o, &ob));
    if (!t) exit(1);
    char key[128];
    for (int i = QAC_BERT_LAYER_FIRST; i < QAC_BERT_LAYER_END; i++) {
        snprintf(key, sizeof key, "%s.head_init.%s", prefix, qac_bert_tensor_name(i));
        qac_safetensors_read_f32(need(key), param_view(&t->hp, i));
    }
    float **mv = mlm_views(&t->mlm);
    for (int i = 0; i < QAC_MLM_NUM_TENSORS; i++) {
        snprintf(key, sizeof key, "%s.mlm_init.%s", prefix, mlm_names[i]);
        qac_safetensors_read_f32(need(key), mv[i]);
    }
    qac_pretrainer_heads_changed(t);
    return t;
}

/* worst relative gradient error of the head layers (*hw) and the MLM head (*mw) */
static void heads_compare(qac_pretrainer *t, const char *prefix, double *hw, const char **hwn, double *mw,
                          const char **mwn) {
    char key[128];
    int C = t->m->cfg.hidden_size, V = t->m->cfg.vocab_size;
    *hw = *mw = 0;
    for (int i = QAC_BERT_LAYER_FIRST; i < QAC_BERT_LAYER_END; i++) {
        snprintf(key, sizeof key, "%s.head_grad.%s", prefix, qac_bert_tensor_name(i));
        double r = compare_named(param_view(&t->hg, i), key, qac_bert_tensor_size(&t->hc, i));
        if (r >= *hw) *hw = r, *hwn = qac_bert_tensor_name(i);
    }
    size_t msz[QAC_MLM_NUM_TENSORS] = {(size_t)C * C, (size_t)C, (size_t)C, (size_t)C, (size_t)V};
    float **gv = mlm_views(&t->mg);
    for (int i = 0; i < QAC_MLM_NUM_TENSORS; i++) {
        snprintf(key, sizeof key, "%s.mlm_grad.%s", prefix, mlm_names[i]);
        double r = compare_named(gv[i], key, msz[i]);
        if (r >= *mw) *mw = r, *mwn = mlm_names[i];
    }
}

/* Keeping only layer inputs and re-running each layer in backward
 * (--recompute) changes nothing: the same operations in the same order. */
static void same_with_recompute(qac_pretrainer *t, const qac_pt_batch *b, const char *name) {
    size_t n = t->n_grad * sizeof(float);
    float *ref = malloc(n);
    memcpy(ref, t->grad_mem, n);
    t->o.recompute = 1;
    qac_pt_losses l;
    CHECK_OK(qac_pretrainer_grads(t, b, &l));
    int same = !memcmp(ref, t->grad_mem, n);
    printf("%s with recompute: gradients %s\n", name, same ? "bit-identical" : "DIFFER");
    CHECK_MSG(same, "%s: recompute changed the gradients", name);
    t->o.recompute = 0;
    free(ref);
}

/* rows [first, first+2, ...] of x [2B, T]: the fixture stacks the pairs
 * as [a_0, b_0, a_1, b_1, ...]; the pre-trainer takes the sides apart */
static int32_t *every_other(const int32_t *x, int B, int T, int first) {
    int32_t *out = malloc((size_t)B * T * sizeof *out);
    for (int i = 0; i < B; i++) memcpy(out + (size_t)i * T, x + (size_t)(2 * i + first) * T, (size_t)T * sizeof *out);
    return out;
}

typedef struct split {
    int32_t *ids, *labels, *lens;
    qac_pt_seqs s;
} split;

static void split_side(split *sp, const int32_t *ids, const int32_t *labels, const int *lens, int B, int T, int first) {
    sp->ids = every_other(ids, B, T, first);
    sp->labels = every_other(labels, B, T, first);
    sp->lens = every_other(lens, B, 1, first);
    sp->s = (qac_pt_seqs){T, sp->ids, sp->labels, sp->lens};
}

static void split_free(split *sp) { free(sp->ids), free(sp->labels), free(sp->lens); }

/* The whole coCondenser objective against torch, through the production
 * step's gradient function (case `name` of the fixture): Condenser head (2 layers on the last [CLS] and
 * the states after layer 1) with MLM, late MLM, and the contrastive loss
 * over the [CLS] of query-as-context pairs. */
static void cocondenser_case(const char *name, float alpha, float dropout, int via_checkpoint) {
    qac_model *m = load_model("tiny");
    int rows, T;
    char key[128];
#define CKEY(suffix) (snprintf(key, sizeof key, "%s.%s", name, suffix), key)
    int32_t *ids = ints(CKEY("ids"), &rows, &T), *labels = ints(CKEY("labels"), &rows, &T);
    int *lens = ints(CKEY("lens"), &rows, NULL), B = rows / 2;
    qac_pretrainer *t = pretrainer_for(m, QAC_PT_COCONDENSER, 2, alpha, dropout, name, (float)f64_at(CKEY("tau"), 0),
                                       via_checkpoint);
    CHECK_MSG(t->ob.skip_from == 1, "the default --skip-from of a 2-layer encoder is 1 (got %d)", t->ob.skip_from);
    split a, b;
    split_side(&a, ids, labels, lens, B, T, 0);
    split_side(&b, ids, labels, lens, B, T, 1);
    qac_pt_batch batch = {B, a.s, b.s, {0}, {0}};
    qac_pt_losses l;
    CHECK_OK(qac_pretrainer_grads(t, &batch, &l));

    CKEY("loss");
    double ref = f64_at(key, 0), r1 = f64_at(key, 1), r2 = f64_at(key, 2), r3 = f64_at(key, 3);
    double lrel = fabs(l.total - ref) / fabs(ref), ltol = fmax(1e-6, 4 * 0x1p-24 * f64_at(key, 4) / fabs(ref));
    const char *wn = "?", *hwn = "?", *mwn = "?";
    double worst = compare_tensors(m, t->grad_mem, CKEY("grad."), &wn, 0), hworst, mworst;
    heads_compare(t, name, &hworst, &hwn, &mworst, &mwn);
    printf("%s (%s pooling%s, tau %g): loss %.9f = head MLM %.6f + late MLM %.6f + %s %.6f (ref %.9f: %.6f %.6f %.6f; rel "
           "%.2e, tol %.1e)\n  worst gradient: encoder %s %.2e, head layers %s %.2e, MLM head %s %.2e\n",
           name, qac_pooling_name((qac_pooling)t->ob.pooling), t->ob.normalize ? ", normalised" : "", t->ob.tau, l.total, l.head, l.mlm, alpha > 0 ? "PAIR" : "contrastive", l.contrastive, ref, r1, r2, r3, lrel, ltol,
           wn, worst, hwn, hworst, mwn, mworst);
#undef CKEY
    CHECK_MSG(lrel <= ltol, "%s loss off by %.3e relative", name, lrel);
    CHECK_MSG(worst <= 1e-4, "%s: encoder gradient of %s off by %.3e", name, wn, worst);
    CHECK_MSG(hworst <= 1e-4, "%s: head-layer gradient of %s off by %.3e", name, hwn, hworst);
    CHECK_MSG(mworst <= 1e-4, "%s: MLM-head gradient of %s off by %.3e", name, mwn, mworst);
    if (dropout > 0) same_with_recompute(t, &batch, name);
    split_free(&a), split_free(&b);
    free(ids), free(labels), free(lens);
    qac_pretrainer_free(t);
    qac_model_free(m);
}

/* ... with --alpha 0.1: the PAIR loss in place of the contrastive one
 * (queries the b side, passages the a side); and with dropout 0.1 in the
 * encoder and the head layers (torch given qac's masks). */
static void cocondenser(void) {
    cocondenser_case("coc", 0, 0, 1);
    cocondenser_case("coc_pair", 0.1f, 0, 1);
    cocondenser_case("coc_drop", 0, 0.1f, 1);
    /* the default model's representation (mean pooling, normalised) at
     * tau 0.05: as the checkpoint's, and chosen explicitly on the cls
     * model; PAIR on it */
    cocondenser_case("coc_mean", 0, 0, 1);
    cocondenser_case("coc_mean_drop", 0, 0.1f, 0);
    cocondenser_case("coc_mean_pair", 0.1f, 0, 1);
}

/* CoT-MAE against torch, through the production step's gradient function:
 * encoder MLM at 0.30 plus a 1-layer decoder that reads the partner text
 * (masked at 0.45) through the backbone's embedding layer with the
 * encoder's [CLS] at position 0. */
static void cotmae_case(const char *name, float dropout, int via_checkpoint) {
    qac_model *m = load_model("tiny");
    int rows, T;
    char key[128];
#define CKEY(suffix) (snprintf(key, sizeof key, "%s.%s", name, suffix), key)
    int32_t *ids = ints(CKEY("enc_ids"), &rows, &T), *labels = ints(CKEY("enc_labels"), &rows, &T);
    int32_t *dids = ints(CKEY("dec_ids"), &rows, &T), *dlabels = ints(CKEY("dec_labels"), &rows, &T);
    int *lens = ints(CKEY("lens"), &rows, NULL), *dlens = ints(CKEY("dec_lens"), &rows, NULL), B = rows / 2;
    qac_pretrainer *t = pretrainer_for(m, QAC_PT_COTMAE, 1, 0, dropout, name, 1.0f, via_checkpoint);
    split a, b, da, db;
    split_side(&a, ids, labels, lens, B, T, 0);
    split_side(&b, ids, labels, lens, B, T, 1);
    split_side(&da, dids, dlabels, dlens, B, T, 0);
    split_side(&db, dids, dlabels, dlens, B, T, 1);
    qac_pt_batch batch = {B, a.s, b.s, da.s, db.s};
    qac_pt_losses l;
    CHECK_OK(qac_pretrainer_grads(t, &batch, &l));

    CKEY("loss");
    double ref = f64_at(key, 0), r1 = f64_at(key, 1), r2 = f64_at(key, 2), lrel = fabs(l.total - ref) / fabs(ref);
    const char *wn = "?", *hwn = "?", *mwn = "?";
    double worst = compare_tensors(m, t->grad_mem, CKEY("grad."), &wn, 0), hworst, mworst;
    heads_compare(t, name, &hworst, &hwn, &mworst, &mwn);
    printf("%s (%s bottleneck): loss %.9f = encoder MLM %.6f + decoder MLM %.6f (ref %.9f: %.6f %.6f; rel %.2e)\n"
           "  worst gradient: encoder %s %.2e, decoder layers %s %.2e, MLM head %s %.2e\n",
           name, qac_pooling_name((qac_pooling)t->ob.pooling), l.total, l.mlm, l.head, ref, r1, r2, lrel, wn, worst, hwn, hworst, mwn, mworst);
#undef CKEY
    CHECK_MSG(lrel <= 1e-6, "%s loss off by %.3e relative", name, lrel);
    CHECK_MSG(worst <= 1e-4, "%s: encoder gradient of %s off by %.3e", name, wn, worst);
    CHECK_MSG(hworst <= 1e-4, "%s: decoder-layer gradient of %s off by %.3e", name, hwn, hworst);
    CHECK_MSG(mworst <= 1e-4, "%s: MLM-head gradient of %s off by %.3e", name, mwn, mworst);
    if (dropout > 0) same_with_recompute(t, &batch, name);
    split_free(&a), split_free(&b), split_free(&da), split_free(&db);
    free(ids), free(labels), free(dids), free(dlabels), free(lens), free(dlens);
    qac_pretrainer_free(t);
    qac_model_free(m);
}

/* ... and with dropout 0.1 in the encoder, on the decoder's embedding
 * output and in the decoder layer (torch given qac's masks). */
static void cotmae(void) {
    cotmae_case("cot", 0, 1);
    cotmae_case("cot_drop", 0.1f, 1);
    /* the decoder reads the mean (--pooling mean on the cls model) */
    cotmae_case("cot_mean", 0, 0);
}

static void qgen(void);

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s FIXTURE grad|gradcache|traj [tiny|minilm]\n", argv[0]);
        return 2;
    }
    CHECK_OK(qac_safetensors_open(&fx, argv[1]));
    if (!fx) return 1;
    int cols = 0;
    q_ids = ints("q_ids", &NQ, &q_T);
    p_ids = ints("p_ids", &NP, &p_T);
    q_lens = ints("q_lens", &NQ, &cols);
    p_lens = ints("p_lens", &NP, &cols);
    NP /= NQ;
    (void)cols;
    if (!strcmp(argv[2], "grad")) grad_parity(argc > 3 ? argv[3] : "tiny");
    else if (!strcmp(argv[2], "gradcache")) gradcache();
    else if (!strcmp(argv[2], "mlm")) mlm();
    else if (!strcmp(argv[2], "cocondenser")) cocondenser();
    else if (!strcmp(argv[2], "cotmae")) cotmae();
    else if (!strcmp(argv[2], "qgen")) qgen();
    else trajectory();
    qac_safetensors_close(fx);
    free(q_ids), free(p_ids), free(q_lens), free(p_lens);
    return qac_test_summary();
}

/* ---- the query-generation objective (trainer/qgen.c) ---- */

/* GPT-2's init: N(0, 0.02) matrices, the two output projections at
 * 0.02 / sqrt(2 layers), biases 0, LayerNorms 1 and 0. */
static void qgen_init_check(const qac_bert_config *c, int layers) {
    qac_qgen_config q;
    qac_qgen_config_default(&q, c);
    q.layers = layers;
    float *mem = malloc(qac_qgen_param_count(&q) * sizeof(float));
    qac_qgen_params p;
    qac_qgen_bind(&p, &q, mem);
    qac_qgen_init(&p, &q, 7);
    float **v = (float **)&p;
    for (int i = 0; i < QAC_QGEN_NUM_TENSORS; i++) {
        const char *nm = qac_qgen_tensor_name(i);
        size_t n = qac_qgen_tensor_size(&q, i);
        double s1 = 0, s2 = 0;
        for (size_t j = 0; j < n; j++) s1 += v[i][j], s2 += (double)v[i][j] * v[i][j];
        double mean = s1 / n, sd = sqrt(s2 / n - mean * mean);
        int is_ln_w = nm[0] == 'l' && nm[strlen(nm) - 1] == 'w';
        if (strstr(nm, "_w") && !is_ln_w) {
            double want = strstr(nm, "proj") ? 0.02 / sqrt(2.0 * layers) : 0.02;
            /* n >= 4096 draws: the sample deviation is within 3% */
            CHECK_MSG(fabs(sd / want - 1) < 0.05 && fabs(mean) < 0.1 * want,
                      "qgen init (%d layers): %s has mean %.2e sd %.4f, want 0 and %.4f", layers, nm, mean, sd, want);
        } else {
            CHECK_MSG(mean == (is_ln_w ? 1.0 : 0.0) && sd == 0, "qgen init: %s is not constant %d", nm, is_ln_w);
        }
    }
    free(mem);
}

/* One fixture case of the query-generation objective, through the
 * production pre-trainer's gradient function (which runs trainer/qgen.c's
 * objective on its own blocks). */
static void qgen_case(qac_model *m, const char *name) {
    const qac_bert_config *c = &m->cfg;
    int C = c->hidden_size, V = c->vocab_size, rows, Tp, Tq, two;
    char key[160];
    snprintf(key, sizeof key, "%s.config", name);
    int *cfg = ints(key, &two, NULL);
    /* the fixture's dropout: the trainer's key of its dropout case (seed 42,
     * step 0), which is the pre-trainer's encoder key at step 0 */
    qac_train_opts o;
    opts_for(&o, 1.0f, QAC_SIM_DOT);
    o.hidden_dropout = o.attn_dropout = cfg[2] / 1000.0f;
    qac_pt_objective_opts ob;
    qac_pt_objective_opts_default(&ob);
    ob.objective = QAC_PT_QGEN;
    ob.head_layers = cfg[0];
    ob.window = cfg[1];
    /* the mean case as the default model runs it: the checkpoint's mean
     * pooling and normalisation; the decoder reads the mean, unnormalised */
    m->pooling = two > 3 && cfg[3] ? QAC_POOL_MEAN : QAC_POOL_CLS, m->normalize = two > 3 && cfg[3];
    free(cfg);
    qac_pretrainer *t = NULL;
    CHECK_OK(qac_pretrainer_create(&t, m, &o, &ob));
    if (!t) exit(1);
    const qac_qgen_config *q = &t->qc;
#define QKEY(suffix) (snprintf(key, sizeof key, "%s.%s", name, suffix), key)
    int32_t *ids = ints(QKEY("enc_ids"), &rows, &Tp), *labels = ints(QKEY("enc_labels"), &rows, &Tp);
    int32_t *qids = ints(QKEY("dec_ids"), &rows, &Tq);
    int *lens = ints(QKEY("lens"), &rows, NULL), *qlens = ints(QKEY("dec_lens"), &rows, NULL), B = rows;
    for (int i = 0; i < QAC_QGEN_NUM_TENSORS; i++) {
        snprintf(key, sizeof key, "%s.dec_init.%s", name, qac_qgen_tensor_name(i));
        const qac_st_tensor *tt = need(key);
        CHECK_MSG(tt->numel == qac_qgen_tensor_size(q, i), "%s: %llu values, qac has %zu", key,
                  (unsigned long long)tt->numel, qac_qgen_tensor_size(q, i));
        qac_safetensors_read_f32(tt, ((float **)&t->qp)[i]);
    }
    float **mv = mlm_views(&t->mlm);
    for (int i = 0; i < QAC_MLM_NUM_TENSORS; i++) {
        snprintf(key, sizeof key, "%s.mlm_init.%s", name, mlm_names[i]);
        qac_safetensors_read_f32(need(key), mv[i]);
    }
    qac_pt_batch bt = {B, {Tp, ids, labels, lens}, {Tq, qids, NULL, qlens}, {0}, {0}};
    qac_pt_losses ls;
    CHECK_OK(qac_pretrainer_grads(t, &bt, &ls));

    QKEY("loss");
    double ref = f64_at(key, 0), ref_enc = f64_at(key, 1), ref_dec = f64_at(key, 2);
    double lrel = fabs(ls.total - ref) / fabs(ref), ltol = fmax(1e-6, 4 * 0x1p-24 * f64_at(key, 3) / fabs(ref));
    const char *wn = "?", *dwn = "?", *mwn = "?";
    double worst = compare_tensors(m, t->grad_mem, QKEY("grad."), &wn, 0), dworst = 0, mworst = 0;
    for (int i = 0; i < QAC_QGEN_NUM_TENSORS; i++) {
        snprintf(key, sizeof key, "%s.dec_grad.%s", name, qac_qgen_tensor_name(i));
        double r = compare_named(((float **)&t->qg)[i], key, qac_qgen_tensor_size(q, i));
        if (r >= dworst) dworst = r, dwn = qac_qgen_tensor_name(i);
    }
    size_t msz[QAC_MLM_NUM_TENSORS] = {(size_t)C * C, (size_t)C, (size_t)C, (size_t)C, (size_t)V};
    float **gv = mlm_views(&t->mg);
    for (int i = 0; i < QAC_MLM_NUM_TENSORS; i++) {
        snprintf(key, sizeof key, "%s.mlm_grad.%s", name, mlm_names[i]);
        double r = compare_named(gv[i], key, msz[i]);
        if (r >= mworst) mworst = r, mwn = mlm_names[i];
    }
    printf("%s (%s bottleneck, %d block%s, window %d, dropout %.2f): loss %.9f = encoder MLM %.6f + next-token %.6f (ref %.9f: %.6f "
           "%.6f; rel %.2e, tol %.1e)\n  worst gradient: encoder %s %.2e, decoder %s %.2e, MLM head %s %.2e\n",
           name, qac_pooling_name(q->pooling), q->layers, q->layers > 1 ? "s" : "", q->window, t->drop.hidden, ls.total, ls.mlm, ls.head, ref, ref_enc,
           ref_dec, lrel, ltol, wn, worst, dwn, dworst, mwn, mworst);
#undef QKEY
    CHECK_MSG(lrel <= ltol, "%s loss off by %.3e relative", name, lrel);
    CHECK_MSG(worst <= 1e-4, "%s: encoder gradient of %s off by %.3e", name, wn, worst);
    CHECK_MSG(dworst <= 1e-4, "%s: decoder gradient of %s off by %.3e", name, dwn, dworst);
    CHECK_MSG(mworst <= 1e-4, "%s: MLM-head gradient of %s off by %.3e", name, mwn, mworst);
    if (t->drop.hidden > 0) same_with_recompute(t, &bt, name);
    free(ids), free(labels), free(qids), free(lens), free(qlens);
    qac_pretrainer_free(t);
}

/* The whole query-generation objective against torch, with the released
 * window of 3 (1 block), plain causal attention (2 blocks), and the window
 * of 3 with dropout 0.1 at every site the released code has. */
static void qgen(void) {
    qac_model *m = load_model("tiny");
    qgen_init_check(&m->cfg, 1);
    qgen_init_check(&m->cfg, 2);
    qgen_case(m, "qgen_w3");
    qgen_case(m, "qgen_w0");
    qgen_case(m, "qgen_drop");
    qgen_case(m, "qgen_mean");
    qac_model_free(m);
}
