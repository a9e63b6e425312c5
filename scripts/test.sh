#!/usr/bin/env bash
# Set up, build and run the whole test suite (what CI runs).
#   scripts/test.sh            default suite
#   QAC_SANITIZE=1 scripts/test.sh   the same under ASan/UBSan (build-asan/)
#   QAC_DATA=DIR scripts/test.sh     the test collections (cranfield/, debian-packages/)
#                                    from DIR; see scripts/data.sh for where else they are found
set -euo pipefail
if [ -n "${QAC_DATA:-}" ]; then QAC_DATA=$(realpath -m -- "$QAC_DATA"); export QAC_DATA; fi
cd "$(dirname "$0")/.."
# The test collections first: one that cannot be found or made stops the run
# here, in one line, before any build. Downloading and building need curl or
# wget and python3: without them, they come after setup.sh installs them.
have() { command -v "$1" >/dev/null; }
data=""
if have python3 && { have curl || have wget; }; then data=$(scripts/data.sh tests) || exit 1; fi
scripts/setup.sh --test
[ -n "$data" ] || data=$(scripts/data.sh tests) || exit 1
echo "test.sh: test collections in $data" >&2
export PATH="$PWD/.venv/bin:$PATH"
jobs=$(nproc)
if [ "${QAC_SANITIZE:-0}" = 1 ]; then
  build=build-asan; extra=(-DQAC_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo)
else
  build=build; extra=()
fi
# the Python package is part of what the suite tests: its module is required here
cmake -S . -B "$build" -G Ninja -DQAC_PYTHON="$PWD/.venv/bin/python3" -DQAC_PYTHON_MODULE=ON -DQAC_POSTGRESQL=ON \
  -DQAC_SHARED_DATA="$data" "${extra[@]}" >/dev/null
cmake --build "$build" -j "$jobs"
# the Python package into the environment, from this build (python/setup.py);
# not a sanitizer build's, which loads only under the sanitizers' runtime
if [ "${QAC_SANITIZE:-0}" != 1 ]; then
  QAC_BUILD_DIR="$PWD/$build" .venv/bin/python3 -m pip install -q --disable-pip-version-check \
    --no-build-isolation --no-deps ./python
fi
cd "$build"
log=$(mktemp)
set +e
ctest --output-on-failure -j "$jobs" ${QAC_CTEST_ARGS:-} 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
# ctest counts a skip as a pass: only tests labelled gpu or docker may skip
# (no GPU or no container engine here); any other skip is a failure.
allowed=$(ctest -N -L '^(gpu|docker)$' | sed -n 's/^ *Test *#[0-9]*: *//p')
bad=$(sed -n 's/^[[:space:]]*[0-9]* - \([^ ]*\) (Skipped)$/\1/p' "$log" | grep -vxF -e "$allowed" -e '' || true)
rm -f "$log"
if [ -n "$bad" ]; then
  echo "test.sh: skipped, but nothing excuses it here (missing data or tool?):" $bad >&2
  exit 1
fi
exit "$rc"
