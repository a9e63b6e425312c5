/* qac bm25 build | search | analyze */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "qac_analyzer.h"
#include "qac_bm25.h"
#include "qac_data.h"
#include "qac_util.h"

static const qac_opt build_opts[] = {
    {"corpus", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "corpus file (MS MARCO TSV, BEIR/Tevatron jsonl, Cranfield SMART)", 1},
    {"out", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "index directory to write", 1},
};

static const qac_opt search_opts[] = {
    {"index", QAC_OPT_STR, NULL, 0, -1, NULL, "QAC_BM25_INDEX", "index directory", 1},
    {"queries", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "queries file (TSV, BEIR jsonl, Cranfield SMART)", 1},
    {"run", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "TREC run to write ('-' for stdout)", 1},
    {"k", QAC_OPT_INT, "1000", 1, 100000, NULL, NULL, "hits per query", 0},
    {"k1", QAC_OPT_FLOAT, "0.9", 0, 1000, NULL, "QAC_BM25_K1", "BM25 k1 (term frequency saturation)", 0},
    {"b", QAC_OPT_FLOAT, "0.4", 0, 1, NULL, "QAC_BM25_B", "BM25 b (length normalisation)", 0},
    {"exact-lengths", QAC_OPT_BOOL, "false", 0, -1, NULL, NULL,
     "use exact document lengths instead of Lucene's one-byte norms", 0},
    {"run-id", QAC_OPT_STR, "qac-bm25", 0, -1, NULL, NULL, "run name in the last column", 0},
    {"threads", QAC_OPT_INT, "1", 1, 256, NULL, "QAC_THREADS", "search threads", 0},
};

static const qac_opt analyze_opts[] = {
    {"corpus", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "analyze every document: prints 'id<TAB>tokens'", 0},
    {"queries", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "analyze every query: prints 'id<TAB>tokens'", 0},
};

#define N(t) (int)(sizeof t / sizeof t[0])

static int cmd_build(int argc, char **argv) {
    qac_opts o;
    int rc = qac_cli_parse(&o, "bm25 build", "--corpus FILE --out DIR", build_opts, N(build_opts), argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    qac_progress_state ps;
    qac_progress_init(&ps, "docs");
    qac_bm25_build_opts bo = {.progress = qac_progress_stderr, .progress_user = &ps};
    double t0 = qac_now();
    qac_status st = qac_bm25_build(qac_opts_str(&o, "out"), qac_opts_str(&o, "corpus"), &bo);
    if (st != QAC_OK) {
        qac_opts_free(&o);
        return qac_cli_fail("bm25 build");
    }
    qac_bm25 *b = NULL;
    if (qac_bm25_open(&b, qac_opts_str(&o, "out")) != QAC_OK) {
        qac_opts_free(&o);
        return qac_cli_fail("bm25 build");
    }
    double dt = qac_now() - t0;
    qac_summary("bm25 build", "%lld documents, %lld terms in %.2f s (%.0f docs/s) -> %s", (long long)qac_bm25_count(b),
                (long long)qac_bm25_num_terms(b), dt, dt > 0 ? (double)qac_bm25_count(b) / dt : 0.0,
                qac_opts_str(&o, "out"));
    qac_bm25_free(b);
    qac_opts_free(&o);
    return 0;
}

typedef struct job {
    const qac_bm25 *b;
    qac_bm25_params p;
    int k;
    size_t n;
    char **texts;
    float *scores;   /* [n * k] */
    int64_t *rows;   /* [n * k] */
    int *counts;     /* [n] */
    atomic_size_t next;
    atomic_int failed;
    char err[512];
    pthread_mutex_t mu;
} job;

static void *worker(void *arg) {
    job *j = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->n || atomic_load(&j->failed)) break;
        if (qac_bm25_search(j->b, j->texts[i], &j->p, j->k, j->scores + i * (size_t)j->k,
                            j->rows + i * (size_t)j->k, &j->counts[i]) != QAC_OK) {
            pthread_mutex_lock(&j->mu);
            if (!atomic_load(&j->failed)) snprintf(j->err, sizeof j->err, "%s", qac_last_error());
            atomic_store(&j->failed, 1);
            pthread_mutex_unlock(&j->mu);
            break;
        }
    }
    return NULL;
}

