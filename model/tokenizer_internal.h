/* Internals shared by the tokenizer sources (not installed, not public). */
#ifndef QAC_TOKENIZER_INTERNAL_H
#define QAC_TOKENIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "qac_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Decode one code point at s[0..len) the way Python's
 * bytes.decode("utf-8", errors="replace") does: an invalid sequence yields
 * U+FFFD and consumes its maximal valid prefix (at least one byte). Returns
 * the number of bytes consumed (>= 1); len must be >= 1. */
int qac_utf8_decode(const unsigned char *s, size_t len, uint32_t *cp);
/* Encode cp into out (4 bytes room); returns the byte count. */
int qac_utf8_encode(uint32_t cp, char *out);

/* HF tokenizers' view of code point c where its Unicode tables differ from
 * libutf8proc's (wordpiece_unicode.h): returns 1 and whether BertNormalizer
 * drops it, whether it is punctuation, and (out may be NULL) what it becomes
 * with accents stripped and/or lower-cased; 0 when utf8proc agrees with HF. */
int qac_wp_uni_override(uint32_t c, int strip, int lower, int *drop, int *punct, const uint32_t **out, int *n_out);

/* ---- WordPiece (wordpiece.c) ---- */
typedef struct qac_wordpiece qac_wordpiece;

typedef struct qac_wp_options {
    int lowercase, strip_accents, chinese_chars;
    const char *special[5]; /* raw strings matched before normalisation (HF added tokens); NULL = none */
    const char *unk_token;
} qac_wp_options;

qac_status qac_wp_load(qac_wordpiece **out, const char *vocab_path, const qac_wp_options *opt);
void qac_wp_free(qac_wordpiece *wp);
int qac_wp_vocab_size(const qac_wordpiece *wp);
const char *qac_wp_id_to_token(const qac_wordpiece *wp, int32_t id);
int32_t qac_wp_token_to_id(const qac_wordpiece *wp, const char *tok, size_t len);
/* Tokenize text; writes at most cap ids, returns the number of tokens seen.
 * Stops early once `stop` tokens were produced (stop < 0: never). */
int qac_wp_tokenize(const qac_wordpiece *wp, const char *text, size_t len, int32_t *ids, int cap,
                    int stop);
/* The same, and each token's source byte range [start, stop) in offs[2i],
 * offs[2i + 1] (offs may be NULL). */
int qac_wp_tokenize_offsets(const qac_wordpiece *wp, const char *text, size_t len, int32_t *ids, int32_t *offs,
                            int cap, int stop);

/* ---- SentencePiece shim (sp_tokenizer.cpp): translation only ---- */
typedef struct qac_sp qac_sp;
qac_status qac_sp_load(qac_sp **out, const char *model_path);
void qac_sp_free(qac_sp *sp);
int qac_sp_vocab_size(const qac_sp *sp);
/* Borrowed piece string (lives as long as sp); NULL if out of range. */
const char *qac_sp_id_to_piece(const qac_sp *sp, int32_t id);
/* Id of a piece, -1 if the model does not have it. */
int32_t qac_sp_piece_to_id(const qac_sp *sp, const char *piece);
int32_t qac_sp_unk_id(const qac_sp *sp);
int32_t qac_sp_pad_id(const qac_sp *sp);
float qac_sp_score(const qac_sp *sp, int32_t id);
/* The model file's protobuf bytes (malloc'd), for what the API does not expose. */
qac_status qac_sp_serialized(const qac_sp *sp, char **bytes, size_t *len);
/* Encode valid UTF-8 text; writes at most cap ids and sets *n to the count. */
qac_status qac_sp_encode(const qac_sp *sp, const char *text, size_t len, int32_t *ids, int cap,
                         int *n);
/* Text of ids (control pieces decode to nothing); *text is malloc'd. */
qac_status qac_sp_decode(const qac_sp *sp, const int32_t *ids, int n, char **text);

#ifdef __cplusplus
}
#endif
#endif
