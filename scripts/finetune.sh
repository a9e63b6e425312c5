#!/usr/bin/env bash
# The two fine-tuning stages on one collection, each step one qac command:
#   BM25 negatives -> retriever 1 -> index -> mine -> retriever 2 (again from
#   the initial checkpoint, on mined + BM25 examples) -> index -> eval.
#
#   scripts/finetune.sh --corpus C --train-queries Q --train-qrels R \
#       [--test-queries TQ --test-qrels TR] [--model INIT] [--reranker [--denoise]] --out DIR \
#       [-- qac finetune options]
#
# Options after `--` go to both `qac finetune` runs (e.g. --epochs 1 --batch 8
# --n-passages 4 --tau 0.05). Environment: QAC (the qac binary, default
# build/qac), N_NEG (negatives per query, 30), DEPTH (ranks mined, 200),
# INDEX_ARGS (extra `qac index build` options), SEED (42), STAGES (2; 1 stops
# after retriever 1 and evaluates it alone). --reranker also trains a
# cross-encoder on the BM25 negatives (qac finetune --cross-encoder from the
# same initial checkpoint, options from RERANK_ARGS, e.g. "--epochs 1
# --max-len 160") and evaluates every test run reranked by it too (its top
# RERANK_DEPTH, 100); --denoise drops the mined negatives it scores as
# relevant (qac mine --denoise) before retriever 2. A step whose
# output exists is skipped, so re-running continues an interrupted chain
# (each finetune resumes from its last checkpoint).
set -euo pipefail
QAC=${QAC:-build/qac}
N_NEG=${N_NEG:-30}
DEPTH=${DEPTH:-200}
SEED=${SEED:-42}
STAGES=${STAGES:-2}
case "$STAGES" in 1|2) ;; *) echo "finetune.sh: STAGES must be 1 or 2 (got $STAGES)" >&2; exit 2 ;; esac
INDEX_ARGS=${INDEX_ARGS:-}
RERANK_ARGS=${RERANK_ARGS:-}
RERANK_DEPTH=${RERANK_DEPTH:-100}
model="" corpus="" tq="" tr="" eq="" er="" out="" reranker=0 denoise=0
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --corpus) corpus=$2; shift 2 ;;
    --train-queries) tq=$2; shift 2 ;;
    --train-qrels) tr=$2; shift 2 ;;
    --test-queries) eq=$2; shift 2 ;;
    --test-qrels) er=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --reranker) reranker=1; shift ;;
    --denoise) denoise=1; shift ;;
    --) shift; break ;;
    *) echo "finetune.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -z "$corpus" ] || [ -z "$tq" ] || [ -z "$tr" ] || [ -z "$out" ]; then
  sed -n '2,21p' "$0" >&2
  exit 2
fi
if [ "$denoise" = 1 ] && [ "$reranker" = 0 ]; then
  echo "finetune.sh: --denoise needs --reranker (the cross-encoder that denoises)" >&2
  exit 2
fi
ft_args=("$@")
model_args=()
[ -n "$model" ] && model_args=(--model "$model")
mkdir -p "$out"
log() { echo "finetune.sh: $*" >&2; }
# the newest checkpoint of a run directory
ckpt() { echo "$1/$(cat "$1/latest")"; }
# train a retriever unless its run finished (final checkpoint present)
train() {
  local dir=$1; shift
  if [ -f "$dir/done" ]; then return; fi
  local resume=()
  [ -f "$dir/latest" ] && resume=(--resume)
  "$QAC" finetune "${model_args[@]}" "$@" --out "$dir" --seed "$SEED" "${ft_args[@]}" "${resume[@]}"
  touch "$dir/done"
}

log "1/7 BM25 index and run for the training queries"
[ -f "$out/bm25/bm25.idx" ] || "$QAC" bm25 build --corpus "$corpus" --out "$out/bm25"
[ -f "$out/bm25-train.run" ] || "$QAC" bm25 search --index "$out/bm25" --queries "$tq" --k "$DEPTH" --run "$out/bm25-train.run"

