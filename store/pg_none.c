/* qac_pg_export in a build without libpq (QAC_POSTGRESQL=OFF). */
#include "qac_pgvector.h"

qac_status qac_pg_export(const char *index_dir, const char *url, const qac_pg_export_opts *o,
                         qac_pg_export_stats *stats) {
    (void)index_dir, (void)url, (void)o, (void)stats;
    return qac_set_error(QAC_ERR_UNSUPPORTED,
                         "this qac was built without PostgreSQL support (libpq): rebuild with libpq-dev installed "
                         "and -DQAC_POSTGRESQL=ON");
}
