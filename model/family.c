/* The encoder families as data: config.json per family (parse, validate,
 * write back), the flat parameter layout whose tensors a family has or
 * lacks, and the tensor names of each family's Hugging Face checkpoints.
 * The encoder (bert_cpu.c, bert_backward.c, kernels/) reads only the
 * config's fields; the family is named here and in the files it writes.
 *
 * Each family's config.json is read with its own config class's defaults
 * (BertConfig, RobertaConfig, XLMRobertaConfig, ModernBertConfig) and
 * written back with the keys transformers reads, so a saved checkpoint
 * loads in transformers as the same model class. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bert_cpu.h"
#include "model_internal.h"
#include "model_json.h"
#include "qac_model.h"
#include "qac_util.h"

/* ---- families ---- */

static const char *const family_names[QAC_FAMILY_COUNT] = {"bert", "roberta", "xlm-roberta", "modernbert"};
static const char *const family_archs[QAC_FAMILY_COUNT] = {"BertModel", "RobertaModel", "XLMRobertaModel",
                                                           "ModernBertModel"};

const char *qac_family_name(qac_family f) {
    return (unsigned)f < QAC_FAMILY_COUNT ? family_names[f] : "unknown";
}

int qac_bert_max_tokens(const qac_bert_config *c) {
    return c->positions == QAC_POS_OFFSET ? c->max_position - c->pad_token_id - 1 : c->max_position;
}

int qac_bert_layer_window(const qac_bert_config *c, int l) {
    if (c->global_every <= 0 || l % c->global_every == 0) return 0;
    return c->local_window / 2 > 0 ? c->local_window / 2 : 0;
}

int qac_bert_ffn_rows(const qac_bert_config *c) { return c->glu ? 2 * c->intermediate_size : c->intermediate_size; }

/* ---- flat parameter layout ---- */

static const char *const tensor_names[QAC_BERT_NUM_TENSORS] = {
    "word_emb",  "pos_emb",   "type_emb", "emb_ln_w",  "emb_ln_b",   "qkv_w",      "qkv_b",
    "attn_out_w", "attn_out_b", "ln1_w",  "ln1_b",     "ffn_in_w",   "ffn_in_b",   "ffn_out_w",
    "ffn_out_b", "ln2_w",     "ln2_b",    "final_ln_w", "final_ln_b", "pooler_w",  "pooler_b"};

const char *qac_bert_tensor_name(int i) { return i >= 0 && i < QAC_BERT_NUM_TENSORS ? tensor_names[i] : NULL; }

size_t qac_bert_tensor_size(const qac_bert_config *c, int i) {
    size_t V = (size_t)c->vocab_size, C = (size_t)c->hidden_size, L = (size_t)c->num_layers,
           I = (size_t)c->intermediate_size, F = (size_t)qac_bert_ffn_rows(c), P = (size_t)c->max_position,
           T = (size_t)c->type_vocab_size;
    int table = c->positions != QAC_POS_ROTARY, nb = !c->no_norm_bias, ab = !c->no_attn_bias,
        mb = !c->no_mlp_bias, pooler = c->family != QAC_FAMILY_MODERNBERT;
    switch (i) {
    case 0: return V * C;
    case 1: return table ? P * C : 0;
    case 2: return T * C;
    case 3: return C;
    case 4: return nb ? C : 0;
    case 5: return L * 3 * C * C;
    case 6: return ab ? L * 3 * C : 0;
    case 7: return L * C * C;
    case 8: return ab ? L * C : 0;
    case 9: return L * C;
    case 10: return nb ? L * C : 0;
    case 11: return L * F * C;
    case 12: return mb ? L * F : 0;
    case 13: return L * C * I;
    case 14: return mb ? L * C : 0;
    case 15: return L * C;
    case 16: return nb ? L * C : 0;
    case 17: return c->pre_norm ? C : 0;
    case 18: return c->pre_norm && nb ? C : 0;
    case 19: return pooler ? C * C : 0;
    case 20: return pooler ? C : 0;
    default: return 0;
    }
}

size_t qac_bert_param_count(const qac_bert_config *c) {
    size_t n = 0;
    for (int i = 0; i < QAC_BERT_NUM_TENSORS; i++) n += qac_bert_tensor_size(c, i);
    return n;
}

float **qac_bert_view_slot(qac_bert_params *p, int i) {
    float **slots[QAC_BERT_NUM_TENSORS] = {
        &p->word_emb,  &p->pos_emb,   &p->type_emb,   &p->emb_ln_w,   &p->emb_ln_b,  &p->qkv_w,    &p->qkv_b,
        &p->attn_out_w, &p->attn_out_b, &p->ln1_w,    &p->ln1_b,      &p->ffn_in_w,  &p->ffn_in_b, &p->ffn_out_w,
        &p->ffn_out_b, &p->ln2_w,     &p->ln2_b,      &p->final_ln_w, &p->final_ln_b, &p->pooler_w, &p->pooler_b};
    return slots[i];
}

