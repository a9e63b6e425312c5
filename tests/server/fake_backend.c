#include "fake_backend.h"

#include <math.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *const fake_docs[FAKE_DOCS] = {
    "the wing flutter of supersonic aircraft", "boundary layer transition on a flat plate",
    "heat transfer in hypersonic flow", "buckling of thin cylindrical shells",
    "shock waves around blunt bodies", "laminar flow control with suction",
    "the wing flutter of supersonic aircraft", /* same text: a tie with doc 0 */
    "pressure distribution on swept wings", "viscous flow in a channel", "turbulent boundary layer separation",
    "vibration of rectangular plates", "slender body theory at transonic speeds", "jet noise and its reduction",
    "stagnation point heat transfer", "panel flutter at high mach numbers", "stability of compressible boundary layers",
    "creep of metals at high temperature", "aerodynamic heating of missiles", "unsteady lift on an oscillating airfoil",
    "wind tunnel wall interference",
};

static pthread_mutex_t stats_mu = PTHREAD_MUTEX_INITIALIZER;
static float doc_vecs[FAKE_DOCS][FAKE_DIM];
static char doc_ids[FAKE_DOCS][16];

void fake_embed(const int32_t *ids, int len, float *out) {
    double acc[FAKE_DIM] = {0};
    for (int t = 0; t < len; t++)
        for (int d = 0; d < FAKE_DIM; d++) acc[d] += sin(0.37 * ids[t] * (d + 1) + 0.11 * d);
    double ss = 0;
    for (int d = 0; d < FAKE_DIM; d++) ss += acc[d] * acc[d];
    double inv = ss > 0 ? 1.0 / sqrt(ss) : 0;
    for (int d = 0; d < FAKE_DIM; d++) out[d] = (float)(acc[d] * inv);
}

int fake_encode_text(const char *text, size_t len, int max_len, int32_t *ids) {
    int n = 0;
    ids[n++] = 1;
    for (size_t i = 0; i < len && n < max_len - 1; i++) ids[n++] = 100 + (unsigned char)text[i];
    ids[n++] = 2;
    return n;
}

static qac_status f_encode_text(void *u, const char *text, size_t len, int max_len, int32_t *ids, int *n) {
    if (max_len < 2) return qac_set_error(QAC_ERR_INVALID, "max_len < 2");
    *n = fake_encode_text(text, len, max_len, ids);
    return QAC_OK;
}

/* prompt bytes then text bytes; a prompt "skip:..." is left out of the pooling */
static qac_status f_encode_prompted(void *u, const char *prompt, const char *text, size_t len, int max_len,
                                    int32_t *ids, int *n, int *pool_from) {
    size_t pl = prompt ? strlen(prompt) : 0;
    char buf[4096];
    if (max_len < 2 || pl + len > sizeof buf) return qac_set_error(QAC_ERR_INVALID, "fake: too long");
    memcpy(buf, prompt, pl);
    memcpy(buf + pl, text, len);
    *n = fake_encode_text(buf, pl + len, max_len, ids);
    *pool_from = pl && !strncmp(prompt, "skip:", 5) ? 1 + (int)pl : 0;
    return QAC_OK;
}

static qac_status f_tokenize(void *u, const char *text, size_t len, int32_t *ids, int cap, int *n) {
    for (size_t i = 0; i < len && (int)i < cap; i++) ids[i] = 100 + (unsigned char)text[i];
    *n = (int)len;
    return QAC_OK;
}

static char token_names[256][4]; /* "bXX" per byte, filled at init */

static const char *f_id_to_token(void *u, int32_t id) {
    if (id == 1) return "[CLS]";
    if (id == 2) return "[SEP]";
    if (id < 100 || id >= 356) return NULL;
    return token_names[id - 100];
}

