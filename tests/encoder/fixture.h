/* Reader for the encoder parity fixtures written by
 * tests/reference/gen_encoder_fixtures.py, and the deterministic weight
 * generator it shares with that script. */
#ifndef QAC_TEST_ENCODER_FIXTURE_H
#define QAC_TEST_ENCODER_FIXTURE_H

#include <stdint.h>

#include "qac_model.h"

typedef struct enc_set {
    int max_len, n, is_docs;
    int32_t *ordinals;  /* [n] 0-based Cranfield document ordinals, -1 for synthetic */
    int *lens;          /* [n] */
    int32_t **ids;      /* [n] views into one block */
    float *emb;         /* [n, C] */
} enc_set;

typedef struct enc_hidden {
    int set, item, n_pos;
    int32_t *pos; /* [n_pos] */
    float *h;     /* [L+1, n_pos, C] */
} enc_hidden;

typedef struct enc_fixture {
    int L, C, n_sets, n_hidden;
    enc_set *sets;
    enc_hidden *hidden;
    char *blob; /* the whole file; views point into it */
} enc_fixture;

/* Returns 0 on success, else prints why and returns -1. */
int enc_fixture_load(enc_fixture *f, const char *path);
void enc_fixture_free(enc_fixture *f);

#define ENC_FIXTURE_SEED 0x5141430001ull

/* Fill every parameter of m from the seed (see the generator script). */
void enc_fill_random_params(qac_model *m, uint64_t seed);

#endif
