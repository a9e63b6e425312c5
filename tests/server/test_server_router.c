/* Every endpoint and error path of qac_server_handle, against the fake
 * backend: status, body shape, headers, and that the server keeps working. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fake_backend.h"
#include "srv_internal.h"
#include "testutil.h"

static qac_server *make_server(int with_index, int with_bm25, const char *key, int truncate, fake_stats *stats) {
    static qac_server_backend be[8];
    static int nbe;
    qac_server_backend *b = &be[nbe++ % 8];
    fake_backend_init(b, stats, with_index, with_bm25);
    qac_server_config cfg = qac_server_default_config();
    cfg.max_texts = 4;
    cfg.max_k = 50;
    cfg.max_wait_ms = 0;
    cfg.truncate = truncate;
    cfg.query_max_len = 64;
    cfg.passage_max_len = 32;
    cfg.api_key = (char *)key;
    qac_server *s = NULL;
    CHECK_OK(qac_server_create(&s, &cfg, b, NULL, NULL));
    return s;
}

/* Run one request; returns the parsed JSON body (NULL for non-JSON). */
static json_t *call(qac_server *s, const char *method, const char *path, const char *body, const char *auth,
                    qac_http_response *r) {
    qac_http_request req = {method, path, auth, body, body ? strlen(body) : 0, NULL, NULL};
    qac_server_handle(s, &req, r);
    if (!r->content_type || strncmp(r->content_type, "application/json", 16)) return NULL;
    json_error_t e;
    json_t *o = json_loadb(r->body, r->body_len, 0, &e);
    CHECK_MSG(o != NULL, "%s %s: response is not JSON: %.200s", method, path, r->body);
    return o;
}

/* Expect an error of the house shape with this status and type. */
static void expect_error(qac_server *s, const char *method, const char *path, const char *body, int status,
                         const char *type) {
    qac_http_response r;
    json_t *o = call(s, method, path, body, NULL, &r);
    CHECK_MSG(r.status == status, "%s %s %.80s: status %d, want %d (%.200s)", method, path, body ? body : "", r.status,
              status, r.body);
    json_t *err = json_object_get(o, "error");
    CHECK_MSG(json_is_object(err) && json_integer_value(json_object_get(err, "code")) == status &&
                  json_is_string(json_object_get(err, "message")) &&
                  !strcmp(json_string_value(json_object_get(err, "type")) ? json_string_value(json_object_get(err, "type")) : "", type),
              "%s %s: error body %.200s, want type %s", method, path, r.body, type);
    CHECK_MSG(json_object_size(o) == 1, "error body has extra keys: %.200s", r.body);
    json_decref(o);
    qac_http_response_clear(&r);
}

