#!/usr/bin/env python3
"""Per-step loss drift of a run against its reference (two log.jsonl files
with "step" and "loss", e.g. qac finetune's or drift.py's): the relative
difference (run - ref) / ref at each step; prints its worst absolute value
(and the step), its mean, and on how many steps the run is the higher,
as one line starting with the name. With bounds, exits 1 when one is
passed. With --ref-fp32 and --ref-bf16 (a reference's own pair of runs, e.g.
PyTorch's on the same GPU) the bounds grow to at least --worst-factor times
the reference's worst step and --mean-factor times its per-step standard
deviation: a run is held to the larger of the fixed bound and the one the
reference's drift in the same run implies.

Usage: compare.py REF RUN [--name NAME] [--steps N] [--worst-tol X]
       [--mean-tol Y] [--higher-max K] [--ref-fp32 F --ref-bf16 B
       --worst-factor A --mean-factor M]"""
import argparse
import json
import os
import sys

ap = argparse.ArgumentParser()
ap.add_argument("ref")
ap.add_argument("run")
ap.add_argument("--name", default="drift")
ap.add_argument("--steps", type=int, default=0, help="the number of steps both must have")
ap.add_argument("--worst-tol", type=float)
ap.add_argument("--mean-tol", type=float)
ap.add_argument("--higher-max", type=int)
ap.add_argument("--ref-fp32")
ap.add_argument("--ref-bf16")
ap.add_argument("--worst-factor", type=float, default=0.0)
ap.add_argument("--mean-factor", type=float, default=0.0)
a = ap.parse_args()
load = lambda f: {r["step"]: r["loss"] for r in (json.loads(l) for l in open(f) if l.strip())}


def drift(ref, run):
    steps = sorted(set(ref) & set(run))
    return steps, [(run[s] - ref[s]) / abs(ref[s]) for s in steps]


ref, run = load(a.ref), load(a.run)
norms = lambda f: {r["step"]: r.get("grad_norm") for r in (json.loads(l) for l in open(f) if l.strip())}
steps, rel = drift(ref, run)
worst_i = max(range(len(rel)), key=lambda i: abs(rel[i]))
worst, mean = abs(rel[worst_i]), sum(rel) / len(rel)
higher = sum(r > 0 for r in rel)
tols = []
ok = True
if a.ref_fp32 and a.ref_bf16 and not (os.path.exists(a.ref_fp32) and os.path.exists(a.ref_bf16)):
    print("reference drift: not measured (its runs are missing); the fixed bounds")
elif a.ref_fp32 and a.ref_bf16:
    _, r = drift(load(a.ref_fp32), load(a.ref_bf16))
    r_worst, r_mean = max(abs(x) for x in r), sum(r) / len(r)
    r_std = (sum((x - r_mean) ** 2 for x in r) / len(r)) ** 0.5
    print(f"reference drift: worst |rel| {r_worst:.4f}, mean {r_mean:+.4f}, per-step std {r_std:.4f}")
    if a.worst_tol is not None:
        a.worst_tol = max(a.worst_tol, a.worst_factor * r_worst)
    if a.mean_tol is not None:
        a.mean_tol = max(a.mean_tol, a.mean_factor * r_std)
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
nr, nu = norms(a.ref), norms(a.run)
ratios = [nu[s] / nr[s] for s in steps if nr.get(s) and nu.get(s)]
if ratios:  # a gradient that grows or shrinks against the reference's shows here first
    print(f"  gradient norm run/ref: mean {sum(ratios) / len(ratios):.4f}, range {min(ratios):.4f} .. {max(ratios):.4f}")
sys.exit(0 if ok else 1)
