"""`qac search --mode dense|bm25|hybrid`, offline and with --server.

- For each mode and k (10, and 150: past the fused lists' depth of 100),
  the offline run over a dense and a BM25 index equals byte for byte the
  run `qac search --server` writes from a real `qac serve` holding the same
  two indexes, and holds the hits the server's /search JSON returns.
- The hybrid run equals reciprocal-rank fusion recomputed here from the
  offline dense and BM25 runs, each max(k, 100) deep: sum of 1/(60 + rank),
  rounded to a float, ordered by score then docid descending, cut at k.
- Offline bm25 with only --bm25 equals `qac bm25 search`.
- --server with --index (from the flag or QAC_INDEX) or --bm25 is a usage
  error naming both, as are modes whose index is missing."""
import json
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from srvlib import QAC, Server, build_indexes, check, finish, http, workdir  # noqa: E402
import testdata  # noqa: E402  (srvlib puts tests/ on the path)

d = workdir("modes")
corpus, ix, bm = build_indexes(d, n_docs=150, bm25=True)

# the first 12 Cranfield queries, as TSV (numbered 1.. in file order)
queries = [(str(i + 1), t) for i, (_, t) in enumerate(testdata.cranfield_texts("cran.qry", "W")[:12])]
qpath = os.path.join(d, "q.tsv")
with open(qpath, "w") as f:
    f.writelines(f"{q}\t{t}\n" for q, t in queries)


def search(*args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([QAC, "search", "--queries", qpath, "--run", "-", *args], capture_output=True, text=True,
                          env=e)


def parse(run):
    """{qid: [(docid, score)]} in file order."""
    out = {}
    for line in run.splitlines():
        q, _, doc, _, score, _ = line.split()
        out.setdefault(q, []).append((doc, float(score)))
    return out


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def trec_order(hits):
    """Score (as the float the run holds) descending, then docid descending by bytes."""
    return sorted(hits, key=lambda h: (f32(h[1]), h[0].encode()), reverse=True)


LOCAL = {"dense": ["--index", ix], "bm25": ["--bm25", bm], "hybrid": ["--index", ix, "--bm25", bm]}
srv = Server("--index", ix, "--bm25", bm)
try:
    for k in (10, 150):
        local = {}
        for mode in ("dense", "bm25", "hybrid"):
            p = search(*LOCAL[mode], "--mode", mode, "--k", str(k))
            r = search("--server", srv.base, "--mode", mode, "--k", str(k))
            check(p.returncode == 0 and r.returncode == 0, f"{mode} k={k}: offline exit {p.returncode} "
                  f"{p.stderr.strip()[-200:]}, --server exit {r.returncode} {r.stderr.strip()[-200:]}")
            lines = p.stdout.splitlines()
            check(p.stdout == r.stdout and len(lines) > 0,
                  f"{mode} k={k}: offline and --server runs byte-identical ({len(lines)} lines)")
            local[mode] = parse(p.stdout)
            # the server's own answer, in trec_eval's order
            st, _, body = http(srv.base, "POST", "/search", {"queries": [t for _, t in queries], "k": k, "mode": mode})
            same = st == 200 and all(
                [(h[0], f32(h[1])) for h in trec_order([(x["docid"], x["score"]) for x in body["results"][i]])] ==
                [(doc, f32(s)) for doc, s in local[mode].get(q, [])] for i, (q, _) in enumerate(queries))
            check(same, f"{mode} k={k}: the run holds the hits of the server's /search, in trec_eval's order")
        # hybrid against fusion recomputed from the two lists, each max(k, 100) deep
        depth = max(k, 100)
        dense = parse(search(*LOCAL["dense"], "--k", str(depth)).stdout)
        sparse = parse(search(*LOCAL["bm25"], "--k", str(depth)).stdout)
        ok = True
        for q, _ in queries:
            fused = {}
            for lst in (dense.get(q, []), sparse.get(q, [])):
                for rank, (doc, _) in enumerate(lst, 1):
                    fused[doc] = fused.get(doc, 0.0) + 1.0 / (60 + rank)
            want = trec_order([(doc, f32(s)) for doc, s in fused.items()])[:k]
            got = [(doc, f32(s)) for doc, s in local["hybrid"].get(q, [])]
            ok = ok and want == got
        check(ok, f"hybrid k={k}: equals reciprocal-rank fusion recomputed from the dense and BM25 runs "
              f"({depth} deep)")
finally:
    check(srv.stop() == 0, "server stopped cleanly")

# --bm25 alone: bm25 mode, and the run `qac bm25 search` writes
p = search("--bm25", bm, "--k", "20", "--run-id", "qac-bm25")
r = subprocess.run([QAC, "bm25", "search", "--index", bm, "--queries", qpath, "--run", "-", "--k", "20"],
                   capture_output=True, text=True)
check(p.returncode == 0 and p.stdout == r.stdout and p.stdout, "--bm25 alone equals qac bm25 search")

# refusals: usage errors (exit 2) naming what clashes
for args, env, want in [
        (["--server", "http://127.0.0.1:9", "--index", ix], None, ["--server", "--index"]),
        (["--server", "http://127.0.0.1:9"], {"QAC_INDEX": ix}, ["--server", "QAC_INDEX"]),
        (["--server", "http://127.0.0.1:9", "--bm25", bm], None, ["--server", "--bm25"]),
        (["--index", ix, "--mode", "bm25"], None, ["--bm25"]),
        (["--index", ix, "--mode", "hybrid"], None, ["--bm25"]),
        (["--bm25", bm, "--mode", "hybrid"], None, ["--index"]),
        (["--index", ix, "--bm25", bm, "--mode", "dense"], None, ["--bm25"]),
        ([], None, ["--index"])]:
    p = search(*args, env=env)
    check(p.returncode == 2 and all(w in p.stderr for w in want),
          f"qac search {' '.join(a if a not in (ix, bm) else 'DIR' for a in args)}"
          f"{' with ' + json.dumps(list(env)) if env else ''}: exit {p.returncode}, {p.stderr.strip()[:160]!r}")
finish()
