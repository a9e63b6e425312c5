/* placeholder until the search command lands */
#include <stdio.h>

#include "cli.h"

int qac_cmd_search(int argc, char **argv) {
    fprintf(stderr, "qac search: not available in this build yet\n");
    return 2;
}
