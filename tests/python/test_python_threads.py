"""The Python objects shared between threads: 8 threads calling one Encoder
(all cores, and threads=1), one Index with text queries (its query encoder
made lazily, by whichever thread comes first) and one BM25 get exactly the
rows a single thread gets, in 20 runs out of 20. Each thread asks for other
texts than its neighbours, so a call that reads another call's scratch
shows as a wrong row; the CPU encoder is batch-invariant, so a text's vector
in a thread's batch must equal its vector in the one-thread reference bit
for bit. The runs happen in a child process: a crash or a deadlock fails the
test instead of ending pytest.

Also: objects made through the private qac._qac types without __init__,
re-initialised, or closed refuse every call (no NULL dereference); close()
and `with` on every public object, a close that waits for a call in flight;
k checked against the index size before anything is allocated; set_threads,
batch_size and a NUL inside a query validated."""
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import qac
from qac import _qac

RUNS, THREADS = 20, 8
DOCS = 200     # passages of the test index (Cranfield's first)
MAXLEN = 64    # passage tokens: the shared scratch is what is tested, not long texts


def cranfield_dir():
    return os.path.join(os.environ.get("QAC_SHARED_DATA", ""), "cranfield")


def texts_and_queries():
    d = cranfield_dir()
    docs = [r.text for r in qac.read_corpus(os.path.join(d, "cran.all.1400"))][:DOCS]
    queries = [r.text for r in qac.read_corpus(os.path.join(d, "cran.qry"), queries=True)]
    return docs, queries


def slices(n, k):
    """k different subsets of range(n), of different sizes (so batches differ in shape)."""
    return [list(range(i, n, k + i % 3)) for i in range(k)]


