#!/usr/bin/env bash
# Build everything a GPU machine needs to test and measure qac, and pack it
# into one archive for scripts/gpu_run.sh:
#   scripts/gpu_bundle.sh OUT_DIR
# The archive holds: the binaries (qac, every gpu-labelled test, every GPU
# benchmark) built with CUDA for sm_90 against one shared libqac.so (so the
# kernels are carried once, not once per binary), the shared libraries they
# load (from ldd, without glibc, the C++ runtime and CUDA's own libraries,
# which the GPU machine has; cuDNN is loaded at run time when there), the
# repository's files (scripts, benchmark references, fixtures), a bf16 copy
# of the default model and the Cranfield collection. The GPU machine needs
# the NVIDIA driver, CUDA 13 (cuBLAS), and for the references python3 with
# torch and transformers; nothing else.
#
# The archive travels beside the project's tree (git ls-files), and the two
# must fit the GPU machine's upload (64 MiB) with room to spare: the script
# refuses an archive that takes them past QAC_BUNDLE_MAX_MB together.
# Environment:
#   QAC_BUNDLE_BUILD  build directory (default build-gpu-bundle; an existing
#                     CUDA build is reused as it is when QAC_BUNDLE_REBUILD=0)
#   QAC_BUNDLE_JOBS   build jobs (default: the processors)
#   QAC_BUNDLE_XZ     xz level (default 9; the size limit assumes 9)
#   QAC_BUNDLE_MAX_MB archive plus tree at most this many MiB (default 56)
#   QAC_MODEL         the model to copy (default: the installed default model)
#   QAC_DATA          the Cranfield collection (default ../shared/data/cranfield)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
out="${1:?usage: scripts/gpu_bundle.sh OUT_DIR}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
build="${QAC_BUNDLE_BUILD:-build-gpu-bundle}"
level="${QAC_BUNDLE_XZ:-9}"
max_mb="${QAC_BUNDLE_MAX_MB:-56}"
jobs="${QAC_BUNDLE_JOBS:-$(nproc)}"
t_start=$SECONDS
py="${QAC_PYTHON:-$root/.venv/bin/python3}"
[ -x "$py" ] || py=python3
say() { echo "gpu_bundle: $*" >&2; }

# What must be at hand, checked before the (long) build.
qac_home="${QAC_HOME:-$HOME/.local/share/qac}"
model="${QAC_MODEL:-$qac_home/models/all-MiniLM-L6-v2}"
data="${QAC_DATA:-$root/../shared/data/cranfield}"
[ -f "$model/config.json" ] || { say "no model at $model (run scripts/setup.sh, or set QAC_MODEL)"; exit 1; }
[ -f "$data/cran.all.1400" ] || { say "no Cranfield collection at $data (set QAC_DATA)"; exit 1; }
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || { say "nvcc not found: the bundle needs CUDA"; exit 1; }

if [ "${QAC_BUNDLE_REBUILD:-1}" != 0 ] || [ ! -f "$build/CMakeCache.txt" ]; then
  # without qac export: libpq and its TLS and Kerberos libraries would add
  # 2.5 MB to the archive for a command no GPU step runs; without the
  # Python module, which no GPU step loads
  say "building with CUDA for sm_90 in $build (libqac shared)"
  launch=()
  command -v ccache >/dev/null && launch=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
    -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DQAC_CUDA=ON -DQAC_SHARED_LIBQAC=ON \
    -DQAC_CUDA_ARCHITECTURES=90-real -DQAC_POSTGRESQL=OFF -DQAC_PYTHON_MODULE=OFF -DQAC_PYTHON="$py" \
    "${launch[@]}" >/dev/null
  cmake --build "$build" -j "$jobs"
fi
t_built=$SECONDS
grep -q libcudart <(ldd "$build/qac") || { say "$build/qac was built without CUDA"; exit 1; }
build="$(cd "$build" && pwd)" # ctest names the tests' executables by absolute path

stage="$(mktemp -d "${TMPDIR:-/tmp}/qac-gpu-bundle.XXXXXX")"
trap 'rm -rf "$stage"' EXIT
B="$stage/qac-gpu"
mkdir -p "$B/src/build" "$B/lib" "$B/home/models" "$B/data"

# The repository's files a GPU step reads, as they are in this working tree:
# the scripts, the benchmarks with their Python references, the GPU tests'
# sources (for reading a failure there). The binaries are prebuilt.
git ls-files -z -- scripts bench tests/gpu tests/scratch.py kernels/qac_gpu_defaults.h | grep -zv '\.png$\|\.md$' |
  tar --null -T - -cf - | tar -C "$B/src" -xf -

# The binaries: qac, the gpu-labelled tests (with their arguments), every
# executable under a GPU benchmark's folder, stripped.
bins=("$build/qac")
: >"$B/tests.txt"
while IFS=$'\t' read -r name exe args; do
  bins+=("$exe")
  printf '%s\t%s\t%s\n' "$name" "${exe#"$build"/}" "$args" >>"$B/tests.txt"
