#!/usr/bin/env python3
"""Bad input to qac finetune: clear errors before any training starts
(malformed lines name file and line; empty set; missing dev file; a
checkpoint of another architecture; a model family qac does not load), skips counted;
Tevatron and qidpidtriples files compressed with gzip read as the plain
ones (the same batches; errors still name file and line; a truncated
stream refused); and
the MS MARCO forms (qidpidtriples, qrels) read correctly."""
import gzip
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from ftlib import check, finish, read_jsonl, run, tiny_model  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import scratch  # noqa: E402

tmp = scratch.mkdtemp(prefix="qac-ft-bad-")
p = lambda name: os.path.join(tmp, name)  # noqa: E731
model = tiny_model(p("tiny"))
other = tiny_model(p("tiny64"), hidden=64, heads=4)


def write(name, text):
    with open(p(name), "w") as f:
        f.write(text)
    return p(name)


good = {"query_id": "1", "query": "q one", "positive_passages": [{"docid": "a", "title": "", "text": "pos"}],
        "negative_passages": [{"docid": "b", "title": "", "text": "neg"}]}
nopos = dict(good, query_id="2", positive_passages=[])
train = write("train.jsonl", "\n".join(json.dumps(x) for x in (good, nopos, dict(good, query_id="3"))) + "\n")
BASE = ["--model", model, "--steps", "2", "--batch", "1", "--n-passages", "2", "--p-max-len", "16", "--threads", "2"]


def ft(*args, out="out"):
    return run(["finetune", *BASE, *args, "--out", p(out)], env={**os.environ, "QAC_QUIET": "0"})


def untouched(out):
    d = p(out)
    return not os.path.exists(os.path.join(d, "log.jsonl")) and not any(
        n.startswith("checkpoint") for n in (os.listdir(d) if os.path.isdir(d) else []))


cases = [
    ("line3.jsonl", json.dumps(good) + "\n" + json.dumps(good) + "\n{\"query_id\": \"x\", \"query\": \n", ":3: malformed JSON"),
    ("noquery.jsonl", json.dumps(good) + "\n" + json.dumps({"query_id": "9", "positive_passages": []}) + "\n",
     ":2: missing string \"query\""),
    ("badpsg.jsonl", json.dumps(dict(good, negative_passages=[{"docid": "z"}])) + "\n",
     ":1: negative_passages[0] has no string \"text\""),
    ("notarray.jsonl", json.dumps(dict(good, positive_passages="x")) + "\n", ":1: \"positive_passages\" is not an array"),
    ("floatqid.jsonl", json.dumps(dict(good, query_id=1.5)) + "\n", ":1: missing \"query_id\" (string or integer)"),
    ("floatdocid.jsonl", json.dumps(dict(good, negative_passages=[{"docid": 2.5, "text": "t"}])) + "\n",
     ":1: negative_passages[0] \"docid\" is not a string or integer"),
]
for name, text, want in cases:
    f = write(name, text)
    r = ft("--train", f, out="o-" + name)
    check(r.returncode == 1 and (f + want) in r.stderr and untouched("o-" + name),
          f"{name}: error names file and line ({r.stderr.strip()[:160]})")

ints = write("ints.jsonl", json.dumps(dict(good, query_id=7, positive_passages=[{"docid": 11, "text": "pos"}])) + "\n")
r = ft("--train", ints, "--dry-run", out="o-ints")
check(r.returncode == 0, "integer query_id and docid are read as ids: " + r.stderr.strip()[-160:])
r = ft("--train", train, "--dry-run", out="o-skip")
check(r.returncode == 0 and "skipped 1 queries without a positive" in r.stderr, "a query without positives is skipped and counted")
empty = write("empty.jsonl", json.dumps(nopos) + "\n")
r = ft("--train", empty, out="o-empty")
check(r.returncode == 1 and "training set is empty" in r.stderr and untouched("o-empty"), "empty training set: " + r.stderr.strip()[-120:])
r = ft("--train", write("nothing.jsonl", ""), out="o-empty2")
check(r.returncode == 1 and "training set is empty" in r.stderr and untouched("o-empty2"), "empty file: clear error")
r = ft("--train", p("missing.jsonl"), out="o-missing")
check(r.returncode == 1 and "missing.jsonl" in r.stderr and untouched("o-missing"), "missing training file named")

