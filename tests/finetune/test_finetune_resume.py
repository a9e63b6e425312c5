#!/usr/bin/env python3
"""qac finetune resumes after kill -9 exactly as if never stopped.

A tiny random BERT is fine-tuned for 10 steps (checkpoint every 3, dev set
scored at each save) on Cranfield BM25 negatives. The same run is killed
(SIGKILL) half-way through writing checkpoint 6, resumed and killed again
before the batch of step 8, then resumed to the end: the per-step log
(exact digits), the dev metrics, and the final weights and optimiser state
equal the uninterrupted run's bit for bit. Also: progress lines on stderr,
and `qac plot` writes a valid PNG of the log."""
import os
import struct
import sys
import tempfile
import zlib

sys.path.insert(0, os.path.dirname(__file__))
from ftlib import CRAN, check, finish, read_jsonl, run, tiny_model  # noqa: E402

tmp = tempfile.mkdtemp(prefix="qac-ft-resume-")
p = lambda name: os.path.join(tmp, name)  # noqa: E731
docs, queries, qrels = (os.path.join(CRAN, f) for f in ("cran.all.1400", "cran.qry", "cranqrel"))
model = tiny_model(p("tiny"))

# training data: BM25 negatives of the Cranfield queries
assert run(["bm25", "build", "--corpus", docs, "--out", p("bm25")]).returncode == 0
assert run(["bm25", "search", "--index", p("bm25"), "--queries", queries, "--k", "50", "--run", p("bm25.run")]).returncode == 0
r = run(["mine", "--run", p("bm25.run"), "--queries", queries, "--qrels", qrels, "--corpus", docs, "--n", "5",
         "--depth", "50", "--out", p("all.jsonl")])
assert r.returncode == 0, r.stderr
with open(p("all.jsonl")) as f, open(p("train.jsonl"), "w") as g:
    g.writelines(f.readlines()[:16])
# dev set: 12 queries over the first 100 documents
with open(p("dev.tsv"), "w") as f:
    qs, cur = [], None
    for line in open(queries):
        if line.startswith(".I"):
            cur = []
            qs.append(cur)
        elif line.strip() not in (".W", ""):
            cur.append(line.strip())
    for i in range(200, 212):
        f.write(f"{i + 1}\t{' '.join(qs[i])}\n")
with open(p("dev.qrels"), "w") as f:
    f.writelines(l for l in open(qrels) if 201 <= int(l.split()[0]) <= 212)

ARGS = ["--model", model, "--train", p("train.jsonl"), "--steps", "10", "--save-every", "3", "--batch", "2",
        "--n-passages", "3", "--q-max-len", "16", "--p-max-len", "48", "--lr", "1e-3", "--seed", "5", "--threads", "2",
        "--dev-queries", p("dev.tsv"), "--dev-qrels", p("dev.qrels"), "--dev-corpus", docs, "--dev-depth", "50"]


def finetune(out, *extra, env=None):
    return run(["finetune", *ARGS, "--out", out, *extra], env={**os.environ, "QAC_QUIET": "0", **(env or {})})


def latest(out):
    return open(os.path.join(out, "latest")).read().strip()


def traj(out):
    return [(l["step"], repr(l["loss"]), repr(l["lr"]), repr(l["grad_norm"])) for l in read_jsonl(os.path.join(out, "log.jsonl"))]


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
r = finetune(out)
check(r.returncode == 1 and "--resume" in r.stderr, "a second run into the same directory without --resume is refused")
r = finetune(out, "--resume")
check(r.returncode == 0 and "steps 7..10" in r.stderr, "resumed from checkpoint 6 to the end: " + r.stderr[-300:])
check(traj(out) == traj(ref), "loss, lr and grad norm of every step equal the uninterrupted run's")
check(read_jsonl(os.path.join(out, "dev.jsonl")) == dev_ref, "dev metrics equal the uninterrupted run's")
for f in ("model.safetensors", "training_state.qts"):
    a = open(os.path.join(ref, "checkpoint-10", f), "rb").read()
    b = open(os.path.join(out, "checkpoint-10", f), "rb").read()
    check(a == b, f"final {f} is bit-identical")

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