static void test_ok_paths(void) {
    fake_stats st = {0};
    qac_server *s = make_server(1, 1, NULL, 1, &st);
    qac_http_response r;
    json_t *o;

    o = call(s, "GET", "/health", NULL, NULL, &r);
    CHECK(r.status == 200 && !strcmp(json_string_value(json_object_get(o, "status")), "ok"));
    json_decref(o);
    qac_http_response_clear(&r);

    o = call(s, "GET", "/info", NULL, NULL, &r);
    CHECK(r.status == 200);
    CHECK(json_integer_value(json_object_get(json_object_get(o, "model"), "dim")) == FAKE_DIM);
    CHECK(json_integer_value(json_object_get(json_object_get(o, "index"), "size")) == FAKE_DOCS);
    CHECK(json_integer_value(json_object_get(json_object_get(o, "limits"), "max_texts")) == 4);
    CHECK(json_array_size(json_object_get(o, "modes")) == 3);
    json_decref(o);
    qac_http_response_clear(&r);

    o = call(s, "GET", "/?q=wing", NULL, NULL, &r);
    CHECK(r.status == 200 && r.content_type && strstr(r.content_type, "text/html") && strstr(r.body, "<form"));
    qac_http_response_clear(&r);

    /* /encode: floats equal the fake encoder's own output; base64 decodes to the same */
    o = call(s, "POST", "/encode", "{\"texts\":[\"hello world\",\"x\"],\"kind\":\"query\"}", NULL, &r);
    CHECK_MSG(r.status == 200, "encode: %s", r.body);
    json_t *embs = json_object_get(o, "embeddings");
    CHECK(json_array_size(embs) == 2 && json_integer_value(json_object_get(o, "dim")) == FAKE_DIM);
    int32_t ids[64];
    float want[FAKE_DIM];
    int n = fake_encode_text("hello world", 11, 64, ids);
    fake_embed(ids, n, want);
    double maxdiff = 0;
    for (int d = 0; d < FAKE_DIM; d++)
        maxdiff = fmax(maxdiff, fabs((float)json_real_value(json_array_get(json_array_get(embs, 0), (size_t)d)) - want[d]));
    printf("encode: max |diff| vs direct = %g\n", maxdiff);
    CHECK(maxdiff == 0);
    CHECK(json_integer_value(json_object_get(o, "tokens")) == 13 + 3);
    json_decref(o);
    qac_http_response_clear(&r);

    o = call(s, "POST", "/encode", "{\"texts\":[\"hello world\"],\"kind\":\"query\",\"encoding\":\"base64\"}", NULL, &r);
    const char *b64 = json_string_value(json_array_get(json_object_get(o, "embeddings"), 0));
    CHECK(b64 && strlen(b64) == (FAKE_DIM * 4 + 2) / 3 * 4);
    if (b64) { /* decode and compare bit for bit */
        static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        unsigned char raw[FAKE_DIM * 4 + 3];
        size_t o2 = 0;
        for (size_t i = 0; b64[i]; i += 4) {
            uint32_t v = 0;
            for (int k = 0; k < 4; k++) v = (v << 6) | (b64[i + k] == '=' ? 0 : (uint32_t)(strchr(tbl, b64[i + k]) - tbl));
            raw[o2++] = (unsigned char)(v >> 16);
            raw[o2++] = (unsigned char)(v >> 8);
            raw[o2++] = (unsigned char)v;
        }
        int same = 1;
        for (int d = 0; d < FAKE_DIM; d++) {
            uint32_t u = (uint32_t)raw[4 * d] | (uint32_t)raw[4 * d + 1] << 8 | (uint32_t)raw[4 * d + 2] << 16 |
                         (uint32_t)raw[4 * d + 3] << 24;
            float f;
            memcpy(&f, &u, 4);
            same &= f == want[d];
        }
        CHECK(same);
    }
    json_decref(o);
    qac_http_response_clear(&r);

    o = call(s, "POST", "/v1/embeddings", "{\"input\":\"hello world\",\"model\":\"x\"}", NULL, &r);
    CHECK_MSG(r.status == 200, "embeddings: %s", r.body);
    CHECK(!strcmp(json_string_value(json_object_get(o, "object")), "list"));
    json_t *d0 = json_array_get(json_object_get(o, "data"), 0);
    CHECK(json_integer_value(json_object_get(d0, "index")) == 0 &&
          json_array_size(json_object_get(d0, "embedding")) == FAKE_DIM);
    CHECK(json_integer_value(json_object_get(json_object_get(o, "usage"), "prompt_tokens")) == 13);
    json_decref(o);
    qac_http_response_clear(&r);

    o = call(s, "POST", "/tokenize", "{\"text\":\"ab\"}", NULL, &r);
    json_t *ids0 = json_array_get(json_object_get(o, "ids"), 0);
    CHECK(r.status == 200 && json_array_size(ids0) == 4 && json_integer_value(json_array_get(ids0, 0)) == 1 &&
          json_integer_value(json_array_get(ids0, 1)) == 100 + 'a');
    CHECK(!strcmp(json_string_value(json_array_get(json_array_get(json_object_get(o, "tokens"), 0), 0)), "[CLS]"));
    json_decref(o);
    qac_http_response_clear(&r);

    /* /search dense: the doc identical to the query ranks first; tie between
     * D00 and D06 (same text) breaks by docid descending. */
    o = call(s, "POST", "/search",
             "{\"query\":\"the wing flutter of supersonic aircraft\",\"k\":3,\"return_text\":true}", NULL, &r);
    CHECK_MSG(r.status == 200, "search: %s", r.body);
    json_t *list = json_array_get(json_object_get(o, "results"), 0);
    CHECK(json_array_size(list) == 3);
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(list, 0), "docid")), "D06"));
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(list, 1), "docid")), "D00"));
    CHECK(json_integer_value(json_object_get(json_array_get(list, 2), "rank")) == 3);
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(list, 0), "text")), fake_docs[6]));
    CHECK(json_is_number(json_object_get(o, "took_ms")));
    json_decref(o);
    qac_http_response_clear(&r);

    o = call(s, "POST", "/search", "{\"queries\":[\"heat transfer\",\"flutter\"],\"k\":2,\"mode\":\"bm25\",\"return_text\":true}",
             NULL, &r);
    CHECK_MSG(r.status == 200, "bm25: %s", r.body);
    list = json_array_get(json_object_get(o, "results"), 0);
    CHECK(json_array_size(json_object_get(o, "results")) == 2 && json_array_size(list) == 2);
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(list, 0), "docid")), "D13"));
    CHECK(json_object_get(json_array_get(list, 0), "text") != NULL);
    json_decref(o);
    qac_http_response_clear(&r);

    o = call(s, "POST", "/search", "{\"query\":\"panel flutter\",\"k\":5,\"mode\":\"hybrid\"}", NULL, &r);
    CHECK_MSG(r.status == 200, "hybrid: %s", r.body);
    list = json_array_get(json_object_get(o, "results"), 0);
    CHECK(json_array_size(list) == 5);
    double s0 = json_real_value(json_object_get(json_array_get(list, 0), "score"));
    CHECK(s0 > 1.0 / 61 && s0 <= 2.0 / 61 + 1e-12);
    json_decref(o);
    qac_http_response_clear(&r);

    o = call(s, "GET", "/metrics", NULL, NULL, &r);
    CHECK(r.status == 200 && strstr(r.body, "qac_http_requests_total{route=\"/search\",code=\"200\"} 3") &&
          strstr(r.body, "qac_batch_size_bucket") && strstr(r.body, "qac_queue_depth 0"));
    qac_http_response_clear(&r);
    CHECK(st.max_concurrent == 1);
    qac_server_free(s);
}

