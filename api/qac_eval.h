/* Relevance judgements, TREC run files, and trec_eval-compatible scoring.
 *
 * Qrels formats (auto-detected from the first line when QAC_QRELS_AUTO):
 *   TREC       "qid iter docid rel", whitespace separated (4 columns)
 *   BEIR       "query-id\tcorpus-id\tscore" with that header line
 *   CRANFIELD  "qid docid rel" (3 columns, no header) with rel 1..4 meaning
 *              most..least relevant and -1 judged non-relevant; stored as
 *              gain 5 - rel, and -1 as 0 (see the collection README)
 * Runs: "qid Q0 docid rank score run_id"; the rank column is ignored, as
 * trec_eval ignores it. Blank lines and lines starting with '#' are skipped.
 *
 * Scoring follows trec_eval 9.0.x exactly (tests compare the output of the
 * real trec_eval 9.0.8 byte for byte): per query, documents are ordered by
 * score descending, the scores compared as C floats (9.0.x reads them into
 * a float; 10.0 into a double), ties by docid descending (strcmp); the -M cutoff is
 * applied after that sort; a docid twice in the kept list is an error; a
 * run query with no qrels is skipped; averages are over the evaluated
 * queries, or with `complete` (-c) over every qrels query (missing ones
 * count 0, get no per-query rows, and the num_rel summary counts rel > 0 in
 * every qrels query whatever -l is). num_q has no per-query rows.
 * trec_eval 10.0 differs on -c: without it, a qrels query missing from the
 * run is a fatal error there; with -c -q it prints zero rows for them.
 *
 * Ownership: every object is freed with its _free (NULL accepted). Strings
 * and arrays returned by accessors are borrowed and live as long as the
 * object. */
#ifndef QAC_EVAL_H
#define QAC_EVAL_H

#include <stdio.h>

#include "qac_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- qrels ---- */
typedef enum qac_qrels_format {
    QAC_QRELS_AUTO = 0,
    QAC_QRELS_TREC,
    QAC_QRELS_BEIR,
    QAC_QRELS_CRANFIELD
} qac_qrels_format;

typedef struct qac_qrels qac_qrels;

/* Duplicate (qid, docid) pairs, bad columns and non-integer relevance are
 * errors naming the file and line. */
qac_status qac_qrels_load(qac_qrels **out, const char *path, qac_qrels_format fmt);
qac_qrels_format qac_qrels_get_format(const qac_qrels *q);
/* Queries in strcmp order of their ids. */
size_t qac_qrels_num_queries(const qac_qrels *q);
const char *qac_qrels_qid(const qac_qrels *q, size_t i);
/* Judged documents of query i, in strcmp order of docid; returns the count. */
size_t qac_qrels_judged(const qac_qrels *q, size_t i, const char *const **docids, const int **rels);
/* Index of a query id, or -1. */
long qac_qrels_find(const qac_qrels *q, const char *qid);
/* Relevance of docid for query i: 1 and *rel set when judged, else 0. */
int qac_qrels_rel(const qac_qrels *q, size_t i, const char *docid, int *rel);
void qac_qrels_free(qac_qrels *q);

/* ---- runs ---- */
typedef struct qac_run qac_run;

qac_status qac_run_load(qac_run **out, const char *path);
/* Queries in strcmp order of their ids; entries in file order. */
size_t qac_run_num_queries(const qac_run *r);
const char *qac_run_qid(const qac_run *r, size_t i);
size_t qac_run_entries(const qac_run *r, size_t i, const char *const **docids, const double **scores);
/* File line of entry j of query i (for messages). */
int64_t qac_run_line(const qac_run *r, size_t i, size_t j);
/* The run id of the file's last line (what trec_eval's runid reports). */
const char *qac_run_id(const qac_run *r);
void qac_run_free(qac_run *r);

/* ---- scoring ----
 * Measures use trec_eval's names and -m syntax ("name" or "name.params"):
 * runid, num_q, num_ret, num_rel, num_rel_ret, map, gm_map, Rprec, bpref,
 * recip_rank, iprec_at_recall, P, relstring, recall, infAP, gm_bpref,
 * Rprec_mult, utility, 11pt_avg, binG, G, ndcg, ndcg_rel, Rndcg, ndcg_cut,
 * map_cut, relative_P, success, set_P, set_relative_P, set_recall, set_map,
 * set_F, num_nonrel_judged_ret, with trec_eval's default parameters, and the
 * nicknames "official" (the default), "set" and "all_trec". "P_5" /
 * "ndcg_cut_10" / "recall_1000" are shorthand for one cutoff. Cutoffs given
 * twice for one measure merge (trec_eval keeps the first list only); other
 * parameters given twice keep the first, as trec_eval does. Not supported:
 * trec_eval's preference and qrels_jg measures, -J and -N. */
typedef struct qac_eval_params {
    long max_docs;  /* -M: keep the top max_docs per query; <= 0 keeps all */
    long rel_level; /* -l: judged rel >= rel_level is relevant (trec_eval default 1) */
    int complete;   /* -c: average over all qrels queries */
} qac_eval_params;

typedef struct qac_eval_result qac_eval_result;

/* measures: n trec_eval -m arguments (n == 0: "official"). */
qac_status qac_eval_compute(qac_eval_result **out, const qac_qrels *qrels, const qac_run *run,
                            const char *const *measures, int n, const qac_eval_params *params);
/* Whether name[0..len) is a measure name or nickname qac knows. */
int qac_eval_measure_known(const char *name, size_t len);
/* Rows in trec_eval's print order: per-query rows (queries in strcmp order,
 * measures in trec_eval's table order), then the "all" summary rows. As in
 * trec_eval, num_q, gm_map, gm_bpref and runid have summary rows only,
 * relstring per-query rows only. */
size_t qac_eval_num_rows(const qac_eval_result *res);
void qac_eval_row(const qac_eval_result *res, size_t i, const char **measure, const char **qid, double *value,
                  int *is_count);
/* The text of a runid or relstring row; NULL for numeric rows. */
const char *qac_eval_row_text(const qac_eval_result *res, size_t i);
/* The "all" value of one measure, e.g. "recip_rank" or "ndcg_cut_10". */
qac_status qac_eval_summary(const qac_eval_result *res, const char *measure, double *value);
/* Print like trec_eval: "%-22s\t%s\t%6.4f" (counts as integers); per-query
 * rows only when per_query (-q). digits other than 4 changes the decimals
 * (for comparisons finer than trec_eval's output). */
qac_status qac_eval_write(FILE *f, const qac_eval_result *res, int per_query, int digits);
void qac_eval_result_free(qac_eval_result *res);

#ifdef __cplusplus
}
#endif
#endif
