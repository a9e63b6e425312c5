#!/usr/bin/env python3
"""qac pretrain trains the representation retrieval uses (--pooling).

The default model (mean pooling, normalised) is pre-trained for 3
coCondenser steps on a few real Debian descriptions with --pooling
checkpoint --tau 0.05: the run finishes, its first line names the
representation (mean pooling, L2-normalised, the checkpoint's), the
training state records it (pooling 1, normalize 1 after the version-1
header), the exported encoder keeps the initial model's pooling files, and
--resume with another --pooling (cls) or --normalize (false) is refused
before any step while the same choice spelled explicitly (--pooling mean
--normalize true) is accepted. The released code's choice (--pooling cls
--normalize false) runs and says that the exported encoder still pools as
the checkpoint does. A training state of version 1 (before --pooling:
the raw [CLS]) resumes as cls pooling and refuses mean; one of version 2
resumes and refuses another --steps. Bad values are
refused by the parser."""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(__file__))
from ptlib import check, debian_pairs, default_model_dir, file_bytes, finish, read_jsonl, run, tiny_model  # noqa: E402
from ftlib import xxh64  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import scratch  # noqa: E402

tmp = scratch.mkdtemp(prefix="qac-pt-pooling-")
p = lambda name: os.path.join(tmp, name)  # noqa: E731
data = debian_pairs(p("pairs.jsonl"), n=12)
model = default_model_dir()
out = p("run")
BASE = ["pretrain", "--model", model, "--data", data, "--objective", "cocondenser", "--steps", "3", "--batch", "4",
        "--max-len", "48", "--query-max-len", "16", "--seed", "5", "--threads", "2", "--tau", "0.05", "--out", out]
env = {**os.environ, "QAC_QUIET": "0"}

r = run(BASE + ["--pooling", "checkpoint"], env=env)
check(r.returncode == 0, "3 steps of the default model with --pooling checkpoint --tau 0.05 " + r.stderr[-400:])
first = r.stderr.splitlines()[0] if r.stderr else ""
check("mean pooling (the checkpoint's)" in first and "L2-normalised (the checkpoint's)" in first,
      f"the first line names the representation: {first!r}")
log = read_jsonl(os.path.join(out, "log.jsonl"))
check([l["step"] for l in log] == [1, 2, 3] and all(l["contrastive"] > 0 for l in log),
      "log.jsonl has steps 1..3 with a contrastive part")

# training_state.qts: magic, then the version-1 header (168 bytes), then i32 pooling, normalize
st = file_bytes(os.path.join(out, "checkpoint-3", "training_state.qts"))
version = struct.unpack_from("<I", st, 8)[0]
pooling, normalize = struct.unpack_from("<ii", st, 8 + 168)
check(version == 3 and (pooling, normalize) == (1, 1),
      f"the training state records mean pooling, normalised (version {version}, {pooling}, {normalize})")

def st_files(d):
    """The sentence-transformers modules and the pooling modes that are set."""
    mods = [m["type"] for m in json.load(open(os.path.join(d, "modules.json")))]
    pool = json.load(open(os.path.join(d, "1_Pooling", "config.json")))
    return mods, sorted(k for k, v in pool.items() if k.startswith("pooling_mode") and v is True)


check(st_files(out) == st_files(model) and "sentence_transformers.models.Normalize" in st_files(out)[0],
      f"the exported encoder keeps the initial model's modules and pooling: {st_files(out)}")

for extra, what in ((["--pooling", "cls"], "--pooling cls"), (["--normalize", "false"], "--normalize false")):
    r = run(BASE + ["--resume"] + extra, env=env)
    check(r.returncode == 2 and "the run's representation was mean pooling, L2-normalised" in r.stderr and
          "steps" not in r.stderr.splitlines()[-1],
          f"--resume with {what} is refused, naming the run's representation: " + r.stderr[-300:])
r = run(BASE + ["--resume", "--pooling", "mean", "--normalize", "true"], env=env)
check(r.returncode == 0, "--resume with the same choice spelled out (--pooling mean --normalize true) is accepted "
      + r.stderr[-300:])

# the released code's choice on the default model: one step, and a word that
# the exported encoder still pools as the checkpoint does
r = run(BASE[:-1] + [p("cls"), "--steps", "1", "--pooling", "cls", "--normalize", "false"], env=env)
check(r.returncode == 0 and "cls pooling (--pooling), not normalised (--normalize)" in r.stderr and
      "keeps the checkpoint's mean pooling" in r.stderr,
      "--pooling cls --normalize false runs and says the export keeps mean pooling " + r.stderr[-300:])
# a state written before --pooling existed (version 1, no pooling fields:
# the raw [CLS]) resumes as cls, not normalised, and refuses anything else;
# version 2 (no context, lengths or warmup ratio) still resumes, still
# holding to the options it records (--steps)
tiny = tiny_model(p("tiny"))
V3_EXTRA = 4 * 4 + 2 * 8  # context, max_len, query_max_len, 0; span_frac, warmup_ratio


def old_state(version, d):
    """A 2-step run killed before step 2, its checkpoint-1 state rewritten as an older version."""
    TB = ["pretrain", "--model", tiny, "--data", data, "--objective", "cocondenser", "--batch", "4", "--max-len", "32",
          "--query-max-len", "16", "--threads", "2", "--steps", "2", "--save-every", "1", "--out", d]
    r = run(TB, env={**env, "QAC_TEST_CRASH": "pretrain_batch:2"})
    check(r.returncode == -9 and os.path.isfile(os.path.join(d, "checkpoint-1", "training_state.qts")),
          f"a tiny [CLS] model, killed before step 2 (rc {r.returncode}) " + r.stderr[-300:])
    sp = os.path.join(d, "checkpoint-1", "training_state.qts")
    st = file_bytes(sp)
    keep = 168 if version == 1 else 176
    body = st[:8] + struct.pack("<I", version) + st[12:8 + keep] + st[8 + 176 + V3_EXTRA:-8]
    with open(sp, "wb") as f:
        f.write(body + struct.pack("<Q", xxh64(body)))
    return TB


TB = old_state(1, p("v1"))
r = run(TB + ["--resume", "--pooling", "mean"], env=env)
check(r.returncode == 2 and "the run's representation was cls pooling" in r.stderr, "a version-1 state is the raw [CLS]: --pooling mean refused "
      + r.stderr[-200:])
r = run(TB + ["--resume"], env=env)
check(r.returncode == 0 and "steps 2..2" in r.stderr, "a version-1 state resumes with the checkpoint's cls pooling "
      + r.stderr[-200:])
TB = old_state(2, p("v2"))
r = run(TB + ["--resume", "--steps", "3"], env=env)
check(r.returncode == 2 and "the run was written with --steps 2, this resume has 3" in r.stderr,
      "a version-2 state refuses another --steps " + r.stderr[-200:])
r = run(TB + ["--resume"], env=env)
check(r.returncode == 0 and "steps 2..2" in r.stderr and
      struct.unpack_from("<I", file_bytes(os.path.join(p("v2"), "checkpoint-2", "training_state.qts")), 8)[0] == 3,
      "a version-2 state resumes, and its next checkpoint is version 3 " + r.stderr[-200:])

r = run(BASE[:-1] + [p("bad"), "--pooling", "max"], env=env)
check(r.returncode != 0 and "pooling" in r.stderr, "--pooling max is refused")
finish()
