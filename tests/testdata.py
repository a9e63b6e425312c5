"""The shared test collections for the Python tests, found as the C tests
find them (tests/testutil.h: qac_test_data):

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import testdata
    cran = testdata.path("cranfield")                          # the directory
    deb = testdata.path("debian-packages", "packages.jsonl.gz")

The root is $QAC_SHARED_DATA (CTest sets it to what scripts/test.sh found
with scripts/data.sh), else ../shared/data beside the clone. A missing file
fails the test with one line saying how to get it, never a skip.
"""
import os
import sys

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def root():
    return os.environ.get("QAC_SHARED_DATA") or os.path.join(os.path.dirname(_REPO), "shared", "data")


def path(*parts):
    p = os.path.join(root(), *parts)
    if not os.path.exists(p):
        print(f"FAIL: missing test data {p}: scripts/data.sh tests finds or fetches it "
              "(then set QAC_SHARED_DATA to the directory it prints)", file=sys.stderr, flush=True)
        sys.exit(1)
    return p


def _cran_blocks(file):
    """Cranfield's SMART format: {id: text of the .W field}, in file order."""
    out, cur, field = {}, None, None
    for line in open(file, encoding="utf-8", errors="replace"):
        if line.startswith(".I"):
            cur = line.split()[1]
            out[cur] = {}
            field = None
        elif line.startswith("."):
            field = line[1]
            out[cur][field] = []
        elif field:
            out[cur][field].append(line.strip())
    return {k: " ".join(v.get("W", [])) for k, v in out.items()}


def cranfield():
    """(docs {docid: text}, queries [text] in file order, qrels {query number: [docid]})."""
    cran = path("cranfield")
    docs = _cran_blocks(os.path.join(cran, "cran.all.1400"))
    queries = list(_cran_blocks(os.path.join(cran, "cran.qry")).values())
    qrels = {}
    for line in open(os.path.join(cran, "cranqrel")):
        q, d = line.split()[:2]
        qrels.setdefault(int(q), []).append(d)
    return docs, queries, qrels
