/* qac index build: encode a corpus (or load precomputed vectors) into
 * resumable shards, then build a FAISS index; qac index merge: one index of
 * the parts many workers encoded. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "qac_cpu.h"
#include "qac_index.h"
#include "qac_util.h"

static const qac_opt build_opts[] = {
    {"model", QAC_OPT_STR, NULL, 0, -1, NULL, "QAC_MODEL", "model directory (default: the embedded default model); with --vectors, the model that made them, recorded in the manifest so that `qac serve` accepts the index", 0},
    {"corpus", QAC_OPT_STR, NULL, 0, -1, NULL, NULL,
     "corpus file: collection.tsv, BEIR/Tevatron jsonl, Cranfield; with --vectors, the corpus they were made from "
     "(its ids, in row order)", 0},
    {"vectors", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "precomputed float32/float16 .npy [n, dim] instead of encoding --corpus", 0},
    {"ids", QAC_OPT_STR, NULL, 0, -1, NULL, NULL,
     "with --vectors: the rows' ids, one per line (as qac encode --ids writes), or 'sequential' to number them 0..n-1", 0},
    {"format", QAC_OPT_ENUM, "auto", 0, -1, "auto|tsv|beir|tevatron|cranfield", NULL, "corpus format", 0},
    {"out", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "index directory (created; re-run to resume)", 1},
    {"factory", QAC_OPT_STR, "Flat", 0, -1, NULL, NULL,
     "FAISS index factory string, inner product (Flat, SQfp16, SQbf16, HNSW32,SQfp16, IVF4096,PQ32, ...); "
     "Flat, SQfp16 and SQbf16 are searched exactly by qac's own scan", 0},
    {"batch", QAC_OPT_INT, "64", 1, 4096, NULL, NULL, "passages per encoder call", 0},
    {"threads", QAC_OPT_INT, "0", 0, 1024, NULL, "QAC_THREADS", "CPU encoder threads (0 = all cores)", 0},
    {"device", QAC_OPT_ENUM, "auto", 0, -1, "auto|cpu|cuda", "QAC_DEVICE", "encoder device", 0},
    {"streams", QAC_OPT_INT, "2", 1, 8, NULL, NULL,
     "CUDA encoders, each on its own stream: one's host copies and host work overlap the others' kernels", 0},
    {"tokenize-threads", QAC_OPT_INT, "0", 0, 256, NULL, NULL,
     "threads tokenising ahead of the encoder (0 = one per core up to 8 on CUDA, else 1)", 0},
    {"max-len", QAC_OPT_INT, "0", 0, 8192, NULL, NULL, "passage max tokens incl. specials (0 = the model's)", 0},
    {"shard-size", QAC_OPT_INT, "100000", 1, 100000000, NULL, NULL, "passages per shard (resume granularity)", 0},
    {"dtype", QAC_OPT_ENUM, "fp32", 0, -1, "fp32|fp16", NULL, "storage type of the shard vectors", 0},
    {"encoder-dtype", QAC_OPT_ENUM, "fp32", 0, -1, "fp32|bf16|int8", "QAC_DTYPE",
     "CPU encoder precision: bf16 runs the linear layers in bf16 (fp32 sums), int8 in int8 (int32 sums, VNNI; fp32 "
     "on a CPU without it); recorded in the manifest", 0},
    {"train-size", QAC_OPT_INT, "0", 0, 1e12, NULL, NULL,
     "vectors sampled for IVF/PQ/SQ training (0 = 256 x nlist, else 100000)", 0},
    QAC_CLI_PROMPT_OPTS,
    QAC_CPU_ISA_OPT,
};
#define N_BUILD_OPTS (int)(sizeof build_opts / sizeof build_opts[0])

/* The summary line of a finished index, from its manifest. */
/* The one summary line of a build or a merge; extra is appended (may be ""). */
static void summary(const char *cmd, const char *out, double t0, const char *extra) {
    int64_t count = 0, cut = 0;
    int dim = 0, max_len = 0;
    char factory[256], cut_s[96] = "";
    if (qac_index_describe(out, &count, &dim, factory, sizeof factory, &cut, &max_len) == QAC_OK) {
        if (max_len) snprintf(cut_s, sizeof cut_s, "; %lld cut at %d tokens", (long long)cut, max_len);
        qac_summary(cmd, "%lld passages, dim %d, %s, in %.1f s%s%s -> %s", (long long)count, dim, factory,
                    qac_now() - t0, cut_s, extra, out);
    }
}

