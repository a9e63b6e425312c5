/* Opening an index directory and searching it: qac's exact scans on the CPU
 * (Flat, SQfp16, SQbf16), FAISS for the other factories, or the GPU flat
 * search for Flat indexes (vectors loaded from the shards). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <faiss/c_api/AutoTune_c.h>
#include <faiss/c_api/Index_c.h>
#include <faiss/c_api/error_c.h>
#include <faiss/c_api/index_io_c.h>

#include "flat_scan.h"
#include "index_internal.h"
#include "qac_gpu_flat.h"
#include "qac_index.h"
#include "qac_util.h"

#define QAC_GPU_MAX_K QAC_GPU_FLAT_KMAX
#define QAC_GPU_MAX_NQ 1024

struct qac_index {
    char *dir, *factory, *fingerprint, *corpus_path;
    char *query_prompt, *passage_prompt; /* NULL: not known (built from vectors) */
    char *model_name, *model_dir; /* as built: "" when not recorded */
    int model_normalize;
    int rows_only;  /* opened by qac_index_open_rows: no vectors, no FAISS */
    json_t *shards; /* the manifest's shard list, for qac_index_rows */
    uint64_t corpus_size;
    qac_text_format corpus_fmt;
    int dim;
    int64_t count;
    FaissIndex *faiss;
    qac_gpu_flat *gpu;
    float *vecs; /* [count, dim]: Flat on the CPU, scanned by flat_scan.c (Debian's FAISS lacks AVX) */
    const uint16_t *codes16; /* SQfp16: FAISS's codes, scanned by flat_scan.c too */
    uint16_t *codesb;        /* SQbf16: the codes, read by qac (its FAISS has no bf16), scanned by flat_scan.c */
    qac_pool *pool;          /* threads for the flat scan */
    pthread_mutex_t pool_mu; /* one search drives the pool at a time */
    void *docs_map;
    size_t docs_len;
    const uint64_t *str_off, *offsets;
    const int64_t *lines;
    const char *blob;
    uint64_t source_checksum; /* 0: not recorded */
    int has_source_checksum;
    qac_reader *corpus;       /* opened once; reads are serialised by corpus_mu */
    int corpus_tried;
    qac_status corpus_status;
    pthread_mutex_t corpus_mu;
};

static char *dup_or_empty(const char *s) { return strdup(s ? s : ""); }

static qac_text_format fmt_from_name(const char *s) {
    if (!s) return QAC_FMT_AUTO;
    if (!strcmp(s, "tsv")) return QAC_FMT_TSV;
    if (!strcmp(s, "beir")) return QAC_FMT_BEIR;
    if (!strcmp(s, "tevatron")) return QAC_FMT_TEVATRON;
    if (!strcmp(s, "cranfield")) return QAC_FMT_CRANFIELD;
    return QAC_FMT_AUTO;
}

static qac_status map_docids(qac_index *ix, const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return qac_set_error(errno == ENOENT ? QAC_ERR_NOT_FOUND : QAC_ERR_IO, "open %s: %s", path,
                                     strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || (size_t)sb.st_size < sizeof(qac_docs_header)) {
        close(fd);
        return qac_set_error(QAC_ERR_FORMAT, "%s: truncated docid table", path);
    }
    void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return qac_set_error(QAC_ERR_IO, "mmap %s: %s", path, strerror(errno));
    ix->docs_map = p;
    ix->docs_len = (size_t)sb.st_size;
    qac_docs_header h;
    memcpy(&h, p, sizeof h);
    if (memcmp(h.magic, QAC_DOCS_MAGIC, 8) != 0 || h.version != QAC_DOCS_VERSION)
        return qac_set_error(QAC_ERR_FORMAT, "%s: not a qac docid table (version %u expected)", path,
                             QAC_DOCS_VERSION);
    if (h.count != (uint64_t)ix->count || h.blob_size == 0 ||
        (uint64_t)sb.st_size != sizeof h + (h.count + 1) * 8 + h.count * 16 + h.blob_size)
        return qac_set_error(QAC_ERR_FORMAT, "%s: size does not match %lld rows", path, (long long)ix->count);
    const char *base = (const char *)p + sizeof h;
    if (qac_index_hash64(QAC_HASH64_INIT, base, (size_t)sb.st_size - sizeof h) != h.checksum)
        return qac_set_error(QAC_ERR_FORMAT, "%s: checksum mismatch (corrupt docid table)", path);
    ix->str_off = (const uint64_t *)base;
    ix->offsets = ix->str_off + h.count + 1;
    ix->lines = (const int64_t *)(ix->offsets + h.count);
    ix->blob = (const char *)(ix->lines + h.count);
    if (ix->blob[h.blob_size - 1] != '\0' || ix->str_off[h.count] != h.blob_size)
        return qac_set_error(QAC_ERR_FORMAT, "%s: corrupt docid table", path);
    for (uint64_t i = 0; i < h.count; i++)
        if (ix->str_off[i] >= h.blob_size) return qac_set_error(QAC_ERR_FORMAT, "%s: corrupt docid table", path);
    return QAC_OK;
}

