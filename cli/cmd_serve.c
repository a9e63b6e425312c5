/* placeholder until the serve command lands */
#include <stdio.h>

#include "cli.h"

int qac_cmd_serve(int argc, char **argv) {
    fprintf(stderr, "qac serve: not available in this build yet\n");
    return 2;
}
