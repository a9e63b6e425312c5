// The structure of an index FAISS read back, checked against what the
// manifest's factory string builds, before anything searches it. A flipped
// byte in a header or a size field reads without complaint, then makes
// FAISS throw inside an OpenMP region (which aborts the process) or read
// out of bounds; every field the search trusts is checked here instead.
// Exceptions never leave this file.
#include <faiss/IndexFlat.h>
#include <faiss/IndexFlatCodes.h>
#include <faiss/IndexHNSW.h>
#include <faiss/IndexIVF.h>
#include <faiss/IndexIVFPQ.h>
#include <faiss/IndexPQ.h>
#include <faiss/IndexPreTransform.h>
#include <faiss/IndexScalarQuantizer.h>
#include <faiss/VectorTransform.h>
#include <faiss/index_factory.h>
#include <faiss/invlists/InvertedLists.h>

#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <typeinfo>

extern "C" {
#include "index_internal.h"
}

namespace {

using faiss::Index;

std::string type_name(const std::type_info &t) {
    int status = 0;
    char *s = abi::__cxa_demangle(t.name(), nullptr, nullptr, &status);
    std::string out = status == 0 && s ? s : t.name();
    std::free(s);
    return out;
}

struct checker {
    std::string why;

    bool fail(const std::string &where, const std::string &msg) {
        why = where + msg;
        return false;
    }

    // trained parameters a ScalarQuantizer holds for its type
    static size_t sq_trained_size(const faiss::ScalarQuantizer &sq) {
        switch (sq.qtype) {
        case faiss::ScalarQuantizer::QT_8bit:
        case faiss::ScalarQuantizer::QT_4bit:
        case faiss::ScalarQuantizer::QT_6bit: return 2 * sq.d;
        case faiss::ScalarQuantizer::QT_8bit_uniform:
        case faiss::ScalarQuantizer::QT_4bit_uniform: return 2;
        default: return 0;
        }
    }

    bool sq(const faiss::ScalarQuantizer &got, const faiss::ScalarQuantizer &want, const std::string &w) {
        if (got.qtype != want.qtype)
            return fail(w, "scalar quantizer type " + std::to_string((int)got.qtype) + ", the factory makes " +
                                   std::to_string((int)want.qtype));
        if (got.d != want.d || got.code_size != want.code_size)
            return fail(w, "scalar quantizer of " + std::to_string(got.d) + " dims, " + std::to_string(got.code_size) +
                                   " bytes a code; the factory makes " + std::to_string(want.d) + ", " +
                                   std::to_string(want.code_size));
        if (got.trained.size() != sq_trained_size(got))
            return fail(w, "scalar quantizer with " + std::to_string(got.trained.size()) + " trained values, " +
                                   std::to_string(sq_trained_size(got)) + " expected");
        return true;
    }

    bool pq(const faiss::ProductQuantizer &got, const faiss::ProductQuantizer &want, const std::string &w) {
        if (got.d != want.d || got.M != want.M || got.nbits != want.nbits || got.dsub != want.dsub ||
            got.ksub != want.ksub || got.code_size != want.code_size)
            return fail(w, "product quantizer M " + std::to_string(got.M) + " x " + std::to_string(got.nbits) +
                                   " bits, the factory makes M " + std::to_string(want.M) + " x " +
                                   std::to_string(want.nbits));
        if (got.centroids.size() != got.M * got.ksub * got.dsub)
            return fail(w, "product quantizer with " + std::to_string(got.centroids.size()) + " centroid values, " +
                                   std::to_string(got.M * got.ksub * got.dsub) + " expected");
        return true;
    }

    bool codes(const faiss::IndexFlatCodes &got, const faiss::IndexFlatCodes &want, const std::string &w) {
        if (got.code_size != want.code_size)
            return fail(w, std::to_string(got.code_size) + " bytes a code, the factory makes " +
                                   std::to_string(want.code_size));
        if (got.codes.size() != got.code_size * (size_t)got.ntotal)
            return fail(w, std::to_string(got.codes.size()) + " code bytes for " + std::to_string(got.ntotal) +
                                   " vectors of " + std::to_string(got.code_size));
        return true;
    }

