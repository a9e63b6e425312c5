/* A JSON writer for the answers that grow with their input (/search,
 * /encode, /v1/embeddings, /tokenize, TEI's /embed, /tokenize and
 * /decode): bytes go straight into one buffer, as jansson's json_dumps
 * would write them (compact, reals at 9 significant digits), without the
 * tree of one allocation per value that made a 27 MB answer cost 330 MB.
 *
 * Sizes first: each route computes a bound on its answer before any work
 * (qac_jw_*_max below, or the exact size from a dry run of the same
 * writing code into a counting writer, qac_jw_count), refuses it
 * when the bound passes --max-response-bytes (qac_srv_response_fits),
 * and otherwise opens the writer with the bound as its capacity. The
 * buffer is malloc'd once at that size and its pages are touched only as
 * bytes are written, so memory follows the real answer. Writing past the
 * capacity is a broken bound: the writer stops and the route answers 500,
 * never a truncated body. A non-finite number (JSON has none) stops it too
 * (jansson's json_real returned NULL there, and the value went missing). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv_internal.h"

int qac_jw_open(qac_jw *w, size_t cap) {
    memset(w, 0, sizeof *w);
    w->buf = malloc(cap + 1);
    if (!w->buf) return 0;
    w->cap = cap;
    return 1;
}

void qac_jw_free(qac_jw *w) {
    free(w->buf);
    memset(w, 0, sizeof *w);
}

void qac_jw_count(qac_jw *w) {
    memset(w, 0, sizeof *w);
    w->cap = (size_t)-1;
}

void qac_jw_raw(qac_jw *w, const char *s, size_t n) {
    if (!w->buf) { /* counting */
        w->len += n;
        return;
    }
    if (w->fault) return;
    if (n > w->cap - w->len) {
        w->fault = "the answer is larger than its bound";
        return;
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
}

void qac_jw_lit(qac_jw *w, const char *s) { qac_jw_raw(w, s, strlen(s)); }

/* The escape of byte c as jansson writes it (dump.c): 0 when none. */
static const char *escape_of(unsigned char c, char tmp[8]) {
    switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default:
        if (c >= 0x20) return NULL;
        snprintf(tmp, 8, "\\u%04X", c);
        return tmp;
    }
}

/* The character at s[i] (i < n): its bytes when it is valid UTF-8, or
 * minus the bytes of the invalid sequence there (its maximal subpart, as
 * Unicode and Rust's from_utf8_lossy count it), which becomes one U+FFFD. */
static int utf8_step(const unsigned char *s, size_t n, size_t i) {
    unsigned char c = s[i];
    if (c < 0x80) return 1;
    int need;
    unsigned char lo = 0x80, hi = 0xBF; /* the first continuation byte's range */
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) need = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) need = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return -1;
    for (int k = 1; k <= need; k++) {
        if (i + (size_t)k >= n) return -k;
        unsigned char b = s[i + (size_t)k];
        if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return -k;
    }
    return need + 1;
}

#define REPLACEMENT "\xef\xbf\xbd" /* U+FFFD */

size_t qac_jw_str_size(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t k = 2;
    char tmp[8];
    for (size_t i = 0; i < n;) {
        int step = utf8_step(u, n, i);
        if (step < 0) {
            k += 3;
            i += (size_t)-step;
            continue;
        }
        const char *e = step == 1 ? escape_of(u[i], tmp) : NULL;
        k += e ? strlen(e) : (size_t)step;
        i += (size_t)step;
    }
    return k;
}

void qac_jw_str(qac_jw *w, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    char tmp[8];
    size_t run = 0; /* bytes copied as they are, in one go */
    qac_jw_raw(w, "\"", 1);
    for (size_t i = 0; i < n;) {
        int step = utf8_step(u, n, i);
        const char *e = step < 0 ? REPLACEMENT : step == 1 ? escape_of(u[i], tmp) : NULL;
        if (!e) {
            run += (size_t)step;
            i += (size_t)step;
            continue;
        }
        qac_jw_raw(w, s + i - run, run);
        run = 0;
        qac_jw_lit(w, e);
        i += (size_t)(step < 0 ? -step : step);
    }
    qac_jw_raw(w, s + n - run, run);
    qac_jw_raw(w, "\"", 1);
}

