#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install, build, index the
# Cranfield collection (dense + BM25) and serve it on http://127.0.0.1:8080/.
#   QAC_PORT=9000 scripts/demo.sh       another port
#   QAC_DATA=/path/to/cranfield ...     where cran.all.1400 / cran.qry / cranqrel live
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)"
data=${QAC_DATA:-../shared/data/cranfield}
if [ ! -f "$data/cran.all.1400" ]; then
  echo "demo: no Cranfield collection at $data (set QAC_DATA)" >&2
  exit 1
fi
out=${QAC_DEMO_DIR:-$PWD/demo}
mkdir -p "$out"
build/qac index build --corpus "$data/cran.all.1400" --out "$out/dense"
build/qac bm25 build --corpus "$data/cran.all.1400" --out "$out/bm25"
echo "demo: serving Cranfield (1,400 abstracts) on http://127.0.0.1:${QAC_PORT:-8080}/" >&2
exec build/qac serve --index "$out/dense" --bm25 "$out/bm25" --port "${QAC_PORT:-8080}"
