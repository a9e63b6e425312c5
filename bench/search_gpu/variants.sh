#!/usr/bin/env bash
# The GPU flat search's tunables, one at a time away from the default, at
# batches 1, 16 and 256 over the benchmark's corpus (8,841,823 x 768 fp16,
# k = 1000): one VARIANT line each, then the fastest per batch. Every
# variant's hits must equal the default's (CHECK line).
#   bench/search_gpu/variants.sh <build-dir> [rows] [k]
set -euo pipefail
build="${1:?build directory}"; n="${2:-8841823}"; k="${3:-1000}"
rc=0
out="$("$build/bench/search_gpu/bench_search_gpu" --variants "$n" "$k")" || rc=$?
[ "$rc" = 0 ] || { echo "$out"; exit "$rc"; } # 77: no GPU
echo "$out"
echo "$out" | awk '$1 == "VARIANT" && $2 == "search" {
    for (i = 4; i < NF; i += 2) if (!($i in best) || $(i + 1) < best[$i]) { best[$i] = $(i + 1); who[$i] = $3 }
  } END { for (b in best) printf "VARIANT best %s %s %s\n", b, best[b], who[b] }' | sort
