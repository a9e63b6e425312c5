#!/usr/bin/env bash
# The Cranfield fine-tuning study: 5 query folds (train on 4, test on the
# fifth); zero-shot, BM25, retriever 1 and retriever 2 with qac, and
# retriever 1 trained by sentence-transformers on exactly the same batches.
#   bench/finetune_cranfield/run.sh [OUT]      (from the repository root; needs build/ and .venv)
# Results: OUT/summary.md (and per fold OUT/foldK/). Re-running continues.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-bench/finetune_cranfield/out}
DATA=${QAC_DATA:-../shared/data/cranfield}
PY=${PY:-.venv/bin/python3}
export QAC=${QAC:-$PWD/build/qac}
CORPUS=$DATA/cran.all.1400
THREADS=${THREADS:-2}
FOLDS=${FOLDS:-"0 1 2 3 4"}
# The budget (2 shared cores): chosen before looking at any test fold.
LR=2e-5 EPOCHS=1 BATCH=8 NPASS=2 QLEN=32 PLEN=96 TAU=0.05 WARMUP=0.1 WD=0.01 SEED=42
FT=(--lr $LR --epochs $EPOCHS --batch $BATCH --n-passages $NPASS --q-max-len $QLEN --p-max-len $PLEN
    --tau $TAU --warmup-ratio $WARMUP --weight-decay $WD --threads $THREADS)
export INDEX_ARGS="--max-len 128 --threads $THREADS" SEED
mkdir -p "$OUT"
$PY bench/finetune_cranfield/folds.py "$DATA" "$OUT" $SEED
M=(-m ndcg_cut.10 -m map -m recall.100)
INIT=$($QAC info 2>/dev/null | awk '/^directory/ {print $2; exit}')
INIT=${INIT:-${QAC_MODEL:-$HOME/.local/share/qac/models/all-MiniLM-L6-v2}}
[ -f "$OUT/zeroshot/index.faiss" ] || $QAC index build --corpus "$CORPUS" --out "$OUT/zeroshot" $INDEX_ARGS
for k in $FOLDS; do
  F=$OUT/fold$k
  t0=$(date +%s)
  scripts/finetune.sh --corpus "$CORPUS" --train-queries "$F/train.tsv" --train-qrels "$F/train.qrels" \
    --test-queries "$F/test.tsv" --test-qrels "$F/test.qrels" --out "$F" -- "${FT[@]}"
  echo $(( $(date +%s) - t0 )) > "$F/qac_wall_seconds"
  $QAC search --index "$OUT/zeroshot" --queries "$F/test.tsv" --k 1000 --run "$F/test-zs.run" --threads $THREADS
  $QAC eval -c "${M[@]}" --qrels "$F/test.qrels" --run "$F/test-zs.run" | sed "s/^/zs\t/" > "$F/results-zs.tsv"
  # sentence-transformers on the same batches as qac's retriever 1
  if [ ! -f "$F/st1.json" ]; then
    steps=$(wc -l < "$F/retriever1/log.jsonl")
    $QAC finetune --dry-run --dump-batches "$F/st1-batches.jsonl" --train "$F/bm25-negatives.jsonl" \
      --out "$F/st1-dry" --seed $SEED "${FT[@]}"
    warm=$(python3 -c "print(round($WARMUP * $steps))")
    $PY bench/finetune_cranfield/st_train.py --model "$INIT" --batches "$F/st1-batches.jsonl" --out "$F/st1" \
      --lr $LR --warmup "$warm" --wd $WD --tau $TAU --q-max $QLEN --p-max $PLEN --threads $THREADS --seed $SEED \
      --epochs $EPOCHS > "$F/st1.json.tmp"
    mv "$F/st1.json.tmp" "$F/st1.json"
  fi
  [ -f "$F/index-st1/index.faiss" ] || $QAC index build --model "$F/st1" --corpus "$CORPUS" --out "$F/index-st1" $INDEX_ARGS
  $QAC search --index "$F/index-st1" --model "$F/st1" --queries "$F/test.tsv" --k 1000 --run "$F/test-st1.run" --threads $THREADS
  $QAC eval -c "${M[@]}" --qrels "$F/test.qrels" --run "$F/test-st1.run" | sed "s/^/st1\t/" > "$F/results-st1.tsv"
done
$PY bench/finetune_cranfield/summarize.py "$OUT" > "$OUT/summary.md"
cat "$OUT/summary.md"
