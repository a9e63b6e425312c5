/* HF checkpoints of every family: model.safetensors by the family's tensor
 * names (family.c has the tables and config.json), the
 * sentence-transformers extras, load and save. */
#include "qac_model.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bert_cpu.h"
#include "model_internal.h"
#include "model_json.h"
#include "qac_safetensors.h"
#include "qac_util.h"

const char *qac_pooling_name(qac_pooling p) { return p == QAC_POOL_MEAN ? "mean" : "cls"; }


static void compute_fingerprint(qac_model *m, const char *config_bytes, size_t config_len) {
    qac_xxh64 s;
    qac_xxh64_init(&s);
    qac_xxh64_update(&s, config_bytes, config_len);
    char extra[96];
    int n = snprintf(extra, sizeof extra, "\npooling=%s normalize=%d max_seq_len=%d%s\n",
                     qac_pooling_name(m->pooling), m->normalize ? 1 : 0, m->max_seq_len,
                     m->include_prompt ? "" : " include_prompt=0");
    qac_xxh64_update(&s, extra, (size_t)n);
    qac_xxh64_update(&s, m->param_mem, m->n_params * sizeof(float));
    snprintf(m->fingerprint, sizeof m->fingerprint, "%016llx", (unsigned long long)qac_xxh64_digest(&s));
}

/* ---- config.json: family.c ---- */

/* ---- sentence-transformers extras ---- */

qac_status qac_pooling_config_parse(const char *json, size_t len, int hidden_size, qac_pooling *out,
                                    int *include_prompt) {
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return qac_set_error(QAC_ERR_FORMAT, "invalid JSON at line %d column %d: %s", jerr.line, jerr.column,
                             jerr.text);
    qac_status s = QAC_OK;
    if (!json_is_object(root)) {
        s = qac_set_error(QAC_ERR_FORMAT, "not a JSON object");
        goto done;
    }
    const char *dimkeys[] = {"embedding_dimension", "word_embedding_dimension"};
    for (int i = 0; i < 2; i++) {
        json_t *d = json_object_get(root, dimkeys[i]);
        if (d && (!json_is_integer(d) || json_integer_value(d) != hidden_size)) {
            s = qac_set_error(QAC_ERR_FORMAT, "\"%s\" does not match the model's hidden_size %d", dimkeys[i],
                              hidden_size);
            goto done;
        }
    }
    /* Modes in sentence-transformers' order; legacy configs use booleans. */
    static const char *const modes[] = {"cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken"};
    static const char *const legacy[] = {"pooling_mode_cls_token", "pooling_mode_max_tokens",
                                         "pooling_mode_mean_tokens", "pooling_mode_mean_sqrt_len_tokens",
                                         "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"};
    int active[6] = {0}, n_active = 0;
    json_t *pm = json_object_get(root, "pooling_mode");
    if (pm) {
        json_t *list = json_is_string(pm) ? json_pack("[O]", pm) : json_incref(pm);
        if (!json_is_array(list) || json_array_size(list) == 0) {
            json_decref(list);
            s = qac_set_error(QAC_ERR_FORMAT, "\"pooling_mode\" must be a mode name or a list of them");
            goto done;
        }
        for (size_t i = 0; i < json_array_size(list); i++) {
            const char *name = json_string_value(json_array_get(list, i));
            int k = -1;
            for (int j = 0; name && j < 6; j++)
                if (strcmp(name, modes[j]) == 0) k = j;
            if (k < 0) {
                json_decref(list);
                s = qac_set_error(QAC_ERR_FORMAT, "unknown pooling_mode entry %zu", i);
                goto done;
            }
            active[k] = 1;
        }
        json_decref(list);
    } else {
        for (int j = 0; j < 6; j++) {
            json_t *b = json_object_get(root, legacy[j]);
            if (b && !json_is_boolean(b)) {
                s = qac_set_error(QAC_ERR_FORMAT, "\"%s\" must be true or false", legacy[j]);
                goto done;
            }
            active[j] = json_is_true(b);
        }
        int any = 0;
        for (int j = 0; j < 6; j++) any |= active[j];
        if (!any) active[2] = 1; /* sentence-transformers' default: mean */
    }
    for (int j = 0; j < 6; j++) n_active += active[j];
    if (n_active != 1 || !(active[0] || active[2])) {
        char list[128] = "";
        size_t k = 0;
        for (int j = 0; j < 6; j++)
            if (active[j]) k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", k ? "+" : "", modes[j]);
        s = qac_set_error(QAC_ERR_UNSUPPORTED, "pooling mode %s is not supported (qac supports cls or mean)",
                          list);
        goto done;
    }
    json_t *ip = json_object_get(root, "include_prompt");
    if (ip && !json_is_boolean(ip)) {
        s = qac_set_error(QAC_ERR_FORMAT, "\"include_prompt\" must be true or false");
        goto done;
    }
    *out = active[0] ? QAC_POOL_CLS : QAC_POOL_MEAN;
    if (include_prompt) *include_prompt = !json_is_false(ip);
done:
    json_decref(root);
    return s;
}

