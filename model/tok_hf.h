/* Internal: the Hugging Face `tokenizers` pipeline (what a tokenizer.json
 * describes) in C, for the tokenizer interface in tokenizer.c.
 *
 * One encode runs HF's stages in HF's order:
 *   added tokens that match the raw text (normalized: false) are cut out;
 *   the rest is normalized (tok_norm.c, tok_precompiled.c);
 *   added tokens that match the normalized text are cut out;
 *   the rest is pre-tokenized into pieces (tok_pretok.c, tok_regex.c);
 *   the model turns each piece into tokens (tok_models.c, tok_bpe.c);
 *   offsets are trimmed as the ByteLevel / RoBERTa post-processors do.
 * tokenizer.c then truncates and adds the template's special tokens.
 *
 * Text moves through the stages as tk_str: normalized bytes and, for every
 * byte, the byte range of the original text it came from (HF's
 * NormalizedString alignments), so every token knows its source bytes.
 * All per-call memory comes from one arena, freed once at the end; a loaded
 * pipeline is never written to, so encodes may run on many threads. */
#ifndef QAC_TOK_HF_H
#define QAC_TOK_HF_H

#include <stddef.h>
#include <stdint.h>

#include "qac_common.h"
#include "tokenizer_internal.h"

/* ---------- per-call memory ---------- */

typedef struct tk_chunk tk_chunk;
typedef struct tk_arena {
    tk_chunk *head;
    int oom; /* an allocation failed: the call reports QAC_ERR_NOMEM */
} tk_arena;

void *tk_alloc(tk_arena *a, size_t n); /* 8-byte aligned; NULL (and oom set) on failure */
void tk_arena_free(tk_arena *a);

/* ---------- text with alignments ---------- */

typedef struct tk_span {
    uint32_t a, b;
} tk_span;

typedef struct tk_str {
    const char *s;      /* normalized bytes (valid UTF-8) */
    const tk_span *al;  /* [n] original range of each byte */
    uint32_t n;
    uint32_t o0, o1;    /* original range the piece covers */
    uint8_t bytes;      /* ByteLevel applied lazily: each byte stands for its byte-alphabet character */
} tk_str;

/* One character of a transformation, as HF's NormalizedString::transform
 * takes it: change 0 replaces a character, +1 inserts one, -N replaces one
 * and removes the N that follow. */
typedef struct tk_change {
    uint32_t cp;
    int32_t change;
} tk_change;

/* Replace bytes [from, to) of *st by the characters ch (HF transform_range
 * over a normalized range, initial_offset characters removed first). */
int tk_transform(tk_arena *ar, tk_str *st, uint32_t from, uint32_t to, const tk_change *ch, size_t nch,
                 size_t initial_offset);
tk_str tk_slice(const tk_str *st, uint32_t from, uint32_t to);
/* The original range of normalized bytes [a, b) (HF convert_offsets). */
tk_span tk_original(const tk_str *st, uint32_t a, uint32_t b);

/* A growable list of characters with changes, for building transformations. */
typedef struct tk_changes {
    tk_change *v;
    size_t n, cap;
    tk_arena *ar;
} tk_changes;
int tk_changes_push(tk_changes *c, uint32_t cp, int32_t change);
/* HF's precompiled `replace`: old_count characters become new[] (changes
 * 0, then +1 for extra ones, or the last carrying the removal). */
int tk_changes_replace(tk_changes *c, size_t old_count, const uint32_t *new_cps, size_t new_count);

/* ---------- Unicode, as the Rust crates define it ---------- */

