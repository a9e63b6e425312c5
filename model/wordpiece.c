/* WordPiece tokenizer with the exact semantics of Hugging Face's Rust
 * `tokenizers` (BertNormalizer + BertPreTokenizer + WordPiece), which is what
 * BertTokenizerFast runs:
 *   normalise: drop U+0000, U+FFFD and "other" characters (Cc Cf Cs Co; not Cn)
 *              except \t \n \r; White_Space -> ' '; isolate CJK ideographs;
 *              optional NFD + drop Mn; optional full lower-casing;
 *   split:     on White_Space (removed) and punctuation (isolated);
 *   model:     greedy longest match with "##", [UNK] for a word that has more
 *              than 100 characters or an unmatchable piece.
 * Special tokens ([CLS], [SEP] ...) written in the raw text are matched first,
 * like HF's added tokens (normalized=false).
 *
 * The whole pipeline streams one code point at a time into a fixed word
 * buffer: no allocation per call, and the tokenizer is never written to after
 * load, so encode is thread-safe. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "qac_util.h"
#include "tokenizer_internal.h"
#include "wordpiece_unicode.h"

#define WP_MAX_CHARS 100 /* HF max_input_chars_per_word */
#define WP_N_SPECIAL 5

enum { C_KEEP = 0, C_DROP, C_SPACE, C_PUNCT };

struct qac_wordpiece {
    int n;           /* number of ids (lines of vocab.txt) */
    char *pool;      /* every token, NUL-terminated */
    uint32_t *off;   /* [n] token start in pool */
    uint32_t *len;   /* [n] token byte length */
    int32_t *slots;  /* open-addressing hash table of ids, -1 = empty */
    uint32_t *slot_hash;
    uint32_t mask;
    int lowercase, strip_accents, chinese_chars;
    int32_t unk;
    int n_special;
    char *special[WP_N_SPECIAL];
    size_t special_len[WP_N_SPECIAL];
    int32_t special_id[WP_N_SPECIAL];
    uint8_t special_first[256];
    uint8_t ascii_class[128];
    char ascii_map[128]; /* lower-cased when lowercase is on */
};

/* ---------- UTF-8 ---------- */

int qac_utf8_decode(const unsigned char *s, size_t len, uint32_t *cp) {
    unsigned b0 = s[0];
    if (b0 < 0x80) {
        *cp = b0;
        return 1;
    }
    int need;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    uint32_t c;
    if (b0 >= 0xC2 && b0 <= 0xDF) need = 1, c = b0 & 0x1F;
    else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 2, c = b0 & 0x0F;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F; /* no surrogates */
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 3, c = b0 & 0x07;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else {
        *cp = 0xFFFD;
        return 1;
    }
    /* Python replaces the maximal valid prefix of a broken sequence with one
     * U+FFFD and resumes at the first byte that does not fit. */
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= len) {
            *cp = 0xFFFD;
            return i;
        }
        unsigned b = s[i];
        unsigned l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (b < l || b > h) {
            *cp = 0xFFFD;
            return i;
        }
        c = (c << 6) | (b & 0x3F);
    }
    *cp = c;
    return need + 1;
}

int qac_utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---------- Unicode classes, as the Rust crates define them ---------- */

/* Rust char::is_whitespace (the White_Space property). */
static int is_white_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static int is_other_category(int cat) {
    return cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF || cat == UTF8PROC_CATEGORY_CS ||
           cat == UTF8PROC_CATEGORY_CO;
}

