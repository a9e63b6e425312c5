#!/usr/bin/env python3
"""Fixtures for tests/eval/test_trec_eval_fixtures.py: the output of the real
trec_eval program on several qrels/run pairs, for every measure qac
implements (-m all_trec and parameterised measures) and the flags -c, -q,
-M and -l.

qac eval follows trec_eval 9.0.x (9.0.8, the last 9.0 release; that
release's program still prints "trec_eval version 9.0.7"); the script runs
the trec_eval program it is given. Optionally pass a trec_eval 10.0 program
with --trec-eval-10: where its output differs, the case records its exit
status, its line count and its first differing line, to document why qac
follows 9.0.x (10.0 adds rbp and unj measures to all_trec, rounds where 9.0
truncates, reads scores as double where 9.0 reads float, stops when a qrels
query is missing from the run without -c, and prints zero rows for those
queries with -c -q).

Input sets (written to tests/reference/trec_eval/):
  synthetic   qrels.txt / run.txt, made here from a fixed seed: graded and
              negative judgements, queries with nothing relevant, queries
              missing from the run, a run query without judgements, heavy
              score ties, ids that sort differently as strings and numbers,
              rows in shuffled file order.
  edge        edge_qrels.txt / edge_run.txt, written literally below: scores
              equal as floats but not as doubles, inf, overflow to inf,
              underflow to 0, -0, hex and signed numbers, relevance above 9,
              a query judged only negative right after a graded one, a gap
              between levels, one-line queries, extra columns, tabs, a last
              line with another run id.
  cranfield   cran_qrels.txt (../shared/data/cranfield/cranqrel in TREC form,
              gain 5 - rel, -1 as 0, which is how qac reads cranqrel) with
              two real runs of qac on Cranfield, top 50 per query:
              cran_bm25.run.gz (qac bm25) and cran_dense.run.gz (qac index
              build + qac search with the default model).

Output: the inputs above and expected.json.gz: each set's files and cases;
a case is the argument list (given as `ARGS qrels run`), trec_eval's exit
status and stdout.

Run: python3 tests/reference/gen_trec_eval_fixtures.py --trec-eval PATH [--trec-eval-10 PATH]
         [--qac PATH --data ../shared/data]   (the last two remake the Cranfield runs)
"""
import argparse
import gzip
import json
import os
import random
import shutil
import struct
import subprocess
import tempfile

MEASURES = ["-m", "num_q", "-m", "num_ret", "-m", "num_rel", "-m", "num_rel_ret", "-m", "map", "-m", "recip_rank",
            "-m", "P.1,5,10,30", "-m", "recall.5,10,100", "-m", "ndcg_cut.5,10,100"]
CASES = [[], ["-q"], ["-c"], ["-c", "-q"], ["-M", "10"], ["-M", "3", "-q"], ["-M", "10", "-c"],
         ["-M", "1", "-c", "-q"], ["-l", "2", "-c", "-q"], ["-l", "2", "-M", "5", "-c"], ["-l", "3", "-q"]]
# MRR@10 as the design states it, with and without -c
SHORT = [["-M", "10", "-m", "recip_rank"], ["-c", "-M", "10", "-m", "recip_rank", "-q"]]
ALL = ["-m", "all_trec"]
# every flag combination over all of trec_eval's measures
ALL_CASES = [ALL, ["-q"] + ALL, ["-c", "-q"] + ALL, ["-M", "5", "-q"] + ALL, ["-M", "1", "-c"] + ALL,
             ["-l", "2", "-c", "-q"] + ALL, ["-l", "3", "-q"] + ALL, ["-l", "0", "-q"] + ALL,
             [], ["-q"], ["-c", "-q", "-m", "set"]]