# gzip: the same examples give the same batches; a blank line and CRLF endings as in the plain file
multi = [dict(good, query_id=f"m{i}", query=f"query {i}",
              positive_passages=[{"docid": f"p{i}", "title": f"title {i}", "text": f"positive {i}"}],
              negative_passages=[{"docid": f"n{i}.{j}", "text": f"negative {i} {j}"} for j in range(4)])
         for i in range(7)]
text = "\r\n".join(json.dumps(x) for x in multi[:3]) + "\n\n" + "\n".join(json.dumps(x) for x in multi[3:]) + "\n"
plain = write("multi.jsonl", text)
with gzip.open(p("multi.jsonl.gz"), "wt", newline="") as f:
    f.write(text)
dumps = {}
for name in ("multi.jsonl", "multi.jsonl.gz"):
    r = ft("--train", p(name), "--dry-run", "--dump-batches", p(name + ".dump"), "--batch", "3", "--steps", "5",
           "--n-passages", "3", out="o-" + name)
    dumps[name] = open(p(name + ".dump")).read() if r.returncode == 0 else ""
    check(r.returncode == 0 and "7 examples" in r.stderr, f"{name}: 7 examples read: " + r.stderr.strip()[-160:])
batches = [json.loads(l) for l in dumps["multi.jsonl"].splitlines()]
check(len(batches) == 5 and dumps["multi.jsonl.gz"] == dumps["multi.jsonl"],
      "a .gz training file gives the plain file's batches, byte for byte")
bad_gz = p("bad.jsonl.gz")
with gzip.open(bad_gz, "wt") as f:
    f.write(json.dumps(good) + "\n" + json.dumps(good) + "\n{\"query_id\": \"x\", \"query\": \n")
r = ft("--train", bad_gz, out="o-badgz")
check(r.returncode == 1 and (bad_gz + ":3: malformed JSON") in r.stderr and untouched("o-badgz"),
      "a malformed line of a .gz file names file and line: " + r.stderr.strip()[-160:])
cut_gz = p("cut.jsonl.gz")
with open(cut_gz, "wb") as f:
    f.write(gzip.compress(text.encode())[:-30])
r = ft("--train", cut_gz, out="o-cutgz")
check(r.returncode == 1 and cut_gz in r.stderr and "truncated gzip stream" in r.stderr and untouched("o-cutgz"),
      "a truncated .gz file is refused, named: " + r.stderr.strip()[-160:])

corpus = write("corpus.tsv", "a\tpos\nb\tneg\n")
r = ft("--train", train, "--dev-queries", p("nodev.tsv"), "--dev-qrels", p("q.txt"), "--dev-corpus", corpus, out="o-dev")
check(r.returncode == 1 and "nodev.tsv" in r.stderr and untouched("o-dev"), "missing dev file: " + r.stderr.strip()[-120:])
r = ft("--train", train, "--dev-queries", corpus, out="o-dev2")
check(r.returncode == 1 and "--dev-qrels" in r.stderr and untouched("o-dev2"), "a partial dev set is refused")

r = ft("--train", train, out="o-arch")
check(r.returncode == 0, "a 2-step run of the 32-wide model")
log = open(p("o-arch/log.jsonl")).read()
r = run(["finetune", *BASE[2:], "--model", other, "--train", train, "--steps", "4", "--resume", "--out", p("o-arch")])
check(r.returncode == 1 and "another architecture" in r.stderr and "hidden_size 32" in r.stderr
      and open(p("o-arch/log.jsonl")).read() == log, "resume with another architecture: " + r.stderr.strip()[-200:])
