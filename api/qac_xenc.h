/* Cross-encoders (rerankers): the BERT encoder over a text pair
 * ([CLS] query [SEP] passage [SEP], token types 0 and 1: api/qac_pair.h),
 * its pooler (dense + tanh on the last layer's [CLS]) and a classification
 * layer, as Hugging Face's BertForSequenceClassification computes them:
 *
 *     pooled = tanh(h_cls Wp^T + bp),   logits = pooled Wc^T + bc.
 *
 * One logit or two. The ranking score ("raw") is the logit, or with two
 * labels l1 - l0 (the log-odds of label 1); the probability TEI returns
 * without raw_scores is sigmoid(logit), or with two labels softmax(l)[1]
 * (the same number: sigmoid(l1 - l0)). sentence-transformers' CrossEncoder
 * applies its own activation function to every logit (qac_xenc_activate).
 *
 * The encoder is the same one the bi-encoder runs (qac_encoder: CPU or
 * CUDA, with token types), so every precision and model family of the
 * encoder applies; the pooler and classifier are a head on its output.
 *
 * Checkpoints, read and written:
 *   - Hugging Face BertForSequenceClassification: config.json with
 *     "architectures" [...ForSequenceClassification], "id2label" /
 *     "label2id" (their count is num_labels), the tensors "bert.*" (the
 *     pooler as "bert.pooler.dense.*") and "classifier.weight" [NL, C],
 *     "classifier.bias" [NL];
 *   - sentence-transformers' CrossEncoder, both layouts: version 4 and 5
 *     (config.json "sentence_transformers": {"activation_fn": ...}) and
 *     version 6 (modules.json with a Transformer alone and
 *     config_sentence_transformers.json {"model_type": "CrossEncoder",
 *     "activation_fn": ...}); before version 4, config.json
 *     "sbert_ce_default_activation_function". Without one: sigmoid for
 *     one label, identity for two (CrossEncoder's defaults).
 * qac writes config.json with both of the first two and
 * config_sentence_transformers.json with the activation: transformers,
 * and every CrossEncoder version from 4 on, load it.
 *   - the other families' sequence-classification heads, read for
 *     scoring (qac_xenc_load) only:
 *       RobertaForSequenceClassification / XLMRobertaForSequenceClassification:
 *       the tensors "roberta.*" and "classifier.dense.*" (C x C, tanh) then
 *       "classifier.out_proj.*" [NL, C], on the <s> state: the same math
 *       as BERT's pooler and classifier, read into them;
 *       ModernBertForSequenceClassification: "model.*", the last layer
 *       (after its final norm) pooled as config.json "classifier_pooling"
 *       says ("cls": the first token, "mean": every token of the pair),
 *       then "head.dense" (C x C, a bias when "classifier_bias"),
 *       "classifier_activation" (gelu, or gelu_new / gelu_pytorch_tanh),
 *       "head.norm" (LayerNorm of "norm_eps", a bias when "norm_bias"),
 *       then "classifier.*" [NL, C].
 *     Training (qac_xenc_open with a head to start, qac_xenc_save) is
 *     BERT's head only: the others are QAC_ERR_UNSUPPORTED naming it.
 * Pair length: sentence_bert_config.json "max_seq_length", else
 * tokenizer_config.json "model_max_length", within the positions
 * (max_position_embeddings, less RoBERTa's padding offset: 512 of 514)
 * (what CrossEncoder truncates at).
 *
 * Ownership: a qac_xenc owns its encoder model (x->bert) and head; a
 * qac_reranker borrows the qac_xenc (free the reranker first). A reranker,
 * like an encoder, serves one caller at a time. */
#ifndef QAC_XENC_H
#define QAC_XENC_H

#include "qac_common.h"
#include "qac_encoder.h"
#include "qac_model.h"
#include "qac_pair.h"