/* A tensor the family lacks gets NULL: reading it is a bug, never a read of
 * its neighbour. */
void qac_bert_params_bind(qac_bert_params *p, const qac_bert_config *c, float *base) {
    for (int i = 0; i < QAC_BERT_NUM_TENSORS; i++) {
        size_t n = qac_bert_tensor_size(c, i);
        *qac_bert_view_slot(p, i) = n ? base : NULL;
        base += n;
    }
}

size_t qac_bert_stack_param_count(const qac_bert_config *c) {
    size_t n = 0;
    for (int i = QAC_BERT_LAYER_FIRST; i < QAC_BERT_LAYER_END; i++) n += qac_bert_tensor_size(c, i);
    return n;
}

void qac_bert_stack_bind(qac_bert_params *p, const qac_bert_config *c, float *base) {
    for (int i = 0; i < QAC_BERT_NUM_TENSORS; i++) {
        size_t n = qac_bert_tensor_size(c, i);
        int in_stack = i >= QAC_BERT_LAYER_FIRST && i < QAC_BERT_LAYER_END;
        *qac_bert_view_slot(p, i) = in_stack && n ? base : NULL;
        if (in_stack) base += n;
    }
}

/* ---- config.json ---- */

qac_status qac_bert_config_validate(const qac_bert_config *c) {
    if ((unsigned)c->family >= QAC_FAMILY_COUNT || (unsigned)c->positions > QAC_POS_ROTARY)
        return qac_set_error(QAC_ERR_INVALID, "config: unknown family %d or position kind %d", (int)c->family,
                             (int)c->positions);
    int rotary = c->positions == QAC_POS_ROTARY;
    struct {
        const char *name;
        long long v, lo, hi;
    } ints[] = {
        {"vocab_size", c->vocab_size, 1, 1 << 24},
        {"hidden_size", c->hidden_size, 1, 1 << 16},
        {"num_hidden_layers", c->num_layers, 1, 1024},
        {"num_attention_heads", c->num_heads, 1, 1 << 16},
        {"intermediate_size", c->intermediate_size, 1, 1 << 20},
        {"max_position_embeddings", c->max_position, 1, 1 << 20},
        {"type_vocab_size", c->type_vocab_size, rotary ? 0 : 1, 1 << 16},
        {"local_attention", c->local_window, 0, 1 << 20},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (ints[i].v < ints[i].lo || ints[i].v > ints[i].hi)
            return qac_set_error(QAC_ERR_UNSUPPORTED, "%s = %lld is out of the supported range [%lld, %lld]",
                                 ints[i].name, ints[i].v, ints[i].lo, ints[i].hi);
    if (c->hidden_size % c->num_heads != 0)
        return qac_set_error(QAC_ERR_UNSUPPORTED,
                             "hidden_size %d is not a multiple of num_attention_heads %d", c->hidden_size,
                             c->num_heads);
    if (rotary && (c->hidden_size / c->num_heads) % 2 != 0)
        return qac_set_error(QAC_ERR_UNSUPPORTED, "rotary positions need an even head size (hidden_size %d / %d heads)",
                             c->hidden_size, c->num_heads);
    if (rotary && (!(c->rope_theta > 0) || !(c->rope_theta_local > 0) || !isfinite(c->rope_theta) ||
                   !isfinite(c->rope_theta_local)))
        return qac_set_error(QAC_ERR_UNSUPPORTED, "rotary theta must be positive (global %g, local %g)",
                             (double)c->rope_theta, (double)c->rope_theta_local);
    if (c->pad_token_id < 0 || c->pad_token_id >= c->vocab_size)
        return qac_set_error(QAC_ERR_UNSUPPORTED, "pad_token_id %d is outside the vocabulary [0, %d)",
                             c->pad_token_id, c->vocab_size);
    if (qac_bert_max_tokens(c) < 2)
        return qac_set_error(QAC_ERR_UNSUPPORTED,
                             "max_position_embeddings %d leaves no room for a sequence past padding index %d",
                             c->max_position, c->pad_token_id);
    if (c->global_every < 0)
        return qac_set_error(QAC_ERR_UNSUPPORTED, "global_attn_every_n_layers %d must be positive", c->global_every);
    if (!(c->layer_norm_eps > 0) || !isfinite(c->layer_norm_eps))
        return qac_set_error(QAC_ERR_UNSUPPORTED, "layer_norm_eps must be a positive number");
    return QAC_OK;
}

static qac_status cfg_int(json_t *root, const char *key, int *out) {
    json_t *v = json_object_get(root, key);
    if (!v) return QAC_OK; /* the config class's default stays */
    if (!json_is_integer(v))
        return qac_set_error(QAC_ERR_FORMAT, "\"%s\" must be an integer", key);
    json_int_t x = json_integer_value(v);
    if (x < -1000000000LL || x > 1000000000LL)
        return qac_set_error(QAC_ERR_UNSUPPORTED, "\"%s\" = %lld is out of range", key, (long long)x);
    *out = (int)x;
    return QAC_OK;
}

/* An integer that may be null (kept as -1, "none"). */
static qac_status cfg_int_or_null(json_t *root, const char *key, int *out) {
    json_t *v = json_object_get(root, key);
    if (v && json_is_null(v)) {
        *out = -1;
        return QAC_OK;
    }
    return cfg_int(root, key, out);
}

static qac_status cfg_float(json_t *root, const char *key, float *out, double lo, double hi) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return QAC_OK;
    double d = json_number_value(v);
    if (!json_is_number(v) || !(d >= lo && d < hi))
        return qac_set_error(QAC_ERR_FORMAT, "\"%s\" must be a number in [%g, %g)", key, lo, hi);
    *out = (float)d;
    return QAC_OK;
}

