/* qac search: embed a queries file, search a dense index, a BM25 index or
 * both (reciprocal-rank fusion), write a TREC run (offline), or send the
 * queries to a running server (--server). */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "qac_bm25.h"
#include "qac_cpu.h"
#include "qac_fusion.h"
#include "qac_index.h"
#include "qac_rerank.h"
#include "qac_util.h"

static const qac_opt search_opts[] = {
    {"index", QAC_OPT_STR, NULL, 0, -1, NULL, "QAC_INDEX", "dense index directory from qac index build", 0},
    {"bm25", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "BM25 index directory from qac bm25 build", 0},
    {"mode", QAC_OPT_ENUM, NULL, 0, -1, "dense|bm25|hybrid", NULL,
     "dense (--index), bm25 (--bm25) or hybrid (both, reciprocal-rank fusion as the server's /search); "
     "default: the one the indexes given make (hybrid when both are)",
     0},
    {"queries", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "queries: qid<TAB>text TSV, BEIR queries.jsonl, cran.qry", 1},
    {"format", QAC_OPT_ENUM, "auto", 0, -1, "auto|tsv|beir|tevatron|cranfield", NULL, "queries format", 0},
    {"run", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "output TREC run file ('-' = stdout)", 1},
    {"k", QAC_OPT_INT, "1000", 1, 1000, NULL, NULL, "passages per query", 0},
    {"model", QAC_OPT_STR, NULL, 0, -1, NULL, "QAC_MODEL", "query encoder (must be the index's model)", 0},
    {"batch", QAC_OPT_INT, "128", 1, 4096, NULL, NULL, "queries per encoder call and search call", 0},
    {"max-len", QAC_OPT_INT, "0", 0, 8192, NULL, NULL,
     "query max tokens incl. specials; 0 = the model's limit (its max_seq_length); longer queries are cut and "
     "counted in the summary", 0},
    {"run-id", QAC_OPT_STR, "qac", 0, -1, NULL, NULL, "run name in the last column", 0},
    {"device", QAC_OPT_ENUM, "auto", 0, -1, "auto|cpu|cuda", "QAC_DEVICE", "encoder and search device", 0},
    {"threads", QAC_OPT_INT, "0", 0, 1024, NULL, "QAC_THREADS", "CPU threads for the encoder and the flat scan (0 = all cores)", 0},
    {"dtype", QAC_OPT_ENUM, "fp32", 0, -1, "fp32|bf16|int8", "QAC_DTYPE",
     "CPU query encoder precision: bf16 runs the linear layers in bf16 (fp32 sums), int8 in int8 (int32 sums, "
     "VNNI; fp32 on a CPU without it)", 0},
    {"nprobe", QAC_OPT_INT, NULL, 1, 1 << 20, NULL, NULL, "IVF lists visited per query", 0},
    {"ef-search", QAC_OPT_INT, NULL, 1, 1 << 20, NULL, NULL, "HNSW search breadth", 0},
    QAC_CLI_VERIFY_OPT,
    {"allow-model-mismatch", QAC_OPT_BOOL, "false", 0, -1, NULL, NULL,
     "search even if the model differs from the one the index was built with", 0},
    {"query-prompt", QAC_OPT_STR, NULL, 0, -1, NULL, "QAC_QUERY_PROMPT",
     "text put before every query (default: the model's \"query\" prompt; '' for none); must be the one the "
     "index was built for", 0},
    {"allow-prompt-mismatch", QAC_OPT_BOOL, "false", 0, -1, NULL, NULL,
     "search even if the query prompt differs from the one the index was built for (a warning)", 0},
    {"rerank", QAC_OPT_STR, NULL, 0, -1, NULL, NULL,
     "cross-encoder directory: each query's top --rerank-depth of the first stage scored with it and ordered by "
     "its raw score (qac rerank's order); the run holds the reranked top min(k, rerank-depth). With --server: the "
     "server's --reranker, which must be this model", 0},
    {"rerank-depth", QAC_OPT_INT, "100", 1, 1000, NULL, NULL, "first-stage passages reranked per query", 0},
    {"corpus", QAC_OPT_STR, NULL, 0, -1, NULL, NULL,
     "the passages' texts for --rerank (default: the corpus the dense index was built from; required in bm25 mode)",
     0},
    {"corpus-format", QAC_OPT_ENUM, "auto", 0, -1, "auto|tsv|beir|tevatron|cranfield", NULL, "--corpus format", 0},
    {"server", QAC_OPT_STR, NULL, 0, -1, NULL, "QAC_SERVER",
     "search a running qac server at URL instead (not with --index or --bm25)", 0},
    {"api-key", QAC_OPT_STR, NULL, 0, -1, NULL, "QAC_API_KEY", "API key for --server", 0},
    QAC_CPU_ISA_OPT,
};
#define N_SEARCH_OPTS (int)(sizeof search_opts / sizeof search_opts[0])

