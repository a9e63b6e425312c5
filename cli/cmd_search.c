/* qac search: embed a queries file, search an index, write a TREC run
 * (offline), or send the queries to a running server (--server). */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "qac_cpu.h"
#include "qac_index.h"

static const qac_opt search_opts[] = {
    {"index", QAC_OPT_STR, NULL, 0, -1, NULL, "QAC_INDEX", "index directory from qac index build", 0},
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
    {"dtype", QAC_OPT_ENUM, "fp32", 0, -1, "fp32|bf16", "QAC_DTYPE",
     "CPU query encoder precision: bf16 runs the linear layers in bf16 (fp32 sums)", 0},
    {"nprobe", QAC_OPT_INT, NULL, 1, 1 << 20, NULL, NULL, "IVF lists visited per query", 0},
    {"ef-search", QAC_OPT_INT, NULL, 1, 1 << 20, NULL, NULL, "HNSW search breadth", 0},
    {"allow-model-mismatch", QAC_OPT_BOOL, "false", 0, -1, NULL, NULL,
     "search even if the model differs from the one the index was built with", 0},
    {"query-prompt", QAC_OPT_STR, NULL, 0, -1, NULL, "QAC_QUERY_PROMPT",
     "text put before every query (default: the model's \"query\" prompt; '' for none); must be the one the "
     "index was built for", 0},
    {"allow-prompt-mismatch", QAC_OPT_BOOL, "false", 0, -1, NULL, NULL,
     "search even if the query prompt differs from the one the index was built for (a warning)", 0},
    {"server", QAC_OPT_STR, NULL, 0, -1, NULL, "QAC_SERVER", "search a running qac server at URL instead", 0},
    {"api-key", QAC_OPT_STR, NULL, 0, -1, NULL, "QAC_API_KEY", "API key for --server", 0},
    QAC_CPU_ISA_OPT,
};
#define N_SEARCH_OPTS (int)(sizeof search_opts / sizeof search_opts[0])

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

/* Encode, search and write one batch of queries. */
static qac_status run_batch(qac_encoder *enc, const qac_index *ix, qbatch *b, int k, int max_len, const char *run_id,
                            FILE *out, float *qv, float *scores, int64_t *rows, const char **docids, uint64_t *hits) {
    const char *prompt = qac_model_query_prompt(qac_encoder_model(enc));
    qac_status st =
        qac_encoder_encode_texts_prompted(enc, prompt, (const char *const *)b->texts, b->lens, b->n, max_len, qv);
    if (!st) st = qac_index_search(ix, qv, b->n, k, scores, rows);
    for (int q = 0; q < b->n && !st; q++) {
        int got = 0;
        for (; got < k && rows[(size_t)q * k + got] >= 0; got++)
            docids[got] = qac_index_docid(ix, rows[(size_t)q * k + got]);
        st = qac_run_write(out, b->qids[q], docids, scores + (size_t)q * k, got, run_id);
        *hits += (uint64_t)got;
    }
    return st;
}

