/* qac finetune: train a retriever from a checkpoint on Tevatron-style
 * groups (logic in trainer/finetune.c and trainer/ftdata.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "qac_cpu.h"
#include "qac_finetune.h"
#include "qac_rerank.h"
#include "qac_util.h"

static const qac_opt ft_opts[] = {
    {"model", QAC_OPT_STR, NULL, 0, -1, NULL, "QAC_MODEL", "initial checkpoint (default: the embedded default model)", 0},
    {"train", QAC_OPT_LIST, NULL, 0, -1, NULL, NULL, "Tevatron jsonl training file (repeatable)", 0},
    {"train-triples", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "MS MARCO qidpidtriples (needs --train-queries/--train-corpus)", 0},
    {"train-qrels", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "qrels as positives only (needs --train-queries/--train-corpus)", 0},
    {"train-queries", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "queries for --train-triples / --train-qrels", 0},
    {"train-corpus", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "corpus for --train-triples / --train-qrels", 0},
    {"out", QAC_OPT_STR, NULL, 0, -1, NULL, NULL,
     "run directory: the final model itself (what --model DIR loads), checkpoints, log.jsonl, dev.jsonl", 1},
    {"lr", QAC_OPT_FLOAT, "2e-5", 0, 1, NULL, NULL, "peak learning rate", 0},
    QAC_CLI_SCHEDULE_OPTS,
    {"max-grad-norm", QAC_OPT_FLOAT, "1.0", 0, 1e9, NULL, NULL, "global gradient-norm clip (0 = none)", 0},
    {"epochs", QAC_OPT_FLOAT, "3", 0, 1e6, NULL, NULL, "epochs over the training examples", 0},
    {"steps", QAC_OPT_INT, "0", 0, 1e12, NULL, NULL, "optimiser steps (0 = from --epochs)", 0},
    {"batch", QAC_OPT_INT, "8", 1, 65536, NULL, NULL, "queries per batch", 0},
    {"n-passages", QAC_OPT_INT, "8", 1, 1024, NULL, NULL, "passages per query: 1 positive + n-1 negatives", 0},
    {"q-max-len", QAC_OPT_INT, "32", 2, 8192, NULL, NULL, "query max tokens incl. specials", 0},
    {"p-max-len", QAC_OPT_INT, "128", 2, 8192, NULL, NULL, "passage max tokens incl. specials", 0},
    {"tau", QAC_OPT_FLOAT, NULL, 1e-6, 1e6, NULL, NULL,
     "InfoNCE temperature (default: 0.05 for a model that normalises its embeddings, 1.0 for one that does not)", 0},
    {"sim", QAC_OPT_ENUM, "dot", 0, -1, "dot|cos", NULL, "similarity (after the checkpoint's pooling/normalisation)", 0},
    {"alpha", QAC_OPT_FLOAT, "0", 0, 1, NULL, NULL, "> 0: the PAIR loss (1-alpha) L_q + alpha L_p instead of InfoNCE (--tau, --sim unused)", 0},
    {"chunk", QAC_OPT_INT, "0", 0, 1 << 20, NULL, NULL, "GradCache chunk in sequences (0 = whole batch at once)", 0},
    QAC_CLI_DROPOUT_OPTS,
    {"seed", QAC_OPT_INT, "42", 0, 9.2e18, NULL, "QAC_SEED", "seed for sampling, order and dropout", 0},
    QAC_CLI_RUN_OPTS,
    {"dev-queries", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "dev queries, scored at every save", 0},
    {"dev-qrels", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "dev qrels", 0},
    {"dev-corpus", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "dev corpus (ranked exhaustively)", 0},
    {"dev-depth", QAC_OPT_INT, "100", 1, 100000, NULL, NULL, "passages ranked per dev query", 0},
    {"title-join", QAC_OPT_ENUM, NULL, 0, -1, "sep|space", NULL,
     "passage text: 'title [SEP] text' ([SEP]: the model's separator, </s> for RoBERTa) or 'title text' "
     "(default: sep; space with --cross-encoder, as qac rerank joins them)", 0},
    {"cross-encoder", QAC_OPT_BOOL, "false", 0, -1, NULL, NULL,
     "train a reranker instead: [CLS] query [SEP] passage [SEP] through the encoder, its pooler and a classifier "
     "(fresh unless --model is a cross-encoder), softmax cross-entropy over each group (the CPU only)", 0},
    {"num-labels", QAC_OPT_INT, "1", 1, 2, NULL, NULL,
     "--cross-encoder: logits of a fresh classifier (1, or 2 whose difference ranks)", 0},
    {"max-len", QAC_OPT_INT, "0", 0, 8192, NULL, NULL,
     "--cross-encoder: pair length incl. specials (0 = --q-max-len + --p-max-len)", 0},
    QAC_CLI_PAIR_OPTS,
    {"dev-run", QAC_OPT_STR, NULL, 0, -1, NULL, NULL,
     "--cross-encoder: the dev queries' first-stage run, its top --dev-depth reranked at every save", 0},
    {"dump-batches", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "write every step's query and passage texts as jsonl (with --cross-encoder: the groups' query ids and docids too)", 0},
    {"dry-run", QAC_OPT_BOOL, "false", 0, -1, NULL, NULL, "sample (and --dump-batches) without training", 0},
    QAC_CLI_PROMPT_OPTS,
    QAC_CPU_ISA_OPT,
};
#define N_FT_OPTS (int)(sizeof ft_opts / sizeof ft_opts[0])

typedef struct ui {
    int quiet, pairs;
    long resumed;
} ui;

static int print_step(void *user, const qac_ft_progress *p) {
    ui *u = user;
    if (u->quiet) return 0;
    double per = p->elapsed / (double)p->steps_run;
    char eta[32];
    qac_cli_fmt_eta(eta, sizeof eta, per * (double)(p->total - p->step));
    fprintf(stderr, "step %ld/%ld  epoch %.2f  loss %.4f  lr %.3g  grad_norm %.3f  %.1f %s/s  ETA %s\n", p->step,
            p->total, p->epoch, p->loss, p->lr, p->grad_norm, p->passages / p->seconds, u->pairs ? "pairs" : "passages",
            eta);
    return 0;
}

static void print_dev(void *user, const qac_ft_dev *r) {
    ui *u = user;
    if (u->quiet) return;
    fprintf(stderr, "dev at step %ld: ndcg_cut_10 %.4f  map %.4f  recall_100 %.4f  recip_rank@10 %.4f  (%.1f s)\n",
            r->step, r->ndcg10, r->map, r->recall100, r->mrr10, r->seconds);
}

/* whether the user gave the option (flag, config file or environment), not its default */
static int given(const qac_opts *o, const char *name) {
    for (int i = 0; i < o->n; i++)
        if (!strcmp(o->table[i].name, name)) return o->source[i] > QAC_SRC_DEFAULT;
    return 0;
}