# the measures' own parameters, printed in their names
PARAMS = [["-q", "-m", "iprec_at_recall.0.25,0.5,.75", "-m", "Rprec_mult.0.5,3", "-m", "11pt_avg.0.2,0.5,0.8"],
          ["-q", "-m", "utility.2,-1,-0.5,0", "-m", "set_F.0.5", "-m", "relstring.25"],
          ["-q", "-m", "ndcg.1=3,2=9.5,4=7", "-m", "G.0=1,1=3.5", "-m", "Rndcg.1=2,3=0.5", "-m", "ndcg_rel.2=5"],
          ["-q", "-m", "success.2,3,50", "-m", "map_cut.1,2,1000", "-m", "relative_P.1,3,99"],
          ["-c", "-l", "2", "-q", "-m", "gm_map", "-m", "gm_bpref", "-m", "bpref", "-m", "ndcg"]]
EDGE_CASES = ALL_CASES + [["-M", "2", "-q"] + ALL, ["-l", "13", "-q"] + ALL, ["-l", "-1", "-q"] + ALL]
CRAN_CASES = [ALL, ["-c"] + ALL, ["-M", "10", "-c"] + ALL, ["-l", "3", "-c"] + ALL, [],
              ["-M", "10", "-m", "recip_rank", "-m", "ndcg_cut.10", "-m", "success.1,5,10", "-q"]]
# every query's every value once (the outputs are large: one run only)
CRAN_Q = [["-q"] + ALL, ["-c", "-q"]]


def make_synthetic(out):
    rng = random.Random(20240916)
    pool = [str(i) for i in range(1, 90)] + ["d1", "d9", "d10", "d100", "Z", "a-b", "doc_10"]
    qrels, run = {}, {}
    for qi in range(1, 17):
        qid = str(qi * 7 if qi % 4 else qi * 101)
        kind = qi % 6
        qrels[qid] = {}
        for d in rng.sample(pool, rng.randint(1, 20)):
            if kind == 0:
                rel = 0  # judged, nothing relevant
            elif kind == 1:
                rel = rng.choice([-1, 0, 1])  # negative: judged as not relevant
            else:
                rel = rng.choice([0, 0, 1, 2, 3])
            qrels[qid][d] = rel
        if qi % 7 == 3:
            continue  # missing from the run: counts only with -c
        docs = {}
        for d in rng.sample(pool, rng.randint(1, 45)):
            r = rng.random()
            if r < 0.4:
                s = rng.choice([1.0, 2.0, 0.5])  # heavy ties
            elif r < 0.55:
                s = -round(rng.uniform(0, 1e3), 4)
            else:
                s = round(rng.gauss(0, 3), 6)
            if qrels[qid].get(d, 0) > 0 and rng.random() < 0.5:
                s += 2.0
            docs[d] = s
        run[qid] = docs
    run["999999"] = {"1": 1.0, "2": 0.5}  # no judgements: skipped
    lines = [f"{q} Q0 {d} {rank} {s!r} fixture\n" for q, docs in run.items()
             for rank, (d, s) in enumerate(docs.items(), 1)]
    rng.shuffle(lines)
    with open(os.path.join(out, "qrels.txt"), "w") as f:
        for q, docs in qrels.items():
            for d, r in docs.items():
                f.write(f"{q} 0 {d} {r}\n")
    with open(os.path.join(out, "run.txt"), "w") as f:
        f.writelines(lines)


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def make_edge(out):
    """Literal edge cases; the comments say what each exercises."""
    # 0.3 and 0.3 + 1e-9 are one float and two doubles: trec_eval 9.0.x ties them
    assert f32(0.3) == f32(0.3 + 1e-9) and 0.3 != 0.3 + 1e-9
    qrels = [
        # A1: levels 0..3, a level above 9, negatives (in the pool, unjudged)
        *[("A1", f"d{i}", r) for i, r in enumerate([3, 2, 2, 1, 1, 1, 0, 0, 12, -1, -1, 0, 3], 1)],
        # A2 follows A1: judged only negative, nothing at or above level 0
        *[("A2", f"d{i}", -1) for i in range(1, 6)],
        ("B", "x1", 0), ("B", "x2", 0), ("B", "x3", 0),  # judged, nothing relevant
        ("C", "10", 3), ("C", "9", 0), ("C", "100", 3), ("C", "2", 0),  # levels 0 and 3 only
        ("D", "only", 1),  # one relevant, one retrieved
        ("E", "e1", 1), ("E", "e2", 2),  # missing from the run
        *[("F", f"f{i}", 1 if i > 6 else 0) for i in range(1, 9)],  # relevant ones ranked last
    ]
    run = [
        # A1: float ties (0.3 vs 0.3+1e-9: by double, d12 would rank first of the four), exact ties,
        # inf, overflow to inf, -inf
        ("A1", "d1", "0.3"), ("A1", "d2", "0.3"), ("A1", "d12", repr(0.3 + 1e-9)), ("A1", "d3", "0.3"),
        ("A1", "d4", "inf"),
        ("A1", "d5", "1e39"), ("A1", "d9", "-inf"), ("A1", "d13", "5."), ("A1", "d7", ".5"),
        ("A1", "d8", "+0.5"), ("A1", "zz", "0x1p-1"), ("A1", "d10", "1E1"), ("A1", "d11", "-2"),
        # A2: underflow to 0, 0 and -0 tie
        ("A2", "d1", "1e-50"), ("A2", "d2", "0"), ("A2", "d3", "-0.0"), ("A2", "nope", "1"),
        ("B", "x1", "3"), ("B", "x9", "2"), ("B", "x2", "1"),
        ("C", "2", "7"), ("C", "10", "7"), ("C", "100", "7"), ("C", "9", "7"), ("C", "1", "7"),
        ("D", "only", "1.5"),
        *[("F", f"f{i}", str(10 - i)) for i in range(1, 9)],
        ("Z9", "z", "1"),  # no judgements: skipped
    ]
    with open(os.path.join(out, "edge_qrels.txt"), "w") as f:
        for q, d, r in qrels:
            f.write(f"{q}\t0 {d}  {r}\n")  # tabs and runs of spaces separate columns too
    with open(os.path.join(out, "edge_run.txt"), "w") as f:
        for i, (q, d, s) in enumerate(run):
            extra = " trailing columns" if i % 5 == 0 else ""  # both ignore columns past the sixth
            f.write(f"{q} Q0 {d} {i + 1} {s} edge{extra}\n")
        f.write("Z9 Q0 z2 99 0.5 lastrun\n")  # runid reports the last line's


