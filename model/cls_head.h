/* The sequence-classification head of a cross-encoder (api/qac_xenc.h):
 * Hugging Face's BertPooler and the classification layer of
 * BertForSequenceClassification, on the encoder's last-layer [CLS] states,
 * forward beside backward. Plain functions over flat row-major arrays;
 * every output element is one chain summed in double in a fixed order, so
 * a pair's logits do not depend on the batch, and the parameter gradients
 * sum their rows in row order (any thread count gives the same bits).
 *
 *   pooled [B,C] = tanh(cls [B,C] Wp^T + bp)          (BertPooler)
 *   kept   [B,C] = dropout(pooled)                    (classifier_dropout,
 *                  else hidden_dropout_prob; training only)
 *   logits [B,NL] = kept Wc^T + bc                    (classifier)
 *
 * ModernBERT's head (mode QAC_CLS_HEAD_MODERNBERT: forward only, for
 * scoring) puts its prediction head where the pooler is:
 *
 *   pooled [B,C] = LayerNorm(act(cls Wd^T + bd)) * g + beta
 *                  (act: gelu, erf form, or its tanh form)
 *   logits [B,NL] = pooled Wc^T + bc
 *
 * (cls then is the pooled last layer, CLS or mean as its config says).
 *
 * Dropout draws its masks as the encoder's (bert_cpu.h) at layer
 * num_layers (one past the encoder's last), site QAC_DROP_EMB, position 0
 * of each pair: no mask of the encoder's is reused. */
#ifndef QAC_CLS_HEAD_H
#define QAC_CLS_HEAD_H

#include "bert_cpu.h"

typedef struct qac_cls_head {
    const float *pool_w; /* [C, C] */
    const float *pool_b; /* [C] */
    const float *w;      /* [NL, C] */
    const float *b;      /* [NL] */
    int C, NL;
    int drop_layer;      /* the layer index the dropout masks are drawn at: the encoder's num_layers */
    int mode;            /* QAC_CLS_HEAD_TANH (zero: BERT's and RoBERTa's) or QAC_CLS_HEAD_MODERNBERT */
    const float *norm_w, *norm_b; /* [C] each: ModernBERT's head norm */
    float norm_eps;
    int gelu_tanh;       /* ModernBERT: the tanh form of gelu */
} qac_cls_head;

#define QAC_CLS_HEAD_TANH 0
#define QAC_CLS_HEAD_MODERNBERT 1

/* cls [B,C] (row b: pair b's [CLS] state) -> logits [B,NL]; pooled and kept
 * [B,C] receive the pooler's output and what the classifier read (kept may
 * equal pooled when drop is NULL or off). */
void qac_cls_head_forward(float *logits, float *pooled, float *kept, const float *cls, const qac_cls_head *h,
                          const qac_dropout *drop, int B);

/* From dlogits [B,NL] (mode QAC_CLS_HEAD_TANH only): dcls [B,C] (written), and += into dpool_w [C,C],
 * dpool_b [C], dw [NL,C], db [NL]. pooled and kept as the forward left
 * them; scratch holds B * C floats. */
void qac_cls_head_backward(float *dcls, float *dpool_w, float *dpool_b, float *dw, float *db, const float *dlogits,
                           const float *pooled, const float *kept, const float *cls, const qac_cls_head *h,
                           const qac_dropout *drop, int B, float *scratch);

#endif
