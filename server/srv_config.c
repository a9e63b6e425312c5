/* Every `qac serve` setting, in the one qac_opt table: flag, QAC_* env
 * variable, config file key, default and bounds all come from here. */
#include <stdlib.h>
#include <string.h>

#include "qac_server.h"

static const qac_opt serve_opts[] = {
    {"index", QAC_OPT_STR, NULL, 1, 0, NULL, "QAC_INDEX", "dense index directory (absent: encode-only server)", 0},
    {"bm25", QAC_OPT_STR, NULL, 1, 0, NULL, "QAC_BM25", "BM25 index directory (enables mode bm25 / hybrid)", 0},
    {"model", QAC_OPT_STR, NULL, 1, 0, NULL, "QAC_MODEL", "model directory (default: all-MiniLM-L6-v2)", 0},
    {"host", QAC_OPT_STR, "127.0.0.1", 1, 0, NULL, "QAC_HOST", "address to bind", 0},
    {"port", QAC_OPT_INT, "8080", 0, 65535, NULL, "QAC_PORT", "TCP port (0: any free port)", 0},
    {"threads", QAC_OPT_INT, "0", 0, 1024, NULL, "QAC_THREADS", "CPU threads for the encoder and the flat scan (0: all cores)", 0},
    {"device", QAC_OPT_ENUM, "auto", 1, 0, "auto|cpu|cuda", "QAC_DEVICE", "encoder and index device", 0},
    {"api-key", QAC_OPT_STR, NULL, 1, 0, NULL, "QAC_API_KEY", "require 'Authorization: Bearer KEY' (not on /health)", 0},
    {"max-batch-tokens", QAC_OPT_INT, "8192", 1, 1 << 24, NULL, "QAC_MAX_BATCH_TOKENS", "token budget of one encoder call", 0},
    {"max-wait-ms", QAC_OPT_INT, "2", 0, 1000, NULL, "QAC_MAX_WAIT_MS", "how long a batch waits for more texts", 0},
    {"max-body-bytes", QAC_OPT_INT, "2097152", 64, 1 << 30, NULL, "QAC_MAX_BODY_BYTES", "largest request body (413 past it)", 0},
    {"max-texts", QAC_OPT_INT, "256", 1, 65536, NULL, "QAC_MAX_TEXTS", "texts or queries per request (413 past it)", 0},
    {"max-k", QAC_OPT_INT, "1000", 1, 100000, NULL, "QAC_MAX_K", "largest k for /search", 0},
    {"truncate", QAC_OPT_BOOL, "true", 1, 0, NULL, "QAC_TRUNCATE", "cut texts past the max length (false: 413)", 0},
    {"max-concurrent", QAC_OPT_INT, "512", 1, 100000, NULL, "QAC_MAX_CONCURRENT", "requests in flight before 429", 0},
    {"timeout-ms", QAC_OPT_INT, "30000", 0, 3600000, NULL, "QAC_TIMEOUT_MS", "longest queue wait before 503 (0: none)", 0},
    {"queue-size", QAC_OPT_INT, "1024", 1, 1000000, NULL, "QAC_QUEUE_SIZE", "requests waiting for the encoder before 503", 0},
    {"query-max-len", QAC_OPT_INT, "32", 2, 8192, NULL, "QAC_QUERY_MAX_LEN", "query length in tokens, specials included", 0},
    {"passage-max-len", QAC_OPT_INT, "256", 2, 8192, NULL, "QAC_PASSAGE_MAX_LEN", "passage length in tokens, specials included", 0},
    {"idle-timeout-s", QAC_OPT_INT, "30", 1, 86400, NULL, "QAC_IDLE_TIMEOUT_S", "close idle connections after this", 0},
    {"drain-timeout-ms", QAC_OPT_INT, "30000", 0, 3600000, NULL, "QAC_DRAIN_TIMEOUT_MS", "on SIGTERM, wait this long for in-flight requests", 0},
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
    return QAC_OK;
}

void qac_server_config_clear(qac_server_config *c) {
    if (!c) return;
    free(c->host);
    free(c->api_key);
    c->host = c->api_key = NULL;
}
