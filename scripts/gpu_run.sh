#!/usr/bin/env bash
# Run every GPU test and benchmark of an archive made by scripts/gpu_bundle.sh,
# on a machine with an NVIDIA GPU, in one call of at most about 8 minutes:
#   scripts/gpu_run.sh ARCHIVE [RESULTS_DIR]
# From any working directory. The machine needs the NVIDIA driver, CUDA 13's
# cuBLAS and, for the references and comparisons, python3 with torch and
# transformers; compute-sanitizer for the memcheck and racecheck steps.
#
# Phase 1 (GPU shared, up to QAC_GPU_JOBS steps at once): every gpu-labelled
# test; compute-sanitizer memcheck and racecheck on small shapes; the
# training comparisons of scripts/gpu_train_verify.sh (pre-training and
# Cranfield fine-tuning, CPU against GPU).
# Phase 2 (GPU alone, one step at a time): every GPU benchmark against
# PyTorch on the same GPU (the server against the CPU server), per-kernel
# profiles (Nsight Compute) of short runs, and the tunable variants of the
# kernels.
#
# RESULTS_DIR (default: the working directory) receives gpu-results.md, under
# 2 MB: a summary table first (one row a step: PASS, FAIL, SKIP or TIMEOUT,
# seconds, key figures), then every benchmark figure, then the accuracy lines
# of the tests, then the tail of each failed step's log. Without a GPU every
# GPU step reports SKIP, never PASS.
# Environment:
#   QAC_GPU_BUDGET_S  seconds for the whole run (default 470): phase 1 ends by
#                     QAC_GPU_PHASE1_PCT percent of it (default 55), phase 2 by
#                     the whole; a step is cut (TIMEOUT) at its phase's end,
#                     and one that would start with under 15 s left is SKIP
#   QAC_GPU_JOBS      phase 1 parallelism (default 4)
#   QAC_GPU_ONLY      a regular expression: run only the steps it matches
#   QAC_PYTHON        python with torch and transformers (default python3)
#   QAC_TEST_SEED     replay a failing random draw in the tests
set -uo pipefail
archive="$(readlink -f "${1:?usage: scripts/gpu_run.sh ARCHIVE [RESULTS_DIR]}")"
results="$(mkdir -p "${2:-.}" && cd "${2:-.}" && pwd)"
budget="${QAC_GPU_BUDGET_S:-470}"
jobs="${QAC_GPU_JOBS:-4}"
only="${QAC_GPU_ONLY:-.}"
start=$SECONDS

