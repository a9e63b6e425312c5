/* Every `qac serve` setting, in the one qac_opt table: flag, QAC_* env
 * variable, config file key, default and bounds all come from here. */
#include <stdlib.h>
#include <string.h>

#include "qac_cpu.h"
#include "qac_server.h"

static const qac_opt serve_opts[] = {
    {"index", QAC_OPT_STR, NULL, 1, 0, NULL, "QAC_INDEX", "dense index directory (absent: encode-only server)", 0},
    {"bm25", QAC_OPT_STR, NULL, 1, 0, NULL, "QAC_BM25", "BM25 index directory (enables mode bm25 / hybrid)", 0},
    {"model", QAC_OPT_STR, NULL, 1, 0, NULL, "QAC_MODEL", "model directory (default: all-MiniLM-L6-v2)", 0},
    {"reranker", QAC_OPT_STR, NULL, 1, 0, NULL, "QAC_RERANKER", "a cross-encoder: adds POST /rerank (TEI), POST /v1/rerank (Cohere, Jina) and /search's rerank stage", 0},
    {"host", QAC_OPT_STR, "127.0.0.1", 1, 0, NULL, "QAC_HOST", "address to bind", 0},
    {"port", QAC_OPT_INT, "8080", 0, 65535, NULL, "QAC_PORT", "TCP port (0: any free port)", 0},
    {"threads", QAC_OPT_INT, "0", 0, 1024, NULL, "QAC_THREADS", "CPU threads for the encoder and the flat scan (0: all cores)", 0},
    {"device", QAC_OPT_ENUM, "auto", 1, 0, "auto|cpu|cuda", "QAC_DEVICE", "encoder and index device", 0},
    {"dtype", QAC_OPT_ENUM, "fp32", 1, 0, "fp32|bf16|int8", "QAC_DTYPE", "CPU encoder precision: bf16 runs the linear layers in bf16 (fp32 sums), int8 in int8 (int32 sums, VNNI; fp32 on a CPU without it)", 0},
    {"verify", QAC_OPT_ENUM, "full", 1, 0, "full|size|none", "QAC_VERIFY", "check index.faiss and the corpus at start: every byte against the manifest's checksums, sizes only (very large indexes), or none (index.faiss unchecked: for a manifest without a checksum); the FAISS index's structure is checked in every mode", 0},
    {"allow-model-mismatch", QAC_OPT_BOOL, "false", 1, 0, NULL, "QAC_ALLOW_MODEL_MISMATCH", "serve an index whose recorded model differs from --model, or records none (built from --vectors without --model)", 0},
    {"query-prompt", QAC_OPT_STR, NULL, 1, 0, NULL, "QAC_QUERY_PROMPT", "text put before every query of /search (and /encode kind query, /embed prompt_name query); default: the model's \"query\" prompt, '' for none; must be the one the index was built for", 0},
    {"passage-prompt", QAC_OPT_STR, NULL, 1, 0, NULL, "QAC_PASSAGE_PROMPT", "text put before every passage of /encode (kind passage); default: the model's \"document\", \"passage\" or \"corpus\" prompt, '' for none", 0},
    {"allow-prompt-mismatch", QAC_OPT_BOOL, "false", 1, 0, NULL, "QAC_ALLOW_PROMPT_MISMATCH", "serve even if the query prompt differs from the one the index was built for (logged as a warning)", 0},
    {"api-key", QAC_OPT_STR, NULL, 1, 0, NULL, "QAC_API_KEY", "require 'Authorization: Bearer KEY' (not on /health)", 0},
    {"max-batch-tokens", QAC_OPT_INT, "8192", 1, 1 << 24, NULL, "QAC_MAX_BATCH_TOKENS", "token budget of one encoder call", 0},
    {"max-wait-ms", QAC_OPT_INT, "2", 0, 1000, NULL, "QAC_MAX_WAIT_MS", "how long a free encoder waits for requests already arriving (read, not yet queued) before it starts a batch; it never waits for requests not yet sent", 0},
    {"max-body-bytes", QAC_OPT_INT, "2097152", 64, 1 << 30, NULL, "QAC_MAX_BODY_BYTES", "largest request body (413 past it)", 0},
    {"max-texts", QAC_OPT_INT, "2048", 1, 65536, NULL, "QAC_MAX_TEXTS", "texts, token-id inputs or queries per request (413 past it; TEI routes: 422); each encoder call stays within --max-batch-tokens", 0},
    {"max-k", QAC_OPT_INT, "1000", 1, 100000, NULL, "QAC_MAX_K", "largest k for /search", 0},
    {"truncate", QAC_OPT_BOOL, "true", 1, 0, NULL, "QAC_TRUNCATE", "cut texts past the max length (false: 413)", 0},
    {"max-concurrent", QAC_OPT_INT, "512", 1, 100000, NULL, "QAC_MAX_CONCURRENT", "requests in flight before 429", 0},
    {"timeout-ms", QAC_OPT_INT, "30000", 0, 3600000, NULL, "QAC_TIMEOUT_MS", "longest queue wait before 503 (0: none)", 0},
    {"queue-size", QAC_OPT_INT, "1024", 1, 1000000, NULL, "QAC_QUEUE_SIZE", "requests waiting for the encoder before 503", 0},
    {"query-max-len", QAC_OPT_INT, "0", 0, 8192, NULL, "QAC_QUERY_MAX_LEN", "query length in tokens, specials included (0 = the model's limit)", 0},
    {"passage-max-len", QAC_OPT_INT, "0", 0, 8192, NULL, "QAC_PASSAGE_MAX_LEN", "passage length in tokens, specials included (0 = the model's limit)", 0},
    {"idle-timeout-s", QAC_OPT_INT, "30", 1, 86400, NULL, "QAC_IDLE_TIMEOUT_S", "close idle connections after this", 0},
    {"drain-timeout-ms", QAC_OPT_INT, "30000", 0, 3600000, NULL, "QAC_DRAIN_TIMEOUT_MS", "on SIGTERM, wait this long for in-flight requests", 0},
    {"slice-tokens", QAC_OPT_INT, "256", 16, 1 << 24, NULL, "QAC_SLICE_TOKENS", "a request with more tokens is encoded in slices of this many (at least one text), between other requests' batches: a short request waits for one slice at most", 0},
    {"max-text-hits", QAC_OPT_INT, "10000", 1, 100000000, NULL, "QAC_MAX_TEXT_HITS", "queries x k allowed with return_text (413 past it)", 0},
    {"max-response-bytes", QAC_OPT_INT, "67108864", 4096, 1 << 30, NULL, "QAC_MAX_RESPONSE_BYTES", "largest response body (413 past it)", 0},
    {"max-head-bytes", QAC_OPT_INT, "16384", 1024, 65536, NULL, "QAC_MAX_HEAD_BYTES", "largest request line plus headers (414 or 431 past it)", 0},
    {"max-connections", QAC_OPT_INT, "4096", 16, 60000, NULL, "QAC_MAX_CONNECTIONS", "connections served at once; as many more may wait for a complete first head (needs twice as many file descriptors)", 0},
    {"header-timeout-ms", QAC_OPT_INT, "10000", 100, 3600000, NULL, "QAC_HEADER_TIMEOUT_MS", "close a connection whose request head is not complete this long after it starts", 0},
    {"body-timeout-ms", QAC_OPT_INT, "30000", 100, 3600000, NULL, "QAC_BODY_TIMEOUT_MS", "close a connection whose body is not complete this long after its head", 0},
    {"min-body-rate", QAC_OPT_INT, "4096", 0, 1 << 30, NULL, "QAC_MIN_BODY_RATE", "bytes/s a body must average after its first 2 s (0: no minimum)", 0},
    {"log-level", QAC_OPT_ENUM, "info", 1, 0, "debug|info|warn|error", "QAC_LOG_LEVEL", "least severe log line written to stderr; access lines are info (QAC_QUIET=1 makes the default warn)", 0},
    {"log-format", QAC_OPT_ENUM, "text", 1, 0, "text|json", "QAC_LOG_FORMAT", "stderr log lines as text, or one JSON object per line; one access line per request (method, path, status, bytes, duration, request id)", 0},
    QAC_CPU_ISA_OPT,
};

