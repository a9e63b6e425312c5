/* Internal to trainer/: the wording of a refused resume, shared by the
 * fine-tuning state (state.c, where they are defined) and the pre-training
 * state (pretrain_state.c). */
#ifndef QAC_RESUME_CHECK_H
#define QAC_RESUME_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "qac_common.h"

/* x and y printed into a and b (cap bytes each) with the fewest digits
 * (6 to 17) that make them read differently. */
void qac_resume_two_reals(char *a, char *b, size_t cap, double x, double y);
/* QAC_ERR_MISMATCH: "USE: the run was written with OPTION THEN, this
 * resume has NOW; resume with the same OPTION ..." */
qac_status qac_resume_changed(const char *use, const char *option, const char *then, const char *now);
/* a recorded qac_schedule as its option value: "linear", "cosine", "constant" */
const char *qac_resume_schedule_name(int32_t s);

#endif
