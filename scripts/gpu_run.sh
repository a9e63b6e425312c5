#!/usr/bin/env bash
# Run the GPU tests, checks, kernel sweep and benchmarks of an archive made
# by scripts/gpu_bundle.sh, on a machine with an NVIDIA GPU, in one call
# that always brings something back:
#   scripts/gpu_run.sh ARCHIVE [RESULTS_DIR] [--phase P[,P...]] [--only NAME[,NAME...]] [--list]
# From any working directory. The machine needs the NVIDIA driver, CUDA 13's
# cuBLAS and, for the references and comparisons, python3 with torch and
# transformers; compute-sanitizer for the checks, ncu for the profile,
# cuDNN (torch's wheel has it) for the cuDNN attention.
#
# Phases, in this order (--phase runs some of them, in this order):
#   new     the GPU tests of the kernels that have never run on a GPU
#           (test_gpu_train_kernels, test_gpu_attention, test_gpu_topk,
#           test_gpu_encoder, test_gpu_cudnn), up to QAC_GPU_JOBS at once,
#           GPU shared;
#   check   compute-sanitizer memcheck and racecheck on small shapes (the
#           attention forward and backward, top-k, the encoder's fused
#           passes, the fused training passes, and the older kernels), then
#           every other gpu-labelled test and the pre-training comparison of
#           scripts/gpu_train_verify.sh (CPU fp32 against GPU), GPU shared;
#   sweep   every compiled variant of the kernels' tunables, GPU alone: the
#           attention tiles with cuDNN's attention and PyTorch's backends,
#           the encoder's tunables, the flat search's; then gpu-defaults.h,
#           the defaults those numbers choose (bench/gpu_defaults.py);
#   bench   the benchmarks against PyTorch on the same GPU, GPU alone:
#           encode bf16 (BERT-base and MiniLM, 128 tokens and MS MARCO-like
#           lengths, the 8.8M-passage projection), flat search 8.8M x 768
#           (batches 1, 16, 256, the read floor), qac serve --device cuda
#           (concurrency 1, 32, 256), training tokens/s and MFU, the bf16
#           fine-tuning drift diagnostics (scripts/gpu_train_verify.sh
#           cranfield), a per-kernel profile (Nsight Compute), encode fp16.
# --only runs the named steps only (--list prints every step and its phase);
# QAC_GPU_ONLY does the same with a regular expression.
#
# RESULTS_DIR (default: the working directory) receives at most four files,
# each far under 16 MiB:
#   gpu-results.md   written as the run goes: every figure a step prints
#                    (RESULT, RATIO, CHECK, VARIANT, test totals, failures)
#                    appended the moment it is printed, and a line per step
#                    when it ends (then synced to disk), so a run cut at its
#                    time limit keeps every figure it reached; at the end
#                    (or on TERM/INT) rewritten with the summary table first
#                    and each failed step's last log lines
#   gpu-sweep.tsv    the sweep's figures, a row each as it is measured
#   gpu-defaults.h   the defaults the sweep chooses, with its numbers: copy
#                    to kernels/qac_gpu_defaults.h to commit them
#   gpu-logs.tar.gz  every step's full log (at the end, or on TERM/INT)
# Without a GPU every GPU step reports SKIP, never PASS.
#
# Environment:
#   QAC_GPU_BUDGET_S  seconds for the whole run (default 540: a command of
#                     at most 10 minutes, with a minute for unpacking and
#                     packing); the phases run share it as new 30, check 20,
#                     sweep 15, bench 35 (a phase run alone takes it all); a
#                     step is cut (TIMEOUT) at its phase's end, and one that
#                     would start with under 15 s left is SKIP
#   QAC_GPU_JOBS      steps at once in the shared phases (default 4)
#   QAC_GPU_ONLY      a regular expression: run only the steps it matches
#   QAC_PYTHON        python with torch and transformers (default python3)
#   QAC_TEST_SEED     replay a failing random draw in the tests
#   QAC_GPU_STANDIN   S: every step is replaced by a stand-in printing one
#                     figure a second for S seconds (tests the harness on a
#                     machine without a GPU; the results say so)
set -uo pipefail
usage() { echo "usage: scripts/gpu_run.sh ARCHIVE [RESULTS_DIR] [--phase P,...] [--only NAME,...] [--list]" >&2; exit 2; }
PHASES=(new check sweep bench)
archive="" results="" phases="" only_list="" list=0
while [ $# -gt 0 ]; do
  case "$1" in
  --phase) phases="${2:?--phase needs new, check, sweep or bench}"; shift 2 ;;
  --phase=*) phases="${1#*=}"; shift ;;
  --only) only_list="${2:?--only needs step names}"; shift 2 ;;
  --only=*) only_list="${1#*=}"; shift ;;
  --list) list=1; shift ;;
  -*) usage ;;
  *) if [ -z "$archive" ]; then archive="$1"; elif [ -z "$results" ]; then results="$1"; else usage; fi; shift ;;
  esac