static void test_errors(void) {
    fake_stats st = {0};
    qac_server *s = make_server(1, 0, NULL, 0, &st);
    expect_error(s, "POST", "/search", "{\"query\": ", 400, "invalid_request");
    expect_error(s, "POST", "/encode", "{\"texts\":[\"caf\xc3\"]}", 400, "invalid_request");
    expect_error(s, "POST", "/encode", "{\"texts\":[\"\xed\xa0\x80\"]}", 400, "invalid_request"); /* surrogate */
    expect_error(s, "GET", "/nope", NULL, 404, "not_found");
    expect_error(s, "GET", "/search", NULL, 405, "method_not_allowed");
    expect_error(s, "DELETE", "/health", NULL, 405, "method_not_allowed");
    expect_error(s, "POST", "/encode", "{\"texts\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", 413, "payload_too_large");
    expect_error(s, "POST", "/encode", "{\"texts\":[\"this text is longer than thirty-two bytes\"]}", 413,
                 "payload_too_large");
    expect_error(s, "POST", "/search", "{\"query\":\"x\",\"k\":0}", 422, "validation_error");
    expect_error(s, "POST", "/search", "{\"query\":\"x\",\"k\":51}", 422, "validation_error");
    expect_error(s, "POST", "/search", "{\"query\":\"x\",\"k\":\"5\"}", 422, "validation_error");
    expect_error(s, "POST", "/search", "{\"query\":\"\"}", 422, "validation_error");
    expect_error(s, "POST", "/search", "{\"queries\":[]}", 422, "validation_error");
    expect_error(s, "POST", "/search", "{\"query\":\"x\",\"queries\":[\"y\"]}", 422, "validation_error");
    expect_error(s, "POST", "/search", "{\"query\":\"x\",\"mode\":\"sparse\"}", 422, "validation_error");
    expect_error(s, "POST", "/search", "{\"query\":\"x\",\"mode\":\"bm25\"}", 422, "validation_error");
    expect_error(s, "POST", "/search", "[1,2]", 422, "validation_error");
    expect_error(s, "POST", "/encode", "{\"texts\":\"not a list\"}", 422, "validation_error");
    expect_error(s, "POST", "/encode", "{\"texts\":[1]}", 422, "validation_error");
    expect_error(s, "POST", "/encode", "{\"texts\":[\"a\"],\"kind\":\"doc\"}", 422, "validation_error");
    expect_error(s, "POST", "/encode", "{\"texts\":[\"a\"],\"normalize\":1}", 422, "validation_error");
    expect_error(s, "POST", "/v1/embeddings", "{\"input\":[1,2,999]}", 422, "validation_error"); /* vocabulary 356 */
    expect_error(s, "POST", "/v1/embeddings", "{\"input\":[[1,2],\"a\"]}", 422, "validation_error");
    expect_error(s, "POST", "/v1/embeddings", "{\"input\":[[1,2],[]]}", 422, "validation_error");
    expect_error(s, "POST", "/v1/embeddings", "{\"input\":\"a\",\"dimensions\":9}", 422, "validation_error");
    expect_error(s, "POST", "/tokenize", "{}", 422, "validation_error");
    /* the 405 carries Allow */
    qac_http_response r;
    json_decref(call(s, "PUT", "/encode", "{}", NULL, &r));
    CHECK(r.status == 405 && !strcmp(r.allow, "POST"));
    qac_http_response_clear(&r);
    CHECK(st.calls == 0); /* no invalid request reached the encoder */
    /* still serving */
    json_t *o = call(s, "POST", "/encode", "{\"texts\":[\"ok\"]}", NULL, &r);
    CHECK(r.status == 200);
    json_decref(o);
    qac_http_response_clear(&r);
    qac_server_free(s);

    /* encode-only server: /search is a 422 (a permanent condition, not a
     * retryable 503) with a clear message */
    s = make_server(0, 0, NULL, 1, &st);
    expect_error(s, "POST", "/search", "{\"query\":\"x\"}", 422, "validation_error");
    o = call(s, "POST", "/search", "{\"query\":\"x\"}", NULL, &r);
    CHECK(strstr(r.body, "--index"));
    json_decref(o);
    qac_http_response_clear(&r);
    qac_server_free(s);
}