int tk_utf8_next(const char *s, uint32_t n, uint32_t *i); /* decode valid UTF-8 at *i, advance */
int tk_utf8_prev(const char *s, uint32_t i);              /* start of the character before byte i */
int tk_utf8_len(uint32_t cp);
int tk_is_whitespace(uint32_t c);   /* Rust char::is_whitespace (White_Space) */
int tk_is_alphabetic(uint32_t c);   /* Rust char::is_alphabetic, approximated by category */
int tk_is_numeric(uint32_t c);      /* Rust char::is_numeric: Nd Nl No */
int tk_is_alnum(uint32_t c);
int tk_is_word(uint32_t c);         /* regex \w */
int tk_is_punct(uint32_t c);        /* ASCII punctuation or the P* categories, as tokenizers' tables */
int tk_is_letter(uint32_t c);       /* \p{L} */
int tk_is_number(uint32_t c);       /* \p{N} */
int tk_is_control_bert(uint32_t c); /* BertNormalizer's is_control (other categories, \t \n \r excluded) */
int tk_is_mark_nonspacing(uint32_t c);
int tk_is_combining_mark(uint32_t c); /* Mn Mc Me */
int tk_lower(uint32_t c, uint32_t out[3]);  /* Rust to_lowercase; returns the count */
int tk_onig_category(uint32_t c);           /* utf8proc category, L and N as Oniguruma has them */

/* ---------- patterns (Replace, Split) ---------- */

typedef struct tk_regex tk_regex;
/* Compile an Oniguruma-style pattern (the subset tokenizer.json files use). */
qac_status tk_regex_compile(tk_regex **out, const char *pattern, size_t len);
void tk_regex_free(tk_regex *re);
/* Leftmost match at or after byte `from` of s[0..n): 1 and [*a, *b), or 0. */
int tk_regex_find(const tk_regex *re, const char *s, uint32_t n, uint32_t from, uint32_t *a, uint32_t *b);

typedef struct tk_pattern {
    char *str; /* a literal, or NULL for a regex */
    uint32_t len;
    tk_regex *re;
} tk_pattern;

/* One (start, end, is_match) run of a pattern over a string, covering it. */
typedef struct tk_run {
    uint32_t a, b;
    uint8_t match;
} tk_run;
typedef struct tk_runs {
    tk_run *v;
    size_t n, cap;
    tk_arena *ar;
} tk_runs;
int tk_runs_push(tk_runs *r, uint32_t a, uint32_t b, int match);
/* HF Pattern::find_matches of a literal or regex. */
int tk_pattern_runs(const tk_pattern *p, const char *s, uint32_t n, tk_runs *out);

/* ---------- normalizers ---------- */

typedef struct tk_precompiled tk_precompiled;
qac_status tk_precompiled_load(tk_precompiled **out, const unsigned char *blob, size_t len);
void tk_precompiled_free(tk_precompiled *pc);
int tk_precompiled_normalize(const tk_precompiled *pc, tk_arena *ar, tk_str *st);

enum tk_norm_kind {
    TN_SEQUENCE, TN_BERT, TN_NFC, TN_NFD, TN_NFKC, TN_NFKD, TN_LOWERCASE, TN_STRIP, TN_STRIP_ACCENTS,
    TN_REPLACE, TN_PREPEND, TN_PRECOMPILED, TN_NMT, TN_BYTELEVEL
};

typedef struct tk_norm {
    int kind;
    int clean_text, chinese, strip_accents, lowercase; /* BertNormalizer (strip_accents resolved) */
    int left, right;                                   /* Strip */
    tk_pattern pat;                                    /* Replace */
    char *content;                                     /* Replace, Prepend */
    uint32_t content_len;
    tk_precompiled *pc;
    struct tk_norm **kids;
    int n_kids;
} tk_norm;

int tk_normalize(const tk_norm *n, tk_arena *ar, tk_str *st);
void tk_norm_free(tk_norm *n);

/* ---------- pre-tokenizers ---------- */

enum tk_split_behavior { TS_REMOVED, TS_ISOLATED, TS_MERGED_PREV, TS_MERGED_NEXT, TS_CONTIGUOUS };
enum tk_prepend { TK_PREPEND_ALWAYS, TK_PREPEND_FIRST, TK_PREPEND_NEVER };
enum tk_pretok_kind {
    TP_SEQUENCE, TP_BERT, TP_WHITESPACE, TP_WHITESPACE_SPLIT, TP_METASPACE, TP_BYTELEVEL, TP_SPLIT,
    TP_DIGITS, TP_PUNCTUATION, TP_CHAR_DELIMITER
};

