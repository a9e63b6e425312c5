"""The qac Python package against the qac CLI (same bytes) and the Python
reference stack: Encoder.encode equals `qac encode` bit for bit and
sentence-transformers within torch's own float32 error; tokenize equals the
HF tokenizer; Index.build/search, BM25 and write_run equal the CLI's files;
evaluate equals pytrec_eval and `qac eval`; the readers give the CLI's
records; index parts merge into `qac index build`'s index and refuse gaps and
foreign parts; finetune/pretrain run in-process with the CLI's losses bit for
bit, and a callback can stop them; errors carry qac's message; the GIL is
released during long calls."""
import json
import os
import threading
import time

import numpy as np
import pytest

import qac
from conftest import files_equal, run

MAXLEN = 32  # short passages keep the index builds fast; the paths are the same at any length


@pytest.fixture(scope="session")
def enc():
    return qac.Encoder(device="cpu", threads=2)


@pytest.fixture(scope="session")
def texts(cranfield):
    recs = list(qac.read_corpus(os.path.join(cranfield, "cran.all.1400")))
    edge = ["", "a", "wing " * 400, "naïve café – “quotes” 東京 \u00e9", "x\ty"]
    return [r.text for r in recs[:150]] + edge


@pytest.fixture(scope="session")
def corpus_tsv(tmp, texts):
    p = os.path.join(tmp, "texts.tsv")
    with open(p, "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(f"p{i}\t{t.replace(chr(9), ' ')}\n")
    return p


# ---------------------------------------------------------------- encoder

@pytest.mark.parametrize("kind", ["passage", "query"])
def test_encode_equals_cli(qac_bin, tmp, enc, corpus_tsv, kind):
    npy = os.path.join(tmp, f"cli-{kind}.npy")
    run(qac_bin, "encode", "--input", corpus_tsv, "--output", npy, "--kind", kind, "--device", "cpu")
    ref = np.load(npy)
    texts = [r.text for r in qac.read_corpus(corpus_tsv)]
    ours = enc.encode(texts, kind=kind)
    assert ours.dtype == np.float32 and ours.shape == ref.shape and ours.flags.c_contiguous
    assert np.array_equal(ours.view(np.uint32), ref.view(np.uint32)), "Encoder.encode differs from qac encode"
    # any batch size, and one text at a time, give the same bits (the CPU encoder is batch-invariant)
    assert np.array_equal(enc.encode(texts, kind=kind, batch_size=7), ours)
    assert np.array_equal(enc.encode(texts[3], kind=kind)[0], ours[3])


def test_encode_int8_equals_cli(qac_bin, tmp, texts):
    """Encoder(dtype="int8") gives `qac encode --dtype int8`'s bits in any
    batch; without VNNI (the generic path forced) it runs in fp32, warns
    naming VNNI, and reports dtype fp32."""
    sample = texts[:40] + texts[-5:]
    path = os.path.join(tmp, "int8.tsv")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(f"p{i}\t{t.replace(chr(9), ' ')}\n" for i, t in enumerate(sample))
    npy = os.path.join(tmp, "cli-int8.npy")
    run(qac_bin, "encode", "--input", path, "--output", npy, "--dtype", "int8", "--device", "cpu", "--max-len", "64")
    ref = np.load(npy)
    flags = open("/proc/cpuinfo").read()
    vnni = " avx512_vnni" in flags or " avx_vnni" in flags
    e8 = qac.Encoder(device="cpu", dtype="int8", threads=2)
    assert e8.info["dtype"] == ("int8" if vnni else "fp32")
    got = e8.encode([r.text for r in qac.read_corpus(path)], max_len=64)
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32)), "Encoder(dtype=int8) differs from qac encode"
    assert np.array_equal(e8.encode([r.text for r in qac.read_corpus(path)], max_len=64, batch_size=7), got)
    e8.close()
    try:
        qac.cpu_isa("generic")
        with pytest.warns(RuntimeWarning, match="VNNI"):
            eg = qac.Encoder(device="cpu", dtype="int8", threads=2)
        assert eg.info["dtype"] == "fp32"
        eg.close()
    finally:
        qac.cpu_isa("auto")


