#!/usr/bin/env python3
"""Resume after SIGKILL, and checkpoints that other tools load.

1. An uninterrupted 12-step run (checkpoint every 3 steps) is the reference.
2. The same run is killed (SIGKILL) half-way through writing the checkpoint
   of step 6 (test-only hook); then resumed and killed again at a random
   moment after step 7; then resumed to the end. After every kill: `latest`
   names a complete checkpoint, work before the kill was kept (the run
   resumes from it, never from 0), and in the end the log's trajectory and
   the final weights and optimiser state are bit-identical to the
   reference.
3. A checkpoint written from the default model loads in transformers and
   sentence-transformers, and their embeddings equal `qac encode`'s
   (cosine >= 0.99999).

Usage: test_train_resume.py DRIVER FIXTURE (QAC_BIN names the qac binary)."""
import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import scratch  # noqa: E402
from testlib import check, finish  # noqa: E402

DRIVER, FIXTURE = sys.argv[1], sys.argv[2]
QAC = os.environ.get("QAC_BIN")


def run(out, *extra, env=None):
    return subprocess.run([DRIVER, FIXTURE, out, "12", "3", *extra], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})


def resumed_at(stderr):
    for line in stderr.splitlines():
        if line.startswith("resumed at step "):
            return int(line.split()[-1])
    return None


def latest(out):
    with open(os.path.join(out, "latest")) as f:
        return f.read().strip()


def log_lines(out):
    with open(os.path.join(out, "log.jsonl")) as f:
        return [json.loads(l) for l in f if l.strip()]


def trajectory(out):
    # the loss, rate and norm of every step, as the exact printed digits
    return [(d["step"], repr(d["loss"]), repr(d["lr"]), repr(d["grad_norm"])) for d in log_lines(out)]


