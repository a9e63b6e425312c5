/* Internal to model/: the prompts' file I/O, used by checkpoint.c, and the
 * JSON file reader and text writer both use. */
#ifndef QAC_MODEL_INTERNAL_H
#define QAC_MODEL_INTERNAL_H

#include <jansson.h>

#include "qac_model.h"

/* Read dir/config_sentence_transformers.json into m's prompts (absent: none). */
qac_status qac_model_prompts_load(qac_model *m, const char *dir);
/* The config_sentence_transformers.json text for m (malloc'd). */
qac_status qac_model_prompts_json(const qac_model *m, char **out);
/* Free m's prompts. */
void qac_model_prompts_clear(qac_model *m);
/* A small JSON file; *root NULL (and QAC_OK) when it is absent. */
qac_status qac_model_json_read(const char *path, json_t **root);
/* j as pretty JSON text ending in a newline, as HF writes it (malloc'd);
 * consumes j (NULL means an earlier allocation failed). */
qac_status qac_model_json_text(json_t *j, size_t extra_flags, char **out);

#endif
