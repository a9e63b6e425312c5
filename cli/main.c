#include <stdio.h>
#include <string.h>

#include "cli.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"info", qac_cmd_info, "describe a model directory: config, parameters, pooling, tokenizer"},
    {"tokenize", qac_cmd_tokenize, "print token ids for texts"},
    {"encode", qac_cmd_encode, "embed a TSV/JSONL file into a matrix (.qmat or .npy)"},
    {"index", qac_cmd_index, "build (resumably) a FAISS index over a corpus, or merge parts encoded by many workers"},
    {"search", qac_cmd_search, "search a queries file against an index, write a TREC run"},
    {"export", qac_cmd_export, "load an index into PostgreSQL + pgvector (binary COPY, then HNSW or IVFFlat)"},
    {"bm25", qac_cmd_bm25, "build or search a BM25 inverted index"},
    {"eval", qac_cmd_eval, "score a TREC run against qrels, trec_eval-compatible"},
    {"serve", qac_cmd_serve, "run the HTTP search service"},
    {"pretrain", qac_cmd_pretrain, "continue pre-training an encoder (coCondenser, CoT-MAE; query-as-context)"},
    {"finetune", qac_cmd_finetune, "fine-tune a retriever on query/positive/negative groups (Tevatron)"},
    {"rerank", qac_cmd_rerank, "rerank a run (or score query/passage pairs) with a cross-encoder"},
    {"label", qac_cmd_label, "pseudo-label a run's candidates with a cross-encoder teacher (PAIR) into Tevatron jsonl"},
    {"mine", qac_cmd_mine, "mine hard negatives from a run or a model and index into Tevatron jsonl"},
    {"hlp", qac_cmd_hlp, "mine dual-link and co-mention pairs from a link graph into pre-training jsonl"},
    {"plot", qac_cmd_plot, "draw loss and learning rate of a training log.jsonl as PNG"},
};
#define N_COMMANDS (int)(sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
    fprintf(f, "qac %s: dense passage retrieval\n\nusage: qac <command> [options]   (qac <command> --help)\n\n",
            QAC_VERSION_STRING);
    for (int i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
}

#ifdef QAC_HAVE_CUDA
#define QAC_BUILT_WITH_CUDA 1
#else
#define QAC_BUILT_WITH_CUDA 0
#endif

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        /* the build and the machine, said apart: /metrics' qac_build_info{cuda} is the first,
         * qac_cuda_gpu_available the second */
        printf("qac %s (%s)\n", QAC_VERSION_STRING,
               !QAC_BUILT_WITH_CUDA ? "CUDA not compiled in: CPU only"
               : qac_cuda_available() ? "CUDA compiled in, a usable GPU found"
                                      : "CUDA compiled in, no usable GPU: CPU only");
        return 0;
    }
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(cmd, commands[i].name)) return commands[i].run(argc - 2, argv + 2);
    const char *names[N_COMMANDS];
    for (int i = 0; i < N_COMMANDS; i++) names[i] = commands[i].name;
    qac_cli_unknown("qac", "command", cmd, names, N_COMMANDS);
    usage(stderr);
    return 2;
}
