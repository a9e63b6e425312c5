/* qac tokenize: print the token ids (or tokens) of texts, one line each. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "qac_tokenizer.h"
#include "qac_util.h"

static const qac_opt tokenize_opts[] = {
    {"model", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "model directory (default: the installed default model)", 0},
    {"max-len", QAC_OPT_INT, "0", 0, 1000000, NULL, NULL,
     "truncate to this many tokens, specials included; 0: no truncation", 0},
    {"special-tokens", QAC_OPT_BOOL, "true", 0, -1, NULL, NULL,
     "add the model's special tokens ([CLS] ... [SEP], <s> ... </s>) as the server's /tokenize does "
     "(add_special_tokens); --no-special-tokens: the text's tokens alone", 0},
    {"tokens", QAC_OPT_BOOL, "false", 0, -1, NULL, NULL, "print token strings instead of ids", 0},
    {"pair", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "second segment: encode each text as the pair (text, TEXT_B)", 0},
    {"input", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "read one text per line from FILE ('-' for stdin)", 0},
    {"pairs", QAC_OPT_STR, NULL, 0, -1, NULL, NULL,
     "encode pairs as a cross-encoder reads them, in the tokenizer's pair template ([CLS] a [SEP] b [SEP]; "
     "<s> a </s></s> b </s> for RoBERTa and XLM-R): query<TAB>passage or JSON "
     "{\"query\",\"passage\"} a line ('-' for stdin); cut by --truncation at --max-len", 0},
    QAC_CLI_PAIR_OPTS,
    {"type-ids", QAC_OPT_BOOL, "false", 0, -1, NULL, NULL,
     "with --pairs: after the ids a tab and the token type ids (BERT: 0 over [CLS] a [SEP], 1 over b [SEP]; "
     "RoBERTa, XLM-R: all 0)", 0},
};
#define N_OPTS (int)(sizeof tokenize_opts / sizeof tokenize_opts[0])

typedef struct tok_job {
    const qac_tokenizer *t;
    int max_len, tokens, specials;
    const char *pair;
    int32_t *ids;
    int cap;
} tok_job;

static int print_one(tok_job *j, const char *text, size_t len) {
    int n = 0;
    qac_status st = QAC_OK;
    for (;;) {
        if (j->pair) {
            int ml = j->max_len;
            if (!ml) { /* no limit: room for both segments in full */
                int na = 0, nb = 0;
                if ((st = qac_tokenizer_tokenize(j->t, text, len, NULL, 0, &na)) ||
                    (st = qac_tokenizer_tokenize(j->t, j->pair, strlen(j->pair), NULL, 0, &nb)))
                    return qac_cli_fail("tokenize");
                ml = na + nb + qac_tokenizer_num_special(j->t, 1);
            }
            if (ml > j->cap) n = ml;
            else st = qac_tokenizer_encode_pair(j->t, text, len, j->pair, strlen(j->pair), ml, j->ids, NULL, &n);
        } else if (j->specials) {
            int ml = j->max_len;
            if (!ml) { /* no limit: room for the whole text */
                if ((st = qac_tokenizer_tokenize(j->t, text, len, NULL, 0, &ml))) return qac_cli_fail("tokenize");
                ml += qac_tokenizer_num_special(j->t, 0);
            }
            if (ml > j->cap) n = ml;
            else st = qac_tokenizer_encode(j->t, text, len, ml, j->ids, &n);
        } else {
            st = qac_tokenizer_tokenize(j->t, text, len, j->ids, j->cap, &n);
            if (!st && n <= j->cap && j->max_len && n > j->max_len) n = j->max_len;
        }
        if (n <= j->cap) break;
        int32_t *bigger = realloc(j->ids, (size_t)n * sizeof *bigger);
        if (!bigger) {
            fprintf(stderr, "qac tokenize: out of memory\n");
            return 1;
        }
        j->ids = bigger;
        j->cap = n;
    }
    if (st) return qac_cli_fail("tokenize");
    for (int i = 0; i < n; i++) {
        if (i) putchar(' ');
        if (j->tokens) {
            const char *s = qac_tokenizer_id_to_token(j->t, j->ids[i]);
            fputs(s ? s : "?", stdout);
        } else {
            printf("%d", j->ids[i]);
        }
    }
    putchar('\n');
    return 0;
}

