/* sentence-transformers prompts: read from and written to
 * config_sentence_transformers.json, looked up by name, and applied the way
 * sentence-transformers applies them (qac_model.h, "Prompts"). */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"
#include "model_json.h"
#include "qac_util.h"

#define ST_CONFIG "config_sentence_transformers.json"

const char *qac_model_prompt(const qac_model *m, const char *name) {
    for (int i = 0; m && name && i < m->n_prompts; i++)
        if (!strcmp(m->prompt_names[i], name)) return m->prompt_texts[i];
    return NULL;
}

const char *qac_model_query_prompt(const qac_model *m) {
    const char *p = qac_model_prompt(m, "query");
    return p ? p : "";
}

const char *qac_model_passage_prompt_name(const qac_model *m) {
    static const char *const names[] = {"document", "passage", "corpus"};
    for (int i = 0; i < 3; i++)
        if (qac_model_prompt(m, names[i])) return names[i];
    return "passage";
}

const char *qac_model_passage_prompt(const qac_model *m) {
    const char *p = qac_model_prompt(m, qac_model_passage_prompt_name(m));
    return p ? p : "";
}

const char *qac_model_default_prompt(const qac_model *m) {
    const char *p = m && m->default_prompt_name ? qac_model_prompt(m, m->default_prompt_name) : NULL;
    return p ? p : "";
}

qac_status qac_model_set_prompt(qac_model *m, const char *name, const char *text) {
    if (!m || !name || !text) return qac_set_error(QAC_ERR_INVALID, "set_prompt: NULL argument");
    char *t = strdup(text);
    if (!t) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    for (int i = 0; i < m->n_prompts; i++)
        if (!strcmp(m->prompt_names[i], name)) {
            free(m->prompt_texts[i]);
            m->prompt_texts[i] = t;
            return QAC_OK;
        }
    char *nm = strdup(name);
    char **names = realloc(m->prompt_names, (size_t)(m->n_prompts + 1) * sizeof *names);
    if (names) m->prompt_names = names;
    char **texts = names ? realloc(m->prompt_texts, (size_t)(m->n_prompts + 1) * sizeof *texts) : NULL;
    if (texts) m->prompt_texts = texts;
    if (!nm || !names || !texts) {
        free(nm);
        free(t);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    m->prompt_names[m->n_prompts] = nm;
    m->prompt_texts[m->n_prompts] = t;
    m->n_prompts++;
    return QAC_OK;
}

qac_status qac_model_override_prompts(qac_model *m, const char *query, const char *passage) {
    qac_status st = query ? qac_model_set_prompt(m, "query", query) : QAC_OK;
    if (!st && passage) st = qac_model_set_prompt(m, qac_model_passage_prompt_name(m), passage);
    return st;
}

void qac_model_prompts_clear(qac_model *m) {
    for (int i = 0; i < m->n_prompts; i++) {
        free(m->prompt_names[i]);
        free(m->prompt_texts[i]);
    }
    free(m->prompt_names);
    free(m->prompt_texts);
    free(m->default_prompt_name);
    m->prompt_names = m->prompt_texts = NULL;
    m->default_prompt_name = NULL;
    m->n_prompts = 0;
}

qac_status qac_model_prompts_load(qac_model *m, const char *dir) {
    char path[4096];
    json_t *root = NULL;
    qac_status s = qac_path_join(path, sizeof path, dir, ST_CONFIG);
    if (!s) s = qac_model_json_read(path, &root);
    if (s || !root) return s;
    json_t *prompts = json_object_get(root, "prompts"), *dflt = json_object_get(root, "default_prompt_name");
    if (!json_is_object(root)) s = qac_set_error(QAC_ERR_FORMAT, "%s: not a JSON object", path);
    else if (prompts && !json_is_null(prompts) && !json_is_object(prompts))
        s = qac_set_error(QAC_ERR_FORMAT, "%s: \"prompts\" must be an object of name: text", path);
    else if (dflt && !json_is_null(dflt) && !json_is_string(dflt))
        s = qac_set_error(QAC_ERR_FORMAT, "%s: \"default_prompt_name\" must be a string or null", path);
    const char *key;
    json_t *v;
    if (!s && json_is_object(prompts)) json_object_foreach(prompts, key, v) {
            if (!json_is_string(v)) {
                s = qac_set_error(QAC_ERR_FORMAT, "%s: prompt \"%s\" must be a string", path, key);
                break;
            }
            if ((s = qac_model_set_prompt(m, key, json_string_value(v)))) break;
        }
    const char *dname = json_string_value(dflt);
    if (!s && dname && *dname) { /* "" is taken as no default */
        if (!qac_model_prompt(m, dname))
            s = qac_set_error(QAC_ERR_FORMAT, "%s: default_prompt_name \"%s\" is not one of the prompts", path,
                              dname);
        else if (!(m->default_prompt_name = strdup(dname)))
            s = qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    json_decref(root);
    return s;
}

qac_status qac_model_prompts_json(const qac_model *m, char **out) {
    *out = NULL;
    json_t *p = json_object(), *r = json_object();
    for (int i = 0; p && i < m->n_prompts; i++)
        json_object_set_new(p, m->prompt_names[i], json_string(m->prompt_texts[i]));
    if (p && r) {
        json_object_set_new(r, "prompts", p);
        json_object_set_new(r, "default_prompt_name",
                            m->default_prompt_name ? json_string(m->default_prompt_name) : json_null());
        p = NULL;
    }
    json_decref(p);
    return qac_model_json_text(r, 0, out);
}

qac_status qac_model_prompt_skip(const qac_model *m, const char *prompt, int max_len, int *skip) {
    *skip = 0;
    if (m->include_prompt || !prompt || !*prompt) return QAC_OK;
    if (!m->tok) return qac_set_error(QAC_ERR_INVALID, "prompt: the model has no tokenizer");
    /* sentence-transformers measures the prompt alone, cut to the same
     * max_seq_length as the texts, less a closing special token */
    int cap = max_len > 1 ? max_len : 2, n = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    qac_status s = qac_tokenizer_encode(m->tok, prompt, strlen(prompt), cap, ids, &n);
    if (!s) *skip = qac_tokenizer_specials(m->tok).sep >= 0 ? n - 1 : n;
    free(ids);
    return s;
}

qac_status qac_model_encode_prompted(const qac_model *m, const char *prompt, const char *text, size_t len,
                                     int max_len, int32_t *ids, int *n) {
    if (!m->tok) return qac_set_error(QAC_ERR_INVALID, "encode: the model has no tokenizer");
    return qac_tokenizer_encode_prompted(m->tok, prompt, text, len, max_len, ids, n);
}
