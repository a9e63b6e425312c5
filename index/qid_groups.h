/* Internal to index/: what the qrels and run readers share. */
#ifndef QAC_QID_GROUPS_H
#define QAC_QID_GROUPS_H

#include <stddef.h>

#include "qac_common.h"

/* Split s in place into at most max whitespace-separated fields; returns the
 * number found, or max + 1 when there are more. */
int qac_split_fields(char *s, char **fields, int max);

/* Records sorted by query id, each holding its qid as an offset into arena
 * (a size_t at byte qid_at of each stride-byte record). Fills qids [nq] with
 * pointers into arena and start [nq + 1] with each query's first record,
 * both malloc'd. */
qac_status qac_group_by_qid(const char *arena, const void *records, size_t n, size_t stride, size_t qid_at,
                            const char ***qids, size_t **start, size_t *nq);

#endif
