"""A corrupt index.faiss never takes a process down: `qac search`, the index
opener and `qac serve` answer an error (or, where the flipped byte is one no
check can see, search), and never abort or hang.

- The finding this guards: an SQfp16 index with byte 40 (the scalar
  quantizer's type) flipped used to open under --verify size, or with a
  manifest whose faiss.checksum is null, and then abort on the first search
  (an uncaught faiss::FaissException, exit 134). Now: refused at open,
  naming the field; a manifest without a checksum is refused unless
  --verify none is given.
- A sweep over real files of five factories: every byte of the first 160
  and a sample of the rest, flipped one at a time and opened with
  --verify none (nothing compared with the manifest), must each end in exit
  0 or 1 within seconds, never a signal or a multi-gigabyte allocation.
- The server: refuses to start on the corrupt file (exit 1 naming it), and
  serves /search when the user asked for --verify none on an intact one."""
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import scratch  # noqa: E402
from testlib import check, finish  # noqa: E402

QAC = os.environ["QAC_BIN"]
SWEEP = sys.argv[1]
tmp = scratch.mkdtemp(prefix="qac-corrupt-")


def build(name, factory, x):
    np.save(os.path.join(tmp, name + ".npy"), x)
    out = os.path.join(tmp, name)
    subprocess.run([QAC, "index", "build", "--vectors", os.path.join(tmp, name + ".npy"), "--ids", "sequential", "--factory", factory,
                    "--out", out], check=True, capture_output=True)
    return out


def corrupt_copy(src, name, pos=None, checksum="keep"):
    """A copy of index src with byte pos of index.faiss inverted and the
    manifest's faiss.checksum kept, set to null or removed."""
    dst = os.path.join(tmp, name)
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    if pos is not None:
        with open(os.path.join(dst, "index.faiss"), "r+b") as f:
            f.seek(pos)
            b = f.read(1)
            f.seek(pos)
            f.write(bytes([b[0] ^ 0xFF]))
    if checksum != "keep":
        man = json.load(open(os.path.join(dst, "manifest.json")))
        if checksum == "null":
            man["faiss"]["checksum"] = None
        else:
            del man["faiss"]["checksum"]
        json.dump(man, open(os.path.join(dst, "manifest.json"), "w"))
    return dst


rng = np.random.default_rng(7)
queries = os.path.join(tmp, "q.tsv")
with open(queries, "w") as f:
    f.write("1\twing flutter at supersonic speed\n2\tboundary layer\n")

# ---- the finding: SQfp16, byte 40 ----
sq = build("sq", "SQfp16", rng.standard_normal((200, 384)).astype(np.float32))


def search(index, *extra):
    return subprocess.run([QAC, "search", "--index", index, "--queries", queries, "--run", "-", "--k", "5",
                           "--allow-model-mismatch", *extra], capture_output=True, text=True, timeout=300)


p = search(corrupt_copy(sq, "b40", 40))
check(p.returncode == 1 and "checksum mismatch" in p.stderr, "byte 40, --verify full: checksum mismatch (exit %d)"
      % p.returncode)
p = search(corrupt_copy(sq, "b40", 40), "--verify", "size")
check(p.returncode == 1 and "index.faiss" in p.stderr and "scalar quantizer type" in p.stderr,
      "byte 40, --verify size: refused at open naming the quantizer type (exit %d): %s"
      % (p.returncode, p.stderr.strip()[-200:]))
for how in ("null", "missing"):
    p = search(corrupt_copy(sq, "b40n", 40, checksum=how))
    check(p.returncode == 1 and "no checksum" in p.stderr and "--verify none" in p.stderr,
          "checksum %s: refused, naming --verify none (exit %d): %s" % (how, p.returncode, p.stderr.strip()[-200:]))
    p = search(corrupt_copy(sq, "b40n", 40, checksum=how), "--verify", "none")
    check(p.returncode == 1 and "scalar quantizer type" in p.stderr,
          "checksum %s, --verify none: the header is still checked (exit %d)" % (how, p.returncode))
intact_null = corrupt_copy(sq, "nullsum", None, checksum="null")
p = search(intact_null, "--verify", "none")
check(p.returncode == 0 and len(p.stdout.splitlines()) == 10, "intact, checksum null, --verify none: searched (exit %d)"
      % p.returncode)

