/* Tokenizer directories that are broken or incomplete: each gives a clear
 * error (status and a message naming the file, the JSON path or the value),
 * never a crash. Also the interface's newer contracts on small tokenizers
 * written here: templates and num_special, assemble against encode_pair,
 * offsets of text with invalid UTF-8 mapped back to the caller's bytes,
 * describe / kind names, from_json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qac_tokenizer.h"
#include "qac_util.h"
#include "testutil.h"

static char root[3000];

static void put(const char *dir, const char *name, const char *text, size_t len) {
    char p[8192];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) return;
    fwrite(text, 1, len, f);
    fclose(f);
}

/* A fresh directory under the test root holding the given files. */
static const char *make_dir(const char *name, const char *const *files) {
    static char dir[4096];
    snprintf(dir, sizeof dir, "%s/%.64s", root, name);
    mkdir(dir, 0755);
    for (int i = 0; files && files[i]; i += 2) put(dir, files[i], files[i + 1], strlen(files[i + 1]));
    return dir;
}

/* A byte-level BPE in RoBERTa's layout; %s slots: normalizer, pre_tokenizer, post_processor, merges. */
#define BPE_JSON                                                                                                     \
    "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":0,\"content\":\"<s>\",\"special\":true,\"normalized\":false},"     \
    "{\"id\":1,\"content\":\"</s>\",\"special\":true,\"normalized\":false},"                                           \
    "{\"id\":9,\"content\":\"<mask>\",\"special\":true,\"lstrip\":true,\"normalized\":false}],"                        \
    "\"normalizer\":%s,\"pre_tokenizer\":%s,\"post_processor\":%s,\"decoder\":{\"type\":\"ByteLevel\"},"             \
    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"<s>\":0,\"</s>\":1,\"a\":2,\"b\":3,\"ab\":4,\"\\u0120\":5,"            \
    "\"\\u0120ab\":6,\"c\":7,\"<unk>\":8},\"merges\":%s}}"

static char *bpe_json(const char *norm, const char *pre, const char *post, const char *merges) {
    static char buf[8192];
    snprintf(buf, sizeof buf, BPE_JSON, norm, pre, post, merges);
    return buf;
}

#define PRE_BL "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}"
#define POST_RB "{\"type\":\"RobertaProcessing\",\"sep\":[\"</s>\",1],\"cls\":[\"<s>\",0],\"trim_offsets\":true,\"add_prefix_space\":false}"
#define MERGES "[\"a b\",\"\\u0120 ab\"]"

static void expect_error(const char *what, const char *dir, qac_status code, const char *needle) {
    qac_tokenizer *t = NULL;
    qac_status st = qac_tokenizer_load(&t, dir);
    CHECK_MSG(st == code && t == NULL && strstr(qac_last_error(), needle),
              "%s: got %s \"%s\", want %s containing \"%s\"", what, qac_status_name(st), qac_last_error(),
              qac_status_name(code), needle);
    qac_tokenizer_free(t);
}

