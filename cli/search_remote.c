/* `qac search --server URL`: read queries, POST them to URL/search in
 * batches and write the TREC run that offline `qac search` would write
 * (same ranks, same floats, same tie order: score desc, docid desc).
 * A minimal HTTP/1.1 client over plain sockets: one request per
 * connection, Content-Length bodies. */
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <jansson.h>

#include "cli.h"
#include "qac_data.h"
#include "qac_util.h"
#include "qac_xenc.h"

#define REMOTE_BATCH 128 /* like offline search's default batch */
#define REMOTE_TIMEOUT_S 300

typedef struct remote {
    char host[256];
    char port[16];
    char prefix[512]; /* path before /search, no trailing '/' */
    const char *api_key;
} remote;

static qac_status parse_url(remote *r, const char *url) {
    const char *p = url;
    if (!strncmp(p, "http://", 7)) p += 7;
    else if (strstr(p, "://")) return qac_set_error(QAC_ERR_UNSUPPORTED, "--server %s: only http:// is supported", url);
    const char *slash = strchr(p, '/');
    size_t hostport = slash ? (size_t)(slash - p) : strlen(p);
    const char *hp_end = p + hostport, *colon = NULL;
    if (*p == '[') { /* [v6]:port */
        const char *rb = memchr(p, ']', hostport);
        if (!rb) return qac_set_error(QAC_ERR_INVALID, "--server %s: bad IPv6 address", url);
        snprintf(r->host, sizeof r->host, "%.*s", (int)(rb - p - 1), p + 1);
        if (rb + 1 < hp_end && rb[1] == ':') colon = rb + 1;
    } else {
        colon = memchr(p, ':', hostport);
        size_t hl = colon ? (size_t)(colon - p) : hostport;
        if (hl == 0 || hl >= sizeof r->host) return qac_set_error(QAC_ERR_INVALID, "--server %s: no host", url);
        snprintf(r->host, sizeof r->host, "%.*s", (int)hl, p);
    }
    if (colon) {
        size_t pl = (size_t)(hp_end - colon - 1);
        if (pl == 0 || pl >= sizeof r->port || strspn(colon + 1, "0123456789") < pl)
            return qac_set_error(QAC_ERR_INVALID, "--server %s: bad port", url);
        snprintf(r->port, sizeof r->port, "%.*s", (int)pl, colon + 1);
    } else {
        snprintf(r->port, sizeof r->port, "80");
    }
    snprintf(r->prefix, sizeof r->prefix, "%s", slash ? slash : "");
    size_t l = strlen(r->prefix);
    while (l && r->prefix[l - 1] == '/') r->prefix[--l] = '\0';
    return QAC_OK;
}

