#!/usr/bin/env bash
# Set up, build and run the whole test suite (what CI runs).
#   scripts/test.sh            default suite
#   QAC_SANITIZE=1 scripts/test.sh   the same under ASan/UBSan (build-asan/)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
export PATH="$PWD/.venv/bin:$PATH"
jobs=$(nproc)
if [ "${QAC_SANITIZE:-0}" = 1 ]; then
  build=build-asan; extra=(-DQAC_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo)
else
  build=build; extra=()
fi
cmake -S . -B "$build" -G Ninja -DQAC_PYTHON="$PWD/.venv/bin/python3" "${extra[@]}" >/dev/null
cmake --build "$build" -j "$jobs"
cd "$build"
ctest --output-on-failure -j "$jobs" ${QAC_CTEST_ARGS:-}
