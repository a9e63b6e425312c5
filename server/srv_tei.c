/* Hugging Face text-embeddings-inference (TEI), as its 1.9 router answers:
 * POST /embed (and POST /, where TEI serves an embedding model), the
 * TEI form of POST /tokenize, POST /decode, POST /embed_all and, with a
 * cross-encoder, POST /rerank (at the end of this file), so that
 * TEI clients (huggingface_hub's InferenceClient, LangChain's
 * HuggingFaceEndpointEmbeddings) work unchanged.
 *
 * Requests, field by field as TEI's serde types read them:
 *   inputs: a string, an array of token ids, or an array of those (a batch);
 *   truncate: bool or null (null or absent: the server's --truncate);
 *   truncation_direction: "left" | "right" (also "Left" | "Right");
 *   normalize: bool = true (false: the pooled vector as the model pools it,
 *     before any Normalize module); dimensions: null or an integer, the
 *     vector cut to its first dimensions (then normalised).
 * Errors take TEI's shape {"error", "error_type"} and its statuses: 400
 * Empty, 422 Validation / Tokenizer, 424 Backend, 429 Overloaded, 503
 * Unhealthy. Deliberate differences (also in api/openapi.yaml): a body that
 * is not JSON or does not fit the types is answered in this JSON shape, not
 * as the HTTP framework's plain text; token ids are used as given (TEI
 * decodes and re-encodes them) and one outside the vocabulary is a 422;
 * the length limit is the server's passage length (--passage-max-len).
 *   prompt_name: string or null, one of the model's sentence-transformers
 *     prompts, put before every text input (422 Validation when the model
 *     has no such prompt); absent or null: the model's default prompt, if
 *     it names one. Token-id inputs take no prompt. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "srv_internal.h"

/* The messages of TEI's JSON extractor (axum's rejections). */
static json_t *tei_parse(const char *body, size_t len, qac_http_response *r) {
    json_error_t je;
    json_t *o = qac_utf8_valid(body, len) ? json_loadb(body, len, 0, &je) : NULL;
    if (!o) {
        qac_srv_error(r, QAC_REPLY_TEI, 400, "Validation", "Failed to parse the request body as JSON");
        return NULL;
    }
    if (!json_is_object(o)) {
        json_decref(o);
        qac_srv_error(r, QAC_REPLY_TEI, 422, "Validation",
                  "Failed to deserialize the JSON body into the target type: invalid type: expected a struct");
        return NULL;
    }
    return o;
}

static void type_error(qac_http_response *r, const char *field, const char *want) {
    qac_srv_error(r, QAC_REPLY_TEI, 422, "Validation", "Failed to deserialize the JSON body into the target type: %s: expected %s", field,
              want);
}

/* bool field (TEI: bool with a default; null is a type error) */
static int get_bool(json_t *o, const char *key, int *out, qac_http_response *r) {
    json_t *v = json_object_get(o, key);
    if (!v) return 1;
    if (!json_is_boolean(v)) {
        type_error(r, key, "a boolean");
        return 0;
    }
    *out = json_is_true(v);
    return 1;
}

/* Option<bool>: null or absent leaves *out alone */
static int get_opt_bool(json_t *o, const char *key, int *out, qac_http_response *r) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 1;
    return get_bool(o, key, out, r);
}

/* A JSON array of integers 0 .. 2^32-1 (Vec<u32>): 1, else 0. */
static int is_id_list(json_t *a) {
    if (!json_is_array(a)) return 0;
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *e = json_array_get(a, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > 4294967295LL) return 0;
    }
    return 1;
}

/* TEI's `Input`: Single(string | ids) or Batch([string | ids]). items are
 * borrowed; *batch says which. strings_only: TEI's TokenizeInput. */
