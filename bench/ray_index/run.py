"""Distributed indexing on Ray: passages/s with 1 and 2 Embed workers on a
local Ray cluster, against `qac index build` (one process) on the same
corpus, same run; the merged index must equal the single-process one.

Each worker is one Ray actor with one encoder of THREADS threads (default:
the actor's CPU count, 1). On a machine with C cores, 2 workers of 1 thread
use the cores that `qac index build --threads 2` uses: there the speed-up
from a second worker is bounded by the cores, not by Ray.

    PYTHONPATH=build/python .venv/bin/python3 bench/ray_index/run.py [--qac build/qac] [--max-len 128]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ap = argparse.ArgumentParser()
root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ap.add_argument("--qac", default=os.path.join(root, "build", "qac"))
ap.add_argument("--corpus", default=os.path.join(os.environ.get("QAC_SHARED_DATA", os.path.join(root, "..", "shared",
                                                                                                "data")),
                                                 "cranfield", "cran.all.1400"))
ap.add_argument("--max-len", type=int, default=128)
ap.add_argument("--threads", type=int, default=2, help="threads of qac index build")
ap.add_argument("--configs", default="1x2,1x1,2x1", help="workers x threads per worker, comma-separated")
ap.add_argument("--rows-per-block", type=int, default=100)
a = ap.parse_args()

import ray  # noqa: E402
import ray.data  # noqa: E402

import qac  # noqa: E402
import qac.ray  # noqa: E402

tmp = tempfile.mkdtemp(prefix="qac-bench-ray-")
n = sum(1 for _ in qac.read_corpus(a.corpus))
ref = os.path.join(tmp, "ref")
t0 = time.perf_counter()
subprocess.run([a.qac, "index", "build", "--corpus", a.corpus, "--out", ref, "--max-len", str(a.max_len),
                "--device", "cpu", "--threads", str(a.threads)], check=True, capture_output=True)
t_cli = time.perf_counter() - t0
print(f"{n} passages, max_len {a.max_len}; machine: {os.cpu_count()} cores")
print(f"qac index build (--threads {a.threads}): {t_cli:6.1f} s  {n / t_cli:6.1f} passages/s", flush=True)

configs = [tuple(int(x) for x in c.split("x")) for c in a.configs.split(",")]
ray.init(num_cpus=max(w * t for w, t in configs) + 1, include_dashboard=False, log_to_driver=False,
         configure_logging=False)
for workers, threads in configs:
    parts, out = os.path.join(tmp, f"parts-{workers}x{threads}"), os.path.join(tmp, f"ix-{workers}x{threads}")
    t0 = time.perf_counter()
    ds = qac.ray.read_corpus(a.corpus, rows_per_block=a.rows_per_block)
    ds.map_batches(qac.ray.Embed, fn_constructor_kwargs=dict(out=parts, corpus=a.corpus, max_len=a.max_len,
                                                             device="cpu", threads=threads),
                   batch_size=a.rows_per_block, compute=ray.data.ActorPoolStrategy(size=workers),
                   num_cpus=threads).materialize()
    t_enc = time.perf_counter() - t0
    subprocess.run([a.qac, "index", "merge", "--parts", parts, "--out", out], check=True, capture_output=True)
    t_all = time.perf_counter() - t0
    same = all(open(os.path.join(ref, f), "rb").read() == open(os.path.join(out, f), "rb").read()
               for f in ("emb-00000.qemb", "docids.qdoc", "index.faiss", "manifest.json"))
    print(f"Ray {workers} worker(s) x {threads} thread(s): encode {t_enc:6.1f} s  {n / t_enc:6.1f} passages/s; "
          f"with the merge {t_all:6.1f} s  {n / t_all:6.1f} passages/s ({t_cli / t_all:.2f}x qac index build); "
          f"equals qac index build: {same}", flush=True)
ray.shutdown()
shutil.rmtree(tmp)
