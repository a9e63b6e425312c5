/* Normalizers of the tokenizer.json pipeline (tok_hf.h), each written as
 * HF's tokenizers/src/normalizers writes it: the same characters out and
 * the same transformation (change per character), so offsets match too.
 * Precompiled (SentencePiece's charsmap) is in tok_precompiled.c.
 *
 * Unicode normalization forms run through libutf8proc one segment at a time
 * (a starter and the marks that follow it): a segment that changes becomes
 * HF's "replace" transformation, so NFD of "é" gives e (kept) + U+0301
 * (inserted), NFC of "e"+U+0301 gives "é" (one kept, one removed). */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tok_hf.h"
#include "tokenizer_internal.h"

typedef int (*keep_fn)(uint32_t c, const void *user);

/* HF NormalizedString::filter */
static int filter(tk_arena *ar, tk_str *st, keep_fn keep, const void *user) {
    int any_dropped = 0;
    for (uint32_t i = 0; i < st->n && !any_dropped;) any_dropped = !keep((uint32_t)tk_utf8_next(st->s, st->n, &i), user);
    if (!any_dropped) return 0;
    tk_changes ch = {.ar = ar};
    size_t removed = 0, removed_start = 0;
    int have_last = 0;
    uint32_t last = 0;
    for (uint32_t i = 0; i < st->n;) {
        uint32_t c = (uint32_t)tk_utf8_next(st->s, st->n, &i);
        if (keep(c, user)) {
            if (have_last) {
                if (tk_changes_push(&ch, last, -(int32_t)removed)) return -1;
            } else {
                removed_start = removed;
            }
            last = c;
            have_last = 1;
            removed = 0;
        } else {
            removed++;
        }
    }
    if (have_last && tk_changes_push(&ch, last, -(int32_t)removed)) return -1;
    return tk_transform(ar, st, 0, st->n, ch.v, ch.n, removed_start);
}

typedef uint32_t (*map_fn)(uint32_t c);

/* HF NormalizedString::map: one character for one. */
static int map_chars(tk_arena *ar, tk_str *st, map_fn map) {
    int changed = 0;
    for (uint32_t i = 0; i < st->n && !changed;) {
        uint32_t c = (uint32_t)tk_utf8_next(st->s, st->n, &i);
        changed = map(c) != c;
    }
    if (!changed) return 0;
    tk_changes ch = {.ar = ar};
    for (uint32_t i = 0; i < st->n;)
        if (tk_changes_push(&ch, map((uint32_t)tk_utf8_next(st->s, st->n, &i)), 0)) return -1;
    return tk_transform(ar, st, 0, st->n, ch.v, ch.n, 0);
}

/* ---------- BertNormalizer ---------- */

static int bert_keep(uint32_t c, const void *u) {
    (void)u;
    return !(c == 0 || c == 0xFFFD || tk_is_control_bert(c));
}

static uint32_t bert_space(uint32_t c) { return c == '\t' || c == '\n' || c == '\r' || tk_is_whitespace(c) ? ' ' : c; }