static int get_inputs(json_t *o, const char *key, int strings_only, json_t ***items, int *n, int *batch,
                      qac_http_response *r) {
    json_t *v = json_object_get(o, key);
    *items = NULL;
    *n = 0;
    *batch = 0;
    if (!v) {
        qac_srv_error(r, QAC_REPLY_TEI, 422, "Validation", "Failed to deserialize the JSON body into the target type: missing field `%s`",
                  key);
        return 0;
    }
    const char *want = strings_only ? "a string or an array of strings"
                                    : "a string, token ids, or an array of strings and token ids";
    if (json_is_string(v) || (!strings_only && is_id_list(v))) {
        *items = malloc(sizeof **items);
        if (!*items) goto oom;
        (*items)[0] = v;
        *n = 1;
        return 1;
    }
    if (!json_is_array(v)) {
        type_error(r, key, want);
        return 0;
    }
    size_t m = json_array_size(v);
    for (size_t i = 0; i < m; i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_string(e) && (strings_only || !is_id_list(e))) {
            type_error(r, key, want);
            return 0;
        }
    }
    *items = malloc((m ? m : 1) * sizeof **items);
    if (!*items) goto oom;
    for (size_t i = 0; i < m; i++) (*items)[i] = json_array_get(v, i);
    *n = (int)m;
    *batch = 1;
    return 1;
oom:
    qac_srv_fail(r, QAC_REPLY_TEI, QAC_ERR_NOMEM, "out of memory");
    return 0;
}

/* TEI's checks of a batch before any input is looked at. */
static int check_batch(qac_server *s, int n, int batch, const char *what, qac_http_response *r) {
    if (batch && n == 0) {
        qac_srv_error(r, QAC_REPLY_TEI, 400, "Empty", "`%s` cannot be empty", what);
        return 0;
    }
    if (batch && n > s->cfg.max_texts) {
        qac_srv_error(r, QAC_REPLY_TEI, 422, "Validation", "batch size %d > maximum allowed batch size %d", n, s->cfg.max_texts);
        return 0;
    }
    return 1;
}

/* A text after its prompt, cut as asked: out holds max_len + 1 ids; *from
 * is what the pooling skips (qac_server_backend.encode_prompted). TEI puts
 * the prompt before the text and truncates the whole sequence, so a cut on
 * the left takes the prompt's tokens first. */
static int encode_prompted_input(qac_server *s, const char *prompt, const char *t, size_t tl, int truncate, int left,
                                 int max_len, int32_t *out, int *len, int *from, qac_http_response *r) {
    const qac_server_backend *be = &s->be;
    int nt = 0;
    if (be->encode_prompted(be->enc, prompt, t, tl, max_len + 1, out, &nt, from)) {
        qac_srv_error(r, QAC_REPLY_TEI, 422, "Tokenizer", "tokenizer error %s", qac_last_error());
        return 0;
    }
    if (nt <= max_len) {
        *len = nt;
        return 1;
    }
    if (!truncate) {
        qac_srv_error(r, QAC_REPLY_TEI, 422, "Validation",
                  "Input validation error: `inputs` with the prompt must have less than %d tokens", max_len);
        return 0;
    }
    if (!left) {
        if (be->encode_prompted(be->enc, prompt, t, tl, max_len, out, len, from)) {
            qac_srv_error(r, QAC_REPLY_TEI, 422, "Tokenizer", "tokenizer error %s", qac_last_error());
            return 0;
        }
        return 1;
    }
    int ft = 0, fp = 0;
    int32_t scratch[1];
    if (be->tokenize(be->enc, t, tl, scratch, 0, &ft) || be->tokenize(be->enc, prompt, strlen(prompt), scratch, 0, &fp)) {
        qac_srv_error(r, QAC_REPLY_TEI, 422, "Tokenizer", "tokenizer error %s", qac_last_error());
        return 0;
    }
    int cap = ft + fp + 8, all_n = 0, all_from = 0; /* the two tokenised apart bound the whole, with slack */
    int32_t *all = malloc((size_t)cap * sizeof *all);
    if (!all) {
        qac_srv_fail(r, QAC_REPLY_TEI, QAC_ERR_NOMEM, "out of memory");
        return 0;
    }
    if (be->encode_prompted(be->enc, prompt, t, tl, cap, all, &all_n, &all_from) || all_n >= cap) {
        free(all);
        qac_srv_error(r, QAC_REPLY_TEI, 422, "Tokenizer", "tokenizer error %s", all_n >= cap ? "token count changed" : qac_last_error());
        return 0;
    }
    int specials = (be->cls_id >= 0) + (be->sep_id >= 0), head = be->cls_id >= 0;
    int inner = all_n - specials, keep = max_len - specials, cut = inner - keep, o = 0;
    if (head) out[o++] = all[0];
    memcpy(out + o, all + head + cut, (size_t)keep * sizeof *out);
    o += keep;
    if (be->sep_id >= 0) out[o++] = all[all_n - 1];
    free(all);
    *len = o;
    /* the prompt tokens left after the cut are still skipped, [CLS] too */
    *from = all_from ? (all_from - cut > head ? all_from - cut : head) : 0;
    return 1;
}

