/* tokenizer.json (the Hugging Face tokenizers serialization) -> tk_pipe.
 *
 * Reads the model (BPE, WordPiece, Unigram, WordLevel), normalizer,
 * pre-tokenizer, post-processor, decoder and added tokens, with the same
 * defaults and legacy forms tokenizers' deserializers accept (a Metaspace
 * with add_prefix_space, merges as "a b" strings or pairs, a model without
 * "type"). Anything qac does not implement is an error that names the JSON
 * path and what qac reads instead; nothing is silently skipped. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_hf.h"

typedef struct jctx {
    const char *what; /* the file, for messages */
    char path[256];   /* JSON path of the node being read */
} jctx;

static qac_status jerr(const jctx *c, qac_status code, const char *fmt, const char *arg) {
    char msg[512];
    snprintf(msg, sizeof msg, fmt, arg ? arg : "");
    return qac_set_error(code, "%s: %s: %s", c->what, c->path[0] ? c->path : "(top)", msg);
}

static void path_push(jctx *c, size_t *saved, const char *fmt, const char *key, int index) {
    *saved = strlen(c->path);
    size_t room = sizeof c->path - *saved;
    if (key) snprintf(c->path + *saved, room, fmt, *saved ? "." : "", key);
    else snprintf(c->path + *saved, room, "[%d]", index);
}

static void path_pop(jctx *c, size_t saved) { c->path[saved] = '\0'; }

static int jbool(json_t *o, const char *k, int dflt) {
    json_t *v = json_object_get(o, k);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static char *jstrdup(json_t *v, uint32_t *len) {
    if (!json_is_string(v)) return NULL;
    size_t n = json_string_length(v);
    char *s = malloc(n + 1);
    if (!s) return NULL;
    memcpy(s, json_string_value(v), n);
    s[n] = '\0';
    if (len) *len = (uint32_t)n;
    return s;
}

/* One character from a JSON string (Metaspace replacement, Strip content, delimiters). */
static qac_status jchar(const jctx *c, json_t *o, const char *key, uint32_t dflt, uint32_t *out) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return QAC_OK;
    }
    if (!json_is_string(v) || json_string_length(v) == 0) return jerr(c, QAC_ERR_FORMAT, "%s must be one character", key);
    const char *s = json_string_value(v);
    uint32_t i = 0, n = (uint32_t)json_string_length(v);
    *out = (uint32_t)tk_utf8_next(s, n, &i);
    if (i != n) return jerr(c, QAC_ERR_FORMAT, "%s must be one character", key);
    return QAC_OK;
}

static const char *jtype(json_t *o) {
    json_t *t = json_object_get(o, "type");
    return json_is_string(t) ? json_string_value(t) : NULL;
}

/* {"String": s} or {"Regex": r} */
static qac_status parse_pattern(const jctx *c, json_t *o, tk_pattern *p) {
    json_t *pat = json_object_get(o, "pattern");
    json_t *s = json_object_get(pat, "String"), *r = json_object_get(pat, "Regex");
    if (json_is_string(s)) {
        if (!(p->str = jstrdup(s, &p->len))) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        return QAC_OK;
    }
    if (json_is_string(r)) {
        qac_status st = tk_regex_compile(&p->re, json_string_value(r), json_string_length(r));
        if (st) return qac_wrap_error(st, "%s: %s.pattern.Regex \"%.80s\"", c->what, c->path, json_string_value(r));
        return QAC_OK;
    }
    return jerr(c, QAC_ERR_FORMAT, "pattern must be {\"String\": ...} or {\"Regex\": ...}", NULL);
}

