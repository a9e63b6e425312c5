/* qac index -> PostgreSQL + pgvector, through libpq (see qac_pgvector.h). */
#include <ctype.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/select.h>

#include "qac_index.h"
#include "qac_pgvector.h"
#include "qac_util.h"

#define DEFAULT_TABLE "qac_passages"
/* PostgreSQL truncates identifiers at 63 bytes; the longest name we derive
 * is "<table>__qac_new_embedding_idx" (23 bytes more). */
#define MAX_TABLE_NAME 40
#define STAGING_SUFFIX "__qac_new"
#define COPY_BUF (1 << 20)
#define PGVECTOR_MAX_INDEX_DIM 2000 /* vector columns: HNSW and IVFFlat index up to 2,000 dimensions */
#define COMMENT_FORMAT "qac-pgvector"

/* ---- names ---- */

/* The table's parts, plain identifiers (checked), and the name it is loaded
 * under: the table itself, or "<table>__qac_new" when replacing. */
typedef struct names {
    char schema[MAX_TABLE_NAME + 1], table[MAX_TABLE_NAME + 1]; /* schema "" = the search_path's */
    char target[MAX_TABLE_NAME + sizeof STAGING_SUFFIX];
} names;

#define QNAME 160 /* room for "schema"."<table>__qac_new_embedding_idx" */

static int ident_ok(const char *s, size_t len) {
    if (len == 0 || len > MAX_TABLE_NAME || !(islower((unsigned char)s[0]) || s[0] == '_')) return 0;
    for (size_t i = 0; i < len; i++)
        if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '_')) return 0;
    return 1;
}

/* Split "[schema.]table" into parts that need no escaping in SQL. */
static qac_status parse_table(names *n, const char *spec) {
    const char *dot = strchr(spec, '.');
    const char *t = dot ? dot + 1 : spec;
    if ((dot && !ident_ok(spec, (size_t)(dot - spec))) || !ident_ok(t, strlen(t)))
        return qac_set_error(QAC_ERR_INVALID,
                             "table name '%s': use [schema.]name with lower-case letters, digits and '_' "
                             "(at most %d bytes each, not starting with a digit)",
                             spec, MAX_TABLE_NAME);
    memset(n, 0, sizeof *n);
    if (dot) snprintf(n->schema, sizeof n->schema, "%.*s", (int)(dot - spec), spec);
    snprintf(n->table, sizeof n->table, "%s", t);
    snprintf(n->target, sizeof n->target, "%s", t);
    return QAC_OK;
}

/* "schema"."<base><suffix>", or "<base><suffix>" without a schema. */
static const char *qual(char *buf, const names *n, const char *base, const char *suffix) {
    if (n->schema[0]) snprintf(buf, QNAME, "\"%s\".\"%s%s\"", n->schema, base, suffix);
    else snprintf(buf, QNAME, "\"%s%s\"", base, suffix);
    return buf;
}

/* ---- libpq helpers ---- */

/* libpq's multi-line messages ("...failed: X\n\tIs the server running...")
 * on one line, without the trailing newline. */
static void one_line(char *dst, size_t cap, const char *src) {
    size_t j = 0;
    int space = 0;
    for (const char *p = src ? src : ""; *p && j + 1 < cap; p++) {
        if (*p == '\n' || *p == '\t' || *p == '\r') {
            space = 1;
            continue;
        }
        if (space && j) {
            if (j + 2 >= cap) break;
            dst[j++] = ';';
            dst[j++] = ' ';
        }
        space = 0;
        dst[j++] = *p;
    }
    dst[j] = '\0';
}

/* The server's error: primary message, then detail and hint when given. */
static qac_status result_error(qac_status code, const PGresult *r, PGconn *c, const char *what) {
    const char *prim = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    if (!prim) {
        char m[1024];
        one_line(m, sizeof m, r && *PQresultErrorMessage(r) ? PQresultErrorMessage(r) : PQerrorMessage(c));
        return qac_set_error(code, "%s: %s", what, m[0] ? m : "the connection to the server was lost");
    }
    const char *det = PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL), *hint = PQresultErrorField(r, PG_DIAG_MESSAGE_HINT);
    return qac_set_error(code, "%s: %s%s%s%s%s%s", what, prim, det ? " (" : "", det ? det : "", det ? ")" : "",
                         hint ? "; hint: " : "", hint ? hint : "");
}

