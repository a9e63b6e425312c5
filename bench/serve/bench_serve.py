"""Benchmark `qac serve` against reference Python services (FastAPI +
uvicorn + sentence-transformers + faiss-cpu) on the same machine, model and
index vectors, in the same run: "reference" encodes each request alone
(kept for history), "batched" batches concurrent requests (2 ms wait, one
encode and one FAISS search per batch), as a deployment would. The ratios
are against the best reference at each concurrency. With --infinity-python,
a third reference joins: infinity-emb (PyPI, a batching embedding server)
run in-process under FastAPI with faiss-cpu (reference_infinity.py says why
that form), and an embedding-only comparison follows: qac's /encode (and
/v1/embeddings) against the stock `infinity_emb v2` server's /embeddings at
--encode-concurrency (1 and 32), one query per request. Before timing, each
service answers the first 8 Cranfield queries: the top-10 docids are
compared with qac's, and qac's embeddings with infinity's (cosine).

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

infinity-emb lives in an environment of its own, outside the repository
(it pins numpy<2, sentence-transformers<4, uvicorn<0.33; torch from PyPI is
the CUDA build, which runs on the CPU too). Versions that were run:
  python3 -m venv ~/venv-infinity
  ~/venv-infinity/bin/pip install "infinity-emb[torch,server]==0.0.78" faiss-cpu==1.15.1 torch==2.15.0 \
      sentence-transformers==3.4.1 transformers==4.57.6 numpy==1.26.4 uvicorn==0.32.1 fastapi==0.165.0
It runs offline on the local model directory (bench_serve.py sets
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 DO_NOT_TRACK=1 for it); its
embeddings equal sentence-transformers' bit for bit on this model. Then:
  .venv/bin/python3 bench/serve/bench_serve.py --qac build/qac --passages 100000 --duration 30 \
      --infinity-python ~/venv-infinity/bin/python
Its start (imports, model load, warm-up) takes tens of seconds on a quiet
machine, minutes on a loaded one; the services get 900 s to answer /health.

--dtype bf16 runs qac's encoder in its bf16 mode (`qac serve --dtype bf16`)
and the FastAPI references under torch.autocast("cpu", dtype=torch.bfloat16),
so both sides trade the same precision; the index stays fp32. With
--qac-factory SQbf16, qac searches its own index of bf16 corpus vectors
(built by its encoder in --dtype: with bf16, qac's whole bf16 mode), while
the references keep faiss-cpu's fp32 Flat search. Whether bf16 pays depends
on the CPU (bench/RESULTS.md, cpu_peak: the `vdpbf16ps` rate).

--dtype int8 runs `qac serve --dtype int8` (the FastAPI PyTorch references
stay fp32: PyTorch has no int8 path a user would pick), --also-qac-dtype
bf16 adds `qac serve --dtype bf16` as a second qac service, and with
--ref-python PY --ref-int8 onnx|openvino a batching reference encodes
through sentence-transformers' ONNX Runtime (dynamic int8, avx512_vnni) or
OpenVINO (static int8) model: the exports bench/encode_int8/run.py keeps in
--ref-cache. PY is that benchmark's environment with fastapi, uvicorn and
faiss-cpu added:
  ~/venv-cpubench/bin/pip install fastapi uvicorn faiss-cpu
  .venv/bin/python3 bench/serve/bench_serve.py --qac build/qac --passages 100000 --duration 30 --dtype int8 \
      --also-qac-dtype bf16 --ref-python ~/venv-cpubench/bin/python --ref-int8 openvino
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


def synthetic_passages(data, n):
    """(pid, text) of n passages of 2-4 random Cranfield sentences, seeded:
    every benchmark that builds them gets the same corpus."""
    sents = cranfield_sentences(os.path.join(data, "cran.all.1400"))
    rnd = random.Random(13)
    return ((f"p{i}", " . ".join(rnd.sample(sents, rnd.randint(2, 4))) + " .") for i in range(n))


def wait_health(base, proc, timeout=900):
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


def post_json(base, path, body):
    req = urllib.request.Request(base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def ratio_str(num, den):  # "n/a" when a run completed no request (a loaded machine, a short run)
    return f"{num / den:.2f}x" if num > 0 and den > 0 else "n/a"


def stop(proc):
    if proc and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


def shared_data(build):
    """The data folder as the project's build finds it (scripts/data.sh)."""
    if os.environ.get("QAC_SHARED_DATA"):
        return os.environ["QAC_SHARED_DATA"]
    try:
        for line in open(os.path.join(build, "CMakeCache.txt")):
            if line.startswith("QAC_SHARED_DATA:"):
                return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return os.path.join(ROOT, "..", "shared", "data")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qac", default=os.path.join(ROOT, "build", "qac"))
    ap.add_argument("--passages", type=int, default=100000)
    ap.add_argument("--duration", type=int, default=30, help="seconds per wrk run")
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--model", default=None, help="model directory (default: qac's default model)")
    ap.add_argument("--data", default=None,
                    help="Cranfield directory (cran.all.1400, cran.qry); default: cranfield/ under $QAC_SHARED_DATA, "
                    "the build's QAC_SHARED_DATA, or ../shared/data beside the clone")
    ap.add_argument("--work", default=None, help="keep the corpus and index here (reused when present)")
    ap.add_argument("--threads", type=int, default=0, help="qac encoder threads (0: all cores)")
    ap.add_argument("--infinity-python", default=None,
                    help="python of a separate environment with infinity-emb and faiss-cpu (see above); "
                         "absent: the infinity reference and the embedding comparison are skipped")
    ap.add_argument("--dtype", choices=("fp32", "bf16", "int8"), default="fp32",
                    help="encoder precision of qac (--dtype) and of the FastAPI references (bf16: torch.autocast); "
                         "the index stays fp32 unless --qac-factory says otherwise")
    ap.add_argument("--qac-factory", choices=("Flat", "SQbf16"), default="Flat",
                    help="qac's own index: Flat (fp32 corpus vectors, the file the references load too) or SQbf16 "
                         "(bf16 corpus vectors, built with the encoder in --dtype; with --dtype bf16 this is qac's "
                         "whole bf16 mode). The references always search the fp32 Flat index with faiss-cpu")
    ap.add_argument("--also-qac-dtype", choices=("fp32", "bf16", "int8"),
                    help="a second qac service with the encoder in this precision")
    ap.add_argument("--ref-python", help="python of the int8 batching reference (see --ref-int8)")
    ap.add_argument("--ref-int8", choices=("onnx", "openvino"),
                    help="add a batching reference encoding through this sentence-transformers int8 backend")
    ap.add_argument("--ref-cache", default=os.path.expanduser("~/.cache/qac-bench-int8"),
                    help="where bench/encode_int8/run.py keeps the ONNX and OpenVINO exports")
    ap.add_argument("--encode-concurrency", default="1,32",
                    help="concurrencies of the embedding-only comparison (qac against infinity)")
    a = ap.parse_args()
    if a.data is None:
        a.data = os.path.join(shared_data(os.path.dirname(os.path.abspath(a.qac))), "cranfield")
    if not shutil.which("wrk"):
        sys.exit("bench: wrk is not installed (scripts/setup.sh --test)")
    ref_dtype = "fp32" if a.dtype == "int8" else a.dtype  # the PyTorch references have no int8
    if a.ref_int8 and not a.ref_python:
        sys.exit("bench: --ref-int8 needs --ref-python")
    if a.infinity_python and a.dtype == "bf16":
        sys.exit("bench: --dtype bf16 runs the FastAPI references under bf16 autocast; the infinity reference "
                 "has no such switch here: leave out --infinity-python")
    if a.infinity_python and not os.access(a.infinity_python, os.X_OK):
        sys.exit(f"bench: --infinity-python {a.infinity_python}: not an executable")
    if not a.infinity_python:
        print("bench: no --infinity-python given: the infinity-emb reference and the embedding-only comparison "
              "are skipped", file=sys.stderr)
    model = a.model or os.environ.get("QAC_MODEL") or os.path.join(
            os.environ.get("QAC_HOME", os.path.expanduser("~/.local/share/qac")), "models", "all-MiniLM-L6-v2")
    work = a.work or tempfile.mkdtemp(prefix="qac-bench-serve-")
    os.makedirs(work, exist_ok=True)

    # 1. corpus
    corpus = os.path.join(work, f"passages-{a.passages}.tsv")
    docids = os.path.join(work, f"docids-{a.passages}.txt")
    if not os.path.exists(corpus):
        passages = synthetic_passages(a.data, a.passages)
        with open(corpus + ".tmp", "w", encoding="utf-8") as f, open(docids, "w", encoding="utf-8") as d:
            for pid, text in passages:
                f.write(f"{pid}\t{text}\n")
                d.write(f"{pid}\n")
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
    qac_index = index
    if a.qac_factory != "Flat":  # qac's own index: the same passages, bf16 corpus vectors
        qac_index = os.path.join(work, f"index-{a.passages}-{a.qac_factory.lower()}-{a.dtype}")
        t0 = time.time()
        subprocess.run([a.qac, "index", "build", "--corpus", corpus, "--out", qac_index, "--model", model,
                        "--threads", str(a.threads), "--factory", a.qac_factory, "--encoder-dtype", a.dtype],
                       check=True)
        print(f"bench: qac's {a.qac_factory} index ready in {time.time() - t0:.0f} s", file=sys.stderr)

    env = dict(os.environ, QAC_BENCH_QUERIES=qfile, QAC_BENCH_K="10", QAC_QUIET="1")
    inf_env = dict(env, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", DO_NOT_TRACK="1",
                   INFINITY_ANONYMOUS_USAGE_STATS="0")
    lua = os.path.join(HERE, "search.lua")
    conc = [int(c) for c in a.concurrency.split(",")]
    results = {}
    services = {
        # queries cut at 32 tokens on every side (the references' --max-len default)
        "qac": [a.qac, "serve", "--index", qac_index, "--model", model, "--threads", str(a.threads), "--dtype", a.dtype,
                "--query-max-len", "32"],
        "reference": [sys.executable, os.path.join(HERE, "reference_service.py"), "--model", model, "--index", index,
                      "--docids", docids, "--dtype", ref_dtype],
        "batched": [sys.executable, os.path.join(HERE, "reference_batched.py"), "--model", model, "--index", index,
                    "--docids", docids, "--dtype", ref_dtype],
    }
    if a.also_qac_dtype:
        services["qac2"] = [a.qac, "serve", "--index", qac_index, "--model", model, "--threads", str(a.threads),
                            "--dtype", a.also_qac_dtype, "--query-max-len", "32"]
    if a.ref_int8:
        name = os.path.basename(os.path.normpath(model))
        file_name = ("onnx/model_qint8_avx512_vnni.onnx" if a.ref_int8 == "onnx"
                     else "openvino/openvino_model_qint8_quantized.xml")
        export = os.path.join(a.ref_cache, f"{name}-{a.ref_int8}")
        if not os.path.exists(os.path.join(export, file_name)):
            sys.exit(f"bench: no {file_name} in {export}: run bench/encode_int8/run.py first")
        services["batched_int8"] = [a.ref_python, os.path.join(HERE, "reference_batched.py"), "--model", export,
                                    "--index", index, "--docids", docids, "--backend", a.ref_int8, "--file-name",
                                    file_name, "--threads", str(a.threads or os.cpu_count())]
    if a.infinity_python:
        services["infinity"] = [a.infinity_python, os.path.join(HERE, "reference_infinity.py"), "--model", model,
                                "--index", index, "--docids", docids]
    check_queries = queries[:8]  # the answers must agree: same top-10 docids as qac
    answers = {}
    for name, cmd in services.items():
        port = free_port()
        proc = subprocess.Popen(cmd + ["--port", str(port)], stdout=subprocess.DEVNULL,
                                env=inf_env if name == "infinity" else env)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_health(base, proc)
            answers[name] = [[h["docid"] for h in post_json(base, "/search", {"query": q, "k": 10})["results"][0]]
                             for q in check_queries]
            run_wrk(base, 4, 3, lua, env)  # warm-up
            for c in conc:
                results[(name, c)] = r = run_wrk(base, c, a.duration, lua, env)
                print(f"bench: {name:9s} c={c:<3d} {r['rps']:8.1f} req/s  p50 {r['p50_ms']:7.2f} ms  "
                      f"p99 {r['p99_ms']:7.2f} ms  errors {r['errors']}", file=sys.stderr)
        finally:
            stop(proc)
    agree = {}
    for name in services:
        if name not in ("qac", "qac2"):
            same = sum(x == y for x, y in zip(answers[name], answers["qac"]))
            overlap = sum(len(set(x) & set(y)) for x, y in zip(answers[name], answers["qac"])) / len(check_queries)
            agree[name] = (same, overlap)
            print(f"bench: {name}: top-10 equal to qac's (ids and order) for {same}/{len(check_queries)} queries, "
                  f"mean overlap {overlap:.1f}/10", file=sys.stderr)

    # embedding only: qac's /encode (and its OpenAI form /v1/embeddings) against the stock infinity server's
    # /embeddings, one query per request, both at the model's own length (qac kind=passage: 256 tokens, as
    # infinity's max_seq_length)
    enc_results, enc_cos = {}, {}
    if a.infinity_python:
        enc_lua = os.path.join(HERE, "encode.lua")
        enc_conc = [int(c) for c in a.encode_concurrency.split(",")]
        enc_services = [
            ("qac", [a.qac, "serve", "--model", model, "--threads", str(a.threads)], env,
             [("qac /encode", "/encode"), ("qac /v1/embeddings", "/v1/embeddings")]),
            ("infinity", [a.infinity_python, "-m", "infinity_emb.cli", "v2", "--model-id", model, "--engine", "torch",
                          "--device", "cpu", "--host", "127.0.0.1", "--served-model-name", "bench",
                          "--log-level", "warning"], inf_env,
             [("infinity /embeddings", "/embeddings")]),
        ]
        vecs = {}
        for name, cmd, cenv, targets in enc_services:
            port = free_port()
            proc = subprocess.Popen(cmd + ["--port", str(port)], stdout=subprocess.DEVNULL, env=cenv)
            base = f"http://127.0.0.1:{port}"
            try:
                wait_health(base, proc)
                if name == "qac":
                    vecs[name] = post_json(base, "/encode", {"texts": check_queries, "kind": "passage"})["embeddings"]
                else:
                    vecs[name] = [d["embedding"] for d in
                                  post_json(base, "/embeddings", {"input": check_queries, "model": "bench"})["data"]]
                for label, path in targets:
                    tenv = dict(cenv, QAC_BENCH_ENCODE_PATH=path, QAC_BENCH_ENCODE_KIND="passage",
                                QAC_BENCH_MODEL="bench")
                    run_wrk(base, 4, 3, enc_lua, tenv)  # warm-up
                    for c in enc_conc:
                        enc_results[(label, c)] = r = run_wrk(base, c, a.duration, enc_lua, tenv)
                        print(f"bench: {label:20s} c={c:<3d} {r['rps']:8.1f} req/s  p50 {r['p50_ms']:7.2f} ms  "
                              f"p99 {r['p99_ms']:7.2f} ms  errors {r['errors']}", file=sys.stderr)
            finally:
                stop(proc)
        for x, y in zip(vecs["qac"], vecs["infinity"]):
            dot = sum(p * q for p, q in zip(x, y))
            enc_cos.setdefault("min", 1.0)
            enc_cos["min"] = min(enc_cos["min"], dot / (sum(p * p for p in x) * sum(q * q for q in y)) ** 0.5)
        print(f"bench: embeddings of qac and infinity, least cosine over {len(check_queries)} queries: "
              f"{enc_cos['min']:.7f}" + ("" if enc_cos["min"] >= 0.9999 else " (BELOW 0.9999: the answers differ)"),
              file=sys.stderr)

    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"\n### serve: qac vs FastAPI+sentence-transformers+faiss{'+infinity-emb' if a.infinity_python else ''} "
          f"({time.strftime('%Y-%m-%d')})\n")
    print(f"Machine: {cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}. "
          f"{a.passages} synthetic Cranfield passages, Flat index (qac: {a.qac_factory}), all-MiniLM-L6-v2, "
          f"qac encoder in {a.dtype}, PyTorch references in {ref_dtype}, k=10, "
          f"wrk {a.duration} s per run.\n")
    refs = [n for n in services if n not in ("qac", "qac2")]
    def best_ref(c):  # the reference with the higher throughput at concurrency c
        return max(refs, key=lambda n: results[(n, c)]["rps"])
    label = {"reference": "unbatched ref", "batched": "batched ref", "infinity": "infinity ref",
             "batched_int8": f"batched-{a.ref_int8}-int8 ref"}
    if "qac2" in services:
        print(f"qac --dtype {a.also_qac_dtype} (qac2): " + ", ".join(
            f"c={c} {results[('qac2', c)]['rps']:.1f} req/s p50 {results[('qac2', c)]['p50_ms']:.2f} ms "
            f"p99 {results[('qac2', c)]['p99_ms']:.2f} ms; qac {a.dtype} / qac2 "
            f"{ratio_str(results[('qac', c)]['rps'], results[('qac2', c)]['rps'])}" for c in conc) + "\n")
    print("| concurrency | qac req/s | " + " | ".join(f"{label[n]} req/s" for n in refs) +
          " | best ref | ratio vs best ref | qac p50 ms | best ref p50 ms | qac p99 ms | best ref p99 ms |"
          " p99 ratio (ref/qac) | errors " + "/".join(["qac"] + [label[n].split()[0] for n in refs]) + " |")
    print("|---" * (10 + len(refs)) + "|")
    for c in conc:
        q, r = results[("qac", c)], results[(best_ref(c), c)]
        print(f"| {c} | {q['rps']:.1f} | " + " | ".join(f"{results[(n, c)]['rps']:.1f}" for n in refs) +
              f" | {label[best_ref(c)].split()[0]} | {ratio_str(q['rps'], r['rps'])} |"
              f" {q['p50_ms']:.2f} | {r['p50_ms']:.2f} | {q['p99_ms']:.2f} | {r['p99_ms']:.2f} |"
              f" {ratio_str(r['p99_ms'], q['p99_ms'])} | " +
              "/".join(str(results[(n, c)]["errors"]) for n in ["qac"] + refs) + " |")
    print("\nAnswers (top-10 docids of the first %d Cranfield queries) against qac's: %s." % (
        len(check_queries), "; ".join(f"{label[n]} equal for {s}/{len(check_queries)}, mean overlap {o:.1f}/10"
                                      for n, (s, o) in agree.items())))
    last = max(conc)
    ratio = ratio_str(results[("qac", last)]["rps"], results[(best_ref(last), last)]["rps"])
    print(f"\nthroughput ratio at concurrency {last} against the best reference ({best_ref(last)}): {ratio} "
          f"(goal >= 3x); p99 lower for qac at every concurrency: "
          f"{all(results[('qac', c)]['p99_ms'] < results[(best_ref(c), c)]['p99_ms'] for c in conc)}")
    if enc_results:
        print(f"\n### embeddings only: qac /encode and /v1/embeddings vs the stock infinity-emb server /embeddings\n")
        print("One Cranfield query per request, the model's own max length on both (256 tokens), float JSON. "
              f"Least cosine between qac's and infinity's embeddings of {len(check_queries)} queries: "
              f"{enc_cos['min']:.7f}.\n")
        print("| endpoint | concurrency | req/s | p50 ms | p99 ms | errors |")
        print("|---|---|---|---|---|---|")
        for (lab, c), r in enc_results.items():
            print(f"| {lab} | {c} | {r['rps']:.1f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['errors']} |")
        for c in sorted({c for _, c in enc_results}):
            print(f"\nqac /encode vs infinity /embeddings at concurrency {c}: "
                  f"{ratio_str(enc_results[('qac /encode', c)]['rps'], enc_results[('infinity /embeddings', c)]['rps'])}")


if __name__ == "__main__":
    main()
