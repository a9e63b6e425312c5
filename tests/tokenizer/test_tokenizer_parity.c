/* WordPiece parity with HF BertTokenizerFast on every Cranfield document and
 * query plus generated Unicode edge cases (invalid UTF-8 included), for the
 * default uncased vocabulary and a trained cased one: tokenize, encode at
 * max_len 32 and 512, and longest_first pairs. Expected ids come from
 * tests/reference/gen_tokenizer_fixtures.py. */
#include <stdlib.h>
#include <string.h>

#include "qac_tokenizer.h"
#include "qac_util.h"
#include "testutil.h"
#include "tok_fixture.h"

#define FIXTURES QAC_TEST_DATA "/reference/tokenizer"
#define MAXN 8192

static void print_ids(const char *what, const int32_t *ids, int n) {
    fprintf(stderr, "    %s (%d):", what, n);
    for (int i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

static void print_text(const tok_texts *tt, int i) {
    fprintf(stderr, "    text %d (%s): \"", i, i < tt->n_cranfield ? "cranfield" : "edge case");
    for (size_t k = 0; k < tt->t[i].len && k < 120; k++) {
        unsigned char c = (unsigned char)tt->t[i].s[k];
        if (c >= 32 && c < 127 && c != '\\') fputc(c, stderr);
        else fprintf(stderr, "\\x%02x", c);
    }
    fprintf(stderr, "\"\n");
}

/* Compare every record of one expected_<name>.txt; returns mismatches. */
static int run_model(const char *name, const char *model_dir, const tok_texts *tt, int *records,
                     int *texts_seen) {
    qac_tokenizer *t = NULL;
    CHECK_OK(qac_tokenizer_load(&t, model_dir));
    if (!t) return 1;
    char path[4096];
    snprintf(path, sizeof path, "%s/expected_%s.txt", FIXTURES, name);
    FILE *f = fopen(path, "r");
    CHECK_MSG(f != NULL, "cannot open %s", path);
    if (!f) return 1;
    static char line[1 << 20];
    static int32_t want[MAXN], got[MAXN], types[MAXN];
    int bad = 0, n_rec = 0;
    char *seen = calloc((size_t)tt->n, 1);
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        char kind;
        int a = 0, b = 0, L = 0, first1 = -1, n_want, off = 0;
        unsigned long long h_want;
        int ok;
        if (line[0] == 'F') ok = sscanf(line, "%c %d %d %llu%n", &kind, &a, &n_want, &h_want, &off) == 4;
        else if (line[0] == 'E')
            ok = sscanf(line, "%c %d %d %d %llu%n", &kind, &a, &L, &n_want, &h_want, &off) == 5;
        else
            ok = sscanf(line, "%c %d %d %d %d %d %llu%n", &kind, &a, &b, &L, &first1, &n_want, &h_want, &off) == 7;
        if (!ok || a < 0 || a >= tt->n || b < 0 || b >= tt->n || n_want > MAXN) {
            CHECK_MSG(0, "%s: bad record: %.60s", path, line);
            bad++;
            continue;
        }
        int n_ids = 0; /* ids written in the fixture (short records only) */
        for (char *p = line + off; n_ids < MAXN;) {
            char *e;
            long v = strtol(p, &e, 10);
            if (e == p) break;
            want[n_ids++] = (int32_t)v;
            p = e;
        }
        int n = 0, got_first1 = -1;
        qac_status st;
        if (kind == 'F') st = qac_tokenizer_tokenize(t, tt->t[a].s, tt->t[a].len, got, MAXN, &n);
        else if (kind == 'E') st = qac_tokenizer_encode(t, tt->t[a].s, tt->t[a].len, L, got, &n);
        else {
            st = qac_tokenizer_encode_pair(t, tt->t[a].s, tt->t[a].len, tt->t[b].s, tt->t[b].len, L, got,
                                           types, &n);
            got_first1 = n;
            for (int i = 0; i < n; i++)
                if (types[i] == 1) {
                    got_first1 = i;
                    break;
                }
        }
        n_rec++;
        seen[a] = 1;
        int same = st == QAC_OK && n == n_want && tok_fnv64_ids(got, n < MAXN ? n : MAXN) == h_want &&
                   got_first1 == first1;
        if (same && n_ids) same = n_ids == n && !memcmp(got, want, (size_t)n * sizeof *got);
        if (!same) {
            if (bad < 10) {
                fprintf(stderr, "%s: mismatch on record: %.80s", name, line);
                print_text(tt, a);
                if (kind == 'P') print_text(tt, b);
                if (n_ids) print_ids("HF ", want, n_ids);
                else fprintf(stderr, "    HF  (%d): hash %llu\n", n_want, h_want);
                print_ids("qac", got, n);
                if (kind == 'P') fprintf(stderr, "    first type-1 index HF %d qac %d\n", first1, got_first1);
            }
            bad++;
        }
    }
    fclose(f);
    qac_tokenizer_free(t);
    int distinct = 0;
    for (int i = 0; i < tt->n; i++) distinct += seen[i];
    free(seen);
    *records = n_rec;
    *texts_seen = distinct;
    return bad;
}

int main(void) {
    tok_texts tt;
    if (tok_texts_load(&tt, qac_test_data("cranfield"), FIXTURES)) {
        CHECK_MSG(0, "could not load the parity texts");
        return qac_test_summary();
    }
    printf("texts: %d (%d Cranfield documents and queries, %d edge cases)\n", tt.n, tt.n_cranfield,
           tt.n - tt.n_cranfield);
    struct {
        const char *name, *dir;
    } models[] = {{"uncased", qac_test_model_dir()}, {"cased", FIXTURES "/cased"}};
    for (int m = 0; m < 2; m++) {
        int records = 0, texts = 0;
        double t0 = qac_now();
        int bad = run_model(models[m].name, models[m].dir, &tt, &records, &texts);
        printf("%-8s: %d records over %d texts compared with HF BertTokenizerFast, %d mismatches (%.2f s)\n",
               models[m].name, records, texts, bad, qac_now() - t0);
        CHECK_MSG(bad == 0, "%s: %d of %d records differ from HF", models[m].name, bad, records);
        CHECK_MSG(texts >= 2000, "%s: only %d texts compared", models[m].name, texts);
    }
    tok_texts_free(&tt);
    return qac_test_summary();
}
