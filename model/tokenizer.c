/* The public tokenizer interface: picks the tokenizer a model directory
 * holds (tok_family.c decides as transformers' AutoTokenizer would),
 * resolves the special tokens, and assembles sequences with the model's
 * template and HF's truncation rules.
 *
 * Three engines sit behind it: WordPiece from vocab.txt (wordpiece.c, one
 * fused pass), SentencePiece through libsentencepiece for a plain .model
 * (sp_tokenizer.cpp), and the tokenizer.json pipeline (tok_hf.h) for
 * tokenizer.json, vocab.json + merges.txt, and XLM-R's SentencePiece model
 * read with fairseq's ids. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qac_tokenizer.h"
#include "qac_util.h"
#include "tok_family.h"
#include "tok_hf.h"
#include "tokenizer_internal.h"

enum { SP_CLS, SP_SEP, SP_PAD, SP_UNK, SP_MASK, SP_COUNT };
static const char *const special_keys[SP_COUNT] = {"cls_token", "sep_token", "pad_token", "unk_token",
                                                   "mask_token"};

struct qac_tokenizer {
    qac_tokenizer_kind kind;
    qac_wordpiece *wp;
    qac_sp *sp;
    tk_pipe *hf;
    qac_special_ids specials;
    tk_template single, pair; /* what encode adds around the tokens */
    int single_pre, single_post; /* special ids before and after A */
    char describe[320];
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

/* Specials of a tokenizer.json pipeline: the configured tokens, else the
 * usual names of either family. */
static void pipe_specials(qac_tokenizer *t, const tk_dir *d) {
    static const struct {
        const char *key, *a, *b;
    } names[] = {{"cls_token", "[CLS]", "<s>"},  {"sep_token", "[SEP]", "</s>"}, {"pad_token", "[PAD]", "<pad>"},
                 {"unk_token", "[UNK]", "<unk>"}, {"mask_token", "[MASK]", "<mask>"},
                 {"bos_token", "<s>", "[CLS]"},   {"eos_token", "</s>", "[SEP]"}};
    int32_t *slot[] = {&t->specials.cls, &t->specials.sep, &t->specials.pad, &t->specials.unk,
                       &t->specials.mask, &t->specials.bos, &t->specials.eos};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        *slot[k] = first_piece(t, tk_token_content(tk_dir_special(d, names[k].key)), names[k].a, names[k].b);
    if (t->specials.unk < 0 && t->hf->model.unk >= 0) t->specials.unk = t->hf->model.unk;
}

/* Kind, specials and templates of a loaded pipeline. */
static void load_pipe_parts(qac_tokenizer *t, const tk_dir *d) {
    switch (t->hf->model.kind) {
    case TM_WORDPIECE: t->kind = QAC_TOKENIZER_WORDPIECE; break;
    case TM_UNIGRAM: t->kind = QAC_TOKENIZER_UNIGRAM; break;
    case TM_WORDLEVEL: t->kind = QAC_TOKENIZER_WORDLEVEL; break;
    default: t->kind = QAC_TOKENIZER_BPE;
    }
    pipe_specials(t, d);
    t->single = t->hf->single;
    t->pair = t->hf->pair;
    snprintf(t->describe, sizeof t->describe, "%s", t->hf->describe ? t->hf->describe : "tokenizer.json");
}

static qac_status load_pipe(qac_tokenizer *t, const tk_dir *d) {
    qac_status st = tk_family_pipe(&t->hf, d);
    if (st) return st;
    load_pipe_parts(t, d);
    return QAC_OK;
}

