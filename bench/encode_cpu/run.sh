#!/usr/bin/env bash
# CPU encoding throughput and peak memory: qac vs PyTorch on the same texts
# in the same run. Configurations: the default model (all-MiniLM-L6-v2) at
# 128 tokens, and a BERT-base-shaped model at 128 and 32 tokens.
#   bench/encode_cpu/run.sh [BUILD_DIR]
# Environment: THREADS (2), N (passages per configuration, 512),
# QAC_PYTHON (python with torch + sentence-transformers, default .venv),
# QAC_SHARED_DATA (folder holding cranfield/).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
threads=${THREADS:-2}
n=${N:-512}
py=${QAC_PYTHON:-$root/.venv/bin/python3}
data=${QAC_SHARED_DATA:-$root/../shared/data}
cran=$data/cranfield/cran.all.1400
bench=$build/bench/encode_cpu/qac_bench_encode
[ -x "$bench" ] || { echo "build first: ninja -C $build qac_bench_encode" >&2; exit 2; }
model=${QAC_MODEL:-${QAC_HOME:-$HOME/.local/share/qac}/models/all-MiniLM-L6-v2}
export QAC_BENCH_TOKENIZER=$model OMP_NUM_THREADS=$threads
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; threads=$threads n=$n"
printf '%-9s %7s %12s %12s %7s %12s %12s\n' model max_len qac_pass/s torch_pass/s ratio qac_rss_MiB torch_rss_MiB
for cfg in "$model 128 minilm" "bertbase 128 bertbase" "bertbase 32 bertbase"; do
  set -- $cfg
  q=$("$bench" "$cran" "$1" "$2" "$n" "$threads")
  t=$("$py" "$root/bench/encode_cpu/ref_torch.py" "$cran" "$1" "$2" "$n" "$threads" 2>/dev/null | tail -1)
  get() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
  qr=$(get "$q" passages_per_s); tr_=$(get "$t" passages_per_s)
  printf '%-9s %7s %12s %12s %7s %12s %12s\n' "$3" "$2" "$qr" "$tr_" \
    "$(awk -v a="$qr" -v b="$tr_" 'BEGIN{printf "%.2fx", a/b}')" "$(get "$q" peak_rss_mib)" "$(get "$t" peak_rss_mib)"
done