static qac_status cfg_bool(json_t *root, const char *key, int *out) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return QAC_OK;
    if (!json_is_boolean(v)) return qac_set_error(QAC_ERR_FORMAT, "\"%s\" must be true or false", key);
    *out = json_is_true(v);
    return QAC_OK;
}

static qac_status cfg_string_must_be(json_t *root, const char *key, const char *want, const char *why) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return QAC_OK;
    if (!json_is_string(v)) return qac_set_error(QAC_ERR_FORMAT, "\"%s\" must be a string", key);
    if (strcmp(json_string_value(v), want) != 0)
        return qac_set_error(QAC_ERR_UNSUPPORTED, "%s \"%s\" is not supported (%s)", key, json_string_value(v),
                             why);
    return QAC_OK;
}

/* Encoder model types people embed with, and the family each is closest to
 * (architecture first, then position scheme). */
static const struct {
    const char *type;
    qac_family closest;
} known_types[] = {
    {"distilbert", QAC_FAMILY_BERT},        {"electra", QAC_FAMILY_BERT},
    {"mpnet", QAC_FAMILY_BERT},             {"albert", QAC_FAMILY_BERT},
    {"deberta", QAC_FAMILY_BERT},           {"deberta-v2", QAC_FAMILY_BERT},
    {"nomic_bert", QAC_FAMILY_MODERNBERT},  {"new", QAC_FAMILY_MODERNBERT},
    {"jina_bert", QAC_FAMILY_BERT},         {"camembert", QAC_FAMILY_ROBERTA},
    {"xlm-roberta-xl", QAC_FAMILY_XLM_ROBERTA}, {"xlm", QAC_FAMILY_XLM_ROBERTA},
    {"eurobert", QAC_FAMILY_MODERNBERT},    {"neobert", QAC_FAMILY_MODERNBERT},
    {"t5", QAC_FAMILY_BERT},                {"mt5", QAC_FAMILY_XLM_ROBERTA},
};

static size_t edit_distance(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b), row[64];
    if (m >= 63) return (size_t)-1;
    for (size_t j = 0; j <= m; j++) row[j] = j;
    for (size_t i = 1; i <= n; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= m; j++) {
            size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[m];
}

static qac_family closest_family(const char *type) {
    for (size_t i = 0; i < sizeof known_types / sizeof known_types[0]; i++)
        if (!strcmp(type, known_types[i].type)) return known_types[i].closest;
    qac_family best = QAC_FAMILY_BERT;
    size_t bd = (size_t)-1;
    for (int f = 0; f < QAC_FAMILY_COUNT; f++) {
        size_t d = edit_distance(type, family_names[f]);
        if (d < bd) bd = d, best = (qac_family)f;
    }
    return best;
}

static qac_status unsupported_type(const char *type) {
    return qac_set_error(QAC_ERR_UNSUPPORTED,
                         "model_type \"%.100s\" is not supported: qac loads model_type bert, roberta, xlm-roberta "
                         "and modernbert (the closest supported family is %s)",
                         type, family_names[closest_family(type)]);
}

