#!/usr/bin/env python3
"""qac serve --reranker against real clients and qac's own offline scores.

A reranker qac starts from a tiny random BERT is served beside a dense and
a BM25 index of the first 300 Cranfield documents (the same tiny BERT as
the bi-encoder). Every score is compared with `qac rerank` offline on the
same model (the CPU gives a pair the same bits in any batch, so equal):
  - TEI's POST /rerank through a plain HTTP client: probabilities and raw
    scores, the order (score descending, equal scores by index descending),
    return_text, truncation_direction left, truncate false (422), TEI's
    statuses: 400 no texts, 413 past --max-texts, 422 wrong types, and 424
    from a server without a reranker;
  - POST /v1/rerank through the cohere Python client (co.rerank with top_n
    and return_documents) and as raw JSON (documents as objects);
  - /search with rerank in the dense, BM25 and hybrid modes: the top k of
    the first stage's top rerank_depth reranked equal `qac search` (or
    `qac bm25 search`) then `qac rerank --depth` offline; so does
    `qac search --rerank --rerank-depth`, offline and with --server (which
    refuses a model other than the server's reranker).
Requests sent at once give the scores sent alone."""
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import scratch  # noqa: E402
import testdata  # noqa: E402
from testlib import QAC, check, finish, run, tiny_model  # noqa: E402

TOOL = sys.argv[1]
tmp = scratch.mkdtemp(prefix="qac-xenc-serve-")
p = lambda name: os.path.join(tmp, name)  # noqa: E731
cran = testdata.path("cranfield")
model = tiny_model(p("tiny"), hidden=64)
r = subprocess.run([TOOL, "fresh", model, p("teacher"), "1", "5"], capture_output=True, text=True)
assert r.returncode == 0, r.stderr


def cranfield_docs(n):
    return testdata.cranfield_texts()[:n]


docs = cranfield_docs(300)
with open(p("corpus.tsv"), "w") as f:
    f.writelines(f"{i}\t{t}\n" for i, t in docs)
qtexts = ["wing flow at supersonic speeds", "heat transfer in a boundary layer", "buckling of thin shells",
          "what is the drag of a slender body of revolution"]
with open(p("queries.tsv"), "w") as f:
    f.writelines(f"q{i}\t{t}\n" for i, t in enumerate(qtexts))
assert run(["index", "build", "--model", model, "--corpus", p("corpus.tsv"), "--out", p("idx")]).returncode == 0
assert run(["bm25", "build", "--corpus", p("corpus.tsv"), "--out", p("bm25")]).returncode == 0


