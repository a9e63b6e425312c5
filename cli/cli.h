/* Subcommands of the qac CLI. Each takes the arguments after its name and
 * returns the process exit code: 0 success, 1 runtime failure, 2 usage error. */
#ifndef QAC_CLI_H
#define QAC_CLI_H

#include <stdio.h>

#include "qac_config.h"
#include "qac_data.h"
#include "qac_encoder.h"
#include "qac_model.h"
#include "qac_fusion.h"
#include "qac_pair.h"

int qac_cmd_info(int argc, char **argv);
int qac_cmd_tokenize(int argc, char **argv);
int qac_cmd_encode(int argc, char **argv);
int qac_cmd_index(int argc, char **argv);
int qac_cmd_search(int argc, char **argv);
int qac_cmd_bm25(int argc, char **argv);
int qac_cmd_export(int argc, char **argv);
int qac_cmd_eval(int argc, char **argv);
int qac_cmd_serve(int argc, char **argv);
int qac_cmd_pretrain(int argc, char **argv);
int qac_cmd_finetune(int argc, char **argv);
int qac_cmd_mine(int argc, char **argv);
int qac_cmd_hlp(int argc, char **argv);
int qac_cmd_plot(int argc, char **argv);
int qac_cmd_rerank(int argc, char **argv);
int qac_cmd_label(int argc, char **argv);

/* `qac search --server URL`: read queries (qac_data.h format fmt), POST them
 * to URL/search in batches with mode ("dense", "bm25", "hybrid"; NULL: the
 * server's default) and write a TREC run to `out`, identical to offline
 * `qac search` in that mode. api_key may be NULL. max_len > 0: the --max-len
 * the user gave, which the server does not take (a note says so when its
 * own length differs). rerank (NULL: none): the server's /search reranks
 * each query's top rerank_depth with its --reranker, which must be the
 * cross-encoder in that directory (fingerprints compared), and the run
 * holds the top min(k, rerank_depth). Returns an exit code. */
int qac_cli_search_remote(const char *url, const char *api_key, const char *queries_path, qac_text_format fmt,
                          const char *mode, int k, const char *run_id, int max_len, const char *rerank,
                          int rerank_depth, FILE *out);
/* Write one query's hits as TREC run lines the way trec_eval reads them:
 * scores rounded to float, ordered by that float descending, then docid
 * descending; ranks from 1. Local and remote searches write through it. */
qac_status qac_cli_write_hits(FILE *out, const char *qid, qac_hit *hits, int n, const char *run_id);

/* Pairs read from a file (cli/pairs.c): "query<TAB>passage" or JSON
 * {"query", "passage"} a line; "-" reads stdin. */
typedef struct qac_cli_pairs {
    char **a, **b;
    size_t *alen, *blen;
    int n, cap;
} qac_cli_pairs;
qac_status qac_cli_read_pairs(const char *path, qac_cli_pairs *p);
void qac_cli_pairs_free(qac_cli_pairs *p);
/* The pair rows of the commands that assemble pairs ... */
#define QAC_CLI_PAIR_OPTS                                                                                              \
    {"truncation", QAC_OPT_ENUM, "longest_first", 0, -1, "longest_first|only_second|only_first|none", NULL,           \
     "how a pair over the length is cut, as Hugging Face's tokenizers: longest_first takes from the longer text, "    \
     "only_second / only_first from that text alone (an error when it is too short), none refuses it", 0},          \
        {"truncation-side", QAC_OPT_ENUM, "right", 0, -1, "right|left", NULL,                                         \
         "right keeps each text's first tokens, left its last ones", 0}
/* ... read into po (with --max-len). */
qac_status qac_cli_pair_opts(const qac_opts *o, qac_pair_opts *po);

/* Parse options for a command; prints usage on --help (returns -1 → exit 0)
 * and the error plus a hint on bad input (returns 2). 0 means go on. */
int qac_cli_parse(qac_opts *o, const char *cmd, const char *synopsis, const qac_opt *table, int n,
                  int argc, char **argv);
/* Print "qac <cmd>: <qac_last_error()>" to stderr and return 1. */
int qac_cli_fail(const char *cmd);
/* Map --device / --format choices (already validated by the option table). */
qac_device qac_cli_device(const char *name);
qac_text_format qac_cli_format(const char *name);
/* --dtype's value (validated by the option table) as a precision. */
qac_precision qac_cli_dtype(const char *name);
/* When the encoder runs in another precision than asked (int8 without
 * VNNI), say so on stderr: "qac <cmd>: note: ...". */
void qac_cli_encoder_note(const char *cmd, const qac_encoder *e);
/* Resolve --model: the flag's value, or the default model directory. */
const char *qac_cli_model_dir(const qac_opts *o, char *buf, size_t cap);
/* The model to use with an index: the one named (--model, $QAC_MODEL or a
 * config file); else the one the index was built with (recorded: its
 * directory as the index records it, "" or NULL when none), when that
 * directory still holds a model, said on stderr (as "qac CMD: ..."); else
 * the default model. */
