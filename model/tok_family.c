/* Which tokenizer a model directory holds, and the tokenizer.json pipeline
 * for it, built the way transformers' AutoTokenizer builds it.
 *
 * AutoTokenizer picks a class from tokenizer_config.json's tokenizer_class,
 * else from config.json's model_type. Three classes rebuild the pipeline
 * around the vocabulary instead of taking tokenizer.json as it is, and so
 * does qac:
 *   XLMRobertaTokenizer: Unigram (unknown = id 3), only the Precompiled
 *     charsmap kept from the normalizer, WhitespaceSplit + Metaspace,
 *     "<s> A </s>" / "<s> A </s></s> B </s>" (all type 0). From
 *     sentencepiece.bpe.model the vocabulary takes fairseq's ids: <s> 0,
 *     <pad> 1, </s> 2, <unk> 3, the model's pieces from its id 3 on shifted
 *     by one, <mask> last; the file is read through libsentencepiece.
 *   RobertaTokenizer: byte-level BPE with no normalizer, RobertaProcessing.
 *   BertTokenizer: WordPiece with BertNormalizer as tokenizer_config.json
 *     says (do_lower_case, strip_accents, tokenize_chinese_chars).
 * Any other class (PreTrainedTokenizerFast, ModernBERT's) uses tokenizer.json
 * as written. Added tokens: tokenizer_config.json's added_tokens_decoder
 * when it has one (a rebuilt class takes only those), else tokenizer.json's
 * added_tokens, then every named special token still missing. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "qac_util.h"
#include "tok_family.h"
#include "tok_hf.h"
#include "tokenizer_internal.h"

static const char *const spm_files[] = {"spiece.model", "sentencepiece.bpe.model", "tokenizer.model"};

static int has_file(const char *dir, const char *name, char *path, size_t cap) {
    struct stat sb;
    return qac_path_join(path, cap, dir, name) == QAC_OK && stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static qac_status load_json(const char *dir, const char *name, json_t **out) {
    char path[4096];
    *out = NULL;
    if (!has_file(dir, name, path, sizeof path)) return QAC_OK;
    json_error_t err;
    *out = json_load_file(path, JSON_ALLOW_NUL, &err);
    if (!*out) return qac_set_error(QAC_ERR_FORMAT, "%s:%d: %s", path, err.line, err.text);
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return qac_set_error(QAC_ERR_FORMAT, "%s: not a JSON object", path);
    }
    return QAC_OK;
}

void tk_dir_free(tk_dir *d) {
    json_decref(d->tc);
    json_decref(d->sm);
    json_decref(d->config);
    memset(d, 0, sizeof *d);
}

/* The class AutoTokenizer would use: tokenizer_config's, else the model type's. */
static void resolve_class(tk_dir *d) {
    const char *c = json_string_value(json_object_get(d->tc, "tokenizer_class"));
    const char *mt = json_string_value(json_object_get(d->config, "model_type"));
    snprintf(d->model_type, sizeof d->model_type, "%s", mt ? mt : "");
    if (!c && mt) {
        static const struct {
            const char *type, *cls;
        } map[] = {{"bert", "BertTokenizer"}, {"roberta", "RobertaTokenizer"}, {"xlm-roberta", "XLMRobertaTokenizer"}};
        for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
            if (!strcmp(mt, map[i].type)) c = map[i].cls;
    }
    snprintf(d->cls, sizeof d->cls, "%s", c ? c : "");
    size_t n = strlen(d->cls);
    if (n > 4 && !strcmp(d->cls + n - 4, "Fast")) d->cls[n - 4] = '\0';
}

