/* A small backtracking regex engine for the patterns tokenizer.json files
 * carry (Split pre-tokenizers, Replace normalizers), with Oniguruma's
 * semantics as the `tokenizers` library compiles them (Ruby syntax, UTF-8):
 * leftmost match, alternatives tried in order, greedy / lazy / possessive
 * quantifiers, classes with ranges and \p{..} categories, \s \d \w \h,
 * lookahead, (?i) for ASCII letters, ^ $ as line anchors, \A \z \b.
 *
 * Back-references, lookbehind, atomic groups, scripts (\p{Han}) and class
 * set operations are refused at compile time with a message naming them.
 *
 * The pattern becomes a graph of nodes linked by `next`: an alternative's
 * branches end in the node after it, a repeat's body ends in a tail node
 * that loops back. Matching walks that graph; a repeat of one character
 * class (\s+, \p{L}+, ' {2,}') scans its run without recursion, so deep
 * recursion needs deeply nested patterns, not long texts. A step budget
 * turns a catastrophic pattern into an error instead of a hang. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tok_hf.h"
#include "tokenizer_internal.h"

enum {
    RX_CHAR, RX_CLASS, RX_ANY, RX_ALT, RX_REPEAT, RX_TAIL, RX_LOOK, RX_ACCEPT, RX_BOL, RX_EOL, RX_BOS, RX_EOS,
    RX_EOS_NL, RX_WORDB, RX_NWORDB
};

/* class items: a code point range, or a property (negated or not) */
enum { CI_RANGE, CI_CATS, CI_SPACE, CI_WORD, CI_HEX, CI_DIGIT };

typedef struct rx_item {
    int kind, neg;
    uint32_t lo, hi;
    uint32_t cats; /* bit per utf8proc category */
} rx_item;

typedef struct rx_class {
    rx_item *items;
    int n, neg, icase;
} rx_class;

typedef struct rx_node {
    int type;
    struct rx_node *next;
    uint32_t cp; /* RX_CHAR */
    int icase;
    rx_class *cls;
    struct rx_node **alts; /* RX_ALT: first node of each branch */
    int n_alts;
    struct rx_node *sub;   /* RX_REPEAT, RX_LOOK */
    struct rx_node *rep;   /* RX_TAIL: its repeat */
    int min, max, greedy, possessive, simple, id;
    int neg;               /* RX_LOOK */
} rx_node;

struct tk_regex {
    rx_node **all; /* every node, for freeing */
    int n_all, cap_all;
    rx_class **classes;
    int n_classes, cap_classes;
    rx_node *first;
    int n_repeats;
};

typedef struct rx_parser {
    tk_regex *re;
    const char *p, *end;
    int icase;
    qac_status st;
} rx_parser;

#define RX_INF 0x7fffffff
#define RX_STEP_LIMIT 20000000L

static qac_status rx_err(rx_parser *ps, const char *what) {
    if (!ps->st) ps->st = qac_set_error(QAC_ERR_UNSUPPORTED, "regex: %s", what);
    return ps->st;
}

static rx_node *rx_new(rx_parser *ps, int type) {
    tk_regex *re = ps->re;
    if (re->n_all == re->cap_all) {
        int nc = re->cap_all ? re->cap_all * 2 : 32;
        rx_node **na = realloc(re->all, (size_t)nc * sizeof *na);
        if (!na) {
            ps->st = qac_set_error(QAC_ERR_NOMEM, "regex: out of memory");
            return NULL;
        }
        re->all = na;
        re->cap_all = nc;
    }
    rx_node *nd = calloc(1, sizeof *nd);
    if (!nd) {
        ps->st = qac_set_error(QAC_ERR_NOMEM, "regex: out of memory");
        return NULL;
    }
    nd->type = type;
    re->all[re->n_all++] = nd;
    return nd;
}

static rx_class *rx_new_class(rx_parser *ps) {
    tk_regex *re = ps->re;
    if (re->n_classes == re->cap_classes) {
        int nc = re->cap_classes ? re->cap_classes * 2 : 8;
        rx_class **na = realloc(re->classes, (size_t)nc * sizeof *na);
        if (!na) return NULL;
        re->classes = na;
        re->cap_classes = nc;
    }
    rx_class *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    re->classes[re->n_classes++] = c;
    return c;
}

static int rx_add_item(rx_parser *ps, rx_class *c, rx_item it) {
    rx_item *ni = realloc(c->items, (size_t)(c->n + 1) * sizeof *ni);
    if (!ni) {
        ps->st = qac_set_error(QAC_ERR_NOMEM, "regex: out of memory");
        return -1;
    }
    c->items = ni;
    c->items[c->n++] = it;
    return 0;
}

/* ---------- character tests ---------- */

static uint32_t cat_bit(int cat) { return 1u << cat; }

