#!/usr/bin/env bash
# One-shot verification of CUDA training on a machine with an NVIDIA GPU
# (H100/H200 class), meant to finish in under 10 minutes:
#   1. build with CUDA (only the targets below);
#   2. the gpu-labelled training tests: every training kernel against its
#      CPU twin (test_gpu_train_kernels), the whole step against the CPU
#      trainer (test_gpu_train_step: gradient parity fp32 and bf16, GradCache,
#      a 10-step fp32 and a 100-step bf16 trajectory against CPU fp32,
#      checkpoints resumed across devices, PAIR, --recompute bit-identical
#      to keeping every activation), and the NCCL path against one GPU
#      (test_gpu_train_dist, when the CUDA installation has NCCL), and the
#      pre-trainer's step against the CPU pre-trainer (test_gpu_pretrain_step:
#      coCondenser, CoT-MAE, qgen and PAIR gradient parity per tensor fp32 and bf16,
#      cls and mean(+l2), a 10-step fp32 and a 50-step bf16 trajectory,
#      checkpoints resumed across devices), and the families the CUDA trainer
#      takes beyond BERT (test_gpu_train_families: RoBERTa, XLM-R and
#      ModernBERT gradients against autograd, ModernBERT's also with
#      --chunk, --recompute bit for bit and in bf16, and a config its
#      kernels do not take refused);
#   3. compute-sanitizer: memcheck on the training kernels (small shapes),
#      on one parity step of the trainer and of the pre-trainer, on
#      ModernBERT's steps (test_gpu_train_families modernbert), racecheck
#      on attention backward, the reductions and the pre-training losses;
#   4. bench/train_gpu against PyTorch on the same GPU;
#   4b. (stage pretrain) qac pretrain --device cuda on a tiny generated
#      jsonl, for coCondenser, CoT-MAE, qgen and PAIR: a smoke run saved, resumed
#      and exported, and 20 steps on the CPU (fp32) against the GPU in fp32
#      (loss within 1e-3 per step) and bf16 (within 3%), and the fp32 run
#      again with --recompute (the same losses, bit for bit);
#   5. (stage cranfield, when a model and the Cranfield data are at hand) 100
#      fine-tuning steps on Cranfield fold 0 with qac finetune on the CPU
#      (fp32) and on the GPU (bf16): the loss curves within 1% and the dev
#      nDCG@10 of the final checkpoints within 0.01; and 20 steps with the
#      PAIR loss (--alpha 0.1) on the CPU against the GPU in fp32 (loss within
#      1e-3 per step).
# Everything is logged under the output directory; a summary comes last.
#   scripts/gpu_train_verify.sh [out-dir]      (default: gpu-train-verify-<date>)
# On a machine without package access, bring the build's libraries as .deb
# files in .offline-deps/ and, for stage cranfield, a model and the data in
# an ignored folder, e.g. (from the repository root, where the packages and
# the model are):
#   build/tests/checkpoint/qac_ckpt_tool save "$QAC_MODEL" .gpu-carry/model f16   # about 45 MB
#   cp -r ../shared/data/cranfield .gpu-carry/cranfield
#   ... then there: QAC_MODEL=.gpu-carry/model QAC_DATA=.gpu-carry/cranfield STAGES=cranfield scripts/gpu_train_verify.sh
# Environment:
#   STAGES         comma list of build,test,sanitize,bench,pretrain,cranfield (default
#                  all), so the work can be split over runs of at most 10 minutes
#   QAC_MODEL      the HF BERT directory to fine-tune in stage cranfield
#                  (default: the installed default model)
#   QAC_DATA       the Cranfield collection (default ../shared/data/cranfield)
#   QAC_DEPS_DIR   folder of Debian .deb files for the build's libraries
#                  (default .offline-deps), for a machine without package
#                  access: they are unpacked under it, never over /
#   QAC_PYTHON     python with torch + transformers (default python3)
#   QAC_TEST_SEED  replay a failing random draw
#   QAC_BUILD_DIR  an existing CUDA build to use (default build-gpu); with
#                  it, leave the build stage out of STAGES
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu-train-verify-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
build="${QAC_BUILD_DIR:-build-gpu}"
py="${QAC_PYTHON:-python3}"
stages="${STAGES:-build,test,sanitize,bench,pretrain,cranfield}"
has() { case ",$stages," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
summary=()
declare -A secs # wall seconds of each step, for the wall-time lines
step() { # name, command...
  local name="$1"; shift
  local t0=$SECONDS rc=0
  "$@" >"$out/$name.log" 2>&1 || rc=$?
  secs[$name]=$((SECONDS - t0))
  if [ $rc = 0 ]; then summary+=("PASS $name (${secs[$name]} s)")
  else summary+=("FAIL $name (${secs[$name]} s, rc $rc) see $out/$name.log"); fi
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

targets=(qac test_gpu_train_kernels test_gpu_train_step test_gpu_train_dist test_gpu_pretrain_step test_gpu_train_families
         bench_train_gpu)
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
  step test-pretrain-step "$bin/test_gpu_pretrain_step"
  # RoBERTa, XLM-R and ModernBERT (with and without biases) against autograd
  # (the checkpoints made with $py when the build has none)
  QAC_PYTHON="$py" step test-train-families "$bin/test_gpu_train_families" xlmr roberta bert_xlmr modernbert \
    modernbert_bias
  # a skip (exit 77) on a GPU machine is a failure of this run
  grep -q "^SKIP" "$out/test-train-kernels.log" "$out/test-train-step.log" "$out/test-pretrain-step.log" \
    "$out/test-train-families.log" &&
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
    step memcheck-pretrain-step "$san" --tool memcheck --leak-check full --error-exitcode 3 \
      "$bin/test_gpu_pretrain_step" parity
    # ModernBERT's pre-LN step (fp32, --recompute, bf16) on its small checkpoint
    QAC_PYTHON="$py" step memcheck-train-modernbert "$san" --tool memcheck --error-exitcode 3 \
      "$bin/test_gpu_train_families" modernbert
    step racecheck-attention "$san" --tool racecheck --error-exitcode 3 "$bin/test_gpu_train_kernels" attention
    for g in layernorm pooling infonce pretrain adamw; do
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

if has pretrain; then
  model="${QAC_MODEL:-$("$build/qac" info 2>/dev/null | awk '/^directory/ {print $2; exit}')}"
  if [ -n "$model" ] && [ -f "$model/config.json" ]; then
    d="$out/pretrain"
    mkdir -p "$d"
    # 64 records of a few sentences each, two queries apiece
    "$py" - "$d/tiny.jsonl" <<'PY'
import json, random, sys
random.seed(7)
words = ("the a package library tool for and of data files server client network system user install run "
         "build test python debian linux kernel module driver support version command line interface text "
         "search index query passage document model train encoder retrieval fast small large simple").split()
sent = lambda n: " ".join(random.choice(words) for _ in range(n)).capitalize() + "."
with open(sys.argv[1], "w") as f:
    for i in range(64):
        text = " ".join(sent(random.randint(5, 12)) for _ in range(random.randint(2, 5)))
        f.write(json.dumps({"id": str(i), "text": text, "queries": [sent(4)[:-1], sent(3)[:-1]]}) + "\n")
PY
    for obj in cocondenser cotmae qgen pair; do
      # pair: coCondenser with the PAIR loss in place of the contrastive one
      if [ "$obj" = pair ]; then objargs=(--objective cocondenser --alpha 0.1); else objargs=(--objective "$obj"); fi
      pt=(pretrain --model "$model" --data "$d/tiny.jsonl" "${objargs[@]}" --batch 8 --max-len 64
          --query-max-len 16 --seed 11)
      # smoke: 9 steps saving every 3, killed (SIGKILL) half-way through writing checkpoint 6, then
      # resumed with the same options (a resume refuses a changed --steps) to the end and exported
      step "pretrain-$obj-smoke" bash -c '"$@"; [ $? = 137 ]' _ env QAC_TEST_KILL_IN_SAVE=6 \
        "$build/qac" "${pt[@]}" --device cuda --steps 9 --save-every 3 --out "$d/$obj-smoke"
      step "pretrain-$obj-smoke-resume" "$build/qac" "${pt[@]}" --device cuda --steps 9 --save-every 3 --resume \
        --out "$d/$obj-smoke"
      step "pretrain-$obj-cpu" "$build/qac" "${pt[@]}" --device cpu --steps 20 --threads "$(nproc)" --out "$d/$obj-cpu"
      step "pretrain-$obj-gpu-fp32" "$build/qac" "${pt[@]}" --device cuda --train-precision fp32 --steps 20 \
        --out "$d/$obj-gpu32"
      step "pretrain-$obj-gpu-bf16" "$build/qac" "${pt[@]}" --device cuda --train-precision bf16 --steps 20 \
        --out "$d/$obj-gpu16"
      # --recompute: the same losses as the fp32 run keeping every activation, bit for bit
      step "pretrain-$obj-gpu-fp32-recompute" "$build/qac" "${pt[@]}" --device cuda --train-precision fp32 \
        --recompute --steps 20 --out "$d/$obj-gpu32-rc"
    done
    for obj in cocondenser cotmae qgen pair; do
      echo "wall pretrain $obj 20 steps: cpu fp32 ${secs[pretrain-$obj-cpu]:-?} s ($(nproc) threads), gpu fp32" \
        "${secs[pretrain-$obj-gpu-fp32]:-?} s, gpu bf16 ${secs[pretrain-$obj-gpu-bf16]:-?} s, gpu fp32 --recompute" \
        "${secs[pretrain-$obj-gpu-fp32-recompute]:-?} s"
    done >"$out/pretrain-wall.log"
    step pretrain-compare "$py" - "$d" <<'PY'
import json, sys
d = sys.argv[1]
load = lambda r: [json.loads(l) for l in open(f"{d}/{r}/log.jsonl") if l.strip()]
ok = True
for obj in ("cocondenser", "cotmae", "qgen", "pair"):
    cpu = load(f"{obj}-cpu")
    ok = ok and len(cpu) == 20
    for run, tol in (("gpu32", 1e-3), ("gpu16", 3e-2)):
        g = load(f"{obj}-{run}")
        worst = max(abs(b["loss"] - a["loss"]) / abs(a["loss"]) for a, b in zip(cpu, g))
        print(f"CHECK pretrain {obj} {run}: steps {len(g)}; loss cpu {cpu[0]['loss']:.5f} -> {cpu[-1]['loss']:.5f}, "
              f"gpu {g[0]['loss']:.5f} -> {g[-1]['loss']:.5f}; worst rel {worst:.3g} (tol {tol})")
        ok = ok and len(g) == 20 and worst <= tol
    rc, g32 = load(f"{obj}-gpu32-rc"), load(f"{obj}-gpu32")
    same = len(rc) == 20 and [r["loss"] for r in rc] == [r["loss"] for r in g32]
    print(f"{obj} gpu32 --recompute: losses {'identical to' if same else 'DIFFER from'} the keeping run's")
    ok = ok and same
    smoke = load(f"{obj}-smoke")
    print(f"{obj} smoke: steps {[r['step'] for r in smoke]}")
    ok = ok and [r["step"] for r in smoke] == list(range(1, 10))
sys.exit(0 if ok else 1)
PY
  else
    summary+=("NOTE stage pretrain skipped: no model (set QAC_MODEL)")
  fi
fi

if has cranfield; then
  data="${QAC_DATA:-../shared/data/cranfield}"
  model="${QAC_MODEL:-$("$build/qac" info 2>/dev/null | awk '/^directory/ {print $2; exit}')}"
  if [ -f "$data/cran.qry" ] && [ -n "$model" ] && [ -f "$model/config.json" ]; then
    d="$out/cranfield"
    mkdir -p "$d"
    train=(--model "$model" --train-qrels "$d/fold0/train.qrels" --train-queries "$d/fold0/train.tsv"
           --train-corpus "$data/cran.all.1400" --steps 100 --batch 16 --n-passages 1 --q-max-len 32 --p-max-len 128
           --tau 0.05 --lr 2e-5 --seed 42)
    ft=(finetune "${train[@]}" --dev-queries "$d/fold0/test.tsv" --dev-qrels "$d/fold0/test.qrels"
        --dev-corpus "$data/cran.all.1400")
    drift=bench/train_drift
    step cranfield-folds "$py" bench/finetune_cranfield/folds.py "$data" "$d" 42
    step cranfield-cpu "$build/qac" "${ft[@]}" --device cpu --threads "$(nproc)" --out "$d/cpu"
    step cranfield-gpu "$build/qac" "${ft[@]}" --device cuda --train-precision bf16 --out "$d/gpu"
    step cranfield-ndcg "$py" - "$d/cpu" "$d/gpu" <<'PY'
import json, sys
nc, ng = (json.loads(open(f"{d}/dev.jsonl").read().splitlines()[-1])["ndcg_cut_10"] for d in sys.argv[1:3])
print(f"CHECK cranfield dev nDCG@10 cpu {nc:.4f} gpu bf16 {ng:.4f} diff {ng - nc:+.4f} (tol 0.01)")
sys.exit(0 if abs(ng - nc) <= 0.01 else 1)
PY
    # Diagnostics of a drift past the bound. The GPU in fp32 against the CPU:
    # the same arithmetic in another summation order, as the pre-training
    # comparisons (1e-3 over the run): a GPU path that trains differently
    # shows here, rounding does not.
    step cranfield-gpu-fp32 "$build/qac" finetune "${train[@]}" --device cuda --train-precision fp32 --out "$d/gpu32"
    step cranfield-compare-fp32 "$py" $drift/compare.py "$d/cpu/log.jsonl" "$d/gpu32/log.jsonl" --steps 100 \
      --name "CHECK cranfield qac gpu fp32 vs cpu fp32" --worst-tol 1e-3
    # PyTorch on this GPU on qac's batches: its own bf16 drift (CUDA
    # autocast), its per-tensor bf16 gradient error at the start against
    # qac's (bench_grad_err), and its wall time.
    step cranfield-batches "$build/qac" finetune "${train[@]}" --dry-run --dump-batches "$d/batches.jsonl" \
      --out "$d/dry"
    for p in fp32 bf16; do
      step "cranfield-torch-$p" "$py" $drift/drift.py --model "$model" --batches "$d/batches.jsonl" \
        --out "$d/torch-$p.jsonl" --precision $p --device cuda
    done
    step cranfield-torch-compare "$py" $drift/compare.py "$d/torch-fp32.jsonl" "$d/torch-bf16.jsonl" --steps 100 \
      --name "CHECK cranfield torch gpu bf16 autocast vs fp32 (the reference's own drift)"
    # The bound on the GPU's bf16 loss against the CPU's fp32, from
    # PyTorch's own drift on exactly these batches (bench/train_drift,
    # bench/RESULTS.md): torch with bf16 autocast (fp32 softmax, LayerNorm,
    # pooling, loss; fp32 master weights) against torch in fp32, the same
    # dropout masks, on the CPU: worst per-step |rel| 0.0062 (at step 96),
    # per-step standard deviation 0.0019, mean -0.0002, bf16 the higher on
    # 46 of 100 steps (another draw of the masks: 0.0055, 0.0018, +0.0000,
    # 51 of 100). qac's recipe rounds less than torch's (residual
    # stream, biases and dropout scaling stay fp32), so its drift is no
    # larger in kind: worst 0.015 (2.4 x torch's worst: the worst of 100
    # correlated steps is one draw, ~3 standard deviations); and an unbiased
    # recipe's drift averages out: |mean| 0.005 (2.6 per-step standard
    # deviations, 25 x torch's mean) says the GPU trains differently, not
    # that it rounds differently. Where torch's own drift on this GPU (the
    # runs above) is larger than on the CPU, the same factors of it.
    step cranfield-compare "$py" $drift/compare.py "$d/cpu/log.jsonl" "$d/gpu/log.jsonl" --steps 100 \
      --name "CHECK cranfield qac gpu bf16 vs cpu fp32" --worst-tol 0.015 --mean-tol 0.005 \
      --ref-fp32 "$d/torch-fp32.jsonl" --ref-bf16 "$d/torch-bf16.jsonl" --worst-factor 2.4 --mean-factor 2.6
    step cranfield-grad-err-qac "$build/bench/train_gpu/bench_grad_err" "$model" "$d/batches.jsonl" 3 32 128 0.05
    step cranfield-grad-err-torch "$py" $drift/drift.py --model "$model" --batches "$d/batches.jsonl" \
      --out /dev/null --precision bf16 --device cuda --grad-err 3
    {
      echo "CHECK per-tensor bf16 gradient error (max over 3 batches): tensor qac torch"
      join <(awk '$1 == "GRADERR" && $2 == "bf16" {print $3, $4}' "$out/cranfield-grad-err-qac.log" | sort) \
        <(awk '$1 == "GRADERR" {print $2, $3}' "$out/cranfield-grad-err-torch.log" | sort) | sed 's/^/graderr /'
    } >"$out/cranfield-grad-err.log" 2>&1
    wall="wall cranfield 100 steps: qac cpu fp32 ${secs[cranfield-cpu]:-?} s ($(nproc) threads), qac gpu bf16"
    wall="$wall ${secs[cranfield-gpu]:-?} s, qac gpu fp32 ${secs[cranfield-gpu-fp32]:-?} s, torch gpu bf16"
    wall="$wall ${secs[cranfield-torch-bf16]:-?} s, torch gpu fp32 ${secs[cranfield-torch-fp32]:-?} s (qac with its dev"
    echo "$wall evaluation, torch without; each with its start-up)" >"$out/cranfield-wall.log"
    # PAIR (--alpha): 20 steps on the CPU against the GPU in fp32, loss within 1e-3 per step
    step cranfield-pair-cpu "$build/qac" "${ft[@]}" --alpha 0.1 --steps 20 --device cpu --threads "$(nproc)" \
      --out "$d/pair-cpu"
    step cranfield-pair-gpu "$build/qac" "${ft[@]}" --alpha 0.1 --steps 20 --device cuda --train-precision fp32 \
      --out "$d/pair-gpu"
    step cranfield-pair-compare "$py" $drift/compare.py "$d/pair-cpu/log.jsonl" "$d/pair-gpu/log.jsonl" --steps 20 \
      --name "CHECK cranfield pair gpu fp32 vs cpu fp32" --worst-tol 1e-3
  else
    summary+=("NOTE stage cranfield skipped: no Cranfield data in $data or no model (set QAC_DATA, QAC_MODEL)")
  fi
fi

echo "== results in $out =="
grep -h "^RESULT\|^RATIO\|^NOTE" "$out"/bench-*.log 2>/dev/null
grep -h "worst tensor\|^trajectory\|^resume\|loss gpu" "$out"/test-train-step.log "$out"/test-pretrain-step.log \
  2>/dev/null | tee "$out/parity.txt"
cat "$out"/pretrain-compare.log "$out"/pretrain-wall.log "$out"/cranfield-compare*.log "$out"/cranfield-ndcg.log \
  "$out"/cranfield-torch-compare.log "$out"/cranfield-grad-err.log "$out"/cranfield-wall.log \
  "$out"/cranfield-pair-compare.log 2>/dev/null
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
! grep -q '^FAIL' "$out/summary.txt"
