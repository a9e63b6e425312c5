"""Query and passage prompts in the Python package, against the qac CLI
(same bytes) and sentence-transformers itself.

Two models are the default model with config_sentence_transformers.json's
prompts ("query: ", "passage: "); the second's pooling leaves the prompt's
tokens out (include_prompt false). For each:
  - Encoder.encode(kind=...) equals `qac encode --kind` bit for bit and
    SentenceTransformer.encode(prompt_name=...) within torch's own float32
    error; Encoder(query_prompt=..., passage_prompt=...) equals
    --query-prompt / --passage-prompt and encode(prompt=...);
  - tokenize(kind=...) is the sequence sentence-transformers feeds its model;
  - Index.build and IndexParts + `qac index merge` write `qac index build`'s
    files (the manifest records the prompts); Index.search(texts) writes
    `qac search`'s run, refuses another query prompt and, with
    allow_prompt_mismatch, warns and equals the CLI's run."""
import os

import numpy as np
import pytest

import qac
from conftest import PROMPTS, files_equal, make_prompts_model, run

MAXLEN = 64  # short passages keep the builds fast; the prompt still fits with room to spare
# The encoder parity test measured MiniLM's pooled vectors at 1.8e-7 from
# PyTorch's (fp32 both sides, other summation orders) and bounds them at
# about 5x that, 1e-6 (tests/encoder/test_encoder_parity.c); tests/prompts
# holds qac encode --kind to the same bound. A prompt adds tokens, not
# arithmetic. Measured here against torch in float64: up to 2.9e-7, where
# torch's own float32 is up to 1.9e-7 away.
EMB_TOL = 1e-6
OTHER = "Represent this question: "


@pytest.fixture(scope="session")
def texts(cranfield):
    recs = list(qac.read_corpus(os.path.join(cranfield, "cran.all.1400")))
    return [r.text for r in recs[:30]] + ["", "a", "wing " * 400, "naïve café – “quotes” 東京 \u00e9"]


