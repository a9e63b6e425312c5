/* qac index build: encode a corpus (or load precomputed vectors) into
 * resumable shards, then build a FAISS index. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "qac_cpu.h"
#include "qac_index.h"

static const qac_opt build_opts[] = {
    {"model", QAC_OPT_STR, NULL, 0, -1, NULL, "QAC_MODEL", "model directory (default: the embedded default model); with --vectors, the model that made them, recorded in the manifest so that `qac serve` accepts the index", 0},
    {"corpus", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "corpus file: collection.tsv, BEIR/Tevatron jsonl, Cranfield", 0},
    {"vectors", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "precomputed float32/float16 .npy [n, dim] instead of --corpus", 0},
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
    {"encoder-dtype", QAC_OPT_ENUM, "fp32", 0, -1, "fp32|bf16", "QAC_DTYPE",
     "CPU encoder precision: bf16 runs the linear layers in bf16 (fp32 sums); recorded in the manifest", 0},
    {"train-size", QAC_OPT_INT, "0", 0, 1e12, NULL, NULL,
     "vectors sampled for IVF/PQ/SQ training (0 = 256 x nlist, else 100000)", 0},
    QAC_CPU_ISA_OPT,
};
#define N_BUILD_OPTS (int)(sizeof build_opts / sizeof build_opts[0])

static int cmd_build(int argc, char **argv) {
    qac_opts o;
    int rc = qac_cli_parse(&o, "index build", "--corpus FILE | --vectors FILE.npy [--model DIR] --out DIR [options]", build_opts,
                           N_BUILD_OPTS, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    const char *corpus = qac_opts_str(&o, "corpus"), *vectors = qac_opts_str(&o, "vectors");
    if (!corpus == !vectors) {
        fprintf(stderr, "qac index build: give exactly one of --corpus or --vectors\n");
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
    const char *out = qac_opts_str(&o, "out");
    double t0 = qac_now();
    qac_status st;
    if (vectors) {
        /* Only a model named explicitly is recorded: vectors from an unknown
         * model keep fingerprint "none". */
        qac_model *vm = NULL;
        st = qac_opts_isset(&o, "model") ? qac_model_load(&vm, qac_opts_str(&o, "model")) : QAC_OK;
        bo.vectors_model = vm;
        if (!st) st = qac_index_build_vectors(out, vectors, &bo);
        qac_model_free(vm);
    } else {
        char buf[4096];
        const char *model_dir = qac_cli_model_dir(&o, buf, sizeof buf);
        qac_model *m = NULL;
        qac_encoder *enc = NULL, *more[8] = {NULL};
        int n_more = 0;
        qac_index_build_stats bs;
        if (!model_dir) {
            qac_opts_free(&o);
            return qac_cli_fail("index build");
        }
        qac_encoder_opts eo = qac_encoder_default_opts();
        eo.device = qac_cli_device(qac_opts_str(&o, "device"));
        eo.threads = (int)qac_opts_int(&o, "threads");
        eo.max_batch = bo.batch;
        eo.cpu_precision = strcmp(qac_opts_str(&o, "encoder-dtype"), "bf16") ? QAC_PREC_FP32 : QAC_PREC_BF16;
        st = qac_model_load(&m, model_dir);
        if (!st) st = qac_encoder_create(&enc, m, &eo);
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
        if (!st && !ps.quiet && bs.passages) {
            fprintf(stderr, "qac index build: %llu passages encoded in %.1f s (%.0f passages/s) on %d %s encoder%s; "
                    "encoders busy %.0f%% of the time", (unsigned long long)bs.passages, bs.encode_s,
                    bs.passages / (bs.encode_s > 0 ? bs.encode_s : 1e-9), bs.encoders,
                    qac_encoder_device(enc) == QAC_DEVICE_CUDA ? "CUDA" : "CPU", bs.encoders > 1 ? "s" : "",
                    100.0 * bs.busy_s / (bs.encode_s > 0 ? bs.encode_s : 1e-9));
            if (bs.device_s >= 0)
                fprintf(stderr, ", device %.0f%% per stream", 100.0 * bs.device_s / bs.encoders / (bs.encode_s > 0 ? bs.encode_s : 1e-9));
            fprintf(stderr, " (waited %.1f s for tokens, %.1f s writing shards; %d tokenising threads)\n", bs.wait_s,
                    bs.flush_s, bs.tokenize_threads);
        }
        for (int i = 0; i < n_more; i++) qac_encoder_free(more[i]);
        qac_encoder_free(enc);
        qac_model_free(m);
    }
    if (st) {
        qac_opts_free(&o);
        return qac_cli_fail("index build");
    }
    if (!ps.quiet) fprintf(stderr, "qac index build: %s ready (%.1f s)\n", out, qac_now() - t0);
    qac_opts_free(&o);
    return 0;
}

int qac_cmd_index(int argc, char **argv) {
    if (argc >= 1 && !strcmp(argv[0], "build")) return cmd_build(argc - 1, argv + 1);
    FILE *f = argc >= 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) ? stdout : stderr;
    fprintf(f, "usage: qac index build --corpus FILE | --vectors FILE.npy [--model DIR] --out DIR [options]\n"
               "       (qac index build --help lists the options)\n");
    return f == stdout ? 0 : 2;
}