static int is_punct_category(int cat) {
    return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

/* The ideograph blocks of tokenizers' BertNormalizer::is_chinese_char. */
static int is_chinese(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* HF's behaviour for a code point whose Unicode data differs from utf8proc's. */
static const wp_uni *uni_override(uint32_t c) {
    if (c < wp_uni_table[0].cp || c > wp_uni_table[WP_UNI_COUNT - 1].cp) return NULL;
    size_t lo = 0, hi = WP_UNI_COUNT;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (wp_uni_table[mid].cp < c) lo = mid + 1;
        else hi = mid;
    }
    return lo < WP_UNI_COUNT && wp_uni_table[lo].cp == c ? &wp_uni_table[lo] : NULL;
}

int qac_wp_uni_override(uint32_t c, int strip, int lower, int *drop, int *punct, const uint32_t **out, int *n_out) {
    const wp_uni *o = uni_override(c);
    if (!o) return 0;
    *drop = o->drop;
    *punct = o->punct;
    if (out) {
        if (strip && lower) *out = o->both, *n_out = o->n_both;
        else if (strip) *out = o->strip, *n_out = o->n_strip;
        else if (lower) *out = o->lower, *n_out = o->n_lower;
        else *out = NULL, *n_out = 0;
    }
    return 1;
}

/* ---------- vocabulary hash ---------- */

#define FNV_BASIS 2166136261u
static inline uint32_t fnv(uint32_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* Id of prefix + s[0..n) where prefix is "##" when cont, else "". */
static int32_t vocab_find(const qac_wordpiece *wp, const char *s, size_t n, int cont) {
    uint32_t h = fnv(cont ? fnv(FNV_BASIS, "##", 2) : FNV_BASIS, s, n);
    size_t want = n + (cont ? 2 : 0);
    for (uint32_t i = h & wp->mask;; i = (i + 1) & wp->mask) {
        int32_t id = wp->slots[i];
        if (id < 0) return -1;
        if (wp->slot_hash[i] != h || wp->len[id] != want) continue;
        const char *t = wp->pool + wp->off[id];
        if (cont) {
            if (t[0] != '#' || t[1] != '#') continue;
            t += 2;
        }
        if (!memcmp(t, s, n)) return id;
    }
}

int32_t qac_wp_token_to_id(const qac_wordpiece *wp, const char *tok, size_t len) {
    return vocab_find(wp, tok, len, 0);
}

const char *qac_wp_id_to_token(const qac_wordpiece *wp, int32_t id) {
    if (id < 0 || id >= wp->n) return NULL;
    return wp->pool + wp->off[id];
}

int qac_wp_vocab_size(const qac_wordpiece *wp) { return wp->n; }

/* ---------- tokenisation ---------- */

typedef struct wp_state {
    const qac_wordpiece *wp;
    int32_t *ids;
    int32_t *offs; /* [cap][2] each token's source byte range, or NULL */
    int cap, n, stop;
    /* the current word, in code points (only the first WP_MAX_CHARS + 1 kept) */
    uint32_t cp[WP_MAX_CHARS + 1];
    uint8_t ccc[WP_MAX_CHARS + 1];
    uint32_t src[WP_MAX_CHARS + 1][2]; /* each character's source bytes (offsets only) */
    uint32_t word_src[2];              /* the whole word's, past the buffer too */
    uint32_t feed_src[2];              /* the source character being fed */
    int len;     /* characters in the word so far (may exceed the buffer) */
    int barrier; /* canonical reordering never moves a mark before this */
} wp_state;

static inline void emit(wp_state *s, int32_t id, uint32_t from, uint32_t to) {
    if (s->n < s->cap) {
        s->ids[s->n] = id;
        if (s->offs) s->offs[2 * s->n] = (int32_t)from, s->offs[2 * s->n + 1] = (int32_t)to;
    }
    s->n++;
}

/* Source range of word characters [a, b): the widest their ranges span
 * (canonical reordering may have moved them), as tokenizers expands it. */
static void src_range(const wp_state *s, int a, int b, uint32_t *from, uint32_t *to) {
    *from = UINT32_MAX, *to = 0;
    for (int i = a; i < b; i++) {
        if (s->src[i][0] < *from) *from = s->src[i][0];
        if (s->src[i][1] > *to) *to = s->src[i][1];
    }
}

/* Greedy longest-match-first over one word. */
static void wordpiece_word(wp_state *s) {
    const qac_wordpiece *wp = s->wp;
    if (s->len > WP_MAX_CHARS) {
        emit(s, wp->unk, s->word_src[0], s->word_src[1]);
        return;
    }
    char buf[WP_MAX_CHARS * 4];
    uint16_t start_of[WP_MAX_CHARS + 1]; /* byte offset of each char, plus the end */
    int nb = 0;
    for (int i = 0; i < s->len; i++) {
        start_of[i] = (uint16_t)nb;
        nb += qac_utf8_encode(s->cp[i], buf + nb);
    }
    start_of[s->len] = (uint16_t)nb;

    int first = s->n;
    int start = 0;
    while (start < s->len) {
        int end = s->len;
        int32_t id = -1;
        for (; end > start; end--) {
            id = vocab_find(wp, buf + start_of[start], (size_t)(start_of[end] - start_of[start]),
                            start > 0);
            if (id >= 0) break;
        }
        if (id < 0) { /* unmatchable: the whole word becomes [UNK] */
            s->n = first;
            emit(s, wp->unk, s->word_src[0], s->word_src[1]);
            return;
        }
        uint32_t from = 0, to = 0;
        if (s->offs) src_range(s, start, end, &from, &to);
        emit(s, id, from, to);
        start = end;
    }
}

static inline void flush(wp_state *s) {
    if (s->len) wordpiece_word(s);
    s->len = 0;
    s->barrier = 0;
}

static inline void push(wp_state *s, uint32_t c, uint8_t ccc) {
    if (s->len == 0) s->word_src[0] = s->feed_src[0];
    if (s->feed_src[0] < s->word_src[0]) s->word_src[0] = s->feed_src[0];
    if (s->len == 0 || s->feed_src[1] > s->word_src[1]) s->word_src[1] = s->feed_src[1];
    if (s->len <= WP_MAX_CHARS) {
        int j = s->len;
        /* NFD's canonical ordering: a stable sort of marks by combining class */
        if (ccc) {
            while (j > s->barrier && s->ccc[j - 1] > ccc) {
                s->cp[j] = s->cp[j - 1];
                s->ccc[j] = s->ccc[j - 1];
                s->src[j][0] = s->src[j - 1][0], s->src[j][1] = s->src[j - 1][1];
                j--;
            }
        }
        s->cp[j] = c;
        s->ccc[j] = ccc;
        s->src[j][0] = s->feed_src[0], s->src[j][1] = s->feed_src[1];
    }
    s->len++;
    if (!ccc) s->barrier = s->len;
}

/* One character of the normalised text: pre-tokenizer split, then push. */
static void pretok(wp_state *s, uint32_t c, uint8_t ccc) {
    if (is_white_space(c)) {
        flush(s);
        return;
    }
    int punct;
    if (c < 128) punct = s->wp->ascii_class[c] == C_PUNCT;
    else {
        const wp_uni *o = uni_override(c);
        punct = o ? o->punct : is_punct_category(utf8proc_category((utf8proc_int32_t)c));
    }
    if (punct) {
        flush(s);
        push(s, c, 0);
        flush(s);
        return;
    }
    push(s, c, ccc);
}

static void lower_then_pretok(wp_state *s, uint32_t c, uint8_t ccc) {
    if (s->wp->lowercase) {
        if (c == 0x130) { /* Rust's full mapping: I WITH DOT ABOVE -> i + U+0307 */
            pretok(s, 'i', 0);
            pretok(s, 0x307, 230);
            return;
        }
        c = (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
    }
    pretok(s, c, ccc);
}

/* A non-ASCII character of the raw text. */
static void feed_unicode(wp_state *s, uint32_t c) {
    const qac_wordpiece *wp = s->wp;
    if (c == 0xFFFD) return;
    const wp_uni *o = uni_override(c);
    if (o) {
        if (o->drop) return;
        int cjk = wp->chinese_chars && is_chinese(c);
        if (cjk) flush(s);
        const uint32_t *out = &c;
        int n = 1;
        if (wp->strip_accents && wp->lowercase) out = o->both, n = o->n_both;
        else if (wp->strip_accents) out = o->strip, n = o->n_strip;
        else if (wp->lowercase) out = o->lower, n = o->n_lower;
        for (int i = 0; i < n; i++) pretok(s, out[i], 0);
        if (cjk) flush(s);
        return;
    }
    int cat = utf8proc_category((utf8proc_int32_t)c);
    if (is_other_category(cat)) return;
    if (is_white_space(c)) {
        flush(s);
        return;
    }
    int cjk = wp->chinese_chars && is_chinese(c);
    if (cjk) flush(s);
    if (wp->strip_accents) {
        utf8proc_int32_t d[32];
        int last = 0;
        utf8proc_ssize_t nd = utf8proc_decompose_char((utf8proc_int32_t)c, d, 32, UTF8PROC_DECOMPOSE, &last);
        if (nd < 1 || nd > 32) { /* cannot happen for NFD; keep the character */
            d[0] = (utf8proc_int32_t)c;
            nd = 1;
        }
        for (utf8proc_ssize_t i = 0; i < nd; i++) {
            const utf8proc_property_t *p = utf8proc_get_property(d[i]);
            if (p->category == UTF8PROC_CATEGORY_MN) {
                if (!p->combining_class) s->barrier = s->len;
                continue;
            }
            lower_then_pretok(s, (uint32_t)d[i], (uint8_t)p->combining_class);
        }
    } else {
        lower_then_pretok(s, c, 0);
    }
    if (cjk) flush(s);
}

/* Normalise + pre-tokenize + WordPiece over text without special tokens;
 * p is the text's byte `base` onwards. */
static void tokenize_plain(wp_state *s, const unsigned char *p, size_t len, size_t base) {
    const qac_wordpiece *wp = s->wp;
    size_t i = 0;
    while (i < len) {
        unsigned b = p[i];
        s->feed_src[0] = (uint32_t)(base + i);
        if (b < 0x80) {
            i++;
            s->feed_src[1] = (uint32_t)(base + i);
            switch (wp->ascii_class[b]) {
            case C_KEEP: push(s, (uint32_t)(unsigned char)wp->ascii_map[b], 0); break;
            case C_SPACE: flush(s); break;
            case C_PUNCT:
                flush(s);
                push(s, b, 0);
                flush(s);
                break;
            default: break; /* C_DROP */
            }
        } else {
            uint32_t c;
            i += (size_t)qac_utf8_decode(p + i, len - i, &c);
            s->feed_src[1] = (uint32_t)(base + i);
            feed_unicode(s, c);
        }
        if (s->stop >= 0 && s->n >= s->stop) return;
    }
    flush(s);
}

int qac_wp_tokenize(const qac_wordpiece *wp, const char *text, size_t len, int32_t *ids, int cap,
                    int stop) {
    return qac_wp_tokenize_offsets(wp, text, len, ids, NULL, cap, stop);
}

int qac_wp_tokenize_offsets(const qac_wordpiece *wp, const char *text, size_t len, int32_t *ids, int32_t *offs,
                            int cap, int stop) {
    wp_state s;
    s.wp = wp;
    s.ids = ids;
    s.offs = offs;
    s.cap = cap < 0 ? 0 : cap;
    s.n = 0;
    s.stop = stop;
    s.len = 0;
    s.barrier = 0;
    const unsigned char *p = (const unsigned char *)text;
    size_t seg = 0;
    for (size_t i = 0; i < len && wp->n_special; i++) {
        if (!wp->special_first[p[i]]) continue;
        int best = -1; /* leftmost-longest special token match */
        for (int k = 0; k < wp->n_special; k++)
            if (wp->special_len[k] <= len - i && !memcmp(p + i, wp->special[k], wp->special_len[k]) &&
                (best < 0 || wp->special_len[k] > wp->special_len[best]))
                best = k;
        if (best < 0) continue;
        tokenize_plain(&s, p + seg, i - seg, seg);
        if (stop >= 0 && s.n >= stop) return s.n;
        emit(&s, wp->special_id[best], (uint32_t)i, (uint32_t)(i + wp->special_len[best]));
        i += wp->special_len[best] - 1;
        seg = i + 1;
    }
    if (stop < 0 || s.n < stop) tokenize_plain(&s, p + seg, len - seg, seg);
    return s.n;
}

/* ---------- loading ---------- */

void qac_wp_free(qac_wordpiece *wp) {
    if (!wp) return;
    free(wp->pool);
    free(wp->off);
    free(wp->len);
    free(wp->slots);
    free(wp->slot_hash);
    for (int k = 0; k < wp->n_special; k++) free(wp->special[k]);
    free(wp);
}

static void hash_insert(qac_wordpiece *wp, int32_t id) {
    const char *t = wp->pool + wp->off[id];
    uint32_t h = fnv(FNV_BASIS, t, wp->len[id]);
    for (uint32_t i = h & wp->mask;; i = (i + 1) & wp->mask) {
        int32_t old = wp->slots[i];
        if (old < 0 || (wp->slot_hash[i] == h && wp->len[old] == wp->len[id] &&
                        !memcmp(wp->pool + wp->off[old], t, wp->len[id]))) {
            wp->slots[i] = id; /* a repeated token maps to its last line, as in HF */
            wp->slot_hash[i] = h;
            return;
        }
    }
}

qac_status qac_wp_load(qac_wordpiece **out, const char *vocab_path, const qac_wp_options *opt) {
    *out = NULL;
    char *data = NULL;
    size_t size = 0;
    qac_status st = qac_read_file(vocab_path, &data, &size);
    if (st) return st;
    qac_wordpiece *wp = calloc(1, sizeof *wp);
    if (!wp) {
        free(data);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory loading %s", vocab_path);
    }
    /* One token per line; only "\n" is stripped (HF's rstrip("\n")). */
    size_t lines = 0;
    for (size_t i = 0; i < size; i++) lines += data[i] == '\n';
    if (size && data[size - 1] != '\n') lines++;
    if (lines == 0 || lines > INT32_MAX / 4 || size > UINT32_MAX) {
        free(data);
        qac_wp_free(wp);
        return qac_set_error(QAC_ERR_FORMAT, "%s: empty or oversized vocabulary", vocab_path);
    }
    wp->n = (int)lines;
    wp->pool = data; /* newlines become NULs in place */
    wp->off = malloc(lines * sizeof *wp->off);
    wp->len = malloc(lines * sizeof *wp->len);
    uint32_t cap = 1;
    while (cap < lines * 2) cap <<= 1;
    wp->mask = cap - 1;
    wp->slots = malloc((size_t)cap * sizeof *wp->slots);
    wp->slot_hash = malloc((size_t)cap * sizeof *wp->slot_hash);
    if (!wp->off || !wp->len || !wp->slots || !wp->slot_hash) {
        qac_wp_free(wp);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory loading %s", vocab_path);
    }
    memset(wp->slots, 0xff, (size_t)cap * sizeof *wp->slots);
    size_t start = 0;
    int id = 0;
    for (size_t i = 0; i <= size && id < wp->n; i++) {
        if (i == size || data[i] == '\n') {
            data[i] = '\0'; /* qac_read_file leaves a NUL at data[size] */
            wp->off[id] = (uint32_t)start;
            wp->len[id] = (uint32_t)(i - start);
            hash_insert(wp, id);
            id++;
            start = i + 1;
        }
    }

    wp->lowercase = opt->lowercase;
    wp->strip_accents = opt->strip_accents;
    wp->chinese_chars = opt->chinese_chars;
    const char *unk = opt->unk_token ? opt->unk_token : "[UNK]";
    wp->unk = vocab_find(wp, unk, strlen(unk), 0);
    if (wp->unk < 0) {
        qac_wp_free(wp);
        return qac_set_error(QAC_ERR_FORMAT, "%s: the unknown token %s is not in the vocabulary",
                             vocab_path, unk);
    }
    for (int k = 0; k < WP_N_SPECIAL; k++) {
        const char *sp = opt->special[k];
        if (!sp || !*sp) continue;
        int32_t sid = vocab_find(wp, sp, strlen(sp), 0);
        if (sid < 0) continue;
        int dup = 0;
        for (int j = 0; j < wp->n_special; j++) dup |= !strcmp(wp->special[j], sp);
        if (dup) continue;
        char *copy = strdup(sp);
        if (!copy) {
            qac_wp_free(wp);
            return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        }
        wp->special[wp->n_special] = copy;
        wp->special_len[wp->n_special] = strlen(sp);
        wp->special_id[wp->n_special] = sid;
        wp->special_first[(unsigned char)sp[0]] = 1;
        wp->n_special++;
    }

    for (int c = 0; c < 128; c++) {
        uint8_t cls = C_KEEP;
        if (c == '\t' || c == '\n' || c == '\r' || c == ' ') cls = C_SPACE;
        else if (c < 32 || c == 127) cls = C_DROP; /* Cc, including \v and \f */
        else if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
                 (c >= 123 && c <= 126))
            cls = C_PUNCT;
        wp->ascii_class[c] = cls;
        wp->ascii_map[c] = (char)(wp->lowercase && c >= 'A' && c <= 'Z' ? c + 32 : c);
    }
    *out = wp;
    return QAC_OK;
}