const qac_opt *qac_server_opt_table(int *n) {
    *n = (int)(sizeof serve_opts / sizeof serve_opts[0]);
    return serve_opts;
}

static const char *def_of(const char *name) {
    int n;
    const qac_opt *t = qac_server_opt_table(&n);
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return t[i].def;
    return NULL;
}

static int def_int(const char *name) {
    const char *d = def_of(name);
    return d ? atoi(d) : 0;
}

qac_server_config qac_server_default_config(void) {
    qac_server_config c;
    memset(&c, 0, sizeof c);
    c.port = def_int("port");
    c.max_batch_tokens = def_int("max-batch-tokens");
    c.max_wait_ms = def_int("max-wait-ms");
    c.max_body_bytes = def_int("max-body-bytes");
    c.max_texts = def_int("max-texts");
    c.max_k = def_int("max-k");
    c.truncate = 1;
    c.max_concurrent = def_int("max-concurrent");
    c.timeout_ms = def_int("timeout-ms");
    c.queue_size = def_int("queue-size");
    c.query_max_len = def_int("query-max-len");
    c.passage_max_len = def_int("passage-max-len");
    c.idle_timeout_s = def_int("idle-timeout-s");
    c.drain_timeout_ms = def_int("drain-timeout-ms");
    c.slice_tokens = def_int("slice-tokens");
    c.max_text_hits = def_int("max-text-hits");
    c.max_response_bytes = def_int("max-response-bytes");
    c.max_connections = def_int("max-connections");
    c.max_head_bytes = def_int("max-head-bytes");
    c.header_timeout_ms = def_int("header-timeout-ms");
    c.body_timeout_ms = def_int("body-timeout-ms");
    c.min_body_rate = def_int("min-body-rate");
    return c;
}