/* The fake vector of one id sequence, scaled and cut as the TEI and OpenAI
 * routes are asked to. */
static void want_vec(const int32_t *ids, int n, float scale, int dims, float *out) {
    fake_embed(ids, n, out);
    for (int d = 0; d < FAKE_DIM; d++) out[d] *= scale;
    if (dims < FAKE_DIM) {
        double ss = 0;
        for (int d = 0; d < dims; d++) ss += (double)out[d] * out[d];
        float inv = (float)(1.0 / sqrt(ss));
        for (int d = 0; d < dims; d++) out[d] *= inv;
    }
}

static double row_diff(json_t *row, const float *want, int dims) {
    if (json_array_size(row) != (size_t)dims) return INFINITY;
    double m = 0;
    for (int d = 0; d < dims; d++) m = fmax(m, fabs((float)json_real_value(json_array_get(row, (size_t)d)) - want[d]));
    return m;
}

/* TEI's routes (POST /, /embed options, /tokenize form, /decode, /embed_all)
 * and OpenAI's token-id input and /v1/models, against the fake backend. */
static void test_tei_openai(void) {
    fake_stats st = {0};
    qac_server *s = make_server(1, 0, NULL, 1, &st); /* passage_max_len 32 */
    qac_http_response r;
    json_t *o;
    float want[FAKE_DIM];
    int32_t ids[64];

    /* POST / is /embed; GET / is still the page */
    o = call(s, "POST", "/", "{\"inputs\":\"hello\"}", NULL, &r);
    int n = fake_encode_text("hello", 5, 32, ids);
    want_vec(ids, n, 1, FAKE_DIM, want);
    CHECK_MSG(r.status == 200 && row_diff(json_array_get(o, 0), want, FAKE_DIM) == 0, "POST /: %.200s", r.body);
    json_decref(o);
    qac_http_response_clear(&r);
    json_decref(call(s, "PUT", "/", "{}", NULL, &r));
    CHECK(r.status == 405 && !strcmp(r.allow, "GET, HEAD, POST"));
    qac_http_response_clear(&r);

    /* normalize=false: the raw encoder's vector (the fake's: x (1 + first id / 100)) */
    o = call(s, "POST", "/embed", "{\"inputs\":[\"hello\"],\"normalize\":false}", NULL, &r);
    want_vec(ids, n, 1.0f + (float)ids[0] / 100.0f, FAKE_DIM, want);
    CHECK_MSG(r.status == 200 && row_diff(json_array_get(o, 0), want, FAKE_DIM) == 0, "normalize=false: %.200s", r.body);
    json_decref(o);
    qac_http_response_clear(&r);

    /* truncation on either side of a 40-byte text at 32 tokens */
    const char *text = "0123456789abcdefghijklmnopqrstuvwxyzABCD";
    for (int left = 0; left < 2; left++) {
        char body[160];
        snprintf(body, sizeof body, "{\"inputs\":\"%s\",\"truncate\":true,\"truncation_direction\":\"%s\"}", text,
                 left ? "Left" : "right");
        o = call(s, "POST", "/embed", body, NULL, &r);
        n = fake_encode_text(left ? text + 10 : text, 30, 32, ids);
        want_vec(ids, n, 1, FAKE_DIM, want);
        CHECK_MSG(r.status == 200 && row_diff(json_array_get(o, 0), want, FAKE_DIM) == 0, "truncation %s: %.200s",
                  left ? "left" : "right", r.body);
        json_decref(o);
        qac_http_response_clear(&r);
    }
    /* token ids as given, and dimensions: cut, then normalised */
    o = call(s, "POST", "/embed", "{\"inputs\":[[1,104,105,2],\"x\"],\"dimensions\":3}", NULL, &r);
    int32_t given[] = {1, 104, 105, 2};
    want_vec(given, 4, 1, 3, want);
    CHECK_MSG(r.status == 200 && row_diff(json_array_get(o, 0), want, 3) < 1e-7, "ids + dimensions: %.200s", r.body);
    json_decref(o);
    qac_http_response_clear(&r);

    /* TEI's /tokenize form: tokens with byte offsets; the specials without */
    o = call(s, "POST", "/tokenize", "{\"inputs\":\"ab\"}", NULL, &r);
    json_t *toks = json_array_get(o, 0), *t0 = json_array_get(toks, 0), *t1 = json_array_get(toks, 1);
    CHECK_MSG(r.status == 200 && json_array_size(toks) == 4 && json_is_true(json_object_get(t0, "special")) &&
                  json_is_null(json_object_get(t0, "start")) && !strcmp(json_string_value(json_object_get(t0, "text")), "[CLS]") &&
                  json_integer_value(json_object_get(t1, "id")) == 100 + 'a' && json_is_false(json_object_get(t1, "special")) &&
                  json_integer_value(json_object_get(t1, "start")) == 0 && json_integer_value(json_object_get(t1, "stop")) == 1 &&
                  !strcmp(json_string_value(json_object_get(t1, "text")), "a"),
              "TEI tokenize: %.300s", r.body);
    json_decref(o);
    qac_http_response_clear(&r);

    o = call(s, "POST", "/decode", "{\"ids\":[[1,197,198,2],[197]],\"skip_special_tokens\":false}", NULL, &r);
    CHECK_MSG(r.status == 200 && !strcmp(json_string_value(json_array_get(o, 0)), "[CLS]ab[SEP]") &&
                  !strcmp(json_string_value(json_array_get(o, 1)), "a"), "decode: %.200s", r.body);
    json_decref(o);
    qac_http_response_clear(&r);

    /* TEI errors: shape and status */
    static const struct { const char *path, *body; int status; const char *type; } tei_errors[] = {
        {"/embed", "{\"inputs\":[]}", 400, "Empty"},
        {"/embed", "{\"inputs\":\"\"}", 400, "Empty"},
        {"/embed", "{\"inputs\":\"a\",\"dimensions\":0}", 422, "Validation"},
        {"/embed", "{\"inputs\":\"a\",\"dimensions\":9}", 422, "Validation"},
        {"/embed", "{\"inputs\":\"a\",\"truncation_direction\":\"up\"}", 422, "Validation"},
        {"/embed", "{\"inputs\":\"0123456789012345678901234567890123\",\"truncate\":false}", 422, "Validation"},
        {"/embed", "{\"inputs\":[[1,400]]}", 422, "Validation"},
        {"/embed", "{\"inputs\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", 422, "Validation"},
        {"/embed", "{\"inputs\":\"a\",\"normalize\":null}", 422, "Validation"},
        {"/embed", "{not json", 400, "Validation"},
        {"/", "{\"inputs\":[1.5]}", 422, "Validation"},
        {"/embed_all", "{\"inputs\":\"a\"}", 424, "Backend"},
        {"/decode", "{\"ids\":[]}", 400, "Empty"},
        {"/decode", "{\"ids\":[[1],[]]}", 400, "Empty"},
        {"/decode", "{\"ids\":[\"a\"]}", 422, "Validation"},
        {"/tokenize", "{\"inputs\":[]}", 400, "Empty"},
        {"/tokenize", "{\"inputs\":[[1,2]]}", 422, "Validation"},
    };
    for (size_t i = 0; i < sizeof tei_errors / sizeof tei_errors[0]; i++) {
        o = call(s, "POST", tei_errors[i].path, tei_errors[i].body, NULL, &r);
        const char *et = json_string_value(json_object_get(o, "error_type"));
        CHECK_MSG(r.status == tei_errors[i].status && et && !strcmp(et, tei_errors[i].type) &&
                      json_is_string(json_object_get(o, "error")) && json_object_size(o) == 2,
                  "%s %s: %d %.200s, want %d %s", tei_errors[i].path, tei_errors[i].body, r.status, r.body,
                  tei_errors[i].status, tei_errors[i].type);
        json_decref(o);
        qac_http_response_clear(&r);
    }

    /* OpenAI: one tokenized input, a list of them, and /v1/models */
    o = call(s, "POST", "/v1/embeddings", "{\"input\":[[1,120,2],[1,130,131,2]]}", NULL, &r);
    int32_t a[] = {1, 120, 2}, b[] = {1, 130, 131, 2};
    want_vec(a, 3, 1, FAKE_DIM, want);
    json_t *data = json_object_get(o, "data");
    double da = row_diff(json_object_get(json_array_get(data, 0), "embedding"), want, FAKE_DIM);
    want_vec(b, 4, 1, FAKE_DIM, want);
    double db = row_diff(json_object_get(json_array_get(data, 1), "embedding"), want, FAKE_DIM);
    CHECK_MSG(r.status == 200 && da == 0 && db == 0 &&
                  json_integer_value(json_object_get(json_object_get(o, "usage"), "prompt_tokens")) == 7,
              "token-id inputs: %.300s", r.body);
    json_decref(o);
    qac_http_response_clear(&r);
    o = call(s, "POST", "/v1/embeddings", "{\"input\":[1,120,2]}", NULL, &r);
    want_vec(a, 3, 1, FAKE_DIM, want);
    CHECK_MSG(r.status == 200 && row_diff(json_object_get(json_array_get(json_object_get(o, "data"), 0), "embedding"),
                                          want, FAKE_DIM) == 0, "one token-id input: %.200s", r.body);
    json_decref(o);
    qac_http_response_clear(&r);
    o = call(s, "GET", "/v1/models", NULL, NULL, &r);
    json_t *m0 = json_array_get(json_object_get(o, "data"), 0);
    CHECK_MSG(r.status == 200 && !strcmp(json_string_value(json_object_get(o, "object")), "list") &&
                  !strcmp(json_string_value(json_object_get(m0, "id")), "fake-model") &&
                  !strcmp(json_string_value(json_object_get(m0, "object")), "model"), "models: %.200s", r.body);
    json_decref(o);
    qac_http_response_clear(&r);
    qac_server_free(s);
}

