/* The public tokenizer interface: picks WordPiece or SentencePiece from the
 * files of a model directory, resolves the special tokens and adds them with
 * HF's truncation rules. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qac_tokenizer.h"
#include "qac_util.h"
#include "tokenizer_internal.h"

enum { SP_CLS, SP_SEP, SP_PAD, SP_UNK, SP_MASK, SP_COUNT };
static const char *const special_keys[SP_COUNT] = {"cls_token", "sep_token", "pad_token", "unk_token",
                                                   "mask_token"};

struct qac_tokenizer {
    qac_tokenizer_kind kind;
    qac_wordpiece *wp;
    qac_sp *sp;
    qac_special_ids specials;
};

/* ---------- model directory configuration ---------- */

typedef struct tok_config {
    int lowercase, strip_accents, chinese_chars;
    char *special[SP_COUNT]; /* NULL where neither file names one */
} tok_config;

static void config_free(tok_config *c) {
    for (int k = 0; k < SP_COUNT; k++) free(c->special[k]);
}

/* A special token is a string or an AddedToken object {"content": ...}. */
static const char *json_token(json_t *v) {
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static qac_status read_json_if_present(const char *dir, const char *name, json_t **out) {
    char path[4096];
    *out = NULL;
    qac_status st = qac_path_join(path, sizeof path, dir, name);
    if (st) return st;
    if (access(path, F_OK) != 0) return QAC_OK;
    json_error_t err;
    *out = json_load_file(path, 0, &err);
    if (!*out) return qac_set_error(QAC_ERR_FORMAT, "%s:%d: %s", path, err.line, err.text);
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return qac_set_error(QAC_ERR_FORMAT, "%s: not a JSON object", path);
    }
    return QAC_OK;
}

static qac_status take_specials(tok_config *c, json_t *j) {
    for (int k = 0; k < SP_COUNT && j; k++) {
        const char *s = json_token(json_object_get(j, special_keys[k]));
        if (!s) continue;
        char *copy = strdup(s);
        if (!copy) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        free(c->special[k]);
        c->special[k] = copy;
    }
    return QAC_OK;
}

/* tokenizer_config.json, then special_tokens_map.json on top (as HF does).
 * HF defaults: do_lower_case true, tokenize_chinese_chars true, and
 * strip_accents null meaning "follow do_lower_case". */
static qac_status read_config(const char *dir, tok_config *c) {
    memset(c, 0, sizeof *c);
    c->lowercase = 1;
    c->chinese_chars = 1;
    json_t *cfg = NULL, *map = NULL;
    qac_status st = read_json_if_present(dir, "tokenizer_config.json", &cfg);
    if (!st) st = read_json_if_present(dir, "special_tokens_map.json", &map);
    json_t *strip = NULL;
    if (!st && cfg) {
        json_t *v = json_object_get(cfg, "do_lower_case");
        if (json_is_boolean(v)) c->lowercase = json_is_true(v);
        v = json_object_get(cfg, "tokenize_chinese_chars");
        if (json_is_boolean(v)) c->chinese_chars = json_is_true(v);
        strip = json_object_get(cfg, "strip_accents");
    }
    c->strip_accents = json_is_boolean(strip) ? json_is_true(strip) : c->lowercase;
    if (!st) st = take_specials(c, cfg);
    if (!st) st = take_specials(c, map);
    json_decref(cfg);
    json_decref(map);
    if (st) config_free(c);
    return st;
}

/* ---------- load ---------- */

static int32_t lookup(const qac_tokenizer *t, const char *tok) {
    if (!tok) return -1;
    return qac_tokenizer_token_to_id(t, tok);
}

