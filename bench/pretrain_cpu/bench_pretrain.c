/* qac side of bench/pretrain_cpu: pre-training steps of one objective on a
 * fixed batch of B (passage, query) pairs, the first B records of a
 * pre-training jsonl (passage cut at P_LEN tokens, its first query at
 * Q_LEN), masked as `qac pretrain` masks them (whole words; coCondenser
 * 0.15; CoT-MAE 0.30 for the encoder, 0.45 for the decoders). The batch is
 * written to DUMP (int32 arrays, see write_dump) so the PyTorch side trains
 * on the same token ids. Prints one line
 * "qac objective=<o> steps=<s> seconds=<t> pairs_per_s=<r> tokens_per_s=<r>
 *  cpu_s_per_step=<c> peak_rss_mib=<m> first_loss=<l> last_loss=<l>".
 * Usage: qac_bench_pretrain JSONL MODEL_DIR cocondenser|cotmae B P_LEN Q_LEN STEPS THREADS DUMP */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "pretrainer.h"
#include "qac_rng.h"
#include "qac_util.h"

static int fail(const char *what) {
    fprintf(stderr, "qac_bench_pretrain: %s: %s\n", what, qac_last_error());
    return 1;
}

typedef struct side {
    int T;
    int32_t *ids, *labels;
    int *lens;
} side;

/* texts [B] tokenized, padded to the longest, masked at rate (rate 0: not) */
static void make_side(side *s, const qac_model *m, const uint8_t *ws, char **texts, int B, int max_len, float rate,
                      uint32_t stream) {
    int32_t *tmp = malloc((size_t)B * max_len * sizeof *tmp);
    s->lens = malloc((size_t)B * sizeof *s->lens);
    s->T = 1;
    for (int i = 0; i < B; i++) {
        qac_tokenizer_encode(m->tok, texts[i], strlen(texts[i]), max_len, tmp + (size_t)i * max_len, &s->lens[i]);
        s->T = s->lens[i] > s->T ? s->lens[i] : s->T;
    }
    s->ids = malloc((size_t)B * s->T * sizeof *s->ids);
    s->labels = malloc((size_t)B * s->T * sizeof *s->labels);
    qac_special_ids sp = qac_tokenizer_specials(m->tok);
    qac_mask_opts mo = {rate, sp.mask, qac_tokenizer_vocab_size(m->tok)};
    for (int i = 0; i < B; i++) {
        int32_t *row = s->ids + (size_t)i * s->T, *lab = s->labels + (size_t)i * s->T;
        memcpy(row, tmp + (size_t)i * max_len, (size_t)s->lens[i] * sizeof *row);
        for (int j = 0; j < s->T; j++) lab[j] = -100;
        for (int j = s->lens[i]; j < s->T; j++) row[j] = sp.pad;
        if (rate > 0) qac_mask_whole_words(row, lab, s->lens[i], ws, &sp, &mo, qac_rng_key(42, 0, stream, (uint64_t)i));
    }
    free(tmp);
}

/* int32 B, then per side (a, b, da, db; the last two only for CoT-MAE): T,
 * ids [B,T], labels [B,T], lens [B] */
static int write_dump(const char *path, int B, const side *s, int n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    fwrite(&B, 4, 1, f);
    for (int k = 0; k < n; k++) {
        fwrite(&s[k].T, 4, 1, f);
        fwrite(s[k].ids, 4, (size_t)B * s[k].T, f);
        fwrite(s[k].labels, 4, (size_t)B * s[k].T, f);
        fwrite(s[k].lens, 4, (size_t)B, f);
    }
    return fclose(f);
}