static void test_auth(void) {
    fake_stats st = {0};
    qac_server *s = make_server(1, 0, "s3cret", 1, &st);
    qac_http_response r;
    json_decref(call(s, "GET", "/health", NULL, NULL, &r));
    CHECK(r.status == 200);
    qac_http_response_clear(&r);
    expect_error(s, "GET", "/info", NULL, 401, "unauthorized");
    json_decref(call(s, "POST", "/encode", "{\"texts\":[\"a\"]}", "Bearer wrong", &r));
    CHECK(r.status == 401 && r.www_authenticate);
    qac_http_response_clear(&r);
    json_decref(call(s, "POST", "/encode", "{\"texts\":[\"a\"]}", "Bearer s3cret", &r));
    CHECK(r.status == 200);
    qac_http_response_clear(&r);
    json_decref(call(s, "GET", "/info", NULL, "bearer s3cret", &r));
    CHECK(r.status == 200);
    qac_http_response_clear(&r);
    /* the page is public, POST / (TEI's embed) is not */
    json_decref(call(s, "GET", "/", NULL, NULL, &r));
    CHECK(r.status == 200);
    qac_http_response_clear(&r);
    json_decref(call(s, "POST", "/", "{\"inputs\":\"a\"}", NULL, &r));
    CHECK(r.status == 401);
    qac_http_response_clear(&r);
    qac_server_free(s);
}

