#!/usr/bin/env bash
# scripts/gpu_run.sh's own logic, on any machine, with no CUDA and no GPU:
# an archive in gpu_bundle.sh's layout whose programs are stand-ins (shell
# scripts that print figures in the real programs' formats and log each
# call), run with stand-in nvidia-smi and compute-sanitizer on the PATH, so
# the harness takes its GPU path: the real command lines of every step
# (tests.txt's programs and arguments, the sanitizer's options, the
# benchmarks' scripts at the paths the tree has), the phases' order and
# budget, the results file as it grows, the sweep's TSV and the defaults
# chosen from it. test_gpu_harness runs the real programs, but without a GPU
# they all SKIP before any of this is reached; this is the rehearsal of the
# first real run.
#  1. bash -n and shellcheck (when installed, errors only) on the harness
#     and every script a step runs.
#  2. --list: every step, phases in the order new, check, sweep, bench.
#  3. All four phases: every step PASS; the programs called in phase
#     order (each new-kernel test before any sanitizer run, the sanitizers
#     before the sweep, the sweep before the benchmarks); the sanitizer
#     runs on small shapes (QAC_TEST_SMALL=1); each figure in the results
#     while its step still runs (a stand-in waits until its first line is
#     there); the sweep's figures in the TSV, the defaults chosen from them
#     (the fastest forward tiles) in gpu-defaults.h; the summary table
#     first; exit 0.
#  4. A failing test: FAIL in the table, its last lines in the results,
#     exit status not 0.
#  5. --phase (a subset, named in any order, runs in the harness's order),
#     --only, an unknown phase refused (exit 2); a compute-sanitizer the
#     machine refuses (as a sandboxed GPU machine may) skips the sanitizer
#     steps, saying why, and nothing else.
#  6. The budget: a step that hangs is cut at its phase's end (TIMEOUT),
#     the steps after it are SKIP, and the run ends within the budget.
set -euo pipefail
src="${QAC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/qac-gpu-phases.XXXXXX")"
fail() { echo "FAIL: $*" >&2; echo "kept $tmp" >&2; exit 1; }
command -v xz >/dev/null || { echo "SKIP: xz not found" >&2; exit 77; }

# ---- 1. syntax of the harness and of every script a step runs ----
# the scripts gpu_run.sh runs as steps (stand-ins replace them below: each
# must exist in the tree at that path, as the bundle carries it)
STEP_SCRIPTS=(bench/attention_gpu/run.sh bench/encode_gpu/variants.sh bench/search_gpu/variants.sh
  bench/encode_gpu/run.sh bench/search_gpu/run.sh bench/serve_gpu/run.sh bench/train_gpu/run.sh
  bench/profile_gpu/run.sh scripts/gpu_train_verify.sh)
for f in scripts/gpu_run.sh scripts/gpu_bundle.sh "${STEP_SCRIPTS[@]}"; do
  [ -f "$src/$f" ] || fail "$f is not in the tree"
  bash -n "$src/$f" || fail "bash -n $f"
  grep -qF "$f" "$src/scripts/gpu_run.sh" || [ "$f" = scripts/gpu_run.sh ] || [ "$f" = scripts/gpu_bundle.sh ] ||
    fail "gpu_run.sh no longer runs $f: update this test's list"
done
if command -v shellcheck >/dev/null; then
  (cd "$src" && shellcheck -S error scripts/gpu_run.sh scripts/gpu_bundle.sh "${STEP_SCRIPTS[@]}") ||
    fail "shellcheck found errors"
fi

# ---- the stand-in archive ----
B="$tmp/stage/qac-gpu"
mkdir -p "$B/src/build/tests/gpu" "$B/lib" "$B/home/models/all-MiniLM-L6-v2" "$B/data/cranfield" "$tmp/bin"
# the tree's files as gpu_bundle.sh packs them
(cd "$src" && git ls-files -z -- scripts bench tests/gpu kernels/qac_gpu_defaults.h | tar --null -T - -cf -) |
  tar -C "$B/src" -xf -