static qac_status load_wordpiece(qac_tokenizer *t, const char *dir, const char *vocab_path) {
    tok_config c;
    qac_status st = read_config(dir, &c);
    if (st) return st;
    static const char *const defaults[SP_COUNT] = {"[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]"};
    qac_wp_options opt = {.lowercase = c.lowercase,
                          .strip_accents = c.strip_accents,
                          .chinese_chars = c.chinese_chars};
    for (int k = 0; k < SP_COUNT; k++) {
        if (!c.special[k] && !(c.special[k] = strdup(defaults[k]))) {
            config_free(&c);
            return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        }
        opt.special[k] = c.special[k];
    }
    opt.unk_token = c.special[SP_UNK];
    t->kind = QAC_TOKENIZER_WORDPIECE;
    st = qac_wp_load(&t->wp, vocab_path, &opt);
    if (!st) {
        t->specials.cls = lookup(t, c.special[SP_CLS]);
        t->specials.sep = lookup(t, c.special[SP_SEP]);
        t->specials.pad = lookup(t, c.special[SP_PAD]);
        t->specials.unk = lookup(t, c.special[SP_UNK]);
        t->specials.mask = lookup(t, c.special[SP_MASK]);
    }
    config_free(&c);
    return st;
}

/* First of the candidate pieces that the model has. */
static int32_t first_piece(const qac_tokenizer *t, const char *configured, const char *a, const char *b) {
    int32_t id = lookup(t, configured);
    if (id < 0) id = lookup(t, a);
    if (id < 0) id = lookup(t, b);
    return id;
}

static qac_status load_sentencepiece(qac_tokenizer *t, const char *dir, const char *model_path) {
    tok_config c;
    qac_status st = read_config(dir, &c);
    if (st) return st;
    t->kind = QAC_TOKENIZER_SENTENCEPIECE;
    st = qac_sp_load(&t->sp, model_path);
    if (!st) {
        t->specials.cls = first_piece(t, c.special[SP_CLS], "[CLS]", "<s>");
        t->specials.sep = first_piece(t, c.special[SP_SEP], "[SEP]", "</s>");
        t->specials.pad = lookup(t, c.special[SP_PAD]);
        if (t->specials.pad < 0) t->specials.pad = qac_sp_pad_id(t->sp);
        if (t->specials.pad < 0) t->specials.pad = first_piece(t, NULL, "<pad>", "[PAD]");
        t->specials.unk = lookup(t, c.special[SP_UNK]);
        if (t->specials.unk < 0) t->specials.unk = qac_sp_unk_id(t->sp);
        t->specials.mask = first_piece(t, c.special[SP_MASK], "[MASK]", "<mask>");
    }
    config_free(&c);
    return st;
}

qac_status qac_tokenizer_load(qac_tokenizer **out, const char *model_dir) {
    if (!out || !model_dir) return qac_set_error(QAC_ERR_INVALID, "tokenizer_load: NULL argument");
    *out = NULL;
    qac_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    char path[4096];
    qac_status st = qac_path_join(path, sizeof path, model_dir, "vocab.txt");
    if (!st && access(path, R_OK) == 0) {
        st = load_wordpiece(t, model_dir, path);
    } else if (!st) {
        static const char *const sp_files[] = {"spiece.model", "sentencepiece.bpe.model", "tokenizer.model"};
        st = qac_set_error(QAC_ERR_NOT_FOUND,
                           "%s: no tokenizer (vocab.txt, spiece.model, sentencepiece.bpe.model or "
                           "tokenizer.model)",
                           model_dir);
        for (size_t i = 0; i < sizeof sp_files / sizeof sp_files[0]; i++) {
            if (qac_path_join(path, sizeof path, model_dir, sp_files[i]) == QAC_OK &&
                access(path, R_OK) == 0) {
                st = load_sentencepiece(t, model_dir, path);
                break;
            }
        }
    }
    if (st) {
        qac_tokenizer_free(t);
        return st;
    }
    *out = t;
    return QAC_OK;
}

void qac_tokenizer_free(qac_tokenizer *t) {
    if (!t) return;
    qac_wp_free(t->wp);
    qac_sp_free(t->sp);
    free(t);
}

/* ---------- queries ---------- */

qac_tokenizer_kind qac_tokenizer_get_kind(const qac_tokenizer *t) { return t->kind; }

