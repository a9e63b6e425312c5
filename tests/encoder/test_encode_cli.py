"""qac encode end to end: TSV and JSONL in, .npy (read by numpy.load) and
.qmat out, rows in input order and equal to encoding one text at a time,
crash-safe output and clear errors. Needs numpy only."""
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

QAC = os.environ["QAC_BIN"]
failed = 0


def check(cond, what):
    global failed
    print(("ok   " if cond else "FAIL ") + what)
    failed += not cond


def run(*args):
    return subprocess.run([QAC, "encode", *args], capture_output=True, text=True)


def read_qmat(path):
    b = open(path, "rb").read()
    magic, ver, dtype, count, dim, _ = struct.unpack("<8sIIQII", b[:32])
    assert magic == b"QACMAT\0\0" and ver == 1 and dtype == 0, (magic, ver, dtype)
    assert len(b) == 32 + 4 * count * dim
    return np.frombuffer(b[32:], dtype="<f4").reshape(count, dim)


with tempfile.TemporaryDirectory() as d:
    texts = ["wing in a slipstream", "", "boundary layer transition at high mach numbers " * 30,
             "shock waves", "wing in a slipstream", "heat transfer"]
    tsv = os.path.join(d, "c.tsv")
    with open(tsv, "w") as f:
        for i, t in enumerate(texts):
            f.write(f"p{i}\t{t}\n")
    jsonl = os.path.join(d, "c.jsonl")
    with open(jsonl, "w") as f:
        for i, t in enumerate(texts):
            f.write('{"_id": "j%d", "title": "", "text": "%s"}\n' % (i, t))

    npy, qmat, ids = (os.path.join(d, n) for n in ("a.npy", "b.qmat", "ids.txt"))
    r = run("--input", tsv, "--output", npy, "--ids", ids, "--threads", "2", "--device", "cpu")
    check(r.returncode == 0, "encode TSV to .npy: " + r.stderr.strip()[-200:])
    a = np.load(npy)
    check(a.shape == (6, 384) and a.dtype == np.float32, f"numpy.load reads {a.shape} {a.dtype}")
    check(open(ids).read().split() == [f"p{i}" for i in range(6)], "ids file in row order")
    check(np.allclose(np.linalg.norm(a, axis=1), 1, atol=1e-5), "rows are L2-normalised (model config)")
    # the encoder is batch-invariant: equal inputs give equal bits, in any batch
    check(np.array_equal(a[0], a[4]), "duplicate texts give the same rows, bit for bit")

    r = run("--input", jsonl, "--output", qmat, "--batch", "2", "--threads", "1", "--device", "cpu")
    check(r.returncode == 0, "encode JSONL to .qmat: " + r.stderr.strip()[-200:])
    b = read_qmat(qmat)
    check(b.shape == a.shape and np.array_equal(a, b),
          f"JSONL/.qmat/batch 2 equals TSV/.npy bit for bit (max diff {float(np.abs(a - b).max()):.2e})")

    # one text at a time gives the same rows (no cross-talk through padding)
    for i in (2, 3):
        one = os.path.join(d, "one.tsv")
        with open(one, "w") as f:
            f.write(f"x\t{texts[i]}\n")
        r = run("--input", one, "--output", os.path.join(d, "one.npy"), "--device", "cpu")
        v = np.load(os.path.join(d, "one.npy"))
        check(np.array_equal(v[0], a[i]), f"row {i} alone equals its batched row bit for bit")

    # queries, like passages, default to the model's limit: nothing is cut unseen
    r = run("--input", tsv, "--output", os.path.join(d, "q.npy"), "--kind", "query", "--device", "cpu")
    q = np.load(os.path.join(d, "q.npy"))
    check(r.returncode == 0 and np.array_equal(q, a), "--kind query encodes to the model's limit by default")
    # an explicit --max-len cuts, and the summary counts the cut texts
    env = dict(os.environ)
    env.pop("QAC_QUIET", None)
    r = subprocess.run([QAC, "encode", "--input", tsv, "--output", os.path.join(d, "q.npy"), "--kind", "query",
                        "--max-len", "32", "--device", "cpu"], capture_output=True, text=True, env=env)
    q = np.load(os.path.join(d, "q.npy"))
    check(r.returncode == 0 and np.array_equal(q[3], a[3]) and float(np.abs(q[2] - a[2]).max()) > 1e-3,
          "--max-len 32 cuts the long text")
    check("1 cut at 32 tokens" in r.stderr, "the summary counts the cut text: " + r.stderr.strip()[-200:])

    # errors: missing input, bad option, malformed JSONL; no output left behind
    out = os.path.join(d, "never.npy")
    r = run("--input", os.path.join(d, "missing.tsv"), "--output", out)
    check(r.returncode == 1 and "missing.tsv" in r.stderr and not os.path.exists(out), "missing input is an error")
    r = run("--input", tsv, "--output", out, "--max-len", "-3")
    check(r.returncode == 2 and not os.path.exists(out), "out-of-range --max-len is a usage error")
    bad = os.path.join(d, "bad.jsonl")
    with open(bad, "w") as f:
        f.write('{"_id": "a", "text": "ok"}\n{"_id": "b", "text": \n')
    r = run("--input", bad, "--output", out)
    check(r.returncode == 1 and not os.path.exists(out) and not [n for n in os.listdir(d) if ".tmp." in n],
          "malformed JSONL fails and leaves no file: " + r.stderr.strip()[-120:])

    # the CPU path from the configuration table: every path the CPU has gives
    # the same bits; an unknown name is a usage error naming the variable
    short = os.path.join(d, "short.tsv")
    with open(short, "w") as f:
        f.write(f"a\t{texts[3]}\nb\t{texts[5]}\n")
    paths = [p for p in ("generic", "avx2", "avx512")
             if run("--input", short, "--output", os.path.join(d, f"isa-{p}.npy"), "--device", "cpu",
                    "--cpu-isa", p).returncode == 0]
    same = all(np.array_equal(np.load(os.path.join(d, f"isa-{p}.npy")), a[[3, 5]]) for p in paths)
    check("generic" in paths and same, f"--cpu-isa {'/'.join(paths)}: the same bits as the default path")
    env = dict(os.environ, QAC_CPU_ISA="avx1024")
    r = subprocess.run([QAC, "encode", "--input", tsv, "--output", out], capture_output=True, text=True, env=env)
    check(r.returncode == 2 and "QAC_CPU_ISA" in r.stderr and "avx1024" in r.stderr and not os.path.exists(out),
          "QAC_CPU_ISA=avx1024 is a usage error: " + r.stderr.strip().splitlines()[0][:120])
    r = run("--input", tsv, "--output", out, "--cpu-isa", "sse2")
    check(r.returncode == 2 and "--cpu-isa" in r.stderr, "--cpu-isa sse2 is a usage error")

print("FAILED" if failed else "all passed")
sys.exit(1 if failed else 0)