cat >"$B/MANIFEST" <<EOF
commit=stand-in
date=2026-01-01T00:00:00Z
nvcc=stand-in
cuda_architectures=90-real
test_data=
shared_data=
EOF
echo '{"model_type": "bert"}' >"$B/home/models/all-MiniLM-L6-v2/config.json"
printf 'weights' | xz >"$B/home/models/all-MiniLM-L6-v2/model.safetensors.xz"
echo "stand-in" >"$B/data/cranfield/cran.all.1400"

# One stand-in for every program: logs "PHASE-KIND NAME ARGS" to $STUB_LOG,
# then behaves as its name says in STUB_FAIL / STUB_HANG / STUB_WAIT.
cat >"$tmp/stub" <<'EOF'
#!/usr/bin/env bash
name="$(basename "$0")"
case "$0" in
*bench/*/run.sh | *bench/*/variants.sh) name="${0##*bench/}" ;;
*gpu_train_verify.sh) name="train-verify-$STAGES" ;;
esac
echo "${STUB_UNDER:-run} $name small=${QAC_TEST_SMALL:-0} $*" >>"$STUB_LOG"
in_list() { [[ ",$1," == *",$name,"* ]]; }
if in_list "${STUB_HANG:-}"; then echo "RESULT hanging $name"; exec sleep 1000; fi
case "$name" in
attention_gpu/run.sh) # bench_attention_gpu's lines: 128x64x2x2 the fastest forward on every bf16 shape
  for s in bert-base-256x128 minilm-256x128; do
    for v in 64x64x2:100.0 64x32x2:120.0 128x64x2:95.0 128x64x2x2:80.0; do
      echo "RESULT attention $s bf16 fwd fused ${v%:*} us ${v#*:} GBps 1000 floor_frac 0.300"
    done
    echo "RESULT attention $s bf16 fwd cudnn - us 90.0 GBps 1000 floor_frac 0.300"
  done
  # more lines than the results file keeps of a step: the TSV must take all
  for i in $(seq 320); do echo "RESULT attention filler-$i bf16 fwd unfused - us 999.0 GBps 1 floor_frac 0.001"; done ;;
encode_gpu/variants.sh) echo "VARIANT encode default passages_per_s 1000 query_ms 1.0 query16_ms 2.0" ;;
search_gpu/variants.sh) echo "VARIANT search default b1_ms 4.0 b16_ms 10.0 b256_ms 50.0" ;;
qac) echo "qac stand-in" ;;
*) echo "RESULT stand-in $name" ;;
esac
if in_list "${STUB_FAIL:-}"; then echo "1 passed, 1 failed"; echo "FAIL: stand-in failure of $name"; exit 1; fi
echo "3 passed, 0 failed"
EOF
chmod +x "$tmp/stub"
# test_gpu_topk: a C program, as the real ones are (stdio, no flush): with
# STUB_WAIT_FILE, its first figure must reach the results while it runs
cat >"$tmp/wait.c" <<'EOF'
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
    FILE *log = fopen(getenv("STUB_LOG"), "a");
    const char *under = getenv("STUB_UNDER"), *small = getenv("QAC_TEST_SMALL");
    fprintf(log, "%s test_gpu_topk small=%s", under ? under : "run", small ? small : "0");
    for (int i = 1; i < argc; i++) fprintf(log, " %s", argv[i]);
    fprintf(log, "\n");
    fclose(log);
    printf("RESULT early test_gpu_topk\n");
    const char *f = getenv("STUB_WAIT_FILE");
    for (int i = 0; i < 600 && f && access(f, F_OK) != 0; i++) usleep(100000);
    if (f && access(f, F_OK) != 0) {
        printf("FAIL: the results never showed my first line\n");
        return 1;
    }
    printf("RESULT late test_gpu_topk\n3 passed, 0 failed\n");
    return 0;
}
EOF
"${CC:-cc}" -o "$tmp/wait" "$tmp/wait.c" || fail "cc failed"
cp "$tmp/stub" "$B/src/build/qac"
for f in "${STEP_SCRIPTS[@]}"; do cp "$tmp/stub" "$B/src/$f"; done
# tests.txt as gpu_bundle.sh writes it: name, executable under build/, arguments
TESTS=(test_gpu_train_kernels test_gpu_attention test_gpu_topk test_gpu_encoder test_gpu_cudnn test_gpu_kernels
  test_gpu_flat test_gpu_train_step test_gpu_pretrain_step)
