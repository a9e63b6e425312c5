"""Helpers for the index tests: read our shard format independently of the
C code, run the qac binary and the search driver."""
import json
import os
import struct
import subprocess
import sys

import numpy as np

QAC = os.environ.get("QAC_BIN", "qac")


def read_shard(path):
    """-> (vectors fp32 [n, d], docids, offsets); checks magic and sizes."""
    with open(path, "rb") as f:
        data = f.read()
    magic, ver, dtype, n, d, _, first, _ = struct.unpack_from("<8sIIQIIQQ", data, 0)
    assert magic == b"QACEMB\0\0" and ver == 1, path
    pos = 48
    es = 2 if dtype == 1 else 4
    vec = np.frombuffer(data, dtype="<f2" if dtype == 1 else "<f4", count=n * d, offset=pos)
    pos += n * d * es
    offs = np.frombuffer(data, dtype="<u8", count=n, offset=pos)
    pos += 16 * n
    lens = np.frombuffer(data, dtype="<u4", count=n, offset=pos)
    pos += 4 * n
    ids = []
    for ln in lens:
        ids.append(data[pos:pos + ln].decode())
        pos += ln
    assert pos == len(data), path
    return vec.reshape(n, d).astype(np.float32), ids, offs


def read_index_vectors(d):
    man = json.load(open(os.path.join(d, "manifest.json")))
    vs, ids = [], []
    for sh in man["shards"]:
        v, i, _ = read_shard(os.path.join(d, sh["file"]))
        vs.append(v)
        ids += i
    return np.concatenate(vs), ids, man


def run(args, check=True, **kw):
    p = subprocess.run([QAC] + args, capture_output=True, text=True, **kw)
    if check and p.returncode != 0:
        sys.exit("FAIL: qac %s -> %d\n%s" % (" ".join(args), p.returncode, p.stderr))
    return p


def tool_search(tool, index_dir, queries, k, tmp, param=None):
    qpath = os.path.join(tmp, "q.f32")
    np.ascontiguousarray(queries, dtype=np.float32).tofile(qpath)
    out = os.path.join(tmp, "res")
    args = [tool, index_dir, qpath, str(len(queries)), str(k), out] + ([param] if param else [])
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("FAIL: %s\n%s" % (" ".join(args), p.stderr))
    rows = np.fromfile(out + ".rows", dtype=np.int64).reshape(len(queries), k)
    scores = np.fromfile(out + ".scores", dtype=np.float32).reshape(len(queries), k)
    docids = open(out + ".docids").read().split("\n")[:-1]
    return rows, scores, docids


def exact_topk(x, q, k):
    s = q @ x.T
    idx = np.argsort(-s, axis=1, kind="stable")[:, :k]
    return idx, np.take_along_axis(s, idx, axis=1)


def compare_exact(rows, scores, x, q, k, tol=1e-5):
    """Identical ids up to exact ties; scores within tol. -> max diff."""
    ids, ref = exact_topk(x, q, k)
    maxdiff = float(np.abs(scores - ref).max())
    for i in range(len(q)):
        if not np.array_equal(rows[i], ids[i]):
            # only allowed where the scores tie
            for j in np.nonzero(rows[i] != ids[i])[0]:
                s_ours = float(q[i] @ x[rows[i][j]])
                assert abs(s_ours - ref[i][j]) <= tol, (i, j, rows[i][j], ids[i][j], s_ours, ref[i][j])
    assert maxdiff <= tol, maxdiff
    return maxdiff