/* The family config.json names: model_type, else the architectures. */
static qac_status family_of(json_t *root, qac_family *out) {
    json_t *mt = json_object_get(root, "model_type"), *arch = json_object_get(root, "architectures");
    if (arch && !json_is_array(arch) && !json_is_null(arch))
        return qac_set_error(QAC_ERR_FORMAT, "\"architectures\" must be a list");
    if (mt && !json_is_null(mt)) {
        if (!json_is_string(mt)) return qac_set_error(QAC_ERR_FORMAT, "\"model_type\" must be a string");
        const char *t = json_string_value(mt);
        for (int f = 0; f < QAC_FAMILY_COUNT; f++)
            if (!strcmp(t, family_names[f])) {
                *out = (qac_family)f;
                return QAC_OK;
            }
        return unsupported_type(t);
    }
    /* the longest architecture prefix wins: XLMRoberta* before Roberta* */
    static const char *const prefixes[QAC_FAMILY_COUNT] = {"Bert", "Roberta", "XLMRoberta", "ModernBert"};
    for (size_t i = 0; json_is_array(arch) && i < json_array_size(arch); i++) {
        const char *a = json_string_value(json_array_get(arch, i));
        for (int f = QAC_FAMILY_COUNT - 1; a && f >= 0; f--)
            if (!strncmp(a, prefixes[f], strlen(prefixes[f]))) {
                *out = (qac_family)f;
                return QAC_OK;
            }
    }
    return qac_set_error(QAC_ERR_UNSUPPORTED,
                         "no \"model_type\" and no Bert*, Roberta*, XLMRoberta* or ModernBert* architecture; qac "
                         "loads model_type bert, roberta, xlm-roberta and modernbert");
}

/* BERT, RoBERTa and XLM-RoBERTa: BertConfig's keys. */
static qac_status parse_bert_like(json_t *root, qac_bert_config *c) {
    qac_status s;
    if ((s = cfg_string_must_be(root, "hidden_act", "gelu", "only the exact erf \"gelu\" is implemented")) ||
        (s = cfg_string_must_be(root, "position_embedding_type", "absolute",
                                "only absolute position embeddings are implemented")))
        return s;
    const char *flags[] = {"is_decoder", "add_cross_attention"};
    for (int i = 0; i < 2; i++) {
        int on = 0;
        if ((s = cfg_bool(root, flags[i], &on))) return s;
        if (on)
            return qac_set_error(QAC_ERR_UNSUPPORTED, "\"%s\": true is not supported (qac runs %s as an encoder)",
                                 flags[i], family_names[c->family]);
    }
    if ((s = cfg_int(root, "vocab_size", &c->vocab_size)) || (s = cfg_int(root, "hidden_size", &c->hidden_size)) ||
        (s = cfg_int(root, "num_hidden_layers", &c->num_layers)) ||
        (s = cfg_int(root, "num_attention_heads", &c->num_heads)) ||
        (s = cfg_int(root, "intermediate_size", &c->intermediate_size)) ||
        (s = cfg_int(root, "max_position_embeddings", &c->max_position)) ||
        (s = cfg_int(root, "type_vocab_size", &c->type_vocab_size)))
        return s;
    json_t *pad = json_object_get(root, "pad_token_id");
    if (pad && !json_is_null(pad) && (s = cfg_int(root, "pad_token_id", &c->pad_token_id))) return s;
    if (c->family != QAC_FAMILY_BERT &&
        ((s = cfg_int_or_null(root, "bos_token_id", &c->bos_token_id)) ||
         (s = cfg_int_or_null(root, "eos_token_id", &c->eos_token_id))))
        return s;
    json_t *eps = json_object_get(root, "layer_norm_eps");
    if (eps && !json_is_number(eps)) return qac_set_error(QAC_ERR_FORMAT, "\"layer_norm_eps\" must be a number");
    if (eps) c->layer_norm_eps = (float)json_number_value(eps);
    if ((s = cfg_float(root, "hidden_dropout_prob", &c->hidden_dropout, 0, 1)) ||
        (s = cfg_float(root, "attention_probs_dropout_prob", &c->attn_dropout, 0, 1)))
        return s;
    return QAC_OK;
}

/* The rotary thetas: rope_parameters {"full_attention": {...},
 * "sliding_attention": {...}} as transformers 5 writes them, else
 * global_rope_theta / local_rope_theta (a null local theta: the global
 * one, as the first ModernBERT code read it). Only the default rotary. */
