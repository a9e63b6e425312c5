/* Pre-tokenizers of the tokenizer.json pipeline (tok_hf.h), as
 * tokenizers/src/pre_tokenizers splits: each runs over every piece that no
 * added token has claimed, cuts it by a pattern with one of HF's delimiter
 * behaviours (removed, isolated, merged with the previous / next, contiguous)
 * and drops empty pieces.
 *
 * ByteLevel's GPT-2 pattern is written out by hand (it is on every RoBERTa
 * and ModernBERT encode), and its byte -> character mapping is left lazy:
 * the piece is only flagged, and BPE reads each byte as its character. A
 * pre-tokenizer that runs after ByteLevel gets the mapped text for real. */
#include <stdlib.h>
#include <string.h>

#include "tok_hf.h"

const uint32_t tk_byte_char[256] = {
    0x100, 0x101, 0x102, 0x103, 0x104, 0x105, 0x106, 0x107, 0x108, 0x109, 0x10A, 0x10B, 0x10C, 0x10D, 0x10E, 0x10F,
    0x110, 0x111, 0x112, 0x113, 0x114, 0x115, 0x116, 0x117, 0x118, 0x119, 0x11A, 0x11B, 0x11C, 0x11D, 0x11E, 0x11F,
    0x120, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2A, 0x2B, 0x2C, 0x2D, 0x2E, 0x2F,
    0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3A, 0x3B, 0x3C, 0x3D, 0x3E, 0x3F,
    0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4A, 0x4B, 0x4C, 0x4D, 0x4E, 0x4F,
    0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5A, 0x5B, 0x5C, 0x5D, 0x5E, 0x5F,
    0x60, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6A, 0x6B, 0x6C, 0x6D, 0x6E, 0x6F,
    0x70, 0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7A, 0x7B, 0x7C, 0x7D, 0x7E, 0x121,
    0x122, 0x123, 0x124, 0x125, 0x126, 0x127, 0x128, 0x129, 0x12A, 0x12B, 0x12C, 0x12D, 0x12E, 0x12F, 0x130, 0x131,
    0x132, 0x133, 0x134, 0x135, 0x136, 0x137, 0x138, 0x139, 0x13A, 0x13B, 0x13C, 0x13D, 0x13E, 0x13F, 0x140, 0x141,
    0x142, 0xA1, 0xA2, 0xA3, 0xA4, 0xA5, 0xA6, 0xA7, 0xA8, 0xA9, 0xAA, 0xAB, 0xAC, 0x143, 0xAE, 0xAF,
    0xB0, 0xB1, 0xB2, 0xB3, 0xB4, 0xB5, 0xB6, 0xB7, 0xB8, 0xB9, 0xBA, 0xBB, 0xBC, 0xBD, 0xBE, 0xBF,
    0xC0, 0xC1, 0xC2, 0xC3, 0xC4, 0xC5, 0xC6, 0xC7, 0xC8, 0xC9, 0xCA, 0xCB, 0xCC, 0xCD, 0xCE, 0xCF,
    0xD0, 0xD1, 0xD2, 0xD3, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8, 0xD9, 0xDA, 0xDB, 0xDC, 0xDD, 0xDE, 0xDF,
    0xE0, 0xE1, 0xE2, 0xE3, 0xE4, 0xE5, 0xE6, 0xE7, 0xE8, 0xE9, 0xEA, 0xEB, 0xEC, 0xED, 0xEE, 0xEF,
    0xF0, 0xF1, 0xF2, 0xF3, 0xF4, 0xF5, 0xF6, 0xF7, 0xF8, 0xF9, 0xFA, 0xFB, 0xFC, 0xFD, 0xFE, 0xFF,
};

/* ---------- splitting by runs ---------- */

