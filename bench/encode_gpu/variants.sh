#!/usr/bin/env bash
# The CUDA encoder's tunables (kernels/qac_encoder_plan.h), one at a time
# away from the default, on BERT-base (random weights, CLS pooling) at 128
# tokens in batches of 256, bf16: passages/s, and the p50 latency of one
# query and of 16 queries of 32 tokens. One VARIANT line each, then the
# best per figure; then the warps of the mean pooling on the default model
# (MiniLM, $QAC_MODEL) at 128 tokens, passages/s. The variants change the
# order of fp32 sums, not the model: their outputs agree within
# test_gpu_encoder's bounds.
#   bench/encode_gpu/variants.sh <build-dir> [passages]
set -euo pipefail
build="${1:?build directory}"; n="${2:-4096}"
bin="$build/bench/encode_gpu/bench_encode_gpu"
variants=(
  "default:"
  "no-graphs:QAC_CUDA_GRAPHS=0"          # query batches launched kernel by kernel
  "no-buckets:QAC_CUDA_GRAPH_ROWS=0"     # exact shapes, no padding, no graphs
  "ln-block:QAC_CUDA_LN_WARPS=0"         # one block a row, pooling apart (the kernels before)
  "ln-1warp:QAC_CUDA_LN_WARPS=1"
  "ln-2warps:QAC_CUDA_LN_WARPS=2"
  "ln-8warps:QAC_CUDA_LN_WARPS=8"
  "ln-16warps:QAC_CUDA_LN_WARPS=16"
  "gelu-1row:QAC_CUDA_GELU_ROWS=1"
  "gelu-16rows:QAC_CUDA_GELU_ROWS=16"
  "no-prune:QAC_CUDA_PRUNE=0"            # the last layer on every row
)
out=""
for v in "${variants[@]}"; do
  name="${v%%:*}" env="${v#*:}"
  rc=0
  r="$(env $env "$bin" bf16 "$n" 256 989 bert-base 128)" || rc=$?
  [ "$rc" = 77 ] && { echo "$r"; exit 77; } # no GPU
  [ "$rc" = 0 ] || { echo "VARIANT encode $name FAILED (exit $rc)"; continue; }
  get() { echo "$r" | awk -v k="$1" '$1 == "RESULT" && $2 == k {print $3}'; }
  line="VARIANT encode $name passages_per_s $(get qac_bf16_passages_per_s) query_ms $(get qac_bf16_query_latency_ms_p50) query16_ms $(get qac_bf16_query16_latency_ms_p50)"
  echo "$line"
  out+="$line"$'\n'
done
# the best of each figure: the most passages/s, the least latency
printf '%s' "$out" | awk '$1 == "VARIANT" && NF == 9 {
    if (!("p" in b) || $5 > b["p"]) { b["p"] = $5; w["p"] = $3 }
    if (!("q" in b) || $7 < b["q"]) { b["q"] = $7; w["q"] = $3 }
    if (!("s" in b) || $9 < b["s"]) { b["s"] = $9; w["s"] = $3 }
  } END {
    printf "VARIANT best passages_per_s %s %s\n", b["p"], w["p"]
    printf "VARIANT best query_ms %s %s\n", b["q"], w["q"]
    printf "VARIANT best query16_ms %s %s\n", b["s"], w["s"]
  }'
model="${QAC_MODEL:-${QAC_HOME:-$HOME/.local/share/qac}/models/all-MiniLM-L6-v2}"
[ -f "$model/config.json" ] || { echo "NOTE no model at $model: pooling variants skipped"; exit 0; }
for w in 8 1 4 16; do
  r="$(QAC_CUDA_POOL_WARPS=$w "$bin" bf16 "$n" 256 989 "$model" 128 _minilm)" || { echo "VARIANT encode-minilm pool-${w}warps FAILED"; continue; }
  echo "VARIANT encode-minilm pool-${w}warps passages_per_s $(echo "$r" | awk '$2 == "qac_bf16_minilm_passages_per_s" {print $3}')"
done
