/* The byte trie, and the WordPiece, WordLevel and Unigram
 * models of the tokenizer.json pipeline (tok_hf.h); BPE is in tok_bpe.c,
 * the vocabulary in tok_vocab.c.
 * Each model follows tokenizers/src/models: the same tokens, the same
 * offsets inside the piece, the same unknown-token rules.
 *
 * Unigram is tokenizers' encode_optimized, SentencePiece's Viterbi: at each
 * character every vocabulary entry that starts there extends the best path
 * ending at its end (a strictly better score replaces it, so the shorter
 * entry wins a tie); a character no entry covers costs min_score - 10 as
 * the unknown token, and consecutive unknown characters fuse into one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_hf.h"

/* ---------- byte trie ---------- */

struct tk_trie {
    int32_t *value;    /* per node, -1: no key ends here */
    uint32_t n_nodes, cap_nodes;
    uint64_t *edge_key; /* (node << 8 | byte) + 1, 0 = empty */
    uint32_t *edge_child;
    uint32_t mask, n_edges;
};

static uint32_t edge_hash(uint64_t k) {
    k ^= k >> 29;
    k *= 0xbf58476d1ce4e5b9ULL;
    k ^= k >> 32;
    return (uint32_t)k;
}

static int trie_grow_edges(tk_trie *t) {
    uint32_t cap = t->mask ? (t->mask + 1) * 2 : 1024;
    uint64_t *k = calloc(cap, sizeof *k);
    uint32_t *c = malloc((size_t)cap * sizeof *c);
    if (!k || !c) {
        free(k);
        free(c);
        return -1;
    }
    for (uint32_t i = 0; t->mask && i <= t->mask; i++) {
        if (!t->edge_key[i]) continue;
        for (uint32_t s = edge_hash(t->edge_key[i]) & (cap - 1);; s = (s + 1) & (cap - 1))
            if (!k[s]) {
                k[s] = t->edge_key[i];
                c[s] = t->edge_child[i];
                break;
            }
    }
    free(t->edge_key);
    free(t->edge_child);
    t->edge_key = k;
    t->edge_child = c;
    t->mask = cap - 1;
    return 0;
}

static int64_t trie_child(const tk_trie *t, uint32_t node, unsigned char b) {
    uint64_t key = ((uint64_t)node << 8 | b) + 1;
    for (uint32_t s = edge_hash(key) & t->mask;; s = (s + 1) & t->mask) {
        if (!t->edge_key[s]) return -1;
        if (t->edge_key[s] == key) return t->edge_child[s];
    }
}

void tk_trie_free(tk_trie *t) {
    if (!t) return;
    free(t->value);
    free(t->edge_key);
    free(t->edge_child);
    free(t);
}

qac_status tk_trie_build(tk_trie **out, int n, const char *const *key, const uint32_t *len, const int32_t *value) {
    *out = NULL;
    tk_trie *t = calloc(1, sizeof *t);
    if (!t || trie_grow_edges(t)) {
        tk_trie_free(t);
        return qac_set_error(QAC_ERR_NOMEM, "trie: out of memory");
    }
    t->cap_nodes = 1024;
    t->value = malloc(t->cap_nodes * sizeof *t->value);
    if (!t->value) {
        tk_trie_free(t);
        return qac_set_error(QAC_ERR_NOMEM, "trie: out of memory");
    }
    t->value[0] = -1;
    t->n_nodes = 1;
    for (int i = 0; i < n; i++) {
        uint32_t node = 0;
        for (uint32_t j = 0; j < len[i]; j++) {
            unsigned char b = (unsigned char)key[i][j];
            int64_t c = trie_child(t, node, b);
            if (c < 0) {
                if ((t->n_edges + 1) * 2 > t->mask + 1 && trie_grow_edges(t)) goto nomem;
                if (t->n_nodes == t->cap_nodes) {
                    int32_t *nv = realloc(t->value, (size_t)t->cap_nodes * 2 * sizeof *nv);
                    if (!nv) goto nomem;
                    t->value = nv;
                    t->cap_nodes *= 2;
                }
                c = t->n_nodes++;
                t->value[c] = -1;
                uint64_t k = ((uint64_t)node << 8 | b) + 1;
                for (uint32_t s = edge_hash(k) & t->mask;; s = (s + 1) & t->mask)
                    if (!t->edge_key[s]) {
                        t->edge_key[s] = k;
                        t->edge_child[s] = (uint32_t)c;
                        break;
                    }
                t->n_edges++;
            }
            node = (uint32_t)c;
        }
        if (len[i]) t->value[node] = value[i];
    }
    *out = t;
    return QAC_OK;
nomem:
    tk_trie_free(t);
    return qac_set_error(QAC_ERR_NOMEM, "trie: out of memory");
}

