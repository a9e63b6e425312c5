#!/usr/bin/env bash
# GPU encoding benchmark: qac vs Hugging Face BertModel (SDPA) at the same
# precision, on the same GPU, in the same run; prints the ratios.
#   bench/encode_gpu/run.sh <build-dir> [bf16|fp16] [passages] [batch] [peak_tflops]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:?build directory}"; prec="${2:-bf16}"; n="${3:-16384}"; batch="${4:-256}"; peak="${5:-989}"
py="${QAC_PYTHON:-python3}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
qac_out="$("$build/bench/encode_gpu/bench_encode_gpu" "$prec" "$n" "$batch" "$peak")"
echo "$qac_out"
if ref_out="$("$py" "$here/reference.py" "$prec" "$n" "$batch" "$peak")"; then
  echo "$ref_out"
  get() { printf '%s\n%s\n' "$qac_out" "$ref_out" | awk -v k="$1" '$1=="RESULT" && $2==k {print $3}'; }
  awk -v a="$(get qac_${prec}_passages_per_s)" -v b="$(get torch_${prec}_passages_per_s)" \
    'BEGIN {printf "RATIO throughput qac/torch %.2f\n", a / b}'
  awk -v a="$(get qac_${prec}_query_latency_ms_p50)" -v b="$(get torch_${prec}_query_latency_ms_p50)" \
    'BEGIN {printf "RATIO query latency torch/qac %.2f\n", b / a}'
else
  echo "reference (torch + transformers) unavailable: qac numbers only" >&2
fi
