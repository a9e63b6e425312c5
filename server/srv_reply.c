/* Answers, written once for every route: the two error shapes, JSON
 * bodies, and the table that turns a failed call's qac_status into an HTTP
 * code. Below the router, the house handlers (srv_handlers.c) and TEI's
 * (srv_tei.c): it calls none of them.
 *
 * The shapes:
 *   QAC_REPLY_HOUSE  {"error": {"code", "type", "message"}}, every route
 *                    of the house (api/openapi.yaml's Error);
 *   QAC_REPLY_TEI    {"error": message, "error_type": type}, the routes of
 *                    text-embeddings-inference (srv_tei.c).
 * A body that cannot be built (out of memory) falls back to a constant
 * house-shaped 500, so that every answer is JSON. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "srv_internal.h"

void qac_http_response_clear(qac_http_response *r) {
    if (!r) return;
    free(r->body);
    memset(r, 0, sizeof *r);
}

void qac_srv_set_body(qac_http_response *r, int status, char *body, const char *content_type) {
    free(r->body);
    r->status = status;
    r->body = body;
    r->body_len = body ? strlen(body) : 0;
    r->content_type = content_type;
}

/* Only reachable out of memory: a constant body still has the house shape. */
static void out_of_memory(qac_http_response *r) {
    static const char fallback[] = "{\"error\":{\"code\":500,\"type\":\"internal\",\"message\":\"out of memory\"}}";
    qac_srv_set_body(r, 500, strdup(fallback), "application/json");
}

static void error_v(qac_http_response *r, qac_reply_shape shape, int status, const char *type, const char *fmt,
                    va_list ap) {
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    /* Library messages may quote raw input: keep the JSON valid whatever it holds. */
    if (!qac_utf8_valid(msg, strlen(msg)))
        for (char *p = msg; *p; p++)
            if ((unsigned char)*p >= 0x80) *p = '?';
    json_t *o = shape == QAC_REPLY_TEI
                    ? json_pack("{s:s,s:s}", "error", msg, "error_type", type)
                    : json_pack("{s:{s:i,s:s,s:s}}", "error", "code", status, "type", type, "message", msg);
    char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!body) {
        out_of_memory(r);
        return;
    }
    qac_srv_set_body(r, status, body, "application/json");
}

void qac_server_error(qac_http_response *r, int status, const char *type, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    error_v(r, QAC_REPLY_HOUSE, status, type, fmt, ap);
    va_end(ap);
}

void qac_srv_error(qac_http_response *r, qac_reply_shape shape, int status, const char *type, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    error_v(r, shape, status, type, fmt, ap);
    va_end(ap);
}

void qac_srv_json(qac_http_response *r, qac_reply_shape shape, json_t *o) {
    char *body = o ? json_dumps(o, QAC_SRV_JSON_FLAGS) : NULL;
    json_decref(o);
    if (!body) {
        qac_srv_fail(r, shape, QAC_ERR_NOMEM, "out of memory building the response");
        return;
    }
    qac_srv_set_body(r, 200, body, "application/json");
}

/* How each failed status is answered, in each shape. The message is the
 * call's own (qac_last_error), with the prefix and suffix of its row. */
typedef struct fail_row {
    qac_status st; /* QAC_OK: every status not listed above it */
    int retry_after;
    struct {
        int code;
        const char *type, *prefix, *suffix;
        int fixed; /* the prefix is the whole message */
    } in[2];       /* [QAC_REPLY_HOUSE], [QAC_REPLY_TEI] */
} fail_row;

static const fail_row fail_rows[] = {
    {QAC_ERR_BUSY, 1, {{503, "overloaded", "", "; retry later", 0}, {429, "Overloaded", "Model is overloaded", "", 1}}},
    {QAC_ERR_CANCELLED, 1, {{503, "unavailable", "", "", 0}, {503, "Unhealthy", "", "", 0}}},
    {QAC_ERR_NOMEM, 0, {{500, "internal", "", "", 0}, {424, "Backend", "Backend error: ", "", 0}}},
    {QAC_OK, 0, {{500, "internal", "", "", 0}, {424, "Backend", "Backend error: ", "", 0}}},
};

void qac_srv_fail(qac_http_response *r, qac_reply_shape shape, qac_status st, const char *what) {
    if (st == QAC_ERR_CANCELLED && qac_srv_gone()) { /* nobody to answer: the HTTP layer sends nothing */
        qac_server_error(r, 499, "client_closed", "the client went away");
        return;
    }
    const fail_row *row = fail_rows;
    while (row->st != QAC_OK && row->st != st) row++;
    const char *msg = st == QAC_ERR_NOMEM && what ? "" : qac_last_error();
    if (row->retry_after) what = NULL; /* a passing state, not the call's fault: its message alone */
    if (row->in[shape].fixed) {
        qac_srv_error(r, shape, row->in[shape].code, row->in[shape].type, "%s", row->in[shape].prefix);
    } else {
        qac_srv_error(r, shape, row->in[shape].code, row->in[shape].type, "%s%s%s%s%s", row->in[shape].prefix,
                      what ? what : "", what && *msg ? ": " : "", msg, row->in[shape].suffix);
    }
    r->retry_after = row->retry_after;
}

int qac_utf8_valid(const char *str, size_t len) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int n;
        unsigned cp;
        if (c >= 0xC2 && c <= 0xDF) n = 1, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF) n = 2, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4) n = 3, cp = c & 0x07;
        else return 0;
        if (i + (size_t)n >= len) return 0;
        for (int k = 1; k <= n; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += (size_t)n + 1;
    }
    return 1;
}
