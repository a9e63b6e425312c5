/* Streaming corpus and query readers (see api/qac_data.h). */
#include "qac_data.h"
#include "qac_util.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- compact id set for duplicate detection ----
 * Ids live back to back in one arena as [varint line][bytes][NUL]. A slot
 * holds the arena offset + 1 in its low 40 bits and 24 hash bits above, so
 * most probes are rejected without touching the arena. */
#define SLOT_OFF_BITS 40
#define SLOT_OFF_MASK ((UINT64_C(1) << SLOT_OFF_BITS) - 1)

typedef struct idset {
    uint64_t *slots;
    size_t cap, n; /* cap is a power of two (or 0) */
    unsigned char *arena;
    size_t alen, acap;
} idset;

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = UINT64_C(1469598103934665603);
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * UINT64_C(1099511628211);
    return h ^ (h >> 29);
}

static void idset_clear(idset *s) {
    free(s->slots);
    free(s->arena);
    memset(s, 0, sizeof *s);
}

static const char *idset_entry(const idset *s, uint64_t slot, int64_t *line) {
    const unsigned char *p = s->arena + ((slot & SLOT_OFF_MASK) - 1);
    uint64_t v = 0;
    int shift = 0;
    while (*p & 0x80) { v |= (uint64_t)(*p++ & 0x7f) << shift; shift += 7; }
    v |= (uint64_t)*p++ << shift;
    if (line) *line = (int64_t)v;
    return (const char *)p;
}

static qac_status idset_grow(idset *s) {
    size_t ncap = s->cap ? s->cap * 2 : 1024;
    uint64_t *ns = calloc(ncap, sizeof *ns);
    if (!ns) return qac_set_error(QAC_ERR_NOMEM, "out of memory for the id set");
    for (size_t i = 0; i < s->cap; i++) {
        uint64_t v = s->slots[i];
        if (!v) continue;
        const char *id = idset_entry(s, v, NULL);
        size_t j = hash_bytes(id, strlen(id)) & (ncap - 1);
        while (ns[j]) j = (j + 1) & (ncap - 1);
        ns[j] = v;
    }
    free(s->slots);
    s->slots = ns;
    s->cap = ncap;
    return QAC_OK;
}

/* Insert id; *dup_line > 0 when it was already present (then nothing changes). */
static qac_status idset_add(idset *s, const char *id, size_t n, int64_t line, int64_t *dup_line) {
    *dup_line = 0;
    if ((s->n + 1) * 10 > s->cap * 7) {
        qac_status st = idset_grow(s);
        if (st) return st;
    }
    uint64_t h = hash_bytes(id, n);
    uint64_t tag = (h >> SLOT_OFF_BITS) << SLOT_OFF_BITS;
    size_t j = h & (s->cap - 1);
    while (s->slots[j]) {
        uint64_t v = s->slots[j];
        if ((v & ~SLOT_OFF_MASK) == tag) {
            int64_t l;
            const char *e = idset_entry(s, v, &l);
            if (strlen(e) == n && memcmp(e, id, n) == 0) { *dup_line = l; return QAC_OK; }
        }
        j = (j + 1) & (s->cap - 1);
    }
    size_t need = s->alen + 10 + n + 1;
    if (need > s->acap) {
        size_t ncap = s->acap ? s->acap : 1 << 16;
        while (ncap < need) ncap *= 2;
        unsigned char *na = realloc(s->arena, ncap);
        if (!na) return qac_set_error(QAC_ERR_NOMEM, "out of memory for the id set");
        s->arena = na;
        s->acap = ncap;
    }
    if (s->alen + 1 > SLOT_OFF_MASK) return qac_set_error(QAC_ERR_NOMEM, "id set too large");
    uint64_t off = s->alen;
    uint64_t v = (uint64_t)line;
    while (v >= 0x80) { s->arena[s->alen++] = (unsigned char)(v | 0x80); v >>= 7; }
    s->arena[s->alen++] = (unsigned char)v;
    memcpy(s->arena + s->alen, id, n);
    s->alen += n;
    s->arena[s->alen++] = 0;
    s->slots[j] = tag | (off + 1);
    s->n++;
    return QAC_OK;
}

/* ---- growable string ---- */
typedef struct sbuf {
    char *p;
    size_t len, cap;
} sbuf;