static qac_status exec(PGconn *c, const char *sql, const char *what) {
    PGresult *r = PQexec(c, sql);
    ExecStatusType s = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    qac_status st = s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK ? QAC_OK : result_error(QAC_ERR_IO, r, c, what);
    PQclear(r);
    return st;
}

/* One text value (row 0, column 0) of a query into buf; "" for no row or NULL. */
static qac_status query_value(PGconn *c, const char *sql, const char *what, char *buf, size_t cap, int *found) {
    PGresult *r = PQexec(c, sql);
    if (!r || PQresultStatus(r) != PGRES_TUPLES_OK) {
        qac_status st = result_error(QAC_ERR_IO, r, c, what);
        PQclear(r);
        return st;
    }
    *found = PQntuples(r) > 0 && !PQgetisnull(r, 0, 0);
    snprintf(buf, cap, "%s", *found ? PQgetvalue(r, 0, 0) : "");
    PQclear(r);
    return QAC_OK;
}

static void on_notice(void *arg, const PGresult *r) {
    const qac_pg_export_opts *o = arg;
    if (!o->notice) return;
    char m[1024];
    one_line(m, sizeof m, PQresultErrorMessage(r));
    o->notice(o->notice_user, m);
}

static int url_ok(const char *url) {
    return url && (!strncmp(url, "postgresql://", 13) || !strncmp(url, "postgres://", 11));
}

static qac_status connect_db(PGconn **out, const char *url, const char *app) {
    /* ours first: the URL's own settings, expanded from dbname, override them */
    const char *keys[] = {"connect_timeout", "fallback_application_name", "client_encoding", "dbname", NULL};
    const char *vals[] = {"10", app, "UTF8", url, NULL};
    PGconn *c = PQconnectdbParams(keys, vals, 1);
    if (!c) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    if (PQstatus(c) != CONNECTION_OK) {
        char m[1024];
        one_line(m, sizeof m, PQerrorMessage(c));
        PQfinish(c);
        return qac_set_error(QAC_ERR_IO, "cannot connect to PostgreSQL: %s", m);
    }
    *out = c;
    return QAC_OK;
}

/* "0.6.2" >= major.minor */
static int version_at_least(const char *v, int major, int minor) {
    int a = 0, b = 0;
    if (sscanf(v, "%d.%d", &a, &b) < 1) return 0;
    return a > major || (a == major && b >= minor);
}

/* ---- binary COPY ---- */

typedef struct copybuf {
    PGconn *c;
    unsigned char *p;
    size_t n;
    uint64_t sent;
} copybuf;

static void put_u16(copybuf *b, uint16_t v) {
    b->p[b->n++] = (unsigned char)(v >> 8);
    b->p[b->n++] = (unsigned char)v;
}

static void put_u32(copybuf *b, uint32_t v) {
    b->p[b->n++] = (unsigned char)(v >> 24);
    b->p[b->n++] = (unsigned char)(v >> 16);
    b->p[b->n++] = (unsigned char)(v >> 8);
    b->p[b->n++] = (unsigned char)v;
}

/* dim float4 in network byte order (htonl: a byte swap the compiler vectorises) */
static void put_floats(copybuf *b, const float *x, int dim) {
    unsigned char *p = b->p + b->n;
    for (int j = 0; j < dim; j++) {
        uint32_t u;
        memcpy(&u, &x[j], 4);
        u = htonl(u);
        memcpy(p + 4 * (size_t)j, &u, 4);
    }
    b->n += 4 * (size_t)dim;
}

static qac_status copy_flush(copybuf *b) {
    if (!b->n) return QAC_OK;
    if (PQputCopyData(b->c, (const char *)b->p, (int)b->n) != 1) {
        char m[1024];
        one_line(m, sizeof m, PQerrorMessage(b->c));
        return qac_set_error(QAC_ERR_IO, "COPY: %s", m);
    }
    b->sent += b->n;
    b->n = 0;
    return QAC_OK;
}