static void test_config_table(void) {
    int n;
    const qac_opt *t = qac_server_opt_table(&n);
    qac_opts o;
    setenv("QAC_MAX_K", "77", 1);
    setenv("QAC_PORT", "9999", 1);
    char *argv[] = {"--port", "1234", "--truncate", "false", "--max-wait-ms", "0"};
    CHECK_OK(qac_opts_parse(&o, t, n, 6, argv));
    qac_server_config c;
    CHECK_OK(qac_server_config_from_opts(&c, &o));
    CHECK(c.port == 1234);       /* flag beats env */
    CHECK(c.max_k == 77);        /* env beats default */
    CHECK(c.truncate == 0 && c.max_wait_ms == 0);
    CHECK(!strcmp(c.host, "127.0.0.1"));
    qac_server_config_clear(&c);
    qac_opts_free(&o);
    char *bad[] = {"--max-k", "0"};
    CHECK_ERR(qac_opts_parse(&o, t, n, 2, bad), QAC_ERR_INVALID, "max-k");
    qac_opts_free(&o);
    unsetenv("QAC_MAX_K");
    unsetenv("QAC_PORT");
}

/* A zero vector (issue 38): TEI's normalisation of a cut vector divided by
 * its zero length, the NaNs were refused by the JSON library and the row
 * came back empty with a 200. Every row must have its dimensions, a zero
 * vector staying zero (torch's F.normalize, which sentence-transformers
 * uses), on each route that normalises. */
