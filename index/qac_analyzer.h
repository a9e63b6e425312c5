/* English analyzer for BM25, modelled on Lucene's EnglishAnalyzer (the one
 * Anserini's DefaultEnglishAnalyzer builds): tokenize, drop a trailing
 * possessive 's, lower-case, remove Lucene's 33 English stopwords, Porter
 * stem exactly as Lucene's PorterStemFilter (index/porter.c; Snowball's
 * "porter" differs: "analogy" -> "analogi", "possibly" -> "possibli", "us"
 * -> "u"). tests/bm25/anserini_compare.py checks tokens and rankings against
 * Anserini itself.
 *
 * Tokenisation follows the word rules of UAX#29 that matter for English
 * text, over Unicode general categories from utf8proc:
 *   - a token is a run of letters (L*, plus combining marks M* inside a
 *     token), digits (N*) and connector punctuation such as '_' (Pc);
 *   - letter MID letter stays one token when MID is an apostrophe (' U+2019),
 *     '.', ':' or U+00B7 ("don't", "u.s.a", "john's");
 *   - digit MID digit stays one token when MID is '.', ',', ';' or an
 *     apostrophe ("3.5", "1,000");
 *   - Han ideographs and Hiragana are one token per character;
 *   - everything else (spaces, symbols, other punctuation, invalid UTF-8
 *     bytes) separates tokens; tokens longer than 255 code points are split.
 * Differences from Lucene's StandardTokenizer (full UAX#29, JFlex): no
 * special handling of Katakana, Hebrew letter rules, emoji sequences,
 * regional indicators or format characters (U+200D etc. separate here), and
 * trailing marks after a separator start no token. On English and ASCII
 * text (MS MARCO, BEIR, Cranfield) the tokens are the same.
 *
 * Ownership: an analyzer holds a stemmer and scratch buffers; it is not
 * thread-safe, so use one per thread. Free with qac_analyzer_free (NULL ok). */
#ifndef QAC_ANALYZER_H
#define QAC_ANALYZER_H

#include <stddef.h>
#include <stdint.h>

#include "qac_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever the analyzer's output could change; stored in indexes so
 * an index is never searched with a different analysis. */
#define QAC_ANALYZER_VERSION 2u

typedef struct qac_analyzer qac_analyzer;

/* Called once per output token; `tok` (UTF-8, not NUL-terminated) is borrowed
 * for the duration of the call. Return non-zero to stop early. */
typedef int (*qac_token_fn)(void *user, const char *tok, size_t len);

qac_status qac_analyzer_create(qac_analyzer **out);
void qac_analyzer_free(qac_analyzer *a);

/* Cache up to `entries` (rounded up to a power of two) word -> stem
 * results; speeds up analysing large corpora, never changes the output. */
qac_status qac_analyzer_enable_cache(qac_analyzer *a, size_t entries);

/* Analyze len bytes of text. Never fails on bad UTF-8 (bad bytes separate
 * tokens); returns an error only when memory runs out. */
qac_status qac_analyzer_run(qac_analyzer *a, const char *text, size_t len, qac_token_fn fn, void *user);

/* Porter-stem w[0..len) (lower-case code points) in place, as Lucene's
 * PorterStemmer does; returns the stem's length (never more than len). */
int qac_porter_stem(int32_t *w, int len);

/* Whether a lower-cased word is in the stopword set. */
int qac_analyzer_is_stopword(const char *w, size_t len);

#ifdef __cplusplus
}
#endif
#endif