static int is_chinese(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

static int chinese_chars(tk_arena *ar, tk_str *st) {
    int any = 0;
    for (uint32_t i = 0; i < st->n && !any;) any = is_chinese((uint32_t)tk_utf8_next(st->s, st->n, &i));
    if (!any) return 0;
    tk_changes ch = {.ar = ar};
    for (uint32_t i = 0; i < st->n;) {
        uint32_t c = (uint32_t)tk_utf8_next(st->s, st->n, &i);
        if (is_chinese(c)) {
            if (tk_changes_push(&ch, ' ', 0) || tk_changes_push(&ch, c, 1) || tk_changes_push(&ch, ' ', 1)) return -1;
        } else if (tk_changes_push(&ch, c, 0)) {
            return -1;
        }
    }
    return tk_transform(ar, st, 0, st->n, ch.v, ch.n, 0);
}

/* Mn as tokenizers' unicode_categories tables say (the override table knows
 * the code points where they differ from utf8proc). */
static int bert_not_nonspacing(uint32_t c, const void *u) {
    (void)u;
    int drop, punct, n;
    const uint32_t *out;
    if (c >= 0x80 && qac_wp_uni_override(c, 1, 0, &drop, &punct, &out, &n)) return drop || n > 0;
    return !tk_is_mark_nonspacing(c);
}

/* ---------- Unicode normalization forms ---------- */

/* Forms as the unicode-normalization-alignments crate yields them: each
 * character decomposes (the first of its characters kept, change 0, the
 * others inserted, +1); marks are put in canonical order carrying their
 * changes; composition (NFC, NFKC) folds a mark into its starter, the two
 * changes summed less one. */
typedef struct nf_char {
    uint32_t cp;
    int32_t change;
    uint8_t ccc;
} nf_char;

static int nf_ccc(uint32_t c) { return c < 0x300 ? 0 : utf8proc_get_property((utf8proc_int32_t)c)->combining_class; }

/* The primary composite of a starter and a following character, or 0. */
static uint32_t nf_compose(uint32_t a, uint32_t b) {
    char in[8];
    int l = qac_utf8_encode(a, in);
    l += qac_utf8_encode(b, in + l);
    utf8proc_uint8_t *out = NULL;
    utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)in, l, &out, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    uint32_t r = 0;
    if (m > 0) {
        uint32_t i = 0;
        uint32_t c = (uint32_t)tk_utf8_next((const char *)out, (uint32_t)m, &i);
        if (i == (uint32_t)m) r = c;
    }
    free(out);
    return r;
}

static int unicode_form(int kind, tk_arena *ar, tk_str *st) {
    int ascii = 1;
    for (uint32_t i = 0; i < st->n && ascii; i++) ascii = (unsigned char)st->s[i] < 0x80;
    if (ascii) return 0; /* every form leaves ASCII alone */
    int compat = kind == TN_NFKC || kind == TN_NFKD, compose = kind == TN_NFC || kind == TN_NFKC;
    utf8proc_uint8_t *whole = NULL;
    utf8proc_ssize_t wl = utf8proc_map((const utf8proc_uint8_t *)st->s, st->n, &whole,
                                       UTF8PROC_STABLE | (compose ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE) |
                                           (compat ? UTF8PROC_COMPAT : 0));
    if (wl < 0) return -1;
    int same = (uint32_t)wl == st->n && !memcmp(whole, st->s, st->n);
    free(whole);
    if (same) return 0;
    /* decompose: at most 18 characters per character (utf8proc's longest is shorter) */
    size_t cap = (size_t)st->n * 18 + 1, n = 0;
    nf_char *v = tk_alloc(ar, cap * sizeof *v);
    if (!v) return -1;
    for (uint32_t i = 0; i < st->n;) {
        uint32_t c = (uint32_t)tk_utf8_next(st->s, st->n, &i);
        utf8proc_int32_t d[18];
        int last = 0;
        utf8proc_ssize_t k = utf8proc_decompose_char((utf8proc_int32_t)c, d, 18,
                                                     UTF8PROC_DECOMPOSE | (compat ? UTF8PROC_COMPAT : 0), &last);
        if (k < 1 || k > 18) d[0] = (utf8proc_int32_t)c, k = 1;
        for (utf8proc_ssize_t j = 0; j < k; j++)
            v[n++] = (nf_char){(uint32_t)d[j], j > 0, (uint8_t)nf_ccc((uint32_t)d[j])};
    }
    /* canonical order: a stable sort of each run of marks by class */
    for (size_t i = 1; i < n; i++) {
        nf_char x = v[i];
        if (!x.ccc) continue;
        size_t j = i;
        while (j > 0 && v[j - 1].ccc > x.ccc) v[j] = v[j - 1], j--;
        v[j] = x;
    }
    if (compose) { /* canonical composition: a mark not blocked from the last starter joins it */
        size_t out = 0, starter = SIZE_MAX;
        int last_ccc = 0;
        for (size_t i = 0; i < n; i++) {
            nf_char x = v[i];
            if (starter != SIZE_MAX && (out == starter + 1 || (last_ccc != 0 && last_ccc < (int)x.ccc))) {
                uint32_t comp = nf_compose(v[starter].cp, x.cp);
                if (comp) {
                    v[starter].cp = comp;
                    v[starter].change += x.change - 1;
                    continue;
                }
            }
            if (x.ccc == 0) starter = out;
            last_ccc = x.ccc;
            v[out++] = x;
        }
        n = out;
    }
    tk_change *ch = tk_alloc(ar, (n + 1) * sizeof *ch);
    if (!ch) return -1;
    for (size_t i = 0; i < n; i++) ch[i] = (tk_change){v[i].cp, v[i].change};
    return tk_transform(ar, st, 0, st->n, ch, n, 0);
}

