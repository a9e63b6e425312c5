/* Tokenizers behind one interface: WordPiece (BERT vocab.txt), SentencePiece
 * (a .model file, through libsentencepiece), and Hugging Face tokenizer.json
 * files (byte-level BPE, Unigram, WordPiece, WordLevel with their
 * normalizers, pre-tokenizers, post-processors and added tokens), which also
 * serve RoBERTa's vocab.json + merges.txt and XLM-R's sentencepiece.bpe.model
 * (fairseq's ids). Ids equal what transformers' AutoTokenizer gives for the
 * same directory.
 *
 * Ownership: qac_tokenizer_load returns a handle the caller frees with
 * qac_tokenizer_free (NULL is accepted). A loaded tokenizer is immutable, so
 * every encode function may be called from many threads at once.
 *
 * Invalid UTF-8: each byte that does not start a valid UTF-8 sequence (or an
 * overlong / surrogate / out-of-range sequence) is decoded as U+FFFD, exactly
 * like Python's bytes.decode("utf-8", errors="replace"), then tokenized as
 * usual. The encoders never fail or crash on arbitrary bytes. */
#ifndef QAC_TOKENIZER_H
#define QAC_TOKENIZER_H

#include "qac_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qac_tokenizer qac_tokenizer;

typedef enum qac_tokenizer_kind {
    QAC_TOKENIZER_WORDPIECE = 0,     /* vocab.txt, or a tokenizer.json WordPiece model */
    QAC_TOKENIZER_SENTENCEPIECE = 1, /* a plain SentencePiece .model through libsentencepiece */
    QAC_TOKENIZER_BPE = 2,           /* tokenizer.json or vocab.json + merges.txt (RoBERTa, ModernBERT) */
    QAC_TOKENIZER_UNIGRAM = 3,       /* tokenizer.json Unigram, or XLM-R's sentencepiece.bpe.model */
    QAC_TOKENIZER_WORDLEVEL = 4
} qac_tokenizer_kind;

typedef struct qac_special_ids {
    int32_t cls, sep, pad, unk, mask; /* -1 where the vocabulary lacks one */
    int32_t bos, eos;                 /* RoBERTa / XLM-R: <s> and </s> (the same ids as cls and sep) */
} qac_special_ids;

/* Load from a model directory, choosing as transformers' AutoTokenizer
 * does: tokenizer_config.json's tokenizer_class, else config.json's
 * model_type, decides the family.
 *   XLMRobertaTokenizer: sentencepiece.bpe.model (preferred) or
 *     tokenizer.json, as transformers builds it (Precompiled charsmap,
 *     whitespace split, Metaspace, Unigram; fairseq's ids);
 *   RobertaTokenizer: tokenizer.json or vocab.json + merges.txt;
 *   BertTokenizer, or no class: vocab.txt (+ tokenizer_config.json for
 *     do_lower_case / strip_accents / tokenize_chinese_chars) as WordPiece,
 *     else tokenizer.json;
 *   any other class (ModernBERT's PreTrainedTokenizerFast): tokenizer.json
 *     as written;
 *   without those, a plain SentencePiece model (spiece.model,
 *     sentencepiece.bpe.model, tokenizer.model) through libsentencepiece.
 * Specials come from special_tokens_map.json / tokenizer_config.json, else
 * the vocabulary's [CLS]/<s>, [SEP]/</s>, [PAD]/<pad>, [UNK]/<unk> and
 * [MASK]/<mask>. A directory with none of the files: QAC_ERR_NOT_FOUND
 * naming the files found. */
qac_status qac_tokenizer_load(qac_tokenizer **out, const char *model_dir);
/* A tokenizer from the text of a tokenizer.json (as a directory holding
 * only that file would give); `what` names it in error messages. */
qac_status qac_tokenizer_from_json(qac_tokenizer **out, const char *json, size_t len, const char *what);
void qac_tokenizer_free(qac_tokenizer *t);

qac_tokenizer_kind qac_tokenizer_get_kind(const qac_tokenizer *t);
/* "wordpiece", "sentencepiece", "bpe", "unigram" or "wordlevel". */
const char *qac_tokenizer_kind_name(const qac_tokenizer *t);
/* Where the tokenizer came from and how it was built, e.g.
 * "tokenizer.json: BPE (byte-level), as RobertaTokenizer" (lives as long as t). */
const char *qac_tokenizer_describe(const qac_tokenizer *t);
/* 1 when qac_tokenizer_tokenize_offsets works (all but plain SentencePiece). */
int qac_tokenizer_has_offsets(const qac_tokenizer *t);
/* Special tokens the model's template adds to one sequence (pair 0) or a
 * pair (pair 1): BERT 2 and 3, RoBERTa / XLM-R 2 and 4 (HF's
 * num_special_tokens_to_add). */
