#!/usr/bin/env bash
# CPU encoding throughput and peak memory: qac vs PyTorch on the same texts
# in the same run. Configurations: the default model (all-MiniLM-L6-v2) at
# 128 tokens, and a BERT-base-shaped model at 128 and 32 tokens.
#   bench/encode_cpu/run.sh [BUILD_DIR]
# Environment: THREADS (2), N (passages per configuration, 512), N_BASE (for
# the BERT-base configurations, default N),
# QAC_PYTHON (python with torch + sentence-transformers, default .venv),
# QAC_SHARED_DATA (folder holding cranfield/), ISAS (qac's SIMD paths to run,
# e.g. "avx2 avx512 bf16", one line each through QAC_CPU_ISA; "bf16" is the
# bf16 mode on the best path; default: the CPU's best), ROUNDS (1: each side runs ROUNDS times, alternating, and keeps
# its best, so a burst of other load does not decide the ratio).
# With "bf16" among ISAS, PyTorch also runs under bf16 autocast, and the
# bf16 line is given against both PyTorch fp32 and PyTorch bf16.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
threads=${THREADS:-2}
n=${N:-512}
n_all=$n n_base=${N_BASE:-$n} # BERT-base configurations (8x the work per passage)
isas=${ISAS:-default}
rounds=${ROUNDS:-1}
py=${QAC_PYTHON:-$root/.venv/bin/python3}
data=${QAC_SHARED_DATA:-$root/../shared/data}
cran=$data/cranfield/cran.all.1400
bench=$build/bench/encode_cpu/qac_bench_encode
[ -x "$bench" ] || { echo "build first: ninja -C $build qac_bench_encode" >&2; exit 2; }
model=${QAC_MODEL:-${QAC_HOME:-$HOME/.local/share/qac}/models/all-MiniLM-L6-v2}
export QAC_BENCH_TOKENIZER=$model OMP_NUM_THREADS=$threads
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; threads=$threads n=$n (BERT-base $n_base)"
echo "qac SIMD paths: $isas; best of $rounds round(s)"
# cpu_ratio: passages per second of process CPU time, qac / torch (robust to
# other load; PyTorch's OpenMP threads also count their spin-waiting)
printf '%-9s %7s %-8s %-6s %12s %12s %7s %9s %12s %12s\n' model max_len qac_isa torch qac_pass/s torch_pass/s ratio \
  cpu_ratio qac_rss_MiB torch_rss_MiB
get() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
best() { # keep the line with the higher passages_per_s
  if [ -z "$1" ] || awk -v a="$(get "$2" passages_per_s)" -v b="$(get "$1" passages_per_s)" 'BEGIN{exit !(a>b)}'; then
    echo "$2"; else echo "$1"; fi; }
for cfg in "$model 128 minilm" "bertbase 128 bertbase" "bertbase 32 bertbase"; do
  set -- $cfg
  n=$n_all; [ "$1" = bertbase ] && n=$n_base
  declare -A q=()
  t="" tb=""
  for r in $(seq "$rounds"); do
    for isa in $isas; do
      if [ "$isa" = default ]; then out=$("$bench" "$cran" "$1" "$2" "$n" "$threads")
      elif [ "$isa" = bf16 ]; then out=$(QAC_BENCH_DTYPE=bf16 "$bench" "$cran" "$1" "$2" "$n" "$threads")
      else out=$(QAC_CPU_ISA=$isa "$bench" "$cran" "$1" "$2" "$n" "$threads"); fi
      q[$isa]=$(best "${q[$isa]:-}" "$out")
    done
    t=$(best "$t" "$("$py" "$root/bench/encode_cpu/ref_torch.py" "$cran" "$1" "$2" "$n" "$threads" 2>/dev/null | tail -1)")
    case " $isas " in *" bf16 "*)
      tb=$(best "$tb" "$("$py" "$root/bench/encode_cpu/ref_torch.py" "$cran" "$1" "$2" "$n" "$threads" bf16 2>/dev/null | tail -1)")
    esac
  done
  row() { # model-label max_len isa torch-label qac-line torch-line
    local qr tr_
    qr=$(get "$5" passages_per_s) tr_=$(get "$6" passages_per_s)
    printf '%-9s %7s %-8s %-6s %12s %12s %7s %9s %12s %12s\n' "$1" "$2" "$3" "$4" "$qr" "$tr_" \
      "$(awk -v a="$qr" -v b="$tr_" 'BEGIN{printf "%.2fx", a/b}')" \
      "$(awk -v a="$(get "$5" cpu_passages_per_s)" -v b="$(get "$6" cpu_passages_per_s)" 'BEGIN{printf "%.2fx", a/b}')" \
      "$(get "$5" peak_rss_mib)" "$(get "$6" peak_rss_mib)"
  }
  for isa in $isas; do
    row "$3" "$2" "$isa" fp32 "${q[$isa]}" "$t"
    if [ "$isa" = bf16 ]; then row "$3" "$2" "$isa" bf16 "${q[$isa]}" "$tb"; fi
  done
  unset q
done