def test_encode_writes_into_out(enc):
    out = np.zeros((2, enc.dim), dtype=np.float32)
    got = enc.encode(["a wing", "a shock"], out=out)
    assert got is out and np.abs(out).sum() > 0
    with pytest.raises(ValueError):
        enc.encode(["a"], out=np.zeros((1, enc.dim), dtype=np.float64))


def test_encode_vs_sentence_transformers(enc, texts):
    torch = pytest.importorskip("torch")
    from sentence_transformers import SentenceTransformer
    sample = [t for t in texts[:40] if t] + texts[-4:]
    st = SentenceTransformer(qac.default_model_dir(), device="cpu")
    assert st.max_seq_length == enc.max_len  # the default length is the model's limit, as sentence-transformers'
    st32 = st.encode(sample, convert_to_numpy=True, batch_size=16).astype(np.float64)
    st64 = st.to(torch.float64).encode(sample, convert_to_numpy=True, batch_size=16).astype(np.float64)
    ours = enc.encode(sample, kind="passage").astype(np.float64)
    # Bound: torch's own float32 error. qac sums in another order in float32,
    # so it may sit as far from the float64 answer as torch's float32 does,
    # on either side: twice torch's worst distance from float64.
    torch_err = np.abs(st32 - st64).max()
    ours_err = np.abs(ours - st64).max()
    print(f"max |qac - st64| {ours_err:.3e}, max |st32 - st64| {torch_err:.3e}")
    assert ours_err <= 2 * torch_err, (ours_err, torch_err)


def test_tokenize_equals_hf_and_cli(qac_bin, enc):
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(qac.default_model_dir())
    sample = ["Query-as-context pre-training", "naïve café 東京", "", "wing " * 300]
    for t in sample:
        # qac tokenize's defaults: [CLS] text [SEP], whole (add_special_tokens, no truncation)
        assert enc.tokenize(t) == hf(t)["input_ids"]
        assert enc.tokenize(t, special_tokens=False) == hf(t, add_special_tokens=False)["input_ids"]
        assert enc.tokenize(t, max_len=16) == hf(t, truncation=True, max_length=16)["input_ids"]
        assert enc.tokenize(t, tokens=True) == hf.convert_ids_to_tokens(hf(t)["input_ids"])
        # a kind: what encode(kind=...) feeds the model, cut at the model's limit
        assert enc.tokenize(t, kind="query") == hf(t, truncation=True, max_length=enc.max_len)["input_ids"]
    ids = [" ".join(map(str, x)) for x in enc.tokenize(sample)]
    assert ids == run(qac_bin, "tokenize", *sample).stdout.splitlines()
    ids = [" ".join(map(str, x)) for x in enc.tokenize(sample, max_len=5, special_tokens=False)]
    assert ids == run(qac_bin, "tokenize", "--max-len", "5", "--no-special-tokens", *sample).stdout.splitlines()
    with pytest.raises(ValueError, match="special tokens"):
        enc.tokenize("a", kind="query", special_tokens=False)


def test_info(enc):
    i = enc.info
    assert i["dim"] == enc.dim == 384 and i["pooling"] == "mean" and i["normalize"] is True
    assert i["device"] == "cpu" and len(i["fingerprint"]) == 16


# ---------------------------------------------------------------- readers, errors

def test_readers_equal_cli(qac_bin, tmp, cranfield):
    ids = os.path.join(tmp, "qids.txt")
    run(qac_bin, "encode", "--input", os.path.join(cranfield, "cran.qry"), "--kind", "query", "--max-len", "8",
        "--output", os.path.join(tmp, "q.npy"), "--ids", ids, "--device", "cpu")
    q = qac.read_queries(os.path.join(cranfield, "cran.qry"))
    assert list(q) == open(ids).read().split() and len(q) == 225
    qrels = qac.read_qrels(os.path.join(cranfield, "cranqrel"))
    assert len(qrels) == 225 and all(0 <= r <= 5 for d in qrels.values() for r in d.values())
    recs = list(qac.read_corpus(os.path.join(cranfield, "cran.all.1400")))
    assert len(recs) == 1400 and recs[0].id == "1" and recs[0].line == 1
    # a record's offset and line continue the reader there
    again = next(qac.read_corpus(os.path.join(cranfield, "cran.all.1400"), start=(recs[700].offset, recs[700].line)))
    assert again == recs[700]