enum { MODE_DENSE = QAC_SEARCH_DENSE, MODE_BM25 = QAC_SEARCH_BM25, MODE_HYBRID = QAC_SEARCH_HYBRID };

typedef struct qbatch {
    char **qids, **texts;
    size_t *lens;
    int n;
} qbatch;

static void qbatch_clear(qbatch *b) {
    for (int i = 0; i < b->n; i++) {
        free(b->qids[i]);
        free(b->texts[i]);
    }
    b->n = 0;
}

typedef struct searcher {
    int mode, k, max_len;
    int k_first;            /* hits the first stage collects: k, or the rerank depth */
    const char *run_id;
    qac_reranker *rr;       /* --rerank */
    qac_passage_texts *texts;
    qac_encoder *enc;
    qac_index *ix;
    qac_bm25 *bm25;
    float *qv, *scores;     /* [batch, dim], [batch, depth] */
    int64_t *rows;          /* [batch, depth] */
    float *bscores;         /* [depth] */
    int64_t *brows;         /* [depth] */
    const char **names;     /* [2 depth] */
    qac_hit *hits;          /* [2 depth] */
    uint64_t written;       /* hits written */
} searcher;

/* Appends to the error a directory given under the wrong flag: "(give it as --bm25)". */
static void swap_hint(const char *given, const char *want) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", qac_last_error());
    qac_set_error(QAC_ERR_INVALID, "%s (given as %s: give it as %s)", msg, given, want);
}

static const char *index_docid(void *ix, int64_t row) { return qac_index_docid(ix, row); }
static const char *bm25_docid(void *bm25, int64_t row) { return qac_bm25_docid(bm25, row); }

/* Encode, search and write one batch of queries: the dense list, the BM25
 * list, or their fusion, each query's hits written as the server's are. */
static qac_status run_batch(searcher *S, qbatch *b, FILE *out) {
    int depth = S->mode == MODE_HYBRID ? qac_hybrid_depth(S->k_first) : S->k_first;
    qac_status st = QAC_OK;
    if (S->mode != MODE_BM25) {
        const char *prompt = qac_model_query_prompt(qac_encoder_model(S->enc));
        st = qac_encoder_encode_texts_prompted(S->enc, prompt, (const char *const *)b->texts, b->lens, b->n,
                                               S->max_len, S->qv);
        if (!st) st = qac_index_search(S->ix, S->qv, b->n, depth, S->scores, S->rows);
    }
    for (int q = 0; q < b->n && !st; q++) {
        int nb = 0;
        if (S->mode != MODE_DENSE && (st = qac_bm25_search(S->bm25, b->texts[q], NULL, depth, S->bscores, S->brows, &nb)))
            break;
        qac_hit_lists lists = {.mode = (qac_search_mode)S->mode,
                               .dense_rows = S->rows ? S->rows + (size_t)q * depth : NULL,
                               .dense_scores = S->scores ? S->scores + (size_t)q * depth : NULL,
                               .n_dense = S->mode == MODE_BM25 ? 0 : depth,
                               .bm25_rows = S->brows,
                               .bm25_scores = S->bscores,
                               .n_bm25 = nb,
                               .dense_docid = index_docid,
                               .dense_index = S->ix,
                               .bm25_docid = bm25_docid,
                               .bm25_index = S->bm25,
                               .names = S->names};
        int nh = qac_hits_collect(&lists, S->k_first, S->hits);
        if (S->rr && (st = qac_rerank_hits(S->rr, S->texts, b->texts[q], b->lens[q], S->hits, nh, NULL))) {
            qac_wrap_error(st, "rerank: query '%s'", b->qids[q]);
            break;
        }
        if (nh > S->k) nh = S->k;
        st = qac_cli_write_hits(out, b->qids[q], S->hits, nh, S->run_id);
        S->written += (uint64_t)nh;
    }
    return st;
}

