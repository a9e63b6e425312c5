#!/usr/bin/env bash
# CPU pre-training throughput and peak memory: qac vs PyTorch, one
# coCondenser step and one CoT-MAE step on the same batch of B (passage,
# query) pairs from the Debian corpus, same token ids, same threads, in the
# same run (default model, passages up to P_LEN 144 tokens, queries 32).
#   bench/pretrain_cpu/run.sh [BUILD_DIR]
# Environment: THREADS (2), STEPS (3), B (16), ROUNDS (2), OBJECTIVES
# ("cocondenser cotmae"), QAC_PYTHON, QAC_SHARED_DATA. The two sides
# alternate for ROUNDS rounds and each keeps its best round; CPU seconds per
# step are reported beside wall-clock throughput.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
threads=${THREADS:-2} steps=${STEPS:-3} B=${B:-16} rounds=${ROUNDS:-2} objectives=${OBJECTIVES:-cocondenser cotmae}
py=${QAC_PYTHON:-$root/.venv/bin/python3}
data=${QAC_SHARED_DATA:-$root/../shared/data}/debian-packages/packages.jsonl.gz
model=${QAC_MODEL:-${QAC_HOME:-$HOME/.local/share/qac}/models/all-MiniLM-L6-v2}
bench=$build/bench/pretrain_cpu/qac_bench_pretrain
[ -x "$bench" ] || { echo "build first: ninja -C $build qac_bench_pretrain" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
{ zcat "$data" || true; } | head -n $((B * 4)) > "$tmp/pairs.jsonl"
export OMP_NUM_THREADS=$threads
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; threads=$threads; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "batch: $B pairs, passages <= 144 tokens, queries <= 32, $steps timed steps after one warm-up step"
get() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
best() { # keep the line with the higher pairs_per_s
  if [ -z "$1" ] || awk -v a="$(get "$2" pairs_per_s)" -v b="$(get "$1" pairs_per_s)" 'BEGIN{exit !(a>b)}'; then
    echo "$2"; else echo "$1"; fi; }
for obj in $objectives; do
  q="" t=""
  for r in $(seq "$rounds"); do
    q=$(best "$q" "$("$bench" "$tmp/pairs.jsonl" "$model" "$obj" "$B" 144 32 "$steps" "$threads" "$tmp/batch-$obj.bin")")
    t=$(best "$t" "$("$py" "$root/bench/pretrain_cpu/ref_torch.py" "$tmp/batch-$obj.bin" "$model" "$obj" "$steps" "$threads" 2>/dev/null | tail -1)")
  done
  echo "$q"
  echo "$t"
  awk -v o="$obj" -v a="$(get "$q" pairs_per_s)" -v b="$(get "$t" pairs_per_s)" \
      -v e="$(get "$q" cpu_s_per_step)" -v f="$(get "$t" cpu_s_per_step)" \
      -v c="$(get "$q" peak_rss_mib)" -v d="$(get "$t" peak_rss_mib)" \
      'BEGIN{printf "[%s] throughput qac/torch = %.2fx (wall, best of rounds); CPU seconds per step qac %.1f, torch %.1f (%.2fx less); peak RSS qac %d MiB, torch %d MiB (%.2fx)\n", o, a/b, e, f, f/e, c, d, c/d}'
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
