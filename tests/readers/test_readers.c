/* Corpus/query readers and the run writer: every format, error paths with
 * line numbers, seek/resume, and the real Cranfield files. */
#include <stdlib.h>
#include <string.h>

#include "qac_data.h"
#include "testutil.h"

static char dir[4096];

static const char *write_file(const char *name, const char *data, size_t len) {
    static char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
    return path;
}
#define WRITE(name, lit) write_file(name, lit, sizeof(lit) - 1)

/* Read every record; ids/texts joined with '|' into caller buffers. */
typedef struct got_all {
    int n;
    char ids[4096], texts[8192];
    uint64_t offsets[64];
    int64_t lines[64];
} got_all;

static qac_status read_all(qac_reader *r, got_all *g) {
    memset(g, 0, sizeof *g);
    qac_record rec;
    int got;
    qac_status st;
    while ((st = qac_reader_next(r, &rec, &got)) == QAC_OK && got) {
        if (g->n < 64) {
            g->offsets[g->n] = rec.offset;
            g->lines[g->n] = rec.line;
        }
        g->n++;
        strncat(g->ids, rec.id, sizeof g->ids - strlen(g->ids) - 2);
        strcat(g->ids, "|");
        strncat(g->texts, rec.text, sizeof g->texts - strlen(g->texts) - 2);
        strcat(g->texts, "|");
    }
    return st;
}

static qac_status open_read(const char *path, qac_reader_kind kind, qac_text_format fmt, got_all *g,
                            qac_text_format *detected) {
    qac_reader *r = NULL;
    qac_status st = qac_reader_open(&r, path, kind, fmt);
    if (st) return st;
    if (detected) *detected = qac_reader_format(r);
    st = read_all(r, g);
    qac_reader_free(r);
    return st;
}

static void test_tsv(void) {
    got_all g;
    qac_text_format f;
    /* BOM, CRLF, an empty line, a tab inside the text, no final newline */
    const char *p = WRITE("collection.tsv", "\xEF\xBB\xBF" "0\tThe presence of\r\n1\tsecond passage\n\n7\ta\tb\n9\tlast");
    CHECK_OK(open_read(p, QAC_READ_CORPUS, QAC_FMT_AUTO, &g, &f));
    CHECK(f == QAC_FMT_TSV);
    CHECK(g.n == 4);
    CHECK_MSG(strcmp(g.ids, "0|1|7|9|") == 0, "ids %s", g.ids);
    CHECK_MSG(strcmp(g.texts, "The presence of|second passage|a\tb|last|") == 0, "texts %s", g.texts);
    CHECK(g.offsets[0] == 3 && g.lines[0] == 1);
    CHECK(g.offsets[1] == 3 + 19 && g.lines[1] == 2);
    CHECK(g.lines[2] == 4 && g.lines[3] == 5);

    /* queries.tsv without extension hint: detected by the tab */
    p = WRITE("queries.dev", "1048585\twhat is paula deen's brother\n2\tx\n");
    CHECK_OK(open_read(p, QAC_READ_QUERIES, QAC_FMT_AUTO, &g, &f));
    CHECK(f == QAC_FMT_TSV && g.n == 2);
    CHECK(strcmp(g.ids, "1048585|2|") == 0);

    /* a file without records (empty, or blank lines only) is refused at open, by name */
    p = WRITE("empty.tsv", "");
    CHECK_ERR(open_read(p, QAC_READ_CORPUS, QAC_FMT_AUTO, &g, NULL), QAC_ERR_INVALID, "empty.tsv is empty");
    p = WRITE("blank.jsonl", "\n  \n");
    CHECK_ERR(open_read(p, QAC_READ_QUERIES, QAC_FMT_BEIR, &g, NULL), QAC_ERR_INVALID, "holds no queries");
    /* a directory is named as one, not "read DIR: Success" at the first line */
    char dpath[4096];
    snprintf(dpath, sizeof dpath, "%s", p);
    *strrchr(dpath, '/') = '\0';
    CHECK_ERR(open_read(dpath, QAC_READ_CORPUS, QAC_FMT_AUTO, &g, NULL), QAC_ERR_INVALID, "is a directory, not a file");

    /* a 3 MB line: no fixed line buffer */
    size_t big = 3u << 20;
    char *data = malloc(big + 16);
    memcpy(data, "a\t", 2);
    memset(data + 2, 'x', big);
    memcpy(data + 2 + big, "\nb\tyy\n", 6);
    p = write_file("long.tsv", data, big + 8);
    qac_reader *r;
    CHECK_OK(qac_reader_open(&r, p, QAC_READ_CORPUS, QAC_FMT_AUTO));
    qac_record rec;
    int gotr;
    CHECK_OK(qac_reader_next(r, &rec, &gotr));
    CHECK(gotr && rec.text_len == big && rec.text[big - 1] == 'x' && rec.text[big] == 0);
    CHECK_OK(qac_reader_next(r, &rec, &gotr));
    CHECK(gotr && strcmp(rec.id, "b") == 0 && rec.offset == big + 3 && rec.line == 2);
    CHECK(qac_reader_file_size(r) == big + 8);
    qac_reader_free(r);
    free(data);
}

