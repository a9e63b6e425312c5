"""End-to-end BM25 on Cranfield, checked against an independent computation.

qac builds the index and writes runs; the analyzed tokens come from
`qac bm25 analyze` (the analyzer is tested on its own in test_bm25.c), and
this script recomputes Lucene BM25 from those tokens in plain Python: its own
SmallFloat length quantisation, idf and term scores. For all 225 queries the
top 10 must be the same documents in the same order with scores within 1e-5,
with Lucene's quantised lengths and with exact lengths. The full run
(k = 1000) is then evaluated (MAP, nDCG@10, P@10) by `qac eval` and by
pytrec_eval, and must score exactly like the reference run; `qac eval -c`
must print pytrec_eval's values.
"""
import math
import os
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testdata  # noqa: E402

QAC = os.environ["QAC_BIN"]
DATA = testdata.path("cranfield")
CORPUS, QUERIES, QRELS = (os.path.join(DATA, f) for f in ("cran.all.1400", "cran.qry", "cranqrel"))
K1, B = 0.9, 0.4
TOL = 1e-5


def qac(*args):
    return subprocess.run([QAC, *args], check=True, capture_output=True, text=True).stdout


def analyzed(flag, path):
    out = {}
    for line in qac("bm25", "analyze", flag, path).splitlines():
        rid, _, toks = line.partition("\t")
        out[rid] = toks.split()
    return out


# Lucene SmallFloat, from its definition: an int4 keeps the 3 bits after the
# leading one plus a 4-bit exponent; byte values below 24 stand for themselves.
def long_to_int4(i):
    nbits = i.bit_length()
    if nbits < 4:
        return i
    shift = nbits - 4
    return ((i >> shift) & 7) | ((shift + 1) << 3)


def int4_to_long(i):
    bits, shift = i & 7, (i >> 3) - 1
    return bits if shift == -1 else (bits | 8) << shift


FREE = 255 - long_to_int4(2**31 - 1)


def quantised(length):
    byte = length if length < FREE else FREE + long_to_int4(length - FREE)
    return byte if byte < FREE else FREE + int4_to_long(byte - FREE)


class Reference:
    def __init__(self, docs, exact):
        self.ids = list(docs)
        self.tf = [Counter(docs[d]) for d in self.ids]
        lengths = [len(docs[d]) for d in self.ids]
        n = sum(1 for l in lengths if l > 0)  # Lucene's docCount
        self.avgdl = float(np.float32(sum(lengths) / n))
        self.n = n
        self.df = Counter(t for c in self.tf for t in c)
        self.post = defaultdict(list)
        for i, c in enumerate(self.tf):
            for t, f in c.items():
                self.post[t].append((i, f))
        self.len = [l if exact else quantised(l) for l in lengths]

    def search(self, tokens, k):
        acc = defaultdict(float)
        for t, count in sorted(Counter(tokens).items()):
            if t not in self.df:
                continue
            df = self.df[t]
            idf = math.log(1 + (self.n - df + 0.5) / (df + 0.5))
            for i, f in self.post[t]:
                norm = K1 * (1 - B + B * self.len[i] / self.avgdl)
                acc[i] += count * idf * f / (f + norm)
        hits = [(float(np.float32(s)), self.ids[i]) for i, s in acc.items()]
        hits.sort(key=lambda h: (h[0], h[1]), reverse=True)  # score desc, docid desc (strcmp)
        return hits[:k]


def read_run(path):
    run = defaultdict(list)
    with open(path) as f:
        for line in f:
            qid, _, doc, rank, score, _ = line.split()
            run[qid].append((int(rank), doc, float(score)))
    for qid in run:
        run[qid].sort()
        assert [r for r, _, _ in run[qid]] == list(range(1, len(run[qid]) + 1)), f"ranks of {qid}"
    return run


def compare(label, ref, queries, run):
    worst, bad = 0.0, 0
    for qid, toks in queries.items():
        want = ref.search(toks, 10)
        got = run.get(qid, [])
        ok = len(got) == len(want)
        for (_, gdoc, gs), (ws, wdoc) in zip(got, want):
            worst = max(worst, abs(gs - ws))
            ok = ok and gdoc == wdoc and abs(gs - ws) <= TOL
        if not ok:
            bad += 1
            if bad <= 3:
                print(f"  {label} query {qid}: qac {[(d, s) for _, d, s in got[:5]]} ref {[(d, s) for s, d in want[:5]]}")
    print(f"{label}: {len(queries) - bad}/{len(queries)} queries with identical top-10, max |score diff| {worst:.2e}")
    return bad


def qrels():
    q = defaultdict(dict)
    with open(QRELS) as f:
        for line in f:
            qid, doc, rel = line.split()[:3]
            rel = int(rel)
            q[qid][doc] = 5 - rel if 1 <= rel <= 4 else 0
    return q


def metrics(run_scores, rels):
    import pytrec_eval

    ev = pytrec_eval.RelevanceEvaluator(rels, {"map", "ndcg_cut.10", "P.10"})
    res = ev.evaluate(run_scores)
    # -c: qrels queries missing from the run count as 0
    n = len(rels)
    return {m: sum(r[m] for r in res.values()) / n for m in ("map", "ndcg_cut_10", "P_10")}


def main():
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        idx = os.path.join(tmp, "idx")
        qac("bm25", "build", "--corpus", CORPUS, "--out", idx)
        docs = analyzed("--corpus", CORPUS)
        queries = analyzed("--queries", QUERIES)
        assert len(docs) == 1400 and len(queries) == 225, (len(docs), len(queries))

        for exact in (False, True):
            label = "exact lengths" if exact else "lucene norms"
            run10 = os.path.join(tmp, f"run10-{exact}")
            qac("bm25", "search", "--index", idx, "--queries", QUERIES, "--run", run10, "--k", "10",
                *(["--exact-lengths"] if exact else []))
            failures += compare(label, Reference(docs, exact), queries, read_run(run10))

        run = os.path.join(tmp, "run")
        qac("bm25", "search", "--index", idx, "--queries", QUERIES, "--run", run, "--k", "1000")
        ours = {q: {d: s for _, d, s in hits} for q, hits in read_run(run).items()}
        ref = Reference(docs, False)
        theirs = {q: {d: s for s, d in ref.search(t, 1000)} for q, t in queries.items()}
        rels = qrels()
        m_ours, m_ref = metrics(ours, rels), metrics(theirs, rels)
        print("pytrec_eval  qac run: " + "  ".join(f"{k} {v:.4f}" for k, v in m_ours.items()))
        print("pytrec_eval  ref run: " + "  ".join(f"{k} {v:.4f}" for k, v in m_ref.items()))
        for k in m_ours:
            if abs(m_ours[k] - m_ref[k]) > 1e-9:
                print(f"FAIL: {k} differs from the reference run")
                failures += 1
        # qac eval must print pytrec_eval's numbers (trec_eval -c) for the same run
        out = qac("eval", "--qrels", QRELS, "--run", run, "-c", "--digits", "17",
                  "-m", "map", "-m", "ndcg_cut.10", "-m", "P.10")
        printed = {}
        for line in out.splitlines():
            name, scope, value = line.split()
            if scope == "all":
                printed[name] = float(value)
        for k, v in m_ours.items():
            got = printed.get(k)
            ok = got is not None and abs(got - v) <= 1e-12
            print(f"qac eval {k} {got!r} vs pytrec_eval {v!r}: {'ok' if ok else 'FAIL'}")
            failures += 0 if ok else 1
    print("FAILED" if failures else "OK")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
