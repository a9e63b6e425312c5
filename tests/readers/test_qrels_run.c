/* Qrels (TREC, BEIR, Cranfield) and run readers: formats, the Cranfield gain
 * mapping against the raw file, and error messages with line numbers. */
#include <stdlib.h>
#include <string.h>

#include "qac_eval.h"
#include "testutil.h"

static char dir[4096];

static const char *write_file(const char *name, const char *data) {
    static char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fputs(data, f) < 0 || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
    return path;
}

static void test_formats(void) {
    char trec[4200], beir[4200]; /* write_file's buffer is reused */
    snprintf(trec, sizeof trec, "%s", write_file("q.trec", "# comment\n2 0 10 1\n2 0 9 0\r\n10 0 d1 3\n1 0 x -1"));
    snprintf(beir, sizeof beir, "%s", write_file("q.tsv", "query-id\tcorpus-id\tscore\n2\t10\t1\n2\t9\t0\n10\td1\t3\n1\tx\t-1\n"));
    const char *paths[] = {trec, beir};
    qac_qrels_format want[] = {QAC_QRELS_TREC, QAC_QRELS_BEIR};
    for (int i = 0; i < 2; i++) {
        qac_qrels *q;
        CHECK_OK(qac_qrels_load(&q, paths[i], QAC_QRELS_AUTO));
        if (!q) continue;
        CHECK_MSG(qac_qrels_get_format(q) == want[i], "format %d for %s", (int)qac_qrels_get_format(q), paths[i]);
        CHECK(qac_qrels_num_queries(q) == 3);
        /* strcmp order: "1" < "10" < "2" */
        CHECK(strcmp(qac_qrels_qid(q, 0), "1") == 0 && strcmp(qac_qrels_qid(q, 1), "10") == 0 &&
              strcmp(qac_qrels_qid(q, 2), "2") == 0);
        const char *const *docs;
        const int *rels;
        CHECK(qac_qrels_judged(q, 2, &docs, &rels) == 2);
        CHECK(strcmp(docs[0], "10") == 0 && rels[0] == 1 && strcmp(docs[1], "9") == 0 && rels[1] == 0);
        int rel = 99;
        CHECK(qac_qrels_find(q, "10") == 1 && qac_qrels_find(q, "3") == -1);
        CHECK(qac_qrels_rel(q, 0, "x", &rel) == 1 && rel == -1);
        CHECK(qac_qrels_rel(q, 0, "y", &rel) == 0);
        qac_qrels_free(q);
    }
    qac_qrels *q;
    CHECK_ERR(qac_qrels_load(&q, beir, QAC_QRELS_TREC), QAC_ERR_FORMAT, "q.tsv:1: expected 4 columns");
    CHECK_ERR(qac_qrels_load(&q, write_file("b1.tsv", "1\t2\t3\n"), QAC_QRELS_BEIR), QAC_ERR_FORMAT,
              "b1.tsv:1: BEIR qrels must start with a query-id header");
    CHECK_ERR(qac_qrels_load(&q, write_file("b2", "1 0 a 1\n1 0 b 1 extra\n"), QAC_QRELS_AUTO), QAC_ERR_FORMAT,
              "b2:2: expected 4 columns");
    CHECK_ERR(qac_qrels_load(&q, write_file("b3", "1 0 a 1\n1 0 b 1.5\n"), QAC_QRELS_AUTO), QAC_ERR_FORMAT,
              "b3:2: relevance '1.5' is not an integer");
    CHECK_ERR(qac_qrels_load(&q, write_file("b4", "1 a 1\n1 b 7\n"), QAC_QRELS_AUTO), QAC_ERR_FORMAT,
              "b4:2: Cranfield relevance must be 1..4 or -1");
    CHECK_ERR(qac_qrels_load(&q, write_file("b5", "1 0 a 1\n2 0 a 1\n1 0 a 0\n"), QAC_QRELS_AUTO), QAC_ERR_FORMAT,
              "b5:3: duplicate judgement for query 1 doc a (first on line 1)");
    CHECK_ERR(qac_qrels_load(&q, write_file("b6", "1 2\n"), QAC_QRELS_AUTO), QAC_ERR_FORMAT, "b6:1: cannot detect");
}

static void test_cranfield(void) {
    char path[4200];
    snprintf(path, sizeof path, "%s", qac_test_data("cranfield/cranqrel"));
    qac_qrels *q;
    CHECK_OK(qac_qrels_load(&q, path, QAC_QRELS_AUTO));
    if (!q) return;
    CHECK(qac_qrels_get_format(q) == QAC_QRELS_CRANFIELD);
    CHECK_MSG(qac_qrels_num_queries(q) == 225, "%zu queries", qac_qrels_num_queries(q));
    /* every raw line maps to gain 5 - rel, or 0 for -1 */
    FILE *f = fopen(path, "r");
    char qid[32], doc[32];
    int rel, lines = 0, ok = 1;
    while (f && fscanf(f, "%31s %31s %d", qid, doc, &rel) == 3) {
        lines++;
        long qi = qac_qrels_find(q, qid);
        int got = -99;
        if (qi < 0 || !qac_qrels_rel(q, (size_t)qi, doc, &got) || got != (rel == -1 ? 0 : 5 - rel)) ok = 0;
    }
    if (f) fclose(f);
    size_t total = 0;
    for (size_t i = 0; i < qac_qrels_num_queries(q); i++) total += qac_qrels_judged(q, i, NULL, NULL);
    CHECK_MSG(ok && lines > 1800 && total == (size_t)lines, "lines %d stored %zu", lines, total);
    qac_qrels_free(q);
}

static void test_run(void) {
    const char *p = write_file("run.txt", "# c\n10 Q0 a 1 2.5 r\n2 Q0 b 1 -1e3 r extra\n\n10 Q0 c 2 1e-3 r\n");
    qac_run *r;
    CHECK_OK(qac_run_load(&r, p));
    if (r) {
        CHECK(qac_run_num_queries(r) == 2 && strcmp(qac_run_qid(r, 0), "10") == 0);
        const char *const *docs;
        const double *scores;
        CHECK(qac_run_entries(r, 0, &docs, &scores) == 2);
        CHECK(strcmp(docs[1], "c") == 0 && scores[1] == 1e-3 && qac_run_line(r, 0, 1) == 5);
        CHECK(qac_run_entries(r, 1, &docs, &scores) == 1 && scores[0] == -1e3);
        qac_run_free(r);
    }
    CHECK_ERR(qac_run_load(&r, write_file("r1", "1 Q0 a 1 2.0 r\n1 Q0 b 2 2.0\n")), QAC_ERR_FORMAT,
              "r1:2: expected 6 columns");
    CHECK_ERR(qac_run_load(&r, write_file("r2", "1 Q0 a 1 nan r\n")), QAC_ERR_FORMAT, "r2:1: score 'nan'");
    CHECK_ERR(qac_run_load(&r, "/nonexistent/qac/run"), QAC_ERR_NOT_FOUND, "run");
}

int main(void) {
    snprintf(dir, sizeof dir, "%s", qac_test_tmpdir("qrels"));
    test_formats();
    test_cranfield();
    test_run();
    return qac_test_summary();
}
