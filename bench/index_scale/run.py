#!/usr/bin/env python3
"""Index-scale benchmark: qac index build/search vs Python faiss-cpu with the
same factory, in the same run, on synthetic clustered vectors.

Vectors: a gaussian mixture around --centroids centres, L2-normalised,
generated in chunks straight into a .npy memmap (never two fp32 copies).
Ground truth: exact inner-product top-k for --nq queries, computed blockwise.
For each factory both tools build (qac: `qac index build --vectors`, shards in
fp16; faiss: index_factory + train on the same evenly spaced sample + add in
chunks + write_index), then search all queries in one batch. Reported: build
time, index file size, peak RSS of the building process, queries/s, recall@k,
and qac/faiss ratios.

Full scale (run on a quiet machine; needs ~40 GB disk, < 24 GiB RAM):
  python3 bench/index_scale/run.py --build-dir build --workdir /data/qac-bench \
      --n 8800000 --dim 384 --factories "SQfp16;IVF4096,PQ32" \
      --flat-n 1000000 --flat-dim 768
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np


def gen(path, n, dim, centroids, seed, chunk=200_000):
    if os.path.exists(path):
        a = np.load(path, mmap_mode="r")
        if a.shape == (n, dim):
            return
    rng = np.random.default_rng(seed)
    cent = np.random.default_rng(1234).normal(size=(centroids, dim)).astype(np.float32)
    out = np.lib.format.open_memmap(path + ".part", mode="w+", dtype=np.float32, shape=(n, dim))
    for s in range(0, n, chunk):
        m = min(chunk, n - s)
        x = cent[rng.integers(0, centroids, m)] + 0.6 * rng.normal(size=(m, dim)).astype(np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        out[s:s + m] = x
    out.flush()
    del out
    os.replace(path + ".part", path)


def ground_truth(xpath, q, k, block=100_000):
    x = np.load(xpath, mmap_mode="r")
    best_s = np.full((len(q), k), -np.inf, dtype=np.float32)
    best_i = np.full((len(q), k), -1, dtype=np.int64)
    for s in range(0, len(x), block):
        sc = q @ np.asarray(x[s:s + block]).T
        top = np.argpartition(-sc, min(k, sc.shape[1] - 1), axis=1)[:, :k]
        cand_s = np.concatenate([best_s, np.take_along_axis(sc, top, 1)], 1)
        cand_i = np.concatenate([best_i, top + s], 1)
        o = np.argsort(-cand_s, axis=1, kind="stable")[:, :k]
        best_s, best_i = np.take_along_axis(cand_s, o, 1), np.take_along_axis(cand_i, o, 1)
    return best_i


def run_with_rss(cmd):
    t0 = time.time()
    pid = os.fork()
    if pid == 0:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.execvp(cmd[0], cmd)
    _, status, ru = os.wait4(pid, 0)
    if status != 0:
        sys.exit("FAILED (%d): %s" % (status, " ".join(cmd)))
    return time.time() - t0, ru.ru_maxrss / 1024.0


def faiss_build(xpath, factory, train_size, out):
    """Child mode: the same factory through Python faiss."""
    import faiss
    x = np.load(xpath, mmap_mode="r")
    n, d = x.shape
    ix = faiss.index_factory(d, factory, faiss.METRIC_INNER_PRODUCT)
    if not ix.is_trained:
        rows = (np.arange(train_size, dtype=np.int64) * n) // train_size
        ix.train(np.ascontiguousarray(x[rows]))
    for s in range(0, n, 65536):
        ix.add(np.ascontiguousarray(x[s:s + 65536]))
    faiss.write_index(ix, out)


def faiss_search(index_path, qpath, k, param, out):
    import faiss
    ix = faiss.read_index(index_path)
    if param:
        name, v = param.split("=")
        faiss.ParameterSpace().set_index_parameter(ix, name, float(v))
    q = np.load(qpath)
    t0 = time.time()
    _, idx = ix.search(q, k)
    print("seconds %.6f" % (time.time() - t0))
    np.save(out, idx)


def train_size_for(factory, n):
    import re
    m = re.search(r"IVF(\d+)", factory)
    return min(n, 256 * int(m.group(1)) if m else 100_000)


def bench(args, name, n, dim, factories):
    qac = os.path.join(args.build_dir, "qac")
    tool = os.path.join(args.build_dir, "bench", "index_scale", "qac_bench_index_search")
    w = os.path.join(args.workdir, name)
    os.makedirs(w, exist_ok=True)
    xpath, qpath = os.path.join(w, "x.npy"), os.path.join(w, "q.npy")
    t0 = time.time()
    gen(xpath, n, dim, args.centroids, 1)
    gen(qpath, args.nq, dim, args.centroids, 2)
    q = np.load(qpath)
    q.tofile(os.path.join(w, "q.f32"))
    print("[%s] %d x %d vectors ready (%.0f s)" % (name, n, dim, time.time() - t0), flush=True)
    t0 = time.time()
    gt = ground_truth(xpath, q, args.k)
    print("[%s] exact ground truth for %d queries (%.0f s)" % (name, args.nq, time.time() - t0), flush=True)
    rows = []
    for factory in factories:
        param = ("nprobe=%d" % args.nprobe) if "IVF" in factory else ("efSearch=%d" % args.ef_search
                                                                       if "HNSW" in factory else None)
        tag = factory.replace(",", "_")
        d_qac = os.path.join(w, "qac_" + tag)
        ts = train_size_for(factory, n)
        b_s, b_rss = run_with_rss([qac, "index", "build", "--vectors", xpath, "--ids", "sequential", "--out", d_qac, "--factory", factory,
                                   "--dtype", "fp16", "--shard-size", "500000", "--train-size", str(ts)])
        out = subprocess.run([tool, d_qac, os.path.join(w, "q.f32"), str(args.nq), str(args.k),
                              os.path.join(w, "qac.rows")] + ([param] if param else []),
                             capture_output=True, text=True, check=True).stdout
        s_s = float(out.split("seconds")[1])
        ids = np.fromfile(os.path.join(w, "qac.rows"), dtype=np.int64).reshape(args.nq, args.k)
        r_qac = np.mean([len(set(a) & set(b)) / args.k for a, b in zip(ids, gt)])
        size_qac = os.path.getsize(os.path.join(d_qac, "index.faiss")) / 2**20
        f_path = os.path.join(w, "faiss_%s.index" % tag)
        fb_s, fb_rss = run_with_rss([sys.executable, __file__, "--faiss-build", xpath, factory, str(ts), f_path])
        out = subprocess.run([sys.executable, __file__, "--faiss-search", f_path, qpath, str(args.k), param or "",
                              os.path.join(w, "faiss_ids.npy")], capture_output=True, text=True, check=True).stdout
        fs_s = float(out.split("seconds")[1])
        fids = np.load(os.path.join(w, "faiss_ids.npy"))
        r_f = np.mean([len(set(a) & set(b)) / args.k for a, b in zip(fids, gt)])
        size_f = os.path.getsize(f_path) / 2**20
        rows.append((name, factory, "qac", b_s, size_qac, b_rss, args.nq / s_s, r_qac))
        rows.append((name, factory, "faiss-py", fb_s, size_f, fb_rss, args.nq / fs_s, r_f))
        print("[%s] %-14s qac: build %.0f s, %.0f MiB, RSS %.0f MiB, %.0f q/s, recall@%d %.4f | faiss-py: build %.0f s, "
              "%.0f MiB, RSS %.0f MiB, %.0f q/s, recall %.4f | ratio build %.2f, q/s %.2f"
              % (name, factory, b_s, size_qac, b_rss, args.nq / s_s, args.k, r_qac, fb_s, size_f, fb_rss,
                 args.nq / fs_s, r_f, b_s / fb_s, (args.nq / s_s) / (args.nq / fs_s)), flush=True)
        if not args.keep:
            os.remove(f_path)
    return rows


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--faiss-build":
        return faiss_build(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    if len(sys.argv) > 1 and sys.argv[1] == "--faiss-search":
        return faiss_search(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", required=True, help="CMake build directory with qac and the bench driver")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--n", type=int, default=8_800_000, help="main set size (0 = skip it)")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--factories", default="SQfp16;IVF4096,PQ32", help="';'-separated FAISS factory strings")
    ap.add_argument("--flat-n", type=int, default=1_000_000, help="Flat benchmark size (0 = skip)")
    ap.add_argument("--flat-dim", type=int, default=768)
    ap.add_argument("--centroids", type=int, default=4096)
    ap.add_argument("--nq", type=int, default=1000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--nprobe", type=int, default=32)
    ap.add_argument("--ef-search", type=int, default=128)
    ap.add_argument("--keep", action="store_true", help="keep the Python faiss index files")
    args = ap.parse_args()
    factories = [f for f in args.factories.split(";") if f.strip()]
    rows = bench(args, "main", args.n, args.dim, factories) if args.n and factories else []
    if args.flat_n:
        rows += bench(args, "flat", args.flat_n, args.flat_dim, ["Flat"])
    print("\n| set | factory | tool | build s | index MiB | peak RSS MiB | queries/s | recall@%d |" % args.k)
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %s | %s | %.1f | %.0f | %.0f | %.0f | %.4f |" % r)


if __name__ == "__main__":
    main()
