/* qac plot: training curves (loss, learning rate) from a log.jsonl as PNG. */
#include <stdio.h>

#include "cli.h"
#include "qac_finetune.h"
#include "qac_util.h"

static const qac_opt plot_opts[] = {
    {"out", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "output PNG", 1},
    {"width", QAC_OPT_INT, "800", 200, 8000, NULL, NULL, "image width in pixels", 0},
    {"height", QAC_OPT_INT, "560", 200, 8000, NULL, NULL, "image height in pixels", 0},
};
#define N_PLOT_OPTS (int)(sizeof plot_opts / sizeof plot_opts[0])

int qac_cmd_plot(int argc, char **argv) {
    qac_opts o;
    int rc = qac_cli_parse(&o, "plot", "LOG.jsonl --out loss.png", plot_opts, N_PLOT_OPTS, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    if (o.n_positional != 1) {
        fprintf(stderr, "qac plot: give one log.jsonl (see 'qac plot --help')\n");
        qac_opts_free(&o);
        return 2;
    }
    const char *out = qac_opts_str(&o, "out");
    if (qac_check_input(o.positional[0]) || qac_check_output_file(out) ||
        qac_plot_log(o.positional[0], out, (int)qac_opts_int(&o, "width"), (int)qac_opts_int(&o, "height")))
        rc = qac_cli_fail("plot");
    else
        qac_summary("plot", "%s -> %s (%lldx%lld)", o.positional[0], out, qac_opts_int(&o, "width"),
                    qac_opts_int(&o, "height"));
    qac_opts_free(&o);
    return rc;
}