/* [CLS] A [SEP] / [CLS] A [SEP] B [SEP] from the specials the vocabulary has. */
static void classic_templates(qac_tokenizer *t) {
    tk_template *s = &t->single, *p = &t->pair;
    s->n = p->n = 0;
    int32_t cls = t->specials.cls, sep = t->specials.sep;
    if (cls >= 0) s->items[s->n++] = (tk_tmpl_item){.seq = -1, .ids = {cls}, .n_ids = 1};
    s->items[s->n++] = (tk_tmpl_item){.seq = 0};
    if (sep >= 0) s->items[s->n++] = (tk_tmpl_item){.seq = -1, .ids = {sep}, .n_ids = 1};
    if (cls >= 0) p->items[p->n++] = (tk_tmpl_item){.seq = -1, .ids = {cls}, .n_ids = 1};
    p->items[p->n++] = (tk_tmpl_item){.seq = 0};
    if (sep >= 0) p->items[p->n++] = (tk_tmpl_item){.seq = -1, .ids = {sep}, .n_ids = 1};
    p->items[p->n++] = (tk_tmpl_item){.seq = 1, .type_id = 1};
    if (sep >= 0) p->items[p->n++] = (tk_tmpl_item){.seq = -1, .ids = {sep}, .n_ids = 1, .type_id = 1};
}

/* The templates must hold A once (single) and A then B once each (pair). */
static qac_status check_templates(qac_tokenizer *t, const char *dir) {
    int a = 0, pa = 0, pb = 0, order_ok = 1;
    t->single_pre = t->single_post = 0;
    for (int i = 0; i < t->single.n; i++) {
        const tk_tmpl_item *it = &t->single.items[i];
        if (it->seq == 0) a++;
        else if (it->seq < 0) *(a ? &t->single_post : &t->single_pre) += it->n_ids;
        else a += 2;
    }
    for (int i = 0; i < t->pair.n; i++) {
        const tk_tmpl_item *it = &t->pair.items[i];
        if (it->seq == 0) pa++, order_ok &= pb == 0;
        if (it->seq == 1) pb++;
    }
    if (a != 1 || pa != 1 || pb != 1 || !order_ok)
        return qac_set_error(QAC_ERR_UNSUPPORTED, "%s: the post-processor's templates must hold $A once (single) and "
                             "$A then $B once each (pair)", dir);
    return QAC_OK;
}

static qac_status no_tokenizer(const char *dir) {
    static const char *const known[] = {"tokenizer.json", "vocab.txt", "sentencepiece.bpe.model", "spiece.model",
                                        "tokenizer.model", "vocab.json", "merges.txt", "tokenizer_config.json",
                                        "special_tokens_map.json", "config.json"};
    char found[512] = "";
    size_t o = 0;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        char path[4096];
        if (qac_path_join(path, sizeof path, dir, known[i]) == QAC_OK && access(path, R_OK) == 0)
            o += (size_t)snprintf(found + o, sizeof found - o, "%s%s", o ? ", " : "", known[i]);
        if (o >= sizeof found) break;
    }
    if (access(dir, F_OK) != 0) return qac_set_error(QAC_ERR_NOT_FOUND, "%s: no tokenizer: no such directory", dir);
    return qac_set_error(QAC_ERR_NOT_FOUND,
                         "%s: no tokenizer: found %s; qac reads tokenizer.json, vocab.txt (WordPiece), "
                         "sentencepiece.bpe.model / spiece.model / tokenizer.model (SentencePiece), or vocab.json "
                         "with merges.txt (byte-level BPE)",
                         dir, o ? found : "none of those files");
}

/* Which engine: as AutoTokenizer, the tokenizer class first (tok_family.c),
 * then the files (vocab.txt before tokenizer.json, as before). */
