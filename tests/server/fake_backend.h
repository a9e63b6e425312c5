/* A fake qac_server_backend for unit tests and the fuzzer: a byte-level
 * tokenizer, an encoder whose vectors depend only on each sequence's own
 * ids (so batching can be checked for exact equality), a 20-passage flat
 * index and a word-overlap "BM25". */
#ifndef QAC_FAKE_BACKEND_H
#define QAC_FAKE_BACKEND_H

#include "qac_server.h"

#define FAKE_DIM 8
#define FAKE_DOCS 20
#define FAKE_MAX_LEN 64
#define FAKE_ZERO_ID 3 /* a sequence holding this id encodes to the zero vector */

typedef struct fake_stats {
    int calls;           /* encode calls */
    int texts;           /* sequences encoded */
    int max_call_tokens; /* most tokens in one call */
    int sleep_ms;        /* per encode call, to make queues build up */
    int concurrent;      /* callers inside encode right now (must stay <= 1) */
    int max_concurrent;
} fake_stats;

/* with_index / with_bm25 select which optional parts exist. */
void fake_backend_init(qac_server_backend *be, fake_stats *stats, int with_index, int with_bm25);
/* The vector the fake encoder gives one id sequence. */
void fake_embed(const int32_t *ids, int len, float *out);
/* [CLS] bytes [SEP], truncated to max_len (the fake encode_text). */
int fake_encode_text(const char *text, size_t len, int max_len, int32_t *ids);
extern const char *const fake_docs[FAKE_DOCS];

#endif
