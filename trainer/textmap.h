/* Internal to trainer/: an in-memory id -> (title, body) table over a
 * corpus or queries file, for looking texts up by id. */
#ifndef QAC_TEXTMAP_H
#define QAC_TEXTMAP_H

#include "qac_data.h"

typedef struct qac_textmap qac_textmap;

/* Every record of path (kind and format as qac_reader_open). The body is
 * the record's text without the title in front (the readers join them). */
qac_status qac_textmap_load(qac_textmap **out, const char *path, qac_reader_kind kind, qac_text_format fmt);
void qac_textmap_free(qac_textmap *m);
/* 1 and title/body set (borrowed) when id is present, else 0. */
int qac_textmap_get(const qac_textmap *m, const char *id, const char **title, const char **body);
size_t qac_textmap_count(const qac_textmap *m);

/* A string -> index hash table (keys copied). */
typedef struct qac_strmap qac_strmap;
qac_status qac_strmap_create(qac_strmap **out);
void qac_strmap_free(qac_strmap *m);
/* The value of key, or -1. */
long qac_strmap_get(const qac_strmap *m, const char *key);
qac_status qac_strmap_put(qac_strmap *m, const char *key, long value);

#endif
