/* The tokenizer.json pipeline's encode (tok_hf.h): added tokens, normalize,
 * pre-tokenize, model, offset trimming.
 *
 * Added tokens follow tokenizers' AddedVocabulary: the tokens marked
 * normalized: false are matched on the raw text, the others (by their
 * normalized content) on each normalized remainder; matching is
 * leftmost-longest over the text, a single_word token is dropped (its span
 * still consumed) when a word character touches it, lstrip / rstrip take
 * the whitespace beside it into its span. */
#include <stdlib.h>
#include <string.h>

#include "tok_hf.h"

void tk_pipe_free(tk_pipe *p) {
    if (!p) return;
    for (int i = 0; i < p->n_added; i++) {
        free(p->added[i].content);
        free(p->added[i].norm);
    }
    free(p->added);
    tk_trie_free(p->raw_trie);
    tk_trie_free(p->norm_trie);
    tk_norm_free(p->norm);
    tk_pretok_free(p->pre);
    tk_model_free(&p->model);
    tk_dec_free(p->dec);
    free(p->describe);
    memset(p, 0, sizeof *p);
}

/* A whole text as a piece: each byte its own source. */
static int whole_text(tk_arena *ar, const char *text, uint32_t len, tk_str *st) {
    tk_span *al = tk_alloc(ar, ((size_t)len + 1) * sizeof *al);
    if (!al) return -1;
    for (uint32_t i = 0; i < len;) {
        uint32_t s = i;
        tk_utf8_next(text, len, &i);
        for (uint32_t k = s; k < i; k++) al[k] = (tk_span){s, i};
    }
    *st = (tk_str){.s = text, .al = al, .n = len, .o0 = 0, .o1 = len};
    return 0;
}