static qac_status sbuf_put(sbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t ncap = b->cap ? b->cap : 256;
        while (ncap < b->len + n + 1) ncap *= 2;
        char *np = realloc(b->p, ncap);
        if (!np) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        b->p = np;
        b->cap = ncap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return QAC_OK;
}

static void sbuf_reset(sbuf *b) {
    b->len = 0;
    if (b->p) b->p[0] = 0;
}

/* Append a piece, separated from what is there by one space. */
static qac_status sbuf_join(sbuf *b, const char *s, size_t n) {
    if (n == 0) return sbuf_put(b, "", 0);
    if (b->len > 0) {
        qac_status st = sbuf_put(b, " ", 1);
        if (st) return st;
    }
    return sbuf_put(b, s, n);
}

/* ---- the reader ---- */
struct qac_reader {
    FILE *f;
    char *path;
    qac_reader_kind kind;
    qac_text_format fmt;
    uint64_t size, start; /* start: 3 when the file begins with a UTF-8 BOM */
    /* current line (getline buffer), without its '\n' / "\r\n" */
    char *line;
    size_t line_cap, line_len;
    uint64_t pos, line_off; /* offset of the next unread byte / of the current line */
    int64_t lineno;         /* number of the current line */
    int pending;            /* Cranfield: the current line is the next record's .I */
    int64_t ordinal;        /* Cranfield queries: records returned so far */
    sbuf id, title, text;
    idset ids;
};

static qac_status rd_err(const qac_reader *r, int64_t line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static qac_status rd_err(const qac_reader *r, int64_t line, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return qac_set_error(QAC_ERR_FORMAT, "%s:%lld: %s", r->path, (long long)line, msg);
}

/* Read the next line; *got = 0 at end of file. */
static qac_status read_line(qac_reader *r, int *got) {
    errno = 0;
    ssize_t n = getline(&r->line, &r->line_cap, r->f);
    if (n < 0) {
        if (ferror(r->f)) return qac_set_error(QAC_ERR_IO, "read %s: %s", r->path, strerror(errno));
        *got = 0;
        return QAC_OK;
    }
    r->line_off = r->pos;
    r->pos += (uint64_t)n;
    r->lineno++;
    size_t len = (size_t)n;
    if (len && r->line[len - 1] == '\n') len--;
    if (len && r->line[len - 1] == '\r') len--;
    r->line[len] = 0;
    r->line_len = len;
    if (memchr(r->line, 0, len)) return rd_err(r, r->lineno, "embedded NUL byte");
    *got = 1;
    return QAC_OK;
}

static int blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isspace((unsigned char)s[i])) return 0;
    return 1;
}

static int is_cran_id_line(const char *s) {
    return s[0] == '.' && s[1] == 'I' && (s[2] == ' ' || s[2] == '\t');
}

static qac_status check_dup(qac_reader *r, int64_t line) {
    int64_t prev;
    qac_status st = idset_add(&r->ids, r->id.p, r->id.len, line, &prev);
    if (st) return st;
    if (prev) return rd_err(r, line, "duplicate id '%s' (first seen on line %lld)", r->id.p, (long long)prev);
    return QAC_OK;
}

static qac_status position(qac_reader *r, uint64_t offset, int64_t line) {
    if (fseeko(r->f, (off_t)offset, SEEK_SET) != 0)
        return qac_set_error(QAC_ERR_IO, "seek %s: %s", r->path, strerror(errno));
    r->pos = offset;
    r->lineno = line - 1;
    r->pending = 0;
    return QAC_OK;
}

/* ---- format detection ---- */
static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcasecmp(s + a - b, suf) == 0;
}

static qac_text_format json_flavour(const char *line, size_t len) {
    json_t *o = json_loadb(line, len, 0, NULL);
    qac_text_format f = QAC_FMT_BEIR;
    if (json_is_object(o) && !json_object_get(o, "_id") &&
        (json_object_get(o, "docid") || json_object_get(o, "query_id")))
        f = QAC_FMT_TEVATRON;
    json_decref(o);
    return f;
}

