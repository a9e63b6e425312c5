#!/usr/bin/env python3
"""qac finetune resumes after kill -9 exactly as if never stopped.

A tiny random BERT is fine-tuned for 10 steps (checkpoint every 3, dev set
scored at each save) on Cranfield BM25 negatives. The same run is killed
(SIGKILL) half-way through writing checkpoint 6, resumed and killed again
before the batch of step 8, resumed and killed half-way through writing
checkpoint 9 (its log and dev lines written, `latest` still checkpoint 6),
then resumed to the end: the per-step log (exact digits), the dev metrics,
and the final weights and optimiser state equal the uninterrupted run's bit
for bit. Before that last resume, every option that shapes the steps,
changed, is refused (exit 2) before any step with its name and both values,
every file of the run byte-identical after (the log and dev lines past the
checkpoint included: a refused resume trims nothing); and a copy of the run
whose state is rewritten as version 1 (no batch shape in its cursor) still
refuses another --steps and resumes to the same end bit for bit. Also:
progress lines on stderr, and `qac plot` writes a valid PNG of the log."""
import os
import shutil
import struct
import sys
import zlib

sys.path.insert(0, os.path.dirname(__file__))
from ftlib import (check, dev_set, file_bytes, finish, latest, mined_groups, read_jsonl, run, run_files,  # noqa: E402
                   tiny_model, traj, xxh64)
import testdata  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import scratch  # noqa: E402

tmp = scratch.mkdtemp(prefix="qac-ft-resume-")
p = lambda name: os.path.join(tmp, name)  # noqa: E731
docs, queries, qrels = (testdata.path("cranfield", f) for f in ("cran.all.1400", "cran.qry", "cranqrel"))
model = tiny_model(p("tiny"))

# training data: BM25 negatives of the Cranfield queries; dev set: 12 queries
mined_groups(p, docs, queries, qrels)
dev_set(p, qrels)

ARGS = ["--model", model, "--train", p("train.jsonl"), "--steps", "10", "--save-every", "3", "--batch", "2",
        "--n-passages", "3", "--q-max-len", "16", "--p-max-len", "48", "--lr", "1e-3", "--seed", "5", "--threads", "2",
        "--dev-queries", p("dev.tsv"), "--dev-qrels", p("dev.qrels"), "--dev-corpus", docs, "--dev-depth", "50"]


def finetune(out, *extra, env=None):
    return run(["finetune", *ARGS, "--out", out, *extra], env={**os.environ, "QAC_QUIET": "0", **(env or {})})


ref = p("ref")
r = finetune(ref)
check(r.returncode == 0, "uninterrupted run: " + r.stderr[-400:])
line = next((l for l in r.stderr.splitlines() if l.startswith("step 4/10")), "")
check(all(w in line for w in ("epoch", "loss", "lr", "grad_norm", "passages/s", "ETA")),
      f"progress line has step, epoch, loss, lr, grad norm, passages/s and ETA: {line!r}")
check(sum(l.startswith("dev at step") for l in r.stderr.splitlines()) == 4, "dev set scored at steps 3, 6, 9, 10")
dev_ref = read_jsonl(os.path.join(ref, "dev.jsonl"))
check([d["step"] for d in dev_ref] == [3, 6, 9, 10] and all(0 <= d["ndcg_cut_10"] <= 1 for d in dev_ref),
      "dev.jsonl holds the metrics of every save")

out = p("killed")
r = finetune(out, env={"QAC_TEST_KILL_IN_SAVE": "6"})
check(r.returncode == -9, f"killed half-way through checkpoint 6 (rc {r.returncode})")
check(latest(out) == "checkpoint-3", f"latest names the last complete checkpoint ({latest(out)})")
r = finetune(out, "--resume", env={"QAC_TEST_CRASH": "finetune_batch:5"})
check(r.returncode == -9 and "steps 4..7" not in r.stderr, f"resumed and killed before step 8 (rc {r.returncode})")
check(latest(out) == "checkpoint-6", f"work since the first kill was kept ({latest(out)})")
r = finetune(out, "--resume", env={"QAC_TEST_KILL_IN_SAVE": "9"})
check(r.returncode == -9 and latest(out) == "checkpoint-6",
      f"resumed and killed half-way through checkpoint 9 (rc {r.returncode}, {latest(out)})")
