/* docid -> dense row: an open-addressing table over the dense index's
 * docids (borrowed, never copied), so that a hit only the BM25 list holds
 * can still have its passage text read (/search with return_text). Built
 * once at server start when both indexes are loaded. And the longest
 * docid, which bounds /search's answer before any search. */
#include <stdlib.h>
#include <string.h>

#include "srv_internal.h"

struct qac_docid_map {
    const char **keys;
    int64_t *rows;
    size_t cap; /* power of two, at least twice the docids: probes stay short */
};

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

qac_status qac_docid_map_build(qac_docid_map **out, const qac_server_backend *be) {
    *out = NULL;
    qac_docid_map *m = calloc(1, sizeof *m);
    if (!m) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    m->cap = 16;
    while (m->cap < (size_t)be->index_count * 2) m->cap *= 2;
    m->keys = calloc(m->cap, sizeof *m->keys);
    m->rows = calloc(m->cap, sizeof *m->rows);
    if (!m->keys || !m->rows) {
        qac_docid_map_free(m);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory for the docid map");
    }
    for (int64_t row = 0; row < be->index_count; row++) {
        const char *d = be->docid(be->index, row);
        if (!d) continue;
        size_t i = hash_str(d) & (m->cap - 1);
        while (m->keys[i] && strcmp(m->keys[i], d)) i = (i + 1) & (m->cap - 1);
        m->keys[i] = d;
        m->rows[i] = row;
    }
    *out = m;
    return QAC_OK;
}

int64_t qac_docid_map_get(const qac_docid_map *m, const char *d) {
    if (!m || !d) return -1;
    for (size_t i = hash_str(d) & (m->cap - 1); m->keys[i]; i = (i + 1) & (m->cap - 1))
        if (!strcmp(m->keys[i], d)) return m->rows[i];
    return -1;
}

void qac_docid_map_free(qac_docid_map *m) {
    if (!m) return;
    free(m->keys);
    free(m->rows);
    free(m);
}

size_t qac_docid_json_max(const qac_server_backend *be) {
    size_t longest = 2; /* "" */
    for (int64_t row = 0; be->search && be->docid && row < be->index_count; row++) {
        const char *d = be->docid(be->index, row);
        size_t n = d ? qac_jw_str_size(d, strlen(d)) : 2;
        if (n > longest) longest = n;
    }
    for (int64_t row = 0; be->bm25_search && be->bm25_docid && row < be->bm25_count; row++) {
        const char *d = be->bm25_docid(be->bm25, row);
        size_t n = d ? qac_jw_str_size(d, strlen(d)) : 2;
        if (n > longest) longest = n;
    }
    return longest;
}
