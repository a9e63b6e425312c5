#!/usr/bin/env python3
"""qac finetune --cross-encoder: a reranker trained from a BERT checkpoint
resumes after kill -9 exactly as if never stopped, and is a reranker.

A tiny random BERT starts a reranker (its pooler, a fresh classifier) and
trains 10 steps (checkpoint every 3, dropout 0.1, the dev queries' BM25 run
reranked at each save) on Cranfield BM25 negatives. The same run is killed
half-way through writing checkpoint 6, resumed and killed before the batch
of step 8, resumed and killed half-way through writing checkpoint 9, and
resumed to the end: the per-step log (exact digits), the dev metrics, the
final weights and the optimiser state equal the uninterrupted run's bit for
bit. Every option that shapes the steps, changed on resume, is refused
(exit 2) before any step, naming both values, every file of the run
byte-identical. GradCache (--chunk) gives the uninterrupted run's losses
within fp32 rounding. The result reranks a run (qac rerank) and its
dev.jsonl equals trec_eval's numbers on its own dev runs (pytrec_eval).
Progress lines on stderr; bi-encoder options are refused."""
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "finetune"))
import scratch  # noqa: E402
import testdata  # noqa: E402
from ftlib import dev_set, file_bytes, latest, mined_groups, read_jsonl, run_files, traj  # noqa: E402
from testlib import check, finish, run, tiny_model  # noqa: E402

tmp = scratch.mkdtemp(prefix="qac-xenc-train-")
p = lambda name: os.path.join(tmp, name)  # noqa: E731
docs, queries, qrels = (testdata.path("cranfield", f) for f in ("cran.all.1400", "cran.qry", "cranqrel"))
model = tiny_model(p("tiny"))

mined_groups(p, docs, queries, qrels)
# dev: queries 201-212 with their BM25 run
dev_set(p, qrels)
dev_qids = {str(i + 1) for i in range(200, 212)}
with open(p("dev.run"), "w") as f:
    f.writelines(l for l in open(p("bm25.run")) if l.split()[0] in dev_qids)

ARGS = ["--cross-encoder", "--model", model, "--train", p("train.jsonl"), "--steps", "10", "--save-every", "3",
        "--batch", "2", "--n-passages", "3", "--max-len", "64", "--lr", "1e-3", "--seed", "5", "--threads", "2",
        "--dropout", "0.1", "--dev-queries", p("dev.tsv"), "--dev-qrels", p("dev.qrels"), "--dev-corpus", docs,
        "--dev-run", p("dev.run"), "--dev-depth", "20"]


def finetune(out, *extra, env=None):
    return run(["finetune", *ARGS, "--out", out, *extra], env={**os.environ, "QAC_QUIET": "0", **(env or {})})


ref = p("ref")
r = finetune(ref)
check(r.returncode == 0, "uninterrupted run: " + r.stderr[-400:])
check("its pooler, a fresh classifier" in r.stderr, "the run says what it started from")
line = next((l for l in r.stderr.splitlines() if l.startswith("step 4/10")), "")
check(all(w in line for w in ("epoch", "loss", "lr", "grad_norm", "pairs/s", "ETA")),
      f"progress line has step, epoch, loss, lr, grad norm, pairs/s and ETA: {line!r}")
check(sum(l.startswith("dev at step") for l in r.stderr.splitlines()) == 4, "dev run reranked at steps 3, 6, 9, 10")
dev_ref = read_jsonl(os.path.join(ref, "dev.jsonl"))
check([d["step"] for d in dev_ref] == [3, 6, 9, 10], "dev.jsonl holds the metrics of every save")
losses = [l["loss"] for l in read_jsonl(os.path.join(ref, "log.jsonl"))]
check(len(losses) == 10 and all(np.isfinite(losses)), f"10 finite losses {losses}")

# the dev metrics are trec_eval's on the dev runs it wrote
import pytrec_eval  # noqa: E402
qrel = {}
for l in open(p("dev.qrels")):  # Cranfield's grades: 1 (best) .. 4, -1 none; gains 4 .. 1, 0 (qac's mapping)
    q, d, rel = l.split()
    qrel.setdefault(q, {})[d] = 0 if int(rel) == -1 else 5 - int(rel)
runs = {}
for l in open(os.path.join(ref, "dev", "run-10.trec")):
    q, _, d, _, s, _ = l.split()
    runs.setdefault(q, {})[d] = float(s)
ev = pytrec_eval.RelevanceEvaluator(qrel, {"ndcg_cut.10", "map"}).evaluate(runs)
nd = sum(v["ndcg_cut_10"] for v in ev.values()) / len(qrel)
check(abs(nd - dev_ref[-1]["ndcg_cut_10"]) < 5e-7, f"dev nDCG@10 {dev_ref[-1]['ndcg_cut_10']} is trec_eval's {nd:.6f}")
check(all(len(v) == 20 for v in runs.values()), "each dev query's top 20 reranked")

