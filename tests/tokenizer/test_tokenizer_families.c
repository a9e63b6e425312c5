/* Token ids of every encoder family against transformers' AutoTokenizer:
 * hf_families.py builds the tokenizer directories (XLM-R as multilingual-e5,
 * bge-m3 and paraphrase-multilingual-MiniLM ship it, RoBERTa, ModernBERT, a
 * BERT tokenizer.json, a Unigram with Precompiled, and tokenizer.json files
 * using the other normalizers / pre-tokenizers / post-processors) and the
 * reference records, then runs this program on its work directory.
 *
 * Per directory and text: ids without specials, their byte offsets, encode
 * truncated to the model's limit and to 24, pairs truncated to the limit
 * and to 40 (ids and token types), and decode. Texts: Cranfield documents
 * and queries, Debian descriptions, the multilingual lines, the WordPiece
 * edge cases (invalid UTF-8 included), two texts past 8192 tokens.
 *
 * Then the same directories as a Hugging Face cache holds them (files as
 * links into blobs/, refs/main naming the snapshot, one snapshot without
 * the SentencePiece model): --model ORG/NAME must resolve to them and give
 * the same ids.
 *
 * Usage: test_tokenizer_families WORK_DIR */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qac_model.h"
#include "qac_pair.h"
#include "qac_tokenizer.h"
#include "qac_util.h"
#include "testutil.h"

#define MAXN (1 << 18)

typedef struct text {
    char *s;
    size_t len;
} text;

static text *texts;
static int n_texts;

