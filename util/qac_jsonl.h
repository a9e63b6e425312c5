/* JSON lines over qac_lines: one JSON object per non-blank line, and the
 * id fields that corpora write as strings or integers.
 *
 * Ownership: the object from qac_jsonl_next is the caller's (json_decref);
 * the text from qac_json_id_text is borrowed from v or written to buf;
 * qac_json_id_dup's copy is the caller's (free). */
#ifndef QAC_JSONL_H
#define QAC_JSONL_H

#include <jansson.h>

#include "qac_lines.h"

/* The next line that holds more than blanks and tabs, parsed: *got = 1 and
 * *obj set, or *got = 0 at the end. Errors name the file and line:
 * "PATH:LINE: malformed JSON: WHY (column N)" and "PATH:LINE: not a JSON
 * object"; a read error is qac_lines_next's. */
qac_status qac_jsonl_next(qac_lines *r, json_t **obj, int *got);

/* An id as text: a string as it is, an integer in decimal; NULL for any
 * other value (or none). buf holds the decimal form. */
#define QAC_JSON_ID_BUF 32
const char *qac_json_id_text(const json_t *v, char buf[QAC_JSON_ID_BUF]);
/* The same, malloc'd; NULL for any other value or when out of memory. */
char *qac_json_id_dup(const json_t *v);

#endif