done
[ -n "$phases" ] || phases="$(IFS=,; echo "${PHASES[*]}")"
for p in ${phases//,/ }; do
  [[ " ${PHASES[*]} " == *" $p "* ]] || { echo "gpu_run: unknown phase $p (new, check, sweep, bench)" >&2; exit 2; }
done
[ -n "$archive" ] || usage
archive="$(readlink -f "$archive")"
results="$(mkdir -p "${results:-.}" && cd "${results:-.}" && pwd)"
budget="${QAC_GPU_BUDGET_S:-540}"
jobs="${QAC_GPU_JOBS:-4}"
only_re="${QAC_GPU_ONLY:-.}"
standin="${QAC_GPU_STANDIN:-}"
start=$SECONDS
res="$results/gpu-results.md" tsv="$results/gpu-sweep.tsv"

work="$(mktemp -d "${TMPDIR:-/tmp}/qac-gpu-run.XXXXXX")"
tar -C "$work" -xJf "$archive" || { echo "gpu_run: cannot unpack $archive" >&2; exit 1; }
B="$work/qac-gpu"
[ $list = 1 ] || for z in "$B"/home/models/*/*.xz; do [ -f "$z" ] && xz -d "$z"; done
S="$B/src"
build="$S/build"
logs="$work/logs"
mkdir -p "$logs"
manifest() { sed -n "s/^$1=//p" "$B/MANIFEST"; }

# Libraries: the bundle's, then CUDA's (from the loader cache, the toolkit,
# or the nvidia wheels beside torch). Python gets none of them. cuDNN is
# found by qac itself (QAC_CUDNN_LIBRARY, else the loader, else torch's wheel).
cuda_dirs=()
for so in libcublas.so.13 libcudart.so.13 libcublasLt.so.13; do
  p="$(ldconfig -p 2>/dev/null | awk -v s="$so" '$1 == s {print $NF; exit}')"
  [ -n "$p" ] && cuda_dirs+=("$(dirname "$p")")
done
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && cuda_dirs+=("$d"); done
real_py="${QAC_PYTHON:-python3}"
# nvrtc too: cuDNN's runtime-compiled engines need it
for d in $("$real_py" -c 'import nvidia, os; r = os.path.dirname(nvidia.__path__[0] + "/"); print(" ".join(os.path.join(r, x, "lib") for x in ("cublas", "cuda_runtime", "cuda_nvrtc")))' 2>/dev/null); do
  [ -d "$d" ] && cuda_dirs+=("$d")
done
# cuDNN: the loader's, else torch's wheel (qac looks there too, in the usual places)
if [ -z "${QAC_CUDNN_LIBRARY:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libcudnn\.so\.9 '; then
  d="$("$real_py" -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)"
  [ -n "$d" ] && [ -f "$d/libcudnn.so.9" ] && export QAC_CUDNN_LIBRARY="$d"
fi
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

gpu=0
nvidia-smi -L >/dev/null 2>&1 && gpu=1
missing="$(ldd "$build/qac" 2>&1 | awk '/not found/ {print $1}' | tr '\n' ' ')"
san="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
san_why=""
[ -x "$san" ] || { san="" san_why="compute-sanitizer not found"; }

# ---- the results file, appended as the run goes ----
# A line goes out in one write (O_APPEND): parallel steps' lines never mix.
emit() { printf '%s\n' "$*" >>"$res"; }
if [ $list = 0 ]; then
  : >"$res"
  [ -f "$tsv" ] && [ "$phases" != "${phases/sweep/}" ] && : >"$tsv"
  emit "# qac GPU run, $(date -u +%Y-%m-%d\ %H:%M\ UTC)${standin:+ (STAND-IN steps: a test of the harness, no figure is real)}"
  emit ""
  emit "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1 || echo none)"
  emit "Bundle: $(manifest commit) built $(manifest date), $(manifest nvcc), sm $(manifest cuda_architectures)"
  emit "Phases: $phases; budget $budget s; missing libraries: ${missing:-none}"
  emit ""
  emit "## As measured"
  emit ""
  emit '```'
  sync "$res" 2>/dev/null
fi

# ---- steps ----
# A step's figure lines, copied into the results the moment it prints them
# (the first 300 of a step), prefixed with its name; the sweep's also into
# the TSV. Its whole output goes to its log.
FIG='^(RESULT|RATIO|NOTE|VARIANT|BEST|CHECK|PROFILE|SUMMARY|PASS|FAIL|TIMEOUT|wall|graderr)|passed, [0-9]+ failed|CHECK failed|FAILED|[Ee]rror|worst rel|nDCG|identical|DIFFER|min cosine|smoke:|ERROR SUMMARY|RACECHECK SUMMARY'
# Both ends line by line: mawk (Debian's and Ubuntu's awk) reads a pipe in
# blocks unless interactive, and C programs write a pipe in 4 KB blocks
# unless stdbuf sets their stdout to lines (and a step killed at its limit
# would lose what it had not flushed); Python's references are unbuffered.
awk_lines=()
awk -W version 2>&1 | grep -q mawk && awk_lines=(-W interactive)
lines=()
command -v stdbuf >/dev/null && lines=(stdbuf -oL -eL)
export PYTHONUNBUFFERED=1
live() { # live NAME PHASE
  awk "${awk_lines[@]}" -v n="$1" -v ph="$2" -v res="$res" -v tsv="$tsv" -v lf="$logs/$1.log" -v re="$FIG" '
    $0 ~ re && k < 300 { # the results first: a line in the log is in the results
      k++
      print "[" n "] " $0 >> res; close(res)
    }
    # every sweep figure in the TSV, past the 300 kept in the results: the
    # defaults are chosen from all of them
    ph == "sweep" && ($1 == "RESULT" || $1 == "VARIANT" || $1 == "CHECK") {
      line = n; for (i = 1; i <= NF; i++) line = line "\t" $i
      print line >> tsv; close(tsv)
    }
    { print > lf; fflush(lf) }'
}
# step PHASE NAME TIMEOUT_S CMD...: run in $S; status 0 PASS, 77 SKIP (the
# binary found no GPU), 124/137 TIMEOUT, else FAIL; its row goes out at once.
step() {
  local phase="$1" name="$2" limit="$3"; shift 3
  if [ $list = 1 ]; then printf '%-7s %s\n' "$phase" "$name"; return 0; fi
  [[ "$name" =~ $only_re ]] || return 0
  [ -z "$only_list" ] || [[ ",$only_list," == *",$name,"* ]] || return 0
  echo "$name" >>"$logs/order"
  echo "$phase" >"$logs/$name.phase"
  local left=$((deadline - SECONDS))
  if [ "$left" -lt 15 ]; then
    printf 'SKIP\t0\tbudget: the phase had ended\n' >"$logs/$name.status"
    emit "== $name: SKIP (budget: the phase had ended)"
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  if [ -n "$standin" ]; then
    set -- bash -c 'for i in $(seq "$1"); do echo "RESULT standin $0 $i"; sleep 1; done; echo "1 passed, 0 failed"' "$name" "$standin"
  fi
  local t0=$SECONDS rc
  (cd "$S" && timeout -k 10 "$limit" "${lines[@]}" "$@") 2>&1 | live "$name" "$phase"
  rc=${PIPESTATUS[0]}
  local st=FAIL
  case $rc in 0) st=PASS ;; 77) st=SKIP ;; 124 | 137) st=TIMEOUT ;; esac
  printf '%s\t%s\trc %s\n' "$st" "$((SECONDS - t0))" "$rc" >"$logs/$name.status"
  emit "== $name: $st in $((SECONDS - t0)) s (rc $rc)"
  if [ "$st" = FAIL ] || [ "$st" = TIMEOUT ]; then
    tail -n 15 "$logs/$name.log" | sed "s/^/[$name] | /" | head -c 4000 >>"$res"
  fi
  sync "$res" 2>/dev/null
  return 0
}
# the same in the background, at most $jobs at once
bstep() {
  if [ $list = 1 ]; then step "$@"; return 0; fi
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  step "$@" &
}
# a step that cannot tell by itself that there is no GPU (or no sanitizer)
gstep() {
  local why=""
  [ $gpu = 1 ] || why="no GPU"
  if [ -n "$why" ] && [ -z "$standin" ] && [ $list = 0 ]; then
    [[ "$2" =~ $only_re ]] || return 0
    [ -z "$only_list" ] || [[ ",$only_list," == *",$2,"* ]] || return 0
    echo "$2" >>"$logs/order"
    echo "$1" >"$logs/$2.phase"
    printf 'SKIP\t0\t%s\n' "$why" >"$logs/$2.status"
    emit "== $2: SKIP ($why)"
    return 0
  fi
  step "$@"
}
bgstep() {
  if [ $list = 1 ] || { [ $gpu = 0 ] && [ -z "$standin" ]; }; then gstep "$@"; return 0; fi
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  gstep "$@" &
}
# a compute-sanitizer step: skipped without the tool, or where it cannot
# run (some GPU machines' sandboxes refuse it the device: san_why)
sanstep() {
  local name="$1"; shift
  if [ -n "$san_why" ] && [ -z "$standin" ] && [ $list = 0 ] && [ $gpu = 1 ]; then
    [[ "$name" =~ $only_re ]] || return 0
    [ -z "$only_list" ] || [[ ",$only_list," == *",$name,"* ]] || return 0
    echo "$name" >>"$logs/order"
    echo check >"$logs/$name.phase"
    printf 'SKIP\t0\t%s\n' "$san_why" >"$logs/$name.status"
    emit "== $name: SKIP ($san_why)"
    return 0
  fi
  bgstep check "$name" 240 env QAC_TEST_SMALL=1 "${san:-compute-sanitizer}" "$@"
}

# ---- the end: the summary first, the logs packed (also on TERM/INT) ----
finished=0
finish() {
  [ $finished = 1 ] && return
  finished=1
  [ $list = 1 ] && { rm -rf "$work"; return; }
  local pids
  pids="$(jobs -rp)"
  [ -n "$pids" ] && kill $pids 2>/dev/null
  emit '```'
  sync "$res" 2>/dev/null
  {
    sed -n '1,/^Phases:/p' "$res"
    echo "Run: $((SECONDS - start)) s of $budget"
    echo
    echo "| step | phase | status | s | figures |"
    echo "| --- | --- | --- | --- | --- |"
    [ -f "$logs/order" ] && while read -r name; do
      IFS=$'\t' read -r st secs why <"$logs/$name.status" 2>/dev/null || { st=UNFINISHED secs="?" why="cut before its end"; }
      figs="$(grep -hE '^RATIO|^SUMMARY|^BEST|passed, [0-9]+ failed|^CHECK|ERROR SUMMARY|RACECHECK SUMMARY' "$logs/$name.log" 2>/dev/null |
        head -4 | sed 's/^RATIO //; s/|/\//g' | paste -sd ';' -)"
      [ "$st" = PASS ] || figs="$why${figs:+; $figs}"
      echo "| $name | $(cat "$logs/$name.phase" 2>/dev/null) | $st | $secs | $figs |"
    done <"$logs/order"
    echo
    echo "Totals: $(cat "$logs"/*.status 2>/dev/null | cut -f1 | sort | uniq -c | awk '{printf "%s %s  ", $2, $1}')"
    echo
    sed -n '/^## As measured/,$p' "$res"
    echo
    echo "## Failed steps (last 60 lines of each log)"
    [ -f "$logs/order" ] && while read -r name; do
      case "$(cut -f1 "$logs/$name.status" 2>/dev/null || echo UNFINISHED)" in
      FAIL | TIMEOUT | UNFINISHED) echo; echo "### $name"; echo '```'; tail -n 60 "$logs/$name.log" 2>/dev/null; echo '```' ;;
      esac
    done <"$logs/order"
    echo
    echo "## Machine"
    echo '```'
    head -c 20000 "$logs/machine.log" 2>/dev/null
    echo '```'
  } | head -c 8000000 >"$res.tmp" && mv "$res.tmp" "$res"
  sync "$res" 2>/dev/null
  tar -C "$work" -czf "$results/gpu-logs.tar.gz.tmp" logs 2>/dev/null && mv "$results/gpu-logs.tar.gz.tmp" "$results/gpu-logs.tar.gz"
  for l in "${linked[@]}"; do rm -f "$l"; done
  rm -rf "$work"
}
trap finish EXIT
trap 'emit "== stopped by a signal at $((SECONDS - start)) s"; exit 143' TERM INT

[ $list = 1 ] || { nvidia-smi; echo; cat "$B/MANIFEST"; echo "missing libraries: ${missing:-none}"
  "$QAC_PYTHON" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
  "$build/qac" info 2>&1 | head -40
} >"$logs/machine.log" 2>&1

wants() { [[ ",$phases," == *",$1,"* ]]; }
# the phases' deadlines: the budget shared among the phases run, in order,
# by their weights (a phase that ends early leaves its time to the next)
declare -A WEIGHT=([new]=30 [check]=20 [sweep]=15 [bench]=35)
phase_deadline() {
  local total=0 upto=0 p
  for p in "${PHASES[@]}"; do
    wants "$p" || continue
    total=$((total + WEIGHT[$p]))
    [ "$p" = "$1" ] && upto=$total
  done
  echo $((start + budget * upto / total))
}
t="build/tests/gpu"

# ---- new: the kernels that have never run on a GPU ----
NEW=(test_gpu_train_kernels test_gpu_attention test_gpu_topk test_gpu_encoder test_gpu_cudnn)
if wants new; then
  deadline=$(phase_deadline new)
  for name in "${NEW[@]}"; do
    IFS=$'\t' read -r _ exe args < <(awk -F'\t' -v n="$name" '$1 == n' "$B/tests.txt")
    [ -n "${exe:-}" ] || continue
    # shellcheck disable=SC2086 # args are the test's own, split as ctest would
    bstep new "$name" 300 "build/$exe" $args
  done
  wait
fi

# ---- check: sanitizers on small shapes, then the other tests ----
if wants check; then
  deadline=$(phase_deadline check)
  # Can compute-sanitizer run here? qac info (which opens the device) under
  # memcheck: a failure that qac info alone does not have, or the tool's
  # own "not supported", skips every sanitizer step with the reason.
  if [ $list = 0 ] && [ $gpu = 1 ] && [ -n "$san" ] && [ -z "$standin" ]; then
    (cd "$S" && timeout 60 "$build/qac" info) >/dev/null 2>&1
    plain=$?
    (cd "$S" && timeout 90 "$san" --tool memcheck --error-exitcode 3 "$build/qac" info) >"$logs/sanitizer-probe.log" 2>&1
    probe=$?
    if { [ $plain = 0 ] && [ $probe != 0 ]; } || grep -qi 'not supported' "$logs/sanitizer-probe.log"; then
      why="$(grep -m1 -i 'not supported' "$logs/sanitizer-probe.log" || grep -m1 -i 'error' "$logs/sanitizer-probe.log")"
      san_why="compute-sanitizer cannot run here (exit $probe): $(echo "$why" | tr -d '\r|' | cut -c1-160)"
      emit "== sanitizer probe: $san_why"
    fi
  fi
  # the kernels new since the first run, forward and backward
  sanstep memcheck-attention --tool memcheck --leak-check full --error-exitcode 3 "$t/test_gpu_attention"
  sanstep racecheck-attention --tool racecheck --error-exitcode 3 "$t/test_gpu_attention"
  sanstep memcheck-topk --tool memcheck --leak-check full --error-exitcode 3 "$t/test_gpu_topk" quick
  sanstep racecheck-topk --tool racecheck --error-exitcode 3 "$t/test_gpu_topk" quick
  sanstep memcheck-encoder --tool memcheck --leak-check full --error-exitcode 3 "$t/test_gpu_encoder"
  sanstep racecheck-encoder --tool racecheck --error-exitcode 3 "$t/test_gpu_encoder"
  for g in layernorm gelu; do # the fused training passes
    sanstep "memcheck-train-$g" --tool memcheck --leak-check full --error-exitcode 3 "$t/test_gpu_train_kernels" "$g"
    sanstep "racecheck-train-$g" --tool racecheck --error-exitcode 3 "$t/test_gpu_train_kernels" "$g"
  done
  sanstep synccheck-train-kernels --tool synccheck --error-exitcode 3 "$t/test_gpu_train_kernels" layernorm
  # the kernels of the first run
  sanstep memcheck-kernels --tool memcheck --leak-check full --error-exitcode 3 "$t/test_gpu_kernels"
  sanstep racecheck-kernels --tool racecheck --error-exitcode 3 "$t/test_gpu_kernels"
  sanstep memcheck-flat --tool memcheck --leak-check full --error-exitcode 3 "$t/test_gpu_flat"
  sanstep memcheck-train-kernels --tool memcheck --leak-check full --error-exitcode 3 "$t/test_gpu_train_kernels"
  for g in attention pooling infonce pretrain adamw; do
    sanstep "racecheck-train-$g" --tool racecheck --error-exitcode 3 "$t/test_gpu_train_kernels" "$g"
  done
  sanstep memcheck-train-step --tool memcheck --error-exitcode 3 "$t/test_gpu_train_step" parity
  sanstep memcheck-pretrain-step --tool memcheck --leak-check full --error-exitcode 3 "$t/test_gpu_pretrain_step" parity
  # every other gpu-labelled test
  while IFS=$'\t' read -r name exe args; do
    [[ " ${NEW[*]} " == *" $name "* ]] && continue
    # shellcheck disable=SC2086
    bstep check "$name" 300 "build/$exe" $args
  done <"$B/tests.txt"
  # pre-training, 20 steps of each objective, CPU fp32 against GPU fp32 and bf16, --recompute bit for bit
  bgstep check train-verify-pretrain 300 env STAGES=pretrain QAC_BUILD_DIR=build scripts/gpu_train_verify.sh "$work/tv-pretrain"
  wait
fi

# ---- sweep: every variant, one at a time, and the defaults they choose ----
peak_gbps=3350 # nominal read bandwidth for the floor: H100 SXM 3350, H200 4800 GB/s
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | grep -q H200 && peak_gbps=4800
if wants sweep; then
  deadline=$(phase_deadline sweep)
  # the attention tiles (every variant of the three kernels), cuDNN's
  # attention through qac and PyTorch's SDPA backends, per shape
  step sweep sweep-attention 150 bench/attention_gpu/run.sh build "$peak_gbps"
  step sweep sweep-encoder 120 bash bench/encode_gpu/variants.sh build
  step sweep sweep-search 120 bash bench/search_gpu/variants.sh build
  if [ $list = 0 ] && [ -s "$tsv" ]; then
    gpu_name="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
    if python3 "$S/bench/gpu_defaults.py" "$tsv" "$(manifest commit)" "${gpu_name:-no GPU}, $(date -u +%Y-%m-%d)" \
      >"$results/gpu-defaults.h.tmp" 2>"$logs/defaults.log"; then
      mv "$results/gpu-defaults.h.tmp" "$results/gpu-defaults.h"
      emit "== gpu-defaults.h written: $(grep -c '^#define' "$results/gpu-defaults.h") defaults"
    else
      rm -f "$results/gpu-defaults.h.tmp"
      emit "== gpu-defaults.h not written: $(tail -1 "$logs/defaults.log")"
    fi
  fi
fi

# ---- bench: the goals' figures, one at a time, the most wanted first ----
if wants bench; then
  deadline=$(phase_deadline bench)
  # bf16: BERT-base and MiniLM, 128 tokens and MS MARCO-like lengths, the projection of 8,841,823 passages
  step bench bench-encode-bf16 150 bench/encode_gpu/run.sh build bf16
  # 8.8M x 768 fp16, k 1000, batches 1, 16 and 256 against torch.matmul + torch.topk, and the read floor
  step bench bench-search 150 bench/search_gpu/run.sh build
  # qac serve on CUDA against the CPU server: req/s and p99 at concurrency 1, 32, 256
  step bench bench-serve 120 bench/serve_gpu/run.sh build
  # BERT-base bf16 training tokens/s and MFU against PyTorch
  step bench bench-train 150 bench/train_gpu/run.sh build
  # Cranfield fine-tuning, 100 steps on both devices: the bf16 drift against
  # fp32 beside PyTorch's own, GPU fp32 against the CPU, per-tensor bf16
  # gradient error, dev nDCG@10, wall times
  gstep bench train-verify-cranfield 300 env STAGES=cranfield QAC_BUILD_DIR=build scripts/gpu_train_verify.sh "$work/tv-cranfield"
  # per-kernel GPU time (Nsight Compute) of short encode, training and search runs
  step bench profile 75 bench/profile_gpu/run.sh build
  step bench bench-encode-fp16 120 bench/encode_gpu/run.sh build fp16
fi
wait
finish
if [ $list = 1 ]; then exit 0; fi
sed -n '1,/^Totals/p' "$res"
! grep -q '| FAIL |\|| TIMEOUT |\|| UNFINISHED |' "$res"
