/* Pair inputs for cross-encoders: two texts as one sequence in the
 * tokenizer's pair template, cut to a length by Hugging Face's truncation
 * strategies: BERT's [CLS] a [SEP] b [SEP] with token type 0 over
 * [CLS] a [SEP] and 1 over b [SEP]; RoBERTa's and XLM-R's
 * <s> a </s></s> b </s>, all type 0; a tokenizer.json's TemplateProcessing
 * as written.
 *
 * The texts are tokenized without specials (qac_tokenizer_tokenize) and
 * then assembled here (qac_pair_assemble_with: the tokenizer's template,
 * qac_tokenizer_assemble; qac_pair_assemble: the BERT layout from the
 * special ids alone, one the vocabulary lacks left out). The ids and type
 * ids equal what Hugging Face's tokenizers give a
 * batch of pairs (tokenizer(list_a, list_b, truncation=..., max_length=...),
 * what sentence-transformers' CrossEncoder and TEI feed their models),
 * including an empty b, which still gets its [SEP] ([CLS] a [SEP] [SEP]).
 *
 * Truncation (tokenizers' truncate_encodings, on the text tokens, with the
 * budget max_len minus the specials):
 *   - longest_first: with n1 <= n2 the two lengths (swapped back after),
 *     n2 = max(n1, budget - n1) (n1 itself when n1 > budget), and when
 *     n1 + n2 still exceeds the budget, n1 = budget / 2 and
 *     n2 = n1 + budget % 2;
 *   - only_second / only_first: that text loses what is over; when it has
 *     no more tokens than that, the pair is an error (as Hugging Face's
 *     "sequence to truncate too short");
 *   - none: a pair over max_len is an error.
 * The side: right keeps each text's first tokens, left its last ones. */
#ifndef QAC_PAIR_H
#define QAC_PAIR_H

#include "qac_common.h"
#include "qac_tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qac_truncation {
    QAC_TRUNC_LONGEST_FIRST = 0, /* Hugging Face's default for pairs */
    QAC_TRUNC_ONLY_SECOND = 1,
    QAC_TRUNC_ONLY_FIRST = 2,
    QAC_TRUNC_NONE = 3
} qac_truncation;

typedef enum qac_trunc_side { QAC_TRUNC_RIGHT = 0, QAC_TRUNC_LEFT = 1 } qac_trunc_side;

typedef struct qac_pair_opts {
    int max_len; /* specials included; >= the specials' count + 1 */
    qac_truncation strategy;
    qac_trunc_side side;
} qac_pair_opts;

/* "longest_first", "only_second", "only_first", "none" (also Hugging
 * Face's "do_not_truncate"); QAC_ERR_INVALID naming the choices. */
qac_status qac_truncation_parse(const char *name, qac_truncation *out);
const char *qac_truncation_name(qac_truncation t);
/* "right" / "left" (any case, as TEI's "Right" / "Left"). */
qac_status qac_trunc_side_parse(const char *name, qac_trunc_side *out);

/* The special tokens the BERT layout adds with sp (3 with [CLS] and [SEP]). */
int qac_pair_specials(const qac_special_ids *sp);

/* The lengths a and b keep (*ka, *kb) of na and nb text tokens under o:
 * QAC_ERR_INVALID when the strategy cannot meet max_len. */
qac_status qac_pair_fit(const qac_special_ids *sp, int na, int nb, const qac_pair_opts *o, int *ka, int *kb);

/* Assemble text tokens a [na] and b [nb] in the BERT layout into ids (and
 * types, may be NULL), both holding o->max_len entries; *n the length; *cut
 * (may be NULL) 1 when a token was dropped. */
qac_status qac_pair_assemble(const qac_special_ids *sp, const int32_t *a, int na, const int32_t *b, int nb,
                             const qac_pair_opts *o, int32_t *ids, int32_t *types, int *n, int *cut);

/* The special tokens t's pair template adds (3 for BERT, 4 for RoBERTa
 * and XLM-R). */
int qac_pair_specials_of(const qac_tokenizer *t);

/* qac_pair_assemble with t's pair template (any family). */
qac_status qac_pair_assemble_with(const qac_tokenizer *t, const int32_t *a, int na, const int32_t *b, int nb,
                                  const qac_pair_opts *o, int32_t *ids, int32_t *types, int *n, int *cut);

/* Tokenize a and b with t and assemble them with t's template. */
qac_status qac_pair_encode(const qac_tokenizer *t, const char *a, size_t alen, const char *b, size_t blen,
                           const qac_pair_opts *o, int32_t *ids, int32_t *types, int *n, int *cut);

#ifdef __cplusplus
}
#endif
#endif