: >"$B/tests.txt"
for t in "${TESTS[@]}"; do
  if [ "$t" = test_gpu_topk ]; then cp "$tmp/wait" "$B/src/build/tests/gpu/$t"; else cp "$tmp/stub" "$B/src/build/tests/gpu/$t"; fi
  args=""
  [ "$t" = test_gpu_train_step ] && args="all"
  printf '%s\ttests/gpu/%s\t%s\n' "$t" "$t" "$args" >>"$B/tests.txt"
done
archive="$tmp/qac-gpu-stand-in.tar.xz"
tar -C "$tmp/stage" -cf - qac-gpu | xz -0 >"$archive"

# a GPU and a sanitizer, as the GPU machine has them
cat >"$tmp/bin/nvidia-smi" <<'EOF'
#!/bin/sh
case "$*" in
-L) echo "GPU 0: Stand-in GPU (UUID: GPU-0)" ;;
*--query-gpu*) echo "Stand-in GPU, 999.99, 1000 MiB" ;;
*) echo "Stand-in GPU" ;;
esac
EOF
cat >"$tmp/bin/compute-sanitizer" <<'EOF'
#!/usr/bin/env bash
if [ -n "${STUB_SAN_BROKEN:-}" ]; then echo "========= Error: Target application terminated before first instrumented API call"; echo "========= Device not supported"; exit 1; fi
tool=""
while [[ "${1:-}" == --* ]]; do [ "$1" = --tool ] && tool="$2"; shift 2; done
STUB_UNDER="sanitizer-$tool" "$@"
rc=$?
echo "========= ERROR SUMMARY: 0 errors"
exit $rc
EOF
# the references' python: none (the stand-ins need none; the harness then
# finds no CUDA wheels and no torch, quickly); bench/gpu_defaults.py runs
# with the python3 on the PATH, as on the GPU machine
printf '#!/bin/sh\nexit 1\n' >"$tmp/bin/no-torch"
chmod +x "$tmp/bin/nvidia-smi" "$tmp/bin/compute-sanitizer" "$tmp/bin/no-torch"
export PATH="$tmp/bin:$PATH" QAC_PYTHON="$tmp/bin/no-torch"
unset QAC_GPU_ONLY QAC_GPU_STANDIN QAC_GPU_BUDGET_S QAC_GPU_JOBS

run() { # run NAME ARGS...: the harness from another directory, results in $tmp/NAME
  local name="$1"
  shift
  mkdir -p "$tmp/elsewhere"
  (cd "$tmp/elsewhere" && STUB_LOG="$tmp/$name.calls" "$src/scripts/gpu_run.sh" "$archive" "$tmp/$name" "$@") \
    >"$tmp/$name.log" 2>&1
}
rows_of() { sed -n '/^| --- /,/^$/p' "$1" | grep '^| [^-]' || true; }
phase_no() { case "$1" in new) echo 1 ;; check) echo 2 ;; sweep) echo 3 ;; bench) echo 4 ;; esac; }

# ---- 2. --list ----
run list --list || { cat "$tmp/list.log"; fail "--list failed"; }
[ -e "$tmp/list/gpu-results.md" ] && fail "--list wrote a results file"
last=0
while read -r phase name; do
  n="$(phase_no "$phase")"
  [ -n "$n" ] || fail "--list: unknown phase in '$phase $name'"
  [ "$n" -ge "$last" ] || fail "--list: $name ($phase) after a later phase's step"
  last=$n
done <"$tmp/list.log"
for t in "${TESTS[@]:0:5}"; do grep -q "^new *$t$" "$tmp/list.log" || fail "--list: $t not in phase new"; done
nsteps="$(wc -l <"$tmp/list.log")"