def test_errors_carry_qac_message(tmp):
    with pytest.raises(qac.NotFoundError) as e:
        qac.Encoder(os.path.join(tmp, "no-model"))
    assert "no-model" in str(e.value) and e.value.status == "not_found"
    assert isinstance(e.value, FileNotFoundError) and isinstance(e.value, qac.QacError)
    bad = os.path.join(tmp, "bad.tsv")
    with open(bad, "w") as f:
        f.write("p1\tok\nthis line has no tab\n")
    with pytest.raises(qac.FormatError) as e:
        list(qac.read_corpus(bad, format="tsv"))
    assert "bad.tsv:2: missing tab" in str(e.value)
    with pytest.raises(qac.InvalidError) as e:
        qac.Index.build(np.zeros((4, 8), np.float32), os.path.join(tmp, "badfactory"), factory="NoSuchIndex",
                        ids="sequential")
    assert "NoSuchIndex" in str(e.value)
    # a refused build leaves no out directory behind (nor the array and ids it saved)
    for out, kw in (("badfactory", dict(factory="NoSuchIndex", ids=[f"d{i}" for i in range(4)])),
                    ("badids", dict(ids=["d0", "d1", "d2"]))):
        with pytest.raises((qac.InvalidError, ValueError)):
            qac.Index.build(np.zeros((4, 8), np.float32), os.path.join(tmp, out), **kw)
        assert not os.path.exists(os.path.join(tmp, out)), os.listdir(os.path.join(tmp, out))


# ---------------------------------------------------------------- indexes, search, BM25, eval

@pytest.fixture(scope="session")
def cran_indexes(qac_bin, tmp, cranfield, enc):
    corpus = os.path.join(cranfield, "cran.all.1400")
    cli = os.path.join(tmp, "ix-cli")
    run(qac_bin, "index", "build", "--corpus", corpus, "--out", cli, "--max-len", str(MAXLEN), "--device", "cpu")
    py = os.path.join(tmp, "ix-py")
    seen = []
    qac.Index.build(corpus, py, encoder=enc, max_len=MAXLEN, progress=seen.append)
    assert any(p["phase"] == "encode" for p in seen) and seen[-1]["event"] == "progress"
    return corpus, cli, py


def test_index_build_equals_cli(cran_indexes):
    _, cli, py = cran_indexes
    for name in ("emb-00000.qemb", "docids.qdoc", "index.faiss", "manifest.json"):
        assert files_equal(cli, py, name), name


def test_search_equals_cli(qac_bin, tmp, cranfield, cran_indexes, enc):
    _, cli, py = cran_indexes
    queries = os.path.join(cranfield, "cran.qry")
    ref = os.path.join(tmp, "cli.run")
    run(qac_bin, "search", "--index", cli, "--queries", queries, "--run", ref, "--k", "100", "--device", "cpu")
    ix = qac.Index.open(py, encoder=enc)
    q = qac.read_queries(queries)
    ids, scores = ix.search(list(q.values()), k=100)
    assert ids.shape == scores.shape == (225, 100) and scores.dtype == np.float32
    ours = os.path.join(tmp, "py.run")
    qac.write_run(ours, list(q), ids, scores)
    assert open(ours).read() == open(ref).read()
    # vectors in, same hits; rows name the same docids
    rows, s2 = ix.search_rows(enc.encode(list(q.values())[:5], kind="query"), k=100)
    assert np.array_equal(s2, scores[:5]) and np.array_equal(ix.docids(rows), ids[:5])
    assert ix.text(rows[0, 0]) == next(r.text for r in qac.read_corpus(os.path.join(cranfield, "cran.all.1400"))
                                       if r.id == ids[0, 0])