static int search_local(const qac_opts *o, int mode, FILE *out) {
    const char *index_dir = qac_opts_str(o, "index"), *bm25_dir = qac_opts_str(o, "bm25");
    int batch = (int)qac_opts_int(o, "batch");
    searcher S = {.mode = mode, .k = (int)qac_opts_int(o, "k"), .max_len = (int)qac_opts_int(o, "max-len"),
                  .run_id = qac_opts_str(o, "run-id")};
    if (S.max_len == 1) {
        fprintf(stderr, "qac search: --max-len must be 0 or at least 2 ([CLS] and [SEP])\n");
        return 2;
    }
    const char *rerank_dir = qac_opts_str(o, "rerank");
    S.k_first = rerank_dir ? (int)qac_opts_int(o, "rerank-depth") : S.k;
    int depth = mode == MODE_HYBRID ? qac_hybrid_depth(S.k_first) : S.k_first;
    qac_device dev = qac_cli_device(qac_opts_str(o, "device"));
    qac_model *m = NULL;
    qac_xenc *x = NULL;
    qac_reader *r = NULL;
    qbatch b = {0};
    int rc = 1;
    char buf[4096];
    qac_status bst;
    /* the queries first: a mistake there is said before the indexes and model load */
    if (qac_reader_open(&r, qac_opts_str(o, "queries"), QAC_READ_QUERIES, qac_cli_format(qac_opts_str(o, "format"))))
        goto fail;
    if (mode != MODE_DENSE && (bst = qac_bm25_open(&S.bm25, bm25_dir))) {
        if (!strstr(qac_last_error(), bm25_dir)) qac_wrap_error(bst, "bm25 index %s", bm25_dir); /* named once */
        if (strstr(qac_last_error(), "holds a dense index")) swap_hint("--bm25", "--index");
        goto fail;
    }
    if (mode != MODE_BM25) {
        qac_index_verify verify;
        if (qac_index_verify_parse(qac_opts_str(o, "verify"), &verify) ||
            qac_index_open_verified(&S.ix, index_dir, dev, verify) ||
            qac_index_set_threads(S.ix, (int)qac_opts_int(o, "threads"))) {
            if (strstr(qac_last_error(), "holds a BM25 index")) swap_hint("--index", "--bm25");
            goto fail;
        }
        /* the model the index was built with, unless one is named */
        const char *model_dir = qac_cli_model_for_index(o, "search", qac_index_model_dir(S.ix), buf, sizeof buf);
        if (!model_dir) goto fail;
        if (qac_opts_isset(o, "nprobe") && qac_index_set_param(S.ix, "nprobe", (double)qac_opts_int(o, "nprobe")))
            goto fail;
        if (qac_opts_isset(o, "ef-search") &&
            qac_index_set_param(S.ix, "efSearch", (double)qac_opts_int(o, "ef-search")))
            goto fail;
        if (qac_model_load(&m, model_dir) || qac_cli_apply_prompts(o, m)) goto fail;
        if (qac_index_check_prompts(S.ix, qac_model_query_prompt(m))) {
            if (!qac_opts_bool(o, "allow-prompt-mismatch")) goto fail;
            fprintf(stderr, "qac search: warning: %s\n", qac_last_error());
        }
        if (!qac_opts_bool(o, "allow-model-mismatch") && qac_index_check_model(S.ix, m)) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", qac_last_error());
            qac_set_error(QAC_ERR_MISMATCH, "%s (or --allow-model-mismatch to search anyway)", msg);
            goto fail;
        }
        qac_encoder_opts eo = qac_encoder_default_opts();
        eo.device = dev;
        eo.threads = (int)qac_opts_int(o, "threads");
        eo.max_batch = batch;
        eo.cpu_precision = qac_cli_dtype(qac_opts_str(o, "dtype"));
        if (qac_encoder_create(&S.enc, m, &eo)) goto fail;
        qac_cli_encoder_note("search", S.enc);
        if (qac_encoder_dim(S.enc) != qac_index_dim(S.ix)) {
            qac_set_error(QAC_ERR_INVALID, "model dimension %d differs from the index's %d", qac_encoder_dim(S.enc),
                          qac_index_dim(S.ix));
            goto fail;
        }
        S.max_len = qac_encoder_max_len(S.enc, S.max_len);
        S.qv = malloc((size_t)batch * (size_t)qac_index_dim(S.ix) * sizeof(float));
        S.scores = malloc((size_t)batch * (size_t)depth * sizeof(float));
        S.rows = malloc((size_t)batch * (size_t)depth * sizeof(int64_t));
        if (!S.qv || !S.scores || !S.rows) {
            qac_set_error(QAC_ERR_NOMEM, "out of memory");
            goto fail;
        }
    }
    if (rerank_dir) {
        const char *corpus = qac_opts_str(o, "corpus");
        qac_encoder_opts eo = qac_encoder_default_opts();
        eo.device = dev;
        eo.threads = (int)qac_opts_int(o, "threads");
        eo.cpu_precision = strcmp(qac_opts_str(o, "dtype"), "bf16") ? QAC_PREC_FP32 : QAC_PREC_BF16;
        if (!corpus && !S.ix) {
            qac_set_error(QAC_ERR_INVALID, "--rerank in bm25 mode needs the passages' texts: give --corpus");
            goto fail;
        }
        if ((bst = corpus ? qac_passage_texts_corpus(&S.texts, corpus, qac_cli_format(qac_opts_str(o, "corpus-format")))
                          : qac_passage_texts_index(&S.texts, S.ix))) {
            if (corpus) qac_wrap_error(bst, "--corpus %s", corpus);
            goto fail;
        }
        if ((bst = qac_xenc_load(&x, rerank_dir))) {
            if (!strstr(qac_last_error(), rerank_dir)) qac_wrap_error(bst, "--rerank %s", rerank_dir);
            goto fail;
        }
        if (qac_reranker_create(&S.rr, x, &eo)) goto fail;
    }
    b.qids = calloc((size_t)batch, sizeof(char *));
    b.texts = calloc((size_t)batch, sizeof(char *));
    b.lens = calloc((size_t)batch, sizeof(size_t));
    S.bscores = malloc((size_t)depth * sizeof(float));
    S.brows = malloc((size_t)depth * sizeof(int64_t));
    S.names = malloc((size_t)depth * 2 * sizeof(char *));
    S.hits = malloc((size_t)depth * 2 * sizeof(qac_hit));
    if (!b.qids || !b.texts || !b.lens || !S.bscores || !S.brows || !S.names || !S.hits) {
        qac_set_error(QAC_ERR_NOMEM, "out of memory");
        goto fail;
    }
    qac_progress_state ps;
    qac_progress_init(&ps, "queries");
    uint64_t done = 0, file_size = qac_reader_file_size(r), offset = 0;
    double t0 = qac_now();
    qac_progress_stderr(&ps, "search", 0, 0); /* the phase's clock starts here */
    for (int eof = 0; !eof;) {
        qac_record rec;
        int got = 0;
        if (qac_reader_next(r, &rec, &got)) goto fail;
        if (got) {
            b.qids[b.n] = strdup(rec.id);
            b.texts[b.n] = strndup(rec.text, rec.text_len);
            b.lens[b.n] = rec.text_len;
            offset = rec.offset;
            if (!b.qids[b.n] || !b.texts[b.n]) {
                b.n++;
                qac_set_error(QAC_ERR_NOMEM, "out of memory");
                goto fail;
            }
            b.n++;
        } else eof = 1;
        if (b.n == batch || (eof && b.n)) {
            if (run_batch(&S, &b, out)) goto fail;
            done += (uint64_t)b.n;
            /* the total is estimated from the bytes read so far, exact at the end */
            uint64_t est = eof ? done : offset > 0 ? (uint64_t)((double)done * (double)file_size / (double)offset) : 0;
            qac_progress_stderr(&ps, "search", done, est > done || eof ? est : done + 1);
            qbatch_clear(&b);
        }
    }
    double dt = qac_now() - t0;
    char rnote[640] = "";
    if (S.rr)
        snprintf(rnote, sizeof rnote, "; each query's top %d reranked by %s (%lld pairs cut to %d tokens)",
                 S.k_first, rerank_dir, (long long)qac_reranker_truncated(S.rr), x->max_len);
    if (S.enc)
        qac_summary("search", "%llu queries, %llu hits in %.1f s (%.1f queries/s); %lld cut at %d tokens%s -> %s",
                    (unsigned long long)done, (unsigned long long)S.written, dt, dt > 0 ? (double)done / dt : 0.0,
                    (long long)qac_encoder_truncated(S.enc), S.max_len, rnote, qac_opts_str(o, "run"));
    else
        qac_summary("search", "%llu queries, %llu hits in %.1f s (%.1f queries/s)%s -> %s", (unsigned long long)done,
                    (unsigned long long)S.written, dt, dt > 0 ? (double)done / dt : 0.0, rnote,
                    qac_opts_str(o, "run"));
    rc = 0;
