/* A strict HTTP/1.1 request-head checker (RFC 9112), without sockets.
 *
 * The gate (srv_gate.c) runs it over the bytes of a head before the HTTP
 * library sees them, so that every head the library would refuse with its
 * own HTML page is refused here first, in the JSON error family. It is
 * stricter than the library everywhere (CRLF only, no obs-fold, no
 * whitespace before a colon, one Host, one Content-Length), so a head that
 * passes is parsed by the library the same way: the two never disagree on
 * where a request ends.
 *
 * The framing rules (Host, Content-Length, Transfer-Encoding) are a
 * separate function, so that requests the library parses by itself (the
 * later requests of a keep-alive connection) get the same answers.
 *
 * Chunked bodies: one parser that takes bytes as they arrive
 * (qac_chunked_feed), for the gate's peek (qac_head_chunked runs it over a
 * buffer) and for the relay (srv_relay.c), so a body is held to one rule
 * wherever its bytes come. Its lines are bounded: a chunk-size line of
 * QAC_CHUNK_LINE_MAX bytes, QAC_CHUNK_DIGITS_MAX digits, trailers within
 * the head limit. */
#include <string.h>
#include <strings.h>

#include "srv_internal.h"

#define MAX_LEADING_EMPTY_LINES 4 /* RFC 9112 2.2: ignore at least one */

/* RFC 9110 5.6.2 tchar */
static int is_tchar(unsigned char c) {
    if (c >= '0' && c <= '9') return 1;
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return 1;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* field-vchar, obs-text, SP, HTAB */
static int is_value_byte(unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7f); }

static qac_head_result fail(qac_head_verdict *v, int status, const char *type, const char *message) {
    v->status = status;
    v->type = type;
    v->message = message;
    return QAC_HEAD_ERROR;
}

static qac_head_result bad(qac_head_verdict *v, const char *message) {
    return fail(v, 400, "invalid_request", message);
}

/* Case-insensitive equality of a field name (not NUL-terminated) with a literal. */
static int name_is(const char *name, size_t len, const char *lit) {
    return strlen(lit) == len && !strncasecmp(name, lit, len);
}

/* Strips OWS (SP / HTAB) from both ends of [*p, *p + *len). */
static void trim_ows(const char **p, size_t *len) {
    while (*len && (**p == ' ' || **p == '\t')) (*p)++, (*len)--;
    while (*len && ((*p)[*len - 1] == ' ' || (*p)[*len - 1] == '\t')) (*len)--;
}

qac_head_result qac_head_framing(const qac_head_fields *f, qac_head_verdict *v) {
    if (f->minor_11 && f->n_host == 0) return bad(v, "an HTTP/1.1 request needs a Host header");
    if (f->n_host > 1) return bad(v, "more than one Host header");
    /* RFC 9112 6.3: both, or two lengths, and the message length is unknown */
    if (f->n_te && f->n_cl) return bad(v, "both Content-Length and Transfer-Encoding are present");
    if (f->n_cl > 1) return bad(v, "more than one Content-Length header");
    if (f->n_te > 1) return bad(v, "more than one Transfer-Encoding header");
    v->chunked = f->n_te > 0;
    v->content_length = 0;
    if (f->n_cl) {
        if (!f->cl_len) return bad(v, "an empty Content-Length");
        unsigned long long x = 0;
        for (size_t i = 0; i < f->cl_len; i++) {
            char c = f->cl[i];
            if (c < '0' || c > '9') return bad(v, "Content-Length is not a decimal number");
            if (x > (QAC_HEAD_MAX_LENGTH - (unsigned)(c - '0')) / 10)
                return fail(v, 413, "payload_too_large", "Content-Length is past any body this server reads");
            x = x * 10 + (unsigned)(c - '0');
        }
        v->content_length = x;
    }
    if (f->n_te) {
        /* RFC 9112 6.1: a 1.0 message with Transfer-Encoding has faulty framing */
        if (!f->minor_11) return bad(v, "Transfer-Encoding in an HTTP/1.0 request");
        if (!(f->te_len == 7 && !strncasecmp(f->te, "chunked", 7)))
            return fail(v, 501, "not_implemented", "the only transfer coding understood is 'chunked'");
    }
    return QAC_HEAD_OK;
}

