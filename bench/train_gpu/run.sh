#!/usr/bin/env bash
# GPU training benchmark: qac's CUDA trainer (bf16 mixed precision) vs
# transformers BertModel + torch.optim.AdamW(fused=True) with bf16 autocast
# and SDPA, BERT-base shape, on the same GPU in the same run, both starting
# from the same model (BertModel's initialisation, seed 0) on the same ids;
# prints the ratio of tokens/s (goal: qac >= 1.2x PyTorch), both sides' MFU
# and whether both losses fell.
#   bench/train_gpu/run.sh <build-dir> [queries] [passages] [q_len] [p_len] [steps] [peak_tflops]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:?build directory}"; nq="${2:-64}"; n="${3:-8}"; qT="${4:-32}"; pT="${5:-128}"
steps="${6:-20}"; peak="${7:-989}"
py="${QAC_PYTHON:-python3}"
# no GPU: skipped (exit 77) before the reference writes its 440 MB model
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || exit 77
init="$(mktemp -d)"
trap 'rm -rf "$init"' EXIT
if ! "$py" "$here/reference.py" --init "$init" "$nq" "$n" "$qT" "$pT"; then
  echo "reference (torch + transformers) unavailable: qac on its own initialisation, no ratio" >&2
  "$build/bench/train_gpu/bench_train_gpu" bf16 "$nq" "$n" "$qT" "$pT" "$steps" "$peak"
  exit 0
fi
qac_out="$("$build/bench/train_gpu/bench_train_gpu" bf16 "$nq" "$n" "$qT" "$pT" "$steps" "$peak" "$init")"
echo "$qac_out"
ref_out="$("$py" "$here/reference.py" "$nq" "$n" "$qT" "$pT" "$steps" "$peak" "$init")"
echo "$ref_out"
get() { printf '%s\n%s\n' "$qac_out" "$ref_out" | awk -v k="$1" '$1=="RESULT" && $2==k {print $3}'; }
awk -v a="$(get qac_bf16_tokens_per_s)" -v b="$(get torch_bf16_tokens_per_s)" \
  'BEGIN {printf "RATIO training tokens/s qac/torch %.2f (goal 1.20)\n", a / b}'
awk -v a="$(get qac_bf16_mfu)" -v b="$(get torch_bf16_mfu)" 'BEGIN {printf "NOTE MFU qac %.3f torch %.3f (goal 0.40)\n", a, b}'
fell() { awk -v f="$(get "$1_loss_first")" -v l="$(get "$1_loss_last")" 'BEGIN {print (l < f ? "yes" : "NO")}'; }
echo "NOTE loss fell: qac $(fell qac) ($(get qac_loss_first) -> $(get qac_loss_last)), torch $(fell torch) ($(get torch_loss_first) -> $(get torch_loss_last))"
[ "$(fell qac)" = yes ] && [ "$(fell torch)" = yes ]
