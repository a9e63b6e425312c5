/* Dense fp32 matrices on disk: embeddings written by `qac encode`.
 *
 * Two formats, chosen by the file name when writing (".npy" → NumPy, else
 * .qmat) and by the magic bytes when reading:
 *
 * .qmat, version 1, little-endian, a 32-byte header then the rows:
 *   offset  0  char[8]  magic "QACMAT\0\0"
 *   offset  8  uint32   version (1)
 *   offset 12  uint32   dtype (0 = float32; no other value is defined)
 *   offset 16  uint64   count (rows)
 *   offset 24  uint32   dim (columns)
 *   offset 28  uint32   reserved, 0
 *   offset 32  float32  count * dim values, row-major
 * A reader rejects a file whose size is not exactly 32 + 4 * count * dim.
 *
 * .npy, format 1.0: '<f4', C order, shape (count, dim), header padded to 128
 * bytes so the count can be filled in when a streamed write finishes.
 *
 * Writes are crash-safe (temporary file, then rename). */
#ifndef QAC_MATRIX_H
#define QAC_MATRIX_H

#include <stdint.h>

#include "qac_common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QAC_MATRIX_MAGIC "QACMAT\0\0"
#define QAC_MATRIX_VERSION 1u
#define QAC_MATRIX_HEADER_SIZE 32

typedef enum qac_matrix_format { QAC_MATRIX_QMAT = 0, QAC_MATRIX_NPY = 1 } qac_matrix_format;

/* The format a path is written in: NPY when it ends in ".npy". */
qac_matrix_format qac_matrix_format_for_path(const char *path);

/* Streaming writer: rows are appended as they are produced; the header's
 * count is filled in by close, which then renames the file into place.
 * Ownership: close and abort free the writer. */
typedef struct qac_matrix_writer qac_matrix_writer;
qac_status qac_matrix_writer_open(qac_matrix_writer **out, const char *path, int dim);
qac_status qac_matrix_writer_append(qac_matrix_writer *w, const float *rows, int64_t n);
int64_t qac_matrix_writer_count(const qac_matrix_writer *w);
qac_status qac_matrix_writer_close(qac_matrix_writer *w);
void qac_matrix_writer_abort(qac_matrix_writer *w);

/* Write a whole matrix [count, dim]. */
qac_status qac_matrix_write(const char *path, const float *data, int64_t count, int dim);

/* Read a .qmat or .npy ('<f4', C order, 2-D) file into a malloc'd array the
 * caller frees. Errors name the file and the problem. */
qac_status qac_matrix_read(const char *path, float **data, int64_t *count, int *dim);

#ifdef __cplusplus
}
#endif
#endif
