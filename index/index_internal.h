/* Internal to index/: on-disk formats of an index directory.
 *
 *   manifest.json      JSON, "format":"qac-index", "version":1 (see index_store.c)
 *   emb-NNNNN.qemb     embedding shard, written once, atomically
 *   docids.qdoc        docid table for all rows (written with the FAISS index)
 *   index.faiss        FAISS's own index format (faiss.read_index opens it);
 *                      factory SQbf16 is written and read by faiss_sqbf16.c
 *
 * The manifest's "faiss" object records "checksum" (qac_index_hash64 of
 * index.faiss) and "source_checksum" (of the corpus or .npy file), checked
 * when the index is opened; manifests written before they existed have
 * neither and are opened unchecked.
 *
 * Shard (little-endian):
 *   char magic[8] = "QACEMB\0\0"; u32 version = 1; u32 dtype (0 fp32, 1 fp16);
 *   u64 count; u32 dim; u32 flags; u64 first_row; u64 checksum
 *   payload: vectors [count, dim] dtype | u64 offset[count] | i64 line[count]
 *            | [u8 cut[count], with flags & QAC_SHARD_CUT]
 *            | u32 docid_len[count] | docid bytes (concatenated)
 *   checksum = qac_index_hash64 of the whole payload.
 *   flags is 0 in an index's shards; the parts of a distributed build set
 *   QAC_SHARD_CUT: cut[i] = 1 when passage i was cut at max_len, which the
 *   merge counts into the manifest's "truncated" as a build does.
 *
 * Docid table:
 *   char magic[8] = "QACDOCS\0"; u32 version = 1; u32 reserved = 0;
 *   u64 count; u64 blob_size; u64 checksum (of everything after the header)
 *   u64 str_off[count + 1] | u64 offset[count] | i64 line[count]
 *   | blob (each docid NUL-terminated, blob_size bytes) */
#ifndef QAC_INDEX_INTERNAL_H
#define QAC_INDEX_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include "qac_common.h"

#define QAC_SHARD_MAGIC "QACEMB\0\0"
#define QAC_SHARD_VERSION 1u
#define QAC_DOCS_MAGIC "QACDOCS\0"
#define QAC_DOCS_VERSION 1u
#define QAC_MANIFEST_FORMAT "qac-index"
#define QAC_MANIFEST_VERSION 1

#define QAC_DTYPE_F32 0u
#define QAC_DTYPE_F16 1u

#define QAC_SHARD_CUT 1u /* header flag: a u8 per row says whether the passage was cut */

typedef struct qac_shard_header {
    char magic[8];
    uint32_t version, dtype;
    uint64_t count;
    uint32_t dim, flags;
    uint64_t first_row, checksum;
} qac_shard_header;

typedef struct qac_docs_header {
    char magic[8];
    uint32_t version, reserved;
    uint64_t count, blob_size, checksum;
} qac_docs_header;

/* 64-bit FNV-1a over 8-byte words (then the tail bytes); chainable. */
#define QAC_HASH64_INIT 0xcbf29ce484222325ULL
uint64_t qac_index_hash64(uint64_t h, const void *data, size_t n);
/* qac_index_hash64 of a whole file, and its size. */
qac_status qac_index_hash_file(const char *path, uint64_t *sum, uint64_t *size);

/* One shard read back: vectors converted to fp32. Freed with qac_shard_free. */
typedef struct qac_shard {
    uint64_t count, first_row;
    int dim;
    float *vectors;       /* [count, dim] */
    uint64_t *offsets;    /* [count] */
    int64_t *lines;       /* [count] */
    uint8_t *cut;         /* [count], or NULL when the shard records none (QAC_SHARD_CUT) */
    char **docids;        /* [count], NUL-terminated, point into docid_mem */
    char *docid_mem;
    uint64_t checksum;
} qac_shard;

/* cut may be NULL (an index's shards): the shard then records none. */
qac_status qac_shard_write(const char *path, uint32_t dtype, int dim, uint64_t first_row, uint64_t count,
                           const float *vectors, const char *const *docids, const uint64_t *offsets,
                           const int64_t *lines, const uint8_t *cut, uint64_t *checksum);
/* Reads and verifies magic, version, sizes and checksum (and, when
 * want_checksum != 0, that it equals the manifest's). */
qac_status qac_shard_read(const char *path, uint64_t want_checksum, qac_shard *out);
/* Header only, plus a file-size check: cheap verification on resume. */
qac_status qac_shard_peek(const char *path, qac_shard_header *h);
void qac_shard_free(qac_shard *s);

/* The fp16 codes [ntotal, d] of a FAISS IndexScalarQuantizer (QT_fp16,
 * inner product), borrowed from the index; NULL for any other index. */
struct FaissIndex_H;
const uint16_t *qac_faiss_fp16_codes(const struct FaissIndex_H *index);

/* Walk index.faiss (faiss_precheck.c) before FAISS reads it: every
 * vector's length against the bytes left, for the layouts qac's indexes
 * use. QAC_ERR_FORMAT naming the file when one is corrupt. */
qac_status qac_faiss_precheck(const char *path);

/* An index FAISS read (faiss_check.cpp) against what faiss::index_factory
 * makes of factory for dim: type, quantizer types, code sizes, inverted
 * lists, graph links, count. 0 when it matches; -1 with the first mismatch
 * described in why. Never throws. */
int qac_faiss_check(const struct FaissIndex_H *index, const char *factory, int dim, int64_t count, char *why,
                    size_t why_len);

/* FAISS IndexScalarQuantizer QT_bf16, inner product (faiss_sqbf16.c): the
 * factory string qac accepts for it, a header for ntotal rows of dim, the
 * rows converted as FAISS converts them, and the codes read back (checked
 * against the manifest's count and dim; free() them). */
#define QAC_FACTORY_SQBF16 "SQbf16"
qac_status qac_sqbf16_write_header(FILE *f, int dim, uint64_t ntotal);
qac_status qac_sqbf16_write_rows(FILE *f, const float *x, uint64_t rows, int dim);
qac_status qac_sqbf16_read(const char *path, int64_t want_n, int want_dim, uint16_t **codes);

/* FAISS's last error without its C++ frame ("Error in <function> at
 * <file>:<line>: ", "Error: '<condition>' failed: "): the sentence a user
 * can act on. Points into FAISS's buffer or a thread-local copy. */
const char *qac_faiss_message(void);

#endif
