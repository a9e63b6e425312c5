#!/usr/bin/env python3
"""qac index build: nothing a failure leaves blocks the fix, every check
that needs no encoding comes before any, --vectors takes its ids.

- A bad JSONL line, a duplicate id, a missing tab, an empty corpus: refused
  before any passage is encoded, naming the file (and line), with no
  directory left; the same command on the fixed file then builds. So is a
  truncated .npy given to --vectors, and a gzip-compressed corpus (named
  as such, with the gunzip that fixes it, not "embedded NUL byte").
- A build killed before its first shard was listed leaves a manifest that
  the next run, with another corpus, replaces instead of refusing.
- An existing file as --out is named as such (not "another build is
  running"); a bad --factory is FAISS's sentence without its C++ frame; a
  factory whose k-means needs more vectors than the corpus has (the
  README's IVF4096,PQ32) is refused before encoding, and one that fits builds.
- --vectors without ids is a usage error naming the choices; --ids FILE (as
  `qac encode --ids` writes it) and --corpus give the corpus's ids, and the
  run equals the one of the index built from the corpus itself; a count
  mismatch is refused; --ids sequential numbers the rows 0..n-1.
- A model mismatch names the model the index was built with and the
  --model to pass, not fingerprints alone."""
import gzip
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clilib import check, cranfield_tsv, default_model_dir, finish, run, scratch  # noqa: E402

tmp = scratch.mkdtemp(prefix="qac-cli-index-")
p = lambda *n: os.path.join(tmp, *n)  # noqa: E731
N = 30
docs = cranfield_tsv(p("docs.tsv"), N)
lines = open(docs).read().splitlines(keepends=True)
with open(p("q.tsv"), "w") as f:
    f.write("q1\twing in a slipstream\nq2\theat transfer to a flat plate in supersonic flow\n")
FAST = ["--max-len", "48", "--device", "cpu", "--threads", "2"]


def build(corpus, out, *extra, quiet=False, env=None):
    return run(["index", "build", "--corpus", corpus, "--out", out, *FAST, *extra], quiet=quiet, env=env)


def bad_then_fixed(name, bad_text, fixed_text, needle):
    path = p(name)
    open(path, "w").write(bad_text)
    out = p("ix-" + name)
    r = build(path, out)
    check(r.returncode == 1 and needle in r.stderr and name in r.stderr and "[encode]" not in r.stderr,
          f"{name}: refused before encoding, naming the file: {r.stderr.strip().splitlines()[-1]!r}")
    check(not os.path.exists(out), f"{name}: no directory left behind")
    open(path, "w").write(fixed_text)
    r = build(path, out)
    check(r.returncode == 0, f"{name}: the same command on the fixed file builds: {r.stderr.strip()[-200:]}")


good_jsonl = "".join(json.dumps({"_id": l.split("\t")[0], "text": l.split("\t")[1].strip()}) + "\n" for l in lines)
bad_then_fixed("bad.jsonl", good_jsonl + '{"_id": "x", "text": \n', good_jsonl, "bad.jsonl:31")
bad_then_fixed("dup.tsv", "".join(lines[:10]) + lines[3] + "".join(lines[10:]), "".join(lines), "duplicate id")
bad_then_fixed("notab.tsv", "".join(lines[:5]) + "99 no tab here\n" + "".join(lines[5:]), "".join(lines), "missing tab")
bad_then_fixed("empty.tsv", "", "".join(lines), "is empty")

# a gzip-compressed corpus: refused by name with the command that fixes it
gz = p("docs.jsonl.gz")
with gzip.open(gz, "wt") as f:
    f.write(good_jsonl)
r = build(gz, p("ix-gz"))
check(r.returncode == 1 and "gzip-compressed" in r.stderr and f"gunzip -k {gz}" in r.stderr
      and "NUL" not in r.stderr and not os.path.exists(p("ix-gz")),
      "a .jsonl.gz corpus: refused before any work, with the gunzip that fixes it: " + r.stderr.strip()[-200:])
subprocess.run(["gunzip", "-k", gz], check=True)
r = build(gz[:-3], p("ix-gz"))
check(r.returncode == 0, "... and the decompressed file builds: " + r.stderr.strip()[-200:])

# killed after its first shard was written, before the manifest listed it
out = p("ix-killed")
r = build(docs, out, "--shard-size", "10", env={"QAC_TEST_CRASH": "shard_unlisted:1"})
man = json.load(open(p("ix-killed", "manifest.json")))
check(r.returncode != 0 and man["shards"] == [], "a build killed before its first listed shard: manifest, no shards")
open(p("docs2.tsv"), "w").writelines(lines[:20])
r = build(p("docs2.tsv"), out, "--shard-size", "10")
check(r.returncode == 0 and json.load(open(p("ix-killed", "manifest.json")))["count"] == 20,
      "... the next run with another corpus replaces it: " + r.stderr.strip()[-200:])

# outputs and factories, before any encoding
open(p("afile"), "w").write("x")
r = build(docs, p("afile"))
check(r.returncode == 1 and "is not a directory" in r.stderr and "another" not in r.stderr,
      "an existing file as --out is named as one: " + r.stderr.strip()[-160:])
