#!/usr/bin/env python3
"""CPU reranking throughput: qac rerank --pairs against sentence-transformers'
CrossEncoder.predict on the same checkpoint and pairs, in the same run,
alternating rounds, 2 threads each.

The checkpoint is a reranker qac starts from the default model (MiniLM-L6,
its pooler and a fresh classifier: the speed does not depend on the
values), saved in the layout CrossEncoder loads. The pairs are Cranfield
queries with documents (each query with DOCS documents, the pairs' lengths
those a reranker sees: 100-300 tokens), cut at 512 tokens by both.

qac's time is the command's wall time less that of the same command on one
pair (loading the model and the tokenizer), so both sides are timed on the
scoring alone; CrossEncoder's is predict's (batch_size 32, its default) on a
loaded model. The scores of the two are checked to agree (max |diff| of the
sigmoid scores printed).

Run (from the repository root; with --results the measurement replaces
its block in bench/RESULTS.md):
  .venv/bin/python3 bench/rerank_cpu/bench_rerank.py build \
      [--pairs 400 --rounds 3 --results bench/RESULTS.md]
"""
import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testdata  # noqa: E402


def cranfield():
    def blocks(path):
        out, cur, field = [], None, None
        for line in open(path, encoding="utf-8", errors="replace"):
            if line.startswith(".I"):
                cur = {}
                out.append(cur)
            elif line.startswith("."):
                field = line[1]
                cur[field] = []
            elif field:
                cur[field].append(line.strip())
        return [" ".join(b.get("T", []) + b.get("W", [])) for b in out]
    cran = testdata.path("cranfield")
    return blocks(os.path.join(cran, "cran.all.1400")), blocks(os.path.join(cran, "cran.qry"))


def machine():
    """The CPU model and core count, as lscpu names them."""
    model = platform.processor() or "unknown CPU"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        m = re.search(r"Model name:\s*(.+)", out)
        model = m.group(1).strip() if m else model
    except OSError:
        pass
    load = open("/proc/loadavg").read().split()[:3]
    return f"{model} ({os.cpu_count()} cores, load average {' '.join(load)} at the end)"


def reranker_dir(build, work):
    """The benchmark's cross-encoder: qac starts it from the default model (its
    pooler, a fresh classifier; the speed does not depend on the values)."""
    qac = os.path.join(build, "qac")
    tool = os.path.join(build, "tests", "xenc", "qac_xenc_tool")
    info = json.loads(subprocess.run([qac, "info", "--json"], capture_output=True, text=True, check=True).stdout)
    ce_dir = os.path.join(work, "ce")
    if not os.path.exists(os.path.join(ce_dir, "config.json")):
        subprocess.run([tool, "fresh", info["dir"], ce_dir, "1", "1"], check=True, capture_output=True)
    return ce_dir


def update_results(path, name, text):
    """Replace the block between <!-- bench:NAME --> and <!-- /bench:NAME --> in
    path (RESULTS.md) with text."""
    s = open(path, encoding="utf-8").read()
    a, b = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    if a not in s or b not in s:
        sys.exit(f"{path} has no {a} ... {b} block to replace")
    s = s[:s.index(a) + len(a)] + "\n" + text + "\n" + s[s.index(b):]
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(s)
    os.replace(path + ".tmp", path)
    print(f"{path}: the {name} block replaced")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--pairs", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--results", help="replace this benchmark's block in RESULTS.md")
    a = ap.parse_args()
    qac = os.path.join(a.build, "qac")
    work = os.path.join(a.build, "bench-rerank")
    os.makedirs(work, exist_ok=True)
    ce_dir = reranker_dir(a.build, work)
    docs, queries = cranfield()
    rs = np.random.RandomState(1)
    pairs = [(queries[i % len(queries)], docs[j]) for i, j in enumerate(rs.choice(len(docs), a.pairs, replace=False))]
    pf, one = os.path.join(work, "pairs.jsonl"), os.path.join(work, "one.jsonl")
    with open(pf, "w") as f:
        f.writelines(json.dumps({"query": q, "passage": d}) + "\n" for q, d in pairs)
    with open(one, "w") as f:
        f.write(json.dumps({"query": pairs[0][0], "passage": pairs[0][1]}) + "\n")
    env = {**os.environ, "QAC_QUIET": "1"}

    def qac_run(path):
        t0 = time.perf_counter()
        r = subprocess.run([qac, "rerank", "--model", ce_dir, "--pairs", path, "--threads", "2", "--device", "cpu",
                            "--dtype", a.dtype], capture_output=True, text=True, env=env, check=True)
        return time.perf_counter() - t0, r.stdout

    torch.set_num_threads(2)
    from sentence_transformers import CrossEncoder
    ce = CrossEncoder(ce_dir, device="cpu")
    ce.predict(pairs[:8])  # warm
    tok = ce.tokenizer
    ntok = sum(len(tok(q, d, truncation=True, max_length=512)["input_ids"]) for q, d in pairs)
    qac_t, st_t = [], []
    for rnd in range(a.rounds):
        t_all, out = qac_run(pf)
        t_one, _ = qac_run(one)
        qac_t.append(t_all - t_one)
        t0 = time.perf_counter()
        ref = ce.predict(pairs, batch_size=32)
        st_t.append(time.perf_counter() - t0)
        print(f"round {rnd + 1}: qac {a.pairs / qac_t[-1]:.1f} pairs/s, CrossEncoder {a.pairs / st_t[-1]:.1f} pairs/s",
              flush=True)
    got = np.array([json.loads(l)["probability"] for l in out.splitlines()])
    qb, sb = min(qac_t), min(st_t)
    text = (f"{machine()}, {time.strftime('%Y-%m-%d')}: {a.pairs} pairs ({ntok / a.pairs:.0f} tokens on average), "
            f"2 threads, qac --dtype {a.dtype}; rounds (qac, CrossEncoder pairs/s): "
            + ", ".join(f"{a.pairs / q:.1f} / {a.pairs / t:.1f}" for q, t in zip(qac_t, st_t))
            + f"; best of {a.rounds}: qac {a.pairs / qb:.1f} pairs/s, sentence-transformers CrossEncoder "
            f"{a.pairs / sb:.1f} pairs/s, **ratio {sb / qb:.2f}x**; max |score diff| "
            f"{np.max(np.abs(got - np.asarray(ref))):.2e}.")
    print(text)
    if a.results:
        update_results(a.results, f"rerank_cpu_{a.dtype}", text)


if __name__ == "__main__":
    main()