/* ---------- the simple ones ---------- */

static int lowercase(tk_arena *ar, tk_str *st) {
    int changed = 0;
    for (uint32_t i = 0; i < st->n && !changed;) {
        uint32_t c = (uint32_t)tk_utf8_next(st->s, st->n, &i), l[3];
        changed = tk_lower(c, l) != 1 || l[0] != c;
    }
    if (!changed) return 0;
    tk_changes ch = {.ar = ar};
    for (uint32_t i = 0; i < st->n;) {
        uint32_t l[3];
        int k = tk_lower((uint32_t)tk_utf8_next(st->s, st->n, &i), l);
        for (int j = 0; j < k; j++)
            if (tk_changes_push(&ch, l[j], j > 0)) return -1;
    }
    return tk_transform(ar, st, 0, st->n, ch.v, ch.n, 0);
}

static int strip(tk_arena *ar, tk_str *st, int left, int right) {
    size_t count = 0, lead = 0, trail = 0;
    uint32_t *cps = tk_alloc(ar, ((size_t)st->n + 1) * sizeof *cps);
    if (!cps) return -1;
    for (uint32_t i = 0; i < st->n;) cps[count++] = (uint32_t)tk_utf8_next(st->s, st->n, &i);
    if (left)
        while (lead < count && tk_is_whitespace(cps[lead])) lead++;
    if (right)
        while (trail < count - lead && tk_is_whitespace(cps[count - 1 - trail])) trail++;
    if (!lead && !trail) return 0;
    tk_changes ch = {.ar = ar};
    for (size_t i = lead; i < count - trail; i++) {
        /* HF compares this character index with the byte length: kept as it is */
        int32_t change = i == (size_t)st->n - trail - 1 ? -(int32_t)trail : 0;
        if (tk_changes_push(&ch, cps[i], change)) return -1;
    }
    return tk_transform(ar, st, 0, st->n, ch.v, ch.n, lead);
}

static int not_combining(uint32_t c, const void *u) {
    (void)u;
    return !tk_is_combining_mark(c);
}

static int nmt_keep(uint32_t c, const void *u) {
    (void)u;
    return !((c >= 1 && c <= 8) || c == 0xB || (c >= 0xE && c <= 0x1F) || c == 0x7F || c == 0x8F || c == 0x9F);
}

static uint32_t nmt_map(uint32_t c) {
    if (c == 9 || c == 0xA || c == 0xC || c == 0xD || c == 0x1680 || (c >= 0x200B && c <= 0x200F) || c == 0x2028 ||
        c == 0x2029 || c == 0x2581 || c == 0xFEFF || c == 0xFFFD)
        return ' ';
    return c;
}

/* HF NormalizedString::replace: every match becomes `content`, aligned to
 * the last byte of the match. */
