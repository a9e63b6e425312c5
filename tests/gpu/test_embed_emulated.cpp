// The CUDA trainer's embedding kernels (kernels/train_embed.cu) run on the
// CPU (tests/gpu/cuda_emu.h: the kernels' own source, blocks one at a time)
// against their CPU twins (model/layers.c qac_embeddings_forward_at and
// qac_embeddings_backward_at), with the host-built scatter plans the
// trainer uploads (kernels/cuda_trainer.cu upload_side: the padding id's
// word rows and, for positions offset past the padding index, the position
// row padding_idx left out of the plans):
//  - BERT's learned positions (the row's index; the gradient summed over
//    the sequences) and RoBERTa / XLM-R's offset positions from
//    qac_positions_fill, in batches with padding and a pad token inside a
//    sequence (a row that counts, whose word and position rows torch's
//    nn.Embedding(padding_idx=...) leaves without a gradient);
//  - ModernBERT's embeddings (no position nor token-type table: the word
//    vector alone) and either table alone, forward and backward;
//  - forward: the same three float additions in the same order on both
//    sides: exact;
//  - backward from a zero gradient (as a training step's): a key whose rows
//    fit one plan segment (QAC_SCATTER_SEG rows) is summed in row order on
//    both sides: exact; the keys past one segment (token type 0 of a large
//    batch) are sums of n terms in two orders, each within n u sum|x| of
//    the exact sum (u = 2^-24, recursive summation), so within
//    2 n u sum|x| of each other.
// Outputs start as NaN: every element the kernels own must be written.
//
// What this cannot show, and test_gpu_train_step does on a GPU: the
// launchers' grids on the device, the whole step on a RoBERTa checkpoint.
#include "cuda_emu.h"

#undef __shared__
#define __shared__ static

#include "../../kernels/train_embed.cu"

#define EMU_TEST_SEED 0x5D1C3B2A19E8F7A1ull
#include "emu_testutil.h"

extern "C" {
#include "bert_cpu.h"
#include "qac_scatter_plan.h"
}

