/* Export of a qac index into PostgreSQL + pgvector (`qac export`), the store
 * for corpora that outgrow one machine.
 *
 * The rows (docid, the stored embedding, optionally the passage text) are
 * bulk-loaded with binary COPY into
 *
 *     <table> (id text COLLATE "C" PRIMARY KEY, embedding vector(dim) NOT NULL [, text text])
 *
 * and pgvector's approximate index (HNSW or IVFFlat) is built over them.
 * The table's comment is "qac " followed by JSON naming the model, its
 * fingerprint, dim and metric, so that a reader (python/qac/pgvector.py)
 * picks the right operator and refuses vectors of another model.
 *
 * Metric. qac scores by the dot product. QAC_PG_IP indexes with
 * vector_ip_ops and orders by `embedding <#> q` (pgvector's negative inner
 * product): the same ranking as qac for every model. QAC_PG_COSINE
 * (vector_cosine_ops, `<=>`) ranks the same only for models that
 * L2-normalise their vectors, and is refused for the others.
 *
 * Ties. id is COLLATE "C": `ORDER BY embedding <#> q, id DESC` breaks equal
 * scores by docid descending, byte by byte, as qac (and trec_eval) do.
 *
 * Safety. Everything runs in one transaction: an error, a lost connection
 * or a killed process leaves the database as it was. An existing table is
 * refused unless QAC_PG_REPLACE (the new table is loaded and indexed under a
 * staging name, then swapped in at commit, so readers see the old table
 * until then) or QAC_PG_APPEND (rows added to it; a docid already there
 * fails the whole load). Messages never contain the connection URL (it may
 * carry a password). */
#ifndef QAC_PGVECTOR_H
#define QAC_PGVECTOR_H

#include <stdint.h>

#include "qac_common.h"
#include "qac_progress.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qac_pg_mode { QAC_PG_CREATE = 0, QAC_PG_REPLACE = 1, QAC_PG_APPEND = 2 } qac_pg_mode;
typedef enum qac_pg_metric { QAC_PG_IP = 0, QAC_PG_COSINE = 1 } qac_pg_metric;
typedef enum qac_pg_ann { QAC_PG_HNSW = 0, QAC_PG_IVFFLAT = 1, QAC_PG_NO_INDEX = 2 } qac_pg_ann;

typedef struct qac_pg_export_opts {
    const char *table;        /* [schema.]name, lower-case SQL identifiers; NULL = "qac_passages" */
    qac_pg_mode mode;
    qac_pg_metric metric;
    qac_pg_ann ann;           /* built on a new table; an appended-to table keeps its own */
    int texts;                /* also load the passage texts (column "text") */
    int hnsw_m;               /* 0 = pgvector's default (16) */
    int hnsw_ef_construction; /* 0 = pgvector's default (64) */
    int ivf_lists;            /* 0 = rows/1000 up to 1M rows, sqrt(rows) beyond (pgvector's advice) */
    const char *maintenance_work_mem; /* for the index build, e.g. "2GB"; NULL = the server's */
    int parallel_workers;     /* max_parallel_maintenance_workers for the build; -1 = the server's */
    qac_progress_fn progress; /* phases "copy" (rows) and "index/tuples" */
    void *progress_user;
    void (*notice)(void *user, const char *message); /* server NOTICEs and WARNINGs; NULL drops them */
    void *notice_user;
} qac_pg_export_opts;

/* Table qac_passages, create, inner product, HNSW with pgvector's defaults. */
qac_pg_export_opts qac_pg_default_export_opts(void);

typedef struct qac_pg_export_stats {
    int64_t rows;        /* rows loaded */
    uint64_t bytes;      /* COPY payload sent */
    double copy_s;       /* COPY, until the server acknowledged every row */
    double key_s;        /* the primary key's build */
    double index_s;      /* pgvector's index build */
    double total_s;      /* connect to commit */
    int lists;           /* IVFFlat lists used (0 otherwise) */
    int replaced;        /* an existing table was replaced */
    int appended;        /* rows were added to an existing table */
    char server_version[32];
    char pgvector_version[32];
} qac_pg_export_stats;

/* Export the index at index_dir to the database at url (postgresql:// or
 * postgres://, libpq's URI syntax; connect_timeout defaults to 10 s). The
 * index is read shard by shard (qac_index_open_rows), so memory stays at
 * one shard whatever its size. stats may be NULL. */
qac_status qac_pg_export(const char *index_dir, const char *url, const qac_pg_export_opts *o,
                         qac_pg_export_stats *stats);

#ifdef __cplusplus
}
#endif
#endif