static int by_docid(const void *a, const void *b, void *ctx) {
    const qac_index *ix = ctx;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    int c = strcmp(ix->blob + ix->str_off[x], ix->blob + ix->str_off[y]);
    return c ? c : (x > y) - (x < y);
}

/* The GPU breaks equal scores by a rank per row: its place in docid order,
 * so that ties come out by docid descending, as the CPU scan and trec_eval
 * order them, the k-th place included. */
static qac_status gpu_tie_order(qac_index *ix) {
    uint32_t *order = malloc(sizeof(uint32_t) * (size_t)ix->count), *rank = malloc(sizeof(uint32_t) * (size_t)ix->count);
    qac_status st = QAC_OK;
    if (!order || !rank) st = qac_set_error(QAC_ERR_NOMEM, "out of memory for the tie order of %lld rows", (long long)ix->count);
    if (!st) {
        for (int64_t i = 0; i < ix->count; i++) order[i] = (uint32_t)i;
        qsort_r(order, (size_t)ix->count, sizeof(uint32_t), by_docid, ix);
        for (int64_t i = 0; i < ix->count; i++) rank[order[i]] = (uint32_t)i;
        st = qac_gpu_flat_set_tie_order(ix->gpu, rank);
    }
    free(order);
    free(rank);
    return st;
}

static qac_status load_gpu(qac_index *ix, json_t *man) {
    qac_status st = qac_gpu_flat_create(&ix->gpu, ix->dim, ix->count);
    if (st) return st;
    size_t i;
    json_t *sh;
    json_array_foreach(json_object_get(man, "shards"), i, sh) {
        char path[4096];
        qac_shard s;
        if ((st = qac_path_join(path, sizeof path, ix->dir, json_string_value(json_object_get(sh, "file")))) ||
            (st = qac_shard_read(path, (uint64_t)json_integer_value(json_object_get(sh, "checksum")), &s)))
            return st;
        st = qac_gpu_flat_add(ix->gpu, s.vectors, (int64_t)s.count);
        qac_shard_free(&s);
        if (st) return st;
    }
    if (qac_gpu_flat_count(ix->gpu) != ix->count)
        return qac_set_error(QAC_ERR_FORMAT, "%s: shards hold %lld rows, manifest says %lld", ix->dir,
                             (long long)qac_gpu_flat_count(ix->gpu), (long long)ix->count);
    return gpu_tie_order(ix);
}

static qac_status load_cpu_flat(qac_index *ix, json_t *man) {
    ix->vecs = malloc(sizeof(float) * (size_t)ix->count * (size_t)ix->dim);
    if (!ix->vecs) return qac_set_error(QAC_ERR_NOMEM, "out of memory (%lld x %d vectors)", (long long)ix->count, ix->dim);
    int64_t have = 0;
    size_t i;
    json_t *sh;
    json_array_foreach(json_object_get(man, "shards"), i, sh) {
        char path[4096];
        qac_shard s;
        qac_status st;
        if ((st = qac_path_join(path, sizeof path, ix->dir, json_string_value(json_object_get(sh, "file")))) ||
            (st = qac_shard_read(path, (uint64_t)json_integer_value(json_object_get(sh, "checksum")), &s)))
            return st;
        if (s.dim != ix->dim || (int64_t)s.count > ix->count - have) {
            qac_shard_free(&s);
            return qac_set_error(QAC_ERR_FORMAT, "%s: shard does not match the manifest", path);
        }
        memcpy(ix->vecs + (size_t)have * (size_t)ix->dim, s.vectors, sizeof(float) * s.count * (size_t)ix->dim);
        have += (int64_t)s.count;
        qac_shard_free(&s);
    }
    if (have != ix->count)
        return qac_set_error(QAC_ERR_FORMAT, "%s: shards hold %lld rows, manifest says %lld", ix->dir,
                             (long long)have, (long long)ix->count);
    return QAC_OK;
}

qac_status qac_index_verify_parse(const char *name, qac_index_verify *out) {
    static const char *const names[] = {"full", "size", "none"};
    for (int i = 0; name && i < 3; i++)
        if (!strcmp(name, names[i])) {
            *out = (qac_index_verify)i;
            return QAC_OK;
        }
    return qac_set_error(QAC_ERR_INVALID, "verify mode '%s': expected full, size or none", name ? name : "(null)");
}