static int item_match(const rx_item *it, uint32_t c) {
    int r;
    switch (it->kind) {
    case CI_RANGE: r = c >= it->lo && c <= it->hi; break;
    case CI_CATS: r = (cat_bit(tk_onig_category(c)) & it->cats) != 0; break;
    case CI_SPACE: r = tk_is_whitespace(c); break;
    case CI_DIGIT: r = c < 128 ? c >= '0' && c <= '9' : utf8proc_category((utf8proc_int32_t)c) == UTF8PROC_CATEGORY_ND; break;
    case CI_HEX: r = (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'f'); break;
    default: { /* CI_WORD: Oniguruma's \w = Letter | Mark | Decimal_Number | Connector_Punctuation */
        if (c < 128) r = tk_is_letter(c) || (c >= '0' && c <= '9') || c == '_';
        else {
            int k = utf8proc_category((utf8proc_int32_t)c);
            r = (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_ME) || k == UTF8PROC_CATEGORY_ND ||
                k == UTF8PROC_CATEGORY_PC;
        }
    }
    }
    return it->neg ? !r : r;
}

static uint32_t ascii_fold(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

static int class_match(const rx_class *cl, uint32_t c) {
    int r = 0;
    for (int i = 0; i < cl->n && !r; i++) {
        r = item_match(&cl->items[i], c);
        if (!r && cl->icase && c < 128 && ((c | 32) >= 'a' && (c | 32) <= 'z'))
            r = item_match(&cl->items[i], c ^ 32);
    }
    return cl->neg ? !r : r;
}

static int node_char_match(const rx_node *nd, uint32_t c) {
    switch (nd->type) {
    case RX_CHAR: return nd->icase ? ascii_fold(c) == ascii_fold(nd->cp) : c == nd->cp;
    case RX_ANY: return c != '\n';
    default: return class_match(nd->cls, c);
    }
}

static int is_char_node(const rx_node *nd) { return nd->type == RX_CHAR || nd->type == RX_CLASS || nd->type == RX_ANY; }

/* ---------- parsing ---------- */

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if ((c | 32) >= 'a' && (c | 32) <= 'f') return (c | 32) - 'a' + 10;
    return -1;
}

static int next_cp(rx_parser *ps, uint32_t *cp) {
    if (ps->p >= ps->end) return -1;
    uint32_t i = 0;
    *cp = (uint32_t)tk_utf8_next(ps->p, (uint32_t)(ps->end - ps->p), &i);
    ps->p += i;
    return 0;
}

