#!/usr/bin/env bash
# Where the demo and the tests find their data: one rule for both.
#
#   scripts/data.sh cranfield          print the Cranfield directory (cran.all.1400, cran.qry, cranqrel)
#   scripts/data.sh debian-packages    print the debian-packages directory (packages.jsonl.gz)
#   scripts/data.sh tests              print one directory holding cranfield/ and debian-packages/
#                                      (what the tests read as QAC_SHARED_DATA)
#   scripts/data.sh installed DIR      write this machine's installed packages as a small judged
#                                      collection: DIR/corpus.tsv, queries.tsv, qrels.txt
#
# A collection is looked for, in order, in
#   1. $QAC_DATA: that directory itself, or its cranfield/ and debian-packages/
#      (a relative path is taken from where the command runs);
#   2. ../shared/data beside the clone;
#   3. $QAC_HOME/data (default ~/.local/share/qac/data), where copies made here go.
# When none holds it, it is made in 3: Cranfield downloaded from its public home
# and checked against the SHA-256 sums below; debian-packages built from the
# Debian release's package index, downloaded by apt-get into a private list
# directory (the system's own lists are not touched). QAC_FETCH=0 forbids both.
# What cannot be had is said in one line on stderr, exit status 1.
set -euo pipefail
if [ -n "${QAC_DATA:-}" ]; then
  QAC_DATA=$(realpath -m -- "$QAC_DATA")
  if [ ! -d "$QAC_DATA" ]; then echo "data: QAC_DATA=$QAC_DATA is not a directory" >&2; exit 1; fi
fi
repo=$(cd "$(dirname "$0")/.." && pwd)
home=${QAC_HOME:-$HOME/.local/share/qac}/data
shared=$(realpath -m -- "$repo/../shared/data")

# The Cranfield collection as Glasgow University's IR group publishes it
# (cran.tar.gz, 506,960 bytes, MD5 1730f7be572d95a5a4b56c59a7b900a5, the
# sum ir_datasets also records; its mirror serves the file under that name).
# The three files inside are what the tests and the recorded numbers use.
CRANFIELD_URLS=${QAC_CRANFIELD_URL-"http://ir.dcs.gla.ac.uk/resources/test_collections/cran/cran.tar.gz https://mirror.ir-datasets.com/1730f7be572d95a5a4b56c59a7b900a5"}
CRANFIELD_SHA256="73d33d7e445b884bc32332034e7bc7d07ad5089d9030ead9f1de3493da21da1d  cran.all.1400
99578ceb88941ef89c14faf7c63c23776a376d8fba319b990f01d0c601d8b03f  cran.qry
92e54b58dac0b980152178f350d892fae66c8a239b8a11715b835fb8d2f6bc0e  cranqrel"

say() { echo "data: $*" >&2; }

# The first candidate directory that holds collection $1 (marker file $2).
find_local() {
  local name=$1 marker=$2 d
  for d in ${QAC_DATA:+"$QAC_DATA" "$QAC_DATA/$name"} "$shared/$name" "$home/$name"; do
    if [ -f "$d/$marker" ]; then echo "$d"; return 0; fi
  done
  return 1
}
where() { echo "${QAC_DATA:+\$QAC_DATA, }../shared/data or $home"; }

download() { # url file
  if command -v curl >/dev/null; then
    curl -fsSL --connect-timeout 10 --max-time 300 -o "$2" "$1"
  elif command -v wget >/dev/null; then
    wget -q -T 10 -O "$2" "$1"
  else
    return 1
  fi
}

fetch_why="" # why the last download was refused
fetch_cranfield() {
  local tmp url
  mkdir -p "$home"
  tmp=$(mktemp -d "$home/.cranfield.XXXXXX")
  for url in $CRANFIELD_URLS; do
    rm -rf "$tmp/x" && mkdir "$tmp/x"
    download "$url" "$tmp/cran.tar.gz" 2>/dev/null || continue
    if ! tar -xzf "$tmp/cran.tar.gz" -C "$tmp/x" --no-same-owner 2>/dev/null; then
      fetch_why="$url is not a tar.gz"; continue
    fi
    # the three files, wherever the archive put them
    local f src
    for f in cran.all.1400 cran.qry cranqrel; do
      src=$(find "$tmp/x" -name "$f" -type f | head -n 1)
      [ -n "$src" ] && mv "$src" "$tmp/$f"
    done
    if ! (cd "$tmp" && echo "$CRANFIELD_SHA256" | sha256sum -c --status 2>/dev/null); then
      fetch_why="the files from $url do not match their SHA-256 sums"; continue
    fi
    rm -rf "$tmp/x" "$tmp/cran.tar.gz"
    echo "Cranfield collection from $url, SHA-256 checked." >"$tmp/SOURCE"
    rm -rf "$home/cranfield"
    chmod 755 "$tmp"
    mv "$tmp" "$home/cranfield"
    echo "$home/cranfield"
    return 0
  done
  rm -rf "$tmp"
  return 1
}

