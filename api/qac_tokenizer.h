/* Tokenizers: WordPiece (BERT vocab.txt) in C and SentencePiece (a .model
 * file, through libsentencepiece), behind one interface.
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
    QAC_TOKENIZER_WORDPIECE = 0,
    QAC_TOKENIZER_SENTENCEPIECE = 1
} qac_tokenizer_kind;

typedef struct qac_special_ids {
    int32_t cls, sep, pad, unk, mask; /* -1 where the vocabulary lacks one */
} qac_special_ids;

/* Load from a model directory. vocab.txt (+ tokenizer_config.json for
 * do_lower_case / strip_accents / tokenize_chinese_chars) selects WordPiece;
 * otherwise a SentencePiece model file (spiece.model, sentencepiece.bpe.model
 * or tokenizer.model) selects SentencePiece, whose specials come from
 * special_tokens_map.json / tokenizer_config.json, else the model's
 * [CLS]/<s>, [SEP]/</s>, <pad>, unk and [MASK]/<mask> pieces. */
qac_status qac_tokenizer_load(qac_tokenizer **out, const char *model_dir);
void qac_tokenizer_free(qac_tokenizer *t);

qac_tokenizer_kind qac_tokenizer_get_kind(const qac_tokenizer *t);
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
 * offs[2i], offs[2i + 1] (offs holds 2 * cap entries): the widest range of
 * the characters the token came from, as Hugging Face's tokenizers give
 * byte offsets (a special token written in the text: where it is written).
 * WordPiece only; SentencePiece is QAC_ERR_UNSUPPORTED. */
qac_status qac_tokenizer_tokenize_offsets(const qac_tokenizer *t, const char *text, size_t len, int32_t *ids,
                                          int32_t *offs, int cap, int *n);

/* Text of token ids, as Hugging Face's tokenizers decode them: WordPiece
 * puts a space before each token but the first and a "##" continuation,
 * then applies the decoder's clean-up (" ." -> "." and the like) token by
 * token; SentencePiece decodes through libsentencepiece. skip_special
 * drops the special tokens ([CLS] [SEP] [PAD] [UNK] [MASK] or their
 * SentencePiece counterparts). Ids outside the vocabulary are skipped, as
 * tokenizers does. *text is malloc'd, NUL-terminated. */
qac_status qac_tokenizer_decode(const qac_tokenizer *t, const int32_t *ids, int n, int skip_special, char **text);

/* Single sequence with specials: [CLS] tokens [SEP], tokens truncated from
 * the right so that the total is <= max_len (max_len >= 2). `ids` must hold
 * max_len entries. Same ids as HF BertTokenizerFast(text, truncation=True,
 * max_length=max_len). A special the vocabulary lacks (-1) is left out. */
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

/* Pair: [CLS] a [SEP] b [SEP], with token type 0 for the first segment and 1
 * for the second; truncation is HF's "longest_first". `ids` and `type_ids`
 * (may be NULL) must hold max_len entries (max_len >= 3). An empty b
 * (blen == 0) gives the single-sequence encoding, as HF does for an empty
 * text_pair. */
qac_status qac_tokenizer_encode_pair(const qac_tokenizer *t, const char *a, size_t alen,
                                     const char *b, size_t blen, int max_len, int32_t *ids,
                                     int32_t *type_ids, int *n);

#ifdef __cplusplus
}
#endif
#endif
