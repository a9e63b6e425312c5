/* Whole-word MLM masking (TRAINING.md): exact word count, whole words only,
 * specials and padding never touched, 80/10/10 over many draws, and the
 * same draws for the same key. Texts are real Cranfield titles through the
 * default model's WordPiece vocabulary. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qac_heads.h"
#include "qac_model.h"
#include "qac_rng.h"
#include "testutil.h"

static const char *texts[] = {
    "experimental investigation of the aerodynamics of a wing in a slipstream",
    "simple shear flow past a flat plate in an incompressible fluid of small viscosity",
    "the boundary layer in simple shear flow past a flat plate",
    "approximate solutions of the incompressible laminar boundary layer equations for a plate in shear flow",
    "one-dimensional transient heat conduction into a double-layer slab subjected to a linear heat input",
    "aeroelastic models: similarity laws and heat transfer hypersonic thermoelasticity"};

int main(void) {
    qac_tokenizer *tok = NULL;
    CHECK_OK(qac_tokenizer_load(&tok, qac_test_model_dir()));
    if (!tok) return qac_test_summary();
    uint8_t *ws = NULL;
    CHECK_OK(qac_word_starts(&ws, tok));
    qac_special_ids sp = qac_tokenizer_specials(tok);
    qac_mask_opts o = {0.3f, sp.mask, qac_tokenizer_vocab_size(tok)};
    long n_mask = 0, n_rand = 0, n_keep = 0;
    int bad_count = 0, bad_whole = 0, bad_special = 0, bad_label = 0, repeat_differs = 0, continuation_words = 0;
    for (int rep = 0; rep < 400; rep++)
        for (size_t s = 0; s < sizeof texts / sizeof *texts; s++) {
            int32_t ids[128], orig[128], labels[128], again[128], lab2[128];
            int n = 0;
            CHECK_OK(qac_tokenizer_encode(tok, texts[s], strlen(texts[s]), 128, orig, &n));
            /* words: runs that start at a non-"##" piece */
            int words = 0;
            for (int t = 1; t < n - 1; t++) {
                words += ws[orig[t]];
                continuation_words += rep == 0 && !ws[orig[t]];
            }
            memcpy(ids, orig, sizeof ids);
            uint64_t key = qac_rng_key(1, (uint64_t)rep, s, 0);
            qac_mask_whole_words(ids, labels, n, ws, &sp, &o, key);
            memcpy(again, orig, sizeof again);
            qac_mask_whole_words(again, lab2, n, ws, &sp, &o, key);
            repeat_differs += memcmp(ids, again, (size_t)n * 4) || memcmp(labels, lab2, (size_t)n * 4);
            int chosen_words = 0;
            for (int t = 0; t < n; t++) {
                int special = orig[t] == sp.cls || orig[t] == sp.sep;
                if (special && (labels[t] != -100 || ids[t] != orig[t])) bad_special++;
                if (labels[t] == -100) {
                    bad_label += ids[t] != orig[t];
                    continue;
                }
                bad_label += labels[t] != orig[t];
                chosen_words += ws[orig[t]];
                /* a chosen continuation's word start is chosen, and so is the next continuation */
                if (!ws[orig[t]] && labels[t - 1] == -100) bad_whole++;
                if (t + 1 < n && !ws[orig[t + 1]] && orig[t + 1] != sp.sep && labels[t + 1] == -100) bad_whole++;
                if (ids[t] == sp.mask) n_mask++;
                else if (ids[t] == orig[t]) n_keep++;
                else n_rand++;
            }
            int want = (int)lround(words * 0.3);
            want = want < 1 ? 1 : want;
            bad_count += chosen_words != want;
        }
    long total = n_mask + n_rand + n_keep;
    /* a random replacement can draw the original token: about 1/V of 10% */
    double fm = (double)n_mask / total, fr = (double)n_rand / total, fk = (double)n_keep / total;
    printf("masked tokens %ld: [MASK] %.4f, random %.4f, kept %.4f; words in the texts continue with ## %d times\n",
           total, fm, fr, fk, continuation_words);
    CHECK_MSG(continuation_words > 0, "the texts must contain multi-piece words");
    CHECK_MSG(bad_count == 0, "%d sequences without exactly max(1, round(0.3 words)) words chosen", bad_count);
    CHECK_MSG(bad_whole == 0, "%d pieces chosen without their whole word", bad_whole);
    CHECK_MSG(bad_special == 0, "%d special tokens touched", bad_special);
    CHECK_MSG(bad_label == 0, "%d labels not the original id (or unchosen tokens changed)", bad_label);
    CHECK_MSG(repeat_differs == 0, "%d draws differ for the same key", repeat_differs);
    /* binomial spread over ~10^4 tokens is ~0.004: 0.02 is five-sigma-safe */
    CHECK_MSG(fabs(fm - 0.8) < 0.02 && fabs(fr - 0.1) < 0.02 && fabs(fk - 0.1) < 0.02,
              "80/10/10 split off: %.3f/%.3f/%.3f", fm, fr, fk);
    free(ws);
    qac_tokenizer_free(tok);
    return qac_test_summary();
}
