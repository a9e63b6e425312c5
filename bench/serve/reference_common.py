"""What the reference search services share (reference_service.py,
reference_batched.py, reference_infinity.py), so that each differs from
the others only in how it encodes and batches: the request and the
response in the shape of qac's POST /search, the arguments that name the
model, qac's index and its docids and the port, the index read with
faiss-cpu, GET /health and the server on loopback. It imports only what
every reference's environment has (FastAPI, pydantic, faiss-cpu, uvicorn;
torch only for bf16 autocast)."""
import argparse
import contextlib

import faiss
import uvicorn
from pydantic import BaseModel


class SearchRequest(BaseModel):
    query: str
    k: int = 10


def arguments():
    """The parser with the arguments every reference takes."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--index", required=True)
    ap.add_argument("--docids", required=True, help="one docid per line, in index row order")
    ap.add_argument("--port", type=int, required=True)
    return ap


def add_dtype(ap):
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                    help="bf16: encode under torch.autocast(\"cpu\", dtype=torch.bfloat16), as a user asks PyTorch "
                         "for bf16 on a CPU")


def autocast(dtype):
    """The context an encode runs in for --dtype."""
    if dtype == "bf16":
        import torch
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def load_index(a):
    """qac's index.faiss in --index (FAISS reads it natively) and the docids of its rows."""
    index = faiss.read_index(f"{a.index}/index.faiss")
    with open(a.docids, encoding="utf-8") as f:
        docids = [line.rstrip("\n") for line in f]
    return index, docids


def response(scores, rows, docids, k):
    """One query's answer from its row of a FAISS search, as qac's /search gives it."""
    hits = [{"docid": docids[r], "score": float(s), "rank": j + 1}
            for j, (s, r) in enumerate(zip(scores[:k], rows[:k])) if r >= 0]
    return {"results": [hits], "mode": "dense"}


def serve(app, port):
    """GET /health, then the app on 127.0.0.1:port until stopped."""
    @app.get("/health")
    def health():
        return {"status": "ok"}

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
