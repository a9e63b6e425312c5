/* qac encode: embed a corpus or queries file into a matrix file.
 * Row i of the output is the i-th record of the input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "qac_cpu.h"
#include "qac_data.h"
#include "qac_encoder.h"
#include "qac_matrix.h"
#include "qac_model.h"
#include "qac_util.h"

#define CHUNK 1024 /* records tokenised and encoded per call */

static const qac_opt encode_opts[] = {
    {"model", QAC_OPT_STR, NULL, 0, -1, NULL, "QAC_MODEL", "model directory (default: all-MiniLM-L6-v2)", 0},
    {"input", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "TSV (id\\ttext) or JSONL ({_id|docid|id, title, text}) file", 1},
    {"output", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "output matrix: .npy, else the .qmat format", 1},
    {"ids", QAC_OPT_STR, NULL, 0, -1, NULL, NULL, "also write the record ids, one per line, in row order", 0},
    {"kind", QAC_OPT_ENUM, "passage", 0, -1, "query|passage", NULL,
     "what the input holds: it takes the query or the passage prompt", 0},
    QAC_CLI_PROMPT_OPTS,
    {"max-len", QAC_OPT_INT, "0", 0, 8192, NULL, "QAC_MAX_LEN",
     "tokens per text incl. [CLS]/[SEP]; 0 = the model's limit (its max_seq_length); longer texts are cut and "
     "counted in the summary", 0},
    {"batch", QAC_OPT_INT, "0", 0, 4096, NULL, "QAC_BATCH", "sequences per forward pass; 0 = backend default", 0},
    {"threads", QAC_OPT_INT, "0", 0, 1024, NULL, "QAC_THREADS", "CPU threads; 0 = all cores", 0},
    {"device", QAC_OPT_ENUM, "auto", 0, -1, "auto|cpu|cuda", "QAC_DEVICE", "encoder backend", 0},
    {"dtype", QAC_OPT_ENUM, "fp32", 0, -1, "fp32|bf16|int8", "QAC_DTYPE",
     "CPU encoder precision: bf16 runs the linear layers in bf16 (fp32 sums), int8 in int8 (int32 sums, VNNI; fp32 on a CPU without it)", 0},
    QAC_CPU_ISA_OPT,
};
#define N_OPTS (int)(sizeof encode_opts / sizeof encode_opts[0])

typedef struct chunk {
    char *texts[CHUNK];
    size_t lens[CHUNK];
    char *ids[CHUNK];
    int n;
} chunk;

static void chunk_clear(chunk *c) {
    for (int i = 0; i < c->n; i++) {
        free(c->texts[i]);
        free(c->ids[i]);
    }
    c->n = 0;
}

static qac_status flush_chunk(qac_encoder *e, const char *prompt, chunk *c, int max_len, float *vec,
                              qac_matrix_writer *w, FILE *ids_f) {
    if (c->n == 0) return QAC_OK;
    qac_status st =
        qac_encoder_encode_texts_prompted(e, prompt, (const char *const *)c->texts, c->lens, c->n, max_len, vec);
    if (st == QAC_OK) st = qac_matrix_writer_append(w, vec, c->n);
    for (int i = 0; st == QAC_OK && ids_f && i < c->n; i++)
        if (fprintf(ids_f, "%s\n", c->ids[i]) < 0) st = qac_set_error(QAC_ERR_IO, "write ids file");
    chunk_clear(c);
    return st;
}