static int behavior_of(const char *s) {
    static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    for (int i = 0; s && i < 5; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}

static qac_status prepend_of(const jctx *c, json_t *o, int *scheme) {
    json_t *ps = json_object_get(o, "prepend_scheme");
    json_t *aps = json_object_get(o, "add_prefix_space");
    *scheme = TK_PREPEND_ALWAYS;
    if (json_is_string(ps)) {
        const char *v = json_string_value(ps);
        if (!strcmp(v, "always")) *scheme = TK_PREPEND_ALWAYS;
        else if (!strcmp(v, "first")) *scheme = TK_PREPEND_FIRST;
        else if (!strcmp(v, "never")) *scheme = TK_PREPEND_NEVER;
        else return jerr(c, QAC_ERR_FORMAT, "prepend_scheme \"%s\" (always, first or never)", v);
    }
    if (json_is_false(aps)) {
        if (*scheme != TK_PREPEND_NEVER && json_is_string(ps))
            return jerr(c, QAC_ERR_FORMAT, "add_prefix_space does not match declared prepend_scheme", NULL);
        *scheme = TK_PREPEND_NEVER;
    }
    return QAC_OK;
}

/* ---------- normalizers ---------- */

static qac_status parse_norm(jctx *c, json_t *o, tk_norm **out);

static qac_status parse_norm_list(jctx *c, json_t *arr, struct tk_norm ***kids, int *n) {
    if (!json_is_array(arr)) return jerr(c, QAC_ERR_FORMAT, "a Sequence needs a list", NULL);
    size_t k = json_array_size(arr);
    *kids = calloc(k + 1, sizeof **kids);
    if (!*kids) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < k; i++) {
        size_t saved;
        path_push(c, &saved, NULL, NULL, (int)i);
        (*n)++; /* counted first: a child that fails half-built is freed with the rest */
        qac_status st = parse_norm(c, json_array_get(arr, i), &(*kids)[i]);
        path_pop(c, saved);
        if (st) return st;
    }
    return QAC_OK;
}

static int b64val(char ch) {
    if (ch >= 'A' && ch <= 'Z') return ch - 'A';
    if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9') return ch - '0' + 52;
    if (ch == '+') return 62;
    if (ch == '/') return 63;
    return -1;
}

static qac_status base64_decode(const jctx *c, const char *s, size_t n, unsigned char **out, size_t *len) {
    unsigned char *buf = malloc(n / 4 * 3 + 4);
    if (!buf) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    size_t k = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '=') break;
        int v = b64val(s[i]);
        if (v < 0) {
            free(buf);
            return jerr(c, QAC_ERR_FORMAT, "precompiled_charsmap is not base64", NULL);
        }
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            buf[k++] = (unsigned char)(acc >> bits);
        }
    }
    *out = buf;
    *len = k;
    return QAC_OK;
}

static qac_status parse_norm(jctx *c, json_t *o, tk_norm **out) {
    *out = NULL;
    const char *t = jtype(o);
    if (!t) return jerr(c, QAC_ERR_FORMAT, "a normalizer needs a \"type\"", NULL);
    tk_norm *n = calloc(1, sizeof *n);
    if (!n) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    *out = n;
    static const struct {
        const char *name;
        int kind;
    } simple[] = {{"NFC", TN_NFC}, {"NFD", TN_NFD}, {"NFKC", TN_NFKC}, {"NFKD", TN_NFKD}, {"Lowercase", TN_LOWERCASE},
                  {"StripAccents", TN_STRIP_ACCENTS}, {"Nmt", TN_NMT}, {"ByteLevel", TN_BYTELEVEL}};
    for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++)
        if (!strcmp(t, simple[i].name)) {
            n->kind = simple[i].kind;
            return QAC_OK;
        }
    if (!strcmp(t, "Sequence")) {
        n->kind = TN_SEQUENCE;
        size_t saved;
        path_push(c, &saved, "%s%s", "normalizers", 0);
        qac_status st = parse_norm_list(c, json_object_get(o, "normalizers"), &n->kids, &n->n_kids);
        path_pop(c, saved);
        return st;
    }
    if (!strcmp(t, "BertNormalizer")) {
        n->kind = TN_BERT;
        n->clean_text = jbool(o, "clean_text", 1);
        n->chinese = jbool(o, "handle_chinese_chars", 1);
        n->lowercase = jbool(o, "lowercase", 1);
        n->strip_accents = jbool(o, "strip_accents", n->lowercase); /* null follows lowercase */
        return QAC_OK;
    }
    if (!strcmp(t, "Strip")) {
        n->kind = TN_STRIP;
        n->left = jbool(o, "strip_left", 0);
        n->right = jbool(o, "strip_right", 0);
        return QAC_OK;
    }
    if (!strcmp(t, "Replace")) {
        n->kind = TN_REPLACE;
        qac_status st = parse_pattern(c, o, &n->pat);
        if (st) return st;
        if (!(n->content = jstrdup(json_object_get(o, "content"), &n->content_len)))
            return jerr(c, QAC_ERR_FORMAT, "Replace needs a string \"content\"", NULL);
        return QAC_OK;
    }
    if (!strcmp(t, "Prepend")) {
        n->kind = TN_PREPEND;
        if (!(n->content = jstrdup(json_object_get(o, "prepend"), &n->content_len)))
            return jerr(c, QAC_ERR_FORMAT, "Prepend needs a string \"prepend\"", NULL);
        return QAC_OK;
    }
    if (!strcmp(t, "Precompiled")) {
        n->kind = TN_PRECOMPILED;
        json_t *m = json_object_get(o, "precompiled_charsmap");
        if (json_is_null(m)) return QAC_OK; /* an empty charsmap changes nothing */
        if (!json_is_string(m)) return jerr(c, QAC_ERR_FORMAT, "precompiled_charsmap must be a base64 string", NULL);
        unsigned char *blob = NULL;
        size_t len = 0;
        qac_status st = base64_decode(c, json_string_value(m), json_string_length(m), &blob, &len);
        if (st) return st;
        st = len ? tk_precompiled_load(&n->pc, blob, len) : QAC_OK;
        free(blob);
        return st ? qac_wrap_error(st, "%s: %s", c->what, c->path) : QAC_OK;
    }
    return jerr(c, QAC_ERR_UNSUPPORTED,
                "normalizer \"%s\" (qac reads BertNormalizer, NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, "
                "Replace, Prepend, Precompiled, Nmt, ByteLevel and Sequence)",
                t);
}

