"""`qac eval` against pytrec_eval (trec_eval's own C code) on every measure,
per query and averaged, with and without -c, -M and -l.

pytrec_eval applies neither -M nor -c, so the reference truncates each ranking
after trec_eval's sort (score descending, then docid descending by strcmp)
and adds the missing qrels queries as zeros for -c. That emulation is only a
cross-check over many measures and cutoffs: -c, -M and -q are held to the
real trec_eval program's output in test_trec_eval_fixtures.py."""
import os
import random
import re
import subprocess
import sys
import tempfile

try:
    import pytrec_eval
except ImportError:  # the reference is required: a missing one is a failure
    print("FAIL: pytrec_eval is not installed (scripts/setup.sh --test)")
    sys.exit(1)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testdata  # noqa: E402

QAC = os.environ.get("QAC_BIN")
TOL = 1e-6
MEASURES = ["recip_rank", "recall.10,50,100,1000", "ndcg_cut.10,100", "map", "P.5,10,20",
            "num_ret", "num_rel", "num_rel_ret", "Rprec", "bpref", "success.1,5,10", "iprec_at_recall",
            "ndcg", "set_P", "set_recall", "set_relative_P", "set_map", "set_F", "infAP", "Rprec_mult",
            "utility", "11pt_avg", "binG", "G", "ndcg_rel", "Rndcg", "map_cut.5,100", "relative_P.5,10",
            "num_nonrel_judged_ret"]
COUNTS = {"num_ret", "num_rel", "num_rel_ret", "num_q", "num_nonrel_judged_ret"}
failures = []
worst = [0.0]


def fail(msg):
    failures.append(msg)
    if len(failures) <= 20:
        print("FAIL:", msg)


def run_qac(*args, expect_rc=0):
    p = subprocess.run([QAC, "eval", *args], capture_output=True, text=True)
    if p.returncode != expect_rc:
        fail(f"qac eval {' '.join(args)}: exit {p.returncode}, want {expect_rc}: {p.stderr.strip()}")
    return p


def parse(out):
    """Rows as [(measure, qid, value)] in output order."""
    rows = []
    for line in out.splitlines():
        m = re.fullmatch(r"(\S+) *\t(\S+)\t(-?[0-9.]+)", line)
        if not m:
            fail(f"bad output line {line!r}")
            continue
        rows.append((m.group(1), m.group(2), float(m.group(3))))
    return rows


def trec_sort(docs):
    """trec_eval's order: score descending, ties by docid descending (strcmp on bytes)."""
    return sorted(docs.items(), key=lambda kv: (kv[1], kv[0].encode()), reverse=True)


def write_run(path, run, shuffle_seed=0):
    rng = random.Random(shuffle_seed)
    lines = []
    for qid, docs in run.items():
        for rank, (d, s) in enumerate(docs.items(), 1):
            lines.append(f"{qid} Q0 {d} {rank} {s!r} run\n")
    rng.shuffle(lines)  # file order must not matter
    with open(path, "w") as f:
        f.writelines(lines)


def reference(qrels, run, max_docs, complete, level):
    measures = {m for m in MEASURES}
    cut = {}
    for qid, docs in run.items():
        ranked = trec_sort(docs)
        if max_docs:
            ranked = ranked[:max_docs]
        if ranked:
            cut[qid] = dict(ranked)
    ev = pytrec_eval.RelevanceEvaluator(qrels, measures, relevance_level=level)
    per_q = ev.evaluate(cut)
    names = sorted({k for v in per_q.values() for k in v})
    summary = {}
    denom = len(qrels) if complete else len(per_q)
    for n in names:
        total = sum(v[n] for v in per_q.values())
        summary[n] = total if n in COUNTS else total / denom
    summary["num_q"] = denom
    if complete:  # trec_eval 9.0.x: rel > 0 over every qrels query, whatever -l says
        summary["num_rel"] = sum(r > 0 for docs in qrels.values() for r in docs.values())
    return per_q, summary