def test_index_from_vectors(tmp, enc):
    rng = np.random.default_rng(0)
    v = rng.standard_normal((50, enc.dim)).astype(np.float32)
    # vectors need their ids, as qac index build --vectors does
    with pytest.raises(ValueError, match="ids"):
        qac.Index.build(v, os.path.join(tmp, "ix-noids"), encoder=enc)
    ix = qac.Index.build(v, os.path.join(tmp, "ix-vec"), encoder=enc, ids="sequential")
    assert ix.info["prompts"] is None  # qac did not make the vectors: their prompts are unknown
    ids, scores = ix.search(v[:3], k=5)
    assert list(ids[:, 0]) == ["0", "1", "2"]
    named = qac.Index.build(v, os.path.join(tmp, "ix-vec-ids"), encoder=enc, ids=[f"d{i}" for i in range(50)])
    assert list(named.search(v[:3], k=1)[0][:, 0]) == ["d0", "d1", "d2"]
    v64 = v.astype(np.float64)
    ref = v64[:3] @ v64.T
    rows = ix.search_rows(v[:3], k=5)[0]
    exact = np.take_along_axis(ref, rows, axis=1)
    # a float32 dot product of n terms is within gamma_n * sum |x_i y_i| of
    # the exact value, gamma_n = n u / (1 - n u), u = 2^-24 (Higham 3.1)
    n, u = enc.dim, 2.0 ** -24
    bound = n * u / (1 - n * u) * (np.abs(v64[:3])[:, None, :] * np.abs(v64[rows])).sum(-1)
    assert (np.abs(scores - exact) <= bound).all()
    # text queries against vectors of an unknown model are refused, as qac search refuses them
    anon = qac.Index.build(v, os.path.join(tmp, "ix-anon"), ids="sequential")
    assert anon.info["fingerprint"] == "none"
    with pytest.raises(qac.MismatchError, match="records no model"):
        qac.Index.open(anon.path, encoder=enc).search(["wing"], k=1)
    assert qac.Index.open(anon.path, encoder=enc).search(["wing"], k=1, allow_model_mismatch=True)[0].shape == (1, 1)


def test_bm25_equals_cli(qac_bin, tmp, cranfield):
    corpus, queries = os.path.join(cranfield, "cran.all.1400"), os.path.join(cranfield, "cran.qry")
    cli = os.path.join(tmp, "bm25-cli")
    run(qac_bin, "bm25", "build", "--corpus", corpus, "--out", cli)
    ref = os.path.join(tmp, "bm25-cli.run")
    run(qac_bin, "bm25", "search", "--index", cli, "--queries", queries, "--run", ref, "--k", "100")
    b = qac.BM25.build(corpus, os.path.join(tmp, "bm25-py"))
    assert files_equal(cli, b.path, "bm25.idx") and len(b) == 1400
    q = qac.read_queries(queries)
    ids, scores = b.search(list(q.values()), k=100)
    ours = os.path.join(tmp, "bm25-py.run")
    qac.write_run(ours, list(q), ids, scores, run_id="bm25")
    ref_text = open(ref).read()
    assert open(ours).read().replace(" bm25\n", f" {ref_text.split()[5]}\n") == ref_text


def test_evaluate_equals_pytrec_eval_and_cli(qac_bin, tmp, cranfield, cran_indexes):
    import pytrec_eval
    qrels_path = os.path.join(cranfield, "cranqrel")
    runf = os.path.join(tmp, "cli.run")
    if not os.path.exists(runf):
        pytest.skip("needs test_search_equals_cli's run")
    measures = ["ndcg_cut.10", "map", "recall.100", "P.5"]
    ours = qac.evaluate(qrels_path, runf, measures)
    qrels, run_d = qac.read_qrels(qrels_path), qac.read_run(runf)
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "map", "recall.100", "P.5"}).evaluate(run_d)
    evaluated = [q for q in ref]
    for m in ("ndcg_cut_10", "map", "recall_100", "P_5"):
        mean = sum(ref[q][m] for q in evaluated) / len(evaluated)
        assert abs(ours[m] - mean) < 1e-12, (m, ours[m], mean)  # the same double sums, another order
    # dict inputs, and the CLI's printed numbers
    assert qac.evaluate(qrels, run_d, measures) == ours
    out = run(qac_bin, "eval", "--qrels", qrels_path, "--run", runf, "-m", "ndcg_cut.10").stdout.split()
    assert out[0] == "ndcg_cut_10" and out[2] == f"{ours['ndcg_cut_10']:.4f}"
    # the text rows (runid, relstring) come back as the CLI prints them, less
    # the quotes trec_eval puts around a relstring
    text = qac.evaluate(qrels_path, runf, ["runid", "relstring"], per_query=True)
    cli = run(qac_bin, "eval", "-q", "-m", "runid", "-m", "relstring", qrels_path, runf).stdout
    rows = [[c.strip() for c in line.split("\t")] for line in cli.splitlines()]
    assert rows and all(text[q][m] == (v[1:-1] if m == "relstring" else v) for m, q, v in rows), rows[:3]
    assert len(rows) == sum(len(v) for v in text.values())
    per = qac.evaluate(qrels, run_d, "recip_rank", per_query=True, max_docs=10)
    assert set(per) - {"all"} == set(evaluated) and per["all"]["recip_rank"] == pytest.approx(
        sum(per[q]["recip_rank"] for q in evaluated) / len(evaluated), abs=1e-12)