/* ---------- pre-tokenizers ---------- */

static qac_status parse_pretok(jctx *c, json_t *o, tk_pretok **out) {
    *out = NULL;
    const char *t = jtype(o);
    if (!t) return jerr(c, QAC_ERR_FORMAT, "a pre-tokenizer needs a \"type\"", NULL);
    tk_pretok *p = calloc(1, sizeof *p);
    if (!p) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    *out = p;
    if (!strcmp(t, "Sequence")) {
        p->kind = TP_SEQUENCE;
        json_t *arr = json_object_get(o, "pretokenizers");
        if (!json_is_array(arr)) return jerr(c, QAC_ERR_FORMAT, "Sequence needs \"pretokenizers\"", NULL);
        p->kids = calloc(json_array_size(arr) + 1, sizeof *p->kids);
        if (!p->kids) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < json_array_size(arr); i++) {
            size_t s1, s2;
            path_push(c, &s1, "%s%s", "pretokenizers", 0);
            path_push(c, &s2, NULL, NULL, (int)i);
            p->n_kids++;
            qac_status st = parse_pretok(c, json_array_get(arr, i), &p->kids[i]);
            path_pop(c, s1);
            if (st) return st;
        }
        return QAC_OK;
    }
    if (!strcmp(t, "BertPreTokenizer")) return p->kind = TP_BERT, QAC_OK;
    if (!strcmp(t, "Whitespace")) return p->kind = TP_WHITESPACE, QAC_OK;
    if (!strcmp(t, "WhitespaceSplit")) return p->kind = TP_WHITESPACE_SPLIT, QAC_OK;
    if (!strcmp(t, "ByteLevel")) {
        p->kind = TP_BYTELEVEL;
        p->add_prefix_space = jbool(o, "add_prefix_space", 1);
        p->use_regex = jbool(o, "use_regex", 1);
        return QAC_OK;
    }
    if (!strcmp(t, "Metaspace")) {
        p->kind = TP_METASPACE;
        p->split = jbool(o, "split", 1);
        qac_status st = jchar(c, o, "replacement", 0x2581, &p->replacement);
        return st ? st : prepend_of(c, o, &p->prepend_scheme);
    }
    if (!strcmp(t, "Split")) {
        p->kind = TP_SPLIT;
        p->invert = jbool(o, "invert", 0);
        json_t *b = json_object_get(o, "behavior");
        p->behavior = behavior_of(json_string_value(b));
        if (p->behavior < 0)
            return jerr(c, QAC_ERR_FORMAT, "behavior \"%s\" (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous)",
                        json_is_string(b) ? json_string_value(b) : "?");
        return parse_pattern(c, o, &p->pat);
    }
    if (!strcmp(t, "Punctuation")) {
        p->kind = TP_PUNCTUATION;
        json_t *b = json_object_get(o, "behavior");
        p->behavior = b ? behavior_of(json_string_value(b)) : TS_ISOLATED;
        if (p->behavior < 0) return jerr(c, QAC_ERR_FORMAT, "unknown Punctuation behavior", NULL);
        return QAC_OK;
    }
    if (!strcmp(t, "Digits")) {
        p->kind = TP_DIGITS;
        p->individual_digits = jbool(o, "individual_digits", 0);
        return QAC_OK;
    }
    if (!strcmp(t, "CharDelimiterSplit")) {
        p->kind = TP_CHAR_DELIMITER;
        return jchar(c, o, "delimiter", ' ', &p->replacement);
    }
    return jerr(c, QAC_ERR_UNSUPPORTED,
                "pre-tokenizer \"%s\" (qac reads BertPreTokenizer, ByteLevel, Whitespace, WhitespaceSplit, Metaspace, "
                "Split, Punctuation, Digits, CharDelimiterSplit and Sequence)",
                t);
}

