"""Reference search service for the benchmark: FastAPI + uvicorn +
sentence-transformers + faiss-cpu, same model and the same index vectors
(qac's index.faiss, which FAISS reads natively). Same request and
response shape as qac's POST /search.

usage: python reference_service.py --model DIR --index DIR --docids FILE --port N"""
import numpy as np
from fastapi import FastAPI
from reference_common import SearchRequest, add_dtype, arguments, autocast, load_index, response, serve
from sentence_transformers import SentenceTransformer


def main():
    ap = arguments()
    ap.add_argument("--max-len", type=int, default=32)
    add_dtype(ap)
    a = ap.parse_args()
    model = SentenceTransformer(a.model, device="cpu")
    model.max_seq_length = a.max_len
    index, docids = load_index(a)
    app = FastAPI()

    @app.post("/search")
    def search(req: SearchRequest):
        with autocast(a.dtype):
            v = model.encode([req.query], convert_to_numpy=True, normalize_embeddings=False).astype(np.float32)
        scores, rows = index.search(v, req.k)
        return response(scores[0], rows[0], docids, req.k)

    serve(app, a.port)


if __name__ == "__main__":
    main()
