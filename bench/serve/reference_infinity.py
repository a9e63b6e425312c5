"""Search service on infinity-emb (PyPI `infinity-emb`, a batching embedding
server), as a user would deploy it for search: infinity computes
embeddings only, so a search service needs a small web app of its own
next to it. This one runs infinity's own batching engine in-process
(`AsyncEngineArray` of one `AsyncEmbeddingEngine`, its dynamic batching:
concurrent `embed` calls are queued and encoded together) under FastAPI +
uvicorn, plus faiss-cpu over the same index.faiss as qac. Same request and
response shape as qac's POST /search and the other references.

Why in-process rather than the stock `infinity_emb v2` server with /search
composed on top: the stock server answers /embeddings only, so a /search in
front of it costs a second process, a loopback HTTP hop and a JSON round
trip of every 384-float vector per query, with no gain, and infinity
documents the in-process engine (`AsyncEngineArray.from_args`) as its
Python API for exactly this. The stock server is what bench_serve.py uses
for the embedding-only comparison (qac /encode against infinity
/embeddings).

FAISS: the engine does not expose its batch boundaries, so searches are
coalesced here instead: one search worker takes every embedded query
waiting when it is free (no timed wait) and runs one faiss search for all
of them in a worker thread, so the event loop keeps accepting. Queries
encoded in one infinity batch resolve together and so share a search.

Query length: infinity encodes up to the model's max_seq_length (256 for
all-MiniLM-L6-v2); --max-len (default 32, as the other references) is set
on the loaded SentenceTransformer replica, the one reach into the engine's
internals (a user would edit max_seq_length in the model directory's
sentence_bert_config.json instead).

Runs in its own environment (infinity-emb pins numpy<2, sentence-transformers<4
and its own uvicorn), offline on a local model directory:
  HF_HUB_OFFLINE=1 python reference_infinity.py --model DIR --index DIR --docids FILE --port N"""
import asyncio
import os
from contextlib import asynccontextmanager

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("INFINITY_ANONYMOUS_USAGE_STATS", "0")
os.environ.setdefault("DO_NOT_TRACK", "1")

import numpy as np  # noqa: E402
from fastapi import FastAPI  # noqa: E402
from infinity_emb import AsyncEngineArray, EngineArgs  # noqa: E402
from reference_common import SearchRequest, arguments, load_index, response, serve  # noqa: E402


def main():
    ap = arguments()
    ap.add_argument("--max-len", type=int, default=32, help="query length in tokens (0: the model's own)")
    ap.add_argument("--batch-size", type=int, default=32, help="infinity's largest batch (its default: 32)")
    a = ap.parse_args()
    index, docids = load_index(a)
    array = AsyncEngineArray.from_args([EngineArgs(model_name_or_path=a.model, engine="torch", device="cpu",
                                                   batch_size=a.batch_size, model_warmup=True)])
    engine = array[0]
    if a.max_len > 0:
        for replica in engine._model_replicas:  # SentenceTransformer subclasses
            replica.max_seq_length = a.max_len
    pending: asyncio.Queue = asyncio.Queue()

    async def searcher():
        loop = asyncio.get_running_loop()
        while True:
            batch = [await pending.get()]
            while not pending.empty():
                batch.append(pending.get_nowait())
            k = max(req.k for req, _, _ in batch)
            vecs = np.stack([v for _, v, _ in batch]).astype(np.float32)
            try:
                scores, rows = await loop.run_in_executor(None, index.search, vecs, k)
            except Exception as e:  # noqa: BLE001  (hand the error to every waiting request)
                for _, _, fut in batch:
                    fut.set_exception(e)
                continue
            for i, (req, _, fut) in enumerate(batch):
                fut.set_result(response(scores[i], rows[i], docids, req.k))

    @asynccontextmanager
    async def lifespan(_app):
        await array.astart()
        task = asyncio.get_running_loop().create_task(searcher())
        yield
        task.cancel()
        await array.astop()

    app = FastAPI(lifespan=lifespan)

    @app.post("/search")
    async def search(req: SearchRequest):
        emb, _usage = await engine.embed(sentences=[req.query])
        fut = asyncio.get_running_loop().create_future()
        await pending.put((req, np.asarray(emb[0]), fut))
        return await fut

    serve(app, a.port)


if __name__ == "__main__":
    main()