static void test_zero_vector(void) {
    fake_stats st = {0};
    qac_server *s = make_server(1, 0, NULL, 1, &st);
    static const struct {
        const char *path, *body, *rows_key; /* rows_key NULL: the body is the list of rows */
        int dims;
    } cases[] = {
        {"/embed", "{\"inputs\":[[1,3,2],[1,200,2]],\"dimensions\":4}", NULL, 4},
        {"/embed", "{\"inputs\":[[1,3,2],[1,200,2]],\"normalize\":true}", NULL, FAKE_DIM},
        {"/v1/embeddings", "{\"input\":[[1,3,2],[1,200,2]],\"dimensions\":4}", "data", 4},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        qac_http_response r;
        json_t *o = call(s, "POST", cases[c].path, cases[c].body, NULL, &r);
        CHECK_MSG(r.status == 200, "%s %s: status %d: %.200s", cases[c].path, cases[c].body, r.status, r.body);
        json_t *rows = cases[c].rows_key ? json_object_get(o, cases[c].rows_key) : o;
        CHECK_MSG(json_array_size(rows) == 2, "%s: two rows: %.200s", cases[c].path, r.body);
        for (size_t i = 0; i < json_array_size(rows); i++) {
            json_t *row = json_array_get(rows, i);
            if (cases[c].rows_key) row = json_object_get(row, "embedding");
            CHECK_MSG(json_array_size(row) == (size_t)cases[c].dims, "%s %s: row %zu has %zu of %d values: %.200s",
                      cases[c].path, cases[c].body, i, json_array_size(row), cases[c].dims, r.body);
            double ss = 0;
            for (size_t d = 0; d < json_array_size(row); d++) {
                double v = json_number_value(json_array_get(row, d));
                ss += v * v;
            }
            /* row 0 is the zero vector; row 1 a unit one (float32 entries: |1 - |x|^2| within a few ulps) */
            CHECK_MSG(i == 0 ? ss == 0 : fabs(ss - 1) < 1e-5, "%s: row %zu |x|^2 = %g", cases[c].path, i, ss);
        }
        json_decref(o);
        qac_http_response_clear(&r);
    }
    qac_server_free(s);
}

/* The JSON writer of large answers against jansson, the reference it
 * replaces: strings (every byte value, valid UTF-8 compared byte for byte
 * with json_dumps), reals (random float32 bit patterns and doubles, the
 * same text as json_real at JSON_REAL_PRECISION(9)), and its size
 * functions against what it writes. Bytes that are not UTF-8 (jansson
 * refuses those strings) become U+FFFD, one per maximal invalid sequence. */