/* ---------- model ---------- */

static qac_status vocab_from_object(jctx *c, json_t *v, tk_model *m) {
    if (!json_is_object(v)) return jerr(c, QAC_ERR_FORMAT, "model.vocab must be an object {token: id}", NULL);
    size_t n = json_object_size(v);
    const char **toks = malloc((n + 1) * sizeof *toks);
    uint32_t *lens = malloc((n + 1) * sizeof *lens);
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    qac_status st = QAC_OK;
    if (!toks || !lens || !ids) st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
    size_t k = 0;
    const char *key;
    json_t *val;
    void *iter = json_object_iter(v);
    for (; !st && iter; iter = json_object_iter_next(v, iter)) {
        key = json_object_iter_key(iter);
        val = json_object_iter_value(iter);
        if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) > INT32_MAX) {
            st = jerr(c, QAC_ERR_FORMAT, "model.vocab[\"%.60s\"] is not a token id", key);
            break;
        }
        toks[k] = key;
        lens[k] = (uint32_t)strlen(key);
        ids[k++] = (int32_t)json_integer_value(val);
    }
    if (!st) st = tk_vocab_init(&m->vocab, (int)k, toks, lens, ids);
    free(toks);
    free(lens);
    free(ids);
    return st;
}

static qac_status parse_merges(jctx *c, json_t *arr, tk_model *m) {
    if (!json_is_array(arr)) return jerr(c, QAC_ERR_FORMAT, "model.merges must be a list", NULL);
    size_t n = json_array_size(arr);
    const char **a = malloc((n + 1) * sizeof *a), **b = malloc((n + 1) * sizeof *b);
    uint32_t *al = malloc((n + 1) * sizeof *al), *bl = malloc((n + 1) * sizeof *bl);
    qac_status st = !a || !b || !al || !bl ? qac_set_error(QAC_ERR_NOMEM, "out of memory") : QAC_OK;
    for (size_t i = 0; !st && i < n; i++) {
        json_t *e = json_array_get(arr, i);
        if (json_is_string(e)) {
            const char *s = json_string_value(e);
            const char *sp = strchr(s, ' ');
            if (!sp) {
                char idx[32];
                snprintf(idx, sizeof idx, "%zu", i);
                st = jerr(c, QAC_ERR_FORMAT, "model.merges[%s] is not \"a b\"", idx);
                break;
            }
            a[i] = s, al[i] = (uint32_t)(sp - s);
            b[i] = sp + 1, bl[i] = (uint32_t)strlen(sp + 1);
        } else if (json_is_array(e) && json_array_size(e) == 2 && json_is_string(json_array_get(e, 0)) &&
                   json_is_string(json_array_get(e, 1))) {
            a[i] = json_string_value(json_array_get(e, 0)), al[i] = (uint32_t)json_string_length(json_array_get(e, 0));
            b[i] = json_string_value(json_array_get(e, 1)), bl[i] = (uint32_t)json_string_length(json_array_get(e, 1));
        } else {
            char idx[32];
            snprintf(idx, sizeof idx, "%zu", i);
            st = jerr(c, QAC_ERR_FORMAT, "model.merges[%s] is neither \"a b\" nor [a, b]", idx);
        }
    }
    int bad;
    if (!st) st = tk_bpe_add_merges(m, (int)n, a, al, b, bl, &bad);
    if (st && st != QAC_ERR_NOMEM) st = qac_wrap_error(st, "%s", c->what);
    free(a);
    free(b);
    free(al);
    free(bl);
    return st;
}

static qac_status unk_from_token(jctx *c, json_t *o, tk_model *m, int required) {
    json_t *u = json_object_get(o, "unk_token");
    m->unk = -1;
    if (!json_is_string(u)) return QAC_OK;
    m->unk = tk_vocab_find(&m->vocab, json_string_value(u), json_string_length(u));
    if (m->unk < 0 && required)
        return jerr(c, QAC_ERR_FORMAT, "the unknown token \"%.60s\" is not in model.vocab", json_string_value(u));
    return QAC_OK;
}