int qac_tokenizer_vocab_size(const qac_tokenizer *t) {
    return t->wp ? qac_wp_vocab_size(t->wp) : qac_sp_vocab_size(t->sp);
}

qac_special_ids qac_tokenizer_specials(const qac_tokenizer *t) { return t->specials; }

const char *qac_tokenizer_id_to_token(const qac_tokenizer *t, int32_t id) {
    return t->wp ? qac_wp_id_to_token(t->wp, id) : qac_sp_id_to_piece(t->sp, id);
}

int32_t qac_tokenizer_token_to_id(const qac_tokenizer *t, const char *token) {
    if (!token) return -1;
    return t->wp ? qac_wp_token_to_id(t->wp, token, strlen(token)) : qac_sp_piece_to_id(t->sp, token);
}

/* ---------- encoding ---------- */

/* Length of text once invalid sequences are replaced by U+FFFD (3 bytes);
 * equal to len exactly when the text is valid UTF-8. */
static size_t sanitized_len(const char *text, size_t len, int *valid) {
    size_t out = 0;
    *valid = 1;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int n = qac_utf8_decode((const unsigned char *)text + i, len - i, &cp);
        if (cp == 0xFFFD && !(n == 3 && (unsigned char)text[i] == 0xEF)) {
            *valid = 0;
            out += 3;
        } else {
            out += (size_t)n;
        }
        i += (size_t)n;
    }
    return out;
}

static qac_status sp_tokenize(const qac_tokenizer *t, const char *text, size_t len, int32_t *ids, int cap,
                              int *n) {
    int valid;
    size_t clean_len = sanitized_len(text, len, &valid);
    if (valid) return qac_sp_encode(t->sp, text, len, ids, cap, n);
    char *clean = malloc(clean_len + 1);
    if (!clean) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += (size_t)qac_utf8_decode((const unsigned char *)text + i, len - i, &cp);
        o += (size_t)qac_utf8_encode(cp, clean + o);
    }
    qac_status st = qac_sp_encode(t->sp, clean, o, ids, cap, n);
    free(clean);
    return st;
}

/* Tokens of text; at most cap stored, *n = full count (WordPiece stops
 * counting at `stop` when stop >= 0). */
static qac_status tokenize_n(const qac_tokenizer *t, const char *text, size_t len, int32_t *ids, int cap,
                             int stop, int *n) {
    if (!text) len = 0, text = "";
    if (t->wp) {
        *n = qac_wp_tokenize(t->wp, text, len, ids, cap, stop);
        return QAC_OK;
    }
    return sp_tokenize(t, text, len, ids, cap, n);
}

qac_status qac_tokenizer_tokenize(const qac_tokenizer *t, const char *text, size_t len, int32_t *ids,
                                  int cap, int *n) {
    if (!t || !n || (cap > 0 && !ids)) return qac_set_error(QAC_ERR_INVALID, "tokenize: NULL argument");
    return tokenize_n(t, text, len, ids, cap, -1, n);
}

qac_status qac_tokenizer_tokenize_offsets(const qac_tokenizer *t, const char *text, size_t len, int32_t *ids,
                                          int32_t *offs, int cap, int *n) {
    if (!t || !n || (cap > 0 && (!ids || !offs))) return qac_set_error(QAC_ERR_INVALID, "tokenize: NULL argument");
    if (!t->wp) return qac_set_error(QAC_ERR_UNSUPPORTED, "token offsets: WordPiece tokenizers only");
    if (len > INT32_MAX) return qac_set_error(QAC_ERR_INVALID, "token offsets: text longer than 2 GiB");
    *n = qac_wp_tokenize_offsets(t->wp, text ? text : "", text ? len : 0, ids, offs, cap, -1);
    return QAC_OK;
}

/* ---------- decoding ---------- */

static int is_special_id(const qac_tokenizer *t, int32_t id) {
    const qac_special_ids *s = &t->specials;
    return id >= 0 && (id == s->cls || id == s->sep || id == s->pad || id == s->unk || id == s->mask);
}

/* tokenizers' decoders::wordpiece::cleanup, in its order, in place (each
 * replacement is shorter than what it replaces). */