rob = tiny_model(p("distilbert"))
cfg = json.load(open(os.path.join(rob, "config.json")))
cfg["model_type"] = "distilbert"
json.dump(cfg, open(os.path.join(rob, "config.json"), "w"))
r = run(["finetune", *BASE[2:], "--model", rob, "--train", train, "--out", p("o-rob")])
check(r.returncode == 1 and 'model_type "distilbert"' in r.stderr and "closest supported family is bert" in r.stderr
      and untouched("o-rob"), "a model family qac does not load: " + r.stderr.strip()[-200:])
r = ft("--train", train, "--device", "cuda", out="o-cuda")
# without a usable GPU (or without CUDA in the build) --device cuda is refused;
# with one it trains
check((r.returncode == 2 and "CUDA" in r.stderr and untouched("o-cuda")) or r.returncode == 0,
      "--device cuda is refused with a reason, or trains on a GPU: " + r.stderr.strip()[-160:])

# MS MARCO forms: qidpidtriples and qrels, ids looked up in queries and corpus
queries = write("queries.tsv", "q1\tfirst\nq2\tsecond\n")
corpus = write("collection.tsv", "p1\tone\np2\ttwo\np3\tthree\np4\tfour\n")
triples = write("triples.tsv", "q1\tp1\tp2\nq1\tp1\tp3\nq2\tp4\tp1\n")
r = ft("--train-triples", triples, "--train-queries", queries, "--train-corpus", corpus, "--dry-run", "--dump-batches",
       p("tri.jsonl"), "--batch", "2", "--steps", "1", "--n-passages", "3", out="o-tri")
got = read_jsonl(p("tri.jsonl")) if r.returncode == 0 else [{}]
groups = dict(zip(got[0].get("queries", []), got[0].get("passages", [])))
check(r.returncode == 0 and groups.get("first", [None])[0] == "one" and sorted(groups["first"][1:]) == ["three", "two"]
      and groups.get("second") == ["four", "one", "one"], f"qidpidtriples grouped by query ({groups})")
with gzip.open(p("triples.tsv.gz"), "wt") as f:
    f.write(open(triples).read())
r = ft("--train-triples", p("triples.tsv.gz"), "--train-queries", queries, "--train-corpus", corpus, "--dry-run",
       "--dump-batches", p("trigz.jsonl"), "--batch", "2", "--steps", "1", "--n-passages", "3", out="o-trigz")
check(r.returncode == 0 and open(p("trigz.jsonl")).read() == open(p("tri.jsonl")).read(),
      "qidpidtriples.gz gives the plain file's batch: " + r.stderr.strip()[-160:])
bad = write("triples-bad.tsv", "q1\tp1\tp2\nq1\tp1\n")
r = ft("--train-triples", bad, "--train-queries", queries, "--train-corpus", corpus, out="o-tri2")
check(r.returncode == 1 and "triples-bad.tsv:2:" in r.stderr, "malformed triples line named")
unknown = write("triples-unknown.tsv", "q1\tp1\tp9\n")
r = ft("--train-triples", unknown, "--train-queries", queries, "--train-corpus", corpus, out="o-tri3")
check(r.returncode == 1 and "'p9'" in r.stderr, "a passage id missing from the corpus is named")
qrels = write("qrels.tsv", "q1 0 p2 1\nq2 0 p3 2\nq2 0 p4 0\n")
r = ft("--train-qrels", qrels, "--train-queries", queries, "--train-corpus", corpus, "--n-passages", "1", "--dry-run",
       "--dump-batches", p("qr.jsonl"), "--batch", "2", "--steps", "1", out="o-qr")
got = read_jsonl(p("qr.jsonl")) if r.returncode == 0 else [{}]
check(r.returncode == 0 and dict(zip(got[0]["queries"], got[0]["passages"])) == {"first": ["two"], "second": ["three"]},
      "qrels form: judged relevant passages are the positives")
finish()