static uint64_t splitmix(uint64_t i) {
    uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* hf_families.nhash: sum of (x_i + 1) * splitmix64(i) mod 2^64 */
static uint64_t nhash(const int32_t *x, int n) {
    uint64_t h = 0;
    for (int i = 0; i < n; i++) h += (uint64_t)((int64_t)x[i] + 1) * splitmix((uint64_t)i);
    return h;
}

static int hexval(int c) { return c >= 'a' ? c - 'a' + 10 : c >= 'A' ? c - 'A' + 10 : c - '0'; }

static int load_texts(const char *work) {
    char path[4096];
    snprintf(path, sizeof path, "%s/texts.hex", work);
    char *data;
    size_t len;
    if (qac_read_file(path, &data, &len)) {
        fprintf(stderr, "cannot read %s: %s\n", path, qac_last_error());
        return -1;
    }
    int cap = 0;
    for (size_t i = 0; i < len;) {
        size_t e = i;
        while (e < len && data[e] != '\n') e++;
        if (n_texts == cap) {
            cap = cap ? cap * 2 : 4096;
            texts = realloc(texts, (size_t)cap * sizeof *texts);
        }
        text *t = &texts[n_texts++];
        t->len = (e - i) / 2;
        t->s = malloc(t->len + 1);
        for (size_t k = 0; k < t->len; k++) t->s[k] = (char)(hexval(data[i + 2 * k]) << 4 | hexval(data[i + 2 * k + 1]));
        t->s[t->len] = '\0';
        i = e + 1;
    }
    free(data);
    return 0;
}

static void show_text(int i) {
    fprintf(stderr, "    text %d: \"", i);
    for (size_t k = 0; k < texts[i].len && k < 100; k++) {
        unsigned char c = (unsigned char)texts[i].s[k];
        if (c >= 32 && c < 127 && c != '\\') fputc(c, stderr);
        else fprintf(stderr, "\\x%02x", c);
    }
    fprintf(stderr, "%s\"\n", texts[i].len > 100 ? "..." : "");
}

static void show_ids(const char *what, const int32_t *ids, int n) {
    fprintf(stderr, "    %s (%d):", what, n);
    for (int i = 0; i < n && i < 32; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 32 ? " ...\n" : "\n");
}

typedef struct fam_stats {
    int records, bad, kinds[6];
} fam_stats;

static int32_t got[MAXN], want[MAXN], types[MAXN], offs[2 * MAXN];

/* Numbers after position `off` of line into want[]; returns the count. */
static int tail_numbers(const char *line, int32_t *out) {
    int n = 0;
    for (const char *p = line; n < MAXN;) {
        char *e;
        long v = strtol(p, &e, 10);
        if (e == p) break;
        out[n++] = (int32_t)v;
        p = e;
    }
    return n;
}

static int check_record(const qac_tokenizer *t, const char *line, fam_stats *fs, const char *name) {
    char kind = line[0];
    int a = 0, b = 0, L = 0, n_want = 0, off = 0, ok = 0, skip = 0, strat = 0, side = 0;
    unsigned long long h = 0, th = 0;
    if (kind == 'F' || kind == 'O') ok = sscanf(line + 1, "%d %d %llu%n", &a, &n_want, &h, &off) == 3;
    else if (kind == 'E') ok = sscanf(line + 1, "%d %d %d %llu%n", &a, &L, &n_want, &h, &off) == 4;
    else if (kind == 'P') ok = sscanf(line + 1, "%d %d %d %d %llu %llu%n", &a, &b, &L, &n_want, &h, &th, &off) == 6;
    else if (kind == 'Q')
        ok = sscanf(line + 1, "%d %d %d %d %d %d %llu %llu%n", &a, &b, &L, &strat, &side, &n_want, &h, &th, &off) == 8 &&
             strat >= 0 && strat <= 2 && side >= 0 && side <= 1;
    else if (kind == 'X') ok = sscanf(line + 1, "%d %d %n", &a, &skip, &off) == 2;
    if (!ok || a < 0 || a >= n_texts || b < 0 || b >= n_texts || n_want > MAXN) {
        fprintf(stderr, "%s: bad record %.60s\n", name, line);
        return 1;
    }
    const text *ta = &texts[a], *tb = &texts[b];
    int n = 0, same;
    qac_status st;
    int n_listed = kind == 'X' ? 0 : tail_numbers(line + 1 + off, want);
    switch (kind) {
    case 'F':
        st = qac_tokenizer_tokenize(t, ta->s, ta->len, got, MAXN, &n);
        same = !st && n == n_want && nhash(got, n) == h && (!n_listed || !memcmp(got, want, (size_t)n * sizeof *got));
        break;
    case 'O':
        st = qac_tokenizer_tokenize_offsets(t, ta->s, ta->len, got, offs, MAXN, &n);
        same = !st && n == n_want && nhash(offs, 2 * n) == h;
        break;
    case 'E':
        st = qac_tokenizer_encode(t, ta->s, ta->len, L, got, &n);
        same = !st && n == n_want && nhash(got, n) == h && (!n_listed || !memcmp(got, want, (size_t)n * sizeof *got));
        break;
    case 'P': { /* the tokenizer's pair, and the cross-encoder's (api/qac_pair.h) */
        st = qac_tokenizer_encode_pair(t, ta->s, ta->len, tb->s, tb->len, L, got, types, &n);
        same = !st && n == n_want && nhash(got, n) == h && nhash(types, n) == th &&
               (!n_listed || !memcmp(got, want, (size_t)n * sizeof *got));
        qac_pair_opts po = {L, QAC_TRUNC_LONGEST_FIRST, QAC_TRUNC_RIGHT};
        if (same && tb->len) { /* an empty b: encode_pair is HF's single call, qac_pair its batch */
            st = qac_pair_encode(t, ta->s, ta->len, tb->s, tb->len, &po, got, types, &n, NULL);
            same = !st && n == n_want && nhash(got, n) == h && nhash(types, n) == th;
        }
        break;
    }
    case 'Q': {
        qac_pair_opts po = {L, (qac_truncation)strat, side ? QAC_TRUNC_LEFT : QAC_TRUNC_RIGHT};
        st = qac_pair_encode(t, ta->s, ta->len, tb->s, tb->len, &po, got, types, &n, NULL);
        if (n_want < 0) { /* HF refuses: so must qac */
            same = st == QAC_ERR_INVALID;
            st = QAC_OK;
            break;
        }
        same = !st && n == n_want && nhash(got, n) == h && nhash(types, n) == th &&
               (!n_listed || !memcmp(got, want, (size_t)n * sizeof *got));
        break;
    }
    default: { /* X: decode of the tokens */
        st = qac_tokenizer_tokenize(t, ta->s, ta->len, got, MAXN, &n);
        char *dec = NULL;
        if (!st) st = qac_tokenizer_decode(t, got, n, skip, &dec);
        const char *hex = line + 1 + off;
        size_t hl = strcspn(hex, "\r\n");
        same = !st && dec && strlen(dec) * 2 == hl;
        for (size_t k = 0; same && k < hl / 2; k++)
            same = (unsigned char)dec[k] == (unsigned)(hexval(hex[2 * k]) << 4 | hexval(hex[2 * k + 1]));
        if (!same && fs->bad < 6) fprintf(stderr, "%s: decode (skip %d) of text %d: qac \"%.120s\"\n", name, skip, a,
                                          dec ? dec : qac_last_error());
        free(dec);
        break;
    }
    }
    fs->records++;
    if (!same) {
        fs->bad++;
        fs->kinds[kind == 'F' ? 0 : kind == 'O' ? 1 : kind == 'E' ? 2 : kind == 'P' || kind == 'Q' ? 3 : 4]++;
        if (fs->bad <= 6 && kind != 'X') {
            fprintf(stderr, "%s: mismatch on %.70s%s\n", name, line, strlen(line) > 70 ? "..." : "");
            show_text(a);
            if (kind == 'P' || kind == 'Q') show_text(b);
            if (st) fprintf(stderr, "    qac failed: %s\n", qac_last_error());
            if (n_listed) show_ids("HF ", want, n_listed);
            else fprintf(stderr, "    HF  (%d): hash %llu\n", n_want, h);
            show_ids("qac", kind == 'O' ? offs : got, kind == 'O' ? 2 * n : n);
        }
    }
    return 0;
}

/* WORK/hub/models--ORG--NAME: every file of src (but `skip`) as a link into blobs/. */
static int make_hub_entry(const char *work, const char *org, const char *name, const char *src, const char *skip) {
    char repo[4096], path[8192], blob[8192], link[8192];
    snprintf(repo, sizeof repo, "%s/hub/models--%s--%s", work, org, name);
    snprintf(path, sizeof path, "%s/snapshots/0123abcd", repo);
    if (qac_mkdirs(path)) return -1;
    snprintf(path, sizeof path, "%s/blobs", repo);
    if (qac_mkdirs(path)) return -1;
    snprintf(path, sizeof path, "%s/refs", repo);
    if (qac_mkdirs(path)) return -1;
    snprintf(path, sizeof path, "%s/refs/main", repo);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs("0123abcd", f);
    fclose(f);
    DIR *d = opendir(src);
    if (!d) return -1;
    int k = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.' || (skip && !strcmp(e->d_name, skip))) continue;
        char *data;
        size_t len;
        snprintf(path, sizeof path, "%s/%s", src, e->d_name);
        if (qac_read_file(path, &data, &len)) continue;
        snprintf(blob, sizeof blob, "%s/blobs/blob%d", repo, k);
        FILE *b = fopen(blob, "wb");
        if (b) fwrite(data, 1, len, b), fclose(b);
        free(data);
        snprintf(link, sizeof link, "%s/snapshots/0123abcd/%s", repo, e->d_name);
        snprintf(blob, sizeof blob, "../../blobs/blob%d", k++);
        if (symlink(blob, link)) {
            closedir(d);
            return -1;
        }
    }
    closedir(d);
    return 0;
}

