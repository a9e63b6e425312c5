#!/usr/bin/env bash
# CPU training throughput and peak memory: qac vs PyTorch, the same
# fine-tuning step on the same Cranfield batch in the same run (default
# model, NQ queries x N passages, q_len 32, p_len 128).
#   bench/train_cpu/run.sh [BUILD_DIR]
# Environment: THREADS (2), STEPS (5), NQ (8), N (8), ROUNDS (2), QAC_PYTHON,
# QAC_SHARED_DATA. The two sides alternate for ROUNDS rounds and each keeps
# its best round, so a burst of other load does not decide the ratio; CPU
# seconds per step are reported beside wall-clock throughput. ISAS (e.g.
# "avx2 avx512") runs qac once per SIMD path through QAC_CPU_ISA, one line
# each; default: the CPU's best.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
threads=${THREADS:-2} steps=${STEPS:-5} nq=${NQ:-8} n=${N:-8} rounds=${ROUNDS:-2} isas=${ISAS:-default}
py=${QAC_PYTHON:-$root/.venv/bin/python3}
cran=${QAC_SHARED_DATA:-$root/../shared/data}/cranfield
model=${QAC_MODEL:-${QAC_HOME:-$HOME/.local/share/qac}/models/all-MiniLM-L6-v2}
bench=$build/bench/train_cpu/qac_bench_train
[ -x "$bench" ] || { echo "build first: ninja -C $build qac_bench_train" >&2; exit 2; }
export OMP_NUM_THREADS=$threads
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; threads=$threads"
echo "batch: $nq queries x $n passages, q_len 32, p_len 128, $steps timed steps after one warm-up step"
get() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
best() { # keep the line with the higher passages_per_s
  if [ -z "$1" ] || awk -v a="$(get "$2" passages_per_s)" -v b="$(get "$1" passages_per_s)" 'BEGIN{exit !(a>b)}'; then
    echo "$2"; else echo "$1"; fi; }
declare -A q=()
t=""
for r in $(seq "$rounds"); do
  for isa in $isas; do
    if [ "$isa" = default ]; then out=$("$bench" "$cran" "$model" "$nq" "$n" 32 128 "$steps" "$threads")
    else out=$(QAC_CPU_ISA=$isa "$bench" "$cran" "$model" "$nq" "$n" 32 128 "$steps" "$threads"); fi
    q[$isa]=$(best "${q[$isa]:-}" "$out")
  done
  t=$(best "$t" "$("$py" "$root/bench/train_cpu/ref_torch.py" "$cran" "$model" "$nq" "$n" 32 128 "$steps" "$threads" 2>/dev/null | tail -1)")
done
echo "$t"
for isa in $isas; do
  echo "[$isa] ${q[$isa]}"
  awk -v i="$isa" -v a="$(get "${q[$isa]}" passages_per_s)" -v b="$(get "$t" passages_per_s)" \
      -v e="$(get "${q[$isa]}" cpu_s_per_step)" -v f="$(get "$t" cpu_s_per_step)" \
      -v c="$(get "${q[$isa]}" peak_rss_mib)" -v d="$(get "$t" peak_rss_mib)" \
      'BEGIN{printf "[%s] throughput qac/torch = %.2fx (wall, best of rounds); CPU seconds per step qac %.1f, torch %.1f (%.2fx less); peak RSS qac %d MiB, torch %d MiB (%.2fx)\n", i, a/b, e, f, f/e, c, d, c/d}'
done