done < <(ctest --test-dir "$build" -N -L '^gpu$' --show-only=json-v1 | "$py" -c '
import json, sys
for t in json.load(sys.stdin)["tests"]:
    cmd = t["command"]
    print(t["name"], cmd[0], " ".join(cmd[1:]), sep="\t")')
while IFS= read -r f; do bins+=("$f"); done < <(find "$build"/bench/*gpu* -maxdepth 1 -type f -perm -u+x 2>/dev/null)
for f in "${bins[@]}"; do
  rel="${f#"$build"/}"
  mkdir -p "$B/src/build/$(dirname "$rel")"
  strip --strip-unneeded -o "$B/src/build/$rel" "$f"
done

# The shared libraries they load, but glibc, the C++ runtime (the GPU
# machine's is newer, and torch must keep its own) and CUDA's.
skip='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libcudnn.*|libnccl|libnvrtc|libnvJitLink)\.so'
for f in "${bins[@]}"; do ldd "$f"; done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r soname path; do
    [[ "$soname" =~ $skip ]] && continue
    case "$soname" in
    libqac.so*) strip --strip-unneeded -o "$B/lib/$soname" "$path" ;; # the kernels, once
    *) cp -L "$path" "$B/lib/$soname" ;;
    esac
  done

"$build/tests/checkpoint/qac_ckpt_tool" save "$model" "$B/home/models/all-MiniLM-L6-v2" bf16 >/dev/null
# Without BertModel's pooler (0.2 MB packed): mean pooling never reads it,
# qac loads it as optional (zero) and transformers initialises it unread.
"$py" - "$B/home/models/all-MiniLM-L6-v2/model.safetensors" <<'PY'
import json, struct, sys
path = sys.argv[1]
raw = open(path, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head, data = json.loads(raw[8:8 + n]), raw[8 + n:]
out, parts, at = {}, [], 0
for name, t in sorted(((k, v) for k, v in head.items() if k != "__metadata__"), key=lambda kv: kv[1]["data_offsets"][0]):
    if name.startswith("pooler."):
        continue
    b, e = t["data_offsets"]
    out[name] = dict(t, data_offsets=[at, at + e - b])
    parts.append(data[b:e])
    at += e - b
if "__metadata__" in head:
    out["__metadata__"] = head["__metadata__"]
h = json.dumps(out, separators=(",", ":")).encode()
h += b" " * (-len(h) % 8)
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(parts))
PY
# vocab.txt is the tokenizer qac and transformers read; tokenizer.json repeats it
rm -f "$B/home/models/all-MiniLM-L6-v2/tokenizer.json"
# The weights are 2-byte bf16 units: LZMA with 2-byte literal and position
# alignment packs them about 4% smaller than plain xz -9 (gpu_run.sh unpacks).
xz --lzma2=preset="$level",lc=1,lp=1,pb=1 -T1 "$B/home/models/all-MiniLM-L6-v2/model.safetensors"
cp -r "$data" "$B/data/cranfield"

commit="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!*.md' || echo -dirty)"
{
  echo "commit=$commit"
  echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "nvcc=$("$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" --version | tail -1)"
  echo "cuda_architectures=$(sed -n 's/^QAC_CUDA_ARCHITECTURES:[A-Z]*=//p' "$build/CMakeCache.txt")"
  # paths compiled into the test binaries; gpu_run.sh recreates them as links
  echo "test_data=$root/tests"
  echo "shared_data=$(sed -n 's/^QAC_SHARED_DATA:[A-Z]*=//p' "$build/CMakeCache.txt")"
} >"$B/MANIFEST"

name="qac-gpu-$commit.tar.xz"
say "packing $name (xz -$level)"
tar -C "$stage" -cf - qac-gpu | xz "-$level" -T "$(nproc)" >"$out/$name.tmp"
mv "$out/$name.tmp" "$out/$name"
bytes=$(stat -c %s "$out/$name")
# the project's tree, as the GPU machine's upload carries it beside the
# archive: tracked files and untracked ones git does not ignore
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null |
  awk '{s += $1} END {print s + 0}')
mib() { awk -v b="$1" 'BEGIN {printf "%.2f MiB", b / 1048576}'; }
say "$out/$name: $(mib "$bytes"); with the tree ($(mib "$tree")): $(mib $((bytes + tree))) of $max_mb MiB;" \
  "built in $((t_built - t_start)) s, packed in $((SECONDS - t_built)) s"
if [ $((bytes + tree)) -gt $((max_mb * 1048576)) ]; then
  part() { tar -C "$stage" -cf - "qac-gpu/$1" | xz "-$level" -T "$(nproc)" | wc -c; }
  say "archive and tree past $max_mb MiB: binaries $(($(part src/build) / 1024)) kB, libraries $(($(part lib) / 1024)) kB," \
    "model $(($(part home) / 1024)) kB, data $(($(part data) / 1024)) kB"
  rm -f "$out/$name"
  exit 1
fi
echo "$out/$name"