/* Read a small JSON file in dir; *root NULL (and QAC_OK) when absent. */
static qac_status load_json_file(const char *dir, const char *name, json_t **root) {
    char path[4096];
    *root = NULL;
    qac_status s = qac_path_join(path, sizeof path, dir, name);
    return s ? s : qac_model_json_read(path, root);
}

static int type_is(const char *type, const char *cls) {
    size_t n = strlen(type), k = strlen(cls);
    return n > k && type[n - k - 1] == '.' && strcmp(type + n - k, cls) == 0 &&
           strncmp(type, "sentence_transformers.", 22) == 0;
}

static qac_status load_st_extras(qac_model *m, const char *dir, int flags) {
    m->pooling = QAC_POOL_CLS;
    m->normalize = 0;
    m->include_prompt = 1;
    m->max_seq_len = qac_bert_max_tokens(&m->cfg);
    json_t *mods = NULL, *sb = NULL, *tc = NULL;
    /* a cross-encoder's modules.json has no Pooling: its pooler is the head's */
    qac_status s = flags & QAC_LOAD_CROSS_ENCODER ? QAC_OK : load_json_file(dir, "modules.json", &mods);
    if (s) return s;
    if (mods) {
        if (!json_is_array(mods)) {
            s = qac_set_error(QAC_ERR_FORMAT, "%s/modules.json: not a JSON list", dir);
            goto done;
        }
        int have_pool = 0;
        for (size_t i = 0; i < json_array_size(mods); i++) {
            json_t *e = json_array_get(mods, i);
            const char *type = json_string_value(json_object_get(e, "type"));
            const char *path = json_string_value(json_object_get(e, "path"));
            if (!type || !path) {
                s = qac_set_error(QAC_ERR_FORMAT, "%s/modules.json: entry %zu lacks string \"type\" and \"path\"",
                                  dir, i);
                goto done;
            }
            if (type_is(type, "Transformer")) {
                if (*path && strcmp(path, ".") != 0 && strcmp(path, "./") != 0) {
                    s = qac_set_error(QAC_ERR_UNSUPPORTED,
                                      "%s/modules.json: the Transformer lives in \"%s\"; qac expects it at the "
                                      "top of the directory", dir, path);
                    goto done;
                }
            } else if (type_is(type, "Pooling")) {
                if (have_pool++ || strstr(path, "..") || path[0] == '/') {
                    s = qac_set_error(QAC_ERR_UNSUPPORTED, "%s/modules.json: unsupported Pooling entry \"%s\"",
                                      dir, path);
                    goto done;
                }
                char pdir[4096], sub[4096], *txt;
                size_t len;
                if ((s = qac_path_join(pdir, sizeof pdir, dir, path)) ||
                    (s = qac_path_join(sub, sizeof sub, pdir, "config.json")) ||
                    (s = qac_read_file(sub, &txt, &len)))
                    goto done;
                s = qac_pooling_config_parse(txt, len, m->cfg.hidden_size, &m->pooling, &m->include_prompt);
                free(txt);
                if (s) {
                    s = qac_wrap_error(s, "%s", sub);
                    goto done;
                }
            } else if (type_is(type, "Normalize")) {
                m->normalize = 1;
            } else {
                s = qac_set_error(QAC_ERR_UNSUPPORTED,
                                  "%s/modules.json: module %s is not supported (qac runs Transformer, Pooling "
                                  "and Normalize only)", dir, type);
                goto done;
            }
        }
        if (!have_pool) {
            s = qac_set_error(QAC_ERR_UNSUPPORTED,
                              "%s/modules.json: no Pooling module (a cross-encoder's directory? those rerank: "
                              "qac rerank --model, qac serve --reranker)", dir);
            goto done;
        }
    }
    if ((s = load_json_file(dir, "sentence_bert_config.json", &sb))) goto done;
    if (sb) {
        json_t *msl = json_object_get(sb, "max_seq_length");
        if (msl && !json_is_null(msl)) {
            if (!json_is_integer(msl) || json_integer_value(msl) < 2) {
                s = qac_set_error(QAC_ERR_FORMAT, "%s/sentence_bert_config.json: max_seq_length must be an "
                                  "integer >= 2", dir);
                goto done;
            }
            if (json_integer_value(msl) < qac_bert_max_tokens(&m->cfg)) m->max_seq_len = (int)json_integer_value(msl);
        }
    }
    /* No max_seq_length (sentence-transformers 5 and later keep it in the
     * tokenizer's model_max_length): the tokenizer's limit, as
     * sentence-transformers takes min(max_position_embeddings, it). */
    if (!sb || !json_integer_value(json_object_get(sb, "max_seq_length"))) {
        if ((s = load_json_file(dir, "tokenizer_config.json", &tc))) goto done;
        json_t *mml = tc ? json_object_get(tc, "model_max_length") : NULL;
        if (json_is_integer(mml) && json_integer_value(mml) >= 2 &&
            json_integer_value(mml) < qac_bert_max_tokens(&m->cfg))
            m->max_seq_len = (int)json_integer_value(mml);
    }
    s = qac_model_prompts_load(m, dir);
done:
    json_decref(mods);
    json_decref(sb);
    json_decref(tc);
    return s;
}

