"""Distributed indexing on Ray: encode a corpus on many workers, merge one index.

    import ray, qac, qac.ray
    ray.init()                                   # or ray.init(address="auto") on a cluster
    plan = qac.ray.plan()                        # actors sized from ray.cluster_resources()
    ds = qac.ray.read_corpus("collection.tsv")   # ray.data.read_datasource(qac.ray.Corpus(...))
    ds.map_batches(qac.ray.Embed, fn_constructor_kwargs=dict(out="parts", corpus="collection.tsv"),
                   batch_size=1024, compute=ray.data.ActorPoolStrategy(size=plan.workers),
                   num_cpus=plan.num_cpus).materialize()
    qac.Index.merge("parts", "idx")              # or: qac index merge --parts parts --out idx

Sizing: the encoder actors hold their CPUs for the whole run, and the read
tasks that feed them need a share too (READ_CPUS each); actors that take
every CPU leave the read waiting forever. :func:`plan` sizes the actors from
``ray.cluster_resources()`` with that share kept, and refuses a plan the
cluster cannot run with a message naming what to change;
:func:`build_index` plans the same way.

Each ``Embed`` actor holds one encoder and writes index parts (see
:class:`qac.IndexParts`): files named by the corpus rows they hold, written
atomically. A worker that dies is restarted by Ray and its batch encoded again
into the same files, so no passage is lost or written twice; the merge reads
the corpus again and checks that every passage is in a part, as the same
passage, before it builds the index. On the CPU encoder the merged index is
the one ``qac index build`` makes, file for file.

The corpus, the parts directory and the model must be reachable at the same
paths from every worker and from the process that merges (one machine, or a
shared file system).
"""
from __future__ import annotations

import os
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

import numpy as np
import pyarrow as pa
import ray
import ray.data
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

import qac
from qac import _qac

__all__ = ["Corpus", "read_corpus", "Embed", "Plan", "plan", "build_index", "READ_CPUS"]

# What a read task asks for: it only parses text, and must never wait behind
# the encoders, so plans keep this much free.
READ_CPUS = 0.25