static void wp_cleanup(char *tok) {
    static const char *const from[] = {" .", " ?", " !", " ,", " ' ", " n't", " 'm", " do not", " 's", " 've", " 're"};
    static const char *const to[] = {".", "?", "!", ",", "'", "n't", "'m", " don't", "'s", "'ve", "'re"};
    for (size_t r = 0; r < sizeof from / sizeof from[0]; r++) {
        size_t fl = strlen(from[r]), tl = strlen(to[r]);
        char *w = tok;
        for (const char *p = tok; *p;) {
            if (!strncmp(p, from[r], fl)) {
                memcpy(w, to[r], tl);
                w += tl, p += fl;
            } else {
                *w++ = *p++;
            }
        }
        *w = '\0';
    }
}

qac_status qac_tokenizer_decode(const qac_tokenizer *t, const int32_t *ids, int n, int skip_special, char **text) {
    if (!t || !text || (n > 0 && !ids) || n < 0) return qac_set_error(QAC_ERR_INVALID, "decode: bad argument");
    *text = NULL;
    int vocab = qac_tokenizer_vocab_size(t);
    if (t->sp) { /* libsentencepiece decodes; specials filtered first, as tokenizers does */
        int32_t *keep = malloc(((size_t)n + 1) * sizeof *keep);
        if (!keep) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
        int k = 0;
        for (int i = 0; i < n; i++)
            if (ids[i] >= 0 && ids[i] < vocab && !(skip_special && is_special_id(t, ids[i]))) keep[k++] = ids[i];
        qac_status st = qac_sp_decode(t->sp, keep, k, text);
        free(keep);
        return st;
    }
    /* tokenizers' WordPiece decoder: a "##" piece joins the previous one
     * (except as the first token), any other is preceded by a space; each
     * token is then cleaned up on its own. */
    size_t cap = 1;
    for (int i = 0; i < n; i++) {
        const char *tok = ids[i] >= 0 && ids[i] < vocab ? qac_wp_id_to_token(t->wp, ids[i]) : NULL;
        if (tok) cap += strlen(tok) + 1;
    }
    char *out = malloc(cap), *tmp = malloc(cap + 1);
    if (!out || !tmp) {
        free(out);
        free(tmp);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    size_t o = 0;
    int kept = 0;
    for (int i = 0; i < n; i++) {
        const char *tok = ids[i] >= 0 && ids[i] < vocab ? qac_wp_id_to_token(t->wp, ids[i]) : NULL;
        if (!tok || (skip_special && is_special_id(t, ids[i]))) continue;
        size_t l = 0;
        if (kept++ > 0) {
            if (!strncmp(tok, "##", 2)) tok += 2;
            else tmp[l++] = ' ';
        }
        strcpy(tmp + l, tok);
        wp_cleanup(tmp);
        l = strlen(tmp);
        memcpy(out + o, tmp, l);
        o += l;
    }
    out[o] = '\0';
    free(tmp);
    *text = out;
    return QAC_OK;
}

qac_status qac_tokenizer_encode(const qac_tokenizer *t, const char *text, size_t len, int max_len,
                                int32_t *ids, int *n) {
    return qac_tokenizer_encode_cut(t, text, len, max_len, ids, n, NULL);
}

qac_status qac_tokenizer_encode_cut(const qac_tokenizer *t, const char *text, size_t len, int max_len,
                                    int32_t *ids, int *n, int *truncated) {
    if (!t || !ids || !n) return qac_set_error(QAC_ERR_INVALID, "encode: NULL argument");
    if (max_len < 2) return qac_set_error(QAC_ERR_INVALID, "encode: max_len %d < 2", max_len);
    int cls = t->specials.cls >= 0, sep = t->specials.sep >= 0;
    int body = max_len - cls - sep, got = 0;
    /* one token past the room tells a cut text from one that just fits */
    qac_status st = tokenize_n(t, text, len, ids + cls, body, truncated ? body + 1 : body, &got);
    if (st) return st;
    if (truncated) *truncated = got > body;
    if (got > body) got = body;
    if (cls) ids[0] = t->specials.cls;
    if (sep) ids[cls + got] = t->specials.sep;
    *n = cls + got + sep;
    return QAC_OK;
}

qac_status qac_tokenizer_encode_prompted_cut(const qac_tokenizer *t, const char *prompt, const char *text,
                                             size_t len, int max_len, int32_t *ids, int *n, int *truncated) {
    size_t pl = prompt ? strlen(prompt) : 0;
    if (!pl) return qac_tokenizer_encode_cut(t, text, len, max_len, ids, n, truncated);
    /* one string: the prompt's last word and the text's first may make one token */
    char stack[2048], *buf = pl + len <= sizeof stack ? stack : malloc(pl + len);
    if (!buf) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    memcpy(buf, prompt, pl);
    if (len) memcpy(buf + pl, text, len);
    qac_status s = qac_tokenizer_encode_cut(t, buf, pl + len, max_len, ids, n, truncated);
    if (buf != stack) free(buf);
    return s;
}

qac_status qac_tokenizer_encode_prompted(const qac_tokenizer *t, const char *prompt, const char *text, size_t len,
                                         int max_len, int32_t *ids, int *n) {
    return qac_tokenizer_encode_prompted_cut(t, prompt, text, len, max_len, ids, n, NULL);
}

qac_status qac_tokenizer_encode_pair(const qac_tokenizer *t, const char *a, size_t alen, const char *b,
                                     size_t blen, int max_len, int32_t *ids, int32_t *type_ids, int *n) {
    if (!t || !ids || !n) return qac_set_error(QAC_ERR_INVALID, "encode_pair: NULL argument");
    if (max_len < 3) return qac_set_error(QAC_ERR_INVALID, "encode_pair: max_len %d < 3", max_len);
    if (!b || blen == 0) { /* HF treats an empty text_pair as no pair at all */
        qac_status st = qac_tokenizer_encode(t, a, alen, max_len, ids, n);
        if (!st && type_ids) memset(type_ids, 0, (size_t)*n * sizeof *type_ids);
        return st;
    }
    int cls = t->specials.cls >= 0, sep = t->specials.sep >= 0;
    int budget = max_len - cls - 2 * sep;
    int32_t stack[2 * 1024];
    int32_t *buf = stack;
    if (budget > 1024 && !(buf = malloc(2 * (size_t)budget * sizeof *buf)))
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    int32_t *ta = buf, *tb = buf + budget;
    int na = 0, nb = 0;
    qac_status st = tokenize_n(t, a, alen, ta, budget, -1, &na);
    if (!st) st = tokenize_n(t, b, blen, tb, budget, -1, &nb);
    if (st) {
        if (buf != stack) free(buf);
        return st;
    }
    if (na + nb > budget) { /* tokenizers' LongestFirst, which is not one-at-a-time */
        int n1 = na, n2 = nb, swap = n1 > n2;
        if (swap) n1 = nb, n2 = na;
        n2 = n1 > budget ? n1 : (n1 > budget - n1 ? n1 : budget - n1);
        if (n1 + n2 > budget) {
            n1 = budget / 2;
            n2 = n1 + budget % 2;
        }
        if (swap) {
            int tmp = n1;
            n1 = n2;
            n2 = tmp;
        }
        if (na > n1) na = n1;
        if (nb > n2) nb = n2;
    }
    int k = 0;
    if (cls) ids[k++] = t->specials.cls;
    memcpy(ids + k, ta, (size_t)na * sizeof *ids);
    k += na;
    if (sep) ids[k++] = t->specials.sep;
    int first_len = k;
    memcpy(ids + k, tb, (size_t)nb * sizeof *ids);
    k += nb;
    if (sep) ids[k++] = t->specials.sep;
    if (type_ids)
        for (int i = 0; i < k; i++) type_ids[i] = i < first_len ? 0 : 1;
    *n = k;
    if (buf != stack) free(buf);
    return QAC_OK;
}