def race(fn, nthreads=THREADS):
    """fn(i) on nthreads threads released together; their results (an exception is a result)."""
    out = [None] * nthreads
    barrier = threading.Barrier(nthreads)

    def work(i):
        barrier.wait()
        try:
            out[i] = fn(i)
        except BaseException as e:  # noqa: BLE001 - reported as the thread's result
            out[i] = e

    ts = [threading.Thread(target=work, args=(i,)) for i in range(nthreads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


# ------------------------------------------------------------ the child's runs

def child_encoder(threads):
    docs, queries = texts_and_queries()
    texts = queries[:96] + docs[:32]
    enc = qac.Encoder(device="cpu", threads=threads)
    ref = enc.encode(texts, max_len=MAXLEN)
    parts = slices(len(texts), THREADS)
    bad_runs = bad_rows = 0
    for _ in range(RUNS):
        got = race(lambda i: enc.encode([texts[j] for j in parts[i]], max_len=MAXLEN))
        wrong = 0
        for i, g in enumerate(got):
            if isinstance(g, BaseException):
                print(f"thread {i}: {g!r}", file=sys.stderr)
                wrong += len(parts[i])
                continue
            wrong += int(sum(not np.array_equal(g[r], ref[j]) for r, j in enumerate(parts[i])))
        bad_runs += wrong > 0
        bad_rows += wrong
    return {"runs": RUNS, "bad_runs": bad_runs, "bad_rows": bad_rows}


def child_index(index_dir, bm25_dir):
    _, queries = texts_and_queries()
    queries = queries[:128]
    parts = slices(len(queries), THREADS)
    ref_ix = qac.Index.open(index_dir)
    ref = [ref_ix.search([queries[j] for j in p], k=10) for p in parts]
    bm = qac.BM25.open(bm25_dir)
    bref = [bm.search([queries[j] for j in p], k=10) for p in parts]
    bad_runs = bad_rows = 0
    for run in range(RUNS):
        # odd runs: the index whose query encoder exists; even runs: a new one, whose query
        # encoder is made by the first thread to need it
        ix = ref_ix if run % 2 else qac.Index.open(index_dir)
        got = race(lambda i: (ix.search([queries[j] for j in parts[i]], k=10),
                              bm.search([queries[j] for j in parts[i]], k=10)))
        wrong = 0
        for i, g in enumerate(got):
            if isinstance(g, BaseException):
                print(f"thread {i}: {g!r}", file=sys.stderr)
                wrong += 2 * len(parts[i])
                continue
            for (ids, scores), (rids, rscores) in zip(g, (ref[i], bref[i])):
                wrong += int(sum(not (np.array_equal(ids[r], rids[r]) and np.array_equal(scores[r], rscores[r]))
                                 for r in range(len(parts[i]))))
        bad_runs += wrong > 0
        bad_rows += wrong
    return {"runs": RUNS, "bad_runs": bad_runs, "bad_rows": bad_rows}


def child_uninitialised():
    """Every method of every private type on an object without a successful __init__, then
    re-initialised, then closed: each raises (ValueError, RuntimeError, TypeError), never crashes."""
    calls = {
        _qac.Model: [("info",), ("tokenize", "a", 8, True), ("set_prompts", None, None), ("id_to_token", 1),
                     ("token_to_id", "a")],
        _qac.Encoder: [("encode", ["a"], 0, np.zeros(384, np.float32)), ("max_len", 0), ("dim",), ("device",),
                       ("dtype",)],
        _qac.Index: [("search", np.zeros(384, np.float32), 1, 1, np.zeros(1, np.float32), np.zeros(1, np.int64)),
                     ("docids", np.zeros(1, np.int64)), ("text", 0), ("set_param", "nprobe", 1.0),
                     ("set_threads", 1), ("info",), ("check_prompts", ""), ("check_model", None)],
        _qac.BM25: [("search", ["a"], 1, 0.9, 0.4, False, np.zeros(1, np.float32), np.zeros(1, np.int64),
                     np.zeros(1, np.int32)), ("docids", np.zeros(1, np.int64)), ("count",)],
        _qac.Reader: [("next",), ("next_ids", 1), ("seek", 0, 1), ("format",)],
        _qac.IndexParts: [("encode", np.zeros(1, np.int64), ["a"], ["a"], np.zeros(1, np.uint64),
                           np.zeros(1, np.int64))],
    }
    refused = 0
    for cls, methods in calls.items():
        o = cls.__new__(cls)
        for name, *args in methods:
            try:
                attr = getattr(o, name)
                if callable(attr):
                    attr(*args)
            except (ValueError, RuntimeError, TypeError) as e:
                refused += 1
                if cls is not _qac.Index or name != "check_model":
                    assert "not initialised" in str(e), (cls, name, e)
            else:
                raise AssertionError(f"{cls.__name__}.{name} on an uninitialised object did not raise")
        o.close()  # close on a never-opened object: allowed; it stays unusable (and `with` refuses it)
        try:
            with o:
                pass
        except ValueError:
            refused += 1
        else:
            raise AssertionError(f"with on a closed {cls.__name__}")
    model = _qac.Model()
    try:
        model.__init__()
    except RuntimeError as e:
        assert "already initialised" in str(e)
        refused += 1
    enc = _qac.Encoder(model, "cpu")
    try:
        enc.__init__(model, "cpu")
    except RuntimeError as e:
        assert "already initialised" in str(e)
        refused += 1
    model.close()  # the encoder borrows it: freed when the encoder goes
    out = np.zeros(enc.dim, np.float32)
    enc.encode(["still works"], 0, out)
    enc.close()
    try:
        enc.encode(["a"], 0, out)
    except ValueError as e:
        assert "closed" in str(e)
        refused += 1
    return {"refused": refused}


def run_child(*args, timeout=300):
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    try:
        r = subprocess.run([sys.executable, os.path.abspath(__file__), *args], capture_output=True, text=True,
                           timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{args}: no answer in {timeout} s (a deadlock?); stderr: {str(e.stderr)[-2000:]}")
    fatal = [line for line in r.stderr.splitlines() if "Fatal Python error" in line or "Error" in line]
    assert r.returncode == 0, f"{args}: exit {r.returncode} (a crash?): {fatal[:5]}; stderr: {r.stderr[-1500:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------ fixtures

@pytest.fixture(scope="module")
def built(tmp):
    docs, _ = texts_and_queries()
    corpus = os.path.join(tmp, "threads-corpus.tsv")
    with open(corpus, "w", encoding="utf-8") as f:
        for i, t in enumerate(docs):
            f.write(f"d{i}\t{t}\n")
    index_dir, bm25_dir = os.path.join(tmp, "threads-index"), os.path.join(tmp, "threads-bm25")
    qac.Index.build(corpus, index_dir, max_len=MAXLEN)
    qac.BM25.build(corpus, bm25_dir)
    return corpus, index_dir, bm25_dir


# ------------------------------------------------------------ shared by threads

@pytest.mark.parametrize("threads", [0, 1])
def test_encoder_shared_by_8_threads(threads):
    r = run_child("encoder", str(threads))
    assert r == {"runs": RUNS, "bad_runs": 0, "bad_rows": 0}, \
        f"Encoder(threads={threads}) shared by {THREADS} threads: {r}"


def test_index_text_search_and_bm25_shared_by_8_threads(built):
    _, index_dir, bm25_dir = built
    r = run_child("index", index_dir, bm25_dir)
    assert r == {"runs": RUNS, "bad_runs": 0, "bad_rows": 0}, f"Index/BM25 shared by {THREADS} threads: {r}"


def test_uninitialised_reinitialised_and_closed_objects_raise():
    r = run_child("uninitialised")
    assert r["refused"] == 5 + 5 + 8 + 3 + 4 + 1 + 6 + 3


def test_close_and_with(built):
    corpus, index_dir, bm25_dir = built
    with qac.Encoder(device="cpu") as enc:
        v = enc.encode(["a wing"])
    with pytest.raises(ValueError, match="closed"):
        enc.encode(["a wing"])
    enc.close()  # twice: harmless
    with qac.Index.open(index_dir) as ix:
        ids, _ = ix.search(["a wing"], k=3)
        own = ix._encoder
    with pytest.raises(ValueError, match="closed"):
        ix.search(["a wing"], k=3)
    with pytest.raises(ValueError, match="closed"):
        own.encode(["a wing"])  # the index made it: closed with it
    with qac.Encoder(device="cpu") as mine:
        with qac.Index.open(index_dir, encoder=mine) as ix2:
            assert np.array_equal(ix2.search(["a wing"], k=3)[0], ids)
        assert np.array_equal(mine.encode(["a wing"]), v)  # a given encoder stays open
    with qac.BM25.open(bm25_dir) as bm:
        bm.search("wing", k=2)
    with pytest.raises(ValueError, match="closed"):
        bm.search("wing", k=2)


def test_close_waits_for_the_call_in_flight():
    """close() from another thread while an encode runs: the encode finishes with its right
    answer, then the encoder is freed; calls after that raise."""
    docs, _ = texts_and_queries()
    enc = qac.Encoder(device="cpu", threads=1)
    ref = enc.encode(docs[:24], max_len=MAXLEN)
    started, got = threading.Event(), {}

    def encode():
        started.set()
        got["v"] = enc.encode(docs[:24], max_len=MAXLEN)

    t = threading.Thread(target=encode)
    t.start()
    started.wait()
    time.sleep(0.05)
    enc.close()
    t.join()
    assert np.array_equal(got["v"], ref)
    with pytest.raises(ValueError, match="closed"):
        enc.encode(["a"])


def test_k_against_the_index_size(built):
    _, index_dir, bm25_dir = built
    ix, bm = qac.Index.open(index_dir), qac.BM25.open(bm25_dir)
    t0 = time.monotonic()
    ids, scores = ix.search(["a wing", "a shock"], k=10 ** 9)  # 23 GB of arrays before the check
    assert ids.shape == scores.shape == (2, DOCS) and time.monotonic() - t0 < 30
    assert np.array_equal(ids[:, :10], ix.search(["a wing", "a shock"], k=10)[0])
    bids, _ = bm.search(["wing"], k=10 ** 9)
    assert bids.shape == (1, DOCS)
    for bad in (0, -1, 2.5, "3", True):
        with pytest.raises(ValueError, match="k must be"):
            ix.search(["a wing"], k=bad)
        with pytest.raises(ValueError, match="k must be"):
            bm.search(["wing"], k=bad)
    with pytest.raises(ValueError, match="k"):  # the private type checks it too
        ix._ix.search(np.zeros(384, np.float32), 1, DOCS + 1, np.zeros(DOCS + 1, np.float32),
                      np.zeros(DOCS + 1, np.int64))


def test_set_threads_batch_size_and_nul_validated(built):
    _, index_dir, bm25_dir = built
    ix, bm = qac.Index.open(index_dir), qac.BM25.open(bm25_dir)
    for bad in (-1, 1025, 10 ** 12, -(10 ** 12)):
        with pytest.raises(ValueError, match="threads"):
            ix.set_threads(bad)
    ix.set_threads(1)
    ix.set_threads(0)
    enc = qac.Encoder(device="cpu")
    for bad in (0, -1, 4097, 10 ** 12, 1.5, True):
        with pytest.raises(ValueError, match="batch_size"):
            enc.encode(["a"], batch_size=bad)
    for bad in (-1, 4097, 10 ** 12):
        with pytest.raises(ValueError, match="batch_size"):
            qac.Encoder(device="cpu", batch_size=bad)
    for bad in (-1, 1025, 10 ** 12):
        with pytest.raises(ValueError, match="threads"):
            qac.Encoder(device="cpu", threads=bad)
    with pytest.raises(ValueError, match="max_len"):
        enc.encode(["a"], max_len=-3)
    assert np.array_equal(enc.encode(["a wing"], batch_size=4096), enc.encode(["a wing"]))
    for q in (["a wing\0a shock"], [b"wing\0"]):
        with pytest.raises(ValueError, match="NUL"):
            ix.search(q, k=3)
        with pytest.raises(ValueError, match="NUL"):
            bm.search(q, k=3)
    with pytest.raises(qac.BusyError):  # prompts change only before an encoder uses the model
        enc._model.set_prompts("query: ", None)


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "encoder":
        result = child_encoder(int(sys.argv[2]))
    elif what == "index":
        result = child_index(sys.argv[2], sys.argv[3])
    else:
        result = child_uninitialised()
    print(json.dumps(result))
