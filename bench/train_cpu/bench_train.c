/* qac side of bench/train_cpu: fine-tuning steps on Cranfield text (the
 * first NQ queries, each with the next N documents in order as its group),
 * InfoNCE with in-batch negatives, AdamW. Prints one line
 * "qac steps=<s> seconds=<t> passages_per_s=<r> tokens_per_s=<r>
 *  cpu_s_per_step=<c> peak_rss_mib=<m> first_loss=<l> last_loss=<l>".
 * Usage: qac_bench_train CRAN_DIR MODEL_DIR NQ N Q_LEN P_LEN STEPS THREADS */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "qac_config.h"
#include "qac_cpu.h"
#include "qac_data.h"
#include "qac_train.h"
#include "qac_util.h"

static int fail(const char *what) {
    fprintf(stderr, "qac_bench_train: %s: %s\n", what, qac_last_error());
    return 1;
}

static char **read_texts(const char *path, qac_reader_kind kind, int n) {
    qac_reader *r;
    if (qac_reader_open(&r, path, kind, QAC_FMT_CRANFIELD)) return NULL;
    char **out = calloc((size_t)n, sizeof *out);
    for (int k = 0; k < n;) {
        qac_record rec;
        int got;
        if (qac_reader_next(r, &rec, &got) || !got) break;
        out[k++] = strdup(rec.text);
    }
    qac_reader_free(r);
    return out;
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
    if (argc < 9) {
        fprintf(stderr, "usage: qac_bench_train CRAN_DIR MODEL_DIR NQ N Q_LEN P_LEN STEPS THREADS\n");
        return 2;
    }
    int nq = atoi(argv[3]), n = atoi(argv[4]), qlen = atoi(argv[5]), plen = atoi(argv[6]);
    int steps = atoi(argv[7]), threads = atoi(argv[8]);
    char path[4096];
    snprintf(path, sizeof path, "%s/cran.qry", argv[1]);
    char **queries = read_texts(path, QAC_READ_QUERIES, nq);
    snprintf(path, sizeof path, "%s/cran.all.1400", argv[1]);
    char **docs = read_texts(path, QAC_READ_CORPUS, nq * n);
    if (!queries || !docs || !queries[nq - 1] || !docs[nq * n - 1]) return fail("read Cranfield");
    qac_model *m = NULL;
    if (qac_model_load(&m, argv[2])) return fail("load model");
    qac_train_opts o;
    qac_train_opts_default(&o);
    o.total_steps = steps + 1;
    o.warmup_steps = 0;
    o.tau = 0.05f;
    o.sim = QAC_SIM_COS;
    o.threads = threads;
    qac_trainer *t;
    if (qac_trainer_create(&t, m, &o)) return fail("trainer");
    qac_batch_buf bb = {0};
    if (qac_batch_build(&bb, m->tok, (const char *const *)queries, nq, (const char *const *)docs, n, qlen, plen))
        return fail("batch");
    qac_step_stats st;
    if (qac_trainer_step(t, &bb.b, &st)) return fail("warm-up step");
    struct rusage ru0, ru;
    getrusage(RUSAGE_SELF, &ru0);
    double first = st.loss, t0 = qac_now();
    for (int s = 0; s < steps; s++)
        if (qac_trainer_step(t, &bb.b, &st)) return fail("step");
    double secs = qac_now() - t0;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = (double)(ru.ru_utime.tv_sec - ru0.ru_utime.tv_sec + ru.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
                 (double)(ru.ru_utime.tv_usec - ru0.ru_utime.tv_usec + ru.ru_stime.tv_usec - ru0.ru_stime.tv_usec) / 1e6;
    printf("qac steps=%d seconds=%.3f passages_per_s=%.2f tokens_per_s=%.1f cpu_s_per_step=%.2f peak_rss_mib=%.0f "
           "first_loss=%.6f last_loss=%.6f\n",
           steps, secs, (double)steps * nq * n / secs, (double)steps * bb.tokens / secs, cpu / steps,
           ru.ru_maxrss / 1024.0, first, st.loss);
    qac_batch_buf_free(&bb);
    qac_trainer_free(t);
    qac_model_free(m);
    return 0;
}