const char *qac_cli_model_for_index(const qac_opts *o, const char *cmd, const char *recorded, char *buf,
                                    size_t cap);
/* A training run's --out, checked before the work: a directory (or one to
 * create) that is not some other model's: the run ends by writing its
 * final model there. */
qac_status qac_cli_check_run_dir(const char *out);
/* "1h02m" or "3m05s": the time left of a long run, for progress lines. */
void qac_cli_fmt_eta(char *buf, size_t cap, double seconds);

/* The prompt rows of every command that encodes text: they replace the
 * model's own (config_sentence_transformers.json) query and passage prompts. */
#define QAC_CLI_PROMPT_OPTS                                                                                            \
    {"query-prompt", QAC_OPT_STR, NULL, 0, -1, NULL, "QAC_QUERY_PROMPT",                                            \
     "text put before every query (default: the model's \"query\" prompt; '' for none)", 0},                       \
        {"passage-prompt", QAC_OPT_STR, NULL, 0, -1, NULL, "QAC_PASSAGE_PROMPT",                                    \
         "text put before every passage (default: the model's \"document\", \"passage\" or \"corpus\" prompt; '' " \
         "for none)", 0}
/* Put --query-prompt / --passage-prompt, when given, into m's prompts. */
qac_status qac_cli_apply_prompts(const qac_opts *o, qac_model *m);
/* A prompt for messages: "\"query: \"" or "none" (buf holds cap bytes). */
const char *qac_cli_quote_prompt(char *buf, size_t cap, const char *prompt);
/* How an index is checked at open (qac search, qac mine; qac serve has the same row). */
#define QAC_CLI_VERIFY_OPT                                                                                             \
    {"verify", QAC_OPT_ENUM, "full", 0, -1, "full|size|none", "QAC_VERIFY",                                           \
     "check index.faiss at open: every byte against the manifest's checksum, its size only, or neither (for a "        \
     "manifest without a checksum); the FAISS index's structure is checked in every mode",                            \
     0}

/* Option rows both trainers take (qac finetune, qac pretrain), with the
 * same meaning and defaults: the schedule after --lr ... */
#define QAC_CLI_SCHEDULE_OPTS                                                                                          \
    {"schedule", QAC_OPT_ENUM, "linear", 0, -1, "linear|cosine|constant", NULL, "learning-rate schedule after warmup", 0}, \
        {"warmup-ratio", QAC_OPT_FLOAT, "0.1", 0, 1, NULL, NULL, "warmup as a fraction of the steps", 0},             \
        {"warmup-steps", QAC_OPT_INT, NULL, 0, 1e12, NULL, NULL, "warmup steps (overrides --warmup-ratio)", 0},       \
        {"weight-decay", QAC_OPT_FLOAT, "0.01", 0, 10, NULL, NULL, "AdamW weight decay (not on biases or LayerNorm)", 0}
/* ... dropout and memory ... */
#define QAC_CLI_DROPOUT_OPTS                                                                                           \
    {"dropout", QAC_OPT_FLOAT, "-1", -1, 1, NULL, NULL, "hidden and attention dropout (-1 = the checkpoint's)", 0},  \
        {"recompute", QAC_OPT_BOOL, "false", 0, -1, NULL, NULL, "keep only layer inputs; recompute in backward", 0}
/* ... and where it runs, how it saves and resumes. */
#define QAC_CLI_RUN_OPTS                                                                                               \
    {"threads", QAC_OPT_INT, "0", 0, 1024, NULL, "QAC_THREADS", "CPU threads (0 = all cores)", 0},                   \
        {"device", QAC_OPT_ENUM, "auto", 0, -1, "auto|cpu|cuda", "QAC_DEVICE",                                        \
         "training device (auto = cpu; cuda must be asked for)", 0},                                                  \
        {"train-precision", QAC_OPT_ENUM, "bf16", 0, -1, "bf16|fp32", "QAC_TRAIN_PRECISION",                          \
         "CUDA training: bf16 mixed precision or fp32 throughout", 0},                                                \
        {"save-every", QAC_OPT_INT, "0", 0, 1e12, NULL, NULL, "steps between checkpoints (0 = only at the end)", 0}, \
        {"keep", QAC_OPT_INT, "2", 1, 1e6, NULL, NULL, "checkpoints kept", 0},                                        \
        {"resume", QAC_OPT_BOOL, "false", 0, -1, NULL, NULL, "continue the run in --out from its latest checkpoint", 0}

/* "PREFIX: unknown WHAT 'word' (did you mean 'name'?)" on stderr, then a
 * blank line (the caller prints its usage next). */
void qac_cli_unknown(const char *prefix, const char *what, const char *word, const char *const *names, int n);

#endif