out = p("killed")
r = finetune(out, env={"QAC_TEST_KILL_IN_SAVE": "6"})
check(r.returncode == -9, f"killed half-way through checkpoint 6 (rc {r.returncode})")
check(latest(out) == "checkpoint-3", f"latest names the last complete checkpoint ({latest(out)})")
r = finetune(out, "--resume", env={"QAC_TEST_CRASH": "xenc_batch:5"})
check(r.returncode == -9, f"resumed and killed before step 8 (rc {r.returncode})")
check(latest(out) == "checkpoint-6", f"work since the first kill was kept ({latest(out)})")
r = finetune(out, "--resume", env={"QAC_TEST_KILL_IN_SAVE": "9"})
check(r.returncode == -9 and latest(out) == "checkpoint-6",
      f"resumed and killed half-way through checkpoint 9 (rc {r.returncode}, {latest(out)})")
r = finetune(out)
check(r.returncode == 1 and "--resume" in r.stderr, "a second run into the same directory without --resume is refused")

before = run_files(out)
CHANGED = "the run was written with "
changes = [(["--steps", "12"], "--steps (or --epochs) 10, this resume has 12"),
           (["--seed", "6"], "--seed 5, this resume has 6"),
           (["--lr", "2e-3"], "--lr 0.001, this resume has 0.002"),
           (["--weight-decay", "0"], "--weight-decay 0.01, this resume has 0"),
           (["--schedule", "cosine"], "--schedule linear, this resume has cosine"),
           (["--warmup-steps", "3"], "--warmup-steps (or --warmup-ratio times the steps) 1, this resume has 3"),
           (["--dropout", "0.2"], "--dropout 0.1, this resume has 0.2"),
           (["--batch", "3"], "--batch 2, this resume has 3"),
           (["--n-passages", "4"], "--n-passages 3, this resume has 4"),
           (["--max-len", "48"], "--max-len 64, this resume has 48"),
           (["--truncation", "only_second"], "--truncation longest_first, this resume has only_second"),
           (["--num-labels", "2"], "--num-labels 1, this resume has 2")]
for extra, msg in changes:
    r = finetune(out, "--resume", *extra)
    after = run_files(out)
    changed = sorted(f for f in before.keys() | after.keys() if before.get(f) != after.get(f))
    check(r.returncode == 2 and CHANGED + msg in r.stderr and not any(l.startswith("step ") for l in r.stderr.splitlines())
          and not changed,
          f"--resume with {' '.join(extra)} is refused before any step, naming both values, every file of the run "
          f"byte-identical (changed: {changed}): " + r.stderr.strip()[-300:])

r = finetune(out, "--resume")
check(r.returncode == 0 and "steps 7..10" in r.stderr, "resumed from checkpoint 6 to the end: " + r.stderr[-300:])
check(traj(out) == traj(ref), "loss, lr and grad norm of every step equal the uninterrupted run's")
check(read_jsonl(os.path.join(out, "dev.jsonl")) == dev_ref, "dev metrics equal the uninterrupted run's")
for f in ("model.safetensors", "training_state.qts"):
    check(file_bytes(os.path.join(ref, "checkpoint-10", f)) == file_bytes(os.path.join(out, "checkpoint-10", f)),
          f"final {f} is bit-identical")
check(file_bytes(os.path.join(ref, "model.safetensors")) == file_bytes(os.path.join(ref, "checkpoint-10", "model.safetensors")),
      "the run directory itself holds the final reranker")

# GradCache: the same steps in chunks of 2 pairs
r = finetune(p("chunk"), "--chunk", "2")
cl = [l["loss"] for l in read_jsonl(os.path.join(p("chunk"), "log.jsonl"))]
check(r.returncode == 0 and len(cl) == 10 and np.allclose(cl, losses, rtol=1e-5, atol=0),
      f"--chunk 2 trains the same steps (losses within fp32 rounding of the full batch's): {cl} {losses}")

# the result reranks a run
r = run(["rerank", "--model", ref, "--run", p("dev.run"), "--queries", p("dev.tsv"), "--corpus", docs, "--depth", "20",
         "--max-len", "64",
         "--out", p("reranked.run")])
check(r.returncode == 0, "qac rerank with the trained model: " + r.stderr[-300:])
rr = [l.split() for l in open(p("reranked.run"))] if r.returncode == 0 else []
ref_run = [l.split() for l in open(os.path.join(ref, "dev", "run-10.trec"))]
check([x[:5] for x in rr] == [x[:5] for x in ref_run], "qac rerank writes the dev run of the last save")

# bi-encoder options are refused
r = run(["finetune", *ARGS, "--out", p("bad"), "--tau", "0.05"])
check(r.returncode == 2 and "--tau is a bi-encoder option" in r.stderr, "--tau with --cross-encoder: " + r.stderr.strip())
r = run(["finetune", "--model", model, "--train", p("train.jsonl"), "--out", p("bad2"), "--dev-run", p("dev.run")])
check(r.returncode == 2 and "--cross-encoder options" in r.stderr, "--dev-run without --cross-encoder: " + r.stderr.strip())
finish()
