/* Cross-encoder checkpoints (api/qac_xenc.h): reading Hugging Face
 * BertForSequenceClassification and sentence-transformers CrossEncoder
 * directories (and the RoBERTa, XLM-R and ModernBERT heads, for scoring), starting a reranker from any BERT checkpoint, writing them
 * back, and the scores made of the logits. The scoring itself is
 * index/reranker.c; the head's math model/cls_head.c. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "model_internal.h"
#include "model_json.h"
#include "qac_rng.h"
#include "qac_safetensors.h"
#include "qac_util.h"
#include "qac_xenc.h"

/* ---- activations ---- */

static const struct {
    qac_xenc_act act;
    const char *name, *torch;
} acts[] = {{QAC_XACT_SIGMOID, "sigmoid", "torch.nn.modules.activation.Sigmoid"},
            {QAC_XACT_IDENTITY, "identity", "torch.nn.modules.linear.Identity"},
            {QAC_XACT_TANH, "tanh", "torch.nn.modules.activation.Tanh"}};
#define N_ACTS (int)(sizeof acts / sizeof acts[0])

const char *qac_xenc_act_name(qac_xenc_act a) { return (unsigned)a < N_ACTS ? acts[a].name : "?"; }
const char *qac_xenc_act_torch(qac_xenc_act a) { return (unsigned)a < N_ACTS ? acts[a].torch : "?"; }

qac_status qac_xenc_act_parse(const char *name, qac_xenc_act *out) {
    if (!name) return qac_set_error(QAC_ERR_INVALID, "activation: no name");
    const char *dot = strrchr(name, '.');
    const char *cls = dot ? dot + 1 : name;
    for (int i = 0; i < N_ACTS; i++)
        if (!strcmp(name, acts[i].torch) || !strcmp(name, acts[i].name) || !strcasecmp(cls, acts[i].name)) {
            *out = acts[i].act;
            return QAC_OK;
        }
    return qac_set_error(QAC_ERR_UNSUPPORTED,
                         "activation function \"%s\": qac applies Sigmoid, Identity and Tanh (torch.nn) only", name);
}

static float sigmoid(float x) { return (float)(1.0 / (1.0 + exp(-(double)x))); }

void qac_logits_raw(int num_labels, const float *logits, int n, float *out) {
    for (int i = 0; i < n; i++)
        out[i] = num_labels == 1 ? logits[i] : logits[2 * (size_t)i + 1] - logits[2 * (size_t)i];
}

void qac_xenc_raw_scores(const qac_xenc *x, const float *logits, int n, float *out) {
    qac_logits_raw(x->num_labels, logits, n, out);
}

void qac_xenc_probabilities(const qac_xenc *x, const float *logits, int n, float *out) {
    qac_logits_probability(x->num_labels, logits, n, out);
}

void qac_logits_probability(int num_labels, const float *logits, int n, float *out) {
    for (int i = 0; i < n; i++) {
        if (num_labels == 1) {
            out[i] = sigmoid(logits[i]);
        } else { /* softmax over the two, its second entry (TEI's order: minus the max first) */
            double a = logits[2 * (size_t)i], b = logits[2 * (size_t)i + 1], m = a > b ? a : b;
            double ea = exp(a - m), eb = exp(b - m);
            out[i] = (float)(eb / (ea + eb));
        }
    }
}

void qac_xenc_activate(const qac_xenc *x, const float *logits, int n, float *out) {
    size_t k = (size_t)n * x->num_labels;
    for (size_t i = 0; i < k; i++)
        out[i] = x->activation == QAC_XACT_SIGMOID ? sigmoid(logits[i])
                 : x->activation == QAC_XACT_TANH  ? tanhf(logits[i])
                                                   : logits[i];
}

/* ---- reading ---- */

static qac_status read_json(const char *dir, const char *name, json_t **root) {
    char path[4096];
    qac_status st = qac_path_join(path, sizeof path, dir, name);
    return st ? st : qac_model_json_read(path, root);
}

/* num_labels and the label names from config.json: len(id2label), else
 * "num_labels", else transformers' default of 2 */