namespace {

uint32_t nexti() { return (uint32_t)(emu_next() >> 32); }

// The plan's scatter on the emulator, as qac_kt_scatter_add launches it.
void scatter(std::vector<float> &dst, const std::vector<float> &dout, const int32_t *keys, int N, int K, int C) {
    std::vector<int32_t> plan(qac_scatter_plan_ints(N)), counts((size_t)K + 1);
    const qac_scatter_plan p = qac_scatter_plan_build(plan.data(), keys, N, K, counts.data());
    if (p.n_keys == 0) return;
    const int32_t *rows = plan.data(), *seg = rows + N, *key_seg = rows + 2 * (size_t)N + 1,
                  *ks = rows + 3 * (size_t)N + 2;
    std::vector<float> partial((size_t)p.n_segs * C, NAN);
    const unsigned gx = (unsigned)((C + COL_THREADS - 1) / COL_THREADS);
    emu_launch({gx, (unsigned)p.n_segs, 1}, COL_THREADS,
               [&] { scatter_partial_kernel(partial.data(), dout.data(), rows, seg, C); });
    emu_launch({gx, (unsigned)p.n_keys, 1}, COL_THREADS,
               [&] { scatter_finish_kernel(dst.data(), partial.data(), key_seg, ks, C); });
}

// got against want: exact where the CPU's sum for that row of keys had at
// most QAC_SCATTER_SEG terms, else within 2 n u sum|x| (n terms).
void compare(const char *what, const char *shape, const std::vector<float> &got, const std::vector<float> &want,
             const std::vector<int> &terms, const std::vector<double> &abssum, int C) {
    size_t bad = 0, inexact_keys = 0;
    double worst = 0;
    for (size_t k = 0; k < terms.size(); k++) {
        inexact_keys += terms[k] > QAC_SCATTER_SEG;
        for (int c = 0; c < C; c++) {
            const size_t i = k * C + c;
            const double d = fabs((double)got[i] - want[i]);
            if (std::isnan(got[i]) || std::isnan(want[i])) {
                bad++;
                continue;
            }
            if (terms[k] <= QAC_SCATTER_SEG) {
                bad += memcmp(&got[i], &want[i], sizeof(float)) != 0;
            } else {
                const double bound = 2.0 * terms[k] * 0x1p-24 * abssum[i];
                bad += d > bound;
                worst = d / bound > worst ? d / bound : worst;
            }
        }
    }
    printf("%-22s %-34s %zu of %zu differ (must be 0); %zu keys past one segment, worst %.2f of the bound\n", what,
           shape, bad, got.size(), inexact_keys, worst);
    CHECK_MSG(bad == 0, "%s %s: %zu elements differ from the CPU twin", what, shape, bad);
}

void test(int B, int T, int C, int offset, int V, int P, int Tt) {
    qac_bert_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.positions = offset ? QAC_POS_OFFSET : QAC_POS_LEARNED;
    cfg.pad_token_id = 1; // RoBERTa's <pad>
    cfg.vocab_size = V;
    cfg.max_position = P;
    const int N = B * T, pad = cfg.pad_token_id;
    std::vector<int32_t> ids(N), types(N), pos(N);
    std::vector<int> lens(B);
    for (int b = 0; b < B; b++) {
        lens[b] = b == 0 ? T : 1 + (int)(nexti() % (uint32_t)T);
        for (int t = 0; t < T; t++) {
            int32_t id = t >= lens[b] ? pad : (int32_t)(nexti() % (uint32_t)V);
            if (b == 0 && t == 2) id = pad; // a pad token inside a sequence
            ids[(size_t)b * T + t] = id;
            types[(size_t)b * T + t] = (int32_t)(nexti() % (uint32_t)Tt);
        }
    }
    qac_positions_fill(pos.data(), ids.data(), lens.data(), NULL, B, T, &cfg);
    const int32_t *pos_ids = offset ? pos.data() : NULL;
    std::vector<float> word = rnd((size_t)V * C, -1, 1), pe = rnd((size_t)P * C, -1, 1),
                       te = rnd((size_t)Tt * C, -1, 1);
    char shape[96];
    snprintf(shape, sizeof shape, "B%d T%d C%d V%d %s", B, T, C, V, offset ? "offset positions" : "learned positions");

    // forward
    std::vector<float> emb((size_t)N * C, NAN), want((size_t)N * C);
    emu_launch({(unsigned)N, 1, 1}, 256, [&] {
        embed_fwd_kernel(emb.data(), ids.data(), types.data(), pos_ids, word.data(), pe.data(), te.data(), T, C);
    });
    qac_embeddings_forward_at(want.data(), ids.data(), types.data(), pos_ids, word.data(), pe.data(), te.data(), B, T,
                              C, NULL);
    compare("embeddings fwd", shape, emb, want, std::vector<int>(N, 1), std::vector<double>(), C);

    // backward, as the trainer plans it
    const std::vector<float> dout = rnd((size_t)N * C, -1, 1);
    std::vector<float> dw((size_t)V * C, 0.f), dp((size_t)P * C, 0.f), dt((size_t)Tt * C, 0.f);
    std::vector<float> tw = dw, tp = dp, tt = dt;
    std::vector<int32_t> keys(N);
    qac_scatter_keys_unpadded(keys.data(), ids.data(), N, pad);
    scatter(dw, dout, keys.data(), N, V, C);
    scatter(dt, dout, types.data(), N, Tt, C);
    if (offset) {
        qac_scatter_keys_unpadded(keys.data(), pos.data(), N, pad);
        scatter(dp, dout, keys.data(), N, P, C);
    } else {
        emu_launch({(unsigned)(((size_t)T * C + 255) / 256), 1, 1}, 256,
                   [&] { pos_bwd_kernel(dp.data(), dout.data(), B, T, C); });
    }
    qac_embeddings_backward_at(tw.data(), tp.data(), tt.data(), dout.data(), ids.data(), types.data(), pos_ids, pad,
                               offset ? pad : -1, B, T, C);
    // each key's number of terms and sum of |x| on the CPU's side
    std::vector<int> nw(V), np(P), nt(Tt);
    std::vector<double> aw((size_t)V * C), ap((size_t)P * C), at((size_t)Tt * C);
    for (int r = 0; r < N; r++) {
        const int w = ids[r] != pad ? ids[r] : -1;
        const int p = offset ? (pos[r] != pad ? pos[r] : -1) : r % T;
        for (int c = 0; c < C; c++) {
            const double x = fabs(dout[(size_t)r * C + c]);
            if (w >= 0) aw[(size_t)w * C + c] += x;
            if (p >= 0) ap[(size_t)p * C + c] += x;
            at[(size_t)types[r] * C + c] += x;
        }
        nw[w >= 0 ? w : 0] += w >= 0, np[p >= 0 ? p : 0] += p >= 0, nt[types[r]]++;
    }
    compare("embeddings bwd word", shape, dw, tw, nw, aw, C);
    compare("embeddings bwd pos", shape, dp, tp, np, ap, C);
    compare("embeddings bwd type", shape, dt, tt, nt, at, C);
    // the frozen rows: none of the padding id's word row, nor (offset) of position padding_idx
    bool frozen = true;
    for (int c = 0; c < C; c++) frozen &= dw[(size_t)pad * C + c] == 0.f && (!offset || dp[(size_t)pad * C + c] == 0.f);
    CHECK_MSG(frozen, "%s: the padding rows got a gradient", shape);
}

// Tables left out (NULL): ModernBERT's word vector alone (rotary positions,
// no token types), and one of the two tables: forward exact against the
// twin's branches; the backward, the word rows alone, exact (one segment
// per key here).
void test_tables(int B, int T, int C, int V, bool with_pos, bool with_type) {
    // pad: id 0 here, drawn among the ids: its word row gets no gradient (the
    // padding_idx of ModernBERT's nn.Embedding, as every family's)
    const int N = B * T, pad = 0;
    std::vector<int32_t> ids(N), types(N);
    for (int r = 0; r < N; r++) ids[r] = (int32_t)(nexti() % (uint32_t)V), types[r] = (int32_t)(nexti() % 2u);
    const std::vector<float> word = rnd((size_t)V * C, -1, 1), pe = rnd((size_t)T * C, -1, 1),
                             te = rnd((size_t)2 * C, -1, 1);
    const float *pos = with_pos ? pe.data() : NULL, *type = with_type ? te.data() : NULL;
    char shape[96];
    snprintf(shape, sizeof shape, "B%d T%d C%d V%d %s", B, T, C, V,
             with_pos ? (with_type ? "both tables" : "no type table") : with_type ? "no position table" : "word alone");
    std::vector<float> emb((size_t)N * C, NAN), want((size_t)N * C);
    emu_launch({(unsigned)N, 1, 1}, 256,
               [&] { embed_fwd_kernel(emb.data(), ids.data(), types.data(), NULL, word.data(), pos, type, T, C); });
    qac_embeddings_forward_at(want.data(), ids.data(), types.data(), NULL, word.data(), pos, type, B, T, C, NULL);
    compare("embeddings fwd", shape, emb, want, std::vector<int>(N, 1), std::vector<double>(), C);
    if (with_pos || with_type) return;
    const std::vector<float> dout = rnd((size_t)N * C, -1, 1);
    std::vector<float> dw((size_t)V * C, 0.f), tw = dw;
    std::vector<int32_t> keys(N);
    qac_scatter_keys_unpadded(keys.data(), ids.data(), N, pad);
    scatter(dw, dout, keys.data(), N, V, C);
    qac_embeddings_backward_at(tw.data(), NULL, NULL, dout.data(), ids.data(), NULL, NULL, pad, -1, B, T, C);
    std::vector<int> nw(V);
    for (int r = 0; r < N; r++) nw[ids[r]] += ids[r] != pad;
    compare("embeddings bwd word", shape, dw, tw, nw, std::vector<double>((size_t)V * C), C);
}

} // namespace

int main() {
    // ModernBERT: the word vector alone; and either table alone
    test_tables(3, 20, 64, 300, false, false);
    test_tables(2, 9, 300, 50, true, false);
    test_tables(2, 9, 300, 50, false, true);
    // RoBERTa / XLM-R: positions offset past the padding index; one token type
    test(3, 40, 64, 1, 50, 44, 1);
    test(4, 17, 300, 1, 1000, 40, 1); // C past two column blocks
    // BERT: learned positions, two token types
    test(3, 40, 64, 0, 50, 40, 2);
    // a batch whose token type 0 and common words pass one segment (the bound)
    test(8, 64, 32, 1, 20, 70, 1);
    test(8, 64, 32, 0, 20, 64, 2);
    return qac_test_summary();
}