/* ---- weights ---- */

typedef qac_hf_tensor hf_tensor;

static int is_layered(const hf_tensor *h) { return strstr(h->suffix, "%d") != NULL; }

/* Where view `h` of layer l starts in the flat array. */
static float *dest_of(const qac_model *m, const hf_tensor *h, int l) {
    float *base = *qac_bert_view_slot((qac_bert_params *)&m->p, h->view);
    size_t per_layer = is_layered(h) ? qac_bert_tensor_size(&m->cfg, h->view) / (size_t)m->cfg.num_layers
                                     : qac_bert_tensor_size(&m->cfg, h->view);
    size_t part = per_layer / (size_t)h->nparts;
    return base + (size_t)l * per_layer + (size_t)h->part * part;
}

static void format_shape(char *buf, size_t cap, const int64_t *shape, int nd) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < nd && k < cap - 24; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    snprintf(buf + k, cap - k, "]");
}

/* LayerNorm weights converted from TF checkpoints may still be gamma/beta. */
static const qac_st_tensor *find_tensor(const qac_safetensors *st, const char *name) {
    const qac_st_tensor *t = qac_safetensors_find(st, name);
    if (t || !strstr(name, "LayerNorm.")) return t;
    char alt[512];
    size_t n = strlen(name);
    if (n > 7 && strcmp(name + n - 7, ".weight") == 0 && n < sizeof alt)
        snprintf(alt, sizeof alt, "%.*s.gamma", (int)(n - 7), name);
    else if (n > 5 && strcmp(name + n - 5, ".bias") == 0 && n < sizeof alt)
        snprintf(alt, sizeof alt, "%.*s.beta", (int)(n - 5), name);
    else return NULL;
    return qac_safetensors_find(st, alt);
}

