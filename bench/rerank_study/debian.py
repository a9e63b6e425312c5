#!/usr/bin/env python3
"""The Debian known-item set of the rerank study: each package's one-line
short description is a known-item query for its package, whose long
description (the title left out, so the pair is not trivial) is the
document.

A seeded sample of DOCS packages is the corpus. Queries are the sampled
packages whose short description no other sampled package shares (a
query with two right answers is not a known-item query); they are split,
in a seeded order, into TEST test queries (5 folds), TRAIN labelled
training queries and UNLAB unlabelled ones (pseudo-labelled by the
teacher). Writes OUT/corpus.tsv (id<TAB>text, whitespace runs as one
space), OUT/{test,train,unlab}.tsv and .qrels (TREC), OUT/testK.tsv and
.qrels (K = 0..4) and OUT/split.json (the counts).

Usage: debian.py PACKAGES_JSONL_GZ OUT [--docs 10000 --test 250 --train 1000 --unlab 1000 --seed 42]"""
import argparse
import collections
import gzip
import json
import os
import random

ap = argparse.ArgumentParser()
ap.add_argument("packages")
ap.add_argument("out")
ap.add_argument("--docs", type=int, default=10000)
ap.add_argument("--test", type=int, default=250)
ap.add_argument("--train", type=int, default=1000)
ap.add_argument("--unlab", type=int, default=1000)
ap.add_argument("--seed", type=int, default=42)
a = ap.parse_args()
os.makedirs(a.out, exist_ok=True)


def clean(s):
    return " ".join(s.split())


pk = [json.loads(l) for l in gzip.open(a.packages, "rt", encoding="utf-8")]
rng = random.Random(a.seed)
docs = rng.sample(pk, a.docs)
docs.sort(key=lambda d: d["id"])
with open(os.path.join(a.out, "corpus.tsv"), "w", encoding="utf-8") as f:
    for d in docs:
        f.write(f"{d['id']}\t{clean(d['text'])}\n")
count = collections.Counter(clean(d["title"]).lower() for d in docs)
unique = [d for d in docs if count[clean(d["title"]).lower()] == 1 and clean(d["title"])]
rng.shuffle(unique)
need = a.test + a.train + a.unlab
assert len(unique) >= need, f"{len(unique)} unique titles < {need}"
parts = {"test": unique[:a.test], "train": unique[a.test:a.test + a.train],
         "unlab": unique[a.test + a.train:need]}
for k in range(5):
    parts[f"test{k}"] = parts["test"][k::5]
for name, ds in parts.items():
    ds = sorted(ds, key=lambda d: d["id"])
    with open(os.path.join(a.out, f"{name}.tsv"), "w", encoding="utf-8") as f:
        f.writelines(f"q:{d['id']}\t{clean(d['title'])}\n" for d in ds)
    with open(os.path.join(a.out, f"{name}.qrels"), "w", encoding="utf-8") as f:
        f.writelines(f"q:{d['id']} 0 {d['id']} 1\n" for d in ds)
split = {"packages": len(pk), "corpus": len(docs), "unique_titles": len(unique),
         **{k: len(v) for k, v in parts.items()}}
json.dump(split, open(os.path.join(a.out, "split.json"), "w"), indent=1)
print(json.dumps(split))