@pytest.fixture(scope="session")
def corpus_tsv(tmp, texts):
    p = os.path.join(tmp, "prompt-texts.tsv")
    with open(p, "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(f"p{i}\t{t}\n")
    return p


@pytest.fixture(scope="session", params=[True, False], ids=["include_prompt", "pool_without_prompt"])
def model(request, tmp):
    return make_prompts_model(tmp, f"prompts-{request.param}", request.param)


def cli_encode(qac_bin, model, corpus, out, *args):
    run(qac_bin, "encode", "--model", model, "--input", corpus, "--output", out, "--device", "cpu", *args)
    return np.load(out)


def test_encode_equals_cli_and_sentence_transformers(qac_bin, tmp, model, corpus_tsv, texts):
    torch = pytest.importorskip("torch")
    from sentence_transformers import SentenceTransformer
    enc = qac.Encoder(model, device="cpu", threads=2)
    assert enc.prompts["query"] == PROMPTS["query"] and enc.prompts["passage"] == PROMPTS["passage"]
    assert enc.info["prompts"]["named"] == PROMPTS and enc.info["prompts"]["default_prompt_name"] == "classify"
    st = SentenceTransformer(model, device="cpu")
    st64 = SentenceTransformer(model, device="cpu").to(torch.float64)
    assert st.max_seq_length == enc.max_len
    assert enc.prompts["include_prompt"] == st[1].include_prompt
    sample = texts[:12] + texts[-4:]
    tag = os.path.basename(model)

    def against_st(ours, label, **how):
        ref32 = st.encode(sample, batch_size=16, **how).astype(np.float64)
        ref64 = st64.encode(sample, batch_size=16, **how).astype(np.float64)
        torch_err = np.abs(ref32 - ref64).max()
        ours_err = np.abs(np.concatenate([ours[:12], ours[-4:]]).astype(np.float64) - ref64).max()
        print(f"{tag} {label}: max |qac - st64| {ours_err:.3e}, |st32 - st64| {torch_err:.3e}")
        assert ours_err <= EMB_TOL, (label, ours_err, torch_err)
        return ref32


    for kind in ("query", "passage"):
        ref = cli_encode(qac_bin, model, corpus_tsv, os.path.join(tmp, f"{tag}-{kind}.npy"), "--kind", kind)
        ours = enc.encode(texts, kind=kind)
        assert np.array_equal(ours.view(np.uint32), ref.view(np.uint32)), f"{kind}: differs from qac encode"
        ref = against_st(ours, f"encode(kind={kind!r})", prompt_name=kind)
        # sensitive: without the prompt a text's vector is far outside the bound
        gap = np.abs(st.encode(sample, batch_size=16, prompt="") - ref).max()
        assert gap > 1000 * EMB_TOL, (kind, gap)
        # tokenize(kind=...): the sequence sentence-transformers' model reads
        for t in sample:
            want = st.preprocess([t], prompt=PROMPTS[kind])["input_ids"][0].tolist()
            assert enc.tokenize(t, kind=kind) == want, (kind, t[:40])

    over = qac.Encoder(model, device="cpu", threads=2, query_prompt=OTHER, passage_prompt="")
    assert over.prompts["query"] == OTHER and over.prompts["passage"] == ""
    ref = cli_encode(qac_bin, model, corpus_tsv, os.path.join(tmp, f"{tag}-qp.npy"), "--kind", "query",
                     "--query-prompt", OTHER)
    ours = over.encode(texts, kind="query")
    assert np.array_equal(ours, ref), "Encoder(query_prompt=...) differs from --query-prompt"
    against_st(ours, "query_prompt=OTHER", prompt=OTHER)
    ref = cli_encode(qac_bin, model, corpus_tsv, os.path.join(tmp, f"{tag}-pp.npy"), "--kind", "passage",
                     "--passage-prompt", "")
    assert np.array_equal(over.encode(texts, kind="passage"), ref), "passage_prompt='' differs from the CLI's"


def test_index_build_merge_search_equal_cli(qac_bin, tmp, model, corpus_tsv, texts):
    tag = os.path.basename(model)
    enc = qac.Encoder(model, device="cpu", threads=2)
    cli = os.path.join(tmp, f"{tag}-ix-cli")
    run(qac_bin, "index", "build", "--model", model, "--corpus", corpus_tsv, "--out", cli, "--max-len", str(MAXLEN),
        "--device", "cpu")
    py = qac.Index.build(corpus_tsv, os.path.join(tmp, f"{tag}-ix-py"), encoder=enc, max_len=MAXLEN)
    assert py.info["prompts"] == {"query": PROMPTS["query"], "passage": PROMPTS["passage"]}
    # parts in two pieces, any order, merged by the CLI
    recs = list(qac.read_corpus(corpus_tsv))
    parts = os.path.join(tmp, f"{tag}-parts")
    w = qac.IndexParts(parts, corpus_tsv, encoder=enc, max_len=MAXLEN)
    for sel in (range(0, 20), range(len(recs) - 1, 19, -1)):
        sel = list(sel)
        w.encode(sel, [recs[i].id for i in sel], [recs[i].text for i in sel], [recs[i].offset for i in sel],
                 [recs[i].line for i in sel])
    merged = os.path.join(tmp, f"{tag}-merged")
    run(qac_bin, "index", "merge", "--parts", parts, "--out", merged)
    for name in ("emb-00000.qemb", "docids.qdoc", "index.faiss", "manifest.json"):
        assert files_equal(cli, py.path, name), f"Index.build: {name}"
        assert files_equal(cli, merged, name), f"qac index merge: {name}"

    qtsv = os.path.join(tmp, "prompt-queries.tsv")
    queries = [t[:80] for t in texts[:12]] + ["boundary layer", "x"]
    with open(qtsv, "w", encoding="utf-8") as f:
        f.writelines(f"q{i}\t{q}\n" for i, q in enumerate(queries))
    qids = [f"q{i}" for i in range(len(queries))]

    def same_run(ix, name, *cli_args, **search):
        ref = os.path.join(tmp, f"{tag}-{name}.cli.run")
        run(qac_bin, "search", "--index", cli, "--model", model, "--queries", qtsv, "--run", ref, "--k", "20",
            "--device", "cpu", *cli_args)
        ids, scores = ix.search(queries, k=20, **search)
        ours = os.path.join(tmp, f"{tag}-{name}.py.run")
        qac.write_run(ours, qids, ids, scores)
        assert open(ours).read() == open(ref).read(), f"{name}: differs from qac search"

    same_run(py, "search")
    # another query prompt than the index's: refused, or searched with a warning
    other = qac.Index.open(py.path, encoder=qac.Encoder(model, device="cpu", threads=2, query_prompt=""))
    with pytest.raises(qac.MismatchError, match="built for query prompt \"query: \""):
        other.search(queries, k=20)
    with pytest.warns(UserWarning, match="query prompt"):
        same_run(other, "mismatch", "--query-prompt", "", "--allow-prompt-mismatch", allow_prompt_mismatch=True)