static qac_status parse_model(jctx *c, json_t *o, tk_model *m) {
    if (!json_is_object(o)) return jerr(c, QAC_ERR_FORMAT, "no \"model\" object", NULL);
    const char *t = jtype(o);
    json_t *vocab = json_object_get(o, "vocab");
    if (!t) /* older files: the fields tell the kind */
        t = json_object_get(o, "merges") ? "BPE"
            : json_is_array(vocab)       ? "Unigram"
            : json_object_get(o, "max_input_chars_per_word") ? "WordPiece"
                                                             : "WordLevel";
    qac_status st;
    if (!strcmp(t, "BPE")) {
        m->kind = TM_BPE;
        json_t *d = json_object_get(o, "dropout");
        if (json_is_number(d) && json_number_value(d) != 0.0)
            return jerr(c, QAC_ERR_UNSUPPORTED, "BPE dropout is random at encode time; qac tokenizes deterministically "
                                                "(set \"dropout\": null)", NULL);
        if ((st = vocab_from_object(c, vocab, m))) return st;
        m->prefix = jstrdup(json_object_get(o, "continuing_subword_prefix"), &m->prefix_len);
        m->suffix = jstrdup(json_object_get(o, "end_of_word_suffix"), &m->suffix_len);
        if (m->prefix && !m->prefix_len) free(m->prefix), m->prefix = NULL;
        if (m->suffix && !m->suffix_len) free(m->suffix), m->suffix = NULL;
        m->fuse_unk = jbool(o, "fuse_unk", 0);
        m->byte_fallback = jbool(o, "byte_fallback", 0);
        m->ignore_merges = jbool(o, "ignore_merges", 0);
        if ((st = unk_from_token(c, o, m, 0))) return st;
        return parse_merges(c, json_object_get(o, "merges"), m);
    }
    if (!strcmp(t, "WordPiece") || !strcmp(t, "WordLevel")) {
        m->kind = !strcmp(t, "WordPiece") ? TM_WORDPIECE : TM_WORDLEVEL;
        if ((st = vocab_from_object(c, vocab, m))) return st;
        if (m->kind == TM_WORDPIECE) {
            json_t *p = json_object_get(o, "continuing_subword_prefix");
            m->prefix = p ? jstrdup(p, &m->prefix_len) : strdup("##");
            if (!p) m->prefix_len = 2;
            if (!m->prefix) return jerr(c, QAC_ERR_FORMAT, "continuing_subword_prefix must be a string", NULL);
            json_t *mc = json_object_get(o, "max_input_chars_per_word");
            m->max_chars = json_is_integer(mc) ? (int)json_integer_value(mc) : 100;
        }
        return unk_from_token(c, o, m, 0);
    }
    if (!strcmp(t, "Unigram")) {
        m->kind = TM_UNIGRAM;
        if (!json_is_array(vocab)) return jerr(c, QAC_ERR_FORMAT, "Unigram model.vocab must be a list of [piece, score]", NULL);
        size_t n = json_array_size(vocab);
        const char **toks = malloc((n + 1) * sizeof *toks);
        uint32_t *lens = malloc((n + 1) * sizeof *lens);
        int32_t *ids = malloc((n + 1) * sizeof *ids);
        m->scores = malloc((n + 1) * sizeof *m->scores);
        st = !toks || !lens || !ids || !m->scores ? qac_set_error(QAC_ERR_NOMEM, "out of memory") : QAC_OK;
        for (size_t i = 0; !st && i < n; i++) {
            json_t *e = json_array_get(vocab, i);
            json_t *p = json_array_get(e, 0), *sc = json_array_get(e, 1);
            if (!json_is_string(p) || !json_is_number(sc)) {
                char idx[32];
                snprintf(idx, sizeof idx, "%zu", i);
                st = jerr(c, QAC_ERR_FORMAT, "model.vocab[%s] is not [piece, score]", idx);
                break;
            }
            toks[i] = json_string_value(p);
            lens[i] = (uint32_t)json_string_length(p);
            ids[i] = (int32_t)i;
            m->scores[i] = json_number_value(sc);
        }
        if (!st) st = tk_vocab_init(&m->vocab, (int)n, toks, lens, ids);
        free(toks);
        free(lens);
        free(ids);
        if (st) return st;
        if (!n) return jerr(c, QAC_ERR_FORMAT, "Unigram model.vocab is empty", NULL);
        json_t *u = json_object_get(o, "unk_id");
        m->unk = -1;
        if (json_is_integer(u)) {
            if (json_integer_value(u) < 0 || json_integer_value(u) >= (json_int_t)n)
                return jerr(c, QAC_ERR_FORMAT, "unk_id is outside model.vocab", NULL);
            m->unk = (int32_t)json_integer_value(u);
        }
        m->byte_fallback = jbool(o, "byte_fallback", 0);
        return QAC_OK;
    }
    return jerr(c, QAC_ERR_UNSUPPORTED, "model \"%s\" (qac reads BPE, WordPiece, Unigram and WordLevel)", t);
}

