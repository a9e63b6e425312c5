"""qac export into PostgreSQL + pgvector, against what a user would
otherwise write: pgvector-python's own bulk-loading example (psycopg 3
binary COPY, `copy.set_types([... 'vector'])` and `copy.write_row` a row
at a time; pgvector-python examples/loading/example.py), on the same
server, rows and table in the same run, with the server's own ceiling (the
same rows COPYed from a binary file on its disk, no client). Then pgvector's HNSW (and IVFFlat)
recall@10 against the exact top-10 (qac's exact search) over a range of
ef_search (probes), on the Debian package descriptions and on Cranfield.

    python3 bench/pgvector/run.py [--workdir DIR] [--synthetic 500000] [--rounds 3] [--queries 1000]

Data: the Debian package descriptions (../shared/data/debian-packages,
58,294 passages) encoded by `qac index build` with the default model at
128 tokens (DIR/deb is reused when present: the build resumes or returns at
once), queries = one package title in 58; Cranfield (1,400 passages, the
default model at its default 256 tokens, 225 queries) for recall; and
--synthetic N random unit vectors (`qac index build --vectors`) for the
load at a larger size.

Server: PostgreSQL 16.2 + pgvector 0.6.2 from pgserver, durable settings
(PostgreSQL's defaults: fsync on, full-page writes), shared_buffers 1GB,
maintenance_work_mem 2GB (the graph of 58k x 384 fits: a faster HNSW build).
"""
import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(SRC, "tests", "pgvector"))
sys.path.insert(0, os.path.join(SRC, "tests", "index"))
import pglib  # noqa: E402
import idxutil  # noqa: E402

import psycopg  # noqa: E402
from pgvector import Vector  # noqa: E402
from pgvector.psycopg import register_vector  # noqa: E402

_spec = importlib.util.spec_from_file_location("qac_pgvector", os.path.join(SRC, "python", "qac", "pgvector.py"))
qpg = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(qpg)

QAC = os.environ.get("QAC_BIN", os.path.join(SRC, "build", "qac"))
DEB = os.path.join(SRC, "..", "shared", "data", "debian-packages", "packages.jsonl.gz")
CRAN_DOCS = os.path.join(SRC, "..", "shared", "data", "cranfield", "cran.all.1400")
CRAN_QUERIES = os.path.join(SRC, "..", "shared", "data", "cranfield", "cran.qry")


def sh(args, **kw):
    p = subprocess.run(args, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(args), p.stderr[-3000:]))
    return p


def qac_export(url, ix, table, extra=()):
    """-> (COPY rows/s as qac reports it, wall seconds of the command, stderr)."""
    t = time.time()
    p = sh([QAC, "export", "--index", ix, "--to", url, "--table", table, *extra])
    wall = time.time() - t
    m = re.search(r"COPY ([0-9.]+) s \(([0-9]+) rows/s", p.stderr)
    return float(m.group(2)), float(m.group(1)), wall, p.stderr


def reference_load(url, table, ids, X):
    """pgvector-python's loading example, with the docids as a text column so
    that the table is the one qac export makes (id text COLLATE "C" NOT
    NULL, embedding vector NOT NULL, then the primary key)."""
    t0 = time.time()
    conn = psycopg.connect(url, autocommit=True)
    register_vector(conn)
    conn.execute('CREATE TABLE %s (id text COLLATE "C" NOT NULL, embedding vector(%d) NOT NULL)' % (table, X.shape[1]))
    t = time.time()
    cur = conn.cursor()
    with cur.copy("COPY %s (id, embedding) FROM STDIN WITH (FORMAT BINARY)" % table) as copy:
        copy.set_types(["text", "vector"])
        for i, e in zip(ids, X):
            copy.write_row([i, Vector(e)])
    copy_s = time.time() - t
    conn.execute("ALTER TABLE %s ADD PRIMARY KEY (id)" % table)
    conn.close()
    return len(ids) / copy_s, copy_s, time.time() - t0


