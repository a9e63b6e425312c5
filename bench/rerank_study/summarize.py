#!/usr/bin/env python3
"""Mean and spread over the folds of the rerank study (markdown).
Usage: summarize.py OUT"""
import glob
import json
import os
import re
import statistics
import sys

out = sys.argv[1]
measures = [("ndcg_cut_10", "nDCG@10"), ("map", "MAP"), ("recall_100", "R@100"), ("recip_rank", "MRR")]
names = {"bm25": "BM25", "zs": "dense, zero-shot (all-MiniLM-L6-v2)",
         "bm25-ce": "BM25 -> reranker", "zs-ce": "dense zero-shot -> reranker",
         "r2": "dense, stage 2 on mined negatives", "r2dn": "dense, stage 2 on denoised mined negatives",
         "gold": "bi-encoder on the labelled queries", "pseudo": "bi-encoder on the reranker's pseudo-labels",
         "gold+pseudo": "bi-encoder on both"}


def read(paths):
    """fold -> system -> measure -> value (a fold may have several files)"""
    res = {}
    for fold, p in paths:
        if not os.path.exists(p):
            continue
        for line in open(p):
            s, m, _, v = line.split()
            res.setdefault(fold, {}).setdefault(s, {})[m] = float(v)
    return res


def cell(xs):
    return f"{statistics.mean(xs):.4f} ± {statistics.stdev(xs):.4f}" if len(xs) > 1 else f"{xs[0]:.4f}"


def table(res, systems, pairs):
    folds = sorted(res)
    systems = [s for s in systems if all(s in res[f] for f in folds)]
    print(f"folds: {len(folds)} ({', '.join(folds)}); mean ± sample standard deviation over the folds\n")
    print("| system | " + " | ".join(n for _, n in measures) + " |")
    print("| --- |" + " --- |" * len(measures))
    for s in systems:
        print(f"| {names[s]} | " + " | ".join(cell([res[f][s][m] for f in folds]) for m, _ in measures) + " |")
    print("\nper fold nDCG@10:\n")
    print("| system | " + " | ".join(folds) + " |")
    print("| --- |" + " --- |" * len(folds))
    for s in systems:
        print(f"| {names[s]} | " + " | ".join(f"{res[f][s]['ndcg_cut_10']:.4f}" for f in folds) + " |")
    print("\npaired differences in nDCG@10 (second minus first; mean ± sd over folds, folds where it is higher):\n")
    for a, b in pairs:
        if a in systems and b in systems:
            d = [res[f][b]["ndcg_cut_10"] - res[f][a]["ndcg_cut_10"] for f in folds]
            print(f"- {names[b]} vs {names[a]}: {cell(d)} ({sum(x > 0 for x in d)} of {len(d)} folds higher)")
    print()


def summary_line(path, cmd):
    if not os.path.exists(path):
        return None
    lines = [l.strip() for l in open(path) if l.startswith(f"qac {cmd}:")]
    return lines[-1] if lines else None


C = os.path.join(out, "cranfield")
folds = sorted(glob.glob(f"{C}/fold*"))
cran = read([(os.path.basename(d), os.path.join(d, "results-rerank.tsv")) for d in folds])
if cran:
    print("## Cranfield: retrieve, then rerank (5 query folds: train on 180, test on 45)\n")
    table(cran, ["bm25", "bm25-ce", "zs", "zs-ce"], [("bm25", "bm25-ce"), ("zs", "zs-ce"), ("bm25", "zs")])
tr = read([(os.path.basename(d), os.path.join(d, "results-train.tsv")) for d in folds])
if tr:
    print("## Cranfield: the same rerankers on 45 of their own training queries (BM25's top 30 reranked)\n")
    table(tr, ["bm25", "bm25-ce"], [("bm25", "bm25-ce")])
curves = []
for d in folds:
    log = os.path.join(d, "reranker", "log.jsonl")
    if os.path.exists(log):
        ls = [json.loads(l)["loss"] for l in open(log) if l.strip()]
        k = min(10, len(ls) // 2)
        if k:
            curves.append(f"{os.path.basename(d)} {statistics.mean(ls[:k]):.3f} -> {statistics.mean(ls[-k:]):.3f}")
if curves:
    print(f"Training loss of each fold's reranker, mean of the first and of the last {k} steps: " + ", ".join(curves)
          + "\n")
dn = read([(os.path.basename(d), os.path.join(d, "results-denoise.tsv")) for d in folds])
if dn:
    print("## Cranfield: the second fine-tuning stage with and without denoised negatives\n")
    table(dn, ["zs", "r2", "r2dn"], [("zs", "r2"), ("zs", "r2dn"), ("r2", "r2dn")])
    for d in folds:
        line = summary_line(os.path.join(d, "denoise.log"), "mine")
        if line:
            print(f"- {os.path.basename(d)} denoising: {line}")
    print()
D = os.path.join(out, "debian")
deb = read([(f"test{k}", os.path.join(D, f"results-test{k}.tsv")) for k in range(5)])
if deb:
    split = json.load(open(os.path.join(D, "split.json")))
    print(f"## Debian known items ({split['corpus']:,} packages; {split['test']} test queries in 5 folds, "
          f"{split['train']} labelled and {split['unlab']} unlabelled training queries)\n")
    table(deb, ["bm25", "bm25-ce", "zs", "zs-ce", "gold", "pseudo", "gold+pseudo"],
          [("bm25", "bm25-ce"), ("zs", "zs-ce"), ("zs", "gold"), ("zs", "pseudo"), ("gold", "pseudo"),
           ("gold", "gold+pseudo")])
    line = summary_line(os.path.join(D, "label.log"), "label")
    if line:
        print(f"- labelling: {line}")
T = os.path.join(out, "times.tsv")
if os.path.exists(T):
    rows = [l.rstrip("\n").split("\t") for l in open(T)]
    wall, cpu = sum(float(r[1]) for r in rows), sum(float(r[2]) for r in rows)
    print(f"\nsteps timed: {len(rows)}, {wall / 60:.1f} wall minutes, {cpu / 60:.1f} CPU minutes "
          f"(load averages from {min(float(r[3].split()[0]) for r in rows):.1f} to "
          f"{max(float(r[3].split()[0]) for r in rows):.1f}; OUT/times.tsv)")
