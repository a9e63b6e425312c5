/* Dense indexes: `qac index build` output and search over it.
 *
 * An index directory holds embedding shards, a docid table, a manifest
 * (model identity, dim, pooling, count, dtype, checksums) and a FAISS index
 * file in FAISS's own format (faiss.read_index opens it).
 *
 * Ownership: qac_index_open returns a handle freed with qac_index_free.
 * Searching is safe from several threads at once; strings returned are
 * borrowed and live as long as the index. */
#ifndef QAC_INDEX_H
#define QAC_INDEX_H

#include "qac_data.h"
#include "qac_encoder.h"
#include "qac_progress.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qac_index_build_opts {
    const char *factory;   /* FAISS factory string; NULL = "Flat" (metric: inner product) */
    int batch;             /* sequences per encoder call */
    int max_len;           /* passage max length in tokens, specials included; 0 = model's */
    int shard_size;        /* passages per embedding shard (resume granularity) */
    int fp16;              /* store shard vectors as fp16 instead of fp32 */
    int64_t train_size;    /* vectors sampled to train IVF/PQ/SQ; 0 = auto:
                              256 x nlist for IVF<nlist>, else 100k; capped at the count */
    qac_text_format format; /* corpus format; QAC_FMT_AUTO detects it */
    qac_progress_fn progress; /* phases: encode, train-sample/vectors, train/steps, add/vectors, write/files */
    const qac_model *vectors_model; /* build_vectors only: the model that made the vectors (NULL: unknown) */
    void *progress_user;
    /* build_vectors only: row i's docid is the i-th line of ids_path (as
     * `qac encode --ids` writes it), or the i-th record's id of ids_corpus
     * (the corpus the vectors were made from, in ids_format); with neither,
     * rows are numbered "0".."n-1". A count other than the rows' is refused. */
    const char *ids_path;
    const char *ids_corpus;
    qac_text_format ids_format;
    /* Further encoders over the same model and settings (borrowed), each
     * run from its own thread on the batches of a chunk; on a GPU each is
     * a stream of its own, so one's host copies and host work overlap the
     * others' kernels. Every batch is the same whichever encoder runs it:
     * the vectors do not depend on their number. */
    qac_encoder *const *more_encoders;
    int n_more_encoders;
    int tokenize_threads;  /* threads tokenising the next chunks while the encoders work; 0 = auto
                              (one per core up to 8 when an encoder runs on CUDA, else 1) */
    struct qac_index_build_stats *stats; /* filled by qac_index_build when not NULL */
    /* build_vectors and merge: asked before each shard they write (and
     * every 1,024 rows merge walks) and between the pieces FAISS trains on
     * and adds; nonzero stops the call with QAC_ERR_CANCELLED, what is
     * written staying for the next call to resume from (NULL: none; a
     * build stops through its encoder's hook, qac_encoder_set_cancel). */
    qac_encoder_cancel_fn cancel;
    void *cancel_user;
} qac_index_build_opts;

/* How the encoding phase of a qac_index_build run went. */
typedef struct qac_index_build_stats {
    uint64_t passages;   /* encoded by this run (0 when a previous run had encoded them all) */
    double encode_s;     /* wall seconds of the encoding phase */
    double busy_s;       /* seconds at least one encoder had a batch in hand (host clock around each call) */
    double device_s;     /* seconds the encoders' devices spent on their batches, summed over encoders, measured on
                            the device (CUDA events); -1 when an encoder cannot tell */
    double wait_s;       /* seconds the encoders waited for tokenised passages */
    double flush_s;      /* seconds the encoders waited for shard writes (a thread writes a shard while the
                            next one is encoded) */
    int encoders, tokenize_threads;
} qac_index_build_stats;

/* Flat, batch 64, model max length, 100000 passages per shard, fp32. */
qac_index_build_opts qac_index_default_build_opts(void);

/* Encode a corpus into out_dir and build the FAISS index. Resumable: run it
 * again after a crash and it continues from the last complete shard. A
 * second run with a different model, corpus (path or size), max_len, dtype
 * or shard size is refused with QAC_ERR_INVALID naming what changed; a
 * different factory reuses the embeddings and rebuilds only the FAISS
 * index. Only one build may run on out_dir at a time (a lock file). */
qac_status qac_index_build(const char *out_dir, qac_encoder *enc, const char *corpus_path,
                           const qac_index_build_opts *o);

/* Same, from precomputed vectors: a float32 or float16 C-order .npy of
 * shape [n, dim]. Row i gets its docid from o->ids_path or o->ids_corpus
 * (else "i"); there is no passage text. The
 * manifest records o->vectors_model's identity and fingerprint (its hidden
 * size must equal dim), or fingerprint "none" without one, which servers
 * and searches refuse unless told to ignore the model. Resumable the same way. */