static qac_status load_weights(qac_model *m, const char *path) {
    qac_safetensors *st;
    qac_status s = qac_safetensors_open(&st, path);
    if (s) return s;
    /* The encoder's prefix: none (BertModel, XLMRobertaModel, ...), the
     * family's task-head prefix ("bert.", "roberta.", "model.") or any other
     * wrapper, found from the word embeddings. */
    const char *anchor = qac_hf_anchor(&m->cfg), *head = qac_hf_prefix(&m->cfg);
    char prefix[256] = "";
    if (!qac_safetensors_find(st, anchor)) {
        const qac_st_tensor *hit = NULL;
        char headed[512];
        snprintf(headed, sizeof headed, "%s%s", head, anchor);
        if ((hit = qac_safetensors_find(st, headed))) snprintf(prefix, sizeof prefix, "%s", head);
        else
            for (int i = 0; i < qac_safetensors_count(st) && !hit; i++) {
                const qac_st_tensor *t = qac_safetensors_get(st, i);
                size_t n = strlen(t->name), k = strlen(anchor);
                if (n > k && n - k < sizeof prefix && strcmp(t->name + n - k, anchor) == 0 &&
                    t->name[n - k - 1] == '.') {
                    hit = t;
                    snprintf(prefix, sizeof prefix, "%.*s", (int)(n - k), t->name);
                }
            }
        if (!hit) {
            s = qac_set_error(QAC_ERR_NOT_FOUND, "%s: missing tensor \"%s\" (also looked for \"%s\"; config.json "
                              "says model_type %s)", path, anchor, headed, qac_family_name(m->cfg.family));
            goto done;
        }
    }
    hf_tensor tab[32];
    int nt = qac_hf_tensor_table(&m->cfg, tab);
    for (int i = 0; i < nt; i++) {
        const hf_tensor *h = &tab[i];
        int layers = is_layered(h) ? m->cfg.num_layers : 1;
        for (int l = h->first_layer; l < layers; l++) {
            char name[512], full[768];
            snprintf(name, sizeof name, h->suffix, l);
            snprintf(full, sizeof full, "%s%s", prefix, name);
            const qac_st_tensor *t = find_tensor(st, full);
            if (!t) {
                if (h->optional) continue; /* pooler: stays zero */
                s = qac_set_error(QAC_ERR_NOT_FOUND, "%s: missing tensor \"%s\"", path, full);
                goto done;
            }
            int64_t want[2] = {h->rows, h->cols};
            int wnd = h->cols ? 2 : 1;
            if (t->ndim != wnd || t->shape[0] != want[0] || (wnd == 2 && t->shape[1] != want[1])) {
                char a[64], b[64];
                format_shape(a, sizeof a, want, wnd);
                format_shape(b, sizeof b, t->shape, t->ndim);
                s = qac_set_error(QAC_ERR_FORMAT, "%s: tensor \"%s\" has shape %s, expected %s (from config.json)",
                                  path, full, b, a);
                goto done;
            }
            if (t->dtype != QAC_ST_F32 && t->dtype != QAC_ST_F16 && t->dtype != QAC_ST_BF16 &&
                t->dtype != QAC_ST_F64) {
                s = qac_set_error(QAC_ERR_UNSUPPORTED, "%s: tensor \"%s\" has dtype %s; expected F32, F16 or BF16",
                                  path, full, t->dtype_name);
                goto done;
            }
            if ((s = qac_safetensors_read_f32(t, dest_of(m, h, l)))) goto done;
            qac_safetensors_release(st, t);
        }
    }
done:
    qac_safetensors_close(st);
    return s;
}

/* ---- load / create / free ---- */

static qac_status alloc_params(qac_model *m) {
    m->n_params = qac_bert_param_count(&m->cfg);
    m->param_mem = calloc(m->n_params, sizeof(float));
    if (!m->param_mem)
        return qac_set_error(QAC_ERR_NOMEM, "cannot allocate %zu parameters (%.1f MB)", m->n_params,
                             (double)m->n_params * 4 / 1e6);
    qac_bert_params_bind(&m->p, &m->cfg, m->param_mem);
    return QAC_OK;
}

/* A short name for /info and index manifests: the directory's base name;
 * a training checkpoint's run and checkpoint ("run/checkpoint-6"); a
 * Hugging Face cache snapshot's repository ("org/name", not the hash). */