void tk_trie_prefixes(const tk_trie *t, const char *s, uint32_t n, tk_prefix_fn fn, void *user) {
    uint32_t node = 0;
    for (uint32_t i = 0; i < n; i++) {
        int64_t c = trie_child(t, node, (unsigned char)s[i]);
        if (c < 0) return;
        node = (uint32_t)c;
        if (t->value[node] >= 0 && fn(user, i + 1, t->value[node])) return;
    }
}

uint32_t tk_trie_longest(const tk_trie *t, const char *s, uint32_t n, int32_t *value) {
    uint32_t node = 0, best = 0;
    for (uint32_t i = 0; i < n; i++) {
        int64_t c = trie_child(t, node, (unsigned char)s[i]);
        if (c < 0) break;
        node = (uint32_t)c;
        if (t->value[node] >= 0) {
            best = i + 1;
            *value = t->value[node];
        }
    }
    return best;
}

/* ---------- WordPiece, WordLevel ---------- */

static int emit(const tk_model *m, const tk_str *pc, tk_toks *out, int32_t id, uint32_t a, uint32_t b) {
    uint32_t vl = 0;
    const char *v = tk_model_id_to_token(m, id, &vl);
    return tk_toks_push(out, id, tk_original(pc, a, b), v ? v : "", vl);
}

static int missing_unk(const char *model) {
    qac_set_error(QAC_ERR_FORMAT, "%s: the text needs the unknown token, and the model has none", model);
    return -1;
}

static int wordpiece(const tk_model *m, const tk_str *pc, tk_toks *out) {
    uint32_t chars = 0;
    for (uint32_t i = 0; i < pc->n; chars++) tk_utf8_next(pc->s, pc->n, &i);
    if ((int)chars > m->max_chars) return m->unk < 0 ? missing_unk("WordPiece") : emit(m, pc, out, m->unk, 0, pc->n);
    size_t first = out->n;
    for (uint32_t start = 0; start < pc->n;) {
        uint32_t end = pc->n;
        int32_t id = -1;
        while (start < end) {
            id = start > 0 ? tk_vocab_find2(&m->vocab, m->prefix, m->prefix_len, pc->s + start, end - start)
                           : tk_vocab_find(&m->vocab, pc->s, end);
            if (id >= 0) break;
            end = (uint32_t)tk_utf8_prev(pc->s, end);
        }
        if (id < 0) {
            out->n = first;
            return m->unk < 0 ? missing_unk("WordPiece") : emit(m, pc, out, m->unk, 0, pc->n);
        }
        if (emit(m, pc, out, id, start, end)) return -1;
        start = end;
    }
    return 0;
}

static int wordlevel(const tk_model *m, const tk_str *pc, tk_toks *out) {
    int32_t id = tk_vocab_find(&m->vocab, pc->s, pc->n);
    if (id < 0) id = m->unk;
    if (id < 0) return missing_unk("WordLevel");
    return emit(m, pc, out, id, 0, pc->n);
}

/* ---------- Unigram ---------- */

typedef struct ug_node {
    double score;
    int32_t id;
    int32_t start; /* -1: not reached */
} ug_node;

typedef struct ug_step {
    const tk_model *m;
    ug_node *best;
    uint32_t at, char_len;
    double base;
    int single;
} ug_step;

static int ug_visit(void *user, uint32_t len, int32_t id) {
    ug_step *u = user;
    ug_node *t = &u->best[u->at + len];
    double cand = u->m->scores[id] + u->base;
    if (t->start < 0 || cand > t->score) {
        t->score = cand;
        t->start = (int32_t)u->at;
        t->id = id;
    }
    if (len == u->char_len) u->single = 1;
    return 0;
}