/* \p{...} names: general categories (one or two letters, or their long names). */
static uint32_t category_mask(const char *name, size_t n) {
    static const struct {
        const char *name;
        uint32_t cats;
    } tab[] = {
        {"L", (1u << UTF8PROC_CATEGORY_LU) | (1u << UTF8PROC_CATEGORY_LL) | (1u << UTF8PROC_CATEGORY_LT) |
                  (1u << UTF8PROC_CATEGORY_LM) | (1u << UTF8PROC_CATEGORY_LO)},
        {"Letter", (1u << UTF8PROC_CATEGORY_LU) | (1u << UTF8PROC_CATEGORY_LL) | (1u << UTF8PROC_CATEGORY_LT) |
                       (1u << UTF8PROC_CATEGORY_LM) | (1u << UTF8PROC_CATEGORY_LO)},
        {"Lu", 1u << UTF8PROC_CATEGORY_LU}, {"Ll", 1u << UTF8PROC_CATEGORY_LL}, {"Lt", 1u << UTF8PROC_CATEGORY_LT},
        {"Lm", 1u << UTF8PROC_CATEGORY_LM}, {"Lo", 1u << UTF8PROC_CATEGORY_LO},
        {"M", (1u << UTF8PROC_CATEGORY_MN) | (1u << UTF8PROC_CATEGORY_MC) | (1u << UTF8PROC_CATEGORY_ME)},
        {"Mark", (1u << UTF8PROC_CATEGORY_MN) | (1u << UTF8PROC_CATEGORY_MC) | (1u << UTF8PROC_CATEGORY_ME)},
        {"Mn", 1u << UTF8PROC_CATEGORY_MN}, {"Mc", 1u << UTF8PROC_CATEGORY_MC}, {"Me", 1u << UTF8PROC_CATEGORY_ME},
        {"N", (1u << UTF8PROC_CATEGORY_ND) | (1u << UTF8PROC_CATEGORY_NL) | (1u << UTF8PROC_CATEGORY_NO)},
        {"Number", (1u << UTF8PROC_CATEGORY_ND) | (1u << UTF8PROC_CATEGORY_NL) | (1u << UTF8PROC_CATEGORY_NO)},
        {"Nd", 1u << UTF8PROC_CATEGORY_ND}, {"Nl", 1u << UTF8PROC_CATEGORY_NL}, {"No", 1u << UTF8PROC_CATEGORY_NO},
        {"P", (1u << UTF8PROC_CATEGORY_PC) | (1u << UTF8PROC_CATEGORY_PD) | (1u << UTF8PROC_CATEGORY_PS) |
                  (1u << UTF8PROC_CATEGORY_PE) | (1u << UTF8PROC_CATEGORY_PI) | (1u << UTF8PROC_CATEGORY_PF) |
                  (1u << UTF8PROC_CATEGORY_PO)},
        {"Punctuation", (1u << UTF8PROC_CATEGORY_PC) | (1u << UTF8PROC_CATEGORY_PD) | (1u << UTF8PROC_CATEGORY_PS) |
                            (1u << UTF8PROC_CATEGORY_PE) | (1u << UTF8PROC_CATEGORY_PI) |
                            (1u << UTF8PROC_CATEGORY_PF) | (1u << UTF8PROC_CATEGORY_PO)},
        {"Pc", 1u << UTF8PROC_CATEGORY_PC}, {"Pd", 1u << UTF8PROC_CATEGORY_PD}, {"Ps", 1u << UTF8PROC_CATEGORY_PS},
        {"Pe", 1u << UTF8PROC_CATEGORY_PE}, {"Pi", 1u << UTF8PROC_CATEGORY_PI}, {"Pf", 1u << UTF8PROC_CATEGORY_PF},
        {"Po", 1u << UTF8PROC_CATEGORY_PO},
        {"S", (1u << UTF8PROC_CATEGORY_SM) | (1u << UTF8PROC_CATEGORY_SC) | (1u << UTF8PROC_CATEGORY_SK) |
                  (1u << UTF8PROC_CATEGORY_SO)},
        {"Symbol", (1u << UTF8PROC_CATEGORY_SM) | (1u << UTF8PROC_CATEGORY_SC) | (1u << UTF8PROC_CATEGORY_SK) |
                       (1u << UTF8PROC_CATEGORY_SO)},
        {"Sm", 1u << UTF8PROC_CATEGORY_SM}, {"Sc", 1u << UTF8PROC_CATEGORY_SC}, {"Sk", 1u << UTF8PROC_CATEGORY_SK},
        {"So", 1u << UTF8PROC_CATEGORY_SO},
        {"Z", (1u << UTF8PROC_CATEGORY_ZS) | (1u << UTF8PROC_CATEGORY_ZL) | (1u << UTF8PROC_CATEGORY_ZP)},
        {"Zs", 1u << UTF8PROC_CATEGORY_ZS}, {"Zl", 1u << UTF8PROC_CATEGORY_ZL}, {"Zp", 1u << UTF8PROC_CATEGORY_ZP},
        {"C", (1u << UTF8PROC_CATEGORY_CC) | (1u << UTF8PROC_CATEGORY_CF) | (1u << UTF8PROC_CATEGORY_CS) |
                  (1u << UTF8PROC_CATEGORY_CO) | (1u << UTF8PROC_CATEGORY_CN)},
        {"Cc", 1u << UTF8PROC_CATEGORY_CC}, {"Cf", 1u << UTF8PROC_CATEGORY_CF}, {"Cs", 1u << UTF8PROC_CATEGORY_CS},
        {"Co", 1u << UTF8PROC_CATEGORY_CO}, {"Cn", 1u << UTF8PROC_CATEGORY_CN},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (strlen(tab[i].name) == n && !memcmp(tab[i].name, name, n)) return tab[i].cats;
    return 0;
}

/* After "\p" or "\P": {Name} or {^Name} -> a category item. */
static int parse_property(rx_parser *ps, int neg, rx_item *it) {
    if (ps->p >= ps->end || *ps->p != '{') return rx_err(ps, "\\p must be followed by {Name}"), -1;
    const char *name = ++ps->p;
    while (ps->p < ps->end && *ps->p != '}') ps->p++;
    if (ps->p >= ps->end) return rx_err(ps, "unterminated \\p{"), -1;
    size_t n = (size_t)(ps->p - name);
    ps->p++;
    if (n && name[0] == '^') name++, n--, neg = !neg;
    uint32_t m = category_mask(name, n);
    if (!m) {
        char msg[96];
        snprintf(msg, sizeof msg, "\\p{%.*s}: only general categories (L, Lu, N, P, S, Z, ...) are supported",
                 (int)(n > 40 ? 40 : n), name);
        return rx_err(ps, msg), -1;
    }
    *it = (rx_item){.kind = CI_CATS, .neg = neg, .cats = m};
    return 0;
}

/* One escape after '\': a single code point (*cp, returns 1) or a class item (returns 2). */
static int parse_escape(rx_parser *ps, uint32_t *cp, rx_item *it) {
    if (ps->p >= ps->end) return rx_err(ps, "pattern ends with \\"), -1;
    char c = *ps->p++;
    switch (c) {
    case 't': *cp = '\t'; return 1;
    case 'n': *cp = '\n'; return 1;
    case 'r': *cp = '\r'; return 1;
    case 'f': *cp = '\f'; return 1;
    case 'v': *cp = '\v'; return 1;
    case 'a': *cp = 7; return 1;
    case 'e': *cp = 27; return 1;
    case '0': *cp = 0; return 1;
    case 'x':
    case 'u': {
        uint32_t v = 0;
        int digits = 0;
        if (c == 'x' && ps->p < ps->end && *ps->p == '{') {
            ps->p++;
            while (ps->p < ps->end && *ps->p != '}' && hexval(*ps->p) >= 0 && digits < 8)
                v = v * 16 + (uint32_t)hexval(*ps->p++), digits++;
            if (ps->p >= ps->end || *ps->p != '}' || !digits) return rx_err(ps, "bad \\x{...} escape"), -1;
            ps->p++;
        } else {
            int want = c == 'x' ? 2 : 4;
            while (digits < want && ps->p < ps->end && hexval(*ps->p) >= 0) v = v * 16 + (uint32_t)hexval(*ps->p++), digits++;
            if (!digits) return rx_err(ps, "bad \\x or \\u escape"), -1;
        }
        if (v > 0x10FFFF) return rx_err(ps, "escape past U+10FFFF"), -1;
        *cp = v;
        return 1;
    }
    case 's': case 'S': *it = (rx_item){.kind = CI_SPACE, .neg = c == 'S'}; return 2;
    case 'd': case 'D': *it = (rx_item){.kind = CI_DIGIT, .neg = c == 'D'}; return 2;
    case 'w': case 'W': *it = (rx_item){.kind = CI_WORD, .neg = c == 'W'}; return 2;
    case 'h': case 'H': *it = (rx_item){.kind = CI_HEX, .neg = c == 'H'}; return 2;
    case 'p': case 'P': return parse_property(ps, c == 'P', it) ? -1 : 2;
    default:
        if ((c >= '1' && c <= '9') || c == 'k' || c == 'g' || c == 'G' || c == 'K' || c == 'X' || c == 'R')
            return rx_err(ps, "back-references, \\G, \\K, \\X and \\R are not supported"), -1;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            char msg[48];
            snprintf(msg, sizeof msg, "unknown escape \\%c", c);
            return rx_err(ps, msg), -1;
        }
        ps->p--;
        if (next_cp(ps, cp)) return rx_err(ps, "bad escape"), -1;
        return 1;
    }
}