static void set_name(qac_model *m, const char *dir) {
    char real[PATH_MAX];
    const char *p = realpath(dir, real) ? real : dir;
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && p[b - 1] != '/') b--;
    size_t pe = b ? b - 1 : 0, pb = pe; /* the parent's base name: [pb, pe) */
    while (pb > 0 && p[pb - 1] != '/') pb--;
    size_t gb = pb ? pb - 1 : 0, gbb = gb; /* the grandparent's: [gbb, gb) */
    while (gbb > 0 && p[gbb - 1] != '/') gbb--;
    if (n - b == 0 || (n - b == 1 && p[b] == '.')) {
        snprintf(m->name, sizeof m->name, "%s", "model");
    } else if (pe > pb && pe - pb == 9 && !strncmp(p + pb, "snapshots", 9) && gb - gbb > 8 &&
               !strncmp(p + gbb, "models--", 8)) {
        /* .../models--ORG--NAME/snapshots/HASH */
        const char *repo = p + gbb + 8, *sep = strstr(repo, "--");
        if (sep && sep < p + gb)
            snprintf(m->name, sizeof m->name, "%.*s/%.*s", (int)(sep - repo), repo, (int)(p + gb - sep - 2), sep + 2);
        else
            snprintf(m->name, sizeof m->name, "%.*s", (int)(p + gb - repo), repo);
    } else if (n - b > 11 && !strncmp(p + b, "checkpoint-", 11) && pe > pb) {
        snprintf(m->name, sizeof m->name, "%.*s/%.*s", (int)(pe - pb), p + pb, (int)(n - b), p + b);
    } else {
        snprintf(m->name, sizeof m->name, "%.*s", (int)(n - b), p + b);
    }
}

static int file_exists(const char *dir, const char *name) {
    char p[4096];
    struct stat sb;
    return qac_path_join(p, sizeof p, dir, name) == QAC_OK && stat(p, &sb) == 0;
}

static qac_status check_tokenizer(qac_model *m) {
    int tv = qac_tokenizer_vocab_size(m->tok);
    if (tv > m->cfg.vocab_size)
        return qac_set_error(QAC_ERR_FORMAT, "%s: the tokenizer has %d tokens but config.json vocab_size is %d",
                             m->dir, tv, m->cfg.vocab_size);
    return QAC_OK;
}

qac_status qac_model_load(qac_model **out, const char *dir) { return qac_model_load_flags(out, dir, 0); }

qac_status qac_model_load_untokenized(qac_model **out, const char *dir) {
    return qac_model_load_flags(out, dir, QAC_LOAD_NO_TOKENIZER);
}

