#!/usr/bin/env python3
"""qac label (PAIR's pseudo-labels) and qac mine --denoise (RocketQA's
denoised hard negatives) against a Python implementation of their rules
(docs/reranking.md), fed the teacher's own probabilities.

The teacher is a reranker qac starts from a tiny random BERT (its scores
spread enough to cut); its probability of every (query, candidate) pair of
a Cranfield BM25 run comes from `qac rerank --pairs`, the same scores the
two commands compute, so the test checks the rules: which candidates
become positives and negatives, in which order, how many, what the qrels
add, the pre-training jsonl grouped by passage, and the denoised order
(the seeded shuffle of qac mine, scored n at a time until n pass). The
thresholds sit between two of the probabilities, never on one."""
import functools
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "finetune"))
import scratch  # noqa: E402
import testdata  # noqa: E402
from ftlib import STREAM_MINE, key, read_jsonl, shuffle, xxh64  # noqa: E402
from testlib import check, finish, run, tiny_model  # noqa: E402

TOOL = sys.argv[1]
tmp = scratch.mkdtemp(prefix="qac-xenc-label-")
p = lambda name: os.path.join(tmp, name)  # noqa: E731
docs, queries, qrels = (testdata.path("cranfield", f) for f in ("cran.all.1400", "cran.qry", "cranqrel"))
r = subprocess.run([TOOL, "fresh", tiny_model(p("tiny"), hidden=64), p("teacher"), "1", "3"], capture_output=True,
                   text=True)
assert r.returncode == 0, r.stderr
DEPTH, N, NQ = 25, 4, 20

assert run(["bm25", "build", "--corpus", docs, "--out", p("bm25")]).returncode == 0
assert run(["bm25", "search", "--index", p("bm25"), "--queries", queries, "--k", str(DEPTH + 5),
            "--run", p("all.run")]).returncode == 0
lines = [l.split() for l in open(p("all.run"))]
keep_q = sorted({int(l[0]) for l in lines})[:NQ]
with open(p("bm25.run"), "w") as f:
    f.writelines(" ".join(l) + "\n" for l in lines if int(l[0]) in keep_q)
# the candidates' texts as qac reads them (title and text, joined by a space) and the queries' texts
r = run(["mine", "--run", p("bm25.run"), "--queries", queries, "--qrels", qrels, "--corpus", docs, "--n", "1000",
         "--depth", "1000", "--out", p("texts.jsonl")])
assert r.returncode == 0, r.stderr
text, qtext = {}, {}
for o in read_jsonl(p("texts.jsonl")):
    qtext[o["query_id"]] = o["query"]
    for x in o["positive_passages"] + o["negative_passages"]:
        text[x["docid"]] = (x["title"] + " " + x["text"]) if x["title"] else x["text"]


def trec_order(a, b):  # score descending, then docid descending (strcmp), as trec_eval
    if a[1] != b[1]:
        return -1 if a[1] > b[1] else 1
    return (a[0] < b[0]) - (a[0] > b[0])


def trec_top(qid, depth):
    rows = sorted(((l[2], float(l[4])) for l in lines if l[0] == qid), key=functools.cmp_to_key(trec_order))
    return [d for d, _ in rows[:depth]]


cands = {str(q): trec_top(str(q), DEPTH + 5) for q in keep_q}
pairs = [(q, d) for q in cands for d in cands[q]]
with open(p("pairs.jsonl"), "w") as f:
    for q, d in pairs:
        f.write(json.dumps({"query": qtext[q], "passage": text[d]}) + "\n")
r = run(["rerank", "--model", p("teacher"), "--pairs", p("pairs.jsonl")])
assert r.returncode == 0, r.stderr
prob = {pq: json.loads(l)["probability"] for pq, l in zip(pairs, r.stdout.splitlines())}
vals = np.sort(np.unique(np.float32(list(prob.values()))))
check(len(vals) > 100, f"the teacher's {len(vals)} distinct probabilities spread from {vals[0]:.6f} to {vals[-1]:.6f}")


def between(q):  # a threshold halfway between two neighbouring probabilities
    i = int(q * (len(vals) - 1))
    return float((np.float64(vals[i]) + np.float64(vals[i + 1])) / 2)


POS, NEG = between(0.8), between(0.3)
judged = {}
for l in open(qrels):
    q, d, g = l.split()
    if int(q) in keep_q[:5]:  # qrels given for the first five queries only
        judged.setdefault(q, []).append((d, 0 if int(g) == -1 else 5 - int(g)))
with open(p("some.qrels"), "w") as f:
    for q, js in judged.items():
        f.writelines(f"{q} 0 {d} {g}\n" for d, g in js)

r = run(["label", "--model", p("teacher"), "--run", p("bm25.run"), "--queries", queries, "--corpus", docs,
         "--qrels", p("some.qrels"), "--depth", str(DEPTH), "--n", str(N), "--pos-threshold", repr(POS),
         "--neg-threshold", repr(NEG), "--out", p("pseudo.jsonl"), "--pretrain-out", p("pseudo-pt.jsonl")],
        env={**os.environ, "QAC_QUIET": "0"})