class Corpus(Datasource):
    """A corpus file as a Ray datasource: rows ``row`` (the record's position in the
    file), ``id``, ``text``, ``offset`` and ``line``, read by qac's reader.

    The constructor scans the file once (ids and offsets only, no encoding) to cut it
    into blocks of ``rows_per_block`` records; each read task seeks to its blocks, so
    the file is read in parallel. Any format qac reads (collection.tsv, BEIR/Tevatron
    jsonl, Cranfield)."""

    def __init__(self, path: str, format: str = "auto", rows_per_block: int = 1024) -> None:
        super().__init__()
        self.path = os.path.abspath(os.fspath(path))
        self.format = format
        self.rows_per_block = int(rows_per_block)
        if self.rows_per_block < 1:
            raise ValueError("rows_per_block must be >= 1")
        r = _qac.Reader(self.path, "corpus", format)
        self.blocks: List[Tuple[int, int, int, int]] = []  # (first row, count, offset, line)
        row = 0
        while True:
            ids, offsets, lines = r.next_ids(self.rows_per_block)
            if not ids:
                break
            self.blocks.append((row, len(ids), offsets[0], lines[0]))
            row += len(ids)
        self.count = row
        self.size = os.path.getsize(self.path)

    def estimate_inmemory_data_size(self) -> Optional[int]:
        return self.size

    def get_read_tasks(self, parallelism: int, per_task_row_limit: Optional[int] = None,
                       data_context: Any = None) -> List[ReadTask]:
        n = max(1, min(int(parallelism), len(self.blocks)))
        tasks = []
        for t in range(n):
            mine = self.blocks[t * len(self.blocks) // n:(t + 1) * len(self.blocks) // n]
            if not mine:
                continue
            rows = sum(b[1] for b in mine)
            meta = BlockMetadata(num_rows=rows, size_bytes=self.size * rows // max(1, self.count),
                                 exec_stats=None, input_files=[self.path])
            tasks.append(ReadTask(_reader(self.path, self.format, mine), meta))
        return tasks


def _reader(path: str, fmt: str, blocks: List[Tuple[int, int, int, int]]):
    def read() -> Iterator[pa.Table]:
        r = _qac.Reader(path, "corpus", fmt)
        for first, count, offset, line in blocks:
            r.seek(offset, line)
            ids, texts, offs, lns = [], [], [], []
            for _ in range(count):
                rec = r.next()
                if rec is None:
                    raise qac.FormatError(f"{path} ended inside a block: changed since it was scanned?")
                ids.append(rec[0])
                texts.append(rec[2])
                offs.append(rec[3])
                lns.append(rec[4])
            yield pa.table({"row": pa.array(np.arange(first, first + count, dtype=np.int64)),
                            "id": pa.array(ids, pa.string()), "text": pa.array(texts, pa.string()),
                            "offset": pa.array(offs, pa.uint64()), "line": pa.array(lns, pa.int64())})
    return read


def read_corpus(path: str, format: str = "auto", *, rows_per_block: int = 1024, num_cpus: float = READ_CPUS,
                **read_args: Any) -> "ray.data.Dataset":
    """``ray.data.read_datasource(Corpus(path, ...))``: a dataset of the corpus's records
    with their rows, ready for ``map_batches(Embed, ...)``. Read tasks ask for
    ``num_cpus`` (they only parse text, and must not wait behind the encoders:
    :func:`plan` keeps that much free)."""
    return ray.data.read_datasource(Corpus(path, format, rows_per_block), num_cpus=num_cpus, **read_args)


class Embed:
    """A callable class for ``Dataset.map_batches``: one encoder per actor, each batch
    encoded and written into the parts directory ``out``.

    Batches need the columns of :func:`read_corpus` (row, id, text, offset, line).
    Passages get the model's passage prompt, as in ``qac index build``;
    ``query_prompt`` / ``passage_prompt`` replace the model's (``--query-prompt`` /
    ``--passage-prompt``; the merged index records both). ``threads`` 0 gives the
    encoder as many threads as the actor has CPUs (all cores when it has none
    assigned). ``device="cuda"`` with ``num_gpus=1`` in ``map_batches`` runs GPU
    actors (bit-for-bit equality with ``qac index build`` holds for the CPU encoder).
    Returns the batch's rows."""

    def __init__(self, out: str, corpus: str, model: Optional[str] = None, device: str = "auto",
                 dtype: str = "fp32", threads: int = 0, batch_size: int = 0, max_len: int = 0,
                 format: str = "auto", query_prompt: Optional[str] = None,
                 passage_prompt: Optional[str] = None) -> None:
        if threads <= 0:
            threads = _assigned_cpus()
        enc = qac.Encoder(model, device=device, dtype=dtype, threads=threads, batch_size=batch_size,
                          query_prompt=query_prompt, passage_prompt=passage_prompt)
        self.parts = qac.IndexParts(out, corpus, encoder=enc, max_len=max_len, format=format)

    def __call__(self, batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        self.parts.encode(batch["row"], batch["id"], batch["text"], batch["offset"], batch["line"])
        return {"row": np.asarray(batch["row"], dtype=np.int64)}


def _assigned_cpus() -> int:
    try:
        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 0)
    except Exception:  # outside a Ray worker
        cpus = 0
    return max(1, int(cpus)) if cpus else 0


class Plan(NamedTuple):
    """Encoder actors for ``map_batches``: ``ActorPoolStrategy(size=workers)`` with
    ``num_cpus`` (and ``num_gpus``) each; ``read_cpus`` is kept for the read tasks."""
    workers: int
    num_cpus: float
    num_gpus: float
    read_cpus: float


def plan(workers: Optional[int] = None, num_cpus: Optional[float] = None, num_gpus: float = 0,
         read_cpus: float = READ_CPUS) -> Plan:
    """Size the encoder actors from ``ray.cluster_resources()`` (starting a local Ray,
    as Ray Data does, when none is running), keeping ``read_cpus`` free for the
    read tasks.

    Left out, ``num_cpus`` is 1 a worker (or what the CPUs left allow, split among
    ``workers`` when those are given) and ``workers`` as many as then fit (GPU actors:
    one a ``num_gpus`` of the cluster's GPUs). A plan the cluster cannot run (more
    CPUs or GPUs than it has, with the read's share) raises ``ValueError`` naming
    what to change, rather than leaving Ray to wait for resources that never come."""
    if not ray.is_initialized():  # as Ray Data does: a local cluster when none is running
        ray.init()
    res = ray.cluster_resources()
    cpus, gpus = float(res.get("CPU", 0)), float(res.get("GPU", 0))
    free = cpus - read_cpus
    where = (f"the cluster has {cpus:g} CPUs{f' and {gpus:g} GPUs' if gpus or num_gpus else ''} "
             f"(ray.cluster_resources()), "
             f"and {read_cpus:g} CPU is kept for the read tasks that feed the encoders")
    if free <= 0:
        raise ValueError(f"qac.ray: no CPU left for an encoder: {where}; start Ray with more CPUs "
                         f"(ray.init(num_cpus=...)) or add nodes")
    if num_gpus and num_gpus > 0:
        if workers is None:
            workers = int(gpus // num_gpus)
            if workers < 1:
                raise ValueError(f"qac.ray: num_gpus={num_gpus:g} a worker, but {where}: lower num_gpus, or leave "
                                 f"it out (num_gpus=0: CPU encoders)")
        if num_cpus is None:
            num_cpus = min(1.0, free / workers)
    elif workers is None:
        if num_cpus is None:
            num_cpus = 1.0 if free >= 1 else free
        workers = max(1, int(free // num_cpus)) if num_cpus <= free else 0
    elif num_cpus is None:
        num_cpus = free / workers
        if num_cpus >= 1:
            num_cpus = float(int(num_cpus))
    if workers < 1 or num_cpus <= 0:
        raise ValueError(f"qac.ray: workers={workers} with num_cpus={num_cpus:g}: {where}; lower num_cpus, or leave "
                         f"workers and num_cpus out to size them from the cluster")
    need_cpu, need_gpu = workers * num_cpus + read_cpus, workers * (num_gpus or 0)
    if need_cpu > cpus + 1e-9 or need_gpu > gpus + 1e-9:
        what = (f"{workers} workers x {num_cpus:g} CPU{f' and {num_gpus:g} GPU' if num_gpus else ''} "
                f"need {workers * num_cpus:g} CPUs{f' and {need_gpu:g} GPUs' if num_gpus else ''}")
        raise ValueError(f"qac.ray: {what}, but {where}: Ray would wait for them forever. Lower workers or "
                         f"num_cpus{' or num_gpus' if num_gpus else ''}, leave them out to size them from the "
                         f"cluster, or start Ray with more (ray.init(num_cpus=...), more nodes)")
    return Plan(int(workers), float(num_cpus), float(num_gpus or 0), float(read_cpus))


def build_index(corpus: str, out: str, parts: Optional[str] = None, *, model: Optional[str] = None,
                workers: Optional[int] = None, num_cpus: Optional[float] = None, num_gpus: float = 0,
                device: str = "auto",
                dtype: str = "fp32", threads: int = 0, batch_size: int = 1024, rows_per_block: int = 1024,
                max_len: int = 0, format: str = "auto", query_prompt: Optional[str] = None,
                passage_prompt: Optional[str] = None, factory: Optional[str] = None,
                shard_size: Optional[int] = None, index_dtype: Optional[str] = None,
                train_size: Optional[int] = None) -> "qac.Index":
    """Encode ``corpus`` on ``workers`` Ray actors into ``parts`` (default ``out + ".parts"``),
    then merge them into the index ``out`` and open it (the merge's options, None:
    ``qac index merge``'s defaults). Needs ``ray.init()`` first. ``workers``,
    ``num_cpus`` and ``num_gpus`` go through :func:`plan`: left out, they are sized
    from the cluster; a plan it cannot run raises ``ValueError`` before any work."""
    p = plan(workers, num_cpus, num_gpus)
    corpus = os.path.abspath(corpus)
    parts = parts or os.fspath(out) + ".parts"
    ds = read_corpus(corpus, format, rows_per_block=rows_per_block, num_cpus=p.read_cpus)
    ds = ds.map_batches(Embed, fn_constructor_kwargs=dict(out=parts, corpus=corpus, model=model, device=device,
                                                          dtype=dtype, threads=threads, max_len=max_len,
                                                          format=format, query_prompt=query_prompt,
                                                          passage_prompt=passage_prompt),
                        batch_size=batch_size, compute=ray.data.ActorPoolStrategy(size=p.workers),
                        num_cpus=p.num_cpus, num_gpus=p.num_gpus)
    for _ in ds.iter_batches(batch_size=None):
        pass
    return qac.Index.merge(parts, out, factory=factory, shard_size=shard_size, dtype=index_dtype,
                           train_size=train_size)
