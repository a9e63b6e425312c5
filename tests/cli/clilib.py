"""Helpers for the CLI tests: tests/testlib.py's checks and qac runner, and
small corpora written by the tests."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import scratch  # noqa: E402,F401
import testdata  # noqa: E402
from testlib import QAC, check, default_model_dir, failures, finish, run, tiny_model, toy_train  # noqa: E402,F401

SHARED = os.environ.get("QAC_SHARED_DATA", "")
CRAN = os.path.join(SHARED, "cranfield")


def cranfield_tsv(path, n, start=0):
    """n Cranfield documents (title and abstract) as id<TAB>text lines."""
    with open(path, "w", encoding="utf-8") as f:
        for d, text in testdata.cranfield_texts()[start:start + n]:
            f.write(f"{d}\t{text}\n")
    return path
