"""Python Encoder.encode against `qac encode` on the same texts, same run.

Both sides do the whole job a user runs: load the model, read the corpus,
encode every passage, save an .npy. The CLI is `qac encode --input TSV
--output NPY`; the Python side is qac.Encoder + qac.read_corpus +
Encoder.encode + numpy.save in a fresh interpreter. Rounds alternate the
two; each side keeps its best wall time (a burst of other load on a shared
machine does not decide the ratio), and the CPU time of each process is
reported too. The two .npy files must be equal bit for bit.

    PYTHONPATH=build/python .venv/bin/python3 bench/python_encode/run.py [--qac build/qac]
        [--n 1400] [--rounds 3] [--threads 2] [--max-len 256]
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

ap = argparse.ArgumentParser()
root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ap.add_argument("--qac", default=os.path.join(root, "build", "qac"))
ap.add_argument("--data", default=os.path.join(os.environ.get("QAC_SHARED_DATA", os.path.join(root, "..", "shared",
                                                                                              "data")), "cranfield"))
ap.add_argument("--n", type=int, default=1400)
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--max-len", type=int, default=256)
a = ap.parse_args()

import qac  # noqa: E402

tmp = tempfile.mkdtemp(prefix="qac-bench-pyenc-")
tsv = os.path.join(tmp, "passages.tsv")
recs = list(qac.read_corpus(os.path.join(a.data, "cran.all.1400")))[:a.n]
with open(tsv, "w", encoding="utf-8") as f:
    for r in recs:
        f.write(f"{r.id}\t{r.text}\n")
n = len(recs)

PY = f"""
import sys, time, numpy as np, qac
t0 = time.perf_counter()
enc = qac.Encoder(device="cpu", threads={a.threads})
texts = [r.text for r in qac.read_corpus(sys.argv[1])]
t1 = time.perf_counter()
v = enc.encode(texts, kind="passage", max_len={a.max_len})
t2 = time.perf_counter()
np.save(sys.argv[2], v)
print(t2 - t1)
"""


def timed(cmd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        sys.exit(f"{cmd[0]} failed: {r.stderr[-1000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, r.stdout


best = {"cli": (1e9, 0), "py": (1e9, 0)}
encode_only = 1e9
cli_npy, py_npy = os.path.join(tmp, "cli.npy"), os.path.join(tmp, "py.npy")
env_cmd = [a.qac, "encode", "--input", tsv, "--output", cli_npy, "--device", "cpu", "--threads", str(a.threads),
           "--max-len", str(a.max_len)]
for rnd in range(a.rounds):
    for side in (("cli", "py") if rnd % 2 == 0 else ("py", "cli")):
        if side == "cli":
            wall, cpu, _ = timed(env_cmd)
        else:
            wall, cpu, out = timed([sys.executable, "-c", PY, tsv, py_npy])
            encode_only = min(encode_only, float(out.split()[-1]))
        print(f"round {rnd + 1} {side:3s} wall {wall:7.2f} s  cpu {cpu:7.2f} s  {n / wall:7.1f} passages/s", flush=True)
        if wall < best[side][0]:
            best[side] = (wall, cpu)
same = np.array_equal(np.load(cli_npy).view(np.uint32), np.load(py_npy).view(np.uint32))
cw, cc = best["cli"]
pw, pc = best["py"]
print(f"\n{n} Cranfield passages, max_len {a.max_len}, {a.threads} threads, best of {a.rounds} alternating rounds")
print(f"qac encode (CLI)      {n / cw:8.1f} passages/s  (wall {cw:.2f} s, cpu {cc:.2f} s)")
print(f"qac.Encoder (Python)  {n / pw:8.1f} passages/s  (wall {pw:.2f} s, cpu {pc:.2f} s; encode call alone "
      f"{n / encode_only:.1f} passages/s)")
print(f"ratio Python / CLI: {cw / pw:.3f} (wall), {cc / pc:.3f} (cpu time); outputs equal bit for bit: {same}")