def start(*extra):
    proc = subprocess.Popen([QAC, "serve", "--model", model, "--port", "0", "--threads", "2", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert "listening on" in line, line + proc.stderr.read()
    return proc, line.split("listening on ")[1].strip()


sys.path.insert(0, os.path.join(HERE, "..", "server"))
from srvlib import Contract  # noqa: E402

contract = Contract()


def post(url, path, body):
    """POST a JSON body; every answer is checked against api/openapi.yaml."""
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            st, got = resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        st, got = e.code, json.loads(e.read())
    check(contract.validate("POST", path, st, got), f"POST {path} {st}: the answer keeps to api/openapi.yaml")
    return st, got


def offline(query, texts, *extra):
    with open(p("pairs.jsonl"), "w") as f:
        f.writelines(json.dumps({"query": query, "passage": t}) + "\n" for t in texts)
    r = run(["rerank", "--model", p("teacher"), "--pairs", p("pairs.jsonl"), *extra])
    assert r.returncode == 0, r.stderr
    return [json.loads(l) for l in r.stdout.splitlines()]


def f32(x):
    return float(np.float32(x))


server, url = start("--index", p("idx"), "--bm25", p("bm25"), "--reranker", p("teacher"), "--max-texts", "40")
try:
    texts = [t for _, t in docs[:30]] + [docs[0][1]]  # the last repeats the first: a tie
    want = offline(qtexts[0], texts)
    st, got = post(url, "/rerank", {"query": qtexts[0], "texts": texts})
    order = sorted(range(len(texts)), key=lambda i: (-want[i]["probability"], -i))
    check(st == 200 and [g["index"] for g in got] == order, "TEI /rerank: every text, by score, ties by index descending")
    check(st == 200 and all(g["score"] == want[g["index"]]["probability"] and "text" not in g for g in got),
          "TEI /rerank: the scores are the probabilities qac rerank gives offline, no text unless asked")
    st, got = post(url, "/rerank", {"query": qtexts[0], "texts": texts, "raw_scores": True, "return_text": True})
    check(st == 200 and all(g["score"] == want[g["index"]]["raw"] and g["text"] == texts[g["index"]] for g in got),
          "TEI /rerank raw_scores and return_text: the logits, with each text")
    long = [" ".join(t for _, t in docs[:8])]
    left = offline(qtexts[1], long, "--truncation-side", "left")
    st, got = post(url, "/rerank", {"query": qtexts[1], "texts": long, "truncation_direction": "Left", "truncate": True})
    check(st == 200 and got[0]["score"] == left[0]["probability"], "TEI /rerank truncation_direction Left cuts the "
                                                                   "passage's start, as qac rerank --truncation-side left")
    st, got = post(url, "/rerank", {"query": qtexts[1], "texts": long, "truncate": False})
    check(st == 422 and got.get("error_type") == "Validation", f"truncate false on a long pair: 422 Validation {got}")
    st, got = post(url, "/rerank", {"query": qtexts[1], "texts": []})
    check(st == 400 and got == {"error": "`texts` cannot be empty", "error_type": "Empty"}, f"no texts: 400 {got}")
    st, got = post(url, "/rerank", {"query": qtexts[1], "texts": ["a"] * 41})
    check(st == 413 and got.get("error_type") == "Validation", f"41 texts past --max-texts 40: 413 {got}")
    st, got = post(url, "/rerank", {"query": qtexts[1], "texts": "not a list"})
    check(st == 422 and got.get("error_type") == "Validation", f"texts not a list: 422 {got}")

    with urllib.request.urlopen(url + "/", timeout=60) as resp:
        page = resp.read().decode()
    check('id="rerank"' in page and "rerank: true" in page, "the search page has the rerank box")
    with urllib.request.urlopen(url + "/info", timeout=60) as resp:
        info = json.loads(resp.read())
    fp = subprocess.run([TOOL, "fingerprint", p("teacher")], capture_output=True, text=True).stdout.strip()
    check(contract.validate("GET", "/info", 200, info) and info.get("reranker") == {
        "id": "teacher", "fingerprint": fp, "max_seq_len": 128}, f"/info names the reranker: {info.get('reranker')}")

    # cohere's client on /v1/rerank
    import cohere
    co = cohere.Client(api_key="unused", base_url=url)
    res = co.rerank(model="teacher", query=qtexts[0], documents=texts, top_n=5, return_documents=True)
    check([x.index for x in res.results] == order[:5] and all(
        x.relevance_score == want[x.index]["probability"] and x.document.text == texts[x.index] for x in res.results),
        "cohere's client: the top 5 by relevance score (the probability) with their documents")
    res = co.rerank(model="teacher", query=qtexts[0], documents=texts)
    check(len(res.results) == len(texts) and all(x.document is None for x in res.results),
          "cohere's client: every document, without documents unless asked")
    st, got = post(url, "/v1/rerank", {"query": qtexts[0], "documents": [{"text": t} for t in texts[:3]],
                                       "return_documents": True})
    check(st == 200 and got["model"] == "teacher" and got["usage"]["total_tokens"] > 0 and
          [x["document"]["text"] for x in got["results"]] == [texts[i] for i in sorted(range(3), key=lambda i: (
              -want[i]["probability"], -i))], f"/v1/rerank with documents as objects (Jina's form): {str(got)[:200]}")

    # concurrent requests, alone or batched together, give the same scores
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        outs = list(ex.map(lambda i: post(url, "/rerank", {"query": qtexts[i % 4], "texts": texts}), range(16)))
    alone = [post(url, "/rerank", {"query": q, "texts": texts})[1] for q in qtexts]
    check(all(o[0] == 200 and o[1] == alone[i % 4] for i, o in enumerate(outs)),
          "16 requests at once (8 in flight): each answer equals its query's sent alone")

    # /search with the rerank stage against qac search + qac rerank offline
    for mode in ("dense", "bm25", "hybrid"):
        st, got = post(url, "/search", {"queries": qtexts, "k": 5, "mode": mode, "rerank": True, "rerank_depth": 20})
        if mode == "dense":
            rr = run(["search", "--index", p("idx"), "--model", model, "--queries", p("queries.tsv"), "--k", "20",
                      "--run", p("first.run")])
        elif mode == "bm25":
            rr = run(["bm25", "search", "--index", p("bm25"), "--queries", p("queries.tsv"), "--k", "20",
                      "--run", p("first.run")])
        else:
            rr = run(["search", "--index", p("idx"), "--bm25", p("bm25"), "--mode", "hybrid", "--model", model,
                      "--queries", p("queries.tsv"), "--k", "20", "--run", p("first.run")])
        assert rr.returncode == 0, rr.stderr
        rr = run(["rerank", "--model", p("teacher"), "--run", p("first.run"), "--queries", p("queries.tsv"),
                  "--corpus", p("corpus.tsv"), "--depth", "20", "--out", p("second.run")])
        assert rr.returncode == 0, rr.stderr
        off = {}
        for l in open(p("second.run")):
            q, _, d, rank, s, _ = l.split()
            off.setdefault(q, []).append((d, float(s)))
        same = st == 200 and got.get("rerank", {}).get("depth") == 20 and all(
            [(h["docid"], f32(h["score"])) for h in got["results"][i]] == [(d, f32(s)) for d, s in off[f"q{i}"][:5]]
            for i in range(len(qtexts)))
        check(same, f"/search {mode} with rerank: the top 5 of the reranked top 20 equal qac {mode} search + qac rerank")
        # qac search --rerank, offline and through this server, writes the same lines as qac rerank's top 5
        want_run = {q: [(d, s) for d, s in v[:5]] for q, v in off.items()}
        first = {"dense": ["--index", p("idx"), "--model", model],
                 "bm25": ["--bm25", p("bm25"), "--corpus", p("corpus.tsv")],
                 "hybrid": ["--index", p("idx"), "--bm25", p("bm25"), "--mode", "hybrid", "--model", model]}[mode]
        for where, args in (("offline", first), ("--server", ["--server", url, "--mode", mode])):
            rr = run(["search", *args, "--queries", p("queries.tsv"), "--k", "5", "--rerank", p("teacher"),
                      "--rerank-depth", "20", "--run", p("cli.run"), "--run-id", "qac-rerank"])
            got_run = {}
            for l in open(p("cli.run")) if rr.returncode == 0 else []:
                q, _, d, rank, sc, rid = l.split()
                got_run.setdefault(q, []).append((d, float(sc)))
            check(rr.returncode == 0 and got_run == want_run,
                  f"qac search --rerank {mode} ({where}): the reranked top 5 of the first stage's top 20 equal qac "
                  f"rerank's on the same first-stage run {rr.stderr[-300:]}")
    # what --rerank refuses: another model than the server's, the texts missing, options without --rerank
    other = p("other-teacher")
    r2 = subprocess.run([TOOL, "fresh", model, other, "1", "6"], capture_output=True, text=True)
    assert r2.returncode == 0, r2.stderr
    rr = run(["search", "--server", url, "--queries", p("queries.tsv"), "--k", "5", "--rerank", other,
              "--run", p("cli.run")])
    check(rr.returncode != 0 and "not the server's reranker" in rr.stderr,
          f"qac search --server --rerank with another model is refused by fingerprint: {rr.stderr[-300:]}")
    rr = run(["search", "--bm25", p("bm25"), "--queries", p("queries.tsv"), "--rerank", p("teacher"),
              "--run", p("cli.run")])
    check(rr.returncode != 0 and "--corpus" in rr.stderr, f"bm25 --rerank without --corpus: {rr.stderr[-300:]}")
    rr = run(["search", "--index", p("idx"), "--model", model, "--queries", p("queries.tsv"), "--rerank-depth", "5",
              "--run", p("cli.run")])
    check(rr.returncode == 2, f"--rerank-depth without --rerank is refused: {rr.stderr[-300:]}")
finally:
    server.terminate()
    server.wait(timeout=60)

# Bounded answers: with return_text / return_documents an answer grows with
# its texts; each rerank route decides from a bound before scoring anything
# (the batcher's token count stands still), refuses in JSON naming it, and
# the bound holds against the real answer of a server with room for it (no
# smaller, at most half again larger: a bound that loose would refuse
# answers that fit).
def tokens_scored(url):
    with urllib.request.urlopen(url + "/metrics", timeout=60) as resp:
        m = re.search(r"^qac_batch_tokens_sum (\S+)$", resp.read().decode(), re.M)
    return float(m.group(1)) if m else 0.0


def raw_size(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return len(resp.read())


texts = [t for _, t in docs[:300]]
small, small_url = start("--reranker", p("teacher"), "--max-texts", "300", "--max-response-bytes", "65536")
big, big_url = start("--reranker", p("teacher"), "--max-texts", "300")
try:
    # the last: which 150 are kept is known only after scoring, so the bound takes the
    # 150 longest, and may be more than half again the real answer
    cases = (("TEI /rerank return_text", "/rerank", {"query": "flow", "texts": texts, "return_text": True}, 1.5),
             ("/v1/rerank return_documents", "/v1/rerank",
              {"query": "flow", "documents": texts, "return_documents": True}, 1.5),
             ("/v1/rerank top_n 150 return_documents", "/v1/rerank",
              {"query": "flow", "documents": texts, "top_n": 150, "return_documents": True}, None))
    for what, path, body, slack in cases:
        t0 = tokens_scored(small_url)
        st, got = post(small_url, path, body)
        scored = tokens_scored(small_url) - t0
        m = re.search(r"up to (\d+) bytes", json.dumps(got))
        bound = int(m.group(1)) if m else None
        real = raw_size(big_url, path, body)
        print(f"{what}: {st} naming {bound} bytes, {scored:.0f} tokens scored; the answer is {real} bytes")
        check(st == 413 and isinstance(got, dict) and "error" in got and scored == 0,
              f"{what}: refused in JSON before scoring ({st}, {scored:.0f} tokens): {str(got)[:200]}")
        check(bound is not None and real <= bound and (slack is None or bound <= slack * real),
              f"{what}: the bound {bound} holds against the real answer of {real} bytes")
    # what fits is answered (and scored: the count above does move)
    for what, path, body in (("TEI /rerank", "/rerank", {"query": "flow", "texts": texts}),
                             ("/v1/rerank top_n 5 return_documents", "/v1/rerank",
                              {"query": "flow", "documents": texts, "top_n": 5, "return_documents": True})):
        t0 = tokens_scored(small_url)
        st, got = post(small_url, path, body)
        check(st == 200 and tokens_scored(small_url) > t0, f"{what} fits the limit: {st}, scored")
finally:
    for proc in (small, big):
        proc.terminate()
        proc.wait(timeout=60)

server, url = start("--index", p("idx"))
try:
    st, got = post(url, "/rerank", {"query": "q", "texts": ["a"]})
    check(st == 424 and got.get("error_type") == "Backend", f"no reranker: TEI /rerank 424 Backend {got}")
    st, got = post(url, "/v1/rerank", {"query": "q", "documents": ["a"]})
    check(st == 422 and "--reranker" in got["error"]["message"], f"no reranker: /v1/rerank 422 {got}")
    st, got = post(url, "/search", {"query": "q", "rerank": True})
    check(st == 422 and "--reranker" in got["error"]["message"], f"no reranker: /search rerank 422 {got}")
    with urllib.request.urlopen(url + "/", timeout=60) as resp:
        check('id="rerank"' not in resp.read().decode(), "no rerank box on a server without a reranker")
finally:
    server.terminate()
    server.wait(timeout=60)
finish()