/* --cross-encoder: the reranker's run (trainer/xenc_run.c) */
static int run_cross(const qac_opts *o, const qac_finetune_opts *fo, const qac_ft_data *d, const char *model_dir,
                     const ui *u) {
    qac_xenc_train_opts xo;
    qac_xenc_train_opts_default(&xo);
    xo.ft = *fo;
    xo.max_len = qac_opts_int(o, "max-len") ? (int)qac_opts_int(o, "max-len") : fo->q_max + fo->p_max;
    xo.dev_run = qac_opts_str(o, "dev-run");
    qac_pair_opts po;
    qac_status st = qac_cli_pair_opts(o, &po);
    xo.truncation = po.strategy;
    if (!st && po.side != QAC_TRUNC_RIGHT)
        st = qac_set_error(QAC_ERR_UNSUPPORTED, "--truncation-side left: training pairs keep each text's start");
    qac_xenc *x = NULL;
    int fresh = 0, rc = 0;
    if (!st) st = qac_xenc_open(&x, model_dir, (int)qac_opts_int(o, "num-labels"), fo->train.seed, &fresh);
    if (!st && !fresh && given(o, "num-labels") && qac_opts_int(o, "num-labels") != x->num_labels)
        st = qac_set_error(QAC_ERR_INVALID, "%s is a cross-encoder with %d labels, not --num-labels %lld", model_dir,
                           x->num_labels, qac_opts_int(o, "num-labels"));
    if (!st && !u->quiet)
        fprintf(stderr,
                "qac finetune: cross-encoder from %s (%s), %d label%s; %zu examples, %d x %d pairs per step of %d "
                "tokens (%s)\n",
                model_dir,
                fresh == 0   ? "its classifier and pooler"
                : fresh == 1 ? "its pooler, a fresh classifier"
                             : "a fresh pooler and classifier",
                x->num_labels, x->num_labels == 1 ? "" : "s", qac_ft_data_count(d), fo->queries_per_batch,
                fo->n_passages, xo.max_len, qac_truncation_name(xo.truncation));
    long total = 0, from = 0;
    double t0 = qac_now();
    if (!st) st = qac_xenc_train_run(x, d, &xo, &total, &from);
    if (st) rc = qac_cli_fail("finetune"), rc = st == QAC_ERR_MISMATCH ? 2 : rc;
    else
        qac_summary("finetune", "steps %ld..%ld done in %.1f s; the reranker is in %s (checkpoints beside it)",
                    from + 1, total, qac_now() - t0, fo->out_dir);
    qac_xenc_free(x);
    return rc;
}

