/* SentencePiece's precompiled charsmap (the Precompiled normalizer of a
 * tokenizer.json, or normalizer_spec.precompiled_charsmap of a .model) as
 * tokenizers applies it (spm_precompiled + normalizers/precompiled.rs).
 *
 * The blob: a little-endian u32 byte size of a Darts double-array trie over
 * UTF-8 bytes, the trie's u32 units, then NUL-terminated replacement
 * strings the trie's values index.
 *
 * tokenizers walks the text by extended grapheme clusters: a cluster of
 * fewer than 6 bytes whose bytes start with a key is replaced whole by the
 * replacement of the *shortest* such key; otherwise each character is
 * looked up alone. That differs from SentencePiece's own normalizer (the
 * longest key at each position) on some combining sequences, and
 * tokenizers is the behaviour transformers gives, so it is the one here.
 * Every trie access is bounds-checked: a malformed blob can only make a
 * lookup fail. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tok_hf.h"

struct tk_precompiled {
    uint32_t *units;
    size_t n_units;
    char *normalized; /* replacement strings, NUL-terminated, plus a final NUL */
    size_t n_normalized;
};

static int has_leaf(uint32_t u) { return (u >> 8) & 1; }
static uint32_t unit_value(uint32_t u) { return u & ((1u << 31) - 1); }
static uint32_t unit_label(uint32_t u) { return u & ((1u << 31) | 0xFF); }
static uint32_t unit_offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }

qac_status tk_precompiled_load(tk_precompiled **out, const unsigned char *blob, size_t len) {
    *out = NULL;
    if (len < 4) return qac_set_error(QAC_ERR_FORMAT, "precompiled_charsmap: %zu bytes, too short", len);
    uint32_t trie_bytes = (uint32_t)blob[0] | (uint32_t)blob[1] << 8 | (uint32_t)blob[2] << 16 | (uint32_t)blob[3] << 24;
    if (trie_bytes > len - 4 || trie_bytes / 4 == 0)
        return qac_set_error(QAC_ERR_FORMAT, "precompiled_charsmap: trie size %u past the %zu bytes given", trie_bytes,
                             len);
    tk_precompiled *pc = calloc(1, sizeof *pc);
    if (!pc) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    pc->n_units = trie_bytes / 4;
    pc->units = malloc(pc->n_units * sizeof *pc->units);
    size_t rest = len - 4 - (size_t)(trie_bytes / 4) * 4;
    pc->normalized = malloc(rest + 1);
    if (!pc->units || !pc->normalized) {
        tk_precompiled_free(pc);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < pc->n_units; i++) {
        const unsigned char *p = blob + 4 + 4 * i;
        pc->units[i] = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    }
    memcpy(pc->normalized, blob + 4 + pc->n_units * 4, rest);
    pc->normalized[rest] = '\0';
    pc->n_normalized = rest;
    /* tokenizers rejects a blob whose strings are not UTF-8 */
    for (size_t i = 0; i < rest;) {
        uint32_t cp;
        int k = qac_utf8_decode((const unsigned char *)pc->normalized + i, rest - i, &cp);
        if (cp == 0xFFFD && !(k == 3 && (unsigned char)pc->normalized[i] == 0xEF)) {
            tk_precompiled_free(pc);
            return qac_set_error(QAC_ERR_FORMAT, "precompiled_charsmap: replacement strings are not valid UTF-8");
        }
        i += (size_t)k;
    }
    *out = pc;
    return QAC_OK;
}

void tk_precompiled_free(tk_precompiled *pc) {
    if (!pc) return;
    free(pc->units);
    free(pc->normalized);
    free(pc);
}

/* The replacement of the shortest key that prefixes s[0..n) (spm_precompiled
 * `transform`): 1 and the replacement, or 0. */
static int shortest(const tk_precompiled *pc, const char *s, uint32_t n, const char **rep, uint32_t *rep_len) {
    size_t pos = 0;
    uint32_t u = pc->units[0];
    pos ^= unit_offset(u);
    for (uint32_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!c) break;
        pos ^= c;
        if (pos >= pc->n_units) return 0;
        u = pc->units[pos];
        if (unit_label(u) != c) return 0;
        pos ^= unit_offset(u);
        if (has_leaf(u)) {
            if (pos >= pc->n_units) return 0;
            uint32_t v = unit_value(pc->units[pos]);
            if (v > pc->n_normalized) return 0;
            *rep = pc->normalized + v;
            *rep_len = (uint32_t)strlen(*rep);
            return 1;
        }
    }
    return 0;
}

static int replace_with(tk_changes *ch, uint32_t old_chars, const char *rep, uint32_t rep_len) {
    uint32_t stack[64], *cps = rep_len <= 64 ? stack : tk_alloc(ch->ar, rep_len * sizeof *cps);
    if (!cps) return -1;
    size_t k = 0;
    for (uint32_t i = 0; i < rep_len;) cps[k++] = (uint32_t)tk_utf8_next(rep, rep_len, &i);
    return tk_changes_replace(ch, old_chars, cps, k);
}

int tk_precompiled_normalize(const tk_precompiled *pc, tk_arena *ar, tk_str *st) {
    if (!pc || !st->n) return 0;
    tk_changes ch = {.ar = ar};
    int modified = 0;
    utf8proc_int32_t state = 0;
    uint32_t g = 0; /* start of the current grapheme cluster */
    uint32_t prev = 0;
    for (uint32_t i = 0; i <= st->n;) {
        uint32_t at = i, c = 0;
        int brk = 1;
        if (i < st->n) {
            c = (uint32_t)tk_utf8_next(st->s, st->n, &i);
            brk = at == 0 ? 0 : utf8proc_grapheme_break_stateful((utf8proc_int32_t)prev, (utf8proc_int32_t)c, &state);
        }
        if (at > g && brk) { /* grapheme [g, at) is complete */
            const char *rep;
            uint32_t rep_len, chars = 0;
            for (uint32_t k = g; k < at; chars++) tk_utf8_next(st->s, at, &k);
            if (at - g < 6 && shortest(pc, st->s + g, at - g, &rep, &rep_len)) {
                modified = 1;
                if (replace_with(&ch, chars, rep, rep_len)) return -1;
            } else {
                for (uint32_t k = g; k < at;) {
                    uint32_t ks = k;
                    uint32_t d = (uint32_t)tk_utf8_next(st->s, at, &k);
                    if (shortest(pc, st->s + ks, k - ks, &rep, &rep_len)) {
                        modified = 1;
                        if (replace_with(&ch, 1, rep, rep_len)) return -1;
                    } else if (tk_changes_push(&ch, d, 0)) {
                        return -1;
                    }
                }
            }
            g = at;
        }
        if (at >= st->n) break;
        prev = c;
    }
    if (!modified) return 0;
    return tk_transform(ar, st, 0, st->n, ch.v, ch.n, 0);
}
