/* The request-head checker of srv_head.c: verdicts for valid and invalid
 * heads, every prefix of a valid head is "incomplete" (the gate runs it on
 * partial heads), and the size limits. */
#include <stdlib.h>
#include <string.h>

#include "srv_internal.h"
#include "testutil.h"

#define MAX_HEAD 1024

static qac_head_result check(const char *head, qac_head_verdict *v) {
    return qac_head_check(head, strlen(head), MAX_HEAD, QAC_HEAD_MAX_FIELDS, v);
}

static void expect_ok(const char *head) {
    qac_head_verdict v;
    qac_head_result r = check(head, &v);
    CHECK_MSG(r == QAC_HEAD_OK && v.head_len == strlen(head), "valid head refused (%d %d %s): %s", r, v.status,
              v.message ? v.message : "", head);
    /* every proper prefix is incomplete, never an error */
    for (size_t n = 0; n < strlen(head); n++) {
        r = qac_head_check(head, n, MAX_HEAD, QAC_HEAD_MAX_FIELDS, &v);
        if (r != QAC_HEAD_INCOMPLETE) {
            CHECK_MSG(0, "prefix of %zu bytes: %d (%s) for %s", n, r, v.message ? v.message : "", head);
            break;
        }
    }
    /* bytes after the head (a body, a pipelined request) change nothing */
    char *more = malloc(strlen(head) + 32);
    strcpy(more, head);
    strcat(more, "GET / HTTP/1.1\r\n\x01garbage");
    r = check(more, &v);
    CHECK_MSG(r == QAC_HEAD_OK && v.head_len == strlen(head), "a head followed by more bytes: %d", r);
    free(more);
}

static void expect_error(const char *head, int status, const char *type) {
    qac_head_verdict v;
    qac_head_result r = check(head, &v);
    CHECK_MSG(r == QAC_HEAD_ERROR && v.status == status && !strcmp(v.type, type) && v.message && *v.message,
              "want %d %s, got %d %d %s: %s", status, type, r, v.status, v.type ? v.type : "", head);
}