/* One input to model ids, cut as asked: out holds max_len + 1 ids. */
static int encode_input(qac_server *s, json_t *in, const char *prompt, int truncate, int left, int max_len,
                        int32_t *out, int *len, int *from_skip, qac_http_response *r) {
    const qac_server_backend *be = &s->be;
    *from_skip = 0;
    if (json_is_array(in)) { /* token ids, used as they are */
        int n = (int)json_array_size(in);
        if (n == 0) {
            qac_srv_error(r, QAC_REPLY_TEI, 400, "Empty", "Input validation error: `inputs` cannot be empty");
            return 0;
        }
        if (n > max_len && !truncate) {
            qac_srv_error(r, QAC_REPLY_TEI, 422, "Validation", "Input validation error: `inputs` must have less than %d tokens. Given: %d",
                      max_len, n);
            return 0;
        }
        int keep = n > max_len ? max_len : n, from = left ? n - keep : 0;
        for (int i = 0; i < keep; i++) {
            long long id = json_integer_value(json_array_get(in, (size_t)(from + i)));
            if (id >= be->vocab_size) {
                qac_srv_error(r, QAC_REPLY_TEI, 422, "Validation", "Input validation error: token id %lld is outside the vocabulary (0..%d)",
                          id, be->vocab_size - 1);
                return 0;
            }
            out[i] = (int32_t)id;
        }
        *len = keep;
        return 1;
    }
    const char *t = json_string_value(in);
    size_t tl = json_string_length(in);
    if (tl == 0) {
        qac_srv_error(r, QAC_REPLY_TEI, 400, "Empty", "Input validation error: `inputs` cannot be empty");
        return 0;
    }
    if (prompt && *prompt) return encode_prompted_input(s, prompt, t, tl, truncate, left, max_len, out, len, from_skip, r);
    int full = 0;
    int32_t scratch[1];
    if (be->tokenize(be->enc, t, tl, scratch, 0, &full)) {
        qac_srv_error(r, QAC_REPLY_TEI, 422, "Tokenizer", "tokenizer error %s", qac_last_error());
        return 0;
    }
    int specials = (be->cls_id >= 0) + (be->sep_id >= 0);
    if (full + specials > max_len && !truncate) {
        qac_srv_error(r, QAC_REPLY_TEI, 422, "Validation", "Input validation error: `inputs` must have less than %d tokens. Given: %d",
                  max_len, full + specials);
        return 0;
    }
    if (!left || full + specials <= max_len) {
        if (be->encode_text(be->enc, t, tl, max_len, out, len)) {
            qac_srv_error(r, QAC_REPLY_TEI, 422, "Tokenizer", "tokenizer error %s", qac_last_error());
            return 0;
        }
        return 1;
    }
    /* cut on the left: the last tokens, between the specials */
    int32_t *all = malloc((size_t)full * sizeof *all);
    if (!all) {
        qac_srv_fail(r, QAC_REPLY_TEI, QAC_ERR_NOMEM, "out of memory");
        return 0;
    }
    int got = 0;
    qac_status st = be->tokenize(be->enc, t, tl, all, full, &got);
    if (st || got != full) {
        free(all);
        qac_srv_error(r, QAC_REPLY_TEI, 422, "Tokenizer", "tokenizer error %s", st ? qac_last_error() : "token count changed");
        return 0;
    }
    int keep = max_len - specials, o = 0;
    if (be->cls_id >= 0) out[o++] = be->cls_id;
    memcpy(out + o, all + (full - keep), (size_t)keep * sizeof *out);
    o += keep;
    if (be->sep_id >= 0) out[o++] = be->sep_id;
    free(all);
    *len = o;
    return 1;
}

/* The prompt a request names (prompt_name), or the default one: *prompt
 * ("" for none); 0 after answering 422 for a name the model does not have. */