int qac_cmd_finetune(int argc, char **argv) {
    qac_opts o;
    int rc = qac_cli_parse(&o, "finetune", "--model INIT --train FILE... --out DIR [options]", ft_opts, N_FT_OPTS,
                           argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    const char *train = qac_opts_str(&o, "train"), *triples = qac_opts_str(&o, "train-triples"),
               *tq = qac_opts_str(&o, "train-qrels"), *queries = qac_opts_str(&o, "train-queries"),
               *corpus = qac_opts_str(&o, "train-corpus");
    if (!train && !triples && !tq) {
        fprintf(stderr, "qac finetune: give --train FILE, --train-triples or --train-qrels\n");
        qac_opts_free(&o);
        return 2;
    }
    if ((triples || tq) && (!queries || !corpus)) {
        fprintf(stderr, "qac finetune: --train-triples and --train-qrels need --train-queries and --train-corpus\n");
        qac_opts_free(&o);
        return 2;
    }
    int on_cuda = !strcmp(qac_opts_str(&o, "device"), "cuda");
    if (on_cuda && !qac_cuda_available()) {
#ifdef QAC_HAVE_CUDA
        fprintf(stderr, "qac finetune: --device cuda, but no usable CUDA GPU is present\n");
#else
        fprintf(stderr, "qac finetune: --device cuda, but qac was built without CUDA\n");
#endif
        qac_opts_free(&o);
        return 2;
    }
    int cross = qac_opts_bool(&o, "cross-encoder");
    ui u = {getenv("QAC_QUIET") && strcmp(getenv("QAC_QUIET"), "0") != 0, cross, 0};
    if (cross) {
        static const char *const bi_only[] = {"tau", "sim", "alpha", "query-prompt", "passage-prompt"};
        for (size_t i = 0; i < sizeof bi_only / sizeof *bi_only; i++)
            if (given(&o, bi_only[i])) {
                fprintf(stderr, "qac finetune: --%s is a bi-encoder option; a --cross-encoder run does not take it\n",
                        bi_only[i]);
                qac_opts_free(&o);
                return 2;
            }
        if (on_cuda || qac_opts_bool(&o, "dry-run")) {
            fprintf(stderr, "qac finetune: --cross-encoder trains on the CPU and has no --dry-run\n");
            qac_opts_free(&o);
            return 2;
        }
    } else if (given(&o, "dev-run") || given(&o, "max-len") || given(&o, "num-labels") || given(&o, "truncation") ||
               given(&o, "truncation-side")) {
        fprintf(stderr, "qac finetune: --dev-run, --max-len, --num-labels and --truncation are --cross-encoder "
                        "options\n");
        qac_opts_free(&o);
        return 2;
    }
    qac_finetune_opts fo;
    qac_finetune_opts_default(&fo);
    fo.train.lr = qac_opts_float(&o, "lr");
    const char *sch = qac_opts_str(&o, "schedule");
    fo.train.schedule = !strcmp(sch, "cosine") ? QAC_SCHED_COSINE : !strcmp(sch, "constant") ? QAC_SCHED_CONSTANT
                                                                                               : QAC_SCHED_LINEAR;
    fo.warmup_ratio = qac_opts_float(&o, "warmup-ratio");
    fo.train.warmup_steps = qac_opts_isset(&o, "warmup-steps") ? (long)qac_opts_int(&o, "warmup-steps") : -1;
    fo.train.weight_decay = qac_opts_float(&o, "weight-decay");
    fo.train.max_grad_norm = qac_opts_float(&o, "max-grad-norm");
    fo.epochs = qac_opts_float(&o, "epochs");
    fo.train.total_steps = (long)qac_opts_int(&o, "steps");
    fo.queries_per_batch = (int)qac_opts_int(&o, "batch");
    fo.n_passages = (int)qac_opts_int(&o, "n-passages");
    fo.q_max = (int)qac_opts_int(&o, "q-max-len");
    fo.p_max = (int)qac_opts_int(&o, "p-max-len");
    fo.train.tau = (float)qac_opts_float(&o, "tau"); /* unset: from the model, below */
    fo.train.sim = !strcmp(qac_opts_str(&o, "sim"), "cos") ? QAC_SIM_COS : QAC_SIM_DOT;
    fo.train.pair_alpha = (float)qac_opts_float(&o, "alpha");
    fo.train.chunk = (int)qac_opts_int(&o, "chunk");
    fo.train.hidden_dropout = fo.train.attn_dropout = (float)qac_opts_float(&o, "dropout");
    fo.train.recompute = qac_opts_bool(&o, "recompute");
    fo.train.seed = (uint64_t)qac_opts_int(&o, "seed");
    fo.train.threads = (int)qac_opts_int(&o, "threads");
    fo.train.device = on_cuda ? QAC_DEVICE_CUDA : QAC_DEVICE_CPU;
    fo.train.gpu_precision = !strcmp(qac_opts_str(&o, "train-precision"), "fp32") ? QAC_PREC_FP32 : QAC_PREC_BF16;
    fo.out_dir = qac_opts_str(&o, "out");
    fo.save_every = (long)qac_opts_int(&o, "save-every");
    fo.keep = (int)qac_opts_int(&o, "keep");
    fo.resume = qac_opts_bool(&o, "resume");
    fo.dev_queries = qac_opts_str(&o, "dev-queries");
    fo.dev_qrels = qac_opts_str(&o, "dev-qrels");
    fo.dev_corpus = qac_opts_str(&o, "dev-corpus");
    fo.dev_depth = (int)qac_opts_int(&o, "dev-depth");
    fo.dump_batches = qac_opts_str(&o, "dump-batches");
    fo.dry_run = qac_opts_bool(&o, "dry-run");
    fo.on_step = print_step;
    fo.on_dev = print_dev;
    fo.user = &u;

    qac_ft_data *d = NULL;
    qac_model *m = NULL;
    char buf[4096];
    qac_status st = fo.dry_run ? QAC_OK : qac_cli_check_run_dir(fo.out_dir);
    if (!st && fo.dump_batches) st = qac_check_output_file(fo.dump_batches);
    if (st) { /* a command-line error, said before any data loads */
        qac_cli_fail("finetune");
        qac_opts_free(&o);
        return 2;
    }
    const char *model_dir = qac_cli_model_dir(&o, buf, sizeof buf);
    st = model_dir ? QAC_OK : QAC_ERR_NOT_FOUND;
    /* the LIST option joins repeated values with ',' */
    char *copy = train ? strdup(train) : NULL, *save = NULL;
    const char *files[256];
    const char *tj = qac_opts_str(&o, "title-join");
    qac_ft_sources src = {files, 0, triples, tq, queries, corpus,
                          (tj ? !strcmp(tj, "space") : cross) ? QAC_TITLE_SPACE : QAC_TITLE_SEP, NULL};
    if (!st && train && !copy) st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
    for (char *f = copy ? strtok_r(copy, ",", &save) : NULL; f && !st; f = strtok_r(NULL, ",", &save))
        if (src.n_tevatron < 256) files[src.n_tevatron++] = f;
        else st = qac_set_error(QAC_ERR_INVALID, "more than 256 --train files");
    /* the bi-encoder first: a title joins its text with the model's separator */
    if (!st && !cross) st = qac_model_load(&m, model_dir);
    if (!st && m && m->tok) src.sep_token = qac_tokenizer_id_to_token(m->tok, qac_tokenizer_specials(m->tok).sep);
    if (!st) st = qac_ft_data_load(&d, &src, fo.n_passages);
    free(copy);
    if (d && !u.quiet && (qac_ft_data_skipped_no_positive(d) || qac_ft_data_skipped_no_negative(d)))
        fprintf(stderr, "qac finetune: skipped %ld queries without a positive and %ld without negatives\n",
                qac_ft_data_skipped_no_positive(d), qac_ft_data_skipped_no_negative(d));
    if (cross) {
        if (!st) rc = run_cross(&o, &fo, d, model_dir, &u);
        else rc = qac_cli_fail("finetune");
        qac_ft_data_free(d);
        qac_opts_free(&o);
        return rc;
    }
    /* the checkpoints keep the prompts (config_sentence_transformers.json) */
    if (!st) st = qac_cli_apply_prompts(&o, m);
    /* InfoNCE over unit vectors needs a low temperature to separate scores
     * in [-1, 1]; dot products of unnormalised vectors take tau = 1 */
    const char *tau_why = "given";
    if (!st && !qac_opts_isset(&o, "tau")) {
        fo.train.tau = m->normalize ? 0.05f : 1.0f;
        tau_why = m->normalize ? "the model normalises its embeddings"
                  : fo.train.sim == QAC_SIM_COS ? "the model's dot products; with --sim cos consider --tau 0.05"
                                                : "the model's dot products";
    }
    long total = 0, from = 0;
    double t0 = qac_now();
    char qp[256], pp[256];
    if (!st && !u.quiet)
        fprintf(stderr,
                "qac finetune: %zu examples, model %s, %d x %d passages per step, tau %g (%s), prompts: query %s, "
                "passage %s\n",
                qac_ft_data_count(d), model_dir, fo.queries_per_batch, fo.n_passages, (double)fo.train.tau, tau_why,
                qac_cli_quote_prompt(qp, sizeof qp, qac_model_query_prompt(m)),
                qac_cli_quote_prompt(pp, sizeof pp, qac_model_passage_prompt(m)));
    if (!st) st = qac_finetune_run(m, d, &fo, &total, &from);
    /* a resume that contradicts the run is a command-line error */
    if (st) rc = qac_cli_fail("finetune"), rc = st == QAC_ERR_MISMATCH ? 2 : rc;
    else if (!fo.dry_run)
        qac_summary("finetune", "steps %ld..%ld done in %.1f s; the model is in %s (checkpoints beside it)", from + 1,
                    total, qac_now() - t0, fo.out_dir);
    qac_model_free(m);
    qac_ft_data_free(d);
    qac_opts_free(&o);
    return rc;
}
