/* Encoder checkpoints: Hugging Face directories (config.json,
 * model.safetensors, the tokenizer's files, optional sentence-transformers
 * modules.json / 1_Pooling / Normalize) loaded into one flat fp32 parameter
 * allocation with named views. Families: BERT, RoBERTa, XLM-RoBERTa and
 * ModernBERT, each a set of values of the config below that the one encoder
 * reads (see "Families").
 *
 * Ownership: qac_model_load returns a model the caller frees with
 * qac_model_free (NULL accepted). The model owns its parameters and its
 * tokenizer; encoders borrow the model and must be freed before it. */
#ifndef QAC_MODEL_H
#define QAC_MODEL_H

#include "qac_common.h"
#include "qac_tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Families ----
 * A family is not a code path: it is what config.json names (model_type),
 * the tensor names of its checkpoints, and these values of the config the
 * encoder branches on:
 *   BERT         positions learned from 0, post-LayerNorm, GELU, biases;
 *   RoBERTa,     as BERT, but position ids start past the padding index:
 *   XLM-RoBERTa  padding_idx + 1 + the count of non-pad tokens so far (a pad
 *                token takes padding_idx), as transformers'
 *                create_position_ids_from_input_ids; one token type;
 *   ModernBERT   rotary positions (one theta for global layers, another for
 *                local ones), pre-LayerNorm (layer 0's attention reads the
 *                embeddings unnormalised) with a final LayerNorm, GeGLU
 *                feed-forward, no token types and no position table, biases
 *                per norm_bias / attention_bias / mlp_bias, every
 *                global_attn_every_n_layers-th layer global and the others
 *                attending within local_attention / 2 tokens on each side.
 * Zero in every family field is BERT, so a config built in memory with
 * only the BERT fields set is a BERT config. */
typedef enum qac_family {
    QAC_FAMILY_BERT = 0,
    QAC_FAMILY_ROBERTA = 1,
    QAC_FAMILY_XLM_ROBERTA = 2,
    QAC_FAMILY_MODERNBERT = 3,
} qac_family;
#define QAC_FAMILY_COUNT 4

typedef enum qac_positions {
    QAC_POS_LEARNED = 0, /* pos_emb[t] */
    QAC_POS_OFFSET = 1,  /* pos_emb[padding_idx + 1 + non-pad count] (RoBERTa) */
    QAC_POS_ROTARY = 2,  /* rotary on queries and keys, no table */
} qac_positions;

typedef struct qac_bert_config {
    int vocab_size;
    int hidden_size;       /* C */
    int num_layers;        /* L */
    int num_heads;         /* NH; C % NH == 0 */
    int intermediate_size; /* I */
    int max_position;      /* P: max_position_embeddings */
    int type_vocab_size;   /* Tt */
    int pad_token_id;
    float layer_norm_eps;
    float hidden_dropout;  /* hidden_dropout_prob (training only) */
    float attn_dropout;    /* attention_probs_dropout_prob (training only) */
    /* the family (zero: BERT) */
    qac_family family;
    qac_positions positions;
    int pre_norm;          /* LayerNorm before attention and FFN, and a final one */
    int glu;               /* GeGLU: ffn_in holds 2I rows, GELU(input half) * gate half */
    int no_norm_bias;      /* LayerNorms without a bias (ModernBERT's norm_bias false) */
    int no_attn_bias;      /* Wqkv and Wo without biases (attention_bias false) */
    int no_mlp_bias;       /* the FFN's two products without biases (mlp_bias false) */
    float rope_theta;      /* rotary base of global layers (global_rope_theta) */
    float rope_theta_local; /* and of local ones (local_rope_theta) */
    int global_every;      /* > 0: layer l is global when l % global_every == 0, else local */
    int local_window;      /* local_attention: a local layer's keys lie within local_window / 2 */
    int bos_token_id, eos_token_id; /* written back to config.json (RoBERTa, ModernBERT; -1: none) */
    int cls_token_id, sep_token_id; /* ModernBERT's, likewise */
} qac_bert_config;

