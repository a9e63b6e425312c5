#!/usr/bin/env bash
# GPU training benchmark: qac's CUDA trainer (bf16 mixed precision) vs
# transformers BertModel + torch.optim.AdamW(fused=True) with bf16 autocast
# and SDPA, BERT-base shape, on the same GPU in the same run; prints the
# ratio of tokens/s (goal: qac >= 1.2x PyTorch).
#   bench/train_gpu/run.sh <build-dir> [queries] [passages] [q_len] [p_len] [steps] [peak_tflops]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:?build directory}"; nq="${2:-64}"; n="${3:-8}"; qT="${4:-32}"; pT="${5:-128}"
steps="${6:-20}"; peak="${7:-989}"
py="${QAC_PYTHON:-python3}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
qac_out="$("$build/bench/train_gpu/bench_train_gpu" bf16 "$nq" "$n" "$qT" "$pT" "$steps" "$peak")"
echo "$qac_out"
if ref_out="$("$py" "$here/reference.py" "$nq" "$n" "$qT" "$pT" "$steps" "$peak")"; then
  echo "$ref_out"
  get() { printf '%s\n%s\n' "$qac_out" "$ref_out" | awk -v k="$1" '$1=="RESULT" && $2==k {print $3}'; }
  awk -v a="$(get qac_bf16_tokens_per_s)" -v b="$(get torch_bf16_tokens_per_s)" \
    'BEGIN {printf "RATIO training tokens/s qac/torch %.2f (goal 1.20)\n", a / b}'
else
  echo "reference (torch + transformers) unavailable: qac numbers only" >&2
fi
