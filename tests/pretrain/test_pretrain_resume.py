#!/usr/bin/env python3
"""qac pretrain resumes after kill -9 exactly as if never stopped.

For each objective (coCondenser with a span-then-query curriculum, CoT-MAE
with mixed contexts, query generation with dropout) a tiny random BERT (dropout 0.1) is pre-trained for 6
steps on real Debian descriptions, checkpoint every 2 steps: the reference.
The same run is killed (SIGKILL) half-way through writing checkpoint 4,
resumed and killed again before the batch of step 4, then resumed to the
end (on one thread: the count may change). Before that, a resume with an
option that shapes the steps changed (--steps; per objective --curriculum,
--tau, --context, --lr, --dec-mask-rate, --max-len, --dropout, --schedule)
is refused before any step, naming the option and both values, and
leaves every file of the run as it was (log.jsonl's lines past the
checkpoint included). A kill inside the final export leaves OUT
without config.json (no loader takes it for a model) and its checkpoints
intact; --resume completes the export. The per-step log (every loss part, lr, grad norm, span fraction, as
exact digits), the exported encoder and the final training state (heads
and optimiser included) must equal the reference's bit for bit. Also: a
finished run is not overwritten without --resume, progress lines on
stderr, and `qac plot` draws the log."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from ptlib import check, debian_pairs, file_bytes, finish, read_jsonl, run, run_files, tiny_model, trajectory  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import scratch  # noqa: E402

tmp = scratch.mkdtemp(prefix="qac-pt-resume-")
p = lambda name: os.path.join(tmp, name)  # noqa: E731
model = tiny_model(p("tiny"))
data = debian_pairs(p("pairs.jsonl"))
BASE = ["--model", model, "--data", data, "--steps", "6", "--save-every", "2", "--batch", "4", "--lr", "1e-3",
        "--max-len", "48", "--query-max-len", "16", "--seed", "3", "--threads", "2"]
ARMS = {"cocondenser": ["--objective", "cocondenser", "--curriculum", "span:0.5,query"],
        "cotmae": ["--objective", "cotmae", "--context", "mixed"],
        "qgen": ["--objective", "qgen", "--context", "query", "--dropout", "0.1"]}


def pretrain(arm, out, *extra, env=None):
    return run(["pretrain", *BASE, *ARMS[arm], "--out", out, *extra], env={**os.environ, "QAC_QUIET": "0", **(env or {})})


def latest(out):
    return open(os.path.join(out, "latest")).read().strip()


for arm in ARMS:
    ref, out = p(arm + "-ref"), p(arm + "-killed")
    r = pretrain(arm, ref)
    check(r.returncode == 0, f"{arm}: uninterrupted run " + r.stderr[-400:])
    line = next((l for l in r.stderr.splitlines() if l.startswith("step 3/6")), "")
    check(all(w in line for w in ("loss", "mlm", "lr", "grad_norm", "span", "pairs/s", "ETA")),
          f"{arm}: progress line has step, loss and its parts, lr, grad norm, span fraction, pairs/s, ETA: {line!r}")
    check("MLM head" in r.stderr, f"{arm}: says the MLM head is created fresh")
    log = read_jsonl(os.path.join(ref, "log.jsonl"))
    parts = {"cocondenser": ("mlm", "head_mlm", "contrastive"), "cotmae": ("mlm", "dec_mlm"),
             "qgen": ("mlm", "next_token")}[arm]
    check([l["step"] for l in log] == list(range(1, 7)) and all(
        abs(l["loss"] - sum(l[k] for k in parts)) <= 1e-9 * abs(l["loss"]) for l in log),
        f"{arm}: log.jsonl has steps 1..6, each loss the sum of its parts {parts}")
    if arm == "cocondenser":
        fr, lr = [l["span_frac"] for l in log], [l["lr"] for l in log]
        check(fr == [1, 1, 1, 0, 0, 0], f"{arm}: the curriculum's first half span pairs, then query pairs ({fr})")
        check(lr[3] == 1e-3 and lr[4] == 1e-3 and lr[2] < lr[1],
              f"{arm}: stage 1 decays (cosine), stage 2 runs at the constant peak rate ({lr})")

    r = pretrain(arm, out, env={"QAC_TEST_KILL_IN_SAVE": "4"})
    check(r.returncode == -9, f"{arm}: killed half-way through checkpoint 4 (rc {r.returncode})")
    check(latest(out) == "checkpoint-2", f"{arm}: latest names the last complete checkpoint ({latest(out)})")
    r = pretrain(arm, out)
    check(r.returncode != 0 and "--resume" in r.stderr, f"{arm}: an existing run is not overwritten without --resume")
    # an option that shapes the steps, changed on resume: refused by name with both values, nothing touched
    before = run_files(out)
    check([l["step"] for l in read_jsonl(os.path.join(out, "log.jsonl"))] == [1, 2, 3, 4] and "latest" in before,
          f"{arm}: log.jsonl holds lines past the checkpoint (steps 3 and 4)")
    changes = [(["--steps", "8"], "--steps 6, this resume has 8; resume with the same --steps")]
    changes += {"cocondenser": [(["--curriculum", "span:0.25,query"], "--curriculum span:0.5,query, this resume has "
                                 "--curriculum span:0.25,query"), (["--tau", "0.5"], "--tau 1, this resume has 0.5")],
                "cotmae": [(["--context", "query"], "--context mixed, this resume has --context query"),
                           (["--lr", "2e-3"], "--lr 0.001, this resume has 0.002"),
                           (["--dec-mask-rate", "0.5"], "--dec-mask-rate 0.45, this resume has 0.5")],
                "qgen": [(["--max-len", "40"], "--max-len 48, this resume has 40"),
                         (["--dropout", "0.2"], "--dropout 0.1, this resume has 0.2"),
                         (["--schedule", "cosine"], "--schedule linear, this resume has cosine")]}[arm]
    for extra, msg in changes:
        r = pretrain(arm, out, "--resume", *extra)
        after = run_files(out)
        changed = sorted(f for f in before.keys() | after.keys() if before.get(f) != after.get(f))
        check(r.returncode == 2 and "the run was written with " + msg in r.stderr and
              not any(l.startswith("step ") for l in r.stderr.splitlines()) and not changed,
              f"{arm}: --resume with {' '.join(extra)} is refused before any step, naming both values, every file "
              f"of the run byte-identical (changed: {changed}): " + r.stderr.strip()[-300:])
    r = pretrain(arm, out, "--resume", env={"QAC_TEST_CRASH": "pretrain_batch:2"})
    check(r.returncode == -9, f"{arm}: resumed, then killed before the batch of step 4 (rc {r.returncode})")
    r = pretrain(arm, out, "--resume", "--threads", "1")
    check(r.returncode == 0 and "steps 3..6" in r.stderr, f"{arm}: final resume continues from step 2 " + r.stderr[-300:])
    check(trajectory(out) == trajectory(ref), f"{arm}: every step's losses, lr, grad norm and span fraction bit-identical")
    for f in ("model.safetensors", os.path.join("checkpoint-6", "model.safetensors"),
              os.path.join("checkpoint-6", "training_state.qts")):
        check(file_bytes(os.path.join(out, f)) == file_bytes(os.path.join(ref, f)), f"{arm}: final {f} bit-identical")
    check(sorted(n for n in os.listdir(out) if n.startswith("checkpoint")) == ["checkpoint-4", "checkpoint-6"],
          f"{arm}: old checkpoints pruned to --keep 2")
    if arm == "cocondenser":  # the run directory's rules do not depend on the objective
        r = pretrain(arm, out)
        check(r.returncode != 0, f"{arm}: a finished run without --resume is refused")
        r = pretrain(arm, out, "--resume")
        check(r.returncode == 0 and file_bytes(os.path.join(out, "model.safetensors")) ==
              file_bytes(os.path.join(ref, "model.safetensors")), f"{arm}: --resume of a finished run changes nothing")
        # killed inside the export, before its last rename: OUT is no model (no config.json, never half old
        # and half new), its checkpoints and log intact; --resume completes the export
        names = sorted(os.listdir(out))
        r = pretrain(arm, out, "--resume", env={"QAC_TEST_CRASH": "export_commit:1"})
        check(r.returncode == -9 and not os.path.exists(os.path.join(out, "config.json")) and
              latest(out) == "checkpoint-6" and trajectory(out) == trajectory(ref) and
              file_bytes(os.path.join(out, "checkpoint-6", "model.safetensors")) ==
              file_bytes(os.path.join(ref, "checkpoint-6", "model.safetensors")),
              f"{arm}: killed in the export: no config.json in OUT, checkpoints and log kept (rc {r.returncode})")
        r = pretrain(arm, out, "--resume")
        exported = ("config.json", "model.safetensors", "modules.json", os.path.join("1_Pooling", "config.json"))
        check(r.returncode == 0 and sorted(os.listdir(out)) == names and
              all(file_bytes(os.path.join(out, f)) == file_bytes(os.path.join(ref, f)) for f in exported),
              f"{arm}: --resume after it completes the export, no temporary left: " + r.stderr[-200:])

r = run(["plot", os.path.join(p("cotmae-ref"), "log.jsonl"), "--out", p("loss.png")])
check(r.returncode == 0 and file_bytes(p("loss.png"))[:8] == b"\x89PNG\r\n\x1a\n", "qac plot draws the log " + r.stderr)
finish()
