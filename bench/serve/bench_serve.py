"""Benchmark `qac serve` against reference Python services (FastAPI +
uvicorn + sentence-transformers + faiss-cpu) on the same machine, model and
index vectors, in the same run: "reference" encodes each request alone
(kept for history), "batched" batches concurrent requests (2 ms wait, one
encode and one FAISS search per batch), as a deployment would. The ratios
are against the better reference at each concurrency.

  1. synthetic passages: 2-4 random Cranfield sentences each (seeded)
  2. `qac index build` (Flat) over them; the reference loads the same
     index.faiss with faiss-cpu
  3. wrk with a Lua POST body script: concurrency 1 (single-query p50/p99),
     8 and 32, for each service
  4. a table and the qac/reference ratios

Single command (from the repository root, after a Release build):
  .venv/bin/python3 bench/serve/bench_serve.py --qac build/qac --passages 100000 --duration 30
Small smoke run:
  .venv/bin/python3 bench/serve/bench_serve.py --qac build/qac --passages 2000 --duration 5
"""
import argparse
import json
import os
import platform
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cranfield_sentences(path):
    text, keep = [], False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("."):
                keep = line.startswith(".W")
                continue
            if keep:
                text.append(line.strip())
    sents = [s.strip() for s in " ".join(text).split(" . ")]
    return [s for s in sents if len(s.split()) >= 4]


def cranfield_queries(path):
    qs, cur = [], None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith(".I"):
                if cur:
                    qs.append(" ".join(cur))
                cur = None
            elif line.startswith(".W"):
                cur = []
            elif cur is not None:
                cur.append(line.strip())
    if cur:
        qs.append(" ".join(cur))
    return qs


def wait_health(base, proc, timeout=600):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"{base}: the service exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"{base}: not healthy after {timeout} s")


def run_wrk(base, conns, duration, lua, env):
    threads = max(1, min(conns, os.cpu_count() or 1, 4))
    r = subprocess.run(["wrk", "-t", str(threads), "-c", str(conns), "-d", f"{duration}s", "--timeout", "30s",
                        "-s", lua, base], capture_output=True, text=True, env=env)
    out = r.stdout
    m_lat = re.search(r"LATENCY p50=([\d.]+) p90=([\d.]+) p99=([\d.]+) mean=([\d.]+)", out)
    m_tp = re.search(r"THROUGHPUT ([\d.]+)", out)
    m_st = re.search(r"STATUS non2xx=(\d+) connect=(\d+) read=(\d+) write=(\d+) timeout=(\d+)", out)
    if not (m_lat and m_tp and m_st):
        raise RuntimeError(f"wrk output not understood:\n{out}\n{r.stderr}")
    errors = sum(int(x) for x in m_st.groups())
    return {"p50_ms": float(m_lat.group(1)), "p99_ms": float(m_lat.group(3)), "rps": float(m_tp.group(1)),
            "errors": errors}