check([s for s, *_ in traj(out)] == list(range(1, 10))
      and [d["step"] for d in read_jsonl(os.path.join(out, "dev.jsonl"))] == [3, 6, 9],
      "log.jsonl and dev.jsonl hold lines past the checkpoint (steps 7 to 9)")
r = finetune(out)
check(r.returncode == 1 and "--resume" in r.stderr, "a second run into the same directory without --resume is refused")

# an option that shapes the steps, changed on resume: refused by name with both values, nothing touched
before = run_files(out)
check(all(f in before for f in ("latest", "log.jsonl", "dev.jsonl",
                                 os.path.join("checkpoint-6", "training_state.qts"))),
      "the run directory holds latest, log.jsonl, dev.jsonl and checkpoint-6's state")
CHANGED = "the run was written with "
changes = [(["--steps", "12"], "--steps (or --epochs) 10, this resume has 12"),
           (["--steps", "0", "--epochs", "1"], "--steps (or --epochs) 10, this resume has 8"),
           (["--seed", "6"], "--seed 5, this resume has 6"),
           (["--lr", "2e-3"], "--lr 0.001, this resume has 0.002"),
           (["--weight-decay", "0"], "--weight-decay 0.01, this resume has 0"),
           (["--max-grad-norm", "0.5"], "--max-grad-norm 1, this resume has 0.5"),
           (["--schedule", "cosine"], "--schedule linear, this resume has cosine"),
           (["--warmup-steps", "3"], "--warmup-steps (or --warmup-ratio times the steps) 1, this resume has 3"),
           (["--warmup-ratio", "0.3"], "--warmup-steps (or --warmup-ratio times the steps) 1, this resume has 3"),
           (["--tau", "0.5"], "--tau 1, this resume has 0.5"),
           (["--sim", "cos"], "--sim dot, this resume has cos"),
           (["--dropout", "0.2"], "--dropout 0.1, this resume has 0.2"),
           (["--batch", "3"], "--batch 2, this resume has 3"),
           (["--n-passages", "4"], "--n-passages 3, this resume has 4"),
           (["--q-max-len", "20"], "--q-max-len 16, this resume has 20"),
           (["--p-max-len", "40"], "--p-max-len 48, this resume has 40"),
           (["--title-join", "space"], "the training data differ from the run's (16 examples then, 16 now, other "
                                       "content)")]
for extra, msg in changes:
    r = finetune(out, "--resume", *extra)
    want = msg if msg.startswith("the training data") else CHANGED + msg
    after = run_files(out)
    changed = sorted(f for f in before.keys() | after.keys() if before.get(f) != after.get(f))
    check(r.returncode == 2 and want in r.stderr and not any(l.startswith("step ") for l in r.stderr.splitlines())
          and not changed,
          f"--resume with {' '.join(extra)} is refused before any step, naming both values, every file of the run "
          f"byte-identical (changed: {changed}): " + r.stderr.strip()[-300:])

