#!/usr/bin/env bash
# CPU training throughput and peak memory: qac vs PyTorch, the same
# fine-tuning step on the same Cranfield batch in the same run (default
# model, NQ queries x N passages, q_len 32, p_len 128).
#   bench/train_cpu/run.sh [BUILD_DIR]
# Environment: THREADS (2), STEPS (5), NQ (8), N (8), QAC_PYTHON, QAC_SHARED_DATA.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
threads=${THREADS:-2} steps=${STEPS:-5} nq=${NQ:-8} n=${N:-8}
py=${QAC_PYTHON:-$root/.venv/bin/python3}
cran=${QAC_SHARED_DATA:-$root/../shared/data}/cranfield
model=${QAC_MODEL:-${QAC_HOME:-$HOME/.local/share/qac}/models/all-MiniLM-L6-v2}
bench=$build/bench/train_cpu/qac_bench_train
[ -x "$bench" ] || { echo "build first: ninja -C $build qac_bench_train" >&2; exit 2; }
export OMP_NUM_THREADS=$threads
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; threads=$threads"
echo "batch: $nq queries x $n passages, q_len 32, p_len 128, $steps timed steps after one warm-up step"
q=$("$bench" "$cran" "$model" "$nq" "$n" 32 128 "$steps" "$threads")
t=$("$py" "$root/bench/train_cpu/ref_torch.py" "$cran" "$model" "$nq" "$n" 32 128 "$steps" "$threads" 2>/dev/null | tail -1)
echo "$q"; echo "$t"
get() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
awk -v a="$(get "$q" passages_per_s)" -v b="$(get "$t" passages_per_s)" \
    -v c="$(get "$q" peak_rss_mib)" -v d="$(get "$t" peak_rss_mib)" \
    'BEGIN{printf "throughput qac/torch = %.2fx; peak RSS qac %d MiB, torch %d MiB (%.2fx)\n", a/b, c, d, c/d}'
