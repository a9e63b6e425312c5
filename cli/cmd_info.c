/* placeholder until the info command lands */
#include <stdio.h>

#include "cli.h"

int qac_cmd_info(int argc, char **argv) {
    fprintf(stderr, "qac info: not available in this build yet\n");
    return 2;
}
