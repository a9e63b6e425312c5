"""The server through the client libraries users have, against real
references.

openai (/v1/embeddings, /v1/models): floats, base64 it picks itself, base64
asked for, token-id inputs (one list, and a list of lists), a 1000-input
batch (LangChain's OpenAIEmbeddings default) whose encoder calls all stay
within --max-batch-tokens, and client.models.list().

huggingface_hub's InferenceClient with the server's root URL (TEI answers
POST /), and with .../embed: truncation on the left equals
sentence-transformers with truncation_side="left"; normalize=False equals
the model's pooled vector before its Normalize module. TEI's /tokenize
shape and /decode equal the `tokenizers` library's encode (byte offsets, as
TEI's Rust router gives them) and decode. TEI's error shapes and statuses.

Every normalised vector must equal `qac encode`'s bit for bit (the encoder
is batch-invariant and floats go out with 9 significant digits)."""
import base64
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from srvlib import CRAN_DOCS, CRAN_QUERIES, QAC, Server, check, finish, http, metric, workdir  # noqa: E402
import testdata  # noqa: E402  (srvlib puts tests/ on the path)

try:
    import openai
    import torch
    from huggingface_hub import InferenceClient
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer
except ImportError as e:  # the clients are part of the test stack: missing is a failure
    print(f"FAIL: client library missing ({e}); scripts/setup.sh --test installs it")
    sys.exit(1)

# two topics, each past the 256-token limit alone: left and right truncation keep different ones
LONG = "boundary layer transition on a heated flat plate " * 40 + "jet noise reduction by nozzle shape " * 40
TEXTS = ["what similarity laws must be obeyed when constructing aeroelastic models of heated high speed aircraft",
         "boundary layer", "Über die Grenzschicht: ÄÖÜ ß, naïve café", "shock wave " * 300 + "the end"]  # 600+ tokens: past 256

# qac's encoder against PyTorch on all-MiniLM-L6-v2 (tests/encoder/test_encoder_parity.c):
# normalised pooled vectors within 1e-6, last-layer token states within
# 1.5e-5. A mean-pooled raw vector averages those states, so it is within
# the same 1.5e-5; a normalised one within 1e-6.
TOL_UNIT, TOL_RAW = 1e-6, 1.5e-5
BATCH_TOKENS = 4096  # the server's --max-batch-tokens here


def same(a, b, label):
    a, b = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    ok = a.shape == b.shape and np.array_equal(a, b)
    diff = float(np.abs(a - b).max()) if a.shape == b.shape else float("inf")
    print(f"{label}: shape {a.shape}, max |diff| vs qac encode {diff:.3g}")
    check(ok, f"{label}: vectors differ from qac encode's (max diff {diff:.3g})")


def close(a, b, tol, label):
    a, b = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    diff = float(np.abs(a - b).max()) if a.shape == b.shape else float("inf")
    print(f"{label}: shape {a.shape}, max |diff| vs sentence-transformers {diff:.3g} (bound {tol:g})")
    check(diff <= tol, f"{label}: max diff {diff:.3g} > {tol:g}")


