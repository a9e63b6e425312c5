/* Prints what the pre-training data module holds and draws, as JSON lines,
 * for test_ptdata.py to check against the HF tokenizer and the rules.
 *   pt_tool dump MODEL DATA DOCS|- MAXLEN QMAX
 *       one line per record (and per document of DOCS), then the stats
 *   pt_tool draw MODEL DATA DOCS|- MAXLEN QMAX SEED B STEP0 STEP1 SPANPROB
 *       one line per pair of steps [STEP0, STEP1), then the stats
 *   pt_tool prob CONTEXT CURRICULUM TOTAL
 *       "step span_prob lr_scale" per step (CONTEXT/CURRICULUM "-": none)
 * MODEL "-" is the default model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qac_pretrain.h"

static void ids(const char *name, const int32_t *v, int n) {
    printf("\"%s\":[", name);
    for (int i = 0; i < n; i++) printf(i ? ",%d" : "%d", v[i]);
    printf("]");
}

static void ints(const char *name, const int *v, int n) {
    printf("\"%s\":[", name);
    for (int i = 0; i < n; i++) printf(i ? ",%d" : "%d", v[i]);
    printf("]");
}

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static void stats(const qac_pt_data *d) {
    qac_pt_data_stats s;
    qac_pt_data_stats_get(d, &s);
    printf("{\"stats\":{\"records\":%ld,\"skipped_no_text\":%ld,\"no_queries\":%ld,\"queries\":%ld,"
           "\"span_docs\":%ld,\"span_multi\":%ld,\"span_split_sentence\":%ld,\"span_split_word\":%ld,"
           "\"span_self\":%ld,\"forced_cuts\":%ld,\"drawn_query\":%ld,\"drawn_span\":%ld,\"query_fallback\":%ld,"
           "\"count\":%ld}}\n",
           s.records, s.skipped_no_text, s.no_queries, s.queries, s.span_docs, s.span_multi, s.span_split_sentence,
           s.span_split_word, s.span_self, s.forced_cuts, s.drawn_query, s.drawn_span, s.query_fallback,
           qac_pt_data_count(d));
}

static void dump_doc(const qac_pt_data *d, qac_pt_kind kind, long i) {
    const char *id;
    const int32_t *tok;
    const int *sent, *span;
    int ntok, nsent, nspan;
    qac_pt_data_doc(d, kind, i, &id, &tok, &ntok, &sent, &nsent, &span, &nspan);
    printf("{\"file\":\"%s\",\"i\":%ld,\"id\":", kind == QAC_PT_SPAN ? "docs" : "records", i);
    json_str(id);
    printf(",");
    ids("tok", tok, ntok);
    printf(",");
    ints("sent", sent, nsent + 1);
    printf(",");
    ints("span", span, nspan + 1);
    if (kind == QAC_PT_QUERY) {
        printf(",\"q\":[");
        for (int q = 0; q < qac_pt_data_nqueries(d, i); q++) {
            const int32_t *qt;
            int n;
            qac_pt_data_query(d, i, q, &qt, &n);
            printf(q ? ",[" : "[");
            for (int k = 0; k < n; k++) printf(k ? ",%d" : "%d", qt[k]);
            printf("]");
        }
        printf("]");
    }
    printf("}\n");
}

static int die(const char *what) {
    fprintf(stderr, "pt_tool: %s: %s\n", what, qac_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "prob")) {
        qac_pt_context c;
        if (qac_pt_context_parse(&c, strcmp(argv[2], "-") ? argv[2] : NULL, strcmp(argv[3], "-") ? argv[3] : NULL))
            return die("context");
        long total = atol(argv[4]);
        printf("mode %d frac %.17g span_steps %ld\n", (int)c.mode, c.span_frac, qac_pt_span_steps(&c, total));
        for (long s = 0; s < total; s++)
            printf("%ld %.17g %.17g\n", s, qac_pt_span_prob(&c, s, total), qac_pt_lr_scale(&c, s, total, 0.1));
        return 0;
    }
    int dump = argc == 7 && !strcmp(argv[1], "dump"), draw = argc == 12 && !strcmp(argv[1], "draw");
    if (!dump && !draw) {
        fprintf(stderr, "usage: pt_tool dump MODEL DATA DOCS|- MAXLEN QMAX\n"
                        "       pt_tool draw MODEL DATA DOCS|- MAXLEN QMAX SEED B STEP0 STEP1 SPANPROB\n"
                        "       pt_tool prob CONTEXT CURRICULUM TOTAL\n");
        return 2;
    }
    char model[4096];
    if (!strcmp(argv[2], "-")) {
        if (qac_default_model_dir(model, sizeof model)) return die("model");
    } else {
        snprintf(model, sizeof model, "%s", argv[2]);
    }
    qac_tokenizer *tok;
    if (qac_tokenizer_load(&tok, model)) return die("tokenizer");
    qac_pt_data_opts o;
    qac_pt_data_opts_default(&o);
    o.path = argv[3];
    o.docs_path = strcmp(argv[4], "-") ? argv[4] : NULL;
    o.max_len = atoi(argv[5]);
    o.query_max_len = atoi(argv[6]);
    o.threads = 2;
    qac_pt_data *d;
    if (qac_pt_data_open(&d, &o, tok)) {
        qac_tokenizer_free(tok);
        return die("open");
    }
    if (dump) {
        for (long i = 0; i < qac_pt_data_count(d); i++) dump_doc(d, QAC_PT_QUERY, i);
        if (o.docs_path) {
            qac_pt_data_stats s;
            qac_pt_data_stats_get(d, &s);
            for (long i = 0; i < s.span_docs; i++) dump_doc(d, QAC_PT_SPAN, i);
        }
    } else {
        uint64_t seed = strtoull(argv[7], NULL, 10);
        int B = atoi(argv[8]);
        long s0 = atol(argv[9]), s1 = atol(argv[10]);
        double p = atof(argv[11]);
        qac_pt_pair *pairs = malloc((size_t)B * sizeof *pairs);
        for (long s = s0; s < s1; s++) {
            if (qac_pt_data_batch(d, pairs, B, s, p, seed)) return die("batch");
            for (int i = 0; i < B; i++) {
                printf("{\"step\":%ld,\"slot\":%d,\"doc\":%ld,\"kind\":%d,", s, i, pairs[i].doc, (int)pairs[i].kind);
                ids("a", pairs[i].a, pairs[i].a_len);
                printf(",");
                ids("b", pairs[i].b, pairs[i].b_len);
                printf("}\n");
            }
        }
        free(pairs);
    }
    stats(d);
    qac_pt_data_free(d);
    qac_tokenizer_free(tok);
    return 0;
}
