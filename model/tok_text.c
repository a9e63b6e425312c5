/* The text layer of the tokenizer.json pipeline (tok_hf.h): the per-call
 * arena, aligned text (HF's NormalizedString: transform, slice, offsets),
 * the growable lists the stages pass along, literal and regex pattern runs,
 * and the Unicode predicates of the Rust crates HF builds on.
 *
 * Unicode data comes from libutf8proc; where Hugging Face's tables differ
 * (the Rust crates and Oniguruma carry other Unicode versions), the tables
 * generated from tokenizers itself win: tok_unicode.h (tok_unicode_gen.py)
 * for the pre-tokenizers' classes and lower-casing, wordpiece_unicode.h for
 * BertNormalizer. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tok_hf.h"
#include "tok_unicode.h"
#include "tokenizer_internal.h"

/* ---------- arena ---------- */

struct tk_chunk {
    tk_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *tk_alloc(tk_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    tk_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = c ? c->cap * 2 : 16384;
        while (cap < n) cap *= 2;
        tk_chunk *nc = malloc(sizeof *nc + cap);
        if (!nc) {
            a->oom = 1;
            return NULL;
        }
        nc->next = c;
        nc->used = 0;
        nc->cap = cap;
        a->head = c = nc;
    }
    void *p = c->data + c->used;
    c->used += n;
    return p;
}

