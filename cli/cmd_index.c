/* placeholder until the index command lands */
#include <stdio.h>

#include "cli.h"

int qac_cmd_index(int argc, char **argv) {
    fprintf(stderr, "qac index: not available in this build yet\n");
    return 2;
}