/* index.faiss against the manifest's size and checksum. */
static qac_status verify_faiss(const char *path, json_t *fa, qac_index_verify verify) {
    if (verify == QAC_VERIFY_NONE) return QAC_OK;
    json_t *sum = json_object_get(fa, "checksum"), *bytes = json_object_get(fa, "bytes");
    /* missing or null: an edited manifest, or one from before qac recorded them */
    if (verify == QAC_VERIFY_FULL && !json_is_integer(sum))
        return qac_set_error(QAC_ERR_FORMAT,
                             "%s: the manifest records no checksum for it, so it cannot be verified; rebuild the "
                             "index, or open it unverified with --verify none",
                             path);
    if (!json_is_integer(bytes))
        return qac_set_error(QAC_ERR_FORMAT,
                             "%s: the manifest records no size for it, so it cannot be verified; rebuild the index, "
                             "or open it unverified with --verify none",
                             path);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return qac_set_error(errno == ENOENT ? QAC_ERR_NOT_FOUND : QAC_ERR_IO, "%s: %s", path, strerror(errno));
    if ((uint64_t)sb.st_size != (uint64_t)json_integer_value(bytes))
        return qac_set_error(QAC_ERR_FORMAT, "%s: %llu bytes, the manifest says %llu (corrupt or modified FAISS index)",
                             path, (unsigned long long)sb.st_size, (unsigned long long)json_integer_value(bytes));
    if (verify == QAC_VERIFY_SIZE) return QAC_OK;
    uint64_t h;
    qac_status st = qac_index_hash_file(path, &h, NULL);
    if (st) return st;
    if (h != (uint64_t)json_integer_value(sum))
        return qac_set_error(QAC_ERR_FORMAT, "%s: checksum mismatch (corrupt or modified FAISS index; rebuild it)", path);
    return QAC_OK;
}

qac_status qac_index_open(qac_index **out, const char *dir, qac_device device) {
    return qac_index_open_verified(out, dir, device, QAC_VERIFY_FULL);
}

