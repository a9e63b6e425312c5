/* BM25: pruned search (MaxScore) against exhaustive scoring on Cranfield and
 * on a random synthetic corpus; analyzer invariants; norm quantisation
 * invariants; corrupted and truncated indexes. The BM25 arithmetic itself
 * is checked against an independent Python computation in
 * bm25_reference.py. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "qac_analyzer.h"
#include "qac_bm25.h"
#include "qac_util.h"
#include "testutil.h"

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}
static double rnd01(void) { return (rnd() + 0.5) / 2147483648.0; }

/* Zipf-ish word index over a vocabulary of v words. */
static int zipf_word(int v) {
    double u = rnd01();
    int w = (int)(exp(u * log((double)v + 1)) - 1);
    return w < v ? w : v - 1;
}

static void word(char *buf, int w) {
    /* letters only, never a stopword, distinct per index: "q" + base-20 digits over a non-vowel alphabet */
    static const char al[] = "bcdfghjklmnpqrstvwxz";
    int n = 0;
    buf[n++] = 'q';
    do {
        buf[n++] = al[w % 20];
        w /= 20;
    } while (w);
    buf[n] = 0;
}

typedef struct tokbuf {
    char out[4096];
    size_t len;
    int n;
} tokbuf;

static int collect(void *user, const char *tok, size_t len) {
    tokbuf *t = user;
    if (t->len + len + 2 < sizeof t->out) {
        if (t->n) t->out[t->len++] = ' ';
        memcpy(t->out + t->len, tok, len);
        t->len += len;
        t->out[t->len] = 0;
    }
    t->n++;
    return 0;
}

static const char *analyze(qac_analyzer *a, const char *s, tokbuf *t) {
    memset(t, 0, sizeof *t);
    qac_analyzer_run(a, s, strlen(s), collect, t);
    return t->out;
}

static void test_analyzer(void) {
    qac_analyzer *a = NULL;
    CHECK_OK(qac_analyzer_create(&a));
    if (!a) return;
    tokbuf x, y;
    /* case-folding: upper-cased input analyses the same */
    const char *texts[] = {"Boundary layer flows over heated plates", "The aerodynamic heating of wings",
                           "Supersonic Flows; shock-wave interactions (1958)", "Über straße Ελληνικά"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        char up[256];
        size_t n = strlen(texts[i]);
        for (size_t j = 0; j <= n; j++) up[j] = (char)((texts[i][j] >= 'a' && texts[i][j] <= 'z') ? texts[i][j] - 32 : texts[i][j]);
        analyze(a, texts[i], &x);
        analyze(a, up, &y);
        CHECK_MSG(strcmp(x.out, y.out) == 0, "case: '%s' vs '%s'", x.out, y.out);
    }
    /* every stopword alone produces nothing; with a content word, just that word */
    const char *sw[] = {"a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
                        "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
                        "they", "this", "to", "was", "will", "with"};
    analyze(a, "wing", &y);
    for (size_t i = 0; i < sizeof sw / sizeof sw[0]; i++) {
        char s[64];
        snprintf(s, sizeof s, "%s wing %s", sw[i], sw[i]);
        analyze(a, s, &x);
        CHECK_MSG(strcmp(x.out, y.out) == 0 && x.n == 1, "stopword '%s' kept: '%s'", sw[i], x.out);
    }
    /* possessive 's (ASCII and U+2019) is dropped before stemming */
    analyze(a, "pilot", &y);
    analyze(a, "pilot's", &x);
    CHECK_MSG(strcmp(x.out, y.out) == 0, "possessive: '%s' vs '%s'", x.out, y.out);
    analyze(a, "pilot\xE2\x80\x99s", &x);
    CHECK_MSG(strcmp(x.out, y.out) == 0, "possessive U+2019: '%s' vs '%s'", x.out, y.out);
    /* separators split: punctuation between words acts like a space */
    analyze(a, "heat transfer", &y);
    analyze(a, "heat/transfer", &x);
    CHECK(strcmp(x.out, y.out) == 0);
    analyze(a, "(heat)--[transfer]!", &x);
    CHECK(strcmp(x.out, y.out) == 0);
    /* numbers keep their decimal point; token count of a number is 1 */
    analyze(a, "3.5", &x);
    CHECK(x.n == 1);
    /* invalid UTF-8 separates but never fails */
    analyze(a, "heat\xff\xfetransfer", &x);
    CHECK(strcmp(x.out, y.out) == 0);
    /* a 1000-letter word is split into 255-character pieces */
    char longw[1001];
    memset(longw, 'z', 1000);
    longw[1000] = 0;
    analyze(a, longw, &x);
    CHECK(x.n == 4);
    qac_analyzer_free(a);
}

