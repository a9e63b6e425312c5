#!/usr/bin/env python3
"""Accuracy of the int8 CPU encoder against fp32, next to ONNX Runtime's int8
on the same model (all-MiniLM-L6-v2):

  - the cosine of each text's int8 vector to its fp32 vector (qac: `qac
    encode --dtype int8` against `--dtype fp32`; ONNX Runtime: its dynamic
    int8 model against its fp32 export), on Cranfield's passages and queries
    and on the Debian texts and titles;
  - retrieval: Cranfield nDCG@10 (225 queries, its relevance judgements) and
    Debian known-item MRR@10 (each sampled package's one-line summary as the
    query, the package's description the one relevant document), every run
    an exact inner-product search over that side's vectors, written as a
    TREC run and scored by `qac eval` (trec_eval's measures, as
    pytrec_eval computes them): ndcg_cut.10, and recip_rank over the top 10.

The fp32 and int8 sides of each system see the same texts, so each system's
drop is its own int8 against its own fp32. Passages are cut at 128 tokens,
queries at 32. ONNX Runtime runs through bench/encode_int8/ref_backends.py
in its own environment (that file has the install line).

    .venv/bin/python3 bench/int8_accuracy/run.py --build build \\
        --ref-python ~/venv-cpubench/bin/python [--debian 10000]

--debian N samples every k-th of the 58k Debian packages so that about N
remain (0: all of them)."""
import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "encode_int8"))
from run import read_cranfield, shared_data  # noqa: E402


def read_cran_queries(path):
    """cran.qry: .I n, .W, text lines; qids are 1..225 in file order (as cranqrel numbers them)."""
    out, cur = [], None
    for raw in open(path, encoding="utf-8", errors="replace"):
        if raw.startswith(".I"):
            if cur is not None:
                out.append(" ".join(cur))
            cur = []
        elif raw.startswith(".W"):
            continue
        elif cur is not None and raw.strip():
            cur.append(raw.strip())
    if cur is not None:
        out.append(" ".join(cur))
    return [(str(i + 1), t) for i, t in enumerate(out)]