static qac_status parse_rope(json_t *root, qac_bert_config *c) {
    qac_status s;
    json_t *scaling = json_object_get(root, "rope_scaling");
    if (scaling && !json_is_null(scaling))
        return qac_set_error(QAC_ERR_UNSUPPORTED, "\"rope_scaling\" is not supported (qac runs the default rotary)");
    json_t *rp = json_object_get(root, "rope_parameters");
    if (rp && !json_is_null(rp)) {
        static const char *const kinds[2] = {"full_attention", "sliding_attention"};
        float *theta[2] = {&c->rope_theta, &c->rope_theta_local};
        if (!json_is_object(rp)) return qac_set_error(QAC_ERR_FORMAT, "\"rope_parameters\" must be an object");
        for (int k = 0; k < 2; k++) {
            json_t *e = json_object_get(rp, kinds[k]);
            if (!e || json_is_null(e)) continue;
            if (!json_is_object(e))
                return qac_set_error(QAC_ERR_FORMAT, "\"rope_parameters\".\"%s\" must be an object", kinds[k]);
            if ((s = cfg_string_must_be(e, "rope_type", "default", "qac runs the default rotary")) ||
                (s = cfg_float(e, "rope_theta", theta[k], 1e-30, 1e30)))
                return qac_wrap_error(s, "rope_parameters.%s", kinds[k]);
        }
        return QAC_OK;
    }
    if ((s = cfg_float(root, "global_rope_theta", &c->rope_theta, 1e-30, 1e30))) return s;
    json_t *lt = json_object_get(root, "local_rope_theta");
    if (lt && json_is_null(lt)) c->rope_theta_local = c->rope_theta;
    else if ((s = cfg_float(root, "local_rope_theta", &c->rope_theta_local, 1e-30, 1e30)))
        return s;
    return QAC_OK;
}

/* Which layers are global: layer_types (transformers 5) when present, else
 * global_attn_every_n_layers. A layer_types list qac can run is the pattern
 * of some n: layer l global exactly when l % n == 0. */
static qac_status parse_layer_types(json_t *root, qac_bert_config *c) {
    qac_status s = cfg_int(root, "global_attn_every_n_layers", &c->global_every);
    if (s) return s;
    json_t *lt = json_object_get(root, "layer_types");
    if (!lt || json_is_null(lt)) return QAC_OK;
    if (!json_is_array(lt) || (int)json_array_size(lt) != c->num_layers)
        return qac_set_error(QAC_ERR_FORMAT, "\"layer_types\" must list num_hidden_layers (%d) entries",
                             c->num_layers);
    int n = c->num_layers; /* the first global layer after 0, or L when none */
    for (int l = 0; l < c->num_layers; l++) {
        const char *t = json_string_value(json_array_get(lt, (size_t)l));
        if (!t || (strcmp(t, "full_attention") && strcmp(t, "sliding_attention")))
            return qac_set_error(QAC_ERR_UNSUPPORTED, "layer_types[%d] must be \"full_attention\" or "
                                 "\"sliding_attention\"", l);
        if (l > 0 && n == c->num_layers && !strcmp(t, "full_attention")) n = l;
    }
    for (int l = 0; l < c->num_layers; l++) {
        int global = !strcmp(json_string_value(json_array_get(lt, (size_t)l)), "full_attention");
        if (global != (l % n == 0))
            return qac_set_error(QAC_ERR_UNSUPPORTED,
                                 "layer_types: layer %d breaks the every-%d-layers global pattern qac runs", l, n);
    }
    c->global_every = n;
    return QAC_OK;
}

static qac_status parse_modernbert(json_t *root, qac_bert_config *c) {
    qac_status s;
    int norm_bias = 0, attn_bias = 0, mlp_bias = 0;
    float emb_drop = 0, mlp_drop = 0;
    if ((s = cfg_string_must_be(root, "hidden_activation", "gelu", "only the exact erf \"gelu\" is implemented")) ||
        (s = cfg_int(root, "vocab_size", &c->vocab_size)) || (s = cfg_int(root, "hidden_size", &c->hidden_size)) ||
        (s = cfg_int(root, "num_hidden_layers", &c->num_layers)) ||
        (s = cfg_int(root, "num_attention_heads", &c->num_heads)) ||
        (s = cfg_int(root, "intermediate_size", &c->intermediate_size)) ||
        (s = cfg_int(root, "max_position_embeddings", &c->max_position)) ||
        (s = cfg_int(root, "local_attention", &c->local_window)) ||
        (s = cfg_int_or_null(root, "pad_token_id", &c->pad_token_id)) ||
        (s = cfg_int_or_null(root, "bos_token_id", &c->bos_token_id)) ||
        (s = cfg_int_or_null(root, "eos_token_id", &c->eos_token_id)) ||
        (s = cfg_int_or_null(root, "cls_token_id", &c->cls_token_id)) ||
        (s = cfg_int_or_null(root, "sep_token_id", &c->sep_token_id)) ||
        (s = cfg_bool(root, "norm_bias", &norm_bias)) || (s = cfg_bool(root, "attention_bias", &attn_bias)) ||
        (s = cfg_bool(root, "mlp_bias", &mlp_bias)) ||
        (s = cfg_float(root, "norm_eps", &c->layer_norm_eps, 0, 1)) ||
        (s = cfg_float(root, "attention_dropout", &c->attn_dropout, 0, 1)) ||
        (s = cfg_float(root, "embedding_dropout", &emb_drop, 0, 1)) ||
        (s = cfg_float(root, "mlp_dropout", &mlp_drop, 0, 1)) || (s = parse_rope(root, c)) ||
        (s = parse_layer_types(root, c)))
        return s;
    if (c->pad_token_id < 0) c->pad_token_id = 0; /* no padding index: any id pads (rows past lens are unread) */
    c->no_norm_bias = !norm_bias;
    c->no_attn_bias = !attn_bias;
    c->no_mlp_bias = !mlp_bias;
    /* qac's hidden dropout sites (embeddings, the two residual branches)
     * take one rate: the larger of the two it stands for */
    c->hidden_dropout = emb_drop > mlp_drop ? emb_drop : mlp_drop;
    return QAC_OK;
}