static rx_node *parse_class(rx_parser *ps) {
    rx_class *cl = rx_new_class(ps);
    rx_node *nd = cl ? rx_new(ps, RX_CLASS) : NULL;
    if (!nd) return rx_err(ps, "out of memory"), NULL;
    nd->cls = cl;
    cl->icase = ps->icase;
    if (ps->p < ps->end && *ps->p == '^') cl->neg = 1, ps->p++;
    int first = 1;
    while (ps->p < ps->end && (*ps->p != ']' || first)) {
        first = 0;
        if (*ps->p == '[') return rx_err(ps, "nested classes and [:posix:] names are not supported"), NULL;
        if (ps->p + 1 < ps->end && ps->p[0] == '&' && ps->p[1] == '&')
            return rx_err(ps, "class intersection (&&) is not supported"), NULL;
        uint32_t lo;
        rx_item it;
        if (*ps->p == '\\') {
            ps->p++;
            int k = parse_escape(ps, &lo, &it);
            if (k < 0) return NULL;
            if (k == 2) {
                if (rx_add_item(ps, cl, it)) return NULL;
                continue;
            }
        } else if (next_cp(ps, &lo)) {
            break;
        }
        uint32_t hi = lo;
        if (ps->p + 1 < ps->end && *ps->p == '-' && ps->p[1] != ']') {
            ps->p++;
            if (*ps->p == '\\') {
                ps->p++;
                if (parse_escape(ps, &hi, &it) != 1) return rx_err(ps, "a class range must end in a character"), NULL;
            } else if (next_cp(ps, &hi)) {
                break;
            }
            if (hi < lo) return rx_err(ps, "class range out of order"), NULL;
        }
        if (rx_add_item(ps, cl, (rx_item){.kind = CI_RANGE, .lo = lo, .hi = hi})) return NULL;
    }
    if (ps->p >= ps->end) return rx_err(ps, "unterminated [ class"), NULL;
    ps->p++;
    return nd;
}

static rx_node *parse_alt(rx_parser *ps);