r = build(docs, p("ix-badf"), "--factory", "IVFxx")
check(r.returncode == 1 and "IVFxx" in r.stderr and "Error in" not in r.stderr and ".cpp" not in r.stderr
      and not os.path.exists(p("ix-badf")), "a bad --factory, without FAISS's C++ frame: " + r.stderr.strip()[-200:])
for factory, need in (("IVF4096,PQ32", "4096"), ("IVF4,PQ32", "256")):
    r = build(docs, p("ix-big"), "--factory", factory)
    check(r.returncode == 1 and need in r.stderr and f"only {N}" in r.stderr and "[encode]" not in r.stderr
          and not os.path.exists(p("ix-big")),
          f"--factory {factory} on {N} passages: refused before encoding: {r.stderr.strip().splitlines()[-1]!r}")
r = build(docs, p("ix-ivf4"), "--factory", "IVF4,Flat")
check(r.returncode == 0, "--factory IVF4,Flat (4 lists for 30 passages) builds: " + r.stderr.strip()[-200:])

# --vectors and their ids
r = build(docs, p("ix-corpus"), quiet=True)
r = run(["search", "--index", p("ix-corpus"), "--queries", p("q.tsv"), "--run", p("corpus.run"), "-k", "10"])
want = open(p("corpus.run")).read()
r = run(["encode", "--input", docs, "--output", p("v.npy"), "--ids", p("ids.txt"), *FAST])
check(r.returncode == 0, "qac encode --ids writes the vectors and their ids")
model = default_model_dir()


def vectors(out, *ids):
    return run(["index", "build", "--vectors", p("v.npy"), "--model", model, "--out", out, *ids])


r = vectors(p("ix-v0"))
check(r.returncode == 2 and "--ids FILE" in r.stderr and "--corpus" in r.stderr and "sequential" in r.stderr
      and not os.path.exists(p("ix-v0")), "--vectors without ids: a usage error naming the choices")
for how, ids in (("--ids FILE", ["--ids", p("ids.txt")]), ("--corpus", ["--corpus", docs])):
    out = p("ix-v-" + how.strip("-").split()[0])
    r = vectors(out, *ids)
    got = ""
    if r.returncode == 0:
        run(["search", "--index", out, "--queries", p("q.tsv"), "--run", p("v.run"), "-k", "10"])
        got = open(p("v.run")).read()
    check(r.returncode == 0 and got == want, f"--vectors with {how}: the corpus index's run, ids and all")
open(p("short.txt"), "w").writelines(open(p("ids.txt")).readlines()[:-1])
r = vectors(p("ix-short"), "--ids", p("short.txt"))
check(r.returncode == 1 and f"{N - 1} ids" in r.stderr and f"{N} rows" in r.stderr and not os.path.exists(p("ix-short")),
      "a count mismatch is refused: " + r.stderr.strip()[-160:])
# a .npy cut short (its header promises more rows than follow) is refused
# before anything is written
data = open(p("v.npy"), "rb").read()
open(p("cut.npy"), "wb").write(data[:len(data) - 384 * 4 * 3])
r = run(["index", "build", "--vectors", p("cut.npy"), "--ids", "sequential", "--out", p("ix-cut")])
check(r.returncode == 1 and "truncated" in r.stderr and not os.path.exists(p("ix-cut")),
      "a truncated .npy is refused before anything is written: " + r.stderr.strip()[-160:])
r = vectors(p("ix-seq"), "--ids", "sequential")
run(["search", "--index", p("ix-seq"), "--queries", p("q.tsv"), "--run", p("seq.run"), "-k", str(N)])
seq = sorted(int(l.split()[2]) for l in open(p("seq.run")) if l.startswith("q1 "))
check(r.returncode == 0 and seq == list(range(N)), "--ids sequential numbers the rows 0..n-1")

# a model mismatch names the index's model and the --model to use: a copy
# of the default model with CLS pooling is another model
other = p("minilm-cls")
os.makedirs(os.path.join(other, "1_Pooling"))
for f in os.listdir(model):
    src = os.path.join(model, f)
    if os.path.isfile(src) and f != "modules.json":
        os.symlink(src, os.path.join(other, f))
pool = json.load(open(os.path.join(model, "1_Pooling", "config.json")))
pool.update(pooling_mode_cls_token=True, pooling_mode_mean_tokens=False)
json.dump(pool, open(os.path.join(other, "1_Pooling", "config.json"), "w"))
shutil.copy(os.path.join(model, "modules.json"), other)
r = run(["index", "build", "--model", other, "--corpus", docs, "--out", p("ix-other"), *FAST])
# (named: without --model the search takes the index's own model)
r = run(["search", "--index", p("ix-other"), "--queries", p("q.tsv"), "--run", p("x.run"), "--model", model])
check(r.returncode == 1 and "built with the model minilm-cls" in r.stderr and f"--model {other}" in r.stderr
      and not os.path.exists(p("x.run")), "a mismatch names the index's model and --model to pass: " +
      r.stderr.strip()[-300:])
finish()