/* ---------- post-processor ---------- */

static int32_t token_pair_id(json_t *pair) {
    json_t *id = json_array_get(pair, 1);
    return json_is_array(pair) && json_is_string(json_array_get(pair, 0)) && json_is_integer(id) &&
                   json_integer_value(id) >= 0 && json_integer_value(id) <= INT32_MAX
               ? (int32_t)json_integer_value(id)
               : -1;
}

static void tmpl_add(tk_template *t, int seq, int32_t id, int type_id) {
    if (t->n >= 16) return;
    tk_tmpl_item *it = &t->items[t->n++];
    memset(it, 0, sizeof *it);
    it->seq = seq;
    it->type_id = type_id;
    if (seq < 0) it->ids[0] = id, it->n_ids = 1;
}

static qac_status parse_template_list(jctx *c, json_t *list, json_t *specials, tk_template *t) {
    if (!json_is_array(list)) return jerr(c, QAC_ERR_FORMAT, "a template must be a list", NULL);
    if (json_array_size(list) > 16) return jerr(c, QAC_ERR_UNSUPPORTED, "a template of more than 16 items", NULL);
    t->n = 0;
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *e = json_array_get(list, i);
        json_t *sp = json_object_get(e, "SpecialToken"), *sq = json_object_get(e, "Sequence");
        if (sq) {
            const char *id = json_string_value(json_object_get(sq, "id"));
            if (!id || (strcmp(id, "A") && strcmp(id, "B"))) return jerr(c, QAC_ERR_FORMAT, "a Sequence item must be A or B", NULL);
            tmpl_add(t, id[0] == 'B', -1, (int)json_integer_value(json_object_get(sq, "type_id")));
        } else if (sp) {
            json_t *name = json_object_get(sp, "id");
            json_t *def = json_is_string(name) ? json_object_get(specials, json_string_value(name)) : NULL;
            json_t *ids = json_object_get(def, "ids");
            if (!json_is_array(ids) || json_array_size(ids) == 0 || json_array_size(ids) > 4)
                return jerr(c, QAC_ERR_FORMAT, "special token \"%s\" of the template has no ids in special_tokens (1 to 4)",
                            json_is_string(name) ? json_string_value(name) : "?");
            tmpl_add(t, -1, 0, (int)json_integer_value(json_object_get(sp, "type_id")));
            tk_tmpl_item *it = &t->items[t->n - 1];
            it->n_ids = (int)json_array_size(ids);
            for (int k = 0; k < it->n_ids; k++) {
                json_t *v = json_array_get(ids, (size_t)k);
                if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
                    return jerr(c, QAC_ERR_FORMAT, "special token ids must be token ids", NULL);
                it->ids[k] = (int32_t)json_integer_value(v);
            }
        } else {
            return jerr(c, QAC_ERR_FORMAT, "a template item is {\"SpecialToken\": ...} or {\"Sequence\": ...}", NULL);
        }
    }
    return QAC_OK;
}

/* Sets the single / pair templates and the offset trimming; *set counts
 * processors that add special tokens. */
