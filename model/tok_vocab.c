/* The tokenizer.json pipeline's vocabulary (tok_hf.h): token -> id by an
 * open-addressing hash, id -> token for the model and for the pipeline's
 * added tokens. Below the models, the pipeline and the decoders, which all
 * look tokens up here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_hf.h"

/* ---------- vocabulary ---------- */

#define FNV_BASIS 2166136261u
static uint32_t fnv(uint32_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

void tk_vocab_free(tk_vocab *v) {
    free(v->pool);
    free(v->off);
    free(v->len);
    free(v->slots);
    free(v->slot_hash);
    memset(v, 0, sizeof *v);
}

qac_status tk_vocab_init(tk_vocab *v, int n, const char *const *tok, const uint32_t *len, const int32_t *id) {
    memset(v, 0, sizeof *v);
    int32_t max_id = -1;
    size_t bytes = 0;
    for (int i = 0; i < n; i++) {
        if (id[i] < 0) return qac_set_error(QAC_ERR_FORMAT, "vocabulary: negative id %d", id[i]);
        if (id[i] > max_id) max_id = id[i];
        bytes += len[i] + 1;
    }
    if (max_id >= 64 * 1024 * 1024 || bytes > UINT32_MAX / 2)
        return qac_set_error(QAC_ERR_FORMAT, "vocabulary: id %d or %zu bytes past what qac loads", max_id, bytes);
    v->n = max_id + 1;
    uint32_t cap = 16;
    while (cap < (uint32_t)n * 2) cap <<= 1;
    v->mask = cap - 1;
    v->pool = malloc(bytes + 1);
    v->off = malloc(((size_t)v->n + 1) * sizeof *v->off);
    v->len = calloc((size_t)v->n + 1, sizeof *v->len);
    v->slots = malloc((size_t)cap * sizeof *v->slots);
    v->slot_hash = malloc((size_t)cap * sizeof *v->slot_hash);
    if (!v->pool || !v->off || !v->len || !v->slots || !v->slot_hash) {
        tk_vocab_free(v);
        return qac_set_error(QAC_ERR_NOMEM, "vocabulary: out of memory");
    }
    memset(v->off, 0xff, ((size_t)v->n + 1) * sizeof *v->off);
    memset(v->slots, 0xff, (size_t)cap * sizeof *v->slots);
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        int32_t k = id[i];
        memcpy(v->pool + o, tok[i], len[i]);
        v->pool[o + len[i]] = '\0';
        v->off[k] = (uint32_t)o;
        v->len[k] = len[i];
        o += len[i] + 1;
        uint32_t h = fnv(FNV_BASIS, tok[i], len[i]);
        for (uint32_t s = h & v->mask;; s = (s + 1) & v->mask) {
            int32_t old = v->slots[s];
            if (old < 0 || (v->slot_hash[s] == h && v->len[old] == len[i] &&
                            !memcmp(v->pool + v->off[old], tok[i], len[i]))) {
                v->slots[s] = k; /* a repeated string: the last entry wins */
                v->slot_hash[s] = h;
                break;
            }
        }
    }
    return QAC_OK;
}

int32_t tk_vocab_find2(const tk_vocab *v, const char *a, size_t na, const char *b, size_t nb) {
    if (!v->slots) return -1;
    uint32_t h = fnv(fnv(FNV_BASIS, a, na), b, nb);
    for (uint32_t s = h & v->mask;; s = (s + 1) & v->mask) {
        int32_t id = v->slots[s];
        if (id < 0) return -1;
        if (v->slot_hash[s] != h || v->len[id] != na + nb) continue;
        const char *t = v->pool + v->off[id];
        if (!memcmp(t, a, na) && !memcmp(t + na, b, nb)) return id;
    }
}

int32_t tk_vocab_find(const tk_vocab *v, const char *s, size_t n) { return tk_vocab_find2(v, s, n, "", 0); }

/* ---------- id -> token ---------- */

const char *tk_model_id_to_token(const tk_model *m, int32_t id, uint32_t *len) {
    if (id < 0 || id >= m->vocab.n || m->vocab.off[id] == UINT32_MAX) return NULL;
    if (len) *len = m->vocab.len[id];
    return m->vocab.pool + m->vocab.off[id];
}

const char *tk_pipe_id_to_token(const tk_pipe *p, int32_t id) {
    for (int i = 0; i < p->n_added; i++)
        if (p->added[i].id == id) return p->added[i].content;
    return tk_model_id_to_token(&p->model, id, NULL);
}

int tk_pipe_is_special(const tk_pipe *p, int32_t id) {
    for (int i = 0; i < p->n_added; i++)
        if (p->added[i].id == id && p->added[i].special) return 1;
    return 0;
}