int tk_split_runs(const tk_str *st, const tk_runs *runs, int behavior, tk_pieces *out) {
    tk_run *v = runs->v;
    size_t n = runs->n, m = 0;
    tk_run *w = tk_alloc(runs->ar, (n + 1) * sizeof *w);
    if (!w) return -1;
    switch (behavior) {
    case TS_ISOLATED:
        for (size_t i = 0; i < n; i++) w[m++] = (tk_run){v[i].a, v[i].b, 0};
        break;
    case TS_REMOVED:
        for (size_t i = 0; i < n; i++) w[m++] = v[i];
        break;
    case TS_CONTIGUOUS: {
        int prev = 0;
        for (size_t i = 0; i < n; i++) {
            if (v[i].match == prev && m) w[m - 1].b = v[i].b;
            else w[m++] = (tk_run){v[i].a, v[i].b, 0};
            prev = v[i].match;
        }
        break;
    }
    case TS_MERGED_PREV: {
        int prev = 0;
        for (size_t i = 0; i < n; i++) {
            if (v[i].match && !prev && m) w[m - 1].b = v[i].b;
            else w[m++] = (tk_run){v[i].a, v[i].b, 0};
            prev = v[i].match;
        }
        break;
    }
    default: { /* TS_MERGED_NEXT: the same fold from the end */
        int prev = 0;
        for (size_t i = n; i-- > 0;) {
            if (v[i].match && !prev && m) w[m - 1].a = v[i].a;
            else w[m++] = (tk_run){v[i].a, v[i].b, 0};
            prev = v[i].match;
        }
        for (size_t i = 0; i < m / 2; i++) {
            tk_run t = w[i];
            w[i] = w[m - 1 - i];
            w[m - 1 - i] = t;
        }
    }
    }
    for (size_t i = 0; i < m; i++) {
        if ((behavior == TS_REMOVED && w[i].match) || w[i].b <= w[i].a) continue;
        if (tk_pieces_push(out, tk_slice(st, w[i].a, w[i].b), -1)) return -1;
    }
    return 0;
}

/* HF's Pattern for a character predicate: every matching character is a
 * match of its own. */
typedef int (*char_pred)(uint32_t c, const tk_pretok *p);

static int pred_runs(const tk_str *st, char_pred pred, const tk_pretok *p, tk_runs *out) {
    if (!st->n) return tk_runs_push(out, 0, 0, 0);
    uint32_t last = 0;
    for (uint32_t i = 0; i < st->n;) {
        uint32_t b = i;
        uint32_t c = (uint32_t)tk_utf8_next(st->s, st->n, &i);
        if (pred(c, p)) {
            if (last < b && tk_runs_push(out, last, b, 0)) return -1;
            if (tk_runs_push(out, b, i, 1)) return -1;
            last = i;
        }
    }
    if (st->n > last) return tk_runs_push(out, last, st->n, 0);
    return 0;
}

static int split_pred(const tk_str *st, char_pred pred, const tk_pretok *p, int behavior, tk_arena *ar,
                      tk_pieces *out) {
    tk_runs runs = {.ar = ar};
    return pred_runs(st, pred, p, &runs) || tk_split_runs(st, &runs, behavior, out);
}

static int pred_space(uint32_t c, const tk_pretok *p) {
    (void)p;
    return tk_is_whitespace(c);
}
static int pred_punct(uint32_t c, const tk_pretok *p) {
    (void)p;
    return tk_is_punct(c);
}
static int pred_numeric(uint32_t c, const tk_pretok *p) {
    (void)p;
    return tk_is_numeric(c);
}
static int pred_char(uint32_t c, const tk_pretok *p) { return c == p->replacement; }

/* ---------- the GPT-2 pattern ---------- */

enum { G_SPACE, G_LETTER, G_NUMBER, G_OTHER };

static int gclass(uint32_t c) {
    if (tk_is_whitespace(c)) return G_SPACE;
    if (tk_is_letter(c)) return G_LETTER;
    if (tk_is_number(c)) return G_NUMBER;
    return G_OTHER;
}

/* Length of the match of 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
 * ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ at i (there always is one). */
static uint32_t gpt2_match(const char *s, uint32_t n, uint32_t i) {
    if (s[i] == '\'' && i + 1 < n) {
        char a = s[i + 1], b = i + 2 < n ? s[i + 2] : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    }
    uint32_t j = i;
    uint32_t c = (uint32_t)tk_utf8_next(s, n, &j);
    int k = gclass(c);
    uint32_t start = i;
    if (c == ' ' && j < n) { /* ' ?' before a run of letters, numbers or others */
        uint32_t j2 = j;
        int k2 = gclass((uint32_t)tk_utf8_next(s, n, &j2));
        if (k2 != G_SPACE) {
            k = k2;
            start = j;
        }
    }
    if (k != G_SPACE) {
        uint32_t e = start;
        while (e < n) {
            uint32_t t = e;
            if (gclass((uint32_t)tk_utf8_next(s, n, &t)) != k) break;
            e = t;
        }
        return e - i;
    }
    /* whitespace: the run, minus its last character when a non-space follows */
    uint32_t e = i, last = i;
    while (e < n) {
        uint32_t t = e;
        if (!tk_is_whitespace((uint32_t)tk_utf8_next(s, n, &t))) break;
        last = e;
        e = t;
    }
    if (e < n && last > i) return last - i;
    return e - i;
}

