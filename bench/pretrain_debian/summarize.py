#!/usr/bin/env python3
"""The pre-training study's table: per arm, zero-shot, retriever 1 and
retriever 2 on Cranfield's held-out folds (mean ± sample standard deviation
over the folds), with the pre-training's wall time and last losses.
Usage: summarize.py OUT            (markdown on stdout)
       summarize.py OUT --best N   (the N arms with the best retriever-1 nDCG@10)"""
import glob
import json
import os
import statistics
import sys

out = sys.argv[1]
measures = ["ndcg_cut_10", "map", "recall_100"]
systems = {"zs": "zero-shot", "r1": "retriever 1", "r2": "retriever 2"}
order = ["none", "coco-span", "coco-query", "coco-mixed", "coco-curriculum", "cotmae-query", "qgen-query", "coco-hlp"]


def arm_results(arm_dir):
    vals, folds = {}, []
    for d in sorted(glob.glob(os.path.join(arm_dir, "fold*"))):
        rows = []
        for f in ("results-zs.tsv", "results.tsv"):
            p = os.path.join(d, f)
            if os.path.exists(p):
                rows += [l.split() for l in open(p) if l.strip()]
        if not any(r[0] == "r1" for r in rows):
            continue
        folds.append(os.path.basename(d))
        for s, m, _, v in rows:
            if s in systems:
                vals.setdefault(s, {}).setdefault(m, []).append(float(v))
    return folds, vals


def cell(xs):
    if not xs:
        return "-"
    if len(xs) > 1:
        return f"{statistics.mean(xs):.4f} ± {statistics.stdev(xs):.4f}"
    return f"{xs[0]:.4f}"


arms = [a for a in order if os.path.isdir(os.path.join(out, a))]
arms += sorted(a for a in os.listdir(out) if os.path.isdir(os.path.join(out, a, "fold0")) and a not in arms)
res = {a: arm_results(os.path.join(out, a)) for a in arms}

if len(sys.argv) > 3 and sys.argv[2] == "--best":
    done = [a for a in arms if len(res[a][0]) == 5]
    done.sort(key=lambda a: -statistics.mean(res[a][1]["r1"]["ndcg_cut_10"]))
    print(" ".join(done[: int(sys.argv[3])]))
    sys.exit(0)

print("| arm | system | folds | nDCG@10 | MAP | R@100 |")
print("| --- | --- | --- | --- | --- | --- |")
for a in arms:
    folds, vals = res[a]
    for s in systems:
        if s in vals:
            print(f"| {a} | {systems[s]} | {len(vals[s]['map'])} | " +
                  " | ".join(cell(vals[s][m]) for m in measures) + " |")
print("\nper fold nDCG@10 of retriever 1:\n")
print("| arm | " + " | ".join(f"fold{k}" for k in range(5)) + " |")
print("| --- |" + " --- |" * 5)
for a in arms:
    folds, vals = res[a]
    if "r1" in vals:
        print(f"| {a} | " + " | ".join(f"{v:.4f}" for v in vals["r1"]["ndcg_cut_10"]) + " |")
print("\npre-training per arm (steps, wall seconds, mean loss of the first and last 10% of steps):\n")
for a in arms:
    log = os.path.join(out, a, "pretrain", "log.jsonl")
    if not os.path.exists(log):
        continue
    steps = [json.loads(l) for l in open(log) if l.strip()]
    n = max(1, len(steps) // 10)
    wall = os.path.join(out, a, "pretrain", "wall_seconds")
    secs = sum(int(x) for x in open(wall).read().split()) if os.path.exists(wall) else sum(s.get("seconds", 0) for s in steps)
    first = statistics.mean(s["loss"] for s in steps[:n])
    last = statistics.mean(s["loss"] for s in steps[-n:])
    print(f"- {a}: {len(steps)} steps, {secs:.0f} s, loss {first:.3f} -> {last:.3f}")