/* {n}, {n,}, {n,m}: 1 if one is here (consumed), 0 if '{' is a literal. */
static int parse_braces(rx_parser *ps, int *min, int *max) {
    const char *q = ps->p + 1;
    long a = 0, b;
    int da = 0, db = 0;
    while (q < ps->end && *q >= '0' && *q <= '9' && da < 7) a = a * 10 + (*q++ - '0'), da++;
    if (!da || q >= ps->end) return 0;
    if (*q == '}') b = a;
    else if (*q == ',') {
        q++;
        b = 0;
        while (q < ps->end && *q >= '0' && *q <= '9' && db < 7) b = b * 10 + (*q++ - '0'), db++;
        if (q >= ps->end || *q != '}') return 0;
        if (!db) b = RX_INF;
    } else {
        return 0;
    }
    if (b < a) return 0;
    *min = (int)a;
    *max = (int)b;
    ps->p = q + 1;
    return 1;
}

/* One atom with its quantifier; NULL on error; *empty set for anchors-only. */
static rx_node *parse_atom(rx_parser *ps) {
    char c = *ps->p;
    rx_node *nd = NULL;
    if (c == '(') {
        ps->p++;
        int look = 0, neg = 0, saved_icase = ps->icase;
        if (ps->p < ps->end && *ps->p == '?') {
            ps->p++;
            if (ps->p < ps->end && (*ps->p == '=' || *ps->p == '!')) look = 1, neg = *ps->p++ == '!';
            else if (ps->p < ps->end && *ps->p == ':') ps->p++;
            else if (ps->p < ps->end && *ps->p == '<' && ps->p + 1 < ps->end && ps->p[1] != '=' && ps->p[1] != '!') {
                while (ps->p < ps->end && *ps->p != '>') ps->p++; /* named group: a plain group */
                if (ps->p >= ps->end) return rx_err(ps, "unterminated group name"), NULL;
                ps->p++;
            } else {
                /* flags: (?i) (?-i) (?i:...) */
                int on = 1, any = 0;
                while (ps->p < ps->end && (*ps->p == 'i' || *ps->p == '-')) {
                    if (*ps->p == '-') on = 0;
                    else ps->icase = on;
                    ps->p++;
                    any = 1;
                }
                if (!any || ps->p >= ps->end)
                    return rx_err(ps, "lookbehind, atomic groups and flags other than i are not supported"), NULL;
                if (*ps->p == ')') { /* (?i): applies to the rest of the enclosing group */
                    ps->p++;
                    return rx_new(ps, RX_ACCEPT + 100); /* placeholder removed by the caller */
                }
                if (*ps->p != ':') return rx_err(ps, "bad group flags"), NULL;
                ps->p++;
            }
        }
        rx_node *inner = parse_alt(ps);
        ps->icase = saved_icase;
        if (!inner) return NULL;
        if (ps->p >= ps->end || *ps->p != ')') return rx_err(ps, "missing )"), NULL;
        ps->p++;
        if (look) {
            nd = rx_new(ps, RX_LOOK);
            if (!nd) return NULL;
            nd->sub = inner;
            nd->neg = neg;
            return nd; /* a lookahead takes no quantifier here */
        }
        nd = inner;
    } else if (c == '[') {
        ps->p++;
        nd = parse_class(ps);
    } else if (c == '.') {
        ps->p++;
        nd = rx_new(ps, RX_ANY);
    } else if (c == '^' || c == '$') {
        ps->p++;
        return rx_new(ps, c == '^' ? RX_BOL : RX_EOL);
    } else if (c == '\\') {
        ps->p++;
        if (ps->p < ps->end && strchr("AzZbB", *ps->p)) {
            char a = *ps->p++;
            return rx_new(ps, a == 'A' ? RX_BOS : a == 'z' ? RX_EOS : a == 'Z' ? RX_EOS_NL : a == 'b' ? RX_WORDB : RX_NWORDB);
        }
        uint32_t cp;
        rx_item it;
        int k = parse_escape(ps, &cp, &it);
        if (k < 0) return NULL;
        if (k == 1) {
            nd = rx_new(ps, RX_CHAR);
            if (nd) nd->cp = cp, nd->icase = ps->icase;
        } else {
            rx_class *cl = rx_new_class(ps);
            nd = cl ? rx_new(ps, RX_CLASS) : NULL;
            if (nd && rx_add_item(ps, cl, it)) return NULL;
            if (nd) nd->cls = cl;
        }
    } else if (c == '*' || c == '+' || c == '?' || c == ')' || c == '|') {
        return rx_err(ps, "nothing to repeat"), NULL;
    } else {
        uint32_t cp;
        if (next_cp(ps, &cp)) return rx_err(ps, "bad pattern"), NULL;
        nd = rx_new(ps, RX_CHAR);
        if (nd) nd->cp = cp, nd->icase = ps->icase;
    }
    if (!nd) return ps->st ? NULL : (rx_err(ps, "out of memory"), NULL);
    /* quantifier */
    int min = -1, max = 0;
    if (ps->p < ps->end) {
        char q = *ps->p;
        if (q == '*') min = 0, max = RX_INF, ps->p++;
        else if (q == '+') min = 1, max = RX_INF, ps->p++;
        else if (q == '?') min = 0, max = 1, ps->p++;
        else if (q == '{' && !parse_braces(ps, &min, &max)) min = -1;
    }
    if (min < 0) return nd;
    rx_node *rep = rx_new(ps, RX_REPEAT);
    if (!rep) return NULL;
    rep->sub = nd;
    rep->min = min;
    rep->max = max;
    rep->greedy = 1;
    rep->id = ps->re->n_repeats++;
    if (ps->p < ps->end && *ps->p == '?') rep->greedy = 0, ps->p++;
    else if (ps->p < ps->end && *ps->p == '+' && max == RX_INF) rep->possessive = 1, ps->p++;
    rep->simple = is_char_node(nd) && nd->next == NULL;
    if (rep->possessive && !rep->simple) return rx_err(ps, "possessive repeats of groups are not supported"), NULL;
    if (ps->p < ps->end && (*ps->p == '*' || *ps->p == '+' || (*ps->p == '{' && parse_braces(ps, &min, &max))))
        return rx_err(ps, "nested quantifier"), NULL;
    return rep;
}

