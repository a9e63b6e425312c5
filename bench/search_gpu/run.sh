#!/usr/bin/env bash
# GPU flat-search benchmark: qac vs torch.matmul + torch.topk on the same
# data, same GPU, same run; prints the ratios, and batch 1 against the read
# floor (a read-only pass over the stored corpus). Needs ~30 GB of GPU
# memory for the reference (corpus 13.6 GB, fp16 scores of 256 queries
# 4.5 GB).
#   bench/search_gpu/run.sh <build-dir> [rows] [k] [tuning]
# tuning: "name=value,..." of qac_gpu_flat_tuning (default: the built-in one)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:?build directory}"; n="${2:-8841823}"; k="${3:-1000}"; tuning="${4:-${QAC_SEARCH_TUNING:-}}"
py="${QAC_PYTHON:-python3}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
qac_out="$("$build/bench/search_gpu/bench_search_gpu" "$n" "$k" "$tuning")"
echo "$qac_out"
get() { printf '%s\n%s\n' "$qac_out" "${ref_out:-}" | awk -v key="$1" '$1=="RESULT" && $2==key {print $3}'; }
awk -v a="$(get qac_b1_ms)" -v f="$(get floor_b1_ms)" \
  'BEGIN {printf "RATIO batch 1 time qac/read-floor %.2f (goal <= 1.3)\n", a / f}'
if ref_out="$("$py" "$here/reference.py" "$n" "$k")"; then
  echo "$ref_out"
  for b in 1 16 256; do
    awk -v a="$(get qac_b${b}_ms)" -v t="$(get torch_b${b}_ms)" -v b="$b" \
      'BEGIN {printf "RATIO batch %d time torch/qac %.2f\n", b, t / a}'
    [ "$(get qac_b${b}_top1_row)" = "$(get torch_b${b}_top1_row)" ] || echo "NOTE batch $b: top-1 rows differ (a tie or a bug)"
  done
else
  echo "reference (torch) unavailable: qac numbers only" >&2
fi