check(r.returncode == 0, "qac label: " + r.stderr[-300:])
want, want_pt, skipped = {}, {}, 0
for q in cands:
    top = cands[q][:DEPTH]
    jpos = [d for d, g in judged.get(q, []) if g >= 1]
    tpos = [d for d in top if d not in jpos and prob[(q, d)] > POS]
    neg = [d for d in top if d not in jpos and prob[(q, d)] < NEG][:N]
    if not jpos and not tpos:
        skipped += 1
        continue
    want[q] = (set(jpos), tpos, neg)
    for d in jpos + tpos:
        want_pt.setdefault(d, []).append(qtext[q])
got = {o["query_id"]: o for o in read_jsonl(p("pseudo.jsonl"))} if r.returncode == 0 else {}
check(sorted(got) == sorted(want), f"the queries with a positive are written ({len(want)}), {skipped} skipped")
same = True
for q, (jpos, tpos, neg) in want.items():
    o = got.get(q, {})
    pos = [x["docid"] for x in o.get("positive_passages", [])]
    same &= set(pos[:len(jpos)]) == jpos and pos[len(jpos):] == tpos
    same &= [x["docid"] for x in o.get("negative_passages", [])] == neg
    same &= o.get("query") == qtext[q]
check(same, "positives (judged first, then the teacher's above the threshold in rank order) and the top n "
            "negatives below the other threshold are the rule's")
check(f"{skipped} without a positive skipped" in r.stderr, "the summary counts the skipped queries: " + r.stderr[-300:])
pt = {o["id"]: o for o in read_jsonl(p("pseudo-pt.jsonl"))} if r.returncode == 0 else {}
check(sorted(pt) == sorted(want_pt) and all(sorted(pt[d]["queries"]) == sorted(want_pt[d]) and pt[d]["text"] == text[d]
                                             for d in pt),
      "the pre-training jsonl holds each positive passage (its text as qac reads it) with its labelled queries")

# the output trains as it stands
r = run(["finetune", "--model", p("tiny"), "--train", p("pseudo.jsonl"), "--steps", "2", "--batch", "2",
         "--n-passages", "2", "--out", p("ft")])
check(r.returncode == 0, "qac finetune trains on the pseudo-labels: " + r.stderr[-200:])
r = run(["pretrain", "--model", p("tiny"), "--data", p("pseudo-pt.jsonl"), "--steps", "2", "--batch", "2",
         "--max-len", "64", "--out", p("pt")])
check(r.returncode == 0, "qac pretrain trains on the pseudo-labelled pairs: " + r.stderr[-200:])
r = run(["label", "--model", p("teacher"), "--run", p("bm25.run"), "--queries", queries, "--corpus", docs,
         "--pos-threshold", "0.2", "--neg-threshold", "0.3", "--out", p("bad.jsonl")])
check(r.returncode == 2 and "--pos-threshold" in r.stderr, "thresholds the wrong way round: " + r.stderr.strip())

# ---- mine --denoise ----
DN = 3
NEG_T = between(0.5)
r = run(["mine", "--run", p("bm25.run"), "--queries", queries, "--qrels", qrels, "--corpus", docs, "--n", str(DN),
         "--depth", str(DEPTH), "--seed", "9", "--denoise", p("teacher"), "--neg-threshold", repr(NEG_T),
         "--out", p("denoised.jsonl")], env={**os.environ, "QAC_QUIET": "0"})
check(r.returncode == 0, "qac mine --denoise: " + r.stderr[-300:])
allrel = {}
for l in open(qrels):
    q, d, g = l.split()
    allrel.setdefault(q, {})[d] = 0 if int(g) == -1 else 5 - int(g)
dropped = scored = 0
ok = True
for o in read_jsonl(p("denoised.jsonl")):
    q = o["query_id"]
    pool = [d for d in cands.get(q, [])[:DEPTH] if allrel.get(q, {}).get(d, 0) < 1]
    order = shuffle(key(9, xxh64(q.encode()), STREAM_MINE, 0), pool)
    kept = []
    for j0 in range(0, len(order), DN):
        if len(kept) >= DN:
            break
        chunk = order[j0:j0 + DN]
        scored += len(chunk)
        for d in chunk:
            if len(kept) >= DN:
                break
            if prob[(q, d)] >= NEG_T:
                dropped += 1
            else:
                kept.append(d)
    ok &= [x["docid"] for x in o["negative_passages"]] == kept
check(ok, "the denoised negatives are the first n of the seeded shuffle the teacher scores under the threshold")
check(f"denoised: {dropped} of {scored} candidates" in r.stderr and dropped > 0,
      f"the summary counts {dropped} dropped of {scored} scored: " + r.stderr[-200:])
finish()
