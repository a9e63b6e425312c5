/* Checkpoint I/O: safetensors reader/writer round trips, save/load round
 * trips, and a precise error (never a crash) for every kind of bad input. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qac_model.h"
#include "qac_safetensors.h"
#include "qac_util.h"
#include "testutil.h"

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static qac_bert_config tiny_cfg(void) {
    qac_bert_config c = {.vocab_size = 30522, .hidden_size = 8, .num_layers = 2, .num_heads = 2, .intermediate_size = 16, .max_position = 32, .type_vocab_size = 2, .pad_token_id = 0, .layer_norm_eps = 1e-12f, .hidden_dropout = 0.1f, .attn_dropout = 0.1f};
    return c;
}

static void write_bytes(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len) {
        perror(path);
        exit(1);
    }
    fclose(f);
}

static void write_str(const char *dir, const char *name, const char *text) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    write_bytes(p, text, strlen(text));
}

static char *slurp(const char *dir, const char *name, size_t *len) {
    char p[4096], *d;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (qac_read_file(p, &d, len) != QAC_OK) {
        fprintf(stderr, "%s\n", qac_last_error());
        exit(1);
    }
    return d;
}

/* A fresh copy of the tiny model directory. */
static const char *copy_dir(const char *src, const char *tag) {
    const char *dst = qac_test_tmpdir(tag);
    const char *files[] = {"config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json",
                           "special_tokens_map.json", "modules.json", "sentence_bert_config.json",
                           "1_Pooling/config.json"};
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/1_Pooling", dst);
    mkdir(sub, 0777);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        size_t len;
        char p[4096], *d;
        snprintf(p, sizeof p, "%s/%s", src, files[i]);
        if (qac_read_file(p, &d, &len) != QAC_OK) continue;
        snprintf(p, sizeof p, "%s/%s", dst, files[i]);
        write_bytes(p, d, len);
        free(d);
    }
    return dst;
}

/* Rewrite config.json with one key set to a JSON value (NULL deletes it). */
static void set_config(const char *dir, const char *key, const char *json_value) {
    size_t len;
    char *txt = slurp(dir, "config.json", &len);
    json_t *root = json_loads(txt, 0, NULL);
    free(txt);
    if (json_value) json_object_set_new(root, key, json_loads(json_value, JSON_DECODE_ANY, NULL));
    else json_object_del(root, key);
    char *out = json_dumps(root, JSON_INDENT(2));
    write_str(dir, "config.json", out);
    free(out);
    json_decref(root);
}

static void check_config_error(const char *good, const char *key, const char *value, qac_status code,
                               const char *needle) {
    const char *d = copy_dir(good, "cfg");
    set_config(d, key, value);
    qac_model *m = NULL;
    CHECK_ERR(qac_model_load(&m, d), code, needle);
    CHECK(m == NULL);
}

/* Rewrite model.safetensors: drop `drop`, or give `reshape` a wrong shape,
 * or store `retype` as I32. */
static void rewrite_weights(const char *dir, const char *drop, const char *reshape, const char *retype) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    size_t len;
    char *bytes = slurp(dir, "model.safetensors", &len);
    qac_safetensors *st;
    if (qac_safetensors_open_memory(&st, bytes, len, "orig") != QAC_OK) exit(1);
    int n = qac_safetensors_count(st), k = 0;
    qac_st_write_tensor *w = calloc((size_t)n, sizeof *w);
    for (int i = 0; i < n; i++) {
        const qac_st_tensor *t = qac_safetensors_get(st, i);
        if (drop && strcmp(t->name, drop) == 0) continue;
        w[k].name = t->name;
        w[k].dtype = t->dtype;
        w[k].ndim = t->ndim;
        memcpy(w[k].shape, t->shape, sizeof t->shape);
        w[k].raw = t->data;
        if (reshape && strcmp(t->name, reshape) == 0) {
            w[k].ndim = 2; /* same bytes, transposed-looking shape */
            w[k].shape[0] = t->shape[1];
            w[k].shape[1] = t->shape[0];
        }
        if (retype && strcmp(t->name, retype) == 0) w[k].dtype = QAC_ST_I32;
        k++;
    }
    CHECK_OK(qac_safetensors_write(path, w, k, NULL));
    free(w);
    qac_safetensors_close(st);
    free(bytes);
}

