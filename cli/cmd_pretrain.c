/* qac pretrain: continue pre-training an encoder on (passage, query) or
 * (span, span) pairs (logic in trainer/pretrain*.c and trainer/ptdata.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "qac_pretrain.h"
#include "qac_util.h"

static const qac_opt pt_opts[] = {
    {"model", QAC_OPT_STR, NULL, 0, -1, NULL, "QAC_MODEL", "initial checkpoint (default: the embedded default model)", 0},
    {"data", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "pre-training jsonl {\"id\",\"text\",\"queries\":[...]} (.gz ok)", 1},
    {"docs", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "documents jsonl {\"id\",\"text\"} for span pairs (default: --data's texts)", 0},
    {"objective", QAC_OPT_ENUM, "cocondenser", 0, -1, "cocondenser|cotmae|qgen", NULL,
     "contrastive coCondenser, masked CoT-MAE decoder, or query generation (causal decoder)", 0},
    {"context", QAC_OPT_ENUM, "query", 0, -1, "query|span|mixed", NULL,
     "a pair's second text: one of the passage's queries, a second span, or either (p = 0.5)", 0},
    {"curriculum", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "span:0.75,query: span pairs for 75% of the steps (warmup + cosine), then query pairs (constant lr); overrides --context and --schedule", 0},
    {"out", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "run directory: checkpoints, log.jsonl; the final encoder itself", 1},
    {"steps", QAC_OPT_INT, "1000", 1, 1e12, NULL, NULL, "optimiser steps", 0},
    {"batch", QAC_OPT_INT, "16", 1, 65536, NULL, NULL, "pairs per step (2 texts each)", 0},
    {"lr", QAC_OPT_FLOAT, "1e-4", 0, 1, NULL, NULL, "peak learning rate", 0},
    QAC_CLI_SCHEDULE_OPTS,
    {"max-grad-norm", QAC_OPT_FLOAT, "1.0", 0, 1e9, NULL, NULL, "global gradient-norm clip over encoder and heads (0 = none)", 0},
    {"mask-rate", QAC_OPT_FLOAT, "0.15", 0.001, 1, NULL, NULL, "coCondenser whole-word MLM rate", 0},
    {"enc-mask-rate", QAC_OPT_FLOAT, "0.30", 0.001, 1, NULL, NULL, "CoT-MAE / qgen encoder MLM rate (qgen's queries stay unmasked)", 0},
    {"dec-mask-rate", QAC_OPT_FLOAT, "0.45", 0.001, 1, NULL, NULL, "CoT-MAE decoder MLM rate", 0},
    {"skip-from", QAC_OPT_INT, NULL, 0, 64, NULL, NULL, "Condenser head reads the states after this layer (default: half the depth)", 0},
    {"head-layers", QAC_OPT_INT, NULL, 1, 64, NULL, NULL, "fresh head layers (default: 2 Condenser, 1 decoder)", 0},
    {"qgen-window", QAC_OPT_INT, "3", 0, 1 << 20, NULL, NULL,
     "qgen decoder attention: row i sees [CLS] and the last N tokens (3 as released; 0 = plain causal)", 0},
    {"pooling", QAC_OPT_ENUM, "checkpoint", 0, -1, "checkpoint|cls|mean", NULL,
     "the representation: the checkpoint's pooling (what retrieval uses), the last layer's [CLS], or the mean over "
     "real tokens; the heads read it at position 0, before normalisation", 0},
    {"normalize", QAC_OPT_ENUM, "checkpoint", 0, -1, "checkpoint|true|false", NULL,
     "L2-normalise the representation for the contrastive / PAIR loss (checkpoint: as the checkpoint does; with it "
     "use a --tau such as 0.05)", 0},
    {"tau", QAC_OPT_FLOAT, "1.0", 1e-6, 1e6, NULL, NULL, "contrastive temperature", 0},
    {"alpha", QAC_OPT_FLOAT, "0", 0, 1, NULL, NULL, "> 0: the PAIR loss (1-alpha) L_q + alpha L_p instead of the contrastive loss", 0},
    {"max-len", QAC_OPT_INT, "144", 4, 8192, NULL, NULL, "passage and span max tokens incl. specials", 0},
    {"query-max-len", QAC_OPT_INT, "32", 3, 8192, NULL, NULL, "query max tokens incl. specials", 0},
    QAC_CLI_DROPOUT_OPTS,
    {"seed", QAC_OPT_INT, "42", 0, 9.2e18, NULL, "QAC_SEED", "seed for pairs, masks, dropout and fresh heads", 0},
    QAC_CLI_PROMPT_OPTS,
    QAC_CLI_RUN_OPTS,
};
#define N_PT_OPTS (int)(sizeof pt_opts / sizeof pt_opts[0])

typedef struct ui {
    int quiet;
    int contrastive; /* the objective has a contrastive part to show */
} ui;

