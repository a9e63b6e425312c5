#!/usr/bin/env python3
"""A fine-tuned model serves: `qac finetune` ends with its model in --out,
`qac index build --model RUN` indexes 60 Cranfield documents with it, and
`qac serve` answers /search (the same hits as offline `qac search`) while
/info names the run and the fingerprint of its last checkpoint's weights."""
import os
import sys

HERE = os.path.dirname(__file__)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "server"))
import srvlib  # noqa: E402
from ftlib import CRAN, check, finish, run, tiny_model, toy_train  # noqa: E402
sys.path.insert(0, os.path.join(HERE, ".."))
import scratch  # noqa: E402

tmp = scratch.mkdtemp(prefix="qac-ft-serve-")
p = lambda name: os.path.join(tmp, name)  # noqa: E731
model = tiny_model(p("tiny"))
docs = srvlib.cranfield_subset(p("cran60"), 60)
toy_train(p("train.jsonl"))
r = run(["finetune", "--model", model, "--train", p("train.jsonl"), "--out", p("run"), "--steps", "2", "--batch", "2",
         "--n-passages", "2", "--p-max-len", "32", "--threads", "2"])
check(r.returncode == 0, "fine-tune 2 steps: " + r.stderr[-300:])
ckpt, final = p("run/checkpoint-2"), p("run")
r = run(["index", "build", "--model", final, "--corpus", docs, "--out", p("idx")])
check(r.returncode == 0, "index built with the fine-tuned model: " + r.stderr[-300:])
fp = next((l.split()[1] for l in run(["info", "--model", ckpt]).stdout.splitlines() if l.startswith("fingerprint")), None)
query = "experimental investigation of the aerodynamics of a wing in a slipstream"
with open(p("q.tsv"), "w") as f:
    f.write(f"q1\t{query}\n")
run(["search", "--index", p("idx"), "--model", final, "--queries", p("q.tsv"), "--k", "5", "--run", p("offline.run")])
offline = [l.split()[2] for l in open(p("offline.run"))]
srv = srvlib.Server("--index", p("idx"), "--model", final)
try:
    s, _, info = srvlib.http(srv.base, "GET", "/info")
    check(s == 200 and info["model"]["id"] == "run" and info["model"]["fingerprint"] == fp,
          f"/info names the run, its model the last checkpoint's ({info.get('model')}, fingerprint {fp})")
    s, _, res = srvlib.http(srv.base, "POST", "/search", {"query": query, "k": 5})
    hits = [h["docid"] for h in res["results"][0]] if s == 200 else []
    check(s == 200 and hits == offline and len(hits) == 5, f"/search answers with the offline hits ({hits} vs {offline})")
finally:
    check(srv.stop() == 0, "server stops cleanly")
finish()