int qac_cmd_encode(int argc, char **argv) {
    qac_opts o;
    int rc = qac_cli_parse(&o, "encode", "--input FILE --output FILE [options]", encode_opts, N_OPTS, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;

    char model_buf[4096];
    const char *model_dir = qac_cli_model_dir(&o, model_buf, sizeof model_buf);
    const char *input = qac_opts_str(&o, "input"), *output = qac_opts_str(&o, "output");
    const char *ids_path = qac_opts_str(&o, "ids");
    int is_query = !strcmp(qac_opts_str(&o, "kind"), "query");
    int max_len = (int)qac_opts_int(&o, "max-len");
    if (max_len == 1) {
        fprintf(stderr, "qac encode: --max-len must be 0 (the model's limit) or at least 2 ([CLS] and [SEP])\n");
        qac_opts_free(&o);
        return 2;
    }
    const char *dev = qac_opts_str(&o, "device");
    qac_encoder_opts eo = qac_encoder_default_opts();
    eo.device = qac_cli_device(dev);
    eo.threads = (int)qac_opts_int(&o, "threads");
    eo.max_batch = (int)qac_opts_int(&o, "batch");
    eo.cpu_precision = qac_cli_dtype(qac_opts_str(&o, "dtype"));

    qac_model *m = NULL;
    qac_encoder *e = NULL;
    qac_reader *r = NULL;
    qac_matrix_writer *w = NULL;
    qac_atomic_file ids_af = {0};
    float *vec = NULL;
    chunk *c = calloc(1, sizeof *c);
    qac_status st = QAC_OK;
    if (!c) st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
    /* input and outputs first: a mistake there is said before the model loads */
    if (!st) st = qac_reader_open(&r, input, is_query ? QAC_READ_QUERIES : QAC_READ_CORPUS, QAC_FMT_AUTO);
    if (!st) st = qac_check_output_file(output);
    if (!st && ids_path) st = qac_check_output_file(ids_path);
    if (!st && !model_dir) st = QAC_ERR_NOT_FOUND; /* qac_cli_model_dir set the message */
    if (!st) st = qac_model_load(&m, model_dir);
    if (!st) st = qac_cli_apply_prompts(&o, m);
    const char *prompt = st ? NULL : is_query ? qac_model_query_prompt(m) : qac_model_passage_prompt(m);
    if (!st) st = qac_encoder_create(&e, m, &eo);
    if (!st) qac_cli_encoder_note("encode", e);
    if (!st) max_len = qac_encoder_max_len(e, max_len);
    if (!st) st = qac_matrix_writer_open(&w, output, qac_encoder_dim(e));
    if (!st && ids_path) st = qac_atomic_open(&ids_af, ids_path);
    if (!st && !(vec = malloc((size_t)CHUNK * qac_encoder_dim(e) * sizeof *vec)))
        st = qac_set_error(QAC_ERR_NOMEM, "out of memory");

    const char *unit = is_query ? "queries" : "passages";
    qac_progress_state ps;
    qac_progress_init(&ps, unit);
    uint64_t done = 0, file_size = r ? qac_reader_file_size(r) : 0;
    double t0 = qac_now();
    if (!st) qac_progress_stderr(&ps, "encode", 0, 0); /* the phase's clock starts here */
    while (!st) {
        qac_record rec;
        int got = 0;
        if ((st = qac_reader_next(r, &rec, &got)) || !got) break;
        int i = c->n;
        c->texts[i] = malloc(rec.text_len + 1);
        c->ids[i] = strdup(rec.id);
        if (!c->texts[i] || !c->ids[i]) {
            free(c->texts[i]);
            free(c->ids[i]);
            st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
            break;
        }
        memcpy(c->texts[i], rec.text, rec.text_len);
        c->texts[i][rec.text_len] = 0;
        c->lens[i] = rec.text_len;
        c->n++;
        if (c->n == CHUNK) {
            st = flush_chunk(e, prompt, c, max_len, vec, w, ids_af.f);
            done += CHUNK;
            /* the total is estimated from the bytes read so far */
            uint64_t total = rec.offset > 0 && file_size > rec.offset ? (uint64_t)((double)done * file_size / rec.offset) : 0;
            if (!st) qac_progress_stderr(&ps, "encode", done, total > done ? total : done + 1);
        }
    }
    if (!st && c) {
        done += (uint64_t)c->n;
        st = flush_chunk(e, prompt, c, max_len, vec, w, ids_af.f);
    }
    if (!st) {
        qac_progress_stderr(&ps, "encode", done, done);
        st = qac_matrix_writer_close(w);
        w = NULL;
    }
    if (!st && ids_path) st = qac_atomic_commit(&ids_af);
    rc = st ? qac_cli_fail("encode") : 0;
    if (!st) {
        double dt = qac_now() - t0;
        qac_summary("encode", "%llu %s (dim %d) in %.1f s (%.1f %s/s); %lld cut at %d tokens -> %s",
                    (unsigned long long)done, unit, qac_encoder_dim(e), dt, dt > 0 ? (double)done / dt : 0.0, unit,
                    (long long)qac_encoder_truncated(e), max_len, output);
    }

    if (c) chunk_clear(c);
    free(c);
    free(vec);
    qac_matrix_writer_abort(w);
    qac_atomic_abort(&ids_af);
    qac_reader_free(r);
    qac_encoder_free(e);
    qac_model_free(m);
    qac_opts_free(&o);
    return rc;
}