/* An in-memory safetensors file from a header string and data size. */
static unsigned char *make_st(const char *header, size_t data_len, size_t *len) {
    size_t h = strlen(header);
    *len = 8 + h + data_len;
    unsigned char *b = calloc(1, *len);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    return b;
}

static void check_st_error(const char *header, size_t data_len, const char *needle) {
    size_t len;
    unsigned char *b = make_st(header, data_len, &len);
    qac_safetensors *st = NULL;
    CHECK_ERR(qac_safetensors_open_memory(&st, b, len, "bad.safetensors"), QAC_ERR_FORMAT, needle);
    CHECK(st == NULL);
    free(b);
}

static void test_safetensors_format(void) {
    const char *dir = qac_test_tmpdir("st");
    char path[4096];
    snprintf(path, sizeof path, "%s/t.safetensors", dir);
    float a[6] = {1.5f, -2.25f, 3.0e-6f, 65504.0f, -0.0f, 7.0f};
    int32_t ids[3] = {1, -2, 3};
    qac_st_write_tensor w[4] = {
        {"a.f32", QAC_ST_F32, 2, {2, 3}, a, NULL},
        {"a.f16", QAC_ST_F16, 2, {2, 3}, a, NULL},
        {"a.bf16", QAC_ST_BF16, 1, {6}, a, NULL},
        {"ids", QAC_ST_I32, 1, {3}, NULL, ids},
    };
    const char *md[] = {"format", "pt", "note", "x\"y", NULL};
    CHECK_OK(qac_safetensors_write(path, w, 4, md));
    qac_safetensors *st;
    CHECK_OK(qac_safetensors_open(&st, path));
    if (!st) return;
    CHECK(qac_safetensors_count(st) == 4);
    CHECK(strcmp(qac_safetensors_metadata(st, "format"), "pt") == 0);
    CHECK(strcmp(qac_safetensors_metadata(st, "note"), "x\"y") == 0);
    CHECK(qac_safetensors_metadata(st, "nope") == NULL);
    CHECK(qac_safetensors_find(st, "missing") == NULL);
    float out[6];
    const qac_st_tensor *t = qac_safetensors_find(st, "a.f32");
    CHECK(t && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 && t->numel == 6);
    CHECK_OK(qac_safetensors_read_f32(t, out));
    CHECK(memcmp(out, a, sizeof a) == 0);
    t = qac_safetensors_find(st, "a.f16");
    CHECK_OK(qac_safetensors_read_f32(t, out));
    for (int i = 0; i < 6; i++) CHECK(out[i] == qac_f16_to_f32(qac_f32_to_f16(a[i])));
    t = qac_safetensors_find(st, "a.bf16");
    CHECK_OK(qac_safetensors_read_f32(t, out));
    for (int i = 0; i < 6; i++) CHECK(out[i] == qac_bf16_to_f32(qac_f32_to_bf16(a[i])));
    t = qac_safetensors_find(st, "ids");
    CHECK(t && t->dtype == QAC_ST_I32 && memcmp(t->data, ids, sizeof ids) == 0);
    CHECK_ERR(qac_safetensors_read_f32(t, out), QAC_ERR_UNSUPPORTED, "ids");
    /* HF pads the header to 8 bytes so the data stays aligned. */
    size_t len;
    char *bytes = slurp(dir, "t.safetensors", &len);
    uint64_t hl;
    memcpy(&hl, bytes, 8);
    CHECK(hl % 8 == 0);
    qac_safetensors_close(st);
    qac_safetensors_close(NULL);

    /* Truncated data and header length past EOF, from the real file. */
    qac_safetensors *bad = NULL;
    CHECK_ERR(qac_safetensors_open_memory(&bad, bytes, len - 4, "trunc"), QAC_ERR_FORMAT, "truncated");
    CHECK_ERR(qac_safetensors_open_memory(&bad, bytes, 5, "tiny"), QAC_ERR_FORMAT, "too short");
    uint64_t huge = (uint64_t)len;
    memcpy(bytes, &huge, 8);
    CHECK_ERR(qac_safetensors_open_memory(&bad, bytes, len, "past"), QAC_ERR_FORMAT, "runs past the end");
    free(bytes);
    snprintf(path, sizeof path, "%s/none.safetensors", dir);
    CHECK_ERR(qac_safetensors_open(&bad, path), QAC_ERR_NOT_FOUND, "none.safetensors");

    /* Writer argument checks. */
    qac_st_write_tensor dup[2] = {w[0], w[0]};
    snprintf(path, sizeof path, "%s/dup.safetensors", dir);
    CHECK_ERR(qac_safetensors_write(path, dup, 2, NULL), QAC_ERR_INVALID, "duplicate");
    CHECK(access(path, F_OK) != 0);

    /* Hand-made malformed headers. */
    check_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlap");
    check_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, "run past the data");
    check_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "does not match");
    check_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "end before");
    check_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "shape[0]");
    check_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "data_offsets");
    check_st_error("{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "dtype");
    check_st_error("{\"a\":[1,2,3]}", 8, "not a JSON object");
    check_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8, "corrupt JSON");
    check_st_error("{\"__metadata__\":{\"k\":1}}", 0, "not a string");
    check_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                   "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "duplicate");
    check_st_error("[1]", 0, "JSON object");
    check_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
                   "\"data_offsets\":[0,8]}}", 8, "does not match");
    /* Unknown dtypes are kept (never converted); empty tensors are fine. */
    size_t l2;
    unsigned char *ok = make_st("{\"x\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]},"
                                "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[2,2]}}", 2, &l2);
    CHECK_OK(qac_safetensors_open_memory(&st, ok, l2, "ok"));
    if (st) {
        const qac_st_tensor *x = qac_safetensors_find(st, "x");
        CHECK(x && x->dtype == QAC_ST_UNKNOWN && x->nbytes == 2);
        CHECK_ERR(qac_safetensors_read_f32(x, out), QAC_ERR_UNSUPPORTED, "F4");
        qac_safetensors_close(st);
    }
    free(ok);
}