/* Past the bytes seen without an error: the head is unfinished, or too
 * large if it already reached the limit (414 while still in the request
 * line, 431 after it). */
static qac_head_result unfinished(qac_head_verdict *v, size_t pos, size_t max_head, int in_line) {
    if (pos < max_head) return QAC_HEAD_INCOMPLETE;
    if (in_line) return fail(v, 414, "invalid_request", "the request line is longer than the head limit");
    return fail(v, 431, "invalid_request", "the request head is larger than the head limit");
}

qac_head_result qac_head_check(const char *buf, size_t len, size_t max_head, int max_fields,
                               qac_head_verdict *v) {
    const unsigned char *b = (const unsigned char *)buf;
    memset(v, 0, sizeof *v);
    qac_head_fields f;
    memset(&f, 0, sizeof f);
    if (len > max_head + 1) len = max_head + 1; /* one past the limit says "too large" */
    size_t i = 0;

    for (int empty = 0; i < len && (b[i] == '\r' || b[i] == '\n'); empty++) {
        if (empty == MAX_LEADING_EMPTY_LINES) return bad(v, "too many empty lines before the request line");
        if (b[i] == '\n') return bad(v, "a bare LF (lines end with CRLF)");
        if (i + 1 == len) return unfinished(v, len, max_head, 1);
        if (b[i + 1] != '\n') return bad(v, "a bare CR");
        i += 2;
    }

    /* request-line = method SP request-target SP HTTP-version CRLF */
    size_t m0 = i;
    while (i < len && is_tchar(b[i])) i++;
    if (i == len) return unfinished(v, i, max_head, 1);
    if (i == m0 || b[i] != ' ') return bad(v, "a malformed request line (method)");
    size_t t0 = ++i;
    while (i < len && b[i] > 0x20 && b[i] < 0x7f) i++;
    if (i == len) return unfinished(v, i, max_head, 1);
    if (i == t0 || b[i] != ' ') return bad(v, "a malformed request line (target)");
    size_t target_len = i - t0;
    size_t v0 = ++i;
    while (i < len && b[i] != '\r' && b[i] != '\n' && i - v0 <= 8) i++;
    if (i == len) return unfinished(v, i, max_head, 1);
    const unsigned char *ver = b + v0;
    if (i - v0 != 8 || memcmp(ver, "HTTP/", 5) || ver[5] < '0' || ver[5] > '9' || ver[6] != '.' || ver[7] < '0' ||
        ver[7] > '9')
        return bad(v, "a malformed request line (version)");
    if (b[i] == '\n') return bad(v, "a bare LF (lines end with CRLF)");
    if (i + 1 == len) return unfinished(v, i + 1, max_head, 1);
    if (b[i + 1] != '\n') return bad(v, "a bare CR");
    if (ver[5] != '1') return fail(v, 505, "invalid_request", "only HTTP/1.0 and HTTP/1.1 are served");
    f.minor_11 = ver[7] != '0';
    i += 2;

    /* field-line = field-name ":" OWS field-value OWS CRLF, then CRLF */
    for (int fields = 0;; fields++) {
        if (i == len) return unfinished(v, i, max_head, 0);
        if (b[i] == '\r') {
            if (i + 1 == len) return unfinished(v, i + 1, max_head, 0);
            if (b[i + 1] != '\n') return bad(v, "a bare CR");
            i += 2;
            break;
        }
        if (b[i] == '\n') return bad(v, "a bare LF (lines end with CRLF)");
        if (b[i] == ' ' || b[i] == '\t')
            return bad(v, "a header line starting with whitespace (obsolete line folding)");
        if (fields == max_fields)
            return fail(v, 431, "invalid_request", "too many header lines");
        size_t n0 = i;
        while (i < len && is_tchar(b[i])) i++;
        if (i == len) return unfinished(v, i, max_head, 0);
        if (b[i] == '\r' || b[i] == '\n') return bad(v, "a header line without a colon");
        if (b[i] != ':' || i == n0) return bad(v, "a malformed header name");
        size_t nlen = i - n0;
        size_t val0 = ++i;
        while (i < len && is_value_byte(b[i])) i++;
        if (i == len) return unfinished(v, i, max_head, 0);
        if (b[i] == '\n') return bad(v, "a bare LF (lines end with CRLF)");
        if (b[i] != '\r') return bad(v, "a control character in a header value");
        if (i + 1 == len) return unfinished(v, i + 1, max_head, 0);
        if (b[i + 1] != '\n') return bad(v, "a bare CR");
        const char *val = buf + val0;
        size_t vlen = i - val0;
        trim_ows(&val, &vlen);
        const char *name = buf + n0;
        if (name_is(name, nlen, "host")) {
            f.n_host++;
        } else if (name_is(name, nlen, "content-length")) {
            f.n_cl++;
            f.cl = val;
            f.cl_len = vlen;
        } else if (name_is(name, nlen, "transfer-encoding")) {
            f.n_te++;
            f.te = val;
            f.te_len = vlen;
        }
        i += 2;
    }
    if (i > max_head) return fail(v, 431, "invalid_request", "the request head is larger than the head limit");
    v->head_len = i;
    v->target_off = t0;
    v->target_len = target_len;
    if (qac_head_framing(&f, v) != QAC_HEAD_OK) return QAC_HEAD_ERROR;
    return QAC_HEAD_OK;
}

