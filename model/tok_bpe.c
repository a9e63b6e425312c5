/* The BPE model of the tokenizer.json pipeline (tok_hf.h), as
 * tokenizers/src/models/bpe does it: a piece starts as one symbol per
 * character (per byte for ByteLevel pieces, each byte read as its
 * byte-alphabet character), with the continuing-subword prefix and
 * end-of-word suffix where configured, unknown characters fused or not,
 * byte fallback; then the pair with the lowest merge rank (leftmost first)
 * merges until none is left, through a min-heap of candidate merges, with
 * stale entries skipped as HF's Word::merge_all skips them. */
#include <stdlib.h>
#include <string.h>

#include "tok_hf.h"

typedef struct merge_slot {
    uint64_t key; /* (a << 32 | b) + 1; 0 = empty */
    uint32_t rank;
    int32_t new_id;
} merge_slot;

struct tk_merge_map {
    merge_slot *slots;
    uint32_t mask, n;
};

static uint32_t pair_hash(uint64_t k) {
    k ^= k >> 31;
    k *= 0x7fb5d329728ea185ULL;
    k ^= k >> 27;
    return (uint32_t)k;
}

static const merge_slot *merge_find(const tk_merge_map *mm, int32_t a, int32_t b) {
    if (!mm) return NULL;
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    for (uint32_t s = pair_hash(key) & mm->mask;; s = (s + 1) & mm->mask) {
        if (!mm->slots[s].key) return NULL;
        if (mm->slots[s].key == key) return &mm->slots[s];
    }
}

void tk_bpe_free_merges(tk_merge_map *mm) {
    if (!mm) return;
    free(mm->slots);
    free(mm);
}

qac_status tk_bpe_add_merges(tk_model *m, int n, const char *const *a, const uint32_t *alen, const char *const *b,
                             const uint32_t *blen, int *bad_line) {
    *bad_line = -1;
    tk_merge_map *mm = calloc(1, sizeof *mm);
    uint32_t cap = 16;
    while (cap < (uint32_t)n * 2 + 16) cap <<= 1;
    if (mm) mm->slots = calloc(cap, sizeof *mm->slots);
    if (!mm || !mm->slots) {
        tk_bpe_free_merges(mm);
        return qac_set_error(QAC_ERR_NOMEM, "BPE merges: out of memory");
    }
    mm->mask = cap - 1;
    for (int i = 0; i < n; i++) {
        int32_t ia = tk_vocab_find(&m->vocab, a[i], alen[i]), ib = tk_vocab_find(&m->vocab, b[i], blen[i]);
        uint32_t skip = m->prefix_len <= blen[i] ? m->prefix_len : blen[i];
        int32_t nid = ia >= 0 && ib >= 0 ? tk_vocab_find2(&m->vocab, a[i], alen[i], b[i] + skip, blen[i] - skip) : -1;
        if (nid < 0) {
            *bad_line = i;
            tk_bpe_free_merges(mm);
            const char *what = ia < 0 ? a[i] : ib < 0 ? b[i] : "their concatenation";
            int wl = (int)(ia < 0 ? alen[i] : ib < 0 ? blen[i] : 19);
            return qac_set_error(QAC_ERR_FORMAT, "BPE merge %d (\"%.*s\" \"%.*s\"): %.*s is not in the vocabulary", i + 1,
                                 (int)(alen[i] > 60 ? 60 : alen[i]), a[i], (int)(blen[i] > 60 ? 60 : blen[i]), b[i],
                                 wl > 60 ? 60 : wl, what);
        }
        uint64_t key = ((uint64_t)(uint32_t)ia << 32 | (uint32_t)ib) + 1;
        for (uint32_t s = pair_hash(key) & mm->mask;; s = (s + 1) & mm->mask) {
            if (!mm->slots[s].key) mm->n++;
            if (!mm->slots[s].key || mm->slots[s].key == key) { /* a repeated pair keeps its last rank */
                mm->slots[s] = (merge_slot){key, (uint32_t)i, nid};
                break;
            }
        }
    }
    tk_bpe_free_merges(m->merges);
    m->merges = mm;
    return QAC_OK;
}

/* ---------- one word ---------- */

typedef struct sym {
    int32_t id;
    int32_t prev, next;
    uint32_t len; /* bytes of the piece; 0 once merged into its left neighbour */
} sym;

typedef struct heap_item {
    uint32_t rank, pos;
    int32_t new_id;
} heap_item;

static int heap_less(const heap_item *x, const heap_item *y) {
    return x->rank != y->rank ? x->rank < y->rank : x->pos < y->pos;
}

static void heap_push(heap_item *h, size_t *n, heap_item it) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&it, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = it;
}