void tk_arena_free(tk_arena *a) {
    for (tk_chunk *c = a->head; c;) {
        tk_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
}

/* Grow a vector of `size`-byte elements held in an arena. */
static int grow(tk_arena *ar, void **v, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void *nv = tk_alloc(ar, nc * size);
    if (!nv) return -1;
    if (*cap) memcpy(nv, *v, *cap * size);
    *v = nv;
    *cap = nc;
    return 0;
}

int tk_changes_push(tk_changes *c, uint32_t cp, int32_t change) {
    if (grow(c->ar, (void **)&c->v, &c->cap, c->n + 1, sizeof *c->v)) return -1;
    c->v[c->n++] = (tk_change){cp, change};
    return 0;
}

int tk_changes_replace(tk_changes *c, size_t old_count, const uint32_t *new_cps, size_t new_count) {
    size_t first = c->n;
    for (size_t i = 0; i < new_count; i++)
        if (tk_changes_push(c, new_cps[i], 0)) return -1;
    if (new_count > old_count) {
        for (size_t i = 0; i < new_count - old_count; i++) c->v[c->n - 1 - i].change = 1;
    } else if (new_count < old_count && c->n > 0) {
        /* the removal rides on the last character written so far (HF's replace) */
        c->v[c->n - 1].change -= (int32_t)(old_count - new_count);
    }
    (void)first;
    return 0;
}

int tk_runs_push(tk_runs *r, uint32_t a, uint32_t b, int match) {
    if (grow(r->ar, (void **)&r->v, &r->cap, r->n + 1, sizeof *r->v)) return -1;
    r->v[r->n++] = (tk_run){a, b, (uint8_t)match};
    return 0;
}

int tk_pieces_push(tk_pieces *p, tk_str str, int32_t id) {
    if (grow(p->ar, (void **)&p->v, &p->cap, p->n + 1, sizeof *p->v)) return -1;
    p->v[p->n++] = (tk_piece){str, id};
    return 0;
}

int tk_toks_push(tk_toks *t, int32_t id, tk_span off, const char *val, uint32_t vlen) {
    if (t->n == t->cap) { /* outlives the arena: plain heap */
        size_t nc = t->cap ? t->cap * 2 : 64;
        tk_tok *nv = realloc(t->v, nc * sizeof *nv);
        if (!nv) return -1;
        t->v = nv;
        t->cap = nc;
    }
    t->v[t->n++] = (tk_tok){id, off, val, vlen};
    return 0;
}

/* ---------- UTF-8 over valid text ---------- */

int tk_utf8_len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

int tk_utf8_next(const char *s, uint32_t n, uint32_t *i) {
    uint32_t cp;
    *i += (uint32_t)qac_utf8_decode((const unsigned char *)s + *i, n - *i, &cp);
    return (int)cp;
}

int tk_utf8_prev(const char *s, uint32_t i) {
    while (i > 0 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) i--;
    return i > 0 ? (int)i - 1 : 0;
}

/* ---------- aligned text ---------- */

tk_span tk_original(const tk_str *st, uint32_t a, uint32_t b) {
    if (a == b) return (tk_span){st->o0 + a, st->o0 + b}; /* HF keeps an empty range as it is */
    if (b > st->n) b = st->n;
    if (a >= b) return (tk_span){st->o1, st->o1};
    return (tk_span){st->al[a].a, st->al[b - 1].b};
}

tk_str tk_slice(const tk_str *st, uint32_t from, uint32_t to) {
    tk_str r = *st;
    r.s = st->s + from;
    r.al = st->al + from;
    r.n = to - from;
    if (to > from) {
        r.o0 = st->al[from].a;
        r.o1 = st->al[to - 1].b;
    } else {
        r.o0 = r.o1 = from < st->n ? st->al[from].a : st->o1;
    }
    return r;
}

int tk_transform(tk_arena *ar, tk_str *st, uint32_t from, uint32_t to, const tk_change *ch, size_t nch,
                 size_t initial_offset) {
    size_t add = 0;
    for (size_t i = 0; i < nch; i++) add += (size_t)tk_utf8_len(ch[i].cp);
    size_t total = from + add + (st->n - to);
    if (total > UINT32_MAX / 2) return -1;
    char *s = tk_alloc(ar, total + 1);
    tk_span *al = tk_alloc(ar, (total + 1) * sizeof *al);
    if (!s || !al) return -1;
    memcpy(s, st->s, from);
    memcpy(al, st->al, from * sizeof *al);
    uint32_t pos = from; /* the next replaced character (HF's offset and iterator move together) */
    for (size_t k = 0; k < initial_offset && pos < to; k++) tk_utf8_next(st->s, to, &pos);
    size_t o = from;
    for (size_t i = 0; i < nch; i++) {
        tk_span align;
        if (ch[i].change > 0) align = pos < 1 ? (tk_span){st->o0, st->o0} : st->al[pos - 1 < st->n ? pos - 1 : st->n - 1];
        else align = pos < st->n ? st->al[pos] : (st->n ? st->al[st->n - 1] : (tk_span){st->o0, st->o0});
        if (ch[i].change <= 0 && pos < to) tk_utf8_next(st->s, to, &pos);
        for (int32_t r = 0; r < -ch[i].change && pos < to; r++) tk_utf8_next(st->s, to, &pos);
        int l = qac_utf8_encode(ch[i].cp, s + o);
        for (int b = 0; b < l; b++) al[o + (size_t)b] = align;
        o += (size_t)l;
    }
    memcpy(s + o, st->s + to, st->n - to);
    memcpy(al + o, st->al + to, (st->n - to) * sizeof *al);
    s[total] = '\0';
    st->s = s;
    st->al = al;
    st->n = (uint32_t)total;
    return 0;
}

/* ---------- Unicode classes ---------- */

int tk_is_whitespace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

static int category(uint32_t c) { return c > 0x10FFFF ? UTF8PROC_CATEGORY_CN : utf8proc_category((utf8proc_int32_t)c); }

/* HF's classes of c where they differ from utf8proc's, else -1. */
static int hf_flags(uint32_t c) {
    size_t lo = 0, hi = TKU_N_CLASSES;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (tku_classes[mid].hi < c) lo = mid + 1;
        else hi = mid;
    }
    return lo < TKU_N_CLASSES && tku_classes[lo].lo <= c ? tku_classes[lo].flags : -1;
}

