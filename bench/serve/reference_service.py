"""Reference search service for the benchmark: FastAPI + uvicorn +
sentence-transformers + faiss-cpu, same model and the same index vectors
(qac's index.faiss, which FAISS reads natively). Same request and
response shape as qac's POST /search.

usage: python reference_service.py --model DIR --index DIR --docids FILE --port N"""
import argparse
import contextlib

import faiss
import numpy as np
import torch
import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel
from sentence_transformers import SentenceTransformer


class SearchRequest(BaseModel):
    query: str
    k: int = 10


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--index", required=True)
    ap.add_argument("--docids", required=True, help="one docid per line, in index row order")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--max-len", type=int, default=32)
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                    help="bf16: encode under torch.autocast(\"cpu\", dtype=torch.bfloat16), as a user asks PyTorch "
                         "for bf16 on a CPU")
    a = ap.parse_args()
    model = SentenceTransformer(a.model, device="cpu")

    def amp():
        if a.dtype == "bf16":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()
    model.max_seq_length = a.max_len
    index = faiss.read_index(f"{a.index}/index.faiss")
    with open(a.docids, encoding="utf-8") as f:
        docids = [line.rstrip("\n") for line in f]
    app = FastAPI()

    @app.post("/search")
    def search(req: SearchRequest):
        with amp():
            v = model.encode([req.query], convert_to_numpy=True, normalize_embeddings=False).astype(np.float32)
        scores, rows = index.search(v, req.k)
        hits = [{"docid": docids[r], "score": float(s), "rank": i + 1}
                for i, (s, r) in enumerate(zip(scores[0], rows[0])) if r >= 0]
        return {"results": [hits], "mode": "dense"}

    @app.get("/health")
    def health():
        return {"status": "ok"}

    uvicorn.run(app, host="127.0.0.1", port=a.port, log_level="warning")


if __name__ == "__main__":
    main()