static int cmd_search(int argc, char **argv) {
    qac_opts o;
    int rc = qac_cli_parse(&o, "bm25 search", "--index DIR --queries FILE --run OUT [--k 1000] [--k1 0.9] [--b 0.4]",
                           search_opts, N(search_opts), argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    qac_bm25 *b = NULL;
    qac_reader *r = NULL;
    char **ids = NULL, **texts = NULL;
    size_t n = 0, cap = 0;
    job j;
    memset(&j, 0, sizeof j);
    pthread_mutex_init(&j.mu, NULL);
    FILE *out = NULL;
    qac_atomic_file af = {0};
    int to_stdout = strcmp(qac_opts_str(&o, "run"), "-") == 0;
    rc = 1;
    /* the queries and the run's place first, then the index */
    if (qac_reader_open(&r, qac_opts_str(&o, "queries"), QAC_READ_QUERIES, QAC_FMT_AUTO) != QAC_OK) goto fail;
    if (!to_stdout && qac_check_output_file(qac_opts_str(&o, "run")) != QAC_OK) goto fail;
    if (qac_bm25_open(&b, qac_opts_str(&o, "index")) != QAC_OK) goto fail;
    for (;;) {
        qac_record rec;
        int got = 0;
        if (qac_reader_next(r, &rec, &got) != QAC_OK) goto fail;
        if (!got) break;
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            char **a = realloc(ids, cap * sizeof *a), **t2 = a ? realloc(texts, cap * sizeof *t2) : NULL;
            if (a) ids = a;
            if (t2) texts = t2;
            if (!a || !t2) {
                qac_set_error(QAC_ERR_NOMEM, "out of memory");
                goto fail;
            }
        }
        ids[n] = strdup(rec.id);
        texts[n] = strdup(rec.text);
        n++;
        if (!ids[n - 1] || !texts[n - 1]) {
            qac_set_error(QAC_ERR_NOMEM, "out of memory");
            goto fail;
        }
    }
    j.b = b;
    j.p = (qac_bm25_params){(float)qac_opts_float(&o, "k1"), (float)qac_opts_float(&o, "b"),
                            qac_opts_bool(&o, "exact-lengths")};
    j.k = (int)qac_opts_int(&o, "k");
    /* queries are searched in chunks so that memory for hits stays bounded */
    const size_t chunk = 1024;
    size_t cn = n < chunk ? (n ? n : 1) : chunk;
    j.scores = malloc(cn * (size_t)j.k * sizeof *j.scores);
    j.rows = malloc(cn * (size_t)j.k * sizeof *j.rows);
    j.counts = calloc(cn, sizeof *j.counts);
    const char **docids = malloc((size_t)j.k * sizeof *docids);
    if (!j.scores || !j.rows || !j.counts || !docids) {
        free(docids);
        qac_set_error(QAC_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (to_stdout) out = stdout;
    else {
        if (qac_atomic_open(&af, qac_opts_str(&o, "run")) != QAC_OK) {
            free(docids);
            goto fail;
        }
        out = af.f;
    }
    int nt = (int)qac_opts_int(&o, "threads");
    double dt = 0;
    unsigned long long hits = 0;
    for (size_t base = 0; base < n; base += chunk) {
        j.texts = texts + base;
        j.n = n - base < chunk ? n - base : chunk;
        atomic_store(&j.next, 0);
        double t0 = qac_now();
        if (nt <= 1) worker(&j);
        else {
            pthread_t th[256];
            int started = 0;
            for (; started < nt; started++)
                if (pthread_create(&th[started], NULL, worker, &j) != 0) break;
            if (started == 0) worker(&j);
            for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
        }
        dt += qac_now() - t0;
        if (atomic_load(&j.failed)) {
            free(docids);
            qac_set_error(QAC_ERR_INTERNAL, "%s", j.err);
            goto fail;
        }
        for (size_t i = 0; i < j.n; i++) {
            hits += (unsigned long long)j.counts[i];
            for (int h = 0; h < j.counts[i]; h++) docids[h] = qac_bm25_docid(b, j.rows[i * (size_t)j.k + h]);
            if (qac_run_write(out, ids[base + i], docids, j.scores + i * (size_t)j.k, j.counts[i],
                              qac_opts_str(&o, "run-id")) != QAC_OK) {
                free(docids);
                goto fail;
            }
        }
    }
    free(docids);
    if (!to_stdout) {
        if (qac_atomic_commit(&af) != QAC_OK) goto fail;
        out = NULL;
    } else if (fflush(stdout) != 0) {
        qac_set_error(QAC_ERR_IO, "write to stdout failed");
        goto fail;
    }
    qac_summary("bm25 search", "%zu queries, %llu hits in %.3f s (%.1f queries/s, %d thread%s) -> %s", n,
                (unsigned long long)hits, dt, dt > 0 ? (double)n / dt : 0.0, nt, nt == 1 ? "" : "s",
                qac_opts_str(&o, "run"));
    rc = 0;
    goto done;
fail:
    rc = qac_cli_fail("bm25 search");
    if (out && !to_stdout) qac_atomic_abort(&af);
done:
    for (size_t i = 0; i < n; i++) {
        free(ids[i]);
        free(texts[i]);
    }
    free(ids);
    free(texts);
    free(j.scores);
    free(j.rows);
    free(j.counts);
    pthread_mutex_destroy(&j.mu);
    qac_reader_free(r);
    qac_bm25_free(b);
    qac_opts_free(&o);
    return rc;
}

typedef struct printer {
    FILE *f;
    int first;
} printer;

static int print_token(void *user, const char *tok, size_t len) {
    printer *p = user;
    if (!p->first) fputc(' ', p->f);
    fwrite(tok, 1, len, p->f);
    p->first = 0;
    return 0;
}

static int analyze_file(qac_analyzer *an, const char *path, qac_reader_kind kind) {
    qac_reader *r = NULL;
    if (qac_reader_open(&r, path, kind, QAC_FMT_AUTO) != QAC_OK) return qac_cli_fail("bm25 analyze");
    for (;;) {
        qac_record rec;
        int got = 0;
        if (qac_reader_next(r, &rec, &got) != QAC_OK) {
            qac_reader_free(r);
            return qac_cli_fail("bm25 analyze");
        }
        if (!got) break;
        printf("%s\t", rec.id);
        printer p = {stdout, 1};
        if (qac_analyzer_run(an, rec.text, rec.text_len, print_token, &p) != QAC_OK) {
            qac_reader_free(r);
            return qac_cli_fail("bm25 analyze");
        }
        putchar('\n');
    }
    qac_reader_free(r);
    return 0;
}

static int cmd_analyze(int argc, char **argv) {
    qac_opts o;
    int rc = qac_cli_parse(&o, "bm25 analyze", "TEXT... | --corpus FILE | --queries FILE", analyze_opts,
                           N(analyze_opts), argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    qac_analyzer *an = NULL;
    if (qac_analyzer_create(&an) != QAC_OK) {
        qac_opts_free(&o);
        return qac_cli_fail("bm25 analyze");
    }
    const char *corpus = qac_opts_str(&o, "corpus"), *queries = qac_opts_str(&o, "queries");
    if (corpus) rc = analyze_file(an, corpus, QAC_READ_CORPUS);
    if (!rc && queries) rc = analyze_file(an, queries, QAC_READ_QUERIES);
    if (!corpus && !queries) {
        if (o.n_positional == 0) {
            fprintf(stderr, "qac bm25 analyze: give TEXT, --corpus FILE or --queries FILE\n");
            rc = 2;
        }
        /* several arguments are analyzed as one text, joined by spaces */
        printer p = {stdout, 1};
        for (int i = 0; i < o.n_positional && !rc; i++)
            if (qac_analyzer_run(an, o.positional[i], strlen(o.positional[i]), print_token, &p) != QAC_OK)
                rc = qac_cli_fail("bm25 analyze");
        if (!rc) putchar('\n');
    }
    if (!rc && fflush(stdout) != 0) rc = 1;
    qac_analyzer_free(an);
    qac_opts_free(&o);
    return rc;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: qac bm25 <build|search|analyze> [options]   (qac bm25 <sub> --help)\n"
            "  build    index a corpus:          --corpus FILE --out DIR\n"
            "  search   write a TREC run:        --index DIR --queries FILE --run OUT\n"
            "                                    [--k 1000] [--k1 0.9] [--b 0.4]\n"
            "  analyze  print analyzed tokens:   TEXT... | --corpus FILE | --queries FILE\n");
}

int qac_cmd_bm25(int argc, char **argv) {
    if (argc < 1) {
        usage(stderr);
        return 2;
    }
    const char *sub = argv[0];
    if (!strcmp(sub, "-h") || !strcmp(sub, "--help") || !strcmp(sub, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(sub, "build")) return cmd_build(argc - 1, argv + 1);
    if (!strcmp(sub, "search")) return cmd_search(argc - 1, argv + 1);
    if (!strcmp(sub, "analyze")) return cmd_analyze(argc - 1, argv + 1);
    static const char *const subs[] = {"build", "search", "analyze"};
    qac_cli_unknown("qac bm25", "subcommand", sub, subs, 3);
    usage(stderr);
    return 2;
}