work="$(mktemp -d "${TMPDIR:-/tmp}/qac-gpu-run.XXXXXX")"
tar -C "$work" -xJf "$archive" || { echo "gpu_run: cannot unpack $archive" >&2; exit 1; }
B="$work/qac-gpu"
for z in "$B"/home/models/*/*.xz; do [ -f "$z" ] && xz -d "$z"; done
S="$B/src"
build="$S/build"
logs="$work/logs"
mkdir -p "$logs"
manifest() { sed -n "s/^$1=//p" "$B/MANIFEST"; }

# Libraries: the bundle's, then CUDA's (from the loader cache, the toolkit,
# or the nvidia wheels beside torch). Python gets none of them.
cuda_dirs=()
for so in libcublas.so.13 libcudart.so.13 libcublasLt.so.13; do
  p="$(ldconfig -p 2>/dev/null | awk -v s="$so" '$1 == s {print $NF; exit}')"
  [ -n "$p" ] && cuda_dirs+=("$(dirname "$p")")
done
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && cuda_dirs+=("$d"); done
real_py="${QAC_PYTHON:-python3}"
for d in $("$real_py" -c 'import nvidia, os; r = os.path.dirname(nvidia.__path__[0] + "/"); print(" ".join(os.path.join(r, x, "lib") for x in ("cublas", "cuda_runtime")))' 2>/dev/null); do
  [ -d "$d" ] && cuda_dirs+=("$d")
done
lp="$B/lib"
for d in "${cuda_dirs[@]}"; do lp="$lp:$d"; done
export LD_LIBRARY_PATH="$lp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$B/bin"
printf '#!/bin/sh\nexec env -u LD_LIBRARY_PATH %s "$@"\n' "$(command -v "$real_py" || echo "$real_py")" >"$B/bin/python3"
chmod +x "$B/bin/python3"
export QAC_PYTHON="$B/bin/python3"

# Data and model where the binaries look for them: the environment, and the
# paths compiled into the tests recreated as links when they are free.
export QAC_HOME="$B/home" QAC_MODEL="$B/home/models/all-MiniLM-L6-v2"
export QAC_SHARED_DATA="$B/data" QAC_DATA="$B/data/cranfield" QAC_TEST_DATA="$S/tests"
linked=()
for pair in "test_data:$S/tests" "shared_data:$B/data"; do
  want="$(manifest "${pair%%:*}")"
  if [ -n "$want" ] && [ ! -e "$want" ] && mkdir -p "$(dirname "$want")" 2>/dev/null && ln -s "${pair#*:}" "$want"; then
    linked+=("$want")
  fi
done
cleanup() { for l in "${linked[@]}"; do rm -f "$l"; done; }
trap cleanup EXIT

gpu=0
nvidia-smi -L >/dev/null 2>&1 && gpu=1
missing="$(ldd "$build/qac" 2>&1 | awk '/not found/ {print $1}' | tr '\n' ' ')"

# ---- steps ----
# step NAME TIMEOUT_S CMD...: run in $S, log to $logs/NAME.log; status 0 PASS,
# 77 SKIP (the binary found no GPU), 124/137 TIMEOUT, else FAIL.
: >"$logs/order"
step() {
  local name="$1" limit="$2"; shift 2
  [[ "$name" =~ $only ]] || return 0
  echo "$name" >>"$logs/order"
  # a step runs to its own limit or to the phase's deadline, whichever is first
  local left=$((deadline - SECONDS))
  if [ "$left" -lt 15 ]; then
    printf 'SKIP\t0\tbudget: the phase ended\n' >"$logs/$name.status"
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local t0=$SECONDS rc
  (cd "$S" && timeout -k 10 "$limit" "$@") >"$logs/$name.log" 2>&1
  rc=$?
  local st=FAIL
  case $rc in 0) st=PASS ;; 77) st=SKIP ;; 124 | 137) st=TIMEOUT ;; esac
  printf '%s\t%s\trc %s\n' "$st" "$((SECONDS - t0))" "$rc" >"$logs/$name.status"
}
# the same in the background, at most $jobs at once
bstep() {
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  step "$@" &
}
# a step that cannot tell by itself that there is no GPU
gstep() {
  if [ $gpu = 1 ]; then step "$@"; else
    [[ "$1" =~ $only ]] && { echo "$1" >>"$logs/order"; printf 'SKIP\t0\tno GPU\n' >"$logs/$1.status"; }
  fi
}
bgstep() {
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  gstep "$@" &
}

{ nvidia-smi; echo; cat "$B/MANIFEST"; echo "missing libraries: ${missing:-none}"
  "$QAC_PYTHON" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
} >"$logs/machine.log" 2>&1

# ---- phase 1: tests, sanitizers, training comparisons (GPU shared) ----
# phase 1 may take QAC_GPU_PHASE1_PCT percent of the budget (default 55%); phase 2 the rest
deadline=$((start + budget * ${QAC_GPU_PHASE1_PCT:-55} / 100))
# First, as the longest (much of it on the CPU): the training comparisons,
# CPU fp32 against GPU, pre-training (four objectives, 20 steps, and a
# killed-and-resumed smoke run) and 100 steps of Cranfield fine-tuning
# (loss curves against the bound from PyTorch's own bf16 drift, the GPU in
# fp32 too, dev nDCG@10, PyTorch's drift and per-tensor gradient error on
# this GPU, wall times).
bgstep train-verify-pretrain 300 env STAGES=pretrain QAC_BUILD_DIR=build scripts/gpu_train_verify.sh "$work/tv-pretrain"
bgstep train-verify-cranfield 420 env STAGES=cranfield QAC_BUILD_DIR=build scripts/gpu_train_verify.sh "$work/tv-cranfield"
while IFS=$'\t' read -r name exe args; do
  # shellcheck disable=SC2086 # args are the test's own, split as ctest would
  bstep "$name" 300 "build/$exe" $args
done <"$B/tests.txt"

san="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
if [ $gpu = 1 ] && [ -x "$san" ]; then
  t="build/tests/gpu"
  export QAC_TEST_SMALL=1
  for x in test_gpu_kernels test_gpu_flat test_gpu_topk test_gpu_encoder test_gpu_train_kernels; do
    [ -x "$S/$t/$x" ] && bstep "memcheck-$x" 300 "$san" --tool memcheck --leak-check full --error-exitcode 3 "$t/$x"
  done
  # the flat search's selection kernels share histograms and lists in shared memory
  [ -x "$S/$t/test_gpu_topk" ] && bstep racecheck-topk 300 "$san" --tool racecheck --error-exitcode 3 "$t/test_gpu_topk" quick
  bstep memcheck-train-step 300 "$san" --tool memcheck --error-exitcode 3 "$t/test_gpu_train_step" parity
  bstep memcheck-pretrain-step 300 "$san" --tool memcheck --leak-check full --error-exitcode 3 \
    "$t/test_gpu_pretrain_step" parity
  bstep racecheck-kernels 300 "$san" --tool racecheck --error-exitcode 3 "$t/test_gpu_kernels"
  for g in attention layernorm pooling infonce pretrain adamw; do
    bstep "racecheck-train-$g" 300 "$san" --tool racecheck --error-exitcode 3 "$t/test_gpu_train_kernels" "$g"
  done
  # the fused LayerNorm kernels' block sums share their barriers across rows
  bstep synccheck-train-kernels 300 "$san" --tool synccheck --error-exitcode 3 "$t/test_gpu_train_kernels"
  unset QAC_TEST_SMALL
else
  echo "sanitize" >>"$logs/order"
  printf 'SKIP\t0\t%s\n' "$([ $gpu = 1 ] && echo "compute-sanitizer not found" || echo "no GPU")" >"$logs/sanitize.status"
fi

wait

# ---- phase 2: benchmarks, one at a time (GPU alone), the most wanted first ----
deadline=$((start + budget))
# the figures the goals name first; profiles and variants after them
# bf16: BERT-base and MiniLM, 128 tokens and realistic lengths (fp16 below: BERT-base at 128)
step bench-encode-bf16 150 bench/encode_gpu/run.sh build bf16
step bench-search 150 bench/search_gpu/run.sh build
step bench-train 150 bench/train_gpu/run.sh build
# qac serve on CUDA against the CPU server: req/s and p99 at concurrency 1, 32, 256
step bench-serve 120 bench/serve_gpu/run.sh build
# the attention kernels alone: every tile variant against PyTorch's SDPA
# backends; the floor from the card's nominal read bandwidth (H100 3350,
# H200 4800 GB/s)
peak_gbps=3350
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | grep -q H200 && peak_gbps=4800
step bench-attention 150 bench/attention_gpu/run.sh build "$peak_gbps"
# per-kernel GPU time (Nsight Compute) of short encode, training and search runs
step profile 75 bench/profile_gpu/run.sh build
step bench-encode-fp16 120 bench/encode_gpu/run.sh build fp16
# Kernel variants (tile sizes, warps, stages): each benchmark folder may
# hold a variants.sh taking the build directory.
for v in "$S"/bench/*gpu*/variants.sh; do
  [ -f "$v" ] || continue
  d="$(basename "$(dirname "$v")")"
  step "variants-$d" 120 bash "bench/$d/variants.sh" build