static void test_half_conversions(void) {
    /* Every f16/bf16 pattern survives f16 -> f32 -> f16 bit-exactly (NaNs
     * become the canonical NaN, as in torch). */
    int bad16 = 0, badbf = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = qac_f16_to_f32((uint16_t)h);
        uint16_t back = qac_f32_to_f16(f);
        if (isnan(f) ? (back & 0x7fff) != 0x7e00 : back != h) bad16++;
        float g = qac_bf16_to_f32((uint16_t)h);
        uint16_t bb = qac_f32_to_bf16(g);
        if (isnan(g) ? bb != 0x7fc0 : bb != h) badbf++;
    }
    CHECK_MSG(bad16 == 0, "%d f16 patterns do not round-trip", bad16);
    CHECK_MSG(badbf == 0, "%d bf16 patterns do not round-trip", badbf);
    CHECK(qac_f32_to_f16(65520.0f) == 0x7c00);
    CHECK(qac_f32_to_f16(65519.0f) == 0x7bff);
}

static const char *make_tiny_model(void) {
    qac_bert_config c = tiny_cfg();
    qac_model *m = NULL;
    CHECK_OK(qac_model_create(&m, &c, qac_test_model_dir()));
    if (!m) exit(1);
    for (size_t i = 0; i < m->n_params; i++) m->param_mem[i] = frand();
    m->pooling = QAC_POOL_MEAN;
    m->normalize = 1;
    m->max_seq_len = 24;
    qac_model_update_fingerprint(m);
    const char *d = qac_test_tmpdir("tiny");
    static char dir[4096];
    snprintf(dir, sizeof dir, "%s", d);
    CHECK_OK(qac_model_save(m, dir));
    qac_model *back = NULL;
    CHECK_OK(qac_model_load(&back, dir));
    if (!back) exit(1);
    CHECK(back->n_params == m->n_params);
    CHECK(memcmp(back->param_mem, m->param_mem, m->n_params * sizeof(float)) == 0);
    CHECK(memcmp(&back->cfg, &m->cfg, sizeof c) == 0);
    CHECK(back->pooling == QAC_POOL_MEAN && back->normalize == 1 && back->max_seq_len == 24);
    CHECK_MSG(strcmp(back->fingerprint, m->fingerprint) == 0, "fingerprint %s != %s", back->fingerprint,
              m->fingerprint);
    CHECK(strlen(back->fingerprint) == 16);
    /* Any change to the weights changes the fingerprint. */
    char before[17];
    memcpy(before, back->fingerprint, 17);
    back->p.ln2_b[3] += 1.0f;
    qac_model_update_fingerprint(back);
    CHECK(strcmp(before, back->fingerprint) != 0);
    /* Saving onto the directory it came from works (no self-copy). */
    CHECK_OK(qac_model_save(back, dir));
    back->p.ln2_b[3] -= 1.0f;
    CHECK_OK(qac_model_save(back, dir));
    qac_model_free(back);
    qac_model_free(m);
    qac_model_free(NULL);
    return dir;
}

