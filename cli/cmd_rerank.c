/* qac rerank: a first-stage run reranked with a cross-encoder (logic in
 * trainer/rerank_run.c), or query/passage pairs scored one a line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "qac_cpu.h"
#include "qac_rerank.h"
#include "qac_util.h"

static const qac_opt rerank_opts[] = {
    {"model", QAC_OPT_STR, NULL, 0, -1, NULL, "QAC_RERANKER",
     "cross-encoder directory (BertForSequenceClassification, sentence-transformers CrossEncoder, or a qac "
     "finetune --cross-encoder run)", 1},
    {"run", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "first-stage TREC run to rerank (with --queries, --corpus, --out)", 0},
    {"queries", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "the run's queries (TSV, BEIR jsonl, cran.qry)", 0},
    {"queries-format", QAC_OPT_ENUM, "auto", 0, -1, "auto|tsv|beir|tevatron|cranfield", NULL, "queries format", 0},
    {"corpus", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "corpus the run's docids come from (texts are looked up here)", 0},
    {"corpus-format", QAC_OPT_ENUM, "auto", 0, -1, "auto|tsv|beir|tevatron|cranfield", NULL, "corpus format", 0},
    {"depth", QAC_OPT_INT, "100", 1, 1000000, NULL, NULL,
     "each query's top passages reranked (trec_eval's order); only they are written", 0},
    {"pairs", QAC_OPT_STR, NULL, 0, -1, NULL, NULL,
     "score pairs instead: query<TAB>passage or JSON {\"query\",\"passage\"} a line ('-' = stdin); one JSON line "
     "out each: logits, raw score, probability, and the model's activation of the logits", 0},
    {"out", QAC_OPT_STR, "-", 0, -1, NULL, NULL, "output: the reranked run, or the pairs' scores ('-' = stdout)", 0},
    {"run-id", QAC_OPT_STR, "qac-rerank", 0, -1, NULL, NULL, "run name in the last column", 0},
    {"max-len", QAC_OPT_INT, "0", 0, 8192, NULL, NULL,
     "pair length, specials included; 0 = the model's (max_seq_length, else the tokenizer's model_max_length)", 0},
    QAC_CLI_PAIR_OPTS,
    {"batch", QAC_OPT_INT, "0", 0, 4096, NULL, NULL, "pairs per encoder pass (0 = the backend's default)", 0},
    {"device", QAC_OPT_ENUM, "auto", 0, -1, "auto|cpu|cuda", "QAC_DEVICE", "encoder device", 0},
    {"threads", QAC_OPT_INT, "0", 0, 1024, NULL, "QAC_THREADS", "CPU threads (0 = all cores)", 0},
    {"dtype", QAC_OPT_ENUM, "fp32", 0, -1, "fp32|bf16|int8", "QAC_DTYPE",
     "CPU encoder precision: bf16 runs the linear layers in bf16 (fp32 sums), int8 in int8 (int32 sums, VNNI; fp32 "
     "on a CPU without it)", 0},
    QAC_CPU_ISA_OPT,
};
#define N_OPTS (int)(sizeof rerank_opts / sizeof rerank_opts[0])

static qac_status score_pairs(qac_reranker *r, const char *path, const qac_pair_opts *po, FILE *out, long *n_out) {
    qac_cli_pairs p;
    qac_status st = qac_cli_read_pairs(path, &p);
    if (st) return st;
    const qac_xenc *x = qac_reranker_model(r);
    int NL = x->num_labels;
    float *logits = malloc((size_t)p.n * NL * sizeof *logits), *raw = malloc((size_t)p.n * sizeof *raw);
    float *prob = malloc((size_t)p.n * sizeof *prob), *act = malloc((size_t)p.n * NL * sizeof *act);
    if (!logits || !raw || !prob || !act) st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
    if (!st)
        st = qac_reranker_logits(r, (const char *const *)p.a, p.alen, (const char *const *)p.b, p.blen, p.n, po,
                                 logits);
    if (!st) {
        qac_xenc_raw_scores(x, logits, p.n, raw);
        qac_xenc_probabilities(x, logits, p.n, prob);
        qac_xenc_activate(x, logits, p.n, act);
    }
    for (int i = 0; i < p.n && !st; i++) {
        fprintf(out, "{\"logits\":[");
        for (int k = 0; k < NL; k++) fprintf(out, "%s%.9g", k ? "," : "", logits[(size_t)i * NL + k]);
        fprintf(out, "],\"raw\":%.9g,\"probability\":%.9g,\"activated\":[", raw[i], prob[i]);
        for (int k = 0; k < NL; k++) fprintf(out, "%s%.9g", k ? "," : "", act[(size_t)i * NL + k]);
        if (fprintf(out, "]}\n") < 0) st = qac_set_error(QAC_ERR_IO, "writing the scores failed");
    }
    *n_out = p.n;
    free(logits), free(raw), free(prob), free(act);
    qac_cli_pairs_free(&p);
    return st;
}

int qac_cmd_rerank(int argc, char **argv) {
    qac_opts o;
    int rc = qac_cli_parse(&o, "rerank",
                           "--model M (--run RUN --queries Q --corpus C [--depth 100] --out RUN2 | --pairs FILE "
                           "[--out FILE])",
                           rerank_opts, N_OPTS, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    const char *pairs = qac_opts_str(&o, "pairs"), *run = qac_opts_str(&o, "run");
    const char *queries = qac_opts_str(&o, "queries"), *corpus = qac_opts_str(&o, "corpus");
    const char *out = qac_opts_str(&o, "out");
    if (!!pairs == !!run || (run && (!queries || !corpus))) {
        fprintf(stderr, "qac rerank: give --run RUN with --queries and --corpus, or --pairs FILE\n");
        qac_opts_free(&o);
        return 2;
    }
    qac_rerank_opts ro;
    qac_rerank_opts_default(&ro);
    qac_status st = qac_cli_pair_opts(&o, &ro.pair);
    if (st) {
        fprintf(stderr, "qac rerank: %s\n", qac_last_error());
        qac_opts_free(&o);
        return 2;
    }
    ro.run = run, ro.queries = queries, ro.corpus = corpus, ro.out = out;
    ro.queries_format = qac_cli_format(qac_opts_str(&o, "queries-format"));
    ro.corpus_format = qac_cli_format(qac_opts_str(&o, "corpus-format"));
    ro.depth = (int)qac_opts_int(&o, "depth");
    ro.run_id = qac_opts_str(&o, "run-id");
    qac_progress_state ps;
    qac_progress_init(&ps, "queries");
    ro.progress = qac_progress_stderr;
    ro.progress_user = &ps;
    qac_encoder_opts eo = qac_encoder_default_opts();
    eo.device = qac_cli_device(qac_opts_str(&o, "device"));
    eo.threads = (int)qac_opts_int(&o, "threads");
    eo.max_batch = (int)qac_opts_int(&o, "batch");
    eo.cpu_precision = qac_cli_dtype(qac_opts_str(&o, "dtype"));
    qac_xenc *x = NULL;
    qac_reranker *r = NULL;
    double t0 = qac_now();
    char mbuf[4096];
    const char *mdir = qac_cli_model_dir(&o, mbuf, sizeof mbuf);
    if (strcmp(out, "-")) st = qac_check_output_file(out); /* before any reading */
    if (!st && run) st = qac_check_input(run);
    if (!st && run) st = qac_check_input(queries);
    if (!st && run) st = qac_check_input(corpus);
    if (!st) st = mdir ? qac_xenc_load(&x, mdir) : QAC_ERR_NOT_FOUND;
    if (!st) st = qac_reranker_create(&r, x, &eo);
    if (!st) qac_cli_encoder_note("rerank", qac_reranker_encoder(r));
    long n_pairs = 0;
    if (!st && pairs) {
        FILE *f = stdout;
        qac_atomic_file af = {0};
        if (strcmp(out, "-") && !(st = qac_atomic_open(&af, out))) f = af.f;
        if (!st) st = score_pairs(r, pairs, &ro.pair, f, &n_pairs);
        if (af.f) {
            if (st) qac_atomic_abort(&af);
            else st = qac_atomic_commit(&af);
        } else if (!st && fflush(stdout) != 0) {
            st = qac_set_error(QAC_ERR_IO, "writing the scores failed");
        }
    }
    qac_rerank_stats rs = {0};
    if (!st && run) st = qac_rerank_run(r, &ro, &rs);
    if (st) {
        rc = qac_cli_fail("rerank");
    } else if (pairs) {
        qac_summary("rerank", "%ld pairs scored (%lld cut to %d tokens) in %.1f s on %s", n_pairs,
                    (long long)qac_reranker_truncated(r), ro.pair.max_len > 0 ? ro.pair.max_len : x->max_len,
                    qac_now() - t0, qac_reranker_device(r) == QAC_DEVICE_CUDA ? "cuda" : "cpu");
    } else {
        qac_summary("rerank",
                    "%ld queries reranked (%ld pairs, %lld cut to %d tokens), %ld run queries not in %s skipped, in "
                    "%.1f s -> %s",
                    rs.queries, rs.pairs, (long long)rs.truncated, ro.pair.max_len > 0 ? ro.pair.max_len : x->max_len,
                    rs.no_text, queries, qac_now() - t0, out);
    }
    qac_reranker_free(r);
    qac_xenc_free(x);
    qac_opts_free(&o);
    return rc;
}