def stop(proc):
    if proc and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qac", default=os.path.join(ROOT, "build", "qac"))
    ap.add_argument("--passages", type=int, default=100000)
    ap.add_argument("--duration", type=int, default=30, help="seconds per wrk run")
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--model", default=None, help="model directory (default: qac's default model)")
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "cranfield"),
                    help="Cranfield directory (cran.all.1400, cran.qry)")
    ap.add_argument("--work", default=None, help="keep the corpus and index here (reused when present)")
    ap.add_argument("--threads", type=int, default=0, help="qac encoder threads (0: all cores)")
    a = ap.parse_args()
    if not shutil.which("wrk"):
        sys.exit("bench: wrk is not installed (scripts/setup.sh --test)")
    model = a.model or os.environ.get("QAC_MODEL") or os.path.join(
            os.environ.get("QAC_HOME", os.path.expanduser("~/.local/share/qac")), "models", "all-MiniLM-L6-v2")
    work = a.work or tempfile.mkdtemp(prefix="qac-bench-serve-")
    os.makedirs(work, exist_ok=True)

    # 1. corpus
    corpus = os.path.join(work, f"passages-{a.passages}.tsv")
    docids = os.path.join(work, f"docids-{a.passages}.txt")
    if not os.path.exists(corpus):
        sents = cranfield_sentences(os.path.join(a.data, "cran.all.1400"))
        rnd = random.Random(13)
        with open(corpus + ".tmp", "w", encoding="utf-8") as f, open(docids, "w", encoding="utf-8") as d:
            for i in range(a.passages):
                f.write(f"p{i}\t{' . '.join(rnd.sample(sents, rnd.randint(2, 4)))} .\n")
                d.write(f"p{i}\n")
        os.replace(corpus + ".tmp", corpus)
    queries = cranfield_queries(os.path.join(a.data, "cran.qry"))
    qfile = os.path.join(work, "queries.jsonl")
    with open(qfile, "w", encoding="utf-8") as f:
        for q in queries:
            f.write(json.dumps(q) + "\n")

    # 2. index
    index = os.path.join(work, f"index-{a.passages}")
    t0 = time.time()
    subprocess.run([a.qac, "index", "build", "--corpus", corpus, "--out", index, "--model", model,
                    "--threads", str(a.threads)], check=True)
    print(f"bench: index of {a.passages} passages ready in {time.time() - t0:.0f} s", file=sys.stderr)

    env = dict(os.environ, QAC_BENCH_QUERIES=qfile, QAC_BENCH_K="10", QAC_QUIET="1")
    lua = os.path.join(HERE, "search.lua")
    conc = [int(c) for c in a.concurrency.split(",")]
    results = {}
    services = {
        "qac": [a.qac, "serve", "--index", index, "--model", model, "--threads", str(a.threads)],
        "reference": [sys.executable, os.path.join(HERE, "reference_service.py"), "--model", model, "--index", index,
                      "--docids", docids],
        "batched": [sys.executable, os.path.join(HERE, "reference_batched.py"), "--model", model, "--index", index,
                    "--docids", docids],
    }
    for name, cmd in services.items():
        port = free_port()
        proc = subprocess.Popen(cmd + ["--port", str(port)], stdout=subprocess.DEVNULL, env=env)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_health(base, proc)
            run_wrk(base, 4, 3, lua, env)  # warm-up
            for c in conc:
                results[(name, c)] = r = run_wrk(base, c, a.duration, lua, env)
                print(f"bench: {name:9s} c={c:<3d} {r['rps']:8.1f} req/s  p50 {r['p50_ms']:7.2f} ms  "
                      f"p99 {r['p99_ms']:7.2f} ms  errors {r['errors']}", file=sys.stderr)
        finally:
            stop(proc)

    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"\n### serve: qac vs FastAPI+sentence-transformers+faiss ({time.strftime('%Y-%m-%d')})\n")
    print(f"Machine: {cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}. "
          f"{a.passages} synthetic Cranfield passages, Flat index, all-MiniLM-L6-v2, k=10, "
          f"wrk {a.duration} s per run.\n")
    def best_ref(c):  # the reference with the higher throughput at concurrency c
        return max(("reference", "batched"), key=lambda n: results[(n, c)]["rps"])
    print("| concurrency | qac req/s | unbatched ref req/s | batched ref req/s | ratio vs best ref | qac p50 ms |"
          " best ref p50 ms | qac p99 ms | best ref p99 ms | p99 ratio (ref/qac) | errors qac/unbatched/batched |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for c in conc:
        q, u, b, r = results[("qac", c)], results[("reference", c)], results[("batched", c)], results[(best_ref(c), c)]
        print(f"| {c} | {q['rps']:.1f} | {u['rps']:.1f} | {b['rps']:.1f} | {q['rps'] / max(r['rps'], 1e-9):.2f}x |"
              f" {q['p50_ms']:.2f} | {r['p50_ms']:.2f} | {q['p99_ms']:.2f} | {r['p99_ms']:.2f} |"
              f" {r['p99_ms'] / max(q['p99_ms'], 1e-9):.2f}x | {q['errors']}/{u['errors']}/{b['errors']} |")
    last = max(conc)
    ratio = results[("qac", last)]["rps"] / max(results[(best_ref(last), last)]["rps"], 1e-9)
    print(f"\nthroughput ratio at concurrency {last} against the better reference ({best_ref(last)}): {ratio:.2f}x "
          f"(goal >= 3x); p99 lower for qac at every concurrency: "
          f"{all(results[('qac', c)]['p99_ms'] < results[(best_ref(c), c)]['p99_ms'] for c in conc)}")


if __name__ == "__main__":
    main()