build_debian_packages() {
  local sudo="" lists out pk tr codename arch
  [ "$(id -u)" = 0 ] || sudo=sudo
  command -v apt-get >/dev/null && command -v python3 >/dev/null || return 1
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  arch=$(dpkg --print-architecture)
  [ -n "$codename" ] || return 1
  mkdir -p "$home"
  out=$(mktemp -d "$home/.debian-packages.XXXXXX")
  lists="$out/lists"
  mkdir -p "$lists/partial"
  local apt=(apt-get -q -o "Dir::State::Lists=$lists" -o Acquire::Languages=en)
  if ! $sudo "${apt[@]}" update >"$out/apt.log" 2>&1; then
    $sudo rm -rf "$out"; return 1
  fi
  pk=$("${apt[@]}" indextargets --format '$(FILENAME)' "Identifier: Packages" "Codename: $codename" \
       "Component: main" "Architecture: $arch" | head -n 1)
  tr=$("${apt[@]}" indextargets --format '$(FILENAME)' "Identifier: Translations" "Codename: $codename" \
       "Component: main" "Language: en" | head -n 1)
  if [ -z "$pk" ] || [ -z "$tr" ] || [ ! -f "$pk" ] || [ ! -f "$tr" ]; then
    $sudo rm -rf "$out"; return 1
  fi
  /usr/lib/apt/apt-helper cat-file "$pk" >"$out/Packages"
  /usr/lib/apt/apt-helper cat-file "$tr" >"$out/Translation-en"
  if ! python3 "$repo/scripts/debian_packages.py" "$out/Packages" "$out/Translation-en" "$out/packages.jsonl.gz"; then
    $sudo rm -rf "$out"; return 1
  fi
  $sudo rm -rf "$lists" && rm -f "$out/Packages" "$out/Translation-en" "$out/apt.log"
  echo "Built from Debian $codename main ($arch) by scripts/debian_packages.py on $(date -u +%F)." >"$out/SOURCE"
  rm -rf "$home/debian-packages"
  chmod 755 "$out"
  mv "$out" "$home/debian-packages"
  echo "$home/debian-packages"
}

cranfield() {
  find_local cranfield cran.all.1400 && return 0
  local why="downloads are off (QAC_FETCH=0)"
  if [ "${QAC_FETCH:-1}" != 0 ]; then
    fetch_cranfield && return 0
    why="the download failed${fetch_why:+ ($fetch_why)}"
  fi
  say "no Cranfield collection in $(where), and $why: put cran.all.1400, cran.qry and cranqrel (from cran.tar.gz, ${CRANFIELD_URLS%% *}) in a directory and set QAC_DATA to it"
  return 1
}

debian_packages() {
  find_local debian-packages packages.jsonl.gz && return 0
  local why="downloads are off (QAC_FETCH=0)"
  if [ "${QAC_FETCH:-1}" != 0 ]; then
    build_debian_packages && return 0
    why="it could not be built"
  fi
  say "no debian-packages collection in $(where), and $why: run scripts/data.sh debian-packages where apt-get reaches a Debian mirror, or set QAC_DATA to a directory holding debian-packages/packages.jsonl.gz"
  return 1
}

# The directory of installed packages' descriptions: each package's long
# description a document, its one-line summary a known-item query (packages
# sharing a summary are all relevant to it). Packages without a long
# description are left out. Output is written to temporary names, then renamed.
installed() {
  local dir=$1
  mkdir -p "$dir"
  dpkg-query -W -f='${db:Status-Abbrev}\t${Package}\t${Description}\n' | LC_ALL=C awk -F'\t' -v dir="$dir" '
    function squeeze(s) { gsub(/[ \t]+/, " ", s); sub(/^ /, "", s); sub(/ $/, "", s); return s }
    function flush() {
      text = squeeze(text); summary = squeeze(summary)
      if (keep && name != "" && text != "" && summary != "" && !(name in seen)) {
        seen[name] = 1; ndocs++
        print name "\t" text > (dir "/corpus.tsv.tmp")
        if (!(summary in qid)) { qid[summary] = name; print name "\t" summary > (dir "/queries.tsv.tmp") }
        print qid[summary] " 0 " name " 1" > (dir "/qrels.txt.tmp")
      }
    }
    /^[^ ]/ { flush(); keep = ($1 ~ /^ii/); name = $2; summary = $3
              for (i = 4; i <= NF; i++) summary = summary " " $i
              text = ""; next }
    { line = $0; if (line == " .") line = ""; text = text " " line }
    END { flush(); if (!ndocs) exit 1 }'
  local f
  for f in corpus.tsv queries.tsv qrels.txt; do mv "$dir/$f.tmp" "$dir/$f"; done
  echo "$dir"
}

case "${1:-}" in
  cranfield) cranfield ;;
  debian-packages) debian_packages ;;
  tests)
    c=$(cranfield) && d=$(debian_packages) || exit 1
    if [ "$(dirname "$c")" = "$(dirname "$d")" ] && [ "$(basename "$c")" = cranfield ] &&
       [ "$(basename "$d")" = debian-packages ]; then
      dirname "$c"
    else # found in different places: links to both in one directory
      mkdir -p "$home/tests"
      ln -sfn "$c" "$home/tests/cranfield"
      ln -sfn "$d" "$home/tests/debian-packages"
      echo "$home/tests"
    fi ;;
  installed)
    [ -n "${2:-}" ] || { say "usage: scripts/data.sh installed DIR"; exit 2; }
    installed "$2" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2; exit 2 ;;
esac