static int replace(const tk_norm *nm, tk_arena *ar, tk_str *st) {
    tk_runs runs = {.ar = ar};
    if (tk_pattern_runs(&nm->pat, st->s, st->n, &runs)) return -1;
    int any = 0;
    for (size_t i = 0; i < runs.n; i++) any |= runs.v[i].match;
    if (!any) return 0;
    size_t cap = st->n;
    for (size_t i = 0; i < runs.n; i++)
        if (runs.v[i].match) cap += nm->content_len;
    char *s = tk_alloc(ar, cap + 1);
    tk_span *al = tk_alloc(ar, (cap + 1) * sizeof *al);
    if (!s || !al) return -1;
    size_t o = 0;
    for (size_t i = 0; i < runs.n; i++) {
        const tk_run *r = &runs.v[i];
        if (!r->match) {
            memcpy(s + o, st->s + r->a, r->b - r->a);
            memcpy(al + o, st->al + r->a, (r->b - r->a) * sizeof *al);
            o += r->b - r->a;
            continue;
        }
        tk_span align = r->b < 1 ? (tk_span){st->o0, st->o0} : st->al[r->b - 1];
        memcpy(s + o, nm->content, nm->content_len);
        for (uint32_t k = 0; k < nm->content_len; k++) al[o + k] = align;
        o += nm->content_len;
    }
    s[o] = '\0';
    st->s = s;
    st->al = al;
    st->n = (uint32_t)o;
    return 0;
}

/* HF NormalizedString::prepend: the new characters share the first one's alignment. */
static int prepend(tk_arena *ar, tk_str *st, const char *text, uint32_t len) {
    if (!st->n || !len) return 0;
    tk_changes ch = {.ar = ar};
    int first = 1;
    for (uint32_t i = 0; i < len; first = 0)
        if (tk_changes_push(&ch, (uint32_t)tk_utf8_next(text, len, &i), !first)) return -1;
    uint32_t k = 0;
    uint32_t next = (uint32_t)tk_utf8_next(st->s, st->n, &k);
    if (tk_changes_push(&ch, next, 1)) return -1;
    return tk_transform(ar, st, 0, k, ch.v, ch.n, 0);
}

static int byte_level(tk_arena *ar, tk_str *st) {
    tk_changes ch = {.ar = ar};
    for (uint32_t i = 0; i < st->n; i++)
        if (tk_changes_push(&ch, tk_byte_char[(unsigned char)st->s[i]], ((unsigned char)st->s[i] & 0xC0) == 0x80))
            return -1;
    return tk_transform(ar, st, 0, st->n, ch.v, ch.n, 0);
}

int tk_normalize(const tk_norm *n, tk_arena *ar, tk_str *st) {
    if (!n) return 0;
    switch (n->kind) {
    case TN_SEQUENCE:
        for (int i = 0; i < n->n_kids; i++)
            if (tk_normalize(n->kids[i], ar, st)) return -1;
        return 0;
    case TN_BERT:
        if (n->clean_text && (filter(ar, st, bert_keep, NULL) || map_chars(ar, st, bert_space))) return -1;
        if (n->chinese && chinese_chars(ar, st)) return -1;
        if (n->strip_accents && (unicode_form(TN_NFD, ar, st) || filter(ar, st, bert_not_nonspacing, NULL))) return -1;
        if (n->lowercase && lowercase(ar, st)) return -1;
        return 0;
    case TN_NFC:
    case TN_NFD:
    case TN_NFKC:
    case TN_NFKD: return unicode_form(n->kind, ar, st);
    case TN_LOWERCASE: return lowercase(ar, st);
    case TN_STRIP: return strip(ar, st, n->left, n->right);
    case TN_STRIP_ACCENTS: return filter(ar, st, not_combining, NULL);
    case TN_REPLACE: return replace(n, ar, st);
    case TN_PREPEND: return prepend(ar, st, n->content, n->content_len);
    case TN_PRECOMPILED: return tk_precompiled_normalize(n->pc, ar, st);
    case TN_NMT: return filter(ar, st, nmt_keep, NULL) || map_chars(ar, st, nmt_map);
    case TN_BYTELEVEL: return byte_level(ar, st);
    default: return 0;
    }
}

void tk_norm_free(tk_norm *n) {
    if (!n) return;
    for (int i = 0; i < n->n_kids; i++) tk_norm_free(n->kids[i]);
    free(n->kids);
    free(n->pat.str);
    tk_regex_free(n->pat.re);
    free(n->content);
    tk_precompiled_free(n->pc);
    free(n);
}