# ---- the sweep (in one process: tests/index/corrupt_sweep.c) ----
small = rng.standard_normal((300, 32)).astype(np.float32)
t_sweep = time.time()
for factory in ("SQfp16", "HNSW8,SQfp16", "IVF4,Flat", "IVF4,PQ8x4", "PCA16,SQfp16"):
    src = build("sw-" + factory.replace(",", "_"), factory, small)
    size = os.path.getsize(os.path.join(src, "index.faiss"))
    work = corrupt_copy(src, "sweep")
    positions = list(range(min(160, size))) + list(range(160, size, max(1, size // 80)))
    try:
        p = subprocess.run([SWEEP, src, work, *map(str, positions)], capture_output=True, text=True, timeout=240)
        rc, out = p.returncode, p.stdout
    except subprocess.TimeoutExpired as e:
        rc, out = "timeout", (e.stdout or b"").decode()
    lines = out.splitlines()
    outcome, slow, unnamed = {}, [], []
    for ln in lines:
        f = ln.split(" ", 3)
        if len(f) < 3:
            continue
        outcome.setdefault(f[1], []).append(int(f[0]))
        if float(f[2]) > 5000:  # a size field read as terabytes is allocated and zeroed first
            slow.append(int(f[0]))
        if f[1] == "refused" and "index.faiss" not in ln:
            unnamed.append(int(f[0]))
    last = lines[-1] if lines else ""
    check(rc == 0 and len(lines) == len(positions) and not slow and not unnamed,
          "%s: %d flipped bytes: %d refused at open, %d opened and searched, %d search errors; exit %s%s, "
          "slow %s, unnamed %s" % (factory, len(positions), len(outcome.get("refused", [])),
                                   len(outcome.get("open", [])), len(outcome.get("search-error", [])), rc,
                                   "" if rc == 0 else " after: " + last, slow[:5], unnamed[:5]))
print("sweep: %.1f s" % (time.time() - t_sweep))

# ---- the server ----


servers = []


def serve(index, *extra):
    """(exit code or None if it started, stderr or the base URL, process)."""
    log = open(os.path.join(tmp, "serve.log"), "w+")  # a file: a full pipe would block the server
    p = subprocess.Popen([QAC, "serve", "--port", "0", "--index", index, "--allow-model-mismatch", *extra],
                         stdout=subprocess.PIPE, stderr=log, text=True)
    servers.append(p)
    line = p.stdout.readline()
    m = re.search(r"listening on (http://\S+)", line)
    if m:
        return None, m.group(1), p
    p.wait(60)
    log.seek(0)
    return p.returncode, log.read(), p


def stop(p):
    p.terminate()
    try:
        return p.wait(60)
    except subprocess.TimeoutExpired:
        p.kill()
        return p.wait()



rc, err, _ = serve(corrupt_copy(sq, "b40", 40), "--verify", "size")
check(rc == 1 and "index.faiss" in err and "scalar quantizer type" in err,
      "serve --verify size on byte 40: exit %s naming the field: %s" % (rc, err.strip()[-200:]))
rc, err, _ = serve(corrupt_copy(sq, "b40n", 40, checksum="null"))
check(rc == 1 and "--verify none" in err, "serve, checksum null: exit %s naming --verify none" % rc)
rc, base, proc = serve(intact_null, "--verify", "none")
if check(rc is None, "serve --verify none on an intact index without a checksum starts"):
    req = urllib.request.Request(base + "/search", data=json.dumps({"query": "boundary layer", "k": 3}).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=120) as r:
        body = json.loads(r.read())
    check(r.status == 200 and len(body["results"][0]) == 3, "and answers /search")
# a flipped code byte: nothing short of the checksum sees it; the server must still answer
codes = corrupt_copy(sq, "code", os.path.getsize(os.path.join(sq, "index.faiss")) - 7, checksum="null")
rc, base, proc = serve(codes, "--verify", "none")
if check(rc is None, "serve --verify none with a flipped code byte starts"):
    req = urllib.request.Request(base + "/search", data=json.dumps({"query": "wing", "k": 200}).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=120) as r:
        check(r.status == 200, "and answers /search (status %d)" % r.status)
for p in servers:  # every server this test started ends here, started or not, passing or not
    if p.poll() is None:
        check(stop(p) == 0, "a started server stops cleanly on SIGTERM")

finish()