static int tei_prompt(qac_server *s, json_t *o, const char **prompt, qac_http_response *r) {
    json_t *pn = json_object_get(o, "prompt_name");
    if (pn && !json_is_null(pn) && !json_is_string(pn)) {
        type_error(r, "prompt_name", "a string or null");
        return 0;
    }
    *prompt = pn && !json_is_null(pn) ? qac_srv_prompt(s, json_string_value(pn)) : qac_srv_default_prompt(s);
    if (*prompt) return 1;
    char names[256];
    qac_srv_prompt_names(s, names, sizeof names);
    if (s->be.n_prompts)
        qac_srv_error(r, QAC_REPLY_TEI, 422, "Validation",
                      "`prompt_name` `%s` was not found in the Sentence Transformers prompts. Available prompts: [%s]",
                      json_string_value(pn), names);
    else
        qac_srv_error(r, QAC_REPLY_TEI, 422, "Validation",
                      "`prompt_name` is set to `%s` but no prompts were found in the Sentence Transformers "
                      "configuration", json_string_value(pn));
    return 0;
}

void qac_handle_tei_embed(qac_server *s, const char *body, size_t len, qac_http_response *r) {
    json_t *o = NULL, **items = NULL;
    int32_t *ids = NULL;
    const int32_t **ptrs = NULL;
    int *lens = NULL, *from = NULL;
    float *vec = NULL;
    qac_jw w = {0};
    if (!(o = tei_parse(body, len, r))) goto done;
    int n = 0, batch = 0, normalize = 1, truncate = s->cfg.truncate, left = 0;
    long long dims = 0;
    if (!get_inputs(o, "inputs", 0, &items, &n, &batch, r) || !get_opt_bool(o, "truncate", &truncate, r) ||
        !get_bool(o, "normalize", &normalize, r))
        goto done;
    json_t *dir = json_object_get(o, "truncation_direction");
    if (dir) {
        const char *d = json_string_value(dir);
        if (d && (!strcmp(d, "left") || !strcmp(d, "Left"))) left = 1;
        else if (!d || (strcmp(d, "right") && strcmp(d, "Right"))) {
            type_error(r, "truncation_direction", "one of `Left`, `Right`");
            goto done;
        }
    }
    json_t *jd = json_object_get(o, "dimensions");
    if (jd && !json_is_null(jd)) {
        if (!json_is_integer(jd) || json_integer_value(jd) < 0) {
            type_error(r, "dimensions", "a non-negative integer");
            goto done;
        }
        dims = json_integer_value(jd);
    }
    if (!check_batch(s, n, batch, "inputs", r)) goto done;
    if (jd && !json_is_null(jd) && dims == 0) {
        qac_srv_error(r, QAC_REPLY_TEI, 422, "Validation", "Input validation error: `dimensions` should be positive");
        goto done;
    }
    const char *prompt = "";
    if (!tei_prompt(s, o, &prompt, r)) goto done;
    int max_len = s->cfg.passage_max_len, dim = s->be.dim;
    /* [[x,...],...]: n rows of the output dimensions (dimensions past the
     * model's are refused below, after the inputs, as TEI does), decided before encoding */
    size_t bound = 2 + (size_t)n * (qac_jw_floats_max(dims > 0 && dims < dim ? (int)dims : dim) + 1);
    if (!qac_srv_response_fits(s, bound, QAC_REPLY_TEI, "send fewer inputs or ask for fewer `dimensions`", r))
        goto done;
    int stride = max_len + 1; /* a prompted input is tokenised one longer to see whether it fits */
    ids = malloc((size_t)n * (size_t)stride * sizeof *ids);
    ptrs = malloc((size_t)n * sizeof *ptrs);
    lens = malloc((size_t)n * sizeof *lens);
    from = malloc((size_t)n * sizeof *from);
    vec = malloc((size_t)n * (size_t)dim * sizeof *vec);
    if (!ids || !ptrs || !lens || !from || !vec || !qac_jw_open(&w, bound)) {
        qac_srv_fail(r, QAC_REPLY_TEI, QAC_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        ptrs[i] = ids + (size_t)i * stride;
        if (!encode_input(s, items[i], prompt, truncate, left, max_len, ids + (size_t)i * stride, &lens[i], &from[i],
                          r))
            goto done;
    }
    if (dims > dim) {
        qac_srv_error(r, QAC_REPLY_TEI, 422, "Validation",
                  "Input validation error: `dimensions` should be smaller than the maximum embedding dimension.");
        goto done;
    }
    /* normalize=false on a model that normalises: the raw encoder */
    int raw = !normalize && s->be.normalize;
    qac_status st = qac_batcher_run(s->batcher, (const int32_t *const *)ptrs, lens, from, n, vec, 0, NULL, NULL,
                                    s->cfg.timeout_ms, qac_srv_cancel, raw);
    if (st) {
        qac_srv_fail(r, QAC_REPLY_TEI, st, NULL);
        goto done;
    }
    int out_dim = dims > 0 ? (int)dims : dim;
    for (int i = 0; i < n; i++) {
        float *x = vec + (size_t)i * dim;
        /* the encoder's own normalisation is kept as it is (the same bits
         * as `qac encode`); a cut vector or an unnormalised model is scaled */
        if (normalize && (!s->be.normalize || out_dim < dim)) qac_srv_l2_normalize(x, 1, out_dim);
    }
    qac_jw_raw(&w, "[", 1);
    for (int i = 0; i < n; i++) {
        if (i) qac_jw_raw(&w, ",", 1);
        qac_jw_floats(&w, vec + (size_t)i * dim, out_dim);
    }
    qac_jw_raw(&w, "]", 1);
    qac_jw_reply(&w, r, QAC_REPLY_TEI);
done:
    qac_jw_free(&w);
    json_decref(o);
    free(items);
    free(ids);
    free(ptrs);
    free(lens);
    free(from);
    free(vec);
}

/* TEI computes /embed_all (every token's last hidden state) in its backend;
 * qac's encoder pools inside the forward pass on the CPU and the GPU and
 * hands out pooled vectors only, so the route answers as TEI does for a
 * model that cannot give them. */
void qac_handle_tei_embed_all(qac_server *s, const char *body, size_t len, qac_http_response *r) {
    (void)s;
    json_t *o = tei_parse(body, len, r);
    if (!o) return;
    json_decref(o);
    qac_srv_error(r, QAC_REPLY_TEI, 424, "Backend",
              "Backend error: `embed_all` is not available: this server's encoder returns pooled embeddings only "
              "(use /embed)");
}

/* One input's list of TEI's tokens, written into w (a counting writer
 * gives its size): the prompt, if any, goes before the text as TEI puts
 * it, and offsets and texts are those of the prompted string. */
static int tei_token_list(qac_server *s, const char *prompt, const char *text, size_t text_len, int specials,
                          qac_jw *w, qac_http_response *r) {
    const qac_server_backend *be = &s->be;
    size_t pl = strlen(prompt), tl = pl + text_len;
    char *joined = pl ? malloc(tl) : NULL;
    const char *t = pl ? joined : text;
    int32_t *ids = NULL, *offs = NULL;
    int ok = 0, cnt = 0, got = 0, have_offs = be->tokenize_offsets != NULL;
    int32_t scratch[1];
    if (pl && !joined) goto oom;
    if (pl) {
        memcpy(joined, prompt, pl);
        memcpy(joined + pl, text, text_len);
    }
    if (be->tokenize(be->enc, t, tl, scratch, 0, &cnt)) goto tokenizer;
    ids = malloc(((size_t)cnt + 1) * sizeof *ids);
    offs = malloc(((size_t)cnt + 1) * 2 * sizeof *offs);
    if (!ids || !offs) goto oom;
    qac_status st = have_offs ? be->tokenize_offsets(be->enc, t, tl, ids, offs, cnt, &got)
                              : be->tokenize(be->enc, t, tl, ids, cnt, &got);
    if (st || got != cnt) {
        if (!st) qac_set_error(QAC_ERR_INTERNAL, "token count changed");
        goto tokenizer;
    }
    qac_jw_raw(w, "[", 1);
    int first = 1;
    for (int k = -1; k <= cnt; k++) {
        int special = k == -1 || k == cnt; /* the specials encode_text adds */
        int32_t id = k == -1 ? be->cls_id : k == cnt ? be->sep_id : ids[k];
        if (special && (!specials || id < 0)) continue;
        qac_jw_lit(w, first ? "{\"id\":" : ",{\"id\":");
        first = 0;
        qac_jw_int(w, id);
        qac_jw_lit(w, ",\"text\":");
        if (!special && have_offs) { /* its bytes in the input (lossy inside a character, as TEI) */
            size_t a = (size_t)offs[2 * k], b = (size_t)offs[2 * k + 1];
            qac_jw_str(w, t + a, b - a);
            qac_jw_lit(w, ",\"special\":false,\"start\":");
            qac_jw_int(w, (long long)a);
            qac_jw_lit(w, ",\"stop\":");
            qac_jw_int(w, (long long)b);
            qac_jw_lit(w, "}");
        } else { /* a special, or no offsets (SentencePiece): the token's own string */
            const char *piece = be->id_to_token ? be->id_to_token(be->enc, id) : NULL;
            qac_jw_str(w, piece ? piece : "", piece ? strlen(piece) : 0);
            qac_jw_lit(w, special ? ",\"special\":true,\"start\":null,\"stop\":null}"
                                  : ",\"special\":false,\"start\":null,\"stop\":null}");
        }
    }
    qac_jw_raw(w, "]", 1);
    ok = 1;
    goto done;
tokenizer:
    qac_srv_error(r, QAC_REPLY_TEI, 422, "Tokenizer", "tokenizer error %s", qac_last_error());
    goto done;
oom:
    qac_srv_fail(r, QAC_REPLY_TEI, QAC_ERR_NOMEM, "out of memory");
done:
    free(joined);
    free(ids);
    free(offs);
    return ok;
}

/* Every input's list, into w. */
static int tei_token_lists(qac_server *s, json_t **items, int n, const char *prompt, int specials, qac_jw *w,
                           qac_http_response *r) {
    qac_jw_raw(w, "[", 1);
    for (int i = 0; i < n; i++) {
        if (i) qac_jw_raw(w, ",", 1);
        if (!tei_token_list(s, prompt, json_string_value(items[i]), json_string_length(items[i]), specials, w, r))
            return 0;
    }
    qac_jw_raw(w, "]", 1);
    return 1;
}

/* TEI's /tokenize: one list of {id, text, special, start, stop} per input;
 * start/stop are byte offsets into the (prompted) input, text its bytes
 * there (the token string for the specials, whose offsets are null). The
 * answer's size comes from a dry run over the inputs before it is written;
 * each input is tokenised twice, and nothing of the answer is held before
 * it is known to fit. */
void qac_handle_tei_tokenize(qac_server *s, json_t *o, qac_http_response *r) {
    json_t **items = NULL;
    int n = 0, batch = 0, specials = 1;
    const char *prompt = "";
    qac_jw w;
    qac_jw_count(&w);
    if (!get_inputs(o, "inputs", 1, &items, &n, &batch, r) || !get_bool(o, "add_special_tokens", &specials, r) ||
        !tei_prompt(s, o, &prompt, r) || !check_batch(s, n, batch, "inputs", r))
        goto done;
    for (int i = 0; i < n; i++)
        if (json_string_length(items[i]) == 0) {
            qac_srv_error(r, QAC_REPLY_TEI, 400, "Empty", "Input validation error: `inputs` cannot be empty");
            goto done;
        }
    if (!tei_token_lists(s, items, n, prompt, specials, &w, r)) goto done;
    size_t size = w.len;
    if (!qac_srv_response_fits(s, size, QAC_REPLY_TEI, "send less text", r)) goto done;
    if (!qac_jw_open(&w, size)) {
        qac_srv_fail(r, QAC_REPLY_TEI, QAC_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (tei_token_lists(s, items, n, prompt, specials, &w, r)) qac_jw_reply(&w, r, QAC_REPLY_TEI);
done:
    qac_jw_free(&w);
    free(items);
}

/* Every id list decoded into w, one string each (a counting writer gives
 * the size). */
static int tei_decode_lists(qac_server *s, json_t *v, int single, int n, int skip, qac_jw *w,
                            qac_http_response *r) {
    const qac_server_backend *be = &s->be;
    int ok = 0;
    int32_t *ids = NULL;
    qac_jw_raw(w, "[", 1);
    for (int i = 0; i < n; i++) {
        json_t *list = single ? v : json_array_get(v, (size_t)i);
        int m = (int)json_array_size(list);
        free(ids);
        ids = malloc((size_t)m * sizeof *ids);
        if (!ids) {
            qac_srv_fail(r, QAC_REPLY_TEI, QAC_ERR_NOMEM, "out of memory");
            goto done;
        }
        for (int k = 0; k < m; k++) {
            long long id = json_integer_value(json_array_get(list, (size_t)k));
            ids[k] = id > INT32_MAX ? -1 : (int32_t)id; /* past the vocabulary: skipped, as tokenizers does */
        }
        char *text = NULL;
        if (be->decode(be->enc, ids, m, skip, &text)) {
            qac_srv_error(r, QAC_REPLY_TEI, 422, "Tokenizer", "tokenizer error %s", qac_last_error());
            goto done;
        }
        if (i) qac_jw_raw(w, ",", 1);
        qac_jw_str(w, text ? text : "", text ? strlen(text) : 0);
        free(text);
    }
    qac_jw_raw(w, "]", 1);
    ok = 1;
done:
    free(ids);
    return ok;
}

/* TEI's /decode: {"ids": [ids] | [[ids], ...], "skip_special_tokens": true}
 * -> one string per id list; sized by a dry run (each list decoded twice)
 * before the answer is written. */
void qac_handle_tei_decode(qac_server *s, const char *body, size_t len, qac_http_response *r) {
    json_t *o = NULL;
    qac_jw w;
    qac_jw_count(&w);
    if (!(o = tei_parse(body, len, r))) goto done;
    int skip = 1;
    json_t *v = json_object_get(o, "ids");
    if (!v) {
        qac_srv_error(r, QAC_REPLY_TEI, 422, "Validation",
                      "Failed to deserialize the JSON body into the target type: missing field `ids`");
        goto done;
    }
    if (!get_bool(o, "skip_special_tokens", &skip, r)) goto done;
    int single = is_id_list(v);
    int n = single ? 1 : json_is_array(v) ? (int)json_array_size(v) : -1;
    for (int i = 0; !single && i < n; i++)
        if (!is_id_list(json_array_get(v, (size_t)i))) n = -1;
    if (n < 0) {
        type_error(r, "ids", "an array of token ids or an array of those");
        goto done;
    }
    if (!check_batch(s, n, !single, "ids", r)) goto done;
    if (!s->be.decode) {
        qac_srv_error(r, QAC_REPLY_TEI, 424, "Backend", "Backend error: this tokenizer cannot decode");
        goto done;
    }
    for (int i = 0; i < n; i++)
        if (json_array_size(single ? v : json_array_get(v, (size_t)i)) == 0) {
            qac_srv_error(r, QAC_REPLY_TEI, 400, "Empty", "Input validation error: `input_ids` cannot be empty");
            goto done;
        }
    if (!tei_decode_lists(s, v, single, n, skip, &w, r)) goto done;
    size_t size = w.len;
    if (!qac_srv_response_fits(s, size, QAC_REPLY_TEI, "send fewer ids", r)) goto done;
    if (!qac_jw_open(&w, size)) {
        qac_srv_fail(r, QAC_REPLY_TEI, QAC_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (tei_decode_lists(s, v, single, n, skip, &w, r)) qac_jw_reply(&w, r, QAC_REPLY_TEI);
done:
    qac_jw_free(&w);
    json_decref(o);
}

/* ---------------- POST /rerank ----------------
 * TEI's RerankRequest: query: string, texts: [string] (both required),
 * truncate: bool or null (null or absent: --truncate), truncation_direction:
 * "left" | "right", raw_scores: bool = false (false: sigmoid of the logit,
 * or softmax(l)[1] with two labels), return_text: bool = false. Checked in
 * TEI's order: an empty `texts` is 400 Empty, a server without a reranker
 * 424 Backend, more texts than --max-texts 413 Validation (TEI's
 * documented code; its 1.9 router answers that 422). The answer is a bare
 * array of {"index", "text"?, "score"} sorted as TEI sorts it: by score,
 * reversed, so equal scores come by index descending. */

typedef struct tei_rank {
    int index;
    float score;
} tei_rank;

static int tei_rank_cmp(const void *a, const void *b) {
    const tei_rank *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return (x->index < y->index) - (x->index > y->index);
}

void qac_handle_tei_rerank(qac_server *s, const char *body, size_t len, qac_http_response *r) {
    static const char *const dirs[] = {"right", "Right", "left", "Left", NULL};
    json_t *o = NULL;
    const char **texts = NULL;
    size_t *lens = NULL;
    float *raw = NULL, *prob = NULL;
    tei_rank *rk = NULL;
    qac_jw w = {0};
    if (!(o = tei_parse(body, len, r))) goto done;
    json_t *q = json_object_get(o, "query"), *t = json_object_get(o, "texts"), *dir = json_object_get(o, "truncation_direction");
    if (!q || !t) {
        qac_srv_error(r, QAC_REPLY_TEI, 422, "Validation",
                      "Failed to deserialize the JSON body into the target type: missing field `%s`", !q ? "query" : "texts");
        goto done;
    }
    if (!json_is_string(q)) {
        type_error(r, "query", "a string");
        goto done;
    }
    int n = json_is_array(t) ? (int)json_array_size(t) : -1;
    for (int i = 0; i < n; i++)
        if (!json_is_string(json_array_get(t, (size_t)i))) n = -1;
    if (n < 0) {
        type_error(r, "texts", "an array of strings");
        goto done;
    }
    int truncate = s->cfg.truncate, raw_scores = 0, return_text = 0, side = 0;
    if (dir && !json_is_null(dir)) {
        for (side = 0; dirs[side] && !(json_is_string(dir) && !strcmp(json_string_value(dir), dirs[side])); side++) {}
        if (!dirs[side]) {
            type_error(r, "truncation_direction", "one of `Left`, `Right`");
            goto done;
        }
    }
    if (!get_opt_bool(o, "truncate", &truncate, r) || !get_bool(o, "raw_scores", &raw_scores, r) ||
        !get_bool(o, "return_text", &return_text, r))
        goto done;
    if (n == 0) {
        qac_srv_error(r, QAC_REPLY_TEI, 400, "Empty", "`texts` cannot be empty");
        goto done;
    }
    if (!s->be.rerank_scores) {
        qac_srv_error(r, QAC_REPLY_TEI, 424, "Backend", "model is not a re-ranker model: start the server with "
                                                         "--reranker DIR");
        goto done;
    }
    if (n > s->cfg.max_texts) {
        qac_srv_error(r, QAC_REPLY_TEI, 413, "Validation", "batch size %d > maximum allowed batch size %d", n,
                      s->cfg.max_texts);
        goto done;
    }
    texts = malloc((size_t)n * sizeof *texts), lens = malloc((size_t)n * sizeof *lens);
    raw = malloc((size_t)n * sizeof *raw), prob = malloc((size_t)n * sizeof *prob), rk = malloc((size_t)n * sizeof *rk);
    if (!texts || !lens || !raw || !prob || !rk) {
        qac_srv_fail(r, QAC_REPLY_TEI, QAC_ERR_NOMEM, "out of memory");
        goto done;
    }
    /* [{"index":I,"text":T,"score":S},...], bounded before the work */
    size_t bound = 2;
    for (int i = 0; i < n; i++) {
        json_t *e = json_array_get(t, (size_t)i);
        texts[i] = json_string_value(e), lens[i] = json_string_length(e);
        bound += sizeof "{\"index\":,\"score\":}," - 1 + QAC_JW_INT_MAX + QAC_JW_REAL_MAX +
                 (return_text ? sizeof ",\"text\":" - 1 + qac_jw_str_size(texts[i], lens[i]) : 0);
    }
    if (!qac_srv_response_fits(s, bound, QAC_REPLY_TEI, "send fewer texts or drop return_text", r)) goto done;
    if (!qac_srv_rerank_scores(s, json_string_value(q), json_string_length(q), texts, lens, n, truncate,
                               side >= 2 ? QAC_TRUNC_LEFT : QAC_TRUNC_RIGHT, raw, prob, NULL, QAC_REPLY_TEI, r))
        goto done;
    for (int i = 0; i < n; i++) rk[i] = (tei_rank){i, raw_scores ? raw[i] : prob[i]};
    qsort(rk, (size_t)n, sizeof *rk, tei_rank_cmp);
    if (!qac_jw_open(&w, bound)) {
        qac_srv_fail(r, QAC_REPLY_TEI, QAC_ERR_NOMEM, "out of memory");
        goto done;
    }
    qac_jw_lit(&w, "[");
    for (int i = 0; i < n; i++) {
        qac_jw_lit(&w, i ? ",{\"index\":" : "{\"index\":");
        qac_jw_int(&w, rk[i].index);
        if (return_text) {
            qac_jw_lit(&w, ",\"text\":");
            qac_jw_str(&w, texts[rk[i].index], lens[rk[i].index]);
        }
        qac_jw_lit(&w, ",\"score\":");
        qac_jw_real(&w, rk[i].score);
        qac_jw_lit(&w, "}");
    }
    qac_jw_lit(&w, "]");
    qac_jw_reply(&w, r, QAC_REPLY_TEI);
done:
    qac_jw_free(&w);
    free(texts), free(lens), free(raw), free(prob), free(rk);
    json_decref(o);
}
