/* Fuzz target: the safetensors header reader, the config.json parser and the
 * sentence-transformers pooling parser, all fed the same bytes. Beyond "no
 * crash", it checks invariants: every accepted tensor lies inside the input
 * and converts, lookup by name finds it, and an accepted config survives
 * qac_bert_config_to_json -> qac_bert_config_parse unchanged. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "qac_model.h"
#include "qac_safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_safetensors(const uint8_t *data, size_t size) {
    qac_safetensors *st;
    if (qac_safetensors_open_memory(&st, data, size, "fuzz") != QAC_OK) return;
    static float buf[1 << 16];
    for (int i = 0; i < qac_safetensors_count(st); i++) {
        const qac_st_tensor *t = qac_safetensors_get(st, i);
        const uint8_t *p = t->data;
        if (p < data || p > data + size || t->nbytes > (uint64_t)(data + size - p)) abort();
        if (qac_safetensors_find(st, t->name) != t) abort();
        size_t es = qac_st_dtype_size(t->dtype);
        if (es && t->numel * es != t->nbytes) abort();
        if (t->numel <= sizeof buf / sizeof buf[0]) qac_safetensors_read_f32(t, buf);
    }
    (void)qac_safetensors_metadata(st, "format");
    qac_safetensors_close(st);
}

static void fuzz_config(const uint8_t *data, size_t size) {
    qac_bert_config c, back;
    if (qac_bert_config_parse(&c, (const char *)data, size) != QAC_OK) return;
    if (qac_bert_config_validate(&c) != QAC_OK) abort();
    char *txt;
    if (qac_bert_config_to_json(&c, &txt) != QAC_OK) abort();
    if (qac_bert_config_parse(&back, txt, strlen(txt)) != QAC_OK) abort();
    if (memcmp(&c, &back, sizeof c) != 0) abort();
    free(txt);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_safetensors(data, size);
    fuzz_config(data, size);
    qac_pooling p;
    qac_pooling_config_parse((const char *)data, size, 384, &p, NULL);
    return 0;
}
