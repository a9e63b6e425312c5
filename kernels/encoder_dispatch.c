/* qac_encoder_create: which backend an encoder runs on.
 *
 * The backends live on two floors: the CPU reference in model/
 * (cpu_backend.c) and CUDA here in kernels/ (cuda_encoder.cu, or nocuda.c's
 * refusal in a build without CUDA). The choice between them sits above both,
 * in this file, so that model/encoder.c, the front end every backend shares,
 * never calls into kernels/: this file makes the backend and hands it to the
 * front end (qac_encoder_attach).
 *
 * The backends are a table in order of preference. An explicit device gets
 * its row or that row's error; QAC_DEVICE_AUTO takes the first row that is
 * usable and made, and an earlier row's refusal is cleared, not reported. A
 * new backend is a new row. Built with and without CUDA. */
#include "encoder_backend.h"

typedef struct encoder_backend_kind {
    qac_device device;
    int (*usable)(void); /* AUTO tries the row only when this says yes */
    qac_status (*create)(qac_encoder_backend *be, const qac_model *m, const qac_encoder_opts *o);
} encoder_backend_kind;

static int cpu_usable(void) { return 1; }

static const encoder_backend_kind backend_kinds[] = {
    {QAC_DEVICE_CUDA, qac_cuda_available, qac_cuda_backend_create},
    {QAC_DEVICE_CPU, cpu_usable, qac_cpu_backend_create},
};
enum { N_BACKEND_KINDS = sizeof backend_kinds / sizeof backend_kinds[0] };

static qac_status create_auto(qac_encoder_backend *be, const qac_model *m, const qac_encoder_opts *o,
                              qac_device *device) {
    qac_status st = QAC_ERR_UNSUPPORTED;
    for (int i = 0; i < N_BACKEND_KINDS; i++) {
        if (i) qac_clear_error(); /* an earlier row's refusal is not this call's error */
        if (!backend_kinds[i].usable()) continue;
        if ((st = backend_kinds[i].create(be, m, o)) == QAC_OK) {
            *device = backend_kinds[i].device;
            break;
        }
    }
    return st;
}

static qac_status create_on(qac_encoder_backend *be, const qac_model *m, const qac_encoder_opts *o,
                            qac_device device) {
    for (int i = 0; i < N_BACKEND_KINDS; i++)
        if (backend_kinds[i].device == device) return backend_kinds[i].create(be, m, o);
    return qac_set_error(QAC_ERR_INVALID, "encoder: unknown device %d", (int)device);
}

qac_status qac_encoder_create(qac_encoder **out, const qac_model *m, const qac_encoder_opts *o) {
    *out = NULL;
    qac_encoder_opts opts = o ? *o : qac_encoder_default_opts();
    if (!m) return qac_set_error(QAC_ERR_INVALID, "encoder: no model");
    if (opts.threads < 0 || opts.max_batch < 0)
        return qac_set_error(QAC_ERR_INVALID, "encoder: threads (%d) and max_batch (%d) must be >= 0",
                             opts.threads, opts.max_batch);
    qac_encoder_backend be = {0};
    qac_device device = opts.device;
    qac_status st = device == QAC_DEVICE_AUTO ? create_auto(&be, m, &opts, &device)
                                              : create_on(&be, m, &opts, device);
    if (st != QAC_OK) return st;
    /* the CPU backend reports the precision it runs in: int8 without VNNI runs in fp32 */
    return qac_encoder_attach(out, m, &be, device, device == QAC_DEVICE_CPU ? be.precision : opts.cpu_precision);
}
