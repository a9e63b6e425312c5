/* JSON lines and ids (util/qac_jsonl.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qac_jsonl.h"

qac_status qac_jsonl_next(qac_lines *r, json_t **obj, int *got) {
    *obj = NULL;
    const char *line;
    size_t len;
    qac_status s;
    while (!(s = qac_lines_next(r, &line, &len, got)) && *got) {
        size_t k = 0;
        while (k < len && (line[k] == ' ' || line[k] == '\t')) k++;
        if (k == len) continue;
        json_error_t err;
        json_t *o = json_loadb(line, len, 0, &err);
        if (!o)
            return qac_set_error(QAC_ERR_FORMAT, "%s:%ld: malformed JSON: %s (column %d)", qac_lines_path(r),
                                 qac_lines_lineno(r), err.text, err.column);
        if (!json_is_object(o)) {
            json_decref(o);
            return qac_set_error(QAC_ERR_FORMAT, "%s:%ld: not a JSON object", qac_lines_path(r), qac_lines_lineno(r));
        }
        *obj = o;
        return QAC_OK;
    }
    if (s) *got = 0;
    return s;
}

const char *qac_json_id_text(const json_t *v, char buf[QAC_JSON_ID_BUF]) {
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_integer(v)) {
        snprintf(buf, QAC_JSON_ID_BUF, "%lld", (long long)json_integer_value(v));
        return buf;
    }
    return NULL;
}

char *qac_json_id_dup(const json_t *v) {
    char buf[QAC_JSON_ID_BUF];
    const char *t = qac_json_id_text(v, buf);
    return t ? strdup(t) : NULL;
}
