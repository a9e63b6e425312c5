"""The server through the client libraries users have: the `openai` package
against /v1/embeddings (floats, base64 it picks itself, base64 asked for)
and huggingface_hub's InferenceClient.feature_extraction against TEI's
/embed. Every vector must equal `qac encode`'s bit for bit (the encoder is
batch-invariant and floats go out with 9 significant digits). Also TEI's
error shapes on /embed."""
import base64
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from srvlib import QAC, Server, check, finish, http, workdir  # noqa: E402

try:
    import openai
    from huggingface_hub import InferenceClient
except ImportError as e:  # the clients are part of the test stack: missing is a failure
    print(f"FAIL: client library missing ({e}); scripts/setup.sh --test installs it")
    sys.exit(1)

TEXTS = ["what similarity laws must be obeyed when constructing aeroelastic models of heated high speed aircraft",
         "boundary layer", "Über die Grenzschicht: ÄÖÜ ß, naïve café", "shock wave " * 300 + "the end"]  # 600+ tokens: past 256


def same(a, b, label):
    a, b = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    ok = a.shape == b.shape and np.array_equal(a, b)
    diff = float(np.abs(a - b).max()) if a.shape == b.shape else float("inf")
    print(f"{label}: shape {a.shape}, max |diff| vs qac encode {diff:.3g}")
    check(ok, f"{label}: vectors differ from qac encode's (max diff {diff:.3g})")


def main():
    d = workdir("clients")
    tsv = os.path.join(d, "texts.tsv")
    with open(tsv, "w", encoding="utf-8") as f:
        for i, t in enumerate(TEXTS):
            f.write(f"t{i}\t{t}\n")
    ref_path = os.path.join(d, "ref.npy")
    subprocess.run([QAC, "encode", "--input", tsv, "--output", ref_path], check=True, capture_output=True)
    ref = np.load(ref_path)

    srv = Server()
    try:
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

        hf = InferenceClient(model=srv.base + "/embed")
        rows = [hf.feature_extraction(t, truncate=True) for t in TEXTS]
        same(np.concatenate([np.asarray(x).reshape(1, -1) for x in rows]), ref, "huggingface_hub feature_extraction")
        one = hf.feature_extraction(TEXTS[1], normalize=True)
        same(np.asarray(one).reshape(1, -1), ref[1:2], "huggingface_hub normalize=True")

        # TEI's batch form and errors, over plain HTTP
        s, _, body = http(srv.base, "POST", "/embed", {"inputs": TEXTS, "truncate": True})
        check(s == 200, f"/embed batch: {s}")
        if s == 200:
            same(body, ref, "/embed batch")
        s, _, body = http(srv.base, "POST", "/embed", {"inputs": TEXTS[1]})
        check(s == 200 and len(body) == 1, "/embed with one string answers one row")
        for req, status, etype in (({"inputs": []}, 400, "Empty"),
                                   ({"inputs": TEXTS[3]}, 413, "Validation"),  # too long, truncate defaults off
                                   ({"inputs": TEXTS[1], "truncate": "yes"}, 422, "Tokenizer"),
                                   ({"inputs": [1, 2]}, 422, "Tokenizer"),
                                   ({"inputs": ["a"] * 257}, 413, "Validation")):
            s, _, body = http(srv.base, "POST", "/embed", req)
            ok = s == status and isinstance(body, dict) and body.get("error_type") == etype and body.get("error")
            print(f"/embed {str(req)[:50]}: {s} {str(body)[:100]}")
            check(ok, f"/embed {str(req)[:60]}: want {status} {etype}, got {s} {str(body)[:200]}")
        s, _, body = http(srv.base, "POST", "/embed", raw=b"{not json")
        check(s == 400 and isinstance(body, dict) and "error_type" in body, f"/embed bad JSON: {s} {body}")
        try:
            hf.feature_extraction(TEXTS[3])
            check(False, "huggingface_hub: a too-long input without truncate raises")
        except Exception as e:  # huggingface_hub raises its HfHubHTTPError
            check("413" in str(e) or getattr(getattr(e, "response", None), "status_code", 0) == 413,
                  f"huggingface_hub sees the 413: {e}")
    finally:
        rc = srv.stop()
    check(rc == 0, f"server exit code {rc}")
    finish()


if __name__ == "__main__":
    main()
