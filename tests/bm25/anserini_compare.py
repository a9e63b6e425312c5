"""qac BM25 against Anserini (Lucene) on Cranfield.

Anserini comes as the fat jar inside Pyserini's wheel (pyserini 0.25.0, the
last release built for Java 11, so it runs on Debian's OpenJDK 17; it needs
no network). Anserini's IndexCollection indexes the same texts qac reads
(title + body), and its own DefaultEnglishAnalyzer and BagOfWordsQueryGenerator
build the queries; Lucene's IndexSearcher scores them with
BM25Similarity(k1=0.9, b=0.4), as qac does. Lucene's raw float scores are
used: Anserini's SearchCollection rounds them to 4 decimals.

Checked: every document and query analyses to the same tokens; every query
has the same top 10 (docids, order) and the same top 1000 up to ties; scores
agree within 1e-4 (Lucene sums float term scores; qac differs in the last
bits). Ties: Lucene orders tied documents by index order, qac by docid
descending (trec_eval's order), so both lists are compared after sorting
each tie group the same way.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testdata  # noqa: E402

QAC = os.environ["QAC_BIN"]
DATA = testdata.path("cranfield")
CORPUS, QUERIES = os.path.join(DATA, "cran.all.1400"), os.path.join(DATA, "cran.qry")
K1, B = 0.9, 0.4
SCORE_TOL = 1e-4


def anserini_jar():
    import importlib.util

    spec = importlib.util.find_spec("pyserini")
    if spec is None:
        sys.exit("FAIL: pyserini is not installed (scripts/setup.sh --test installs it with the test stack)")
    for d in spec.submodule_search_locations:
        jars = os.path.join(d, "resources", "jars")
        for f in sorted(os.listdir(jars)) if os.path.isdir(jars) else []:
            if f.startswith("anserini-") and f.endswith("-fatjar.jar"):
                return os.path.join(jars, f)
    sys.exit("FAIL: no Anserini jar inside the pyserini package")


def java_home():
    java = shutil.which("java")
    if not java:
        sys.exit("FAIL: no java on PATH (scripts/setup.sh --test installs openjdk-17-jre-headless)")
    return os.path.dirname(os.path.dirname(os.path.realpath(java)))


def smart(path):
    """The records of a SMART file as qac reads them: .T and .W joined."""
    return testdata.cranfield_texts(os.path.basename(path))


def qac(*args):
    return subprocess.run([QAC, *args], check=True, capture_output=True, text=True).stdout


def qac_tokens(flag, path):
    out = {}
    for line in qac("bm25", "analyze", flag, path).splitlines():
        rid, _, toks = line.partition("\t")
        out[rid] = toks.split()
    return out


def read_run(path):
    run = defaultdict(list)
    with open(path) as f:
        for line in f:
            qid, _, doc, _, score, _ = line.split()
            run[qid].append((doc, float(score)))
    return run


def tie_order(hits):
    """Score descending, docid descending: qac's (and trec_eval's) order."""
    return sorted(hits, key=lambda h: (h[1], h[0]), reverse=True)


def main():
    jar = anserini_jar()
    os.environ.setdefault("JAVA_HOME", java_home())
    import jnius_config

    jnius_config.add_options("-Xmx1g")
    jnius_config.set_classpath(jar)
    from jnius import autoclass, cast

    analyzer = autoclass("io.anserini.analysis.DefaultEnglishAnalyzer").newDefaultInstance()
    analyze = autoclass("io.anserini.analysis.AnalyzerUtils").analyze
    print("Anserini: %s (java home %s)" % (os.path.basename(jar), os.environ["JAVA_HOME"]))

    docs, queries = smart(CORPUS), smart(QUERIES)
    queries = [(str(i), text) for i, (_, text) in enumerate(queries, 1)]  # qac numbers Cranfield queries 1..225
    failures = 0

    # 1. tokens
    for label, recs, ours in (("documents", docs, qac_tokens("--corpus", CORPUS)),
                              ("queries", queries, qac_tokens("--queries", QUERIES))):
        bad = [(rid, list(analyze(analyzer, text)), ours.get(rid)) for rid, text in recs
               if list(analyze(analyzer, text)) != ours.get(rid)]
        print("tokens: %d/%d %s analyse identically" % (len(recs) - len(bad), len(recs), label))
        for rid, a, q in bad[:3]:
            print("  %s %s: anserini %s / qac %s" % (label, rid, a[:20], (q or [])[:20]))
        failures += len(bad)

    with tempfile.TemporaryDirectory(prefix="qac-anserini-") as tmp:
        coll = os.path.join(tmp, "coll")
        os.mkdir(coll)
        with open(os.path.join(coll, "docs.jsonl"), "w") as f:
            for rid, text in docs:
                f.write(json.dumps({"id": rid, "contents": text}) + "\n")
        lidx = os.path.join(tmp, "lucene")
        subprocess.run(["java", "-cp", jar, "io.anserini.index.IndexCollection", "-collection", "JsonCollection",
                        "-input", coll, "-index", lidx, "-generator", "DefaultLuceneDocumentGenerator",
                        "-threads", "1"], check=True, capture_output=True)

        File = autoclass("java.io.File")
        reader = autoclass("org.apache.lucene.index.DirectoryReader").open(
            autoclass("org.apache.lucene.store.FSDirectory").open(File(lidx).toPath()))
        searcher = autoclass("org.apache.lucene.search.IndexSearcher")(
            cast("org.apache.lucene.index.IndexReader", reader))
        searcher.setSimilarity(autoclass("org.apache.lucene.search.similarities.BM25Similarity")(K1, B))
        qgen = autoclass("io.anserini.search.query.BagOfWordsQueryGenerator")()
        ids = [reader.document(i).get("id") for i in range(reader.maxDoc())]
        lucene = {}
        for qid, text in queries:
            top = searcher.search(qgen.buildQuery("contents", analyzer, text), 1000)
            lucene[qid] = [(ids[sd.doc], sd.score) for sd in top.scoreDocs]

        qidx, qrun = os.path.join(tmp, "bm25"), os.path.join(tmp, "qac.run")
        qac("bm25", "build", "--corpus", CORPUS, "--out", qidx)
        qac("bm25", "search", "--index", qidx, "--queries", QUERIES, "--run", qrun, "--k", "1000")
        ours = read_run(qrun)

    same10 = same10_raw = same1000 = 0
    failures_1000 = []
    worst = 0.0
    shown = 0
    for qid, _ in queries:
        a, q = lucene[qid], ours.get(qid, [])
        amap = dict(a)
        for doc, s in q:
            if doc in amap:
                worst = max(worst, abs(s - amap[doc]))
        same10_raw += [d for d, _ in a[:10]] == [d for d, _ in q[:10]]
        # ties: order each list the same way; a tie group cut by k compares as a set
        at, qt = tie_order(a), tie_order(q)
        ok10 = [d for d, _ in at[:10]] == [d for d, _ in qt[:10]]
        same10 += ok10
        same1000 += len(at) == len(qt) and all(x[0] == y[0] for x, y in zip(at, qt))
        # the rest must differ only where Lucene's and qac's float sums disagree
        # on the order of near-ties (within SCORE_TOL), or in a tie cut at k
        for i, (x, y) in enumerate(zip(at, qt)):
            if x[0] != y[0] and abs(x[1] - y[1]) > SCORE_TOL:
                near_only = False
                break
        else:
            near_only = len(at) == len(qt)
        if not near_only:
            failures_1000.append(qid)
        if not ok10 and shown < 3:
            shown += 1
            print("  query %s: anserini %s / qac %s" % (qid, at[:5], qt[:5]))
    n = len(queries)
    print("identical top-10: %d/%d (%d/%d before ordering ties alike); identical top-1000: %d/%d" %
          (same10, n, same10_raw, n, same1000, n))
    print("max |score difference| over documents in both runs: %.3g" % worst)
    if same10 != n:
        failures += 1
        print("FAIL: top-10 differs from Anserini on %d queries" % (n - same10))
    print("top-1000 lists that differ beyond near-tied scores: %d %s" % (len(failures_1000), failures_1000[:10]))
    if failures_1000:
        failures += 1
        print("FAIL: a top-1000 differs from Anserini's by more than the order of near-ties")
    if worst > SCORE_TOL:
        failures += 1
        print("FAIL: scores differ from Lucene's by more than %g" % SCORE_TOL)
    print("FAILED" if failures else "OK")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
