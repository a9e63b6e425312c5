/* A line reader over plain or gzip-compressed text files (zlib reads both,
 * so a ".gz" name is not required). Lines are returned without their
 * trailing "\n" / "\r\n"; any length is accepted.
 *
 * Ownership: qac_lines_free accepts NULL; the line returned by
 * qac_lines_next is borrowed and valid until the next call. */
#ifndef QAC_LINES_H
#define QAC_LINES_H

#include <stddef.h>

#include "qac_common.h"

typedef struct qac_lines qac_lines;

qac_status qac_lines_open(qac_lines **out, const char *path);
/* *got = 1 with line/len set (line NUL-terminated), or *got = 0 at the end.
 * A read error or a truncated gzip stream is an error naming the file. */
qac_status qac_lines_next(qac_lines *r, const char **line, size_t *len, int *got);
/* 1-based number of the line last returned. */
long qac_lines_lineno(const qac_lines *r);
/* The path the reader was opened with (for messages). */
const char *qac_lines_path(const qac_lines *r);
void qac_lines_free(qac_lines *r);

#endif