def compare(tag, qrels_path, qrels, run_path, run, max_docs=None, complete=False, level=1, extra=()):
    args = ["--qrels", qrels_path, "--run", run_path, "-q", "--digits", "12", "-l", str(level)]
    for m in MEASURES:
        args += ["-m", m]
    args += ["-m", "num_q"]
    if max_docs:
        args += ["-M", str(max_docs)]
    if complete:
        args += ["-c"]
    args += list(extra)
    p = run_qac(*args)
    rows = parse(p.stdout)
    per_q, summary = reference(qrels, run, max_docs, complete, level)
    got = {(m, q): v for m, q, v in rows}
    want = {(m, q): v for q, vals in per_q.items() for m, v in vals.items()}
    want.update({(m, "all"): v for m, v in summary.items()})
    missing = set(want) - set(got)
    extra_rows = set(got) - set(want)
    if missing:
        fail(f"{tag}: qac lacks {sorted(missing)[:5]} ({len(missing)} rows)")
    if extra_rows:
        fail(f"{tag}: qac has unexpected rows {sorted(extra_rows)[:5]}")
    for k in set(want) & set(got):
        d = abs(want[k] - got[k])
        worst[0] = max(worst[0], d)
        if d > TOL:
            fail(f"{tag}: {k[0]} qid {k[1]}: qac {got[k]:.10f} pytrec_eval {want[k]:.10f}")
    # trec_eval's print order: queries by strcmp, measures in its table order, then "all"
    qids = [q for _, q, _ in rows if q != "all"]
    order = []
    for q in qids:
        if not order or order[-1] != q:
            order.append(q)
    if order != sorted(order, key=lambda s: s.encode()) or len(order) != len(set(order)):
        fail(f"{tag}: per-query rows are not grouped in strcmp order of qid")
    if any(q != "all" for _, q, _ in rows[len(rows) - len(summary):]):
        fail(f"{tag}: summary rows are not last")
    first = [m for m, q, _ in rows if q == order[0]] if order else []
    pts = ["%3.2f" % (i / 10) for i in range(11)]
    table = (["num_ret", "num_rel", "num_rel_ret", "map", "Rprec", "bpref", "recip_rank"] +
             ["iprec_at_recall_" + x for x in pts] + ["P_5", "P_10", "P_20",
             "recall_10", "recall_50", "recall_100", "recall_1000", "infAP"] +
             ["Rprec_mult_%3.2f" % (i / 5) for i in range(1, 11)] + ["utility", "11pt_avg", "binG", "G", "ndcg",
             "ndcg_rel", "Rndcg", "ndcg_cut_10", "ndcg_cut_100", "map_cut_5", "map_cut_100", "relative_P_5",
             "relative_P_10", "success_1", "success_5", "success_10", "set_P", "set_relative_P", "set_recall",
             "set_map", "set_F", "num_nonrel_judged_ret"])
    if first != table:
        fail(f"{tag}: measure order {first}, want trec_eval's {table}")
    print(f"{tag}: {len(per_q)} queries evaluated, {len(want)} values compared")
    return p


