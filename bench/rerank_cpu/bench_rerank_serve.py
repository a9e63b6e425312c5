#!/usr/bin/env python3
"""Serving rerankers: `qac serve --reranker` (TEI's POST /rerank and the
Cohere-shaped POST /v1/rerank) against infinity-emb's POST /rerank on the
same cross-encoder, in the same run, wrk at concurrency 1 and 32.

The checkpoint is bench_rerank.py's (a reranker qac starts from the default
model: its pooler and a fresh classifier, saved in the layout CrossEncoder
and infinity load). Each request reranks one Cranfield query against DOCS
Cranfield abstracts (seeded sample); the same queries and documents go to
every service, in their own body shapes (TEI: query, texts; Cohere and
infinity: query, documents). Before timing, each service answers the first
4 requests and the scores are compared with qac's (max |diff| printed).
Each server gets 2 threads (qac --threads 2; infinity under
OMP_NUM_THREADS=2 and torch's 2 threads), and the services run one after
another, never side by side.

infinity-emb lives in an environment of its own outside the repository. It
can share the project environment's torch through a .pth file, so that
only infinity, its server's small dependencies and the transformers stack
it was written for are installed in it (infinity 0.0.78 calls the
tokenizer's batch_encode_plus, gone in transformers 5). Versions that were
run:
  python3 -m venv ~/venv-infinity-rr
  .venv/bin/python3 -c 'import site; print(site.getsitepackages()[0])' \\
      > "$(~/venv-infinity-rr/bin/python -c 'import site; print(site.getsitepackages()[0])')/shared.pth"
  ~/venv-infinity-rr/bin/pip install "infinity-emb[server]==0.0.78" transformers==4.57.6 \\
      sentence-transformers==3.4.1 numpy==1.26.4
(or the separate stack of docs/development.md's ~/venv-infinity). Then:
  .venv/bin/python3 bench/rerank_cpu/bench_rerank_serve.py build \\
      --infinity-python ~/venv-infinity-rr/bin/python [--duration 30 --docs 8 --results bench/RESULTS.md]
Without --infinity-python only qac is measured.

--probe: during every wrk run, one more client sends small requests (one
query and one short sentence, under the server's slice of 256 tokens), one
after another, and their latency is reported beside wrk's (probe p50 /
p99): how long a small request waits behind the load. --qac-args passes
options to `qac serve` (e.g. "--slice-tokens 8192" for whole requests
first-come first-served).
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench", "serve"))
sys.path.insert(0, HERE)
from bench_serve import free_port, post_json, run_wrk, stop, wait_health  # noqa: E402
from bench_rerank import cranfield, machine, reranker_dir, update_results  # noqa: E402


class Probe:
    """Small requests sent one after another from a thread until finish():
    their latencies in ms."""

    def __init__(self, base, path, shape, queries, short):
        self.base, self.path, self.shape, self.queries, self.short = base, path, shape, queries, short
        self.ms, self.stopping = [], threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        i = 0
        time.sleep(1.0)  # let the load build up first
        while not self.stopping.is_set():
            q, d = self.queries[i % len(self.queries)], self.short[i % len(self.short)]
            body = {"query": q, "texts": [d]} if self.shape == "tei" else {"query": q, "documents": [d],
                                                                          "model": "bench"}
            t0 = time.perf_counter()
            try:
                post_json(self.base, self.path, body)
                self.ms.append((time.perf_counter() - t0) * 1e3)
            except Exception:
                pass
            i += 1
            self.stopping.wait(0.05)

    def finish(self):
        self.stopping.set()
        self.thread.join()
        ms = np.array(self.ms) if self.ms else np.array([float("nan")])
        return {"n": len(self.ms), "p50": float(np.percentile(ms, 50)), "p99": float(np.percentile(ms, 99))}


def probe_str(pr):
    return f"{pr['n']} small requests, p50 {pr['p50']:.1f} ms, p99 {pr['p99']:.1f} ms"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--infinity-python")
    ap.add_argument("--duration", type=int, default=30, help="seconds per wrk run")
    ap.add_argument("--docs", type=int, default=8, help="documents per request")
    ap.add_argument("--concurrency", default="1,32")
    ap.add_argument("--results", help="replace this benchmark's block in RESULTS.md")
    ap.add_argument("--probe", action="store_true", help="time small requests sent beside the load")
    ap.add_argument("--qac-args", default="", help="more options for qac serve")
    ap.add_argument("--only-qac", action="store_true", help="skip infinity even with --infinity-python")
    ap.add_argument("--block", default="rerank_serve", help="the RESULTS.md block to replace")
    a = ap.parse_args()
    qac = os.path.join(a.build, "qac")
    work = os.path.join(a.build, "bench-rerank")
    os.makedirs(work, exist_ok=True)
    ce_dir = reranker_dir(a.build, work)
    docs, queries = cranfield()
    short = [d.split(".")[0][:120] for d in docs[:50]]  # first sentences: well under 256 tokens with a query
    rs = np.random.RandomState(2)
    reqs = [(queries[i % len(queries)], [docs[j] for j in rs.choice(len(docs), a.docs, replace=False)])
            for i in range(200)]
    files = {}
    for shape in ("tei", "cohere"):
        files[shape] = os.path.join(work, f"bodies-{shape}.jsonl")
        with open(files[shape], "w") as f:
            for q, ds in reqs:
                body = {"query": q, "texts": ds} if shape == "tei" else {"query": q, "documents": ds,
                                                                         "model": "bench"}
                f.write(json.dumps(body) + "\n")
    env = {**os.environ, "QAC_QUIET": "1"}
    inf_env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1",
               "INFINITY_ANONYMOUS_USAGE_STATS": "0", "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}
    services = [("qac", [qac, "serve", "--reranker", ce_dir, "--threads", "2", "--max-texts", str(max(64, a.docs))] + shlex.split(a.qac_args),
                 env, [("qac /rerank", "/rerank", "tei"), ("qac /v1/rerank", "/v1/rerank", "cohere")])]
    if a.infinity_python and not a.only_qac:
        services.append(("infinity", [a.infinity_python, "-m", "infinity_emb.cli", "v2", "--model-id", ce_dir,
                                      "--engine", "torch", "--device", "cpu", "--host", "127.0.0.1",
                                      "--served-model-name", "bench", "--log-level", "warning"], inf_env,
                         [("infinity /rerank", "/rerank", "cohere")]))
    conc = [int(c) for c in a.concurrency.split(",")]
    results, scores = {}, {}
    for name, cmd, cenv, targets in services:
        port = free_port()
        proc = subprocess.Popen(cmd + ["--port", str(port)], stdout=subprocess.DEVNULL, env=cenv)
        base = f"http://127.0.0.1:{port}"
        try:
            t0 = time.time()
            wait_health(base, proc)
            print(f"{name}: healthy after {time.time() - t0:.0f} s", flush=True)
            got = []
            for q, ds in reqs[:4]:
                r = post_json(base, "/rerank" if name != "qac" else "/v1/rerank",
                              {"query": q, "documents": ds, "model": "bench"})
                by = sorted(r["results"], key=lambda x: x["index"])
                got.append([x["relevance_score"] for x in by])
            scores[name] = np.array(got)
            for label, path, shape in targets:
                tenv = {**os.environ, "QAC_BENCH_BODIES": files[shape], "QAC_BENCH_PATH": path}
                run_wrk(base, 4, 3, os.path.join(HERE, "rerank.lua"), tenv)  # warm-up
                for c in conc:
                    probe = Probe(base, path, shape, queries, short) if a.probe else None
                    results[(label, c)] = r = run_wrk(base, c, a.duration, os.path.join(HERE, "rerank.lua"), tenv)
                    if probe:
                        r["probe"] = probe.finish()
                    print(f"{label} c={c}: {r['rps']:.2f} req/s, p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, "
                          f"errors {r['errors']}" + (f"; probe {probe_str(r['probe'])}" if probe else ""), flush=True)
        finally:
            stop(proc)
    lines = [f"{machine()}, {time.strftime('%Y-%m-%d')}: each request one Cranfield query and {a.docs} abstracts "
             f"({a.docs} pairs), wrk {a.duration} s per run, 2 threads per server, one server at a time"
             + (f", qac serve {a.qac_args}" if a.qac_args else "") + ".", ""]
    if a.probe:
        lines += ["Probe: one more client sending small requests (a query and one short sentence) one after "
                  "another during each run; its latency beside wrk's.", "",
                  "| service | concurrency | req/s | pairs/s | p50 ms | p99 ms | errors | probe n | probe p50 ms | "
                  "probe p99 ms |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    else:
        lines += ["| service | concurrency | req/s | pairs/s | p50 ms | p99 ms | errors |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
    for (label, c), r in results.items():
        row = (f"| {label} | {c} | {r['rps']:.2f} | {r['rps'] * a.docs:.1f} | {r['p50_ms']:.1f} | "
               f"{r['p99_ms']:.1f} | {r['errors']} |")
        if a.probe:
            pr = r["probe"]
            row += f" {pr['n']} | {pr['p50']:.1f} | {pr['p99']:.1f} |"
        lines.append(row)
    if "infinity" in scores:
        lines.append("")
        for c in conc:
            q, i = results.get(("qac /rerank", c)), results.get(("infinity /rerank", c))
            if q and i and i["rps"] > 0:
                lines.append(f"- concurrency {c}: qac /rerank {q['rps'] / i['rps']:.2f}x infinity's req/s, p99 "
                             f"{q['p99_ms']:.1f} against {i['p99_ms']:.1f} ms")
        d = float(np.max(np.abs(scores["qac"] - scores["infinity"])))
        lines.append(f"- scores of the first 4 requests: max |qac - infinity| {d:.2e}")
    text = "\n".join(lines)
    print(text)
    if a.results:
        update_results(a.results, a.block, text)


if __name__ == "__main__":
    main()