/* A sequence of atoms, linked by next; returns the first (an empty
 * sequence is a one-branch alternative with no nodes). */
static rx_node *parse_seq(rx_parser *ps, rx_node **last) {
    rx_node *first = NULL, *tail = NULL;
    while (ps->p < ps->end && *ps->p != '|' && *ps->p != ')') {
        rx_node *a = parse_atom(ps);
        if (!a) return NULL;
        if (a->type == RX_ACCEPT + 100) continue; /* an inline flag group */
        if (tail) tail->next = a;
        else first = a;
        tail = a;
    }
    *last = tail;
    return first;
}

/* Alternatives become one RX_ALT node; a branch's last node's next is left
 * NULL here and linked later. */
static rx_node *parse_alt(rx_parser *ps) {
    rx_node *alt = rx_new(ps, RX_ALT);
    if (!alt) return NULL;
    for (;;) {
        rx_node *last;
        rx_node *first = parse_seq(ps, &last);
        if (ps->st) return NULL;
        rx_node **na = realloc(alt->alts, (size_t)(alt->n_alts + 1) * sizeof *na);
        if (!na) return rx_err(ps, "out of memory"), NULL;
        alt->alts = na;
        alt->alts[alt->n_alts++] = first; /* NULL: an empty branch */
        if (ps->p < ps->end && *ps->p == '|') {
            ps->p++;
            continue;
        }
        return alt;
    }
}

/* Point the end of every sequence at what follows it. */
static void rx_link(rx_node *nd, rx_node *cont) {
    for (; nd; nd = nd->next) {
        rx_node *after = nd->next ? nd->next : cont;
        if (nd->type == RX_ALT) {
            for (int i = 0; i < nd->n_alts; i++) {
                if (!nd->alts[i]) {
                    nd->alts[i] = after; /* empty branch: straight to what follows */
                    continue;
                }
                rx_link(nd->alts[i], after);
            }
        } else if (nd->type == RX_REPEAT && !nd->simple) {
            rx_node *tail = nd->rep; /* the tail node made by rx_tails */
            rx_link(nd->sub, tail);
        } else if (nd->type == RX_LOOK) {
            rx_link(nd->sub, nd->rep);
        }
        if (!nd->next) {
            nd->next = cont;
            return;
        }
    }
}

/* Repeat bodies end in a tail node; lookaheads in an accept node. */
static int rx_tails(rx_parser *ps) {
    int n = ps->re->n_all;
    for (int i = 0; i < n; i++) {
        rx_node *nd = ps->re->all[i];
        if ((nd->type == RX_REPEAT && !nd->simple) || nd->type == RX_LOOK) {
            rx_node *t = rx_new(ps, nd->type == RX_REPEAT ? RX_TAIL : RX_ACCEPT);
            if (!t) return -1;
            t->rep = nd;
            nd->rep = t;
        }
    }
    return 0;
}

void tk_regex_free(tk_regex *re) {
    if (!re) return;
    for (int i = 0; i < re->n_all; i++) {
        free(re->all[i]->alts);
        free(re->all[i]);
    }
    for (int i = 0; i < re->n_classes; i++) {
        free(re->classes[i]->items);
        free(re->classes[i]);
    }
    free(re->all);
    free(re->classes);
    free(re);
}