int main(int argc, char **argv) {
    if (argc < 10) {
        fprintf(stderr, "usage: qac_bench_pretrain JSONL MODEL_DIR cocondenser|cotmae B P_LEN Q_LEN STEPS THREADS DUMP\n");
        return 2;
    }
    int cot = !strcmp(argv[3], "cotmae"), B = atoi(argv[4]), plen = atoi(argv[5]), qlen = atoi(argv[6]);
    int steps = atoi(argv[7]), threads = atoi(argv[8]);
    char **pass = calloc((size_t)B, sizeof *pass), **qry = calloc((size_t)B, sizeof *qry);
    FILE *f = fopen(argv[1], "r");
    if (!f) return fprintf(stderr, "cannot open %s\n", argv[1]), 1;
    char *line = NULL;
    size_t cap = 0;
    for (int k = 0; k < B && getline(&line, &cap, f) > 0;) {
        json_t *j = json_loads(line, 0, NULL);
        json_t *qs = j ? json_object_get(j, "queries") : NULL;
        const char *text = j ? json_string_value(json_object_get(j, "text")) : NULL;
        if (text && *text && json_array_size(qs) > 0) {
            pass[k] = strdup(text);
            qry[k++] = strdup(json_string_value(json_array_get(qs, 0)));
        }
        json_decref(j);
    }
    free(line);
    fclose(f);
    if (!pass[B - 1]) return fprintf(stderr, "fewer than %d records with queries\n", B), 1;
    qac_model *m = NULL;
    if (qac_model_load(&m, argv[2])) return fail("load model");
    uint8_t *ws;
    if (qac_word_starts(&ws, m->tok)) return fail("word starts");
    side s[4];
    float rate = cot ? 0.30f : 0.15f;
    make_side(&s[0], m, ws, pass, B, plen, rate, 1);
    make_side(&s[1], m, ws, qry, B, qlen, rate, 2);
    if (cot) {
        make_side(&s[2], m, ws, qry, B, qlen, 0.45f, 3);
        make_side(&s[3], m, ws, pass, B, plen, 0.45f, 4);
    }
    if (write_dump(argv[9], B, s, cot ? 4 : 2)) return fprintf(stderr, "cannot write %s\n", argv[9]), 1;
    long tokens = 0;
    for (int i = 0; i < B; i++) tokens += s[0].lens[i] + s[1].lens[i];
    qac_train_opts o;
    qac_train_opts_default(&o);
    o.lr = 1e-4;
    o.total_steps = steps + 1;
    o.warmup_steps = 0;
    o.threads = threads;
    qac_pt_objective_opts ob;
    qac_pt_objective_opts_default(&ob);
    ob.objective = cot ? QAC_PT_COTMAE : QAC_PT_COCONDENSER;
    ob.pooling = QAC_POOL_CLS, ob.normalize = 0; /* the released recipe, as ref_torch.py computes it */
    qac_pretrainer *t;
    if (qac_pretrainer_create(&t, m, &o, &ob)) return fail("pretrainer");
    qac_pt_seqs q[4];
    for (int k = 0; k < (cot ? 4 : 2); k++) q[k] = (qac_pt_seqs){s[k].T, s[k].ids, s[k].labels, s[k].lens};
    qac_pt_batch b = {B, q[0], q[1], cot ? q[2] : (qac_pt_seqs){0}, cot ? q[3] : (qac_pt_seqs){0}};
    qac_pt_losses l;
    qac_step_stats st;
    if (qac_pretrainer_step(t, &b, &l, &st)) return fail("step"); /* warm-up */
    double first = st.loss;
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    double t0 = qac_now();
    for (int i = 0; i < steps; i++)
        if (qac_pretrainer_step(t, &b, &l, &st)) return fail("step");
    double secs = qac_now() - t0;
    getrusage(RUSAGE_SELF, &r1);
    double cpu = (r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) + (r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) * 1e-6 +
                 (r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) + (r1.ru_stime.tv_usec - r0.ru_stime.tv_usec) * 1e-6;
    printf("qac objective=%s steps=%d seconds=%.3f pairs_per_s=%.2f tokens_per_s=%.1f cpu_s_per_step=%.2f "
           "peak_rss_mib=%ld first_loss=%.6f last_loss=%.6f\n",
           argv[3], steps, secs, steps * B / secs, steps * tokens / secs, cpu / steps, r1.ru_maxrss / 1024, first,
           st.loss);
    qac_pretrainer_free(t);
    qac_model_free(m);
    return 0;
}