    bool ivf(const faiss::IndexIVF &got, const faiss::IndexIVF &want, const std::string &w) {
        if (got.nlist != want.nlist || got.code_size != want.code_size)
            return fail(w, std::to_string(got.nlist) + " lists of " + std::to_string(got.code_size) +
                                   "-byte codes, the factory makes " + std::to_string(want.nlist) + " of " +
                                   std::to_string(want.code_size));
        if (got.nprobe < 1 || got.nprobe > got.nlist)
            return fail(w, "nprobe " + std::to_string(got.nprobe) + " outside 1.." + std::to_string(got.nlist));
        if (!got.quantizer || !want.quantizer) return fail(w, "no coarse quantizer");
        if (!index(got.quantizer, want.quantizer, (faiss::Index::idx_t)got.nlist, w + "coarse quantizer: ")) return false;
        auto *lists = dynamic_cast<const faiss::ArrayInvertedLists *>(got.invlists);
        if (!lists) return fail(w, "inverted lists of an unexpected kind");
        if (lists->nlist != got.nlist || lists->code_size != got.code_size || lists->ids.size() != got.nlist ||
            lists->codes.size() != got.nlist)
            return fail(w, "inverted lists do not match the index's " + std::to_string(got.nlist) + " lists");
        size_t total = 0;
        for (size_t l = 0; l < got.nlist; l++) {
            const auto &ids = lists->ids[l];
            if (lists->codes[l].size() != ids.size() * got.code_size)
                return fail(w, "inverted list " + std::to_string(l) + " has codes for " +
                                       std::to_string(lists->codes[l].size() / (got.code_size ? got.code_size : 1)) +
                                       " vectors and " + std::to_string(ids.size()) + " ids");
            for (faiss::Index::idx_t id : ids)
                if (id < 0 || id >= got.ntotal)
                    return fail(w, "inverted list " + std::to_string(l) + " holds id " + std::to_string(id) +
                                           " outside 0.." + std::to_string(got.ntotal - 1));
            total += ids.size();
        }
        if (total != (size_t)got.ntotal)
            return fail(w, "inverted lists hold " + std::to_string(total) + " vectors, the index " +
                                   std::to_string(got.ntotal));
        if (auto *g = dynamic_cast<const faiss::IndexIVFScalarQuantizer *>(&got))
            return sq(g->sq, dynamic_cast<const faiss::IndexIVFScalarQuantizer &>(want).sq, w);
        if (auto *g = dynamic_cast<const faiss::IndexIVFPQ *>(&got))
            return pq(g->pq, dynamic_cast<const faiss::IndexIVFPQ &>(want).pq, w);
        return true;
    }

    bool hnsw(const faiss::IndexHNSW &got, const faiss::IndexHNSW &want, const std::string &w) {
        const faiss::HNSW &h = got.hnsw;
        size_t n = (size_t)got.ntotal;
        if (h.cum_nneighbor_per_level != want.hnsw.cum_nneighbor_per_level)
            return fail(w, "HNSW neighbours per level differ from the factory's");
        if (h.efSearch < 1 || h.efSearch > (1 << 20) || h.upper_beam < 1 || h.upper_beam > (1 << 20))
            return fail(w, "HNSW efSearch " + std::to_string(h.efSearch) + " or upper_beam " +
                                   std::to_string(h.upper_beam) + " out of range");
        if (h.levels.size() != n || h.offsets.size() != n + 1 || h.offsets[0] != 0 ||
            h.offsets[n] != h.neighbors.size())
            return fail(w, "HNSW graph sizes do not match " + std::to_string(n) + " vectors");
        int nlevels = (int)h.cum_nneighbor_per_level.size() - 1, top = 0;
        for (size_t i = 0; i < n; i++) {
            int lv = h.levels[i];
            if (lv < 1 || lv > nlevels || h.offsets[i + 1] < h.offsets[i] ||
                h.offsets[i + 1] - h.offsets[i] != (size_t)h.cum_nneighbor_per_level[lv])
                return fail(w, "HNSW node " + std::to_string(i) + " has a corrupt level or neighbour range");
            if (lv > top) top = lv;
        }
        // every link stays in range and on a layer its target has, so a
        // search reads only the neighbour ranges that exist
        for (size_t i = 0; i < n; i++)
            for (int layer = 0; layer < h.levels[i]; layer++) {
                size_t b = h.offsets[i] + h.cum_nneighbor_per_level[layer];
                size_t e = h.offsets[i] + h.cum_nneighbor_per_level[layer + 1];
                for (size_t j = b; j < e; j++) {
                    int nb = h.neighbors[j];
                    if (nb < -1 || nb >= (int)n || (nb >= 0 && h.levels[nb] <= layer))
                        return fail(w, "HNSW node " + std::to_string(i) + " links to " + std::to_string(nb) +
                                               " on layer " + std::to_string(layer));
                }
            }
        if (n > 0 && (h.entry_point < 0 || h.entry_point >= (int)n || h.max_level != top - 1 ||
                      h.levels[h.entry_point] != top))
            return fail(w, "HNSW entry point " + std::to_string(h.entry_point) + " or max level " +
                                   std::to_string(h.max_level) + " is not the graph's");
        if (!got.storage || !want.storage) return fail(w, "HNSW without storage");
        return index(got.storage, want.storage, got.ntotal, w + "HNSW storage: ");
    }

