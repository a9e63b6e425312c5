#!/usr/bin/env bash
# Where the GPU time goes, kernel by kernel: short runs of the GPU benchmarks
# under Nsight Compute (one metric, gpu__time_duration.sum, clocks left as
# they are), each summarised by ncu_summary.py into a table of at most 25
# kernels (calls, total us, share, avg us):
#   bench/profile_gpu/run.sh <build-dir> [encode] [train] [search]
#   encode  BERT-base (random weights), 128 tokens, batches of 256, bf16:
#           bench_encode_gpu on 768 passages (its warm-up and three timed
#           passes: 13 batches)
#   train   fine-tuning steps, BERT-base, 16 queries x 4 passages of 32 /
#           128 tokens, bf16 (bench_train_gpu; its first 1,500 launches)
#   search  flat search over 1,000,000 x 768 fp16 rows, k 1000, batches 1,
#           16 and 256 (bench_search_gpu; not the 8.8M rows of bench-search,
#           whose corpus takes too long to fill under a time budget)
# Default: all three, each cut at QAC_PROFILE_LIMIT_S seconds (default 20;
# ncu reports only at the end, so a run cut short has no table).
# Exit 77 without a GPU or ncu, or without permission to read the GPU's
# performance counters.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:?build directory}"
shift
what=("$@")
[ ${#what[@]} -gt 0 ] || what=(encode train search)
limit="${QAC_PROFILE_LIMIT_S:-20}"
py="${QAC_PYTHON:-python3}"
ncu="$(command -v ncu || echo /usr/local/cuda/bin/ncu)"
nvidia-smi -L >/dev/null 2>&1 || { echo "no GPU"; exit 77; }
[ -x "$ncu" ] || { echo "ncu not found"; exit 77; }
tmp="$(mktemp -d "${TMPDIR:-/tmp}/qac-profile.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

rc=0
# prof NAME LAUNCH_COUNT CMD...: the table of CMD's first LAUNCH_COUNT kernel launches (0: all)
prof() {
  local name="$1" count="$2"
  shift 2
  local opts=(--clock-control none --metrics gpu__time_duration.sum --csv --log-file "$tmp/$name.csv")
  [ "$count" -gt 0 ] && opts+=(--launch-count "$count")
  local t0=$SECONDS
  timeout -k 5 "$limit" "$ncu" "${opts[@]}" "$@" >"$tmp/$name.out" 2>&1
  local st=$?
  if grep -qs ERR_NVGPUCTRPERM "$tmp/$name.csv" "$tmp/$name.out"; then
    echo "NOTE profile $name: no permission to read the GPU's performance counters"
    return 77
  fi
  if "$py" "$here/ncu_summary.py" "$tmp/$name.csv" --name "$name ($((SECONDS - t0)) s under ncu, exit $st)"; then
    echo
  else
    echo "NOTE profile $name: no kernel times (ncu exit $st); last lines:"
    tail -n 8 "$tmp/$name.out" "$tmp/$name.csv" 2>/dev/null
    rc=1
  fi
}

for w in "${what[@]}"; do
  case "$w" in
    encode) prof encode 0 "$build/bench/encode_gpu/bench_encode_gpu" bf16 768 256 989 bert-base 128 _profile ;;
    train) prof train 1500 "$build/bench/train_gpu/bench_train_gpu" bf16 16 4 32 128 2 ;;
    search) prof search 0 "$build/bench/search_gpu/bench_search_gpu" 1000000 1000 ;;
    *) echo "unknown profile $w (encode, train, search)" >&2; rc=2 ;;
  esac
  [ $? = 77 ] && exit 77
done
exit $rc