def write_tsv(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for i, t in rows:
            f.write(f"{i}\t{' '.join(t.split())}\n")


def cos(a, b):
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def write_run(path, qids, q, dids, d, k):
    """The top k of each query by inner product (float32 scores, as a Flat index gives them)."""
    with open(path, "w") as f:
        for b in range(0, len(qids), 1000):
            s = q[b:b + 1000] @ d.T
            part = np.argpartition(-s, k - 1, axis=1)[:, :k]
            for row, qi in enumerate(qids[b:b + 1000]):
                top = part[row][np.argsort(-s[row, part[row]], kind="stable")]
                for r, j in enumerate(top):
                    f.write(f"{qi} Q0 {dids[j]} {r + 1} {float(s[row, j]):.7f} x\n")


def qac_eval(build, qrels, run, measure, depth=None):
    cmd = [os.path.join(build, "qac"), "eval", "--qrels", qrels, "--run", run, "-m", measure]
    if depth:
        cmd += ["-M", str(depth)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return float(out.split()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--ref-python", default=os.path.expanduser("~/venv-cpubench/bin/python"))
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/qac-bench-int8"))
    ap.add_argument("--data")
    ap.add_argument("--model", default=os.path.expanduser("~/.local/share/qac/models/all-MiniLM-L6-v2"))
    ap.add_argument("--debian", type=int, default=10000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work")
    args = ap.parse_args()
    data = args.data or shared_data(args.build)
    w = args.work or tempfile.mkdtemp(prefix="qac-int8-acc-")
    os.makedirs(w, exist_ok=True)
    # the texts, once: Cranfield and the Debian sample, as TSV (qac) and one text a line (the references)
    cran = list(enumerate(read_cranfield(os.path.join(data, "cranfield", "cran.all.1400")), 1))
    cq = read_cran_queries(os.path.join(data, "cranfield", "cran.qry"))
    pk = [json.loads(l) for l in gzip.open(os.path.join(data, "debian-packages", "packages.jsonl.gz"), "rt")]
    step = max(1, len(pk) // args.debian) if args.debian else 1
    pk = pk[::step]
    deb = [(p["id"], p["text"]) for p in pk]
    dq = [(p["id"], p["title"]) for p in pk]
    with open(os.path.join(w, "debian.qrels"), "w") as f:
        for p in pk:
            f.write(f"{p['id']} 0 {p['id']} 1\n")
    sets = {"cran_p": (cran, 128), "cran_q": (cq, 32), "deb_p": (deb, 128), "deb_q": (dq, 32)}
    vec = {}
    for name, (rows, ml) in sets.items():
        tsv, txt = os.path.join(w, name + ".tsv"), os.path.join(w, name + ".txt")
        write_tsv(tsv, [(str(i), t) for i, t in rows])
        with open(txt, "w", encoding="utf-8") as f:
            f.writelines(" ".join(t.split()) + "\n" for _, t in rows)
        kind = "query" if name.endswith("_q") else "passage"
        for dt in ("fp32", "int8"):
            out = os.path.join(w, f"qac_{dt}_{name}.npy")
            subprocess.run([os.path.join(args.build, "qac"), "encode", "--input", tsv, "--output", out, "--kind", kind,
                            "--dtype", dt, "--device", "cpu", "--threads", str(args.threads), "--max-len", str(ml)],
                           check=True, capture_output=True)
            vec[("qac", dt, name)] = np.load(out)
            out = os.path.join(w, f"onnx_{dt}_{name}.npy")
            subprocess.run([args.ref_python, os.path.join(ROOT, "bench", "encode_int8", "ref_backends.py"), "--model",
                            args.model, "--backend", "onnx", "--dtype", dt, "--texts", txt, "--runs", f"{ml}:64:0",
                            "--threads", str(args.threads), "--cache", args.cache, "--dump", out],
                           check=True, capture_output=True)
            vec[("onnx", dt, name)] = np.load(out)
        print(f"encoded {name} ({len(rows)} texts)", file=sys.stderr, flush=True)
    print(f"all-MiniLM-L6-v2; Cranfield {len(cran)} passages, {len(cq)} queries; Debian {len(deb)} packages "
          f"(every {step}th)")
    print("\ncosine of int8 to fp32 vectors (mean / min)")
    for sysname in ("qac", "onnx"):
        cells = []
        for name in sets:
            c = cos(vec[(sysname, "fp32", name)], vec[(sysname, "int8", name)])
            cells.append(f"{name} {c.mean():.5f} / {c.min():.5f}")
        print(f"  {sysname:<5} " + "  ".join(cells))
    print("\nretrieval (qac eval): Cranfield nDCG@10, Debian known-item MRR@10")
    cqrels = os.path.join(data, "cranfield", "cranqrel")
    res = {}
    for sysname in ("qac", "onnx"):
        for dt in ("fp32", "int8"):
            run_c = os.path.join(w, f"{sysname}_{dt}_cran.run")
            write_run(run_c, [q for q, _ in cq], vec[(sysname, dt, "cran_q")], [str(i) for i, _ in cran],
                      vec[(sysname, dt, "cran_p")], 100)
            run_d = os.path.join(w, f"{sysname}_{dt}_deb.run")
            write_run(run_d, [q for q, _ in dq], vec[(sysname, dt, "deb_q")], [i for i, _ in deb],
                      vec[(sysname, dt, "deb_p")], 10)
            res[(sysname, dt)] = (qac_eval(args.build, cqrels, run_c, "ndcg_cut.10"),
                                  qac_eval(args.build, os.path.join(w, "debian.qrels"), run_d, "recip_rank", 10))
        f, i = res[(sysname, "fp32")], res[(sysname, "int8")]
        print(f"  {sysname:<5} fp32 nDCG@10 {f[0]:.4f} MRR@10 {f[1]:.4f} | int8 nDCG@10 {i[0]:.4f} MRR@10 {i[1]:.4f} "
              f"| drop {f[0] - i[0]:+.4f} {f[1] - i[1]:+.4f}")
    print(f"\nwork files: {w}")


if __name__ == "__main__":
    main()