def synthetic(tmp):
    rng = random.Random(1234)
    # ids that sort differently as strings and as numbers
    pool = [str(i) for i in range(1, 120)] + [f"d{i}" for i in (1, 9, 10, 100)] + ["Z", "a-b", "doc_10"]
    qrels, run = {}, {}
    for qi in range(1, 41):
        qid = str(qi * 3 if qi % 5 else qi * 101)
        judged = rng.sample(pool, rng.randint(1, 25))
        kind = qi % 7
        qrels[qid] = {}
        for d in judged:
            if kind == 0:
                rel = 0  # judged, nothing relevant
            elif kind == 1:
                rel = rng.choice([-1, 0, 1])  # negative: in pool, unjudged
            else:
                rel = rng.choice([0, 0, 1, 2, 3])
            qrels[qid][d] = rel
        if qi % 9 == 4:
            continue  # missing from the run: counts only with -c
        n = rng.randint(1, 70)
        docs = {}
        for d in rng.sample(pool, min(n, len(pool))):
            r = rng.random()
            if r < 0.4:
                s = float(rng.choice([1.0, 2.0, 0.5]))  # heavy ties
            elif r < 0.55:
                s = -rng.uniform(0, 1e3)
            elif r < 0.65:
                s = rng.uniform(1e11, 1e12)
            else:
                s = rng.gauss(0, 3)
            if d in qrels[qid] and qrels[qid][d] > 0 and rng.random() < 0.5:
                s += 2.0
            docs[d] = s
        run[qid] = docs
    run["999999"] = {"1": 1.0, "2": 0.5}  # no qrels: skipped
    run["12"] = {d: 0.0 for d in pool[:60]}  # all tied
    if "12" not in qrels:
        qrels["12"] = {"9": 1, "10": 2, "100": 1}

    qrels_path = os.path.join(tmp, "qrels.txt")
    with open(qrels_path, "w") as f:
        for q, docs in qrels.items():
            for d, r in docs.items():
                f.write(f"{q} 0 {d} {r}\n")
    run_path = os.path.join(tmp, "run.txt")
    write_run(run_path, run)

    for max_docs in (None, 10, 3):
        for complete in (False, True):
            for level in (1, 2):
                compare(f"synthetic M={max_docs} c={complete} l={level}", qrels_path, qrels, run_path, run,
                        max_docs, complete, level)

    # BEIR qrels (header, tab separated) give the same numbers
    beir = os.path.join(tmp, "qrels.tsv")
    with open(beir, "w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for q, docs in qrels.items():
            for d, r in docs.items():
                f.write(f"{q}\t{d}\t{r}\n")
    compare("synthetic BEIR qrels", beir, qrels, run_path, run, 10, True, 1)

    # trec_eval's default output format, and the shorthand measure names
    p = run_qac(qrels_path, run_path, "-M", "10", "-m", "recip_rank", "-m", "ndcg_cut_10", "-m", "recall.50",
                "-m", "recall.1000")
    lines = p.stdout.splitlines()
    names = [ln.split("\t")[0].rstrip() for ln in lines]
    if names != ["recip_rank", "recall_50", "recall_1000", "ndcg_cut_10"]:
        fail(f"default output measures {names}")
    for ln in lines:
        if not re.fullmatch(r"\S+ *\tall\t\d\.\d{4}", ln) or len(ln.split("\t")[0]) != 22:
            fail(f"not trec_eval's format: {ln!r}")
    ref = reference(qrels, run, 10, False, 1)[1]
    for ln in lines:
        name, _, v = ln.split("\t")
        if f"{ref[name.strip()]:6.4f}" != v:
            fail(f"{name.strip()}: printed {v}, trec_eval would print {ref[name.strip()]:6.4f}")
    return qrels_path, run_path


def errors(tmp, qrels_path):
    dup = os.path.join(tmp, "dup.txt")
    with open(dup, "w") as f:
        f.write("3 Q0 a 1 3.0 r\n3 Q0 b 2 2.0 r\n3 Q0 a 3 1.0 r\n")
    p = run_qac(qrels_path, dup, "-m", "map", expect_rc=1)
    if "lists document a twice (lines 1 and 3)" not in p.stderr:
        fail(f"duplicate docid message: {p.stderr!r}")
    # past -M the duplicate is never looked at, as in trec_eval
    run_qac(qrels_path, dup, "-m", "map", "-M", "2")
    bad = os.path.join(tmp, "bad_run.txt")
    with open(bad, "w") as f:
        f.write("3 Q0 a 1 3.0 r\n3 Q0 b 2 x r\n")
    p = run_qac(qrels_path, bad, expect_rc=1)
    if "bad_run.txt:2: score 'x' is not a number" not in p.stderr:
        fail(f"bad score message: {p.stderr!r}")
    badq = os.path.join(tmp, "bad_qrels.txt")
    with open(badq, "w") as f:
        f.write("1 0 a 1\n1 0 b\n")
    p = run_qac(badq, dup, expect_rc=1)
    if "bad_qrels.txt:2: expected 4 columns" not in p.stderr:
        fail(f"bad qrels message: {p.stderr!r}")
    with open(badq, "w") as f:
        f.write("1 0 a 1\n1 0 a 2\n")
    p = run_qac(badq, dup, expect_rc=1)
    if "bad_qrels.txt:2: duplicate judgement for query 1 doc a (first on line 1)" not in p.stderr:
        fail(f"duplicate qrels message: {p.stderr!r}")
    p = run_qac(qrels_path, dup, "-m", "bogus", expect_rc=1)
    if "unknown measure 'bogus'" not in p.stderr:
        fail(f"unknown measure message: {p.stderr!r}")
    other = os.path.join(tmp, "other.txt")
    with open(other, "w") as f:
        f.write("nope Q0 a 1 1.0 r\n")
    p = run_qac(qrels_path, other, expect_rc=1)
    if "no query has both results in the run and judgements in the qrels" not in p.stderr:
        fail(f"no-overlap message: {p.stderr!r}")


def cranfield(tmp):
    qrels_file = testdata.path("cranfield", "cranqrel")
    qrels = {}
    with open(qrels_file) as f:
        for line in f:
            q, d, r = line.split()
            r = int(r)
            qrels.setdefault(q, {})[d] = 0 if r == -1 else 5 - r  # the README's gain mapping
    if len(qrels) != 225:
        fail(f"cranqrel has {len(qrels)} queries")
    # a deterministic noisy pseudo-run: judged docs get a boost by gain
    rng = random.Random(7)
    run = {}
    for qi in range(1, 226):
        q = str(qi)
        if qi % 50 == 0:
            continue
        scores = {}
        for d in range(1, 1401):
            g = qrels.get(q, {}).get(str(d), -1)
            scores[str(d)] = round(rng.gauss(0, 1) + (0.6 * g if g >= 0 else 0), 2)
        top = sorted(scores.items(), key=lambda kv: kv[1], reverse=True)[:150]
        run[q] = dict(top)
    run_path = os.path.join(tmp, "cran_run.txt")
    write_run(run_path, run, 3)
    for max_docs in (None, 10):
        for complete in (False, True):
            compare(f"cranfield M={max_docs} c={complete}", qrels_file, qrels, run_path, run, max_docs, complete)


def main():
    if not QAC:
        print("FAIL: QAC_BIN must be set")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        qrels_path, _ = synthetic(tmp)
        errors(tmp, qrels_path)
        cranfield(tmp)
    print(f"max |qac - pytrec_eval| = {worst[0]:.3g} (tolerance {TOL})")
    if failures:
        print(f"{len(failures)} failures")
        return 1
    print("all values match")
    return 0


if __name__ == "__main__":
    sys.exit(main())
