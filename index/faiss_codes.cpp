// Read-only access to a FAISS SQfp16 index's codes, so that index_search.c
// can scan them with qac's own kernel (Debian's libfaiss.a is compiled
// without AVX, which makes its own scan about 9x slower than the wheels').
#include <faiss/IndexScalarQuantizer.h>

#include <cstdint>

extern "C" {
#include "index_internal.h"
}

extern "C" const uint16_t *qac_faiss_fp16_codes(const struct FaissIndex_H *index) {
    try {
        auto *sq = dynamic_cast<const faiss::IndexScalarQuantizer *>(reinterpret_cast<const faiss::Index *>(index));
        if (!sq || sq->sq.qtype != faiss::ScalarQuantizer::QT_fp16 || sq->metric_type != faiss::METRIC_INNER_PRODUCT ||
            sq->code_size != sizeof(uint16_t) * static_cast<size_t>(sq->d) ||
            sq->codes.size() != sq->code_size * static_cast<size_t>(sq->ntotal))
            return nullptr;
        return reinterpret_cast<const uint16_t *>(sq->codes.data());
    } catch (...) { // nothing here throws today; the C caller must never see it
        return nullptr;
    }
}