static int unigram(const tk_model *m, tk_arena *ar, const tk_str *pc, tk_toks *out) {
    uint32_t n = pc->n;
    ug_node *best = tk_alloc(ar, ((size_t)n + 1) * sizeof *best);
    if (!best) return -1;
    for (uint32_t i = 0; i <= n; i++) best[i] = (ug_node){0, -1, -1};
    best[0].start = 0;
    double unk_score = m->min_score - 10.0;
    for (uint32_t at = 0; at < n;) {
        uint32_t next = at;
        tk_utf8_next(pc->s, n, &next);
        ug_step u = {m, best, at, next - at, best[at].score, 0};
        if (m->trie) tk_trie_prefixes(m->trie, pc->s + at, n - at, ug_visit, &u);
        if (!u.single) {
            if (m->unk < 0) return missing_unk("Unigram");
            ug_node *t = &best[next];
            double cand = unk_score + u.base;
            if (t->start < 0 || cand > t->score) {
                t->score = cand;
                t->start = (int32_t)at;
                t->id = m->unk;
            }
        }
        at = next;
    }
    /* back from the end: pieces in reverse, fusing runs of unknowns */
    size_t cap = 16, k = 0;
    tk_span *spans = tk_alloc(ar, cap * sizeof *spans);
    if (!spans) return -1;
    uint32_t unk_end = 0;
    int in_unk = 0;
    for (uint32_t end = n; end > 0;) {
        uint32_t start = (uint32_t)best[end].start;
        int is_unk = m->unk >= 0 && best[end].id == m->unk;
        if (k + 2 > cap) {
            tk_span *ns = tk_alloc(ar, cap * 2 * sizeof *ns);
            if (!ns) return -1;
            memcpy(ns, spans, k * sizeof *ns);
            spans = ns;
            cap *= 2;
        }
        if (is_unk) {
            if (!in_unk) unk_end = end;
            in_unk = 1;
        } else {
            if (in_unk) spans[k++] = (tk_span){end, unk_end};
            in_unk = 0;
            spans[k++] = (tk_span){start, end};
        }
        end = start;
    }
    if (in_unk) spans[k++] = (tk_span){0, unk_end};
    for (size_t i = k; i-- > 0;) {
        uint32_t a = spans[i].a, b = spans[i].b;
        int32_t id = tk_vocab_find(&m->vocab, pc->s + a, b - a);
        if (id < 0 && m->byte_fallback) {
            int all = 1;
            for (uint32_t j = a; j < b && all; j++) all = m->byte_ids[(unsigned char)pc->s[j]] >= 0;
            if (all) {
                for (uint32_t j = a; j < b; j++)
                    if (emit(m, pc, out, m->byte_ids[(unsigned char)pc->s[j]], a, b)) return -1;
                continue;
            }
        }
        if (id < 0) id = m->unk;
        if (id < 0) return missing_unk("Unigram");
        /* the token's value is the text it covers (an unknown: the fused text) */
        if (tk_toks_push(out, id, tk_original(pc, a, b), pc->s + a, b - a)) return -1;
    }
    return 0;
}

/* ---------- dispatch ---------- */

int tk_model_tokenize(const tk_model *m, tk_arena *ar, const tk_str *piece, tk_toks *out) {
    if (!piece->n) return 0;
    tk_str pc = *piece;
    if (pc.bytes && m->kind != TM_BPE && tk_materialize_bytes(ar, &pc)) return -1;
    switch (m->kind) {
    case TM_WORDPIECE: return wordpiece(m, &pc, out);
    case TM_WORDLEVEL: return wordlevel(m, &pc, out);
    case TM_UNIGRAM: return unigram(m, ar, &pc, out);
    default: return tk_bpe_tokenize(m, ar, &pc, out);
    }
}

qac_status tk_model_check(tk_model *m) {
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        m->byte_ids[b] = tk_vocab_find(&m->vocab, name, 6);
    }
    if (m->kind == TM_UNIGRAM && m->vocab.n > 0) {
        const char **keys = malloc((size_t)m->vocab.n * sizeof *keys);
        uint32_t *lens = malloc((size_t)m->vocab.n * sizeof *lens);
        int32_t *ids = malloc((size_t)m->vocab.n * sizeof *ids);
        if (!keys || !lens || !ids) {
            free(keys);
            free(lens);
            free(ids);
            return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        }
        int k = 0;
        m->min_score = 0;
        for (int32_t i = 0; i < m->vocab.n; i++) {
            if (m->vocab.off[i] == UINT32_MAX) continue;
            keys[k] = m->vocab.pool + m->vocab.off[i];
            lens[k] = m->vocab.len[i];
            /* the trie's value for a string is the id HF's map holds for it */
            ids[k] = tk_vocab_find(&m->vocab, keys[k], lens[k]);
            if (k == 0 || m->scores[i] < m->min_score) m->min_score = m->scores[i];
            k++;
        }
        qac_status st = tk_trie_build(&m->trie, k, keys, lens, ids);
        free(keys);
        free(lens);
        free(ids);
        if (st) return st;
    }
    return QAC_OK;
}

void tk_model_free(tk_model *m) {
    tk_vocab_free(&m->vocab);
    free(m->prefix);
    free(m->suffix);
    tk_bpe_free_merges(m->merges);
    free(m->scores);
    tk_trie_free(m->trie);
    memset(m, 0, sizeof *m);
}
