/* The JSON reader and writer of a model directory (model_json.h).
 *
 * Reading: a missing file is not an error (*root NULL, QAC_OK), since every
 * file it reads is optional; duplicate keys are refused, and a parse error
 * names the file, line and column. Writing: two-space indent, keys in the
 * order they were set, and a final newline, as Hugging Face and
 * sentence-transformers write their configs, so a saved model diffs cleanly
 * against theirs.
 *
 * It sits below both of its users, checkpoint.c and prompts.c, which before
 * took these two functions from each other's file. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "model_json.h"
#include "qac_util.h"

qac_status qac_model_json_read(const char *path, json_t **root) {
    *root = NULL;
    char *txt;
    size_t len;
    qac_status s = qac_read_file(path, &txt, &len);
    if (s == QAC_ERR_NOT_FOUND) {
        qac_clear_error();
        return QAC_OK;
    }
    if (s) return s;
    json_error_t jerr;
    *root = json_loadb(txt, len, JSON_REJECT_DUPLICATES, &jerr);
    free(txt);
    if (!*root)
        return qac_set_error(QAC_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", path, jerr.line,
                             jerr.column, jerr.text);
    return QAC_OK;
}

qac_status qac_model_json_text(json_t *j, size_t extra_flags, char **out) {
    char *txt = j ? json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER | extra_flags) : NULL;
    json_decref(j);
    if (!txt) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    size_t n = strlen(txt);
    char *withnl = realloc(txt, n + 2);
    if (!withnl) {
        free(txt);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    withnl[n] = '\n';
    withnl[n + 1] = '\0';
    *out = withnl;
    return QAC_OK;
}
