/* qac eval: score a TREC run against qrels exactly as trec_eval does, with
 * its flags (-m, -c, -q, -M, -l) and output format. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "qac_eval.h"

static const qac_opt eval_opts[] = {
    {"qrels", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "qrels file (TREC, BEIR tsv or Cranfield cranqrel)", 0},
    {"run", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "TREC run file 'qid Q0 docid rank score run_id'", 0},
    {"m", QAC_OPT_LIST, NULL, 0, -1, NULL, NULL,
     "measure, trec_eval syntax (repeatable): official (default), all_trec, set, or a name with optional "
     "parameters: map, gm_map, Rprec, bpref, recip_rank, iprec_at_recall, P.5,10, recall.50,1000, success.1,5,10, "
     "ndcg, ndcg_cut.10, map_cut, relative_P, infAP, gm_bpref, Rprec_mult, utility, 11pt_avg, binG, G, ndcg_rel, "
     "Rndcg, set_P, set_relative_P, set_recall, set_map, set_F, relstring, runid, num_q, num_ret, num_rel, "
     "num_rel_ret, num_nonrel_judged_ret",
     0},
    {"c", QAC_OPT_BOOL, "false", 0, -1, NULL, NULL, "average over all qrels queries; missing ones count 0", 0},
    {"q", QAC_OPT_BOOL, "false", 0, -1, NULL, NULL, "also print per-query values", 0},
    {"M", QAC_OPT_INT, NULL, 1, 1e15, NULL, NULL, "evaluate only the top M documents of each query", 0},
    {"l", QAC_OPT_INT, "1", -1e9, 1e9, NULL, NULL, "relevance level: judged rel >= l is relevant", 0},
    {"digits", QAC_OPT_INT, "4", 1, 17, NULL, NULL, "decimals printed (trec_eval prints 4)", 0},
    {"qrels-format", QAC_OPT_ENUM, "auto", 0, -1, "auto|trec|beir|cranfield", NULL,
     "qrels format (auto: BEIR by its header, 4 columns TREC, 3 columns Cranfield)", 0},
};
#define N_EVAL_OPTS ((int)(sizeof eval_opts / sizeof eval_opts[0]))

/* The LIST option joins repeated -m values with ','; a piece that does not
 * start with a measure name continues the parameters of the measure before
 * it ("recall.50,1000", "utility.1,-1,0,0", "ndcg.1=2,2=4"). */
static char **split_measures(const char *joined, int *n) {
    *n = 0;
    if (!joined) return NULL;
    size_t len = strlen(joined);
    char **out = calloc(len + 1, sizeof *out);
    char *copy = strdup(joined);
    if (!out || !copy) {
        free(out);
        free(copy);
        return NULL;
    }
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        size_t name_len = strcspn(tok, ".");
        if (*n > 0 && !qac_eval_measure_known(tok, name_len)) {
            char *prev = out[*n - 1];
            size_t a = strlen(prev), b = strlen(tok);
            char *joinp = realloc(prev, a + b + 2);
            if (!joinp) break;
            joinp[a] = ',';
            memcpy(joinp + a + 1, tok, b + 1);
            out[*n - 1] = joinp;
        } else {
            out[(*n)++] = strdup(tok);
        }
    }
    free(copy);
    return out;
}

int qac_cmd_eval(int argc, char **argv) {
    qac_opts o;
    const char *synopsis = "--qrels QRELS --run RUN [-m measure ...] [-c] [-q] [-M N] [-l N]\n"
                           "       qac eval [flags] QRELS RUN   (trec_eval argument order)";
    int rc = qac_cli_parse(&o, "eval", synopsis, eval_opts, N_EVAL_OPTS, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    const char *qrels_path = qac_opts_str(&o, "qrels"), *run_path = qac_opts_str(&o, "run");
    int pos = 0;
    if (!qrels_path && pos < o.n_positional) qrels_path = o.positional[pos++];
    if (!run_path && pos < o.n_positional) run_path = o.positional[pos++];
    if (pos < o.n_positional || !qrels_path || !run_path) {
        if (pos < o.n_positional) fprintf(stderr, "qac eval: unexpected argument '%s'\n", o.positional[pos]);
        else fprintf(stderr, "qac eval: need a qrels file and a run file\n");
        fprintf(stderr, "(see 'qac eval --help')\n");
        qac_opts_free(&o);
        return 2;
    }
    const char *fs = qac_opts_str(&o, "qrels-format");
    qac_qrels_format fmt = !strcmp(fs, "trec") ? QAC_QRELS_TREC
                           : !strcmp(fs, "beir") ? QAC_QRELS_BEIR
                           : !strcmp(fs, "cranfield") ? QAC_QRELS_CRANFIELD
                                                       : QAC_QRELS_AUTO;
    qac_eval_params p = {qac_opts_isset(&o, "M") ? (long)qac_opts_int(&o, "M") : 0, (long)qac_opts_int(&o, "l"),
                         qac_opts_bool(&o, "c")};
    int per_query = qac_opts_bool(&o, "q");
    int nm = 0;
    char **measures = split_measures(qac_opts_str(&o, "m"), &nm);
    qac_qrels *qrels = NULL;
    qac_run *run = NULL;
    qac_eval_result *res = NULL;
    rc = 0;
    if (qac_qrels_load(&qrels, qrels_path, fmt) || qac_run_load(&run, run_path) ||
        qac_eval_compute(&res, qrels, run, (const char *const *)measures, nm, &p) ||
        qac_eval_write(stdout, res, per_query, (int)qac_opts_int(&o, "digits")))
        rc = qac_cli_fail("eval");
    else if (fflush(stdout) != 0) {
        perror("qac eval: stdout");
        rc = 1;
    }
    qac_eval_result_free(res);
    qac_run_free(run);
    qac_qrels_free(qrels);
    for (int i = 0; i < nm; i++) free(measures[i]);
    free(measures);
    qac_opts_free(&o);
    return rc;
}
