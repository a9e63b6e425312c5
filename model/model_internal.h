/* Internal to model/: the prompts' file I/O, used by checkpoint.c, and the
 * families' tensor tables (family.c) that checkpoint.c reads and writes by.
 * The JSON file reader and text writer are in model_json.h. */
#ifndef QAC_MODEL_INTERNAL_H
#define QAC_MODEL_INTERNAL_H

#include <jansson.h>

#include "qac_model.h"
#include "qac_safetensors.h"

/* Read dir/config_sentence_transformers.json into m's prompts (absent: none). */
qac_status qac_model_prompts_load(qac_model *m, const char *dir);
/* The config_sentence_transformers.json text for m (malloc'd). */
qac_status qac_model_prompts_json(const qac_model *m, char **out);
/* Free m's prompts. */
void qac_model_prompts_clear(qac_model *m);

/* qac_model_load with flags: QAC_LOAD_CROSS_ENCODER reads a cross-encoder's
 * directory (model/xenc.c), whose modules.json, when there is one, names a
 * Transformer alone: no Pooling is asked for, the pooling is CLS and
 * nothing is normalised (the encoder's output is then the last layer's
 * [CLS] state, what the pooler reads). */
#define QAC_LOAD_CROSS_ENCODER 1
/* QAC_LOAD_NO_TOKENIZER: the weights and config alone (qac_model_load_untokenized). */
#define QAC_LOAD_NO_TOKENIZER 2
qac_status qac_model_load_flags(qac_model **out, const char *dir, int flags);

/* How qac_model_save_spec writes a directory that holds more than the
 * encoder (a cross-encoder's BertForSequenceClassification). */
typedef struct qac_save_spec {
    const char *prefix;               /* before every encoder tensor's name (NULL: none) */
    const qac_st_write_tensor *extra; /* written after the encoder's tensors (their dtype is replaced by the save's) */
    int n_extra;
    int bi_encoder_files;             /* modules.json, 1_Pooling, 2_Normalize, sentence_bert_config.json */
    json_t *config;                   /* fields set over config.json's (borrowed; NULL: none) */
    json_t *st_config;                /* fields set over config_sentence_transformers.json's (borrowed; NULL: none) */
} qac_save_spec;
/* qac_model_save_as is this with {NULL, NULL, 0, 1, NULL, NULL}. */
qac_status qac_model_save_spec(const qac_model *m, const char *dir, int st_dtype, const qac_save_spec *spec);

/* The view slot of tensor i (i < QAC_BERT_NUM_TENSORS) in p. */
float **qac_bert_view_slot(qac_bert_params *p, int i);

/* One tensor of a family's Hugging Face checkpoint. */
typedef struct qac_hf_tensor {
    const char *suffix;  /* after the prefix; %d is the layer */
    int view;            /* index into the flat layout */
    int part, nparts;    /* q/k/v: slice `part` of `nparts` per layer */
    int rows, cols;      /* expected shape; cols 0 for vectors */
    int optional;        /* may be absent (stays zero): the pooler */
    int first_layer;     /* layers before it have none (ModernBERT's layer 0 attn_norm) */
} qac_hf_tensor;

/* The tensors c's family stores, in the family's order (at most 32); the
 * ones the config turns off (biases, tables) are left out. */
int qac_hf_tensor_table(const qac_bert_config *c, qac_hf_tensor *t);
/* The tensor that finds a checkpoint's prefix (the word embeddings) and the
 * prefix of the family's task heads ("bert.", "roberta.", "model."). */
const char *qac_hf_anchor(const qac_bert_config *c);
const char *qac_hf_prefix(const qac_bert_config *c);

#endif