static void test_load_errors(const char *good) {
    qac_model *m = NULL;
    CHECK_ERR(qac_model_load(&m, "/nonexistent/qac-model"), QAC_ERR_NOT_FOUND, "/nonexistent/qac-model");
    char p[4096];
    snprintf(p, sizeof p, "%s/config.json", good);
    CHECK_ERR(qac_model_load(&m, p), QAC_ERR_INVALID, "not a directory");
    const char *empty = qac_test_tmpdir("empty");
    CHECK_ERR(qac_model_load(&m, empty), QAC_ERR_NOT_FOUND, "no config.json");

    /* pytorch_model.bin only: explain the conversion. */
    const char *bin = copy_dir(good, "bin");
    snprintf(p, sizeof p, "%s/model.safetensors", bin);
    unlink(p);
    write_str(bin, "pytorch_model.bin", "not really");
    CHECK_ERR(qac_model_load(&m, bin), QAC_ERR_UNSUPPORTED, "safe_serialization=True");
    unlink(p);
    snprintf(p, sizeof p, "%s/pytorch_model.bin", bin);
    unlink(p);
    CHECK_ERR(qac_model_load(&m, bin), QAC_ERR_NOT_FOUND, "no model.safetensors");

    /* Unsupported or malformed config values. */
    check_config_error(good, "hidden_act", "\"gelu_new\"", QAC_ERR_UNSUPPORTED, "hidden_act \"gelu_new\"");
    check_config_error(good, "position_embedding_type", "\"relative_key\"", QAC_ERR_UNSUPPORTED,
                       "position_embedding_type");
    /* an encoder family qac does not run: named, with the loadable ones and the closest */
    check_config_error(good, "model_type", "\"distilbert\"", QAC_ERR_UNSUPPORTED,
                       "model_type \"distilbert\" is not supported: qac loads model_type bert, roberta, xlm-roberta "
                       "and modernbert (the closest supported family is bert)");
    check_config_error(good, "model_type", "\"nomic_bert\"", QAC_ERR_UNSUPPORTED,
                       "closest supported family is modernbert");
    check_config_error(good, "model_type", "\"camembert\"", QAC_ERR_UNSUPPORTED, "closest supported family is roberta");
    check_config_error(good, "model_type", "\"xlm_roberta\"", QAC_ERR_UNSUPPORTED,
                       "closest supported family is xlm-roberta");
    check_config_error(good, "num_attention_heads", "3", QAC_ERR_UNSUPPORTED, "not a multiple");
    check_config_error(good, "is_decoder", "true", QAC_ERR_UNSUPPORTED, "is_decoder");
    check_config_error(good, "add_cross_attention", "true", QAC_ERR_UNSUPPORTED, "add_cross_attention");
    check_config_error(good, "vocab_size", "\"big\"", QAC_ERR_FORMAT, "vocab_size");
    check_config_error(good, "hidden_size", "0", QAC_ERR_UNSUPPORTED, "hidden_size");
    check_config_error(good, "num_hidden_layers", "8.5", QAC_ERR_FORMAT, "num_hidden_layers");
    check_config_error(good, "pad_token_id", "40000", QAC_ERR_UNSUPPORTED, "pad_token_id");
    check_config_error(good, "layer_norm_eps", "-1", QAC_ERR_UNSUPPORTED, "layer_norm_eps");
    /* Config that disagrees with the weights: the shape error names both. */
    check_config_error(good, "intermediate_size", "32", QAC_ERR_FORMAT,
                       "\"encoder.layer.0.intermediate.dense.weight\" has shape [16, 8], expected [32, 8]");
    check_config_error(good, "num_hidden_layers", "3", QAC_ERR_NOT_FOUND,
                       "missing tensor \"encoder.layer.2.attention.self.query.weight\"");
    /* A vocabulary smaller than the tokenizer would index out of range. */
    {
        const char *d = copy_dir(good, "vocab");
        set_config(d, "vocab_size", "1000");
        CHECK(qac_model_load(&m, d) != QAC_OK);
    }
    {
        const char *d = copy_dir(good, "json");
        write_str(d, "config.json", "{\"model_type\": \"bert\",");
        CHECK_ERR(qac_model_load(&m, d), QAC_ERR_FORMAT, "config.json: invalid JSON");
    }

    /* Weights: missing, mis-shaped, wrong dtype, truncated. */
    const char *d = copy_dir(good, "w1");
    rewrite_weights(d, "encoder.layer.1.output.dense.bias", NULL, NULL);
    CHECK_ERR(qac_model_load(&m, d), QAC_ERR_NOT_FOUND, "missing tensor \"encoder.layer.1.output.dense.bias\"");
    d = copy_dir(good, "w2");
    rewrite_weights(d, NULL, "encoder.layer.0.intermediate.dense.weight", NULL);
    CHECK_ERR(qac_model_load(&m, d), QAC_ERR_FORMAT, "has shape [8, 16], expected [16, 8]");
    d = copy_dir(good, "w3");
    rewrite_weights(d, NULL, NULL, "embeddings.LayerNorm.weight");
    CHECK_ERR(qac_model_load(&m, d), QAC_ERR_UNSUPPORTED, "\"embeddings.LayerNorm.weight\" has dtype I32");
    d = copy_dir(good, "w4");
    rewrite_weights(d, "embeddings.word_embeddings.weight", NULL, NULL);
    CHECK_ERR(qac_model_load(&m, d), QAC_ERR_NOT_FOUND, "embeddings.word_embeddings.weight");
    d = copy_dir(good, "w5");
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    struct stat sb;
    stat(p, &sb);
    CHECK(truncate(p, sb.st_size - 100) == 0);
    CHECK_ERR(qac_model_load(&m, d), QAC_ERR_FORMAT, "truncated");
    /* Pooler absent: loads, pooler zeroed. */
    d = copy_dir(good, "w6");
    rewrite_weights(d, "pooler.dense.weight", NULL, NULL);
    CHECK_OK(qac_model_load(&m, d));
    if (m) {
        float mx = 0;
        for (int i = 0; i < m->cfg.hidden_size * m->cfg.hidden_size; i++) mx = fmaxf(mx, fabsf(m->p.pooler_w[i]));
        CHECK(mx == 0.0f);
        qac_model_free(m);
        m = NULL;
    }

    /* sentence-transformers extras. */
    d = copy_dir(good, "st1");
    write_str(d, "1_Pooling/config.json", "{\"word_embedding_dimension\": 8, \"pooling_mode_max_tokens\": true}");
    CHECK_ERR(qac_model_load(&m, d), QAC_ERR_UNSUPPORTED, "pooling mode max is not supported");
    write_str(d, "1_Pooling/config.json", "{\"embedding_dimension\": 8, \"pooling_mode\": \"mean_sqrt_len_tokens\"}");
    CHECK_ERR(qac_model_load(&m, d), QAC_ERR_UNSUPPORTED, "mean_sqrt_len_tokens");
    write_str(d, "1_Pooling/config.json", "{\"embedding_dimension\": 8, \"pooling_mode\": [\"cls\", \"mean\"]}");
    CHECK_ERR(qac_model_load(&m, d), QAC_ERR_UNSUPPORTED, "cls+mean");
    write_str(d, "1_Pooling/config.json", "{\"embedding_dimension\": 16, \"pooling_mode\": \"cls\"}");
    CHECK_ERR(qac_model_load(&m, d), QAC_ERR_FORMAT, "hidden_size 8");
    write_str(d, "1_Pooling/config.json", "{\"embedding_dimension\": 8, \"pooling_mode\": \"cls\"}");
    write_str(d, "sentence_bert_config.json", "{\"max_seq_length\": 4096}");
    CHECK_OK(qac_model_load(&m, d));
    if (m) {
        CHECK(m->pooling == QAC_POOL_CLS && m->normalize == 1 && m->max_seq_len == 32);
        qac_model_free(m);
        m = NULL;
    }
    write_str(d, "modules.json",
              "[{\"idx\":0,\"name\":\"0\",\"path\":\"\",\"type\":\"sentence_transformers.models.Transformer\"},"
              "{\"idx\":1,\"name\":\"1\",\"path\":\"1_Pooling\",\"type\":\"sentence_transformers.models.Pooling\"},"
              "{\"idx\":2,\"name\":\"2\",\"path\":\"2_Dense\",\"type\":\"sentence_transformers.models.Dense\"}]");
    CHECK_ERR(qac_model_load(&m, d), QAC_ERR_UNSUPPORTED, "sentence_transformers.models.Dense");
    write_str(d, "modules.json", "{\"not\": \"a list\"}");
    CHECK_ERR(qac_model_load(&m, d), QAC_ERR_FORMAT, "modules.json");
    /* No sentence-transformers files: CLS, no normalisation, max_position. */
    snprintf(p, sizeof p, "%s/modules.json", d);
    unlink(p);
    snprintf(p, sizeof p, "%s/sentence_bert_config.json", d);
    unlink(p);
    CHECK_OK(qac_model_load(&m, d));
    if (m) {
        CHECK(m->pooling == QAC_POOL_CLS && m->normalize == 0 && m->max_seq_len == 32);
        qac_model_free(m);
    }
}