/* "bert", "roberta", "xlm-roberta", "modernbert" (the model_type). */
const char *qac_family_name(qac_family f);
/* The most tokens a sequence may have: max_position, less padding_idx + 1
 * with offset positions (514 positions hold 512 tokens). */
int qac_bert_max_tokens(const qac_bert_config *c);
/* Half-width of layer l's attention window: 0 for a global layer, else
 * local_window / 2 (key j is seen from query t when |t - j| <= it). */
int qac_bert_layer_window(const qac_bert_config *c, int l);
/* FFN input rows: 2I with GeGLU, else I. */
int qac_bert_ffn_rows(const qac_bert_config *c);

typedef enum qac_pooling { QAC_POOL_CLS = 0, QAC_POOL_MEAN = 1 } qac_pooling;

/* Views into one contiguous float array, in this order. Matrices use the
 * PyTorch nn.Linear layout [out, in], so y = x W^T + b. Per-layer tensors
 * are stacked along a leading L axis. The Q, K and V projections are fused:
 * rows [0,C) of qkv_w are Q, [C,2C) K, [2C,3C) V (ModernBERT's Wqkv as it
 * is). A tensor the family lacks has size 0 and a NULL view: the position
 * and type tables of ModernBERT, the biases its flags turn off, the final
 * norm of post-LN families, ModernBERT's pooler. With pre_norm, ln1 is the
 * norm before attention (layer 0's slice unused: its attention reads the
 * embeddings as they are) and ln2 the one before the FFN; ffn_in_w [L, 2I,
 * C] with GeGLU (the input half's rows first, then the gate's). */
typedef struct qac_bert_params {
    float *word_emb;   /* [V, C] */
    float *pos_emb;    /* [P, C] */
    float *type_emb;   /* [Tt, C] */
    float *emb_ln_w;   /* [C] */
    float *emb_ln_b;   /* [C] */
    float *qkv_w;      /* [L, 3C, C] */
    float *qkv_b;      /* [L, 3C] */
    float *attn_out_w; /* [L, C, C] */
    float *attn_out_b; /* [L, C] */
    float *ln1_w;      /* [L, C]  attention.output.LayerNorm */
    float *ln1_b;      /* [L, C] */
    float *ffn_in_w;   /* [L, I, C] intermediate.dense */
    float *ffn_in_b;   /* [L, I] */
    float *ffn_out_w;  /* [L, C, I] output.dense */
    float *ffn_out_b;  /* [L, C] */
    float *ln2_w;      /* [L, C]  output.LayerNorm */
    float *ln2_b;      /* [L, C] */
    float *final_ln_w; /* [C] pre_norm: the final LayerNorm */
    float *final_ln_b; /* [C] */
    float *pooler_w;   /* [C, C]  kept only so saved checkpoints round-trip */
    float *pooler_b;   /* [C] */
} qac_bert_params;

#define QAC_BERT_NUM_TENSORS 21

/* Number of floats in the flat parameter array for this config. */
size_t qac_bert_param_count(const qac_bert_config *c);
/* Point every view of p into base (which holds qac_bert_param_count floats). */
void qac_bert_params_bind(qac_bert_params *p, const qac_bert_config *c, float *base);
/* Per-view size in floats and name, in declaration order (i < QAC_BERT_NUM_TENSORS). */
size_t qac_bert_tensor_size(const qac_bert_config *c, int i);
const char *qac_bert_tensor_name(int i);

typedef struct qac_model {
    qac_bert_config cfg;
    qac_pooling pooling;
    int normalize;            /* L2-normalise pooled vectors */
    int max_seq_len;          /* sentence_bert_config max_seq_length, else max_position */
    float *param_mem;         /* one allocation of n_params floats */
    size_t n_params;
    qac_bert_params p;        /* views into param_mem */
    qac_tokenizer *tok;
    char *dir;                /* directory it was loaded from */
    char name[128];           /* short name: the directory's base name */
    char fingerprint[17];     /* 16 hex digits, see below */
    /* sentence-transformers prompts (config_sentence_transformers.json):
     * prompt_names[i] -> prompt_texts[i] in file order; see "Prompts" below. */
    int n_prompts;
    char **prompt_names, **prompt_texts;
    char *default_prompt_name; /* NULL: none */
    int include_prompt;        /* 1_Pooling include_prompt; 0 pools without the prompt's tokens */
} qac_model;

