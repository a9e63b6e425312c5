"""Ctrl-C in Python: a SIGINT sent to a process in the middle of a long
Encoder.encode, a text Index.search, a BM25.search, an Index.build (from a
corpus or from vectors), an Index.merge or a
wait for another thread's encode raises KeyboardInterrupt within 1 s, measured from the kill
to the except clause (CLOCK_MONOTONIC, shared by the two processes). The
object then still gives the reference answer, and the interrupted build
(or merge), run again, resumes to the bytes one uninterrupted run writes.
Builds from vectors and merges are asked to stop before each shard they
write (many small shards here, so that the call lasts seconds).

The bound: the library is asked to stop before each batch and each layer;
one layer of the default batch (32 passages of up to 256 tokens) takes
about 0.1 s on two idle cores, so 1 s leaves room for a loaded machine."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import qac
from conftest import files_equal, run

BOUND_S = 1.0
DOCS = 600      # passages of the build: the first of Cranfield
SHARD = 64      # rows per shard: the interrupted build has written some
BUILD_OPTS = dict(shard_size=SHARD, max_len=128)
VROWS, VSHARD = 50000, 32     # Index.build from vectors: 1,563 shards
MROWS, MSHARD = 20000, 16     # Index.merge: 1,250 shards


def cranfield_dir():
    return os.path.join(os.environ.get("QAC_SHARED_DATA", ""), "cranfield")


def passages():
    return [r.text for r in qac.read_corpus(os.path.join(cranfield_dir(), "cran.all.1400"))]


def say(**kw):
    print(json.dumps(kw), flush=True)


# ------------------------------------------------------------ the child's calls

def child(what, arg):
    docs = passages()
    if what == "encode":
        enc = qac.Encoder(device="cpu")
        ref = enc.encode(docs[:4])
        work = lambda: enc.encode(docs * 4)  # noqa: E731 - minutes of encoding
        check = lambda: bool(np.array_equal(enc.encode(docs[:4]), ref))  # noqa: E731
    elif what == "search":
        queries = list(qac.read_queries(os.path.join(cranfield_dir(), "cran.qry")).values())
        ix = qac.Index.open(arg, encoder=qac.Encoder(device="cpu"))
        ref = ix.search(queries[:3], k=5)
        work = lambda: ix.search(queries * 100, k=5)  # noqa: E731 - 22,500 queries
        check = lambda: all(np.array_equal(a, b) for a, b in zip(ix.search(queries[:3], k=5), ref))  # noqa: E731
    elif what == "bm25":
        queries = list(qac.read_queries(os.path.join(cranfield_dir(), "cran.qry")).values())
        bm = qac.BM25.open(arg)
        ref = bm.search(queries[:3], k=5)
        work = lambda: bm.search(queries * 2000, k=5)  # noqa: E731 - 450,000 queries
        check = lambda: all(np.array_equal(a, b) for a, b in zip(bm.search(queries[:3], k=5), ref))  # noqa: E731
    elif what == "wait":  # the main thread waits for another thread's encode of the same encoder
        enc = qac.Encoder(device="cpu")
        ref = enc.encode(docs[:4])
        other = threading.Thread(target=lambda: enc.encode(docs[:256]), daemon=True)
        other.start()
        time.sleep(0.2)
        work = lambda: enc.encode(docs[:4])  # noqa: E731
        check = lambda: (other.join(), bool(np.array_equal(enc.encode(docs[:4]), ref)))[1]  # noqa: E731
    elif what == "build":
        corpus, out = arg.split(",")
        enc = qac.Encoder(device="cpu")

        def progress(p):
            if p["phase"] == "encode":
                say(done=p["done"])
        work = lambda: qac.Index.build(corpus, out, encoder=enc, progress=progress, **BUILD_OPTS)  # noqa: E731
        check = lambda: len(qac.Index.build(corpus, out, encoder=enc, **BUILD_OPTS)) == DOCS  # noqa: E731
    elif what == "vectors":
        npy, out = arg.split(",")

        def progress(p):
            if p["phase"] == "load":
                say(done=p["done"])
        opts = dict(ids="sequential", shard_size=VSHARD)
        work = lambda: qac.Index.build(npy, out, progress=progress, **opts)  # noqa: E731
        check = lambda: len(qac.Index.build(npy, out, **opts)) == VROWS  # noqa: E731
    elif what == "merge":
        parts, out = arg.split(",")
        work = lambda: qac.Index.merge(parts, out, shard_size=MSHARD)  # noqa: E731
        check = lambda: len(qac.Index.merge(parts, out, shard_size=MSHARD)) == MROWS  # noqa: E731
    say(ready=True)
    try:
        work()
    except KeyboardInterrupt:
        t1 = time.monotonic()
        say(interrupted=True, t1=t1, usable=check())
    else:
        say(interrupted=False)


def interrupt(what, arg, *, after_rows=None, delay=1.0):
    """Run the child, SIGINT it mid-call; (seconds to KeyboardInterrupt, its last report)."""
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), what, arg], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    try:
        reports, t0 = [], None
        for line in p.stdout:
            r = json.loads(line)
            reports.append(r)
            if t0 is None and (r.get("ready") and after_rows is None or r.get("done", 0) >= (after_rows or 1)):
                if after_rows is None:
                    time.sleep(delay)  # well into the call
                t0 = time.monotonic()
                p.send_signal(signal.SIGINT)
        p.wait(timeout=600)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, f"{what}: exit {p.returncode}: {p.stderr.read()[-2000:]}"
    last = reports[-1]
    assert t0 is not None and last.get("interrupted"), f"{what}: the call ended before the signal: {reports[-3:]}"
    return last["t1"] - t0, last


# ------------------------------------------------------------ the tests

@pytest.fixture(scope="module")
def corpus(tmp):
    p = os.path.join(tmp, "interrupt-corpus.tsv")
    with open(p, "w", encoding="utf-8") as f:
        for i, t in enumerate(passages()[:DOCS]):
            f.write(f"d{i}\t{t}\n")
    return p


@pytest.mark.parametrize("what", ["encode", "wait"])
def test_ctrl_c_stops_encode(what):
    s, last = interrupt(what, "-")
    print(f"{what}: KeyboardInterrupt {s:.3f} s after SIGINT")
    assert s < BOUND_S, f"{what}: KeyboardInterrupt {s:.3f} s after SIGINT"
    assert last["usable"], f"{what}: the encoder gives other vectors after the interrupt"


def test_ctrl_c_stops_text_search(tmp, corpus):
    ix = os.path.join(tmp, "interrupt-search-index")
    qac.Index.build(corpus, ix, max_len=32)
    s, last = interrupt("search", ix)
    print(f"search: KeyboardInterrupt {s:.3f} s after SIGINT")
    assert s < BOUND_S, f"search: KeyboardInterrupt {s:.3f} s after SIGINT"
    assert last["usable"], "search: other results after the interrupt"


def test_ctrl_c_stops_bm25_search(tmp, corpus):
    bm = os.path.join(tmp, "interrupt-bm25")
    qac.BM25.build(corpus, bm)
    s, last = interrupt("bm25", bm)
    print(f"bm25: KeyboardInterrupt {s:.3f} s after SIGINT")
    assert s < BOUND_S, f"bm25: KeyboardInterrupt {s:.3f} s after SIGINT"
    assert last["usable"], "bm25: other results after the interrupt"


def test_ctrl_c_stops_build_and_it_resumes(qac_bin, tmp, corpus):
    out = os.path.join(tmp, "interrupt-build")
    s, last = interrupt("build", f"{corpus},{out}", after_rows=3 * SHARD)
    print(f"build: KeyboardInterrupt {s:.3f} s after SIGINT")
    assert s < BOUND_S, f"build: KeyboardInterrupt {s:.3f} s after SIGINT"
    assert last["usable"], "the resumed build has another size"
    cli = os.path.join(tmp, "interrupt-build-cli")
    run(qac_bin, "index", "build", "--corpus", corpus, "--out", cli, "--device", "cpu",
        "--shard-size", str(SHARD), "--max-len", str(BUILD_OPTS["max_len"]))
    names = sorted(os.listdir(cli))
    assert sorted(os.listdir(out)) == names
    for name in names:
        assert files_equal(cli, out, name), f"{name} differs from qac index build's"


def test_progress_exception_stops_build(tmp, corpus):
    """An exception from the progress callback stops the build as Ctrl-C does (within a
    batch), not after the whole corpus."""
    out = os.path.join(tmp, "interrupt-build-progress")

    def stop(p):
        if p["phase"] == "encode" and p["done"] >= SHARD:
            raise RuntimeError("enough")
    with pytest.raises(RuntimeError, match="enough"):
        qac.Index.build(corpus, out, progress=stop, **BUILD_OPTS)
    with open(os.path.join(out, "manifest.json")) as f:
        count = json.load(f)["count"]
    assert SHARD <= count <= 3 * SHARD, f"{count} rows written after the callback raised at {SHARD}"


def same_dirs(a, b):
    names = sorted(os.listdir(a))
    assert sorted(os.listdir(b)) == names, (names, sorted(os.listdir(b)))
    for name in names:
        assert files_equal(a, b, name), f"{name} differs from an uninterrupted run's"


def test_ctrl_c_stops_build_vectors_and_it_resumes(tmp):
    npy = os.path.join(tmp, "interrupt-vectors.npy")
    np.save(npy, np.random.RandomState(4).randn(VROWS, 8).astype(np.float32))
    out = os.path.join(tmp, "interrupt-vectors")
    s, last = interrupt("vectors", f"{npy},{out}", after_rows=3 * VSHARD)
    print(f"build from vectors: KeyboardInterrupt {s:.3f} s after SIGINT")
    assert s < BOUND_S, f"build from vectors: KeyboardInterrupt {s:.3f} s after SIGINT"
    assert last["usable"], "the resumed build from vectors has another size"
    whole = os.path.join(tmp, "interrupt-vectors-whole")
    qac.Index.build(npy, whole, ids="sequential", shard_size=VSHARD)
    same_dirs(whole, out)


def test_ctrl_c_stops_merge_and_it_resumes(tmp):
    from testlib import tiny_model
    corpus = os.path.join(tmp, "interrupt-merge.tsv")
    with open(corpus, "w", encoding="utf-8") as f:
        for i in range(MROWS):
            f.write(f"m{i}\tpassage {i % 97} of {i % 13}\n")
    enc = qac.Encoder(tiny_model(os.path.join(tmp, "interrupt-tiny")), device="cpu")
    parts = os.path.join(tmp, "interrupt-parts")
    recs = list(qac.read_corpus(corpus))
    with qac.IndexParts(parts, corpus, encoder=enc, max_len=16) as w:
        w.encode(list(range(MROWS)), [r.id for r in recs], [r.text for r in recs], [r.offset for r in recs],
                 [r.line for r in recs])
    out = os.path.join(tmp, "interrupt-merged")
    s, last = interrupt("merge", f"{parts},{out}", delay=0.3)
    print(f"merge: KeyboardInterrupt {s:.3f} s after SIGINT")
    assert s < BOUND_S, f"merge: KeyboardInterrupt {s:.3f} s after SIGINT"
    assert last["usable"], "the resumed merge has another size"
    whole = os.path.join(tmp, "interrupt-merged-whole")
    qac.Index.merge(parts, whole, shard_size=MSHARD)
    same_dirs(whole, out)


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2])