/* Each family's config class defaults. */
static qac_bert_config family_defaults(qac_family f) {
    qac_bert_config c = {.vocab_size = 30522, .hidden_size = 768, .num_layers = 12, .num_heads = 12, .intermediate_size = 3072, .max_position = 512, .type_vocab_size = 2, .pad_token_id = 0, .layer_norm_eps = 1e-12f, .hidden_dropout = 0.1f, .attn_dropout = 0.1f};
    c.family = f;
    if (f != QAC_FAMILY_BERT) c.bos_token_id = c.eos_token_id = c.cls_token_id = c.sep_token_id = -1;
    switch (f) {
    case QAC_FAMILY_ROBERTA:
    case QAC_FAMILY_XLM_ROBERTA:
        if (f == QAC_FAMILY_ROBERTA) c.vocab_size = 50265;
        c.positions = QAC_POS_OFFSET;
        c.pad_token_id = 1;
        c.bos_token_id = 0;
        c.eos_token_id = 2;
        break;
    case QAC_FAMILY_MODERNBERT:
        c = (qac_bert_config){.vocab_size = 50368, .hidden_size = 768, .num_layers = 22, .num_heads = 12,
                              .intermediate_size = 1152, .max_position = 8192, .pad_token_id = 50283,
                              .layer_norm_eps = 1e-5f};
        c.family = f;
        c.positions = QAC_POS_ROTARY;
        c.pre_norm = c.glu = 1;
        c.rope_theta = 160000.0f;
        c.rope_theta_local = 10000.0f;
        c.global_every = 3;
        c.local_window = 128;
        c.bos_token_id = c.cls_token_id = 50281;
        c.eos_token_id = c.sep_token_id = 50282;
        break;
    default:
        break;
    }
    return c;
}

qac_status qac_bert_config_parse(qac_bert_config *cfg, const char *json, size_t len) {
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return qac_set_error(QAC_ERR_FORMAT, "invalid JSON at line %d column %d: %s", jerr.line, jerr.column,
                             jerr.text);
    qac_status s = QAC_OK;
    qac_family f = QAC_FAMILY_BERT;
    qac_bert_config c;
    if (!json_is_object(root)) s = qac_set_error(QAC_ERR_FORMAT, "not a JSON object");
    if (!s) s = family_of(root, &f);
    if (!s) {
        c = family_defaults(f);
        s = f == QAC_FAMILY_MODERNBERT ? parse_modernbert(root, &c) : parse_bert_like(root, &c);
    }
    if (!s) s = qac_bert_config_validate(&c);
    if (!s) *cfg = c;
    json_decref(root);
    return s;
}

/* Shortest decimal that reads back as the same float, so 1e-12f is written
 * as 1e-12 rather than 9.9999999600419720e-13. */
static double float_as_short_double(float f) {
    char buf[32];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        double d = strtod(buf, NULL);
        if ((float)d == f) return d;
    }
    return (double)f;
}

static json_t *int_or_null(int v) { return v >= 0 ? json_integer(v) : json_null(); }

static json_t *bert_json(const qac_bert_config *c) {
    return json_pack(
        "{s:[s], s:f, s:n, s:s, s:f, s:i, s:f, s:i, s:f, s:i, s:s, s:i, s:i, s:i, s:s, s:i, s:b, s:i}",
        "architectures", "BertModel", "attention_probs_dropout_prob", float_as_short_double(c->attn_dropout),
        "classifier_dropout", "hidden_act", "gelu", "hidden_dropout_prob", float_as_short_double(c->hidden_dropout),
        "hidden_size", c->hidden_size, "initializer_range", 0.02, "intermediate_size", c->intermediate_size,
        "layer_norm_eps", float_as_short_double(c->layer_norm_eps), "max_position_embeddings", c->max_position,
        "model_type", "bert", "num_attention_heads", c->num_heads, "num_hidden_layers", c->num_layers,
        "pad_token_id", c->pad_token_id, "position_embedding_type", "absolute", "type_vocab_size",
        c->type_vocab_size, "use_cache", 1, "vocab_size", c->vocab_size);
}