    bool pretransform(const faiss::IndexPreTransform &got, const faiss::IndexPreTransform &want, const std::string &w) {
        if (got.chain.size() != want.chain.size())
            return fail(w, std::to_string(got.chain.size()) + " transforms, the factory makes " +
                                   std::to_string(want.chain.size()));
        for (size_t i = 0; i < got.chain.size(); i++) {
            const faiss::VectorTransform *g = got.chain[i], *x = want.chain[i];
            // write_index stores an OPQ matrix (any plain linear map) as a LinearTransform
            bool same = g && (typeid(*g) == typeid(*x) || (typeid(*g) == typeid(faiss::LinearTransform) &&
                                                            dynamic_cast<const faiss::LinearTransform *>(x)));
            if (!same || g->d_in != x->d_in || g->d_out != x->d_out || !g->is_trained)
                return fail(w, "transform " + std::to_string(i) + " differs from the factory's");
            if (auto *lt = dynamic_cast<const faiss::LinearTransform *>(g))
                if (lt->A.size() != (size_t)lt->d_in * lt->d_out || (lt->have_bias && lt->b.size() != (size_t)lt->d_out))
                    return fail(w, "transform " + std::to_string(i) + " has a matrix of the wrong size");
        }
        if (!got.index || !want.index) return fail(w, "no sub-index");
        return index(got.index, want.index, got.ntotal, w);
    }

    // write_index stores IndexFlat by metric (IndexFlatIP, IndexFlatL2):
    // the same index as the factory's IndexFlat
    static bool same_type(const Index *a, const Index *b) {
        if (typeid(*a) == typeid(*b)) return true;
        return dynamic_cast<const faiss::IndexFlat *>(a) && dynamic_cast<const faiss::IndexFlat *>(b) &&
               typeid(*a) != typeid(faiss::IndexFlat1D) && typeid(*b) != typeid(faiss::IndexFlat1D);
    }

    bool index(const Index *got, const Index *want, faiss::Index::idx_t ntotal, const std::string &w) {
        if (!same_type(got, want))
            return fail(w, "index type " + type_name(typeid(*got)) + ", the factory makes " + type_name(typeid(*want)));
        if (got->d != want->d)
            return fail(w, "dimension " + std::to_string(got->d) + ", " + std::to_string(want->d) + " expected");
        if (got->ntotal != ntotal)
            return fail(w, std::to_string(got->ntotal) + " vectors, " + std::to_string(ntotal) + " expected");
        if (got->metric_type != want->metric_type) return fail(w, "metric differs from the factory's");
        if (!got->is_trained) return fail(w, "not trained");
        if (auto *g = dynamic_cast<const faiss::IndexIVF *>(got))
            return ivf(*g, dynamic_cast<const faiss::IndexIVF &>(*want), w);
        if (auto *g = dynamic_cast<const faiss::IndexHNSW *>(got))
            return hnsw(*g, dynamic_cast<const faiss::IndexHNSW &>(*want), w);
        if (auto *g = dynamic_cast<const faiss::IndexPreTransform *>(got))
            return pretransform(*g, dynamic_cast<const faiss::IndexPreTransform &>(*want), w);
        if (auto *g = dynamic_cast<const faiss::IndexFlatCodes *>(got)) {
            if (!codes(*g, dynamic_cast<const faiss::IndexFlatCodes &>(*want), w)) return false;
            if (auto *s = dynamic_cast<const faiss::IndexScalarQuantizer *>(got))
                return sq(s->sq, dynamic_cast<const faiss::IndexScalarQuantizer &>(*want).sq, w);
            if (auto *p = dynamic_cast<const faiss::IndexPQ *>(got)) {
                auto &wp = dynamic_cast<const faiss::IndexPQ &>(*want);
                if (p->search_type != wp.search_type) return fail(w, "PQ search type differs from the factory's");
                return pq(p->pq, wp.pq, w);
            }
        }
        return true; // other types: type, dimension, count and metric
    }
};

}  // namespace

extern "C" int qac_faiss_check(const struct FaissIndex_H *index, const char *factory, int dim, int64_t count,
                               char *why, size_t why_len) {
    std::string msg;
    try {
        auto *got = reinterpret_cast<const Index *>(index);
        std::unique_ptr<Index> want(faiss::index_factory(dim, factory, faiss::METRIC_INNER_PRODUCT));
        checker c;
        if (c.index(got, want.get(), (faiss::Index::idx_t)count, "")) return 0;
        msg = c.why;
    } catch (const std::exception &e) {
        msg = std::string("cannot check it against factory '") + factory + "': " + e.what();
    } catch (...) {
        msg = std::string("cannot check it against factory '") + factory + "'";
    }
    if (why && why_len) std::snprintf(why, why_len, "%s", msg.c_str());
    return -1;
}
