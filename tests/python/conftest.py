"""pytest glue for the Python package's tests: temporary directories from
tests/scratch.py (kept when a test fails), the qac binary, the data."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import scratch  # noqa: E402


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if outcome.get_result().failed:
        scratch.mark_failed()


@pytest.fixture(scope="session")
def tmp():
    return scratch.mkdtemp(prefix="qac-py-")


@pytest.fixture(scope="session")
def qac_bin():
    return os.environ["QAC_BIN"]


@pytest.fixture(scope="session")
def cranfield():
    d = os.path.join(os.environ.get("QAC_SHARED_DATA", ""), "cranfield")
    if not os.path.exists(os.path.join(d, "cran.all.1400")):
        pytest.fail(f"no Cranfield collection at {d}")
    return d