# ---- 3. every phase, a GPU present ----
wait_file="$tmp/seen-early"
(
  for _ in $(seq 600); do
    grep -qxF "[test_gpu_topk] RESULT early test_gpu_topk" "$tmp/all/gpu-results.md" 2>/dev/null && touch "$wait_file" && exit 0
    sleep 0.1
  done
) &
watcher=$!
rc=0
STUB_WAIT_FILE="$wait_file" run all || rc=$?
wait "$watcher" || true
res="$tmp/all/gpu-results.md"
[ -f "$res" ] || { cat "$tmp/all.log"; fail "no results file"; }
rows="$(rows_of "$res")"
[ -f "$wait_file" ] || fail "a step's first figure was not in the results while the step ran"
[ $rc = 0 ] || { echo "$rows"; tail -30 "$tmp/all.log"; fail "the run exited $rc with every stand-in passing"; }
grep -qxF "[test_gpu_topk] RESULT late test_gpu_topk" "$res" || fail "the waiting step's later figure is missing"
head -12 "$res" | grep -q '^| step | phase | status | s | figures |' || fail "the summary table is not first"
[ "$(echo "$rows" | wc -l)" = "$nsteps" ] || { echo "$rows"; fail "the table has not the $nsteps steps --list names"; }
echo "$rows" | grep -v '| PASS |' && fail "a step did not PASS"
while read -r phase name; do
  echo "$rows" | grep -q "^| $name | $phase | PASS |" || fail "no PASS row for $name in phase $phase"
done <"$tmp/list.log"
# the programs, in phase order
last=0
while read -r under name small args; do
  case "$under:$name" in
  *:qac) continue ;; # qac info: the machine's description, and the sanitizer's probe
  sanitizer-*) p=check ;;
  run:test_gpu_train_kernels | run:test_gpu_attention | run:test_gpu_topk | run:test_gpu_encoder | run:test_gpu_cudnn) p=new ;;
  run:test_* | run:train-verify-pretrain) p=check ;;
  run:attention_gpu/run.sh | run:encode_gpu/variants.sh | run:search_gpu/variants.sh) p=sweep ;;
  *) p=bench ;;
  esac
  n="$(phase_no $p)"
  [ "$n" -ge "$last" ] || fail "$under $name ($p) ran after a later phase's program"
  last=$n
  if [ "$p" = check ] && [[ "$under" == sanitizer-* ]]; then
    [ "$small" = small=1 ] || fail "$under $name ran without QAC_TEST_SMALL=1"
  fi
done <"$tmp/all.calls"
for t in memcheck racecheck; do
  for k in test_gpu_attention test_gpu_topk test_gpu_encoder test_gpu_train_kernels; do
    grep -q "^sanitizer-$t $k " "$tmp/all.calls" || fail "no $t run of $k"
  done
done
grep -q "^run test_gpu_train_step small=0 all$" "$tmp/all.calls" || fail "tests.txt's arguments did not reach the test"
grep -q '^\[memcheck-attention\] ========= ERROR SUMMARY: 0 errors$' "$res" || fail "the sanitizer's summary is not in the results"
# the sweep: every figure in the TSV (past the results file's 300 lines a step), the defaults chosen from them
tsv="$tmp/all/gpu-sweep.tsv"
[ "$(grep -c "^sweep-attention	RESULT	attention	filler-" "$tsv")" = 320 ] || fail "the TSV lacks sweep figures"
grep -q "^sweep-encoder	VARIANT	encode	default	passages_per_s	1000" "$tsv" || fail "the TSV lacks the encoder's variants"
grep -q '^#define QAC_FA_FWD_DEFAULT 128, 64, 2, 2$' "$tmp/all/gpu-defaults.h" ||
  fail "gpu-defaults.h did not choose the fastest forward: $(grep FWD "$tmp/all/gpu-defaults.h" 2>/dev/null)"
