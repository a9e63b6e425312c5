"""sentence-transformers prompts, against sentence-transformers itself.

Two models are made from the default model (all-MiniLM-L6-v2) by adding a
config_sentence_transformers.json with prompts ("query: ", "passage: " and a
default "classify: "); the second also sets include_prompt false in its
Pooling config, so the pooling leaves the prompt tokens out. For each, qac's
vectors must equal SentenceTransformer.encode(texts, prompt_name=...) or
encode(texts, prompt=...):
  - qac encode --kind query|passage, and --query-prompt / --passage-prompt;
  - qac serve: TEI /embed with prompt_name (huggingface_hub's
    InferenceClient) and without (the default prompt), /encode kind,
    /v1/embeddings input_type (the openai client), /info's prompts;
  - qac index build + qac search: the manifest records the prompts, the
    top 10 equal a ranking of sentence-transformers' vectors, a search with
    another query prompt is refused (or warned with --allow-prompt-mismatch),
    --server sends the text as typed and gets the same run.

Tolerance: the encoder parity test measured MiniLM's pooled vectors at
1.8e-7 from PyTorch's (fp32 on both sides, other summation orders) and
bounds them at 1e-6; the same bound holds here (a prompt adds a few tokens,
it does not change the arithmetic). Scores are dot products of 384 such
values: |dq.p + q.dp| <= 2e-6, so rankings are compared up to 2e-6."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
from srvlib import QAC, Contract, Server, check, cranfield_subset, finish, http, workdir  # noqa: E402
import testdata  # noqa: E402  (srvlib puts tests/ on the path)

try:
    import openai
    from huggingface_hub import InferenceClient
    from sentence_transformers import SentenceTransformer
except ImportError as e:
    print(f"FAIL: test library missing ({e}); scripts/setup.sh --test installs it")
    sys.exit(1)

EMB_TOL = 1e-6
# At 512 tokens: the encoder parity bound of 1e-6 (tests/encoder, up to 256
# tokens) with attention and pooling sums over twice the tokens: float32
# rounding grows as the square root of the terms summed, so 1e-6 * sqrt(2),
# rounded up.
LONG_TOL = 1.5e-6
SCORE_TOL = 2e-6
PROMPTS = {"query": "query: ", "passage": "passage: ", "classify": "classify: "}
TEXTS = ["what similarity laws must be obeyed when constructing aeroelastic models",
         "boundary layer", "Über die Grenzschicht: naïve café", "x"]


def run(*args):
    return subprocess.run([QAC, *args], capture_output=True, text=True)


def default_model_dir():
    for line in run("info").stdout.splitlines():
        if line.startswith("directory"):
            return line.split(None, 1)[1].strip()
    raise RuntimeError("no default model")


def make_model(d, name, include_prompt):
    out = os.path.join(d, name)
    shutil.copytree(default_model_dir(), out)
    with open(os.path.join(out, "config_sentence_transformers.json"), "w") as f:
        json.dump({"prompts": PROMPTS, "default_prompt_name": "classify"}, f)
    pool = os.path.join(out, "1_Pooling", "config.json")
    cfg = json.load(open(pool))
    cfg["include_prompt"] = include_prompt
    json.dump(cfg, open(pool, "w"))
    return out


def close(a, b, label, tol=EMB_TOL):
    a, b = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    diff = float(np.abs(a - b).max()) if a.shape == b.shape else float("inf")
    print(f"{label}: shape {a.shape}, max |diff| vs sentence-transformers {diff:.3g}")
    return check(diff <= tol, f"{label}: max |diff| {diff:.3g} > {tol}")


def qac_encode(d, model, texts, *args):
    tsv, out = os.path.join(d, "in.tsv"), os.path.join(d, "out.npy")
    with open(tsv, "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(f"t{i}\t{t}\n")
    r = run("encode", "--model", model, "--input", tsv, "--output", out, "--device", "cpu", "--max-len", "256", *args)
    check(r.returncode == 0, f"qac encode {args}: {r.stderr[-300:]}")
    return np.load(out) if r.returncode == 0 else None


def test_encode(d, model, st, tag):
    q = qac_encode(d, model, TEXTS, "--kind", "query")
    p = qac_encode(d, model, TEXTS, "--kind", "passage")
    close(q, st.encode(TEXTS, prompt_name="query"), f"{tag} encode --kind query")
    close(p, st.encode(TEXTS, prompt_name="passage"), f"{tag} encode --kind passage")
    # the test is sensitive: without the prompt the vectors are far apart
    raw = st.encode(TEXTS)
    gap = float(np.abs(st.encode(TEXTS, prompt_name="query") - st.encode(TEXTS, prompt="")).max())
    check(gap > 1e-2, f"{tag}: the query prompt changes the vectors ({gap:.3g})")
    o = qac_encode(d, model, TEXTS, "--kind", "query", "--query-prompt", "Represent this question: ")
    close(o, st.encode(TEXTS, prompt="Represent this question: "), f"{tag} encode --query-prompt")
    o = qac_encode(d, model, TEXTS, "--kind", "passage", "--passage-prompt", "")
    close(o, st.encode(TEXTS, prompt=""), f"{tag} encode --passage-prompt ''")
    # cut short: the prompt fills most of the sequence (sentence-transformers
    # measures the prompt under the same max_seq_length; a fresh instance,
    # since it caches the length per prompt whatever the max_seq_length)
    for ml in (3, 4, 6):
        short = SentenceTransformer(model, device="cpu")
        short.max_seq_length = ml
        o = qac_encode(d, model, TEXTS, "--kind", "query", "--max-len", str(ml))
        close(o, short.encode(TEXTS, prompt_name="query"), f"{tag} encode --kind query --max-len {ml}")
    # and past max_seq_length (256): honoured up to the position table, as
    # sentence-transformers honours a max_seq_length set that high (issue 38:
    # every --max-len past 256 gave the 256-token vector, cosine 0.647 to the
    # 512-token one). Texts of 300 to 600 tokens: some cut at 512, all past 256.
    long_texts = [" ".join(TEXTS[:3]) * k for k in (10, 14, 20)]
    wide = SentenceTransformer(model, device="cpu")
    wide.max_seq_length = 512
    o = qac_encode(d, model, long_texts, "--kind", "passage", "--max-len", "512")
    close(o, wide.encode(long_texts, prompt_name="passage"), f"{tag} encode --kind passage --max-len 512", LONG_TOL)
    return raw


def test_serve(d, model, st, tag, contract):
    srv = Server("--model", model, "--device", "cpu", "--passage-max-len", "256", "--query-max-len", "256")
    try:
        hf = InferenceClient(model=srv.base + "/embed")
        for name in ("query", "passage", "classify"):
            rows = [hf.feature_extraction(t, prompt_name=name) for t in TEXTS]
            close(np.concatenate([np.asarray(x).reshape(1, -1) for x in rows]), st.encode(TEXTS, prompt_name=name),
                  f"{tag} /embed prompt_name={name} (huggingface_hub)")
        s, _, body = http(srv.base, "POST", "/embed", {"inputs": TEXTS})
        check(s == 200, f"{tag} /embed without prompt_name: {s}")
        if s == 200:  # sentence-transformers' encode() applies default_prompt_name too
            close(body, st.encode(TEXTS), f"{tag} /embed default prompt (default_prompt_name)")
        s, _, body = http(srv.base, "POST", "/embed", {"inputs": TEXTS, "prompt_name": "nope"})
        check(s == 422 and isinstance(body, dict) and body.get("error_type") == "Validation"
              and "nope" in body.get("error", ""), f"{tag} /embed unknown prompt_name: 422 Validation ({s} {body})")
        # TEI's /tokenize takes prompt_name as /embed does (issue 38: it ignored
        # one /embed refuses): the prompt, named or the default one, goes
        # before the text and the offsets count in the prompted text, as
        # Hugging Face's tokenizers give them for that string
        s, _, body = http(srv.base, "POST", "/tokenize", {"inputs": TEXTS[0], "prompt_name": "nope"})
        check(s == 422 and isinstance(body, dict) and body.get("error_type") == "Validation"
              and "nope" in body.get("error", ""), f"{tag} TEI /tokenize unknown prompt_name: 422 Validation ({s} {body})")
        tok = st.tokenizer
        for name in ("query", None):
            s, _, body = http(srv.base, "POST", "/tokenize",
                              {"inputs": TEXTS[0], **({"prompt_name": name} if name else {})})
            enc = tok(PROMPTS[name or "classify"] + TEXTS[0], return_offsets_mapping=True)
            want = [(i, a, b) for i, (a, b) in zip(enc["input_ids"], enc["offset_mapping"])
                    if i not in tok.all_special_ids]
            got = [(t["id"], t["start"], t["stop"]) for t in body[0] if not t["special"]] if s == 200 else None
            check(got == want, f"{tag} TEI /tokenize prompt_name={name}: {s} {str(got)[:200]} vs {str(want)[:200]}")
        for kind in ("query", "passage"):
            s, _, body = http(srv.base, "POST", "/encode", {"texts": TEXTS, "kind": kind})
            contract.validate("POST", "/encode", s, body)
            if check(s == 200, f"{tag} /encode kind {kind}: {s}"):
                close(body["embeddings"], st.encode(TEXTS, prompt_name=kind), f"{tag} /encode kind {kind}")
        oa = openai.OpenAI(base_url=srv.base + "/v1", api_key="unused", max_retries=0)
        for it, name in (("query", "query"), ("document", "passage")):
            r = oa.embeddings.create(model="qac", input=TEXTS, encoding_format="float", extra_body={"input_type": it})
            close([e.embedding for e in r.data], st.encode(TEXTS, prompt_name=name),
                  f"{tag} /v1/embeddings input_type {it} (openai)")
        r = oa.embeddings.create(model="qac", input=TEXTS, encoding_format="float")
        close([e.embedding for e in r.data], st.encode(TEXTS), f"{tag} /v1/embeddings default prompt (openai)")
        s, _, info = http(srv.base, "GET", "/info")
        contract.validate("GET", "/info", s, info)
        pr = info.get("prompts", {})
        check(pr.get("query") == "query: " and pr.get("passage") == "passage: " and pr.get("named") == PROMPTS
              and pr.get("default_prompt_name") == "classify"
              and pr.get("include_prompt") == st[1].include_prompt, f"{tag} /info prompts: {pr}")
    finally:
        check(srv.stop() == 0, f"{tag}: the server stops cleanly")


def read_run(path):
    out = {}
    for line in open(path):
        qid, _, doc, rank, score, _ = line.split()
        out.setdefault(qid, []).append((doc, float(score)))
    return out


def same_ranking(run, qids, qv, docids, pv, k, label):
    """qac's top k equal sentence-transformers' up to swaps of scores within SCORE_TOL."""
    scores = qv @ pv.T
    bad = 0
    for i, q in enumerate(qids):
        got = run.get(q, [])
        ref = scores[i]
        kth = np.sort(ref)[::-1][k - 1]
        for doc, s in got:
            want = ref[docids.index(doc)]
            if abs(s - want) > SCORE_TOL or want < kth - SCORE_TOL:
                bad += 1
        bad += len(got) != k
    print(f"{label}: {len(qids)} queries, top {k}, {bad} hits off sentence-transformers' ranking")
    return check(bad == 0, f"{label}: {bad} hits differ from sentence-transformers' ranking")


def cranfield_texts(n):
    """The first n documents' (id, "title text") as qac's Cranfield reader joins them."""
    return testdata.cranfield_texts()[:n]


def test_index(d, model, st, tag, checks):
    corpus = cranfield_subset(os.path.join(d, f"corpus-{tag}.all"), 60)
    docs = cranfield_texts(60)
    queries = [("q1", "what similarity laws must be obeyed by aeroelastic models"),
               ("q2", "boundary layer transition at high mach numbers"),
               ("q3", "heat transfer to a flat plate"), ("q4", "buckling of cylindrical shells")]
    qtsv = os.path.join(d, "queries.tsv")
    with open(qtsv, "w") as f:
        f.writelines(f"{q}\t{t}\n" for q, t in queries)
    ix = os.path.join(d, f"index-{tag}")
    r = run("index", "build", "--model", model, "--corpus", corpus, "--format", "cranfield", "--out", ix,
            "--max-len", "256", "--device", "cpu")
    if not check(r.returncode == 0, f"{tag} index build: {r.stderr[-300:]}"):
        return
    man = json.load(open(os.path.join(ix, "manifest.json")))
    check(man["build"]["model"].get("prompts") == {"query": "query: ", "passage": "passage: "},
          f"{tag}: the manifest records the prompts: {man['build']['model'].get('prompts')}")
    # 256 tokens: the texts fit sentence-transformers' max_seq_length, which also cuts at 256
    pv = st.encode([t for _, t in docs], prompt_name="passage", batch_size=16)
    qv = st.encode([t for _, t in queries], prompt_name="query")
    runf = os.path.join(d, f"run-{tag}.trec")
    r = run("search", "--model", model, "--index", ix, "--queries", qtsv, "--run", runf, "--k", "10",
            "--max-len", "64", "--device", "cpu")
    if check(r.returncode == 0, f"{tag} search: {r.stderr[-300:]}"):
        same_ranking(read_run(runf), [q for q, _ in queries], qv, [i for i, _ in docs], pv, 10, f"{tag} search top 10")
    if not checks:  # what follows does not depend on the model
        return
    # another query prompt than the index's: refused, or searched with a warning when asked
    r = run("search", "--model", model, "--index", ix, "--queries", qtsv, "--run", os.path.join(d, f"x-{tag}.trec"),
            "--query-prompt", "", "--device", "cpu")
    check(r.returncode != 0 and "query prompt" in r.stderr and "query: " in r.stderr
          and not os.path.exists(os.path.join(d, f"x-{tag}.trec")),
          f"{tag}: a search with another query prompt is refused: {r.stderr.strip()[-300:]}")
    r = run("search", "--model", model, "--index", ix, "--queries", qtsv, "--run", os.path.join(d, f"x-{tag}.trec"),
            "--query-prompt", "", "--allow-prompt-mismatch", "--device", "cpu")
    check(r.returncode == 0 and "warning" in r.stderr, f"{tag}: --allow-prompt-mismatch searches with a warning")
    # the server applies its own prompt: --server sends the text as typed and gets the same run
    srv = Server("--model", model, "--index", ix, "--device", "cpu")
    try:
        r = run("search", "--server", srv.base, "--queries", qtsv, "--run", os.path.join(d, "remote.trec"), "--k", "10")
        check(r.returncode == 0 and open(os.path.join(d, "remote.trec")).read() == open(runf).read(),
              f"{tag}: search --server gives the local run byte for byte: {r.stderr[-200:]}")
        r = run("search", "--server", srv.base, "--queries", qtsv, "--run", os.path.join(d, "y.trec"),
                "--query-prompt", "query: ")
        check(r.returncode == 2 and "server" in r.stderr, f"{tag}: --query-prompt with --server is a usage error")
        s, _, info = http(srv.base, "GET", "/info")
        check(info.get("index", {}).get("prompts") == {"query": "query: ", "passage": "passage: "},
              f"{tag}: /info shows the index's prompts: {info.get('index')}")
    finally:
        check(srv.stop() == 0, f"{tag}: the server stops cleanly")
    bad = Server("--model", model, "--index", ix, "--device", "cpu", "--query-prompt", "q: ", wait=False)
    if bad.proc.stdout.readline():  # it started listening: stop it
        bad.stop()
    rc = bad.proc.wait(120)
    err = bad.proc.stderr.read()
    check(rc != 0 and "query prompt" in err, f"{tag}: serve refuses a query prompt the index was not built for: {err[-200:]}")
    ok = Server("--model", model, "--index", ix, "--device", "cpu", "--query-prompt", "q: ", "--allow-prompt-mismatch")
    s, _, info = http(ok.base, "GET", "/info")  # answered: the server is past its start-up
    check(s == 200 and info.get("prompts", {}).get("query") == "q: ", f"{tag}: --query-prompt is the query prompt served")
    rc = ok.stop()
    check(rc == 0 and "query prompt" in ok.proc.stderr.read(), f"{tag}: --allow-prompt-mismatch serves with a warning")


def main():
    d = workdir("prompts")
    contract = Contract()
    for i, (tag, include) in enumerate((("prompts", True), ("exclude", False))):
        model = make_model(d, tag, include)
        st = SentenceTransformer(model, device="cpu")
        check(st[1].include_prompt == include, f"{tag}: sentence-transformers reads include_prompt {include}")
        test_encode(d, model, st, tag)
        test_serve(d, model, st, tag, contract)
        test_index(d, model, st, tag, checks=i == 0)
    finish()


if __name__ == "__main__":
    main()
