/* placeholder until the encode command lands */
#include <stdio.h>

#include "cli.h"

int qac_cmd_encode(int argc, char **argv) {
    fprintf(stderr, "qac encode: not available in this build yet\n");
    return 2;
}
