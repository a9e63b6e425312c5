#!/usr/bin/env bash
# qac serve with --device cuda against qac serve with --device cpu, same
# machine, same index and model, same run: POST /search (k = 10, the 225
# Cranfield queries in turn) from a closed-loop load generator (loadgen)
# at each concurrency for SECONDS after a 1 s warm-up; req/s, p50 and p99
# for both, the ratios, and from the servers' /metrics the queries per
# dense search call and whether every encoder call made one search call.
# The index: PASSAGES passages of 2-4 random Cranfield sentences, built
# with `qac index build --device cuda`. About 45 s with the defaults.
#   bench/serve_gpu/run.sh <build-dir> [passages] [seconds] ["1 32 256"]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="$(cd "${1:?build directory}" && pwd)"; passages="${2:-50000}"; secs="${3:-4}"; concs="${4:-1 32 256}"
py="${QAC_PYTHON:-python3}"
data="${QAC_DATA:-$here/../../../shared/data/cranfield}"
qac="$build/qac"; lg="$build/bench/serve_gpu/loadgen"
nvidia-smi -L >/dev/null 2>&1 || { echo "bench/serve_gpu: no GPU" >&2; exit 77; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
work="$(mktemp -d "${TMPDIR:-/tmp}/qac-serve-gpu.XXXXXX")"
server=""
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

"$py" "$here/make_data.py" "$data" "$passages" "$work"
t0=$SECONDS
"$qac" index build --corpus "$work/passages.tsv" --out "$work/index" --device cuda --batch 256 --max-len 128 \
  2>"$work/build.log" || { tail -5 "$work/build.log"; exit 1; }
grep "passages encoded" "$work/build.log" | sed 's/^/NOTE /'
echo "NOTE index: $passages passages built in $((SECONDS - t0)) s"

metric() { awk -v k="$1" '$1 == k {print $2}' "$2"; }
declare -A rps p99
for dev in cuda cpu; do
  port=$((20000 + RANDOM % 20000))
  "$qac" serve --index "$work/index" --device "$dev" --host 127.0.0.1 --port "$port" >"$work/serve-$dev.log" 2>&1 &
  server=$!
  "$lg" wait 127.0.0.1 "$port" 180 || { tail -5 "$work/serve-$dev.log"; exit 1; }
  for c in $concs; do
    out="$("$lg" post 127.0.0.1 "$port" /search "$work/bodies.jsonl" "$c" "$secs")"
    set -- $out # requests N errors E rps R p50_ms A p90_ms B p99_ms C mean_ms D
    echo "RESULT serve_${dev}_c${c}_rps $6"
    echo "RESULT serve_${dev}_c${c}_p50_ms $8"
    echo "RESULT serve_${dev}_c${c}_p99_ms ${12}"
    [ "$4" = 0 ] || echo "NOTE $dev concurrency $c: $4 failed requests"
    rps[$dev,$c]=$6
    p99[$dev,$c]=${12}
  done
  "$lg" get 127.0.0.1 "$port" /metrics >"$work/metrics-$dev.txt"
  sq="$(metric qac_search_batch_size_sum "$work/metrics-$dev.txt")"; sc="$(metric qac_search_batch_size_count "$work/metrics-$dev.txt")"
  ec="$(metric qac_batch_size_count "$work/metrics-$dev.txt")"
  awk -v q="$sq" -v s="$sc" -v e="$ec" -v d="$dev" 'BEGIN {
    printf "NOTE %s: %d queries in %d dense search calls (%.1f a call) for %d encoder calls\n", d, q, s, s ? q / s : 0, e
    printf "CHECK %s: one search call per encoder batch: %s\n", d, s == e ? "yes" : "NO" }'
  kill "$server"; wait "$server" 2>/dev/null || true; server=""
done
for c in $concs; do
  awk -v g="${rps[cuda,$c]}" -v u="${rps[cpu,$c]}" -v gp="${p99[cuda,$c]}" -v up="${p99[cpu,$c]}" -v c="$c" 'BEGIN {
    printf "RATIO concurrency %d req/s cuda/cpu %.2f, p99 cpu/cuda %.2f\n", c, u ? g / u : 0, gp ? up / gp : 0 }'
done
