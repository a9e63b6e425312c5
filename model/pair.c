/* Pair assembly for cross-encoders (api/qac_pair.h): Hugging Face's
 * truncation strategies over two token runs, then the tokenizer's pair
 * template (its specials and token types) around them. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "qac_pair.h"

static const char *const strategy_names[] = {"longest_first", "only_second", "only_first", "none"};

qac_status qac_truncation_parse(const char *name, qac_truncation *out) {
    for (int i = 0; i < 4; i++)
        if (name && !strcmp(name, strategy_names[i])) {
            *out = (qac_truncation)i;
            return QAC_OK;
        }
    if (name && !strcmp(name, "do_not_truncate")) {
        *out = QAC_TRUNC_NONE;
        return QAC_OK;
    }
    return qac_set_error(QAC_ERR_INVALID,
                         "truncation \"%s\": use longest_first, only_second, only_first or none", name ? name : "");
}

const char *qac_truncation_name(qac_truncation t) {
    return (unsigned)t < 4 ? strategy_names[t] : "?";
}

qac_status qac_trunc_side_parse(const char *name, qac_trunc_side *out) {
    if (name && !strcasecmp(name, "right")) *out = QAC_TRUNC_RIGHT;
    else if (name && !strcasecmp(name, "left")) *out = QAC_TRUNC_LEFT;
    else return qac_set_error(QAC_ERR_INVALID, "truncation direction \"%s\": use right or left", name ? name : "");
    return QAC_OK;
}

int qac_pair_specials(const qac_special_ids *sp) { return (sp->cls >= 0) + 2 * (sp->sep >= 0); }

/* qac_pair_fit for a template of `specials` special tokens */
static qac_status fit(int specials, int na, int nb, const qac_pair_opts *o, int *ka, int *kb) {
    int budget = o->max_len - specials;
    if (budget < 0 || na < 0 || nb < 0)
        return qac_set_error(QAC_ERR_INVALID, "pair: max_len %d leaves no room for the %d special tokens", o->max_len,
                             specials);
    *ka = na, *kb = nb;
    if ((long)na + nb <= budget) return QAC_OK;
    int over = na + nb - budget;
    switch (o->strategy) {
    case QAC_TRUNC_LONGEST_FIRST: {
        /* tokenizers' LongestFirst: not one token at a time */
        int n1 = na, n2 = nb, swap = n1 > n2;
        if (swap) n1 = nb, n2 = na;
        n2 = n1 > budget ? n1 : (n1 > budget - n1 ? n1 : budget - n1);
        if (n1 + n2 > budget) {
            n1 = budget / 2;
            n2 = n1 + budget % 2;
        }
        if (swap) {
            int t = n1;
            n1 = n2, n2 = t;
        }
        *ka = na < n1 ? na : n1;
        *kb = nb < n2 ? nb : n2;
        return QAC_OK;
    }
    case QAC_TRUNC_ONLY_SECOND:
    case QAC_TRUNC_ONLY_FIRST: {
        int second = o->strategy == QAC_TRUNC_ONLY_SECOND, have = second ? nb : na;
        if (have <= over)
            return qac_set_error(QAC_ERR_INVALID,
                                 "pair: the %s text has %d tokens, the other %d; %s truncation cannot fit %d tokens "
                                 "(%d of them specials): use longest_first",
                                 second ? "second" : "first", have, second ? na : nb, strategy_names[o->strategy],
                                 o->max_len, specials);
        if (second) *kb = nb - over;
        else *ka = na - over;
        return QAC_OK;
    }
    case QAC_TRUNC_NONE:
        return qac_set_error(QAC_ERR_INVALID, "pair: %d tokens with the specials, over the limit of %d (truncation none)",
                             na + nb + specials, o->max_len);
    }
    return qac_set_error(QAC_ERR_INVALID, "pair: unknown truncation %d", (int)o->strategy);
}

qac_status qac_pair_fit(const qac_special_ids *sp, int na, int nb, const qac_pair_opts *o, int *ka, int *kb) {
    return fit(qac_pair_specials(sp), na, nb, o, ka, kb);
}

