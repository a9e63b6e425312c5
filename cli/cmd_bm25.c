/* placeholder until the bm25 command lands */
#include <stdio.h>

#include "cli.h"

int qac_cmd_bm25(int argc, char **argv) {
    fprintf(stderr, "qac bm25: not available in this build yet\n");
    return 2;
}