fail:
    if (rc) rc = qac_cli_fail("search");
    qbatch_clear(&b);
    free(b.qids);
    free(b.texts);
    free(b.lens);
    free(S.qv);
    free(S.scores);
    free(S.rows);
    free(S.bscores);
    free(S.brows);
    free(S.names);
    free(S.hits);
    qac_reader_free(r);
    qac_passage_texts_free(S.texts);
    qac_reranker_free(S.rr);
    qac_xenc_free(x);
    qac_encoder_free(S.enc);
    qac_model_free(m);
    qac_index_free(S.ix);
    qac_bm25_free(S.bm25);
    return rc;
}

/* "--index" or "--index (QAC_INDEX)": where a value came from, for messages. */
static const char *named(const qac_opts *o, const char *name, char *buf, size_t cap) {
    for (int i = 0; i < o->n; i++)
        if (!strcmp(o->table[i].name, name)) {
            if (o->source[i] == QAC_SRC_ENV && o->table[i].env)
                snprintf(buf, cap, "--%s (from %s)", name, o->table[i].env);
            else if (o->source[i] == QAC_SRC_FILE) snprintf(buf, cap, "--%s (from --config)", name);
            else snprintf(buf, cap, "--%s", name);
            return buf;
        }
    return name;
}

/* Whether the user gave the option (a flag, the environment or --config),
 * not only its default. */