static qac_status parse_post(jctx *c, json_t *o, tk_pipe *p, int *set) {
    const char *t = jtype(o);
    if (!t) return jerr(c, QAC_ERR_FORMAT, "a post-processor needs a \"type\"", NULL);
    if (!strcmp(t, "Sequence")) {
        json_t *arr = json_object_get(o, "processors");
        if (!json_is_array(arr)) return jerr(c, QAC_ERR_FORMAT, "Sequence needs \"processors\"", NULL);
        for (size_t i = 0; i < json_array_size(arr); i++) {
            size_t s1, s2;
            path_push(c, &s1, "%s%s", "processors", 0);
            path_push(c, &s2, NULL, NULL, (int)i);
            qac_status st = parse_post(c, json_array_get(arr, i), p, set);
            path_pop(c, s1);
            if (st) return st;
        }
        return QAC_OK;
    }
    if (!strcmp(t, "ByteLevel")) {
        p->trim_offsets = jbool(o, "trim_offsets", 1);
        p->trim_prefix_space = jbool(o, "add_prefix_space", 1);
        return QAC_OK;
    }
    if (++*set > 1) return jerr(c, QAC_ERR_UNSUPPORTED, "more than one post-processor adds special tokens", NULL);
    if (!strcmp(t, "BertProcessing") || !strcmp(t, "RobertaProcessing")) {
        int32_t cls = token_pair_id(json_object_get(o, "cls")), sep = token_pair_id(json_object_get(o, "sep"));
        if (cls < 0 || sep < 0) return jerr(c, QAC_ERR_FORMAT, "cls and sep must be [token, id]", NULL);
        int roberta = t[0] == 'R';
        p->single.n = p->pair.n = 0;
        tmpl_add(&p->single, -1, cls, 0);
        tmpl_add(&p->single, 0, -1, 0);
        tmpl_add(&p->single, -1, sep, 0);
        tmpl_add(&p->pair, -1, cls, 0);
        tmpl_add(&p->pair, 0, -1, 0);
        tmpl_add(&p->pair, -1, sep, 0);
        if (roberta) tmpl_add(&p->pair, -1, sep, 0);
        tmpl_add(&p->pair, 1, -1, !roberta);
        tmpl_add(&p->pair, -1, sep, !roberta);
        if (roberta) {
            p->trim_offsets = jbool(o, "trim_offsets", 1);
            p->trim_prefix_space = jbool(o, "add_prefix_space", 1);
        }
        return QAC_OK;
    }
    if (!strcmp(t, "TemplateProcessing")) {
        json_t *specials = json_object_get(o, "special_tokens");
        qac_status st = parse_template_list(c, json_object_get(o, "single"), specials, &p->single);
        if (!st) st = parse_template_list(c, json_object_get(o, "pair"), specials, &p->pair);
        return st;
    }
    return jerr(c, QAC_ERR_UNSUPPORTED,
                "post-processor \"%s\" (qac reads BertProcessing, RobertaProcessing, TemplateProcessing, ByteLevel and "
                "Sequence)",
                t);
}

/* Without a post-processor: the sequences alone (pair: A then B, type 0 and 1). */
static void plain_templates(tk_pipe *p) {
    p->single.n = p->pair.n = 0;
    tmpl_add(&p->single, 0, -1, 0);
    tmpl_add(&p->pair, 0, -1, 0);
    tmpl_add(&p->pair, 1, -1, 1);
}

/* ---------- decoder ---------- */

static qac_status parse_dec(jctx *c, json_t *o, tk_dec **out) {
    *out = NULL;
    const char *t = jtype(o);
    if (!t) return jerr(c, QAC_ERR_FORMAT, "a decoder needs a \"type\"", NULL);
    tk_dec *d = calloc(1, sizeof *d);
    if (!d) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    *out = d;
    if (!strcmp(t, "Sequence")) {
        d->kind = TD_SEQUENCE;
        json_t *arr = json_object_get(o, "decoders");
        if (!json_is_array(arr)) return jerr(c, QAC_ERR_FORMAT, "Sequence needs \"decoders\"", NULL);
        d->kids = calloc(json_array_size(arr) + 1, sizeof *d->kids);
        if (!d->kids) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < json_array_size(arr); i++) {
            d->n_kids++;
            qac_status st = parse_dec(c, json_array_get(arr, i), &d->kids[i]);
            if (st) return st;
        }
        return QAC_OK;
    }
    if (!strcmp(t, "ByteLevel")) return d->kind = TD_BYTELEVEL, QAC_OK;
    if (!strcmp(t, "Fuse")) return d->kind = TD_FUSE, QAC_OK;
    if (!strcmp(t, "ByteFallback")) return d->kind = TD_BYTE_FALLBACK, QAC_OK;
    if (!strcmp(t, "Metaspace")) {
        d->kind = TD_METASPACE;
        qac_status st = jchar(c, o, "replacement", 0x2581, &d->replacement);
        return st ? st : prepend_of(c, o, &d->prepend_scheme);
    }
    if (!strcmp(t, "WordPiece")) {
        d->kind = TD_WORDPIECE;
        json_t *pf = json_object_get(o, "prefix");
        d->prefix = pf ? jstrdup(pf, &d->prefix_len) : strdup("##");
        if (!pf) d->prefix_len = 2;
        d->cleanup = jbool(o, "cleanup", 1);
        return d->prefix ? QAC_OK : jerr(c, QAC_ERR_FORMAT, "WordPiece prefix must be a string", NULL);
    }
    if (!strcmp(t, "BPEDecoder")) {
        d->kind = TD_BPE;
        json_t *sf = json_object_get(o, "suffix");
        d->suffix = sf ? jstrdup(sf, &d->suffix_len) : strdup("</w>");
        if (!sf) d->suffix_len = 4;
        return d->suffix ? QAC_OK : jerr(c, QAC_ERR_FORMAT, "BPEDecoder suffix must be a string", NULL);
    }
    if (!strcmp(t, "Replace")) {
        d->kind = TD_REPLACE;
        qac_status st = parse_pattern(c, o, &d->pat);
        if (st) return st;
        d->content = jstrdup(json_object_get(o, "content"), &d->content_len);
        return d->content ? QAC_OK : jerr(c, QAC_ERR_FORMAT, "Replace needs a string \"content\"", NULL);
    }
    if (!strcmp(t, "Strip")) {
        d->kind = TD_STRIP;
        uint32_t ch;
        qac_status st = jchar(c, o, "content", ' ', &ch);
        d->strip_content = (int)ch;
        d->strip_start = (int)json_integer_value(json_object_get(o, "start"));
        d->strip_stop = (int)json_integer_value(json_object_get(o, "stop"));
        return st;
    }
    return jerr(c, QAC_ERR_UNSUPPORTED,
                "decoder \"%s\" (qac reads ByteLevel, Metaspace, WordPiece, BPEDecoder, Replace, Strip, Fuse, "
                "ByteFallback and Sequence)",
                t);
}

