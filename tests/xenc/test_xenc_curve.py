#!/usr/bin/env python3
"""qac finetune --cross-encoder against a PyTorch training loop, step after
step: the same loss curve over many steps, not one step's gradients.

A tiny random BERT (weights of std 0.3) starts a reranker (its pooler and the classifier qac
draws, written by qac_xenc_tool fresh for torch to load), and qac trains it
12 steps (2 groups of 1 positive + 3 BM25 negatives of Cranfield, pairs of
64 tokens, lr 1e-3 with 3 warmup steps and linear decay, weight decay 0.01,
clipping at 1.0, no dropout) writing its groups (--dump-batches).
PyTorch (bench/rerank_study/torch_ref.py: BertForSequenceClassification,
each group's softmax cross-entropy with the positive first, AdamW with
Hugging Face Trainer's decay groups, the same schedule) trains the same
initial weights on the dumped groups in float32 and in float64. The checks:

- every dumped group has its positive first (a qrels positive of its
  query), negatives that are not positives, and distinct passages;
- each step's learning rate equals the schedule's;
- each step's loss and gradient norm lie within the bound below of
  torch's float64 run, and the loss moves (the comparison is not of a
  flat curve).

The bound is the reference's own deviation: both sides compute in float32
with different summation orders, so qac's distance from the float64 run is
of the size of torch's float32 distance from it; the steps compound it
(each step's rounding moves the weights later steps start from, on both
sides alike). Per step, |qac - t64| <= 4 r |t64|, r torch's largest
relative float32 deviation |t32 - t64| / |t64| over the run (one step's may
happen to be tiny), at least 2^-20 (eight float32 ulps): 4x for the
different summation orders, as test_xenc_grad. Training must move the loss
far past that bound (against the untrained weights on the same groups), or
the comparison could not tell. A step that skipped the weights' re-pack,
decayed a tensor it should not, or took another schedule leaves the bound
(seen: the re-pack after the optimiser step removed; every bias and
LayerNorm weight decayed)."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "finetune"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "rerank_study"))
import scratch  # noqa: E402
import testdata  # noqa: E402
from ftlib import mined_groups  # noqa: E402
from testlib import check, finish, run, tiny_model  # noqa: E402

import torch  # noqa: E402
import torch_ref  # noqa: E402

torch.set_num_threads(2)
tool = sys.argv[1]
tmp = scratch.mkdtemp(prefix="qac-xenc-curve-")
p = lambda name: os.path.join(tmp, name)  # noqa: E731
docs, queries, qrels = (testdata.path("cranfield", f) for f in ("cran.all.1400", "cran.qry", "cranqrel"))
# weights of std 0.3 (not BERT's 0.02): pairs whose [CLS] states differ, so
# each group's loss is far from ln 4 and the gradients are clipped
model = tiny_model(p("tiny"), init_range=0.3)
SEED, STEPS, LR, WARMUP, WD, MAX_LEN = 5, 12, 1e-3, 3, 0.01, 64

mined_groups(p, docs, queries, qrels)

# qac's initial reranker, as finetune --seed SEED draws it, for torch
r = subprocess.run([tool, "fresh", model, p("init"), "1", str(SEED)], capture_output=True, text=True)
assert r.returncode == 0, r.stderr
r = run(["finetune", "--cross-encoder", "--model", model, "--train", p("train.jsonl"), "--out", p("run"),
         "--steps", str(STEPS), "--warmup-steps", str(WARMUP), "--batch", "2", "--n-passages", "4", "--max-len",
         str(MAX_LEN), "--lr", str(LR), "--weight-decay", str(WD), "--max-grad-norm", "1.0", "--seed", str(SEED),
         "--threads", "2", "--dropout", "0", "--dump-batches", p("dump.jsonl")])
check(r.returncode == 0, "qac finetune --cross-encoder --dump-batches: " + r.stderr[-400:])

steps = torch_ref.read_jsonl(p("dump.jsonl"))
ours = torch_ref.read_jsonl(p("run/log.jsonl"))
check(len(steps) == STEPS and [s["step"] for s in steps] == list(range(1, STEPS + 1)),
      f"the dump holds steps 1..{STEPS}: {[s['step'] for s in steps]}")
check(all(len(s["qids"]) == 2 and all(len(g) == 4 for g in s["passages"]) for s in steps),
      "each step: 2 groups of 4 passages, with their query ids")
qr = torch_ref.read_qrels(qrels)
# cranqrel's -1 is "no interest" (not a positive): read_qrels keeps it <= 0
try:
    n = torch_ref.check_groups(steps, qr)
    check(n == 2 * STEPS, f"{n} groups: positive first and relevant, negatives not, passages distinct")
except AssertionError as e:
    check(False, f"groups as the loss expects them: {e}")

ref32 = torch_ref.train(p("init"), steps, LR, WARMUP, STEPS, WD, MAX_LEN, torch.float32)
ref64 = torch_ref.train(p("init"), steps, LR, WARMUP, STEPS, WD, MAX_LEN, torch.float64)
# the same groups through the untrained weights (lr 0): how far training
# moves each step's loss, which the bound must be far below
frozen = torch_ref.train(p("init"), steps, 0.0, WARMUP, STEPS, WD, MAX_LEN, torch.float64)
check(len(ours) == STEPS, f"qac's log has {STEPS} steps ({len(ours)})")
for q, t64 in zip(ours, ref64):
    check(abs(q["lr"] - t64["lr"]) <= 1e-12 * LR, f"step {q['step']}: lr {q['lr']:.6g} (torch {t64['lr']:.6g})")
for key in ("loss", "grad_norm"):
    # torch's own float32 deviation, relative, over the run (one step's
    # may happen to be tiny); the floor: eight float32 ulps
    rel = max(max(abs(a[key] - b[key]) / abs(b[key]) for a, b in zip(ref32, ref64)), 2 ** -20)
    worst = 0.0
    for q, t64 in zip(ours, ref64):
        bound = 4 * rel * abs(t64[key])
        err = abs(q[key] - t64[key])
        worst = max(worst, err / bound)
        check(err <= bound, f"step {q['step']} {key}: qac {q[key]:.9g}, torch float64 {t64[key]:.9g} "
                            f"(|diff| {err:.2e} <= 4 x {rel:.2e} relative = {bound:.2e})")
    print(f"{key}: worst step at {worst:.3f} of its bound (torch float32's relative deviation {rel:.2e})")
moved = max(abs(t["loss"] - f["loss"]) for t, f in zip(ref64[1:], frozen[1:]))
check(moved > 1000 * 4 * 2 ** -20 * 1.4, f"training moves the loss well past the bound (by up to {moved:.4f} against "
                                         "the untrained weights on the same groups)")
finish()