log "2/7 BM25 negatives"
[ -f "$out/bm25-negatives.jsonl" ] || "$QAC" mine --run "$out/bm25-train.run" --queries "$tq" --qrels "$tr" \
  --corpus "$corpus" --n "$N_NEG" --depth "$DEPTH" --seed "$SEED" --out "$out/bm25-negatives.jsonl"

if [ "$reranker" = 1 ] && [ ! -f "$out/reranker/done" ]; then
  log "2b/7 reranker (a cross-encoder on the BM25 negatives)"
  resume=()
  [ -f "$out/reranker/latest" ] && resume=(--resume)
  # shellcheck disable=SC2086
  "$QAC" finetune --cross-encoder "${model_args[@]}" --train "$out/bm25-negatives.jsonl" --out "$out/reranker" \
    --seed "$SEED" $RERANK_ARGS "${resume[@]}"
  touch "$out/reranker/done"
fi
denoise_args=()
[ "$denoise" = 1 ] && denoise_args=(--denoise "$out/reranker")

log "3/7 retriever 1"
train "$out/retriever1" --train "$out/bm25-negatives.jsonl"
"$QAC" plot "$out/retriever1/log.jsonl" --out "$out/retriever1/loss.png"

log "4/7 index with retriever 1"
[ -f "$out/index1/index.faiss" ] || "$QAC" index build --model "$(ckpt "$out/retriever1")" --corpus "$corpus" \
  --out "$out/index1" $INDEX_ARGS

if [ "$STAGES" = 2 ]; then
log "5/7 mine hard negatives with retriever 1"
[ -f "$out/mined-negatives.jsonl" ] || "$QAC" mine --model "$(ckpt "$out/retriever1")" --index "$out/index1" \
  --queries "$tq" --qrels "$tr" --corpus "$corpus" --n "$N_NEG" --depth "$DEPTH" --seed "$SEED" \
  "${denoise_args[@]}" --out "$out/mined-negatives.jsonl"

log "6/7 retriever 2 (from the initial checkpoint, mined + BM25 examples)"
train "$out/retriever2" --train "$out/mined-negatives.jsonl" --train "$out/bm25-negatives.jsonl"
"$QAC" plot "$out/retriever2/log.jsonl" --out "$out/retriever2/loss.png"
[ -f "$out/index2/index.faiss" ] || "$QAC" index build --model "$(ckpt "$out/retriever2")" --corpus "$corpus" \
  --out "$out/index2" $INDEX_ARGS
fi

if [ -n "$eq" ] && [ -n "$er" ]; then
  log "7/7 eval on the test queries"
  m=(-m ndcg_cut.10 -m map -m recall.100)
  "$QAC" bm25 search --index "$out/bm25" --queries "$eq" --k 1000 --run "$out/test-bm25.run"
  "$QAC" search --index "$out/index1" --model "$(ckpt "$out/retriever1")" --queries "$eq" --k 1000 --run "$out/test-r1.run"
  systems="bm25 r1"
  if [ "$STAGES" = 2 ]; then
    "$QAC" search --index "$out/index2" --model "$(ckpt "$out/retriever2")" --queries "$eq" --k 1000 --run "$out/test-r2.run"
    systems="bm25 r1 r2"
  fi
  if [ "$reranker" = 1 ]; then
    for sys in $systems; do
      "$QAC" rerank --model "$out/reranker" --run "$out/test-$sys.run" --queries "$eq" --corpus "$corpus" \
        --depth "$RERANK_DEPTH" --out "$out/test-$sys-ce.run"
    done
    systems="$systems $(for sys in $systems; do printf '%s-ce ' "$sys"; done)"
  fi
  for sys in $systems; do
    "$QAC" eval -c "${m[@]}" --qrels "$er" --run "$out/test-$sys.run" | sed "s/^/$sys\t/"
  done | tee "$out/results.tsv"
fi
