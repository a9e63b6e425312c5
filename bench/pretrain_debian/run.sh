#!/usr/bin/env bash
# The pre-training study on the Debian package descriptions: continue
# pre-training the default model with each arm's objective and contexts
# (same step budget), then fine-tune each arm's encoder on Cranfield's five
# query folds (retriever 1; retriever 2 for the two best arms) and score the
# held-out fold.
#   bench/pretrain_debian/run.sh [OUT]        (from the repository root; needs build/ and .venv)
# Environment: ARMS (default: all, in order), STEPS, BATCH, LR, TAU (the
# budget), THREADS (2), FOLDS ("0 1 2 3 4"), R2_ARMS (arms that also get
# retriever 2; default: the two best by retriever-1 nDCG@10, picked after
# every arm's retriever 1 is done). Re-running continues: a finished step is
# skipped and an interrupted pre-training resumes from its last checkpoint.
# Results: OUT/summary.md.
set -euo pipefail
shopt -s inherit_errexit # a failure inside $(pretrain ...) stops the run
cd "$(dirname "$0")/../.."
OUT=${1:-bench/pretrain_debian/out}
DATA=${QAC_DATA:-../shared/data}
PY=${PY:-.venv/bin/python3}
export QAC=${QAC:-$PWD/build/qac}
THREADS=${THREADS:-2}
FOLDS=${FOLDS:-"0 1 2 3 4"}
ARMS=${ARMS:-"none coco-span coco-query coco-mixed coco-curriculum cotmae-query qgen-query coco-hlp"}
# The budget (2 cores, about 20-30 minutes of pre-training per arm), fixed
# before any fold was scored. The default model mean-pools and normalises,
# so the contrastive loss runs on cosine similarities with a temperature.
STEPS=${STEPS:-200} BATCH=${BATCH:-32} LR=${LR:-1e-4} TAU=${TAU:-0.05} SEED=${SEED:-42}
PT=(--steps "$STEPS" --batch "$BATCH" --lr "$LR" --tau "$TAU" --seed "$SEED" --threads "$THREADS"
    --max-len 144 --query-max-len 32 --save-every 100 --keep 1)
# fine-tuning: the budget of bench/finetune_cranfield
FT=(--lr 2e-5 --epochs 1 --batch 8 --n-passages 2 --q-max-len 32 --p-max-len 96 --tau 0.05
    --warmup-ratio 0.1 --weight-decay 0.01 --threads "$THREADS")
export INDEX_ARGS="--max-len 128 --threads $THREADS" SEED
PAIRS=$DATA/debian-packages/packages.jsonl.gz
CRAN=$DATA/cranfield
CORPUS=$CRAN/cran.all.1400
M=(-m ndcg_cut.10 -m map -m recall.100)
INIT=$($QAC info 2>/dev/null | awk '/^directory/ {print $2; exit}')
INIT=${INIT:-${QAC_MODEL:-$HOME/.local/share/qac/models/all-MiniLM-L6-v2}}
mkdir -p "$OUT"
$PY bench/finetune_cranfield/folds.py "$CRAN" "$OUT/folds" "$SEED"
log() { echo "pretrain_debian: $*" >&2; }

# arm -> `qac pretrain` arguments (empty: no pre-training)
arm_args() {
  case "$1" in
    none) ;;
    coco-span) echo "--objective cocondenser --context span --data $PAIRS" ;;
    coco-query) echo "--objective cocondenser --context query --data $PAIRS" ;;
    coco-mixed) echo "--objective cocondenser --context mixed --data $PAIRS" ;;
    coco-curriculum) echo "--objective cocondenser --curriculum span:0.75,query --data $PAIRS" ;;
    cotmae-query) echo "--objective cotmae --context query --data $PAIRS" ;;
    qgen-query) echo "--objective qgen --context query --data $PAIRS" ;;
    coco-hlp) echo "--objective cocondenser --context query --data $OUT/hlp.jsonl" ;;
    *) log "unknown arm $1"; exit 2 ;;
  esac
}

# pre-train an arm; prints the encoder directory
pretrain() {
  local arm=$1 dir=$OUT/$1/pretrain args
  args=$(arm_args "$arm")
  if [ -z "$args" ]; then echo "$INIT"; return; fi
  if [ "$arm" = coco-hlp ] && [ ! -f "$OUT/hlp.jsonl" ]; then
    $QAC hlp --docs "$PAIRS" --out "$OUT/hlp.jsonl.tmp" --seed "$SEED" >&2
    mv "$OUT/hlp.jsonl.tmp" "$OUT/hlp.jsonl"
  fi
  if [ ! -f "$dir/done" ]; then
    local resume=()
    [ -f "$dir/latest" ] && resume=(--resume)
    local t0; t0=$(date +%s)
    # shellcheck disable=SC2086
    $QAC pretrain --model "$INIT" $args --out "$dir" "${PT[@]}" "${resume[@]}" >&2
    echo $(( $(date +%s) - t0 )) >> "$dir/wall_seconds"
    $QAC plot "$dir/log.jsonl" --out "$dir/loss.png" >&2 || true
    touch "$dir/done"
  fi
  echo "$dir"
}

# zero-shot on every fold's test queries, then the fine-tuning chain per fold
evaluate() {
  local arm=$1 enc=$2 stages=$3
  local A=$OUT/$arm
  [ -f "$A/index-zs/index.faiss" ] || $QAC index build --model "$enc" --corpus "$CORPUS" --out "$A/index-zs" $INDEX_ARGS
  for k in $FOLDS; do
    local F=$OUT/folds/fold$k D=$A/fold$k
    mkdir -p "$D"
    if [ ! -f "$D/results-zs.tsv" ]; then
      $QAC search --index "$A/index-zs" --model "$enc" --queries "$F/test.tsv" --k 1000 --run "$D/test-zs.run" --threads "$THREADS"
      $QAC eval -c "${M[@]}" --qrels "$F/test.qrels" --run "$D/test-zs.run" | sed "s/^/zs\t/" > "$D/results-zs.tsv"
    fi
    if [ ! -f "$D/results.tsv" ] || { [ "$stages" = 2 ] && ! grep -q '^r2' "$D/results.tsv"; }; then
      STAGES=$stages scripts/finetune.sh --model "$enc" --corpus "$CORPUS" --train-queries "$F/train.tsv" \
        --train-qrels "$F/train.qrels" --test-queries "$F/test.tsv" --test-qrels "$F/test.qrels" --out "$D" -- "${FT[@]}"
    fi
  done
}

for arm in $ARMS; do
  log "arm $arm: pre-training"
  enc=$(pretrain "$arm")
  log "arm $arm: Cranfield folds (retriever 1)"
  evaluate "$arm" "$enc" 1
done
R2_ARMS=${R2_ARMS:-$($PY bench/pretrain_debian/summarize.py "$OUT" --best 2)}
for arm in $R2_ARMS; do
  log "arm $arm: Cranfield folds (retriever 2)"
  evaluate "$arm" "$(pretrain "$arm")" 2
done
$PY bench/pretrain_debian/summarize.py "$OUT" > "$OUT/summary.md"
cat "$OUT/summary.md"