static void test_json(void) {
    got_all g;
    qac_text_format f;
    const char *p = WRITE("corpus.jsonl",
                          "{\"_id\": \"d1\", \"title\": \"Title One\", \"text\": \"body one\"}\n"
                          "{\"_id\": \"d2\", \"title\": \"\", \"text\": \"body two\", \"metadata\": {}}\r\n"
                          "{\"_id\": \"d3\", \"text\": \"no title \\u00e9\"}\n"
                          "{\"_id\": \"d4\", \"title\": \"only title\", \"text\": \"\"}");
    CHECK_OK(open_read(p, QAC_READ_CORPUS, QAC_FMT_AUTO, &g, &f));
    CHECK(f == QAC_FMT_BEIR && g.n == 4);
    CHECK(strcmp(g.ids, "d1|d2|d3|d4|") == 0);
    CHECK_MSG(strcmp(g.texts, "Title One body one|body two|no title \xC3\xA9|only title|") == 0, "%s", g.texts);
    CHECK(g.lines[3] == 4);

    qac_reader *r;
    qac_record rec;
    int got;
    CHECK_OK(qac_reader_open(&r, p, QAC_READ_CORPUS, QAC_FMT_BEIR));
    CHECK_OK(qac_reader_next(r, &rec, &got));
    CHECK(got && strcmp(rec.title, "Title One") == 0);
    qac_reader_free(r);

    p = WRITE("queries.jsonl", "{\"_id\": \"q1\", \"text\": \"what is it\", \"metadata\": {}}\n"
                               "{\"_id\": \"q2\", \"text\": \"second\"}\n");
    CHECK_OK(open_read(p, QAC_READ_QUERIES, QAC_FMT_AUTO, &g, &f));
    CHECK(f == QAC_FMT_BEIR && strcmp(g.ids, "q1|q2|") == 0 && strcmp(g.texts, "what is it|second|") == 0);

    /* Tevatron corpus, detected from the keys; no extension, first byte '{' */
    p = WRITE("tev_corpus", "{\"docid\": \"7\", \"title\": \"T\", \"text\": \"passage\"}\n"
                            "{\"docid\": \"8\", \"title\": \"\", \"text\": \"p2\"}\n");
    CHECK_OK(open_read(p, QAC_READ_CORPUS, QAC_FMT_AUTO, &g, &f));
    CHECK(f == QAC_FMT_TEVATRON && strcmp(g.ids, "7|8|") == 0 && strcmp(g.texts, "T passage|p2|") == 0);
    p = WRITE("tev_queries.jsonl", "{\"query_id\": \"3\", \"query\": \"hello\"}\n");
    CHECK_OK(open_read(p, QAC_READ_QUERIES, QAC_FMT_AUTO, &g, &f));
    CHECK(f == QAC_FMT_TEVATRON && strcmp(g.ids, "3|") == 0 && strcmp(g.texts, "hello|") == 0);
    /* any JSONL takes _id, id or docid (query_id for queries), whatever the flavour */
    CHECK_OK(open_read(p, QAC_READ_QUERIES, QAC_FMT_BEIR, &g, NULL));
    CHECK(strcmp(g.ids, "3|") == 0 && strcmp(g.texts, "hello|") == 0);
    p = WRITE("plain.jsonl", "{\"id\": \"a1\", \"text\": \"first\"}\n{\"id\": \"a2\", \"title\": \"T\", \"text\": \"second\"}\n");
    CHECK_OK(open_read(p, QAC_READ_CORPUS, QAC_FMT_AUTO, &g, NULL));
    CHECK(strcmp(g.ids, "a1|a2|") == 0 && strcmp(g.texts, "first|T second|") == 0);
    CHECK_OK(open_read(p, QAC_READ_QUERIES, QAC_FMT_AUTO, &g, NULL));
    CHECK(strcmp(g.ids, "a1|a2|") == 0 && strcmp(g.texts, "first|second|") == 0);
    p = WRITE("tev_docid_queries.jsonl", "{\"docid\": \"9\", \"text\": \"q\"}\n");
    CHECK_OK(open_read(p, QAC_READ_QUERIES, QAC_FMT_AUTO, &g, NULL));
    CHECK(strcmp(g.ids, "9|") == 0);
    /* no id field: the error names every accepted one */
    p = WRITE("noid.jsonl", "{\"pid\": \"1\", \"text\": \"x\"}\n");
    CHECK_ERR(open_read(p, QAC_READ_CORPUS, QAC_FMT_AUTO, &g, NULL), QAC_ERR_FORMAT,
              "noid.jsonl:1: missing id field (one of \"_id\", \"id\", \"docid\")");
    CHECK_ERR(open_read(p, QAC_READ_QUERIES, QAC_FMT_AUTO, &g, NULL), QAC_ERR_FORMAT,
              "missing id field (one of \"_id\", \"id\", \"query_id\", \"docid\")");
}