qac_status tk_dir_read(tk_dir *d, const char *dir) {
    memset(d, 0, sizeof *d);
    d->dir = dir;
    qac_status st = load_json(dir, "tokenizer_config.json", &d->tc);
    if (!st) st = load_json(dir, "special_tokens_map.json", &d->sm);
    if (!st) st = load_json(dir, "config.json", &d->config);
    if (st) {
        tk_dir_free(d);
        return st;
    }
    resolve_class(d);
    char path[4096];
    d->has_json = has_file(dir, "tokenizer.json", path, sizeof path);
    d->has_vocab_txt = has_file(dir, "vocab.txt", path, sizeof path);
    d->has_bpe_files = has_file(dir, "vocab.json", path, sizeof path) && has_file(dir, "merges.txt", path, sizeof path);
    d->spm = NULL;
    for (size_t i = 0; i < sizeof spm_files / sizeof spm_files[0] && !d->spm; i++)
        if (has_file(dir, spm_files[i], path, sizeof path)) d->spm = spm_files[i];
    return QAC_OK;
}

int tk_dir_is(const tk_dir *d, const char *cls) { return !strcmp(d->cls, cls); }

/* A special token named in tokenizer_config.json / special_tokens_map.json
 * (a string or an AddedToken object); NULL if neither names it. */
json_t *tk_dir_special(const tk_dir *d, const char *key) {
    json_t *v = json_object_get(d->sm, key);
    if (!v || json_is_null(v)) v = json_object_get(d->tc, key);
    return v && !json_is_null(v) ? v : NULL;
}

