/* Pair files for qac rerank --pairs and qac tokenize --pairs: one pair a
 * line, "query<TAB>passage" (split at the first tab) or a JSON object
 * {"query": ..., "passage": ...} ("text" also names the passage), so
 * passages with tabs or newlines travel too. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "qac_util.h"

void qac_cli_pairs_free(qac_cli_pairs *p) {
    for (int i = 0; i < p->n; i++) free(p->a[i]), free(p->b[i]);
    free(p->a), free(p->b), free(p->alen), free(p->blen);
    memset(p, 0, sizeof *p);
}

static qac_status add(qac_cli_pairs *p, const char *a, size_t al, const char *b, size_t bl) {
    if (p->n == p->cap) {
        int nc = p->cap ? 2 * p->cap : 256;
        char **na = realloc(p->a, nc * sizeof *na);
        if (na) p->a = na;
        char **nb = na ? realloc(p->b, nc * sizeof *nb) : NULL;
        if (nb) p->b = nb;
        size_t *la = nb ? realloc(p->alen, nc * sizeof *la) : NULL;
        if (la) p->alen = la;
        size_t *lb = la ? realloc(p->blen, nc * sizeof *lb) : NULL;
        if (lb) p->blen = lb;
        if (!lb) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        p->cap = nc;
    }
    p->a[p->n] = strndup(a, al);
    p->b[p->n] = strndup(b, bl);
    if (!p->a[p->n] || !p->b[p->n]) {
        free(p->a[p->n]), free(p->b[p->n]);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    p->alen[p->n] = al, p->blen[p->n] = bl;
    p->n++;
    return QAC_OK;
}

static qac_status parse_line(qac_cli_pairs *p, const char *path, long lineno, char *line, size_t len) {
    if (len && line[0] == '{') {
        json_error_t err;
        json_t *o = json_loadb(line, len, 0, &err);
        json_t *q = json_object_get(o, "query"), *d = json_object_get(o, "passage");
        if (!d) d = json_object_get(o, "text");
        qac_status st = json_is_string(q) && json_is_string(d)
                            ? add(p, json_string_value(q), json_string_length(q), json_string_value(d),
                                  json_string_length(d))
                            : qac_set_error(QAC_ERR_FORMAT,
                                            "%s:%ld: a JSON pair needs string fields \"query\" and \"passage\"%s%s",
                                            path, lineno, o ? "" : ": ", o ? "" : err.text);
        json_decref(o);
        return st;
    }
    char *tab = memchr(line, '\t', len);
    if (!tab)
        return qac_set_error(QAC_ERR_FORMAT, "%s:%ld: no tab between query and passage (or a JSON object)", path,
                             lineno);
    return add(p, line, (size_t)(tab - line), tab + 1, len - (size_t)(tab - line) - 1);
}

qac_status qac_cli_read_pairs(const char *path, qac_cli_pairs *p) {
    memset(p, 0, sizeof *p);
    FILE *f = stdin;
    qac_status st = strcmp(path, "-") ? qac_open_text_input(&f, path) : QAC_OK;
    if (st) return st;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long lineno = 0;
    while (!st && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (len) st = parse_line(p, path, lineno, line, (size_t)len);
    }
    free(line);
    if (f != stdin) fclose(f);
    if (!st && p->n == 0) st = qac_set_error(QAC_ERR_INVALID, "%s: no pairs", path);
    if (st) qac_cli_pairs_free(p);
    return st;
}

qac_status qac_cli_pair_opts(const qac_opts *o, qac_pair_opts *po) {
    po->max_len = (int)qac_opts_int(o, "max-len");
    qac_status st = qac_truncation_parse(qac_opts_str(o, "truncation"), &po->strategy);
    if (!st) st = qac_trunc_side_parse(qac_opts_str(o, "truncation-side"), &po->side);
    return st;
}