static void test_errors(void) {
    got_all g;
    const char *p;
    p = WRITE("e1.tsv", "1\tok\n2 no tab here\n");
    CHECK_ERR(open_read(p, QAC_READ_CORPUS, QAC_FMT_AUTO, &g, NULL), QAC_ERR_FORMAT, "e1.tsv:2: missing tab");
    p = WRITE("e2.tsv", "1\tok\n\tempty id\n");
    CHECK_ERR(open_read(p, QAC_READ_CORPUS, QAC_FMT_AUTO, &g, NULL), QAC_ERR_FORMAT, "e2.tsv:2: empty id");
    p = WRITE("e3.tsv", "1\tok\n2\tok\n3\tok\n2\tagain\n");
    CHECK_ERR(open_read(p, QAC_READ_CORPUS, QAC_FMT_AUTO, &g, NULL), QAC_ERR_FORMAT,
              "e3.tsv:4: duplicate id '2' (first seen on line 2)");
    p = write_file("e4.tsv", "1\tok\n2\tbad\0byte\n", 16);
    CHECK_ERR(open_read(p, QAC_READ_CORPUS, QAC_FMT_AUTO, &g, NULL), QAC_ERR_FORMAT, "e4.tsv:2: embedded NUL");
    p = WRITE("e5.jsonl", "{\"_id\": \"a\", \"text\": \"x\"}\n{\"_id\": \"b\", \"text\": \"unterminated\n");
    CHECK_ERR(open_read(p, QAC_READ_CORPUS, QAC_FMT_AUTO, &g, NULL), QAC_ERR_FORMAT, "e5.jsonl:2: bad JSON");
    p = WRITE("e6.jsonl", "{\"_id\": \"a\", \"text\": \"x\"}\n\n{\"_id\": \"b\"}\n");
    CHECK_ERR(open_read(p, QAC_READ_CORPUS, QAC_FMT_AUTO, &g, NULL), QAC_ERR_FORMAT,
              "e6.jsonl:3: missing field \"text\"");
    p = WRITE("e7.jsonl", "{\"_id\": 5, \"text\": \"x\"}\n");
    CHECK_ERR(open_read(p, QAC_READ_CORPUS, QAC_FMT_AUTO, &g, NULL), QAC_ERR_FORMAT,
              "e7.jsonl:1: field \"_id\" is not a string");
    p = WRITE("e8.jsonl", "{\"_id\": \"a\", \"title\": 3, \"text\": \"x\"}\n");
    CHECK_ERR(open_read(p, QAC_READ_CORPUS, QAC_FMT_AUTO, &g, NULL), QAC_ERR_FORMAT,
              "e8.jsonl:1: field \"title\" is not a string");
    p = WRITE("e9.jsonl", "{\"_id\": \"\", \"text\": \"x\"}\n");
    CHECK_ERR(open_read(p, QAC_READ_CORPUS, QAC_FMT_AUTO, &g, NULL), QAC_ERR_FORMAT, "e9.jsonl:1: empty id");
    p = WRITE("e10.jsonl", "{\"_id\": \"a\", \"text\": \"x\\u0000y\"}\n");
    CHECK_ERR(open_read(p, QAC_READ_CORPUS, QAC_FMT_AUTO, &g, NULL), QAC_ERR_FORMAT, "e10.jsonl:1: bad JSON");
    p = WRITE("e11.jsonl", "{\"_id\": \"a\", \"text\": \"x\"}\n[1, 2]\n");
    CHECK_ERR(open_read(p, QAC_READ_CORPUS, QAC_FMT_AUTO, &g, NULL), QAC_ERR_FORMAT, "e11.jsonl:2: bad JSON");
    p = WRITE("e12.jsonl", "{\"_id\": \"a\", \"text\": \"x\"}\n{\"_id\": \"a\", \"text\": \"y\"}\n");
    CHECK_ERR(open_read(p, QAC_READ_CORPUS, QAC_FMT_AUTO, &g, NULL), QAC_ERR_FORMAT,
              "e12.jsonl:2: duplicate id 'a' (first seen on line 1)");
    p = WRITE("e13.cran", ".I 1\n.T\nt\n.W\nw\n.I 2\n.T\nonly a title\n");
    CHECK_ERR(open_read(p, QAC_READ_CORPUS, QAC_FMT_AUTO, &g, NULL), QAC_ERR_FORMAT,
              "e13.cran:6: unterminated record '.I 2'");
    p = WRITE("e14.cran", ".I 1\n.W\nw\n.I 1\n.W\nv\n");
    CHECK_ERR(open_read(p, QAC_READ_CORPUS, QAC_FMT_AUTO, &g, NULL), QAC_ERR_FORMAT,
              "e14.cran:4: duplicate id '1' (first seen on line 1)");
    p = WRITE("e15.cran", ".I 1\nstray text\n.W\nw\n");
    CHECK_ERR(open_read(p, QAC_READ_CORPUS, QAC_FMT_AUTO, &g, NULL), QAC_ERR_FORMAT, "e15.cran:2: text before");
    p = WRITE("e16.cran", "hello\n");
    CHECK_ERR(open_read(p, QAC_READ_CORPUS, QAC_FMT_CRANFIELD, &g, NULL), QAC_ERR_FORMAT, "e16.cran:1: expected");
    p = WRITE("e17", "no tabs and no json\n");
    CHECK_ERR(open_read(p, QAC_READ_CORPUS, QAC_FMT_AUTO, &g, NULL), QAC_ERR_FORMAT, "e17:1: cannot detect");
    CHECK_ERR(open_read("/nonexistent/qac/x.tsv", QAC_READ_CORPUS, QAC_FMT_AUTO, &g, NULL), QAC_ERR_NOT_FOUND,
              "x.tsv");
}