# ---------------------------------------------------------------- index parts and merge

def test_parts_merge_equals_build(qac_bin, tmp, cran_indexes, enc):
    corpus, cli, _ = cran_indexes
    recs = list(qac.read_corpus(corpus))
    parts = os.path.join(tmp, "parts")
    w = qac.IndexParts(parts, corpus, encoder=enc, max_len=MAXLEN)

    def put(lo, hi, order=1):
        sel = list(range(lo, hi))[::order]
        w.encode(sel, [recs[i].id for i in sel], [recs[i].text for i in sel], [recs[i].offset for i in sel],
                 [recs[i].line for i in sel])

    put(0, 600)
    put(700, 1400, order=-1)  # any order: written as one part per run of rows
    r = run(qac_bin, "index", "merge", "--parts", parts, "--out", os.path.join(tmp, "merged-gap"), check=False)
    assert r.returncode == 1 and "no part holds row 600" in r.stderr, r.stderr
    put(550, 700)  # overlaps 550..599: the same passages, the same bits
    merged = os.path.join(tmp, "merged")
    run(qac_bin, "index", "merge", "--parts", parts, "--out", merged)
    for name in ("emb-00000.qemb", "docids.qdoc", "index.faiss", "manifest.json"):
        assert files_equal(cli, merged, name), name
    # the Python entry point gives the same index
    ix = qac.Index.merge(parts, os.path.join(tmp, "merged-py"))
    assert len(ix) == 1400 and files_equal(cli, ix.path, "index.faiss")
    # parts of another model (or max_len) are refused when writing
    with pytest.raises(qac.InvalidError, match="max_len"):
        qac.IndexParts(parts, corpus, encoder=enc, max_len=MAXLEN + 1)
    # a part whose rows hold other passages is refused when merging
    bad = os.path.join(tmp, "parts-bad")
    wb = qac.IndexParts(bad, corpus, encoder=enc, max_len=MAXLEN)
    wb.encode(range(1400), [r.id for r in recs], [r.text for r in recs], [r.offset for r in recs],
              [r.line for r in recs])
    wb.encode([5], [recs[6].id], [recs[6].text], [recs[6].offset], [recs[6].line])
    r = run(qac_bin, "index", "merge", "--parts", bad, "--out", os.path.join(tmp, "merged-bad"), check=False)
    assert r.returncode == 1 and "disagree on row 5" in r.stderr, r.stderr


# ---------------------------------------------------------------- training

@pytest.fixture(scope="session")
def tevatron(tmp, texts):
    p = os.path.join(tmp, "train.jsonl")
    with open(p, "w") as f:
        for i in range(8):
            f.write(json.dumps({"query_id": str(i), "query": texts[i][:60],
                                "positive_passages": [{"docid": f"d{i}", "title": "", "text": texts[i]}],
                                "negative_passages": [{"docid": f"n{i}", "title": "", "text": texts[i + 20]}]}) + "\n")
    return p


def losses(d):
    return [json.loads(line)["loss"] for line in open(os.path.join(d, "log.jsonl"))]


FT = dict(steps=2, batch=2, n_passages=2, q_max_len=16, p_max_len=24, threads=2, lr=1e-5, tau=0.05)