typedef struct tk_pretok {
    int kind;
    int behavior;
    int invert;                /* Split */
    int individual_digits;     /* Digits */
    uint32_t replacement;      /* Metaspace: the character; CharDelimiterSplit: the delimiter */
    int prepend_scheme, split; /* Metaspace */
    int add_prefix_space, use_regex; /* ByteLevel */
    tk_pattern pat;            /* Split */
    struct tk_pretok **kids;
    int n_kids;
} tk_pretok;

/* A piece of the pre-tokenized text; id >= 0 marks an added token already cut out. */
typedef struct tk_piece {
    tk_str str;
    int32_t id;
} tk_piece;

typedef struct tk_pieces {
    tk_piece *v;
    size_t n, cap;
    tk_arena *ar;
} tk_pieces;
int tk_pieces_push(tk_pieces *p, tk_str str, int32_t id);

int tk_pretokenize(const tk_pretok *p, tk_arena *ar, tk_pieces *pieces);
void tk_pretok_free(tk_pretok *p);
/* Split a piece by runs with HF's delimiter behaviour, appending to out. */
int tk_split_runs(const tk_str *st, const tk_runs *runs, int behavior, tk_pieces *out);
extern const uint32_t tk_byte_char[256]; /* GPT-2's byte -> character map */
/* Turn a lazily byte-mapped piece into its byte-alphabet characters. */
int tk_materialize_bytes(tk_arena *ar, tk_str *st);

/* ---------- vocabulary, trie ---------- */

typedef struct tk_vocab {
    int n;
    char *pool;
    uint32_t *off, *len;
    int32_t *slots;
    uint32_t *slot_hash, mask;
} tk_vocab;

/* Build from n (string, id) entries (copied). Ids need not be contiguous
 * (an id no entry has reads as NULL); a repeated string keeps its last id,
 * as HF's maps do. */
qac_status tk_vocab_init(tk_vocab *v, int n, const char *const *tok, const uint32_t *len, const int32_t *id);
void tk_vocab_free(tk_vocab *v);
int32_t tk_vocab_find(const tk_vocab *v, const char *s, size_t n);
int32_t tk_vocab_find2(const tk_vocab *v, const char *a, size_t na, const char *b, size_t nb);

typedef struct tk_trie tk_trie; /* byte trie: prefix search for Unigram and added tokens */
qac_status tk_trie_build(tk_trie **out, int n, const char *const *key, const uint32_t *len, const int32_t *value);
void tk_trie_free(tk_trie *t);
/* Walk from the root over s: calls back with (length, value) for every key
 * that is a prefix of s, shortest first; stops when the callback returns
 * nonzero. */
typedef int (*tk_prefix_fn)(void *user, uint32_t len, int32_t value);
void tk_trie_prefixes(const tk_trie *t, const char *s, uint32_t n, tk_prefix_fn fn, void *user);
/* The longest key that is a prefix of s: its length (0: none) and value. */
uint32_t tk_trie_longest(const tk_trie *t, const char *s, uint32_t n, int32_t *value);

/* ---------- models ---------- */

enum tk_model_kind { TM_WORDPIECE, TM_BPE, TM_UNIGRAM, TM_WORDLEVEL };

typedef struct tk_merge_map tk_merge_map;

typedef struct tk_model {
    int kind;
    tk_vocab vocab;
    int32_t unk;               /* -1: none */
    /* WordPiece */
    char *prefix;              /* continuing_subword_prefix (WordPiece, BPE), NULL = none */
    uint32_t prefix_len;
    int max_chars;             /* max_input_chars_per_word */
    /* BPE */
    char *suffix;              /* end_of_word_suffix */
    uint32_t suffix_len;
    int fuse_unk, byte_fallback, ignore_merges;
    tk_merge_map *merges;
    int32_t byte_ids[256];     /* byte_fallback: id of <0xXX>, -1 if absent */
    /* Unigram */
    double *scores;
    double min_score;
    tk_trie *trie;
} tk_model;

/* One token of a sequence: id, original byte range, and its value string
 * (the vocabulary entry, or the text an added token matched). */
typedef struct tk_tok {
    int32_t id;
    tk_span off;
    const char *val;
    uint32_t vlen;
} tk_tok;

