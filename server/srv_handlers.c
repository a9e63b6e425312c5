/* The JSON endpoints. Each handler validates the whole body before doing
 * any work, so a bad request costs no encoder time, and maps every failure
 * to one status: 400 unparseable, 413 too large, 422 wrong types or values,
 * 503 overloaded or unavailable, 500 only for internal faults. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "qac_fusion.h"
#include "qac_util.h"
#include "srv_internal.h"

int qac_srv_gone(void) { return qac_srv_cancel && qac_srv_cancel->gone(qac_srv_cancel->ctx); }

#define JSON_OUT_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(9)) /* 9 digits: floats round-trip */

static void set_json(qac_http_response *r, json_t *o) {
    char *body = o ? json_dumps(o, JSON_OUT_FLAGS) : NULL;
    json_decref(o);
    if (!body) {
        qac_server_error(r, 500, "internal", "out of memory building the response");
        return;
    }
    free(r->body);
    r->status = 200;
    r->body = body;
    r->body_len = strlen(body);
    r->content_type = "application/json";
}

/* Parse the body into an object, or answer 400/422. */
static json_t *parse_body(const char *body, size_t len, qac_http_response *r) {
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

typedef struct texts {
    int n;
    const char **s;
    size_t *len;
    json_t **ids; /* NULL, or per entry: token ids given instead of a text (s NULL) */
} texts;

static void texts_free(texts *t) {
    free(t->s);
    free(t->len);
    free(t->ids);
    memset(t, 0, sizeof *t);
}

/* One string or an array of strings under one of two keys; exactly one of
 * them must be present. Empty strings are refused. */
static int get_texts(qac_server *s, json_t *o, const char *one, const char *many, texts *t, qac_http_response *r) {
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
        texts_free(t);
        qac_server_error(r, 500, "internal", "out of memory");
        return 0;
    }
    for (int i = 0; i < t->n; i++) {
        json_t *e = single ? single : json_array_get(v, (size_t)i);
        if (!json_is_string(e)) {
            if (single) qac_server_error(r, 422, "validation_error", "'%s' must be a string", key);
            else qac_server_error(r, 422, "validation_error", "'%s[%d]' must be a string", key, i);
            texts_free(t);
            return 0;
        }
        t->s[i] = json_string_value(e);
        t->len[i] = json_string_length(e);
        if (t->len[i] == 0) {
            if (single) qac_server_error(r, 422, "validation_error", "'%s' is an empty string", key);
            else qac_server_error(r, 422, "validation_error", "'%s[%d]' is an empty string", key, i);
            texts_free(t);
            return 0;
        }
    }
    return 1;
}