static void test_valid(void) {
    expect_ok("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    expect_ok("GET /health HTTP/1.0\r\n\r\n");
    expect_ok("\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n");
    expect_ok("POST /search?x=1 HTTP/1.1\r\nhost:x\r\nContent-Length: 12\r\nX-Empty:\r\n\r\n");
    expect_ok("POST /search HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:  ChUnKeD \r\n\r\n");
    expect_ok("GET /p HTTP/1.1\r\nHost: x\r\nX-T:\ta\tb\t\r\nX-Obs: caf\xc3\xa9\r\n\r\n");
    expect_ok("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n");
    expect_ok("GET http://x/health HTTP/1.1\r\nHost: x\r\n\r\n");
    expect_ok("GET / HTTP/1.9\r\nHost: x\r\n\r\n");
}

static void test_invalid(void) {
    const char *bad = "invalid_request";
    expect_error("GET /\r\nHost: x\r\n\r\n", 400, bad);
    expect_error("GET  / HTTP/1.1\r\nHost: x\r\n\r\n", 400, bad);
    expect_error("GET / HTTP/1.1 \r\nHost: x\r\n\r\n", 400, bad);
    expect_error("GET / http/1.1\r\nHost: x\r\n\r\n", 400, bad);
    expect_error("GET / HTTP/1.10\r\nHost: x\r\n\r\n", 400, bad);
    expect_error("GET / HTTP/1\r\nHost: x\r\n\r\n", 400, bad);
    expect_error(" / HTTP/1.1\r\nHost: x\r\n\r\n", 400, bad);
    expect_error("G(T / HTTP/1.1\r\nHost: x\r\n\r\n", 400, bad);
    expect_error("GET /\x7f HTTP/1.1\r\nHost: x\r\n\r\n", 400, bad);
    expect_error("GET /\xc3\xa9 HTTP/1.1\r\nHost: x\r\n\r\n", 400, bad);
    expect_error("GET / HTTP/1.1\r\nHost: x\r\nBad Name: y\r\n\r\n", 400, bad);
    expect_error("GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400, bad);
    expect_error("GET / HTTP/1.1\r\nHost: x\r\n: y\r\n\r\n", 400, bad);
    expect_error("GET / HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n", 400, bad);
    expect_error("GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n folded\r\n\r\n", 400, bad);
    expect_error("GET / HTTP/1.1\r\n\tHost: x\r\n\r\n", 400, bad);
    expect_error("GET / HTTP/1.1\nHost: x\r\n\r\n", 400, bad);
    expect_error("GET / HTTP/1.1\r\nHost: x\n\r\n", 400, bad);
    expect_error("GET / HTTP/1.1\r\nHost: x\r\n\n", 400, bad);
    expect_error("GET / HTTP/1.1\rHost: x\r\n\r\n", 400, bad);
    expect_error("GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", 400, bad);
    expect_error("GET / HTTP/1.1\r\nHost: x\r\n\r\r", 400, bad);
    expect_error("\n\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", 400, bad);
    expect_error("\r\n\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", 400, bad);
    expect_error("GET / HTTP/1.1\r\nHost: x\r\nX: a\x01\r\n\r\n", 400, bad);
    expect_error("GET / HTTP/1.1\r\nX: a\r\n\r\n", 400, bad);
    expect_error("GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400, bad);
    expect_error("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1a\r\n\r\n", 400, bad);
    expect_error("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: \r\n\r\n", 400, bad);
    expect_error("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +1\r\n\r\n", 400, bad);
    expect_error("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1, 1\r\n\r\n", 400, bad);
    expect_error("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", 400, bad);
    expect_error("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n", 413,
                 "payload_too_large");
    expect_error("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400, bad);
    expect_error("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
                 400, bad);
    expect_error("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400, bad);
    expect_error("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501, "not_implemented");
    expect_error("GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505, bad);
    expect_error("GET / HTTP/0.9\r\nHost: x\r\n\r\n", 505, bad);
    expect_error("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505, bad);
}

/* Errors are found as early as the bytes allow: a bad request line with
 * its head unfinished is already an error. */
static void test_early(void) {
    qac_head_verdict v;
    const char *p = "GET /a b";
    CHECK(qac_head_check(p, strlen(p), MAX_HEAD, QAC_HEAD_MAX_FIELDS, &v) == QAC_HEAD_INCOMPLETE);
    p = "GET /a HTTP/1.1\rX";
    CHECK(qac_head_check(p, strlen(p), MAX_HEAD, QAC_HEAD_MAX_FIELDS, &v) == QAC_HEAD_ERROR && v.status == 400);
    p = "\x16\x03\x01";
    CHECK(qac_head_check(p, strlen(p), MAX_HEAD, QAC_HEAD_MAX_FIELDS, &v) == QAC_HEAD_ERROR && v.status == 400);
    p = "GET / HTTP/1.1\r\nHost: x\r\nX-A: b\x00";
    CHECK(qac_head_check(p, strlen(p) + 1, MAX_HEAD, QAC_HEAD_MAX_FIELDS, &v) == QAC_HEAD_ERROR);
}

static void test_limits(void) {
    qac_head_verdict v;
    char *b = malloc(4 * MAX_HEAD);
    /* request line past the limit, unfinished: 414 */
    strcpy(b, "GET /");
    memset(b + 5, 'a', 2 * MAX_HEAD);
    CHECK(qac_head_check(b, 5 + 2 * MAX_HEAD, MAX_HEAD, QAC_HEAD_MAX_FIELDS, &v) == QAC_HEAD_ERROR && v.status == 414);
    /* short of the limit it may still end in time; at it, it cannot */
    CHECK(qac_head_check(b, MAX_HEAD - 1, MAX_HEAD, QAC_HEAD_MAX_FIELDS, &v) == QAC_HEAD_INCOMPLETE);
    CHECK(qac_head_check(b, MAX_HEAD, MAX_HEAD, QAC_HEAD_MAX_FIELDS, &v) == QAC_HEAD_ERROR && v.status == 414);
    /* headers past the limit: 431 */
    strcpy(b, "GET / HTTP/1.1\r\nHost: x\r\nX: ");
    size_t n = strlen(b);
    memset(b + n, 'z', 2 * MAX_HEAD);
    CHECK(qac_head_check(b, n + 2 * MAX_HEAD, MAX_HEAD, QAC_HEAD_MAX_FIELDS, &v) == QAC_HEAD_ERROR && v.status == 431);
    /* a head of exactly MAX_HEAD bytes passes, one more is 431 */
    for (size_t len = MAX_HEAD; len <= MAX_HEAD + 1; len++) {
        strcpy(b, "GET / HTTP/1.1\r\nHost: x\r\nX: ");
        n = strlen(b);
        memset(b + n, 'z', len - n - 4);
        memcpy(b + len - 4, "\r\n\r\n", 5);
        qac_head_result r = qac_head_check(b, len, MAX_HEAD, QAC_HEAD_MAX_FIELDS, &v);
        CHECK_MSG(len == MAX_HEAD ? r == QAC_HEAD_OK : (r == QAC_HEAD_ERROR && v.status == 431),
                  "a head of %zu bytes: %d %d", len, r, v.status);
    }
    /* field count */
    for (int fields = QAC_HEAD_MAX_FIELDS; fields <= QAC_HEAD_MAX_FIELDS + 1; fields++) {
        char *p = b;
        p += sprintf(p, "GET / HTTP/1.1\r\nHost: x\r\n");
        for (int i = 1; i < fields; i++) p += sprintf(p, "H%d:\r\n", i);
        strcpy(p, "\r\n");
        qac_head_result r = qac_head_check(b, strlen(b), 4 * MAX_HEAD, QAC_HEAD_MAX_FIELDS, &v);
        CHECK_MSG(fields == QAC_HEAD_MAX_FIELDS ? r == QAC_HEAD_OK : (r == QAC_HEAD_ERROR && v.status == 431),
                  "%d header lines: %d %d %s", fields, r, v.status, v.message ? v.message : "");
    }
    free(b);
}

static void test_pipelined(void) {
    qac_head_verdict v, bad;
    const char *good = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n";
    const char *post = "POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
    const char *chunked = "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    const char *nocolon = "GET /d HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n";
    char buf[1024];
    struct {
        const char *parts[4];
        int want;
        int status;
    } cases[] = {
        {{good, NULL}, 0, 0},
        {{good, good, good, NULL}, 0, 0},
        {{good, nocolon, NULL}, 1, 400},
        {{post, good, nocolon, NULL}, 2, 400},
        {{good, "GET / HTTP/2.0\r\nHost: x\r\n\r\n", NULL}, 1, 505},
        {{chunked, nocolon, NULL}, 1, 400},         /* past a whole chunked body */
        {{good, "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", NULL}, 1, 400},
        {{chunked, "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", NULL}, 0, 0},
        {{good, "GET /e HTTP/1.1\r\nHo", NULL}, 0, 0}, /* unfinished: not known yet */
        {{good, "GET /e HTTP/1.1\r\nHo\n", NULL}, 1, 400},
        {{"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\nshort", NULL}, 0, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        buf[0] = '\0';
        for (int i = 0; cases[c].parts[i]; i++) strcat(buf, cases[c].parts[i]);
        CHECK(check(buf, &v) == QAC_HEAD_OK);
        int k = qac_head_pipelined(buf, strlen(buf), &v, MAX_HEAD, QAC_HEAD_MAX_FIELDS, &bad, NULL);
        CHECK_MSG(k == cases[c].want && (!k || bad.status == cases[c].status), "pipelined case %zu: %d (%d)", c, k,
                  k ? bad.status : 0);
    }
}

static void test_chunked(void) {
    const char *ok[] = {"0\r\n\r\n", "5\r\nhello\r\n0\r\n\r\n", "5;a=b;c\r\nhello\r\nA\r\n0123456789\r\n000\r\n\r\n",
                        "0\r\nX-T: v\r\nY:\r\n\r\n", "0000000000000001\r\nx\r\n0\r\n\r\n"};
    for (size_t c = 0; c < sizeof ok / sizeof ok[0]; c++) {
        size_t n = strlen(ok[c]), body = 0;
        qac_head_verdict v;
        CHECK_MSG(qac_head_chunked(ok[c], n, MAX_HEAD, QAC_HEAD_MAX_FIELDS, &body, &v) == QAC_HEAD_OK && body == n,
                  "valid chunked body %zu: %s", c, v.message ? v.message : "");
        for (size_t k = 0; k < n; k++)
            if (qac_head_chunked(ok[c], k, MAX_HEAD, QAC_HEAD_MAX_FIELDS, &body, &v) != QAC_HEAD_INCOMPLETE) {
                CHECK_MSG(0, "chunked body %zu, prefix %zu: not incomplete", c, k);
                break;
            }
    }
    struct {
        const char *body;
        int status;
    } bad[] = {{"zz\r\n", 400},          {"\r\n", 400},          {";x\r\n", 400},         {"5 ;x\r\n", 400},
               {"5\nhello\r\n", 400},    {"5\rx", 400},           {"2\r\nabX", 400},       {"2\r\nab\n0\r\n\r\n", 400},
               {"0\r\nNo colon\r\n\r\n", 400}, {"0\r\n folded: x\r\n\r\n", 400}, {"0\r\n\n", 400},
               {"fffffffffffffffffffff\r\n", 413}, {"0\r\nX: a\x01\r\n\r\n", 400},
               /* issue 38: a size padded past 16 digits (wire without body), a bare LF after data
                * as within the size line */
               {"00000000000000001\r\nx\r\n0\r\n\r\n", 400}, {"1\r\nx\r\n0\n\r\n", 400}};
    for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++) {
        size_t body;
        qac_head_verdict v;
        qac_head_result r = qac_head_chunked(bad[c].body, strlen(bad[c].body), MAX_HEAD, QAC_HEAD_MAX_FIELDS, &body, &v);
        CHECK_MSG(r == QAC_HEAD_ERROR && v.status == bad[c].status, "bad chunked body %zu: %d %d", c, r, v.status);
    }
    /* the bounds at their edge (issue 38: a 200 KB extension or trailer reached
     * the HTTP library, which answered them in HTML 500 and 431) */
    size_t cap = 2 * QAC_CHUNK_LINE_MAX + MAX_HEAD + 64, body;
    char *b = malloc(cap);
    qac_head_verdict v;
    for (int extra = 0; extra <= 1; extra++) { /* "1;" + extension + CRLF: QAC_CHUNK_LINE_MAX (+1) bytes */
        size_t n = (size_t)QAC_CHUNK_LINE_MAX - 4 + (size_t)extra;
        int k = sprintf(b, "1;");
        memset(b + k, 'e', n);
        strcpy(b + k + n, "\r\nx\r\n0\r\n\r\n");
        qac_head_result r = qac_head_chunked(b, strlen(b), MAX_HEAD, QAC_HEAD_MAX_FIELDS, &body, &v);
        CHECK_MSG(extra ? r == QAC_HEAD_ERROR && v.status == 400 : r == QAC_HEAD_OK,
                  "a chunk-size line of %zu bytes: %d %d", n + 4, r, v.status);
    }
    for (int extra = 0; extra <= 1; extra++) { /* "0\r\n", then a trailer section of MAX_HEAD (+1) bytes */
        size_t n = MAX_HEAD - 6 + (size_t)extra; /* "X:" + value + "\r\n" + "\r\n" */
        int k = sprintf(b, "0\r\nX:");
        memset(b + k, 't', n);
        strcpy(b + k + n, "\r\n\r\n");
        qac_head_result r = qac_head_chunked(b, strlen(b), MAX_HEAD, QAC_HEAD_MAX_FIELDS, &body, &v);
        CHECK_MSG(extra ? r == QAC_HEAD_ERROR && v.status == 431 : r == QAC_HEAD_OK,
                  "a trailer section of %zu bytes: %d %d", strlen(b) - 3, r, v.status);
    }
    free(b);
    /* fed a byte at a time, the parser gives the same data and end as in one go */
    const char *whole = "3;e=1\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nT: x\r\n\r\n";
    qac_chunked c;
    qac_chunked_init(&c, MAX_HEAD, QAC_HEAD_MAX_FIELDS);
    char data[64];
    size_t got = 0, at = 0, len = strlen(whole);
    qac_head_result r = QAC_HEAD_INCOMPLETE;
    while (r == QAC_HEAD_INCOMPLETE && at < len) {
        size_t used, off, n;
        r = qac_chunked_feed(&c, whole + at, 1, &used, &off, &n, &v);
        memcpy(data + got, whole + at + off, n);
        got += n;
        at += used;
    }
    CHECK_MSG(r == QAC_HEAD_OK && at == len && got == 19 && !memcmp(data, "abc0123456789abcdef", 19),
              "byte at a time: %d, %zu of %zu, data %.*s", r, at, len, (int)got, data);
}

int main(void) {
    test_chunked();
    test_pipelined();
    test_valid();
    test_invalid();
    test_early();
    test_limits();
    return qac_test_summary();
}