@pytest.fixture(scope="session")
def ft_py(tmp, tevatron):
    """An uninterrupted in-process fine-tuning run and what its callback saw."""
    seen = []
    out = os.path.join(tmp, "ft-py")
    result = qac.finetune(tevatron, out, progress=seen.append, **FT)
    return out, seen, result


def test_finetune_equals_cli(qac_bin, tmp, tevatron, ft_py):
    cli = os.path.join(tmp, "ft-cli")
    run(qac_bin, "finetune", "--train", tevatron, "--out", cli, "--steps", "2", "--batch", "2", "--n-passages", "2",
        "--q-max-len", "16", "--p-max-len", "24", "--threads", "2", "--lr", "1e-5", "--tau", "0.05")
    out, seen, (total, resumed) = ft_py
    assert (total, resumed) == (2, 0) and [s["step"] for s in seen] == [1, 2]
    assert losses(cli) == losses(out) == [s["loss"] for s in seen]
    assert files_equal(os.path.join(cli, "checkpoint-2"), os.path.join(out, "checkpoint-2"), "model.safetensors")


def test_finetune_callback_stops_and_resumes(tmp, tevatron, ft_py):
    class Stop(Exception):
        pass

    def cb(p):
        if p["event"] == "step" and p["step"] == 1:
            raise Stop("enough")

    out = os.path.join(tmp, "ft-stop")
    with pytest.raises(Stop):
        qac.finetune(tevatron, out, progress=cb, save_every=1, **FT)
    assert len(losses(out)) == 1 and os.path.isdir(os.path.join(out, "checkpoint-1"))  # it was due: written
    with pytest.raises(qac.InvalidError, match="already holds a training run"):
        qac.finetune(tevatron, out, **FT)
    with pytest.raises(qac.MismatchError, match="seed"):
        qac.finetune(tevatron, out, resume=True, save_every=1, **{**FT, "seed": 7})
    # resumed, the run ends as the uninterrupted one (test_finetune_equals_cli's)
    assert qac.finetune(tevatron, out, resume=True, save_every=1, **FT) == (2, 1)
    assert losses(out) == losses(ft_py[0])
    with pytest.raises(TypeError, match="no_such_option"):
        qac.finetune(tevatron, os.path.join(tmp, "ft-bad"), no_such_option=1)


def test_pretrain_equals_cli(qac_bin, tmp, texts):
    data = os.path.join(tmp, "pt.jsonl")
    with open(data, "w") as f:
        for i in range(8):
            f.write(json.dumps({"id": str(i), "text": texts[i], "queries": [texts[i][:40], texts[i + 1][:30]]}) + "\n")
    cli = os.path.join(tmp, "pt-cli")
    run(qac_bin, "pretrain", "--data", data, "--out", cli, "--steps", "2", "--batch", "2", "--max-len", "24",
        "--query-max-len", "12", "--threads", "2")
    seen = []
    assert qac.pretrain(data, os.path.join(tmp, "pt-py"), steps=2, batch=2, max_len=24, query_max_len=12, threads=2,
                        progress=seen.append) == 0
    steps = [s for s in seen if s["event"] == "step"]
    assert losses(cli) == losses(os.path.join(tmp, "pt-py")) == [s["loss"] for s in steps]
    assert files_equal(cli, os.path.join(tmp, "pt-py"), "model.safetensors")


# ---------------------------------------------------------------- the GIL

def test_gil_released_during_encode(enc, texts):
    long_texts = [t for t in texts if len(t) > 200][:24]
    span = {}

    def work():
        span["a"] = time.perf_counter()
        enc.encode(long_texts)
        span["b"] = time.perf_counter()

    th = threading.Thread(target=work)
    stamps = []
    th.start()
    while th.is_alive():
        stamps.append(time.perf_counter())
    th.join()
    # The main thread keeps running Python while the other one encodes: the
    # longest stretch of the call in which it made no turn stays far below
    # the call's length. Were the GIL held through the call, that stretch
    # would be the whole call.
    a, b = span["a"], span["b"]
    marks = [a] + [t for t in stamps if a < t < b] + [b]
    longest = max(y - x for x, y in zip(marks, marks[1:]))
    print(f"encode {b - a:.2f} s, the main thread's longest pause in it {longest:.3f} s")
    assert b - a > 0.2 and longest < (b - a) / 2
