#!/usr/bin/env bash
# The attention kernels alone: every tile variant of qac's fused kernels,
# cuDNN's fused attention as qac loads it, and qac's unfused kernels,
# against PyTorch's SDPA backends (cuDNN, FlashAttention, memory-efficient)
# on the same GPU in the same run; prints each (shape, precision, pass)'s
# fastest qac variant, cuDNN's time through qac, and the ratio to the
# fastest PyTorch backend.
#   bench/attention_gpu/run.sh <build-dir> [peak_GBps] [reps]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:?build directory}"; peak="${2:-3350}"; reps="${3:-20}"
py="${QAC_PYTHON:-python3}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
qac_out="$("$build/bench/attention_gpu/bench_attention_gpu" "$peak" "$reps")"
echo "$qac_out"
ref_out="$("$py" "$here/reference.py" "$peak" "$reps")" || { echo "reference (torch) unavailable: qac numbers only" >&2; ref_out=""; }
echo "$ref_out"
# fastest fused variant and fastest torch backend per (shape, precision, pass)
printf '%s\n%s\n' "$qac_out" "$ref_out" | awk '
  $1 == "RESULT" {
    k = $3 " " $4 " " $5; us = $9 + 0
    if ($6 == "fused" && (!(k in q) || us < q[k])) { q[k] = us; qv[k] = $7 }
    if ($6 ~ /^unfused/ && (!(k in u) || us < u[k])) u[k] = us
    if ($6 ~ /^torch/ && (!(k in t) || us < t[k])) { t[k] = us; tv[k] = $6 }
    if ($6 == "cudnn") c[k] = us
  }
  END {
    for (k in q) {
      line = sprintf("BEST %s fused %s %.1f us", k, qv[k], q[k])
      if (k in c) line = line sprintf(" | qac-cudnn %.1f us, cudnn/fused %.2f", c[k], c[k] / q[k])
      if (k in u) line = line sprintf(" | unfused/fused %.2f", u[k] / q[k])
      if (k in t) line = line sprintf(" | %s %.1f us, torch/qac %.2f", tv[k], t[k], t[k] / q[k])
      print line
    }
  }' | sort