/* From the file's first non-blank line, the current one. */
static qac_status detect(qac_reader *r, qac_text_format *fmt) {
    int is_json_ext = ends_with(r->path, ".jsonl") || ends_with(r->path, ".json");
    const char *s = r->line;
    while (isspace((unsigned char)*s)) s++;
    if (is_json_ext || *s == '{') *fmt = json_flavour(r->line, r->line_len);
    else if (!ends_with(r->path, ".tsv") && is_cran_id_line(r->line)) *fmt = QAC_FMT_CRANFIELD;
    else if (ends_with(r->path, ".tsv") || strchr(r->line, '\t')) *fmt = QAC_FMT_TSV;
    else return rd_err(r, r->lineno, "cannot detect the format (expected id<TAB>text, JSON lines or .I records)");
    return QAC_OK;
}

qac_status qac_reader_open(qac_reader **out, const char *path, qac_reader_kind kind, qac_text_format fmt) {
    *out = NULL;
    if (!path) return qac_set_error(QAC_ERR_INVALID, "reader: no path");
    if (fmt < QAC_FMT_AUTO || fmt > QAC_FMT_CRANFIELD) return qac_set_error(QAC_ERR_INVALID, "reader: bad format");
    qac_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path))) {
        free(r);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    r->kind = kind;
    qac_status st;
    if ((st = qac_open_text_input(&r->f, path))) goto fail;
    struct stat sb;
    if (fstat(fileno(r->f), &sb) != 0) {
        st = qac_set_error(QAC_ERR_IO, "stat %s: %s", path, strerror(errno));
        goto fail;
    }
    r->size = (uint64_t)sb.st_size;
    unsigned char bom[3];
    if (fread(bom, 1, 3, r->f) == 3 && bom[0] == 0xEF && bom[1] == 0xBB && bom[2] == 0xBF) r->start = 3;
    if ((st = position(r, r->start, 1))) goto fail;
    /* every format's record starts on a non-blank line: without one the file
     * holds nothing, which is an error for every command, said at once */
    int got = 0;
    do {
        if ((st = read_line(r, &got))) goto fail;
    } while (got && blank(r->line, r->line_len));
    if (!got) {
        st = qac_set_error(QAC_ERR_INVALID, "%s is empty: it holds no %s", path,
                           kind == QAC_READ_QUERIES ? "queries" : "passages");
        goto fail;
    }
    if (fmt == QAC_FMT_AUTO && (st = detect(r, &fmt))) goto fail;
    if ((st = position(r, r->start, 1))) goto fail;
    r->fmt = fmt;
    *out = r;
    return QAC_OK;
fail:
    qac_reader_free(r);
    return st;
}

void qac_reader_free(qac_reader *r) {
    if (!r) return;
    if (r->f) fclose(r->f);
    free(r->path);
    free(r->line);
    free(r->id.p);
    free(r->title.p);
    free(r->text.p);
    idset_clear(&r->ids);
    free(r);
}

qac_text_format qac_reader_format(const qac_reader *r) { return r ? r->fmt : QAC_FMT_AUTO; }
uint64_t qac_reader_file_size(const qac_reader *r) { return r ? r->size : 0; }

static qac_status next_tsv(qac_reader *r, qac_record *rec, int *got) {
    qac_status st;
    do {
        if ((st = read_line(r, got)) || !*got) return st;
    } while (r->line_len == 0);
    char *tab = memchr(r->line, '\t', r->line_len);
    if (!tab) return rd_err(r, r->lineno, "missing tab between id and text");
    if (tab == r->line) return rd_err(r, r->lineno, "empty id");
    sbuf_reset(&r->id);
    sbuf_reset(&r->title);
    sbuf_reset(&r->text);
    if ((st = sbuf_put(&r->id, r->line, (size_t)(tab - r->line)))) return st;
    if ((st = sbuf_put(&r->text, tab + 1, r->line_len - (size_t)(tab + 1 - r->line)))) return st;
    rec->offset = r->line_off;
    rec->line = r->lineno;
    return QAC_OK;
}

/* A required string field, or an optional one (NULL when absent). */
static qac_status json_field(qac_reader *r, json_t *o, const char *key, int required, const char **s, size_t *n) {
    json_t *v = json_object_get(o, key);
    *s = NULL;
    *n = 0;
    if (!v) return required ? rd_err(r, r->lineno, "missing field \"%s\"", key) : QAC_OK;
    if (!json_is_string(v)) return rd_err(r, r->lineno, "field \"%s\" is not a string", key);
    *s = json_string_value(v);
    *n = json_string_length(v);
    return QAC_OK;
}

