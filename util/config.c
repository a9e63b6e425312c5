#include "qac_config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int find_opt(const qac_opt *t, int n, const char *name, size_t len) {
    for (int i = 0; i < n; i++)
        if (strlen(t[i].name) == len && strncmp(t[i].name, name, len) == 0) return i;
    return -1;
}

/* Edit distance with adjacent transpositions counted as one edit ("biuld"
 * is one from "build"), over at most 64 bytes of each. */
static int edit_distance(const char *a, size_t la, const char *b, size_t lb) {
    enum { MAXLEN = 64 };
    if (la > MAXLEN || lb > MAXLEN) return MAXLEN;
    int d[MAXLEN + 1][MAXLEN + 1];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]), del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            int best = sub < del ? sub : del;
            if (ins < best) best = ins;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb];
}

/* Edits a typo of a word of n letters may hold: 1 up to 4 letters, 2 up to
 * 8, 3 beyond. A word that begins with a candidate of 3 letters or more
 * ("batchsize") means that candidate, the longest such. */
static int typo_edits(size_t n) { return n <= 4 ? 1 : n <= 8 ? 2 : 3; }

const char *qac_closest(const char *word, size_t len, const char *const *cands, int n) {
    const char *best = NULL;
    int best_d = typo_edits(len) + 1;
    for (int i = 0; i < n; i++) {
        int dist = edit_distance(word, len, cands[i], strlen(cands[i]));
        if (dist < best_d) best_d = dist, best = cands[i];
    }
    if (best) return best;
    /* else the longest the word begins with ("batchsize": batch) */
    size_t longest = 2;
    for (int i = 0; i < n; i++) {
        size_t cl = strlen(cands[i]);
        if (cl > longest && cl < len && !strncmp(word, cands[i], cl)) longest = cl, best = cands[i];
    }
    return best;
}

/* " (did you mean --NAME?)" for a mistyped option, or "". */
static const char *option_hint(const qac_opt *t, int n, const char *name, size_t len, char *buf, size_t cap) {
    const char *names[256];
    int k = 0;
    for (int i = 0; i < n && k < 256; i++) names[k++] = t[i].name;
    const char *c = qac_closest(name, len, names, k);
    if (!c) return "";
    snprintf(buf, cap, " (did you mean --%s?)", c);
    return buf;
}

static int parse_bool(const char *v, int *out) {
    static const char *yes[] = {"1", "true", "yes", "on"}, *no[] = {"0", "false", "no", "off"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(v, yes[i]) == 0) { *out = 1; return 1; }
        if (strcasecmp(v, no[i]) == 0) { *out = 0; return 1; }
    }
    return 0;
}

static int choice_ok(const char *choices, const char *v) {
    size_t vl = strlen(v);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l == vl && strncmp(p, v, l) == 0) return 1;
        if (!bar) break;
        p = bar + 1;
    }
    return 0;
}

static const char *source_name(qac_opt_source s) {
    switch (s) {
    case QAC_SRC_FLAG: return "flag --";
    case QAC_SRC_ENV: return "environment for --";
    case QAC_SRC_FILE: return "config file key ";
    default: return "default of --";
    }
}

static qac_status validate(const qac_opt *d, const char *v, qac_opt_source src) {
    const char *where = source_name(src);
    char *end = NULL;
    switch (d->type) {
    case QAC_OPT_INT: {
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (errno || end == v || *end)
            return qac_set_error(QAC_ERR_INVALID, "%s%s: '%s' is not an integer", where, d->name, v);
        if (d->min <= d->max && ((double)x < d->min || (double)x > d->max))
            return qac_set_error(QAC_ERR_INVALID, "%s%s: %lld is outside %.15g..%.15g", where,
                                 d->name, x, d->min, d->max);
        break;
    }
    case QAC_OPT_FLOAT: {
        errno = 0;
        double x = strtod(v, &end);
        if (errno || end == v || *end || !isfinite(x))
            return qac_set_error(QAC_ERR_INVALID, "%s%s: '%s' is not a number", where, d->name, v);
        if (d->min <= d->max && (x < d->min || x > d->max))
            return qac_set_error(QAC_ERR_INVALID, "%s%s: %g is outside %g..%g", where, d->name, x,
                                 d->min, d->max);
        break;
    }
    case QAC_OPT_BOOL: {
        int b;
        if (!parse_bool(v, &b))
            return qac_set_error(QAC_ERR_INVALID, "%s%s: '%s' is not a boolean", where, d->name, v);
        break;
    }
    case QAC_OPT_ENUM:
        if (!choice_ok(d->choices, v))
            return qac_set_error(QAC_ERR_INVALID, "%s%s: '%s' is not one of %s", where, d->name, v,
                                 d->choices);
        break;
    case QAC_OPT_STR:
    case QAC_OPT_LIST:
        break;
    }
    return QAC_OK;
}