static qac_status load_dir(qac_tokenizer *t, const char *dir) {
    tk_dir d;
    qac_status st = tk_dir_read(&d, dir);
    if (st) return st;
    char path[4096];
    int xlmr = tk_dir_is(&d, "XLMRobertaTokenizer"), roberta = tk_dir_is(&d, "RobertaTokenizer"),
        bert = tk_dir_is(&d, "BertTokenizer");
    int pipe_files = d.has_json || d.has_bpe_files || (xlmr && d.spm);
    if ((xlmr || roberta) && pipe_files) {
        st = load_pipe(t, &d);
    } else if (xlmr || roberta) {
        st = qac_set_error(QAC_ERR_NOT_FOUND, "%s: tokenizer_class %s needs %s", dir, d.cls,
                           xlmr ? "sentencepiece.bpe.model or tokenizer.json" : "tokenizer.json or vocab.json + merges.txt");
    } else if (d.has_vocab_txt && (bert || !d.cls[0] || !d.has_json)) {
        if (!(st = qac_path_join(path, sizeof path, dir, "vocab.txt"))) st = load_wordpiece(t, dir, path);
        if (!st) snprintf(t->describe, sizeof t->describe, "vocab.txt: WordPiece");
    } else if (d.has_json) {
        st = load_pipe(t, &d);
    } else if (d.spm) {
        if (!(st = qac_path_join(path, sizeof path, dir, d.spm))) st = load_sentencepiece(t, dir, path);
        if (!st) snprintf(t->describe, sizeof t->describe, "%s: SentencePiece", d.spm);
    } else if (d.has_bpe_files) {
        st = load_pipe(t, &d);
    } else {
        st = no_tokenizer(dir);
    }
    if (!st && !t->hf) classic_templates(t);
    if (!st) st = check_templates(t, dir);
    tk_dir_free(&d);
    return st;
}

qac_status qac_tokenizer_load(qac_tokenizer **out, const char *model_dir) {
    if (!out || !model_dir) return qac_set_error(QAC_ERR_INVALID, "tokenizer_load: NULL argument");
    *out = NULL;
    qac_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    t->specials = (qac_special_ids){-1, -1, -1, -1, -1, -1, -1};
    qac_status st = load_dir(t, model_dir);
    if (st) {
        qac_tokenizer_free(t);
        return st;
    }
    *out = t;
    return QAC_OK;
}

qac_status qac_tokenizer_from_json(qac_tokenizer **out, const char *json, size_t len, const char *what) {
    if (!out || (!json && len)) return qac_set_error(QAC_ERR_INVALID, "tokenizer_from_json: NULL argument");
    *out = NULL;
    qac_tokenizer *t = calloc(1, sizeof *t);
    tk_pipe *p = calloc(1, sizeof *p);
    if (!t || !p) {
        free(t);
        free(p);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    t->specials = (qac_special_ids){-1, -1, -1, -1, -1, -1, -1};
    qac_status st = tk_pipe_from_json(p, json ? json : "", len, what ? what : "tokenizer.json");
    if (!st) st = tk_pipe_finish(p);
    if (!st) st = (p->describe = strdup("tokenizer.json")) ? QAC_OK : qac_set_error(QAC_ERR_NOMEM, "out of memory");
    if (st) {
        tk_pipe_free(p);
        free(p);
        free(t);
        return st;
    }
    t->hf = p;
    tk_dir none = {.dir = what ? what : "tokenizer.json"};
    load_pipe_parts(t, &none);
    st = check_templates(t, none.dir);
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
    if (t->hf) tk_pipe_free(t->hf);
    free(t->hf);
    free(t);
}

/* ---------- queries ---------- */

qac_tokenizer_kind qac_tokenizer_get_kind(const qac_tokenizer *t) { return t->kind; }

const char *qac_tokenizer_kind_name(const qac_tokenizer *t) {
    static const char *const names[] = {"wordpiece", "sentencepiece", "bpe", "unigram", "wordlevel"};
    return (unsigned)t->kind < sizeof names / sizeof names[0] ? names[t->kind] : "?";
}

const char *qac_tokenizer_describe(const qac_tokenizer *t) { return t->describe; }

int qac_tokenizer_has_offsets(const qac_tokenizer *t) { return t->wp != NULL || t->hf != NULL; }

int qac_tokenizer_vocab_size(const qac_tokenizer *t) {
    if (t->hf) return t->hf->vocab_total;
    return t->wp ? qac_wp_vocab_size(t->wp) : qac_sp_vocab_size(t->sp);
}

qac_special_ids qac_tokenizer_specials(const qac_tokenizer *t) { return t->specials; }

const char *qac_tokenizer_id_to_token(const qac_tokenizer *t, int32_t id) {
    if (t->hf) return tk_pipe_id_to_token(t->hf, id);
    return t->wp ? qac_wp_id_to_token(t->wp, id) : qac_sp_id_to_piece(t->sp, id);
}

int32_t qac_tokenizer_token_to_id(const qac_tokenizer *t, const char *token) {
    if (!token) return -1;
    if (t->hf) return tk_pipe_token_to_id(t->hf, token, strlen(token));
    return t->wp ? qac_wp_token_to_id(t->wp, token, strlen(token)) : qac_sp_piece_to_id(t->sp, token);
}

static int template_specials(const tk_template *tp) {
    int n = 0;
    for (int i = 0; i < tp->n; i++)
        if (tp->items[i].seq < 0) n += tp->items[i].n_ids;
    return n;
}

int qac_tokenizer_num_special(const qac_tokenizer *t, int pair) { return template_specials(pair ? &t->pair : &t->single); }

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

/* text with invalid UTF-8 replaced (Python's errors="replace"): *clean is
 * the text itself when valid, else a malloc'd copy the caller frees. */
static qac_status sanitize(const char *text, size_t len, char **clean, size_t *clean_len, int *copied) {
    int valid;
    size_t cl = sanitized_len(text, len, &valid);
    *copied = 0;
    if (valid) {
        *clean = (char *)text;
        *clean_len = len;
        return QAC_OK;
    }
    char *c = malloc(cl + 1);
    if (!c) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += (size_t)qac_utf8_decode((const unsigned char *)text + i, len - i, &cp);
        o += (size_t)qac_utf8_encode(cp, c + o);
    }
    *clean = c;
    *clean_len = o;
    *copied = 1;
    return QAC_OK;
}