int qac_pair_specials_of(const qac_tokenizer *t) { return qac_tokenizer_num_special(t, 1); }

qac_status qac_pair_assemble_with(const qac_tokenizer *t, const int32_t *a, int na, const int32_t *b, int nb,
                                  const qac_pair_opts *o, int32_t *ids, int32_t *types, int *n, int *cut) {
    if (!t || !ids || !n || !o || (na > 0 && !a) || (nb > 0 && !b))
        return qac_set_error(QAC_ERR_INVALID, "pair: NULL argument");
    int ka, kb;
    qac_status st = fit(qac_tokenizer_num_special(t, 1), na, nb, o, &ka, &kb);
    if (st) return st;
    /* left truncation keeps each run's last tokens; the runs fit, so the
     * template adds its specials and cuts nothing */
    const int32_t *as = o->side == QAC_TRUNC_LEFT ? a + (na - ka) : a;
    const int32_t *bs = o->side == QAC_TRUNC_LEFT ? b + (nb - kb) : b;
    static const int32_t none[1] = {0};
    st = qac_tokenizer_assemble(t, as, ka, kb ? bs : none, kb, o->max_len, ids, types, n);
    if (!st && cut) *cut = ka < na || kb < nb;
    return st;
}

qac_status qac_pair_assemble(const qac_special_ids *sp, const int32_t *a, int na, const int32_t *b, int nb,
                             const qac_pair_opts *o, int32_t *ids, int32_t *types, int *n, int *cut) {
    int ka, kb;
    qac_status st = qac_pair_fit(sp, na, nb, o, &ka, &kb);
    if (st) return st;
    /* left truncation keeps each run's last tokens */
    const int32_t *as = o->side == QAC_TRUNC_LEFT ? a + (na - ka) : a;
    const int32_t *bs = o->side == QAC_TRUNC_LEFT ? b + (nb - kb) : b;
    int k = 0;
    if (sp->cls >= 0) ids[k++] = sp->cls;
    if (ka) memcpy(ids + k, as, (size_t)ka * sizeof *ids);
    k += ka;
    if (sp->sep >= 0) ids[k++] = sp->sep;
    int first = k;
    if (kb) memcpy(ids + k, bs, (size_t)kb * sizeof *ids);
    k += kb;
    if (sp->sep >= 0) ids[k++] = sp->sep;
    if (types)
        for (int i = 0; i < k; i++) types[i] = i >= first;
    *n = k;
    if (cut) *cut = ka < na || kb < nb;
    return QAC_OK;
}

/* text's tokens into *buf (stack, cap entries) or, when more, a malloc'd
 * buffer that replaces it (the caller frees *buf when it is not stack) */
static qac_status tokens_of(const qac_tokenizer *t, const char *text, size_t len, int32_t **buf, int cap, int *n) {
    qac_status st = qac_tokenizer_tokenize(t, text, len, *buf, cap, n);
    if (st || *n <= cap) return st;
    int32_t *big = malloc((size_t)*n * sizeof *big);
    if (!big) return qac_set_error(QAC_ERR_NOMEM, "pair: out of memory for %d tokens", *n);
    *buf = big;
    return qac_tokenizer_tokenize(t, text, len, big, *n, n);
}

qac_status qac_pair_encode(const qac_tokenizer *t, const char *a, size_t alen, const char *b, size_t blen,
                           const qac_pair_opts *o, int32_t *ids, int32_t *types, int *n, int *cut) {
    if (!t || !ids || !n || !o) return qac_set_error(QAC_ERR_INVALID, "pair: NULL argument");
    int32_t sa[512], sb[1024], *ta = sa, *tb = sb;
    int na = 0, nb = 0;
    qac_status st = tokens_of(t, a, alen, &ta, 512, &na);
    if (!st) st = tokens_of(t, b, blen, &tb, 1024, &nb);
    if (!st) st = qac_pair_assemble_with(t, ta, na, tb, nb, o, ids, types, n, cut);
    if (ta != sa) free(ta);
    if (tb != sb) free(tb);
    return st;
}
