#include "fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qac_util.h"

typedef struct cursor {
    const char *p, *end;
    int bad;
} cursor;

static const void *take(cursor *c, size_t n) {
    if (c->bad || (size_t)(c->end - c->p) < n) {
        c->bad = 1;
        return NULL;
    }
    const void *r = c->p;
    c->p += n;
    return r;
}

static int take_i32(cursor *c) {
    const void *p = take(c, 4);
    int32_t v = 0;
    if (p) memcpy(&v, p, 4);
    return v;
}

int enc_fixture_load(enc_fixture *f, const char *path) {
    memset(f, 0, sizeof *f);
    size_t len;
    if (qac_read_file(path, &f->blob, &len) != QAC_OK) {
        fprintf(stderr, "FAIL: %s\n", qac_last_error());
        return -1;
    }
    cursor c = {f->blob, f->blob + len, 0};
    const char *magic = take(&c, 8);
    if (!magic || memcmp(magic, "QACENCF1", 8) != 0) {
        fprintf(stderr, "FAIL: %s: not an encoder fixture\n", path);
        return -1;
    }
    f->L = take_i32(&c);
    f->C = take_i32(&c);
    f->n_sets = take_i32(&c);
    if (c.bad || f->n_sets < 1 || f->n_sets > 64 || f->C < 1) goto bad;
    f->sets = calloc((size_t)f->n_sets, sizeof *f->sets);
    for (int s = 0; s < f->n_sets; s++) {
        enc_set *e = &f->sets[s];
        e->max_len = take_i32(&c);
        e->n = take_i32(&c);
        e->is_docs = take_i32(&c);
        if (c.bad || e->n < 1) goto bad;
        e->ordinals = (int32_t *)take(&c, (size_t)e->n * 4);
        const int32_t *lens = take(&c, (size_t)e->n * 4);
        if (c.bad) goto bad;
        e->lens = malloc((size_t)e->n * sizeof *e->lens);
        e->ids = malloc((size_t)e->n * sizeof *e->ids);
        for (int i = 0; i < e->n; i++) {
            e->lens[i] = lens[i];
            e->ids[i] = (int32_t *)take(&c, (size_t)lens[i] * 4);
        }
        e->emb = (float *)take(&c, (size_t)e->n * f->C * 4);
        if (c.bad) goto bad;
    }
    f->n_hidden = take_i32(&c);
    if (c.bad || f->n_hidden < 0 || f->n_hidden > 64) goto bad;
    f->hidden = calloc((size_t)f->n_hidden + 1, sizeof *f->hidden);
    for (int k = 0; k < f->n_hidden; k++) {
        enc_hidden *h = &f->hidden[k];
        h->set = take_i32(&c);
        h->item = take_i32(&c);
        h->n_pos = take_i32(&c);
        if (c.bad || h->set < 0 || h->set >= f->n_sets || h->item < 0 || h->item >= f->sets[h->set].n) goto bad;
        h->pos = (int32_t *)take(&c, (size_t)h->n_pos * 4);
        h->h = (float *)take(&c, (size_t)(f->L + 1) * h->n_pos * f->C * 4);
        if (c.bad) goto bad;
    }
    if (c.p != c.end) goto bad;
    return 0;
bad:
    fprintf(stderr, "FAIL: %s: truncated or malformed encoder fixture\n", path);
    return -1;
}

void enc_fixture_free(enc_fixture *f) {
    for (int s = 0; f->sets && s < f->n_sets; s++) {
        free(f->sets[s].lens);
        free(f->sets[s].ids);
    }
    free(f->sets);
    free(f->hidden);
    free(f->blob);
    memset(f, 0, sizeof *f);
}

static uint64_t splitmix_at(uint64_t seed, uint64_t j) {
    uint64_t z = seed + (j + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void enc_fill_random_params(qac_model *m, uint64_t seed) {
    uint64_t off = 0;
    float *dst = m->param_mem;
    for (int t = 0; t < QAC_BERT_NUM_TENSORS; t++) {
        const char *name = qac_bert_tensor_name(t);
        size_t n = qac_bert_tensor_size(&m->cfg, t);
        int ln_w = !strcmp(name, "emb_ln_w") || !strcmp(name, "ln1_w") || !strcmp(name, "ln2_w");
        for (size_t i = 0; i < n; i++, off++) {
            int64_t u = (int64_t)(splitmix_at(seed, off) >> 40);
            dst[off] = ln_w ? (float)(1.0 + (double)((u >> 8) - 32768) * 0x1p-19)
                            : (float)((double)(u - 8388608) * 0x1p-28);
        }
    }
}
