/* The Porter stemmer as Lucene's PorterStemFilter runs it (Anserini's
 * default): Martin Porter's reference implementation, which departs from the
 * 1980 paper (and from Snowball's "porter") in three places: words of one or
 * two letters are left alone, step 2 maps "bli" to "ble" (the paper: "abli"
 * to "able"), and step 2 adds "logi" to "log". Works on code points so that
 * a non-ASCII letter counts as one consonant, as a Java char does. */
#include <stddef.h>
#include <stdint.h>

#include "qac_analyzer.h"

typedef struct stemmer {
    int32_t *b;
    int k, j; /* k: last index of the word; j: end of the stem before a matched suffix */
} stemmer;

static int cons(const stemmer *z, int i) {
    switch (z->b[i]) {
    case 'a': case 'e': case 'i': case 'o': case 'u': return 0;
    case 'y': return i == 0 ? 1 : !cons(z, i - 1);
    default: return 1;
    }
}

/* Number of VC sequences in b[0..j]. */
static int measure(const stemmer *z) {
    int n = 0, i = 0;
    for (;;) {
        if (i > z->j) return n;
        if (!cons(z, i)) break;
        i++;
    }
    i++;
    for (;;) {
        for (;;) {
            if (i > z->j) return n;
            if (cons(z, i)) break;
            i++;
        }
        i++;
        n++;
        for (;;) {
            if (i > z->j) return n;
            if (!cons(z, i)) break;
            i++;
        }
        i++;
    }
}

static int vowel_in_stem(const stemmer *z) {
    for (int i = 0; i <= z->j; i++)
        if (!cons(z, i)) return 1;
    return 0;
}

static int double_cons(const stemmer *z, int j) {
    return j >= 1 && z->b[j] == z->b[j - 1] && cons(z, j);
}

/* consonant-vowel-consonant ending at i, the last not w, x or y */
static int cvc(const stemmer *z, int i) {
    if (i < 2 || !cons(z, i) || cons(z, i - 1) || !cons(z, i - 2)) return 0;
    int32_t c = z->b[i];
    return c != 'w' && c != 'x' && c != 'y';
}

static int ends(stemmer *z, const char *s) {
    int l = 0;
    while (s[l]) l++;
    int o = z->k - l + 1;
    if (o < 0) return 0;
    for (int i = 0; i < l; i++)
        if (z->b[o + i] != (unsigned char)s[i]) return 0;
    z->j = z->k - l;
    return 1;
}

static void setto(stemmer *z, const char *s) {
    int l = 0;
    for (; s[l]; l++) z->b[z->j + 1 + l] = (unsigned char)s[l];
    z->k = z->j + l;
}

static void r(stemmer *z, const char *s) {
    if (measure(z) > 0) setto(z, s);
}

/* plurals and -ed, -ing */
static void step1(stemmer *z) {
    if (z->b[z->k] == 's') {
        if (ends(z, "sses")) z->k -= 2;
        else if (ends(z, "ies")) setto(z, "i");
        else if (z->b[z->k - 1] != 's') z->k--;
    }
    if (ends(z, "eed")) {
        if (measure(z) > 0) z->k--;
    } else if ((ends(z, "ed") || ends(z, "ing")) && vowel_in_stem(z)) {
        z->k = z->j;
        if (ends(z, "at")) setto(z, "ate");
        else if (ends(z, "bl")) setto(z, "ble");
        else if (ends(z, "iz")) setto(z, "ize");
        else if (double_cons(z, z->k)) {
            int32_t c = z->b[z->k--];
            if (c == 'l' || c == 's' || c == 'z') z->k++;
        } else if (measure(z) == 1 && cvc(z, z->k)) { /* j == k here */
            setto(z, "e");
        }
    }
}

/* terminal y to i when there is another vowel in the stem */
static void step2(stemmer *z) {
    if (ends(z, "y") && vowel_in_stem(z)) z->b[z->k] = 'i';
}