def drop(url, table):
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS %s" % table)
        c.execute("CHECKPOINT")  # each round starts with no dirty buffers of the last


def load_bench(url, ix, label, rounds, data_dir):
    X, ids, _ = idxutil.read_index_vectors(ix)
    res = {"qac": [], "ref": []}
    for r in range(rounds):
        for who in (("qac", "ref") if r % 2 == 0 else ("ref", "qac")):  # alternate who goes first
            drop(url, "bench_load")
            if who == "qac":
                rate, copy_s, wall, _ = qac_export(url, ix, "bench_load", ["--pg-index", "none"])
            else:
                rate, copy_s, wall = reference_load(url, "bench_load", ids, X)
            res[who].append((rate, copy_s, wall))
            print("  %s round %d: COPY %.0f rows/s (%.2f s), whole load incl. primary key %.2f s"
                  % (who, r + 1, rate, copy_s, wall), flush=True)
    # the server's own ceiling: the same rows from a binary file on the
    # server's disk (no client, no protocol), 3 times
    with psycopg.connect(url, autocommit=True) as c:
        path = os.path.join(data_dir, "bench_copy.bin")
        c.execute("COPY bench_load (id, embedding) TO '%s' (FORMAT BINARY)" % path)
        ceil = []
        for _ in range(rounds):
            c.execute("DROP TABLE IF EXISTS bench_file")
            c.execute("CHECKPOINT")
            c.execute('CREATE TABLE bench_file (id text COLLATE "C" NOT NULL, embedding vector(%d) NOT NULL)'
                      % X.shape[1])
            t = time.time()
            c.execute("COPY bench_file FROM '%s' (FORMAT BINARY)" % path)
            ceil.append(len(ids) / (time.time() - t))
        c.execute("DROP TABLE bench_file")
    os.remove(path)
    res["server_file"] = ceil
    print("  server-side COPY of the same rows from a file: %s rows/s" % ", ".join("%.0f" % x for x in ceil),
          flush=True)
    drop(url, "bench_load")
    med = {k: sorted(v)[len(v) // 2] for k, v in res.items() if k != "server_file"}
    n = len(ids)
    print("%s: %d rows x %d: qac export COPY %.0f rows/s, pgvector-python example %.0f rows/s: %.2fx; "
          "whole load %.0f vs %.0f rows/s: %.2fx (medians of %d)"
          % (label, n, X.shape[1], med["qac"][0], med["ref"][0], med["qac"][0] / med["ref"][0],
             n / med["qac"][2], n / med["ref"][2], med["ref"][2] / med["qac"][2], rounds), flush=True)
    return {"rows": n, "dim": int(X.shape[1]), "qac": res["qac"], "ref": res["ref"], "server_file": res["server_file"]}


def recall(a, b, k=10):
    return float(np.mean([len(set(x[:k]) & set(y[:k])) / k for x, y in zip(a, b)]))


def ann_bench(url, name, ix, Q, qids, exact, qac_exact_s):
    """Exact search in PostgreSQL against qac's; HNSW and IVFFlat recall@10 against exact."""
    out = {"queries": len(qids)}
    print("== %s: HNSW (m 16, ef_construction 64, vector_ip_ops)" % name, flush=True)
    t_hnsw, t_ivf = name + "_hnsw", name + "_ivf"
    rate, copy_s, wall, err = qac_export(url, ix, t_hnsw, ["--maintenance-work-mem", "2GB"])
    build_s = float(re.search(r"HNSW \(.*?\) ([0-9.]+) s", err).group(1))
    print("  qac export with HNSW: %.1f s in all, index build %.1f s" % (wall, build_s), flush=True)
    out["hnsw_build_s"], out["hnsw_export_s"] = build_s, wall
    conn = psycopg.connect(url, autocommit=True)
    sizes = conn.execute("SELECT count(*), pg_table_size(%s), pg_relation_size(%s), pg_relation_size(%s) FROM "
                         + t_hnsw, (t_hnsw, t_hnsw + "_embedding_idx", t_hnsw + "_pkey")).fetchone()
    out["rows"], out["table_bytes"], out["hnsw_bytes"], out["pkey_bytes"] = sizes
    print("  sizes: table %.1f MB, HNSW index %.1f MB, primary key %.1f MB (%d rows)"
          % (sizes[1] / 1e6, sizes[2] / 1e6, sizes[3] / 1e6, sizes[0]), flush=True)
    t = time.time()
    ex_ids, _ = qpg.search(conn, t_hnsw, Q, 10, exact=True)
    pg_exact_s = time.time() - t
    same = sum(list(ex_ids[i]) == exact[i] for i in range(len(qids)))
    print("  exact (no index) in PostgreSQL: top-10 equals qac's for %d/%d queries; %.1f queries/s "
          "(qac search, encoding included: %.1f queries/s)"
          % (same, len(qids), len(qids) / pg_exact_s, len(qids) / qac_exact_s), flush=True)
    out["exact_same"], out["pg_exact_qps"], out["qac_search_qps"] = same, len(qids) / pg_exact_s, len(qids) / qac_exact_s
    out["hnsw"] = []
    for ef in (10, 20, 40, 80, 160):
        qpg.search(conn, t_hnsw, Q[:50], 10, ef_search=ef)  # warm
        t = time.time()
        ids, _ = qpg.search(conn, t_hnsw, Q, 10, ef_search=ef)
        s = time.time() - t
        r = recall(ids, exact)
        out["hnsw"].append({"ef_search": ef, "recall10": r, "qps": len(qids) / s})
        print("  ef_search %3d%s: recall@10 %.4f, %.0f queries/s (one connection)"
              % (ef, " (default)" if ef == 40 else "", r, len(qids) / s), flush=True)
    print("== %s: IVFFlat (lists = rows/1000, vector_ip_ops)" % name, flush=True)
    rate, copy_s, wall, err = qac_export(url, ix, t_ivf, ["--pg-index", "ivfflat", "--maintenance-work-mem", "2GB"])
    m = re.search(r"IVFFlat \(lists ([0-9]+), .*?\) ([0-9.]+) s", err)
    out["ivf_lists"], out["ivf_build_s"] = int(m.group(1)), float(m.group(2))
    print("  lists %s, index build %s s" % (m.group(1), m.group(2)), flush=True)
    out["ivf"] = []
    for probes in (1, 4, 8, 16):
        t = time.time()
        ids, _ = qpg.search(conn, t_ivf, Q, 10, probes=probes)
        s = time.time() - t
        r = recall(ids, exact)
        out["ivf"].append({"probes": probes, "recall10": r, "qps": len(qids) / s})
        print("  probes %2d%s: recall@10 %.4f, %.0f queries/s" % (probes, " (default)" if probes == 1 else "", r,
                                                                 len(qids) / s), flush=True)
    conn.close()
    return out


def queries_and_exact(ix, qpath):
    """qac encode's query vectors and qac search's exact top-10 (and its time)."""
    sh([QAC, "encode", "--input", qpath, "--kind", "query", "--output", qpath + ".npy", "--ids", qpath + ".ids",
        "--device", "cpu"])
    Q = np.load(qpath + ".npy")
    t = time.time()
    sh([QAC, "search", "--index", ix, "--queries", qpath, "--run", qpath + ".run", "--k", "10", "--device", "cpu"])
    qac_s = time.time() - t
    run = {}
    for line in open(qpath + ".run"):
        qid, _, d, *_ = line.split()
        run.setdefault(qid, []).append(d)
    qids = open(qpath + ".ids").read().split()
    return Q, qids, [run[q] for q in qids], qac_s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--synthetic", type=int, default=500000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--queries", type=int, default=1000)
    a = ap.parse_args()
    work = a.workdir or tempfile.mkdtemp(prefix="qac-bench-pg-")
    os.makedirs(work, exist_ok=True)
    import gzip
    corpus = os.path.join(work, "packages.jsonl")  # BEIR form: {"_id", "title", "text"}
    if not os.path.exists(corpus):
        seen = {}
        with gzip.open(DEB, "rt", encoding="utf-8") as f, open(corpus + ".tmp", "w", encoding="utf-8") as g:
            for line in f:
                d = json.loads(line)
                # a few package names occur twice (different descriptions): docids must be unique
                n = seen[d["id"]] = seen.get(d["id"], 0) + 1
                pid = d["id"] if n == 1 else "%s#%d" % (d["id"], n)
                g.write(json.dumps({"_id": pid, "title": d["title"], "text": d["text"]}) + "\n")
        os.rename(corpus + ".tmp", corpus)
    deb = os.path.join(work, "deb")
    t = time.time()
    sh([QAC, "index", "build", "--corpus", corpus, "--out", deb, "--max-len", "128", "--device", "cpu"])
    print("index build (Debian packages): %.0f s" % (time.time() - t), flush=True)
    # queries: one title in 58, as qid<TAB>text
    qpath = os.path.join(work, "queries.tsv")
    titles = [json.loads(l)["title"] for l in open(corpus, encoding="utf-8")]
    step = max(1, len(titles) // a.queries)
    with open(qpath, "w") as f:
        for i in range(0, len(titles), step)[:a.queries]:
            f.write("q%d\t%s\n" % (i, titles[i].replace("\t", " ")))
    datasets = [("deb", deb) + queries_and_exact(deb, qpath)]
    cran = os.path.join(work, "cran")
    t = time.time()
    sh([QAC, "index", "build", "--corpus", CRAN_DOCS, "--out", cran, "--device", "cpu"])
    print("index build (Cranfield): %.0f s" % (time.time() - t), flush=True)
    datasets.append(("cran", cran) + queries_and_exact(cran, CRAN_QUERIES))

    syn = None
    if a.synthetic:
        syn = os.path.join(work, "syn%d" % a.synthetic)
        if not os.path.exists(os.path.join(syn, "manifest.json")):
            rng = np.random.default_rng(0)
            V = rng.standard_normal((a.synthetic, 384), dtype=np.float32)
            V /= np.linalg.norm(V, axis=1, keepdims=True)
            np.save(os.path.join(work, "syn.npy"), V)
            del V
            sh([QAC, "index", "build", "--vectors", os.path.join(work, "syn.npy"), "--ids", "sequential", "--out", syn])
            os.remove(os.path.join(work, "syn.npy"))

    pgdir = tempfile.mkdtemp(prefix="qac-bench-pgdata-")
    out = {"date": time.strftime("%Y-%m-%d")}
    with pglib.Server(pgdir, durable=True, settings={"shared_buffers": "1GB", "max_wal_size": "8GB"}) as pg:
        out["server"], out["pgvector"] = pg.version()
        print("PostgreSQL %s, pgvector %s (durable settings)" % pg.version(), flush=True)
        url = pg.url
        print("== bulk load", flush=True)
        out["load_deb"] = load_bench(url, deb, "Debian packages", a.rounds, pg.data)
        if syn:
            out["load_syn"] = load_bench(url, syn, "synthetic", a.rounds, pg.data)

        for name, ix, Q, qids, exact, qac_s in datasets:
            out[name] = ann_bench(url, name, ix, Q, qids, exact, qac_s)
    shutil.rmtree(pgdir, ignore_errors=True)
    with open(os.path.join(work, "results.json"), "w") as f:
        json.dump(out, f, indent=1)
    print("results: %s" % os.path.join(work, "results.json"))


if __name__ == "__main__":
    main()
