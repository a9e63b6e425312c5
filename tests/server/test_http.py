"""`qac serve` end to end: every endpoint and every error path over real
HTTP, responses validated against api/openapi.yaml, schemathesis over the
contract, auth, limits, config precedence, start-up failures, SIGTERM
drain, and `qac search --server` giving the same run as offline search."""
import base64
import concurrent.futures as cf
import filecmp
import os
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from srvlib import (CRAN_QUERIES, QAC, SOURCE, Contract, Server, build_indexes, check, finish, http,  # noqa: E402
                    metric, wait_until, workdir)

# Readiness is polled, never assumed after a fixed sleep: on a loaded
# machine (a parallel ctest, other jobs) a client thread or the server may
# not run for seconds.
DEADLINE = 300

C = Contract()


def call(base, method, path, body=None, **kw):
    status, hdrs, payload = http(base, method, path, body, **kw)
    if isinstance(payload, (dict, list)):
        C.validate(method, path, status, payload)
    return status, hdrs, payload


def still_serving(base, what):
    s, _, b = call(base, "GET", "/health")
    check(s == 200 and b == {"status": "ok"}, f"after {what}: /health answered {s} {b}")


def expect_error(base, method, path, body, status, etype, raw=None, headers=None):
    s, hdrs, b = call(base, method, path, body, raw=raw, headers=headers)
    ok = check(s == status, f"{method} {path} {str(body or raw)[:60]!r}: status {s}, want {status} ({b})")
    if ok:
        check(isinstance(b, dict) and b.get("error", {}).get("type") == etype and b["error"]["code"] == status,
              f"{method} {path}: error body {b}, want type {etype}")
    still_serving(base, f"{method} {path} -> {status}")
    return hdrs, b


def test_endpoints(base):
    s, _, info = call(base, "GET", "/info")
    check(s == 200 and info["model"]["dim"] == 384 and info["index"]["size"] == 60, f"/info {info}")
    check(set(info["modes"]) == {"dense", "bm25", "hybrid"}, f"modes {info['modes']}")

    s, _, page = call(base, "GET", "/")
    check(s == 200 and "<form" in page, "GET / serves the page")

    texts = ["what similarity laws must be obeyed when constructing aeroelastic models", "shock waves"]
    s, _, enc = call(base, "POST", "/encode", {"texts": texts, "kind": "query"})
    check(s == 200 and enc["dim"] == 384 and len(enc["embeddings"]) == 2, f"/encode {s}")
    norms = [sum(x * x for x in v) ** 0.5 for v in enc["embeddings"]]
    check(all(abs(n - 1) < 1e-4 for n in norms), f"/encode vectors are normalised: {norms}")
    s, _, enc64 = call(base, "POST", "/encode", {"texts": texts, "kind": "query", "encoding": "base64"})
    dec = [list(struct.unpack("<384f", base64.b64decode(v))) for v in enc64["embeddings"]]
    same = all(struct.pack("<f", a) == struct.pack("<f", b) for u, w in zip(dec, enc["embeddings"]) for a, b in zip(u, w))
    check(same, "base64 embeddings decode to the float ones, bit for bit")

    s, _, oa = call(base, "POST", "/v1/embeddings", {"input": texts[1], "model": "anything"})
    check(s == 200 and oa["object"] == "list" and oa["data"][0]["index"] == 0 and oa["usage"]["prompt_tokens"] > 0,
          f"/v1/embeddings {oa if s != 200 else ''}")
    s, _, oa64 = call(base, "POST", "/v1/embeddings", {"input": texts, "encoding_format": "base64"})
    check(s == 200 and len(oa64["data"]) == 2 and isinstance(oa64["data"][1]["embedding"], str), "base64 embeddings")

    s, _, tok = call(base, "POST", "/tokenize", {"text": "Shock waves!"})
    check(s == 200 and tok["tokens"][0][0] == "[CLS]" and tok["tokens"][0][-1] == "[SEP]" and
          "shock" in tok["tokens"][0], f"/tokenize {tok}")

    s, _, res = call(base, "POST", "/search", {"query": texts[0], "k": 5, "return_text": True})
    hits = res["results"][0] if s == 200 else []
    check(s == 200 and len(hits) == 5 and [h["rank"] for h in hits] == [1, 2, 3, 4, 5], f"/search {s}")
    check(all(h["text"] for h in hits), "return_text gives the passages")
    check(all(hits[i]["score"] >= hits[i + 1]["score"] for i in range(4)), "scores descend")
    for mode in ("bm25", "hybrid"):
        s, _, r = call(base, "POST", "/search", {"queries": texts, "k": 3, "mode": mode, "return_text": True})
        check(s == 200 and len(r["results"]) == 2 and all(len(x) == 3 for x in r["results"]), f"mode {mode}: {s}")
        check(r["mode"] == mode and all("text" in h for x in r["results"] for h in x), f"mode {mode} text")

    s, hdrs, metrics = call(base, "GET", "/metrics")
    check(s == 200 and hdrs["Content-Type"].startswith("text/plain"), "/metrics is text")
    for needle in ('qac_http_requests_total{route="/search",code="200"}', "qac_http_request_duration_seconds_bucket",
                   "qac_batch_size_bucket", "qac_queue_depth"):
        check(needle in metrics, f"/metrics has {needle}")


