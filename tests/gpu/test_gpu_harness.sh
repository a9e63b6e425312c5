#!/usr/bin/env bash
# The one-call GPU harness on this machine: scripts/gpu_bundle.sh packs the
# suite's own CUDA build (no rebuild, no compression, so it stays fast) and
# scripts/gpu_run.sh runs the archive from another working directory. The
# archive must hold what a GPU machine lacks (libraries that resolve on
# their own, the bf16 model, Cranfield, every gpu-labelled test and GPU
# benchmark); without a GPU every step must report SKIP, never PASS, and the
# results file must open with its summary table and stay under 2 MB. With a
# GPU, one quick test must PASS through the harness.
set -euo pipefail
src="${QAC_SOURCE_DIR:?}"
build="${QAC_BUILD_DIR:?}"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/qac-harness.XXXXXX")"
fail() { echo "FAIL: $*" >&2; echo "kept $tmp" >&2; exit 1; }
grep -q libcudart <(ldd "$build/qac") || fail "the suite's build has no CUDA (nvcc not found?): the harness needs one"

# the build named relative to the source tree, as the default one is
QAC_BUNDLE_BUILD="$(realpath --relative-to="$src" "$build")" QAC_BUNDLE_REBUILD=0 QAC_BUNDLE_XZ=0 QAC_BUNDLE_MAX_MB=100000 \
  QAC_DATA="${QAC_SHARED_DATA:?}/cranfield" "$src/scripts/gpu_bundle.sh" "$tmp/bundle" >"$tmp/bundle.log" 2>&1 ||
  { cat "$tmp/bundle.log"; fail "gpu_bundle.sh failed"; }
archive="$(tail -1 "$tmp/bundle.log")"
[ -f "$archive" ] || fail "no archive named on the last line: $archive"
tar -tJf "$archive" >"$tmp/list"
for f in qac-gpu/MANIFEST qac-gpu/tests.txt qac-gpu/src/build/qac qac-gpu/src/scripts/gpu_run.sh \
  qac-gpu/src/bench/train_gpu/reference.py qac-gpu/data/cranfield/cran.all.1400 \
  qac-gpu/src/build/bench/serve_gpu/loadgen qac-gpu/src/bench/encode_gpu/lengths.txt \
  qac-gpu/home/models/all-MiniLM-L6-v2/config.json qac-gpu/home/models/all-MiniLM-L6-v2/model.safetensors.xz \
  qac-gpu/lib/libjansson.so.4; do
  grep -qx "$f" "$tmp/list" || fail "the archive lacks $f"
done
ngpu="$(ctest --test-dir "$build" -N -L '^gpu$' | sed -n 's/^Total Tests: //p')"
[ "$(wc -l <"$(tar -xJf "$archive" -C "$tmp" qac-gpu/tests.txt && echo "$tmp/qac-gpu/tests.txt")")" = "$ngpu" ] ||
  fail "tests.txt does not list the $ngpu gpu-labelled tests"
cut -f2 "$tmp/qac-gpu/tests.txt" | grep -q '^/' && fail "tests.txt names executables by absolute path"
grep -q '^qac-gpu/src/build/tests/gpu/test_gpu_kernels$' "$tmp/list" ||
  fail "the tests' executables are not under src/build/tests/gpu"
grep -q '^libc\.so\|^libcudart\|^libcublas\|^libstdc' <(tar -tJf "$archive" | sed -n 's|^qac-gpu/lib/||p') &&
  fail "the archive carries glibc, the C++ runtime or CUDA's libraries"

mkdir -p "$tmp/elsewhere"
gpu=0
nvidia-smi -L >/dev/null 2>&1 && gpu=1
only='.'
[ $gpu = 1 ] && only='^test_gpu_kernels$'
rc=0
(cd "$tmp/elsewhere" && QAC_GPU_ONLY="$only" "$src/scripts/gpu_run.sh" "$archive" "$tmp/results") >"$tmp/run.log" 2>&1 || rc=$?
res="$tmp/results/gpu-results.md"
[ -f "$res" ] || { cat "$tmp/run.log"; fail "no results file"; }
[ "$(stat -c %s "$res")" -lt 2000000 ] || fail "results file over 2 MB"
head -12 "$res" | grep -q '^| step | status | s | figures |' || fail "the summary table is not first"
grep -q 'missing libraries: none' "$res" || fail "bundled binaries do not resolve their libraries: $(grep missing "$res")"
rows="$(sed -n '/^| --- /,/^$/p' "$res" | grep '^| [^-]')"
echo "$rows"
if [ $gpu = 0 ]; then
  [ $rc = 0 ] || fail "gpu_run.sh exited $rc without a GPU"
  echo "$rows" | grep -v '| SKIP |' && fail "a step did not report SKIP without a GPU"
  for s in $(cut -f1 "$tmp/qac-gpu/tests.txt") bench-encode-bf16 bench-search bench-serve bench-train variants-search_gpu \
    variants-encode_gpu profile \
    train-verify-cranfield; do
    echo "$rows" | grep -q "^| $s |" || fail "step $s missing from the summary"
  done
else
  echo "$rows" | grep -q '^| test_gpu_kernels | PASS |' || fail "test_gpu_kernels did not pass through the harness"
fi
rm -rf "$tmp"
echo "PASS gpu harness ($([ $gpu = 1 ] && echo GPU || echo "no GPU: every step SKIP"))"
