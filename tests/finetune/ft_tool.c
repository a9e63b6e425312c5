/* Prints what qac_ft_sample and qac_ft_order draw, for the sampling test's
 * comparison with its reference.
 *   ft_tool sample SEED N_EX N_EPOCH N_POS N_NEG N   -> "ex epoch pos neg..." lines
 *   ft_tool order SEED N_EPOCH N_EX                  -> one permutation per line */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qac_finetune.h"

int main(int argc, char **argv) {
    if (argc == 8 && !strcmp(argv[1], "sample")) {
        uint64_t seed = strtoull(argv[2], NULL, 10);
        int nex = atoi(argv[3]), nep = atoi(argv[4]), npos = atoi(argv[5]), nneg = atoi(argv[6]), n = atoi(argv[7]);
        int *neg = malloc((size_t)(n > 1 ? n : 1) * sizeof *neg);
        for (int ex = 0; ex < nex; ex++)
            for (int ep = 0; ep < nep; ep++) {
                int pos;
                qac_ft_sample(seed, (uint64_t)ex, (uint64_t)ep, npos, nneg, n, &pos, neg);
                printf("%d %d %d", ex, ep, pos);
                for (int j = 0; j < n - 1; j++) printf(" %d", neg[j]);
                printf("\n");
            }
        free(neg);
        return 0;
    }
    if (argc == 5 && !strcmp(argv[1], "order")) {
        uint64_t seed = strtoull(argv[2], NULL, 10);
        int nep = atoi(argv[3]);
        size_t n = (size_t)atol(argv[4]), *perm = malloc(n * sizeof *perm);
        for (int ep = 0; ep < nep; ep++) {
            qac_ft_order(seed, (uint64_t)ep, n, perm);
            for (size_t i = 0; i < n; i++) printf(i ? " %zu" : "%zu", perm[i]);
            printf("\n");
        }
        free(perm);
        return 0;
    }
    fprintf(stderr, "usage: ft_tool sample SEED N_EX N_EPOCH N_POS N_NEG N | order SEED N_EPOCH N_EX\n");
    return 2;
}
