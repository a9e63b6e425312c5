"""qac index build --factory SQbf16 against Python faiss (1.9 or later has
ScalarQuantizer.QT_bf16):
- qac's index.faiss is byte for byte the file FAISS writes for
  IndexScalarQuantizer(d, QT_bf16, inner product) after add() of the same
  vectors;
- faiss.read_index opens it, and FAISS's search of it gives qac's top-k:
  with queries already in bf16 (every product exact) the same ids, scores
  within float rounding; with fp32 queries (FAISS keeps them in fp32, qac
  rounds them to bf16) scores within that rounding's bound;
- qac's scores equal the float64 dot products of the bf16 values to within
  float rounding;
- the manifest records SQbf16 with the file's checksum, and a flipped byte
  is refused at open; a composite bf16 factory is refused by name."""
import json
import os
import sys

import faiss
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import idxutil as U  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import scratch  # noqa: E402

tool = sys.argv[1]
tmp = scratch.mkdtemp(prefix="qac-sqbf16-")
failures = 0


def check(cond, msg):
    global failures
    print(("ok   " if cond else "FAIL ") + msg)
    failures += 0 if cond else 1


def bf16_round(a):
    """float32 -> float32 holding the nearest-even bf16 (qac's query rounding)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


if not hasattr(faiss.ScalarQuantizer, "QT_bf16"):
    print("SKIP: faiss %s has no QT_bf16" % faiss.__version__)
    sys.exit(77)

rng = np.random.default_rng(7)
n, d, nq, k = 9000, 40, 60, 25  # d not a multiple of 16: the scan's tail
cent = rng.normal(size=(80, d)).astype(np.float32)
x = cent[rng.integers(0, 80, n)] + 0.4 * rng.normal(size=(n, d)).astype(np.float32)
x /= np.linalg.norm(x, axis=1, keepdims=True)
q = x[rng.integers(0, n, nq)] + 0.2 * rng.normal(size=(nq, d)).astype(np.float32)
q /= np.linalg.norm(q, axis=1, keepdims=True)
npy = os.path.join(tmp, "v.npy")
np.save(npy, x)
out = os.path.join(tmp, "idx")
U.run(["index", "build", "--vectors", npy, "--ids", "sequential", "--out", out, "--factory", "SQbf16", "--shard-size", "4000"])

ref = faiss.IndexScalarQuantizer(d, faiss.ScalarQuantizer.QT_bf16, faiss.METRIC_INNER_PRODUCT)
ref.add(x)
ours = open(os.path.join(out, "index.faiss"), "rb").read()
theirs = faiss.serialize_index(ref).tobytes()
check(ours == theirs, "index.faiss equals FAISS %s's own SQbf16 file (%d bytes, %d differ)"
      % (faiss.__version__, len(ours), sum(a != b for a, b in zip(ours, theirs)) + abs(len(ours) - len(theirs))))
man = json.load(open(os.path.join(out, "manifest.json")))
check(man["faiss"]["factory"] == "SQbf16" and man["faiss"]["bytes"] == len(ours)
      and isinstance(man["faiss"].get("checksum"), int), "manifest: factory SQbf16, size and checksum recorded")

ix = faiss.read_index(os.path.join(out, "index.faiss"))
check(ix.ntotal == n and ix.d == d and ix.sq.qtype == faiss.ScalarQuantizer.QT_bf16,
      "faiss.read_index: ntotal %d d %d qtype bf16" % (ix.ntotal, ix.d))
xb = ix.sa_decode(ix.sa_encode(x))  # the stored values, as FAISS decodes them

# queries already in bf16: FAISS's sums and qac's differ in order only
qb = bf16_round(q)
rows, scores, docids = U.tool_search(tool, out, qb, k, tmp)
D, I = ix.search(qb, k)
exact = qb.astype(np.float64) @ xb.astype(np.float64).T
near_tie, id_diff = 0, 0
for i in range(nq):
    if list(I[i]) != list(rows[i]):
        # allowed only where two candidates' exact scores are within rounding
        s = np.sort(exact[i])[::-1]
        if np.min(np.abs(np.diff(s[:k + 1]))) < 1e-6:
            near_tie += 1
        else:
            id_diff += 1
sd = float(np.abs(D - scores).max())
check(id_diff == 0 and sd <= 2e-6, "bf16 queries: FAISS's top-%d = qac's (%d queries with near-ties), max score diff "
      "%.2g" % (k, near_tie, sd))
ex = np.take_along_axis(exact, rows, axis=1)
norm = np.take_along_axis(np.abs(qb).astype(np.float64) @ np.abs(xb).T.astype(np.float64), rows, axis=1)
rel = float(np.max(np.abs(ex - scores) / norm))
check(rel <= 1e-6, "qac's scores vs float64 dot products of the bf16 values: relative error %.2g" % rel)
check(docids[:k] == [str(r) for r in rows[0]], "docid table matches rows")

# fp32 queries: FAISS scores them unrounded; the difference is bounded by
# the query's bf16 rounding, sum |q - bf16(q)| |x|
rows32, scores32, _ = U.tool_search(tool, out, q, k, tmp)
check(np.array_equal(rows32, rows) and np.array_equal(scores32, scores),
      "fp32 queries give qac the same hits and bits as the same queries pre-rounded to bf16")
D, I = ix.search(q, k)
bound = np.abs(q - qb).astype(np.float64) @ np.abs(xb).T.astype(np.float64)
worst, over = 0.0, 0
for i in range(nq):
    got = dict(zip(rows32[i].tolist(), scores32[i].tolist()))
    for j, s in zip(I[i].tolist(), D[i].tolist()):
        if j in got:
            dd = abs(got[j] - s)
            worst = max(worst, dd)
            over += dd > bound[i, j] + 2e-6
overlap = float(np.mean([len(set(a) & set(b)) / k for a, b in zip(I, rows32)]))
check(over == 0 and overlap >= 0.97, "fp32 queries: FAISS vs qac scores within the bf16 rounding bound (max diff %.2g),"
      " top-%d overlap %.4f" % (worst, k, overlap))

# the exact scan against the fp32 Flat scan of the same vectors: nearly the same ranking
exact_ids, _ = U.exact_topk(x, q, 10)
rec = float(np.mean([len(set(a[:10]) & set(b)) / 10 for a, b in zip(rows32, exact_ids)]))
check(rec >= 0.97, "recall@10 against exact fp32 search %.3f" % rec)

# a flipped byte in the codes is refused before any search
bad = os.path.join(tmp, "bad")
U.run(["index", "build", "--vectors", npy, "--ids", "sequential", "--out", bad, "--factory", "SQbf16", "--shard-size", "4000"])
path = os.path.join(bad, "index.faiss")
b = bytearray(open(path, "rb").read())
b[len(b) // 2] ^= 0x40
open(path, "wb").write(bytes(b))
qpath = os.path.join(tmp, "q1.f32")
q[:1].tofile(qpath)
import subprocess  # noqa: E402
p = subprocess.run([tool, bad, qpath, "1", "5", os.path.join(tmp, "r1")], capture_output=True, text=True)
check(p.returncode != 0 and "checksum" in p.stderr, "corrupt SQbf16 file refused: " + p.stderr.strip()[:120])
p = U.run(["index", "build", "--vectors", npy, "--ids", "sequential", "--out", os.path.join(tmp, "hnsw"), "--factory", "HNSW32,SQbf16"],
          check=False)
check(p.returncode == 1 and "SQbf16" in p.stderr, "HNSW32,SQbf16 refused: " + p.stderr.strip()[:140])

print("%d failure(s)" % failures)
sys.exit(1 if failures else 0)