#ifdef __cplusplus
extern "C" {
#endif

/* sentence-transformers' activation_fn, by its torch class. */
typedef enum qac_xenc_act {
    QAC_XACT_SIGMOID = 0,  /* torch.nn.modules.activation.Sigmoid */
    QAC_XACT_IDENTITY = 1, /* torch.nn.modules.linear.Identity */
    QAC_XACT_TANH = 2      /* torch.nn.modules.activation.Tanh */
} qac_xenc_act;

/* The sequence-classification head's layout (above). */
typedef enum qac_xenc_head {
    QAC_XHEAD_BERT = 0,      /* pooler (dense + tanh) + classifier: BertForSequenceClassification */
    QAC_XHEAD_ROBERTA = 1,   /* classifier.dense (+ tanh) + classifier.out_proj: the same math */
    QAC_XHEAD_MODERNBERT = 2 /* pooling, head.dense + activation + head.norm, classifier */
} qac_xenc_head;

typedef struct qac_xenc {
    qac_model *bert;      /* owned: pooling CLS, not normalised; its pooler_w, pooler_b are the head's pooler */
    int num_labels;       /* 1 or 2 */
    float *cls_mem;       /* num_labels * (C + 1) floats: */
    float *cls_w, *cls_b; /* views: classifier weight [NL, C], bias [NL] */
    qac_xenc_act activation;
    int max_len;          /* pair length, specials included */
    float classifier_dropout; /* config.json "classifier_dropout"; -1 when null (training then uses the hidden dropout) */
    char *labels[2];      /* id2label (NULL: LABEL_i) */
    qac_xenc_head head;   /* the head's layout */
    /* QAC_XHEAD_MODERNBERT's head (NULL otherwise): dense [C, C] and bias
     * [C] (zeros without classifier_bias), norm weight and bias [C] (zeros
     * without norm_bias), in one allocation (mhead_mem) */
    float *mhead_mem, *mhead_w, *mhead_b, *mnorm_w, *mnorm_b;
    float mnorm_eps;
    int mgelu_tanh;       /* classifier_activation gelu_new / gelu_pytorch_tanh (else gelu, erf) */
    char fingerprint[17]; /* XXH64 of the encoder's fingerprint, the head and the activation (16 hex digits) */
} qac_xenc;

/* Read a cross-encoder directory (above). A directory without
 * "classifier.weight" is QAC_ERR_NOT_FOUND saying to train one
 * (qac finetune --cross-encoder) from it. */
qac_status qac_xenc_load(qac_xenc **out, const char *dir);
/* Start a reranker from any BERT checkpoint: a cross-encoder as it is, else
 * the encoder with a fresh classifier of num_labels (1 or 2) drawn as
 * transformers initialises it (N(0, 0.02) from seed, bias 0) and the
 * checkpoint's pooler (drawn the same way when it has none). *fresh (may be
 * NULL) says which: 0 read, 1 classifier fresh, 2 pooler fresh too. */
qac_status qac_xenc_open(qac_xenc **out, const char *dir, int num_labels, uint64_t seed, int *fresh);
/* Write an HF / sentence-transformers directory (above), F32 weights;
 * crash-safe per file, config.json last. */
qac_status qac_xenc_save(const qac_xenc *x, const char *dir);
void qac_xenc_free(qac_xenc *x);
/* Recompute x->fingerprint (and the encoder's) after changing parameters. */
void qac_xenc_update_fingerprint(qac_xenc *x);

/* "sigmoid", "identity", "tanh"; and the torch class name that
 * sentence-transformers writes. */
const char *qac_xenc_act_name(qac_xenc_act a);
const char *qac_xenc_act_torch(qac_xenc_act a);
/* A torch class path ("torch.nn.modules.activation.Sigmoid", ...) or a
 * short name; other classes are QAC_ERR_UNSUPPORTED naming them. */
qac_status qac_xenc_act_parse(const char *name, qac_xenc_act *out);

/* From the logits [n, NL]: the ranking score (raw), the probability TEI
 * gives without raw_scores, and CrossEncoder.predict's activated logits
 * (out [n, NL]). */
void qac_xenc_raw_scores(const qac_xenc *x, const float *logits, int n, float *out);
void qac_xenc_probabilities(const qac_xenc *x, const float *logits, int n, float *out);
/* The same for logits of num_labels (1 or 2) each, without the model. */
void qac_logits_raw(int num_labels, const float *logits, int n, float *out);
void qac_logits_probability(int num_labels, const float *logits, int n, float *out);
void qac_xenc_activate(const qac_xenc *x, const float *logits, int n, float *out);

/* ---- scoring ---- */

typedef struct qac_reranker qac_reranker;

/* An encoder for x->bert with opts (NULL: defaults), and the head. */
qac_status qac_reranker_create(qac_reranker **out, const qac_xenc *x, const qac_encoder_opts *o);
void qac_reranker_free(qac_reranker *r);
const qac_xenc *qac_reranker_model(const qac_reranker *r);
qac_device qac_reranker_device(const qac_reranker *r);
/* The encoder under the head: its precision (qac_encoder_cpu_precision) and
 * why it differs from the one asked for (qac_encoder_cpu_note). */
const qac_encoder *qac_reranker_encoder(const qac_reranker *r);
/* The pair options a call uses when given NULL: the model's max_len,
 * longest_first, right. */
qac_pair_opts qac_reranker_default_pair_opts(const qac_reranker *r);
/* Pairs cut since the reranker was made (for summaries: truncation is
 * never silent). */
int64_t qac_reranker_truncated(const qac_reranker *r);
/* A cancel hook asked while pairs are assembled (every 256) and between
 * the encoder's batches and layers (as qac_encoder_set_cancel): a call it
 * stops returns QAC_ERR_CANCELLED and the reranker stays usable. fn NULL:
 * none. */
void qac_reranker_set_cancel(qac_reranker *r, qac_encoder_cancel_fn fn, void *user);

/* Logits [n, NL] of the pairs (queries[i], passages[i]) (lens may be NULL:
 * NUL-terminated). The pairs are assembled with po (NULL: the defaults
 * above; max_len above the model's is lowered to it). On the CPU a pair's
 * logits are the same bits whatever else is in the call. */
qac_status qac_reranker_logits(qac_reranker *r, const char *const *queries, const size_t *qlens,
                               const char *const *passages, const size_t *plens, int n, const qac_pair_opts *po,
                               float *logits);
/* One query against n passages: its tokens are computed once. */
qac_status qac_reranker_logits_one(qac_reranker *r, const char *query, size_t qlen, const char *const *passages,
                                   const size_t *plens, int n, const qac_pair_opts *po, float *logits);
/* Pairs already tokenized (qac_pair_assemble_with): ids[i], types[i] of lens[i]. */
qac_status qac_reranker_logits_ids(qac_reranker *r, const int32_t *const *ids, const int32_t *const *types,
                                   const int *lens, int n, float *logits);

#ifdef __cplusplus
}
#endif
#endif
