#!/usr/bin/env python3
"""The reranker in int8 (`qac rerank --dtype int8`, `qac serve --reranker
--dtype int8`) on a cross-encoder made from the default model
(CrossEncoder(num_labels=1), sentence-transformers' layout).

Accuracy: on Cranfield pairs (judged and random documents, long passages
cut at the model's limit), qac's int8 logits against the float64 logits of
the same checkpoint. The bound is a reference's own int8 deviation: torch's
dynamic int8 of the same model (quantize_dynamic over every nn.Linear with
per-channel weights, the closest of torch's schemes to qac's: int8 weights
per output channel, 8-bit activations) on the same pairs; qac's largest and
mean deviation from float64 must be no larger than torch's. The fp32 run is
held to the parity test's bound (4 E, E torch's own fp32 error) so that the
int8 figure is int8's, not a wrong fp32 path's.

Paths: int8 runs in int8 where the CPU has VNNI (no note, logits not fp32's
bits); forced onto the generic path (--cpu-isa generic, no VNNI) it runs in
fp32, says so on stderr, and gives the generic fp32 logits bit for bit.
The server's /rerank with --dtype int8 gives `qac rerank --dtype int8`'s
raw scores exactly (a pair's score does not depend on its batch).
"""
import json
import os
import subprocess
import sys
import urllib.request

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import scratch  # noqa: E402
import testdata  # noqa: E402
from testlib import QAC, check, default_model_dir, finish, run  # noqa: E402

tmp = scratch.mkdtemp(prefix="qac-xenc-int8-")
p = lambda name: os.path.join(tmp, name)  # noqa: E731
torch.set_num_threads(2)



docs, queries, qrels = testdata.cranfield()
ids = sorted(docs, key=int)
rs = np.random.RandomState(36)
pairs = []
for qi in range(24):  # cran.qry numbers its queries 1.. in order (cranqrel's numbering)
    picks = qrels.get(qi + 1, [])[:1] + [ids[k] for k in rs.choice(len(ids), 1, replace=False)]
    pairs += [(queries[qi], docs[d]) for d in picks]
for k in range(4):  # long: several documents joined, cut at 512 tokens
    pairs.append((queries[k], " ".join(docs[ids[j]] for j in rs.choice(len(ids), 4, replace=False))))
pairs_file = p("pairs.jsonl")
with open(pairs_file, "w", encoding="utf-8") as f:
    f.writelines(json.dumps({"query": a, "passage": b}) + "\n" for a, b in pairs)

from sentence_transformers import CrossEncoder  # noqa: E402
torch.manual_seed(11)
ce = CrossEncoder(default_model_dir(), num_labels=1, device="cpu")
model = p("st1")
ce.save(model)
if not os.path.exists(os.path.join(model, "vocab.txt")):  # sentence-transformers 6 writes tokenizer.json alone
    import shutil
    shutil.copy(os.path.join(default_model_dir(), "vocab.txt"), model)


def qac_logits(*extra, pf=pairs_file):
    r = run(["rerank", "--model", model, "--pairs", pf, "--device", "cpu", "--threads", "2", *extra])
    ok = check(r.returncode == 0, "qac rerank --pairs " + " ".join(extra) + ": " + r.stderr.strip()[-200:])
    rows = [json.loads(x) for x in r.stdout.splitlines()] if ok else []
    return np.array([x["logits"] for x in rows], np.float64), rows, r.stderr


def torch_logits(m):
    out = m.predict(pairs, batch_size=16, activation_fn=torch.nn.Identity(), convert_to_numpy=True)
    return np.asarray(out, np.float64).reshape(len(pairs), -1)


ref32 = torch_logits(ce)
qce = CrossEncoder(model, device="cpu")
torch.ao.quantization.quantize_dynamic(qce, {torch.nn.Linear: torch.ao.quantization.per_channel_dynamic_qconfig},
                                       dtype=torch.qint8, inplace=True)
ref_i8 = torch_logits(qce)
ce.to(torch.float64)
ref64 = torch_logits(ce)

l32, _, _ = qac_logits("--dtype", "fp32")
l8, rows8, err8 = qac_logits("--dtype", "int8")
E = float(np.max(np.abs(ref32 - ref64)))
d32 = float(np.max(np.abs(l32 - ref64)))
d8, m8 = float(np.max(np.abs(l8 - ref64))), float(np.mean(np.abs(l8 - ref64)))
dt, mt = float(np.max(np.abs(ref_i8 - ref64))), float(np.mean(np.abs(ref_i8 - ref64)))
print(f"{len(pairs)} pairs; logits' spread (std) {np.std(ref64):.3e}; from float64: torch fp32 E = {E:.3e}, "
      f"qac fp32 {d32:.3e}; qac int8 max {d8:.3e} mean {m8:.3e}; torch int8 (per channel) max {dt:.3e} "
      f"mean {mt:.3e}", flush=True)
check(l32.shape == ref64.shape and d32 <= 4 * E, "qac fp32 within 4 E of the float64 logits (the parity bound)")
check(l8.shape == ref64.shape and d8 <= dt, "qac int8: largest deviation from float64 no larger than torch's int8")
check(l8.shape == ref64.shape and m8 <= mt, "qac int8: mean deviation from float64 no larger than torch's int8")

flags = open("/proc/cpuinfo").read()
has_vnni = " avx512_vnni" in flags or " avx_vnni" in flags
if has_vnni:
    check("note:" not in err8 and not np.array_equal(l8, l32),
          "on this VNNI CPU, --dtype int8 runs in int8 (no note; logits not fp32's bits)")
few = p("few.jsonl")  # the generic path is scalar: a few pairs, cut at 64 tokens
with open(few, "w", encoding="utf-8") as f:
    f.writelines(json.dumps({"query": a, "passage": b}) + "\n" for a, b in pairs[:4])
g8, _, gerr = qac_logits("--dtype", "int8", "--cpu-isa", "generic", "--max-len", "64", pf=few)
g32, _, _ = qac_logits("--dtype", "fp32", "--cpu-isa", "generic", "--max-len", "64", pf=few)
check("VNNI" in gerr and "fp32" in gerr and np.array_equal(g8, g32),
      "no VNNI (--cpu-isa generic): int8 says it runs in fp32, and gives the fp32 logits bit for bit: "
      + gerr.strip()[-200:])

# the server's reranker in int8: /rerank's raw scores are qac rerank --dtype int8's
q0 = [i for i, (a, _) in enumerate(pairs) if a == pairs[0][0]]
srv = subprocess.Popen([QAC, "serve", "--model", default_model_dir(), "--reranker", model, "--dtype", "int8",
                        "--device", "cpu", "--threads", "2", "--port", "0"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
try:
    line = srv.stdout.readline()
    check("listening on" in line, "qac serve --reranker --dtype int8 starts: " + line.strip())
    url = line.split("listening on ")[-1].strip()
    body = {"query": pairs[0][0], "texts": [pairs[i][1] for i in q0], "raw_scores": True}
    req = urllib.request.Request(url + "/rerank", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        got = json.loads(resp.read())
    check(len(got) == len(q0) and all(g["score"] == rows8[q0[g["index"]]]["raw"] for g in got),
          f"/rerank on a --dtype int8 server: the raw scores of qac rerank --dtype int8, exactly ({len(q0)} texts)")
finally:
    srv.terminate()
    srv.wait(60)
finish()
