/* The one configuration table mechanism.
 *
 * A command (or the server) declares a static array of qac_opt rows: name,
 * type, default, bounds, allowed choices and environment variable. The same
 * table parses CLI flags, environment variables and an optional config file,
 * validates every value, and prints --help. Precedence, highest first:
 * command-line flag, environment variable, config file (--config FILE),
 * default.
 *
 * Config file syntax: one `name = value` per line, `#` starts a comment,
 * names are the flag names without dashes. */
#ifndef QAC_CONFIG_H
#define QAC_CONFIG_H

#include <stdio.h>

#include "qac_common.h"

typedef enum qac_opt_type {
    QAC_OPT_INT,
    QAC_OPT_FLOAT,
    QAC_OPT_STR,
    QAC_OPT_BOOL, /* flag alone means true; accepts true/false/1/0/yes/no */
    QAC_OPT_ENUM, /* value must be one of `choices` ("a|b|c") */
    QAC_OPT_LIST  /* repeatable; values are joined with ',' */
} qac_opt_type;

typedef struct qac_opt {
    const char *name;    /* flag name without dashes, e.g. "max-len" */
    qac_opt_type type;
    const char *def;     /* default as text; NULL means unset */
    double min, max;     /* inclusive bounds for INT/FLOAT; ignored if min > max */
    const char *choices; /* ENUM only: "query|passage" */
    const char *env;     /* environment variable, or NULL */
    const char *help;
    int required;        /* error if still unset after parsing */
} qac_opt;

typedef enum qac_opt_source {
    QAC_SRC_UNSET = 0, QAC_SRC_DEFAULT, QAC_SRC_FILE, QAC_SRC_ENV, QAC_SRC_FLAG
} qac_opt_source;

/* Parsed values. Owns copies of every string. */
typedef struct qac_opts {
    const qac_opt *table;
    int n;
    char **values;           /* [n], NULL when unset */
    qac_opt_source *source;  /* [n] */
    char **positional;       /* non-flag arguments, in order */
    int n_positional;
    int help;                /* --help / -h was given */
} qac_opts;

/* Parse argv[0..argc) (argv[0] is NOT skipped: pass the arguments after the
 * subcommand name). `--config FILE` is always accepted. Unknown flags,
 * malformed numbers, out-of-bounds values and bad enum choices are errors
 * naming the flag. Required options are checked unless --help was given. */
qac_status qac_opts_parse(qac_opts *o, const qac_opt *table, int n, int argc, char **argv);
/* Same table, but values come only from a config file, env and defaults
 * (used by the server for reloadable settings and by tests). */
qac_status qac_opts_set(qac_opts *o, const char *name, const char *value, qac_opt_source src);
void qac_opts_free(qac_opts *o);

const char *qac_opts_str(const qac_opts *o, const char *name); /* NULL if unset */
long long qac_opts_int(const qac_opts *o, const char *name);   /* 0 if unset */
double qac_opts_float(const qac_opts *o, const char *name);
int qac_opts_bool(const qac_opts *o, const char *name);
int qac_opts_isset(const qac_opts *o, const char *name);

/* The candidate a mistyped word most likely meant: the closest by edit
 * distance (an adjacent transposition counts one edit), if within 1 edit
 * for words of up to 4 letters, 2 up to 8, 3 beyond; else the longest
 * candidate of 3 letters or more the word begins with; else NULL. Unknown
 * options get it in their message ("did you mean --batch?"). */
const char *qac_closest(const char *word, size_t len, const char *const *cands, int n);

/* Print a usage block: "usage: qac <cmd> <synopsis>" then one line per row
 * with type, default, bounds and env variable. */
void qac_opts_usage(FILE *f, const char *cmd, const char *synopsis, const qac_opt *table, int n);

#endif