static int search_local(const qac_opts *o, FILE *out) {
    const char *index_dir = qac_opts_str(o, "index");
    if (!index_dir) {
        fprintf(stderr, "qac search: --index DIR (or --server URL) is required\n");
        return 2;
    }
    int k = (int)qac_opts_int(o, "k"), batch = (int)qac_opts_int(o, "batch"), max_len = (int)qac_opts_int(o, "max-len");
    if (max_len == 1) {
        fprintf(stderr, "qac search: --max-len must be 0 or at least 2 ([CLS] and [SEP])\n");
        return 2;
    }
    const char *run_id = qac_opts_str(o, "run-id");
    qac_device dev = qac_cli_device(qac_opts_str(o, "device"));
    qac_index *ix = NULL;
    qac_model *m = NULL;
    qac_encoder *enc = NULL;
    qac_reader *r = NULL;
    qbatch b = {0};
    float *qv = NULL, *scores = NULL;
    int64_t *rows = NULL;
    const char **docids = NULL;
    int rc = 1;
    char buf[4096];
    /* the queries first: a mistake there is said before the index and model load */
    if (qac_reader_open(&r, qac_opts_str(o, "queries"), QAC_READ_QUERIES, qac_cli_format(qac_opts_str(o, "format"))))
        goto fail;
    const char *model_dir = qac_cli_model_dir(o, buf, sizeof buf);
    if (!model_dir) goto fail;
    if (qac_index_open(&ix, index_dir, dev) || qac_index_set_threads(ix, (int)qac_opts_int(o, "threads"))) goto fail;
    if (qac_opts_isset(o, "nprobe") && qac_index_set_param(ix, "nprobe", (double)qac_opts_int(o, "nprobe"))) goto fail;
    if (qac_opts_isset(o, "ef-search") && qac_index_set_param(ix, "efSearch", (double)qac_opts_int(o, "ef-search")))
        goto fail;
    if (qac_model_load(&m, model_dir) || qac_cli_apply_prompts(o, m)) goto fail;
    if (qac_index_check_prompts(ix, qac_model_query_prompt(m))) {
        if (!qac_opts_bool(o, "allow-prompt-mismatch")) goto fail;
        fprintf(stderr, "qac search: warning: %s\n", qac_last_error());
    }
    if (!qac_opts_bool(o, "allow-model-mismatch") && qac_index_check_model(ix, m)) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", qac_last_error());
        qac_set_error(QAC_ERR_MISMATCH, "%s (or --allow-model-mismatch to search anyway)", msg);
        goto fail;
    }
    qac_encoder_opts eo = qac_encoder_default_opts();
    eo.device = dev;
    eo.threads = (int)qac_opts_int(o, "threads");
    eo.max_batch = batch;
    eo.cpu_precision = strcmp(qac_opts_str(o, "dtype"), "bf16") ? QAC_PREC_FP32 : QAC_PREC_BF16;
    if (qac_encoder_create(&enc, m, &eo)) goto fail;
    if (qac_encoder_dim(enc) != qac_index_dim(ix)) {
        qac_set_error(QAC_ERR_INVALID, "model dimension %d differs from the index's %d", qac_encoder_dim(enc),
                      qac_index_dim(ix));
        goto fail;
    }
    max_len = qac_encoder_max_len(enc, max_len);
    b.qids = calloc((size_t)batch, sizeof(char *));
    b.texts = calloc((size_t)batch, sizeof(char *));
    b.lens = calloc((size_t)batch, sizeof(size_t));
    qv = malloc((size_t)batch * (size_t)qac_index_dim(ix) * sizeof(float));
    scores = malloc((size_t)batch * (size_t)k * sizeof(float));
    rows = malloc((size_t)batch * (size_t)k * sizeof(int64_t));
    docids = malloc((size_t)k * sizeof(char *));
    if (!b.qids || !b.texts || !b.lens || !qv || !scores || !rows || !docids) {
        qac_set_error(QAC_ERR_NOMEM, "out of memory");
        goto fail;
    }
    qac_progress_state ps;
    qac_progress_init(&ps, "queries");
    uint64_t done = 0, hits = 0, file_size = qac_reader_file_size(r), offset = 0;
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
            if (run_batch(enc, ix, &b, k, max_len, run_id, out, qv, scores, rows, docids, &hits)) goto fail;
            done += (uint64_t)b.n;
            /* the total is estimated from the bytes read so far, exact at the end */
            uint64_t est = eof ? done : offset > 0 ? (uint64_t)((double)done * (double)file_size / (double)offset) : 0;
            qac_progress_stderr(&ps, "search", done, est > done || eof ? est : done + 1);
            qbatch_clear(&b);
        }
    }
    double dt = qac_now() - t0;
    qac_summary("search", "%llu queries, %llu hits in %.1f s (%.1f queries/s); %lld cut at %d tokens -> %s",
                (unsigned long long)done, (unsigned long long)hits, dt, dt > 0 ? (double)done / dt : 0.0,
                (long long)qac_encoder_truncated(enc), max_len, qac_opts_str(o, "run"));
    rc = 0;
fail:
    if (rc) rc = qac_cli_fail("search");
    qbatch_clear(&b);
    free(b.qids);
    free(b.texts);
    free(b.lens);
    free(qv);
    free(scores);
    free(rows);
    free(docids);
    qac_reader_free(r);
    qac_encoder_free(enc);
    qac_model_free(m);
    qac_index_free(ix);
    return rc;
}

int qac_cmd_search(int argc, char **argv) {
    qac_opts o;
    int rc = qac_cli_parse(&o, "search", "--index DIR --queries FILE --run OUT [options]", search_opts, N_SEARCH_OPTS,
                           argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
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
    if (server && qac_opts_isset(&o, "query-prompt")) {
        /* the text goes as typed; a prompt added here would be applied twice */
        fprintf(stderr, "qac search: --query-prompt does not apply to --server: the server puts its own query "
                        "prompt before the queries (see its /info)\n");
        rc = 2;
    } else if (server)
        rc = qac_cli_search_remote(server, qac_opts_str(&o, "api-key"), qac_opts_str(&o, "queries"),
                                   (int)qac_opts_int(&o, "k"), qac_opts_str(&o, "run-id"),
                                   (int)qac_opts_int(&o, "max-len"), out);
    else
        rc = search_local(&o, out);
    if (!to_stdout) {
        if (rc) qac_atomic_abort(&af); /* a failed search leaves no partial run behind */
        else if (qac_atomic_commit(&af)) rc = qac_cli_fail("search");
    } else if (fflush(stdout) != 0) rc = 1;
    qac_opts_free(&o);
    return rc;
}