qac_status qac_index_build_vectors(const char *out_dir, const char *npy_path, const qac_index_build_opts *o);

/* ---- distributed builds ----
 * Many processes (machines, Ray actors) encode parts of one corpus into a
 * parts directory; qac_index_merge then makes of them the index that
 * qac_index_build gives for the same corpus, model and options, file for
 * file (shards, docids.qdoc, index.faiss, manifest) on the CPU encoder,
 * which gives a passage the same vector in any batch.
 *
 * The parts directory holds parts.json (model identity, corpus path, size
 * and format, max_len, the encoder's device: written by the first process,
 * checked by every other) and part files "part-<first row>-<count>.qemb": embedding shards
 * (index_internal.h) of consecutive corpus rows, each written atomically
 * and named by the rows it holds. A batch encoded twice (a worker retried
 * after dying) rewrites the same file, and a part from a killed writer is
 * never visible, so parts neither lose nor duplicate a passage.
 *
 * Rows are the records' positions in the corpus (0-based, in file order),
 * and each passage carries the offset and line the corpus reader gives it
 * (qac_record): a part can only be made from passages read by qac's reader.
 *
 * Ownership: the parts writer borrows the encoder (free the writer first);
 * not thread-safe, like the encoder. */
typedef struct qac_index_parts qac_index_parts;

/* Open dir for parts encoded with enc from corpus_path (format fmt, or
 * AUTO), passages cut at max_len tokens (0: the model's; the rule of
 * qac_index_build). QAC_ERR_INVALID when parts.json describes another
 * model, corpus or max_len. */
qac_status qac_index_parts_open(qac_index_parts **out, const char *dir, qac_encoder *enc, const char *corpus_path,
                                int max_len, qac_text_format fmt);
/* Encode n passages and write them as one part per run of consecutive
 * rows. rows, ids, texts, offsets and lines are per passage (lens may be
 * NULL: NUL-terminated texts); any order; a row given twice is an error. */
qac_status qac_index_parts_encode(qac_index_parts *p, int n, const int64_t *rows, const char *const *ids,
                                  const char *const *texts, const size_t *lens, const uint64_t *offsets,
                                  const int64_t *lines);
void qac_index_parts_free(qac_index_parts *p);

/* Make one index in out_dir of the parts in parts_dir: the corpus that
 * parts.json names is read again (not encoded), and each of its passages
 * must be in a part, as the same id, offset and line; a passage no part
 * holds, parts past the corpus's end, and two parts that disagree on a row
 * are errors naming them. o's factory, dtype, shard size and train size
 * apply as in qac_index_build (batch, max_len and format do not: the
 * parts fixed them). Resumable and locked like qac_index_build. */
qac_status qac_index_merge(const char *out_dir, const char *parts_dir, const qac_index_build_opts *o);

typedef struct qac_index qac_index;

/* What a finished build holds, from its manifest alone (cheap: for a
 * command's summary line): passages, dimension, factory, and the passages
 * cut at max_len tokens (0 and 0 for vectors). */
qac_status qac_index_describe(const char *dir, int64_t *count, int *dim, char *factory, size_t factory_cap,
                              int64_t *truncated, int *max_len);

/* The model directory the build recorded ("" when none), from the
 * manifest alone: which model to load before opening the index. */
qac_status qac_index_recorded_model(const char *dir, char *model_dir, size_t cap);

/* How much of index.faiss and the corpus to check against the manifest at
 * open: FULL reads every byte against the recorded checksum (about 1 s per
 * GB); SIZE only compares sizes, for very large indexes; NONE compares
 * nothing (the corpus keeps its size check). A manifest that records no
 * checksum (FULL) or no size (SIZE) for index.faiss is refused: only NONE
 * opens it. Whatever the mode, an index FAISS reads is checked against the
 * manifest before use: its type and layout against what the recorded
 * factory builds (scalar quantizer type, code sizes, lists, graph links),
 * its dimension and count against the manifest's. */
typedef enum qac_index_verify { QAC_VERIFY_FULL = 0, QAC_VERIFY_SIZE = 1, QAC_VERIFY_NONE = 2 } qac_index_verify;
/* "full", "size" or "none"; QAC_ERR_INVALID for anything else. */
qac_status qac_index_verify_parse(const char *name, qac_index_verify *out);

/* device: CUDA uses GPU flat search when available (AUTO: if usable).
 * qac_index_open verifies index.faiss fully; a mismatch is QAC_ERR_FORMAT
 * naming the file. */
