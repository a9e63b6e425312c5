/* Internal to model/: the prompts' file I/O, used by checkpoint.c. The JSON
 * file reader and text writer both use are in model_json.h. */
#ifndef QAC_MODEL_INTERNAL_H
#define QAC_MODEL_INTERNAL_H

#include "qac_model.h"

/* Read dir/config_sentence_transformers.json into m's prompts (absent: none). */
qac_status qac_model_prompts_load(qac_model *m, const char *dir);
/* The config_sentence_transformers.json text for m (malloc'd). */
qac_status qac_model_prompts_json(const qac_model *m, char **out);
/* Free m's prompts. */
void qac_model_prompts_clear(qac_model *m);

#endif