static void test_create_errors(void) {
    qac_bert_config c = tiny_cfg();
    c.num_heads = 3;
    qac_model *m = NULL;
    CHECK_ERR(qac_model_create(&m, &c, NULL), QAC_ERR_UNSUPPORTED, "num_attention_heads 3");
    c = tiny_cfg();
    c.vocab_size = 100;
    CHECK_ERR(qac_model_create(&m, &c, qac_test_model_dir()), QAC_ERR_FORMAT, "vocab_size is 100");
    c = tiny_cfg();
    CHECK_OK(qac_model_create(&m, &c, NULL));
    if (m) {
        CHECK(m->tok == NULL && m->n_params == qac_bert_param_count(&c));
        size_t sum = 0;
        for (int i = 0; i < QAC_BERT_NUM_TENSORS; i++) sum += qac_bert_tensor_size(&c, i);
        CHECK(sum == m->n_params);
        CHECK(m->p.pooler_b + c.hidden_size == m->param_mem + m->n_params);
        CHECK(strcmp(qac_bert_tensor_name(5), "qkv_w") == 0 && qac_bert_tensor_name(QAC_BERT_NUM_TENSORS) == NULL);
        CHECK_ERR(qac_model_save_as(m, qac_test_tmpdir("x"), QAC_ST_I32), QAC_ERR_INVALID, "F32, F16 or BF16");
        qac_model_free(m);
    }
}

int main(void) {
    test_safetensors_format();
    test_half_conversions();
    test_create_errors();
    const char *good = make_tiny_model();
    test_load_errors(good);
    return qac_test_summary();
}