const char *tk_token_content(json_t *v) {
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* ---------- building blocks ---------- */

static tk_norm *take_precompiled(tk_norm *n) {
    if (!n) return NULL;
    if (n->kind == TN_PRECOMPILED) return n;
    for (int i = 0; i < n->n_kids; i++) {
        tk_norm *k = take_precompiled(n->kids[i]);
        if (k) {
            if (k == n->kids[i]) n->kids[i] = NULL; /* taken: the rest is freed without it */
            return k;
        }
    }
    return NULL;
}

static void norm_free_holes(tk_norm *n) {
    if (!n) return;
    for (int i = 0; i < n->n_kids; i++) norm_free_holes(n->kids[i]);
    free(n->kids);
    n->kids = NULL;
    n->n_kids = 0;
    tk_norm_free(n);
}

static tk_pretok *new_pretok(int kind) {
    tk_pretok *p = calloc(1, sizeof *p);
    if (p) p->kind = kind;
    return p;
}

static void tmpl_special(tk_template *t, int32_t id, int type_id) {
    if (t->n >= 16) return;
    t->items[t->n++] = (tk_tmpl_item){.seq = -1, .ids = {id}, .n_ids = 1, .type_id = type_id};
}

static void tmpl_seq(tk_template *t, int seq, int type_id) {
    if (t->n >= 16) return;
    t->items[t->n++] = (tk_tmpl_item){.seq = seq, .type_id = type_id};
}

static int32_t special_id(const tk_pipe *p, const tk_dir *d, const char *key, const char *dflt) {
    const char *s = tk_token_content(tk_dir_special(d, key));
    if (!s) s = dflt;
    return s ? tk_pipe_token_to_id(p, s, strlen(s)) : -1;
}

static qac_status add_token(tk_pipe *p, const char *content, int32_t id, int special, int single_word, int lstrip,
                            int rstrip, int normalized) {
    for (int i = 0; i < p->n_added; i++)
        if (!strcmp(p->added[i].content, content)) return QAC_OK;
    tk_added *na = realloc(p->added, (size_t)(p->n_added + 1) * sizeof *na);
    if (!na) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    p->added = na;
    tk_added *a = &p->added[p->n_added];
    memset(a, 0, sizeof *a);
    if (!(a->content = strdup(content))) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    a->len = (uint32_t)strlen(content);
    if (id < 0) id = tk_vocab_find(&p->model.vocab, content, a->len);
    if (id < 0) { /* a new token: the next id past the vocabulary and the added ones */
        id = p->model.vocab.n;
        for (int i = 0; i < p->n_added; i++)
            if (p->added[i].id >= id) id = p->added[i].id + 1;
    }
    a->id = id;
    a->special = (uint8_t)special;
    a->single_word = (uint8_t)single_word;
    a->lstrip = (uint8_t)lstrip;
    a->rstrip = (uint8_t)rstrip;
    a->normalized = (uint8_t)normalized;
    p->n_added++;
    return QAC_OK;
}

static int flag(json_t *o, const char *k, int dflt) {
    json_t *v = json_object_get(o, k);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

/* tokenizer_config.json's added_tokens_decoder ({"id": {content, flags}}). */
static qac_status added_from_config(tk_pipe *p, const tk_dir *d, int replace) {
    json_t *dec = json_object_get(d->tc, "added_tokens_decoder");
    if (!json_is_object(dec)) return QAC_OK;
    if (replace) {
        for (int i = 0; i < p->n_added; i++) {
            free(p->added[i].content);
            free(p->added[i].norm);
        }
        p->n_added = 0;
    }
    const char *key;
    json_t *v;
    json_object_foreach(dec, key, v) {
        const char *content = tk_token_content(v);
        char *end;
        long id = strtol(key, &end, 10);
        if (!content || *end || id < 0 || id > INT32_MAX)
            return qac_set_error(QAC_ERR_FORMAT, "%s/tokenizer_config.json: added_tokens_decoder[\"%.40s\"] is not "
                                 "{\"content\": ...} under a token id", d->dir, key);
        int special = flag(v, "special", 0);
        qac_status st = add_token(p, content, (int32_t)id, special, flag(v, "single_word", 0), flag(v, "lstrip", 0),
                                  flag(v, "rstrip", 0), flag(v, "normalized", !special));
        if (st) return st;
    }
    return QAC_OK;
}

static const char *const special_keys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                           "pad_token", "cls_token", "mask_token"};

/* The rebuilt classes' defaults for the special tokens no file names. */
static const char *class_default(const tk_dir *d, size_t k) {
    static const char *const roberta[] = {"<s>", "</s>", "<unk>", "</s>", "<pad>", "<s>", "<mask>"};
    static const char *const bert[] = {NULL, NULL, "[UNK]", "[SEP]", "[PAD]", "[CLS]", "[MASK]"};
    if (tk_dir_is(d, "XLMRobertaTokenizer") || tk_dir_is(d, "RobertaTokenizer")) return roberta[k];
    if (tk_dir_is(d, "BertTokenizer")) return bert[k];
    return NULL;
}

/* The named special tokens not added yet (transformers adds them as special,
 * not normalized, unless their entry says otherwise). */
static qac_status added_named(tk_pipe *p, const tk_dir *d) {
    for (size_t i = 0; i < sizeof special_keys / sizeof special_keys[0]; i++) {
        json_t *v = tk_dir_special(d, special_keys[i]);
        const char *content = v ? tk_token_content(v) : class_default(d, i);
        if (!content || !*content) continue;
        qac_status st = add_token(p, content, -1, 1, flag(v, "single_word", 0), flag(v, "lstrip", 0),
                                  flag(v, "rstrip", 0), json_is_object(v) ? flag(v, "normalized", 0) : 0);
        if (st) return st;
    }
    json_t *extra = tk_dir_special(d, "additional_special_tokens");
    for (size_t i = 0; json_is_array(extra) && i < json_array_size(extra); i++) {
        json_t *v = json_array_get(extra, i);
        const char *content = tk_token_content(v);
        if (!content || !*content) continue;
        qac_status st = add_token(p, content, -1, 1, flag(v, "single_word", 0), flag(v, "lstrip", 0),
                                  flag(v, "rstrip", 0), json_is_object(v) ? flag(v, "normalized", 0) : 0);
        if (st) return st;
    }
    return QAC_OK;
}

/* ---------- the rebuilt classes ---------- */

static qac_status rebuild_xlmr(tk_pipe *p, const tk_dir *d) {
    if (p->model.kind != TM_UNIGRAM)
        return qac_set_error(QAC_ERR_FORMAT, "%s: tokenizer_class XLMRobertaTokenizer needs a Unigram model, "
                             "tokenizer.json has another kind", d->dir);
    tk_norm *pc = take_precompiled(p->norm);
    if (pc != p->norm) norm_free_holes(p->norm);
    p->norm = pc;
    tk_pretok_free(p->pre);
    int prefix = flag(d->tc, "add_prefix_space", 1);
    p->pre = new_pretok(TP_SEQUENCE);
    if (!p->pre || !(p->pre->kids = calloc(2, sizeof *p->pre->kids)) ||
        !(p->pre->kids[0] = new_pretok(TP_WHITESPACE_SPLIT)) || !(p->pre->kids[1] = new_pretok(TP_METASPACE)))
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    p->pre->n_kids = 2;
    p->pre->kids[1]->replacement = 0x2581;
    p->pre->kids[1]->prepend_scheme = prefix ? TK_PREPEND_ALWAYS : TK_PREPEND_NEVER;
    p->pre->kids[1]->split = 1;
    tk_dec_free(p->dec);
    if (!(p->dec = calloc(1, sizeof *p->dec))) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    p->dec->kind = TD_METASPACE;
    p->dec->replacement = 0x2581;
    p->dec->prepend_scheme = prefix ? TK_PREPEND_ALWAYS : TK_PREPEND_NEVER;
    p->model.unk = p->model.vocab.n > 3 ? 3 : -1;
    p->trim_offsets = 0;
    return QAC_OK;
}

/* RoBERTa's layout, XLM-R's too: first A last, and first A last last B last. */
static void roberta_layout(tk_pipe *p, int32_t first, int32_t last) {
    p->single.n = p->pair.n = 0;
    tmpl_special(&p->single, first, 0);
    tmpl_seq(&p->single, 0, 0);
    tmpl_special(&p->single, last, 0);
    tmpl_special(&p->pair, first, 0);
    tmpl_seq(&p->pair, 0, 0);
    tmpl_special(&p->pair, last, 0);
    tmpl_special(&p->pair, last, 0);
    tmpl_seq(&p->pair, 1, 0);
    tmpl_special(&p->pair, last, 0);
}

static void xlmr_templates(tk_pipe *p, const tk_dir *d) {
    roberta_layout(p, special_id(p, d, "bos_token", "<s>"), special_id(p, d, "eos_token", "</s>"));
}

static qac_status rebuild_roberta(tk_pipe *p, const tk_dir *d) {
    if (p->model.kind != TM_BPE)
        return qac_set_error(QAC_ERR_FORMAT, "%s: tokenizer_class RobertaTokenizer needs a BPE model", d->dir);
    tk_norm_free(p->norm);
    p->norm = NULL;
    tk_pretok_free(p->pre);
    int prefix = flag(d->tc, "add_prefix_space", 0);
    if (!(p->pre = new_pretok(TP_BYTELEVEL))) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    p->pre->add_prefix_space = prefix;
    p->pre->use_regex = 1;
    tk_dec_free(p->dec);
    if (!(p->dec = calloc(1, sizeof *p->dec))) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    p->dec->kind = TD_BYTELEVEL;
    free(p->model.prefix);
    free(p->model.suffix);
    p->model.prefix = p->model.suffix = NULL;
    p->model.prefix_len = p->model.suffix_len = 0;
    p->model.fuse_unk = 0;
    p->model.unk = -1; /* RobertaTokenizer's BPE has no unknown token */
    p->trim_offsets = flag(d->tc, "trim_offsets", 1);
    p->trim_prefix_space = prefix;
    return QAC_OK;
}

static void roberta_templates(tk_pipe *p, const tk_dir *d) {
    roberta_layout(p, special_id(p, d, "cls_token", "<s>"), special_id(p, d, "sep_token", "</s>"));
}

static qac_status rebuild_bert(tk_pipe *p, const tk_dir *d) {
    if (p->model.kind != TM_WORDPIECE)
        return qac_set_error(QAC_ERR_FORMAT, "%s: tokenizer_class BertTokenizer needs a WordPiece model", d->dir);
    tk_norm_free(p->norm);
    tk_pretok_free(p->pre);
    p->norm = calloc(1, sizeof *p->norm);
    p->pre = new_pretok(TP_BERT);
    if (!p->norm || !p->pre) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    p->norm->kind = TN_BERT;
    p->norm->clean_text = 1;
    p->norm->chinese = flag(d->tc, "tokenize_chinese_chars", 1);
    p->norm->lowercase = flag(d->tc, "do_lower_case", 1);
    p->norm->strip_accents = flag(d->tc, "strip_accents", p->norm->lowercase);
    const char *unk = tk_token_content(tk_dir_special(d, "unk_token"));
    p->model.unk = tk_vocab_find(&p->model.vocab, unk ? unk : "[UNK]", strlen(unk ? unk : "[UNK]"));
    tk_dec_free(p->dec);
    if (!(p->dec = calloc(1, sizeof *p->dec)) || !(p->dec->prefix = strdup("##")))
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    p->dec->kind = TD_WORDPIECE;
    p->dec->prefix_len = 2;
    p->dec->cleanup = 1;
    p->trim_offsets = 0;
    return QAC_OK;
}

static void bert_templates(tk_pipe *p, const tk_dir *d) {
    int32_t cls = special_id(p, d, "cls_token", "[CLS]"), sep = special_id(p, d, "sep_token", "[SEP]");
    p->single.n = p->pair.n = 0;
    tmpl_special(&p->single, cls, 0);
    tmpl_seq(&p->single, 0, 0);
    tmpl_special(&p->single, sep, 0);
    tmpl_special(&p->pair, cls, 0);
    tmpl_seq(&p->pair, 0, 0);
    tmpl_special(&p->pair, sep, 0);
    tmpl_seq(&p->pair, 1, 1);
    tmpl_special(&p->pair, sep, 1);
}

/* ---------- sources ---------- */

static qac_status read_text(const char *dir, const char *name, char **data, size_t *len) {
    char path[4096];
    qac_status st = qac_path_join(path, sizeof path, dir, name);
    return st ? st : qac_read_file(path, data, len);
}

static qac_status pipe_from_json_file(tk_pipe *p, const tk_dir *d) {
    char *text = NULL, what[4200];
    size_t len = 0;
    qac_status st = read_text(d->dir, "tokenizer.json", &text, &len);
    snprintf(what, sizeof what, "%s/tokenizer.json", d->dir);
    if (!st) st = tk_pipe_from_json(p, text, len, what);
    free(text);
    return st;
}

/* vocab.json + merges.txt (RoBERTa's own files): a BPE model. */
static qac_status pipe_from_bpe_files(tk_pipe *p, const tk_dir *d) {
    char *vtext = NULL, *mtext = NULL;
    size_t vlen = 0, mlen = 0;
    qac_status st = read_text(d->dir, "vocab.json", &vtext, &vlen);
    if (!st) st = read_text(d->dir, "merges.txt", &mtext, &mlen);
    /* wrap them as a tokenizer.json so one reader checks both */
    json_t *root = NULL, *vocab = NULL, *merges = NULL;
    json_error_t err;
    if (!st && !(vocab = json_loadb(vtext, vlen, 0, &err)))
        st = qac_set_error(QAC_ERR_FORMAT, "%s/vocab.json:%d: %s", d->dir, err.line, err.text);
    if (!st && !(merges = json_array())) st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
    for (size_t i = 0, line = 0; !st && i < mlen; line++) {
        size_t e = i;
        while (e < mlen && mtext[e] != '\n') e++;
        size_t l = e;
        if (l > i && mtext[l - 1] == '\r') l--;
        int version = line == 0 && l - i >= 8 && !memcmp(mtext + i, "#version", 8);
        if (l > i && !version) {
            json_t *s = json_stringn(mtext + i, l - i);
            if (!s || json_array_append_new(merges, s))
                st = qac_set_error(QAC_ERR_FORMAT, "%s/merges.txt line %zu is not UTF-8", d->dir, line + 1);
        }
        i = e + 1;
    }
    if (!st) {
        root = json_pack("{s:{s:s, s:O, s:O, s:b}}", "model", "type", "BPE", "vocab", vocab, "merges", merges,
                         "fuse_unk", 0);
        if (!root) st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    char *text = !st ? json_dumps(root, JSON_COMPACT) : NULL;
    if (!st && !text) st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
    char what[4200];
    snprintf(what, sizeof what, "%s/vocab.json + merges.txt", d->dir);
    if (!st) st = tk_pipe_from_json(p, text, strlen(text), what);
    free(text);
    json_decref(root);
    json_decref(vocab);
    json_decref(merges);
    free(vtext);
    free(mtext);
    return st;
}

/* Field `field` (length-delimited) of a protobuf message: its bytes, or NULL. */
static const unsigned char *pb_field(const unsigned char *p, size_t n, unsigned field, size_t *len) {
    size_t i = 0;
    while (i < n) {
        uint64_t key = 0;
        for (int s = 0; i < n && s < 64; s += 7) {
            key |= (uint64_t)(p[i] & 0x7F) << s;
            if (!(p[i++] & 0x80)) break;
        }
        unsigned type = (unsigned)(key & 7);
        uint64_t v = 0;
        if (type == 0 || type == 2) {
            for (int s = 0; i < n && s < 64; s += 7) {
                v |= (uint64_t)(p[i] & 0x7F) << s;
                if (!(p[i++] & 0x80)) break;
            }
        }
        if (type == 2) {
            if (v > n - i) return NULL;
            if ((key >> 3) == field) {
                *len = (size_t)v;
                return p + i;
            }
            i += (size_t)v;
        } else if (type == 1) {
            i += 8;
        } else if (type == 5) {
            i += 4;
        } else if (type != 0) {
            return NULL;
        }
    }
    return NULL;
}

/* sentencepiece.bpe.model as transformers' XLM-R converter reads it. */
static qac_status pipe_from_spm(tk_pipe *p, const tk_dir *d) {
    char path[4096];
    qac_status st = qac_path_join(path, sizeof path, d->dir, d->spm);
    qac_sp *sp = NULL;
    if (!st) st = qac_sp_load(&sp, path);
    if (st) return st;
    int n = qac_sp_vocab_size(sp);
    char *proto = NULL;
    size_t plen = 0;
    if (n < 4) {
        qac_sp_free(sp);
        return qac_set_error(QAC_ERR_FORMAT, "%s: %d pieces; an XLM-R model has <unk> <s> </s> and more", path, n);
    }
    int total = n + 2; /* <s> <pad> </s> <unk>, pieces 3.., <mask> */
    const char **toks = malloc((size_t)total * sizeof *toks);
    uint32_t *lens = malloc((size_t)total * sizeof *lens);
    int32_t *ids = malloc((size_t)total * sizeof *ids);
    memset(p, 0, sizeof *p);
    p->model.kind = TM_UNIGRAM;
    p->model.scores = calloc((size_t)total, sizeof *p->model.scores);
    if (!toks || !lens || !ids || !p->model.scores) st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
    const char *head[4] = {"<s>", "<pad>", "</s>", "<unk>"};
    const char *keys[4] = {"bos_token", "pad_token", "eos_token", "unk_token"};
    for (int i = 0; !st && i < total; i++) {
        const char *t;
        if (i < 4) t = tk_token_content(tk_dir_special(d, keys[i])) ? tk_token_content(tk_dir_special(d, keys[i])) : head[i];
        else if (i == total - 1) t = tk_token_content(tk_dir_special(d, "mask_token")) ? tk_token_content(tk_dir_special(d, "mask_token")) : "<mask>";
        else {
            t = qac_sp_id_to_piece(sp, i - 1);
            p->model.scores[i] = (double)qac_sp_score(sp, i - 1);
        }
        toks[i] = t;
        lens[i] = (uint32_t)strlen(t);
        ids[i] = i;
    }
    if (!st) st = tk_vocab_init(&p->model.vocab, total, toks, lens, ids);
    free(toks);
    free(lens);
    free(ids);
    if (!st) st = qac_sp_serialized(sp, &proto, &plen);
    qac_sp_free(sp);
    if (!st) { /* ModelProto.normalizer_spec (3) . precompiled_charsmap (2) */
        size_t nl = 0, cl = 0;
        const unsigned char *ns = pb_field((const unsigned char *)proto, plen, 3, &nl);
        const unsigned char *cm = ns ? pb_field(ns, nl, 2, &cl) : NULL;
        if (cm && cl) {
            p->norm = calloc(1, sizeof *p->norm);
            if (!p->norm) st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
            else {
                p->norm->kind = TN_PRECOMPILED;
                st = tk_precompiled_load(&p->norm->pc, cm, cl);
                if (st) st = qac_wrap_error(st, "%s", path);
            }
        }
    }
    free(proto);
    if (!st) st = tk_model_check(&p->model);
    return st;
}

/* ---------- the decision ---------- */

static qac_status finish_specials(tk_pipe *p, const tk_dir *d, int rebuilt) {
    qac_status st = added_from_config(p, d, rebuilt && json_is_object(json_object_get(d->tc, "added_tokens_decoder")));
    if (!st) st = added_named(p, d);
    return st;
}

static char *dup_describe(const char *fmt, const char *a, const char *b) {
    char buf[256];
    snprintf(buf, sizeof buf, fmt, a, b);
    return strdup(buf);
}

static const char *model_name(const tk_model *m) {
    switch (m->kind) {
    case TM_WORDPIECE: return "WordPiece";
    case TM_UNIGRAM: return "Unigram";
    case TM_WORDLEVEL: return "WordLevel";
    default: return "BPE";
    }
}

qac_status tk_family_pipe(tk_pipe **out, const tk_dir *d) {
    *out = NULL;
    tk_pipe *p = calloc(1, sizeof *p);
    if (!p) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    qac_status st;
    int xlmr = tk_dir_is(d, "XLMRobertaTokenizer"), roberta = tk_dir_is(d, "RobertaTokenizer"),
        bert = tk_dir_is(d, "BertTokenizer");
    const char *source;
    if (xlmr && d->spm) {
        source = d->spm;
        st = pipe_from_spm(p, d);
    } else if (d->has_json) {
        source = "tokenizer.json";
        st = pipe_from_json_file(p, d);
    } else if (d->has_bpe_files) {
        source = "vocab.json + merges.txt";
        st = pipe_from_bpe_files(p, d);
        if (!st && !roberta && !xlmr && !bert) { /* the files alone: GPT-2 / RoBERTa byte-level BPE */
            roberta = 1;
        }
    } else {
        free(p);
        return qac_set_error(QAC_ERR_NOT_FOUND, "%s: no tokenizer.json", d->dir);
    }
    if (!st) {
        if (xlmr) st = rebuild_xlmr(p, d);
        else if (roberta) st = rebuild_roberta(p, d);
        else if (bert && p->model.kind == TM_WORDPIECE) st = rebuild_bert(p, d);
    }
    int rebuilt = xlmr || roberta || (bert && p->model.kind == TM_WORDPIECE);
    if (!st) st = finish_specials(p, d, rebuilt);
    if (!st && xlmr) xlmr_templates(p, d);
    if (!st && roberta) roberta_templates(p, d);
    if (!st && bert && p->model.kind == TM_WORDPIECE) bert_templates(p, d);
    if (!st) st = tk_pipe_finish(p);
    if (!st) {
        const char *how = xlmr ? ", as XLMRobertaTokenizer" : roberta ? ", as RobertaTokenizer" : bert ? ", as BertTokenizer" : "";
        char kind[64];
        snprintf(kind, sizeof kind, "%s%s", model_name(&p->model),
                 p->pre && (p->pre->kind == TP_BYTELEVEL ||
                            (p->pre->kind == TP_SEQUENCE && p->pre->n_kids && p->pre->kids[p->pre->n_kids - 1]->kind == TP_BYTELEVEL))
                     ? " (byte-level)"
                     : "");
        char tail[96];
        snprintf(tail, sizeof tail, "%s%s", kind, how);
        if (!(p->describe = dup_describe("%s: %s", source, tail))) st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    if (st) {
        tk_pipe_free(p);
        free(p);
        return st;
    }
    *out = p;
    return QAC_OK;
}