static void test_seek(void) {
    const char *p = WRITE("seek.jsonl", "{\"_id\": \"a\", \"text\": \"1\"}\n"
                                        "{\"_id\": \"b\", \"text\": \"2\"}\n"
                                        "\n"
                                        "{\"_id\": \"c\", \"text\": \"3\"}\n"
                                        "{\"_id\": \"d\", \"text\": \"4\"}\n");
    got_all all, rest;
    CHECK_OK(open_read(p, QAC_READ_CORPUS, QAC_FMT_AUTO, &all, NULL));
    qac_reader *r;
    CHECK_OK(qac_reader_open(&r, p, QAC_READ_CORPUS, QAC_FMT_AUTO));
    CHECK_OK(qac_reader_seek(r, all.offsets[2], all.lines[2]));
    CHECK_OK(read_all(r, &rest));
    CHECK_MSG(strcmp(rest.ids, "c|d|") == 0, "%s", rest.ids);
    CHECK(rest.offsets[0] == all.offsets[2] && rest.lines[0] == 4 && rest.lines[1] == 5);
    /* ids before the offset are forgotten, so resuming twice is fine */
    CHECK_OK(qac_reader_seek(r, all.offsets[1], all.lines[1]));
    CHECK_OK(read_all(r, &rest));
    CHECK(strcmp(rest.ids, "b|c|d|") == 0);
    CHECK_ERR(qac_reader_seek(r, 1u << 30, 1), QAC_ERR_INVALID, "seek");
    qac_reader_free(r);
}