def test_errors(base):
    expect_error(base, "POST", "/search", None, 400, "invalid_request", raw=b'{"query": "x"')
    expect_error(base, "POST", "/encode", None, 400, "invalid_request", raw=b'{"texts": ["caf\xc3"]}')
    expect_error(base, "POST", "/encode", None, 400, "invalid_request", raw=b"")
    expect_error(base, "GET", "/nowhere", None, 404, "not_found")
    hdrs, _ = expect_error(base, "GET", "/search", None, 405, "method_not_allowed")
    check(hdrs.get("Allow") == "POST", f"405 Allow header: {hdrs.get('Allow')}")
    hdrs, _ = expect_error(base, "POST", "/health", {}, 405, "method_not_allowed")
    check("GET" in (hdrs.get("Allow") or ""), "405 on /health allows GET")
    expect_error(base, "POST", "/encode", {"texts": ["x"] * 9}, 413, "payload_too_large")  # --max-texts 8
    expect_error(base, "POST", "/encode", None, 413, "payload_too_large", raw=b'{"texts":["' + b"a" * 70000 + b'"]}')
    for body in ({"query": "x", "k": 0}, {"query": "x", "k": 51}, {"query": "x", "k": 2.5}, {"query": ""},
                 {"queries": []}, {"queries": ["ok", ""]}, {"query": "x", "mode": "sparse"}, {"k": 3},
                 {"query": 5}, {"query": "x", "return_text": "yes"}):
        expect_error(base, "POST", "/search", body, 422, "validation_error")
    for body in ({"texts": []}, {"texts": "x"}, {"texts": ["x"], "kind": "doc"}, {"texts": ["x"], "encoding": "hex"}):
        expect_error(base, "POST", "/encode", body, 422, "validation_error")
    expect_error(base, "POST", "/v1/embeddings", {"input": [[101, 99999999, 102]]}, 422, "validation_error")  # past the vocabulary
    expect_error(base, "POST", "/v1/embeddings", {"input": [[101, 102], "mixed"]}, 422, "validation_error")
    expect_error(base, "POST", "/tokenize", {"texts": [None]}, 422, "validation_error")
    # raw socket: a body larger than the limit is refused even without Content-Length honesty
    with socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1]))) as sk:
        big = b'{"texts":["' + b"b" * 100000 + b'"]}'
        sk.sendall(b"POST /encode HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                   b"Connection: close\r\n\r\n" + f"{len(big):x}\r\n".encode() + big + b"\r\n0\r\n\r\n")
        resp = b""
        while chunk := sk.recv(65536):
            resp += chunk
    check(resp.startswith(b"HTTP/1.1 413"), f"chunked oversized body: {resp[:40]!r}")
    still_serving(base, "chunked 413")


def test_encode_only_and_truncate(ix_unused):
    srv = Server("--truncate", "false", "--passage-max-len", "16", "--query-max-len", "8")
    try:
        b = srv.base
        s, _, info = call(b, "GET", "/info")
        check("index" not in info and info["modes"] == [], "encode-only /info has no index")
        # a server without an index will never have one: 422, not a retryable 503
        hdrs, body = expect_error(b, "POST", "/search", {"query": "x"}, 422, "validation_error")
        check("--index" in body["error"]["message"] and "Retry-After" not in hdrs, f"clear message: {body}")
        expect_error(b, "POST", "/search", {"query": "x", "mode": "bm25"}, 422, "validation_error")
        expect_error(b, "POST", "/encode", {"texts": ["one two three four five six seven eight nine ten eleven twelve "
                                                      "thirteen fourteen fifteen sixteen"]}, 413, "payload_too_large")
        s, _, _ = call(b, "POST", "/encode", {"texts": ["short text"]})
        check(s == 200, "a short text still encodes with truncation off")
        check(srv.stop() == 0, "encode-only server exits 0 on SIGTERM")
    finally:
        srv.stop()


def test_auth(ix):
    srv = Server("--index", ix, "--api-key", "t0ken")
    try:
        b = srv.base
        s, _, _ = call(b, "GET", "/health")
        check(s == 200, "/health is public")
        s, _, _ = http(b, "GET", "/")
        check(s == 200, "the page is public")
        hdrs, _ = expect_error(b, "POST", "/search", {"query": "x"}, 401, "unauthorized")
        check(hdrs.get("WWW-Authenticate") == "Bearer", "401 has WWW-Authenticate")
        expect_error(b, "GET", "/metrics", None, 401, "unauthorized", headers={"Authorization": "Bearer nope"})
        s, _, _ = call(b, "POST", "/search", {"query": "x"}, headers={"Authorization": "Bearer t0ken"})
        check(s == 200, "the right key works")
    finally:
        srv.stop()


def burst(base, blocker, body, n):
    """A long request, then, once the server has its head (in flight), n
    short ones at once: the long one still holds its slot or the encoder
    when they arrive, however slowly this machine runs. Results in order:
    the long request's first."""
    with cf.ThreadPoolExecutor(n + 1) as ex:
        first = ex.submit(call, base, "POST", "/encode", blocker, timeout=DEADLINE)
        # inflight counts the probe itself
        check(wait_until(lambda: first.done() or (metric(base, "qac_inflight_requests") or 0) >= 2, DEADLINE),
              "the long request reached the server")
        start = threading.Barrier(n)

        def one(_):
            start.wait()
            return call(base, "POST", "/encode", body, timeout=DEADLINE)

        rest = list(ex.map(one, range(n)))
        return [first.result()] + rest


def test_overload(ix):
    # one request in flight at most: concurrent ones get 429
    srv = Server("--index", ix, "--max-concurrent", "1")
    try:
        body = {"texts": ["the boundary layer of a flat plate in hypersonic flow " * 8] * 16}
        codes = [r[0] for r in burst(srv.base, {"texts": body["texts"] * 4}, body, 7)]
        check(429 in codes and 200 in codes and set(codes) <= {200, 429}, f"max-concurrent 1: {codes}")
        still_serving(srv.base, "429s")
    finally:
        srv.stop()
    # encode queue of one job and batches of one job: a burst gets 503 (no
    # queue deadline, so that every 503 is the full queue's)
    srv = Server("--index", ix, "--queue-size", "1", "--max-batch-tokens", "8", "--max-wait-ms", "0",
                 "--timeout-ms", "0")
    try:
        body = {"texts": ["aeroelastic models of wings at supersonic speeds " * 8] * 8}
        res = burst(srv.base, {"texts": body["texts"] * 4}, body, 7)
        codes = [r[0] for r in res]
        check(503 in codes and 200 in codes and set(codes) <= {200, 503}, f"queue-size 1: {codes}")
        full = [r for r in res if r[0] == 503]
        if full:
            check(full[0][2]["error"]["type"] == "overloaded" and full[0][1].get("Retry-After") == "1",
                  f"503 body and Retry-After: {full[0][2]}")
        still_serving(srv.base, "503s")
    finally:
        srv.stop()


def test_config_sources(ix, d):
    conf = os.path.join(d, "serve.conf")
    with open(conf, "w") as f:
        f.write("# server settings\nmax-k = 5\nmax-texts = 7\nqueue-size = 33\n")
    srv = Server("--index", ix, "--config", conf, "--max-texts", "6", env={"QAC_MAX_K": "9", "QAC_TIMEOUT_MS": "1234"})
    try:
        _, _, info = call(srv.base, "GET", "/info")
        lim = info["limits"]
        check(lim["max_k"] == 9 and lim["max_texts"] == 6 and lim["queue_size"] == 33 and lim["timeout_ms"] == 1234,
              f"flags > env > config file > default: {lim}")
    finally:
        srv.stop()
    r = subprocess.run([QAC, "serve", "--max-k", "0"], capture_output=True, text=True)
    check(r.returncode == 2 and "max-k" in r.stderr, f"bad flag value: rc {r.returncode} {r.stderr!r}")


def test_startup_failures(ix, d):
    def fails(args, needle, what):
        r = subprocess.run([QAC, "serve", "--port", "0", *args], capture_output=True, text=True, timeout=120)
        check(r.returncode != 0 and needle in r.stderr, f"{what}: rc {r.returncode}, stderr {r.stderr.strip()!r}")

    fails(["--index", os.path.join(d, "missing")], "missing", "missing index")
    broken = os.path.join(d, "broken")
    subprocess.run(["cp", "-r", ix, broken], check=True)
    faiss_file = [f for f in os.listdir(broken) if f.endswith(".faiss")]
    victim = os.path.join(broken, faiss_file[0] if faiss_file else "manifest.json")
    with open(victim, "r+b") as f:
        f.truncate(max(1, os.path.getsize(victim) // 3))
    fails(["--index", broken], "broken", "truncated index")
    fails(["--index", ix, "--model", os.path.join(d, "nomodel")], "nomodel", "missing model")
    fails(["--index", ix, "--bm25", os.path.join(d, "nobm25")], "nobm25", "missing BM25 index")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = subprocess.run([QAC, "serve", "--port", str(port)], capture_output=True, text=True, timeout=120)
        check(r.returncode != 0 and "listen" in r.stderr, f"port in use: rc {r.returncode} {r.stderr!r}")


def test_drain(ix):
    # the deadlines are the drain's and the queue's own tests' (test_hostile):
    # here every in-flight request must finish, however long that takes
    srv = Server("--index", ix, "--max-wait-ms", "0", "--drain-timeout-ms", str(DEADLINE * 1000), "--timeout-ms", "0")
    body = {"texts": ["slender body theory at transonic speeds and the area rule " * 6] * 24}
    results = []

    def one():
        try:
            results.append(call(srv.base, "POST", "/encode", body, timeout=DEADLINE)[0])
        except OSError as e:
            results.append(repr(e))

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    # all four in flight (the server has their heads; the probe counts itself)
    seen = []
    wait_until(lambda: len(results) == 4 or seen.append(metric(srv.base, "qac_inflight_requests") or 0) or
               seen[-1] >= 5, DEADLINE)
    check(seen and seen[-1] >= 5, f"four requests in flight before SIGTERM (inflight {seen[-1:]}, {results})")
    t0 = time.time()
    rc = srv.stop(timeout=DEADLINE + 60)
    for t in threads:
        t.join()
    check(rc == 0, f"SIGTERM exit code {rc}")
    check(results == [200] * 4, f"in-flight requests finished during the drain: {results}")
    print(f"drain: {len(results)} in-flight requests finished, exit {rc} after {time.time() - t0:.2f} s")


def test_remote_search(ix, d):
    qfile = os.path.join(d, "queries.qry")
    with open(CRAN_QUERIES, encoding="utf-8") as f, open(qfile, "w", encoding="utf-8") as out:
        text = f.read()
        # the first 40 queries
        parts = text.split(".I ")
        out.write(".I " + ".I ".join(parts[1:41]))
    off = os.path.join(d, "offline.run")
    rem = os.path.join(d, "remote.run")
    subprocess.run([QAC, "search", "--index", ix, "--queries", qfile, "--run", off, "--k", "20"], check=True,
                   stderr=subprocess.DEVNULL)
    srv = Server("--index", ix)
    try:
        r = subprocess.run([QAC, "search", "--server", srv.base, "--queries", qfile, "--run", rem, "--k", "20"],
                           capture_output=True, text=True)
        check(r.returncode == 0, f"qac search --server: {r.stderr}")
        same = os.path.exists(rem) and filecmp.cmp(off, rem, shallow=False)
        lines = sum(1 for _ in open(off))
        check(same, "qac search --server writes the same run as offline qac search")
        print(f"remote search: {lines} run lines, identical to offline: {same}")
    finally:
        srv.stop()


def test_schemathesis(base):
    spec = os.path.abspath(os.path.join(SOURCE, "api", "openapi.yaml"))
    st = os.path.join(os.path.dirname(sys.executable), "schemathesis")
    # one worker: with two, Hypothesis describes its lambdas (ast.parse of
    # their source) in two threads at once, which CPython 3.11's AST
    # constructor can fail with "AST constructor recursion depth mismatch"
    # (python/cpython gh-106905): a schemathesis runtime error, no finding
    # about the server, seen on a loaded machine only
    r = subprocess.run([st, "run", spec, "--url", base, "-n", "25", "--seed", "1", "--workers", "1",
                        "--phases", "examples,coverage,fuzzing",
                        "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,"
                        "response_schema_conformance,response_headers_conformance",
                        "--generation-allow-x00", "false", "--request-timeout", "60"],
                       capture_output=True, text=True, timeout=480, cwd=workdir("schemathesis"))
    # its summary; on a failure the findings too (a runtime error says
    # what raised only above the summary)
    tail = "\n".join(r.stdout.strip().splitlines()[-15:]) if r.returncode == 0 else r.stdout[-12000:]
    print("schemathesis:\n" + tail)
    check(r.returncode == 0, "schemathesis found contract violations")
    still_serving(base, "schemathesis")


def timed(fn, *args):
    """Run one part and say how long it took (a slow part on a loaded machine shows here)."""
    t0 = time.time()
    fn(*args)
    print(f"{fn.__name__}: {time.time() - t0:.1f} s", flush=True)


def main():
    d = workdir("http")
    _, ix, bm = build_indexes(d, n_docs=60)
    srv = Server("--index", ix, "--bm25", bm, "--max-texts", "8", "--max-k", "50", "--max-body-bytes", "65536")
    try:
        timed(test_endpoints, srv.base)
        timed(test_errors, srv.base)
        timed(test_schemathesis, srv.base)
        check(srv.proc.poll() is None, "the server survived everything above")
    finally:
        rc = srv.stop()
        check(rc == 0, f"main server exit code {rc}")
    timed(test_encode_only_and_truncate, ix)
    timed(test_auth, ix)
    timed(test_overload, ix)
    timed(test_config_sources, ix, d)
    timed(test_startup_failures, ix, d)
    timed(test_drain, ix)
    timed(test_remote_search, ix, d)
    finish()

if __name__ == "__main__":
    main()