/* A cache entry resolved by name gives the ids of the directory itself. */
static void check_hub(const char *work, const char *org, const char *name, const char *family, const char *skip) {
    char src[4096], dir[4096], note[512];
    snprintf(src, sizeof src, "%s/%s", work, family);
    CHECK_MSG(make_hub_entry(work, org, name, src, skip) == 0, "cannot lay out the hub entry for %s", family);
    char spec[256];
    snprintf(spec, sizeof spec, "%s/%s", org, name);
    qac_tokenizer *a = NULL, *b = NULL;
    CHECK_OK(qac_model_resolve(spec, dir, sizeof dir, note, sizeof note));
    CHECK_OK(qac_tokenizer_load(&a, dir));
    CHECK_OK(qac_tokenizer_load(&b, src));
    int same = 0, total = 0;
    for (int i = 0; a && b && i < n_texts; i += 7, total++) {
        int na = 0, nb = 0;
        if (qac_tokenizer_encode(a, texts[i].s, texts[i].len, 512, got, &na) ||
            qac_tokenizer_encode(b, texts[i].s, texts[i].len, 512, want, &nb))
            continue;
        same += na == nb && !memcmp(got, want, (size_t)na * sizeof *got);
    }
    printf("hub cache %-40s %s: %d of %d texts as the directory itself\n", spec, a ? qac_tokenizer_describe(a) : "-",
           same, total);
    CHECK_MSG(same == total && total > 100, "%s from the hub cache: %d of %d texts equal", spec, same, total);
    qac_tokenizer_free(a);
    qac_tokenizer_free(b);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s WORK_DIR (made by hf_families.py)\n", argv[0]);
        return 2;
    }
    if (load_texts(argv[1])) return 1;
    char path[4096];
    snprintf(path, sizeof path, "%s/expected.txt", argv[1]);
    FILE *f = fopen(path, "r");
    CHECK_MSG(f != NULL, "cannot open %s", path);
    if (!f) return qac_test_summary();
    static char line[1 << 22];
    qac_tokenizer *t = NULL;
    char name[128] = "";
    fam_stats fs = {0};
    int families = 0;
    double t0 = qac_now();
    for (;;) {
        char *r = fgets(line, sizeof line, f);
        if (!r || line[0] == 'D') {
            if (t) {
                printf("%-15s %-60s %6d records, %d differ (tokenize %d, offsets %d, encode %d, pair %d, decode %d)\n",
                       name, qac_tokenizer_describe(t), fs.records, fs.bad, fs.kinds[0], fs.kinds[1], fs.kinds[2],
                       fs.kinds[3], fs.kinds[4]);
                CHECK_MSG(fs.bad == 0, "%s: %d of %d records differ from AutoTokenizer", name, fs.bad, fs.records);
                CHECK_MSG(fs.records > 100, "%s: only %d records", name, fs.records);
                qac_tokenizer_free(t);
                t = NULL;
            }
            if (!r) break;
            char dir[4096];
            if (sscanf(line, "D %127s %4095s", name, dir) != 2) {
                CHECK_MSG(0, "bad D record: %.80s", line);
                break;
            }
            memset(&fs, 0, sizeof fs);
            families++;
            if (qac_tokenizer_load(&t, dir)) {
                CHECK_MSG(0, "%s: load %s: %s", name, dir, qac_last_error());
                t = NULL;
            }
            continue;
        }
        if (!t) continue;
        if (check_record(t, line, &fs, name)) fs.bad++;
    }
    fclose(f);
    printf("%d tokenizer directories, %d texts, %.1f s\n", families, n_texts, qac_now() - t0);
    char hub[4096];
    snprintf(hub, sizeof hub, "%s/hub", argv[1]);
    setenv("HF_HUB_CACHE", hub, 1);
    check_hub(argv[1], "intfloat", "multilingual-e5-small", "xlmr_e5", NULL);
    check_hub(argv[1], "BAAI", "bge-m3", "bge_m3", "sentencepiece.bpe.model"); /* a cache filled without it */
    check_hub(argv[1], "answerdotai", "ModernBERT-base", "modernbert", NULL);
    check_hub(argv[1], "FacebookAI", "roberta-base", "roberta", NULL);
    CHECK_MSG(families >= 10, "only %d tokenizer directories", families);
    for (int i = 0; i < n_texts; i++) free(texts[i].s);
    free(texts);
    return qac_test_summary();
}