static uint64_t xorshift(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void test_json_writer(void) {
    uint64_t rng = 0x9E3779B97F4A7C15ULL;
#define NEXT() xorshift(&rng)
    int strings = 0, reals = 0, invalid = 0;
    for (int it = 0; it < 20000; it++) {
        char str[24];
        size_t n = NEXT() % sizeof str;
        for (size_t i = 0; i < n; i++) /* mostly ASCII and controls, some high bytes */
            str[i] = (char)(NEXT() % 4 ? NEXT() % 128 : NEXT() % 256);
        qac_jw w, c;
        qac_jw_count(&c);
        qac_jw_str(&c, str, n);
        CHECK(qac_jw_open(&w, c.len));
        qac_jw_str(&w, str, n);
        CHECK_MSG(!w.fault && w.len == c.len && c.len == qac_jw_str_size(str, n), "string sizes: %zu %zu %zu", w.len,
                  c.len, qac_jw_str_size(str, n));
        json_t *js = json_stringn(str, n);
        if (js) { /* valid UTF-8: jansson writes the same bytes */
            char *ref = json_dumps(js, JSON_ENCODE_ANY | JSON_COMPACT);
            CHECK_MSG(ref && strlen(ref) == w.len && !memcmp(ref, w.buf, w.len), "string %d differs: %s vs %.*s", it,
                      ref, (int)w.len, w.buf);
            free(ref);
            json_decref(js);
            strings++;
        } else { /* what it wrote parses, and is the input with U+FFFD in place of invalid bytes */
            w.buf[w.len] = '\0';
            json_error_t e;
            json_t *back = json_loads(w.buf, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
            CHECK_MSG(back && json_is_string(back), "lossy string %d is not JSON: %s", it, w.buf);
            CHECK(back && memmem(json_string_value(back), json_string_length(back), "\xef\xbf\xbd", 3));
            json_decref(back);
            invalid++;
        }
        qac_jw_free(&w);

        uint32_t bits = (uint32_t)NEXT();
        float f;
        memcpy(&f, &bits, 4);
        double d = it % 2 ? (double)f : ((double)(int64_t)NEXT() / 9.3e3) * pow(10.0, (double)(NEXT() % 40) - 20);
        if (!isfinite(d)) continue;
        CHECK(qac_jw_open(&w, QAC_JW_REAL_MAX));
        qac_jw_real(&w, d);
        json_t *jr = json_real(d);
        char *ref = json_dumps(jr, JSON_ENCODE_ANY | QAC_SRV_JSON_FLAGS);
        CHECK_MSG(!w.fault && ref && strlen(ref) == w.len && !memcmp(ref, w.buf, w.len) && w.len <= QAC_JW_REAL_MAX,
                  "real %.17g: %s vs %.*s", d, ref, (int)w.len, w.buf);
        free(ref);
        json_decref(jr);
        qac_jw_free(&w);
        reals++;
    }
    /* the bound QAC_JW_REAL_MAX at its worst: negative, 9 digits, a 3-digit exponent */
    qac_jw w;
    CHECK(qac_jw_open(&w, QAC_JW_REAL_MAX));
    qac_jw_real(&w, -1.23456789e-308);
    CHECK_MSG(!w.fault && w.len == QAC_JW_REAL_MAX, "longest real: %zu bytes", w.len);
    qac_jw_free(&w);
    /* past the capacity, and a NaN: a fault, never a short answer */
    CHECK(qac_jw_open(&w, 3));
    qac_jw_lit(&w, "[1,2]");
    CHECK(w.fault != NULL);
    qac_jw_free(&w);
    CHECK(qac_jw_open(&w, 64));
    qac_jw_real(&w, NAN);
    CHECK(w.fault != NULL);
    qac_jw_free(&w);
    printf("json writer: %d strings and %d reals as jansson writes them, %d invalid strings made lossy\n", strings,
           reals, invalid);
#undef NEXT
}

int main(void) {
    test_ok_paths();
    test_errors();
    test_tei_openai();
    test_auth();
    test_config_table();
    test_zero_vector();
    test_json_writer();
    return qac_test_summary();
}
