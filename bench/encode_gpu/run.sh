#!/usr/bin/env bash
# GPU encoding benchmark: qac vs Hugging Face BertModel (SDPA) at the same
# precision, on the same GPU, in the same run; prints the ratios.
#   bench/encode_gpu/run.sh <build-dir> [bf16|fp16] [passages] [batch] [peak_tflops] [all|classic]
# classic: BERT-base (random weights) at 128 tokens, and the single-query
# latency. all (the default for bf16): also BERT-base over the realistic
# length distribution (lengths.txt: Debian descriptions under BERT's
# WordPiece cut at 144, mean 77.8 tokens; see length_histogram.py), and
# the default model (MiniLM, $QAC_MODEL) at 128 tokens and over the same
# lengths, each with the projected time for MS MARCO's 8,841,823 passages.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:?build directory}"; prec="${2:-bf16}"; n="${3:-16384}"; batch="${4:-256}"; peak="${5:-989}"
what="${6:-$([ "$prec" = bf16 ] && echo all || echo classic)}"
py="${QAC_PYTHON:-python3}"
model="${QAC_MODEL:-${QAC_HOME:-$HOME/.local/share/qac}/models/all-MiniLM-L6-v2}"
lens="$here/lengths.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
# model:lengths:tag, as reference.py takes them
configs=("bert-base:128:")
if [ "$what" = all ]; then
  configs+=("bert-base:$lens:_bert_msmarco")
  [ -f "$model/config.json" ] && configs+=("$model:128:_minilm_t128" "$model:$lens:_minilm_msmarco") ||
    echo "NOTE no model at $model: MiniLM skipped"
fi
qac_out=""
for c in "${configs[@]}"; do
  IFS=: read -r m l t <<<"$c"
  qac_out+="$("$build/bench/encode_gpu/bench_encode_gpu" "$prec" "$n" "$batch" "$peak" "$m" "$l" "$t")"$'\n'
done
echo "$qac_out"
get() { printf '%s\n%s\n' "$qac_out" "${ref_out:-}" | awk -v k="$1" '$1=="RESULT" && $2==k {print $3}'; }
if ref_out="$("$py" "$here/reference.py" "$prec" "$n" "$batch" "$peak" "${configs[@]}")"; then
  echo "$ref_out"
  for c in "${configs[@]}"; do
    t="${c##*:}"
    awk -v a="$(get qac_${prec}${t}_passages_per_s)" -v b="$(get torch_${prec}${t}_passages_per_s)" -v t="${t:-_bert_t128}" \
      'BEGIN {printf "RATIO throughput%s qac/torch %.2f\n", t, a / b}'
  done
  awk -v a="$(get qac_${prec}_query_latency_ms_p50)" -v b="$(get torch_${prec}_query_latency_ms_p50)" \
    'BEGIN {printf "RATIO query latency torch/qac %.2f\n", b / a}'
else
  echo "reference (torch + transformers) unavailable: qac numbers only" >&2
fi
m="$(get qac_${prec}_bert_msmarco_minutes)"
[ -n "$m" ] && awk -v m="$m" 'BEGIN {printf "CHECK BERT-base, realistic lengths: all 8,841,823 MS MARCO passages in %.1f min (goal < 8)\n", m}'
exit 0