static json_t *roberta_json(const qac_bert_config *c) {
    return json_pack(
        "{s:[s], s:f, s:o, s:n, s:o, s:s, s:f, s:i, s:f, s:i, s:f, s:i, s:s, s:i, s:i, s:i, s:s, s:i, s:b, s:i}",
        "architectures", family_archs[c->family], "attention_probs_dropout_prob",
        float_as_short_double(c->attn_dropout), "bos_token_id", int_or_null(c->bos_token_id), "classifier_dropout",
        "eos_token_id", int_or_null(c->eos_token_id), "hidden_act", "gelu", "hidden_dropout_prob",
        float_as_short_double(c->hidden_dropout), "hidden_size", c->hidden_size, "initializer_range", 0.02,
        "intermediate_size", c->intermediate_size, "layer_norm_eps", float_as_short_double(c->layer_norm_eps),
        "max_position_embeddings", c->max_position, "model_type", family_names[c->family], "num_attention_heads",
        c->num_heads, "num_hidden_layers", c->num_layers, "pad_token_id", c->pad_token_id,
        "position_embedding_type", "absolute", "type_vocab_size", c->type_vocab_size, "use_cache", 1, "vocab_size",
        c->vocab_size);
}

/* ModernBERT with the keys of the first release (global_rope_theta, ...),
 * which every transformers version with ModernBERT reads. */
static json_t *modernbert_json(const qac_bert_config *c) {
    json_t *j = json_pack("{s:[s], s:b, s:f, s:o, s:o, s:f, s:o, s:i, s:f, s:s, s:i, s:f, s:i, s:i, s:f}",
                          "architectures", "ModernBertModel", "attention_bias", !c->no_attn_bias,
                          "attention_dropout", float_as_short_double(c->attn_dropout), "bos_token_id",
                          int_or_null(c->bos_token_id), "cls_token_id", int_or_null(c->cls_token_id),
                          "embedding_dropout", float_as_short_double(c->hidden_dropout), "eos_token_id",
                          int_or_null(c->eos_token_id), "global_attn_every_n_layers", c->global_every,
                          "global_rope_theta", float_as_short_double(c->rope_theta), "hidden_activation", "gelu",
                          "hidden_size", c->hidden_size, "initializer_range", 0.02, "intermediate_size",
                          c->intermediate_size, "local_attention", c->local_window, "local_rope_theta",
                          float_as_short_double(c->rope_theta_local));
    json_t *k = json_pack("{s:i, s:b, s:f, s:s, s:b, s:f, s:i, s:i, s:i, s:o, s:i}", "max_position_embeddings",
                          c->max_position, "mlp_bias", !c->no_mlp_bias, "mlp_dropout",
                          float_as_short_double(c->hidden_dropout), "model_type", "modernbert", "norm_bias",
                          !c->no_norm_bias, "norm_eps", float_as_short_double(c->layer_norm_eps),
                          "num_attention_heads", c->num_heads, "num_hidden_layers", c->num_layers, "pad_token_id",
                          c->pad_token_id, "sep_token_id", int_or_null(c->sep_token_id), "vocab_size",
                          c->vocab_size);
    if (!j || !k || json_object_update(j, k)) {
        json_decref(j);
        j = NULL;
    }
    json_decref(k);
    return j;
}

qac_status qac_bert_config_to_json(const qac_bert_config *c, char **out) {
    *out = NULL;
    json_t *r = c->family == QAC_FAMILY_MODERNBERT ? modernbert_json(c)
                : c->family == QAC_FAMILY_BERT     ? bert_json(c)
                                                   : roberta_json(c);
    return qac_model_json_text(r, JSON_REAL_PRECISION(9), out);
}

/* ---- each family's tensor names ---- */

