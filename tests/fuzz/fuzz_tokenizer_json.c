/* Fuzz target: the tokenizer.json reader (qac_tokenizer_from_json: model,
 * normalizers with the Precompiled charsmap, pre-tokenizers with their
 * regexes, post-processor, decoder, added tokens), then tokenization of the
 * input's own bytes and a few fixed texts through whatever it accepted.
 * Beyond "no crash", invariants: every id lies in the vocabulary, every
 * offset range lies inside the text it came from and is ordered, encode
 * stays within max_len, and decode answers. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "qac_tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_text(const qac_tokenizer *t, const char *s, size_t len) {
    enum { CAP = 4096 };
    static int32_t ids[CAP], offs[2 * CAP];
    int n = 0, vocab = qac_tokenizer_vocab_size(t);
    if (qac_tokenizer_tokenize_offsets(t, s, len, ids, offs, CAP, &n) == QAC_OK) {
        for (int i = 0; i < n && i < CAP; i++) {
            if (ids[i] < 0 || ids[i] >= vocab) abort();
            if (offs[2 * i] < 0 || offs[2 * i] > offs[2 * i + 1] || (size_t)offs[2 * i + 1] > len) abort();
        }
        char *text = NULL;
        if (qac_tokenizer_decode(t, ids, n < CAP ? n : CAP, 1, &text) == QAC_OK && !text) abort();
        free(text);
    }
    int32_t enc[64], types[64];
    if (qac_tokenizer_encode(t, s, len, 16, enc, &n) == QAC_OK && (n < 0 || n > 16)) abort();
    if (qac_tokenizer_encode_pair(t, s, len, "pair b", 6, 64, enc, types, &n) == QAC_OK && (n < 0 || n > 64)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qac_tokenizer *t = NULL;
    if (qac_tokenizer_from_json(&t, (const char *)data, size, "fuzz") != QAC_OK) return 0;
    static const char *const texts[] = {"Hello world!", "  leading and trailing  ", "caf\xc3\xa9 na\xc3\xafve \xe2\x84\xa2",
                                        "e\xcc\x81 \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd", "\xff\xfe broken \xc3", "<s> [CLS] <mask>",
                                        ""};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) check_text(t, texts[i], strlen(texts[i]));
    check_text(t, (const char *)data, size < 2048 ? size : 2048);
    qac_tokenizer_free(t);
    return 0;
}