def make_cranfield(out, qac, data):
    """cranqrel in TREC form, and qac's own BM25 and dense runs (top 50)."""
    with open(os.path.join(data, "cranfield", "cranqrel")) as f, \
            open(os.path.join(out, "cran_qrels.txt"), "w") as g:
        for line in f:
            q, d, r = line.split()
            g.write(f"{q} 0 {d} {0 if r == '-1' else 5 - int(r)}\n")
    corpus, queries = os.path.join(data, "cranfield", "cran.all.1400"), os.path.join(data, "cranfield", "cran.qry")
    with tempfile.TemporaryDirectory() as tmp:
        def sh(*args):
            subprocess.run([qac, *args], check=True, stdout=subprocess.DEVNULL)
        sh("bm25", "build", "--corpus", corpus, "--out", os.path.join(tmp, "bm25"))
        sh("bm25", "search", "--index", os.path.join(tmp, "bm25"), "--queries", queries, "--k", "50",
           "--run", os.path.join(tmp, "bm25.run"))
        sh("index", "build", "--corpus", corpus, "--format", "cranfield", "--max-len", "128", "--out",
           os.path.join(tmp, "dense"))
        sh("search", "--index", os.path.join(tmp, "dense"), "--queries", queries, "--k", "50", "--run",
           os.path.join(tmp, "dense.run"))
        for name in ("bm25", "dense"):
            with open(os.path.join(tmp, name + ".run"), "rb") as f, \
                    gzip.GzipFile(os.path.join(out, f"cran_{name}.run.gz"), "wb", mtime=0) as g:
                shutil.copyfileobj(f, g)


