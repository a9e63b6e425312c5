/* qac: the progress callback that long-running library functions take.
 *
 * The library itself never prints: a build, a copy or a mining run reports
 * how far it is through this callback, and the caller decides what to show
 * (the CLI's ready-made printer, qac_progress_stderr, is internal to the
 * project, in util/qac_util.h). Every public header that takes a callback
 * includes this one, so the public API stands alone. */
#ifndef QAC_PROGRESS_H
#define QAC_PROGRESS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* `phase` names the step ("encode", "bm25 index"); a phase counting
 * something other than the caller's unit names it after a slash:
 * "bm25 write/terms". `done` of `total` are done; `total` is 0 when
 * unknown. `user` is the pointer given beside the callback. */
typedef void (*qac_progress_fn)(void *user, const char *phase, uint64_t done, uint64_t total);

#ifdef __cplusplus
}
#endif
#endif
