/* Tokenizer API contracts: errors, specials, vocabulary lookups, capacity
 * handling, never failing on arbitrary bytes, and identical results from
 * several threads sharing one tokenizer. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "qac_tokenizer.h"
#include "testutil.h"
#include "tok_fixture.h"

static const qac_tokenizer *g_tok;
static const tok_texts *g_texts;
static uint64_t g_expect;

static uint64_t encode_all(const qac_tokenizer *t, const tok_texts *tt) {
    int32_t ids[128];
    uint64_t h = 0;
    for (int i = 0; i < tt->n; i++) {
        int n = 0;
        if (qac_tokenizer_encode(t, tt->t[i].s, tt->t[i].len, 128, ids, &n)) return 0;
        h = h * 31 + tok_fnv64_ids(ids, n);
    }
    return h;
}

static void *worker(void *arg) {
    (void)arg;
    return (void *)(uintptr_t)(encode_all(g_tok, g_texts) == g_expect);
}

int main(void) {
    qac_tokenizer *t = NULL;
    CHECK_ERR(qac_tokenizer_load(&t, QAC_TEST_DATA "/no-such-dir"), QAC_ERR_NOT_FOUND, "no tokenizer");
    CHECK(t == NULL);
    CHECK_OK(qac_tokenizer_load(&t, qac_test_model_dir()));
    if (!t) return qac_test_summary();
    CHECK(qac_tokenizer_get_kind(t) == QAC_TOKENIZER_WORDPIECE);
    CHECK(qac_tokenizer_vocab_size(t) == 30522);
    qac_special_ids sp = qac_tokenizer_specials(t);
    CHECK(sp.cls == qac_tokenizer_token_to_id(t, "[CLS]") && sp.cls >= 0);
    CHECK(sp.sep == qac_tokenizer_token_to_id(t, "[SEP]") && sp.sep >= 0);
    CHECK(sp.pad == qac_tokenizer_token_to_id(t, "[PAD]") && sp.unk == qac_tokenizer_token_to_id(t, "[UNK]"));
    CHECK(sp.mask == qac_tokenizer_token_to_id(t, "[MASK]") && sp.mask >= 0);
    CHECK(!strcmp(qac_tokenizer_id_to_token(t, sp.cls), "[CLS]"));
    CHECK(qac_tokenizer_id_to_token(t, -1) == NULL && qac_tokenizer_id_to_token(t, 30522) == NULL);
    CHECK(qac_tokenizer_token_to_id(t, "no-such-token-xyz") == -1);

    /* capacity: the full count comes back even when it does not fit */
    const char *text = "the quick brown fox jumps over the lazy dog";
    int32_t ids[16];
    int n = -1;
    CHECK_OK(qac_tokenizer_tokenize(t, text, strlen(text), ids, 3, &n));
    CHECK_MSG(n == 9, "tokenize with cap 3 reported %d tokens, want 9", n);
    CHECK_OK(qac_tokenizer_tokenize(t, text, strlen(text), NULL, 0, &n));
    CHECK(n == 9);
    CHECK_OK(qac_tokenizer_encode(t, text, strlen(text), 2, ids, &n));
    CHECK(n == 2 && ids[0] == sp.cls && ids[1] == sp.sep);
    CHECK_ERR(qac_tokenizer_encode(t, text, strlen(text), 1, ids, &n), QAC_ERR_INVALID, "max_len");
    CHECK_ERR(qac_tokenizer_encode_pair(t, "a", 1, "b", 1, 2, ids, NULL, &n), QAC_ERR_INVALID, "max_len");
    int32_t types[16];
    CHECK_OK(qac_tokenizer_encode_pair(t, text, strlen(text), "fox", 3, 8, ids, types, &n));
    CHECK(n == 8 && ids[0] == sp.cls && ids[n - 1] == sp.sep && types[0] == 0 && types[n - 1] == 1);

    /* arbitrary bytes never fail */
    unsigned char junk[4096];
    uint32_t x = 12345;
    int ok = 1;
    for (int round = 0; round < 200; round++) {
        for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)((x = x * 1103515245u + 12345u) >> 24);
        size_t len = (size_t)round * 20;
        ok &= qac_tokenizer_encode(t, (const char *)junk, len, 16, ids, &n) == QAC_OK && n >= 2 && n <= 16;
    }
    CHECK_MSG(ok, "encode failed on random bytes");

    /* one tokenizer, four threads, same ids */
    tok_texts tt;
    if (tok_texts_load(&tt, qac_test_data("cranfield"), QAC_TEST_DATA "/reference/tokenizer") == 0) {
        g_tok = t;
        g_texts = &tt;
        g_expect = encode_all(t, &tt);
        pthread_t th[4];
        for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, worker, NULL);
        int same = 0;
        for (int i = 0; i < 4; i++) {
            void *r;
            pthread_join(th[i], &r);
            same += (int)(uintptr_t)r;
        }
        CHECK_MSG(same == 4, "%d of 4 threads matched the single-thread ids", same);
        tok_texts_free(&tt);
    } else {
        CHECK_MSG(0, "could not load the Cranfield texts");
    }
    qac_tokenizer_free(t);
    qac_tokenizer_free(NULL);
    return qac_test_summary();
}