static void bad_files(void) {
    expect_error("empty directory", make_dir("empty", NULL), QAC_ERR_NOT_FOUND, "found none of those files");
    const char *cfg_only[] = {"config.json", "{\"model_type\":\"modernbert\"}", NULL};
    expect_error("config only", make_dir("cfgonly", cfg_only), QAC_ERR_NOT_FOUND, "found config.json");
    const char *xlmr_none[] = {"tokenizer_config.json", "{\"tokenizer_class\":\"XLMRobertaTokenizer\"}", NULL};
    expect_error("XLM-R without files", make_dir("xlmrnone", xlmr_none), QAC_ERR_NOT_FOUND,
                 "needs sentencepiece.bpe.model or tokenizer.json");
    const char *xlmr_bad[] = {"tokenizer_config.json", "{\"tokenizer_class\":\"XLMRobertaTokenizer\"}",
                              "sentencepiece.bpe.model", "not a protobuf at all", NULL};
    expect_error("XLM-R garbage model", make_dir("xlmrbad", xlmr_bad), QAC_ERR_FORMAT, "sentencepiece.bpe.model");
    const char *syntax[] = {"tokenizer.json", "{\"model\": {\"type\": \"BPE\",", NULL};
    expect_error("JSON syntax", make_dir("syntax", syntax), QAC_ERR_FORMAT, "tokenizer.json:1:");
    const char *nomodel[] = {"tokenizer.json", "{\"normalizer\": null}", NULL};
    expect_error("no model", make_dir("nomodel", nomodel), QAC_ERR_FORMAT, "no \"model\"");
    const char *unknown_norm[] = {"tokenizer.json",
                                  bpe_json("{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"},{\"type\":\"Shout\"}]}",
                                           PRE_BL, POST_RB, MERGES),
                                  NULL};
    expect_error("unknown normalizer", make_dir("unorm", unknown_norm), QAC_ERR_UNSUPPORTED,
                 "normalizer.normalizers[1]: normalizer \"Shout\"");
    const char *unknown_pre[] = {"tokenizer.json", bpe_json("null", "{\"type\":\"UnicodeScripts\"}", POST_RB, MERGES), NULL};
    expect_error("unknown pre-tokenizer", make_dir("upre", unknown_pre), QAC_ERR_UNSUPPORTED, "\"UnicodeScripts\"");
    const char *bad_merge[] = {"tokenizer.json", bpe_json("null", PRE_BL, POST_RB, "[\"a zz\"]"), NULL};
    expect_error("merge of an unknown token", make_dir("bmerge", bad_merge), QAC_ERR_FORMAT,
                 "BPE merge 1 (\"a\" \"zz\"): zz is not in the vocabulary");
    const char *bad_regex[] = {"tokenizer.json",
                               bpe_json("null", "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(a)\\\\1\"},\"behavior\":"
                                                "\"Isolated\",\"invert\":false}", POST_RB, MERGES),
                               NULL};
    expect_error("back-reference", make_dir("bregex", bad_regex), QAC_ERR_UNSUPPORTED, "back-references");
    const char *bad_b64[] = {"tokenizer.json",
                             bpe_json("{\"type\":\"Precompiled\",\"precompiled_charsmap\":\"@@@\"}", PRE_BL, POST_RB, MERGES),
                             NULL};
    expect_error("charsmap not base64", make_dir("b64", bad_b64), QAC_ERR_FORMAT, "not base64");
    /* a trie of 4096 bytes announced in an 8-byte blob */
    const char *short_map[] = {"tokenizer.json",
                               bpe_json("{\"type\":\"Precompiled\",\"precompiled_charsmap\":\"ABAAAAAAAAA=\"}", PRE_BL,
                                        POST_RB, MERGES),
                               NULL};
    expect_error("charsmap cut short", make_dir("shortmap", short_map), QAC_ERR_FORMAT, "trie size 4096 past the 8 bytes");
    const char *no_a[] = {"tokenizer.json",
                          bpe_json("null", PRE_BL,
                                   "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\","
                                   "\"type_id\":0}}],\"pair\":[],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[0],"
                                   "\"tokens\":[\"<s>\"]}}}",
                                   MERGES),
                          NULL};
    expect_error("template without $A", make_dir("noa", no_a), QAC_ERR_UNSUPPORTED, "must hold $A once");
    const char *dropout[] = {"tokenizer.json",
                             "{\"model\":{\"type\":\"BPE\",\"dropout\":0.1,\"vocab\":{\"a\":0},\"merges\":[]}}", NULL};
    expect_error("BPE dropout", make_dir("dropout", dropout), QAC_ERR_UNSUPPORTED, "dropout");
    const char *unk_range[] = {"tokenizer.json", "{\"model\":{\"type\":\"Unigram\",\"unk_id\":7,\"vocab\":[[\"a\",-1.0]]}}",
                               NULL};
    expect_error("Unigram unk_id", make_dir("unkid", unk_range), QAC_ERR_FORMAT, "unk_id is outside model.vocab");
    const char *neg_id[] = {"tokenizer.json", "{\"model\":{\"type\":\"WordLevel\",\"vocab\":{\"a\":-3}}}", NULL};
    expect_error("negative id", make_dir("negid", neg_id), QAC_ERR_FORMAT, "model.vocab[\"a\"] is not a token id");
    const char *vm_bad[] = {"vocab.json", "[1, 2]", "merges.txt", "#version: 0.2\na b\n", NULL};
    expect_error("vocab.json not an object", make_dir("vmbad", vm_bad), QAC_ERR_FORMAT, "must be an object");
    const char *merges_bad[] = {"vocab.json", "{\"a\":0,\"b\":1}", "merges.txt", "#version: 0.2\nab\n", NULL};
    expect_error("merges.txt line without a space", make_dir("mbad", merges_bad), QAC_ERR_FORMAT, "is not \"a b\"");
}

