#!/usr/bin/env python3
"""Per-step loss drift of a run against its reference (two log.jsonl files
with "step" and "loss", e.g. qac finetune's or drift.py's): the relative
difference (run - ref) / ref at each step; prints its worst absolute value
(and the step), its mean, and on how many steps the run is the higher,
as one line starting with the name. With bounds, exits 1 when one is
passed.

Usage: compare.py REF RUN [--name NAME] [--steps N] [--worst-tol X]
       [--mean-tol Y] [--higher-max K]"""
import argparse
import json
import sys

ap = argparse.ArgumentParser()
ap.add_argument("ref")
ap.add_argument("run")
ap.add_argument("--name", default="drift")
ap.add_argument("--steps", type=int, default=0, help="the number of steps both must have")
ap.add_argument("--worst-tol", type=float)
ap.add_argument("--mean-tol", type=float)
ap.add_argument("--higher-max", type=int)
a = ap.parse_args()
load = lambda f: {r["step"]: r["loss"] for r in (json.loads(l) for l in open(f) if l.strip())}
ref, run = load(a.ref), load(a.run)
steps = sorted(set(ref) & set(run))
rel = [(run[s] - ref[s]) / abs(ref[s]) for s in steps]
worst_i = max(range(len(rel)), key=lambda i: abs(rel[i]))
worst, mean = abs(rel[worst_i]), sum(rel) / len(rel)
higher = sum(r > 0 for r in rel)
tols = []
ok = True
if a.steps:
    ok &= len(ref) == len(run) == len(steps) == a.steps
if a.worst_tol is not None:
    tols.append(f"worst tol {a.worst_tol:g}")
    ok &= worst <= a.worst_tol
if a.mean_tol is not None:
    tols.append(f"|mean| tol {a.mean_tol:g}")
    ok &= abs(mean) <= a.mean_tol
if a.higher_max is not None:
    tols.append(f"higher at most {a.higher_max}")
    ok &= higher <= a.higher_max
print(f"{a.name}: steps {len(steps)}; loss {ref[steps[0]]:.5f} -> ref {ref[steps[-1]]:.5f} run {run[steps[-1]]:.5f}; "
      f"worst |rel| {worst:.4f} at step {steps[worst_i]}; mean rel {mean:+.4f}; run higher on {higher} of "
      f"{len(steps)} steps" + (f" ({', '.join(tols)})" if tols else "") + ("" if ok or not tols else " FAIL"))
sys.exit(0 if ok else 1)