/* Fingerprint: XXH64 (seed 0) over, in order, the bytes of config.json, the
 * text "\npooling=<cls|mean> normalize=<0|1> max_seq_len=<n>\n" (with
 * " include_prompt=0" before the newline when the pooling skips prompt
 * tokens), and the n_params fp32 parameters (little-endian, flat order). It identifies what
 * the encoder computes: an F16 file and its F32 twin with the same
 * config.json and the same values hash alike. A model not read from disk
 * hashes the config.json that qac_model_save writes for it. Printed as 16
 * lowercase hex digits. */

/* Parse and validate config.json text. model_type (else the
 * architectures) picks the family: bert, roberta, xlm-roberta or
 * modernbert, each read with its config class's keys and defaults. Unknown
 * fields are ignored. Unsupported values are errors that name the field:
 * another model_type (the message names the families qac loads and the
 * closest one), hidden_act / hidden_activation other than gelu,
 * position_embedding_type other than absolute, is_decoder,
 * add_cross_attention, rotary other than the default (rope_scaling), a
 * layer_types list that is not an every-n-layers pattern, hidden_size not
 * divisible by the heads, sizes out of range. */
qac_status qac_bert_config_parse(qac_bert_config *cfg, const char *json, size_t len);
/* Check a config built in memory the same way. */
qac_status qac_bert_config_validate(const qac_bert_config *cfg);
/* The config.json text qac_model_save writes (malloc'd, caller frees). */
qac_status qac_bert_config_to_json(const qac_bert_config *cfg, char **out);

/* Parse a sentence-transformers 1_Pooling/config.json (legacy
 * pooling_mode_*_tokens booleans or the newer "pooling_mode"). Only cls or
 * mean alone are supported; max, mean_sqrt_len_tokens, weightedmean,
 * lasttoken and combinations are QAC_ERR_UNSUPPORTED. The embedding
 * dimension, when present, must equal hidden_size. *include_prompt (may be
 * NULL) receives "include_prompt" (true when absent). */
qac_status qac_pooling_config_parse(const char *json, size_t len, int hidden_size, qac_pooling *out,
                                    int *include_prompt);
const char *qac_pooling_name(qac_pooling p); /* "cls" / "mean" */

/* Load a Hugging Face model directory of any family above. Errors name
 * the file and what is wrong: missing files, unsupported config values,
 * missing or mis-shaped tensors, truncated or corrupt safetensors, a
 * pytorch_model.bin-only directory. Weights: model.safetensors in F32, F16
 * or BF16 (converted to fp32), with or without the family's task-head
 * prefix ("bert.", "roberta.", "model.") or any other; position_ids buffers
 * and extra heads are ignored; a missing pooler stays zero. The file is
 * mmapped and released tensor by tensor, so peak memory stays near 1x the
 * fp32 parameters. Pooling, normalize and max_seq_len follow modules.json,
 * 1_Pooling/config.json and sentence_bert_config.json (without a
 * max_seq_length there, tokenizer_config.json's model_max_length, as
 * sentence-transformers bounds it); without them: CLS pooling, no
 * normalisation, qac_bert_max_tokens. The tokenizer is loaded from the same
 * directory with qac_tokenizer_load. */
qac_status qac_model_load(qac_model **out, const char *dir);
/* The same without the tokenizer (m->tok NULL), for callers that bring
 * their own token ids. */
qac_status qac_model_load_untokenized(qac_model **out, const char *dir);

/* What a --model value names, as a directory for qac_model_load:
 *  - an existing path: a model directory as it is; a training run directory
 *    (`latest` beside checkpoint-N) without a final model in it yet: its
 *    newest checkpoint, and *note says so; a run's `latest` file: the
 *    checkpoint it names; anything else as given (loading says what is wrong);
 *  - a bare name: the model installed under that name
 *    ($QAC_HOME/models/NAME, else ~/.local/share/qac/models/NAME);
 *  - ORG/NAME: that repository's snapshot in the Hugging Face hub cache
 *    (HF_HUB_CACHE, HF_HOME/hub, ~/.cache/huggingface/hub), offline: the
 *    revision refs/main names, else the newest snapshot.
 * QAC_ERR_NOT_FOUND naming where it looked. note may be NULL. */
