/* qac mine: hard negatives from a run or a model and index, as Tevatron
 * jsonl (logic in trainer/mine.c). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "qac_cpu.h"
#include "qac_finetune.h"
#include "qac_rerank.h"
#include "qac_util.h"

static const qac_opt mine_opts[] = {
    {"run", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "TREC run to mine (e.g. from qac bm25 search)", 0},
    {"model", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "query encoder, with --index (instead of --run)", 0},
    {"index", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "dense index built with --model", 0},
    {"queries", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "training queries (TSV, BEIR jsonl, cran.qry)", 1},
    {"queries-format", QAC_OPT_ENUM, "auto", 0, -1, "auto|tsv|beir|tevatron|cranfield", NULL, "queries format", 0},
    {"qrels", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "judgements: relevance >= 1 is a positive (TREC, BEIR, Cranfield)", 1},
    {"corpus", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "corpus the run's docids come from (texts are looked up here)", 1},
    {"corpus-format", QAC_OPT_ENUM, "auto", 0, -1, "auto|tsv|beir|tevatron|cranfield", NULL, "corpus format", 0},
    {"n", QAC_OPT_INT, "30", 1, 100000, NULL, NULL, "negatives kept per query", 0},
    {"depth", QAC_OPT_INT, "200", 1, 1000000, NULL, NULL, "top ranks considered (at most 1000 when searching)", 0},
    {"seed", QAC_OPT_INT, "42", 0, 9.2e18, NULL, "QAC_SEED", "shuffle seed", 0},
    {"out", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "output Tevatron jsonl", 1},
    {"max-len", QAC_OPT_INT, "0", 0, 8192, NULL, NULL,
     "query max tokens when searching (0 = the model's limit, as qac search)", 0},
    {"threads", QAC_OPT_INT, "0", 0, 1024, NULL, "QAC_THREADS", "CPU threads when searching (0 = all cores)", 0},
    {"device", QAC_OPT_ENUM, "auto", 0, -1, "auto|cpu|cuda", "QAC_DEVICE", "encoder and search device", 0},
    {"query-prompt", QAC_OPT_STR, NULL, 0, -1, NULL, "QAC_QUERY_PROMPT",
     "text put before every query when searching (default: the model's \"query\" prompt; '' for none); must be "
     "the one the index was built for", 0},
    {"allow-prompt-mismatch", QAC_OPT_BOOL, "false", 0, -1, NULL, NULL,
     "search even if the query prompt differs from the one the index was built for (a warning)", 0},
    {"denoise", QAC_OPT_STR, NULL, 0, -1, NULL, NULL,
     "a cross-encoder (RocketQA's denoising): candidates it scores at or above --neg-threshold are dropped as "
     "likely false negatives", 0},
    {"neg-threshold", QAC_OPT_FLOAT, "0.1", 0, 1, NULL, NULL,
     "with --denoise: the probability below which a candidate stays a negative (PAIR's and RocketQA's 0.1)", 0},
    QAC_CLI_VERIFY_OPT,
    QAC_CPU_ISA_OPT,
};
#define N_MINE_OPTS (int)(sizeof mine_opts / sizeof mine_opts[0])

int qac_cmd_mine(int argc, char **argv) {
    qac_opts o;
    int rc = qac_cli_parse(&o, "mine",
                           "--run RUN | --model M --index I, --queries Q --qrels R --corpus C [--n N --depth D] "
                           "[--denoise CROSS_ENCODER] --out FILE",
                           mine_opts, N_MINE_OPTS, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    const char *run = qac_opts_str(&o, "run"), *model = qac_opts_str(&o, "model"), *index = qac_opts_str(&o, "index");
    if (!!run == !!(model || index) || (!run && (!model || !index))) {
        fprintf(stderr, "qac mine: give --run RUN, or both --model M and --index I\n");
        qac_opts_free(&o);
        return 2;
    }
    qac_mine_opts mo;
    qac_mine_opts_default(&mo);
    mo.run = run;
    mo.queries = qac_opts_str(&o, "queries");
    mo.qrels = qac_opts_str(&o, "qrels");
    mo.corpus = qac_opts_str(&o, "corpus");
    mo.queries_format = qac_cli_format(qac_opts_str(&o, "queries-format"));
    mo.corpus_format = qac_cli_format(qac_opts_str(&o, "corpus-format"));
    mo.n = (int)qac_opts_int(&o, "n");
    mo.depth = (int)qac_opts_int(&o, "depth");
    mo.seed = (uint64_t)qac_opts_int(&o, "seed");
    mo.out = qac_opts_str(&o, "out");
    mo.q_max = (int)qac_opts_int(&o, "max-len");
    qac_progress_state ps;
    qac_progress_init(&ps, "queries");
    mo.progress = qac_progress_stderr;
    mo.progress_user = &ps;
    qac_model *m = NULL;
    qac_encoder *enc = NULL;
    qac_index *ix = NULL;
    qac_xenc *teacher = NULL;
    qac_reranker *rr = NULL;
    const char *denoise = qac_opts_str(&o, "denoise");
    mo.neg_threshold = (float)qac_opts_float(&o, "neg-threshold");
    double t0 = qac_now();
    qac_status st = qac_check_output_file(mo.out); /* before any reading */
    if (!st) st = qac_check_input(mo.queries);
    if (!st) st = qac_check_input(mo.qrels);
    if (!st) st = qac_check_input(mo.corpus);
    if (!st && run) st = qac_check_input(run);
    if (!st && !run) {
        qac_device dev = qac_cli_device(qac_opts_str(&o, "device"));
        qac_encoder_opts eo = qac_encoder_default_opts();
        eo.device = dev;
        eo.threads = (int)qac_opts_int(&o, "threads");
        char mbuf[4096];
        const char *mdir = qac_cli_model_dir(&o, mbuf, sizeof mbuf);
        st = mdir ? qac_model_load(&m, mdir) : QAC_ERR_NOT_FOUND;
        if (!st) st = qac_cli_apply_prompts(&o, m);
        qac_index_verify verify = QAC_VERIFY_FULL;
        if (!st) st = qac_index_verify_parse(qac_opts_str(&o, "verify"), &verify);
        if (!st) st = qac_index_open_verified(&ix, index, dev, verify);
        if (!st) st = qac_index_set_threads(ix, eo.threads);
        if (!st && (st = qac_index_check_prompts(ix, qac_model_query_prompt(m))) &&
            qac_opts_bool(&o, "allow-prompt-mismatch")) {
            fprintf(stderr, "qac mine: warning: %s\n", qac_last_error());
            st = QAC_OK;
        }
        if (!st) st = qac_index_check_model(ix, m);
        if (!st) st = qac_encoder_create(&enc, m, &eo);
        mo.enc = enc, mo.index = ix;
    }
    if (!st && denoise) {
        char tbuf[4096], note[4096 + 512];
        st = qac_model_resolve(denoise, tbuf, sizeof tbuf, note, sizeof note);
        if (!st && note[0]) fprintf(stderr, "qac: %s\n", note);
        qac_encoder_opts eo = qac_encoder_default_opts();
        eo.device = qac_cli_device(qac_opts_str(&o, "device"));
        eo.threads = (int)qac_opts_int(&o, "threads");
        if (!st) st = qac_xenc_load(&teacher, tbuf);
        if (!st) st = qac_reranker_create(&rr, teacher, &eo);
        mo.denoise = rr;
    }
    qac_mine_stats ms;
    if (!st) st = qac_mine(&mo, &ms);
    if (st) rc = qac_cli_fail("mine");
    else
        qac_summary("mine",
                    "%ld queries, %ld written (%ld negatives, %ld with fewer than %d), %ld without a judged positive "
                    "skipped, in %.1f s -> %s",
                    ms.queries, ms.written, ms.negatives, ms.short_of_negatives, mo.n, ms.skipped_no_positive,
                    qac_now() - t0, mo.out);
    if (!st && denoise)
        qac_summary("mine", "denoised: %ld of %ld candidates the cross-encoder scored dropped (probability >= %g)",
                    ms.denoised, ms.scored, (double)mo.neg_threshold);
    qac_encoder_free(enc);
    qac_reranker_free(rr);
    qac_xenc_free(teacher);
    qac_index_free(ix);
    qac_model_free(m);
    qac_opts_free(&o);
    return rc;
}
