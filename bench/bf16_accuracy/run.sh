#!/usr/bin/env bash
# Accuracy of bf16 against fp32 on Cranfield, end to end through qac:
#   - cosine of each text's vector to its fp32 vector: the bf16 encoder mode
#     (`--dtype bf16`), and the bf16 corpus vectors an SQbf16 index stores
#     (bf16 weights, then the vectors rounded to bf16, read back from
#     index.faiss);
#   - nDCG@10 and R@100 (trec_eval's measures, through qac eval) of
#     `qac index build` + `qac search` with fp32 or bf16 weights and a Flat
#     (fp32) or SQbf16 (bf16 vectors, vdpbf16ps scan) index.
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
export QAC_QUIET=1
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; bf16 path: $(grep -qw avx512_bf16 /proc/cpuinfo && echo vdpbf16ps || echo emulated); $(date -u +%F)"
for dt in fp32 bf16; do
  "$q" encode --input "$cran/cran.all.1400" --output "$w/d_$dt.npy" --ids "$w/d.ids" --dtype "$dt" --device cpu \
    --threads "$threads" 2>/dev/null
  "$q" encode --input "$cran/cran.qry" --kind query --output "$w/q_$dt.npy" --ids "$w/q.ids" --dtype "$dt" \
    --device cpu --threads "$threads" 2>/dev/null
done
# weights x index: fp32/bf16 encoder, Flat (fp32 vectors) or SQbf16 (bf16 vectors)
for dt in fp32 bf16; do
  for fac in Flat SQbf16; do
    "$q" index build --corpus "$cran/cran.all.1400" --out "$w/idx_${dt}_$fac" --factory "$fac" \
      --encoder-dtype "$dt" --device cpu --threads "$threads" 2>/dev/null
    "$q" search --index "$w/idx_${dt}_$fac" --queries "$cran/cran.qry" --run "$w/${dt}_$fac.run" --k 1000 \
      --dtype "$dt" --device cpu --threads "$threads" 2>/dev/null
  done
done
"$py" - "$w" <<'PY'
import sys
import numpy as np
w = sys.argv[1]
def cos(a, b):
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
d32, d16 = np.load(f"{w}/d_fp32.npy"), np.load(f"{w}/d_bf16.npy")
q32, q16 = np.load(f"{w}/q_fp32.npy"), np.load(f"{w}/q_bf16.npy")
for name, a, b in (("passages", d32, d16), ("queries", q32, q16)):
    c = cos(a, b)
    print(f"cosine bf16 mode vs fp32, {name}: min {c.min():.6f} mean {c.mean():.6f}")
# the stored bf16 rows: index.faiss after its 81-byte IndexScalarQuantizer header
raw = np.fromfile(f"{w}/idx_bf16_SQbf16/index.faiss", dtype=np.uint8)[81:]
stored = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(d32.shape)
# the index's rows follow the corpus, as encode's do
c = cos(d32, stored)
print(f"cosine of stored bf16 vectors (bf16 weights) vs fp32, passages: min {c.min():.6f} mean {c.mean():.6f}")
PY
for dt in fp32 bf16; do
  for fac in Flat SQbf16; do
    echo "weights $dt, index $fac: $("$q" eval --qrels "$cran/cranqrel" --run "$w/${dt}_$fac.run" -m ndcg_cut.10 \
      -m recall.100 | awk '{printf "%s %s  ", $1, $3}')"
  done
done
