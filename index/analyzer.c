/* English analyzer: see qac_analyzer.h for the rules and how they differ
 * from Lucene's StandardTokenizer. */
#include "qac_analyzer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define MAX_TOKEN_CHARS 255

enum wclass {
    W_OTHER = 0,
    W_LETTER,
    W_DIGIT,
    W_CONNECT, /* Pc: joins word characters ("foo_bar") */
    W_MARK,    /* M*: extends the token it follows */
    W_IDEO,    /* Han, Hiragana: one token per character */
    W_MIDLET,  /* joins letter-letter */
    W_MIDNUM,  /* joins digit-digit */
    W_MIDBOTH  /* joins letter-letter and digit-digit */
};

/* Direct-mapped cache of lower-cased word -> stem: corpora repeat words
 * (Zipf), and stemming dominates analysis time. Output is unchanged. */
#define CACHE_KEY 30
typedef struct stem_entry {
    uint8_t klen, slen; /* klen 0: empty */
    char key[CACHE_KEY], stem[CACHE_KEY];
} stem_entry;

struct qac_analyzer {
    stem_entry *cache;
    size_t cache_mask;
    int32_t cps[MAX_TOKEN_CHARS];
    uint8_t utf8[MAX_TOKEN_CHARS * 4 + 4];
};

/* Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET. */
static const char *const stopwords[] = {
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no", "not",
    "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to", "was",
    "will", "with"};

int qac_analyzer_is_stopword(const char *w, size_t len) {
    if (len == 0 || len > 5) return 0;
    for (size_t i = 0; i < sizeof stopwords / sizeof stopwords[0]; i++)
        if (strlen(stopwords[i]) == len && memcmp(stopwords[i], w, len) == 0) return 1;
    return 0;
}

static int is_ideographic(int32_t c) {
    return (c >= 0x3040 && c <= 0x309F) ||   /* Hiragana */
           (c >= 0x3400 && c <= 0x4DBF) ||   /* CJK extension A */
           (c >= 0x4E00 && c <= 0x9FFF) ||   /* CJK unified */
           (c >= 0xF900 && c <= 0xFAFF) ||   /* CJK compatibility */
           (c >= 0x20000 && c <= 0x3FFFF);   /* CJK extensions B.. */
}

static enum wclass classify(int32_t c) {
    if (c < 128) {
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return W_LETTER;
        if (c >= '0' && c <= '9') return W_DIGIT;
        switch (c) {
        case '_': return W_CONNECT;
        case '\'': case '.': return W_MIDBOTH;
        case ':': return W_MIDLET;
        case ',': case ';': return W_MIDNUM;
        default: return W_OTHER;
        }
    }
    switch (c) {
    case 0x2019: case 0x2018: case 0xFF07: case 0xFF0E: case 0x2024: case 0xFE52: return W_MIDBOTH;
    case 0x00B7: case 0x0387: case 0x2027: case 0xFE13: case 0xFE55: case 0xFF1A: return W_MIDLET;
    case 0x037E: case 0x0589: case 0x060C: case 0x060D: case 0x066C: case 0x07F8: case 0x2044:
    case 0xFE10: case 0xFE14: case 0xFE50: case 0xFE54: case 0xFF0C: case 0xFF1B: return W_MIDNUM;
    default: break;
    }
    if (is_ideographic(c)) return W_IDEO;
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL:
        return W_LETTER;
    case UTF8PROC_CATEGORY_ND: return W_DIGIT;
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: return W_MARK;
    case UTF8PROC_CATEGORY_PC: return W_CONNECT;
    default: return W_OTHER;
    }
}

qac_status qac_analyzer_create(qac_analyzer **out) {
    *out = NULL;
    qac_analyzer *a = calloc(1, sizeof *a);
    if (!a) return qac_set_error(QAC_ERR_NOMEM, "analyzer: out of memory");
    *out = a;
    return QAC_OK;
}

qac_status qac_analyzer_enable_cache(qac_analyzer *a, size_t entries) {
    size_t n = 1;
    while (n < entries) n *= 2;
    stem_entry *c = calloc(n, sizeof *c);
    if (!c) return qac_set_error(QAC_ERR_NOMEM, "analyzer: out of memory");
    free(a->cache);
    a->cache = c;
    a->cache_mask = n - 1;
    return QAC_OK;
}

void qac_analyzer_free(qac_analyzer *a) {
    if (!a) return;
    free(a->cache);
    free(a);
}

static int is_apostrophe(int32_t c) { return c == '\'' || c == 0x2019 || c == 0xFF07; }