static int bytelevel_piece(const tk_pretok *p, tk_arena *ar, tk_str st, tk_pieces *out) {
    if (p->add_prefix_space && !(st.n && st.s[0] == ' ')) {
        tk_change ch[2] = {{' ', 0}, {0, 1}};
        uint32_t k = 0;
        if (st.n) {
            ch[1].cp = (uint32_t)tk_utf8_next(st.s, st.n, &k);
            if (tk_transform(ar, &st, 0, k, ch, 2, 0)) return -1;
        }
    }
    size_t first = out->n;
    if (!p->use_regex) {
        if (st.n && tk_pieces_push(out, st, -1)) return -1;
    } else {
        for (uint32_t i = 0; i < st.n;) {
            uint32_t l = gpt2_match(st.s, st.n, i);
            if (tk_pieces_push(out, tk_slice(&st, i, i + l), -1)) return -1;
            i += l;
        }
    }
    for (size_t k = first; k < out->n; k++) out->v[k].str.bytes = 1;
    return 0;
}

/* Make a lazily byte-mapped piece real (a later stage reads its characters). */
int tk_materialize_bytes(tk_arena *ar, tk_str *st) {
    if (!st->bytes) return 0;
    tk_change *ch = tk_alloc(ar, ((size_t)st->n + 1) * sizeof *ch);
    if (!ch) return -1;
    for (uint32_t i = 0; i < st->n; i++)
        ch[i] = (tk_change){tk_byte_char[(unsigned char)st->s[i]], ((unsigned char)st->s[i] & 0xC0) == 0x80};
    st->bytes = 0;
    return tk_transform(ar, st, 0, st->n, ch, st->n, 0);
}

/* ---------- Metaspace ---------- */

static int metaspace_piece(const tk_pretok *p, tk_arena *ar, tk_str st, tk_pieces *out) {
    char rep[4];
    int rl = qac_utf8_encode(p->replacement, rep);
    /* replace ' ' by the replacement, each aligned to its space */
    uint32_t spaces = 0;
    for (uint32_t i = 0; i < st.n; i++) spaces += st.s[i] == ' ';
    if (spaces) {
        size_t cap = st.n + (size_t)spaces * (size_t)rl;
        char *s = tk_alloc(ar, cap + 1);
        tk_span *al = tk_alloc(ar, (cap + 1) * sizeof *al);
        if (!s || !al) return -1;
        size_t o = 0;
        for (uint32_t i = 0; i < st.n; i++) {
            if (st.s[i] == ' ') {
                memcpy(s + o, rep, (size_t)rl);
                for (int k = 0; k < rl; k++) al[o + (size_t)k] = st.al[i];
                o += (size_t)rl;
            } else {
                s[o] = st.s[i];
                al[o++] = st.al[i];
            }
        }
        st.s = s;
        st.al = al;
        st.n = (uint32_t)o;
    }
    int starts = st.n >= (uint32_t)rl && !memcmp(st.s, rep, (size_t)rl);
    int add = (p->prepend_scheme == TK_PREPEND_ALWAYS && !starts) ||
              (p->prepend_scheme == TK_PREPEND_FIRST && !starts && st.o0 == 0);
    if (add && st.n) {
        uint32_t k = 0;
        tk_change ch[2] = {{p->replacement, 0}, {(uint32_t)tk_utf8_next(st.s, st.n, &k), 1}};
        if (tk_transform(ar, &st, 0, k, ch, 2, 0)) return -1;
    }
    if (!p->split) return st.n ? tk_pieces_push(out, st, -1) : 0;
    return split_pred(&st, pred_char, p, TS_MERGED_NEXT, ar, out);
}

/* ---------- the pre-tokenizers ---------- */

