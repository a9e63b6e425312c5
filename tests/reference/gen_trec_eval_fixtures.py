#!/usr/bin/env python3
"""Fixtures for tests/eval/test_trec_eval_fixtures.py: the output of the real
trec_eval program on a small qrels file and run, for -c, -q, -M and -l.

qac eval follows trec_eval 9.0.x (9.0.8, the last 9.0 release; that
release's program still prints "trec_eval version 9.0.7"); the script runs
the trec_eval program it is given. Optionally pass a trec_eval 10.0 program
with --trec-eval-10: its output is recorded beside, for
the cases where it differs, to document why qac follows 9.0.x. 10.0 exits
with an error when a qrels query is missing from the run and -c is not given,
and with -c -q prints per-query rows for those missing queries.

The inputs are made here from a fixed seed: graded and negative judgements,
queries with nothing relevant, queries missing from the run, a run query
without judgements, heavy score ties, ids that sort differently as strings
and as numbers, rows in shuffled file order.

Output: tests/reference/trec_eval/{qrels.txt, run.txt, expected.json};
expected.json lists each case's argument list (given to both programs as
`ARGS qrels.txt run.txt`), trec_eval's exit status and its stdout.

Run: python3 tests/reference/gen_trec_eval_fixtures.py --trec-eval PATH [--trec-eval-10 PATH]
"""
import argparse
import json
import os
import random
import subprocess

MEASURES = ["-m", "num_q", "-m", "num_ret", "-m", "num_rel", "-m", "num_rel_ret", "-m", "map", "-m", "recip_rank",
            "-m", "P.1,5,10,30", "-m", "recall.5,10,100", "-m", "ndcg_cut.5,10,100"]
CASES = [[], ["-q"], ["-c"], ["-c", "-q"], ["-M", "10"], ["-M", "3", "-q"], ["-M", "10", "-c"],
         ["-M", "1", "-c", "-q"], ["-l", "2", "-c", "-q"], ["-l", "2", "-M", "5", "-c"], ["-l", "3", "-q"]]
# MRR@10 as the design states it, with and without -c
SHORT = [["-M", "10", "-m", "recip_rank"], ["-c", "-M", "10", "-m", "recip_rank", "-q"]]


def make_inputs(out):
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


def trec_eval(binary, args, out):
    p = subprocess.run([binary, *args, os.path.join(out, "qrels.txt"), os.path.join(out, "run.txt")],
                       capture_output=True, text=True)
    return p.returncode, p.stdout


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--trec-eval", required=True, help="trec_eval 9.0.8 binary")
    ap.add_argument("--trec-eval-10", help="trec_eval 10.0 binary (recorded where it differs)")
    ap.add_argument("--out", default=os.path.join(here, "trec_eval"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    make_inputs(args.out)
    version = subprocess.run([args.trec_eval, "-v"], capture_output=True, text=True)
    cases = []
    for extra in [c + MEASURES for c in CASES] + SHORT:
        rc, stdout = trec_eval(args.trec_eval, extra, args.out)
        case = {"args": extra, "rc": rc, "stdout": stdout}
        if args.trec_eval_10:
            rc10, stdout10 = trec_eval(args.trec_eval_10, extra, args.out)
            if (rc10, stdout10) != (rc, stdout):
                case["trec_eval_10"] = {"rc": rc10, "stdout": stdout10}
        cases.append(case)
    doc = {"trec_eval": "9.0.8 (usnistgov/trec_eval tag v9.0.8; prints: %s)" % (version.stdout + version.stderr).strip(),
           "generator": "tests/reference/gen_trec_eval_fixtures.py", "cases": cases}
    tmp = os.path.join(args.out, "expected.json.tmp")
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, os.path.join(args.out, "expected.json"))
    print("%d cases, %d where 10.0 differs" % (len(cases), sum("trec_eval_10" in c for c in cases)))


if __name__ == "__main__":
    main()
