/* Id lookup tables for fine-tuning data and mining (textmap.h). */
#include <stdlib.h>
#include <string.h>

#include "qac_util.h"
#include "textmap.h"

struct qac_strmap {
    char *arena;
    size_t len, cap;
    size_t *keys; /* arena offset + 1; 0 = empty */
    long *vals;
    size_t slots, count;
};

static uint64_t hash_str(const char *s) {
    qac_xxh64 h;
    qac_xxh64_init(&h);
    qac_xxh64_update(&h, s, strlen(s));
    return qac_xxh64_digest(&h);
}

qac_status qac_strmap_create(qac_strmap **out) {
    qac_strmap *m = calloc(1, sizeof *m);
    if (!m) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    m->slots = 1024;
    m->keys = calloc(m->slots, sizeof *m->keys);
    m->vals = calloc(m->slots, sizeof *m->vals);
    if (!m->keys || !m->vals) {
        qac_strmap_free(m);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    *out = m;
    return QAC_OK;
}

void qac_strmap_free(qac_strmap *m) {
    if (!m) return;
    free(m->arena), free(m->keys), free(m->vals), free(m);
}

static size_t find_slot(const qac_strmap *m, const char *key) {
    size_t i = (size_t)hash_str(key) & (m->slots - 1);
    while (m->keys[i] && strcmp(m->arena + m->keys[i] - 1, key) != 0) i = (i + 1) & (m->slots - 1);
    return i;
}

long qac_strmap_get(const qac_strmap *m, const char *key) {
    size_t i = find_slot(m, key);
    return m->keys[i] ? m->vals[i] : -1;
}

static qac_status grow(qac_strmap *m) {
    size_t ns = m->slots * 2, *nk = calloc(ns, sizeof *nk);
    long *nv = calloc(ns, sizeof *nv);
    if (!nk || !nv) {
        free(nk), free(nv);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < m->slots; i++) {
        if (!m->keys[i]) continue;
        size_t j = (size_t)hash_str(m->arena + m->keys[i] - 1) & (ns - 1);
        while (nk[j]) j = (j + 1) & (ns - 1);
        nk[j] = m->keys[i], nv[j] = m->vals[i];
    }
    free(m->keys), free(m->vals);
    m->keys = nk, m->vals = nv, m->slots = ns;
    return QAC_OK;
}

qac_status qac_strmap_put(qac_strmap *m, const char *key, long value) {
    qac_status st;
    if ((m->count + 1) * 2 > m->slots && (st = grow(m))) return st;
    size_t i = find_slot(m, key);
    if (!m->keys[i]) {
        size_t off;
        if ((st = qac_arena_put(&m->arena, &m->len, &m->cap, key, &off))) return st;
        m->keys[i] = off + 1;
        m->count++;
    }
    m->vals[i] = value;
    return QAC_OK;
}

struct qac_textmap {
    qac_strmap *ids;
    char *arena; /* title\0body\0 per record */
    size_t len, cap;
    size_t *rec; /* arena offset of each record's title */
    size_t n, rec_cap;
};

qac_status qac_textmap_load(qac_textmap **out, const char *path, qac_reader_kind kind, qac_text_format fmt) {
    *out = NULL;
    qac_textmap *m = calloc(1, sizeof *m);
    qac_reader *r = NULL;
    if (!m) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    qac_status st = qac_strmap_create(&m->ids);
    if (!st) st = qac_reader_open(&r, path, kind, fmt);
    for (int got = 1; !st;) {
        qac_record rec;
        if ((st = qac_reader_next(r, &rec, &got)) || !got) break;
        const char *body = rec.text;
        size_t tl = strlen(rec.title);
        if (tl && !strncmp(body, rec.title, tl) && (body[tl] == ' ' || body[tl] == '\0'))
            body += tl + (body[tl] == ' ');
        if (m->n == m->rec_cap) {
            size_t nc = m->rec_cap ? m->rec_cap * 2 : 1024, *nr = realloc(m->rec, nc * sizeof *nr);
            if (!nr) {
                st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
                break;
            }
            m->rec = nr, m->rec_cap = nc;
        }
        size_t off, off2;
        if ((st = qac_arena_put(&m->arena, &m->len, &m->cap, rec.title, &off)) ||
            (st = qac_arena_put(&m->arena, &m->len, &m->cap, body, &off2)) ||
            (st = qac_strmap_put(m->ids, rec.id, (long)m->n)))
            break;
        m->rec[m->n++] = off;
    }
    qac_reader_free(r);
    if (st) {
        qac_textmap_free(m);
        return st;
    }
    *out = m;
    return QAC_OK;
}

void qac_textmap_free(qac_textmap *m) {
    if (!m) return;
    qac_strmap_free(m->ids);
    free(m->arena), free(m->rec), free(m);
}

int qac_textmap_get(const qac_textmap *m, const char *id, const char **title, const char **body) {
    long i = qac_strmap_get(m->ids, id);
    if (i < 0) return 0;
    const char *t = m->arena + m->rec[i];
    if (title) *title = t;
    if (body) *body = t + strlen(t) + 1;
    return 1;
}

size_t qac_textmap_count(const qac_textmap *m) { return m->n; }