static qac_status send_all(int fd, const char *data, size_t len) {
    while (len) {
        ssize_t w = send(fd, data, len, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return qac_set_error(QAC_ERR_IO, "sending to the server: %s", strerror(errno));
        data += w;
        len -= (size_t)w;
    }
    return QAC_OK;
}

/* One request; *body receives the response body (malloc'd). */
static qac_status http_call(const remote *r, const char *method, const char *path, const char *req_body,
                            int *status, char **body) {
    *body = NULL;
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int gai = getaddrinfo(r->host, r->port, &hints, &ai);
    if (gai) return qac_set_error(QAC_ERR_IO, "cannot resolve %s: %s", r->host, gai_strerror(gai));
    int fd = -1;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    if (fd < 0) return qac_set_error(QAC_ERR_IO, "cannot connect to %s:%s: %s", r->host, r->port, strerror(errno));
    struct timeval tv = {REMOTE_TIMEOUT_S, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);

    size_t blen = req_body ? strlen(req_body) : 0;
    char head[2048];
    int hl = snprintf(head, sizeof head,
                      "%s %s%s HTTP/1.1\r\nHost: %s:%s\r\nUser-Agent: qac/%s\r\nAccept: application/json\r\n"
                      "Connection: close\r\n%s%s%s",
                      method, r->prefix, path, r->host, r->port, QAC_VERSION_STRING, r->api_key ? "Authorization: Bearer " : "",
                      r->api_key ? r->api_key : "", r->api_key ? "\r\n" : "");
    if (hl < 0 || (size_t)hl >= sizeof head - 100) {
        close(fd);
        return qac_set_error(QAC_ERR_INVALID, "request header too long");
    }
    if (req_body)
        hl += snprintf(head + hl, sizeof head - (size_t)hl, "Content-Type: application/json\r\nContent-Length: %zu\r\n",
                       blen);
    hl += snprintf(head + hl, sizeof head - (size_t)hl, "\r\n");
    qac_status st = send_all(fd, head, (size_t)hl);
    if (!st && req_body) st = send_all(fd, req_body, blen);
    /* read to EOF (Connection: close) */
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap);
    if (!st && !buf) st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
    while (!st) {
        if (len + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
                break;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t n = recv(fd, buf + len, cap - len - 1, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) st = qac_set_error(QAC_ERR_IO, "reading from the server: %s", strerror(errno));
        if (n <= 0) break;
        len += (size_t)n;
    }
    close(fd);
    if (st) {
        free(buf);
        return st;
    }
    buf[len] = '\0';
    char *eoh = strstr(buf, "\r\n\r\n");
    if (strncmp(buf, "HTTP/1.", 7) != 0 || !eoh || sscanf(buf + 8, " %d", status) != 1) {
        free(buf);
        return qac_set_error(QAC_ERR_FORMAT, "the server sent no valid HTTP response");
    }
    *eoh = '\0';
    const char *body_start = eoh + 4;
    size_t body_len = len - (size_t)(body_start - buf);
    for (char *h = strstr(buf, "\r\n"); h; h = strstr(h + 2, "\r\n")) {
        if (!strncasecmp(h + 2, "Content-Length:", 15)) {
            size_t cl = strtoull(h + 17, NULL, 10);
            if (cl < body_len) body_len = cl;
            else if (cl > body_len) {
                free(buf);
                return qac_set_error(QAC_ERR_IO, "the server closed the connection mid-response");
            }
        }
        if (!strncasecmp(h + 2, "Transfer-Encoding:", 18) && strstr(h + 20, "chunked")) {
            free(buf);
            return qac_set_error(QAC_ERR_UNSUPPORTED, "chunked responses are not supported");
        }
    }
    *body = malloc(body_len + 1);
    if (!*body) {
        free(buf);
        return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    }
    memcpy(*body, body_start, body_len);
    (*body)[body_len] = '\0';
    free(buf);
    return QAC_OK;
}

/* Call and parse a JSON body; non-2xx becomes an error with the server's message. */
static qac_status call_json(const remote *r, const char *method, const char *path, const char *req, json_t **out) {
    int status = 0;
    char *body = NULL;
    qac_status st = http_call(r, method, path, req, &status, &body);
    if (st) return st;
    json_error_t e;
    json_t *o = json_loads(body, 0, &e);
    free(body);
    /* the URL as requested: a server behind a path prefix is named with it */
    char where[1024];
    snprintf(where, sizeof where, "%s http://%s%s%s:%s%s%s", method, strchr(r->host, ':') ? "[" : "", r->host,
             strchr(r->host, ':') ? "]" : "", r->port, r->prefix, path);
    if (status / 100 != 2) {
        const char *msg = json_string_value(json_object_get(json_object_get(o, "error"), "message"));
        /* a 404 under a path: most likely the path does not belong in --server */
        char hint[1400] = "";
        if (status == 404 && r->prefix[0])
            snprintf(hint, sizeof hint,
                     " (--server takes the server's root URL, http://%s%s%s:%s: drop '%s' unless a proxy serves "
                     "qac under it)", strchr(r->host, ':') ? "[" : "", r->host, strchr(r->host, ':') ? "]" : "",
                     r->port, r->prefix);
        else if (status == 404 && !msg)
            snprintf(hint, sizeof hint, " (is this a qac server?)");
        st = qac_set_error(QAC_ERR_IO, "%s: HTTP %d%s%s%s", where, status, msg ? ": " : "", msg ? msg : "", hint);
        json_decref(o);
        return st;
    }
    if (!o) return qac_set_error(QAC_ERR_FORMAT, "%s: the server sent malformed JSON: %s", where, e.text);
    *out = o;
    return QAC_OK;
}

static qac_status run_batch(const remote *r, char **qids, json_t *queries, const char *mode, int k,
                            int rerank_depth, const char *run_id, FILE *out, uint64_t *written) {
    json_t *req = json_pack("{s:O,s:i}", "queries", queries, "k", k);
    if (req && mode) json_object_set_new(req, "mode", json_string(mode));
    if (req && rerank_depth > 0) {
        json_object_set_new(req, "rerank", json_true());
        json_object_set_new(req, "rerank_depth", json_integer(rerank_depth));
    }
    char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (!body) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    json_t *resp = NULL;
    qac_status st = call_json(r, "POST", "/search", body, &resp);
    free(body);
    if (st) return st;
    json_t *results = json_object_get(resp, "results");
    size_t nq = json_array_size(queries);
    if (!json_is_array(results) || json_array_size(results) != nq) {
        json_decref(resp);
        return qac_set_error(QAC_ERR_FORMAT, "/search: expected %zu result lists", nq);
    }
    qac_hit *hits = malloc(((size_t)k + 1) * sizeof *hits);
    if (!hits) st = qac_set_error(QAC_ERR_NOMEM, "out of memory");
    for (size_t q = 0; q < nq && !st; q++) {
        json_t *list = json_array_get(results, q);
        size_t n = json_array_size(list);
        if (n > (size_t)k) n = (size_t)k;
        for (size_t i = 0; i < n && !st; i++) {
            json_t *h = json_array_get(list, i);
            const char *d = json_string_value(json_object_get(h, "docid"));
            json_t *sc = json_object_get(h, "score");
            if (!d || !json_is_number(sc)) st = qac_set_error(QAC_ERR_FORMAT, "/search: malformed hit");
            else hits[i] = (qac_hit){d, json_number_value(sc), -1};
        }
        if (st) break;
        st = qac_cli_write_hits(out, qids[q], hits, (int)n, run_id);
        *written += n;
    }
    free(hits);
    json_decref(resp);
    return st;
}

/* The server's reranker is the model in dir (by fingerprint), or an error
 * naming both. */
static qac_status check_reranker(json_t *info, const char *url, const char *dir) {
    json_t *rr = json_object_get(info, "reranker");
    const char *fp = json_string_value(json_object_get(rr, "fingerprint"));
    const char *id = json_string_value(json_object_get(rr, "id"));
    if (!fp)
        return qac_set_error(QAC_ERR_INVALID, "--rerank: the server at %s has no reranker (start it with --reranker "
                                              "DIR)", url);
    qac_xenc *x = NULL;
    qac_status st = qac_xenc_load(&x, dir);
    if (st) return strstr(qac_last_error(), dir) ? st : qac_wrap_error(st, "--rerank %s", dir);
    if (strcmp(x->fingerprint, fp))
        st = qac_set_error(QAC_ERR_MISMATCH, "--rerank %s (fingerprint %s) is not the server's reranker %s "
                                             "(fingerprint %s): give the directory the server was started with",
                           dir, x->fingerprint, id ? id : "", fp);
    qac_xenc_free(x);
    return st;
}

int qac_cli_search_remote(const char *url, const char *api_key, const char *queries_path, qac_text_format fmt,
                          const char *mode, int k, const char *run_id, int max_len, const char *rerank,
                          int rerank_depth, FILE *out) {
    remote r;
    memset(&r, 0, sizeof r);
    r.api_key = api_key && *api_key ? api_key : NULL;
    qac_reader *rd = NULL;
    json_t *info = NULL, *batch = NULL;
    char *qids[REMOTE_BATCH] = {0};
    int nb = 0, rc = 1;
    uint64_t done = 0, hits = 0;
    qac_progress_state ps;
    qac_progress_init(&ps, "queries");
    double t0 = qac_now();
    if (parse_url(&r, url)) goto fail;
    if (qac_reader_open(&rd, queries_path, QAC_READ_QUERIES, fmt)) goto fail;
    /* the server's limits decide the batch size and whether k is allowed */
    if (call_json(&r, "GET", "/info", NULL, &info)) goto fail;
    json_t *limits = json_object_get(info, "limits");
    int max_texts = (int)json_integer_value(json_object_get(limits, "max_texts"));
    int max_k = (int)json_integer_value(json_object_get(limits, "max_k"));
    int server_len = (int)json_integer_value(json_object_get(limits, "query_max_len"));
    /* the server embeds queries at its own length: never let --max-len look applied */
    if (max_len > 0 && server_len > 0 && max_len != server_len)
        fprintf(stderr,
                "qac search: note: --max-len %d is for offline searches; the server cuts queries at %d tokens (its "
                "--query-max-len)\n",
                max_len, server_len);
    int per_call = max_texts > 0 && max_texts < REMOTE_BATCH ? max_texts : REMOTE_BATCH;
    if (!rerank) rerank_depth = 0;
    else if (k > rerank_depth) k = rerank_depth; /* the reranked top min(k, depth), as offline */
    if (max_k > 0 && (k > max_k || rerank_depth > max_k)) {
        qac_set_error(QAC_ERR_INVALID, "%s %d is larger than the server's max_k %d (start it with --max-k)",
                      k > max_k ? "k" : "--rerank-depth", k > max_k ? k : rerank_depth, max_k);
        goto fail;
    }
    if (rerank && check_reranker(info, url, rerank)) goto fail;
    batch = json_array();
    if (!batch) goto fail;
    for (int eof = 0; !eof;) {
        qac_record rec;
        int got = 0;
        if (qac_reader_next(rd, &rec, &got)) goto fail;
        if (got) {
            qids[nb] = strdup(rec.id);
            json_t *s = json_stringn(rec.text, rec.text_len);
            if (!qids[nb] || !s || json_array_append_new(batch, s)) {
                qac_set_error(QAC_ERR_NOMEM, "out of memory (or query %s is not valid UTF-8)", rec.id);
                nb++;
                goto fail;
            }
            nb++;
        } else eof = 1;
        if (nb == per_call || (eof && nb)) {
            if (run_batch(&r, qids, batch, mode, k, rerank_depth, run_id, out, &hits)) goto fail;
            done += (uint64_t)nb;
            qac_progress_stderr(&ps, "search", done, 0);
            for (int i = 0; i < nb; i++) {
                free(qids[i]);
                qids[i] = NULL;
            }
            nb = 0;
            json_array_clear(batch);
        }
    }
    qac_progress_stderr(&ps, "search", done, done);
    double dt = qac_now() - t0;
    qac_summary("search", "%llu queries, %llu hits in %.1f s (%.1f queries/s) from %s", (unsigned long long)done,
                (unsigned long long)hits, dt, dt > 0 ? (double)done / dt : 0.0, url);
    rc = 0;
fail:
    if (rc) rc = qac_cli_fail("search");
    for (int i = 0; i < nb; i++) free(qids[i]);
    json_decref(batch);
    json_decref(info);
    qac_reader_free(rd);
    return rc;
}
