"""The shared test collections for the Python tests, found as the C tests
find them (tests/testutil.h: qac_test_data):

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import testdata
    cran = testdata.path("cranfield")                          # the directory
    deb = testdata.path("debian-packages", "packages.jsonl.gz")
    docs, queries, qrels = testdata.cranfield()                # .W texts, queries, qrels
    testdata.cranfield_texts()          # [(docid, title + abstract)], as qac's reader joins them
    testdata.cranfield_texts("cran.qry", "W")                  # [(number, query)]
    testdata.cranfield_subset(out, n)   # the first n documents as a file of the same format

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


def cranfield(cran_dir=None):
    """(docs {docid: text}, queries [text] in file order, qrels {query number: [docid]});
    cran_dir: a Cranfield directory given on a command line instead of the shared data's."""
    cran = cran_dir or path("cranfield")
    docs = _cran_blocks(os.path.join(cran, "cran.all.1400"))
    queries = list(_cran_blocks(os.path.join(cran, "cran.qry")).values())
    qrels = {}
    for line in open(os.path.join(cran, "cranqrel")):
        q, d = line.split()[:2]
        qrels.setdefault(int(q), []).append(d)
    return docs, queries, qrels


def cranfield_records(name="cran.all.1400", cran_dir=None):
    """The records of a Cranfield SMART file, in file order: [(id, {field: [lines]})]
    with the .I line's id, each field's lines stripped and blank ones left out.
    A field starts at a line that is ".X" alone (X a capital letter); a field
    that comes twice in a record (documents 576 and 578 have two .W) keeps
    the lines of both, as qac's reader does. cran_dir: a Cranfield
    directory given on a command line (the fixture generators' --data)
    instead of the shared data's."""
    recs, cur, field = [], None, None
    file = os.path.join(cran_dir, name) if cran_dir else path("cranfield", name)
    for line in open(file, encoding="utf-8"):
        s = line.strip()
        if line.startswith(".I ") or s == ".I":
            cur, field = {}, None
            recs.append((line[3:].strip(), cur))
        elif len(s) == 2 and s[0] == "." and s[1].isupper() and line.startswith("."):
            field = s[1]
            cur.setdefault(field, [])
        elif s and cur is not None and field:
            cur[field].append(s)
    return recs


def cranfield_texts(name="cran.all.1400", fields="TW", cran_dir=None):
    """[(id, text)] in file order: the lines of the fields, in that order,
    joined by spaces (for documents "TW" is what qac's reader indexes:
    title then abstract; for cran.qry "W" is the query)."""
    return [(rid, " ".join(x for f in fields for x in rec.get(f, []))) for rid, rec in cranfield_records(name, cran_dir)]


def cranfield_subset(out_path, n, name="cran.all.1400"):
    """The first n records of a Cranfield file, written to out_path in its own format."""
    count = 0
    with open(path("cranfield", name), encoding="utf-8") as f, open(out_path, "w", encoding="utf-8") as g:
        for line in f:
            if line.startswith(".I "):
                count += 1
                if count > n:
                    break
            g.write(line)
    return out_path
