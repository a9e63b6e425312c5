#!/usr/bin/env bash
# Alternating A/B of `qac serve` builds on one index: for each round, each
# variant is started, warmed up with a short wrk run, measured with wrk at one
# concurrency, and stopped; the order is reversed every other round, so a
# drift of the machine does not favour either side. Prints one line a run
# and the mean of each variant.
#
#   bench/serve/ab.sh WORK VARIANT... 
#     WORK     a bench_serve.py --work directory (queries.jsonl, index-N/)
#     VARIANT  label=QAC_BINARY[,DTYPE[,INDEX]]: DTYPE fp32 (default) or
#              bf16 (qac serve --dtype), INDEX a directory under WORK
#              (default: the first index-* there). QAC_BINARY may instead be
#              `batched` or `unbatched`: bench_serve.py's Python references
#              (reference_batched.py, reference_service.py; DTYPE bf16 runs
#              them under torch's bf16 autocast), on the same index file
#   environment: ROUNDS (3), DURATION (10 s), WARMUP (3 s), CONCURRENCY (32),
#                PORT (18082), QAC_MODEL (default: the installed default model),
#                PYTHON (the references' python; default .venv/bin/python3)
# Examples: the build before a change against the one after, in fp32 and
# bf16; qac against the batching reference over several alternating rounds:
#   bench/serve/ab.sh /tmp/serve-20k old=../old/build/qac new=build/qac \
#       old-bf16=../old/build/qac,bf16 new-bf16=build/qac,bf16
#   ROUNDS=5 bench/serve/ab.sh /tmp/serve-20k qac=build/qac ref=batched
# Run it on a quiet machine; wrk and the server share its cores.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 2 ] || { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
work=$(cd "$1" && pwd)
shift
command -v wrk >/dev/null || { echo "ab.sh: wrk is not installed (scripts/setup.sh --test)" >&2; exit 2; }
model=${QAC_MODEL:-${QAC_HOME:-$HOME/.local/share/qac}/models/all-MiniLM-L6-v2}
rounds=${ROUNDS:-3} duration=${DURATION:-10} warmup=${WARMUP:-3} conc=${CONCURRENCY:-32} port=${PORT:-18082}
default_index=$(cd "$work" && ls -d index-* 2>/dev/null | head -1 || true)
docids=$(cd "$work" && ls docids-*.txt 2>/dev/null | head -1 || true)
python=${PYTHON:-$(cd "$here/../.." && pwd)/.venv/bin/python3}
[ -f "$work/queries.jsonl" ] || { echo "ab.sh: $work has no queries.jsonl (run bench_serve.py --work $work first)" >&2; exit 2; }

run() { # label binary dtype index
    local log
    log=$(mktemp)
    case $2 in
    batched | unbatched)
        [ -n "$docids" ] || { echo "ab.sh: $work has no docids-*.txt for the references" >&2; exit 2; }
        local script=reference_batched.py
        [ "$2" = unbatched ] && script=reference_service.py
        "$python" "$here/$script" --model "$model" --index "$work/$4" --docids "$work/$docids" --port "$port" \
            --dtype "$3" >"$log" 2>&1 &
        ;;
    *) QAC_QUIET=1 "$2" serve --index "$work/$4" --model "$model" --port "$port" --dtype "$3" \
         --query-max-len 32 >"$log" 2>&1 & ;;
    esac
    local pid=$! up=0
    for _ in $(seq 900); do # any HTTP answer: the references have no /health
        if [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" != 000 ]; then up=1; break; fi
        kill -0 $pid 2>/dev/null || break
        sleep 0.2
    done
    if [ $up = 0 ]; then
        echo "ab.sh: $1 did not come up:" >&2; cat "$log" >&2; kill $pid 2>/dev/null || true; rm -f "$log"; exit 1
    fi
    export QAC_BENCH_QUERIES="$work/queries.jsonl" QAC_BENCH_K=10
    wrk -t2 -c"$conc" -d"${warmup}s" -s "$here/search.lua" "http://127.0.0.1:$port" >/dev/null
    local rps
    rps=$(wrk -t2 -c"$conc" -d"${duration}s" -s "$here/search.lua" "http://127.0.0.1:$port" |
          awk '/Requests\/sec/ {print $2}')
    kill $pid; wait $pid 2>/dev/null || true
    rm -f "$log"
    echo "$rps"
}

labels=() specs=()
for v in "$@"; do
    labels+=("${v%%=*}")
    specs+=("${v#*=}")
done
declare -A sum
for ((r = 1; r <= rounds; r++)); do
    order=$(seq 0 $(($# - 1)))
    [ $((r % 2)) = 0 ] && order=$(seq $(($# - 1)) -1 0)
    for i in $order; do
        IFS=, read -r bin dtype index <<<"${specs[$i]}"
        rps=$(run "${labels[$i]}" "$bin" "${dtype:-fp32}" "${index:-$default_index}")
        echo "round $r  ${labels[$i]}  c=$conc  $rps req/s"
        sum[$i]=$(awk -v a="${sum[$i]:-0}" -v b="$rps" 'BEGIN {print a + b}')
    done
done
for ((i = 0; i < $#; i++)); do
    awk -v l="${labels[$i]}" -v s="${sum[$i]}" -v n="$rounds" 'BEGIN {printf "mean  %s  %.1f req/s\n", l, s / n}'
done
