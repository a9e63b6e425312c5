/* placeholder until the tokenize command lands */
#include <stdio.h>

#include "cli.h"

int qac_cmd_tokenize(int argc, char **argv) {
    fprintf(stderr, "qac tokenize: not available in this build yet\n");
    return 2;
}
