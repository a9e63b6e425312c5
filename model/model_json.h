/* Internal to model/: the small JSON files of a model directory, read and
 * written the way Hugging Face writes them. checkpoint.c (modules.json,
 * the pooling config), family.c (config.json) and prompts.c
 * (config_sentence_transformers.json) sit above this file. */
#ifndef QAC_MODEL_JSON_H
#define QAC_MODEL_JSON_H

#include <jansson.h>
#include <stddef.h>

#include "qac_common.h"

/* A small JSON file; *root NULL (and QAC_OK) when it is absent. */
qac_status qac_model_json_read(const char *path, json_t **root);
/* j as pretty JSON text ending in a newline, as HF writes it (malloc'd);
 * consumes j (NULL means an earlier allocation failed). */
qac_status qac_model_json_text(json_t *j, size_t extra_flags, char **out);

#endif
