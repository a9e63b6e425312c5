/* qac export: load an index into PostgreSQL + pgvector. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "qac_pgvector.h"
#include "qac_util.h"

static const qac_opt export_opts[] = {
    {"index", QAC_OPT_STR, NULL, 0, -1, NULL, "QAC_INDEX", "index directory from qac index build", 1},
    {"to", QAC_OPT_STR, NULL, 0, -1, NULL, "QAC_PG_URL",
     "postgresql://[user[:password]@]host[:port]/dbname[?param=value] (libpq's URL; a password is better "
     "kept in PGPASSWORD or ~/.pgpass)", 1},
    {"table", QAC_OPT_STR, "qac_passages", 0, -1, NULL, NULL, "[schema.]table to load (lower-case identifiers)", 0},
    {"replace", QAC_OPT_BOOL, "false", 0, -1, NULL, NULL,
     "replace an existing table: load and index a new one, swap it in at commit", 0},
    {"append", QAC_OPT_BOOL, "false", 0, -1, NULL, NULL,
     "add the rows to an existing table from qac export (same model; a docid already there fails the load)", 0},
    {"texts", QAC_OPT_BOOL, "false", 0, -1, NULL, NULL, "also load the passage texts (column text)", 0},
    {"metric", QAC_OPT_ENUM, "ip", 0, -1, "ip|cosine", NULL,
     "ip: vector_ip_ops, ranks as qac does for every model; cosine: vector_cosine_ops, normalised models only", 0},
    {"pg-index", QAC_OPT_ENUM, "hnsw", 0, -1, "hnsw|ivfflat|none", NULL,
     "pgvector index built after the load (none: exact search only)", 0},
    {"hnsw-m", QAC_OPT_INT, "0", 0, 100, NULL, NULL, "HNSW links per node (0 = pgvector's default, 16)", 0},
    {"ef-construction", QAC_OPT_INT, "0", 0, 1000, NULL, NULL, "HNSW build breadth (0 = pgvector's default, 64)", 0},
    {"lists", QAC_OPT_INT, "0", 0, 32768, NULL, NULL, "IVFFlat lists (0 = rows/1000, sqrt(rows) above 1M rows)", 0},
    {"maintenance-work-mem", QAC_OPT_STR, NULL, 0, -1, NULL, NULL,
     "memory for the index build, e.g. 2GB (HNSW builds fastest when its graph fits)", 0},
    {"parallel-workers", QAC_OPT_INT, "-1", -1, 1024, NULL, NULL,
     "max_parallel_maintenance_workers for the build (-1 = the server's)", 0},
};
#define N_EXPORT_OPTS (int)(sizeof export_opts / sizeof export_opts[0])

static void print_notice(void *user, const char *message) {
    (void)user;
    fprintf(stderr, "qac export: server: %s\n", message);
}

int qac_cmd_export(int argc, char **argv) {
    qac_opts o;
    int rc = qac_cli_parse(&o, "export", "--index DIR --to postgresql://... [--table NAME] [options]", export_opts,
                           N_EXPORT_OPTS, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    if (qac_opts_bool(&o, "replace") && qac_opts_bool(&o, "append")) {
        fprintf(stderr, "qac export: give at most one of --replace and --append\n");
        qac_opts_free(&o);
        return 2;
    }
    qac_progress_state ps;
    qac_progress_init(&ps, "rows");
    qac_pg_export_opts eo = qac_pg_default_export_opts();
    eo.table = qac_opts_str(&o, "table");
    eo.mode = qac_opts_bool(&o, "replace") ? QAC_PG_REPLACE : qac_opts_bool(&o, "append") ? QAC_PG_APPEND : QAC_PG_CREATE;
    eo.metric = !strcmp(qac_opts_str(&o, "metric"), "cosine") ? QAC_PG_COSINE : QAC_PG_IP;
    const char *ann = qac_opts_str(&o, "pg-index");
    eo.ann = !strcmp(ann, "ivfflat") ? QAC_PG_IVFFLAT : !strcmp(ann, "none") ? QAC_PG_NO_INDEX : QAC_PG_HNSW;
    eo.texts = qac_opts_bool(&o, "texts");
    eo.hnsw_m = (int)qac_opts_int(&o, "hnsw-m");
    eo.hnsw_ef_construction = (int)qac_opts_int(&o, "ef-construction");
    eo.ivf_lists = (int)qac_opts_int(&o, "lists");
    eo.maintenance_work_mem = qac_opts_str(&o, "maintenance-work-mem");
    eo.parallel_workers = (int)qac_opts_int(&o, "parallel-workers");
    eo.progress = qac_progress_stderr;
    eo.progress_user = &ps;
    eo.notice = ps.quiet ? NULL : print_notice;
    qac_pg_export_stats s;
    if (qac_pg_export(qac_opts_str(&o, "index"), qac_opts_str(&o, "to"), &eo, &s)) {
        qac_opts_free(&o);
        return qac_cli_fail("export");
    }
    if (!ps.quiet) {
        fprintf(stderr, "qac export: %lld rows %s %s (PostgreSQL %s, pgvector %s)\n", (long long)s.rows,
                s.appended ? "appended to" : s.replaced ? "replaced" : "into", eo.table, s.server_version,
                s.pgvector_version);
        fprintf(stderr, "  COPY %.2f s (%.0f rows/s, %.1f MB/s)", s.copy_s, s.copy_s > 0 ? (double)s.rows / s.copy_s : 0,
                s.copy_s > 0 ? (double)s.bytes / 1e6 / s.copy_s : 0);
        if (!s.appended) fprintf(stderr, ", primary key %.2f s", s.key_s);
        if (!s.appended && eo.ann != QAC_PG_NO_INDEX) {
            if (eo.ann == QAC_PG_HNSW)
                fprintf(stderr, ", HNSW (m %d, ef_construction %d, %s) %.2f s", eo.hnsw_m ? eo.hnsw_m : 16,
                        eo.hnsw_ef_construction ? eo.hnsw_ef_construction : 64,
                        eo.metric == QAC_PG_COSINE ? "vector_cosine_ops" : "vector_ip_ops", s.index_s);
            else
                fprintf(stderr, ", IVFFlat (lists %d, %s) %.2f s", s.lists,
                        eo.metric == QAC_PG_COSINE ? "vector_cosine_ops" : "vector_ip_ops", s.index_s);
        }
        fprintf(stderr, "; total %.2f s (%.0f rows/s)\n", s.total_s, s.total_s > 0 ? (double)s.rows / s.total_s : 0);
    }
    qac_opts_free(&o);
    return 0;
}