void qac_jw_int(qac_jw *w, long long v) {
    char tmp[24];
    int n = snprintf(tmp, sizeof tmp, "%lld", v);
    qac_jw_raw(w, tmp, (size_t)n);
}

/* jansson's jsonp_dtostr at precision 9: "%.9g", a ".0" when it reads as an
 * integer, and the exponent without "+" or leading zeros. */
void qac_jw_real(qac_jw *w, double v) {
    if (!isfinite(v)) {
        if (!w->fault) w->fault = "a value is not a finite number";
        return;
    }
    char tmp[40];
    int n = snprintf(tmp, sizeof tmp, "%.9g", v);
    if (!strchr(tmp, '.') && !strchr(tmp, 'e')) {
        memcpy(tmp + n, ".0", 3);
        n += 2;
    }
    char *e = strchr(tmp, 'e');
    if (e) {
        char *from = e + 1, *to = e + 1;
        if (*from == '+') from++;
        else if (*from == '-') from++, to++;
        while (*from == '0' && from[1]) from++;
        memmove(to, from, strlen(from) + 1);
        n = (int)strlen(tmp);
    }
    qac_jw_raw(w, tmp, (size_t)n);
}

void qac_jw_reply(qac_jw *w, qac_http_response *r, qac_reply_shape shape) {
    if (w->fault) {
        qac_srv_error(r, shape, 500, shape == QAC_REPLY_TEI ? "Backend" : "internal", "%s", w->fault);
        qac_jw_free(w);
        return;
    }
    w->buf[w->len] = '\0';
    free(r->body);
    r->status = 200;
    r->body = w->buf;
    r->body_len = w->len;
    r->content_type = "application/json";
    memset(w, 0, sizeof *w);
}

size_t qac_jw_digits(long long v) {
    char tmp[24];
    return (size_t)snprintf(tmp, sizeof tmp, "%lld", v);
}

int qac_srv_response_fits(const qac_server *s, size_t bound, qac_reply_shape shape, const char *fix,
                          qac_http_response *r) {
    if (bound <= (size_t)s->cfg.max_response_bytes) return 1;
    qac_srv_error(r, shape, 413, shape == QAC_REPLY_TEI ? "Validation" : "payload_too_large",
                  "the answer could be up to %zu bytes, more than the limit of %lld (max-response-bytes); %s", bound,
                  s->cfg.max_response_bytes, fix);
    return 0;
}

size_t qac_jw_floats_max(int n) { return 2 + (size_t)n * (QAC_JW_REAL_MAX + 1); }

void qac_jw_floats(qac_jw *w, const float *x, int n) {
    qac_jw_raw(w, "[", 1);
    for (int i = 0; i < n; i++) {
        if (i) qac_jw_raw(w, ",", 1);
        qac_jw_real(w, x[i]);
    }
    qac_jw_raw(w, "]", 1);
}

size_t qac_jw_base64_size(int n) { return 2 + ((size_t)n * 4 + 2) / 3 * 4; }

void qac_jw_base64_floats(qac_jw *w, const float *x, int n) {
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t nbytes = (size_t)n * 4;
    qac_jw_raw(w, "\"", 1);
    for (size_t i = 0; i < nbytes; i += 3) {
        uint32_t v = 0;
        for (size_t k = 0; k < 3; k++) { /* little-endian float32, whatever the host */
            if (i + k >= nbytes) break;
            uint32_t u;
            memcpy(&u, &x[(i + k) / 4], 4);
            v |= ((u >> (8 * ((i + k) % 4))) & 0xFFu) << (16 - 8 * k);
        }
        char out[4] = {tbl[(v >> 18) & 63], tbl[(v >> 12) & 63], i + 1 < nbytes ? tbl[(v >> 6) & 63] : '=',
                       i + 2 < nbytes ? tbl[v & 63] : '='};
        qac_jw_raw(w, out, 4);
    }
    qac_jw_raw(w, "\"", 1);
}