static qac_status next_json(qac_reader *r, qac_record *rec, int *got) {
    qac_status st;
    do {
        if ((st = read_line(r, got)) || !*got) return st;
    } while (blank(r->line, r->line_len));
    json_error_t je;
    json_t *o = json_loadb(r->line, r->line_len, 0, &je);
    if (!o) return rd_err(r, r->lineno, "bad JSON: %s (column %d)", je.text, je.column);
    /* Any of the id fields of BEIR (_id), Tevatron (docid, query_id) and
     * plain JSONL (id); the text under "text", or Tevatron's "query". */
    static const char *const corpus_ids[] = {"_id", "id", "docid", NULL};
    static const char *const query_ids[] = {"_id", "id", "query_id", "docid", NULL};
    const char *const *idkeys = r->kind == QAC_READ_CORPUS ? corpus_ids : query_ids;
    const char *idk = NULL, *titlek = r->kind == QAC_READ_CORPUS ? "title" : NULL, *textk = "text";
    const char *id, *title = NULL, *text;
    size_t idn, titlen = 0, textn;
    if (!json_is_object(o)) {
        st = rd_err(r, r->lineno, "bad JSON: expected an object");
        goto done;
    }
    for (int i = 0; idkeys[i] && !idk; i++)
        if (json_object_get(o, idkeys[i])) idk = idkeys[i];
    if (!idk) {
        st = rd_err(r, r->lineno, "missing id field (one of %s)",
                    r->kind == QAC_READ_CORPUS ? "\"_id\", \"id\", \"docid\"" : "\"_id\", \"id\", \"query_id\", \"docid\"");
        goto done;
    }
    if (r->kind != QAC_READ_CORPUS && !json_object_get(o, "text") && json_object_get(o, "query")) textk = "query";
    if ((st = json_field(r, o, idk, 1, &id, &idn))) goto done;
    if (idn == 0) {
        st = rd_err(r, r->lineno, "empty id in field \"%s\"", idk);
        goto done;
    }
    if (titlek && (st = json_field(r, o, titlek, 0, &title, &titlen))) goto done;
    if ((st = json_field(r, o, textk, 1, &text, &textn))) goto done;
    if (memchr(id, 0, idn) || (title && memchr(title, 0, titlen)) || memchr(text, 0, textn)) {
        st = rd_err(r, r->lineno, "embedded NUL character");
        goto done;
    }
    sbuf_reset(&r->id);
    sbuf_reset(&r->title);
    sbuf_reset(&r->text);
    if ((st = sbuf_put(&r->id, id, idn))) goto done;
    if ((st = sbuf_put(&r->title, title ? title : "", titlen))) goto done;
    if ((st = sbuf_join(&r->text, title ? title : "", titlen))) goto done;
    if ((st = sbuf_join(&r->text, text, textn))) goto done;
    rec->offset = r->line_off;
    rec->line = r->lineno;
done:
    json_decref(o);
    return st;
}

static void trim(const char **s, size_t *n) {
    while (*n && isspace((unsigned char)**s)) { (*s)++; (*n)--; }
    while (*n && isspace((unsigned char)(*s)[*n - 1])) (*n)--;
}

/* SMART records: ".I id", then field markers (.T .A .B .W ...) on lines of
 * their own, each followed by its text lines. Only .T and .W are kept. */