static void test_norms(void) {
    /* decode(encode(x)) <= x, monotone, idempotent, exact for small x */
    uint32_t prev = 0;
    int ok_le = 1, ok_mono = 1, ok_idem = 1, ok_small = 1;
    for (uint32_t x = 0; x < 200000; x++) {
        uint32_t d = qac_bm25_norm_decode(qac_bm25_norm_encode(x));
        if (d > x) ok_le = 0;
        if (d < prev) ok_mono = 0;
        if (qac_bm25_norm_encode(d) != qac_bm25_norm_encode(x)) ok_idem = 0;
        if (x <= 40 && d != x) ok_small = 0;
        prev = d;
    }
    CHECK(ok_le);
    CHECK(ok_mono);
    CHECK(ok_idem);
    CHECK(ok_small);
    /* all 256 byte values decode to distinct increasing lengths */
    int inc = 1;
    for (int i = 1; i < 256; i++)
        if (qac_bm25_norm_decode((uint8_t)i) <= qac_bm25_norm_decode((uint8_t)(i - 1))) inc = 0;
    CHECK(inc);
}

/* Compare pruned and exhaustive search for one query; returns 1 if equal. */
static int same_results(const qac_bm25 *b, const char *q, const qac_bm25_params *p, int k) {
    float *s1 = malloc((size_t)k * sizeof *s1), *s2 = malloc((size_t)k * sizeof *s2);
    int64_t *r1 = malloc((size_t)k * sizeof *r1), *r2 = malloc((size_t)k * sizeof *r2);
    int n1 = -1, n2 = -2, ok = 1;
    if (qac_bm25_search(b, q, p, k, s1, r1, &n1) != QAC_OK ||
        qac_bm25_search_exhaustive(b, q, p, k, s2, r2, &n2) != QAC_OK || n1 != n2)
        ok = 0;
    for (int i = 0; ok && i < n1; i++)
        if (r1[i] != r2[i] || s1[i] != s2[i]) ok = 0;
    /* the order is score descending, docid descending on ties */
    for (int i = 1; ok && i < n1; i++)
        if (s1[i] > s1[i - 1] ||
            (s1[i] == s1[i - 1] && strcmp(qac_bm25_docid(b, r1[i]), qac_bm25_docid(b, r1[i - 1])) > 0))
            ok = 0;
    if (!ok) fprintf(stderr, "mismatch: query '%s' k=%d n=%d/%d\n", q, k, n1, n2);
    free(s1);
    free(s2);
    free(r1);
    free(r2);
    return ok;
}

static void test_synthetic(void) {
    const char *dir = qac_test_tmpdir("bm25syn");
    char corpus[4096], idx[4096];
    snprintf(corpus, sizeof corpus, "%s/corpus.tsv", dir);
    snprintf(idx, sizeof idx, "%s/idx", dir);
    FILE *f = fopen(corpus, "w");
    CHECK(f != NULL);
    if (!f) return;
    const int n_docs = 10000, vocab = 5000;
    char w[32];
    for (int d = 0; d < n_docs; d++) {
        fprintf(f, "d%d\t", d);
        int len = d % 97 == 0 ? 0 : 1 + (int)(rnd() % 120);
        for (int i = 0; i < len; i++) {
            word(w, zipf_word(vocab));
            fprintf(f, "%s%s", i ? " " : "", w);
        }
        fputc('\n', f);
    }
    fclose(f);
    CHECK_OK(qac_bm25_build(idx, corpus, NULL));
    qac_bm25 *b = NULL;
    CHECK_OK(qac_bm25_open(&b, idx));
    if (!b) return;
    CHECK(qac_bm25_count(b) == n_docs);
    CHECK(qac_bm25_doc_length(b, 0) == 0);
    CHECK(strcmp(qac_bm25_docid(b, 123), "d123") == 0);
    CHECK(qac_bm25_docid(b, n_docs) == NULL);
    const qac_bm25_params ps[] = {{0.9f, 0.4f, 0}, {1.2f, 0.75f, 0}, {0.9f, 0.4f, 1}, {2.0f, 1.0f, 0}, {0.0f, 0.0f, 0}};
    const int ks[] = {1, 10, 100, 1000};
    int mismatches = 0, total = 0;
    for (int qi = 0; qi < 120; qi++) {
        char q[512];
        size_t ql = 0;
        int nt = 1 + (int)(rnd() % 12);
        for (int i = 0; i < nt; i++) {
            /* mix frequent and rare terms, with occasional repeats */
            word(w, rnd() % 3 == 0 ? (int)(rnd() % 20) : zipf_word(vocab));
            ql += (size_t)snprintf(q + ql, sizeof q - ql, "%s ", w);
        }
        for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++)
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
                total++;
                mismatches += !same_results(b, q, &ps[pi], ks[ki]);
            }
    }
    printf("synthetic: %d/%d query settings identical to exhaustive\n", total - mismatches, total);
    CHECK(mismatches == 0);
    /* ties: identical documents must come out in docid-descending order */
    int n = 0;
    float s[8];
    int64_t r[8];
    CHECK_OK(qac_bm25_search(b, "qzzzzzz_absent", NULL, 8, s, r, &n));
    CHECK(n == 0);
    CHECK_ERR(qac_bm25_search(b, "qb", NULL, 0, s, r, &n), QAC_ERR_INVALID, "k");
    qac_bm25_params bad = {0.9f, 1.5f, 0};
    CHECK_ERR(qac_bm25_search(b, "qb", &bad, 8, s, r, &n), QAC_ERR_INVALID, "b must be");
    qac_bm25_free(b);
}