static void test_cranfield(void) {
    char path[4200];
    snprintf(path, sizeof path, "%s", qac_test_data("cranfield/cran.all.1400"));
    FILE *raw = fopen(path, "rb");
    if (!raw) {
        CHECK_MSG(0, "missing %s", path);
        return;
    }
    qac_reader *r;
    qac_record rec;
    int got, n = 0, ids_ok = 1, offsets_ok = 1, no_cr = 1, empty_w = 0;
    uint64_t off500 = 0;
    int64_t line500 = 0;
    CHECK_OK(qac_reader_open(&r, path, QAC_READ_CORPUS, QAC_FMT_AUTO));
    CHECK(qac_reader_format(r) == QAC_FMT_CRANFIELD);
    while (qac_reader_next(r, &rec, &got) == QAC_OK && got) {
        n++;
        char want[32], head[32] = {0};
        snprintf(want, sizeof want, "%d", n);
        if (strcmp(rec.id, want) != 0) ids_ok = 0;
        fseek(raw, (long)rec.offset, SEEK_SET);
        if (!fgets(head, sizeof head, raw) || strncmp(head, ".I ", 3) != 0 || atoi(head + 3) != n) offsets_ok = 0;
        if (strchr(rec.text, '\r') || strchr(rec.text, '\n')) no_cr = 0;
        if (strcmp(rec.text, rec.title) == 0) empty_w++;
        if (n == 1) {
            CHECK(strcmp(rec.title, "experimental investigation of the aerodynamics of a wing in a slipstream .") == 0);
            const char *want1 = "experimental investigation of the aerodynamics of a wing in a slipstream . "
                                "experimental investigation of the aerodynamics of a wing in a slipstream . "
                                "an experimental study";
            CHECK_MSG(strncmp(rec.text, want1, strlen(want1)) == 0, "doc 1: %.200s", rec.text);
            CHECK(rec.line == 1);
        }
        if (n == 471) CHECK(rec.text_len == 0);
        if (n == 500) { off500 = rec.offset; line500 = rec.line; }
    }
    fclose(raw);
    CHECK_MSG(n == 1400, "cranfield docs: %d", n);
    CHECK(ids_ok && offsets_ok && no_cr);
    CHECK_MSG(empty_w >= 2, "documents with an empty .W: %d", empty_w);
    CHECK_OK(qac_reader_seek(r, off500, line500));
    CHECK_OK(qac_reader_next(r, &rec, &got));
    CHECK(got && strcmp(rec.id, "500") == 0 && rec.line == line500);
    qac_reader_free(r);

    snprintf(path, sizeof path, "%s", qac_test_data("cranfield/cran.qry"));
    CHECK_OK(qac_reader_open(&r, path, QAC_READ_QUERIES, QAC_FMT_AUTO));
    CHECK(qac_reader_format(r) == QAC_FMT_CRANFIELD);
    n = 0;
    ids_ok = 1;
    no_cr = 1;
    uint64_t off100 = 0;
    int64_t line100 = 0;
    while (qac_reader_next(r, &rec, &got) == QAC_OK && got) {
        n++;
        char want[32];
        snprintf(want, sizeof want, "%d", n);
        if (strcmp(rec.id, want) != 0) ids_ok = 0;
        if (strchr(rec.text, '\r') || rec.text_len == 0) no_cr = 0;
        if (n == 3) CHECK(strcmp(rec.text, "what problems of heat conduction in composite slabs have been solved so far .") == 0);
        if (n == 100) { off100 = rec.offset; line100 = rec.line; }
    }
    CHECK_MSG(n == 225, "cranfield queries: %d", n);
    CHECK(ids_ok && no_cr);
    /* resuming keeps the ordinal ids, not the .I numbers */
    CHECK_OK(qac_reader_seek(r, off100, line100));
    CHECK_OK(qac_reader_next(r, &rec, &got));
    CHECK_MSG(got && strcmp(rec.id, "100") == 0, "id after seek: %s", got ? rec.id : "(none)");
    qac_reader_free(r);
}

static void test_run_write(void) {
    char path[4200];
    snprintf(path, sizeof path, "%s/run.txt", dir);
    FILE *f = fopen(path, "w");
    const char *docs[] = {"d9", "d10", "d3"};
    float scores[] = {12.5f, 0.1f, -3.25e-7f};
    CHECK_OK(qac_run_write(f, "q1", docs, scores, 3, "qac"));
    CHECK_OK(qac_run_write(f, "q2", docs, scores, 0, "qac"));
    const char *bad[] = {"has space"};
    CHECK_ERR(qac_run_write(f, "q3", bad, scores, 1, "qac"), QAC_ERR_INVALID, "whitespace");
    CHECK_ERR(qac_run_write(f, "q 3", docs, scores, 1, "qac"), QAC_ERR_INVALID, "query id");
    fclose(f);
    char *data = NULL;
    size_t len = 0;
    FILE *in = fopen(path, "rb");
    char buf[512] = {0};
    len = fread(buf, 1, sizeof buf - 1, in);
    fclose(in);
    data = buf;
    CHECK_MSG(strcmp(data, "q1 Q0 d9 1 12.5 qac\nq1 Q0 d10 2 0.100000001 qac\nq1 Q0 d3 3 -3.25000002e-07 qac\n") == 0,
              "run:\n%s (%zu bytes)", data, len);
    /* the printed score parses back to the same float */
    CHECK((float)strtod("0.100000001", NULL) == 0.1f);
}

int main(void) {
    snprintf(dir, sizeof dir, "%s", qac_test_tmpdir("readers"));
    test_tsv();
    test_json();
    test_errors();
    test_seek();
    test_cranfield();
    test_run_write();
    return qac_test_summary();
}
