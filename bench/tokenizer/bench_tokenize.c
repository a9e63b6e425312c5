/* Tokenizer throughput: tokenize every text of a file ROUNDS times with the
 * tokenizer of a model directory, one thread, and print the tokens and the
 * CPU seconds of the best round (loading excluded). bench/tokenizer/run.py
 * runs it against Hugging Face's fast tokenizer in the same run.
 *
 * Usage: qac_bench_tokenize MODEL_DIR TEXTS_HEX ROUNDS
 * (TEXTS_HEX: one hex-encoded text per line). Prints one line:
 *   tokens=N texts=M cpu_s=S wall_s=W tokens_per_s=R describe="..." */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qac_tokenizer.h"
#include "qac_util.h"

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int hexval(int c) { return c >= 'a' ? c - 'a' + 10 : c >= 'A' ? c - 'A' + 10 : c - '0'; }

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL_DIR TEXTS_HEX ROUNDS\n", argv[0]);
        return 2;
    }
    qac_tokenizer *t = NULL;
    if (qac_tokenizer_load(&t, argv[1])) {
        fprintf(stderr, "%s\n", qac_last_error());
        return 1;
    }
    char *data;
    size_t len;
    if (qac_read_file(argv[2], &data, &len)) {
        fprintf(stderr, "%s\n", qac_last_error());
        return 1;
    }
    int rounds = atoi(argv[3]), n = 0, cap = 0;
    char **texts = NULL;
    size_t *lens = NULL;
    for (size_t i = 0; i < len;) {
        size_t e = i;
        while (e < len && data[e] != '\n') e++;
        if (n == cap) {
            cap = cap ? 2 * cap : 1024;
            texts = realloc(texts, (size_t)cap * sizeof *texts);
            lens = realloc(lens, (size_t)cap * sizeof *lens);
        }
        lens[n] = (e - i) / 2;
        texts[n] = malloc(lens[n] + 1);
        for (size_t k = 0; k < lens[n]; k++) texts[n][k] = (char)(hexval(data[i + 2 * k]) << 4 | hexval(data[i + 2 * k + 1]));
        n++;
        i = e + 1;
    }
    free(data);
    int32_t *ids = malloc(sizeof *ids * (1 << 20));
    double best_cpu = 1e30, best_wall = 0;
    long tokens = 0;
    for (int r = 0; r < rounds; r++) {
        double c0 = cpu_now(), w0 = qac_now();
        long tk = 0;
        for (int i = 0; i < n; i++) {
            int got = 0;
            if (qac_tokenizer_tokenize(t, texts[i], lens[i], ids, 1 << 20, &got)) {
                fprintf(stderr, "text %d: %s\n", i, qac_last_error());
                return 1;
            }
            tk += got;
        }
        double c = cpu_now() - c0, w = qac_now() - w0;
        if (c < best_cpu) best_cpu = c, best_wall = w;
        tokens = tk;
    }
    printf("tokens=%ld texts=%d cpu_s=%.4f wall_s=%.4f tokens_per_s=%.0f describe=\"%s\"\n", tokens, n, best_cpu,
           best_wall, (double)tokens / best_cpu, qac_tokenizer_describe(t));
    for (int i = 0; i < n; i++) free(texts[i]);
    free(texts);
    free(lens);
    free(ids);
    qac_tokenizer_free(t);
    return 0;
}