def encode_ref(d, texts, name):
    """`qac encode` of texts (one per line of a TSV), the bit-exact reference."""
    tsv = os.path.join(d, name + ".tsv")
    with open(tsv, "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(f"t{i}\t{t}\n")
    out = os.path.join(d, name + ".npy")
    subprocess.run([QAC, "encode", "--input", tsv, "--output", out], check=True, capture_output=True)
    return np.load(out)


def model_dir():
    info = subprocess.run([QAC, "info"], capture_output=True, text=True).stdout
    for line in info.splitlines():
        if line.strip().startswith("directory"):
            return line.split(None, 1)[1].strip()
    raise RuntimeError(f"no model directory in `qac info`: {info[:300]}")


def cranfield_titles(n):
    """The first n Cranfield titles (short texts, as a chunked corpus sends; a few documents have none)."""
    return [t for _, t in testdata.cranfield_texts(fields="T") if t][:n]


def check_openai(srv, d, ref, tok):
    oa = openai.OpenAI(base_url=srv.base + "/v1", api_key="unused", max_retries=0)
    r = oa.embeddings.create(model="qac", input=TEXTS, encoding_format="float")
    same([e.embedding for e in r.data], ref, "openai float")
    r = oa.embeddings.create(model="qac", input=TEXTS)  # the client asks for base64 and decodes it
    same([e.embedding for e in r.data], ref, "openai default (base64 decoded by the client)")
    r = oa.embeddings.create(model="qac", input=TEXTS[1], encoding_format="base64")
    raw = r.data[0].embedding
    check(isinstance(raw, str), "openai base64: a string comes back")
    same(np.frombuffer(base64.b64decode(raw), dtype="<f4")[None, :], ref[1:2], "openai base64")
    check(r.usage.prompt_tokens > 0, "openai: usage.prompt_tokens reported")

    # token ids: the model's input as given ([CLS] ... [SEP], what /tokenize returns)
    ids = [tok.encode(t).ids for t in TEXTS[:3]]
    r = oa.embeddings.create(model="qac", input=ids, encoding_format="float")
    same([e.embedding for e in r.data], ref[:3], "openai token-id inputs (a list of lists)")
    check(r.usage.prompt_tokens == sum(len(x) for x in ids), f"openai ids: usage {r.usage.prompt_tokens}")
    r = oa.embeddings.create(model="qac", input=ids[0], encoding_format="float")
    same([r.data[0].embedding], ref[:1], "openai token-id input (one list of ints)")

    models = oa.models.list().data
    _, _, info = http(srv.base, "GET", "/info")
    check(len(models) == 1 and models[0].id == info["model"]["id"] and models[0].object == "model",
          f"openai models.list(): {models}")
    # models.retrieve (GET /v1/models/{id}, issue 38: it was a 404): the model, as in the list; another id
    # is OpenAI's NotFoundError
    m = oa.models.retrieve(models[0].id)
    check(m.id == models[0].id and m.object == "model" and m.owned_by == models[0].owned_by
          and m.created == models[0].created, f"openai models.retrieve(): {m}")
    try:
        oa.models.retrieve("no-such-model")
        check(False, "openai models.retrieve() of another id is an error")
    except openai.NotFoundError as e:
        check("no-such-model" in str(e), f"openai models.retrieve() of another id: 404 naming it: {e}")

    # LangChain's OpenAIEmbeddings sends 1000 inputs per request by default
    titles = cranfield_titles(1000)
    check(len(titles) == 1000, f"{len(titles)} Cranfield titles")
    want = encode_ref(d, titles, "titles")
    calls0 = metric(srv.base, "qac_batch_tokens_count")
    r = oa.embeddings.create(model="qac", input=titles, encoding_format="float")
    same([e.embedding for e in r.data], want, "openai, 1000 inputs in one request")
    check([e.index for e in r.data] == list(range(1000)), "openai 1000: indexes in order")
    calls = metric(srv.base, "qac_batch_tokens_count") - calls0
    _, _, text = http(srv.base, "GET", "/metrics")
    within = [ln for ln in text.splitlines() if ln.startswith('qac_batch_tokens_bucket{le="%d"}' % BATCH_TOKENS)]
    total = metric(srv.base, "qac_batch_tokens_count")
    check(within and float(within[0].split()[1]) == total and calls > 1,
          f"the 1000 inputs took {calls:.0f} encoder calls, each within --max-batch-tokens {BATCH_TOKENS}: {within}")


def check_tei(srv, d, ref, tok, mdir):
    st = SentenceTransformer(mdir, device="cpu")
    check(st.max_seq_length == 256, f"sentence-transformers max_seq_length {st.max_seq_length} (the server's 256)")
    pooled = SentenceTransformer(modules=[st[0], st[1]], device="cpu")  # no Normalize module
    pooled.max_seq_length = st.max_seq_length

    # the root URL: TEI answers POST / for an embedding model
    hf = InferenceClient(model=srv.base)
    rows = [hf.feature_extraction(t) for t in TEXTS]  # truncate absent: the server's --truncate (true)
    same(np.concatenate([np.asarray(x).reshape(1, -1) for x in rows]), ref, "InferenceClient(root URL).feature_extraction")
    hf_embed = InferenceClient(model=srv.base + "/embed")
    one = hf_embed.feature_extraction(TEXTS[1], normalize=True)
    same(np.asarray(one).reshape(1, -1), ref[1:2], "InferenceClient(.../embed) normalize=True")

    # truncation on the left keeps the end of a long text
    left = hf.feature_extraction(LONG, truncate=True, truncation_direction="left")
    st.tokenizer.truncation_side = "left"
    want = st.encode([LONG], convert_to_numpy=True)
    st.tokenizer.truncation_side = "right"
    close(np.asarray(left).reshape(1, -1), want, TOL_UNIT, "truncation_direction=left")
    right = st.encode([LONG], convert_to_numpy=True)
    gap = float(np.abs(np.asarray(left).reshape(1, -1) - right).max())
    check(gap > 1e-2, f"left truncation differs from right truncation (max diff {gap:.3g})")
    # the same ids sent as token ids give the same bits
    tok.enable_truncation(256, direction="left")
    s, _, body = http(srv.base, "POST", "/embed", {"inputs": [tok.encode(LONG).ids]})
    tok.no_truncation()
    same(np.asarray(body, dtype=np.float32), np.asarray(left).reshape(1, -1), "/embed token ids = left-truncated text")

    # normalize=False: the pooled vector before the model's Normalize module
    raw = np.asarray(hf.feature_extraction(TEXTS[:3], normalize=False))
    want = pooled.encode(TEXTS[:3], convert_to_numpy=True)
    norms = np.linalg.norm(raw, axis=1)
    print(f"normalize=False: norms {np.round(norms, 3)}")
    check(np.all(np.abs(norms - 1) > 0.05), f"normalize=False is not a unit vector: norms {norms}")
    close(raw, want, TOL_RAW, "normalize=False vs the pooling module's output")
    close(raw / norms[:, None], ref[:3], TOL_UNIT, "normalize=False, normalised, vs qac encode")

    s, _, body = http(srv.base, "POST", "/embed", {"inputs": TEXTS[1], "dimensions": 100})
    cut = ref[1, :100] / np.linalg.norm(ref[1, :100])
    close(np.asarray(body), cut[None, :], TOL_UNIT, "/embed dimensions=100 (cut, then normalised)")

    # TEI's /tokenize: the tokens of the `tokenizers` library, byte offsets into the input,
    # over the tokenizer edge cases (those JSON carries: valid UTF-8, no NUL) and the Cranfield queries
    inputs = ["Héllo [MASK] wörld, naïve café!", "Über die Grenzschicht: ÄÖÜ ß", "日本語 text", TEXTS[0]]
    src = os.environ.get("QAC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
    for h in open(os.path.join(src, "tests", "reference", "tokenizer", "edge_texts.hex")).read().split():
        try:
            t = bytes.fromhex(h).decode("utf-8")
        except UnicodeDecodeError:
            continue
        if t and "\0" not in t:
            inputs.append(t)
    with open(CRAN_QUERIES, encoding="utf-8") as f:
        inputs += [q.strip() for q in f.read().split(".W")[1:]]
    inputs = [t[:2000] for t in inputs]  # TEI's /tokenize does not truncate; keep the request small
    for add in (True, False):
        s, _, body = http(srv.base, "POST", "/tokenize", {"inputs": inputs, "add_special_tokens": add})
        ok = s == 200 and isinstance(body, list) and len(body) == len(inputs)
        bad = 0
        for text, got in zip(inputs, body if ok else []):
            e = tok.encode(text, add_special_tokens=add)
            b = text.encode("utf-8")
            want = []
            for i, (tid, (a, z), sp) in enumerate(zip(e.ids, e.offsets, e.special_tokens_mask)):
                if sp:
                    want.append({"id": tid, "text": e.tokens[i], "special": True, "start": None, "stop": None})
                else:  # tokenizers' Python offsets are characters: TEI's are bytes
                    ba, bz = len(text[:a].encode()), len(text[:z].encode())
                    want.append({"id": tid, "text": b[ba:bz].decode("utf-8", "replace"), "special": False,
                                 "start": ba, "stop": bz})
            if got != want:
                bad += 1
                if bad <= 3:
                    print(f"tokenize {text[:60]!r}: got {json.dumps(got)[:400]}\n  want {json.dumps(want)[:400]}")
        print(f"TEI /tokenize (add_special_tokens={add}): {len(inputs) - bad} of {len(inputs)} texts equal tokenizers'")
        check(ok and bad == 0, f"TEI /tokenize (add_special_tokens={add}) equals tokenizers' tokens and byte offsets "
                               f"({bad} texts differ)")
    # TEI's /decode: tokenizers' decode
    id_lists = [tok.encode(t).ids for t in inputs if tok.encode(t).ids] + \
        [[101, 2023, 1005, 1055, 1037, 3231, 1029, 102], [2, 99999, 2003]]
    for skip in (True, False):
        s, _, body = http(srv.base, "POST", "/decode", {"ids": id_lists, "skip_special_tokens": skip})
        want = [tok.decode(x, skip_special_tokens=skip) for x in id_lists]
        diff = [(g, w) for g, w in zip(body, want) if g != w] if s == 200 else []
        print(f"TEI /decode (skip_special_tokens={skip}): {len(want) - len(diff)} of {len(want)} equal tokenizers'")
        check(s == 200 and len(body) == len(want) and not diff, f"TEI /decode (skip_special_tokens={skip}): {diff[:3]}")
    s, _, body = http(srv.base, "POST", "/decode", {"ids": id_lists[0]})
    check(s == 200 and body == [tok.decode(id_lists[0])], f"TEI /decode of one id list: {body}")

    # TEI's batch form and error contract (TEI 1.9: Validation is 422)
    s, _, body = http(srv.base, "POST", "/embed", {"inputs": TEXTS, "truncate": True})
    check(s == 200, f"/embed batch: {s}")
    if s == 200:
        same(body, ref, "/embed batch")
    s, _, body = http(srv.base, "POST", "/embed", {"inputs": TEXTS[1]})
    check(s == 200 and len(body) == 1, "/embed with one string answers one row")
    for path, req, status, etype in (("/embed", {"inputs": []}, 400, "Empty"),
                                     ("/embed", {"inputs": ""}, 400, "Empty"),
                                     ("/embed", {"inputs": TEXTS[3], "truncate": False}, 422, "Validation"),
                                     ("/embed", {"inputs": TEXTS[1], "truncate": "yes"}, 422, "Validation"),
                                     ("/embed", {"inputs": [1.5]}, 422, "Validation"),
                                     ("/embed", {"inputs": TEXTS[1], "dimensions": 0}, 422, "Validation"),
                                     ("/embed", {"inputs": TEXTS[1], "dimensions": 385}, 422, "Validation"),
                                     ("/", {"inputs": ["a"] * 2049}, 422, "Validation"),
                                     ("/embed_all", {"inputs": "a"}, 424, "Backend"),
                                     ("/decode", {"ids": []}, 400, "Empty"),
                                     ("/tokenize", {"inputs": []}, 400, "Empty")):
        s, _, body = http(srv.base, "POST", path, req)
        ok = s == status and isinstance(body, dict) and body.get("error_type") == etype and body.get("error")
        print(f"{path} {str(req)[:50]}: {s} {str(body)[:100]}")
        check(ok, f"{path} {str(req)[:60]}: want {status} {etype}, got {s} {str(body)[:200]}")
    s, _, body = http(srv.base, "POST", "/embed", raw=b"{not json")
    check(s == 400 and isinstance(body, dict) and "error_type" in body, f"/embed bad JSON: {s} {body}")
    try:
        hf.feature_extraction(TEXTS[3], truncate=False)
        check(False, "huggingface_hub: a too-long input with truncate=False raises")
    except Exception as e:  # huggingface_hub raises its HfHubHTTPError
        check("422" in str(e) or getattr(getattr(e, "response", None), "status_code", 0) == 422,
              f"huggingface_hub sees the 422: {e}")


def main():
    torch.set_num_threads(2)
    d = workdir("clients")
    ref = encode_ref(d, TEXTS, "texts")
    mdir = model_dir()
    tok = Tokenizer.from_file(os.path.join(mdir, "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()

    srv = Server("--max-batch-tokens", str(BATCH_TOKENS))
    try:
        check_openai(srv, d, ref, tok)
        check_tei(srv, d, ref, tok, mdir)
    finally:
        rc = srv.stop()
    check(rc == 0, f"server exit code {rc}")
    finish()


if __name__ == "__main__":
    main()