static int given(const qac_opts *o, const char *name) {
    for (int i = 0; i < o->n; i++)
        if (!strcmp(o->table[i].name, name)) return o->source[i] > QAC_SRC_DEFAULT;
    return 0;
}

/* The mode, from --mode and which of --index/--bm25/--server are set; -1
 * after printing why the combination is refused. */
static int pick_mode(const qac_opts *o) {
    static const char *const modes[] = {"dense", "bm25", "hybrid"};
    const char *ms = qac_opts_str(o, "mode");
    int has_ix = qac_opts_isset(o, "index"), has_bm = qac_opts_isset(o, "bm25"), mode = -1;
    for (int i = 0; ms && i < 3; i++)
        if (!strcmp(ms, modes[i])) mode = i;
    char a[96], b2[96];
    if (qac_opts_isset(o, "server")) {
        if (has_ix || has_bm) {
            fprintf(stderr,
                    "qac search: %s and %s are both set: search either the server or a local index, not both "
                    "(the server's own --index and --bm25 decide what it searches)\n",
                    named(o, "server", a, sizeof a), named(o, has_ix ? "index" : "bm25", b2, sizeof b2));
            return -1;
        }
        return mode < 0 ? MODE_DENSE : mode;
    }
    if (mode < 0) mode = has_ix && has_bm ? MODE_HYBRID : has_ix || !has_bm ? MODE_DENSE : MODE_BM25;
    if (mode != MODE_BM25 && !has_ix) {
        fprintf(stderr, "qac search: mode %s needs --index DIR%s (or --server URL)\n", modes[mode],
                mode == MODE_HYBRID ? " and --bm25 DIR" : "");
        return -1;
    }
    if (mode != MODE_DENSE && !has_bm) {
        fprintf(stderr, "qac search: mode %s needs --bm25 DIR%s (or --server URL)\n", modes[mode],
                mode == MODE_HYBRID ? " and --index DIR" : "");
        return -1;
    }
    if (mode == MODE_DENSE && has_bm) {
        fprintf(stderr, "qac search: --bm25 is set but mode is dense: give --mode bm25 or --mode hybrid\n");
        return -1;
    }
    if (mode == MODE_BM25 && has_ix) {
        fprintf(stderr, "qac search: %s is set but mode is bm25: drop it or give --mode hybrid\n",
                named(o, "index", a, sizeof a));
        return -1;
    }
    return mode;
}

