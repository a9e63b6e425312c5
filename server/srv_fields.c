/* The house routes' request fields (srv_handlers.c, and any route that
 * speaks the house's error family): the body parsed into an object, texts
 * under one of two keys, and optional integers, booleans and choices, each
 * refused with the status and message of api/openapi.yaml (400 unparseable,
 * 413 past a limit, 422 wrong types or values) before any work is done.
 * Declared in srv_internal.h ("request fields"). */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "srv_internal.h"

json_t *qac_srv_parse_body(const char *body, size_t len, qac_http_response *r) {
    if (!qac_utf8_valid(body, len)) {
        qac_server_error(r, 400, "invalid_request", "the request body is not valid UTF-8");
        return NULL;
    }
    json_error_t e;
    json_t *o = json_loadb(body, len, 0, &e);
    if (!o) {
        qac_server_error(r, 400, "invalid_request", "malformed JSON at line %d, column %d: %s", e.line, e.column,
                         e.text);
        return NULL;
    }
    if (!json_is_object(o)) {
        json_decref(o);
        qac_server_error(r, 422, "validation_error", "the request body must be a JSON object");
        return NULL;
    }
    return o;
}

void qac_srv_texts_free(qac_srv_texts *t) {
    free(t->s);
    free(t->len);
    free(t->ids);
    memset(t, 0, sizeof *t);
}

int qac_srv_get_texts(qac_server *s, json_t *o, const char *one, const char *many, qac_srv_texts *t,
                      qac_http_response *r) {
    memset(t, 0, sizeof *t);
    json_t *single = one ? json_object_get(o, one) : NULL, *list = many ? json_object_get(o, many) : NULL;
    if (single && list) {
        qac_server_error(r, 422, "validation_error", "give either '%s' or '%s', not both", one, many);
        return 0;
    }
    if (!single && !list) {
        if (one && many) qac_server_error(r, 422, "validation_error", "missing '%s' (a string) or '%s' (an array of strings)", one, many);
        else qac_server_error(r, 422, "validation_error", "missing '%s'", one ? one : many);
        return 0;
    }
    const char *key = single ? one : many;
    json_t *v = single ? single : list;
    /* `input` (OpenAI) takes both shapes under one key */
    if (single && json_is_array(single)) list = single, single = NULL;
    if (single) {
        if (!json_is_string(single)) {
            qac_server_error(r, 422, "validation_error", "'%s' must be a string", key);
            return 0;
        }
        t->n = 1;
    } else {
        if (!json_is_array(v)) {
            qac_server_error(r, 422, "validation_error", "'%s' must be an array of strings", key);
            return 0;
        }
        size_t n = json_array_size(v);
        if (n == 0) {
            qac_server_error(r, 422, "validation_error", "'%s' is empty", key);
            return 0;
        }
        if (n > (size_t)s->cfg.max_texts) {
            qac_server_error(r, 413, "payload_too_large", "'%s' has %zu entries, more than the limit of %d", key, n,
                             s->cfg.max_texts);
            return 0;
        }
        t->n = (int)n;
    }
    t->s = calloc((size_t)t->n, sizeof *t->s);
    t->len = calloc((size_t)t->n, sizeof *t->len);
    if (!t->s || !t->len) {
        qac_srv_texts_free(t);
        qac_server_error(r, 500, "internal", "out of memory");
        return 0;
    }
    for (int i = 0; i < t->n; i++) {
        json_t *e = single ? single : json_array_get(v, (size_t)i);
        if (!json_is_string(e)) {
            if (single) qac_server_error(r, 422, "validation_error", "'%s' must be a string", key);
            else qac_server_error(r, 422, "validation_error", "'%s[%d]' must be a string", key, i);
            qac_srv_texts_free(t);
            return 0;
        }
        t->s[i] = json_string_value(e);
        t->len[i] = json_string_length(e);
        if (t->len[i] == 0) {
            if (single) qac_server_error(r, 422, "validation_error", "'%s' is an empty string", key);
            else qac_server_error(r, 422, "validation_error", "'%s[%d]' is an empty string", key, i);
            qac_srv_texts_free(t);
            return 0;
        }
    }
    return 1;
}

int qac_srv_get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, qac_http_response *r) {
    json_t *v = json_object_get(o, key);
    if (!v) return 1;
    if (!json_is_integer(v)) {
        qac_server_error(r, 422, "validation_error", "'%s' must be an integer", key);
        return 0;
    }
    long long x = json_integer_value(v);
    if (x < lo || x > hi) {
        qac_server_error(r, 422, "validation_error", "'%s' is %lld, outside %lld..%lld", key, x, lo, hi);
        return 0;
    }
    *out = x;
    return 1;
}

int qac_srv_get_bool(json_t *o, const char *key, int *out, qac_http_response *r) {
    json_t *v = json_object_get(o, key);
    if (!v) return 1;
    if (!json_is_boolean(v)) {
        qac_server_error(r, 422, "validation_error", "'%s' must be true or false", key);
        return 0;
    }
    *out = json_is_true(v);
    return 1;
}

int qac_srv_get_enum(json_t *o, const char *key, const char *const *choices, int *out, qac_http_response *r) {
    json_t *v = json_object_get(o, key);
    if (!v) return 1;
    const char *sv = json_string_value(v);
    for (int i = 0; sv && choices[i]; i++)
        if (!strcmp(sv, choices[i])) {
            *out = i;
            return 1;
        }
    char list[128] = "";
    for (int i = 0; choices[i]; i++) {
        strncat(list, i ? "|" : "", sizeof list - strlen(list) - 1);
        strncat(list, choices[i], sizeof list - strlen(list) - 1);
    }
    qac_server_error(r, 422, "validation_error", "'%s' must be one of %s", key, list);
    return 0;
}
