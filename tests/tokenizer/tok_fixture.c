#include "tok_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qac_util.h"

uint64_t tok_fnv64_ids(const int32_t *ids, int n) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (int i = 0; i < n; i++) h = (h ^ (uint32_t)ids[i]) * 0x100000001B3ull;
    return h;
}

static uint64_t fnv64_bytes(const char *s, size_t n) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001B3ull;
    return h;
}

static int push(tok_texts *tt, int *cap, char *s, size_t len) {
    if (tt->n == *cap) {
        *cap = *cap ? *cap * 2 : 1024;
        tok_text *nt = realloc(tt->t, (size_t)*cap * sizeof *nt);
        if (!nt) return -1;
        tt->t = nt;
    }
    tt->t[tt->n].s = s;
    tt->t[tt->n].len = len;
    tt->n++;
    return 0;
}

/* A growable byte buffer for one field. */
typedef struct sbuf {
    char *p;
    size_t n, cap;
    int lines;
} sbuf;
static int sb_add(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t nc = (b->n + n + 1) * 2;
        char *np = realloc(b->p, nc);
        if (!np) return -1;
        b->p = np, b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

static int blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strchr(" \t\r\v\f\x1c\x1d\x1e\x1f", s[i])) return 0;
    return 1;
}

/* Emit the finished record: title "\n" text, or the text alone. */
static int flush_record(tok_texts *tt, int *cap, sbuf *f, int with_title) {
    sbuf out = {0};
    int rc = 0;
    if (with_title) rc |= sb_add(&out, f[0].p ? f[0].p : "", f[0].n) | sb_add(&out, "\n", 1);
    rc |= sb_add(&out, f[3].p ? f[3].p : "", f[3].n);
    if (rc || push(tt, cap, out.p, out.n)) return -1;
    for (int k = 0; k < 4; k++) f[k].n = 0, f[k].lines = 0;
    return 0;
}

/* SMART fields are lines joined with "\n"; the file is split on every "\n",
 * so a final newline adds one empty line (as Python's split does). */
static int parse_smart(tok_texts *tt, int *cap, const char *path, int with_title) {
    char *data;
    size_t size;
    if (qac_read_file(path, &data, &size)) {
        fprintf(stderr, "%s\n", qac_last_error());
        return -1;
    }
    sbuf f[4] = {{0}}; /* T A B W */
    int have = 0, field = -1, rc = 0;
    for (size_t pos = 0; pos <= size && !rc;) {
        size_t end = pos;
        while (end < size && data[end] != '\n') end++;
        const char *line = data + pos;
        size_t n = end - pos;
        const char *fk = n >= 2 && line[0] == '.' && line[1] ? strchr("TABW", line[1]) : NULL;
        if (n >= 2 && line[0] == '.' && line[1] == 'I') {
            if (have) rc = flush_record(tt, cap, f, with_title);
            have = 1;
            field = -1;
        } else if (fk && blank(line + 2, n - 2)) {
            field = (int)(fk - "TABW");
            f[field].n = 0, f[field].lines = 0;
        } else if (have && field >= 0) {
            if (f[field].lines++) rc |= sb_add(&f[field], "\n", 1);
            rc |= sb_add(&f[field], line, n);
        }
        pos = end + 1;
    }
    if (have && !rc) rc = flush_record(tt, cap, f, with_title);
    for (int k = 0; k < 4; k++) free(f[k].p);
    free(data);
    return rc;
}

int tok_texts_load(tok_texts *tt, const char *cranfield_dir, const char *fixture_dir) {
    memset(tt, 0, sizeof *tt);
    int cap = 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/cran.all.1400", cranfield_dir);
    if (parse_smart(tt, &cap, path, 1)) return -1;
    snprintf(path, sizeof path, "%s/cran.qry", cranfield_dir);
    if (parse_smart(tt, &cap, path, 0)) return -1;
    tt->n_cranfield = tt->n;

    snprintf(path, sizeof path, "%s/cranfield_texts.txt", fixture_dir);
    FILE *fp = fopen(path, "r");
    if (!fp) {
        fprintf(stderr, "cannot open %s\n", path);
        return -1;
    }
    char line[256];
    int checked = 0;
    while (fgets(line, sizeof line, fp)) {
        if (line[0] == '#') continue;
        int i;
        size_t len;
        unsigned long long h;
        if (sscanf(line, "%d %zu %llu", &i, &len, &h) != 3) continue;
        if (i >= tt->n_cranfield || tt->t[i].len != len || fnv64_bytes(tt->t[i].s, len) != h) {
            fprintf(stderr, "Cranfield text %d differs from the one the fixtures were made from\n", i);
            fclose(fp);
            return -1;
        }
        checked++;
    }
    fclose(fp);
    if (checked != tt->n_cranfield) {
        fprintf(stderr, "parsed %d Cranfield texts, fixtures have %d\n", tt->n_cranfield, checked);
        return -1;
    }

    snprintf(path, sizeof path, "%s/edge_texts.hex", fixture_dir);
    char *data;
    size_t size;
    if (qac_read_file(path, &data, &size)) {
        fprintf(stderr, "%s\n", qac_last_error());
        return -1;
    }
    for (size_t pos = 0; pos < size;) {
        size_t end = pos;
        while (end < size && data[end] != '\n') end++;
        size_t n = (end - pos) / 2;
        char *s = malloc(n + 1);
        for (size_t k = 0; k < n; k++) {
            unsigned v;
            sscanf(data + pos + 2 * k, "%2x", &v);
            s[k] = (char)v;
        }
        s[n] = 0;
        if (push(tt, &cap, s, n)) return -1;
        pos = end + 1;
    }
    free(data);
    return 0;
}

void tok_texts_free(tok_texts *tt) {
    for (int i = 0; i < tt->n; i++) free(tt->t[i].s);
    free(tt->t);
}