static void print_note(void *user, const char *line) {
    ui *u = user;
    if (!u->quiet) fprintf(stderr, "qac pretrain: %s\n", line);
}

static int print_step(void *user, const qac_pt_progress *p) {
    ui *u = user;
    if (u->quiet) return 0;
    char eta[32], parts[96];
    qac_cli_fmt_eta(eta, sizeof eta, p->elapsed / (double)p->steps_run * (double)(p->total - p->step));
    if (u->contrastive)
        snprintf(parts, sizeof parts, "mlm %.3f head %.3f cl %.3f", p->mlm, p->head, p->contrastive);
    else
        snprintf(parts, sizeof parts, "mlm %.3f dec %.3f", p->mlm, p->head);
    fprintf(stderr, "step %ld/%ld  loss %.4f (%s)  lr %.3g  grad_norm %.3f  span %.2f  %.1f pairs/s  ETA %s\n",
            p->step, p->total, p->loss, parts, p->lr, p->grad_norm, p->span_frac, p->pairs / p->seconds, eta);
    return 0;
}

int qac_cmd_pretrain(int argc, char **argv) {
    qac_opts o;
    int rc = qac_cli_parse(&o, "pretrain",
                           "--model INIT --data FILE [--docs FILE] --objective cocondenser|cotmae|qgen "
                           "--context query|span|mixed [--curriculum span:0.75,query] --out DIR [options]",
                           pt_opts, N_PT_OPTS, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    int on_cuda = !strcmp(qac_opts_str(&o, "device"), "cuda");
    qac_pretrain_opts po;
    qac_pretrain_opts_default(&po);
    if (qac_pt_objective_parse(&po.obj.objective, qac_opts_str(&o, "objective")) ||
        qac_pt_pooling_parse(&po.obj.pooling, &po.obj.normalize, qac_opts_str(&o, "pooling"),
                             qac_opts_str(&o, "normalize")) ||
        qac_pt_context_parse(&po.context, qac_opts_str(&o, "context"), qac_opts_str(&o, "curriculum"))) {
        fprintf(stderr, "qac pretrain: %s\n(see 'qac pretrain --help')\n", qac_last_error());
        qac_opts_free(&o);
        return 2;
    }
    if (on_cuda) {
        if (!qac_cuda_available()) {
#ifdef QAC_HAVE_CUDA
            fprintf(stderr, "qac pretrain: --device cuda, but no usable CUDA GPU is present\n");
#else
            fprintf(stderr, "qac pretrain: --device cuda, but qac was built without CUDA\n");
#endif
            qac_opts_free(&o);
            return 2;
        }
    }
    ui u = {getenv("QAC_QUIET") && strcmp(getenv("QAC_QUIET"), "0") != 0, po.obj.objective == QAC_PT_COCONDENSER};
    po.train.lr = qac_opts_float(&o, "lr");
    const char *sch = qac_opts_str(&o, "schedule");
    po.train.schedule = !strcmp(sch, "cosine") ? QAC_SCHED_COSINE : !strcmp(sch, "constant") ? QAC_SCHED_CONSTANT
                                                                                               : QAC_SCHED_LINEAR;
    po.warmup_ratio = qac_opts_float(&o, "warmup-ratio");
    po.train.warmup_steps = qac_opts_isset(&o, "warmup-steps") ? (long)qac_opts_int(&o, "warmup-steps") : -1;
    po.train.weight_decay = qac_opts_float(&o, "weight-decay");
    po.train.max_grad_norm = qac_opts_float(&o, "max-grad-norm");
    po.train.total_steps = (long)qac_opts_int(&o, "steps");
    po.train.hidden_dropout = po.train.attn_dropout = (float)qac_opts_float(&o, "dropout");
    po.train.recompute = qac_opts_bool(&o, "recompute");
    po.train.seed = (uint64_t)qac_opts_int(&o, "seed");
    po.train.threads = (int)qac_opts_int(&o, "threads");
    po.train.device = on_cuda ? QAC_DEVICE_CUDA : QAC_DEVICE_CPU;
    po.train.gpu_precision = !strcmp(qac_opts_str(&o, "train-precision"), "fp32") ? QAC_PREC_FP32 : QAC_PREC_BF16;
    po.obj.mask_rate = (float)qac_opts_float(&o, "mask-rate");
    po.obj.enc_mask_rate = (float)qac_opts_float(&o, "enc-mask-rate");
    po.obj.dec_mask_rate = (float)qac_opts_float(&o, "dec-mask-rate");
    po.obj.skip_from = qac_opts_isset(&o, "skip-from") ? (int)qac_opts_int(&o, "skip-from") : -1;
    po.obj.head_layers = qac_opts_isset(&o, "head-layers") ? (int)qac_opts_int(&o, "head-layers") : 0;
    po.obj.tau = (float)qac_opts_float(&o, "tau");
    po.obj.alpha = (float)qac_opts_float(&o, "alpha");
    po.obj.window = (int)qac_opts_int(&o, "qgen-window");
    po.batch = (int)qac_opts_int(&o, "batch");
    po.data.path = qac_opts_str(&o, "data");
    po.data.docs_path = qac_opts_str(&o, "docs");
    po.data.max_len = (int)qac_opts_int(&o, "max-len");
    po.data.query_max_len = (int)qac_opts_int(&o, "query-max-len");
    po.data.threads = po.train.threads;
    qac_progress_state ps;
    qac_progress_init(&ps, "records");
    po.data.progress = qac_progress_stderr;
    po.data.progress_user = &ps;
    po.out_dir = qac_opts_str(&o, "out");
    po.save_every = (long)qac_opts_int(&o, "save-every");
    po.keep = (int)qac_opts_int(&o, "keep");
    po.resume = qac_opts_bool(&o, "resume");
    po.on_note = print_note;
    po.on_step = print_step;
    po.user = &u;

    qac_model *m = NULL;
    char buf[4096];
    if (qac_cli_check_run_dir(po.out_dir)) { /* a command-line error, said before any data loads */
        qac_cli_fail("pretrain");
        qac_opts_free(&o);
        return 2;
    }
    const char *model_dir = qac_cli_model_dir(&o, buf, sizeof buf);
    qac_status st = model_dir ? QAC_OK : QAC_ERR_NOT_FOUND;
    if (!st) st = qac_model_load(&m, model_dir);
    /* queries and passages get the prompts; the exported encoder keeps them */
    if (!st) st = qac_cli_apply_prompts(&o, m);
    if (!st) po.data.query_prompt = qac_model_query_prompt(m), po.data.passage_prompt = qac_model_passage_prompt(m);
    long from = 0;
    double t0 = qac_now();
    if (!st && !u.quiet) {
        char rep[256], qp[256], pp[256];
        qac_pt_pooling_describe(rep, sizeof rep, &po.obj, m);
        fprintf(stderr, "qac pretrain: model %s, objective %s, %d pairs per step, %ld steps; %s; prompts: query %s, "
                        "passage %s\n", model_dir, qac_opts_str(&o, "objective"), po.batch, po.train.total_steps, rep,
                qac_cli_quote_prompt(qp, sizeof qp, po.data.query_prompt),
                qac_cli_quote_prompt(pp, sizeof pp, po.data.passage_prompt));
    }
    if (!st) st = qac_pretrain_run(m, &po, &from);
    if (st) rc = qac_cli_fail("pretrain"), rc = st == QAC_ERR_MISMATCH ? 2 : rc; /* as finetune: a changed option */
    else
        qac_summary("pretrain", "steps %ld..%ld done in %.1f s; the encoder is in %s (checkpoints with the heads beside "
                    "it)",
                    from + 1, po.train.total_steps, qac_now() - t0, po.out_dir);
    qac_model_free(m);
    qac_opts_free(&o);
    return rc;
}