/* BertPreTokenizer: whitespace removed, then punctuation isolated, in one pass. */
static int bert_piece(tk_str st, tk_pieces *out) {
    uint32_t start = 0;
    for (uint32_t i = 0; i < st.n;) {
        uint32_t b = i;
        uint32_t c = (uint32_t)tk_utf8_next(st.s, st.n, &i);
        int sp = tk_is_whitespace(c);
        if (sp || tk_is_punct(c)) {
            if (b > start && tk_pieces_push(out, tk_slice(&st, start, b), -1)) return -1;
            if (!sp && tk_pieces_push(out, tk_slice(&st, b, i), -1)) return -1;
            start = i;
        }
    }
    if (st.n > start && tk_pieces_push(out, tk_slice(&st, start, st.n), -1)) return -1;
    return 0;
}

/* Whitespace: the matches of \w+|[^\w\s]+ (Rust regex classes), the rest removed. */
static int whitespace_piece(tk_str st, tk_pieces *out) {
    uint32_t start = 0;
    int cur = -1; /* 0: word run, 1: other run, -1: none */
    for (uint32_t i = 0; i < st.n;) {
        uint32_t b = i;
        uint32_t c = (uint32_t)tk_utf8_next(st.s, st.n, &i);
        int k = tk_is_word(c) ? 0 : tk_is_whitespace(c) ? -1 : 1;
        if (k != cur) {
            if (cur >= 0 && tk_pieces_push(out, tk_slice(&st, start, b), -1)) return -1;
            start = b;
            cur = k;
        }
    }
    if (cur >= 0 && st.n > start && tk_pieces_push(out, tk_slice(&st, start, st.n), -1)) return -1;
    return 0;
}

static int one_piece(const tk_pretok *p, tk_arena *ar, tk_str st, tk_pieces *out) {
    switch (p->kind) {
    case TP_BERT: return bert_piece(st, out);
    case TP_WHITESPACE: return whitespace_piece(st, out);
    case TP_WHITESPACE_SPLIT: return split_pred(&st, pred_space, p, TS_REMOVED, ar, out);
    case TP_METASPACE: return metaspace_piece(p, ar, st, out);
    case TP_BYTELEVEL: return bytelevel_piece(p, ar, st, out);
    case TP_DIGITS: return split_pred(&st, pred_numeric, p, p->individual_digits ? TS_ISOLATED : TS_CONTIGUOUS, ar, out);
    case TP_PUNCTUATION: return split_pred(&st, pred_punct, p, p->behavior, ar, out);
    case TP_CHAR_DELIMITER: return split_pred(&st, pred_char, p, TS_REMOVED, ar, out);
    case TP_SPLIT: {
        tk_runs runs = {.ar = ar};
        if (tk_pattern_runs(&p->pat, st.s, st.n, &runs)) return -1;
        if (p->invert)
            for (size_t i = 0; i < runs.n; i++) runs.v[i].match = !runs.v[i].match;
        return tk_split_runs(&st, &runs, p->behavior, out);
    }
    default: return st.n ? tk_pieces_push(out, st, -1) : 0;
    }
}

int tk_pretokenize(const tk_pretok *p, tk_arena *ar, tk_pieces *pieces) {
    if (!p) return 0;
    if (p->kind == TP_SEQUENCE) {
        for (int i = 0; i < p->n_kids; i++) {
            if (tk_pretokenize(p->kids[i], ar, pieces)) return -1;
            if (i + 1 < p->n_kids)
                for (size_t k = 0; k < pieces->n; k++)
                    if (pieces->v[k].id < 0 && tk_materialize_bytes(ar, &pieces->v[k].str)) return -1;
        }
        return 0;
    }
    tk_pieces next = {.ar = ar};
    for (size_t i = 0; i < pieces->n; i++) {
        tk_piece *pc = &pieces->v[i];
        if (pc->id >= 0) {
            if (tk_pieces_push(&next, pc->str, pc->id)) return -1;
            continue;
        }
        if (one_piece(p, ar, pc->str, &next)) return -1;
    }
    *pieces = next;
    return 0;
}

void tk_pretok_free(tk_pretok *p) {
    if (!p) return;
    for (int i = 0; i < p->n_kids; i++) tk_pretok_free(p->kids[i]);
    free(p->kids);
    free(p->pat.str);
    tk_regex_free(p->pat.re);
    free(p);
}