static void test_ties(void) {
    const char *dir = qac_test_tmpdir("bm25tie");
    char corpus[4096], idx[4096];
    snprintf(corpus, sizeof corpus, "%s/corpus.tsv", dir);
    snprintf(idx, sizeof idx, "%s/idx", dir);
    FILE *f = fopen(corpus, "w");
    if (!f) { CHECK(0); return; }
    /* ten identical documents with ids in scrambled order, plus filler */
    const char *ids[] = {"d5", "d10", "d1", "d9", "d2", "d8", "d3", "d7", "d4", "d6"};
    for (int i = 0; i < 10; i++) fprintf(f, "%s\tnozzle flow\n", ids[i]);
    for (int i = 0; i < 50; i++) fprintf(f, "f%d\tfiller text number %d\n", i, i);
    fclose(f);
    CHECK_OK(qac_bm25_build(idx, corpus, NULL));
    qac_bm25 *b = NULL;
    CHECK_OK(qac_bm25_open(&b, idx));
    if (!b) return;
    for (int k = 1; k <= 10; k++) CHECK(same_results(b, "nozzle", NULL, k));
    float s[10];
    int64_t r[10];
    int n = 0;
    CHECK_OK(qac_bm25_search(b, "nozzle", NULL, 3, s, r, &n));
    /* strcmp-descending among the ten: d9, d8, d7 */
    CHECK(n == 3 && !strcmp(qac_bm25_docid(b, r[0]), "d9") && !strcmp(qac_bm25_docid(b, r[1]), "d8") &&
          !strcmp(qac_bm25_docid(b, r[2]), "d7"));
    qac_bm25_free(b);
}

static void test_cranfield(void) {
    char corpus[4096], queries[4096];
    snprintf(corpus, sizeof corpus, "%s", qac_test_data("cranfield/cran.all.1400"));
    snprintf(queries, sizeof queries, "%s", qac_test_data("cranfield/cran.qry"));
    FILE *qf = fopen(queries, "r");
    CHECK_MSG(qf != NULL, "missing %s", queries);
    if (!qf) return;
    const char *idx = qac_test_tmpdir("bm25cran");
    CHECK_OK(qac_bm25_build(idx, corpus, NULL));
    qac_bm25 *b = NULL;
    CHECK_OK(qac_bm25_open(&b, idx));
    if (!b) { fclose(qf); return; }
    CHECK(qac_bm25_count(b) == 1400);
    /* queries: the .W text of each .I record (SMART), read here directly */
    char line[4096], q[8192] = "";
    int nq = 0, bad = 0, inw = 0;
    const qac_bm25_params ps[] = {{0.9f, 0.4f, 0}, {1.2f, 0.75f, 1}};
    for (int more = 1; more;) {
        more = fgets(line, sizeof line, qf) != NULL;
        if (!more || strncmp(line, ".I", 2) == 0) {
            if (inw) {
                nq++;
                for (int pi = 0; pi < 2; pi++)
                    for (int k = 10; k <= 1000; k *= 10) bad += !same_results(b, q, &ps[pi], k);
            }
            q[0] = 0;
            inw = 0;
        } else if (strncmp(line, ".W", 2) == 0) inw = 1;
        else if (inw && strlen(q) + strlen(line) < sizeof q) strcat(q, line);
    }
    fclose(qf);
    printf("cranfield: %d queries x 6 settings, %d differ from exhaustive\n", nq, bad);
    CHECK(nq == 225);
    CHECK(bad == 0);
    qac_bm25_free(b);

    /* corruption: flip one byte in the postings, truncate, bad magic */
    char path[4096];
    snprintf(path, sizeof path, "%s/bm25.idx", idx);
    char *data = NULL;
    size_t len = 0;
    CHECK_OK(qac_read_file(path, &data, &len));
    if (!data) return;
    const char *dir2 = qac_test_tmpdir("bm25bad");
    char p2[4096];
    snprintf(p2, sizeof p2, "%s/bm25.idx", dir2);
    struct { size_t off; int truncate; const char *needle; } cases[] = {
        {len - 100, 0, "checksum"}, {len / 2, 0, "checksum"}, {len - 8, 1, "size"}, {0, 0, "magic"}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        FILE *f = fopen(p2, "wb");
        if (!f) { CHECK(0); break; }
        data[cases[c].off] ^= 0x5a;
        fwrite(data, 1, cases[c].truncate ? cases[c].off : len, f);
        data[cases[c].off] ^= 0x5a;
        fclose(f);
        qac_bm25 *bb = NULL;
        CHECK_ERR(qac_bm25_open(&bb, dir2), QAC_ERR_FORMAT, cases[c].needle);
        CHECK(bb == NULL);
    }
    free(data);
    qac_bm25 *none = NULL;
    CHECK_ERR(qac_bm25_open(&none, "/nonexistent-qac-dir"), QAC_ERR_NOT_FOUND, "bm25.idx");
    qac_bm25_free(NULL);
}

int main(void) {
    test_analyzer();
    test_norms();
    test_ties();
    test_synthetic();
    test_cranfield();
    return qac_test_summary();
}
