#!/usr/bin/env bash
# PyTorch's own bf16-against-fp32 loss drift on the fine-tuning run that
# scripts/gpu_train_verify.sh (stage cranfield) compares qac's GPU (bf16)
# against its CPU (fp32) on: Cranfield fold 0, the default model, 100 steps,
# batch 16, 1 passage, tau 0.05, lr 2e-5, seed 42, 32/128 tokens. Torch
# trains on exactly qac's batches (`qac finetune --dry-run --dump-batches`)
# twice on the CPU, in fp32 and with bf16 autocast (drift.py: the same
# dropout masks in both), and compare.py reports the drift per step.
#   bench/train_drift/run.sh [BUILD_DIR] [OUT_DIR]
# Environment: QAC_PYTHON (torch, transformers), QAC_MODEL (default: the
# installed default model), QAC_DATA (the Cranfield collection), THREADS (2),
# CPU_AUTOCAST=1 also runs plain CPU autocast (softmax, LayerNorm and the
# loss's products in bf16 too). About 40 minutes on 2 cores.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build}"
out="${2:-$(mktemp -d)}"
mkdir -p "$out"
py="${QAC_PYTHON:-$root/.venv/bin/python3}"
data="${QAC_DATA:-$root/../shared/data/cranfield}"
model="${QAC_MODEL:-$("$build/qac" info 2>/dev/null | awk '/^directory/ {print $2; exit}')}"
threads="${THREADS:-2}"
here="$root/bench/train_drift"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $threads threads; $(date -u +%F)"
"$py" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
"$py" "$root/bench/finetune_cranfield/folds.py" "$data" "$out" 42 >/dev/null
QAC_QUIET=1 "$build/qac" finetune --model "$model" --train-qrels "$out/fold0/train.qrels" \
  --train-queries "$out/fold0/train.tsv" --train-corpus "$data/cran.all.1400" --steps 100 --batch 16 --n-passages 1 \
  --q-max-len 32 --p-max-len 128 --tau 0.05 --lr 2e-5 --seed 42 --dry-run --dump-batches "$out/batches.jsonl" \
  --out "$out/dry" >/dev/null
precs="fp32 bf16"
[ "${CPU_AUTOCAST:-0}" = 1 ] && precs="$precs bf16-cpu"
for p in $precs; do
  [ -f "$out/torch-$p.jsonl" ] || "$py" "$here/drift.py" --model "$model" --batches "$out/batches.jsonl" \
    --out "$out/torch-$p.jsonl" --precision "$p" --threads "$threads" 2>/dev/null
  "$py" - "$out/torch-$p.jsonl" "$p" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
print(f"NOTE torch {sys.argv[2]}: {sum(x['seconds'] for x in r) / len(r):.1f} s per step")
PY
done
"$py" "$here/compare.py" "$out/torch-fp32.jsonl" "$out/torch-bf16.jsonl" \
  --name "RESULT torch bf16 autocast (fp32 softmax, LayerNorm, pooling, loss) vs fp32"
[ -f "$out/torch-bf16-cpu.jsonl" ] && "$py" "$here/compare.py" "$out/torch-fp32.jsonl" "$out/torch-bf16-cpu.jsonl" \
  --name "RESULT torch plain CPU autocast vs fp32"
echo "logs in $out"