/* Optional typed fields: absent leaves *out alone. */
static int get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, qac_http_response *r) {
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

static int get_bool(json_t *o, const char *key, int *out, qac_http_response *r) {
    json_t *v = json_object_get(o, key);
    if (!v) return 1;
    if (!json_is_boolean(v)) {
        qac_server_error(r, 422, "validation_error", "'%s' must be true or false", key);
        return 0;
    }
    *out = json_is_true(v);
    return 1;
}

/* choices: NULL-terminated list; *out = index of the match. */
static int get_enum(json_t *o, const char *key, const char *const *choices, int *out, qac_http_response *r) {
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

/* Tokenize prompt + text (prompt NULL or "": the text alone) and encode
 * through the batcher: out is [n, dim]. With k > 0 the batcher also
 * searches the dense index, into scores/rows [n, k]. */
static int encode_texts(qac_server *s, const texts *t, const char *prompt, int max_len, float *out,
                        long long *tokens, int k, float *scores, int64_t *rows, qac_http_response *r) {
    int n = t->n, ok = 0, prompted = prompt && *prompt;
    /* a prompted text is tokenised one token longer to see whether it fits */
    int row = max_len + (prompted && !s->cfg.truncate);
    int32_t *ids = malloc((size_t)n * (size_t)row * sizeof *ids);
    const int32_t **ptrs = malloc((size_t)n * sizeof *ptrs);
    int *lens = malloc((size_t)n * sizeof *lens), *from = prompted ? malloc((size_t)n * sizeof *from) : NULL;
    if (!ids || !ptrs || !lens || (prompted && !from)) {
        qac_server_error(r, 500, "internal", "out of memory");
        goto done;
    }
    if (prompted && !s->be.encode_prompted) {
        qac_server_error(r, 500, "internal", "the backend cannot apply prompts");
        goto done;
    }
    long long total = 0;
    for (int i = 0; i < n; i++) {
        ptrs[i] = ids + (size_t)i * row;
        if (from) from[i] = 0;
        if (t->ids && t->ids[i]) { /* token ids: the model's input as given, no prompt */
            int m = (int)json_array_size(t->ids[i]);
            if (m > max_len && !s->cfg.truncate) {
                qac_server_error(r, 413, "payload_too_large",
                                 "input %d has %d token ids, more than the limit of %d (truncation is off)", i, m,
                                 max_len);
                goto done;
            }
            lens[i] = m < max_len ? m : max_len;
            for (int j = 0; j < lens[i]; j++) {
                json_int_t id = json_integer_value(json_array_get(t->ids[i], (size_t)j));
                if (id < 0 || id >= s->be.vocab_size) {
                    qac_server_error(r, 422, "validation_error", "input %d: token id %lld is outside the vocabulary (0..%d)",
                                     i, (long long)id, s->be.vocab_size - 1);
                    goto done;
                }
                ids[(size_t)i * row + (size_t)j] = (int32_t)id;
            }
            total += lens[i];
            continue;
        }
        if (prompted) {
            if (s->be.encode_prompted(s->be.enc, prompt, t->s[i], t->len[i], row, ids + (size_t)i * row, &lens[i],
                                      &from[i])) {
                qac_server_error(r, 500, "internal", "tokenizer: %s", qac_last_error());
                goto done;
            }
            if (lens[i] > max_len) {
                qac_server_error(r, 413, "payload_too_large",
                                 "text %d with its prompt has more than %d tokens with [CLS]/[SEP] (truncation is off)",
                                 i, max_len);
                goto done;
            }
            total += lens[i];
            continue;
        }
        if (!s->cfg.truncate) {
            int full = 0;
            int32_t scratch[1];
            if (s->be.tokenize(s->be.enc, t->s[i], t->len[i], scratch, 0, &full)) {
                qac_server_error(r, 500, "internal", "tokenizer: %s", qac_last_error());
                goto done;
            }
            if (full + 2 > max_len) {
                qac_server_error(r, 413, "payload_too_large",
                                 "text %d has %d tokens with [CLS]/[SEP], more than the limit of %d (truncation is off)",
                                 i, full + 2, max_len);
                goto done;
            }
        }
        if (s->be.encode_text(s->be.enc, t->s[i], t->len[i], max_len, ids + (size_t)i * row, &lens[i])) {
            qac_server_error(r, 500, "internal", "tokenizer: %s", qac_last_error());
            goto done;
        }
        total += lens[i];
    }
    qac_status st = qac_batcher_run(s->batcher, (const int32_t *const *)ptrs, lens, from, n, out, k, scores, rows,
                                    s->cfg.timeout_ms, qac_srv_cancel, 0);
    if (st == QAC_ERR_CANCELLED && qac_srv_gone()) { /* nobody to answer */
        qac_server_error(r, 499, "client_closed", "the client went away");
        goto done;
    }
    if (st == QAC_ERR_BUSY) {
        qac_server_error(r, 503, "overloaded", "%s; retry later", qac_last_error());
        r->retry_after = 1;
    } else if (st == QAC_ERR_CANCELLED) {
        qac_server_error(r, 503, "unavailable", "%s", qac_last_error());
        r->retry_after = 1;
    } else if (st) {
        qac_server_error(r, 500, "internal", "%s: %s", k > 0 ? "encoder or index search" : "encoder",
                         qac_last_error());
    } else {
        ok = 1;
        if (tokens) *tokens = total;
    }
done:
    free(ids);
    free(ptrs);
    free(lens);
    free(from);
    return ok;
}

static void l2_normalize(float *v, int n, int dim) {
    for (int i = 0; i < n; i++) {
        float *x = v + (size_t)i * dim;
        double ss = 0;
        for (int d = 0; d < dim; d++) ss += (double)x[d] * x[d];
        float inv = ss > 0 ? (float)(1.0 / sqrt(ss)) : 0.f;
        for (int d = 0; d < dim; d++) x[d] *= inv;
    }
}

static json_t *embedding_json(const float *x, int dim, int base64) {
    if (!base64) {
        json_t *a = json_array();
        for (int d = 0; a && d < dim; d++) json_array_append_new(a, json_real(x[d]));
        return a;
    }
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t nbytes = (size_t)dim * 4;
    unsigned char *raw = malloc(nbytes);
    char *enc = malloc((nbytes + 2) / 3 * 4 + 1);
    json_t *out = NULL;
    if (raw && enc) {
        for (int d = 0; d < dim; d++) { /* little-endian float32, whatever the host */
            uint32_t u;
            memcpy(&u, &x[d], 4);
            for (int k = 0; k < 4; k++) raw[(size_t)d * 4 + (size_t)k] = (unsigned char)(u >> (8 * k));
        }
        size_t o = 0;
        for (size_t i = 0; i < nbytes; i += 3) {
            uint32_t v = (uint32_t)raw[i] << 16;
            if (i + 1 < nbytes) v |= (uint32_t)raw[i + 1] << 8;
            if (i + 2 < nbytes) v |= raw[i + 2];
            enc[o++] = tbl[(v >> 18) & 63];
            enc[o++] = tbl[(v >> 12) & 63];
            enc[o++] = i + 1 < nbytes ? tbl[(v >> 6) & 63] : '=';
            enc[o++] = i + 2 < nbytes ? tbl[v & 63] : '=';
        }
        enc[o] = '\0';
        out = json_string(enc);
    }
    free(raw);
    free(enc);
    return out;
}

/* ---------------- prompts ---------------- */

const char *qac_srv_prompt(const qac_server *s, const char *name) {
    for (int i = 0; name && i < s->be.n_prompts; i++)
        if (!strcmp(s->be.prompt_names[i], name)) return s->be.prompt_texts[i];
    return NULL;
}

const char *qac_srv_default_prompt(const qac_server *s) {
    const char *p = s->be.default_prompt_name ? qac_srv_prompt(s, s->be.default_prompt_name) : NULL;
    return p ? p : "";
}

void qac_srv_prompt_names(const qac_server *s, char *buf, size_t cap) {
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < s->be.n_prompts && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s\"%s\"", i ? ", " : "", s->be.prompt_names[i]);
}

static const char *or_empty(const char *s) { return s ? s : ""; }

/* ---------------- /encode ---------------- */

void qac_handle_encode(qac_server *s, const char *body, size_t len, qac_http_response *r) {
    static const char *const kinds[] = {"query", "passage", NULL}, *const encodings[] = {"float", "base64", NULL};
    json_t *o = parse_body(body, len, r);
    if (!o) return;
    texts t = {0};
    int kind = 1, normalize = 1, encoding = 0;
    float *vec = NULL;
    if (!get_texts(s, o, NULL, "texts", &t, r) || !get_enum(o, "kind", kinds, &kind, r) ||
        !get_bool(o, "normalize", &normalize, r) || !get_enum(o, "encoding", encodings, &encoding, r))
        goto done;
    int dim = s->be.dim;
    vec = malloc((size_t)t.n * dim * sizeof *vec);
    if (!vec) {
        qac_server_error(r, 500, "internal", "out of memory");
        goto done;
    }
    long long tokens = 0;
    if (!encode_texts(s, &t, kind == 0 ? or_empty(s->be.query_prompt) : or_empty(s->be.passage_prompt),
                      kind == 0 ? s->cfg.query_max_len : s->cfg.passage_max_len, vec, &tokens, 0, NULL, NULL, r))
        goto done;
    if (normalize && !s->be.normalize) l2_normalize(vec, t.n, dim);
    json_t *embs = json_array();
    for (int i = 0; embs && i < t.n; i++) json_array_append_new(embs, embedding_json(vec + (size_t)i * dim, dim, encoding));
    set_json(r, json_pack("{s:s,s:i,s:o,s:I}", "model", s->be.model_id, "dim", dim, "embeddings", embs, "tokens",
                          (json_int_t)tokens));
done:
    free(vec);
    texts_free(&t);
    json_decref(o);
}

/* ---------------- /v1/embeddings (OpenAI) ---------------- */

/* A JSON array of integers (one tokenized input). */
static int is_int_array(json_t *a) {
    if (!json_is_array(a) || !json_array_size(a)) return 0;
    for (size_t i = 0; i < json_array_size(a); i++)
        if (!json_is_integer(json_array_get(a, i))) return 0;
    return 1;
}

/* OpenAI's `input`: a string, an array of strings, an array of token ids
 * (one input) or an array of arrays of token ids. */
static int get_openai_input(qac_server *s, json_t *o, texts *t, qac_http_response *r) {
    json_t *in = json_object_get(o, "input");
    int single_ids = is_int_array(in);
    if (!json_is_array(in) || !json_array_size(in) || json_is_string(json_array_get(in, 0)) ||
        (!single_ids && !json_is_array(json_array_get(in, 0))))
        return get_texts(s, o, "input", NULL, t, r); /* strings, or its error for anything else */
    size_t n = single_ids ? 1 : json_array_size(in);
    if (n > (size_t)s->cfg.max_texts) {
        qac_server_error(r, 413, "payload_too_large", "'input' has %zu entries, more than the limit of %d", n,
                         s->cfg.max_texts);
        return 0;
    }
    memset(t, 0, sizeof *t);
    t->n = (int)n;
    t->s = calloc(n, sizeof *t->s);
    t->len = calloc(n, sizeof *t->len);
    t->ids = calloc(n, sizeof *t->ids);
    if (!t->s || !t->len || !t->ids) {
        texts_free(t);
        qac_server_error(r, 500, "internal", "out of memory");
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *e = single_ids ? in : json_array_get(in, i);
        if (!is_int_array(e)) {
            qac_server_error(r, 422, "validation_error",
                             "'input[%zu]' must be a non-empty array of token ids, as the other entries", i);
            texts_free(t);
            return 0;
        }
        t->ids[i] = e;
    }
    return 1;
}

void qac_handle_embeddings(qac_server *s, const char *body, size_t len, qac_http_response *r) {
    static const char *const encodings[] = {"float", "base64", NULL};
    /* not OpenAI's: which prompt the inputs take (absent: the default one) */
    static const char *const input_types[] = {"query", "passage", "document", NULL};
    int input_type = -1;
    json_t *o = parse_body(body, len, r);
    if (!o) return;
    texts t = {0};
    int encoding = 0;
    long long dims = s->be.dim;
    float *vec = NULL;
    json_t *model = json_object_get(o, "model");
    if (model && !json_is_string(model)) {
        qac_server_error(r, 422, "validation_error", "'model' must be a string");
        goto done;
    }
    if (!get_openai_input(s, o, &t, r) || !get_enum(o, "encoding_format", encodings, &encoding, r) ||
        !get_int(o, "dimensions", 1, 1 << 20, &dims, r) || !get_enum(o, "input_type", input_types, &input_type, r))
        goto done;
    if (dims > s->be.dim) {
        qac_server_error(r, 422, "validation_error", "'dimensions' must be at most %d for this model", s->be.dim);
        goto done;
    }
    int dim = s->be.dim;
    vec = malloc((size_t)t.n * dim * sizeof *vec);
    if (!vec) {
        qac_server_error(r, 500, "internal", "out of memory");
        goto done;
    }
    long long tokens = 0;
    const char *prompt = input_type < 0 ? qac_srv_default_prompt(s)
                         : input_type == 0 ? or_empty(s->be.query_prompt)
                                           : or_empty(s->be.passage_prompt);
    if (!encode_texts(s, &t, prompt, input_type == 0 ? s->cfg.query_max_len : s->cfg.passage_max_len, vec, &tokens,
                      0, NULL, NULL, r))
        goto done;
    if (dims < dim) { /* OpenAI's shortening: the first dimensions, normalised again */
        for (int i = 0; i < t.n; i++) memmove(vec + (size_t)i * dims, vec + (size_t)i * dim, (size_t)dims * sizeof *vec);
        l2_normalize(vec, t.n, (int)dims);
    } else if (!s->be.normalize) {
        l2_normalize(vec, t.n, dim);
    }
    json_t *data = json_array();
    for (int i = 0; data && i < t.n; i++)
        json_array_append_new(data, json_pack("{s:s,s:i,s:o}", "object", "embedding", "index", i, "embedding",
                                              embedding_json(vec + (size_t)i * dims, (int)dims, encoding)));
    set_json(r, json_pack("{s:s,s:o,s:s,s:{s:I,s:I}}", "object", "list", "data", data, "model", s->be.model_id,
                          "usage", "prompt_tokens", (json_int_t)tokens, "total_tokens", (json_int_t)tokens));
done:
    free(vec);
    texts_free(&t);
    json_decref(o);
}

/* ---------------- /tokenize ---------------- */

void qac_handle_tokenize(qac_server *s, const char *body, size_t len, qac_http_response *r) {
    json_t *o = parse_body(body, len, r);
    if (!o) return;
    if (json_object_get(o, "inputs")) { /* text-embeddings-inference's form */
        qac_handle_tei_tokenize(s, o, r);
        json_decref(o);
        return;
    }
    texts t = {0};
    int specials = 1;
    int32_t *ids = NULL;
    json_t *all_ids = NULL, *all_tokens = NULL;
    if (!get_texts(s, o, "text", "texts", &t, r) || !get_bool(o, "add_special_tokens", &specials, r)) goto done;
    all_ids = json_array();
    all_tokens = json_array();
    for (int i = 0; i < t.n; i++) {
        int n = 0;
        int32_t scratch[1];
        if (s->be.tokenize(s->be.enc, t.s[i], t.len[i], scratch, 0, &n)) {
            qac_server_error(r, 500, "internal", "tokenizer: %s", qac_last_error());
            goto done;
        }
        free(ids);
        ids = malloc(((size_t)n + 2) * sizeof *ids);
        if (!ids) {
            qac_server_error(r, 500, "internal", "out of memory");
            goto done;
        }
        qac_status st = specials ? s->be.encode_text(s->be.enc, t.s[i], t.len[i], n + 2, ids, &n)
                                 : s->be.tokenize(s->be.enc, t.s[i], t.len[i], ids, n, &n);
        if (st) {
            qac_server_error(r, 500, "internal", "tokenizer: %s", qac_last_error());
            goto done;
        }
        json_t *ji = json_array(), *jt = json_array();
        for (int k = 0; k < n; k++) {
            json_array_append_new(ji, json_integer(ids[k]));
            const char *tok = s->be.id_to_token ? s->be.id_to_token(s->be.enc, ids[k]) : NULL;
            json_array_append_new(jt, json_string(tok ? tok : ""));
        }
        json_array_append_new(all_ids, ji);
        json_array_append_new(all_tokens, jt);
    }
    set_json(r, json_pack("{s:O,s:O}", "ids", all_ids, "tokens", all_tokens));
done:
    free(ids);
    json_decref(all_ids);
    json_decref(all_tokens);
    texts_free(&t);
    json_decref(o);
}

/* ---------------- /search ---------------- */

enum { MODE_DENSE = 0, MODE_BM25, MODE_HYBRID };

void qac_handle_search(qac_server *s, const char *body, size_t len, qac_http_response *r) {
    static const char *const modes[] = {"dense", "bm25", "hybrid", NULL};
    double t0 = qac_now();
    json_t *o = parse_body(body, len, r);
    if (!o) return;
    texts t = {0};
    long long k = 10;
    int mode = MODE_DENSE, return_text = 0;
    float *qv = NULL, *dscores = NULL, *bscores = NULL;
    int64_t *drows = NULL, *brows = NULL;
    qac_hit *hits = NULL;
    const char **sparse = NULL, **dense = NULL;
    json_t *results = NULL;
    if (!get_texts(s, o, "query", "queries", &t, r) || !get_int(o, "k", 1, s->cfg.max_k, &k, r) ||
        !get_enum(o, "mode", modes, &mode, r) || !get_bool(o, "return_text", &return_text, r))
        goto done;
    for (int q = 0; q < t.n; q++) {
        size_t i = 0;
        while (i < t.len[q] && strchr(" \t\r\n\f\v", t.s[q][i])) i++;
        if (i == t.len[q]) {
            qac_server_error(r, 422, "validation_error", "query %d is only whitespace", q);
            goto done;
        }
    }
    if (return_text && s->be.text_unavailable) {
        qac_server_error(r, 422, "validation_error", "return_text: this server has no passage text (%s)",
                         s->be.search ? "the corpus was not found when it started" : "no dense index");
        goto done;
    }
    /* Refused before any work: every hit's text is read and sent. */
    if (return_text && (long long)t.n * k > s->cfg.max_text_hits) {
        qac_server_error(r, 413, "payload_too_large",
                         "return_text with %d queries x k %lld = %lld passages, more than the limit of %d "
                         "(max-text-hits); lower k or send fewer queries",
                         t.n, k, (long long)t.n * k, s->cfg.max_text_hits);
        goto done;
    }
    int need_dense = mode != MODE_BM25, need_bm25 = mode != MODE_DENSE;
    if (need_bm25 && !s->be.bm25_search) {
        qac_server_error(r, 422, "validation_error", "mode '%s' needs a BM25 index: start the server with --bm25 DIR",
                         modes[mode]);
        goto done;
    }
    if (need_dense && !s->be.search) {
        qac_server_error(r, 503, "unavailable",
                         "no dense index is loaded (encode-only server): start it with --index DIR");
        goto done;
    }
    int nq = t.n, dim = s->be.dim;
    /* hybrid fuses deeper lists than it returns (qac search --mode hybrid fuses the same way) */
    int depth = mode == MODE_HYBRID ? qac_hybrid_depth((int)k) : (int)k;
    if (need_dense) {
        qv = malloc((size_t)nq * dim * sizeof *qv);
        dscores = malloc((size_t)nq * depth * sizeof *dscores);
        drows = malloc((size_t)nq * depth * sizeof *drows);
        if (!qv || !dscores || !drows) {
            qac_server_error(r, 500, "internal", "out of memory");
            goto done;
        }
        /* encoded and searched together with other requests' queries */
        if (!encode_texts(s, &t, or_empty(s->be.query_prompt), s->cfg.query_max_len, qv, NULL, depth, dscores, drows,
                          r))
            goto done;
    }
    bscores = malloc((size_t)depth * sizeof *bscores);
    brows = malloc((size_t)depth * sizeof *brows);
    hits = malloc((size_t)depth * 2 * sizeof *hits);
    sparse = malloc((size_t)depth * sizeof *sparse);
    dense = malloc((size_t)depth * sizeof *dense);
    results = json_array();
    if (!bscores || !brows || !hits || !sparse || !dense || !results) {
        qac_server_error(r, 500, "internal", "out of memory");
        goto done;
    }
    size_t out_bytes = 0; /* an estimate of the response body, for max_response_bytes */
    for (int q = 0; q < nq; q++) {
        int nh = 0, nb = 0;
        if (qac_srv_gone()) {
            qac_server_error(r, 499, "client_closed", "the client went away");
            goto done;
        }
        if (need_bm25) {
            /* BM25 reads the text itself; copy since JSON strings may hold no NUL but are not ours to cut */
            char *qs = strndup(t.s[q], t.len[q]);
            qac_status st = qs ? s->be.bm25_search(s->be.bm25, qs, depth, bscores, brows, &nb) : QAC_ERR_NOMEM;
            free(qs);
            if (st) {
                qac_server_error(r, 500, "internal", "bm25 search: %s", qac_last_error());
                goto done;
            }
        }
        if (mode == MODE_DENSE) {
            for (int i = 0; i < depth; i++) {
                int64_t row = drows[(size_t)q * depth + i];
                if (row < 0) continue;
                hits[nh++] = (qac_hit){s->be.docid(s->be.index, row), dscores[(size_t)q * depth + i], row};
            }
            qac_hits_sort(hits, nh);
        } else if (mode == MODE_BM25) {
            for (int i = 0; i < nb; i++) {
                const char *d = s->be.bm25_docid(s->be.bm25, brows[i]);
                hits[nh++] = (qac_hit){d, bscores[i], s->docid_rows ? qac_docid_map_get(s->docid_rows, d) : -1};
            }
            qac_hits_sort(hits, nh);
        } else {
            const int64_t *rows = drows + (size_t)q * depth;
            for (int i = 0; i < depth; i++) dense[i] = rows[i] >= 0 ? s->be.docid(s->be.index, rows[i]) : NULL;
            for (int i = 0; i < nb; i++) sparse[i] = s->be.bm25_docid(s->be.bm25, brows[i]);
            nh = qac_rrf_fuse(rows, dense, depth, sparse, nb, hits);
            for (int i = 0; i < nh; i++) /* BM25-only hits: their dense row, for return_text */
                if (hits[i].row < 0 && s->docid_rows) hits[i].row = qac_docid_map_get(s->docid_rows, hits[i].docid);
        }
        if (nh > k) nh = (int)k;
        json_t *list = json_array();
        json_array_append_new(results, list);
        for (int i = 0; i < nh; i++) {
            json_t *h = json_pack("{s:s,s:f,s:i}", "docid", hits[i].docid, "score", (double)(float)hits[i].score, "rank",
                                  i + 1);
            out_bytes += 48 + strlen(hits[i].docid);
            if (return_text && hits[i].row >= 0) {
                char *text = NULL;
                if (s->be.text(s->be.index, hits[i].row, &text)) {
                    json_decref(h);
                    qac_server_error(r, 500, "internal", "passage text: %s", qac_last_error());
                    goto done;
                }
                out_bytes += 10 + (text ? strlen(text) * 11 / 10 : 0); /* ~10% JSON escaping */
                json_object_set_new(h, "text", json_string(text ? text : ""));
                free(text);
            }
            json_array_append_new(list, h);
            if (out_bytes > (size_t)s->cfg.max_response_bytes) {
                qac_server_error(r, 413, "payload_too_large",
                                 "the response would be larger than %lld bytes (max-response-bytes); lower k, "
                                 "send fewer queries or drop return_text",
                                 s->cfg.max_response_bytes);
                goto done;
            }
        }
    }
    set_json(r, json_pack("{s:O,s:s,s:f}", "results", results, "mode", modes[mode], "took_ms",
                          (qac_now() - t0) * 1000.0));
done:
    json_decref(results);
    free(qv);
    free(dscores);
    free(drows);
    free(bscores);
    free(brows);
    free(hits);
    free(sparse);
    free(dense);
    texts_free(&t);
    json_decref(o);
}

/* ---------------- /v1/models (OpenAI) ---------------- */

void qac_handle_models(qac_server *s, qac_http_response *r) {
    set_json(r, json_pack("{s:s,s:[{s:s,s:s,s:I,s:s}]}", "object", "list", "data", "id", s->be.model_id, "object",
                          "model", "created", (json_int_t)s->started_unix, "owned_by", "qac"));
}

/* ---------------- /info, /health ---------------- */

void qac_handle_info(qac_server *s, qac_http_response *r) {
    const qac_server_config *c = &s->cfg;
    json_t *modes = json_array();
    if (s->be.search) json_array_append_new(modes, json_string("dense"));
    if (s->be.bm25_search) json_array_append_new(modes, json_string("bm25"));
    if (s->be.search && s->be.bm25_search) json_array_append_new(modes, json_string("hybrid"));
    json_t *o = json_pack("{s:s,s:{s:s,s:s,s:i,s:s,s:b,s:i},s:o,s:{s:i,s:i,s:I,s:i,s:i,s:b,s:i,s:i,s:i,s:i,s:i},"
                          "s:b,s:f}",
                          "version", QAC_VERSION_STRING, "model", "id", s->be.model_id, "fingerprint",
                          s->be.fingerprint ? s->be.fingerprint : "", "dim", s->be.dim, "pooling",
                          s->be.pooling ? s->be.pooling : "", "normalize", s->be.normalize, "max_seq_len",
                          s->be.model_max_len, "modes", modes, "limits", "max_batch_tokens", c->max_batch_tokens,
                          "max_wait_ms", c->max_wait_ms, "max_body_bytes", (json_int_t)c->max_body_bytes,
                          "max_texts", c->max_texts, "max_k", c->max_k, "truncate", c->truncate, "max_concurrent",
                          c->max_concurrent, "timeout_ms", c->timeout_ms, "queue_size", c->queue_size,
                          "query_max_len", c->query_max_len, "passage_max_len", c->passage_max_len, "auth",
                          c->api_key != NULL, "uptime_s", qac_now() - s->started);
    /* the prompts each endpoint applies, and every named one /embed knows */
    json_t *named = json_object();
    for (int i = 0; named && i < s->be.n_prompts; i++)
        json_object_set_new(named, s->be.prompt_names[i], json_string(s->be.prompt_texts[i]));
    if (o && named)
        json_object_set_new(o, "prompts",
                            json_pack("{s:s,s:s,s:s,s:o,s:b}", "query", or_empty(s->be.query_prompt), "passage",
                                      or_empty(s->be.passage_prompt), "default_prompt_name",
                                      or_empty(s->be.default_prompt_name), "named", json_incref(named),
                                      "include_prompt", s->be.include_prompt));
    json_decref(named);
    if (o && s->be.search) {
        json_t *ix = json_pack("{s:s,s:I,s:i}", "type", s->be.index_type ? s->be.index_type : "", "size",
                               (json_int_t)s->be.index_count, "dim", s->be.dim);
        if (ix && s->be.index_query_prompt)
            json_object_set_new(ix, "prompts", json_pack("{s:s,s:s}", "query", s->be.index_query_prompt, "passage",
                                                         or_empty(s->be.index_passage_prompt)));
        json_object_set_new(o, "index", ix);
    }
    if (o && s->be.bm25_search) json_object_set_new(o, "bm25", json_pack("{s:I}", "size", (json_int_t)s->be.bm25_count));
    set_json(r, o);
}

void qac_handle_health(qac_server *s, qac_http_response *r) {
    int draining = atomic_load(&s->draining);
    set_json(r, json_pack("{s:s}", "status", draining ? "draining" : "ok"));
    if (draining) r->status = 503;
}

/* ---------------- docid -> row ---------------- */

struct qac_docid_map {
    const char **keys;
    int64_t *rows;
    size_t cap; /* power of two */
};

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

qac_status qac_docid_map_build(qac_docid_map **out, const qac_server_backend *be) {
    *out = NULL;
    qac_docid_map *m = calloc(1, sizeof *m);
    if (!m) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    m->cap = 16;
    while (m->cap < (size_t)be->index_count * 2) m->cap *= 2;
    m->keys = calloc(m->cap, sizeof *m->keys);
    m->rows = calloc(m->cap, sizeof *m->rows);
    if (!m->keys || !m->rows) {
        qac_docid_map_free(m);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory for the docid map");
    }
    for (int64_t row = 0; row < be->index_count; row++) {
        const char *d = be->docid(be->index, row);
        if (!d) continue;
        size_t i = hash_str(d) & (m->cap - 1);
        while (m->keys[i] && strcmp(m->keys[i], d)) i = (i + 1) & (m->cap - 1);
        m->keys[i] = d;
        m->rows[i] = row;
    }
    *out = m;
    return QAC_OK;
}

int64_t qac_docid_map_get(const qac_docid_map *m, const char *d) {
    if (!m || !d) return -1;
    for (size_t i = hash_str(d) & (m->cap - 1); m->keys[i]; i = (i + 1) & (m->cap - 1))
        if (!strcmp(m->keys[i], d)) return m->rows[i];
    return -1;
}

void qac_docid_map_free(qac_docid_map *m) {
    if (!m) return;
    free(m->keys);
    free(m->rows);
    free(m);
}