qac_status qac_index_open(qac_index **out, const char *dir, qac_device device);
qac_status qac_index_open_verified(qac_index **out, const char *dir, qac_device device, qac_index_verify verify);
/* Open the corpus recorded in the manifest once, for qac_index_text, after
 * checking its size and (FULL) checksum. QAC_ERR_NOT_FOUND when it is gone
 * or the index was built from vectors; QAC_ERR_FORMAT when it changed. */
qac_status qac_index_open_corpus(qac_index *ix, qac_index_verify verify);
/* Open only what reading the rows back needs (export to another store):
 * the manifest and the docid table, not the vectors nor the FAISS index,
 * so that any index streams through qac_index_rows in one shard's memory.
 * qac_index_search on this handle fails; docids, texts and rows work. */
qac_status qac_index_open_rows(qac_index **out, const char *dir);
void qac_index_free(qac_index *ix);

int64_t qac_index_count(const qac_index *ix);
int qac_index_dim(const qac_index *ix);
const char *qac_index_factory(const qac_index *ix);
/* The model fingerprint the index was built with (see qac_model.fingerprint). */
const char *qac_index_model_fingerprint(const qac_index *ix);
/* The prompts of the build (qac_model.h, "Prompts"): the passage prompt its
 * passages were encoded with and the query prompt that goes with them ("":
 * none), recorded in the manifest. Returns 1, or 0 with both NULL for an
 * index built from vectors, whose prompts are unknown. Either pointer may
 * be NULL. */
int qac_index_prompts(const qac_index *ix, const char **query, const char **passage);
/* QAC_ERR_MISMATCH, with a message naming both, when the index is known to
 * want another query prompt than query_prompt (NULL: ""); the vectors of a
 * query encoded with the wrong prompt are only silently worse. */
qac_status qac_index_check_prompts(const qac_index *ix, const char *query_prompt);
/* The model's name and directory as the build recorded them ("" when not). */
const char *qac_index_model_name(const qac_index *ix);
const char *qac_index_model_dir(const qac_index *ix);
/* QAC_OK when m is the model the index was built with; else
 * QAC_ERR_MISMATCH with a message naming that model (and its directory:
 * the --model to use instead). */
qac_status qac_index_check_model(const qac_index *ix, const qac_model *m);
/* Whether the model L2-normalises its vectors, as recorded at build (0 for
 * vectors from an unnamed model). */
int qac_index_model_normalize(const qac_index *ix);
/* Whether rows have passage text (built from a corpus, not from vectors). */
int qac_index_has_text(const qac_index *ix);
const char *qac_index_docid(const qac_index *ix, int64_t row);
/* Passage text of a row, read by offset from the corpus file recorded in
 * the manifest (opened once, by qac_index_open_corpus or on first use).
 * Writes a malloc'd NUL-terminated copy into *text (caller frees).
 * Thread-safe; error messages do not name the corpus path. */
qac_status qac_index_text(const qac_index *ix, int64_t row, char **text);

/* Set a FAISS search-time parameter by ParameterSpace name: "nprobe"
 * (IVF), "efSearch" (HNSW). Not thread-safe: call before searching from
 * several threads. QAC_ERR_FAISS if the index has no such parameter. */
qac_status qac_index_set_param(qac_index *ix, const char *name, double value);
/* Threads for the CPU Flat and SQfp16 scans (<= 0: one per core, the default at open).
 * Other index types ignore it. Not thread-safe, like set_param. */
qac_status qac_index_set_threads(qac_index *ix, int nthreads);
/* Whether searches run on the GPU (flat index opened with CUDA/AUTO). */
int qac_index_on_gpu(const qac_index *ix);

/* Top-k by inner product for nq query vectors [nq, dim]. scores and rows
 * are [nq, k], best first; rows are -1 where fewer than k exist. Equal
 * scores are ordered by docid descending (strcmp), as trec_eval does.
 * k <= 1024 on the GPU. */
qac_status qac_index_search(const qac_index *ix, const float *queries, int nq, int k, float *scores,
                            int64_t *rows);

/* The stored vectors in row order, one embedding shard at a time, each
 * checked against the manifest's checksum: the vectors the exact (Flat)
 * search scores, fp16 shards widened to fp32. Whatever the FAISS factory,
 * these are the full-precision embeddings. One reader per thread. */
typedef struct qac_index_rows qac_index_rows;
qac_status qac_index_rows_open(qac_index_rows **out, const qac_index *ix);
/* Rows [*first_row, *first_row + *n): *vectors is [*n, dim], valid until
 * the next call or qac_index_rows_free. *n == 0 at the end. */
qac_status qac_index_rows_next(qac_index_rows *r, int64_t *first_row, int64_t *n, const float **vectors);
void qac_index_rows_free(qac_index_rows *r);

#ifdef __cplusplus
}
#endif
#endif
