"""64 clients for 30 s (QAC_SOAK_SECONDS overrides), mixed /search and
/encode against the real server: no errors, every response equal to the
single-request answer for the same input (the same numbers, bit for bit), and
RSS stable between warm-up and the end (no leaks)."""
import http.client
import json
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from srvlib import Server, build_indexes, check, finish, is_sanitized_binary, workdir  # noqa: E402

CLIENTS = 64
SECONDS = float(os.environ.get("QAC_SOAK_SECONDS", "30"))

QUERIES = ["what similarity laws must be obeyed when constructing aeroelastic models",
           "boundary layer transition", "heat transfer to a blunt body", "buckling of cylinders",
           "shock wave interaction", "panel flutter", "slip flow", "pressure distribution on a cone",
           "jet noise", "transonic drag of slender bodies", "laminar separation", "stagnation point"]
PASSAGES = ["the wing flutter of supersonic aircraft", "viscous flow in a channel with porous walls",
            "creep of metals at high temperature", "vibration of rectangular plates under load",
            "unsteady lift on an oscillating airfoil", "wind tunnel wall interference"]


def requests_pool():
    pool = []
    for q in QUERIES:
        pool.append(("/search", {"query": q, "k": 10}))
    for i in range(0, len(QUERIES), 3):
        pool.append(("/search", {"queries": QUERIES[i:i + 3], "k": 5}))
    for p in PASSAGES:
        pool.append(("/encode", {"texts": [p], "kind": "passage"}))
    pool.append(("/encode", {"texts": PASSAGES[:4], "kind": "query"}))
    return pool


class Client:
    def __init__(self, base):
        host, port = base[len("http://"):].split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=120)

    def post(self, path, body):
        self.conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = self.conn.getresponse()
        return r.status, r.read()


def same_answer(path, got, want):
    """Exactly the same numbers: the CPU encoder and the flat scan give a text
    the same bits whatever the requests batched with it."""
    if path == "/encode":
        return got["embeddings"] == want["embeddings"]
    strip = lambda r: [[(h["docid"], h["score"]) for h in q] for q in r["results"]]
    return strip(got) == strip(want)


def main():
    d = workdir("soak")
    _, ix, _ = build_indexes(d, n_docs=60, bm25=False)
    srv = Server("--index", ix)
    try:
        pool = requests_pool()
        # the single-request answers, one at a time
        c = Client(srv.base)
        reference = []
        for path, body in pool:
            s, raw = c.post(path, body)
            check(s == 200, f"reference {path}: {s}")
            reference.append(json.loads(raw))
        stats = {"ok": 0, "errors": 0, "mismatch": 0}
        lock = threading.Lock()
        stop = time.time() + SECONDS
        rss = {}

        def client(seed):
            rnd = random.Random(seed)
            cl = Client(srv.base)
            while time.time() < stop:
                i = rnd.randrange(len(pool))
                path, body = pool[i]
                try:
                    s, raw = cl.post(path, body)
                    good = s == 200
                    same = good and same_answer(path, json.loads(raw), reference[i])
                except Exception as e:  # a dropped connection is an error too
                    print("client error:", e, file=sys.stderr)
                    good = same = False
                    cl = Client(srv.base)
                with lock:
                    stats["ok" if good else "errors"] += 1
                    if good and not same:
                        stats["mismatch"] += 1

        threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
        t0 = time.time()
        for t in threads:
            t.start()
        time.sleep(min(8.0, SECONDS / 3))
        rss["warm"] = srv.rss_kb()
        for t in threads:
            t.join()
        rss["end"] = srv.rss_kb()
        elapsed = time.time() - t0
        total = stats["ok"] + stats["errors"]
        print(f"{CLIENTS} clients, {elapsed:.1f} s: {total} requests ({total / elapsed:.1f}/s), "
              f"{stats['errors']} errors, {stats['mismatch']} answers differing from the single-request ones; "
              f"RSS after warm-up {rss['warm'] / 1024:.1f} MiB, at the end {rss['end'] / 1024:.1f} MiB")
        check(total > CLIENTS, "the clients made progress")
        check(stats["errors"] == 0, f"{stats['errors']} failed requests")
        check(stats["mismatch"] == 0, f"{stats['mismatch']} responses differ from the single-request answers")
        growth = rss["end"] - rss["warm"]
        # ASan's quarantine holds freed memory (up to 256 MiB) on purpose
        allowed = 300 * 1024 if is_sanitized_binary() else max(32 * 1024, rss["warm"] // 10)
        check(growth <= allowed, f"RSS grew by {growth / 1024:.1f} MiB (allowed {allowed / 1024:.0f} MiB)")
        _, raw = Client(srv.base).post("/search", {"query": "x", "k": 1})
        check(srv.proc.poll() is None, "still running")
    finally:
        rc = srv.stop()
        check(rc == 0, f"exit code {rc}")
    finish()


if __name__ == "__main__":
    main()
