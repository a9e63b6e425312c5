#!/usr/bin/env python3
"""Bad command lines of qac pretrain: clear errors, nothing written.
A bad --objective, --context or --curriculum and a missing --out are usage
errors (exit 2) naming the bad value; a missing --data file, a batch too
small for the contrastive loss and resuming a run with another objective
or batch size are runtime errors (exit 1)
naming the cause; --help lists the options. --device cuda (with
--recompute): one step where a GPU is present; without a usable GPU (or a
CUDA build) the error says so (exit 2)."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from ptlib import check, debian_pairs, finish, run, tiny_model  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import scratch  # noqa: E402

tmp = scratch.mkdtemp(prefix="qac-pt-cli-")
p = lambda name: os.path.join(tmp, name)  # noqa: E731
model = tiny_model(p("tiny"))
data = debian_pairs(p("pairs.jsonl"), n=10)
BASE = ["--model", model, "--steps", "1", "--batch", "2", "--max-len", "32", "--threads", "2"]


cases = 0


def pt(*args, out=None):
    global cases
    if out is None:  # a fresh directory per case: one failure cannot hide the next
        cases += 1
        out = f"out{cases}"
    pt.out = out
    return run(["pretrain", *BASE, *args, "--out", p(out)], env={**os.environ, "QAC_QUIET": "0"})


def untouched():
    return not os.path.exists(p(pt.out))


r = pt("--data", data, "--objective", "bert")
check(r.returncode == 2 and "objective" in r.stderr and "bert" in r.stderr and untouched(),
      "unknown objective: usage error naming it: " + r.stderr.strip()[:200])
r = pt("--data", data, "--context", "passage")
check(r.returncode == 2 and "passage" in r.stderr and untouched(), "unknown context: " + r.stderr.strip()[:200])
for bad in ("span-0.75,query", "span:1.5,query", "query:0.75,span"):
    r = pt("--data", data, "--curriculum", bad)
    check(r.returncode == 2 and bad.split(",")[0].split(":")[0] in r.stderr and untouched(),
          f"bad curriculum {bad!r}: usage error naming it: " + r.stderr.strip()[:200])
r = run(["pretrain", *BASE, "--data", data])
check(r.returncode == 2 and "out" in r.stderr, "missing --out: " + r.stderr.strip()[:200])
r = pt("--data", p("missing.jsonl"))
check(r.returncode == 1 and "missing.jsonl" in r.stderr and untouched(),
      "missing data file: named in the error: " + r.stderr.strip()[:200])
r = pt("--data", data, "--max-len", "512")
check(r.returncode == 1 and "--max-len" in r.stderr and untouched(),
      "--max-len beyond the model's positions (128): " + r.stderr.strip()[:200])
r = pt("--data", data, "--batch", "1")
check(r.returncode == 1 and "--batch" in r.stderr and untouched(),
      "one pair per step has no contrastive negatives: " + r.stderr.strip()[:200])
r = pt("--data", data, "--objective", "cotmae", out="run")
check(r.returncode == 0, "a CoT-MAE run " + r.stderr[-300:])
r = pt("--data", data, "--objective", "cocondenser", "--resume", out="run")
check(r.returncode == 2 and "--objective" in r.stderr, "resuming with another objective: " + r.stderr.strip()[:200])
r = pt("--data", data, "--objective", "cotmae", "--batch", "3", "--resume", out="run")
check(r.returncode == 2 and "--batch" in r.stderr, "resuming with another batch size: " + r.stderr.strip()[:200])
# a corrupt training state is refused by its checksum, never resumed
import glob
states = sorted(glob.glob(os.path.join(p("run"), "checkpoint-*", "training_state.qts")))
check(len(states) >= 1, "the CoT-MAE run saved a training state")
if states:
    with open(states[-1], "r+b") as f:
        f.seek(200)
        byte = f.read(1)
        f.seek(200)
        f.write(bytes([byte[0] ^ 0x10]))
    r = pt("--data", data, "--objective", "cotmae", "--steps", "50", "--resume", out="run")
    check(r.returncode == 1 and "checksum" in r.stderr, "a flipped byte in the training state: " + r.stderr.strip()[:200])
# --recompute is accepted on cuda: a step where a GPU is present
probe = run(["pretrain", *BASE, "--data", data, "--device", "cuda", "--recompute", "--steps", "1", "--out",
             p("cuda-probe")])
if "no usable CUDA GPU" in probe.stderr or "built without CUDA" in probe.stderr:
    check(probe.returncode == 2 and not os.path.exists(p("cuda-probe")),
          "--device cuda without a GPU: a clear error, nothing written: " + probe.stderr.strip()[:200])
else:
    check(probe.returncode == 0 and "--recompute" not in probe.stderr,
          "--device cuda --recompute: one step " + probe.stderr.strip()[-300:])
r = run(["pretrain", "--help"])
check(r.returncode == 0 and all(f"--{o}" in r.stdout for o in (
    "objective", "context", "curriculum", "mask-rate", "enc-mask-rate", "dec-mask-rate", "skip-from", "head-layers",
    "tau", "alpha", "save-every", "resume", "device", "train-precision")), "--help lists the options")
finish()