typedef struct tk_toks {
    tk_tok *v;
    size_t n, cap;
} tk_toks;
int tk_toks_push(tk_toks *t, int32_t id, tk_span off, const char *val, uint32_t vlen);

/* Tokens of one piece, appended to out (offsets already original). */
int tk_model_tokenize(const tk_model *m, tk_arena *ar, const tk_str *piece, tk_toks *out);
qac_status tk_model_check(tk_model *m); /* resolve ids (unk, byte tokens) after loading */
void tk_model_free(tk_model *m);
const char *tk_model_id_to_token(const tk_model *m, int32_t id, uint32_t *len);

/* BPE (tok_bpe.c) */
qac_status tk_bpe_add_merges(tk_model *m, int n, const char *const *a, const uint32_t *alen, const char *const *b,
                             const uint32_t *blen, int *bad_line);
void tk_bpe_free_merges(tk_merge_map *mm);
int tk_bpe_tokenize(const tk_model *m, tk_arena *ar, const tk_str *piece, tk_toks *out);

/* ---------- added tokens ---------- */

typedef struct tk_added {
    char *content, *norm; /* norm: content normalized (normalized tokens), else NULL */
    uint32_t len, norm_len;
    int32_t id;
    uint8_t single_word, lstrip, rstrip, normalized, special;
} tk_added;

/* ---------- post-processing ---------- */

/* One item of a template: a special token (its ids) or sequence A / B. */
typedef struct tk_tmpl_item {
    int seq;            /* -1: special token, else 0 (A) or 1 (B) */
    int32_t ids[4];     /* special: its ids */
    int n_ids;
    int type_id;
} tk_tmpl_item;

typedef struct tk_template {
    tk_tmpl_item items[16];
    int n;
} tk_template;

/* ---------- decoders ---------- */

enum tk_dec_kind {
    TD_SEQUENCE, TD_BYTELEVEL, TD_METASPACE, TD_WORDPIECE, TD_BPE, TD_REPLACE, TD_STRIP, TD_FUSE,
    TD_BYTE_FALLBACK
};
typedef struct tk_dec {
    int kind;
    uint32_t replacement;
    int prepend_scheme;
    char *prefix, *suffix, *content; /* WordPiece prefix, BPE suffix, Replace content */
    uint32_t prefix_len, suffix_len, content_len;
    int cleanup;
    tk_pattern pat;
    int strip_content, strip_start, strip_stop;
    struct tk_dec **kids;
    int n_kids;
} tk_dec;
void tk_dec_free(tk_dec *d);

/* ---------- the whole pipeline ---------- */

typedef struct tk_pipe {
    tk_added *added;
    int n_added;
    tk_trie *raw_trie, *norm_trie; /* contents of the normalized: false / true added tokens */
    tk_norm *norm;
    tk_pretok *pre;
    tk_model model;
    tk_dec *dec;
    tk_template single, pair;
    int trim_offsets, trim_prefix_space; /* ByteLevel / RoBERTa offset trimming */
    int vocab_total;                     /* model vocabulary plus added tokens */
    char *describe;                      /* e.g. "tokenizer.json: BPE (byte-level)" */
} tk_pipe;

void tk_pipe_free(tk_pipe *p);
/* Finish a pipeline whose parts are set: normalize the added tokens and
 * build their matchers. */
qac_status tk_pipe_finish(tk_pipe *p);
int32_t tk_pipe_token_to_id(const tk_pipe *p, const char *s, size_t n);
const char *tk_pipe_id_to_token(const tk_pipe *p, int32_t id);
int tk_pipe_is_special(const tk_pipe *p, int32_t id);

/* Tokens of one text without specials (ids, original byte offsets). Stops
 * once `stop` tokens exist (stop < 0: never), as HF's tokenize_with_limit. */
qac_status tk_pipe_encode(const tk_pipe *p, const char *text, size_t len, int stop, tk_toks *out);
qac_status tk_pipe_decode(const tk_pipe *p, const int32_t *ids, int n, int skip_special, char **text);

/* tokenizer.json text -> pipeline (tok_json.c). `what` names the file in errors. */
qac_status tk_pipe_from_json(tk_pipe *p, const char *json, size_t len, const char *what);

#endif
