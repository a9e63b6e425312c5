#include "qid_groups.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

int qac_split_fields(char *s, char **f, int max) {
    int n = 0;
    for (;;) {
        while (*s && isspace((unsigned char)*s)) s++;
        if (!*s) return n;
        if (n == max) return n + 1;
        f[n++] = s;
        while (*s && !isspace((unsigned char)*s)) s++;
        if (*s) *s++ = 0;
    }
}

static const char *qid_of(const char *arena, const void *records, size_t i, size_t stride, size_t qid_at) {
    size_t off;
    memcpy(&off, (const char *)records + i * stride + qid_at, sizeof off);
    return arena + off;
}

qac_status qac_group_by_qid(const char *arena, const void *records, size_t n, size_t stride, size_t qid_at,
                            const char ***qids, size_t **start, size_t *nq) {
    size_t groups = 0;
    for (size_t i = 0; i < n; i++)
        if (i == 0 || strcmp(qid_of(arena, records, i, stride, qid_at), qid_of(arena, records, i - 1, stride, qid_at)))
            groups++;
    *qids = malloc((groups + 1) * sizeof **qids);
    *start = malloc((groups + 1) * sizeof **start);
    *nq = 0;
    if (!*qids || !*start) {
        free(*qids), free(*start);
        *qids = NULL, *start = NULL;
        return qac_set_error(QAC_ERR_NOMEM, "out of memory grouping %zu records by query", n);
    }
    for (size_t i = 0; i < n; i++) {
        const char *q = qid_of(arena, records, i, stride, qid_at);
        if (i == 0 || strcmp(q, qid_of(arena, records, i - 1, stride, qid_at))) {
            (*qids)[*nq] = q;
            (*start)[(*nq)++] = i;
        }
    }
    (*start)[*nq] = n;
    return QAC_OK;
}