/* --pairs: every pair of the file, ids (and types) a line */
static int print_pairs(const qac_tokenizer *t, const qac_opts *o, const char *path) {
    qac_pair_opts po;
    qac_cli_pairs p;
    if (qac_cli_pair_opts(o, &po) || qac_cli_read_pairs(path, &p)) return qac_cli_fail("tokenize");
    int types_too = qac_opts_bool(o, "type-ids"), rc = 0, cap = 0;
    int specials = qac_pair_specials_of(t);
    int32_t *ids = NULL, *types = NULL;
    for (int i = 0; i < p.n && !rc; i++) {
        int na = 0, nb = 0, n = 0;
        if (qac_tokenizer_tokenize(t, p.a[i], p.alen[i], NULL, 0, &na) ||
            qac_tokenizer_tokenize(t, p.b[i], p.blen[i], NULL, 0, &nb)) {
            rc = qac_cli_fail("tokenize");
            break;
        }
        qac_pair_opts pi = po;
        if (!pi.max_len) pi.max_len = na + nb + specials; /* no limit: room for both */
        if (pi.max_len > cap) {
            cap = pi.max_len;
            int32_t *a = realloc(ids, (size_t)cap * sizeof *a), *b = a ? realloc(types, (size_t)cap * sizeof *b) : NULL;
            if (a) ids = a;
            if (b) types = b;
            if (!a || !b) {
                fprintf(stderr, "qac tokenize: out of memory\n");
                rc = 1;
                break;
            }
        }
        if (qac_pair_encode(t, p.a[i], p.alen[i], p.b[i], p.blen[i], &pi, ids, types, &n, NULL)) {
            rc = qac_cli_fail("tokenize");
            break;
        }
        for (int k = 0; k < n; k++) printf(k ? " %d" : "%d", ids[k]);
        if (types_too)
            for (int k = 0; k < n; k++) printf(k ? " %d" : "\t%d", types[k]);
        putchar('\n');
    }
    if (!rc && fflush(stdout) != 0) rc = 1;
    free(ids), free(types);
    qac_cli_pairs_free(&p);
    return rc;
}

int qac_cmd_tokenize(int argc, char **argv) {
    qac_opts o;
    int rc = qac_cli_parse(&o, "tokenize",
                           "[--model DIR] [--max-len N] [--no-special-tokens] [--tokens] [--pair TEXT_B] [--input FILE] "
                           "[TEXT ...] | --pairs FILE [--truncation S] [--type-ids]",
                           tokenize_opts, N_OPTS, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    tok_job j = {.max_len = (int)qac_opts_int(&o, "max-len"), .tokens = qac_opts_bool(&o, "tokens"),
                 .specials = qac_opts_bool(&o, "special-tokens"), .pair = qac_opts_str(&o, "pair"), .cap = 1024};
    if (j.pair && !j.specials) {
        fprintf(stderr, "qac tokenize: --pair always has its special tokens (drop --no-special-tokens)\n");
        qac_opts_free(&o);
        return 2;
    }
    const char *input = qac_opts_str(&o, "input"), *pairs = qac_opts_str(&o, "pairs");
    if (pairs && (input || o.n_positional || j.pair || j.tokens || !j.specials)) {
        fprintf(stderr, "qac tokenize: --pairs takes no texts, --input, --pair, --tokens or --no-special-tokens\n");
        qac_opts_free(&o);
        return 2;
    }
    if (j.specials && (j.max_len == 1 || (j.pair && j.max_len == 2))) {
        fprintf(stderr, "qac tokenize: --max-len must be 0 or at least %d\n", j.pair ? 3 : 2);
        qac_opts_free(&o);
        return 2;
    }
    if (!input && !pairs && o.n_positional == 0) {
        fprintf(stderr, "qac tokenize: give texts or --input FILE (see 'qac tokenize --help')\n");
        qac_opts_free(&o);
        return 2;
    }
    char dirbuf[4096];
    const char *dir = qac_cli_model_dir(&o, dirbuf, sizeof dirbuf);
    qac_tokenizer *t = NULL;
    if (!dir || qac_tokenizer_load(&t, dir) != QAC_OK) {
        qac_opts_free(&o);
        return qac_cli_fail("tokenize");
    }
    if (pairs) {
        rc = print_pairs(t, &o, pairs);
        qac_tokenizer_free(t);
        qac_opts_free(&o);
        return rc;
    }
    j.t = t;
    j.ids = malloc((size_t)j.cap * sizeof *j.ids);
    rc = j.ids ? 0 : 1;
    for (int i = 0; i < o.n_positional && !rc; i++) rc = print_one(&j, o.positional[i], strlen(o.positional[i]));
    if (input && !rc) {
        FILE *f = stdin;
        if (strcmp(input, "-") && qac_open_text_input(&f, input)) {
            rc = qac_cli_fail("tokenize");
        } else {
            char *line = NULL;
            size_t lcap = 0;
            ssize_t len;
            while (!rc && (len = getline(&line, &lcap, f)) >= 0) {
                if (len && line[len - 1] == '\n') len--;
                rc = print_one(&j, line, (size_t)len);
            }
            free(line);
            if (f != stdin) fclose(f);
        }
    }
    if (fflush(stdout) != 0) rc = 1;
    free(j.ids);
    qac_tokenizer_free(t);
    qac_opts_free(&o);
    return rc;
}