int tk_onig_category(uint32_t c) {
    int k = category(c), f = c >= 0x80 ? hf_flags(c) : -1;
    if (f < 0) return k;
    if (f & TKU_LETTER) return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO ? k : UTF8PROC_CATEGORY_LO;
    if (f & TKU_NUMBER) return k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO ? k : UTF8PROC_CATEGORY_NO;
    if ((k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) || (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO))
        return UTF8PROC_CATEGORY_CN;
    return k;
}

int tk_is_letter(uint32_t c) {
    if (c < 128) return (c | 32) >= 'a' && (c | 32) <= 'z';
    int f = hf_flags(c);
    if (f >= 0) return (f & TKU_LETTER) != 0;
    int k = category(c);
    return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
}

int tk_is_number(uint32_t c) {
    if (c < 128) return c >= '0' && c <= '9';
    int f = hf_flags(c);
    if (f >= 0) return (f & TKU_NUMBER) != 0;
    int k = category(c);
    return k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO;
}

int tk_is_numeric(uint32_t c) {
    if (c < 128) return c >= '0' && c <= '9';
    int f = hf_flags(c);
    if (f >= 0) return (f & TKU_NUMERIC) != 0;
    int k = category(c);
    return k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO;
}

int tk_is_alphabetic(uint32_t c) {
    if (c < 128) return tk_is_letter(c);
    int k = category(c);
    /* Alphabetic = letters, letter numbers and Other_Alphabetic (mostly marks of
     * letters, and the circled letters) */
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) || k == UTF8PROC_CATEGORY_NL ||
           (c >= 0x24B6 && c <= 0x24E9);
}

int tk_is_alnum(uint32_t c) { return tk_is_alphabetic(c) || tk_is_numeric(c); }

int tk_is_word(uint32_t c) {
    if (c < 128) return tk_is_letter(c) || (c >= '0' && c <= '9') || c == '_';
    int f = hf_flags(c);
    if (f >= 0) return (f & TKU_WORD) != 0;
    int k = category(c);
    return tk_is_alphabetic(c) || (k >= UTF8PROC_CATEGORY_MN && k <= UTF8PROC_CATEGORY_ME) ||
           k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_PC || c == 0x200C || c == 0x200D;
}

int tk_is_punct(uint32_t c) {
    if (c < 128)
        return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
    int f = hf_flags(c);
    if (f >= 0) return (f & TKU_PUNCT) != 0;
    int k = category(c);
    return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

int tk_is_control_bert(uint32_t c) {
    if (c == '\t' || c == '\n' || c == '\r') return 0;
    if (c < 128) return c < 32 || c == 127;
    int drop, punct;
    if (qac_wp_uni_override(c, 0, 0, &drop, &punct, NULL, NULL)) return drop && c != 0xFFFD;
    int k = category(c);
    return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CS ||
           k == UTF8PROC_CATEGORY_CO;
}

int tk_is_mark_nonspacing(uint32_t c) { return c >= 0x300 && category(c) == UTF8PROC_CATEGORY_MN; }

int tk_is_combining_mark(uint32_t c) {
    if (c < 0x300) return 0;
    int f = hf_flags(c);
    if (f >= 0) return (f & TKU_MARK) != 0;
    int k = category(c);
    return k >= UTF8PROC_CATEGORY_MN && k <= UTF8PROC_CATEGORY_ME;
}

int tk_lower(uint32_t c, uint32_t out[3]) {
    if (c < 128) {
        out[0] = c >= 'A' && c <= 'Z' ? c + 32 : c;
        return 1;
    }
    if (c == 0x130) { /* Rust's full mapping: I WITH DOT ABOVE -> i + combining dot */
        out[0] = 'i';
        out[1] = 0x307;
        return 2;
    }
    size_t lo = 0, hi = TKU_N_LOWERS;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (tku_lowers[mid].cp < c) lo = mid + 1;
        else hi = mid;
    }
    if (lo < TKU_N_LOWERS && tku_lowers[lo].cp == c) {
        memcpy(out, tku_lowers[lo].to, tku_lowers[lo].n * sizeof *out);
        return tku_lowers[lo].n;
    }
    out[0] = (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
    return 1;
}
