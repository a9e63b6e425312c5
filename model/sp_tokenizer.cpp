// Thin extern "C" shim over libsentencepiece: translates calls, results and
// errors (status objects and exceptions) and holds no tokenisation logic.
#include <sentencepiece_processor.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "tokenizer_internal.h"

struct qac_sp {
    sentencepiece::SentencePieceProcessor proc;
};

extern "C" {

qac_status qac_sp_load(qac_sp **out, const char *model_path) {
    *out = nullptr;
    try {
        qac_sp *sp = new qac_sp;
        sentencepiece::util::Status st = sp->proc.Load(model_path);
        if (!st.ok()) {
            delete sp;
            return qac_set_error(QAC_ERR_FORMAT, "%s: sentencepiece: %s", model_path, st.ToString().c_str());
        }
        *out = sp;
        return QAC_OK;
    } catch (const std::bad_alloc &) {
        return qac_set_error(QAC_ERR_NOMEM, "%s: out of memory", model_path);
    } catch (const std::exception &e) {
        return qac_set_error(QAC_ERR_FORMAT, "%s: sentencepiece: %s", model_path, e.what());
    }
}

void qac_sp_free(qac_sp *sp) { delete sp; }

int qac_sp_vocab_size(const qac_sp *sp) { return sp->proc.GetPieceSize(); }

const char *qac_sp_id_to_piece(const qac_sp *sp, int32_t id) {
    if (id < 0 || id >= sp->proc.GetPieceSize()) return nullptr;
    return sp->proc.IdToPiece(id).c_str();
}

int32_t qac_sp_piece_to_id(const qac_sp *sp, const char *piece) {
    // PieceToId answers unk_id for unknown pieces; the unk piece itself is real.
    int id = sp->proc.PieceToId(piece);
    if (id == sp->proc.unk_id() && sp->proc.IdToPiece(id) != piece) return -1;
    return id;
}

int32_t qac_sp_unk_id(const qac_sp *sp) { return sp->proc.unk_id(); }

int32_t qac_sp_pad_id(const qac_sp *sp) {
    int id = sp->proc.pad_id();
    return id >= 0 && id < sp->proc.GetPieceSize() ? id : -1;
}

float qac_sp_score(const qac_sp *sp, int32_t id) {
    if (id < 0 || id >= sp->proc.GetPieceSize()) return 0.0f;
    return sp->proc.GetScore(id);
}

qac_status qac_sp_serialized(const qac_sp *sp, char **bytes, size_t *len) {
    *bytes = nullptr;
    *len = 0;
    try {
        std::string s = sp->proc.serialized_model_proto();
        char *copy = static_cast<char *>(malloc(s.size() + 1));
        if (!copy) return qac_set_error(QAC_ERR_NOMEM, "sentencepiece: out of memory");
        memcpy(copy, s.data(), s.size());
        *bytes = copy;
        *len = s.size();
        return QAC_OK;
    } catch (const std::bad_alloc &) {
        return qac_set_error(QAC_ERR_NOMEM, "sentencepiece: out of memory");
    } catch (const std::exception &e) {
        return qac_set_error(QAC_ERR_INTERNAL, "sentencepiece: %s", e.what());
    }
}

qac_status qac_sp_encode(const qac_sp *sp, const char *text, size_t len, int32_t *ids, int cap, int *n) {
    try {
        std::vector<int> out;
        sentencepiece::util::Status st = sp->proc.Encode(std::string_view(text, len), &out);
        if (!st.ok()) return qac_set_error(QAC_ERR_FORMAT, "sentencepiece: %s", st.ToString().c_str());
        for (size_t i = 0; i < out.size() && (long long)i < cap; i++) ids[i] = out[i];
        *n = (int)out.size();
        return QAC_OK;
    } catch (const std::bad_alloc &) {
        return qac_set_error(QAC_ERR_NOMEM, "sentencepiece: out of memory");
    } catch (const std::exception &e) {
        return qac_set_error(QAC_ERR_INTERNAL, "sentencepiece: %s", e.what());
    }
}

qac_status qac_sp_decode(const qac_sp *sp, const int32_t *ids, int n, char **text) {
    *text = nullptr;
    try {
        std::vector<int> in(ids, ids + n);
        std::string out;
        sentencepiece::util::Status st = sp->proc.Decode(in, &out);
        if (!st.ok()) return qac_set_error(QAC_ERR_FORMAT, "sentencepiece: %s", st.ToString().c_str());
        char *copy = static_cast<char *>(malloc(out.size() + 1));
        if (!copy) return qac_set_error(QAC_ERR_NOMEM, "sentencepiece: out of memory");
        memcpy(copy, out.data(), out.size());
        copy[out.size()] = '\0';
        *text = copy;
        return QAC_OK;
    } catch (const std::bad_alloc &) {
        return qac_set_error(QAC_ERR_NOMEM, "sentencepiece: out of memory");
    } catch (const std::exception &e) {
        return qac_set_error(QAC_ERR_INTERNAL, "sentencepiece: %s", e.what());
    }
}

}  // extern "C"
