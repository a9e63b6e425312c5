"""Batching reference search service, as a user's Python deployment would
do it: FastAPI + uvicorn + sentence-transformers + faiss-cpu, where
concurrent requests wait up to --wait-ms for each other and each batch
gets one encode and one FAISS search (in a worker thread, so the event
loop keeps accepting). Same request and response shape as qac's
POST /search and reference_service.py (the unbatched reference).

With --backend onnx or openvino (and --file-name, e.g.
onnx/model_qint8_avx512_vnni.onnx) it encodes through sentence-transformers'
ONNX Runtime or OpenVINO backend instead of PyTorch, with --threads intra-op
threads: the int8 reference of bench/serve/bench_serve.py --dtype int8 (run
under the environment of bench/encode_int8/ref_backends.py, plus fastapi,
uvicorn and faiss-cpu).

usage: python reference_batched.py --model DIR --index DIR --docids FILE --port N"""
import asyncio
from contextlib import asynccontextmanager

import numpy as np
from fastapi import FastAPI
from reference_common import SearchRequest, add_dtype, arguments, autocast, load_index, response, serve
from sentence_transformers import SentenceTransformer


def main():
    ap = arguments()
    ap.add_argument("--max-len", type=int, default=32)
    add_dtype(ap)
    ap.add_argument("--wait-ms", type=float, default=2.0, help="how long a batch waits for more requests")
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--backend", choices=("torch", "onnx", "openvino"), default="torch")
    ap.add_argument("--file-name", help="the backend's model file within --model (its int8 export)")
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads of onnx/openvino (0: their default)")
    a = ap.parse_args()
    kw = {}
    if a.backend == "onnx":
        import onnxruntime as ort
        so = ort.SessionOptions()
        if a.threads:
            so.intra_op_num_threads = a.threads
        kw = {"session_options": so, "provider": "CPUExecutionProvider"}
    elif a.backend == "openvino" and a.threads:
        kw = {"ov_config": {"INFERENCE_NUM_THREADS": str(a.threads)}}
    if a.file_name:
        kw["file_name"] = a.file_name
    model = SentenceTransformer(a.model, device="cpu", backend=a.backend, model_kwargs=kw or None)
    model.max_seq_length = a.max_len
    index, docids = load_index(a)
    pending: asyncio.Queue = asyncio.Queue()

    def run_batch(texts, k):
        with autocast(a.dtype):
            v = model.encode(texts, batch_size=len(texts), convert_to_numpy=True,
                             normalize_embeddings=False).astype(np.float32)
        return index.search(v, k)

    async def batcher():
        loop = asyncio.get_running_loop()
        while True:
            batch = [await pending.get()]
            deadline = loop.time() + a.wait_ms / 1000
            while len(batch) < a.max_batch:
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(pending.get(), left))
                except asyncio.TimeoutError:
                    break
            k = max(req.k for req, _ in batch)
            try:
                scores, rows = await loop.run_in_executor(None, run_batch, [req.query for req, _ in batch], k)
            except Exception as e:  # noqa: BLE001  (hand the error to every waiting request)
                for _, fut in batch:
                    fut.set_exception(e)
                continue
            for i, (req, fut) in enumerate(batch):
                fut.set_result(response(scores[i], rows[i], docids, req.k))

    @asynccontextmanager
    async def lifespan(_app):
        task = asyncio.get_running_loop().create_task(batcher())
        yield
        task.cancel()

    app = FastAPI(lifespan=lifespan)

    @app.post("/search")
    async def search(req: SearchRequest):
        fut = asyncio.get_running_loop().create_future()
        await pending.put((req, fut))
        return await fut

    serve(app, a.port)


if __name__ == "__main__":
    main()