int qac_tokenizer_num_special(const qac_tokenizer *t, int pair);
int qac_tokenizer_vocab_size(const qac_tokenizer *t);
qac_special_ids qac_tokenizer_specials(const qac_tokenizer *t);
/* Token string of an id (borrowed, lives as long as t), NULL if out of range. */
const char *qac_tokenizer_id_to_token(const qac_tokenizer *t, int32_t id);
/* Id of an exact token string, -1 if absent. */
int32_t qac_tokenizer_token_to_id(const qac_tokenizer *t, const char *token);

/* Tokenize without special tokens. Writes at most `cap` ids into `ids` and
 * sets *n to the full count (which may exceed cap). */
qac_status qac_tokenizer_tokenize(const qac_tokenizer *t, const char *text, size_t len,
                                  int32_t *ids, int cap, int *n);

/* qac_tokenizer_tokenize, and each token's source bytes [start, stop) in
 * offs[2i], offs[2i + 1] (offs holds 2 * cap entries), as Hugging Face's
 * tokenizers give byte offsets (a special token written in the text: where
 * it is written; byte-level BPE trims a token's spaces as its
 * post-processor does). A plain SentencePiece model has none:
 * QAC_ERR_UNSUPPORTED. */
qac_status qac_tokenizer_tokenize_offsets(const qac_tokenizer *t, const char *text, size_t len, int32_t *ids,
                                          int32_t *offs, int cap, int *n);

/* Text of token ids, as Hugging Face's tokenizers decode them: WordPiece
 * puts a space before each token but the first and a "##" continuation,
 * then applies the decoder's clean-up (" ." -> "." and the like) token by
 * token; SentencePiece decodes through libsentencepiece; a tokenizer.json
 * runs its decoder (ByteLevel, Metaspace, ...). skip_special drops the
 * special tokens ([CLS] [SEP] [PAD] [UNK] [MASK], their SentencePiece
 * counterparts, or the added tokens marked special). Ids outside the
 * vocabulary are skipped, as tokenizers does. *text is malloc'd,
 * NUL-terminated. */
qac_status qac_tokenizer_decode(const qac_tokenizer *t, const int32_t *ids, int n, int skip_special, char **text);

/* Single sequence with the model's template (BERT and ModernBERT:
 * [CLS] tokens [SEP]; RoBERTa and XLM-R: <s> tokens </s>), tokens truncated
 * from the right so that the total is <= max_len (max_len >= 2 and at least
 * the template's specials). `ids` must hold max_len entries. Same ids as HF
 * AutoTokenizer(text, truncation=True, max_length=max_len). For vocab.txt
 * and plain SentencePiece models a special the vocabulary lacks (-1) is
 * left out. */
qac_status qac_tokenizer_encode(const qac_tokenizer *t, const char *text, size_t len, int max_len,
                                int32_t *ids, int *n);
/* The same, and whether the text was cut (*truncated = 1: it has more
 * tokens than max_len holds). */
qac_status qac_tokenizer_encode_cut(const qac_tokenizer *t, const char *text, size_t len, int max_len,
                                    int32_t *ids, int *n, int *truncated);

/* qac_tokenizer_encode of prompt + text as one string, the way
 * sentence-transformers applies a prompt (prompt NULL or "": text alone). */
qac_status qac_tokenizer_encode_prompted(const qac_tokenizer *t, const char *prompt, const char *text, size_t len,
                                         int max_len, int32_t *ids, int *n);
/* The same, and whether the whole was cut (as qac_tokenizer_encode_cut). */
qac_status qac_tokenizer_encode_prompted_cut(const qac_tokenizer *t, const char *prompt, const char *text,
                                             size_t len, int max_len, int32_t *ids, int *n, int *truncated);

/* Pair with the model's pair template: BERT [CLS] a [SEP] b [SEP] (token
 * types 0 then 1), RoBERTa / XLM-R <s> a </s></s> b </s> (all type 0),
 * ModernBERT [CLS] a [SEP] b [SEP]; truncation is HF's "longest_first".
 * `ids` and `type_ids` (may be NULL) must hold max_len entries (max_len >= 3
 * and at least the template's specials). An empty b (blen == 0) gives the
 * single-sequence encoding, as HF does for an empty text_pair. */
qac_status qac_tokenizer_encode_pair(const qac_tokenizer *t, const char *a, size_t alen,
                                     const char *b, size_t blen, int max_len, int32_t *ids,
                                     int32_t *type_ids, int *n);

/* The template around already-tokenized sequences (from
 * qac_tokenizer_tokenize): b NULL gives the single template, else the pair
 * template (nb may be 0); too long, they are cut as encode and encode_pair
 * cut them (from the right; longest_first for pairs). `ids` and `type_ids`
 * (may be NULL) must hold max_len entries; `a` may lie inside `ids`. For
 * tokenizing a query once and pairing it with many passages. */
qac_status qac_tokenizer_assemble(const qac_tokenizer *t, const int32_t *a, int na, const int32_t *b, int nb,
                                  int max_len, int32_t *ids, int32_t *type_ids, int *n);

#ifdef __cplusplus
}
#endif
#endif
