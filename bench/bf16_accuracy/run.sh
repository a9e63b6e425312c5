#!/usr/bin/env bash
# Accuracy of the CPU bf16 mode against fp32 on Cranfield: cosine of each
# text's bf16 vector to its fp32 vector, and nDCG@10 / R@100 of an exact
# inner-product search over each (trec_eval's measures through qac eval).
# Also scores the fp32 vectors rounded to bf16 (the storage half of a bf16
# corpus), searched in fp32, to show what bf16 corpus vectors would cost.
#   bench/bf16_accuracy/run.sh [BUILD_DIR]
# Environment: QAC_PYTHON (numpy), QAC_SHARED_DATA (folder holding cranfield/),
# THREADS (2), WORKDIR (a temporary directory).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
py=${QAC_PYTHON:-$root/.venv/bin/python3}
cran=${QAC_SHARED_DATA:-$root/../shared/data}/cranfield
threads=${THREADS:-2}
w=${WORKDIR:-$(mktemp -d)}
q=$build/qac
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; bf16 path: $(grep -qw avx512_bf16 /proc/cpuinfo && echo vdpbf16ps || echo emulated)"
for dt in fp32 bf16; do
  "$q" encode --input "$cran/cran.all.1400" --output "$w/d_$dt.npy" --ids "$w/d.ids" --dtype "$dt" --device cpu \
    --threads "$threads" 2>/dev/null
  "$q" encode --input "$cran/cran.qry" --kind query --output "$w/q_$dt.npy" --ids "$w/q.ids" --dtype "$dt" \
    --device cpu --threads "$threads" 2>/dev/null
done
"$py" - "$w" <<'PY'
import sys
import numpy as np
w = sys.argv[1]
dids = open(f"{w}/d.ids").read().split()
qids = open(f"{w}/q.ids").read().split()
def bf16(x):  # round to nearest even, as qac_bf16_round
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7fff + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)
def cos(a, b):
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
d32, d16 = np.load(f"{w}/d_fp32.npy"), np.load(f"{w}/d_bf16.npy")
q32, q16 = np.load(f"{w}/q_fp32.npy"), np.load(f"{w}/q_bf16.npy")
for name, a, b in (("passages", d32, d16), ("queries", q32, q16)):
    c = cos(a, b)
    print(f"cosine bf16 mode vs fp32, {name}: min {c.min():.6f} mean {c.mean():.6f}")
runs = {"fp32": (q32, d32), "bf16": (q16, d16), "bf16+bf16-storage": (q16, bf16(d16)),
        "fp32+bf16-storage": (q32, bf16(d32))}
for name, (qq, dd) in runs.items():
    s = qq.astype(np.float64) @ dd.astype(np.float64).T
    with open(f"{w}/{name}.run", "w") as f:
        for i, qid in enumerate(qids):
            top = np.argsort(-s[i], kind="stable")[:100]
            for r, j in enumerate(top):
                f.write(f"{qid} Q0 {dids[j]} {r + 1} {s[i, j]:.7f} {name}\n")
PY
for name in fp32 bf16 bf16+bf16-storage fp32+bf16-storage; do
  echo "$name: $("$q" eval --qrels "$cran/cranqrel" --run "$w/$name.run" -m ndcg_cut.10 -m recall.100 | awk '{printf "%s %s  ", $1, $3}')"
done