static qac_status sp_tokenize(const qac_tokenizer *t, const char *text, size_t len, int32_t *ids, int cap,
                              int *n) {
    char *clean;
    size_t cl;
    int copied;
    qac_status st = sanitize(text, len, &clean, &cl, &copied);
    if (!st) st = qac_sp_encode(t->sp, clean, cl, ids, cap, n);
    if (copied) free(clean);
    return st;
}

/* The tokenizer.json pipeline: ids (and byte offsets into the caller's text). */
static qac_status hf_tokenize(const qac_tokenizer *t, const char *text, size_t len, int32_t *ids, int32_t *offs,
                              int cap, int stop, int *n) {
    char *clean;
    size_t cl;
    int copied;
    qac_status st = sanitize(text, len, &clean, &cl, &copied);
    if (st) return st;
    tk_toks toks = {0};
    st = tk_pipe_encode(t->hf, clean, cl, stop, &toks);
    if (!st) {
        if (toks.n > INT32_MAX) st = qac_set_error(QAC_ERR_INVALID, "tokenize: more than 2^31 tokens");
        *n = (int)toks.n;
        for (size_t i = 0; !st && i < toks.n && (long long)i < cap; i++) {
            ids[i] = toks.v[i].id;
            if (offs) {
                if (copied) { /* map offsets in the cleaned text back to the caller's bytes */
                    offs[2 * i] = 0;
                    offs[2 * i + 1] = 0;
                } else {
                    offs[2 * i] = (int32_t)toks.v[i].off.a;
                    offs[2 * i + 1] = (int32_t)toks.v[i].off.b;
                }
            }
        }
        if (!st && offs && copied) { /* walk both texts together: each replaced sequence maps to its bytes */
            size_t *map = malloc((cl + 1) * sizeof *map);
            if (!map) st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
            for (size_t i = 0, o = 0; map && i < len;) {
                uint32_t cp;
                size_t k = (size_t)qac_utf8_decode((const unsigned char *)text + i, len - i, &cp);
                size_t w = (size_t)tk_utf8_len(cp);
                for (size_t b = 0; b < w; b++) map[o + b] = i;
                o += w;
                i += k;
                if (i >= len) map[o] = len;
            }
            if (map && cl == 0) map[0] = 0;
            for (size_t i = 0; map && i < toks.n && (long long)i < cap; i++) {
                offs[2 * i] = (int32_t)map[toks.v[i].off.a <= cl ? toks.v[i].off.a : cl];
                /* the end: past the last source byte of the token's last character */
                size_t e = toks.v[i].off.b <= cl ? toks.v[i].off.b : cl;
                offs[2 * i + 1] = (int32_t)(e >= cl ? len : map[e]);
            }
            free(map);
        }
    }
    free(toks.v);
    if (copied) free(clean);
    return st;
}