static void contracts(void) {
    const char *rob[] = {"tokenizer.json", bpe_json("null", PRE_BL, POST_RB, MERGES), "config.json",
                         "{\"model_type\":\"roberta\"}", NULL};
    qac_tokenizer *t = NULL;
    CHECK_OK(qac_tokenizer_load(&t, make_dir("rob", rob)));
    if (!t) return;
    CHECK(qac_tokenizer_get_kind(t) == QAC_TOKENIZER_BPE && !strcmp(qac_tokenizer_kind_name(t), "bpe"));
    CHECK_MSG(strstr(qac_tokenizer_describe(t), "RobertaTokenizer") != NULL, "describe: %s", qac_tokenizer_describe(t));
    CHECK(qac_tokenizer_num_special(t, 0) == 2 && qac_tokenizer_num_special(t, 1) == 4);
    qac_special_ids sp = qac_tokenizer_specials(t);
    CHECK_MSG(sp.cls == 0 && sp.bos == 0 && sp.sep == 1 && sp.eos == 1 && sp.mask == 9 && sp.unk == 8,
              "specials cls %d bos %d sep %d eos %d mask %d unk %d", sp.cls, sp.bos, sp.sep, sp.eos, sp.mask, sp.unk);
    CHECK(qac_tokenizer_has_offsets(t));
    /* "ab ab": ab, Ġab; <s> A </s></s> B </s> with all type ids 0 */
    int32_t ids[32], types[32], a[8], b[8], ids2[32], types2[32];
    int n = 0, na = 0, nb = 0, n2 = 0;
    CHECK_OK(qac_tokenizer_tokenize(t, "ab ab", 5, a, 8, &na));
    CHECK_MSG(na == 2 && a[0] == 4 && a[1] == 6, "tokens of \"ab ab\": %d (%d %d)", na, a[0], a[1]);
    CHECK_OK(qac_tokenizer_tokenize(t, "c", 1, b, 8, &nb));
    CHECK_OK(qac_tokenizer_encode_pair(t, "ab ab", 5, "c", 1, 32, ids, types, &n));
    int32_t want[] = {0, 4, 6, 1, 1, 7, 1};
    CHECK_MSG(n == 7 && !memcmp(ids, want, sizeof want), "pair: %d ids", n);
    int zero = 1;
    for (int i = 0; i < n; i++) zero &= types[i] == 0;
    CHECK_MSG(zero, "RoBERTa's type ids are all 0");
    CHECK_OK(qac_tokenizer_assemble(t, a, na, b, nb, 32, ids2, types2, &n2));
    CHECK_MSG(n2 == n && !memcmp(ids, ids2, (size_t)n * sizeof *ids), "assemble equals encode_pair");
    CHECK_OK(qac_tokenizer_assemble(t, a, na, NULL, 0, 3, ids2, NULL, &n2)); /* single, cut to 3 */
    CHECK_MSG(n2 == 3 && ids2[0] == 0 && ids2[1] == 4 && ids2[2] == 1, "assemble single cut: %d", n2);
    CHECK_ERR(qac_tokenizer_encode_pair(t, "a", 1, "b", 1, 3, ids, NULL, &n), QAC_ERR_INVALID, "special tokens");
    /* an added token with lstrip takes the spaces before it (no token of
     * their own), and RoBERTa's trimming leaves them out of its offsets */
    int32_t offs[64];
    const char *txt = "ab  <mask>ab";
    CHECK_OK(qac_tokenizer_tokenize_offsets(t, txt, strlen(txt), ids, offs, 32, &n));
    CHECK_MSG(n == 3 && ids[1] == 9 && offs[2] == 4 && offs[3] == 10, "lstrip <mask>: n %d id %d at [%d, %d)", n,
              n > 1 ? ids[1] : -1, offs[2], offs[3]);
    /* invalid UTF-8: HF sees U+FFFD; offsets still index the caller's bytes */
    const char bad[] = "ab\xff\xfe" "ab";
    CHECK_OK(qac_tokenizer_tokenize_offsets(t, bad, 6, ids, offs, 32, &n));
    int inside = n > 0;
    for (int i = 0; i < n; i++) inside &= offs[2 * i] >= 0 && offs[2 * i] <= offs[2 * i + 1] && offs[2 * i + 1] <= 6;
    CHECK_MSG(inside && offs[0] == 0 && offs[1] == 2 && offs[2 * n - 1] == 6, "offsets over invalid UTF-8 (%d tokens)", n);
    char *dec = NULL;
    int32_t round[] = {0, 4, 6, 9, 1};
    CHECK_OK(qac_tokenizer_decode(t, round, 5, 1, &dec));
    CHECK_MSG(dec && !strcmp(dec, "ab ab"), "decode skipping specials: \"%s\"", dec ? dec : "");
    free(dec);
    qac_tokenizer_free(t);

    /* from_json, and a WordPiece with no unknown token: an error, not a crash */
    const char *wp = "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0,\"##b\":1}},\"pre_tokenizer\":"
                     "{\"type\":\"WhitespaceSplit\"}}";
    CHECK_OK(qac_tokenizer_from_json(&t, wp, strlen(wp), "inline"));
    if (t) {
        CHECK_OK(qac_tokenizer_tokenize(t, "ab a", 4, ids, 8, &n));
        CHECK(n == 3 && ids[0] == 0 && ids[1] == 1 && ids[2] == 0);
        CHECK_ERR(qac_tokenizer_tokenize(t, "xyz", 3, ids, 8, &n), QAC_ERR_FORMAT, "unknown token");
        CHECK(qac_tokenizer_num_special(t, 0) == 0);
        qac_tokenizer_free(t);
    }
    CHECK_ERR(qac_tokenizer_from_json(&t, "[]", 2, "inline"), QAC_ERR_FORMAT, "inline");
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/qac-tokfiles-%ld", tmp && *tmp ? tmp : "/tmp", (long)getpid());
    mkdir(root, 0755);
    bad_files();
    contracts();
    char cmd[3200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return qac_test_summary();
}