qac_status tk_regex_compile(tk_regex **out, const char *pattern, size_t len) {
    *out = NULL;
    tk_regex *re = calloc(1, sizeof *re);
    if (!re) return qac_set_error(QAC_ERR_NOMEM, "regex: out of memory");
    rx_parser ps = {.re = re, .p = pattern, .end = pattern + len};
    /* the pattern must be valid UTF-8 to be walked by code points */
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int k = qac_utf8_decode((const unsigned char *)pattern + i, len - i, &cp);
        if (cp == 0xFFFD && !(k == 3 && (unsigned char)pattern[i] == 0xEF)) {
            tk_regex_free(re);
            return qac_set_error(QAC_ERR_FORMAT, "regex: pattern is not valid UTF-8");
        }
        i += (size_t)k;
    }
    rx_node *top = parse_alt(&ps);
    if (top && ps.p < ps.end) rx_err(&ps, "unbalanced )");
    if (!ps.st && top && rx_tails(&ps)) rx_err(&ps, "out of memory");
    if (ps.st || !top) {
        qac_status st = ps.st ? ps.st : qac_set_error(QAC_ERR_FORMAT, "regex: bad pattern");
        tk_regex_free(re);
        return st;
    }
    rx_link(top, NULL);
    re->first = top;
    *out = re;
    return QAC_OK;
}

/* ---------- matching ---------- */

typedef struct rx_ctx {
    const tk_regex *re;
    const char *s;
    uint32_t n, end;
    long steps;
    int *cnt;
    uint32_t *istart;
} rx_ctx;

static int at_word(const rx_ctx *x, uint32_t pos, int before) {
    if (before) {
        if (pos == 0) return 0;
        uint32_t i = (uint32_t)tk_utf8_prev(x->s, pos);
        uint32_t c = (uint32_t)tk_utf8_next(x->s, x->n, &i);
        return item_match(&(rx_item){.kind = CI_WORD}, c);
    }
    if (pos >= x->n) return 0;
    uint32_t i = pos;
    return item_match(&(rx_item){.kind = CI_WORD}, (uint32_t)tk_utf8_next(x->s, x->n, &i));
}

static int rx_match(rx_ctx *x, const rx_node *nd, uint32_t pos);

static int rx_iter(rx_ctx *x, const rx_node *rep, uint32_t pos, int allow_more) {
    int id = rep->id, c = x->cnt[id];
    if (!allow_more && c < rep->min) c = rep->min; /* an empty iteration satisfies the rest */
    int more = allow_more && c < rep->max;
    if (!rep->greedy && c >= rep->min && rx_match(x, rep->next, pos)) return 1;
    if (more) {
        uint32_t saved = x->istart[id];
        int saved_cnt = x->cnt[id];
        x->cnt[id] = c + 1;
        x->istart[id] = pos;
        int r = rx_match(x, rep->sub, pos);
        x->cnt[id] = saved_cnt;
        x->istart[id] = saved;
        if (r) return 1;
    }
    if (rep->greedy && c >= rep->min) return rx_match(x, rep->next, pos);
    return 0;
}

static int rx_match(rx_ctx *x, const rx_node *nd, uint32_t pos) {
    for (;;) {
        if (++x->steps > RX_STEP_LIMIT) return 0;
        if (!nd) {
            x->end = pos;
            return 1;
        }
        switch (nd->type) {
        case RX_CHAR:
        case RX_CLASS:
        case RX_ANY: {
            if (pos >= x->n) return 0;
            uint32_t i = pos;
            uint32_t c = (uint32_t)tk_utf8_next(x->s, x->n, &i);
            if (!node_char_match(nd, c)) return 0;
            pos = i;
            nd = nd->next;
            continue;
        }
        case RX_ALT:
            for (int i = 0; i < nd->n_alts - 1; i++)
                if (rx_match(x, nd->alts[i], pos)) return 1;
            nd = nd->alts[nd->n_alts - 1];
            continue;
        case RX_REPEAT: {
            if (nd->simple) {
                /* scan the run, then try the rest from the longest (greedy) or shortest */
                uint32_t p = pos;
                int k = 0;
                while (k < nd->max && p < x->n) {
                    uint32_t i = p;
                    if (!node_char_match(nd->sub, (uint32_t)tk_utf8_next(x->s, x->n, &i))) break;
                    p = i;
                    k++;
                }
                if (k < nd->min) return 0;
                if (nd->possessive) {
                    pos = p;
                    nd = nd->next;
                    continue;
                }
                if (nd->greedy) {
                    for (int j = k; j > nd->min; j--) {
                        if (rx_match(x, nd->next, p)) return 1;
                        p = (uint32_t)tk_utf8_prev(x->s, p);
                    }
                    pos = p;
                    nd = nd->next;
                    continue;
                }
                p = pos;
                for (int j = 0; j < nd->min; j++) tk_utf8_next(x->s, x->n, &p);
                for (int j = nd->min; j < k; j++) {
                    if (rx_match(x, nd->next, p)) return 1;
                    tk_utf8_next(x->s, x->n, &p);
                }
                pos = p;
                nd = nd->next;
                continue;
            }
            int id = nd->id, sc = x->cnt[id];
            uint32_t si = x->istart[id];
            x->cnt[id] = 0;
            x->istart[id] = UINT32_MAX;
            int r = rx_iter(x, nd, pos, 1);
            x->cnt[id] = sc;
            x->istart[id] = si;
            return r;
        }
        case RX_TAIL:
            return rx_iter(x, nd->rep, pos, pos != x->istart[nd->rep->id]);
        case RX_LOOK: {
            uint32_t saved_end = x->end;
            int r = rx_match(x, nd->sub, pos);
            x->end = saved_end;
            if (r == nd->neg) return 0;
            nd = nd->next;
            continue;
        }
        case RX_ACCEPT: return 1;
        case RX_BOL:
            if (pos != 0 && x->s[pos - 1] != '\n') return 0;
            nd = nd->next;
            continue;
        case RX_EOL:
            if (pos != x->n && x->s[pos] != '\n') return 0;
            nd = nd->next;
            continue;
        case RX_BOS:
            if (pos != 0) return 0;
            nd = nd->next;
            continue;
        case RX_EOS:
            if (pos != x->n) return 0;
            nd = nd->next;
            continue;
        case RX_EOS_NL:
            if (pos != x->n && !(pos + 1 == x->n && x->s[pos] == '\n')) return 0;
            nd = nd->next;
            continue;
        default: { /* word boundaries */
            int b = at_word(x, pos, 1) != at_word(x, pos, 0);
            if (b != (nd->type == RX_WORDB)) return 0;
            nd = nd->next;
            continue;
        }
        }
    }
}

