/* Tokenized training batches (see qac_batch_build). */
#include <stdlib.h>
#include <string.h>

#include "qac_train.h"

static qac_status side(const qac_tokenizer *tok, const char *prompt, const char *const *texts, int count, int max_len,
                       int32_t **ids, int **lens, size_t *cap, int *T, long *tokens) {
    int32_t *tmp = malloc((size_t)count * max_len * sizeof *tmp);
    int *ln = realloc(*lens, (size_t)count * sizeof *ln);
    if (!tmp || !ln) {
        free(tmp);
        if (ln) *lens = ln;
        return qac_set_error(QAC_ERR_NOMEM, "batch: out of memory");
    }
    *lens = ln;
    int longest = 1;
    for (int i = 0; i < count; i++) {
        qac_status st = qac_tokenizer_encode_prompted(tok, prompt, texts[i], strlen(texts[i]), max_len,
                                                      tmp + (size_t)i * max_len, &ln[i]);
        if (st) {
            free(tmp);
            return qac_wrap_error(st, "batch: text %d", i);
        }
        longest = ln[i] > longest ? ln[i] : longest;
        *tokens += ln[i];
    }
    size_t need = (size_t)count * longest;
    if (need > *cap) {
        int32_t *d = realloc(*ids, need * sizeof *d);
        if (!d) {
            free(tmp);
            return qac_set_error(QAC_ERR_NOMEM, "batch: out of memory");
        }
        *ids = d;
        *cap = need;
    }
    int32_t pad = qac_tokenizer_specials(tok).pad;
    for (int i = 0; i < count; i++) {
        int32_t *row = *ids + (size_t)i * longest;
        memcpy(row, tmp + (size_t)i * max_len, (size_t)ln[i] * sizeof *row);
        for (int j = ln[i]; j < longest; j++) row[j] = pad < 0 ? 0 : pad;
    }
    *T = longest;
    free(tmp);
    return QAC_OK;
}

qac_status qac_batch_build(qac_batch_buf *bb, const qac_tokenizer *tok, const char *const *queries, int nq,
                           const char *const *passages, int n, int q_max, int p_max) {
    return qac_batch_build_prompted(bb, tok, NULL, queries, nq, NULL, passages, n, q_max, p_max);
}

qac_status qac_batch_build_prompted(qac_batch_buf *bb, const qac_tokenizer *tok, const char *q_prompt,
                                    const char *const *queries, int nq, const char *p_prompt,
                                    const char *const *passages, int n, int q_max, int p_max) {
    if (nq < 1 || n < 1 || q_max < 2 || p_max < 2)
        return qac_set_error(QAC_ERR_INVALID, "batch: bad shape (queries %d, passages per query %d)", nq, n);
    bb->tokens = 0;
    qac_status st =
        side(tok, q_prompt, queries, nq, q_max, &bb->q_ids, &bb->q_lens, &bb->q_cap, &bb->b.q_T, &bb->tokens);
    if (!st)
        st = side(tok, p_prompt, passages, nq * n, p_max, &bb->p_ids, &bb->p_lens, &bb->p_cap, &bb->b.p_T,
                  &bb->tokens);
    if (st) return st;
    bb->b.nq = nq;
    bb->b.n = n;
    bb->b.q_ids = bb->q_ids;
    bb->b.q_lens = bb->q_lens;
    bb->b.p_ids = bb->p_ids;
    bb->b.p_lens = bb->p_lens;
    return QAC_OK;
}

void qac_batch_buf_free(qac_batch_buf *bb) {
    if (!bb) return;
    free(bb->q_ids), free(bb->p_ids), free(bb->q_lens), free(bb->p_lens);
    memset(bb, 0, sizeof *bb);
}
