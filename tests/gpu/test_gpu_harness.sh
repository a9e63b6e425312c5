#!/usr/bin/env bash
# The one-call GPU harness on this machine: scripts/gpu_bundle.sh packs the
# suite's own CUDA build (no rebuild, no compression, so it stays fast) and
# scripts/gpu_run.sh runs the archive from another working directory.
#  1. The archive holds what a GPU machine lacks (libraries that resolve on
#     their own, the bf16 model, Cranfield, every gpu-labelled test and GPU
#     benchmark, the defaults file the sweep rewrites); an archive that
#     takes archive + tree past the limit is refused.
#  2. Without a GPU every step reports SKIP, never PASS, in every phase, and
#     the results file opens with its summary table.
#  3. A run cut by SIGKILL (the whole process group, as a time limit does)
#     keeps every figure its steps printed: steps replaced by stand-ins that
#     print one RESULT line a second (QAC_GPU_STANDIN), killed part-way;
#     every RESULT line in any step's log must be in the results file, and
#     every step that ended must have its line there.
#  4. One named phase runs alone (--phase sweep: the sweep's steps, its TSV
#     and gpu-defaults.h, nothing else), and named steps alone (--only).
# With a GPU, one quick test must PASS through the harness instead of 2-4.
set -euo pipefail
src="${QAC_SOURCE_DIR:?}"
build="${QAC_BUILD_DIR:?}"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/qac-harness.XXXXXX")"
fail() { echo "FAIL: $*" >&2; echo "kept $tmp" >&2; exit 1; }
# the bundle needs a CUDA build (test_gpu_run_phases rehearses the harness without one)
grep -q libcudart <(ldd "$build/qac") || { echo "SKIP: the suite's build has no CUDA" >&2; rm -rf "$tmp"; exit 77; }

# ---- 1. the archive ----
# the build named relative to the source tree, as the default one is
QAC_BUNDLE_BUILD="$(realpath --relative-to="$src" "$build")" QAC_BUNDLE_REBUILD=0 QAC_BUNDLE_XZ=0 QAC_BUNDLE_MAX_MB=100000 \
  QAC_DATA="${QAC_SHARED_DATA:?}/cranfield" "$src/scripts/gpu_bundle.sh" "$tmp/bundle" >"$tmp/bundle.log" 2>&1 ||
  { cat "$tmp/bundle.log"; fail "gpu_bundle.sh failed"; }
archive="$(tail -1 "$tmp/bundle.log")"
[ -f "$archive" ] || fail "no archive named on the last line: $archive"
grep -q 'with the tree (.* MiB): .* of 100000 MiB; built in .* s, packed in .* s' "$tmp/bundle.log" ||
  fail "the bundle does not report its size with the tree's and its times: $(tail -3 "$tmp/bundle.log")"
tar -tJf "$archive" >"$tmp/list"
for f in qac-gpu/MANIFEST qac-gpu/tests.txt qac-gpu/src/build/qac qac-gpu/src/scripts/gpu_run.sh \
  qac-gpu/src/bench/train_gpu/reference.py qac-gpu/data/cranfield/cran.all.1400 \
  qac-gpu/src/build/bench/serve_gpu/loadgen qac-gpu/src/bench/encode_gpu/lengths.txt \
  qac-gpu/src/bench/gpu_defaults.py qac-gpu/src/kernels/qac_gpu_defaults.h \
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
grep -q '^libc\.so\|^libcudart\|^libcublas\|^libstdc\|^libcudnn' <(sed -n 's|^qac-gpu/lib/||p' "$tmp/list") &&
  fail "the archive carries glibc, the C++ runtime, CUDA's or cuDNN's libraries"

# the size guard: an archive that takes archive + tree past QAC_BUNDLE_MAX_MB
# is refused, with what each part weighs, and not left behind (the real
# bundle is held to 56 MiB of the GPU machine's 64 MiB upload this way)
rc=0
QAC_BUNDLE_BUILD="$(realpath --relative-to="$src" "$build")" QAC_BUNDLE_REBUILD=0 QAC_BUNDLE_XZ=0 QAC_BUNDLE_MAX_MB=1 \
  QAC_DATA="$QAC_SHARED_DATA/cranfield" "$src/scripts/gpu_bundle.sh" "$tmp/small" >"$tmp/small.log" 2>&1 || rc=$?
[ $rc = 1 ] || fail "an archive past QAC_BUNDLE_MAX_MB=1 was not refused (exit $rc)"
grep -q 'archive and tree past 1 MiB: binaries .* kB, libraries .* kB, model .* kB, data .* kB' "$tmp/small.log" ||
  fail "the refusal does not say what each part weighs: $(tail -2 "$tmp/small.log")"
[ -z "$(ls "$tmp/small")" ] || fail "a refused archive was left: $(ls "$tmp/small")"
grep -q '^max_mb="${QAC_BUNDLE_MAX_MB:-56}"$' "$src/scripts/gpu_bundle.sh" || fail "the bundle's default limit is not 56 MiB"

mkdir -p "$tmp/elsewhere"
gpu=0
nvidia-smi -L >/dev/null 2>&1 && gpu=1
run() { # run NAME ARGS...: gpu_run.sh from elsewhere, results in $tmp/NAME
  local name="$1"
  shift
  (cd "$tmp/elsewhere" && "$src/scripts/gpu_run.sh" "$archive" "$tmp/$name" "$@") >"$tmp/$name.log" 2>&1
}
rows_of() { sed -n '/^| --- /,/^$/p' "$1" | grep '^| [^-]' || true; }