grep -q 'Stand-in GPU' "$tmp/all/gpu-defaults.h" || fail "gpu-defaults.h does not name the GPU"
[ -f "$tmp/all/gpu-logs.tar.gz" ] || fail "no logs archive"
[ "$(find "$tmp/all" -type f | wc -l)" -le 4 ] || fail "more than four result files: $(ls "$tmp/all")"

# ---- 4. a failing test ----
rc=0
STUB_FAIL=test_gpu_attention run failing --phase new || rc=$?
[ $rc != 0 ] || fail "a failed step left the exit status 0"
rows_of "$tmp/failing/gpu-results.md" | grep -q '^| test_gpu_attention | new | FAIL |' || fail "no FAIL row"
grep -q 'FAIL: stand-in failure of test_gpu_attention' "$tmp/failing/gpu-results.md" ||
  fail "the failed step's last lines are not in the results"

# ---- 5. phases and steps chosen ----
run two --phase sweep,new || { cat "$tmp/two.log"; fail "--phase sweep,new failed"; }
trows="$(rows_of "$tmp/two/gpu-results.md")"
echo "$trows" | grep -v '| new |\|| sweep |' && fail "--phase sweep,new ran another phase"
[ "$(echo "$trows" | grep -c '| new |')" = 5 ] && [ "$(echo "$trows" | grep -c '| sweep |')" = 3 ] ||
  fail "--phase sweep,new: $trows"
first_sweep="$(grep -n '_gpu/run.sh\|variants.sh' "$tmp/two.calls" | head -1 | cut -d: -f1)"
last_new="$(grep -n '^run test_gpu' "$tmp/two.calls" | tail -1 | cut -d: -f1)"
[ "$last_new" -lt "$first_sweep" ] || fail "--phase sweep,new ran the sweep before phase new"
run only --only test_gpu_cudnn,bench-search || fail "--only failed"
orows="$(rows_of "$tmp/only/gpu-results.md")"
[ "$(echo "$orows" | wc -l)" = 2 ] && echo "$orows" | grep -q '^| test_gpu_cudnn | new | PASS' &&
  echo "$orows" | grep -q '^| bench-search | bench | PASS' || fail "--only test_gpu_cudnn,bench-search ran: $orows"
rc=0
run bad --phase bogus || rc=$?
[ $rc = 2 ] && grep -q 'unknown phase bogus' "$tmp/bad.log" || fail "an unknown phase: exit $rc, $(cat "$tmp/bad.log")"

# a machine whose sandbox refuses compute-sanitizer the device: its steps SKIP, saying so; the rest run
rc=0
STUB_SAN_BROKEN=1 run nosan --phase check --only memcheck-attention,racecheck-topk,test_gpu_kernels || rc=$?
nrows="$(rows_of "$tmp/nosan/gpu-results.md")"
[ $rc = 0 ] && echo "$nrows" | grep -q '^| test_gpu_kernels | check | PASS' &&
  [ "$(echo "$nrows" | grep -c '| SKIP | 0 | compute-sanitizer cannot run here (exit 1): .*Device not supported')" = 2 ] ||
  fail "a refused sanitizer (exit $rc): $nrows"

# ---- 6. the budget ----
t0=$SECONDS
rc=0
QAC_GPU_BUDGET_S=20 QAC_GPU_JOBS=1 STUB_HANG=test_gpu_train_kernels run budget --phase new || rc=$?
took=$((SECONDS - t0))
brows="$(rows_of "$tmp/budget/gpu-results.md")"
echo "$brows" | grep -q '^| test_gpu_train_kernels | new | TIMEOUT |' || fail "the hanging step was not cut: $brows"
[ "$(echo "$brows" | grep -c '| SKIP | 0 | budget')" = 4 ] || fail "the steps after the cut were not SKIP: $brows"
[ $rc != 0 ] || fail "a cut run exited 0"
[ $took -lt 45 ] || fail "a 20 s budget took $took s"

rm -rf "$tmp"
echo "PASS gpu_run.sh phases ($nsteps steps): order, figures as they come, sweep to defaults, failures, --phase/--only, budget"
