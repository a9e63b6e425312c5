#!/usr/bin/env bash
# cuDNN is loaded at run time, never linked (no GPU needed for this): no
# program of the build names libcudnn among the libraries it needs; the
# library is found where the loader finds it; QAC_CUDNN_LIBRARY naming a
# directory loads that directory's copy (torch's wheel here: another
# version than the system's, so which one was loaded shows); a wrong one
# is reported, naming what was tried, and leaves qac's attention alone.
#   test_cudnn_load.sh PYTHON (with QAC_BUILD_DIR set)
set -euo pipefail
py="${1:?python}"
build="${QAC_BUILD_DIR:?}"
probe="$build/tests/gpu/cudnn_probe"
fail() { echo "FAIL: $*" >&2; exit 1; }
for f in "$build/qac" "$build/tests/gpu/test_gpu_cudnn" "$probe" "$build"/libqac.so; do
  [ -e "$f" ] || continue
  if readelf -d "$f" | grep NEEDED | grep -qi cudnn; then fail "$f needs libcudnn at link time"; fi
done
echo "no program needs libcudnn at link time"

out="$(QAC_CUDNN_LIBRARY=/nonexistent/cudnn "$probe")"
echo "$out"
grep -qx 'version 0' <<<"$out" || fail "a wrong QAC_CUDNN_LIBRARY loaded something"
grep -q 'not found (tried QAC_CUDNN_LIBRARY=/nonexistent/cudnn)' <<<"$out" || fail "the reason does not name what was tried"

sys="$(env -u QAC_CUDNN_LIBRARY "$probe")"
echo "$sys"
wheel="$("$py" -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null || true)"
if ! grep -qx 'version 0' <<<"$sys"; then
  grep -q '^status cuDNN 9\.' <<<"$sys" || fail "cuDNN loaded without its version in the status"
fi
if [ -n "$wheel" ] && [ -f "$wheel/libcudnn.so.9" ]; then
  whl="$(QAC_CUDNN_LIBRARY="$wheel" "$probe")"
  echo "$whl"
  want="$("$py" -c 'import torch; v = torch.backends.cudnn.version(); print(v)' 2>/dev/null || true)"
  grep -q "^status cuDNN 9\..* ($wheel/libcudnn.so.9)" <<<"$whl" || fail "the wheel's directory was not the one loaded"
  if [ -n "$want" ] && [ "$want" != None ]; then
    grep -qx "version $want" <<<"$whl" || fail "loaded version is not the wheel's ($want as torch reports it)"
  fi
else
  echo "NOTE no torch cuDNN wheel beside $py: the directory case not run"
fi
echo "PASS cuDNN loading"