int qac_hf_tensor_table(const qac_bert_config *c, qac_hf_tensor *t) {
    int C = c->hidden_size, I = c->intermediate_size, F = qac_bert_ffn_rows(c), n = 0;
    if (c->family == QAC_FAMILY_MODERNBERT) {
        const qac_hf_tensor tab[] = {
            {"embeddings.tok_embeddings.weight", 0, 0, 1, c->vocab_size, C, 0, 0},
            {"embeddings.norm.weight", 3, 0, 1, C, 0, 0, 0},
            {"embeddings.norm.bias", 4, 0, 1, C, 0, 0, 0},
            {"layers.%d.attn_norm.weight", 9, 0, 1, C, 0, 0, 1},
            {"layers.%d.attn_norm.bias", 10, 0, 1, C, 0, 0, 1},
            {"layers.%d.attn.Wqkv.weight", 5, 0, 1, 3 * C, C, 0, 0},
            {"layers.%d.attn.Wqkv.bias", 6, 0, 1, 3 * C, 0, 0, 0},
            {"layers.%d.attn.Wo.weight", 7, 0, 1, C, C, 0, 0},
            {"layers.%d.attn.Wo.bias", 8, 0, 1, C, 0, 0, 0},
            {"layers.%d.mlp_norm.weight", 15, 0, 1, C, 0, 0, 0},
            {"layers.%d.mlp_norm.bias", 16, 0, 1, C, 0, 0, 0},
            {"layers.%d.mlp.Wi.weight", 11, 0, 1, F, C, 0, 0},
            {"layers.%d.mlp.Wi.bias", 12, 0, 1, F, 0, 0, 0},
            {"layers.%d.mlp.Wo.weight", 13, 0, 1, C, I, 0, 0},
            {"layers.%d.mlp.Wo.bias", 14, 0, 1, C, 0, 0, 0},
            {"final_norm.weight", 17, 0, 1, C, 0, 0, 0},
            {"final_norm.bias", 18, 0, 1, C, 0, 0, 0},
        };
        for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
            if (qac_bert_tensor_size(c, tab[i].view)) t[n++] = tab[i];
        return n;
    }
    const qac_hf_tensor tab[] = {
        {"embeddings.word_embeddings.weight", 0, 0, 1, c->vocab_size, C, 0, 0},
        {"embeddings.position_embeddings.weight", 1, 0, 1, c->max_position, C, 0, 0},
        {"embeddings.token_type_embeddings.weight", 2, 0, 1, c->type_vocab_size, C, 0, 0},
        {"embeddings.LayerNorm.weight", 3, 0, 1, C, 0, 0, 0},
        {"embeddings.LayerNorm.bias", 4, 0, 1, C, 0, 0, 0},
        {"encoder.layer.%d.attention.self.query.weight", 5, 0, 3, C, C, 0, 0},
        {"encoder.layer.%d.attention.self.key.weight", 5, 1, 3, C, C, 0, 0},
        {"encoder.layer.%d.attention.self.value.weight", 5, 2, 3, C, C, 0, 0},
        {"encoder.layer.%d.attention.self.query.bias", 6, 0, 3, C, 0, 0, 0},
        {"encoder.layer.%d.attention.self.key.bias", 6, 1, 3, C, 0, 0, 0},
        {"encoder.layer.%d.attention.self.value.bias", 6, 2, 3, C, 0, 0, 0},
        {"encoder.layer.%d.attention.output.dense.weight", 7, 0, 1, C, C, 0, 0},
        {"encoder.layer.%d.attention.output.dense.bias", 8, 0, 1, C, 0, 0, 0},
        {"encoder.layer.%d.attention.output.LayerNorm.weight", 9, 0, 1, C, 0, 0, 0},
        {"encoder.layer.%d.attention.output.LayerNorm.bias", 10, 0, 1, C, 0, 0, 0},
        {"encoder.layer.%d.intermediate.dense.weight", 11, 0, 1, I, C, 0, 0},
        {"encoder.layer.%d.intermediate.dense.bias", 12, 0, 1, I, 0, 0, 0},
        {"encoder.layer.%d.output.dense.weight", 13, 0, 1, C, I, 0, 0},
        {"encoder.layer.%d.output.dense.bias", 14, 0, 1, C, 0, 0, 0},
        {"encoder.layer.%d.output.LayerNorm.weight", 15, 0, 1, C, 0, 0, 0},
        {"encoder.layer.%d.output.LayerNorm.bias", 16, 0, 1, C, 0, 0, 0},
        {"pooler.dense.weight", 19, 0, 1, C, C, 1, 0},
        {"pooler.dense.bias", 20, 0, 1, C, 0, 1, 0},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (qac_bert_tensor_size(c, tab[i].view)) t[n++] = tab[i];
    return n;
}

const char *qac_hf_anchor(const qac_bert_config *c) {
    return c->family == QAC_FAMILY_MODERNBERT ? "embeddings.tok_embeddings.weight"
                                              : "embeddings.word_embeddings.weight";
}

const char *qac_hf_prefix(const qac_bert_config *c) {
    static const char *const prefixes[QAC_FAMILY_COUNT] = {"bert.", "roberta.", "roberta.", "model."};
    return prefixes[c->family];
}