/* double suffixes to single ones */
static void step3(stemmer *z) {
    if (z->k == 0) return;
    switch (z->b[z->k - 1]) {
    case 'a':
        if (ends(z, "ational")) { r(z, "ate"); break; }
        if (ends(z, "tional")) { r(z, "tion"); break; }
        break;
    case 'c':
        if (ends(z, "enci")) { r(z, "ence"); break; }
        if (ends(z, "anci")) { r(z, "ance"); break; }
        break;
    case 'e':
        if (ends(z, "izer")) { r(z, "ize"); break; }
        break;
    case 'l':
        if (ends(z, "bli")) { r(z, "ble"); break; }
        if (ends(z, "alli")) { r(z, "al"); break; }
        if (ends(z, "entli")) { r(z, "ent"); break; }
        if (ends(z, "eli")) { r(z, "e"); break; }
        if (ends(z, "ousli")) { r(z, "ous"); break; }
        break;
    case 'o':
        if (ends(z, "ization")) { r(z, "ize"); break; }
        if (ends(z, "ation")) { r(z, "ate"); break; }
        if (ends(z, "ator")) { r(z, "ate"); break; }
        break;
    case 's':
        if (ends(z, "alism")) { r(z, "al"); break; }
        if (ends(z, "iveness")) { r(z, "ive"); break; }
        if (ends(z, "fulness")) { r(z, "ful"); break; }
        if (ends(z, "ousness")) { r(z, "ous"); break; }
        break;
    case 't':
        if (ends(z, "aliti")) { r(z, "al"); break; }
        if (ends(z, "iviti")) { r(z, "ive"); break; }
        if (ends(z, "biliti")) { r(z, "ble"); break; }
        break;
    case 'g':
        if (ends(z, "logi")) { r(z, "log"); break; }
        break;
    default: break;
    }
}

/* -ic-, -full, -ness etc. */
static void step4(stemmer *z) {
    switch (z->b[z->k]) {
    case 'e':
        if (ends(z, "icate")) { r(z, "ic"); break; }
        if (ends(z, "ative")) { r(z, ""); break; }
        if (ends(z, "alize")) { r(z, "al"); break; }
        break;
    case 'i':
        if (ends(z, "iciti")) { r(z, "ic"); break; }
        break;
    case 'l':
        if (ends(z, "ical")) { r(z, "ic"); break; }
        if (ends(z, "ful")) { r(z, ""); break; }
        break;
    case 's':
        if (ends(z, "ness")) { r(z, ""); break; }
        break;
    default: break;
    }
}

/* -ant, -ence etc. in context <c>vcvc<v> */
static void step5(stemmer *z) {
    if (z->k == 0) return;
    switch (z->b[z->k - 1]) {
    case 'a': if (ends(z, "al")) break; return;
    case 'c': if (ends(z, "ance") || ends(z, "ence")) break; return;
    case 'e': if (ends(z, "er")) break; return;
    case 'i': if (ends(z, "ic")) break; return;
    case 'l': if (ends(z, "able") || ends(z, "ible")) break; return;
    case 'n': if (ends(z, "ant") || ends(z, "ement") || ends(z, "ment") || ends(z, "ent")) break; return;
    case 'o':
        if (ends(z, "ion") && z->j >= 0 && (z->b[z->j] == 's' || z->b[z->j] == 't')) break;
        if (ends(z, "ou")) break;
        return;
    case 's': if (ends(z, "ism")) break; return;
    case 't': if (ends(z, "ate") || ends(z, "iti")) break; return;
    case 'u': if (ends(z, "ous")) break; return;
    case 'v': if (ends(z, "ive")) break; return;
    case 'z': if (ends(z, "ize")) break; return;
    default: return;
    }
    if (measure(z) > 1) z->k = z->j;
}

/* final -e, and -ll to -l */
static void step6(stemmer *z) {
    z->j = z->k;
    if (z->b[z->k] == 'e') {
        int a = measure(z);
        if (a > 1 || (a == 1 && !cvc(z, z->k - 1))) z->k--;
    }
    if (z->b[z->k] == 'l' && double_cons(z, z->k) && measure(z) > 1) z->k--;
}

int qac_porter_stem(int32_t *w, int len) {
    if (len <= 2) return len;
    stemmer z = {w, len - 1, 0};
    step1(&z);
    step2(&z);
    step3(&z);
    step4(&z);
    step5(&z);
    step6(&z);
    return z.k + 1;
}