qac_status qac_model_resolve(const char *spec, char *buf, size_t cap, char *note, size_t note_cap);
void qac_model_free(qac_model *m);

/* Build a model in memory from a config with zeroed parameters (tests,
 * trainer initialisation). The tokenizer is loaded from tok_dir if not NULL. */
qac_status qac_model_create(qac_model **out, const qac_bert_config *cfg, const char *tok_dir);

/* Write an HF-loadable directory: config.json (the family's model_type and
 * architecture), model.safetensors (F32, the family's tensor names without
 * a task-head prefix), the tokenizer files copied from the source
 * directory, and modules.json / 1_Pooling / 2_Normalize.
 * Crash-safe: every file is written to a temporary name and renamed. */
qac_status qac_model_save(const qac_model *m, const char *dir);
/* Same, storing the weights as QAC_ST_F32, QAC_ST_F16 or QAC_ST_BF16
 * (an int so this header need not include qac_safetensors.h). */
qac_status qac_model_save_as(const qac_model *m, const char *dir, int st_dtype);

/* ---- Prompts ----
 * sentence-transformers puts a prompt's text before the input string, then
 * tokenises the whole ("query: " + text). With include_prompt false the
 * pooling then skips the prompt's tokens: as many as the prompt alone has
 * with [CLS] and without its closing [SEP], counted from the start (for
 * CLS pooling, the first token after them; a text cut so short that
 * nothing is left pools to zeros, or to [CLS]).
 *
 * config_sentence_transformers.json: {"prompts": {name: text},
 * "default_prompt_name": name | null}; qac_model_load reads it (absent: no
 * prompts), qac_model_save writes it. A query takes the "query" prompt, a
 * passage the first of "document", "passage", "corpus" the file has
 * (sentence-transformers' encode_document order); otherwise none. */

/* The text of prompt `name`, or NULL when the model has none by that name. */
const char *qac_model_prompt(const qac_model *m, const char *name);
/* The query prompt, the passage prompt, the default prompt's text; "" when none. */
const char *qac_model_query_prompt(const qac_model *m);
const char *qac_model_passage_prompt(const qac_model *m);
const char *qac_model_default_prompt(const qac_model *m);
/* The name the passage prompt is read from ("document", "passage" or
 * "corpus"), or "passage" when the model has none. */
const char *qac_model_passage_prompt_name(const qac_model *m);
/* Add or replace prompt `name` (copied). */
qac_status qac_model_set_prompt(qac_model *m, const char *name, const char *text);
/* Replace the query prompt (query not NULL) and the passage prompt (passage
 * not NULL, under the name qac_model_passage_prompt_name gives); "" means
 * none. What every command's --query-prompt / --passage-prompt do. */
qac_status qac_model_override_prompts(qac_model *m, const char *query, const char *passage);
/* Tokens the pooling skips at the start of prompt + text encoded with
 * max_len: 0 when the model pools prompt tokens (include_prompt true) or
 * prompt is NULL or "", else the prompt's own token count as described
 * above, the prompt alone cut to max_len too (sentence-transformers
 * measures it under the same max_seq_length). */
qac_status qac_model_prompt_skip(const qac_model *m, const char *prompt, int max_len, int *skip);
/* [CLS] prompt+text [SEP], cut on the right to max_len (as
 * qac_tokenizer_encode; prompt NULL or "" tokenises text alone). */
qac_status qac_model_encode_prompted(const qac_model *m, const char *prompt, const char *text, size_t len,
                                     int max_len, int32_t *ids, int *n);

/* Recompute m->fingerprint after changing parameters, pooling, normalize or
 * max_seq_len in memory; equals the fingerprint of the directory that
 * qac_model_save (F32) then writes. */
void qac_model_update_fingerprint(qac_model *m);

#ifdef __cplusplus
}
#endif
#endif