/* Tokens of text; at most cap stored, *n = full count (the count may stop
 * at `stop` when stop >= 0). */
static qac_status tokenize_n(const qac_tokenizer *t, const char *text, size_t len, int32_t *ids, int cap,
                             int stop, int *n) {
    if (!text) len = 0, text = "";
    if (t->wp) {
        *n = qac_wp_tokenize(t->wp, text, len, ids, cap, stop);
        return QAC_OK;
    }
    if (t->hf) return hf_tokenize(t, text, len, ids, NULL, cap, stop, n);
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
    if (!qac_tokenizer_has_offsets(t))
        return qac_set_error(QAC_ERR_UNSUPPORTED, "token offsets: not available for a plain SentencePiece model (%s)",
                             t->describe);
    if (len > INT32_MAX) return qac_set_error(QAC_ERR_INVALID, "token offsets: text longer than 2 GiB");
    if (t->hf) return hf_tokenize(t, text ? text : "", text ? len : 0, ids, offs, cap, -1, n);
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
    if (t->hf) return tk_pipe_decode(t->hf, ids, n, skip_special, text);
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

/* ---------- templates ---------- */

/* HF's LongestFirst for two lengths within budget (not one token at a time). */
static void longest_first(int *na, int *nb, int budget) {
    if (*na + *nb <= budget) return;
    int n1 = *na, n2 = *nb, swap = n1 > n2;
    if (swap) n1 = *nb, n2 = *na;
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
    if (*na > n1) *na = n1;
    if (*nb > n2) *nb = n2;
}

/* Lay out a template: A's tokens are already at ids[a_at] (a_at = the
 * special ids before A), B's at b (copied in). */
static int lay_out(const tk_template *tp, int32_t *ids, int32_t *type_ids, int na, const int32_t *b, int nb) {
    int k = 0;
    for (int i = 0; i < tp->n; i++) {
        const tk_tmpl_item *it = &tp->items[i];
        if (it->seq == 0) {
            if (type_ids)
                for (int j = 0; j < na; j++) type_ids[k + j] = it->type_id;
            k += na;
        } else if (it->seq == 1) {
            memmove(ids + k, b, (size_t)nb * sizeof *ids);
            if (type_ids)
                for (int j = 0; j < nb; j++) type_ids[k + j] = it->type_id;
            k += nb;
        } else {
            for (int j = 0; j < it->n_ids; j++) {
                ids[k] = it->ids[j];
                if (type_ids) type_ids[k] = it->type_id;
                k++;
            }
        }
    }
    return k;
}

qac_status qac_tokenizer_encode(const qac_tokenizer *t, const char *text, size_t len, int max_len,
                                int32_t *ids, int *n) {
    return qac_tokenizer_encode_cut(t, text, len, max_len, ids, n, NULL);
}

qac_status qac_tokenizer_encode_cut(const qac_tokenizer *t, const char *text, size_t len, int max_len,
                                    int32_t *ids, int *n, int *truncated) {
    if (!t || !ids || !n) return qac_set_error(QAC_ERR_INVALID, "encode: NULL argument");
    int pre = t->single_pre, post = t->single_post;
    if (max_len < 2 || max_len < pre + post)
        return qac_set_error(QAC_ERR_INVALID, "encode: max_len %d < %d (the template's %d special tokens, at least 2)",
                             max_len, pre + post > 2 ? pre + post : 2, pre + post);
    int body = max_len - pre - post, got = 0;
    /* one token past the room tells a cut text from one that just fits */
    qac_status st = tokenize_n(t, text, len, ids + pre, body, truncated ? body + 1 : body, &got);
    if (st) return st;
    if (truncated) *truncated = got > body;
    if (got > body) got = body;
    *n = lay_out(&t->single, ids, NULL, got, NULL, 0);
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

qac_status qac_tokenizer_assemble(const qac_tokenizer *t, const int32_t *a, int na, const int32_t *b, int nb,
                                  int max_len, int32_t *ids, int32_t *type_ids, int *n) {
    if (!t || !ids || !n || (na > 0 && !a) || (nb > 0 && !b) || na < 0 || nb < 0)
        return qac_set_error(QAC_ERR_INVALID, "assemble: bad argument");
    const tk_template *tp = b ? &t->pair : &t->single;
    int specials = template_specials(tp);
    if (max_len < specials || max_len < 1)
        return qac_set_error(QAC_ERR_INVALID, "assemble: max_len %d < the template's %d special tokens", max_len,
                             specials);
    int budget = max_len - specials;
    if (b) longest_first(&na, &nb, budget);
    else if (na > budget) na = budget;
    int pre = 0;
    for (int i = 0; i < tp->n && tp->items[i].seq != 0; i++)
        if (tp->items[i].seq < 0) pre += tp->items[i].n_ids;
    /* A lands at its place first (it may share memory with nothing else), then the rest */
    int32_t *bcopy = NULL;
    if (nb && !(bcopy = malloc((size_t)nb * sizeof *bcopy))) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    if (nb) memcpy(bcopy, b, (size_t)nb * sizeof *bcopy);
    memmove(ids + pre, a, (size_t)na * sizeof *ids);
    *n = lay_out(tp, ids, type_ids, na, bcopy, nb);
    free(bcopy);
    return QAC_OK;
}

qac_status qac_tokenizer_encode_pair(const qac_tokenizer *t, const char *a, size_t alen, const char *b,
                                     size_t blen, int max_len, int32_t *ids, int32_t *type_ids, int *n) {
    if (!t || !ids || !n) return qac_set_error(QAC_ERR_INVALID, "encode_pair: NULL argument");
    int specials = template_specials(&t->pair);
    if (max_len < 3 || max_len < specials)
        return qac_set_error(QAC_ERR_INVALID, "encode_pair: max_len %d < %d (the pair template's %d special tokens)",
                             max_len, specials > 3 ? specials : 3, specials);
    if (!b || blen == 0) { /* HF treats an empty text_pair as no pair at all */
        qac_status st = qac_tokenizer_encode(t, a, alen, max_len, ids, n);
        if (!st && type_ids) {
            int k = 0;
            for (int i = 0; i < t->single.n; i++) { /* the single template's type ids */
                const tk_tmpl_item *it = &t->single.items[i];
                int cnt = it->seq == 0 ? *n - t->single_pre - t->single_post : it->n_ids;
                for (int j = 0; j < cnt && k < *n; j++) type_ids[k++] = it->type_id;
            }
        }
        return st;
    }
    int budget = max_len - specials;
    int32_t stack[2 * 1024];
    int32_t *buf = stack;
    if (budget > 1024 && !(buf = malloc(2 * (size_t)budget * sizeof *buf)))
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    int32_t *ta = buf, *tb = buf + budget;
    int na = 0, nb = 0;
    qac_status st = tokenize_n(t, a, alen, ta, budget, -1, &na);
    if (!st) st = tokenize_n(t, b, blen, tb, budget, -1, &nb);
    if (!st) {
        longest_first(&na, &nb, budget); /* on the full counts: which is longer decides */
        st = qac_tokenizer_assemble(t, ta, na, tb, nb, max_len, ids, type_ids, n);
    }
    if (buf != stack) free(buf);
    return st;
}
