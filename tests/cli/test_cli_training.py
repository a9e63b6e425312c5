#!/usr/bin/env python3
"""Training outputs that load. `qac finetune --out RUN` ends with the final
model in RUN itself: its tensors are the last checkpoint's, bit for bit;
transformers and sentence-transformers load RUN, and sentence-transformers'
embeddings equal `qac encode --model RUN`'s; `qac info`, the index manifest
and /info's id name it "RUN" (a checkpoint "RUN/checkpoint-N"). A run killed
while training has no final model yet: --model RUN then takes its newest
checkpoint and says so on stderr; RUN/latest names that checkpoint too.
--tau defaults from the model (0.05 when it normalises, else 1.0), said on
stderr; an --out that holds some other model is refused before any work."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clilib import check, cranfield_tsv, finish, run, scratch, tiny_model, toy_train  # noqa: E402

import numpy as np  # noqa: E402

tmp = scratch.mkdtemp(prefix="qac-cli-train-")
p = lambda *n: os.path.join(tmp, *n)  # noqa: E731
tiny = tiny_model(p("tiny"))
toy_train(p("train.jsonl"))
ARGS = ["--train", p("train.jsonl"), "--steps", "3", "--save-every", "1", "--batch", "2", "--n-passages", "2",
        "--p-max-len", "32", "--threads", "2"]

# ---- a finished run: the model is RUN itself ----
RUN = p("myrun")
r = run(["finetune", "--model", tiny, "--out", RUN, *ARGS], quiet=False)
check(r.returncode == 0, "fine-tune 3 steps: " + r.stderr[-300:])
check("tau 1 (the model's dot products)" in r.stderr, "--tau defaults to 1 for a model that does not normalise")
check(r.stderr.strip().splitlines()[-1].startswith("qac finetune: steps 1..3 done") and
      f"the model is in {RUN}" in r.stderr, "one summary line names where the model is: " +
      r.stderr.strip().splitlines()[-1])
check(os.path.exists(p("myrun", "config.json")) and os.path.isdir(p("myrun", "checkpoint-3")),
      "config.json in RUN, checkpoints beside it")

from safetensors.numpy import load_file  # noqa: E402
final, last = load_file(p("myrun", "model.safetensors")), load_file(p("myrun", "checkpoint-3", "model.safetensors"))
check(final.keys() == last.keys() and all(np.array_equal(final[k], last[k]) for k in final),
      f"RUN's {len(final)} tensors are checkpoint-3's, bit for bit")

from transformers import AutoModel  # noqa: E402
hf = AutoModel.from_pretrained(RUN)
check(hf.config.hidden_size == 32 and hf.config.num_hidden_layers == 2, "transformers loads RUN")

texts = ["the wing in a slipstream", "heat transfer in slabs", "boundary layer flow at high mach numbers"]
with open(p("t.tsv"), "w") as f:
    f.writelines(f"t{i}\t{t}\n" for i, t in enumerate(texts))
from sentence_transformers import SentenceTransformer  # noqa: E402
st_emb = SentenceTransformer(RUN, device="cpu").encode(texts, convert_to_numpy=True)
r = run(["encode", "--model", RUN, "--input", p("t.tsv"), "--output", p("t.npy"), "--device", "cpu"])
qac_emb = np.load(p("t.npy")) if r.returncode == 0 else np.zeros_like(st_emb)
# Both sides are fp32 over the same weights in other summation orders: each
# dot product (32 or 64 terms) is off by ~sqrt(64) * 2^-24 * |terms|, about
# 5e-7 relative; two layers and their LayerNorms (unit-scale outputs, CLS
# values within +-4 here) keep that under 1e-5. The bound leaves 3x margin.
diff = float(np.abs(qac_emb - st_emb).max())
check(r.returncode == 0 and qac_emb.shape == st_emb.shape and diff <= 3e-5,
      f"sentence-transformers loads RUN; its embeddings equal qac's (max |diff| {diff:.2e} <= 3e-5)")

info = json.loads(run(["info", "--model", RUN, "--json"]).stdout)
check(info["name"] == "myrun", f"qac info --model RUN names it by the run: {info['name']!r}")
info = json.loads(run(["info", "--model", p("myrun", "checkpoint-2"), "--json"]).stdout)
check(info["name"] == "myrun/checkpoint-2", f"a checkpoint is named with its run: {info['name']!r}")
r = run(["info", "--model", p("myrun", "latest"), "--json"])
check(r.returncode == 0 and json.loads(r.stdout)["dir"].endswith("checkpoint-3"), "--model RUN/latest: checkpoint-3")
cranfield_tsv(p("docs.tsv"), 20)
r = run(["index", "build", "--model", RUN, "--corpus", p("docs.tsv"), "--out", p("idx")])
man = json.load(open(p("idx", "manifest.json"))) if r.returncode == 0 else {}
check(r.returncode == 0 and man["build"]["model"]["name"] == "myrun",
      "the index manifest names the model by its run: " + (r.stderr[-200:] or str(man.get("build", {}).get("model"))))

# ---- a run still training (killed while writing checkpoint 3) ----
LIVE = p("live")
r = run(["finetune", "--model", tiny, "--out", LIVE, *ARGS], env={"QAC_TEST_KILL_IN_SAVE": "3"})
check(r.returncode != 0 and not os.path.exists(p("live", "config.json")), "a run killed at step 3 has no final model")
r = run(["info", "--model", LIVE, "--json"])
info = json.loads(r.stdout) if r.returncode == 0 else {}
check(r.returncode == 0 and info["dir"].endswith("checkpoint-2") and info["name"] == "live/checkpoint-2",
      f"--model RUN while training: its newest checkpoint ({info.get('dir')}, {info.get('name')}) " + r.stderr[-200:])
check("newest checkpoint" in r.stderr and "checkpoint-2" in r.stderr, "... said on stderr: " + r.stderr.strip())
r = run(["finetune", "--model", tiny, "--out", LIVE, *ARGS, "--resume"])
r2 = run(["info", "--model", LIVE, "--json"])
check(r.returncode == 0 and r2.returncode == 0 and json.loads(r2.stdout)["name"] == "live" and not r2.stderr,
      "resumed to the end: --model RUN is the final model again, nothing to say")

# ---- --tau from the model; an --out holding another model ----
norm = tiny_model(p("tiny-norm"), normalize=True)
r = run(["finetune", "--model", norm, "--out", p("dry"), *ARGS, "--dry-run"], quiet=False)
check(r.returncode == 0 and "tau 0.05 (the model normalises its embeddings)" in r.stderr,
      "--tau defaults to 0.05 for a normalising model: " + r.stderr[-200:])
before = sorted(os.listdir(tiny))
r = run(["finetune", "--model", tiny, "--out", tiny, *ARGS])
check(r.returncode == 2 and "holds a model" in r.stderr and sorted(os.listdir(tiny)) == before,
      "--out holding another model is refused before any work: " + r.stderr.strip()[-200:])
finish()
