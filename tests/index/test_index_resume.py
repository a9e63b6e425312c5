"""Kill -9 `qac index build` at chosen points (half-way through writing a
shard, after a shard is renamed but before the manifest lists it) and at
random times, re-run it, and compare with an uninterrupted build: finished
shards survive every kill untouched, every docid exactly once, in corpus
order, and the same vectors. Also: changed options are refused, a finished build is a
no-op, and Python faiss opens the result."""
import os
import random
import subprocess
import sys
import time

import faiss
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import idxutil as U  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import scratch  # noqa: E402

tool = sys.argv[1]
tmp = scratch.mkdtemp(prefix="qac-ixresume-")
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


def listed_shards():
    """name -> (inode, mtime_ns, bytes) of every shard the manifest lists."""
    if not os.path.exists(os.path.join(res, "manifest.json")):
        return {}
    out = {}
    for sh in U.read_index_vectors(res)[2]["shards"]:
        path = os.path.join(res, sh["file"])
        st = os.stat(path)
        with open(path, "rb") as f:
            out[sh["file"]] = (st.st_ino, st.st_mtime_ns, f.read())
    return out


# Chosen kills (QAC_TEST_CRASH: the n-th pass through a crash point in this
# run SIGKILLs it), then kills at random times. After every kill the shards
# already listed must still be listed and untouched (same inode, mtime and
# bytes): a run that started over, or rewrote finished shards, fails here.
plan = [("shard_partial", 3), ("shard_unlisted", 2), ("shard_partial", 1), ("shard_partial", 2),
        (None, 0), (None, 0)]
kills = partial_kills = 0
before = {}
for attempt, (point, nth) in enumerate(plan):
    env = dict(os.environ)
    if point:
        env["QAC_TEST_CRASH"] = "%s:%d" % (point, nth)
    p = subprocess.Popen([U.QAC] + base + ["--out", res], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env=env)
    if not point:
        time.sleep(rng.uniform(0.1, max(0.3, full * 0.35)))
        if p.poll() is None:
            p.kill()  # SIGKILL
    p.wait()
    kills += p.returncode == -9
    after = listed_shards()
    tmps = [f for f in os.listdir(res) if ".qemb.tmp." in f]
    if point == "shard_partial":
        # the kill must land inside a shard write: its temporary is on disk, partly written
        partial_kills += bool(tmps) and all(os.path.getsize(os.path.join(res, f)) > 32 for f in tmps)
    kept = [f for f in before if f in after and after[f] == before[f]]
    print("attempt %d (%s): killed=%s, %d shards listed (was %d), %d kept untouched, temporaries %s" %
          (attempt, point and "%s:%d" % (point, nth) or "random time", p.returncode == -9, len(after),
           len(before), len(kept), tmps))
    check(p.returncode == -9 or not point, "attempt %d was killed at its crash point" % attempt)
    check(len(after) >= len(before), "attempt %d: listed shards never decrease (%d -> %d)" %
          (attempt, len(before), len(after)))
    check(len(kept) == len(before), "attempt %d: every earlier shard file unchanged (%d/%d)" %
          (attempt, len(kept), len(before)))
    if point:
        check(len(after) > len(before) or nth == 1, "attempt %d: progress was kept (%d -> %d shards)" %
              (attempt, len(before), len(after)))
    before = after
check(kills >= 4, "killed %d times mid-build" % kills)
check(partial_kills == 3, "%d kills landed while a shard was partly written" % partial_kills)
U.run(base + ["--out", res])

va, ida, mana = U.read_index_vectors(clean)
vb, idb, manb = U.read_index_vectors(res)
want = ["p%d" % (i * 7 + 3) for i in range(n)]
check(ida == want, "clean build: every docid once, in corpus order")
check(idb == want, "resumed build: every docid once, in corpus order (%d rows)" % len(idb))
diff = float(np.abs(va - vb).max()) if va.shape == vb.shape else float("inf")
# the encoder is batch-invariant: a resumed build has the very same bits
check(diff == 0, "resumed vectors equal the clean build: max diff %.3g" % diff)
check(mana["count"] == manb["count"] == n, "manifest counts %d %d" % (mana["count"], manb["count"]))
ix = faiss.read_index(os.path.join(res, "index.faiss"))
check(ix.ntotal == n, "faiss.read_index: ntotal %d" % ix.ntotal)
rows, scores, docids = U.tool_search(tool, res, vb[:50], 10, tmp)
md = U.compare_exact(rows, scores, vb, vb[:50], 10)
check(md <= 1e-5, "resumed index search equals exact numpy search (max diff %.2g)" % md)
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