qac_status qac_server_config_from_opts(qac_server_config *c, const qac_opts *o) {
    *c = qac_server_default_config();
    const char *host = qac_opts_str(o, "host"), *key = qac_opts_str(o, "api-key");
    c->host = strdup(host ? host : "127.0.0.1");
    c->api_key = key && *key ? strdup(key) : NULL;
    if (!c->host || (key && *key && !c->api_key)) {
        qac_server_config_clear(c);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    c->port = (int)qac_opts_int(o, "port");
    c->max_batch_tokens = (int)qac_opts_int(o, "max-batch-tokens");
    c->max_wait_ms = (int)qac_opts_int(o, "max-wait-ms");
    c->max_body_bytes = qac_opts_int(o, "max-body-bytes");
    c->max_texts = (int)qac_opts_int(o, "max-texts");
    c->max_k = (int)qac_opts_int(o, "max-k");
    c->truncate = qac_opts_bool(o, "truncate");
    c->max_concurrent = (int)qac_opts_int(o, "max-concurrent");
    c->timeout_ms = (int)qac_opts_int(o, "timeout-ms");
    c->queue_size = (int)qac_opts_int(o, "queue-size");
    c->query_max_len = (int)qac_opts_int(o, "query-max-len");
    c->passage_max_len = (int)qac_opts_int(o, "passage-max-len");
    c->idle_timeout_s = (int)qac_opts_int(o, "idle-timeout-s");
    c->drain_timeout_ms = (int)qac_opts_int(o, "drain-timeout-ms");
    c->slice_tokens = (int)qac_opts_int(o, "slice-tokens");
    c->max_text_hits = (int)qac_opts_int(o, "max-text-hits");
    c->max_response_bytes = qac_opts_int(o, "max-response-bytes");
    c->max_connections = (int)qac_opts_int(o, "max-connections");
    c->max_head_bytes = (int)qac_opts_int(o, "max-head-bytes");
    c->header_timeout_ms = (int)qac_opts_int(o, "header-timeout-ms");
    c->body_timeout_ms = (int)qac_opts_int(o, "body-timeout-ms");
    c->min_body_rate = (int)qac_opts_int(o, "min-body-rate");
    return QAC_OK;
}

void qac_server_config_clear(qac_server_config *c) {
    if (!c) return;
    free(c->host);
    free(c->api_key);
    c->host = c->api_key = NULL;
}