def file_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def main():
    tmp = scratch.mkdtemp(prefix="qac-train-resume-")
    ref, out = os.path.join(tmp, "ref"), os.path.join(tmp, "killed")
    r = run(ref)
    check(r.returncode == 0 and resumed_at(r.stderr) == 0, "reference run completes from step 0")
    ref_traj = trajectory(ref)
    check([t[0] for t in ref_traj] == list(range(1, 13)), "reference log has steps 1..12")

    # kill 1: inside the save of step 6, between the optimiser's m and v
    r = run(out, env={"QAC_TEST_KILL_IN_SAVE": "6"})
    check(r.returncode == -signal.SIGKILL, f"killed mid-save (rc {r.returncode})")
    check(latest(out) == "checkpoint-3", f"after a mid-save kill, latest is the previous checkpoint ({latest(out)})")
    partial = os.path.join(out, "checkpoint-6.tmp")
    check(os.path.isdir(partial) and not os.path.exists(os.path.join(partial, "training_state.qts")),
          "the kill left a partial checkpoint-6.tmp without its training state")
    check(not os.path.exists(os.path.join(out, "checkpoint-6")), "no checkpoint-6 that looks complete")
    ckpt3 = file_bytes(os.path.join(out, "checkpoint-3", "training_state.qts"))

    # kill 2: at a random moment once step 8 is in the log
    seed = int(os.environ.get("QAC_TEST_SEED", random.randrange(1 << 30)))
    print(f"seed {seed} (QAC_TEST_SEED)")
    rng = random.Random(seed)
    p = subprocess.Popen([DRIVER, FIXTURE, out, "12", "3", "--resume"], stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and p.poll() is None:
        try:
            if any(d["step"] >= 8 for d in log_lines(out)):
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.005)
    time.sleep(rng.uniform(0, 0.05))
    p.send_signal(signal.SIGKILL)
    _, err = p.communicate()
    first = resumed_at(err)
    # a kill that lands before the driver prints leaves no line; the log tells instead
    steps_after_kill1 = [d["step"] for d in log_lines(out)]
    check(first in (None, 3), f"first resume continued from step 3 ({first})")
    check(min(steps_after_kill1) == 1 and 4 in steps_after_kill1, "steps 1..3 were kept, not redone from scratch")
    check(latest(out) in ("checkpoint-6", "checkpoint-9"), f"after the second kill latest is {latest(out)}")
    check(file_bytes(os.path.join(out, "checkpoint-3", "training_state.qts")) == ckpt3 or
          not os.path.exists(os.path.join(out, "checkpoint-3")), "checkpoint-3 unchanged while it exists")

    r = run(out, "--resume")
    k = resumed_at(r.stderr)
    check(r.returncode == 0, "final resume completes")
    check(k in (6, 9), f"final resume continued from a later checkpoint, not from 0 ({k})")
    check(trajectory(out) == ref_traj, "loss/lr/grad-norm trajectory bit-identical to the uninterrupted run")
    for f in ("model.safetensors", "training_state.qts"):
        check(file_bytes(os.path.join(out, "checkpoint-12", f)) == file_bytes(os.path.join(ref, "checkpoint-12", f)),
              f"final {f} bit-identical")
    check(run(out).returncode != 0, "a finished run without --resume is refused, not overwritten")

    # a checkpoint of the default model loads in the reference stack
    model_dir = os.path.join(os.environ.get("QAC_HOME", os.path.expanduser("~/.local/share/qac")),
                             "models/all-MiniLM-L6-v2")
    mini = os.path.join(tmp, "minilm")
    r = subprocess.run([DRIVER, FIXTURE, mini, "2", "2"], capture_output=True, text=True,
                       env={**os.environ, "QAC_DRIVER_MODEL": model_dir})
    check(r.returncode == 0, "one MiniLM fine-tuning run " + r.stderr[-200:])
    ckpt = os.path.join(mini, "checkpoint-2")
    texts = ["what similarity laws must be obeyed when constructing aeroelastic models",
             "experimental investigation of the aerodynamics of a wing in a slipstream",
             "boundary layer transition at supersonic speeds"]
    tsv = os.path.join(tmp, "texts.tsv")
    with open(tsv, "w") as f:
        for i, t in enumerate(texts):
            f.write(f"{i}\t{t}\n")
    npy = os.path.join(tmp, "qac.npy")
    r = subprocess.run([QAC, "encode", "--model", ckpt, "--input", tsv, "--output", npy, "--max-len", "128"],
                       capture_output=True, text=True)
    check(r.returncode == 0, "qac encode with the checkpoint " + r.stderr[-300:])
    ours = np.load(npy)
    from sentence_transformers import SentenceTransformer
    st = SentenceTransformer(ckpt, device="cpu")
    theirs = st.encode(texts, convert_to_numpy=True)
    cos = (ours * theirs).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)
    check(cos.min() >= 0.99999, f"sentence-transformers embeddings equal qac encode (min cosine {cos.min():.8f})")
    import torch
    from transformers import AutoModel, AutoTokenizer
    tok, hf = AutoTokenizer.from_pretrained(ckpt), AutoModel.from_pretrained(ckpt)
    with torch.no_grad():
        x = tok(texts, padding=True, truncation=True, max_length=128, return_tensors="pt")
        h = hf(**x).last_hidden_state
        m = x["attention_mask"].unsqueeze(-1).float()
        v = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=1).numpy()
    cos = (ours * v).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(v, axis=1)
    check(cos.min() >= 0.99999, f"transformers AutoModel embeddings equal qac encode (min cosine {cos.min():.8f})")
    base = np.load(npy)  # trained weights must differ from the initial model's
    r = subprocess.run([QAC, "encode", "--model", model_dir, "--input", tsv, "--output", npy, "--max-len", "128"],
                       capture_output=True, text=True)
    check(r.returncode == 0 and not np.array_equal(np.load(npy), base), "the checkpoint holds trained weights")

    finish()


if __name__ == "__main__":
    main()
