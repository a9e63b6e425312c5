#!/usr/bin/env python3
"""qac mine against hand-checked answers and against a reference of the
rule (ftlib) on the real BM25 run of Cranfield; mining by model and index
equals mining that model's search run."""
import functools
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from ftlib import STREAM_MINE, check, cranfield_docs, default_model_dir, finish, key, read_jsonl, run, shuffle, xxh64  # noqa: E402
import testdata  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import scratch  # noqa: E402

tmp = scratch.mkdtemp(prefix="qac-mine-")
p = lambda name: os.path.join(tmp, name)  # noqa: E731


def write(name, text):
    with open(p(name), "w") as f:
        f.write(text)
    return p(name)


def reference(qid, ranked, positives, depth, n, seed):
    """ranked: [(docid, score)] in file order; TRAINING.md: top depth, judged positives dropped, shuffled, n kept."""
    def trec_order(a, b):  # score descending, then docid descending (strcmp), as trec_eval
        if a[1] != b[1]:
            return -1 if a[1] > b[1] else 1
        return (a[0] < b[0]) - (a[0] > b[0])
    top = sorted(ranked, key=functools.cmp_to_key(trec_order))[:depth]
    cands = [d for d, _ in top if d not in positives]
    return shuffle(key(seed, xxh64(qid.encode()), STREAM_MINE, 0), cands)[:n]


# 1. a corpus small enough to check by hand
corpus = write("corpus.tsv", "".join(f"d{i}\ttext of d{i}\n" for i in range(1, 11)))
queries = write("queries.tsv", "q1\tfirst query\nq2\tsecond query\nq3\tthird query, not judged\n")
qrels = write("qrels.txt", "q1 0 d2 1\nq1 0 d5 0\nq1 0 d9 2\nq2 0 d1 1\n")
runf = write("run.txt", "q1 Q0 d3 1 8 r\nq1 Q0 d1 2 10 r\nq1 Q0 d2 3 9 r\nq1 Q0 d5 4 8 r\nq1 Q0 d4 5 8 r\n"
             "q1 Q0 d6 6 6 r\nq2 Q0 d3 1 3 r\nq2 Q0 d1 2 2 r\nq2 Q0 d4 3 1 r\n")
out = p("mined.jsonl")
r = run(["mine", "--run", runf, "--queries", queries, "--qrels", qrels, "--corpus", corpus, "--depth", "4",
         "--n", "10", "--out", out], env={**os.environ, "QAC_QUIET": "0"})
check(r.returncode == 0, "mine on the tiny corpus: " + r.stderr[-300:])
got = {o["query_id"]: o for o in read_jsonl(out)} if r.returncode == 0 else {}
check(sorted(got) == ["q1", "q2"], "q3 (no judged positive) is skipped")
check("1 without a judged positive skipped" in r.stderr, "the skip is counted")
q1 = got.get("q1", {})
# top 4 of q1: d1 (10), d2 (9), then the 8s by docid descending: d5, d4 (d3 is 5th); d2 is judged relevant,
# d5 judged non-relevant stays a negative
check(sorted(x["docid"] for x in q1.get("negative_passages", [])) == ["d1", "d4", "d5"],
      "q1 negatives are the top 4 minus the positive, ties broken by docid descending")
check([x["docid"] for x in q1.get("positive_passages", [])] == ["d2", "d9"], "q1 positives are its judged relevant ones")
check(q1.get("positive_passages", [{}])[0] == {"docid": "d2", "title": "", "text": "text of d2"} and
      q1.get("query") == "first query", "texts come from the corpus and queries")
check(sorted(x["docid"] for x in got.get("q2", {}).get("negative_passages", [])) == ["d3", "d4"],
      "q2 keeps what is left when fewer than n")
r2 = run(["mine", "--run", runf, "--queries", queries, "--qrels", qrels, "--corpus", corpus, "--depth", "4",
          "--n", "2", "--seed", "42", "--out", p("mined2.jsonl")])