/* Room for `need` more bytes (flushing first when the buffer is full). */
static qac_status copy_room(copybuf *b, size_t need) {
    if (b->n + need <= COPY_BUF) return QAC_OK;
    qac_status st = copy_flush(b);
    if (st) return st;
    if (need > COPY_BUF) return qac_set_error(QAC_ERR_INVALID, "COPY: a row of %zu bytes is too large", need);
    return QAC_OK;
}

static void put_bytes(copybuf *b, const void *p, size_t n) {
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

/* Field layout (PostgreSQL's binary COPY format, big-endian): per row an
 * int16 field count, then per field an int32 length and the value in the
 * type's binary send/recv form. pgvector's `vector` is int16 dim, int16
 * unused (0), then dim float4. */
static qac_status copy_rows(PGconn *c, qac_index *ix, const qac_pg_export_opts *o, int64_t *rows_out,
                            uint64_t *bytes_out) {
    static const unsigned char header[19] = {'P', 'G', 'C', 'O', 'P', 'Y', '\n', 0xff, '\r', '\n', 0,
                                             0,   0,   0,   0,   0,   0,   0,    0};
    int dim = qac_index_dim(ix);
    int64_t total = qac_index_count(ix);
    copybuf b = {c, malloc(COPY_BUF), 0, 0};
    qac_index_rows *rr = NULL;
    if (!b.p) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    qac_status st = qac_index_rows_open(&rr, ix);
    if (!st) put_bytes(&b, header, sizeof header);
    if (!st && o->progress) o->progress(o->progress_user, "copy", 0, (uint64_t)total);
    int64_t done = 0;
    size_t vec_bytes = 4 + 4 * (size_t)dim;
    while (!st) {
        int64_t first, n;
        const float *v;
        if ((st = qac_index_rows_next(rr, &first, &n, &v)) || n == 0) break;
        for (int64_t i = 0; i < n && !st; i++) {
            int64_t row = first + i;
            const char *id = qac_index_docid(ix, row);
            size_t idlen = strlen(id);
            char *text = NULL;
            size_t tlen = 0;
            if (o->texts) {
                if ((st = qac_index_text(ix, row, &text))) break;
                tlen = strlen(text);
                if (tlen > 0x3fffffff) {
                    free(text);
                    st = qac_set_error(QAC_ERR_INVALID, "passage %s: text too long for PostgreSQL", id);
                    break;
                }
            }
            size_t need = 2 + 4 + idlen + 4 + vec_bytes + (o->texts ? 4 + tlen : 0);
            if ((st = copy_room(&b, need))) {
                free(text);
                break;
            }
            put_u16(&b, (uint16_t)(o->texts ? 3 : 2));
            put_u32(&b, (uint32_t)idlen);
            put_bytes(&b, id, idlen);
            put_u32(&b, (uint32_t)vec_bytes);
            put_u16(&b, (uint16_t)dim);
            put_u16(&b, 0);
            put_floats(&b, v + (size_t)i * (size_t)dim, dim);
            if (o->texts) {
                put_u32(&b, (uint32_t)tlen);
                put_bytes(&b, text, tlen);
                free(text);
            }
            done++;
            if (o->progress && (done & 4095) == 0) o->progress(o->progress_user, "copy", (uint64_t)done, (uint64_t)total);
        }
    }
    if (!st && !(st = copy_room(&b, 2))) {
        put_u16(&b, 0xffff); /* trailer: field count -1 */
        st = copy_flush(&b);
    }
    qac_index_rows_free(rr);
    free(b.p);
    /* end the COPY either way: with an error message the server aborts it */
    if (PQputCopyEnd(c, st ? "qac export stopped" : NULL) != 1 && !st) {
        char m[1024];
        one_line(m, sizeof m, PQerrorMessage(c));
        st = qac_set_error(QAC_ERR_IO, "COPY: %s", m);
    }
    PGresult *r;
    while ((r = PQgetResult(c))) {
        if (!st && PQresultStatus(r) != PGRES_COMMAND_OK) st = result_error(QAC_ERR_IO, r, c, "COPY");
        PQclear(r);
    }
    if (!st && o->progress) o->progress(o->progress_user, "copy", (uint64_t)done, (uint64_t)total);
    *rows_out = done;
    *bytes_out = b.sent;
    return st;
}

/* ---- the index build, with progress from a second session ---- */

static qac_status build_index(PGconn *c, PGconn *watch, const char *sql, int64_t rows, const qac_pg_export_opts *o) {
    if (!watch || !o->progress) return exec(c, sql, "CREATE INDEX");
    if (!PQsendQuery(c, sql)) {
        char m[1024];
        one_line(m, sizeof m, PQerrorMessage(c));
        return qac_set_error(QAC_ERR_IO, "CREATE INDEX: %s", m);
    }
    char poll[160];
    snprintf(poll, sizeof poll,
             "SELECT tuples_done FROM pg_stat_progress_create_index WHERE pid = %d", PQbackendPID(c));
    int sock = PQsocket(c);
    o->progress(o->progress_user, "index/tuples", 0, (uint64_t)rows);
    while (1) {
        if (!PQconsumeInput(c)) break; /* PQgetResult reports the error */
        if (!PQisBusy(c)) break;
        fd_set fds;
        FD_ZERO(&fds);
        FD_SET(sock, &fds);
        struct timeval tv = {0, 500000};
        if (select(sock + 1, &fds, NULL, NULL, &tv) > 0) continue;
        char v[32];
        int found = 0;
        if (query_value(watch, poll, "progress", v, sizeof v, &found) == QAC_OK && found)
            o->progress(o->progress_user, "index/tuples", strtoull(v, NULL, 10), (uint64_t)rows);
    }
    qac_status st = QAC_OK;
    PGresult *r;
    while ((r = PQgetResult(c))) {
        if (!st && PQresultStatus(r) != PGRES_COMMAND_OK) st = result_error(QAC_ERR_IO, r, c, "CREATE INDEX");
        PQclear(r);
    }
    if (!st) o->progress(o->progress_user, "index/tuples", (uint64_t)rows, (uint64_t)rows);
    return st;
}

/* ---- the table's qac metadata ---- */

static char *comment_json(const qac_index *ix, const qac_pg_export_opts *o) {
    json_t *j = json_pack("{s:s, s:i, s:s, s:s, s:b, s:i, s:s, s:b}", "format", COMMENT_FORMAT, "version", 1,
                          "model", qac_index_model_name(ix), "fingerprint", qac_index_model_fingerprint(ix),
                          "normalize", qac_index_model_normalize(ix), "dim", qac_index_dim(ix), "metric",
                          o->metric == QAC_PG_COSINE ? "cosine" : "ip", "texts", o->texts ? 1 : 0);
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(j);
    return s;
}

/* Appending: the existing table must be qac's, of the same model, dim and
 * text column, or the rows would not be comparable. */
static qac_status check_append(PGconn *c, const names *n, const qac_index *ix, const qac_pg_export_opts *o,
                               qac_pg_metric *metric) {
    char sql[512], v[2048], q[QNAME];
    int found = 0;
    /* the quoted name holds only [a-z0-9_."]: nothing to escape in the literal */
    snprintf(sql, sizeof sql, "SELECT obj_description(to_regclass('%s'), 'pg_class')", qual(q, n, n->table, ""));
    qac_status st = query_value(c, sql, "reading the table's comment", v, sizeof v, &found);
    if (st) return st;
    json_error_t err;
    json_t *j = found && !strncmp(v, "qac ", 4) ? json_loads(v + 4, 0, &err) : NULL;
    const char *fmt = json_string_value(json_object_get(j, "format"));
    if (!fmt || strcmp(fmt, COMMENT_FORMAT) != 0) {
        json_decref(j);
        return qac_set_error(QAC_ERR_INVALID, "--append: table %s was not made by qac export (its comment does not say so)",
                             q);
    }
    const char *fp = json_string_value(json_object_get(j, "fingerprint"));
    const char *met = json_string_value(json_object_get(j, "metric"));
    int dim = (int)json_integer_value(json_object_get(j, "dim")), texts = json_is_true(json_object_get(j, "texts"));
    if (!fp || strcmp(fp, qac_index_model_fingerprint(ix)) != 0)
        st = qac_set_error(QAC_ERR_INVALID,
                           "--append: table %s holds vectors of model fingerprint %s, this index has %s "
                           "(vectors of two models cannot be compared)",
                           q, fp ? fp : "?", qac_index_model_fingerprint(ix));
    else if (dim != qac_index_dim(ix))
        st = qac_set_error(QAC_ERR_INVALID, "--append: table %s has dim %d, this index %d", q, dim,
                           qac_index_dim(ix));
    else if (texts != (o->texts != 0))
        st = qac_set_error(QAC_ERR_INVALID, "--append: table %s was loaded %s passage texts: %s --texts", q,
                           texts ? "with" : "without", texts ? "add" : "drop");
    *metric = met && !strcmp(met, "cosine") ? QAC_PG_COSINE : QAC_PG_IP;
    json_decref(j);
    return st;
}

static int auto_lists(int64_t rows) {
    double l = rows <= 1000000 ? (double)rows / 1000.0 : sqrt((double)rows);
    return l < 1 ? 1 : (int)l;
}

/* Replace: drop the old table and give the loaded one, its key and its
 * index the final names, all inside the export's transaction. */
static qac_status swap_in(PGconn *c, const names *n, int has_idx) {
    char old[QNAME], loaded[QNAME], pkey[QNAME], idx[QNAME], sql[6 * QNAME];
    snprintf(sql, sizeof sql,
             "DROP TABLE %s; ALTER TABLE %s RENAME TO \"%s\"; ALTER INDEX %s RENAME TO \"%s_pkey\"",
             qual(old, n, n->table, ""), qual(loaded, n, n->target, ""), n->table, qual(pkey, n, n->target, "_pkey"),
             n->table);
    qac_status st = exec(c, sql, "replacing the table");
    if (!st && has_idx) {
        snprintf(sql, sizeof sql, "ALTER INDEX %s RENAME TO \"%s_embedding_idx\"", qual(idx, n, n->target, "_embedding_idx"),
                 n->table);
        st = exec(c, sql, "replacing the table");
    }
    return st;
}

qac_status qac_pg_export(const char *index_dir, const char *url, const qac_pg_export_opts *opts,
                         qac_pg_export_stats *stats) {
    qac_pg_export_opts o = opts ? *opts : qac_pg_default_export_opts();
    qac_pg_export_stats s;
    memset(&s, 0, sizeof s);
    double t0 = qac_now();
    if (!url_ok(url))
        return qac_set_error(QAC_ERR_INVALID, "the target must be a postgresql:// (or postgres://) URL");
    names n;
    qac_status st = parse_table(&n, o.table ? o.table : DEFAULT_TABLE);
    if (st) return st;
    if (o.hnsw_m < 0 || o.hnsw_m == 1 || o.hnsw_m > 100 || o.hnsw_ef_construction < 0 ||
        o.hnsw_ef_construction > 1000 || o.ivf_lists < 0 || o.ivf_lists > 32768)
        return qac_set_error(QAC_ERR_INVALID, "index parameters out of pgvector's range "
                                              "(m 2..100, ef_construction up to 1000, lists 1..32768)");
    if (o.maintenance_work_mem) {
        /* digits and a unit only: the value goes into a SET statement */
        const char *m = o.maintenance_work_mem, *unit = m;
        while (isdigit((unsigned char)*unit)) unit++;
        if (unit == m || strlen(m) > 24 ||
            (*unit && strcmp(unit, "kB") && strcmp(unit, "MB") && strcmp(unit, "GB") && strcmp(unit, "TB")))
            return qac_set_error(QAC_ERR_INVALID, "maintenance_work_mem '%s': a number with kB, MB, GB or TB", m);
    }
    qac_index *ix = NULL;
    PGconn *c = NULL, *watch = NULL;
    char *comment = NULL, *lit = NULL;
    char sql[1024], q[QNAME], q2[QNAME], v[64];
    int in_tx = 0, found = 0;
    if ((st = qac_index_open_rows(&ix, index_dir))) goto done;
    int dim = qac_index_dim(ix);
    if (o.texts) {
        if (!qac_index_has_text(ix)) {
            st = qac_set_error(QAC_ERR_INVALID, "--texts: this index was built from vectors and has no passage text");
            goto done;
        }
        if ((st = qac_index_open_corpus(ix, QAC_VERIFY_FULL))) goto done;
    }
    if ((st = connect_db(&c, url, "qac export"))) goto done;
    PQsetNoticeReceiver(c, on_notice, &o);
    snprintf(s.server_version, sizeof s.server_version, "%.31s",
             PQparameterStatus(c, "server_version") ? PQparameterStatus(c, "server_version") : "?");
    if ((st = exec(c, "BEGIN", "BEGIN"))) goto done;
    in_tx = 1;
    /* pgvector, created when missing (and rolled back with the rest on failure) */
    static const char ext_q[] = "SELECT extversion FROM pg_extension WHERE extname = 'vector'";
    if ((st = query_value(c, ext_q, "checking pgvector", v, sizeof v, &found))) goto done;
    if (!found) {
        if ((st = exec(c, "CREATE EXTENSION IF NOT EXISTS vector",
                       "pgvector is not installed in this database, and creating it failed")) ||
            (st = query_value(c, ext_q, "checking pgvector", v, sizeof v, &found)))
            goto done;
    }
    snprintf(s.pgvector_version, sizeof s.pgvector_version, "%.31s", v);
    if (o.ann == QAC_PG_HNSW && !version_at_least(v, 0, 5)) {
        st = qac_set_error(QAC_ERR_UNSUPPORTED, "pgvector %s has no HNSW index (0.5.0 and later have); use --pg-index ivfflat", v);
        goto done;
    }
    if (o.ann != QAC_PG_NO_INDEX && dim > PGVECTOR_MAX_INDEX_DIM) {
        st = qac_set_error(QAC_ERR_UNSUPPORTED, "pgvector indexes vectors of at most %d dimensions; this index has %d "
                                                "(--pg-index none loads them for exact search)",
                           PGVECTOR_MAX_INDEX_DIM, dim);
        goto done;
    }
    /* the quoted name holds only [a-z0-9_."]: nothing to escape in the literal */
    snprintf(sql, sizeof sql, "SELECT to_regclass('%s')::oid", qual(q, &n, n.table, ""));
    if ((st = query_value(c, sql, "looking the table up", v, sizeof v, &found))) goto done;
    int exists = found;
    if (exists && o.mode == QAC_PG_CREATE) {
        st = qac_set_error(QAC_ERR_INVALID,
                           "table %s already exists: --replace swaps it for this index (in one transaction), "
                           "--append adds these rows to it",
                           q);
        goto done;
    }
    int append = exists && o.mode == QAC_PG_APPEND, staging = exists && o.mode == QAC_PG_REPLACE;
    if (append && (st = check_append(c, &n, ix, &o, &o.metric))) goto done;
    if (!append && o.metric == QAC_PG_COSINE && !qac_index_model_normalize(ix)) {
        st = qac_set_error(QAC_ERR_INVALID,
                           "--metric cosine: model %s does not L2-normalise its vectors, so cosine would rank "
                           "differently from qac's dot product; use --metric ip",
                           qac_index_model_name(ix));
        goto done;
    }
    if (staging) snprintf(n.target, sizeof n.target, "%s%s", n.table, STAGING_SUFFIX);
    const char *target = qual(q, &n, n.target, "");
    if (!append) {
        snprintf(sql, sizeof sql, "CREATE TABLE %s (id text COLLATE \"C\" NOT NULL, embedding vector(%d) NOT NULL%s)",
                 target, dim, o.texts ? ", text text" : "");
        if ((st = exec(c, sql, "CREATE TABLE"))) goto done;
    }
    /* FREEZE: rows of a table made in this transaction are written frozen,
     * sparing the first VACUUM a pass over every page */
    snprintf(sql, sizeof sql, "COPY %s (id, embedding%s) FROM STDIN (FORMAT BINARY%s)", target,
             o.texts ? ", text" : "", append ? "" : ", FREEZE");
    double tc = qac_now();
    PGresult *r = PQexec(c, sql);
    if (!r || PQresultStatus(r) != PGRES_COPY_IN) {
        st = result_error(QAC_ERR_IO, r, c, "COPY");
        PQclear(r);
        goto done;
    }
    PQclear(r);
    if ((st = copy_rows(c, ix, &o, &s.rows, &s.bytes))) {
        if (append && strstr(qac_last_error(), "duplicate key"))
            st = qac_wrap_error(st, "--append: a docid of this index is already in the table");
        goto done;
    }
    s.copy_s = qac_now() - tc;
    if (!append) {
        double tk = qac_now();
        snprintf(sql, sizeof sql, "ALTER TABLE %s ADD CONSTRAINT \"%s_pkey\" PRIMARY KEY (id)", target, n.target);
        if ((st = exec(c, sql, "the primary key on id"))) {
            if (strstr(qac_last_error(), "duplicate"))
                st = qac_wrap_error(st, "the index's docids are not unique");
            goto done;
        }
        s.key_s = qac_now() - tk;
        if (o.ann != QAC_PG_NO_INDEX) {
            if (o.maintenance_work_mem) {
                snprintf(sql, sizeof sql, "SET LOCAL maintenance_work_mem = '%s'", o.maintenance_work_mem);
                if ((st = exec(c, sql, "maintenance_work_mem"))) goto done;
            }
            if (o.parallel_workers >= 0) {
                snprintf(sql, sizeof sql, "SET LOCAL max_parallel_maintenance_workers = %d", o.parallel_workers);
                if ((st = exec(c, sql, "max_parallel_maintenance_workers"))) goto done;
            }
            char with[96] = "";
            if (o.ann == QAC_PG_HNSW) {
                if (o.hnsw_m && o.hnsw_ef_construction)
                    snprintf(with, sizeof with, " WITH (m = %d, ef_construction = %d)", o.hnsw_m, o.hnsw_ef_construction);
                else if (o.hnsw_m) snprintf(with, sizeof with, " WITH (m = %d)", o.hnsw_m);
                else if (o.hnsw_ef_construction)
                    snprintf(with, sizeof with, " WITH (ef_construction = %d)", o.hnsw_ef_construction);
            } else {
                s.lists = o.ivf_lists ? o.ivf_lists : auto_lists(s.rows);
                snprintf(with, sizeof with, " WITH (lists = %d)", s.lists);
            }
            /* a bare index name: CREATE INDEX puts it in the table's schema */
            snprintf(sql, sizeof sql, "CREATE INDEX \"%s_embedding_idx\" ON %s USING %s (embedding %s)%s", n.target,
                     target, o.ann == QAC_PG_HNSW ? "hnsw" : "ivfflat",
                     o.metric == QAC_PG_COSINE ? "vector_cosine_ops" : "vector_ip_ops", with);
            if (o.progress && connect_db(&watch, url, "qac export (progress)") != QAC_OK) {
                watch = NULL; /* progress is a nicety: build without it */
                qac_clear_error();
            }
            double ti = qac_now();
            if ((st = build_index(c, watch, sql, s.rows, &o))) goto done;
            s.index_s = qac_now() - ti;
        }
        char *full = NULL;
        if (!(comment = comment_json(ix, &o)) || asprintf(&full, "qac %s", comment) < 0) {
            st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
            goto done;
        }
        lit = PQescapeLiteral(c, full, strlen(full));
        free(full);
        if (!lit) {
            st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
            goto done;
        }
        snprintf(sql, sizeof sql, "COMMENT ON TABLE %s IS %s", target, lit);
        if ((st = exec(c, sql, "COMMENT ON TABLE"))) goto done;
        if (staging && (st = swap_in(c, &n, o.ann != QAC_PG_NO_INDEX))) goto done;
    }
    snprintf(sql, sizeof sql, "ANALYZE %s", qual(q2, &n, n.table, ""));
    if ((st = exec(c, sql, "ANALYZE")) || (st = exec(c, "COMMIT", "COMMIT"))) goto done;
    in_tx = 0;
    s.replaced = staging;
    s.appended = append;
    s.total_s = qac_now() - t0;
    if (stats) *stats = s;
done:
    if (in_tx && c) PQclear(PQexec(c, "ROLLBACK")); /* the first error is the one to report */
    free(comment);
    if (lit) PQfreemem(lit);
    if (watch) PQfinish(watch);
    if (c) PQfinish(c);
    qac_index_free(ix);
    return st;
}
