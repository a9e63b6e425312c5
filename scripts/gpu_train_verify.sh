#!/usr/bin/env bash
# One-shot verification of CUDA training on a machine with an NVIDIA GPU
# (H100/H200 class), meant to finish in under 10 minutes:
#   1. build with CUDA (only the targets below);
#   2. the gpu-labelled training tests: every training kernel against its
#      CPU twin (test_gpu_train_kernels), the whole step against the CPU
#      trainer (test_gpu_train_step: gradient parity fp32 and bf16, GradCache,
#      a 10-step fp32 and a 100-step bf16 trajectory against CPU fp32,
#      checkpoints resumed across devices), and the NCCL path against one GPU
#      (test_gpu_train_dist, when the CUDA installation has NCCL);
#   3. compute-sanitizer: memcheck on the training kernels (small shapes)
#      and on one parity step of the trainer, racecheck on attention
#      backward and the reductions;
#   4. bench/train_gpu against PyTorch on the same GPU.
# Everything is logged under the output directory; a summary comes last.
#   scripts/gpu_train_verify.sh [out-dir]      (default: gpu-train-verify-<date>)
# Environment:
#   STAGES         comma list of build,test,sanitize,bench (default all), so
#                  the work can be split over two runs of at most 10 minutes
#   QAC_DEPS_DIR   folder of Debian .deb files for the build's libraries
#                  (default .offline-deps), for a machine without package
#                  access: they are unpacked under it, never over /
#   QAC_PYTHON     python with torch + transformers (default python3)
#   QAC_TEST_SEED  replay a failing random draw
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu-train-verify-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
build=build-gpu
py="${QAC_PYTHON:-python3}"
stages="${STAGES:-build,test,sanitize,bench}"
has() { case ",$stages," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
summary=()
step() { # name, command...
  local name="$1"; shift
  local t0=$SECONDS
  if "$@" >"$out/$name.log" 2>&1; then summary+=("PASS $name ($((SECONDS - t0)) s)")
  else summary+=("FAIL $name ($((SECONDS - t0)) s, rc $?) see $out/$name.log"); fi
}

# The build's Debian libraries from .deb files, when the system lacks them:
# unpacked into a prefix beside them and pointed at by the usual variables.
deps="${QAC_DEPS_DIR:-.offline-deps}"
if ! pkg-config --exists jansson 2>/dev/null && [ -d "$deps" ] && ls "$deps"/*.deb >/dev/null 2>&1; then
  root="$(cd "$deps" && pwd)/root"
  mkdir -p "$root"
  for f in "$deps"/*.deb; do dpkg-deb -x "$f" "$root" 2>/dev/null || dpkg -x "$f" "$root"; done
  lib="$root/usr/lib/x86_64-linux-gnu"
  for so in "$lib"/openblas-pthread/lib*.so*; do
    [ -e "$so" ] && [ ! -e "$lib/$(basename "$so")" ] && ln -s "$so" "$lib/$(basename "$so")"
  done
  export QAC_DEPS_ROOT="$root"
  export CMAKE_PREFIX_PATH="$root/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export CPATH="$root/usr/include:$root/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}"
  export LIBRARY_PATH="$lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PKG_CONFIG_PATH="$lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  summary+=("NOTE build libraries from $deps")
fi

{ nvidia-smi; nvcc --version; "$py" -c 'import torch, transformers; print(torch.__version__, transformers.__version__)'; } \
  >"$out/machine.log" 2>&1 || true

targets=(qac test_gpu_train_kernels test_gpu_train_step test_gpu_train_dist bench_train_gpu)
# NCCL (the several-GPU path) when the CUDA installation has it
nccl=OFF
nvcc_dir="$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")"
[ -f "$nvcc_dir/../include/nccl.h" ] && nccl=ON
if has build; then
  step configure cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DQAC_CUDA=ON -DQAC_PYTHON="$py" \
    -DQAC_NCCL="$nccl" ${QAC_DEPS_ROOT:+-DCMAKE_PREFIX_PATH="$QAC_DEPS_ROOT/usr"}
  step build cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
  grep -n "warning" "$out/build.log" >"$out/build-warnings.txt" || true
  [ -s "$out/build-warnings.txt" ] && summary+=("FAIL the build printed warnings: $out/build-warnings.txt")
fi

bin="$build/tests/gpu"
if has test; then
  step test-train-kernels "$bin/test_gpu_train_kernels"
  step test-train-step "$bin/test_gpu_train_step"
  # a skip (exit 77) on a GPU machine is a failure of this run
  grep -q "^SKIP" "$out/test-train-kernels.log" "$out/test-train-step.log" &&
    summary+=("FAIL a training test skipped on a GPU machine")
  # NCCL: one rank per GPU (a single GPU still runs the collectives); skips without NCCL
  t0=$SECONDS
  "$bin/test_gpu_train_dist" >"$out/test-train-dist.log" 2>&1
  case $? in
    0) summary+=("PASS test-train-dist ($((SECONDS - t0)) s)") ;;
    77) summary+=("NOTE test-train-dist skipped: $(grep -m1 ^SKIP "$out/test-train-dist.log")") ;;
    *) summary+=("FAIL test-train-dist see $out/test-train-dist.log") ;;
  esac
fi

san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if has sanitize; then
  if [ -x "$san" ]; then
    export QAC_TEST_SMALL=1
    step memcheck-train-kernels "$san" --tool memcheck --leak-check full --error-exitcode 3 "$bin/test_gpu_train_kernels"
    step memcheck-train-step "$san" --tool memcheck --error-exitcode 3 "$bin/test_gpu_train_step" parity
    step racecheck-attention "$san" --tool racecheck --error-exitcode 3 "$bin/test_gpu_train_kernels" attention
    for g in layernorm pooling infonce adamw; do
      step "racecheck-$g" "$san" --tool racecheck --error-exitcode 3 "$bin/test_gpu_train_kernels" "$g"
    done
    step synccheck-train-kernels "$san" --tool synccheck --error-exitcode 3 "$bin/test_gpu_train_kernels"
    unset QAC_TEST_SMALL
  else
    summary+=("SKIP compute-sanitizer not found")
  fi
fi

if has bench; then
  QAC_PYTHON="$py" step bench-train bench/train_gpu/run.sh "$build"
fi

echo "== results in $out =="
grep -h "^RESULT\|^RATIO\|^NOTE" "$out"/bench-*.log 2>/dev/null
grep -h "worst tensor\|^trajectory\|^resume\|loss gpu" "$out"/test-train-step.log 2>/dev/null | tee "$out/parity.txt"
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
! grep -q '^FAIL' "$out/summary.txt"
