#!/usr/bin/env bash
# One-shot verification on a machine with an NVIDIA GPU (H100/H200 class):
# build with CUDA, run the gpu-labelled tests, run them again under
# compute-sanitizer memcheck (at reduced sizes where noted), then both GPU
# benchmarks. Everything is logged under the output directory; a summary is
# printed last.
#   scripts/gpu_verify.sh [out-dir]       (default: gpu-verify-<date>)
# Environment: QAC_PYTHON (python with torch + transformers for the
# benchmark references), QAC_GPU_BENCH=0 to skip the benchmarks,
# QAC_TEST_SEED to replay a failing random draw.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu-verify-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
build=build-gpu
py="${QAC_PYTHON:-$PWD/.venv/bin/python3}"
[ -x "$py" ] || py=python3
summary=()
step() { # name, command...
  local name="$1"; shift
  local t0=$SECONDS
  if "$@" >"$out/$name.log" 2>&1; then summary+=("PASS $name ($((SECONDS - t0)) s)")
  else summary+=("FAIL $name ($((SECONDS - t0)) s, rc $?) see $out/$name.log"); fi
}

nvidia-smi >"$out/nvidia-smi.log" 2>&1 || true
step configure cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DQAC_CUDA=ON -DQAC_PYTHON="$py"
step build cmake --build "$build" -j "$(nproc)"
step ctest-gpu ctest --test-dir "$build" -L gpu -V --no-tests=error
# Skipped tests must not pass for run ones: ctest prints them; fail if any was skipped here.
if grep -q "Skipped\|Not Run" "$out/ctest-gpu.log"; then summary+=("FAIL gpu tests were skipped on a GPU machine"); fi

san=/usr/local/cuda/bin/compute-sanitizer
if [ -x "$san" ]; then
  for t in test_gpu_kernels test_gpu_flat test_gpu_encoder; do
    step "memcheck-$t" "$san" --tool memcheck --leak-check full --error-exitcode 3 "$build/tests/gpu/$t"
  done
  step racecheck-kernels "$san" --tool racecheck --error-exitcode 3 "$build/tests/gpu/test_gpu_kernels"
else
  summary+=("SKIP compute-sanitizer not found")
fi

if [ "${QAC_GPU_BENCH:-1}" != 0 ]; then
  QAC_PYTHON="$py" step bench-encode-bf16 bench/encode_gpu/run.sh "$build" bf16
  QAC_PYTHON="$py" step bench-encode-fp16 bench/encode_gpu/run.sh "$build" fp16
  QAC_PYTHON="$py" step bench-search bench/search_gpu/run.sh "$build"
fi

echo "== results in $out =="
grep -h "^RESULT\|^RATIO\|^NOTE" "$out"/bench-*.log 2>/dev/null
grep -h "min cosine\|identical\|rel " "$out/ctest-gpu.log" 2>/dev/null | tail -n 80 > "$out/accuracy.txt"
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
! grep -q '^FAIL' "$out/summary.txt"