qac_status qac_opts_set(qac_opts *o, const char *name, const char *value, qac_opt_source src) {
    int i = find_opt(o->table, o->n, name, strlen(name));
    if (i < 0) {
        char hint[96];
        return qac_set_error(QAC_ERR_INVALID, "unknown option '%s'%s", name,
                             option_hint(o->table, o->n, name, strlen(name), hint, sizeof hint));
    }
    const qac_opt *d = &o->table[i];
    qac_status st = validate(d, value, src);
    if (st) return st;
    /* a higher-precedence source already set it: keep that one */
    if (o->source[i] > src) return QAC_OK;
    char *nv;
    if (d->type == QAC_OPT_LIST && o->values[i] && o->source[i] == src) {
        size_t a = strlen(o->values[i]), b = strlen(value);
        nv = malloc(a + b + 2);
        if (!nv) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        memcpy(nv, o->values[i], a);
        nv[a] = ',';
        memcpy(nv + a + 1, value, b + 1);
    } else {
        nv = strdup(value);
        if (!nv) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    free(o->values[i]);
    o->values[i] = nv;
    o->source[i] = src;
    return QAC_OK;
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
    return s;
}

static qac_status load_file(qac_opts *o, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return qac_set_error(QAC_ERR_IO, "config file %s: %s", path, strerror(errno));
    char line[4096];
    int lineno = 0;
    qac_status st = QAC_OK;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char *s = trim(line);
        if (!*s) continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            st = qac_set_error(QAC_ERR_FORMAT, "%s:%d: expected 'name = value'", path, lineno);
            break;
        }
        *eq = '\0';
        char *k = trim(s), *v = trim(eq + 1);
        if (find_opt(o->table, o->n, k, strlen(k)) < 0) {
            char hint[96];
            st = qac_set_error(QAC_ERR_INVALID, "%s:%d: unknown option '%s'%s", path, lineno, k,
                               option_hint(o->table, o->n, k, strlen(k), hint, sizeof hint));
            break;
        }
        if ((st = qac_opts_set(o, k, v, QAC_SRC_FILE))) {
            qac_wrap_error(st, "%s:%d", path, lineno);
            break;
        }
    }
    fclose(f);
    return st;
}

qac_status qac_opts_parse(qac_opts *o, const qac_opt *table, int n, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    o->table = table;
    o->n = n;
    o->values = calloc((size_t)n + 1, sizeof *o->values);
    o->source = calloc((size_t)n + 1, sizeof *o->source);
    o->positional = calloc((size_t)argc + 1, sizeof *o->positional);
    if (!o->values || !o->source || !o->positional)
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    qac_status st;
    const char *config_path = NULL;
    int only_positional = 0;
    for (int a = 0; a < argc; a++) {
        char *arg = argv[a];
        if (only_positional || arg[0] != '-' || arg[1] == '\0') {
            o->positional[o->n_positional++] = arg;
            continue;
        }
        if (strcmp(arg, "--") == 0) { only_positional = 1; continue; }
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) { o->help = 1; continue; }
        const char *name = arg + (arg[1] == '-' ? 2 : 1);
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        if (len == 6 && strncmp(name, "config", 6) == 0) {
            if (eq) config_path = eq + 1;
            else if (a + 1 < argc) config_path = argv[++a];
            else return qac_set_error(QAC_ERR_INVALID, "--config needs a file");
            continue;
        }
        int i = find_opt(table, n, name, len);
        /* --no-NAME turns a boolean off */
        if (i < 0 && len > 3 && !strncmp(name, "no-", 3)) {
            int j = find_opt(table, n, name + 3, len - 3);
            if (j >= 0 && table[j].type == QAC_OPT_BOOL) {
                if (eq) return qac_set_error(QAC_ERR_INVALID, "--no-%s takes no value", table[j].name);
                if ((st = qac_opts_set(o, table[j].name, "false", QAC_SRC_FLAG))) return st;
                continue;
            }
        }
        if (i < 0) {
            char hint[96];
            return qac_set_error(QAC_ERR_INVALID, "unknown option '%.*s'%s", (int)(name - arg + len), arg,
                                 option_hint(table, n, name, len, hint, sizeof hint));
        }
        const char *val;
        if (eq) val = eq + 1;
        else if (table[i].type == QAC_OPT_BOOL) {
            int b;
            if (a + 1 < argc && parse_bool(argv[a + 1], &b)) val = argv[++a];
            else val = "true";
        } else if (a + 1 < argc) val = argv[++a];
        else return qac_set_error(QAC_ERR_INVALID, "option --%s needs a value", table[i].name);
        if ((st = qac_opts_set(o, table[i].name, val, QAC_SRC_FLAG))) return st;
    }
    for (int i = 0; i < n; i++) {
        const char *ev = table[i].env ? getenv(table[i].env) : NULL;
        if (ev && *ev) {
            if ((st = qac_opts_set(o, table[i].name, ev, QAC_SRC_ENV)))
                return qac_wrap_error(st, "%s", table[i].env);
        }
    }
    if (config_path && (st = load_file(o, config_path))) return st;
    for (int i = 0; i < n; i++) {
        if (!o->values[i] && table[i].def && (st = qac_opts_set(o, table[i].name, table[i].def, QAC_SRC_DEFAULT)))
            return qac_wrap_error(QAC_ERR_INTERNAL, "bad default for --%s", table[i].name);
        if (!o->help && table[i].required && !o->values[i])
            return qac_set_error(QAC_ERR_INVALID, "missing required option --%s", table[i].name);
    }
    return QAC_OK;
}

