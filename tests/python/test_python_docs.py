"""The Python examples of the README and docs/python.md run as written.

Each example is taken from the documents themselves (the fenced ```python
blocks of the README's Python and Ray sections, and of docs/python.md's
Quick start and "Distributed indexing on Ray"), so this breaks when they
change. Every block runs as its own script, in a fresh directory holding
the files the examples name (collection.tsv, queries.tsv, qrels.txt: a
slice of Cranfield), with this build's package: an undefined name, a file
an example never wrote, or a Ray plan the machine cannot run fails it (the
Ray examples run within a deadline: a plan that waits for resources that
never come is a failure, not a hang). On this suite's 2-core machine the
Ray examples run on a 2-CPU local cluster, as a user's would there."""
import os
import re
import subprocess
import sys

import pytest

import qac

ROOT = os.environ.get("QAC_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
RAY_DEADLINE = 420  # seconds: both Ray examples of docs/python.md encode the slice twice on one core


def blocks(path, start, end=None):
    """The ```python blocks of the markdown file between the heading (or marker) `start` and the
    next second-level heading (or `end`)."""
    text = open(os.path.join(ROOT, path), encoding="utf-8").read()
    i = text.index(start)
    j = text.find(end, i + len(start)) if end else -1
    if j < 0:
        m = re.compile(r"^## ", re.M).search(text, i + len(start))
        j = m.start() if m else len(text)
    return re.findall(r"^```python\n(.*?)^```", text[i:j], re.S | re.M)


EXAMPLES = [
    ("README.md, Python", blocks("README.md", "<!-- python section -->")),
    ("README.md, Ray", blocks("README.md", "**Indexing on many workers (Ray).**", "**PostgreSQL")),
    ("docs/python.md, Quick start", blocks("docs/python.md", "## Quick start")),
    ("docs/python.md, Ray", blocks("docs/python.md", "## Distributed indexing on Ray")),
]


@pytest.fixture(scope="module")
def data(tmp, cranfield):
    """collection.tsv (300 Cranfield passages), queries.tsv (its first 20 queries), qrels.txt."""
    d = os.path.join(tmp, "docs-data")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "collection.tsv"), "w", encoding="utf-8") as f:
        for i, r in enumerate(qac.read_corpus(os.path.join(cranfield, "cran.all.1400"))):
            if i == 300:
                break
            f.write(f"{r.id}\t{' '.join(r.text.split())}\n")
    queries = list(qac.read_queries(os.path.join(cranfield, "cran.qry")).items())[:20]
    with open(os.path.join(d, "queries.tsv"), "w", encoding="utf-8") as f:
        f.writelines(f"{q}\t{' '.join(t.split())}\n" for q, t in queries)
    qrels = qac.read_qrels(os.path.join(cranfield, "cranqrel"))
    with open(os.path.join(d, "qrels.txt"), "w") as f:
        f.writelines(f"{q} 0 {doc} {rel}\n" for q, _ in queries for doc, rel in qrels.get(q, {}).items())
    return d


@pytest.mark.parametrize("where,code", [(w, c) for w, cs in EXAMPLES for c in cs],
                         ids=[f"{w} #{i}" for w, cs in EXAMPLES for i in range(len(cs))])
def test_example_runs_as_written(where, code, data, tmp):
    run_dir = os.path.join(tmp, "docs-" + re.sub(r"\W+", "-", where) + str(abs(hash(code)) % 1000))
    os.makedirs(run_dir, exist_ok=True)
    for name in os.listdir(data):
        dst = os.path.join(run_dir, name)
        if not os.path.exists(dst):
            os.symlink(os.path.join(data, name), dst)
    script = os.path.join(run_dir, "example.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write(code)
    ray = "ray" in code
    try:
        r = subprocess.run([sys.executable, script], cwd=run_dir, capture_output=True, text=True,
                           timeout=RAY_DEADLINE if ray else 300)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{where}: still running after {e.timeout} s (a plan waiting for resources?):\n{code}")
    assert r.returncode == 0, f"{where} fails as written:\n{code}\n--- stderr:\n{r.stderr[-3000:]}"


def test_every_section_has_examples():
    assert all(cs for _, cs in EXAMPLES), [w for w, cs in EXAMPLES if not cs]
