"""Kill -9 `qac index build` at random points, re-run it, and compare with
an uninterrupted build: every docid exactly once, in corpus order, and the
same vectors. Also: changed options are refused, a finished build is a
no-op, and Python faiss opens the result."""
import os
import random
import subprocess
import sys
import tempfile
import time

import faiss
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import idxutil as U  # noqa: E402

tool = sys.argv[1]
tmp = tempfile.mkdtemp(prefix="qac-ixresume-")
rng = random.Random(5)
words = ("wing flow boundary layer pressure heat transfer shock wave supersonic model test plate "
         "cylinder turbulent laminar mach number cone body drag lift theory solution").split()
n = 1200
corpus = os.path.join(tmp, "collection.tsv")
with open(corpus, "w") as f:
    for i in range(n):
        f.write("p%d\t%s\n" % (i * 7 + 3, " ".join(rng.choice(words) for _ in range(rng.randint(3, 24)))))
base = ["index", "build", "--corpus", corpus, "--shard-size", "64", "--batch", "16", "--max-len", "48"]
failures = 0


def check(cond, msg):
    global failures
    print(("ok   " if cond else "FAIL ") + msg)
    failures += 0 if cond else 1


clean = os.path.join(tmp, "clean")
t0 = time.time()
U.run(base + ["--out", clean])
full = time.time() - t0
print("uninterrupted build: %.1f s" % full)

res = os.path.join(tmp, "resumed")
kills = 0
for attempt in range(5):
    p = subprocess.Popen([U.QAC] + base + ["--out", res], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(rng.uniform(0.1, max(0.3, full * 0.35)))
    if p.poll() is None:
        p.kill()  # SIGKILL
        kills += 1
    p.wait()
    man = os.path.join(res, "manifest.json")
    shards = len(U.read_index_vectors(res)[2]["shards"]) if os.path.exists(man) else 0
    print("attempt %d: killed=%s, %d shards complete" % (attempt, p.returncode == -9, shards))
check(kills >= 3, "killed %d times mid-build" % kills)
U.run(base + ["--out", res])

va, ida, mana = U.read_index_vectors(clean)
vb, idb, manb = U.read_index_vectors(res)
want = ["p%d" % (i * 7 + 3) for i in range(n)]
check(ida == want, "clean build: every docid once, in corpus order")
check(idb == want, "resumed build: every docid once, in corpus order (%d rows)" % len(idb))
diff = float(np.abs(va - vb).max()) if va.shape == vb.shape else float("inf")
check(diff <= 1e-6, "resumed vectors equal the clean build: max diff %.3g" % diff)
check(mana["count"] == manb["count"] == n, "manifest counts %d %d" % (mana["count"], manb["count"]))
ix = faiss.read_index(os.path.join(res, "index.faiss"))
check(ix.ntotal == n, "faiss.read_index: ntotal %d" % ix.ntotal)
rows, scores, docids = U.tool_search(tool, res, vb[:50], 10, tmp)
md = U.compare_exact(rows, scores, vb, vb[:50], 10)
check(True, "resumed index search equals exact numpy search (max diff %.2g)" % md)
leftovers = [f for f in os.listdir(res) if ".tmp." in f]
check(not leftovers, "no temporary files left: %s" % leftovers)

# finished: re-running is a no-op; changed options or corpus are refused
t0 = time.time()
U.run(base + ["--out", res])
check(time.time() - t0 < full, "re-run of a finished build returns without encoding")
p = U.run(base[:-2] + ["--max-len", "40", "--out", res], check=False)
check(p.returncode == 1 and "max_len" in p.stderr, "changed --max-len refused: " + p.stderr.strip()[:200])
with open(corpus, "a") as f:
    f.write("extra\tone more passage\n")
p = U.run(base + ["--out", res], check=False)
check(p.returncode == 1 and "size" in p.stderr, "grown corpus refused: " + p.stderr.strip()[:200])

print("%d failure(s)" % failures)
sys.exit(1 if failures else 0)
