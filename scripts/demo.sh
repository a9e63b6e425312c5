#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install, build, index a judged
# collection (dense + BM25), evaluate both on it, and serve it on
# http://127.0.0.1:8080/.
#
# The collection is Cranfield (1,400 abstracts, 225 judged queries) when
# scripts/data.sh finds it ($QAC_DATA, ../shared/data beside the clone, a copy
# downloaded before) or can download it; otherwise the descriptions of the
# Debian packages installed on this machine, each package's one-line summary
# a known-item query for it.
#   QAC_PORT=9000 scripts/demo.sh          another port
#   QAC_DATA=/path/to/cranfield ...        where cran.all.1400 / cran.qry / cranqrel live
#   QAC_DEMO_CORPUS=debian ...             the installed packages even when Cranfield is there
#   QAC_FETCH=0 ...                        never download
#   QAC_BIN=/path/to/qac ...               use that binary: no cmake, no build
#   QAC_DEMO_DIR=DIR ...                   where the indexes go (default ./demo)
set -euo pipefail
say() { echo "demo: $*" >&2; }
# Paths given relative to where the command runs.
if [ -n "${QAC_DATA:-}" ]; then
  QAC_DATA=$(realpath -m -- "$QAC_DATA"); export QAC_DATA
  [ -d "$QAC_DATA" ] || { say "QAC_DATA=$QAC_DATA is not a directory"; exit 1; }
fi
[ -z "${QAC_DEMO_DIR:-}" ] || QAC_DEMO_DIR=$(realpath -m -- "$QAC_DEMO_DIR")
[ -z "${QAC_BIN:-}" ] || QAC_BIN=$(realpath -- "$QAC_BIN")
cd "$(dirname "$0")/.."
out=${QAC_DEMO_DIR:-$PWD/demo}

# The collection is settled before the build, so what is missing is said
# first: before setup.sh when curl or wget is there to download it, else
# right after setup.sh installs curl.
corpus=${QAC_DEMO_CORPUS:-auto}
case "$corpus" in auto|cranfield|debian) ;;
  *) say "QAC_DEMO_CORPUS must be auto, cranfield or debian, not '$corpus'"; exit 2 ;;
esac
settle() {
  [ "$corpus" = auto ] || [ "$corpus" = cranfield ] || return 0
  local err; err=$(mktemp)
  if cran=$(scripts/data.sh cranfield 2>"$err"); then
    corpus=cranfield
  elif [ "$corpus" = cranfield ]; then
    cat "$err" >&2; rm -f "$err"; exit 1
  else # one line: what is missing, how to get it, what runs instead
    say "$(tail -n 1 "$err" | sed 's/^data: //'); until then the demo indexes this machine's installed Debian packages"
    corpus=debian
  fi
  rm -f "$err"
}
if command -v curl >/dev/null || command -v wget >/dev/null || [ "${QAC_FETCH:-1}" = 0 ]; then settle; fi
scripts/setup.sh
settle

if [ -n "${QAC_BIN:-}" ]; then
  qac=$QAC_BIN
else
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j "$(nproc)"
  qac=$PWD/build/qac
fi

mkdir -p "$out"
if [ "$corpus" = cranfield ]; then
  docs=$cran/cran.all.1400 queries=$cran/cran.qry qrels=$cran/cranqrel
  what="Cranfield (1,400 abstracts, 225 judged queries)"
else
  scripts/data.sh installed "$out/debian" >/dev/null
  docs=$out/debian/corpus.tsv queries=$out/debian/queries.tsv qrels=$out/debian/qrels.txt
  what="the $(wc -l <"$docs") installed Debian packages' descriptions ($(wc -l <"$queries") summaries as known-item queries)"
fi

# A fresh index each run: the corpus may have changed (packages installed).
rm -rf "$out/dense" "$out/bm25"
"$qac" index build --corpus "$docs" --out "$out/dense"
"$qac" bm25 build --corpus "$docs" --out "$out/bm25"
"$qac" search --index "$out/dense" --queries "$queries" --run "$out/dense.run" -k 100
"$qac" bm25 search --index "$out/bm25" --queries "$queries" --run "$out/bm25.run" -k 100
score() { # run -> "nDCG@10 x MRR@10 y", as trec_eval computes them
  "$qac" eval --qrels "$qrels" --run "$1" -m ndcg_cut.10 -m recip_rank -M 10 |
    awk '$1 == "ndcg_cut_10" { n = $3 } $1 == "recip_rank" { r = $3 } END { printf "nDCG@10 %s MRR@10 %s", n, r }'
}
say "$what: dense $(score "$out/dense.run"), BM25 $(score "$out/bm25.run")"
say "serving $what on http://127.0.0.1:${QAC_PORT:-8080}/"
exec "$qac" serve --index "$out/dense" --bm25 "$out/bm25" --port "${QAC_PORT:-8080}"
