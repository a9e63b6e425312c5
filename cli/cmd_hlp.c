/* qac hlp: dual-link and co-mention pairs from a link graph, written as
 * pre-training jsonl (logic in trainer/hlp.c). */
#include <stdio.h>

#include "cli.h"
#include "qac_pretrain.h"
#include "qac_util.h"

static const qac_opt hlp_opts[] = {
    {"docs", QAC_OPT_STR, NULL, 0, -1, NULL, NULL,
     "documents jsonl (.gz accepted): \"id\", \"text\", optional \"title\" and \"links\" (ids)", 1},
    {"edges", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "TSV of edges \"from<TAB>to\" (ids) instead of the links field", 0},
    {"out", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "pre-training jsonl to write {\"id\",\"text\",\"queries\",...}", 1},
    {"pairs", QAC_OPT_ENUM, "both", 0, -1, "both|dual-link|co-mention", NULL, "pair kinds to mine", 0},
    {"max-per-doc", QAC_OPT_INT, "5", 0, 1000000, NULL, NULL, "queries kept per passage, dual-link first (0 = all)", 0},
    {"hub-top", QAC_OPT_FLOAT, "0.1", 0, 1, NULL, NULL,
     "co-mention ignores third documents in this top share of in-degree (the paper's 10%)", 0},
    {"hub-degree", QAC_OPT_INT, "0", 0, 1e12, NULL, NULL, "or: ignore third documents with in-degree above this", 0},
    {"seed", QAC_OPT_INT, "42", 0, 9.2e18, NULL, "QAC_SEED", "shuffle seed (which partners the cap keeps)", 0},
};
#define N_HLP_OPTS (int)(sizeof hlp_opts / sizeof hlp_opts[0])

int qac_cmd_hlp(int argc, char **argv) {
    qac_opts o;
    int rc = qac_cli_parse(&o, "hlp", "--docs FILE [--edges TSV] --out FILE [--pairs both|dual-link|co-mention]",
                           hlp_opts, N_HLP_OPTS, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    qac_hlp_opts ho;
    qac_hlp_opts_default(&ho);
    ho.path = qac_opts_str(&o, "docs");
    ho.edges_path = qac_opts_str(&o, "edges");
    ho.out_path = qac_opts_str(&o, "out");
    const char *pairs = qac_opts_str(&o, "pairs");
    ho.dual_link = pairs[0] != 'c';
    ho.co_mention = pairs[0] != 'd';
    ho.max_per_doc = (int)qac_opts_int(&o, "max-per-doc");
    ho.hub_top = qac_opts_float(&o, "hub-top");
    ho.hub_degree = (long)qac_opts_int(&o, "hub-degree");
    ho.seed = (uint64_t)qac_opts_int(&o, "seed");
    qac_progress_state ps;
    qac_progress_init(&ps, "records");
    ho.progress = qac_progress_stderr;
    ho.progress_user = &ps;
    qac_hlp_stats st;
    double t0 = qac_now();
    if (qac_check_output_file(ho.out_path) || qac_check_input(ho.path) || (ho.edges_path && qac_check_input(ho.edges_path)) ||
        qac_hlp_mine(&ho, &st))
        rc = qac_cli_fail("hlp");
    else
        /* the stats are the command's result: printed even when quiet */
        printf("docs %ld\nduplicate_ids %ld\nedges %ld\nedges_unresolved %ld\nself_links %ld\nhub_degree %ld\nhubs %ld\n"
               "dual_link_pairs %ld\nco_mention_pairs %ld\nno_text %ld\nwritten %ld\nqueries_written %ld\n"
               "capped %ld\n",
               st.docs, st.duplicate_ids, st.edges, st.edges_unresolved, st.self_links, st.hub_degree, st.hubs, st.dual_link_pairs,
               st.co_mention_pairs, st.no_text, st.written, st.queries_written, st.capped);
    if (!rc)
        qac_summary("hlp", "%ld documents, %ld passages written with %ld queries in %.1f s -> %s", st.docs, st.written,
                    st.queries_written, qac_now() - t0, ho.out_path);
    qac_opts_free(&o);
    return rc;
}
