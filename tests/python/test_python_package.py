"""The package as users install it: python/setup.py builds a wheel from
this build tree (QAC_BUILD_DIR), pip installs it into a fresh directory,
and the installed package (not the build tree's copy) imports and encodes
the same bits."""
import glob
import os
import subprocess
import sys

import numpy as np

import qac


def test_wheel_installs_and_encodes(tmp):
    src = os.path.join(os.environ["QAC_SOURCE_DIR"], "python")
    whl, target = os.path.join(tmp, "wheel"), os.path.join(tmp, "site")
    env = {**os.environ, "QAC_BUILD_DIR": os.environ["QAC_BUILD_DIR"]}
    # build in a copy: pip's in-tree build writes build/ and *.egg-info beside setup.py
    work = os.path.join(tmp, "python-src")
    subprocess.run(["cp", "-r", src, work], check=True)
    with open(os.path.join(work, "setup.py")) as f:  # the copy still builds this repository
        code = f.read().replace('ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))',
                                f'ROOT = {os.environ["QAC_SOURCE_DIR"]!r}')
    with open(os.path.join(work, "setup.py"), "w") as f:
        f.write(code)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", work,
                        "-w", whl], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    wheels = glob.glob(os.path.join(whl, "qac-*.whl"))
    assert len(wheels) == 1
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", target, wheels[0]],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert os.path.exists(os.path.join(target, "qac", "py.typed"))
    probe = ("import sys, qac, numpy as np; assert qac.__file__.startswith(sys.argv[1]), qac.__file__; "
             "np.save(sys.argv[2], qac.Encoder(device='cpu').encode(['an installed package'], kind='query'))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = os.path.join(tmp, "installed.npy")
    r = subprocess.run([sys.executable, "-c", probe, target, out], env={**env, "PYTHONPATH": target},
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    here = qac.Encoder(device="cpu").encode(["an installed package"], kind="query")
    assert np.array_equal(np.load(out), here)
