/* Decoding for the tokenizer.json pipeline (tok_hf.h), as tokenizers'
 * Tokenizer::decode: the ids' token strings (special tokens dropped when
 * asked, unknown ids skipped), through the decoder chain (ByteLevel,
 * Metaspace, WordPiece, BPEDecoder, Replace, Strip, Fuse, ByteFallback,
 * Sequence), joined; with no decoder the tokens joined by spaces. */
#include <stdlib.h>
#include <string.h>

#include "tok_hf.h"

typedef struct dtok {
    char *s;
    size_t n;
} dtok;

typedef struct dlist {
    dtok *v;
    size_t n, cap;
} dlist;

static int dl_push(dlist *l, const char *s, size_t n) {
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 16;
        dtok *nv = realloc(l->v, nc * sizeof *nv);
        if (!nv) return -1;
        l->v = nv;
        l->cap = nc;
    }
    char *c = malloc(n + 1);
    if (!c) return -1;
    memcpy(c, s, n);
    c[n] = '\0';
    l->v[l->n++] = (dtok){c, n};
    return 0;
}

static void dl_free(dlist *l) {
    for (size_t i = 0; i < l->n; i++) free(l->v[i].s);
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* Replace every occurrence of from[0..fl) in t by to[0..tl); count limits (0: all). */
static int replace_str(dtok *t, const char *from, size_t fl, const char *to, size_t tl, int count) {
    if (!fl) return 0;
    size_t hits = 0;
    for (size_t i = 0; i + fl <= t->n;)
        if (!memcmp(t->s + i, from, fl) && (!count || (int)hits < count)) hits++, i += fl;
        else i++;
    if (!hits) return 0;
    char *o = malloc(t->n + hits * tl + 1);
    if (!o) return -1;
    size_t k = 0, done = 0;
    for (size_t i = 0; i < t->n;) {
        if (i + fl <= t->n && !memcmp(t->s + i, from, fl) && (!count || (int)done < count)) {
            memcpy(o + k, to, tl);
            k += tl;
            i += fl;
            done++;
        } else {
            o[k++] = t->s[i++];
        }
    }
    o[k] = '\0';
    free(t->s);
    t->s = o;
    t->n = k;
    return 0;
}

static int byte_of_char(uint32_t c) {
    for (int b = 0; b < 256; b++)
        if (tk_byte_char[b] == c) return b;
    return -1;
}

/* ByteLevel: every token's characters back to bytes (a token with a
 * character outside the byte alphabet keeps its UTF-8), one lossy string. */
static int dec_bytelevel(dlist *l) {
    size_t total = 0;
    for (size_t i = 0; i < l->n; i++) total += l->v[i].n;
    unsigned char *buf = malloc(total + 1);
    if (!buf) return -1;
    size_t k = 0;
    for (size_t i = 0; i < l->n; i++) {
        dtok *t = &l->v[i];
        size_t start = k;
        int ok = 1;
        for (uint32_t j = 0; j < t->n && ok;) {
            int b = byte_of_char((uint32_t)tk_utf8_next(t->s, (uint32_t)t->n, &j));
            if (b < 0) ok = 0;
            else buf[k++] = (unsigned char)b;
        }
        if (!ok) {
            k = start;
            memcpy(buf + k, t->s, t->n);
            k += t->n;
        }
    }
    /* from_utf8_lossy */
    char *out = malloc(k * 3 + 1);
    if (!out) {
        free(buf);
        return -1;
    }
    size_t o = 0;
    for (size_t i = 0; i < k;) {
        uint32_t cp;
        i += (size_t)qac_utf8_decode(buf + i, k - i, &cp);
        o += (size_t)qac_utf8_encode(cp, out + o);
    }
    free(buf);
    dlist nl = {0};
    int rc = dl_push(&nl, out, o);
    free(out);
    if (rc) return -1;
    dl_free(l);
    *l = nl;
    return 0;
}

static int dec_byte_fallback(dlist *l) {
    dlist nl = {0};
    unsigned char pend[256];
    size_t np = 0;
    int rc = 0;
    for (size_t i = 0; i <= l->n && !rc; i++) {
        dtok *t = i < l->n ? &l->v[i] : NULL;
        int hex = t && t->n == 6 && !memcmp(t->s, "<0x", 3) && t->s[5] == '>';
        unsigned v = 0;
        if (hex) {
            for (int d = 3; d < 5 && hex; d++) {
                char c = t->s[d];
                int x = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
                if (x < 0) hex = 0;
                else v = v * 16 + (unsigned)x;
            }
        }
        if (hex && np < sizeof pend) {
            pend[np++] = (unsigned char)v;
            continue;
        }
        if (np) {
            int valid = 1;
            for (size_t j = 0; j < np && valid;) {
                uint32_t cp;
                int k = qac_utf8_decode(pend + j, np - j, &cp);
                if (cp == 0xFFFD && !(k == 3 && pend[j] == 0xEF)) valid = 0;
                j += (size_t)k;
            }
            if (valid) rc = dl_push(&nl, (const char *)pend, np);
            else
                for (size_t j = 0; j < np && !rc; j++) rc = dl_push(&nl, "\xef\xbf\xbd", 3);
            np = 0;
        }
        if (t && !rc) rc = dl_push(&nl, t->s, t->n);
    }
    if (rc) {
        dl_free(&nl);
        return -1;
    }
    dl_free(l);
    *l = nl;
    return 0;
}

static int dec_one(const tk_dec *d, dlist *l) {
    char rep[4];
    switch (d->kind) {
    case TD_SEQUENCE:
        for (int i = 0; i < d->n_kids; i++)
            if (dec_one(d->kids[i], l)) return -1;
        return 0;
    case TD_BYTELEVEL: return dec_bytelevel(l);
    case TD_BYTE_FALLBACK: return dec_byte_fallback(l);
    case TD_FUSE: {
        size_t total = 0;
        for (size_t i = 0; i < l->n; i++) total += l->v[i].n;
        char *s = malloc(total + 1);
        if (!s) return -1;
        size_t k = 0;
        for (size_t i = 0; i < l->n; i++) memcpy(s + k, l->v[i].s, l->v[i].n), k += l->v[i].n;
        dlist nl = {0};
        int rc = dl_push(&nl, s, k);
        free(s);
        if (rc) return -1;
        dl_free(l);
        *l = nl;
        return 0;
    }
    case TD_METASPACE: {
        int rl = qac_utf8_encode(d->replacement, rep);
        for (size_t i = 0; i < l->n; i++) {
            int drop = i == 0 && d->prepend_scheme != TK_PREPEND_NEVER;
            if (replace_str(&l->v[i], rep, (size_t)rl, " ", drop ? 0 : 1, 0)) return -1;
        }
        return 0;
    }
    case TD_WORDPIECE:
        for (size_t i = 0; i < l->n; i++) {
            dtok *t = &l->v[i];
            if (i) {
                if (t->n >= d->prefix_len && !memcmp(t->s, d->prefix, d->prefix_len)) {
                    memmove(t->s, t->s + d->prefix_len, t->n - d->prefix_len + 1);
                    t->n -= d->prefix_len;
                } else {
                    char *s = malloc(t->n + 2);
                    if (!s) return -1;
                    s[0] = ' ';
                    memcpy(s + 1, t->s, t->n + 1);
                    free(t->s);
                    t->s = s;
                    t->n++;
                }
            }
            if (d->cleanup) {
                static const char *const from[] = {" .", " ?", " !", " ,", " ' ", " n't", " 'm", " do not", " 's", " 've", " 're"};
                static const char *const to[] = {".", "?", "!", ",", "'", "n't", "'m", " don't", "'s", "'ve", "'re"};
                for (size_t r = 0; r < sizeof from / sizeof from[0]; r++)
                    if (replace_str(t, from[r], strlen(from[r]), to[r], strlen(to[r]), 0)) return -1;
            }
        }
        return 0;
    case TD_BPE:
        for (size_t i = 0; i < l->n; i++)
            if (replace_str(&l->v[i], d->suffix, d->suffix_len, " ", i + 1 == l->n ? 0 : 1, 0)) return -1;
        return 0;
    case TD_REPLACE:
        for (size_t i = 0; i < l->n; i++) {
            dtok *t = &l->v[i];
            tk_arena ar = {0};
            tk_runs runs = {.ar = &ar};
            if (tk_pattern_runs(&d->pat, t->s, (uint32_t)t->n, &runs)) {
                tk_arena_free(&ar);
                return -1;
            }
            size_t cap = t->n + 1;
            for (size_t r = 0; r < runs.n; r++) cap += runs.v[r].match ? d->content_len : 0;
            char *s = malloc(cap);
            if (!s) {
                tk_arena_free(&ar);
                return -1;
            }
            size_t k = 0;
            for (size_t r = 0; r < runs.n; r++) {
                if (runs.v[r].match) memcpy(s + k, d->content, d->content_len), k += d->content_len;
                else memcpy(s + k, t->s + runs.v[r].a, runs.v[r].b - runs.v[r].a), k += runs.v[r].b - runs.v[r].a;
            }
            s[k] = '\0';
            free(t->s);
            t->s = s;
            t->n = k;
            tk_arena_free(&ar);
        }
        return 0;
    case TD_STRIP:
        for (size_t i = 0; i < l->n; i++) {
            dtok *t = &l->v[i];
            int cl = qac_utf8_encode((uint32_t)d->strip_content, rep);
            size_t a = 0, b = t->n;
            for (int k = 0; k < d->strip_start && a + (size_t)cl <= b && !memcmp(t->s + a, rep, (size_t)cl); k++) a += (size_t)cl;
            for (int k = 0; k < d->strip_stop && b >= a + (size_t)cl && !memcmp(t->s + b - cl, rep, (size_t)cl); k++) b -= (size_t)cl;
            memmove(t->s, t->s + a, b - a);
            t->n = b - a;
            t->s[t->n] = '\0';
        }
        return 0;
    default: return 0;
    }
}

void tk_dec_free(tk_dec *d) {
    if (!d) return;
    for (int i = 0; i < d->n_kids; i++) tk_dec_free(d->kids[i]);
    free(d->kids);
    free(d->prefix);
    free(d->suffix);
    free(d->content);
    free(d->pat.str);
    tk_regex_free(d->pat.re);
    free(d);
}

qac_status tk_pipe_decode(const tk_pipe *p, const int32_t *ids, int n, int skip_special, char **text) {
    *text = NULL;
    dlist l = {0};
    for (int i = 0; i < n; i++) {
        const char *t = tk_pipe_id_to_token(p, ids[i]);
        if (!t || (skip_special && tk_pipe_is_special(p, ids[i]))) continue;
        if (dl_push(&l, t, strlen(t))) goto nomem;
    }
    if (p->dec && dec_one(p->dec, &l)) goto nomem;
    size_t total = 1;
    for (size_t i = 0; i < l.n; i++) total += l.v[i].n + 1;
    char *out = malloc(total);
    if (!out) goto nomem;
    size_t k = 0;
    for (size_t i = 0; i < l.n; i++) {
        if (i && !p->dec) out[k++] = ' ';
        memcpy(out + k, l.v[i].s, l.v[i].n);
        k += l.v[i].n;
    }
    out[k] = '\0';
    dl_free(&l);
    *text = out;
    return QAC_OK;
nomem:
    dl_free(&l);
    return qac_set_error(QAC_ERR_NOMEM, "decode: out of memory");
}
