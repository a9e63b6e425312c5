#!/usr/bin/env python3
"""Mean and spread over the folds of the study's results (markdown)."""
import glob
import json
import os
import statistics
import sys

out = sys.argv[1]
names = {"zs": "zero-shot (all-MiniLM-L6-v2)", "bm25": "BM25", "r1": "qac retriever 1", "st1":
         "sentence-transformers retriever 1", "r2": "qac retriever 2"}
measures = ["ndcg_cut_10", "map", "recall_100"]
vals = {}  # sys -> measure -> [per fold]
folds, st_epoch, qac_epoch = [], [], []
for d in sorted(glob.glob(os.path.join(out, "fold*"))):
    rows = []
    for f in ("results.tsv", "results-zs.tsv", "results-st1.tsv"):
        p = os.path.join(d, f)
        if os.path.exists(p):
            rows += [l.split() for l in open(p) if l.strip()]
    if not any(r[0] == "r2" for r in rows) or not any(r[0] == "st1" for r in rows):
        continue  # fold not finished
    folds.append(os.path.basename(d))
    for s, m, _, v in rows:
        vals.setdefault(s, {}).setdefault(m, []).append(float(v))
    steps = [json.loads(l) for l in open(os.path.join(d, "retriever1", "log.jsonl"))]
    qac_epoch.append(sum(s["seconds"] for s in steps))
    st_epoch.append(json.load(open(os.path.join(d, "st1.json")))["seconds_per_epoch"])


def cell(xs):
    if len(xs) > 1:
        return f"{statistics.mean(xs):.4f} ± {statistics.stdev(xs):.4f}"
    return f"{xs[0]:.4f}"


print(f"folds finished: {len(folds)} ({', '.join(folds)}); mean ± sample standard deviation over folds\n")
print("| system | nDCG@10 | MAP | R@100 |")
print("| --- | --- | --- | --- |")
for s in ("zs", "bm25", "r1", "st1", "r2"):
    if s in vals:
        print(f"| {names[s]} | " + " | ".join(cell(vals[s][m]) for m in measures) + " |")
print("\nper fold nDCG@10:\n")
print("| system | " + " | ".join(folds) + " |")
print("| --- |" + " --- |" * len(folds))
for s in ("zs", "bm25", "r1", "st1", "r2"):
    if s in vals:
        print(f"| {names[s]} | " + " | ".join(f"{v:.4f}" for v in vals[s]["ndcg_cut_10"]) + " |")
if folds:
    print("\nseconds per epoch of retriever 1, per fold (qac / sentence-transformers): " +
          ", ".join(f"{f} {a:.0f} / {b:.0f}" for f, a, b in zip(folds, qac_epoch, st_epoch)))
    print(f"\ntraining time per epoch of retriever 1 (same batches): qac {cell(qac_epoch)} s, "
          f"sentence-transformers {cell(st_epoch)} s; ratio ST/qac "
          f"{statistics.mean(st_epoch) / statistics.mean(qac_epoch):.2f}")
