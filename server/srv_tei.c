/* POST /embed in the form of Hugging Face text-embeddings-inference (TEI),
 * so TEI clients (huggingface_hub's InferenceClient.feature_extraction,
 * LangChain's HuggingFaceEndpointEmbeddings) work unchanged.
 *
 * Request: {"inputs": string | [string], "normalize": bool = true,
 * "truncate": bool = false}. Answer: [[float, ...], ...], one row per input,
 * float32 values printed with 9 significant digits (exact round trip).
 * Errors take TEI's shape and statuses, not qac's error family:
 * {"error": "...", "error_type": "Validation" | "Tokenizer" | "Overloaded" |
 * "Unhealthy" | "Backend" | "Empty"}: 413 Validation (too many inputs, or an
 * input past the length limit without truncate), 400 Empty (no input),
 * 422 Tokenizer (wrong JSON types), 429 Overloaded, 503 Unhealthy,
 * 424 Backend. A body that is not JSON is 400, as TEI's JSON extractor does.
 * normalize=false returns the encoder's pooled vector, which the checkpoint's
 * own Normalize module (when it has one) has already normalised.
 * "prompt_name" (string or null) names one of the model's prompts, put
 * before every input (422 Validation when the model has no such prompt);
 * without it the model's default prompt applies, if it names one. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "srv_internal.h"

static void tei_error(qac_http_response *r, int status, const char *type, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!qac_utf8_valid(msg, strlen(msg)))
        for (char *p = msg; *p; p++)
            if ((unsigned char)*p >= 0x80) *p = '?';
    json_t *o = json_pack("{s:s,s:s}", "error", msg, "error_type", type);
    char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!body) {
        qac_server_error(r, 500, "internal", "out of memory");
        return;
    }
    free(r->body);
    r->status = status;
    r->body = body;
    r->body_len = strlen(body);
    r->content_type = "application/json";
}

static int get_flag(json_t *o, const char *key, int *out, qac_http_response *r) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 1;
    if (!json_is_boolean(v)) {
        tei_error(r, 422, "Tokenizer", "`%s` must be a boolean", key);
        return 0;
    }
    *out = json_is_true(v);
    return 1;
}

void qac_handle_tei_embed(qac_server *s, const char *body, size_t len, qac_http_response *r) {
    json_t *o = NULL;
    int32_t *ids = NULL;
    const int32_t **ptrs = NULL;
    int *lens = NULL, *from = NULL;
    float *vec = NULL;
    json_error_t je;
    if (!qac_utf8_valid(body, len) || !(o = json_loadb(body, len, 0, &je))) {
        tei_error(r, 400, "Validation", "Failed to parse the request body as JSON");
        goto done;
    }
    json_t *inputs = json_is_object(o) ? json_object_get(o, "inputs") : NULL;
    if (!inputs) {
        tei_error(r, 422, "Tokenizer", "missing field `inputs`");
        goto done;
    }
    int normalize = 1, truncate = 0;
    if (!get_flag(o, "normalize", &normalize, r) || !get_flag(o, "truncate", &truncate, r)) goto done;
    json_t *pn = json_object_get(o, "prompt_name");
    if (pn && !json_is_null(pn) && !json_is_string(pn)) {
        tei_error(r, 422, "Tokenizer", "`prompt_name` must be a string");
        goto done;
    }
    const char *prompt = pn && !json_is_null(pn) ? qac_srv_prompt(s, json_string_value(pn)) : qac_srv_default_prompt(s);
    if (!prompt) {
        char names[256];
        qac_srv_prompt_names(s, names, sizeof names);
        if (s->be.n_prompts)
            tei_error(r, 422, "Validation", "`prompt_name` `%s` was not found in the Sentence Transformers prompts. "
                      "Available prompts: [%s]", json_string_value(pn), names);
        else
            tei_error(r, 422, "Validation", "`prompt_name` is set to `%s` but no prompts were found in the Sentence "
                      "Transformers configuration", json_string_value(pn));
        goto done;
    }
    int n = json_is_array(inputs) ? (int)json_array_size(inputs) : 1;
    if (!json_is_array(inputs) && !json_is_string(inputs)) {
        tei_error(r, 422, "Tokenizer", "`inputs` must be a string or an array of strings");
        goto done;
    }
    if (n == 0) {
        tei_error(r, 400, "Empty", "`inputs` cannot be empty");
        goto done;
    }
    if (n > s->cfg.max_texts) {
        tei_error(r, 413, "Validation", "batch size %d > maximum allowed batch size %d", n, s->cfg.max_texts);
        goto done;
    }
    int max_len = s->cfg.passage_max_len, dim = s->be.dim;
    int stride = max_len + 1; /* a prompted input is tokenised one longer to see whether it fits */
    ids = malloc((size_t)n * (size_t)stride * sizeof *ids);
    ptrs = malloc((size_t)n * sizeof *ptrs);
    lens = malloc((size_t)n * sizeof *lens);
    from = malloc((size_t)n * sizeof *from);
    vec = malloc((size_t)n * (size_t)dim * sizeof *vec);
    if (!ids || !ptrs || !lens || !from || !vec) {
        tei_error(r, 424, "Backend", "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        json_t *e = json_is_array(inputs) ? json_array_get(inputs, (size_t)i) : inputs;
        if (!json_is_string(e)) {
            tei_error(r, 422, "Tokenizer", "`inputs[%d]` must be a string", i);
            goto done;
        }
        const char *t = json_string_value(e);
        size_t tl = json_string_length(e);
        if (tl == 0) {
            tei_error(r, 400, "Empty", "`inputs` cannot be empty");
            goto done;
        }
        ptrs[i] = ids + (size_t)i * stride;
        from[i] = 0;
        if (*prompt) {
            int32_t *dst = ids + (size_t)i * stride;
            int nt = 0;
            if (s->be.encode_prompted(s->be.enc, prompt, t, tl, stride, dst, &nt, &from[i]) ||
                (nt > max_len && truncate && s->be.encode_prompted(s->be.enc, prompt, t, tl, max_len, dst, &nt, &from[i]))) {
                tei_error(r, 422, "Tokenizer", "%s", qac_last_error());
                goto done;
            }
            if (nt > max_len) {
                tei_error(r, 413, "Validation",
                          "Input validation error: `inputs` with the prompt must have less than %d tokens", max_len);
                goto done;
            }
            lens[i] = nt;
            continue;
        }
        if (!truncate) {
            int full = 0;
            int32_t scratch[1];
            if (s->be.tokenize(s->be.enc, t, tl, scratch, 0, &full)) {
                tei_error(r, 422, "Tokenizer", "%s", qac_last_error());
                goto done;
            }
            if (full + 2 > max_len) {
                tei_error(r, 413, "Validation",
                          "Input validation error: `inputs` must have less than %d tokens. Given: %d", max_len,
                          full + 2);
                goto done;
            }
        }
        if (s->be.encode_text(s->be.enc, t, tl, max_len, ids + (size_t)i * stride, &lens[i])) {
            tei_error(r, 422, "Tokenizer", "%s", qac_last_error());
            goto done;
        }
    }
    qac_status st = qac_batcher_run(s->batcher, (const int32_t *const *)ptrs, lens, from, n, vec, 0, NULL, NULL,
                                    s->cfg.timeout_ms, NULL);
    if (st == QAC_ERR_BUSY) {
        tei_error(r, 429, "Overloaded", "%s", qac_last_error());
        r->retry_after = 1;
        goto done;
    } else if (st == QAC_ERR_CANCELLED) {
        tei_error(r, 503, "Unhealthy", "%s", qac_last_error());
        r->retry_after = 1;
        goto done;
    } else if (st) {
        tei_error(r, 424, "Backend", "%s", qac_last_error());
        goto done;
    }
    json_t *rows = json_array();
    for (int i = 0; rows && i < n; i++) {
        float *x = vec + (size_t)i * dim;
        if (normalize && !s->be.normalize) {
            double ss = 0;
            for (int d = 0; d < dim; d++) ss += (double)x[d] * x[d];
            float inv = ss > 0 ? (float)(1.0 / sqrt(ss)) : 0.f;
            for (int d = 0; d < dim; d++) x[d] *= inv;
        }
        json_t *row = json_array();
        for (int d = 0; row && d < dim; d++) json_array_append_new(row, json_real(x[d]));
        json_array_append_new(rows, row);
    }
    char *out = rows ? json_dumps(rows, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(rows);
    if (!out) {
        tei_error(r, 424, "Backend", "out of memory building the response");
        goto done;
    }
    free(r->body);
    r->status = 200;
    r->body = out;
    r->body_len = strlen(out);
    r->content_type = "application/json";
done:
    json_decref(o);
    free(ids);
    free(ptrs);
    free(lens);
    free(from);
    free(vec);
}