def trec_eval(binary, args, qrels, run):
    p = subprocess.run([binary, *args, qrels, run], capture_output=True, text=True)
    return p.returncode, p.stdout


def first_diff(a, b):
    la, lb = a.splitlines(), b.splitlines()
    for x, y in zip(la, lb):
        if x != y:
            return [x, y]
    return [la[len(lb)] if len(la) > len(lb) else None, lb[len(la)] if len(lb) > len(la) else None]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--trec-eval", required=True, help="trec_eval 9.0.8 binary")
    ap.add_argument("--trec-eval-10", help="trec_eval 10.0 binary (recorded where it differs)")
    ap.add_argument("--qac", help="qac binary: remake the Cranfield runs")
    ap.add_argument("--data", default=os.path.join(here, "..", "..", "..", "shared", "data"))
    ap.add_argument("--out", default=os.path.join(here, "trec_eval"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    make_synthetic(args.out)
    make_edge(args.out)
    if args.qac:
        make_cranfield(args.out, args.qac, args.data)
    version = subprocess.run([args.trec_eval, "-v"], capture_output=True, text=True)
    sets = [("synthetic", "qrels.txt", "run.txt", [c + MEASURES for c in CASES] + SHORT + ALL_CASES + PARAMS),
            ("edge", "edge_qrels.txt", "edge_run.txt", EDGE_CASES + PARAMS),
            ("cranfield-bm25", "cran_qrels.txt", "cran_bm25.run.gz", CRAN_CASES + CRAN_Q[:1]),
            ("cranfield-dense", "cran_qrels.txt", "cran_dense.run.gz", CRAN_CASES + CRAN_Q[1:])]
    doc_sets, ndiff, ncases = [], 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, qrels, run, cases in sets:
            qpath, rpath = os.path.join(args.out, qrels), os.path.join(args.out, run)
            if run.endswith(".gz"):  # trec_eval reads plain files
                with gzip.open(rpath, "rb") as f, open(os.path.join(tmp, run[:-3]), "wb") as g:
                    shutil.copyfileobj(f, g)
                rpath = os.path.join(tmp, run[:-3])
            out_cases = []
            for extra in cases:
                rc, stdout = trec_eval(args.trec_eval, extra, qpath, rpath)
                case = {"args": extra, "rc": rc, "stdout": stdout}
                if args.trec_eval_10:
                    rc10, stdout10 = trec_eval(args.trec_eval_10, extra, qpath, rpath)
                    if (rc10, stdout10) != (rc, stdout):
                        case["trec_eval_10"] = {"rc": rc10, "lines": len(stdout10.splitlines()),
                                                "first_diff": first_diff(stdout, stdout10)}
                        ndiff += 1
                out_cases.append(case)
            doc_sets.append({"name": name, "qrels": qrels, "run": run, "cases": out_cases})
            ncases += len(out_cases)
    doc = {"trec_eval": "9.0.8 (usnistgov/trec_eval tag v9.0.8; prints: %s)" % (version.stdout + version.stderr).strip(),
           "generator": "tests/reference/gen_trec_eval_fixtures.py", "sets": doc_sets}
    tmp = os.path.join(args.out, "expected.json.gz.tmp")
    with gzip.GzipFile(tmp, "wb", mtime=0) as f:
        f.write((json.dumps(doc, indent=0) + "\n").encode())
    os.replace(tmp, os.path.join(args.out, "expected.json.gz"))
    old = os.path.join(args.out, "expected.json")
    if os.path.exists(old):
        os.remove(old)
    print("%d cases in %d sets, %d where 10.0 differs" % (ncases, len(doc_sets), ndiff))


if __name__ == "__main__":
    main()