qac_status qac_model_load_flags(qac_model **out, const char *dir, int flags) {
    const int with_tokenizer = !(flags & QAC_LOAD_NO_TOKENIZER);
    *out = NULL;
    struct stat sb;
    if (!dir || stat(dir, &sb) != 0)
        return qac_set_error(QAC_ERR_NOT_FOUND, "model directory %s: %s", dir ? dir : "(null)",
                             dir ? strerror(errno) : "not given");
    if (!S_ISDIR(sb.st_mode))
        return qac_set_error(QAC_ERR_INVALID, "%s is not a directory (pass the model directory)", dir);
    char path[4096], *cfg_txt = NULL;
    size_t cfg_len = 0;
    qac_status s = qac_path_join(path, sizeof path, dir, "config.json");
    if (s) return s;
    if ((s = qac_read_file(path, &cfg_txt, &cfg_len))) {
        if (s == QAC_ERR_NOT_FOUND)
            return qac_set_error(QAC_ERR_NOT_FOUND, "%s: no config.json (not a Hugging Face model directory)", dir);
        return s;
    }
    qac_model *m = calloc(1, sizeof *m);
    if (!m || !(m->dir = strdup(dir))) {
        free(m);
        free(cfg_txt);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    set_name(m, dir);
    if ((s = qac_bert_config_parse(&m->cfg, cfg_txt, cfg_len))) {
        s = qac_wrap_error(s, "%s", path);
        goto fail;
    }
    if ((s = load_st_extras(m, dir, flags))) goto fail;
    if ((s = qac_path_join(path, sizeof path, dir, "model.safetensors"))) goto fail;
    if (stat(path, &sb) != 0) {
        if (file_exists(dir, "model.safetensors.index.json"))
            s = qac_set_error(QAC_ERR_UNSUPPORTED,
                              "%s: sharded safetensors (model.safetensors.index.json) are not supported; merge "
                              "them with: python3 -c \"from transformers import AutoModel; "
                              "AutoModel.from_pretrained('%s').save_pretrained('%s', max_shard_size='100GB')\"",
                              dir, dir, dir);
        else if (file_exists(dir, "pytorch_model.bin"))
            s = qac_set_error(QAC_ERR_UNSUPPORTED,
                              "%s has pytorch_model.bin but no model.safetensors; qac reads only safetensors. "
                              "Convert it with: python3 -c \"from transformers import AutoModel; "
                              "AutoModel.from_pretrained('%s').save_pretrained('%s', safe_serialization=True)\"",
                              dir, dir, dir);
        else s = qac_set_error(QAC_ERR_NOT_FOUND, "%s: no model.safetensors", dir);
        goto fail;
    }
    if ((s = alloc_params(m)) || (s = load_weights(m, path))) goto fail;
    if (with_tokenizer && (s = qac_tokenizer_load(&m->tok, dir))) {
        s = qac_wrap_error(s, "%s: tokenizer", dir);
        goto fail;
    }
    if (with_tokenizer && (s = check_tokenizer(m))) goto fail;
    compute_fingerprint(m, cfg_txt, cfg_len);
    free(cfg_txt);
    *out = m;
    return QAC_OK;
fail:
    free(cfg_txt);
    qac_model_free(m);
    return s;
}

void qac_model_update_fingerprint(qac_model *m) {
    char *txt = NULL;
    if (qac_bert_config_to_json(&m->cfg, &txt) != QAC_OK) {
        snprintf(m->fingerprint, sizeof m->fingerprint, "%s", "0000000000000000");
        return;
    }
    compute_fingerprint(m, txt, strlen(txt));
    free(txt);
}

qac_status qac_model_create(qac_model **out, const qac_bert_config *cfg, const char *tok_dir) {
    *out = NULL;
    qac_status s = qac_bert_config_validate(cfg);
    if (s) return s;
    qac_model *m = calloc(1, sizeof *m);
    if (!m) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    m->cfg = *cfg;
    m->pooling = QAC_POOL_CLS;
    m->include_prompt = 1;
    m->max_seq_len = qac_bert_max_tokens(cfg);
    snprintf(m->name, sizeof m->name, "%s", qac_family_name(cfg->family));
    if (tok_dir && !(m->dir = strdup(tok_dir))) {
        free(m);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    if ((s = alloc_params(m))) goto fail;
    if (tok_dir) {
        if ((s = qac_tokenizer_load(&m->tok, tok_dir))) {
            s = qac_wrap_error(s, "%s: tokenizer", tok_dir);
            goto fail;
        }
        if ((s = check_tokenizer(m))) goto fail;
    }
    qac_model_update_fingerprint(m);
    *out = m;
    return QAC_OK;
fail:
    qac_model_free(m);
    return s;
}

void qac_model_free(qac_model *m) {
    if (!m) return;
    free(m->param_mem);
    qac_tokenizer_free(m->tok);
    free(m->dir);
    qac_model_prompts_clear(m);
    free(m);
}

/* ---- save ---- */

static qac_status write_text(const char *dir, const char *name, const char *text) {
    char path[4096];
    qac_atomic_file af;
    qac_status s = qac_path_join(path, sizeof path, dir, name);
    if (s || (s = qac_atomic_open(&af, path))) return s;
    size_t n = strlen(text);
    if (fwrite(text, 1, n, af.f) != n) {
        s = qac_set_error(QAC_ERR_IO, "write %s: %s", path, strerror(errno));
        qac_atomic_abort(&af);
        return s;
    }
    return qac_atomic_commit(&af);
}

static qac_status write_json(const char *dir, const char *name, json_t *j) {
    char *t2;
    qac_status s = qac_model_json_text(j, 0, &t2);
    if (s) return s;
    s = write_text(dir, name, t2);
    free(t2);
    return s;
}

static qac_status copy_file(const char *src_dir, const char *dst_dir, const char *name) {
    char src[4096], dst[4096];
    qac_status s;
    if ((s = qac_path_join(src, sizeof src, src_dir, name)) || (s = qac_path_join(dst, sizeof dst, dst_dir, name)))
        return s;
    FILE *in = fopen(src, "rb");
    if (!in) {
        if (errno == ENOENT) return QAC_OK;
        return qac_set_error(QAC_ERR_IO, "open %s: %s", src, strerror(errno));
    }
    qac_atomic_file af;
    if ((s = qac_atomic_open(&af, dst))) {
        fclose(in);
        return s;
    }
    char buf[1 << 16];
    size_t n;
    int ok = 1;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, n, af.f) == n;
    if (ferror(in)) ok = 0;
    fclose(in);
    if (!ok) {
        s = qac_set_error(QAC_ERR_IO, "copy %s -> %s failed", src, dst);
        qac_atomic_abort(&af);
        return s;
    }
    return qac_atomic_commit(&af);
}

static int same_dir(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

static qac_status copy_tokenizer_files(const char *src, const char *dst) {
    static const char *const names[] = {"vocab.txt", "tokenizer_config.json", "special_tokens_map.json",
                                        "tokenizer.json", "added_tokens.json", "vocab.json", "merges.txt"};
    qac_status s;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((s = copy_file(src, dst, names[i]))) return s;
    DIR *d = opendir(src);
    if (!d) return qac_set_error(QAC_ERR_IO, "opendir %s: %s", src, strerror(errno));
    struct dirent *e;
    s = QAC_OK;
    while (!s && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n > 6 && strcmp(e->d_name + n - 6, ".model") == 0) s = copy_file(src, dst, e->d_name);
    }
    closedir(d);
    return s;
}

static qac_status write_weights(const qac_model *m, const char *path, qac_st_dtype dt, const qac_save_spec *spec) {
    hf_tensor tab[32];
    int nt = qac_hf_tensor_table(&m->cfg, tab), L = m->cfg.num_layers, n = 0;
    int total = spec->n_extra;
    const char *prefix = spec->prefix ? spec->prefix : "";
    for (int i = 0; i < nt; i++) total += is_layered(&tab[i]) ? L - tab[i].first_layer : 1;
    qac_st_write_tensor *w = calloc((size_t)total, sizeof *w);
    char *names = calloc((size_t)total, 160);
    if (!w || !names) {
        free(w);
        free(names);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    /* HF's order: embeddings, then each layer whole, then the final norm
     * and the pooler. */
    for (int pass = 0; pass < 3; pass++) {
        for (int l = 0; l < (pass == 1 ? L : 1); l++)
            for (int i = 0; i < nt; i++) {
                const hf_tensor *h = &tab[i];
                int want_pass = is_layered(h) ? 1 : (h->view >= QAC_BERT_LAYER_END ? 2 : 0);
                if (want_pass != pass || (pass == 1 && l < h->first_layer)) continue;
                char *nm = names + 160 * (size_t)n, suffix[128];
                snprintf(suffix, sizeof suffix, h->suffix, l);
                snprintf(nm, 160, "%s%s", prefix, suffix);
                w[n].name = nm;
                w[n].dtype = dt;
                w[n].ndim = h->cols ? 2 : 1;
                w[n].shape[0] = h->rows;
                w[n].shape[1] = h->cols;
                w[n].data = dest_of(m, h, l);
                n++;
            }
    }
    for (int i = 0; i < spec->n_extra; i++) {
        w[n] = spec->extra[i];
        w[n++].dtype = dt;
    }
    static const char *const md[] = {"format", "pt", NULL};
    qac_status s = qac_safetensors_write(path, w, n, md);
    free(w);
    free(names);
    return s;
}

/* text of a JSON object with over's fields set on it (over may be NULL) */
static qac_status json_text_over(const char *text, json_t *over, size_t flags, char **out) {
    if (!over) {
        *out = strdup(text);
        return *out ? QAC_OK : qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    json_t *j = json_loads(text, JSON_DISABLE_EOF_CHECK, NULL);
    if (!j || json_object_update(j, over) != 0) {
        json_decref(j);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    return qac_model_json_text(j, flags, out);
}

/* modules.json, 1_Pooling, 2_Normalize and sentence_bert_config.json */
static qac_status write_bi_encoder_files(const qac_model *m, const char *dir) {
    qac_status s;
    json_t *mods = json_pack("[{s:i, s:s, s:s, s:s}, {s:i, s:s, s:s, s:s}]", "idx", 0, "name", "0", "path", "",
                             "type", "sentence_transformers.models.Transformer", "idx", 1, "name", "1", "path",
                             "1_Pooling", "type", "sentence_transformers.models.Pooling");
    if (mods && m->normalize)
        json_array_append_new(mods, json_pack("{s:i, s:s, s:s, s:s}", "idx", 2, "name", "2", "path",
                                              "2_Normalize", "type", "sentence_transformers.models.Normalize"));
    int cls = m->pooling == QAC_POOL_CLS;
    json_t *pool = json_pack("{s:i, s:b, s:b, s:b, s:b, s:b, s:b, s:b}", "word_embedding_dimension",
                             m->cfg.hidden_size, "pooling_mode_cls_token", cls, "pooling_mode_mean_tokens", !cls,
                             "pooling_mode_max_tokens", 0, "pooling_mode_mean_sqrt_len_tokens", 0,
                             "pooling_mode_weightedmean_tokens", 0, "pooling_mode_lasttoken", 0, "include_prompt",
                             m->include_prompt);
    json_t *sbc = json_pack("{s:i, s:b}", "max_seq_length", m->max_seq_len, "do_lower_case", 0);
    char sub[4096];
    if ((s = qac_path_join(sub, sizeof sub, dir, "1_Pooling")) || (s = qac_mkdirs(sub)) ||
        (s = write_json(sub, "config.json", pool))) {
        json_decref(mods);
        json_decref(sbc);
        return s;
    }
    if (m->normalize &&
        ((s = qac_path_join(sub, sizeof sub, dir, "2_Normalize")) || (s = qac_mkdirs(sub)))) {
        json_decref(mods);
        json_decref(sbc);
        return s;
    }
    if ((s = write_json(dir, "sentence_bert_config.json", sbc))) {
        json_decref(mods);
        return s;
    }
    return write_json(dir, "modules.json", mods);
}

qac_status qac_model_save_spec(const qac_model *m, const char *dir, int st_dtype, const qac_save_spec *spec) {
    if (st_dtype != QAC_ST_F32 && st_dtype != QAC_ST_F16 && st_dtype != QAC_ST_BF16)
        return qac_set_error(QAC_ERR_INVALID, "save dtype must be F32, F16 or BF16");
    qac_status s;
    char path[4096];
    if ((s = qac_mkdirs(dir))) return s;
    if ((s = qac_path_join(path, sizeof path, dir, "model.safetensors")) ||
        (s = write_weights(m, path, (qac_st_dtype)st_dtype, spec)))
        return s;
    if (m->dir && !same_dir(m->dir, dir) && (s = copy_tokenizer_files(m->dir, dir))) return s;
    if (spec->bi_encoder_files && (s = write_bi_encoder_files(m, dir))) return s;
    char *stc, *text;
    if ((s = qac_model_prompts_json(m, &stc))) return s;
    s = json_text_over(stc, spec->st_config, 0, &text);
    free(stc);
    if (s) return s;
    s = write_text(dir, "config_sentence_transformers.json", text);
    free(text);
    if (s) return s;
    /* config.json last: a directory without it is not taken for a model. */
    char *cfg;
    if ((s = qac_bert_config_to_json(&m->cfg, &cfg))) return s;
    s = json_text_over(cfg, spec->config, JSON_REAL_PRECISION(9), &text);
    free(cfg);
    if (s) return s;
    s = write_text(dir, "config.json", text);
    free(text);
    return s;
}

qac_status qac_model_save_as(const qac_model *m, const char *dir, int st_dtype) {
    const qac_save_spec plain = {NULL, NULL, 0, 1, NULL, NULL};
    return qac_model_save_spec(m, dir, st_dtype, &plain);
}

qac_status qac_model_save(const qac_model *m, const char *dir) { return qac_model_save_as(m, dir, QAC_ST_F32); }