static qac_status f_encode(void *u, const int32_t *const *ids, const int *lens, const int *pool_from, int n,
                           float *out) {
    fake_stats *s = u;
    int tokens = 0;
    for (int i = 0; i < n; i++) tokens += lens[i];
    pthread_mutex_lock(&stats_mu);
    s->calls++;
    s->texts += n;
    if (tokens > s->max_call_tokens) s->max_call_tokens = tokens;
    if (++s->concurrent > s->max_concurrent) s->max_concurrent = s->concurrent;
    int sleep_ms = s->sleep_ms;
    pthread_mutex_unlock(&stats_mu);
    if (sleep_ms) {
        struct timespec ts = {sleep_ms / 1000, (long)(sleep_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < n; i++) {
        int f = pool_from && pool_from[i] < lens[i] ? pool_from[i] : 0; /* the fake pools what is left */
        fake_embed(ids[i] + f, lens[i] - f, out + (size_t)i * FAKE_DIM);
        for (int t = f; t < lens[i]; t++) /* FAKE_ZERO_ID: the zero vector (a dead or all-padding pooling) */
            if (ids[i][t] == FAKE_ZERO_ID) memset(out + (size_t)i * FAKE_DIM, 0, FAKE_DIM * sizeof *out);
    }
    pthread_mutex_lock(&stats_mu);
    s->concurrent--;
    pthread_mutex_unlock(&stats_mu);
    return QAC_OK;
}

/* The fake vectors times (1 + the first id / 100): "raw" vectors whose
 * normalisation is fake_embed's. */
static qac_status f_encode_raw(void *u, const int32_t *const *ids, const int *lens, const int *pool_from, int n,
                               float *out) {
    qac_status st = f_encode(u, ids, lens, pool_from, n, out);
    for (int i = 0; !st && i < n; i++)
        for (int d = 0; d < FAKE_DIM; d++) out[(size_t)i * FAKE_DIM + d] *= 1.0f + (float)ids[i][0] / 100.0f;
    return st;
}

/* bytes back from ids 100..355; specials as their names unless skipped */
static qac_status f_decode(void *u, const int32_t *ids, int n, int skip_special, char **text) {
    char *out = malloc((size_t)n * 6 + 1);
    if (!out) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        if (ids[i] >= 100 && ids[i] < 356) out[o++] = (char)(ids[i] - 100);
        else if (!skip_special && (ids[i] == 1 || ids[i] == 2)) o += (size_t)sprintf(out + o, "%s", ids[i] == 1 ? "[CLS]" : "[SEP]");
    }
    out[o] = '\0';
    *text = out;
    return QAC_OK;
}

static qac_status f_tokenize_offsets(void *u, const char *text, size_t len, int32_t *ids, int32_t *offs, int cap,
                                     int *n) {
    for (size_t i = 0; i < len && (int)i < cap; i++) {
        ids[i] = 100 + (unsigned char)text[i];
        offs[2 * i] = (int32_t)i, offs[2 * i + 1] = (int32_t)i + 1;
    }
    *n = (int)len;
    return QAC_OK;
}

static const char *f_docid(void *u, int64_t row) { return row >= 0 && row < FAKE_DOCS ? doc_ids[row] : NULL; }

static qac_status f_search(void *u, const float *q, int nq, int k, float *scores, int64_t *rows) {
    for (int qi = 0; qi < nq; qi++) {
        float sc[FAKE_DOCS];
        int order[FAKE_DOCS];
        for (int d = 0; d < FAKE_DOCS; d++) {
            float s = 0;
            for (int c = 0; c < FAKE_DIM; c++) s += q[(size_t)qi * FAKE_DIM + c] * doc_vecs[d][c];
            sc[d] = s;
            order[d] = d;
        }
        for (int i = 1; i < FAKE_DOCS; i++) /* insertion sort: score desc, docid desc */
            for (int j = i; j > 0; j--) {
                int a = order[j - 1], b = order[j];
                int swap = sc[b] > sc[a] || (sc[b] == sc[a] && strcmp(doc_ids[b], doc_ids[a]) > 0);
                if (!swap) break;
                order[j - 1] = b;
                order[j] = a;
            }
        for (int i = 0; i < k; i++) {
            scores[(size_t)qi * k + i] = i < FAKE_DOCS ? sc[order[i]] : 0;
            rows[(size_t)qi * k + i] = i < FAKE_DOCS ? order[i] : -1;
        }
    }
    return QAC_OK;
}

static qac_status f_text(void *u, int64_t row, char **text) {
    if (row < 0 || row >= FAKE_DOCS) return qac_set_error(QAC_ERR_NOT_FOUND, "row %lld", (long long)row);
    *text = strdup(fake_docs[row]);
    return *text ? QAC_OK : qac_set_error(QAC_ERR_NOMEM, "out of memory");
}

/* score = number of query words found in the passage */
static qac_status f_bm25_search(void *u, const char *q, int k, float *scores, int64_t *rows, int *n) {
    float sc[FAKE_DOCS] = {0};
    char word[64];
    for (const char *p = q; *p;) {
        while (*p == ' ') p++;
        size_t l = strcspn(p, " ");
        if (l && l < sizeof word) {
            memcpy(word, p, l);
            word[l] = '\0';
            for (int d = 0; d < FAKE_DOCS; d++)
                if (strstr(fake_docs[d], word)) sc[d] += 1;
        }
        p += l;
    }
    int got = 0;
    while (got < k) {
        int best = -1;
        for (int d = 0; d < FAKE_DOCS; d++) {
            int taken = 0;
            for (int i = 0; i < got; i++) taken |= rows[i] == d;
            if (taken || sc[d] <= 0) continue;
            if (best < 0 || sc[d] > sc[best] || (sc[d] == sc[best] && strcmp(doc_ids[d], doc_ids[best]) > 0)) best = d;
        }
        if (best < 0) break;
        rows[got] = best;
        scores[got++] = sc[best];
    }
    *n = got;
    return QAC_OK;
}

void fake_backend_init(qac_server_backend *be, fake_stats *stats, int with_index, int with_bm25) {
    memset(be, 0, sizeof *be);
    for (int b = 0; b < 256; b++) snprintf(token_names[b], sizeof token_names[b], "b%02x", b);
    for (int d = 0; d < FAKE_DOCS; d++) {
        int32_t ids[FAKE_MAX_LEN];
        int n = fake_encode_text(fake_docs[d], strlen(fake_docs[d]), FAKE_MAX_LEN, ids);
        fake_embed(ids, n, doc_vecs[d]);
        snprintf(doc_ids[d], sizeof doc_ids[d], "D%02d", d);
    }
    be->enc = stats;
    be->model_id = "fake-model";
    be->fingerprint = "0123456789abcdef";
    be->pooling = "mean";
    be->dim = FAKE_DIM;
    be->normalize = 1;
    be->model_max_len = FAKE_MAX_LEN;
    be->encode_text = f_encode_text;
    be->tokenize = f_tokenize;
    be->id_to_token = f_id_to_token;
    be->encode = f_encode;
    be->encode_raw = f_encode_raw;
    be->decode = f_decode;
    be->tokenize_offsets = f_tokenize_offsets;
    be->vocab_size = 356;
    be->cls_id = 1;
    be->sep_id = 2;
    for (int i = 0; i < 8; i++) be->special_ids[i] = i < 2 ? i + 1 : -1;
    be->encode_prompted = f_encode_prompted;
    be->include_prompt = 1;
    if (with_index) {
        be->index_count = FAKE_DOCS;
        be->index_type = "Flat";
        be->search = f_search;
        be->docid = f_docid;
        be->text = f_text;
    }
    if (with_bm25) {
        be->bm25_count = FAKE_DOCS;
        be->bm25_search = f_bm25_search;
        be->bm25_docid = f_docid;
    }
}
