/* qac label: PAIR's teacher, pseudo-labels from a cross-encoder over a
 * first-stage run (logic in trainer/label.c). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "qac_cpu.h"
#include "qac_rerank.h"
#include "qac_util.h"

static const qac_opt label_opts[] = {
    {"model", QAC_OPT_STR, NULL, 0, -1, NULL, "QAC_RERANKER", "the teacher: a cross-encoder directory", 1},
    {"run", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "first-stage TREC run of the queries to label (the candidates)", 1},
    {"queries", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "the run's queries (TSV, BEIR jsonl, cran.qry)", 1},
    {"queries-format", QAC_OPT_ENUM, "auto", 0, -1, "auto|tsv|beir|tevatron|cranfield", NULL, "queries format", 0},
    {"corpus", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "corpus the run's docids come from", 1},
    {"corpus-format", QAC_OPT_ENUM, "auto", 0, -1, "auto|tsv|beir|tevatron|cranfield", NULL, "corpus format", 0},
    {"qrels", QAC_OPT_STR, NULL, 0, -1, NULL, NULL,
     "judgements of labelled queries, if any: their positives stay positives and are never negatives", 0},
    {"pos-threshold", QAC_OPT_FLOAT, "0.9", 0, 1, NULL, NULL,
     "a candidate the teacher scores above this probability is a positive (PAIR's 0.9)", 0},
    {"neg-threshold", QAC_OPT_FLOAT, "0.1", 0, 1, NULL, NULL,
     "a candidate scored below this probability is a hard negative (PAIR's 0.1); between the two: dropped", 0},
    {"depth", QAC_OPT_INT, "100", 1, 1000000, NULL, NULL, "candidates scored per query (the run's top)", 0},
    {"n", QAC_OPT_INT, "30", 1, 100000, NULL, NULL, "negatives kept per query: the highest-ranked below the threshold",
     0},
    {"out", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "Tevatron jsonl (qac finetune --train)", 1},
    {"pretrain-out", QAC_OPT_STR, NULL, 0, -1, NULL, NULL,
     "also pre-training jsonl {\"id\",\"text\",\"queries\"} (qac pretrain --data): each positive passage with the "
     "queries labelled for it", 0},
    {"max-len", QAC_OPT_INT, "0", 0, 8192, NULL, NULL, "pair length incl. specials (0 = the model's)", 0},
    QAC_CLI_PAIR_OPTS,
    {"device", QAC_OPT_ENUM, "auto", 0, -1, "auto|cpu|cuda", "QAC_DEVICE", "encoder device", 0},
    {"threads", QAC_OPT_INT, "0", 0, 1024, NULL, "QAC_THREADS", "CPU threads (0 = all cores)", 0},
    {"dtype", QAC_OPT_ENUM, "fp32", 0, -1, "fp32|bf16|int8", "QAC_DTYPE",
     "CPU encoder precision: bf16 runs the linear layers in bf16 (fp32 sums), int8 in int8 (int32 sums, VNNI; fp32 "
     "on a CPU without it)", 0},
    QAC_CPU_ISA_OPT,
};
#define N_OPTS (int)(sizeof label_opts / sizeof label_opts[0])

int qac_cmd_label(int argc, char **argv) {
    qac_opts o;
    int rc = qac_cli_parse(&o, "label",
                           "--model TEACHER --run RUN --queries Q --corpus C [--qrels R] [--pos-threshold 0.9 "
                           "--neg-threshold 0.1] --out FILE [--pretrain-out FILE]",
                           label_opts, N_OPTS, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    qac_label_opts lo;
    qac_label_opts_default(&lo);
    qac_status st = qac_cli_pair_opts(&o, &lo.pair);
    if (st) {
        fprintf(stderr, "qac label: %s\n", qac_last_error());
        qac_opts_free(&o);
        return 2;
    }
    lo.run = qac_opts_str(&o, "run"), lo.queries = qac_opts_str(&o, "queries"), lo.corpus = qac_opts_str(&o, "corpus");
    lo.qrels = qac_opts_str(&o, "qrels"), lo.out = qac_opts_str(&o, "out");
    lo.pretrain_out = qac_opts_str(&o, "pretrain-out");
    lo.queries_format = qac_cli_format(qac_opts_str(&o, "queries-format"));
    lo.corpus_format = qac_cli_format(qac_opts_str(&o, "corpus-format"));
    lo.pos_threshold = (float)qac_opts_float(&o, "pos-threshold");
    lo.neg_threshold = (float)qac_opts_float(&o, "neg-threshold");
    lo.depth = (int)qac_opts_int(&o, "depth");
    lo.n = (int)qac_opts_int(&o, "n");
    if (!(lo.pos_threshold > lo.neg_threshold)) {
        fprintf(stderr, "qac label: --pos-threshold (%g) must be above --neg-threshold (%g)\n",
                (double)lo.pos_threshold, (double)lo.neg_threshold);
        qac_opts_free(&o);
        return 2;
    }
    qac_progress_state ps;
    qac_progress_init(&ps, "queries");
    lo.progress = qac_progress_stderr;
    lo.progress_user = &ps;
    qac_encoder_opts eo = qac_encoder_default_opts();
    eo.device = qac_cli_device(qac_opts_str(&o, "device"));
    eo.threads = (int)qac_opts_int(&o, "threads");
    eo.cpu_precision = qac_cli_dtype(qac_opts_str(&o, "dtype"));
    qac_xenc *x = NULL;
    qac_reranker *r = NULL;
    double t0 = qac_now();
    char mbuf[4096];
    const char *mdir = qac_cli_model_dir(&o, mbuf, sizeof mbuf);
    st = qac_check_output_file(lo.out);
    if (!st && lo.pretrain_out) st = qac_check_output_file(lo.pretrain_out);
    if (!st) st = qac_check_input(lo.run);
    if (!st) st = qac_check_input(lo.queries);
    if (!st) st = qac_check_input(lo.corpus);
    if (!st && lo.qrels) st = qac_check_input(lo.qrels);
    if (!st) st = mdir ? qac_xenc_load(&x, mdir) : QAC_ERR_NOT_FOUND;
    if (!st) st = qac_reranker_create(&r, x, &eo);
    if (!st) qac_cli_encoder_note("label", qac_reranker_encoder(r));
    qac_label_stats ls = {0};
    if (!st) st = qac_label(r, &lo, &ls);
    if (st) rc = qac_cli_fail("label");
    else
        qac_summary("label",
                    "%ld queries, %ld written (%ld positives from the teacher, %ld judged; %ld negatives below %g, %ld "
                    "between the thresholds dropped), %ld without a positive skipped; %ld pairs scored (%lld cut) in "
                    "%.1f s -> %s",
                    ls.queries, ls.written, ls.positives, ls.judged_positives, ls.negatives, (double)lo.neg_threshold,
                    ls.dropped, ls.no_positive, ls.pairs, (long long)ls.truncated, qac_now() - t0, lo.out);
    qac_reranker_free(r);
    qac_xenc_free(x);
    qac_opts_free(&o);
    return rc;
}