static qac_status read_labels(qac_xenc *x, json_t *cfg, const char *dir) {
    json_t *id2 = json_object_get(cfg, "id2label"), *nl = json_object_get(cfg, "num_labels");
    int n = 2;
    if (json_is_object(id2) && json_object_size(id2) > 0) n = (int)json_object_size(id2);
    else if (json_is_integer(nl)) n = (int)json_integer_value(nl);
    if (n != 1 && n != 2)
        return qac_set_error(QAC_ERR_UNSUPPORTED,
                             "%s/config.json: %d labels; a reranker has one logit (or two, the second the relevant "
                             "one)", dir, n);
    x->num_labels = n;
    for (int i = 0; i < n && json_is_object(id2); i++) {
        char key[16];
        snprintf(key, sizeof key, "%d", i);
        const char *s = json_string_value(json_object_get(id2, key));
        if (s && !(x->labels[i] = strdup(s))) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    return QAC_OK;
}

/* sentence-transformers' activation, in the order version 6 reads it */
static qac_status read_activation(qac_xenc *x, json_t *cfg, const char *dir) {
    json_t *stc = NULL;
    qac_status st = read_json(dir, "config_sentence_transformers.json", &stc);
    if (st) return st;
    const char *name = json_string_value(json_object_get(stc, "activation_fn"));
    if (!name) name = json_string_value(json_object_get(json_object_get(cfg, "sentence_transformers"), "activation_fn"));
    if (!name) name = json_string_value(json_object_get(cfg, "sbert_ce_default_activation_function"));
    if (name) st = qac_xenc_act_parse(name, &x->activation);
    else x->activation = x->num_labels == 1 ? QAC_XACT_SIGMOID : QAC_XACT_IDENTITY;
    json_decref(stc);
    return st ? qac_wrap_error(st, "%s", dir) : QAC_OK;
}

/* what CrossEncoder truncates at: sentence_bert_config.json's
 * max_seq_length (only_st: a cross-encoder's own, not a bi-encoder's),
 * else tokenizer_config.json's model_max_length, within the positions */
static qac_status read_max_len(qac_xenc *x, const char *dir, int own_st) {
    int limit = qac_bert_max_tokens(&x->bert->cfg), len = limit; /* RoBERTa's: its positions less the padding offset */
    json_t *sb = NULL, *tc = NULL;
    qac_status st = own_st ? read_json(dir, "sentence_bert_config.json", &sb) : QAC_OK;
    if (!st) st = read_json(dir, "tokenizer_config.json", &tc);
    json_t *msl = json_object_get(sb, "max_seq_length"), *mml = json_object_get(tc, "model_max_length");
    if (json_is_integer(msl) && json_integer_value(msl) >= 3) len = (int)(json_integer_value(msl) < limit ? json_integer_value(msl) : limit);
    else if (json_is_number(mml) && json_number_value(mml) >= 3 && json_number_value(mml) < limit)
        len = (int)json_number_value(mml);
    json_decref(sb);
    json_decref(tc);
    x->max_len = len;
    return st;
}

static qac_status alloc_head(qac_xenc *x) {
    size_t C = (size_t)x->bert->cfg.hidden_size, NL = (size_t)x->num_labels;
    x->cls_mem = calloc(NL * (C + 1), sizeof(float));
    if (!x->cls_mem) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    x->cls_w = x->cls_mem;
    x->cls_b = x->cls_mem + NL * C;
    return QAC_OK;
}

/* the tensor name, or prefix + name ("bert." etc.) for the pooler */
static const qac_st_tensor *find_any_prefix(const qac_safetensors *st, const char *suffix) {
    const qac_st_tensor *t = qac_safetensors_find(st, suffix);
    size_t k = strlen(suffix);
    for (int i = 0; !t && i < qac_safetensors_count(st); i++) {
        const qac_st_tensor *c = qac_safetensors_get(st, i);
        size_t n = strlen(c->name);
        if (n > k && c->name[n - k - 1] == '.' && !strcmp(c->name + n - k, suffix)) t = c;
    }
    return t;
}

/* tensor name of shape [rows] (cols 0) or [rows, cols] into dst; absent:
 * an error when required, else *present 0 and dst untouched */
static qac_status read_t(const qac_safetensors *st, const char *path, const char *name, int rows, int cols,
                         float *dst, int required, int *present) {
    const qac_st_tensor *t = qac_safetensors_find(st, name);
    if (present) *present = t != NULL;
    if (!t)
        return required ? qac_set_error(QAC_ERR_FORMAT, "%s: no %s (the sequence-classification head needs it)", path,
                                        name)
                        : QAC_OK;
    if (t->ndim != (cols ? 2 : 1) || t->shape[0] != rows || (cols && t->shape[1] != cols)) {
        if (cols) return qac_set_error(QAC_ERR_FORMAT, "%s: %s must be [%d, %d]", path, name, rows, cols);
        return qac_set_error(QAC_ERR_FORMAT, "%s: %s must be [%d]", path, name, rows);
    }
    return qac_safetensors_read_f32(t, dst);
}

/* the classifier's name in each head layout */
static const char *classifier_name(qac_family f) {
    return f == QAC_FAMILY_ROBERTA || f == QAC_FAMILY_XLM_ROBERTA ? "classifier.out_proj" : "classifier";
}

/* ModernBERT's head settings from config.json: the pooling, activation, norm */
static qac_status modernbert_config(qac_xenc *x, json_t *cfg, const char *dir, qac_pooling *pool) {
    const char *cp = json_string_value(json_object_get(cfg, "classifier_pooling"));
    const char *act = json_string_value(json_object_get(cfg, "classifier_activation"));
    json_t *eps = json_object_get(cfg, "norm_eps");
    if (!cp || !strcmp(cp, "cls")) *pool = QAC_POOL_CLS;
    else if (!strcmp(cp, "mean")) *pool = QAC_POOL_MEAN;
    else
        return qac_set_error(QAC_ERR_UNSUPPORTED,
                             "%s/config.json: classifier_pooling \"%s\": qac pools a ModernBERT reranker by cls or "
                             "mean", dir, cp);
    if (!act || !strcmp(act, "gelu")) x->mgelu_tanh = 0;
    else if (!strcmp(act, "gelu_new") || !strcmp(act, "gelu_pytorch_tanh")) x->mgelu_tanh = 1;
    else
        return qac_set_error(QAC_ERR_UNSUPPORTED,
                             "%s/config.json: classifier_activation \"%s\": qac applies gelu, gelu_new and "
                             "gelu_pytorch_tanh", dir, act);
    x->mnorm_eps = json_is_number(eps) ? (float)json_number_value(eps) : 1e-5f;
    return QAC_OK;
}

/* the head before the classifier: BERT's pooler (*has_pooler whether the
 * file has one), RoBERTa's classifier.dense into the pooler's place,
 * ModernBERT's head.dense and head.norm */
static qac_status read_pre_head(qac_xenc *x, const qac_safetensors *st, const char *path, int *has_pooler) {
    qac_bert_params *p = &x->bert->p;
    int C = x->bert->cfg.hidden_size, have = 0;
    qac_status s = QAC_OK;
    switch (x->bert->cfg.family) {
    case QAC_FAMILY_ROBERTA:
    case QAC_FAMILY_XLM_ROBERTA:
        x->head = QAC_XHEAD_ROBERTA;
        if (!(s = read_t(st, path, "classifier.dense.weight", C, C, p->pooler_w, 1, NULL)))
            s = read_t(st, path, "classifier.dense.bias", C, 0, p->pooler_b, 1, NULL);
        *has_pooler = 1;
        return s;
    case QAC_FAMILY_MODERNBERT:
        x->head = QAC_XHEAD_MODERNBERT;
        if (!(x->mhead_mem = calloc((size_t)C * (C + 3), sizeof(float))))
            return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        x->mhead_w = x->mhead_mem;
        x->mhead_b = x->mhead_w + (size_t)C * C;
        x->mnorm_w = x->mhead_b + C;
        x->mnorm_b = x->mnorm_w + C;
        if (!(s = read_t(st, path, "head.dense.weight", C, C, x->mhead_w, 1, NULL)) &&
            !(s = read_t(st, path, "head.dense.bias", C, 0, x->mhead_b, 0, &have)) &&
            !(s = read_t(st, path, "head.norm.weight", C, 0, x->mnorm_w, 1, NULL)))
            s = read_t(st, path, "head.norm.bias", C, 0, x->mnorm_b, 0, &have);
        *has_pooler = 1;
        return s;
    default:
        x->head = QAC_XHEAD_BERT;
        *has_pooler = find_any_prefix(st, "pooler.dense.weight") != NULL;
        return QAC_OK;
    }
}

/* the classifier from model.safetensors (*found 0 without one) and the
 * head before it (read_pre_head) */
static qac_status read_head(qac_xenc *x, const char *dir, int *found, int *has_pooler) {
    char path[4096], wn[64], bn[64];
    qac_safetensors *st = NULL;
    qac_status s = qac_path_join(path, sizeof path, dir, "model.safetensors");
    if (s || (s = qac_safetensors_open(&st, path))) return s;
    *found = 0;
    const char *cn = classifier_name(x->bert->cfg.family);
    snprintf(wn, sizeof wn, "%s.weight", cn);
    snprintf(bn, sizeof bn, "%s.bias", cn);
    const qac_st_tensor *w = qac_safetensors_find(st, wn), *b = qac_safetensors_find(st, bn);
    int C = x->bert->cfg.hidden_size;
    if (w) {
        int NL = (int)w->shape[0];
        if (w->ndim != 2 || w->shape[1] != C || (NL != 1 && NL != 2) || !b || b->ndim != 1 || b->shape[0] != NL)
            s = qac_set_error(QAC_ERR_FORMAT, "%s: %s must be [num_labels, %d] and %s [num_labels], num_labels 1 or 2",
                              path, wn, C, bn);
        if (!s) {
            x->num_labels = NL;
            if (!(s = alloc_head(x)) && !(s = qac_safetensors_read_f32(w, x->cls_w)))
                s = qac_safetensors_read_f32(b, x->cls_b);
        }
        if (!s) s = read_pre_head(x, st, path, has_pooler);
        *found = !s;
    } else {
        *has_pooler = find_any_prefix(st, "pooler.dense.weight") != NULL;
    }
    qac_safetensors_close(st);
    return s;
}

static void fill_normal(float *v, size_t n, double std, uint64_t key) {
    for (size_t i = 0; i < n; i += 2) { /* Box-Muller pairs */
        double u1 = (qac_rng_u64(key, i) >> 11) * 0x1p-53, u2 = (qac_rng_u64(key, i + 1) >> 11) * 0x1p-53;
        double r = sqrt(-2.0 * log(u1 > 0 ? u1 : 0x1p-53)) * std;
        v[i] = (float)(r * cos(2 * M_PI * u2));
        if (i + 1 < n) v[i + 1] = (float)(r * sin(2 * M_PI * u2));
    }
}

void qac_xenc_update_fingerprint(qac_xenc *x) {
    qac_model_update_fingerprint(x->bert);
    qac_xxh64 h;
    qac_xxh64_init(&h);
    char extra[96];
    int n = snprintf(extra, sizeof extra, "%s\nlabels=%d activation=%s max_len=%d\n", x->bert->fingerprint,
                     x->num_labels, qac_xenc_act_name(x->activation), x->max_len);
    qac_xxh64_update(&h, extra, (size_t)n);
    qac_xxh64_update(&h, x->cls_mem, (size_t)x->num_labels * (x->bert->cfg.hidden_size + 1) * sizeof(float));
    if (x->mhead_mem) { /* ModernBERT's head and its settings */
        size_t C = (size_t)x->bert->cfg.hidden_size;
        qac_xxh64_update(&h, x->mhead_mem, C * (C + 3) * sizeof(float));
        n = snprintf(extra, sizeof extra, "pool=%d gelu_tanh=%d eps=%.9g\n", (int)x->bert->pooling, x->mgelu_tanh,
                     (double)x->mnorm_eps);
        qac_xxh64_update(&h, extra, (size_t)n);
    }
    snprintf(x->fingerprint, sizeof x->fingerprint, "%016llx", (unsigned long long)qac_xxh64_digest(&h));
}

void qac_xenc_free(qac_xenc *x) {
    if (!x) return;
    qac_model_free(x->bert);
    free(x->cls_mem);
    free(x->mhead_mem);
    free(x->labels[0]), free(x->labels[1]);
    free(x);
}

/* load (want_head: a cross-encoder is required) or open (num_labels, seed) */
static qac_status open_dir(qac_xenc **out, const char *dir, int want_head, int num_labels, uint64_t seed,
                           int *fresh) {
    *out = NULL;
    if (fresh) *fresh = 0;
    qac_xenc *x = calloc(1, sizeof *x);
    if (!x) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    json_t *cfg = NULL;
    int found = 0, has_pooler = 0;
    qac_pooling pool = QAC_POOL_CLS;
    qac_status st = read_json(dir, "config.json", &cfg);
    if (!st && !cfg) st = qac_set_error(QAC_ERR_NOT_FOUND, "%s: no config.json (not a Hugging Face model directory)", dir);
    if (!st) st = qac_model_load_flags(&x->bert, dir, QAC_LOAD_CROSS_ENCODER);
    qac_family fam = st ? QAC_FAMILY_BERT : x->bert->cfg.family;
    if (!st && !want_head && fam != QAC_FAMILY_BERT)
        st = qac_set_error(QAC_ERR_UNSUPPORTED,
                           "%s is a %s checkpoint: qac trains rerankers from BERT checkpoints only; RoBERTa, XLM-R and "
                           "ModernBERT cross-encoders (their ...ForSequenceClassification) load for scoring (qac "
                           "rerank, qac serve --reranker, qac.Reranker)", dir, qac_family_name(fam));
    if (!st) st = read_head(x, dir, &found, &has_pooler);
    if (!st && found && fam == QAC_FAMILY_MODERNBERT) st = modernbert_config(x, cfg, dir, &pool);
    if (!st && found) {
        int rows = x->num_labels; /* classifier.weight's */
        st = read_labels(x, cfg, dir);
        if (!st && x->num_labels != rows)
            st = qac_set_error(QAC_ERR_FORMAT, "%s: config.json has %d labels, classifier.weight %d rows", dir,
                               x->num_labels, rows);
        if (!st && !has_pooler)
            st = qac_set_error(QAC_ERR_FORMAT,
                               "%s: a classifier but no pooler (bert.pooler.dense.*): not a BertForSequenceClassification "
                               "checkpoint", dir);
        if (!st) st = read_activation(x, cfg, dir);
    } else if (!st && want_head) {
        st = fam == QAC_FAMILY_BERT
                 ? qac_set_error(QAC_ERR_NOT_FOUND,
                                 "%s has no classifier.weight: not a cross-encoder. Train one from it with qac "
                                 "finetune --cross-encoder", dir)
                 : qac_set_error(QAC_ERR_NOT_FOUND,
                                 "%s has no %s.weight: not a %s cross-encoder (a %sForSequenceClassification "
                                 "checkpoint); qac trains rerankers from BERT checkpoints only", dir,
                                 classifier_name(fam), qac_family_name(fam),
                                 fam == QAC_FAMILY_MODERNBERT ? "ModernBert"
                                 : fam == QAC_FAMILY_ROBERTA  ? "Roberta"
                                                              : "XLMRoberta");
    } else if (!st) {
        if (num_labels != 1 && num_labels != 2)
            st = qac_set_error(QAC_ERR_INVALID, "a reranker has 1 or 2 labels, not %d", num_labels);
        x->num_labels = num_labels;
        if (!st) st = alloc_head(x);
        json_t *ir = json_object_get(cfg, "initializer_range");
        double std = json_is_number(ir) ? json_number_value(ir) : 0.02;
        int C = x->bert->cfg.hidden_size;
        if (!st) {
            fill_normal(x->cls_w, (size_t)num_labels * C, std, qac_rng_key(seed, 0x636c6173, 0, 0));
            if (!has_pooler) {
                fill_normal(x->bert->p.pooler_w, (size_t)C * C, std, qac_rng_key(seed, 0x706f6f6c, 0, 0));
                memset(x->bert->p.pooler_b, 0, (size_t)C * sizeof(float));
            }
            x->activation = num_labels == 1 ? QAC_XACT_SIGMOID : QAC_XACT_IDENTITY;
            if (fresh) *fresh = has_pooler ? 1 : 2;
        }
    }
    if (!st) st = read_max_len(x, dir, found);
    json_t *cd = json_object_get(cfg, "classifier_dropout");
    x->classifier_dropout = json_is_number(cd) ? (float)json_number_value(cd) : -1.0f;
    json_decref(cfg);
    if (st) {
        qac_xenc_free(x);
        return st;
    }
    x->bert->pooling = pool;
    x->bert->normalize = 0;
    qac_xenc_update_fingerprint(x);
    *out = x;
    return QAC_OK;
}

qac_status qac_xenc_load(qac_xenc **out, const char *dir) { return open_dir(out, dir, 1, 0, 0, NULL); }

qac_status qac_xenc_open(qac_xenc **out, const char *dir, int num_labels, uint64_t seed, int *fresh) {
    return open_dir(out, dir, 0, num_labels, seed, fresh);
}

/* ---- writing ---- */

qac_status qac_xenc_save(const qac_xenc *x, const char *dir) {
    if (x->head != QAC_XHEAD_BERT)
        return qac_set_error(QAC_ERR_UNSUPPORTED,
                             "%s: qac writes BertForSequenceClassification rerankers only; this %s one is read for "
                             "scoring", dir, qac_family_name(x->bert->cfg.family));
    int C = x->bert->cfg.hidden_size, NL = x->num_labels;
    qac_st_write_tensor head[2] = {{"classifier.weight", QAC_ST_F32, 2, {NL, C}, x->cls_w, NULL},
                                   {"classifier.bias", QAC_ST_F32, 1, {NL}, x->cls_b, NULL}};
    json_t *id2 = json_object(), *l2id = json_object();
    for (int i = 0; i < NL; i++) {
        char key[16], def[32];
        snprintf(key, sizeof key, "%d", i);
        snprintf(def, sizeof def, "LABEL_%d", i);
        const char *name = x->labels[i] ? x->labels[i] : def;
        json_object_set_new(id2, key, json_string(name));
        json_object_set_new(l2id, name, json_integer(i));
    }
    const char *act = qac_xenc_act_torch(x->activation);
    json_t *cfg = json_pack("{s:[s], s:o, s:o, s:{s:s}}", "architectures", "BertForSequenceClassification", "id2label",
                            id2, "label2id", l2id, "sentence_transformers", "activation_fn", act);
    if (cfg && x->classifier_dropout >= 0)
        json_object_set_new(cfg, "classifier_dropout", json_real(x->classifier_dropout));
    json_t *stc = json_pack("{s:s, s:s}", "model_type", "CrossEncoder", "activation_fn", act);
    /* sentence-transformers 6's layout: the Transformer alone, for
     * sequence classification; versions 4 and 5 read config.json */
    json_t *mods = json_pack("[{s:i, s:s, s:s, s:s}]", "idx", 0, "name", "0", "path", "", "type",
                             "sentence_transformers.base.modules.transformer.Transformer");
    json_t *sbc = json_pack("{s:s, s:{s:{s:s, s:s}}, s:s, s:i}", "transformer_task", "sequence-classification",
                            "modality_config", "text", "method", "forward", "method_output_name", "logits",
                            "module_output_name", "scores", "max_seq_length", x->max_len);
    qac_status st = cfg && stc && mods && sbc ? QAC_OK : qac_set_error(QAC_ERR_NOMEM, "out of memory");
    char path[4096], *text = NULL;
    const char *names[2] = {"modules.json", "sentence_bert_config.json"};
    json_t *files[2] = {mods, sbc};
    if (!st) st = qac_mkdirs(dir);
    for (int i = 0; i < 2 && !st; i++) {
        qac_atomic_file af;
        json_incref(files[i]);
        if ((st = qac_model_json_text(files[i], 0, &text)) || (st = qac_path_join(path, sizeof path, dir, names[i])) ||
            (st = qac_atomic_open(&af, path)))
            break;
        if (fputs(text, af.f) < 0) {
            qac_atomic_abort(&af);
            st = qac_set_error(QAC_ERR_IO, "write %s: %s", path, strerror(errno));
        } else {
            st = qac_atomic_commit(&af);
        }
        free(text);
        text = NULL;
    }
    free(text);
    if (!st) {
        qac_save_spec spec = {"bert.", head, 2, 0, cfg, stc};
        st = qac_model_save_spec(x->bert, dir, QAC_ST_F32, &spec);
    }
    json_decref(cfg), json_decref(stc), json_decref(mods), json_decref(sbc);
    return st;
}
