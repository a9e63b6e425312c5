"""Helpers for the CLI tests: tests/testlib.py's checks and qac runner, and
small corpora written by the tests."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import scratch  # noqa: E402,F401
from testlib import QAC, check, default_model_dir, failures, finish, run, tiny_model, toy_train  # noqa: E402,F401

SHARED = os.environ.get("QAC_SHARED_DATA", "")
CRAN = os.path.join(SHARED, "cranfield")


def cranfield_tsv(path, n, start=0):
    """n Cranfield documents (title and abstract) as id<TAB>text lines."""
    docs, cur = [], None
    with open(os.path.join(CRAN, "cran.all.1400"), encoding="utf-8") as f:
        for line in f:
            if line.startswith(".I "):
                cur = [line.split()[1], [], None]
                docs.append(cur)
            elif line.startswith("."):
                cur[2] = line[1]
            elif cur and cur[2] in ("T", "W"):
                cur[1].append(line.strip())
    with open(path, "w", encoding="utf-8") as f:
        for d, words, _ in docs[start:start + n]:
            f.write(f"{d}\t{' '.join(w for w in words if w)}\n")
    return path