qac_status tk_pipe_finish(tk_pipe *p) {
    int n = p->n_added;
    const char **keys = calloc((size_t)n + 1, sizeof *keys);
    uint32_t *lens = calloc((size_t)n + 1, sizeof *lens);
    int32_t *vals = calloc((size_t)n + 1, sizeof *vals);
    if (!keys || !lens || !vals) {
        free(keys);
        free(lens);
        free(vals);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    qac_status st = QAC_OK;
    /* normalized tokens match by their normalized content */
    for (int i = 0; i < n && !st; i++) {
        tk_added *a = &p->added[i];
        if (!a->normalized || !p->norm) continue;
        tk_arena ar = {0};
        tk_str s;
        if (whole_text(&ar, a->content, a->len, &s) || tk_normalize(p->norm, &ar, &s) || ar.oom) {
            st = ar.oom ? qac_set_error(QAC_ERR_NOMEM, "out of memory") : qac_wrap_error(QAC_ERR_FORMAT, "added token");
        } else if (s.n != a->len || memcmp(s.s, a->content, s.n)) {
            a->norm = malloc((size_t)s.n + 1);
            if (!a->norm) st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
            else {
                memcpy(a->norm, s.s, s.n);
                a->norm[s.n] = '\0';
                a->norm_len = s.n;
            }
        }
        tk_arena_free(&ar);
    }
    for (int pass = 0; pass < 2 && !st; pass++) {
        int k = 0;
        for (int i = 0; i < n; i++) {
            tk_added *a = &p->added[i];
            if (a->normalized != pass || !a->len) continue;
            keys[k] = a->norm ? a->norm : a->content;
            lens[k] = a->norm ? a->norm_len : a->len;
            vals[k++] = i;
        }
        if (k) st = tk_trie_build(pass ? &p->norm_trie : &p->raw_trie, k, keys, lens, vals);
    }
    free(keys);
    free(lens);
    free(vals);
    int32_t top = p->model.vocab.n;
    for (int i = 0; i < n; i++)
        if (p->added[i].id >= top) top = p->added[i].id + 1;
    p->vocab_total = top;
    return st;
}

int32_t tk_pipe_token_to_id(const tk_pipe *p, const char *s, size_t n) {
    for (int i = 0; i < p->n_added; i++)
        if (p->added[i].len == n && !memcmp(p->added[i].content, s, n)) return p->added[i].id;
    return tk_vocab_find(&p->model.vocab, s, n);
}

/* ---------- added tokens in a text ---------- */

static int word_before(const char *s, uint32_t at) {
    if (!at) return 0;
    uint32_t i = (uint32_t)tk_utf8_prev(s, at);
    return tk_is_word((uint32_t)tk_utf8_next(s, at, &i));
}

static int word_after(const char *s, uint32_t n, uint32_t at) {
    if (at >= n) return 0;
    return tk_is_word((uint32_t)tk_utf8_next(s, n, &at));
}

/* Split a piece by the added tokens of `trie`, appending to out. */
static int split_added(const tk_pipe *p, const tk_trie *trie, const tk_str *st, tk_pieces *out) {
    if (!trie || !st->n) return st->n ? tk_pieces_push(out, *st, -1) : 0;
    uint32_t done = 0; /* start_offset: end of the last match taken */
    for (uint32_t i = 0; i < st->n;) {
        int32_t which = -1;
        uint32_t len = tk_trie_longest(trie, st->s + i, st->n - i, &which);
        if (!len) {
            i++;
            continue;
        }
        const tk_added *a = &p->added[which];
        uint32_t start = i, stop = i + len;
        i = stop; /* the next search resumes after this match, taken or not */
        if (a->single_word && (word_before(st->s, start) || word_after(st->s, st->n, stop))) continue;
        if (a->lstrip) {
            uint32_t ns = start;
            while (ns > 0) {
                uint32_t q = (uint32_t)tk_utf8_prev(st->s, ns), r = q;
                if (!tk_is_whitespace((uint32_t)tk_utf8_next(st->s, ns, &r))) break;
                ns = q;
            }
            start = ns > done ? ns : done;
        }
        if (a->rstrip)
            while (stop < st->n) {
                uint32_t r = stop;
                if (!tk_is_whitespace((uint32_t)tk_utf8_next(st->s, st->n, &r))) break;
                stop = r;
            }
        if (done < start && tk_pieces_push(out, tk_slice(st, done, start), -1)) return -1;
        if (tk_pieces_push(out, tk_slice(st, start, stop), a->id)) return -1;
        done = stop;
    }
    if (done < st->n && tk_pieces_push(out, tk_slice(st, done, st->n), -1)) return -1;
    return 0;
}

/* ByteLevel / RoBERTa offset trimming (HF process_offsets): leading and
 * trailing spaces of a token's value leave its offsets. tokenizers trims
 * after turning offsets into characters (what its Python API reports), so
 * the count moves over characters of the text: a no-break space that the
 * normalizer made a space leaves whole. */
static uint32_t chars_forward(const char *text, uint32_t at, uint32_t count, uint32_t limit) {
    for (uint32_t k = 0; k < count && at < limit; k++) tk_utf8_next(text, limit, &at);
    return at;
}

static void trim_offsets(const tk_pipe *p, const char *text, tk_toks *t, size_t from) {
    for (size_t i = from; i < t->n; i++) {
        tk_tok *k = &t->v[i];
        uint32_t lead = 0, trail = 0;
        int leading = 1;
        for (uint32_t j = 0; j < k->vlen;) {
            uint32_t c = (uint32_t)tk_utf8_next(k->val, k->vlen, &j);
            int sp = c == 0x120 || tk_is_whitespace(c);
            if (leading && sp) lead++;
            else leading = 0;
            trail = sp ? trail + 1 : 0;
        }
        if (!lead && !trail) continue;
        if (lead) {
            int first = i == from || k->off.a == 0;
            if (first && p->trim_prefix_space && lead == 1) lead = 0;
            k->off.a = chars_forward(text, k->off.a, lead, k->off.b);
        }
        if (trail) {
            uint32_t chars = 0, b = k->off.b;
            for (uint32_t q = 0; q < k->off.b; chars++) tk_utf8_next(text, k->off.b, &q);
            if (chars >= trail) {
                for (uint32_t r = 0; r < trail && b > k->off.a; r++) b = (uint32_t)tk_utf8_prev(text, b);
                k->off.b = b > k->off.a ? b : k->off.a;
            }
        }
    }
}

qac_status tk_pipe_encode(const tk_pipe *p, const char *text, size_t len, int stop, tk_toks *out) {
    if (len > UINT32_MAX / 4) return qac_set_error(QAC_ERR_INVALID, "text of %zu bytes: too long to tokenize", len);
    size_t first = out->n;
    tk_arena ar = {0};
    qac_status st = QAC_OK;
    qac_clear_error(); /* a stage that fails without a message ran out of memory */
    tk_str whole;
    tk_pieces raw = {.ar = &ar}, pieces = {.ar = &ar};
    if (whole_text(&ar, text, (uint32_t)len, &whole) || split_added(p, p->raw_trie, &whole, &raw)) goto fail;
    for (size_t i = 0; i < raw.n; i++) {
        if (raw.v[i].id >= 0) {
            if (tk_pieces_push(&pieces, raw.v[i].str, raw.v[i].id)) goto fail;
            continue;
        }
        tk_str s = raw.v[i].str;
        if (tk_normalize(p->norm, &ar, &s) || split_added(p, p->norm_trie, &s, &pieces)) goto fail;
    }
    if (tk_pretokenize(p->pre, &ar, &pieces)) goto fail;
    for (size_t i = 0; i < pieces.n; i++) {
        const tk_piece *pc = &pieces.v[i];
        if (pc->id >= 0) {
            if (tk_toks_push(out, pc->id, tk_original(&pc->str, 0, pc->str.n), pc->str.s, pc->str.n)) goto fail;
        } else if (tk_model_tokenize(&p->model, &ar, &pc->str, out)) {
            goto fail;
        }
        if (stop >= 0 && out->n - first >= (size_t)stop) break;
    }
    if (p->trim_offsets) trim_offsets(p, text, out, first);
    /* values point into the arena: clear them before it goes */
    for (size_t i = first; i < out->n; i++) out->v[i].val = NULL, out->v[i].vlen = 0;
    tk_arena_free(&ar);
    return QAC_OK;
fail:
    if (ar.oom || !*qac_last_error()) st = qac_set_error(QAC_ERR_NOMEM, "tokenize: out of memory");
    else st = qac_wrap_error(QAC_ERR_FORMAT, "tokenize");
    for (size_t i = first; i < out->n; i++) out->v[i].val = NULL, out->v[i].vlen = 0;
    tk_arena_free(&ar);
    return st;
}