# ---- --list: every phase's steps ----
run list --list || { cat "$tmp/list.log"; fail "--list failed"; }
for p in new check sweep bench; do grep -q "^$p " "$tmp/list.log" || fail "--list shows no $p step"; done
grep -q '^new *test_gpu_attention$' "$tmp/list.log" || fail "test_gpu_attention is not in phase new"
grep -q '^check *memcheck-attention$' "$tmp/list.log" || fail "no memcheck of the attention in phase check"

if [ $gpu = 1 ]; then
  run one --phase check --only test_gpu_kernels || true
  rows_of "$tmp/one/gpu-results.md" | grep -q '^| test_gpu_kernels | check | PASS |' ||
    fail "test_gpu_kernels did not pass through the harness: $(rows_of "$tmp/one/gpu-results.md")"
  rm -rf "$tmp"
  echo "PASS gpu harness (GPU)"
  exit 0
fi

# ---- 2. no GPU: every step SKIP, every phase ----
rc=0
run all || rc=$?
res="$tmp/all/gpu-results.md"
[ -f "$res" ] || { cat "$tmp/all.log"; fail "no results file"; }
[ $rc = 0 ] || fail "gpu_run.sh exited $rc without a GPU"
[ "$(stat -c %s "$res")" -lt 16000000 ] || fail "results file over 16 MB"
head -12 "$res" | grep -q '^| step | phase | status | s | figures |' || fail "the summary table is not first"
grep -q 'missing libraries: none' "$res" || fail "bundled binaries do not resolve their libraries: $(grep missing "$res")"
rows="$(rows_of "$res")"
echo "$rows"
echo "$rows" | grep -v '| SKIP |' && fail "a step did not report SKIP without a GPU"
for s in $(cut -f1 "$tmp/qac-gpu/tests.txt") memcheck-attention racecheck-attention racecheck-topk \
  memcheck-train-gelu sweep-attention sweep-encoder sweep-search bench-encode-bf16 bench-search bench-serve \
  bench-train train-verify-cranfield profile; do
  echo "$rows" | grep -q "^| $s |" || fail "step $s missing from the summary"
done
[ -f "$tmp/all/gpu-logs.tar.gz" ] || fail "no logs archive"

# ---- 3. cut by SIGKILL: every figure printed is in the results ----
cut_dir="$tmp/cut"
mkdir -p "$cut_dir/work"
(cd "$tmp/elsewhere" && TMPDIR="$cut_dir/work" QAC_GPU_STANDIN=2 setsid "$src/scripts/gpu_run.sh" "$archive" \
  "$cut_dir" >"$cut_dir.log" 2>&1) &
sleep 1
pg="$(pgrep -f "gpu_run.sh $archive $cut_dir" | head -1 || true)"
[ -n "$pg" ] || fail "the cut run did not start: $(cat "$cut_dir.log")"
# past the unpacking, into the steps: wait for the first finished step
for _ in $(seq 120); do grep -q '^== .*: PASS' "$cut_dir/gpu-results.md" 2>/dev/null && break; sleep 0.5; done
sleep 5
kill -9 -- "-$(ps -o pgid= -p "$pg" | tr -d ' ')"
wait || true
cres="$cut_dir/gpu-results.md"
[ -f "$cres" ] || fail "the cut run left no results file"
logs="$(find "$cut_dir/work" -path '*/logs/*.log' | sort)"
[ -n "$logs" ] || fail "the cut run left no step logs to compare"
n=0
for l in $logs; do
  name="$(basename "$l" .log)"
  [ "$name" = machine ] && continue
  while IFS= read -r line; do
    n=$((n + 1))
    grep -qxF "[$name] $line" "$cres" || fail "step $name printed '$line' but the results lack it"
  done < <(grep '^RESULT' "$l")
  if [ -f "${l%.log}.status" ]; then
    grep -q "^== $name: " "$cres" || fail "step $name ended but has no line in the results"
  fi
done
ended="$(grep -c '^== ' "$cres" || true)"
echo "cut run: $n figures in $(echo "$logs" | wc -l) logs, all in the results; $ended steps ended before the cut"
[ "$n" -gt 0 ] && [ "$ended" -gt 0 ] || fail "the cut came before any figure ($n) or step ($ended)"
grep -q '^== .*bench-' "$cres" && fail "the cut came after the whole run: nothing was cut"

# ---- 4. one phase alone, and named steps alone ----
QAC_GPU_STANDIN=1 run sweep --phase sweep || { cat "$tmp/sweep.log"; fail "--phase sweep failed"; }
srows="$(rows_of "$tmp/sweep/gpu-results.md")"
echo "$srows"
[ "$(echo "$srows" | wc -l)" = 3 ] || fail "--phase sweep ran other steps"
for s in sweep-attention sweep-encoder sweep-search; do
  echo "$srows" | grep -q "^| $s | sweep | PASS |" || fail "$s did not run in --phase sweep"
  grep -q "^$s	RESULT	standin	$s	1$" "$tmp/sweep/gpu-sweep.tsv" || fail "the sweep TSV lacks $s's figures"
done
grep -q '^#define QAC_FA_FWD_DEFAULT' "$tmp/sweep/gpu-defaults.h" || fail "--phase sweep wrote no gpu-defaults.h"
QAC_GPU_STANDIN=1 run only --phase bench --only bench-search,profile || { cat "$tmp/only.log"; fail "--only failed"; }
orows="$(rows_of "$tmp/only/gpu-results.md")"
[ "$(echo "$orows" | wc -l)" = 2 ] && echo "$orows" | grep -q '^| bench-search |' && echo "$orows" | grep -q '^| profile |' ||
  fail "--only bench-search,profile ran: $orows"
grep -q 'STAND-IN' "$tmp/only/gpu-results.md" || fail "a stand-in run does not say so"
rm -rf "$tmp"
echo "PASS gpu harness (no GPU: every step SKIP; a cut run keeps its figures; phases and steps run alone)"