static int is_hex(unsigned char c) { return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f'); }

static int hex_value(unsigned char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }

/* The states of a chunked body being read. */
enum {
    CK_SIZE = 0, /* the chunk size's hex digits */
    CK_EXT,      /* ";" and an extension, up to the line's CR */
    CK_SIZE_LF,  /* the size line's LF */
    CK_DATA,     /* the chunk's data */
    CK_DATA_CR,  /* the CRLF after it */
    CK_DATA_LF,
    CK_TRAILER,  /* the start of a trailer line, or the CRLF that ends the body */
    CK_TNAME,
    CK_TVALUE,
    CK_TLF,
    CK_END_LF,
    CK_DONE
};

void qac_chunked_init(qac_chunked *c, size_t max_trailer, int max_fields) {
    memset(c, 0, sizeof *c);
    c->max_trailer = max_trailer;
    c->max_fields = max_fields;
}

qac_head_result qac_chunked_feed(qac_chunked *c, const char *buf, size_t len, size_t *used, size_t *data_off,
                                 size_t *data_len, qac_head_verdict *v) {
    const unsigned char *b = (const unsigned char *)buf;
    size_t i = 0;
    *data_off = *data_len = 0;
    memset(v, 0, sizeof *v);
    qac_head_result r = QAC_HEAD_INCOMPLETE;
    while (i < len && r == QAC_HEAD_INCOMPLETE) {
        unsigned char ch = b[i];
        if (c->state == CK_DATA) { /* a run of data, reported alone */
            size_t n = len - i < c->size ? len - i : (size_t)c->size;
            *data_off = i;
            *data_len = n;
            i += n;
            if ((c->size -= n) == 0) c->state = CK_DATA_CR;
            break;
        }
        if (c->state <= CK_SIZE_LF && ++c->line > QAC_CHUNK_LINE_MAX) {
            r = bad(v, "a chunk-size line longer than " QAC_STR(QAC_CHUNK_LINE_MAX) " bytes");
            break;
        }
        if (c->state >= CK_TRAILER && c->state < CK_DONE && ++c->trailer > c->max_trailer) {
            r = fail(v, 431, "invalid_request", "the trailer section is larger than the head limit");
            break;
        }
        switch (c->state) {
        case CK_SIZE: /* chunk-size [ ";" chunk-ext ] CRLF; the library takes no whitespace before ";" */
            if (is_hex(ch)) {
                if (c->size > (QAC_HEAD_MAX_LENGTH >> 4)) {
                    r = fail(v, 413, "payload_too_large", "a chunk size past any body this server reads");
                    break;
                }
                if (++c->digits > QAC_CHUNK_DIGITS_MAX) {
                    r = bad(v, "a chunk size of more than " QAC_STR(QAC_CHUNK_DIGITS_MAX) " hex digits (leading zeros count)");
                    break;
                }
                c->size = c->size * 16 + (unsigned)hex_value(ch);
            } else if (!c->digits) {
                r = bad(v, "a malformed chunk size");
            } else if (ch == ';') {
                c->state = CK_EXT;
            } else if (ch == '\r') {
                c->state = CK_SIZE_LF;
            } else if (ch == '\n') {
                r = bad(v, "a bare LF in a chunked body (lines end with CRLF)");
            } else {
                r = bad(v, "a malformed chunk size line");
            }
            break;
        case CK_EXT:
            if (ch == '\r') c->state = CK_SIZE_LF;
            else if (ch == '\n') r = bad(v, "a bare LF in a chunked body (lines end with CRLF)");
            else if (!is_value_byte(ch)) r = bad(v, "a malformed chunk size line");
            break;
        case CK_SIZE_LF:
            if (ch != '\n') {
                r = bad(v, "a bare CR in a chunked body");
                break;
            }
            c->line = 0;
            c->digits = 0;
            c->state = c->size ? CK_DATA : CK_TRAILER;
            break;
        case CK_DATA_CR:
            if (ch == '\r') c->state = CK_DATA_LF;
            else r = bad(v, "chunk data not followed by CRLF");
            break;
        case CK_DATA_LF:
            if (ch == '\n') c->state = CK_SIZE;
            else r = bad(v, "chunk data not followed by CRLF");
            break;
        case CK_TRAILER: /* trailer-section CRLF: field lines as in a head */
            if (ch == '\r') {
                c->state = CK_END_LF;
            } else if (c->fields == c->max_fields) {
                r = fail(v, 431, "invalid_request", "too many trailer lines");
            } else if (is_tchar(ch)) {
                c->fields++;
                c->state = CK_TNAME;
            } else {
                r = bad(v, "a malformed trailer line");
            }
            break;
        case CK_TNAME:
            if (ch == ':') c->state = CK_TVALUE;
            else if (!is_tchar(ch)) r = bad(v, "a malformed trailer line");
            break;
        case CK_TVALUE:
            if (ch == '\r') c->state = CK_TLF;
            else if (!is_value_byte(ch)) r = bad(v, "a malformed trailer line");
            break;
        case CK_TLF:
            if (ch == '\n') c->state = CK_TRAILER;
            else r = bad(v, "a bare CR in a chunked body");
            break;
        case CK_END_LF:
            if (ch == '\n') {
                c->state = CK_DONE;
                r = QAC_HEAD_OK;
            } else {
                r = bad(v, "a bare CR in a chunked body");
            }
            break;
        }
        if (r != QAC_HEAD_ERROR) i++;
    }
    *used = i;
    return r;
}

qac_head_result qac_head_chunked(const char *buf, size_t len, size_t max_head, int max_fields, size_t *body_len,
                                 qac_head_verdict *v) {
    qac_chunked c;
    qac_chunked_init(&c, max_head, max_fields);
    size_t at = 0;
    for (;;) {
        size_t used, off, n;
        qac_head_result r = qac_chunked_feed(&c, buf + at, len - at, &used, &off, &n, v);
        at += used;
        if (r == QAC_HEAD_OK) *body_len = at;
        if (r != QAC_HEAD_INCOMPLETE || at == len) return r;
    }
}

int qac_head_pipelined(const char *buf, size_t len, const qac_head_verdict *first, size_t max_head, int max_fields,
                       qac_head_verdict *bad, int *chunked) {
    qac_head_verdict cur = *first;
    size_t pos = 0;
    if (chunked) *chunked = 0;
    for (int k = 1;; k++) {
        size_t body = (size_t)cur.content_length;
        if (cur.chunked && chunked) *chunked = 1;
        if (cur.chunked) {
            qac_head_verdict cv;
            qac_head_result r = qac_head_chunked(buf + pos + cur.head_len, len - pos - cur.head_len, max_head,
                                                 max_fields, &body, &cv);
            if (r == QAC_HEAD_ERROR && k > 1) { /* this request's body: close before it */
                *bad = cv;
                return k - 1;
            }
            if (r != QAC_HEAD_OK) return 0; /* the first's own body is the caller's to check */
        }
        if (cur.content_length >= len - pos - cur.head_len || body >= len - pos - cur.head_len) return 0;
        pos += cur.head_len + body;
        qac_head_result r = qac_head_check(buf + pos, len - pos, max_head, max_fields, &cur);
        if (r == QAC_HEAD_ERROR) {
            *bad = cur;
            return k;
        }
        if (r != QAC_HEAD_OK) return 0;
    }
}

const char *qac_head_reason(int status) {
    switch (status) {
    case 400: return "Bad Request";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
    }
}
