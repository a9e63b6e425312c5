"""qac.Reranker and training a reranker from Python, against
sentence-transformers' CrossEncoder and the qac command line.

The checkpoints are a small random BERT (the default model's vocabulary,
2 layers of 64, 512 positions) with a fresh head saved by
sentence-transformers' CrossEncoder (one label, sigmoid; two labels,
identity), and a reranker qac.finetune(cross_encoder=True) trains from it.

Bounds, as test_xenc_parity derives them: CrossEncoder runs the same
checkpoint in float64 too; E is the largest error its own fp32 run makes
on these pairs, and qac's fp32 logits must lie within 4 E of the float64
ones (both sides fp32, sums of the same lengths in other orders). Scores
that are functions of the logits with slope <= 1 (sigmoid, softmax's
second entry, a difference of two logits: slope <= 2) get the same bound
(twice it for the difference) plus their own rounding to fp32.

Within qac everything is the same code, so the comparisons there are bit
for bit: Reranker against `qac rerank --pairs`, any chunking and any
thread, qac.finetune against `qac finetune --cross-encoder`.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

import qac
from conftest import files_equal, run

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testlib import tiny_model  # noqa: E402

torch.set_num_threads(2)
BOUND_S = 1.0  # Ctrl-C to KeyboardInterrupt, as test_python_interrupt


def cran_pairs(cranfield, n_long=12):
    """Cranfield queries with documents (judged and not), and long passages
    of several documents joined (over 512 tokens: cut)."""
    docs = [r.text for r in qac.read_corpus(os.path.join(cranfield, "cran.all.1400"))]
    queries = list(qac.read_queries(os.path.join(cranfield, "cran.qry")).values())
    rs = np.random.RandomState(38)
    pairs = [(queries[i % 40], docs[j]) for i, j in enumerate(rs.choice(len(docs), 80, replace=False))]
    for k in range(n_long):
        pairs.append((queries[k], " ".join(docs[j] for j in rs.choice(len(docs), 6, replace=False))))
    pairs += [(queries[0], ""), ("café crème ： 超音速", "naïve résumé façade")]
    return pairs


@pytest.fixture(scope="module")
def pairs(cranfield):
    return cran_pairs(cranfield)


def st_save(tmp, name, num_labels):
    from sentence_transformers import CrossEncoder
    d = os.path.join(tmp, name)
    if not os.path.exists(os.path.join(d, "config.json")):
        base = tiny_model(os.path.join(tmp, "rr-tiny"), hidden=64, layers=2, heads=2, seed=38, max_position=512)
        torch.manual_seed(40 + num_labels)
        CrossEncoder(base, num_labels=num_labels, device="cpu").save(d)
        if not os.path.exists(os.path.join(d, "vocab.txt")):  # qac's WordPiece reads vocab.txt
            with open(os.path.join(base, "vocab.txt"), "rb") as f, open(os.path.join(d, "vocab.txt"), "wb") as g:
                g.write(f.read())
    return d


@pytest.fixture(scope="module")
def ce1(tmp):
    return st_save(tmp, "rr-st1", 1)


@pytest.fixture(scope="module")
def ce2(tmp):
    return st_save(tmp, "rr-st2", 2)


def reference(d, pairs):
    """CrossEncoder.predict: activated scores and logits in fp32, logits in fp64."""
    from sentence_transformers import CrossEncoder
    ce = CrossEncoder(d, device="cpu")
    ident = torch.nn.Identity()
    l32 = np.asarray(ce.predict(pairs, batch_size=32, activation_fn=ident), np.float64).reshape(len(pairs), -1)
    act = np.asarray(ce.predict(pairs, batch_size=32), np.float64).reshape(len(pairs), -1)
    ce.to(torch.float64)
    l64 = np.asarray(ce.predict(pairs, batch_size=32, activation_fn=ident), np.float64).reshape(len(pairs), -1)
    E = float(np.max(np.abs(l32 - l64)))
    assert E > 0, "torch's fp32 and fp64 runs agree exactly: no deviation to derive a bound from"
    return act, l32, l64, E


def ulp(x):
    return np.spacing(np.abs(np.asarray(x, np.float64)).astype(np.float32)).astype(np.float64)


def test_predict_score_rerank_against_cross_encoder(ce1, pairs):
    act, l32, l64, E = reference(ce1, pairs)
    with qac.Reranker(ce1, device="cpu", threads=2) as rr:
        assert rr.num_labels == 1 and rr.max_len == 512 and rr.info["activation"] == "sigmoid"
        logits = rr.predict(pairs, activation=False).astype(np.float64)
        got = rr.predict(pairs).astype(np.float64)
        assert logits.shape == got.shape == (len(pairs),)
        e = float(np.max(np.abs(logits - l64[:, 0])))
        print(f"1 label: {len(pairs)} pairs, E = {E:.3e}, qac vs fp64 {e:.3e} ({e / E:.2f} E)")
        assert e <= 4 * E, f"logits {e:.3e} from fp64, more than 4 E = {4 * E:.3e}"
        assert np.all(np.abs(got - act[:, 0]) <= 5 * E + ulp(act[:, 0])), "predict's sigmoid scores"
        assert rr.truncated >= 12, f"{rr.truncated} pairs cut: the long ones are"
        # score / rerank: one query, its passages (the query tokenized once): the same numbers as pairs
        q, docs = pairs[0][0], [b for a, b in pairs if a == pairs[0][0]]
        rows = [i for i, (a, _) in enumerate(pairs) if a == q]
        prob, raw = rr.score(q, docs), rr.score(q, docs, raw=True)
        assert np.array_equal(raw, logits[rows].astype(np.float32)), "score(raw=True) is the logit, bit for bit"
        assert np.array_equal(prob, got[rows].astype(np.float32)), "score is sigmoid(logit) for one label"
        ranked = rr.rerank(q, docs, top_k=3, return_documents=True)
        order = sorted(range(len(docs)), key=lambda i: (-float(prob[i]), -i))[:3]
        assert [r["index"] for r in ranked] == order and [r["text"] for r in ranked] == [docs[i] for i in order]
        assert [r["score"] for r in ranked] == [float(prob[i]) for i in order]
        # CrossEncoder.rank's order agrees wherever the reference separates two scores beyond the bound
        ref = act[rows, 0]
        full = [r["index"] for r in rr.rerank(q, docs)]
        for a, b in zip(full, full[1:]):
            assert ref[a] >= ref[b] - 10 * E, f"rerank puts {a} before {b}; CrossEncoder scores them {ref[a]}, {ref[b]}"
        assert rr.predict(pairs[3]).shape == (1,), "one (query, passage) pair, as CrossEncoder.predict takes it"
        with pytest.raises(ValueError, match="k must be"):
            rr.rerank(q, docs, top_k=0)
        with pytest.raises(ValueError, match="pair 1"):
            rr.predict([pairs[0], ("only one text",)])


def test_two_labels(ce2, pairs):
    act, l32, l64, E = reference(ce2, pairs)
    with qac.Reranker(ce2, device="cpu", threads=2) as rr:
        assert rr.num_labels == 2 and rr.info["activation"] == "identity"
        logits = rr.predict(pairs, activation=False).astype(np.float64)
        got = rr.predict(pairs)
        assert logits.shape == got.shape == (len(pairs), 2)
        e = float(np.max(np.abs(logits - l64)))
        print(f"2 labels: E = {E:.3e}, qac vs fp64 {e:.3e} ({e / E:.2f} E)")
        assert e <= 4 * E
        assert np.array_equal(got, logits.astype(np.float32)), "identity: predict gives the logits"
        q = pairs[0][0]
        rows = [i for i, (a, _) in enumerate(pairs) if a == q]
        docs = [pairs[i][1] for i in rows]
        raw, prob = rr.score(q, docs, raw=True).astype(np.float64), rr.score(q, docs).astype(np.float64)
        d64 = l64[rows, 1] - l64[rows, 0]
        assert np.all(np.abs(raw - d64) <= 8 * E + ulp(d64)), "raw score: l1 - l0"
        soft = torch.softmax(torch.tensor(l64[rows]), dim=1)[:, 1].numpy()
        assert np.all(np.abs(prob - soft) <= 4 * E + ulp(soft)), "probability: softmax's second entry (TEI's)"


def test_same_bits_as_cli_any_chunk(qac_bin, tmp, ce1, pairs):
    path = os.path.join(tmp, "rr-pairs.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for a, b in pairs:
            f.write(json.dumps({"query": a, "passage": b}) + "\n")
    r = run(qac_bin, "rerank", "--model", ce1, "--pairs", path, "--device", "cpu", "--threads", "2")
    cli = np.array([json.loads(x)["logits"][0] for x in r.stdout.splitlines()], np.float32)
    rr = qac.Reranker(ce1, device="cpu", threads=2, batch_size=8)
    whole = rr.predict(pairs, activation=False)
    assert np.array_equal(whole, cli), "Reranker.predict's logits are qac rerank --pairs's, bit for bit"
    rr._CHUNK = 7  # other library calls, other batches: the same bits
    assert np.array_equal(rr.predict(pairs, activation=False), whole)
    assert np.array_equal(rr.predict(pairs[::-1], activation=False), whole[::-1])
    rr.close()


def test_threads_share_a_reranker(ce1, pairs):
    rr = qac.Reranker(ce1, device="cpu", threads=2)
    ref = rr.predict(pairs)
    errors = []

    def work(t):
        try:
            for k in range(6):
                lo = (t * 7 + k * 5) % (len(pairs) - 20)
                got = rr.predict(pairs[lo:lo + 20])
                if not np.array_equal(got, ref[lo:lo + 20]):
                    errors.append(f"thread {t} call {k}: other scores")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"thread {t}: {e!r}")
    ts = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in ts), "a thread is stuck"
    assert not errors, errors
    # close() waits for a call in flight, which ends with its full answer
    long = pairs * 6
    box = {}
    t = threading.Thread(target=lambda: box.update(got=rr.predict(long)))
    t.start()
    time.sleep(0.2)
    rr.close()
    t.join(timeout=300)
    assert np.array_equal(box["got"], np.tile(ref, 6)), "the call in flight finished whole"
    with pytest.raises(ValueError, match="closed"):
        rr.predict(pairs[:2])
    with pytest.raises(ValueError, match="closed"):
        rr.num_labels
    rr.close()  # twice: harmless
    with qac.Reranker(ce1, device="cpu") as r2:
        assert np.array_equal(r2.predict(pairs[:4]), ref[:4])
    with pytest.raises(ValueError, match="closed"):
        r2.score("q", ["p"])
    with pytest.raises(qac.NotFoundError, match="cross-encoder"):
        qac.Reranker(qac.default_model_dir())  # a bi-encoder: says to train one


def child(d, cranfield):
    pairs = cran_pairs(cranfield)
    rr = qac.Reranker(d, device="cpu", threads=2)
    rr._CHUNK = 1 << 30  # one library call: only the library's cancel hook can stop it early
    ref = rr.predict(pairs[:5])
    print(json.dumps({"ready": True}), flush=True)
    try:
        rr.predict(pairs * 200)  # tens of seconds of scoring, in one call
    except KeyboardInterrupt:
        t1 = time.monotonic()
        print(json.dumps({"interrupted": True, "t1": t1, "usable": bool(np.array_equal(rr.predict(pairs[:5]), ref))}),
              flush=True)
    else:
        print(json.dumps({"interrupted": False}), flush=True)


def test_ctrl_c_stops_predict(ce1, cranfield):
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), ce1, cranfield], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    t0, last = None, None
    try:
        for line in p.stdout:
            last = json.loads(line)
            if last.get("ready"):
                time.sleep(1.0)  # well into the call
                t0 = time.monotonic()
                p.send_signal(signal.SIGINT)
        p.wait(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, p.stderr.read()[-2000:]
    assert t0 is not None and last.get("interrupted"), f"the call ended before the signal: {last}"
    s = last["t1"] - t0
    print(f"predict: KeyboardInterrupt {s:.3f} s after SIGINT")
    assert s < BOUND_S and last["usable"], f"{s:.3f} s; usable after: {last['usable']}"


def test_train_a_reranker_from_python(qac_bin, tmp, cranfield, pairs):
    base = tiny_model(os.path.join(tmp, "rr-tiny-train"), hidden=64, layers=2, heads=2, seed=39, max_position=512)
    cran = lambda f: os.path.join(cranfield, f)  # noqa: E731
    run(qac_bin, "bm25", "build", "--corpus", cran("cran.all.1400"), "--out", os.path.join(tmp, "rr-bm25"))
    run(qac_bin, "bm25", "search", "--index", os.path.join(tmp, "rr-bm25"), "--queries", cran("cran.qry"),
        "--k", "20", "--run", os.path.join(tmp, "rr-bm25.run"))
    neg = os.path.join(tmp, "rr-neg.jsonl")
    run(qac_bin, "mine", "--run", os.path.join(tmp, "rr-bm25.run"), "--queries", cran("cran.qry"), "--qrels",
        cran("cranqrel"), "--corpus", cran("cran.all.1400"), "--n", "6", "--depth", "20", "--out", neg)
    args = dict(steps=3, batch=2, n_passages=4, max_len=96, lr=5e-5, threads=2, seed=5, warmup_ratio=0.1)
    cli = os.path.join(tmp, "rr-ft-cli")
    run(qac_bin, "finetune", "--cross-encoder", "--model", base, "--train", neg, "--out", cli, "--steps", "3",
        "--batch", "2", "--n-passages", "4", "--max-len", "96", "--lr", "5e-5", "--threads", "2", "--seed", "5",
        "--warmup-ratio", "0.1")
    out, seen = os.path.join(tmp, "rr-ft-py"), []
    assert qac.finetune(neg, out, model=base, cross_encoder=True, progress=seen.append, **args) == (3, 0)
    steps = [s for s in seen if s["event"] == "step"]
    assert [s["step"] for s in steps] == [1, 2, 3] and all(np.isfinite(s["loss"]) for s in steps)
    assert files_equal(cli, out, "model.safetensors"), "qac.finetune trains the CLI's reranker, byte for byte"
    # the trained reranker in CrossEncoder and in qac.Reranker
    act, l32, l64, E = reference(out, pairs)
    with qac.Reranker(out, device="cpu", threads=2) as rr:
        e = float(np.max(np.abs(rr.predict(pairs, activation=False).astype(np.float64) - l64[:, 0])))
        print(f"trained: E = {E:.3e}, qac vs fp64 {e:.3e} ({e / E:.2f} E)")
        assert e <= 4 * E
    # options: the bi-encoder's are refused, the reranker's need cross_encoder
    with pytest.raises(TypeError, match="tau"):
        qac.finetune(neg, os.path.join(tmp, "rr-bad"), model=base, cross_encoder=True, tau=0.05, **args)
    with pytest.raises(TypeError, match="max_len"):
        qac.finetune(neg, os.path.join(tmp, "rr-bad"), model=base, max_len=96)

    class Stop(Exception):
        pass

    def stop(p):
        if p["event"] == "step" and p["step"] == 1:
            raise Stop("enough")
    with pytest.raises(Stop):
        qac.finetune(neg, os.path.join(tmp, "rr-stop"), model=base, cross_encoder=True, progress=stop, **args)
    with open(os.path.join(tmp, "rr-stop", "log.jsonl")) as f:
        assert len(f.readlines()) == 1, "the callback's exception stopped the run after step 1"


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2])
