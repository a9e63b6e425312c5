// The subset of FAISS's official C API that qac calls, implemented on top of
// the FAISS C++ library. Debian ships the c_api headers but no libfaiss_c;
// when a real libfaiss_c is installed this file compiles to nothing.
// No logic lives here: each function forwards one call and turns C++
// exceptions into the C API's error codes and per-thread last error.
#ifndef QAC_HAVE_FAISS_C

#include <faiss/AutoTune.h>
#include <faiss/Index.h>
#include <faiss/impl/FaissException.h>
#include <faiss/index_factory.h>
#include <faiss/index_io.h>

#include <exception>
#include <stdexcept>
#include <string>

extern "C" {
#include <faiss/c_api/AutoTune_c.h>
#include <faiss/c_api/Index_c.h>
#include <faiss/c_api/error_c.h>
#include <faiss/c_api/index_factory_c.h>
#include <faiss/c_api/index_io_c.h>
}

namespace {
thread_local std::string last_error;

int translate(const std::exception_ptr &ep) {
    try {
        std::rethrow_exception(ep);
    } catch (const faiss::FaissException &e) {
        last_error = e.what();
        return FAISS_EXCEPT;
    } catch (const std::exception &e) {
        last_error = e.what();
        return STD_EXCEPT;
    } catch (...) {
        last_error = "unknown exception";
        return UNKNOWN_EXCEPT;
    }
}

faiss::Index *ix(FaissIndex *p) { return reinterpret_cast<faiss::Index *>(p); }
const faiss::Index *ix(const FaissIndex *p) { return reinterpret_cast<const faiss::Index *>(p); }
}  // namespace

#define SHIM_TRY try {
#define SHIM_CATCH                              \
    }                                           \
    catch (...) {                               \
        return translate(std::current_exception()); \
    }                                           \
    return OK;

extern "C" {

const char *faiss_get_last_error() { return last_error.c_str(); }

int faiss_index_factory(FaissIndex **p_index, int d, const char *description, FaissMetricType metric) {
    SHIM_TRY
    *p_index = reinterpret_cast<FaissIndex *>(
            faiss::index_factory(d, description, static_cast<faiss::MetricType>(metric)));
    SHIM_CATCH
}

void faiss_Index_free(FaissIndex *obj) { delete ix(obj); }
int faiss_Index_d(const FaissIndex *obj) { return ix(obj)->d; }
int faiss_Index_is_trained(const FaissIndex *obj) { return ix(obj)->is_trained ? 1 : 0; }
idx_t faiss_Index_ntotal(const FaissIndex *obj) { return ix(obj)->ntotal; }
FaissMetricType faiss_Index_metric_type(const FaissIndex *obj) {
    return static_cast<FaissMetricType>(ix(obj)->metric_type);
}

int faiss_Index_train(FaissIndex *index, idx_t n, const float *x) {
    SHIM_TRY
    ix(index)->train(n, x);
    SHIM_CATCH
}

int faiss_Index_add(FaissIndex *index, idx_t n, const float *x) {
    SHIM_TRY
    ix(index)->add(n, x);
    SHIM_CATCH
}

int faiss_Index_search(const FaissIndex *index, idx_t n, const float *x, idx_t k, float *distances,
                       idx_t *labels) {
    SHIM_TRY
    ix(index)->search(n, x, k, distances, labels);
    SHIM_CATCH
}

int faiss_Index_reconstruct(const FaissIndex *index, idx_t key, float *recons) {
    SHIM_TRY
    ix(index)->reconstruct(key, recons);
    SHIM_CATCH
}

int faiss_write_index(const FaissIndex *idx, FILE *f) {
    SHIM_TRY
    faiss::write_index(ix(idx), f);
    SHIM_CATCH
}

int faiss_write_index_fname(const FaissIndex *idx, const char *fname) {
    SHIM_TRY
    faiss::write_index(ix(idx), fname);
    SHIM_CATCH
}

int faiss_read_index(FILE *f, int io_flags, FaissIndex **p_out) {
    SHIM_TRY
    *p_out = reinterpret_cast<FaissIndex *>(faiss::read_index(f, io_flags));
    SHIM_CATCH
}

int faiss_read_index_fname(const char *fname, int io_flags, FaissIndex **p_out) {
    SHIM_TRY
    *p_out = reinterpret_cast<FaissIndex *>(faiss::read_index(fname, io_flags));
    SHIM_CATCH
}

int faiss_ParameterSpace_new(FaissParameterSpace **space) {
    SHIM_TRY
    *space = reinterpret_cast<FaissParameterSpace *>(new faiss::ParameterSpace());
    SHIM_CATCH
}

void faiss_ParameterSpace_free(FaissParameterSpace *obj) {
    delete reinterpret_cast<faiss::ParameterSpace *>(obj);
}

int faiss_ParameterSpace_set_index_parameter(const FaissParameterSpace *space, FaissIndex *index,
                                             const char *name, double value) {
    SHIM_TRY
    reinterpret_cast<const faiss::ParameterSpace *>(space)->set_index_parameter(ix(index), name, value);
    SHIM_CATCH
}

}  // extern "C"

#endif  // QAC_HAVE_FAISS_C