static qac_status next_cranfield(qac_reader *r, qac_record *rec, int *got) {
    qac_status st;
    if (!r->pending) {
        do {
            if ((st = read_line(r, got)) || !*got) return st;
        } while (blank(r->line, r->line_len));
        if (!is_cran_id_line(r->line)) return rd_err(r, r->lineno, "expected a '.I id' line");
    }
    r->pending = 0;
    *got = 1;
    int64_t start_line = r->lineno;
    uint64_t start_off = r->line_off;
    const char *idp = r->line + 2;
    size_t idn = r->line_len - 2;
    trim(&idp, &idn);
    if (idn == 0) return rd_err(r, start_line, "empty id");
    sbuf_reset(&r->id);
    sbuf_reset(&r->title);
    sbuf_reset(&r->text);
    r->ordinal++;
    if (r->kind == QAC_READ_QUERIES) {
        char num[32];
        int k = snprintf(num, sizeof num, "%lld", (long long)r->ordinal);
        st = sbuf_put(&r->id, num, (size_t)k);
    } else {
        st = sbuf_put(&r->id, idp, idn);
    }
    if (st) return st;
    /* the line buffer is reused below: keep the raw id for messages */
    char *raw_id = strndup(idp, idn);
    if (!raw_id) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    sbuf body = {0};
    char field = 0;
    int seen_w = 0, more;
    for (;;) {
        if ((st = read_line(r, &more))) goto done;
        if (!more) break;
        if (is_cran_id_line(r->line) || (r->line_len == 2 && r->line[0] == '.' && r->line[1] == 'I')) {
            r->pending = 1;
            break;
        }
        const char *s = r->line;
        size_t n = r->line_len;
        trim(&s, &n);
        if (n == 2 && s[0] == '.' && isupper((unsigned char)s[1]) && r->line[0] == '.') {
            field = s[1];
            if (field == 'W') seen_w = 1;
            continue;
        }
        if (n == 0) continue;
        if (!field) {
            st = rd_err(r, r->lineno, "text before any field marker in record '.I %s'", raw_id);
            goto done;
        }
        if (field == 'T') st = sbuf_join(&r->title, s, n);
        else if (field == 'W') st = sbuf_join(&body, s, n);
        if (st) goto done;
    }
    if (!seen_w) {
        st = rd_err(r, start_line, "unterminated record '.I %s': no .W field before %s", raw_id,
                    r->pending ? "the next record" : "end of file");
        goto done;
    }
    if ((st = sbuf_join(&r->text, r->title.p ? r->title.p : "", r->title.len))) goto done;
    if ((st = sbuf_join(&r->text, body.p ? body.p : "", body.len))) goto done;
    rec->offset = start_off;
    rec->line = start_line;
done:
    free(raw_id);
    free(body.p);
    return st;
}

qac_status qac_reader_next(qac_reader *r, qac_record *rec, int *got) {
    *got = 0;
    if (!r || !rec) return qac_set_error(QAC_ERR_INVALID, "reader: NULL argument");
    qac_status st;
    switch (r->fmt) {
    case QAC_FMT_TSV: st = next_tsv(r, rec, got); break;
    case QAC_FMT_BEIR:
    case QAC_FMT_TEVATRON: st = next_json(r, rec, got); break;
    case QAC_FMT_CRANFIELD: st = next_cranfield(r, rec, got); break;
    default: return qac_set_error(QAC_ERR_INTERNAL, "reader: format not resolved");
    }
    if (st || !*got) {
        *got = 0;
        return st;
    }
    if (!(r->fmt == QAC_FMT_CRANFIELD && r->kind == QAC_READ_QUERIES) && (st = check_dup(r, rec->line))) {
        *got = 0;
        return st;
    }
    rec->id = r->id.p;
    rec->title = r->title.p ? r->title.p : "";
    rec->text = r->text.p ? r->text.p : "";
    rec->text_len = r->text.len;
    return QAC_OK;
}

qac_status qac_reader_seek(qac_reader *r, uint64_t offset, int64_t line) {
    if (!r) return qac_set_error(QAC_ERR_INVALID, "reader: NULL argument");
    if (offset < r->start) offset = r->start;
    if (offset > r->size || line < 1)
        return qac_set_error(QAC_ERR_INVALID, "%s: cannot seek to offset %llu line %lld (file has %llu bytes)",
                             r->path, (unsigned long long)offset, (long long)line, (unsigned long long)r->size);
    idset_clear(&r->ids);
    qac_status st;
    /* Only Cranfield query ids are ordinals that need the records before. */
    if (r->fmt != QAC_FMT_CRANFIELD || r->kind != QAC_READ_QUERIES || offset == r->start) {
        r->ordinal = 0;
        return position(r, offset, line);
    }
    /* Query ids are ordinals, so count the records before the offset. */
    if ((st = position(r, r->start, 1))) return st;
    r->ordinal = 0;
    for (;;) {
        int got;
        if ((st = read_line(r, &got))) return st;
        if (!got) {
            if (offset == r->pos) return QAC_OK;
            break;
        }
        if (r->line_off == offset) {
            if (!is_cran_id_line(r->line)) break;
            r->pending = 1;
            return QAC_OK;
        }
        if (r->line_off > offset) break;
        if (is_cran_id_line(r->line)) r->ordinal++;
    }
    return qac_set_error(QAC_ERR_INVALID, "%s: offset %llu is not the start of a record", r->path,
                         (unsigned long long)offset);
}
