/* Loads the tokenizer parity texts: Cranfield documents (title "\n" text)
 * and queries parsed exactly as tests/reference/gen_tokenizer_fixtures.py
 * does, then the generated edge cases from edge_texts.hex. */
#ifndef QAC_TOK_FIXTURE_H
#define QAC_TOK_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

typedef struct tok_text {
    char *s;
    size_t len;
} tok_text;

typedef struct tok_texts {
    tok_text *t;
    int n, n_cranfield;
} tok_texts;

/* Returns 0 on success; prints the reason to stderr otherwise. Verifies the
 * Cranfield texts against cranfield_texts.txt (length and hash). */
int tok_texts_load(tok_texts *out, const char *cranfield_dir, const char *fixture_dir);
void tok_texts_free(tok_texts *tt);
uint64_t tok_fnv64_ids(const int32_t *ids, int n);

#endif
