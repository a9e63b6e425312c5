/* The CUDA encoder's host side that needs no GPU: its tunables and the
 * layout of a batch on the device. Plain C, built with or without CUDA, so
 * it is tested on any machine (tests/gpu/test_encoder_plan.c).
 *
 * A packed batch holds the real tokens of its sequences back to back. A
 * query-sized batch (at most graph_batch sequences and graph_rows tokens)
 * is padded up to a bucket: its rows to a power of two of at least
 * QAC_ENC_MIN_ROWS, its sequences to a power of two. A few fixed shapes
 * then cover every query batch, each captured once as a CUDA graph and
 * replayed with new inputs. Padded rows hold token 0 at position 0 and
 * belong to no sequence; padded sequences are empty. Every kernel treats a
 * row (or a sequence) on its own, so the padding never reaches a real
 * row, and a bucketed batch computes the same thing with or without its
 * graph. */
#ifndef QAC_ENCODER_PLAN_H
#define QAC_ENCODER_PLAN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QAC_ENC_MIN_ROWS 16
/* The flag combinations a bucket's graph is kept for (the prompt skipped
 * in pooling or not, the output normalised or not, token types copied in
 * or not): each captures other launches. */
#define QAC_ENC_GRAPH_FLAGS 8

/* Tunables of the CUDA encoder, read from the environment when an encoder is
 * created (a value out of range is ignored):
 *   QAC_CUDA_GRAPHS      1: replay query-sized batches as CUDA graphs; 0: launch
 *                        the same kernels one by one (same bits)
 *   QAC_CUDA_GRAPH_ROWS  largest real token count of a bucketed batch (0: no buckets)
 *   QAC_CUDA_GRAPH_BATCH largest sequence count of a bucketed batch (0: no buckets)
 *   QAC_CUDA_LN_WARPS    rows per block of the LayerNorm kernels, one warp a row
 *                        (1, 2, 4, 8, 16; 0: the older kernel, one block a row)
 *   QAC_CUDA_POOL_WARPS  warps per sequence of the last LayerNorm fused with mean
 *                        pooling (1 to 16; CLS takes one)
 *   QAC_CUDA_GELU_ROWS   rows per thread of the bias + GELU kernel (1 to 64)
 *   QAC_CUDA_PRUNE       1: with CLS pooling, the last layer after attention
 *                        runs on the pooled rows only; 0: on every row */
typedef struct qac_enc_tunables {
    int graphs, graph_rows, graph_batch;
    int ln_warps, pool_warps, gelu_rows, prune;
} qac_enc_tunables;

/* The committed defaults, each replaced by its environment variable when set
 * to a valid value. */
qac_enc_tunables qac_enc_tunables_default(void);

/* Where a batch lives on the device. */
typedef struct qac_enc_layout {
    int real_batch; /* B */
    int batch;      /* sequences the kernels run over: B, or its bucket */
    int rows;       /* rows the kernels run over: the real tokens, or their bucket */
    int real_rows;  /* sum of the lengths */
    int longest;    /* the attention's T: the longest sequence, or rows when bucketed */
    int bucketed;   /* 1: a query-sized batch padded to (rows, batch) */
} qac_enc_layout;

/* The packed layout of B sequences of lens[b] tokens (each >= 1). */
qac_enc_layout qac_enc_layout_packed(const int *lens, int B, const qac_enc_tunables *t);

/* The graphs an encoder may capture with these tunables: one per bucket
 * (row buckets QAC_ENC_MIN_ROWS, 32, ... up to graph_rows, times sequence
 * buckets 1, 2, 4, ... up to graph_batch) and flag combination; 0 with
 * buckets off. The CUDA encoder keeps room for all of them, so no bucket
 * is left running without its graph. */
int qac_enc_graph_slots(const qac_enc_tunables *t);

/* Fill the device inputs of layout L from ids [B, T] (row-major, padded to
 * T): ids_out, pos_out [L->rows] (token and position of each row), offs
 * [L->batch + 1] (first row of each sequence), lens_out [L->batch] and,
 * when from and from_out are not NULL, from_out [L->batch] (pooling start;
 * 0 for padded sequences). */
void qac_enc_pack(int32_t *ids_out, int32_t *pos_out, int *offs, int *lens_out, int *from_out,
                  const qac_enc_layout *L, const int32_t *ids, int T, const int *lens, const int *from, int B);

/* The token types of the same batch in layout L: types_out [L->rows] from
 * types [B, T] (padded like ids); the padding rows get type 0. */
void qac_enc_pack_types(int32_t *types_out, const qac_enc_layout *L, const int32_t *types, int T, const int *lens,
                        int B);

#ifdef __cplusplus
}
#endif
#endif