/* ---------- added tokens ---------- */

static qac_status parse_added(jctx *c, json_t *arr, tk_pipe *p) {
    if (!arr || json_is_null(arr)) return QAC_OK;
    if (!json_is_array(arr)) return jerr(c, QAC_ERR_FORMAT, "added_tokens must be a list", NULL);
    size_t n = json_array_size(arr);
    p->added = calloc(n + 1, sizeof *p->added);
    if (!p->added) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(arr, i);
        json_t *id = json_object_get(e, "id");
        tk_added *a = &p->added[p->n_added];
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) > INT32_MAX ||
            !(a->content = jstrdup(json_object_get(e, "content"), &a->len))) {
            char idx[32];
            snprintf(idx, sizeof idx, "%zu", i);
            return jerr(c, QAC_ERR_FORMAT, "added_tokens[%s] needs an \"id\" and a string \"content\"", idx);
        }
        a->id = (int32_t)json_integer_value(id);
        a->special = (uint8_t)jbool(e, "special", 0);
        a->single_word = (uint8_t)jbool(e, "single_word", 0);
        a->lstrip = (uint8_t)jbool(e, "lstrip", 0);
        a->rstrip = (uint8_t)jbool(e, "rstrip", 0);
        a->normalized = (uint8_t)jbool(e, "normalized", !a->special);
        p->n_added++;
    }
    return QAC_OK;
}

/* ---------- the file ---------- */

qac_status tk_pipe_from_json(tk_pipe *p, const char *text, size_t len, const char *what) {
    memset(p, 0, sizeof *p);
    jctx c = {.what = what};
    json_error_t err;
    json_t *root = json_loadb(text, len, JSON_ALLOW_NUL, &err);
    if (!root) return qac_set_error(QAC_ERR_FORMAT, "%s:%d:%d: %s", what, err.line, err.column, err.text);
    qac_status st = QAC_OK;
    if (!json_is_object(root)) st = jerr(&c, QAC_ERR_FORMAT, "not a JSON object", NULL);
    size_t saved;
#define PART(key, call)                                                                                                \
    if (!st) {                                                                                                         \
        json_t *v_ = json_object_get(root, key);                                                                       \
        if (v_ && !json_is_null(v_)) {                                                                                 \
            path_push(&c, &saved, "%s%s", key, 0);                                                                     \
            st = call;                                                                                                 \
            path_pop(&c, saved);                                                                                       \
        }                                                                                                              \
    }
    PART("model", parse_model(&c, v_, &p->model))
    if (!st && !json_object_get(root, "model")) st = jerr(&c, QAC_ERR_FORMAT, "no \"model\"", NULL);
    PART("normalizer", parse_norm(&c, v_, &p->norm))
    PART("pre_tokenizer", parse_pretok(&c, v_, &p->pre))
    PART("decoder", parse_dec(&c, v_, &p->dec))
    int set = 0;
    plain_templates(p);
    PART("post_processor", parse_post(&c, v_, p, &set))
    PART("added_tokens", parse_added(&c, v_, p))
#undef PART
    json_decref(root);
    if (!st) st = tk_model_check(&p->model);
    if (st) tk_pipe_free(p);
    return st;
}