int tk_regex_find(const tk_regex *re, const char *s, uint32_t n, uint32_t from, uint32_t *a, uint32_t *b) {
    int stack_cnt[32];
    uint32_t stack_start[32];
    int *cnt = re->n_repeats <= 32 ? stack_cnt : malloc((size_t)re->n_repeats * sizeof *cnt);
    uint32_t *istart = re->n_repeats <= 32 ? stack_start : malloc((size_t)re->n_repeats * sizeof *istart);
    if (!cnt || !istart) {
        if (cnt != stack_cnt) free(cnt);
        if (istart != stack_start) free(istart);
        qac_set_error(QAC_ERR_NOMEM, "regex: out of memory");
        return -1;
    }
    rx_ctx x = {.re = re, .s = s, .n = n, .cnt = cnt, .istart = istart};
    memset(cnt, 0, (size_t)re->n_repeats * sizeof *cnt);
    int found = 0;
    for (uint32_t start = from; start <= n;) {
        if (rx_match(&x, re->first, start)) {
            *a = start;
            *b = x.end;
            found = 1;
            break;
        }
        if (x.steps > RX_STEP_LIMIT) {
            found = -1;
            qac_set_error(QAC_ERR_UNSUPPORTED, "regex: the pattern backtracks too much on this text");
            break;
        }
        if (start == n) break;
        tk_utf8_next(s, n, &start);
    }
    if (cnt != stack_cnt) free(cnt);
    if (istart != stack_start) free(istart);
    return found;
}

/* ---------- patterns: a literal or a regex, split into runs ---------- */

int tk_pattern_runs(const tk_pattern *p, const char *s, uint32_t n, tk_runs *out) {
    if (p->str && p->len == 0) { /* HF: an empty literal matches nothing (its range counts characters) */
        uint32_t chars = 0;
        for (uint32_t i = 0; i < n;) {
            tk_utf8_next(s, n, &i);
            chars++;
        }
        return tk_runs_push(out, 0, chars, 0);
    }
    if (n == 0) return tk_runs_push(out, 0, 0, 0);
    uint32_t prev = 0, from = 0;
    while (from <= n) {
        uint32_t a, b;
        if (p->str) {
            const char *hit = NULL;
            for (uint32_t i = from; i + p->len <= n; i++)
                if (s[i] == p->str[0] && !memcmp(s + i, p->str, p->len)) {
                    hit = s + i;
                    break;
                }
            if (!hit) break;
            a = (uint32_t)(hit - s);
            b = a + p->len;
        } else if (!tk_regex_find(p->re, s, n, from, &a, &b)) {
            break;
        }
        if (prev != a && tk_runs_push(out, prev, a, 0)) return -1;
        if (tk_runs_push(out, a, b, 1)) return -1;
        prev = b;
        if (b > a) from = b;
        else if (b < n) { /* an empty match: the search resumes one character on */
            from = b;
            tk_utf8_next(s, n, &from);
        } else {
            break;
        }
    }
    if (prev != n && tk_runs_push(out, prev, n, 0)) return -1;
    return 0;
}