static heap_item heap_pop(heap_item *h, size_t *n) {
    heap_item top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap_less(&h[c + 1], &h[c])) c++;
        if (!heap_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

static void push_pair(const tk_model *m, heap_item *h, size_t *hn, const sym *s, int32_t pos) {
    const merge_slot *ms = merge_find(m->merges, s[pos].id, s[s[pos].next].id);
    if (ms) heap_push(h, hn, (heap_item){ms->rank, (uint32_t)pos, ms->new_id});
}

/* The id of prefix + chr + suffix, where each is included when asked. */
static int32_t lookup_char(const tk_model *m, const char *chr, uint32_t cl, int first, int last) {
    char buf[256];
    uint32_t pl = !first && m->prefix ? m->prefix_len : 0, sl = last && m->suffix ? m->suffix_len : 0;
    if (pl + cl + sl > sizeof buf) return -1;
    if (pl) memcpy(buf, m->prefix, pl);
    memcpy(buf + pl, chr, cl);
    if (sl) memcpy(buf + pl + cl, m->suffix, sl);
    return tk_vocab_find(&m->vocab, buf, pl + cl + sl);
}

static int fallback_bytes(const tk_model *m, const char *chr, uint32_t cl, int first, int last, sym *s, int32_t *ns) {
    char buf[256];
    uint32_t pl = !first && m->prefix ? m->prefix_len : 0, sl = last && m->suffix ? m->suffix_len : 0;
    if (pl + cl + sl > sizeof buf) return 0;
    if (pl) memcpy(buf, m->prefix, pl);
    memcpy(buf + pl, chr, cl);
    if (sl) memcpy(buf + pl + cl, m->suffix, sl);
    for (uint32_t i = 0; i < pl + cl + sl; i++)
        if (m->byte_ids[(unsigned char)buf[i]] < 0) return 0;
    for (uint32_t i = 0; i < pl + cl + sl; i++) s[(*ns)++] = (sym){m->byte_ids[(unsigned char)buf[i]], 0, 0, 1};
    return 1;
}

int tk_bpe_tokenize(const tk_model *m, tk_arena *ar, const tk_str *pc, tk_toks *out) {
    uint32_t n = pc->n;
    char *mapped = NULL; /* a ByteLevel piece as characters, for ignore_merges */
    if (m->ignore_merges) {
        const char *w = pc->s;
        uint32_t wl = n;
        if (pc->bytes) {
            mapped = tk_alloc(ar, (size_t)n * 2 + 1);
            if (!mapped) return -1;
            wl = 0;
            for (uint32_t i = 0; i < n; i++) wl += (uint32_t)qac_utf8_encode(tk_byte_char[(unsigned char)pc->s[i]], mapped + wl);
            w = mapped;
        }
        int32_t id = tk_vocab_find(&m->vocab, w, wl);
        if (id >= 0) {
            uint32_t vl;
            const char *v = tk_model_id_to_token(m, id, &vl);
            return tk_toks_push(out, id, tk_original(pc, 0, n), v, vl);
        }
    }
    /* each byte of the fallback of a char could be a symbol, with prefix and suffix */
    size_t max_syms = (size_t)n * (1 + (m->prefix_len + m->suffix_len + 4)) + 1;
    sym *s = tk_alloc(ar, max_syms * sizeof *s);
    if (!s) return -1;
    int32_t ns = 0;
    int32_t unk_id = -1;
    uint32_t unk_len = 0;
    for (uint32_t i = 0; i < n;) {
        uint32_t start = i;
        char cb[4];
        const char *chr;
        uint32_t cl;
        if (pc->bytes) {
            cl = (uint32_t)qac_utf8_encode(tk_byte_char[(unsigned char)pc->s[i]], cb);
            chr = cb;
            i++;
        } else {
            tk_utf8_next(pc->s, n, &i);
            chr = pc->s + start;
            cl = i - start;
        }
        uint32_t byte_len = i - start;
        int first = start == 0, last = i == n;
        int32_t id = lookup_char(m, chr, cl, first, last);
        if (id >= 0) {
            if (unk_id >= 0) s[ns++] = (sym){unk_id, 0, 0, unk_len}, unk_id = -1;
            s[ns++] = (sym){id, 0, 0, byte_len};
            continue;
        }
        if (m->byte_fallback && fallback_bytes(m, chr, cl, first, last, s, &ns)) continue;
        if (m->unk >= 0) {
            if (unk_id >= 0 && m->fuse_unk) {
                unk_len += byte_len;
            } else {
                if (unk_id >= 0) s[ns++] = (sym){unk_id, 0, 0, unk_len};
                unk_id = m->unk;
                unk_len = byte_len;
            }
        }
        /* no unknown token: HF drops the character */
    }
    if (unk_id >= 0) s[ns++] = (sym){unk_id, 0, 0, unk_len};
    for (int32_t k = 0; k < ns; k++) {
        s[k].prev = k - 1;
        s[k].next = k + 1 < ns ? k + 1 : -1;
    }
    if (ns > 1 && m->merges) {
        heap_item *h = tk_alloc(ar, ((size_t)ns * 3 + 4) * sizeof *h);
        if (!h) return -1;
        size_t hn = 0, hcap = (size_t)ns * 3 + 4;
        for (int32_t k = 0; k + 1 < ns; k++) push_pair(m, h, &hn, s, k);
        while (hn) {
            heap_item top = heap_pop(h, &hn);
            sym *cur = &s[top.pos];
            if (cur->len == 0 || cur->next < 0) continue;
            sym right = s[cur->next];
            const merge_slot *ms = merge_find(m->merges, cur->id, right.id);
            if (!ms || ms->new_id != top.new_id) continue; /* stale */
            s[cur->next].len = 0;
            cur->id = top.new_id;
            cur->len += right.len;
            cur->next = right.next;
            if (right.next >= 0) s[right.next].prev = (int32_t)top.pos;
            if (hn + 2 > hcap) { /* never more than one push per merge beyond the start */
                heap_item *nh = tk_alloc(ar, hcap * 2 * sizeof *nh);
                if (!nh) return -1;
                memcpy(nh, h, hn * sizeof *nh);
                h = nh;
                hcap *= 2;
            }
            if (cur->prev >= 0) push_pair(m, h, &hn, s, cur->prev);
            if (cur->next >= 0) push_pair(m, h, &hn, s, (int32_t)top.pos);
        }
    }
    uint32_t off = 0;
    for (int32_t k = 0; k >= 0 && k < ns; k = s[k].next) {
        uint32_t vl = 0;
        const char *v = tk_model_id_to_token(m, s[k].id, &vl);
        if (tk_toks_push(out, s[k].id, tk_original(pc, off, off + s[k].len), v ? v : "", vl)) return -1;
        off += s[k].len;
    }
    return 0;
}