static int cmd_build(int argc, char **argv) {
    qac_opts o;
    int rc = qac_cli_parse(&o, "index build",
                           "--corpus FILE | --vectors FILE.npy (--ids FILE|sequential | --corpus FILE) [--model DIR] "
                           "--out DIR [options]",
                           build_opts, N_BUILD_OPTS, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    const char *corpus = qac_opts_str(&o, "corpus"), *vectors = qac_opts_str(&o, "vectors"),
               *ids = qac_opts_str(&o, "ids");
    const char *usage_err = NULL;
    if (!corpus && !vectors) usage_err = "give --corpus FILE, or --vectors FILE.npy with their ids";
    else if (ids && !vectors) usage_err = "--ids goes with --vectors (a corpus carries its own ids)";
    else if (vectors && !!ids == !!corpus)
        /* numbering rows 0..n-1 silently gives every hit the wrong id when
         * the corpus's ids are not exactly those numbers */
        usage_err = ids ? "with --vectors give the ids by --ids or by --corpus, not both"
                        : "--vectors needs the rows' ids: --ids FILE (one per line, as qac encode --ids writes), "
                          "--corpus FILE (the corpus the vectors were made from), or --ids sequential (ids 0..n-1)";
    if (usage_err) {
        fprintf(stderr, "qac index build: %s\n(see 'qac index build --help')\n", usage_err);
        qac_opts_free(&o);
        return 2;
    }
    if (vectors && (qac_opts_isset(&o, "query-prompt") || qac_opts_isset(&o, "passage-prompt"))) {
        fprintf(stderr, "qac index build: --query-prompt / --passage-prompt apply to --corpus; the prompts of "
                        "--vectors are not known to qac\n");
        qac_opts_free(&o);
        return 2;
    }
    qac_progress_state ps;
    qac_progress_init(&ps, "passages");
    qac_index_build_opts bo = qac_index_default_build_opts();
    bo.factory = qac_opts_str(&o, "factory");
    bo.batch = (int)qac_opts_int(&o, "batch");
    bo.max_len = (int)qac_opts_int(&o, "max-len");
    bo.shard_size = (int)qac_opts_int(&o, "shard-size");
    bo.fp16 = !strcmp(qac_opts_str(&o, "dtype"), "fp16");
    bo.train_size = qac_opts_int(&o, "train-size");
    bo.format = qac_cli_format(qac_opts_str(&o, "format"));
    bo.progress = qac_progress_stderr;
    bo.progress_user = &ps;
    if (vectors && ids && strcmp(ids, "sequential")) bo.ids_path = ids;
    if (vectors && corpus) bo.ids_corpus = corpus, bo.ids_format = bo.format;
    const char *out = qac_opts_str(&o, "out");
    double t0 = qac_now();
    qac_status st;
    qac_index_build_stats bs;
    memset(&bs, 0, sizeof bs);
    int on_cuda = 0;
    if (vectors) {
        /* Only a model named explicitly is recorded: vectors from an unknown
         * model keep fingerprint "none". */
        qac_model *vm = NULL;
        char buf[4096];
        const char *mdir = qac_opts_isset(&o, "model") ? qac_cli_model_dir(&o, buf, sizeof buf) : NULL;
        st = qac_opts_isset(&o, "model") ? (mdir ? qac_model_load(&vm, mdir) : QAC_ERR_NOT_FOUND) : QAC_OK;
        bo.vectors_model = vm;
        if (!st) st = qac_index_build_vectors(out, vectors, &bo);
        qac_model_free(vm);
    } else {
        char buf[4096];
        qac_model *m = NULL;
        qac_encoder *enc = NULL, *more[8] = {NULL};
        int n_more = 0;
        /* the output's place first: said before the model loads */
        if (qac_check_output_dir(out) || qac_check_input(corpus)) {
            qac_opts_free(&o);
            return qac_cli_fail("index build");
        }
        const char *model_dir = qac_cli_model_dir(&o, buf, sizeof buf);
        if (!model_dir) {
            qac_opts_free(&o);
            return qac_cli_fail("index build");
        }
        qac_encoder_opts eo = qac_encoder_default_opts();
        eo.device = qac_cli_device(qac_opts_str(&o, "device"));
        eo.threads = (int)qac_opts_int(&o, "threads");
        eo.max_batch = bo.batch;
        eo.cpu_precision = qac_cli_dtype(qac_opts_str(&o, "encoder-dtype"));
        st = qac_model_load(&m, model_dir);
        if (!st) st = qac_cli_apply_prompts(&o, m);
        if (!st) st = qac_encoder_create(&enc, m, &eo);
        if (!st) qac_cli_encoder_note("index build", enc);
        if (!st && qac_encoder_device(enc) == QAC_DEVICE_CUDA) {
            eo.device = QAC_DEVICE_CUDA;
            for (; !st && n_more + 1 < (int)qac_opts_int(&o, "streams"); n_more++)
                st = qac_encoder_create(&more[n_more], m, &eo);
        }
        bo.more_encoders = more;
        bo.n_more_encoders = n_more;
        bo.tokenize_threads = (int)qac_opts_int(&o, "tokenize-threads");
        bo.stats = &bs;
        if (!st) st = qac_index_build(out, enc, corpus, &bo);
        on_cuda = enc && qac_encoder_device(enc) == QAC_DEVICE_CUDA;
        for (int i = 0; i < n_more; i++) qac_encoder_free(more[i]);
        qac_encoder_free(enc);
        qac_model_free(m);
    }
    if (st) {
        qac_opts_free(&o);
        return qac_cli_fail("index build");
    }
    /* the encoding: its rate, how busy the encoders were, where the rest went */
    char enc_s[320] = "";
    if (bs.passages && bs.encode_s > 0) {
        int n = snprintf(enc_s, sizeof enc_s, "; %llu encoded at %.0f passages/s on %d %s encoder%s, busy %.0f%%",
                         (unsigned long long)bs.passages, bs.passages / bs.encode_s, bs.encoders,
                         on_cuda ? "CUDA" : "CPU", bs.encoders > 1 ? "s" : "", 100.0 * bs.busy_s / bs.encode_s);
        if (n > 0 && n < (int)sizeof enc_s && bs.device_s >= 0)
            n += snprintf(enc_s + n, sizeof enc_s - (size_t)n, " (device %.0f%% a stream)",
                          100.0 * bs.device_s / bs.encoders / bs.encode_s);
        if (n > 0 && n < (int)sizeof enc_s)
            snprintf(enc_s + n, sizeof enc_s - (size_t)n, ", %.1f s waiting for tokens, %.1f s for shard writes",
                     bs.wait_s, bs.flush_s);
    }
    summary("index build", out, t0, enc_s);
    qac_opts_free(&o);
    return 0;
}

static const qac_opt merge_opts[] = {
    {"parts", QAC_OPT_STR, NULL, 0, -1, NULL, NULL,
     "parts directory written by many workers (python: qac.ray.Embed, or qac.IndexParts)", 1},
    {"out", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "index directory (created; re-run to resume)", 1},
    {"factory", QAC_OPT_STR, "Flat", 0, -1, NULL, NULL, "FAISS index factory string, as for index build", 0},
    {"shard-size", QAC_OPT_INT, "100000", 1, 100000000, NULL, NULL, "passages per shard, as for index build", 0},
    {"dtype", QAC_OPT_ENUM, "fp32", 0, -1, "fp32|fp16", NULL, "storage type of the shard vectors", 0},
    {"train-size", QAC_OPT_INT, "0", 0, 1e12, NULL, NULL,
     "vectors sampled for IVF/PQ/SQ training (0 = 256 x nlist, else 100000)", 0},
};
#define N_MERGE_OPTS (int)(sizeof merge_opts / sizeof merge_opts[0])

static int cmd_merge(int argc, char **argv) {
    qac_opts o;
    int rc = qac_cli_parse(&o, "index merge", "--parts DIR --out DIR [options]", merge_opts, N_MERGE_OPTS, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    qac_progress_state ps;
    qac_progress_init(&ps, "passages");
    qac_index_build_opts bo = qac_index_default_build_opts();
    bo.factory = qac_opts_str(&o, "factory");
    bo.shard_size = (int)qac_opts_int(&o, "shard-size");
    bo.fp16 = !strcmp(qac_opts_str(&o, "dtype"), "fp16");
    bo.train_size = qac_opts_int(&o, "train-size");
    bo.progress = qac_progress_stderr;
    bo.progress_user = &ps;
    const char *out = qac_opts_str(&o, "out");
    double t0 = qac_now();
    if (qac_index_merge(out, qac_opts_str(&o, "parts"), &bo)) {
        qac_opts_free(&o);
        return qac_cli_fail("index merge");
    }
    summary("index merge", out, t0, "");
    qac_opts_free(&o);
    return 0;
}

int qac_cmd_index(int argc, char **argv) {
    if (argc >= 1 && !strcmp(argv[0], "build")) return cmd_build(argc - 1, argv + 1);
    if (argc >= 1 && !strcmp(argv[0], "merge")) return cmd_merge(argc - 1, argv + 1);
    FILE *f = argc >= 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) ? stdout : stderr;
    if (f == stderr && argc >= 1) { /* a word that is no subcommand is said to be one, before the usage */
        static const char *const subs[] = {"build", "merge"};
        qac_cli_unknown("qac index", "subcommand", argv[0], subs, 2);
    }
    fprintf(f, "usage: qac index build --corpus FILE [--model DIR] --out DIR [options]\n"
               "       qac index build --vectors FILE.npy (--ids FILE|sequential | --corpus FILE) [--model DIR]\n"
               "                       --out DIR [options]\n"
               "       qac index merge --parts DIR --out DIR [options]   (parts encoded by many workers)\n"
               "       (qac index build --help, qac index merge --help list the options)\n");
    return f == stdout ? 0 : 2;
}
