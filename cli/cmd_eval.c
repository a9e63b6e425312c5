/* placeholder until the eval command lands */
#include <stdio.h>

#include "cli.h"

int qac_cmd_eval(int argc, char **argv) {
    fprintf(stderr, "qac eval: not available in this build yet\n");
    return 2;
}