want = reference("q1", [("d3", 8), ("d1", 10), ("d2", 9), ("d5", 8), ("d4", 8), ("d6", 6)], {"d2", "d9"}, 4, 2, 42)
check(r2.returncode == 0 and [x["docid"] for x in read_jsonl(p("mined2.jsonl"))[0]["negative_passages"]] == want,
      f"q1 with n 2 keeps the first 2 of the seeded shuffle {want}")

# 2. the real BM25 run on Cranfield
cran_docs, cran_q, cran_r = (testdata.path("cranfield", f) for f in ("cran.all.1400", "cran.qry", "cranqrel"))
check(run(["bm25", "build", "--corpus", cran_docs, "--out", p("bm25")]).returncode == 0, "bm25 build")
check(run(["bm25", "search", "--index", p("bm25"), "--queries", cran_q, "--k", "300", "--run", p("bm25.run")]).returncode == 0,
      "bm25 search")
r = run(["mine", "--run", p("bm25.run"), "--queries", cran_q, "--qrels", cran_r, "--corpus", cran_docs, "--n", "30",
         "--depth", "200", "--seed", "7", "--out", p("cran.jsonl")])
check(r.returncode == 0, "mine the BM25 run: " + r.stderr[-300:])
docs = cranfield_docs()
ranked, judged = {}, {}
for line in open(p("bm25.run")):
    q, _, d, _, s, _ = line.split()
    ranked.setdefault(q, []).append((d, float(s)))
for line in open(cran_r):
    q, d, rel = line.split()
    judged.setdefault(q, {})[d] = int(rel)
qtexts = [t for _, t in testdata.cranfield_texts("cran.qry", "W")]
want = []
for i, words in enumerate(qtexts):
    qid = str(i + 1)
    pos = sorted(d for d, rel in judged.get(qid, {}).items() if 1 <= rel <= 4)  # Cranfield: -1 is judged non-relevant
    if not pos:
        continue
    negs = reference(qid, ranked.get(qid, []), set(pos), 200, 30, 7)
    P = lambda d: {"docid": d, "title": docs[d][0], "text": docs[d][1]}  # noqa: E731
    want.append({"query_id": qid, "query": words, "positive_passages": [P(d) for d in pos],
                 "negative_passages": [P(d) for d in negs]})
got = read_jsonl(p("cran.jsonl")) if r.returncode == 0 else []
check(len(got) == len(want) == 225, f"one example per judged Cranfield query ({len(got)})")
bad = [g["query_id"] for g, w in zip(got, want) if g != w]
check(got == want, f"every Cranfield example equals the reference (differ: {bad[:5]})")

# 3. mining with a model and index = mining that model's search run
sub = testdata.cranfield_subset(p("cran100"), 100)
sub_qrels = write("qrels100", "".join(l for l in open(cran_r) if 1 <= int(l.split()[1]) <= 100))
check(run(["index", "build", "--corpus", sub, "--out", p("idx"), "--max-len", "64"]).returncode == 0, "index 100 docs")
check(run(["search", "--index", p("idx"), "--queries", cran_q, "--k", "50", "--run", p("dense.run")]).returncode == 0,
      "dense search")
a = run(["mine", "--model", default_model_dir(),
         "--index", p("idx"), "--queries", cran_q, "--qrels", sub_qrels, "--corpus", sub, "--depth", "50", "--n", "5",
         "--out", p("by-model.jsonl")])
b = run(["mine", "--run", p("dense.run"), "--queries", cran_q, "--qrels", sub_qrels, "--corpus", sub, "--depth", "50",
         "--n", "5", "--out", p("by-run.jsonl")])
check(a.returncode == 0 and b.returncode == 0, "mine by model+index and by run: " + a.stderr[-200:] + b.stderr[-200:])
check(a.returncode == 0 and read_jsonl(p("by-model.jsonl")) == read_jsonl(p("by-run.jsonl")),
      "mining with --model/--index equals mining its search run")
finish()
