#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "qac_cpu.h"
#include "qac_model.h"
#include "qac_util.h"

int qac_cli_parse(qac_opts *o, const char *cmd, const char *synopsis, const qac_opt *table, int n,
                  int argc, char **argv) {
    if (qac_opts_parse(o, table, n, argc, argv) != QAC_OK) {
        fprintf(stderr, "qac %s: %s\n(see 'qac %s --help')\n", cmd, qac_last_error(), cmd);
        qac_opts_free(o);
        return 2;
    }
    if (o->help) {
        qac_opts_usage(stdout, cmd, synopsis, table, n);
        qac_opts_free(o);
        return -1;
    }
    /* a table with the cpu-isa row picks the kernels' path before any runs */
    for (int i = 0; i < n; i++)
        if (!strcmp(table[i].name, "cpu-isa") && qac_cpu_isa_select(qac_opts_str(o, "cpu-isa")) != QAC_OK) {
            fprintf(stderr, "qac %s: --cpu-isa (or QAC_CPU_ISA): %s\n", cmd, qac_last_error());
            qac_opts_free(o);
            return 2;
        }
    return 0;
}

int qac_cli_fail(const char *cmd) {
    qac_progress_newline();
    fprintf(stderr, "qac %s: %s\n", cmd, qac_last_error());
    return 1;
}

const char *qac_cli_model_dir(const qac_opts *o, char *buf, size_t cap) {
    const char *m = qac_opts_str(o, "model");
    if (!m) return qac_default_model_dir(buf, cap) == QAC_OK ? buf : NULL;
    char note[4096 + 512];
    if (qac_model_resolve(m, buf, cap, note, sizeof note)) return NULL;
    /* which model runs is never left to guess, quiet or not */
    if (note[0]) fprintf(stderr, "qac: %s\n", note);
    return buf;
}

const char *qac_cli_model_for_index(const qac_opts *o, const char *cmd, const char *recorded, char *buf,
                                    size_t cap) {
    if (qac_opts_isset(o, "model") || !recorded || !*recorded) return qac_cli_model_dir(o, buf, cap);
    char cfg[4096], a[PATH_MAX], b[PATH_MAX];
    /* moved or deleted since the build: the default, which the model check then names */
    if (qac_path_join(cfg, sizeof cfg, recorded, "config.json") || access(cfg, R_OK) != 0)
        return qac_cli_model_dir(o, buf, cap);
    if (qac_default_model_dir(buf, cap) == QAC_OK && realpath(buf, a) && realpath(recorded, b) && !strcmp(a, b))
        return buf; /* the default model itself: nothing to say */
    qac_clear_error();
    snprintf(buf, cap, "%s", recorded);
    /* which model runs is never left to guess, quiet or not */
    fprintf(stderr, "qac %s: the model the index was built with: %s (--model to choose another)\n", cmd, recorded);
    return buf;
}

qac_device qac_cli_device(const char *name) {
    if (name && !strcmp(name, "cpu")) return QAC_DEVICE_CPU;
    if (name && !strcmp(name, "cuda")) return QAC_DEVICE_CUDA;
    return QAC_DEVICE_AUTO;
}

qac_precision qac_cli_dtype(const char *name) {
    qac_precision p = QAC_PREC_FP32;
    if (qac_precision_parse(name, &p)) qac_clear_error(); /* the option table took only valid names */
    return p;
}

void qac_cli_encoder_note(const char *cmd, const qac_encoder *e) {
    if (e && qac_encoder_cpu_note(e)) fprintf(stderr, "qac %s: note: %s\n", cmd, qac_encoder_cpu_note(e));
}

qac_text_format qac_cli_format(const char *name) {
    static const char *names[] = {"auto", "tsv", "beir", "tevatron", "cranfield"};
    for (int i = 0; name && i < 5; i++)
        if (!strcmp(name, names[i])) return (qac_text_format)i;
    return QAC_FMT_AUTO;
}

void qac_cli_fmt_eta(char *buf, size_t cap, double s) {
    if (s >= 3600) snprintf(buf, cap, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
    else snprintf(buf, cap, "%dm%02ds", (int)(s / 60), (int)s % 60);
}

qac_status qac_cli_apply_prompts(const qac_opts *o, qac_model *m) {
    return qac_model_override_prompts(m, qac_opts_str(o, "query-prompt"), qac_opts_str(o, "passage-prompt"));
}

const char *qac_cli_quote_prompt(char *buf, size_t cap, const char *prompt) {
    if (!prompt || !*prompt) snprintf(buf, cap, "none");
    else snprintf(buf, cap, "\"%s\"", prompt);
    return buf;
}

qac_status qac_cli_check_run_dir(const char *out) {
    qac_status st = qac_check_output_dir(out);
    char cfg[4096], latest[4096];
    if (st || qac_path_join(cfg, sizeof cfg, out, "config.json") || qac_path_join(latest, sizeof latest, out, "latest"))
        return st ? st : qac_set_error(QAC_ERR_INVALID, "path too long: %s", out);
    if (access(cfg, F_OK) == 0 && access(latest, F_OK) != 0)
        return qac_set_error(QAC_ERR_INVALID,
                             "%s holds a model that no training run wrote: the run's final model would replace it; "
                             "choose another --out",
                             out);
    return QAC_OK;
}

static int hit_float_cmp(const void *a, const void *b) {
    const qac_hit *x = a, *y = b;
    float fx = (float)x->score, fy = (float)y->score;
    if (fx != fy) return fx > fy ? -1 : 1;
    return -strcmp(x->docid, y->docid);
}

qac_status qac_cli_write_hits(FILE *out, const char *qid, qac_hit *hits, int n, const char *run_id) {
    /* hybrid scores are doubles: two may round to one float, which trec_eval then orders by docid */
    qsort(hits, (size_t)n, sizeof *hits, hit_float_cmp);
    const char **docids = malloc(((size_t)n + 1) * sizeof *docids);
    float *scores = malloc(((size_t)n + 1) * sizeof *scores);
    qac_status st = QAC_OK;
    if (!docids || !scores) st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n && !st; i++) {
        docids[i] = hits[i].docid;
        scores[i] = (float)hits[i].score;
    }
    if (!st) st = qac_run_write(out, qid, docids, scores, n, run_id);
    free(docids);
    free(scores);
    return st;
}

void qac_cli_unknown(const char *prefix, const char *what, const char *word, const char *const *names, int n) {
    const char *guess = qac_closest(word, strlen(word), names, n);
    if (guess) fprintf(stderr, "%s: unknown %s '%s' (did you mean '%s'?)\n\n", prefix, what, word, guess);
    else fprintf(stderr, "%s: unknown %s '%s'\n\n", prefix, what, word);
}
