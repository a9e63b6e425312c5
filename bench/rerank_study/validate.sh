#!/usr/bin/env bash
# The reranker's budget chosen on TRAINING queries only: fold 0's 180
# training queries split 144 / 36 (seeded shuffle, seed 7), a reranker
# trained on the 144 with the given options and, at every save, the 36
# validation queries' BM25 top 30 reranked (dev.jsonl: nDCG@10 etc.). No
# test fold is read.
#   bench/rerank_study/validate.sh OUT NAME [qac finetune options...]
# OUT is a run.sh output directory whose cranfield/fold0 holds train.tsv,
# train.qrels, bm25-train.run and bm25-negatives.jsonl (run.sh's first
# steps); e.g.
#   bench/rerank_study/validate.sh bench/rerank_study/out A --lr 1e-4 --batch 4 --n-passages 8 --epochs 2 --save-every 24
set -euo pipefail
SELF=$(readlink -f "$0")
cd "$(dirname "$SELF")/../.."
OUT=$1 NAME=$2
shift 2
DATA=${QAC_DATA:-../shared/data}
PY=${PY:-.venv/bin/python3}
QAC=${QAC:-$PWD/build/qac}
F=$OUT/cranfield/fold0 V=$OUT/validate
mkdir -p "$V"
if [ ! -f "$V/vtrain.jsonl" ]; then
  $PY - "$F" "$V" <<'EOF'
import json, random, sys
F, V = sys.argv[1:]
ids = sorted((l.split("\t")[0] for l in open(F + "/train.tsv")), key=int)
random.Random(7).shuffle(ids)
val = set(ids[:36])
open(V + "/val.tsv", "w").writelines(l for l in open(F + "/train.tsv") if l.split("\t")[0] in val)
open(V + "/val.qrels", "w").writelines(l for l in open(F + "/train.qrels") if l.split()[0] in val)
open(V + "/val-bm25.run", "w").writelines(l for l in open(F + "/bm25-train.run") if l.split()[0] in val)
open(V + "/vtrain.jsonl", "w").writelines(l for l in open(F + "/bm25-negatives.jsonl")
                                          if json.loads(l)["query_id"] not in val)
EOF
fi
$QAC eval -c -m ndcg_cut.10 --qrels "$V/val.qrels" --run "$V/val-bm25.run" | sed 's/^/BM25 alone: /'
INIT=$($QAC info 2>/dev/null | awk '/^directory/ {print $2; exit}')
QAC_QUIET=1 $QAC finetune --cross-encoder --model "${INIT:-$HOME/.local/share/qac/models/all-MiniLM-L6-v2}" \
  --train "$V/vtrain.jsonl" --out "$V/$NAME" --max-len 128 --warmup-ratio 0.1 --weight-decay 0.01 \
  --threads "${THREADS:-1}" --seed 42 --dev-queries "$V/val.tsv" --dev-qrels "$V/val.qrels" \
  --dev-corpus "$DATA/cranfield/cran.all.1400" --dev-run "$V/val-bm25.run" --dev-depth 30 "$@"
cat "$V/$NAME/dev.jsonl"
