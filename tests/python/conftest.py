"""pytest glue for the Python package's tests: temporary directories from
tests/scratch.py (kept when a test fails), the qac binary, the data, and
helpers the tests share (the CLI run, file comparison, prompt models)."""
import json
import os
import shutil
import subprocess
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


def run(qac_bin, *args, check=True):
    r = subprocess.run([qac_bin, *args], capture_output=True, text=True)
    if check:
        assert r.returncode == 0, f"qac {' '.join(args)}: {r.stderr[-500:]}"
    return r


def files_equal(a, b, name):
    with open(os.path.join(a, name), "rb") as f, open(os.path.join(b, name), "rb") as g:
        return f.read() == g.read()


#: the prompts of the test models: e5's query and passage prompts, and a default one
PROMPTS = {"query": "query: ", "passage": "passage: ", "classify": "classify: "}


def make_prompts_model(d, name, include_prompt):
    """The default model with config_sentence_transformers.json's PROMPTS; with
    include_prompt false its pooling leaves the prompt's tokens out."""
    import qac
    out = os.path.join(d, name)
    if not os.path.exists(out):
        shutil.copytree(qac.default_model_dir(), out)
        with open(os.path.join(out, "config_sentence_transformers.json"), "w") as f:
            json.dump({"prompts": PROMPTS, "default_prompt_name": "classify"}, f)
        pool = os.path.join(out, "1_Pooling", "config.json")
        with open(pool) as f:
            cfg = json.load(f)
        cfg["include_prompt"] = include_prompt
        with open(pool, "w") as f:
            json.dump(cfg, f)
    return out
