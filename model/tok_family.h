/* Internal: what a model directory holds for its tokenizer (tok_family.c). */
#ifndef QAC_TOK_FAMILY_H
#define QAC_TOK_FAMILY_H

#include <jansson.h>

#include "qac_common.h"

typedef struct tk_pipe tk_pipe;

typedef struct tk_dir {
    const char *dir;
    json_t *tc, *sm, *config; /* tokenizer_config.json, special_tokens_map.json, config.json (NULL if absent) */
    char cls[64];             /* the tokenizer class AutoTokenizer would use, "Fast" dropped; "" if none */
    char model_type[64];
    int has_json, has_vocab_txt, has_bpe_files;
    const char *spm; /* the SentencePiece model file's name, or NULL */
} tk_dir;

qac_status tk_dir_read(tk_dir *d, const char *dir);
void tk_dir_free(tk_dir *d);
int tk_dir_is(const tk_dir *d, const char *cls);
json_t *tk_dir_special(const tk_dir *d, const char *key);
const char *tk_token_content(json_t *v);

/* The tokenizer.json-style pipeline for the directory: from tokenizer.json,
 * vocab.json + merges.txt, or (XLMRobertaTokenizer) its SentencePiece model. */
qac_status tk_family_pipe(tk_pipe **out, const tk_dir *d);

#endif