int qac_cmd_search(int argc, char **argv) {
    qac_opts o;
    int rc = qac_cli_parse(&o, "search",
                           "--queries FILE --run OUT (--index DIR | --bm25 DIR | both) [--mode dense|bm25|hybrid] "
                           "[options]\n       qac search --server URL --queries FILE --run OUT [--mode ...]",
                           search_opts, N_SEARCH_OPTS, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    int mode = pick_mode(&o);
    if (mode < 0) {
        fprintf(stderr, "(see 'qac search --help')\n");
        qac_opts_free(&o);
        return 2;
    }
    const char *run_path = qac_opts_str(&o, "run");
    int to_stdout = !strcmp(run_path, "-");
    qac_atomic_file af = {0};
    FILE *out = stdout;
    if (!to_stdout) {
        if (qac_check_output_file(run_path) || qac_atomic_open(&af, run_path)) {
            qac_opts_free(&o);
            return qac_cli_fail("search");
        }
        out = af.f;
    }
    const char *server = qac_opts_str(&o, "server");
    if (!qac_opts_str(&o, "rerank") && (given(&o, "rerank-depth") || given(&o, "corpus"))) {
        fprintf(stderr, "qac search: --%s applies only with --rerank MODEL\n",
                given(&o, "corpus") ? "corpus" : "rerank-depth");
        rc = 2;
    } else if (server && qac_opts_isset(&o, "query-prompt")) {
        /* the text goes as typed; a prompt added here would be applied twice */
        fprintf(stderr, "qac search: --query-prompt does not apply to --server: the server puts its own query "
                        "prompt before the queries (see its /info)\n");
        rc = 2;
    } else if (server && given(&o, "corpus")) {
        fprintf(stderr, "qac search: --corpus does not apply to --server: the server reranks with the texts of its "
                        "own dense index\n");
        rc = 2;
    } else if (server)
        rc = qac_cli_search_remote(server, qac_opts_str(&o, "api-key"), qac_opts_str(&o, "queries"),
                                   qac_cli_format(qac_opts_str(&o, "format")), qac_opts_str(&o, "mode"),
                                   (int)qac_opts_int(&o, "k"), qac_opts_str(&o, "run-id"),
                                   (int)qac_opts_int(&o, "max-len"), qac_opts_str(&o, "rerank"),
                                   (int)qac_opts_int(&o, "rerank-depth"), out);
    else
        rc = search_local(&o, mode, out);
    if (!to_stdout) {
        if (rc) qac_atomic_abort(&af); /* a failed search leaves no partial run behind */
        else if (qac_atomic_commit(&af)) rc = qac_cli_fail("search");
    } else if (fflush(stdout) != 0) rc = 1;
    qac_opts_free(&o);
    return rc;
}
