/* Internal to index/: the builder every way of making an index shares
 * (index_builder.c), and what the three builds above it take from it:
 *
 *   index_encode.c   qac_index_build: a corpus through the encoders
 *   index_vectors.c  qac_index_build_vectors: rows of a .npy file
 *   index_parts.c    qac_index_parts_* and qac_index_merge: parts encoded by
 *                    many processes (qac.ray), merged into one index
 *
 * Each build checks its whole input, makes the build's identity, then
 * begins a builder on the output directory (locked; a manifest with another
 * identity is refused, the same one resumed), fills and flushes shards,
 * marks the manifest "encoded" and finishes (the FAISS stage). The builder
 * takes nothing from the builds. */
#ifndef QAC_INDEX_BUILDER_H
#define QAC_INDEX_BUILDER_H

#include <jansson.h>
#include <stdint.h>

#include "qac_data.h"
#include "qac_index.h"

/* An index directory being built: the manifest and the shard being filled. */
typedef struct qac_builder {
    const char *dir;
    const qac_index_build_opts *o;
    const char *factory;
    int dim;
    uint32_t dtype;
    json_t *man;   /* the manifest being extended */
    int lock_fd;
    /* the shard being filled */
    float *vecs;
    char **ids;
    uint64_t *offsets;
    int64_t *lines;
    uint64_t fill;
    uint64_t cut; /* passages of the filling shard cut at max_len */
} qac_builder;

/* ---- checks made before any work ---- */

/* The factory is one FAISS makes for dim (or SQbf16, which qac writes). */
qac_status qac_builder_check_factory(const char *factory, int dim);
/* The factory's k-means gets enough training vectors out of n. */
qac_status qac_builder_check_training(const char *factory, const qac_index_build_opts *o, uint64_t n);
/* The passage length of a build: the option, else the model's, within the
 * model's limits. */
qac_status qac_builder_max_len(const qac_model *m, int want, int *out);
/* p's absolute path into out, and the file's size. */
qac_status qac_builder_abs_path(const char *p, char *out, size_t cap, uint64_t *size);

/* ---- the identity a manifest's "build" records ---- */

/* The "model" object of a corpus build's identity. */
json_t *qac_builder_model_identity(const qac_encoder *enc);
/* The "source" object of a corpus build's identity. */
json_t *qac_builder_corpus_identity(const char *corpus_abs, uint64_t size, qac_text_format fmt);
/* The whole identity; takes the references (NULL ones: NULL). */
json_t *qac_builder_identity(json_t *model, json_t *source, int max_len, int dim, const qac_index_build_opts *o);
/* A corpus format's name as the identity records it. */
const char *qac_builder_format_name(qac_text_format fmt);
/* The model's directory, beside the identity (a moved model is the same
 * model), or NULL when the model has none. */
json_t *qac_builder_model_dir(const qac_model *m);
/* One line per differing key of two identities, for a refusal. */
void qac_builder_describe_diff(char *buf, size_t cap, const char *prefix, json_t *had, json_t *want);

/* ---- the builder ---- */

/* Lock dir, then load or start the manifest. `identity` is consumed.
 * Refuses when an existing manifest has a different identity. */
qac_status qac_builder_begin(qac_builder *b, const char *dir, const qac_index_build_opts *o, json_t *identity,
                             int dim);
/* Frees everything and unlocks; safe on a builder zeroed with lock_fd -1. */
void qac_builder_end(qac_builder *b);
/* Rows the manifest lists, and its shards. */
uint64_t qac_builder_count(const qac_builder *b);
size_t qac_builder_nshards(const qac_builder *b);
/* The buffers of a shard of o->shard_size rows. */
qac_status qac_builder_alloc_shard(qac_builder *b);
/* Write the filled shard and list it in the manifest. */
qac_status qac_builder_flush_shard(qac_builder *b);
qac_status qac_builder_write_manifest(const qac_builder *b);
void qac_builder_set_model_dir(qac_builder *b, const qac_model *m);
/* Report progress to the options' callback, if any. */
void qac_builder_progress(const qac_builder *b, const char *phase, uint64_t done, uint64_t total);
/* QAC_ERR_CANCELLED when the options' cancel hook says stop (phase and
 * done name where), else QAC_OK. */
qac_status qac_builder_check_cancel(const qac_builder *b, const char *phase, uint64_t done);
/* A resumed build continues after the last listed passage: seek the reader
 * there and check that the passage is still the one listed. */
qac_status qac_builder_resume_reader(qac_builder *b, qac_reader *r, const char *corpus_abs);
/* After encoding: build the FAISS index unless one with this factory exists. */
qac_status qac_builder_finish(qac_builder *b);

#endif
