/* Subcommands of the qac CLI. Each takes the arguments after its name and
 * returns the process exit code: 0 success, 1 runtime failure, 2 usage error. */
#ifndef QAC_CLI_H
#define QAC_CLI_H

#include <stdio.h>

#include "qac_config.h"
#include "qac_data.h"

int qac_cmd_info(int argc, char **argv);
int qac_cmd_tokenize(int argc, char **argv);
int qac_cmd_encode(int argc, char **argv);
int qac_cmd_index(int argc, char **argv);
int qac_cmd_search(int argc, char **argv);
int qac_cmd_bm25(int argc, char **argv);
int qac_cmd_eval(int argc, char **argv);
int qac_cmd_serve(int argc, char **argv);
int qac_cmd_finetune(int argc, char **argv);
int qac_cmd_mine(int argc, char **argv);
int qac_cmd_hlp(int argc, char **argv);
int qac_cmd_plot(int argc, char **argv);

/* `qac search --server URL`: read queries (any qac_data.h format), POST them
 * to URL/search in batches and write a TREC run to `out`, identical to
 * offline `qac search`. api_key may be NULL. Returns an exit code. */
int qac_cli_search_remote(const char *url, const char *api_key, const char *queries_path, int k,
                          const char *run_id, FILE *out);

/* Parse options for a command; prints usage on --help (returns -1 → exit 0)
 * and the error plus a hint on bad input (returns 2). 0 means go on. */
int qac_cli_parse(qac_opts *o, const char *cmd, const char *synopsis, const qac_opt *table, int n,
                  int argc, char **argv);
/* Print "qac <cmd>: <qac_last_error()>" to stderr and return 1. */
int qac_cli_fail(const char *cmd);
/* Map --device / --format choices (already validated by the option table). */
qac_device qac_cli_device(const char *name);
qac_text_format qac_cli_format(const char *name);
/* Resolve --model: the flag's value, or the default model directory. */
const char *qac_cli_model_dir(const qac_opts *o, char *buf, size_t cap);

#endif