done

# ---- results ----
res="$results/gpu-results.md"
{
  echo "# qac GPU run, $(date -u +%Y-%m-%d\ %H:%M\ UTC)"
  echo
  echo "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1 || echo none)"
  echo "Bundle: $(manifest commit) built $(manifest date), $(manifest nvcc), sm $(manifest cuda_architectures)"
  echo "Run: $((SECONDS - start)) s of $budget; missing libraries: ${missing:-none}"
  echo
  echo "| step | status | s | figures |"
  echo "| --- | --- | --- | --- |"
  while read -r name; do
    IFS=$'\t' read -r st secs why <"$logs/$name.status" 2>/dev/null || { st=FAIL secs=? why="no status"; }
    figs="$(grep -h '^RATIO\|^SUMMARY\|passed, [0-9]* failed\|^CHECK' "$logs/$name.log" 2>/dev/null | head -4 |
      sed 's/^RATIO //; s/|/\//g' | paste -sd ';' -)"
    [ "$st" = PASS ] || figs="$why${figs:+; $figs}"
    echo "| $name | $st | $secs | $figs |"
  done <"$logs/order"
  echo
  echo "Totals: $(cat "$logs"/*.status 2>/dev/null | cut -f1 | sort | uniq -c | awk '{printf "%s %s  ", $2, $1}')"
  echo
  echo "## Figures"
  echo '```'
  for f in "$logs"/bench-*.log "$logs"/variants-*.log "$logs"/train-verify-*.log; do
    [ -f "$f" ] || continue
    echo "== $(basename "$f" .log)"
    grep -h '^RESULT\|^RATIO\|^NOTE\|^VARIANT\|^BEST\|^CHECK\|worst rel\|nDCG\|smoke:\|identical\|DIFFER\|^PASS\|^FAIL\|^wall\|^graderr' "$f"
  done
  echo '```'
  echo
  echo "## Per-kernel profiles (Nsight Compute, gpu__time_duration.sum, clocks untouched)"
  echo
  grep -h '^PROFILE\|^| \|^NOTE' "$logs/profile.log" 2>/dev/null | sed 's/^PROFILE \(.*\)/\n**\1**\n/'
  echo
  echo "## Accuracy lines of the tests"
  echo '```'
  for f in "$logs"/test_*.log; do
    [ -f "$f" ] || continue
    grep -h 'min cosine\|identical\|max diff\|worst\|trajectory\|passed, ' "$f" | head -60 | sed "s|^|$(basename "$f" .log): |"
  done
  echo '```'
  echo
  echo "## Failed steps (last 60 lines of each log)"
  while read -r name; do
    case "$(cut -f1 "$logs/$name.status" 2>/dev/null)" in
      FAIL | TIMEOUT) echo; echo "### $name"; echo '```'; tail -n 60 "$logs/$name.log"; echo '```' ;;
    esac
  done <"$logs/order"
  echo
  echo "## Machine"
  echo '```'
  head -c 20000 "$logs/machine.log"
  echo '```'
} | head -c 2000000 >"$res.tmp"
mv "$res.tmp" "$res"
rm -rf "$work"
sed -n '1,/^Totals/p' "$res"
! grep -q '| FAIL |\|| TIMEOUT |' "$res"
