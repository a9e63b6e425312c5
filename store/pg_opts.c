/* qac_pg_export's defaults: built with or without libpq. */
#include <string.h>

#include "qac_pgvector.h"

qac_pg_export_opts qac_pg_default_export_opts(void) {
    qac_pg_export_opts o;
    memset(&o, 0, sizeof o);
    o.table = "qac_passages";
    o.mode = QAC_PG_CREATE;
    o.metric = QAC_PG_IP;
    o.ann = QAC_PG_HNSW;
    o.parallel_workers = -1;
    return o;
}