void qac_opts_free(qac_opts *o) {
    if (!o) return;
    if (o->values)
        for (int i = 0; i < o->n; i++) free(o->values[i]);
    free(o->values);
    free(o->source);
    free(o->positional);
    memset(o, 0, sizeof *o);
}

static const char *get(const qac_opts *o, const char *name) {
    int i = find_opt(o->table, o->n, name, strlen(name));
    return i < 0 ? NULL : o->values[i];
}

const char *qac_opts_str(const qac_opts *o, const char *name) { return get(o, name); }
int qac_opts_isset(const qac_opts *o, const char *name) { return get(o, name) != NULL; }

long long qac_opts_int(const qac_opts *o, const char *name) {
    const char *v = get(o, name);
    return v ? strtoll(v, NULL, 10) : 0;
}

double qac_opts_float(const qac_opts *o, const char *name) {
    const char *v = get(o, name);
    return v ? strtod(v, NULL) : 0.0;
}

int qac_opts_bool(const qac_opts *o, const char *name) {
    const char *v = get(o, name);
    int b = 0;
    return v && parse_bool(v, &b) ? b : 0;
}

/* Write text from column `col`, wrapped at QAC_HELP_WIDTH with later lines
 * starting at column `indent`; words longer than a line are not cut. */
#define QAC_HELP_WIDTH 100
static void put_wrapped(FILE *f, const char *text, int col, int indent) {
    for (const char *p = text; *p;) {
        while (*p == ' ') p++;
        size_t w = strcspn(p, " \n");
        if (!w && !*p) break;
        if (col > indent && col + 1 + (int)w > QAC_HELP_WIDTH) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
        } else if (col > indent) {
            fputc(' ', f);
            col++;
        }
        fwrite(p, 1, w, f);
        col += (int)w;
        p += w;
        if (*p == '\n') { /* a line break the text asks for */
            fprintf(f, "\n%*s", indent, "");
            col = indent;
            p++;
        }
    }
    fputc('\n', f);
}

void qac_opts_usage(FILE *f, const char *cmd, const char *synopsis, const qac_opt *t, int n) {
    static const char *type_names[] = {"INT", "NUM", "STR", "", "", "STR"};
    enum { LEFT = 32 }; /* descriptions start here */
    char head[256];
    int hl = snprintf(head, sizeof head, "usage: qac %s ", cmd);
    fputs(head, f);
    put_wrapped(f, synopsis ? synopsis : "[options]", hl, hl);
    fprintf(f, "\noptions:\n");
    int have_bool = 0;
    for (int i = 0; i < n; i++) {
        char left[160], desc[1024] = "";
        size_t dl = 0;
        const char *ty = t[i].type == QAC_OPT_ENUM ? t[i].choices : type_names[t[i].type];
        have_bool |= t[i].type == QAC_OPT_BOOL;
        /* one-letter names take one dash or two: trec_eval's -m, and --k */
        if (t[i].name[1]) snprintf(left, sizeof left, "  --%s%s%s", t[i].name, *ty ? " " : "", ty);
        else snprintf(left, sizeof left, "  -%s, --%s%s%s", t[i].name, t[i].name, *ty ? " " : "", ty);
#define ADD(...) dl += (size_t)snprintf(desc + dl, dl < sizeof desc ? sizeof desc - dl : 0, __VA_ARGS__)
        ADD("%s", t[i].help ? t[i].help : "");
        if (t[i].required) ADD(" (required)");
        if (t[i].def) ADD(" [default: %s]", t[i].def);
        if (t[i].type == QAC_OPT_INT && t[i].min <= t[i].max) ADD(" [%.0f..%.0f]", t[i].min, t[i].max);
        else if (t[i].type == QAC_OPT_FLOAT && t[i].min <= t[i].max) ADD(" [%g..%g]", t[i].min, t[i].max);
        if (t[i].env) ADD(" [env: %s]", t[i].env);
#undef ADD
        int ll = (int)strlen(left);
        fputs(left, f);
        if (ll + 1 >= LEFT) { /* a long flag: its description on the next line */
            fprintf(f, "\n%*s", LEFT, "");
            ll = LEFT;
        }
        fprintf(f, "%*s", LEFT - ll, "");
        put_wrapped(f, desc, LEFT, LEFT);
    }
    fprintf(f, "  %-*s", LEFT - 2, "--config FILE");
    put_wrapped(f, "read 'name = value' lines (flags and env win)", LEFT, LEFT);
    if (have_bool)
        fprintf(f, "\nA boolean is turned on by --NAME (or --NAME=true) and off by --no-NAME (or --NAME=false).\n");
}