static size_t encode_utf8(uint8_t *dst, const int32_t *cps, int n) {
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        if (cps[i] < 128) dst[len++] = (uint8_t)cps[i];
        else len += (size_t)utf8proc_encode_char(cps[i], dst + len);
    }
    return len;
}

/* Possessive, lower-case, stopword, stem, emit. Returns >0 to stop. */
static int finish_token(qac_analyzer *a, int n, qac_token_fn fn, void *user) {
    if (n >= 2 && is_apostrophe(a->cps[n - 2]) && (a->cps[n - 1] == 's' || a->cps[n - 1] == 'S')) n -= 2;
    if (n == 0) return 0;
    for (int i = 0; i < n; i++) {
        int32_t c = a->cps[i];
        a->cps[i] = c < 128 ? (c >= 'A' && c <= 'Z' ? c + 32 : c) : utf8proc_tolower(c);
    }
    size_t len = encode_utf8(a->utf8, a->cps, n);
    if (qac_analyzer_is_stopword((const char *)a->utf8, len)) return 0;
    stem_entry *e = NULL;
    if (a->cache && len <= CACHE_KEY) {
        uint64_t h = 0xcbf29ce484222325ull;
        for (size_t i = 0; i < len; i++) h = (h ^ a->utf8[i]) * 0x100000001b3ull;
        e = &a->cache[(h ^ (h >> 29)) & a->cache_mask];
        if (e->klen == len && memcmp(e->key, a->utf8, len) == 0)
            return e->slen && fn(user, e->stem, e->slen) ? 1 : 0;
        e->klen = (uint8_t)len;
        memcpy(e->key, a->utf8, len);
    }
    /* the stem is a prefix of the word plus at most a few ASCII letters, so it fits */
    size_t sl = encode_utf8(a->utf8, a->cps, qac_porter_stem(a->cps, n));
    if (e) {
        if (sl <= CACHE_KEY) {
            e->slen = (uint8_t)sl;
            memcpy(e->stem, a->utf8, sl);
        } else {
            e->klen = 0;
        }
    }
    if (sl == 0) return 0;
    return fn(user, (const char *)a->utf8, sl) ? 1 : 0;
}

qac_status qac_analyzer_run(qac_analyzer *a, const char *text, size_t len, qac_token_fn fn, void *user) {
    const uint8_t *p = (const uint8_t *)text, *end = p + len;
    int n = 0;                   /* code points in the current token */
    enum wclass base = W_OTHER;  /* class of the last letter/digit in the token */
    int32_t c;
    int rc = 0;
#define FLUSH()                                        \
    do {                                               \
        if (n) rc = finish_token(a, n, fn, user);      \
        n = 0;                                         \
        base = W_OTHER;                                \
    } while (0)
    while (p < end && rc == 0) {
        utf8proc_ssize_t step;
        if (*p < 0x80) { c = *p; step = 1; }
        else {
            step = utf8proc_iterate(p, end - p, &c);
            if (step <= 0) { FLUSH(); p++; continue; }
        }
        enum wclass w = classify(c);
        if (w == W_MIDLET || w == W_MIDNUM || w == W_MIDBOTH) {
            /* Joins only between two letters or two digits. */
            int joined = 0;
            if (n && n + 1 < MAX_TOKEN_CHARS && p + step < end) {
                int32_t nc;
                utf8proc_ssize_t ns = p[step] < 0x80 ? (nc = p[step], 1) : utf8proc_iterate(p + step, end - p - step, &nc);
                if (ns > 0) {
                    enum wclass nw = classify(nc);
                    int letters = base == W_LETTER && nw == W_LETTER && w != W_MIDNUM;
                    int digits = base == W_DIGIT && nw == W_DIGIT && w != W_MIDLET;
                    if (letters || digits) {
                        a->cps[n++] = c;
                        a->cps[n++] = nc;
                        p += step + ns;
                        joined = 1;
                    }
                }
            }
            if (!joined) { FLUSH(); p += step; }
            continue;
        }
        switch (w) {
        case W_LETTER:
        case W_DIGIT:
            if (n == MAX_TOKEN_CHARS) FLUSH();
            a->cps[n++] = c;
            base = w;
            break;
        case W_CONNECT:
        case W_MARK:
            if (n && n < MAX_TOKEN_CHARS) a->cps[n++] = c;
            else FLUSH();
            break;
        case W_IDEO:
            FLUSH();
            if (rc) break;
            a->cps[0] = c;
            n = 1;
            FLUSH();
            break;
        default:
            FLUSH();
            break;
        }
        p += step;
    }
    if (rc == 0) FLUSH();
#undef FLUSH
    return QAC_OK;
}