# a copy of the run with its checkpoint-6 state rewritten as version 1: the
# same header, the pair-alpha slot 0, and the 4-word cursor (magic, examples,
# digest, position) without the batch shape
old = p("v1")
shutil.copytree(out, old)
state = os.path.join(old, "checkpoint-6", "training_state.qts")
st = file_bytes(state)
# magic 8; u32 version, 0; u64 step, n_params, seed, cursor_len; 6 f64; 2 i64; 4 i32; 4 f32
HEAD = 8 + 4 + 4 + 4 * 8 + 6 * 8 + 2 * 8 + 4 * 4 + 4 * 4
version, cursor_len = struct.unpack_from("<I", st, 8)[0], struct.unpack_from("<Q", st, 40)[0]
cursor = struct.unpack_from("<8Q", st, HEAD) if cursor_len == 64 else ()
check(version == 2 and cursor_len == 64 and cursor[0] == int.from_bytes(b"QACTFCU2", "little")
      and cursor[4:] == (2, 3, 16, 48) and struct.unpack_from("<f", st, HEAD - 4)[0] == 0,
      f"the state is version 2 and its cursor records --batch, --n-passages and the lengths ({version}, {cursor})")
v1_cursor = struct.pack("<4Q", int.from_bytes(b"QACTFCUR", "little"), *cursor[1:4]) if cursor else b""
body = st[:8] + struct.pack("<I", 1) + st[12:40] + struct.pack("<Q", 32) + st[48:HEAD] + v1_cursor + st[HEAD + 64:-8]
with open(state, "wb") as f:
    f.write(body + struct.pack("<Q", xxh64(body)))
r = finetune(old, "--resume", "--steps", "12")
check(r.returncode == 2 and CHANGED + "--steps (or --epochs) 10, this resume has 12" in r.stderr,
      "a version-1 state is held to the options it records: " + r.stderr.strip()[-300:])

r = finetune(out, "--resume")
check(r.returncode == 0 and "steps 7..10" in r.stderr, "resumed from checkpoint 6 to the end: " + r.stderr[-300:])
r1 = finetune(old, "--resume")
check(r1.returncode == 0 and "steps 7..10" in r1.stderr, "the version-1 state resumes to the end: " + r1.stderr[-300:])
for d, what in ((out, ""), (old, " (from the version-1 state)")):
    check(traj(d) == traj(ref), "loss, lr and grad norm of every step equal the uninterrupted run's" + what)
    check(read_jsonl(os.path.join(d, "dev.jsonl")) == dev_ref, "dev metrics equal the uninterrupted run's" + what)
    for f in ("model.safetensors", "training_state.qts"):
        a = file_bytes(os.path.join(ref, "checkpoint-10", f))
        b = file_bytes(os.path.join(d, "checkpoint-10", f))
        check(a == b, f"final {f} is bit-identical" + what)

# the training curve
png = p("loss.png")
r = run(["plot", os.path.join(ref, "log.jsonl"), "--out", png, "--width", "640", "--height", "400"])
check(r.returncode == 0, "qac plot: " + r.stderr)
data = open(png, "rb").read() if r.returncode == 0 else b""
ok = data[:8] == b"\x89PNG\r\n\x1a\n"
chunks, i = {}, 8
while ok and i < len(data):
    n, kind = struct.unpack(">I4s", data[i:i + 8])
    body = data[i + 8:i + 8 + n]
    ok &= struct.unpack(">I", data[i + 8 + n:i + 12 + n])[0] == zlib.crc32(kind + body)
    chunks[kind] = chunks.get(kind, b"") + body
    i += 12 + n
w, h = struct.unpack(">II", chunks.get(b"IHDR", b"\0" * 8)[:8]) if ok else (0, 0)
raw = zlib.decompress(chunks[b"IDAT"]) if ok else b""
check(ok and (w, h) == (640, 400) and len(raw) == h * (3 * w + 1), "the PNG is well formed (chunk CRCs, zlib, size)")
rows = [raw[y * (3 * w + 1) + 1:(y + 1) * (3 * w + 1)] for y in range(h)]
blue = sum(r[x:x + 3] == b"\x14\x3c\xaa" for r in rows for x in range(0, 3 * w, 3))
orange = sum(r[x:x + 3] == b"\xdc\x6e\x00" for r in rows for x in range(0, 3 * w, 3))
check(blue > 100 and orange > 100, f"loss and learning-rate curves are drawn ({blue}, {orange} pixels)")
finish()
