/* qac side of bench/encode_cpu: encode the first N Cranfield documents and
 * print one line "qac <model> max_len=<n> passages=<n> seconds=<s>
 * passages_per_s=<r> peak_rss_mib=<m> cpu_passages_per_s=<c>" (c: per
 * second of process CPU time). Usage:
 *   qac_bench_encode CRAN_FILE MODEL_DIR|bertbase MAX_LEN N THREADS [BATCH]
 * CRAN_FILE may also be a .txt file of one text a line. QAC_BENCH_DTYPE
 * (fp32, bf16 or int8) picks the CPU encoder's precision.
 * "bertbase" builds a BERT-base-shaped model with arbitrary weights (speed
 * does not depend on their values) and the tokenizer of the default model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "qac_config.h"
#include "qac_cpu.h"
#include "qac_data.h"
#include "qac_encoder.h"
#include "qac_util.h"

/* process CPU seconds: on a shared machine, time on a core rather than time waiting for one */
static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int fail(const char *what) {
    fprintf(stderr, "qac_bench_encode: %s: %s\n", what, qac_last_error());
    return 1;
}

int main(int argc, char **argv) {
    /* QAC_CPU_ISA picks the kernels' path, through the one configuration row */
    static const qac_opt isa_opts[] = {QAC_CPU_ISA_OPT};
    qac_opts isa;
    if (qac_opts_parse(&isa, isa_opts, 1, 0, NULL) || qac_cpu_isa_select(qac_opts_str(&isa, "cpu-isa"))) {
        fprintf(stderr, "%s: %s\n", argv[0], qac_last_error());
        return 2;
    }
    qac_opts_free(&isa);
    if (argc < 6) {
        fprintf(stderr, "usage: qac_bench_encode CRAN_FILE MODEL_DIR|bertbase MAX_LEN N THREADS [BATCH]\n");
        return 2;
    }
    const char *cran = argv[1], *model = argv[2];
    int max_len = atoi(argv[3]), n = atoi(argv[4]), threads = atoi(argv[5]);
    int batch = argc > 6 ? atoi(argv[6]) : 0;
    char **texts = calloc((size_t)n, sizeof *texts);
    size_t cl = strlen(cran);
    int from_txt = cl > 4 && !strcmp(cran + cl - 4, ".txt");
    if (from_txt) { /* one text a line, cycled */
        FILE *f = fopen(cran, "r");
        char *line = NULL;
        size_t cap = 0;
        ssize_t got;
        int k = 0;
        if (!f) return fail("open texts");
        while (k < n) {
            if ((got = getline(&line, &cap, f)) < 0) {
                if (k == 0) return fail("empty texts");
                rewind(f);
                continue;
            }
            if (got > 0 && line[got - 1] == '\n') line[got - 1] = 0;
            texts[k++] = strdup(line);
        }
        free(line);
        fclose(f);
    }
    qac_reader *r = NULL;
    if (!from_txt && qac_reader_open(&r, cran, QAC_READ_CORPUS, QAC_FMT_CRANFIELD)) return fail("open corpus");
    int k = from_txt ? n : 0;
    while (k < n) { /* cycle through the collection when N exceeds it */
        qac_record rec;
        int got;
        if (qac_reader_next(r, &rec, &got)) return fail("read corpus");
        if (!got) {
            if (k == 0 || qac_reader_seek(r, 0, 1)) return fail("rewind corpus");
            continue;
        }
        texts[k++] = strdup(rec.text);
    }
    qac_reader_free(r);

    qac_model *m = NULL;
    char def[4096];
    if (qac_default_model_dir(def, sizeof def)) return fail("default model");
    if (!strcmp(model, "bertbase")) {
        qac_bert_config cfg = {.vocab_size = 30522, .hidden_size = 768, .num_layers = 12, .num_heads = 12, .intermediate_size = 3072, .max_position = 512, .type_vocab_size = 2, .pad_token_id = 0, .layer_norm_eps = 1e-12f, .hidden_dropout = 0.1f, .attn_dropout = 0.1f};
        if (qac_model_create(&m, &cfg, def)) return fail("create model");
        uint32_t s = 12345;
        for (size_t i = 0; i < m->n_params; i++) {
            s = s * 1664525u + 1013904223u;
            m->param_mem[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 0.04f;
        }
    } else if (qac_model_load(&m, model)) {
        return fail("load model");
    }
    qac_encoder_opts o = qac_encoder_default_opts();
    o.device = QAC_DEVICE_CPU;
    o.threads = threads;
    o.max_batch = batch;
    const char *dtype = getenv("QAC_BENCH_DTYPE"); /* "bf16": the CPU bf16 mode */
    if (dtype && !strcmp(dtype, "bf16")) o.cpu_precision = QAC_PREC_BF16;
    if (dtype && !strcmp(dtype, "int8")) o.cpu_precision = QAC_PREC_INT8;
    qac_encoder *e;
    if (qac_encoder_create(&e, m, &o)) return fail("create encoder");
    float *out = malloc((size_t)n * m->cfg.hidden_size * sizeof *out);
    /* warm-up: first-touch of buffers and weights, with a whole batch (the
     * activations are sized for the largest batch seen) */
    int warm = batch > 32 ? batch : 32;
    if (qac_encoder_encode_texts(e, (const char *const *)texts, NULL, n < warm ? n : warm, max_len, out))
        return fail("encode");
    double t0 = qac_now(), c0 = cpu_seconds();
    if (qac_encoder_encode_texts(e, (const char *const *)texts, NULL, n, max_len, out)) return fail("encode");
    double dt = qac_now() - t0, cpu = cpu_seconds() - c0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("qac %s max_len=%d passages=%d seconds=%.3f passages_per_s=%.2f peak_rss_mib=%.1f cpu_passages_per_s=%.2f "
           "ms_per_text=%.3f\n",
           strcmp(model, "bertbase") ? "minilm" : "bertbase", max_len, n, dt, n / dt, ru.ru_maxrss / 1024.0, n / cpu,
           1000 * dt / n);
    qac_encoder_free(e);
    qac_model_free(m);
    for (int i = 0; i < n; i++) free(texts[i]);
    free(texts);
    free(out);
    return 0;
}