static qac_status open_index(qac_index **out, const char *dir, qac_device device, qac_index_verify verify,
                             int rows_only) {
    *out = NULL;
    char path[4096];
    qac_status st = qac_path_join(path, sizeof path, dir, "manifest.json");
    if (st) return st;
    json_error_t err;
    json_t *man = json_load_file(path, 0, &err);
    if (!man) {
        if (access(path, F_OK) != 0) {
            /* the other kind of index, given where a dense one goes: say so */
            char bm25[4096];
            int is_bm25 = !qac_path_join(bm25, sizeof bm25, dir, "bm25.idx") && access(bm25, F_OK) == 0;
            return qac_set_error(QAC_ERR_NOT_FOUND, "%s: no index here (no manifest.json)%s", dir,
                                 is_bm25 ? ": it holds a BM25 index (qac bm25 build), not a dense one" : "");
        }
        return qac_set_error(QAC_ERR_FORMAT, "%s: %s (line %d)", path, err.text, err.line);
    }
    json_t *build = json_object_get(man, "build"), *fa = json_object_get(man, "faiss");
    const char *fmt = json_string_value(json_object_get(man, "format"));
    if (!fmt || strcmp(fmt, QAC_MANIFEST_FORMAT) != 0 || json_integer_value(json_object_get(man, "version")) != QAC_MANIFEST_VERSION ||
        !json_is_object(build)) {
        json_decref(man);
        return qac_set_error(QAC_ERR_FORMAT, "%s: not a qac index manifest (version %d expected)", path,
                             QAC_MANIFEST_VERSION);
    }
    if (!json_is_object(fa)) {
        json_decref(man);
        return qac_set_error(QAC_ERR_INVALID, "%s: the index is not finished (run the same qac index build again)", dir);
    }
    qac_index *ix = calloc(1, sizeof *ix);
    if (!ix) {
        json_decref(man);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_init(&ix->pool_mu, NULL);
    pthread_mutex_init(&ix->corpus_mu, NULL);
    if (json_is_integer(json_object_get(fa, "source_checksum"))) {
        ix->has_source_checksum = 1;
        ix->source_checksum = (uint64_t)json_integer_value(json_object_get(fa, "source_checksum"));
    }
    json_t *model = json_object_get(build, "model"), *src = json_object_get(build, "source");
    ix->dir = strdup(dir);
    ix->factory = dup_or_empty(json_string_value(json_object_get(fa, "factory")));
    ix->fingerprint = dup_or_empty(json_string_value(json_object_get(model, "fingerprint")));
    ix->model_name = dup_or_empty(json_string_value(json_object_get(model, "name")));
    ix->model_dir = dup_or_empty(json_string_value(json_object_get(man, "model_dir")));
    ix->model_normalize = json_is_true(json_object_get(model, "normalize"));
    ix->rows_only = rows_only;
    ix->shards = json_incref(json_object_get(man, "shards"));
    const char *kind = json_string_value(json_object_get(src, "kind"));
    if (kind && !strcmp(kind, "corpus")) {
        ix->corpus_path = dup_or_empty(json_string_value(json_object_get(src, "path")));
        ix->corpus_size = (uint64_t)json_integer_value(json_object_get(src, "size"));
        ix->corpus_fmt = fmt_from_name(json_string_value(json_object_get(src, "format")));
        /* a corpus index without "prompts" was built with none */
        json_t *pr = json_object_get(model, "prompts");
        ix->query_prompt = dup_or_empty(json_string_value(json_object_get(pr, "query")));
        ix->passage_prompt = dup_or_empty(json_string_value(json_object_get(pr, "passage")));
        if (!ix->query_prompt || !ix->passage_prompt) {
            st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
            goto fail;
        }
    }
    ix->dim = (int)json_integer_value(json_object_get(build, "dim"));
    ix->count = (int64_t)json_integer_value(json_object_get(man, "count"));
    if (!ix->dir || !ix->factory || !ix->fingerprint || !ix->model_name || !ix->model_dir) {
        st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (ix->dim < 1 || ix->count < 1) {
        st = qac_set_error(QAC_ERR_FORMAT, "%s: manifest has dim %d, count %lld", path, ix->dim, (long long)ix->count);
        goto fail;
    }
    if ((st = qac_path_join(path, sizeof path, dir, json_string_value(json_object_get(man, "docids")) ? json_string_value(json_object_get(man, "docids")) : "docids.qdoc")) ||
        (st = map_docids(ix, path)))
        goto fail;
    if (rows_only) {
        if (!json_is_array(ix->shards)) {
            st = qac_set_error(QAC_ERR_FORMAT, "%s: the manifest lists no shards", dir);
            goto fail;
        }
        json_decref(man);
        *out = ix;
        return QAC_OK;
    }
    /* Before FAISS reads it: a flipped byte can make FAISS abort or serve wrong scores. */
    if ((st = qac_path_join(path, sizeof path, dir, json_string_value(json_object_get(fa, "file")) ? json_string_value(json_object_get(fa, "file")) : "index.faiss")) ||
        (st = verify_faiss(path, fa, verify)))
        goto fail;
    int flat = !strcmp(ix->factory, "Flat"), sqbf16 = !strcmp(ix->factory, QAC_FACTORY_SQBF16);
    int want_gpu = flat && (device == QAC_DEVICE_CUDA || (device == QAC_DEVICE_AUTO && qac_cuda_available()));
    if (device == QAC_DEVICE_CUDA && !flat) {
        st = qac_set_error(QAC_ERR_UNSUPPORTED, "GPU search needs a Flat index (this one is %s); use --device cpu",
                           ix->factory);
        goto fail;
    }
    if (want_gpu) {
        st = load_gpu(ix, man);
        if (st && device == QAC_DEVICE_CUDA) goto fail;
        if (st) { /* AUTO: fall back to the CPU */
            qac_gpu_flat_free(ix->gpu);
            ix->gpu = NULL;
        }
    }
    if (!ix->gpu && flat) {
        /* Exact search from the shards; FAISS's file stays for other readers,
         * so only check that it is whole (IndexFlat holds every vector). */
        struct stat fsb;
        if ((st = qac_path_join(path, sizeof path, dir, json_string_value(json_object_get(fa, "file")) ? json_string_value(json_object_get(fa, "file")) : "index.faiss")))
            goto fail;
        if (stat(path, &fsb) != 0) {
            st = qac_set_error(errno == ENOENT ? QAC_ERR_NOT_FOUND : QAC_ERR_IO, "faiss read_index %s: %s", path,
                               strerror(errno));
            goto fail;
        }
        if ((uint64_t)fsb.st_size < (uint64_t)ix->count * (uint64_t)ix->dim * sizeof(float)) {
            st = qac_set_error(QAC_ERR_FORMAT, "%s: truncated FAISS index (%lld bytes for %lld x %d)", path,
                               (long long)fsb.st_size, (long long)ix->count, ix->dim);
            goto fail;
        }
        if ((st = load_cpu_flat(ix, man)) || (st = qac_pool_create(&ix->pool, 0))) goto fail;
    }
    if (sqbf16) {
        if ((st = qac_path_join(path, sizeof path, dir, json_string_value(json_object_get(fa, "file")) ? json_string_value(json_object_get(fa, "file")) : "index.faiss")) ||
            (st = qac_sqbf16_read(path, ix->count, ix->dim, &ix->codesb)) || (st = qac_pool_create(&ix->pool, 0)))
            goto fail;
    } else if (!ix->gpu && !ix->vecs) {
        if ((st = qac_path_join(path, sizeof path, dir, json_string_value(json_object_get(fa, "file")) ? json_string_value(json_object_get(fa, "file")) : "index.faiss")))
            goto fail;
        if ((st = qac_faiss_precheck(path))) goto fail;
        if (faiss_read_index_fname(path, 0, &ix->faiss)) {
            ix->faiss = NULL;
            st = qac_set_error(QAC_ERR_FAISS, "faiss read_index %s: %s", path, qac_faiss_message());
            goto fail;
        }
        if (faiss_Index_ntotal(ix->faiss) != ix->count || faiss_Index_d(ix->faiss) != ix->dim) {
            st = qac_set_error(QAC_ERR_FORMAT, "%s: FAISS index has %lld x %d, manifest says %lld x %d", path,
                               (long long)faiss_Index_ntotal(ix->faiss), faiss_Index_d(ix->faiss),
                               (long long)ix->count, ix->dim);
            goto fail;
        }
        if (faiss_Index_metric_type(ix->faiss) != METRIC_INNER_PRODUCT) {
            st = qac_set_error(QAC_ERR_FORMAT, "%s: FAISS index metric is not inner product", path);
            goto fail;
        }
        /* Before any search: a corrupt field FAISS read without complaint
         * would make it abort the process or read out of bounds. */
        char why[512];
        if (qac_faiss_check(ix->faiss, ix->factory, ix->dim, ix->count, why, sizeof why)) {
            st = qac_set_error(QAC_ERR_FORMAT, "%s: %s (corrupt FAISS index, or not the %s index the manifest records)",
                               path, why, ix->factory);
            goto fail;
        }
        if ((ix->codes16 = qac_faiss_fp16_codes(ix->faiss)) && (st = qac_pool_create(&ix->pool, 0))) goto fail;
    }
    json_decref(man);
    *out = ix;
    return QAC_OK;
fail:
    json_decref(man);
    qac_index_free(ix);
    return st;
}

qac_status qac_index_open_verified(qac_index **out, const char *dir, qac_device device, qac_index_verify verify) {
    return open_index(out, dir, device, verify, 0);
}

qac_status qac_index_open_rows(qac_index **out, const char *dir) {
    return open_index(out, dir, QAC_DEVICE_CPU, QAC_VERIFY_SIZE, 1);
}

void qac_index_free(qac_index *ix) {
    if (!ix) return;
    json_decref(ix->shards);
    if (ix->faiss) faiss_Index_free(ix->faiss);
    qac_gpu_flat_free(ix->gpu);
    free(ix->vecs);
    free(ix->codesb);
    qac_pool_free(ix->pool);
    pthread_mutex_destroy(&ix->pool_mu);
    qac_reader_free(ix->corpus);
    pthread_mutex_destroy(&ix->corpus_mu);
    if (ix->docs_map) munmap(ix->docs_map, ix->docs_len);
    free(ix->dir);
    free(ix->factory);
    free(ix->fingerprint);
    free(ix->query_prompt);
    free(ix->passage_prompt);
    free(ix->corpus_path);
    free(ix->model_name);
    free(ix->model_dir);
    free(ix);
}

int64_t qac_index_count(const qac_index *ix) { return ix->count; }
int qac_index_dim(const qac_index *ix) { return ix->dim; }
const char *qac_index_factory(const qac_index *ix) { return ix->factory; }
const char *qac_index_model_fingerprint(const qac_index *ix) { return ix->fingerprint; }

int qac_index_prompts(const qac_index *ix, const char **query, const char **passage) {
    if (query) *query = ix->query_prompt;
    if (passage) *passage = ix->passage_prompt;
    return ix->query_prompt != NULL;
}

/* JSON-style quoting for messages: "query: " or none. */
static void quote(char *buf, size_t cap, const char *s) {
    if (!*s) snprintf(buf, cap, "none");
    else snprintf(buf, cap, "\"%.*s\"", (int)(cap > 3 ? cap - 3 : 0), s);
}

qac_status qac_index_check_prompts(const qac_index *ix, const char *query_prompt) {
    if (!ix->query_prompt || !strcmp(ix->query_prompt, query_prompt ? query_prompt : "")) return QAC_OK;
    char want[512], have[512], pass[512];
    quote(want, sizeof want, ix->query_prompt);
    quote(have, sizeof have, query_prompt ? query_prompt : "");
    quote(pass, sizeof pass, ix->passage_prompt);
    return qac_set_error(QAC_ERR_MISMATCH,
                         "the index was built for query prompt %s (its passages had prompt %s), but the queries "
                         "would get %s: pass --query-prompt with the index's, or --allow-prompt-mismatch",
                         want, pass, have);
}

const char *qac_index_model_name(const qac_index *ix) { return ix->model_name; }
const char *qac_index_model_dir(const qac_index *ix) { return ix->model_dir; }

qac_status qac_index_check_model(const qac_index *ix, const qac_model *m) {
    const char *fp = ix->fingerprint;
    if (!strcmp(fp, m->fingerprint)) return QAC_OK;
    if (!strcmp(fp, "none"))
        return qac_set_error(QAC_ERR_MISMATCH,
                             "the index %s was built from precomputed vectors and records no model: rebuild it with "
                             "`qac index build --vectors FILE --model DIR` naming the model that made them",
                             ix->dir);
    char use[4200];
    if (ix->model_dir[0]) snprintf(use, sizeof use, "--model %s", ix->model_dir);
    else snprintf(use, sizeof use, "--model with %s's directory", ix->model_name[0] ? ix->model_name : "that model");
    return qac_set_error(QAC_ERR_MISMATCH,
                         "the index %s was built with the model %s, but the model given is %s (%s), another model "
                         "(fingerprint %s, not %s): queries and passages must share one encoder, so use %s",
                         ix->dir, ix->model_name[0] ? ix->model_name : "(unnamed)", m->name,
                         m->dir ? m->dir : "in memory", m->fingerprint, fp, use);
}

int qac_index_model_normalize(const qac_index *ix) { return ix->model_normalize; }
int qac_index_has_text(const qac_index *ix) { return ix->corpus_path != NULL; }

int qac_index_on_gpu(const qac_index *ix) { return ix->gpu != NULL; }

qac_status qac_index_set_threads(qac_index *ix, int nthreads) {
    if (!ix->vecs && !ix->codes16 && !ix->codesb) return QAC_OK; /* FAISS and the GPU manage their own */
    qac_pool *p = NULL;
    qac_status st = nthreads == 1 ? QAC_OK : qac_pool_create(&p, nthreads);
    if (st) return st;
    pthread_mutex_lock(&ix->pool_mu);
    qac_pool_free(ix->pool);
    ix->pool = p;
    pthread_mutex_unlock(&ix->pool_mu);
    return QAC_OK;
}

const char *qac_index_docid(const qac_index *ix, int64_t row) {
    if (row < 0 || row >= ix->count) return NULL;
    return ix->blob + ix->str_off[row];
}

static qac_status open_corpus_locked(qac_index *ix, qac_index_verify verify) {
    if (ix->corpus) return QAC_OK;
    if (!ix->corpus_path)
        return qac_set_error(QAC_ERR_NOT_FOUND, "this index was built from vectors: it has no passage text");
    struct stat sb;
    if (stat(ix->corpus_path, &sb) != 0)
        return qac_set_error(QAC_ERR_NOT_FOUND, "corpus %s: %s", ix->corpus_path, strerror(errno));
    if ((uint64_t)sb.st_size != ix->corpus_size)
        return qac_set_error(QAC_ERR_FORMAT, "corpus %s changed since indexing (%llu bytes, was %llu)",
                             ix->corpus_path, (unsigned long long)sb.st_size, (unsigned long long)ix->corpus_size);
    qac_reader *r = NULL;
    qac_status st = qac_reader_open(&r, ix->corpus_path, QAC_READ_CORPUS, ix->corpus_fmt);
    if (st) return st;
    if (verify == QAC_VERIFY_FULL && ix->has_source_checksum) {
        uint64_t h;
        if ((st = qac_index_hash_file(ix->corpus_path, &h, NULL))) {
            qac_reader_free(r);
            return st;
        }
        if (h != ix->source_checksum) {
            qac_reader_free(r);
            return qac_set_error(QAC_ERR_FORMAT, "corpus %s changed since indexing (checksum mismatch)", ix->corpus_path);
        }
    }
    ix->corpus = r;
    return QAC_OK;
}

qac_status qac_index_open_corpus(qac_index *ix, qac_index_verify verify) {
    pthread_mutex_lock(&ix->corpus_mu);
    qac_status st = open_corpus_locked(ix, verify);
    ix->corpus_tried = 1;
    ix->corpus_status = st;
    pthread_mutex_unlock(&ix->corpus_mu);
    return st;
}

qac_status qac_index_text(const qac_index *cix, int64_t row, char **text) {
    qac_index *ix = (qac_index *)cix;
    *text = NULL;
    if (row < 0 || row >= ix->count)
        return qac_set_error(QAC_ERR_INVALID, "row %lld out of range [0, %lld)", (long long)row, (long long)ix->count);
    pthread_mutex_lock(&ix->corpus_mu);
    qac_status st = QAC_OK;
    if (!ix->corpus) {
        if (ix->corpus_tried) st = qac_set_error(ix->corpus_status ? ix->corpus_status : QAC_ERR_NOT_FOUND,
                                                 "the corpus was not available when the index was opened");
        else st = open_corpus_locked(ix, QAC_VERIFY_SIZE);
        ix->corpus_tried = 1;
        ix->corpus_status = st;
    }
    qac_record rec;
    int got = 0;
    const char *want = qac_index_docid(ix, row);
    if (!st && !(st = qac_reader_seek(ix->corpus, ix->offsets[row], ix->lines[row])) &&
        !(st = qac_reader_next(ix->corpus, &rec, &got))) {
        if (!got || strcmp(rec.id, want) != 0)
            st = qac_set_error(QAC_ERR_FORMAT, "the corpus changed since indexing: passage %s is not at its offset", want);
        else if (!(*text = strndup(rec.text, rec.text_len)))
            st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
    } else if (st && ix->corpus) {
        /* reader messages carry the absolute path: keep it out of responses */
        st = qac_set_error(st, "the corpus changed since indexing: passage %s cannot be read", want);
    }
    pthread_mutex_unlock(&ix->corpus_mu);
    return st;
}

qac_status qac_index_set_param(qac_index *ix, const char *name, double value) {
    if (ix->rows_only) return qac_set_error(QAC_ERR_INVALID, "parameter %s: this index was opened for reading rows only", name);
    if (ix->gpu) return qac_set_error(QAC_ERR_FAISS, "parameter %s: the GPU flat search has no parameters", name);
    if (ix->vecs || ix->codesb) return qac_set_error(QAC_ERR_FAISS, "parameter %s: the exact search has no parameters", name);
    FaissParameterSpace *ps = NULL;
    if (faiss_ParameterSpace_new(&ps))
        return qac_set_error(QAC_ERR_FAISS, "faiss ParameterSpace: %s", qac_faiss_message());
    qac_status st = QAC_OK;
    if (faiss_ParameterSpace_set_index_parameter(ps, ix->faiss, name, value))
        st = qac_set_error(QAC_ERR_FAISS, "faiss parameter %s=%g on %s: %s", name, value, ix->factory,
                           qac_faiss_message());
    faiss_ParameterSpace_free(ps);
    return st;
}

typedef struct hit {
    float score;
    int64_t row;
    const char *docid;
} hit;

static int hit_cmp(const void *a, const void *b) {
    const hit *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return -strcmp(x->docid, y->docid);
}

/* Equal scores by docid descending; -1 rows (score -inf) last. */
static void order_ties(const qac_index *ix, float *scores, int64_t *rows, int k) {
    int valid = 0;
    for (int i = 0; i < k; i++) {
        if (rows[i] < 0 || rows[i] >= ix->count) {
            rows[i] = -1;
            scores[i] = -INFINITY;
        } else valid++;
    }
    for (int i = 0; i < valid;) {
        int j = i + 1;
        while (j < valid && scores[j] == scores[i]) j++;
        if (j - i > 1) {
            hit tmp[64], *h = j - i <= 64 ? tmp : malloc(sizeof(hit) * (size_t)(j - i));
            if (h) {
                for (int t = i; t < j; t++) h[t - i] = (hit){scores[t], rows[t], qac_index_docid(ix, rows[t])};
                qsort(h, (size_t)(j - i), sizeof *h, hit_cmp);
                for (int t = i; t < j; t++) rows[t] = h[t - i].row;
                if (h != tmp) free(h);
            }
        }
        i = j;
    }
}

/* Row a's docid sorts before row b's. */
static int docid_less(const void *ctx, int64_t a, int64_t b) {
    const qac_index *ix = ctx;
    return strcmp(ix->blob + ix->str_off[a], ix->blob + ix->str_off[b]) < 0;
}

/* Exact search with our own scan (flat_scan.c). The pool serves one search
 * at a time; a concurrent caller scans on its own thread, with the same
 * answer. */
static qac_status flat_search(qac_index *ix, const float *queries, int nq, int k, float *scores, int64_t *rows) {
    qac_flat f = {ix->vecs, ix->vecs ? NULL : ix->codes16, ix->count, ix->dim, docid_less, ix, ix->codesb};
    int locked = ix->pool && pthread_mutex_trylock(&ix->pool_mu) == 0;
    qac_status st = qac_flat_topk(&f, queries, nq, k, locked ? ix->pool : NULL, scores, rows);
    if (locked) pthread_mutex_unlock(&ix->pool_mu);
    return st;
}

qac_status qac_index_search(const qac_index *ix, const float *queries, int nq, int k, float *scores,
                            int64_t *rows) {
    if (nq < 0 || k < 1 || (nq && (!queries || !scores || !rows)))
        return qac_set_error(QAC_ERR_INVALID, "search: bad arguments (nq %d, k %d)", nq, k);
    if (ix->rows_only) return qac_set_error(QAC_ERR_INVALID, "search: this index was opened for reading rows only");
    if (ix->gpu) {
        if (k > QAC_GPU_MAX_K) return qac_set_error(QAC_ERR_INVALID, "k %d: the GPU search allows k <= %d", k, QAC_GPU_MAX_K);
        for (int q = 0; q < nq; q += QAC_GPU_MAX_NQ) {
            int m = nq - q < QAC_GPU_MAX_NQ ? nq - q : QAC_GPU_MAX_NQ;
            qac_status st = qac_gpu_flat_search(ix->gpu, queries + (size_t)q * ix->dim, m, k,
                                                scores + (size_t)q * k, rows + (size_t)q * k);
            if (st) return st;
        }
    } else if (ix->vecs || ix->codes16 || ix->codesb) {
        return flat_search((qac_index *)ix, queries, nq, k, scores, rows);
    } else {
        if (faiss_Index_search(ix->faiss, nq, queries, k, scores, rows))
            return qac_set_error(QAC_ERR_FAISS, "faiss search: %s", qac_faiss_message());
    }
    for (int q = 0; q < nq; q++) order_ties(ix, scores + (size_t)q * k, rows + (size_t)q * k, k);
    return QAC_OK;
}

qac_status qac_index_describe(const char *dir, int64_t *count, int *dim, char *factory, size_t factory_cap,
                              int64_t *truncated, int *max_len) {
    char path[4096];
    qac_status st = qac_path_join(path, sizeof path, dir, "manifest.json");
    if (st) return st;
    json_error_t err;
    json_t *man = json_load_file(path, 0, &err);
    if (!man) return qac_set_error(QAC_ERR_FORMAT, "%s: %s", path, err.text);
    *count = (int64_t)json_integer_value(json_object_get(man, "count"));
    *dim = (int)json_integer_value(json_object_get(json_object_get(man, "build"), "dim"));
    *truncated = (int64_t)json_integer_value(json_object_get(man, "truncated"));
    *max_len = (int)json_integer_value(json_object_get(json_object_get(man, "build"), "max_len"));
    const char *f = json_string_value(json_object_get(json_object_get(man, "faiss"), "factory"));
    snprintf(factory, factory_cap, "%s", f ? f : "?");
    json_decref(man);
    return QAC_OK;
}

qac_status qac_index_recorded_model(const char *dir, char *model_dir, size_t cap) {
    char path[4096];
    model_dir[0] = '\0';
    qac_status st = qac_path_join(path, sizeof path, dir, "manifest.json");
    if (st) return st;
    json_error_t err;
    json_t *man = json_load_file(path, 0, &err);
    if (!man) return qac_set_error(QAC_ERR_FORMAT, "%s: %s", path, err.text);
    const char *d = json_string_value(json_object_get(man, "model_dir"));
    snprintf(model_dir, cap, "%s", d ? d : "");
    json_decref(man);
    return QAC_OK;
}

/* ---- reading the stored vectors back, shard by shard ----
 * While the caller consumes one shard, a thread reads and verifies the
 * next, so that a consumer waiting on something else (a database taking
 * the rows) does not also wait for the disk and the checksum. */

typedef struct shard_load {
    const qac_index *ix;
    size_t shard;      /* index in the manifest's list */
    qac_shard s;
    qac_status st;
    char err[512];     /* the reading thread's message, raised again by the caller */
} shard_load;

static void *load_shard(void *arg) {
    shard_load *l = arg;
    json_t *sh = json_array_get(l->ix->shards, l->shard);
    char path[4096];
    memset(&l->s, 0, sizeof l->s);
    l->st = qac_path_join(path, sizeof path, l->ix->dir, json_string_value(json_object_get(sh, "file")));
    if (!l->st) l->st = qac_shard_read(path, (uint64_t)json_integer_value(json_object_get(sh, "checksum")), &l->s);
    if (!l->st && l->s.dim != l->ix->dim) {
        qac_shard_free(&l->s);
        l->st = qac_set_error(QAC_ERR_FORMAT, "%s: shard does not match the manifest", path);
    }
    if (l->st) snprintf(l->err, sizeof l->err, "%s", qac_last_error());
    return NULL;
}

struct qac_index_rows {
    const qac_index *ix;
    size_t next;        /* shard to hand out next */
    int64_t row;        /* its first row */
    shard_load cur;     /* the shard last handed out (freed on the next call) */
    int have;
    shard_load ahead;   /* shard `next`, being read by `thread` */
    pthread_t thread;
    int reading;
};

qac_status qac_index_rows_open(qac_index_rows **out, const qac_index *ix) {
    *out = NULL;
    if (!json_is_array(ix->shards)) return qac_set_error(QAC_ERR_FORMAT, "%s: the manifest lists no shards", ix->dir);
    qac_index_rows *r = calloc(1, sizeof *r);
    if (!r) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    r->ix = ix;
    *out = r;
    return QAC_OK;
}

/* Start reading shard r->next in the background (synchronously when no
 * thread can be had). */
static void read_ahead(qac_index_rows *r) {
    memset(&r->ahead, 0, sizeof r->ahead);
    r->ahead.ix = r->ix;
    r->ahead.shard = r->next;
    r->reading = pthread_create(&r->thread, NULL, load_shard, &r->ahead) == 0;
    if (!r->reading) load_shard(&r->ahead);
}

qac_status qac_index_rows_next(qac_index_rows *r, int64_t *first_row, int64_t *n, const float **vectors) {
    const qac_index *ix = r->ix;
    if (r->have) qac_shard_free(&r->cur.s);
    r->have = 0;
    *first_row = r->row;
    *n = 0;
    *vectors = NULL;
    size_t nshards = json_array_size(ix->shards);
    if (r->next >= nshards) {
        if (r->row != ix->count)
            return qac_set_error(QAC_ERR_FORMAT, "%s: shards hold %lld rows, manifest says %lld", ix->dir,
                                 (long long)r->row, (long long)ix->count);
        return QAC_OK;
    }
    if (r->next == 0 && !r->reading) read_ahead(r); /* the first call waits for its shard */
    if (r->reading) pthread_join(r->thread, NULL);
    r->reading = 0;
    r->cur = r->ahead;
    if (r->cur.st) return qac_set_error(r->cur.st, "%s", r->cur.err);
    r->have = 1;
    if ((int64_t)r->cur.s.first_row != r->row || (int64_t)r->cur.s.count > ix->count - r->row)
        return qac_set_error(QAC_ERR_FORMAT, "%s: shard %zu does not match the manifest", ix->dir, r->next);
    r->next++;
    r->row += (int64_t)r->cur.s.count;
    if (r->next < nshards) read_ahead(r);
    *n = (int64_t)r->cur.s.count;
    *vectors = r->cur.s.vectors;
    return QAC_OK;
}

void qac_index_rows_free(qac_index_rows *r) {
    if (!r) return;
    if (r->reading) {
        pthread_join(r->thread, NULL);
        if (!r->ahead.st) qac_shard_free(&r->ahead.s);
    }
    if (r->have) qac_shard_free(&r->cur.s);
    free(r);
}
