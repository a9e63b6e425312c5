"""BM25 benchmark: qac against bm25s (same k1/b, Lucene idf) in the same run.

    python3 bench/bm25/bench_bm25.py --qac BUILD/qac [--docs 1000000] [--cranfield DIR]

Measures index build rate (docs/s) and single-thread search rate (queries/s,
top --k) on Cranfield and on a synthetic corpus generated here: a Zipf
vocabulary (200k words), passage lengths around 60 terms, 1000 queries of
2-8 mid-frequency terms. qac times are wall-clock of the CLI (index build
includes reading the TSV and writing the index; search is the in-process
loop that qac reports, the file reading excluded like bm25s's retrieve).
bm25s times include its tokenisation (stopwords, no stemmer: qac also
stems, so qac does more work per token). Prints the qac/bm25s ratios.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

STOP = {"a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no", "not",
        "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to", "was",
        "will", "with"}


def synthetic(path_docs, path_queries, n_docs, seed=7, vocab=200_000, n_queries=1000):
    rng = np.random.default_rng(seed)
    words, seen = [], set()
    while len(words) < vocab:
        lens = rng.integers(3, 11, vocab)
        chars = rng.integers(97, 123, (vocab, 10), dtype=np.uint8)
        for row, l in zip(chars, lens):
            w = row[:l].tobytes().decode()
            if w not in seen and w not in STOP:
                seen.add(w)
                words.append(w)
    words = words[:vocab]
    p = 1.0 / (np.arange(vocab) + 2.7) ** 1.07
    cdf = np.cumsum(p / p.sum())
    lengths = np.clip(rng.normal(60, 20, n_docs).astype(int), 5, 200)
    with open(path_docs, "w") as f:
        chunk = 50_000
        for start in range(0, n_docs, chunk):
            ls = lengths[start:start + chunk]
            ids = np.minimum(np.searchsorted(cdf, rng.random(ls.sum())), vocab - 1)
            toks = [words[i] for i in ids.tolist()]
            pos = 0
            lines = []
            for i, l in enumerate(ls):
                lines.append(f"{start + i}\t{' '.join(toks[pos:pos + l])}\n")
                pos += l
            f.writelines(lines)
    with open(path_queries, "w") as f:
        for q in range(n_queries):
            ids = np.searchsorted(cdf, rng.uniform(cdf[50], 1.0, rng.integers(2, 9)))
            f.write(f"q{q}\t{' '.join(words[i] for i in np.minimum(ids, vocab - 1).tolist())}\n")


def read_tsv(path):
    ids, texts = [], []
    with open(path) as f:
        for line in f:
            i, _, t = line.rstrip("\n").partition("\t")
            ids.append(i)
            texts.append(t)
    return ids, texts


def read_smart(path, fields=("T", "W")):
    recs, cur, field = [], None, None
    with open(path) as f:
        for line in f:
            if line.startswith(".I"):
                cur = []
                recs.append(cur)
                field = None
            elif line.startswith(".") and len(line.strip()) == 2:
                field = line[1]
            elif field in fields:
                cur.append(line.strip())
    return [str(i + 1) for i in range(len(recs))], [" ".join(r) for r in recs]


def run_qac(qac, args):
    t = time.perf_counter()
    p = subprocess.run([qac, *args], capture_output=True, text=True, env={**os.environ, "QAC_QUIET": "0"})
    wall = time.perf_counter() - t
    if p.returncode != 0:
        sys.exit(f"qac {' '.join(args)} failed:\n{p.stderr}")
    return wall, p.stderr


def bench(name, qac, corpus, queries, doc_ids, doc_texts, q_texts, k, tmp):
    import bm25s

    idx = os.path.join(tmp, name + "-idx")
    run = os.path.join(tmp, name + ".run")
    n, nq = len(doc_ids), len(q_texts)
    build_s, _ = run_qac(qac, ["bm25", "build", "--corpus", corpus, "--out", idx])
    search_wall, err = run_qac(qac, ["bm25", "search", "--index", idx, "--queries", queries, "--run", run,
                                     "--k", str(k), "--threads", "1"])
    m = re.search(r"queries in ([0-9.]+) s", err)
    search_s = float(m.group(1)) if m else search_wall

    t = time.perf_counter()
    tok = bm25s.tokenize(doc_texts, stopwords="en", show_progress=False)
    ret = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
    ret.index(tok, show_progress=False)
    bm_build = time.perf_counter() - t
    t = time.perf_counter()
    qtok = bm25s.tokenize(q_texts, stopwords="en", show_progress=False)
    ret.retrieve(qtok, k=min(k, n), show_progress=False, n_threads=1)
    bm_search = time.perf_counter() - t

    print(f"\n== {name}: {n} docs, {nq} queries, top {k}")
    print(f"{'':10s} {'build docs/s':>14s} {'search q/s':>12s}")
    print(f"{'qac':10s} {n / build_s:14.0f} {nq / search_s:12.1f}   (search incl. open+read: {nq / search_wall:.1f} q/s)")
    print(f"{'bm25s':10s} {n / bm_build:14.0f} {nq / bm_search:12.1f}")
    print(f"{'ratio':10s} {bm_build / build_s:13.2f}x {bm_search / search_s:11.2f}x   (qac speed / bm25s speed)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qac", required=True)
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--k", type=int, default=1000)
    shared = os.environ.get("QAC_SHARED_DATA") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                               "..", "shared", "data")
    ap.add_argument("--cranfield", default=os.path.join(shared, "cranfield"))
    ap.add_argument("--tmp", default=None, help="working directory (default: a temporary one)")
    a = ap.parse_args()
    import bm25s

    print(f"bm25s {bm25s.__version__}, numpy {np.__version__}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(dir=a.tmp) as tmp:
        cran = os.path.join(a.cranfield, "cran.all.1400")
        if os.path.exists(cran):
            qry = os.path.join(a.cranfield, "cran.qry")
            ids, texts = read_smart(cran)
            _, qtexts = read_smart(qry, ("W",))
            bench("cranfield", a.qac, cran, qry, ids, texts, qtexts, a.k, tmp)
        else:
            print(f"(no Cranfield at {a.cranfield}: skipped)")
        docs, queries = os.path.join(tmp, "syn.tsv"), os.path.join(tmp, "syn-queries.tsv")
        t = time.perf_counter()
        synthetic(docs, queries, a.docs)
        print(f"\n(generated {a.docs} synthetic passages in {time.perf_counter() - t:.1f} s)")
        ids, texts = read_tsv(docs)
        _, qtexts = read_tsv(queries)
        bench(f"synthetic-{a.docs}", a.qac, docs, queries, ids, texts, qtexts, a.k, tmp)


if __name__ == "__main__":
    main()
