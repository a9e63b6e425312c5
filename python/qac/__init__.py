"""qac from Python: dense passage retrieval over the qac C library.

Every call goes to libqac through the extension module ``qac._qac``: the
encoder, indexes, BM25, trec_eval-exact evaluation, the readers and the
trainers are the same code as the ``qac`` command line, and give the same
bits. Long calls release the GIL. Errors raise :class:`QacError` (or one of
its subclasses) with qac's own message.

    >>> import qac
    >>> enc = qac.Encoder()                         # the default model, all-MiniLM-L6-v2
    >>> vecs = enc.encode(["what is a wing?"], kind="query")   # float32 [1, 384]
    >>> ix = qac.Index.build("collection.tsv", "idx", encoder=enc)
    >>> ids, scores = ix.search(["what is a wing?"], k=10)
"""
from __future__ import annotations

import os
import tempfile
import threading
import warnings
from typing import Any, Callable, Dict, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from . import _qac
from ._qac import (BusyError, CancelledError, FormatError, InvalidError, MismatchError, NotFoundError, QacError,
                   QacIOError, QacMemoryError, UnsupportedError)

__version__ = _qac.version
__all__ = [
    "Encoder", "Reranker", "Index", "IndexParts", "BM25", "Record", "evaluate", "read_corpus", "read_queries", "read_qrels",
    "read_run", "write_run", "finetune", "pretrain", "default_model_dir", "cuda_available", "cpu_isa",
    "QacError", "InvalidError", "QacIOError", "QacMemoryError", "FormatError", "UnsupportedError",
    "NotFoundError", "BusyError", "CancelledError", "MismatchError",
]

PathLike = Union[str, "os.PathLike[str]"]
Progress = Optional[Callable[[Dict[str, Any]], None]]
Texts = Union[str, bytes, Sequence[Union[str, bytes]]]


def default_model_dir() -> str:
    """The default model's directory ($QAC_MODEL, else $QAC_HOME/models/all-MiniLM-L6-v2,
    else ~/.local/share/qac/models/all-MiniLM-L6-v2)."""
    return _qac.default_model_dir()


def cuda_available() -> bool:
    """Whether this build has CUDA support and a usable GPU is present."""
    return _qac.cuda_available()


def cpu_isa(name: Optional[str] = None) -> str:
    """The CPU kernels' SIMD path; with ``name`` (auto, avx512, avx2, generic) select it first.
    Every path gives the same bits: this changes speed only."""
    return _qac.cpu_isa(name)


def _path(p: PathLike) -> str:
    return os.fspath(p)


_MAX_BATCH = 4096  # sequences per forward pass, as ``qac encode --batch``


def _batch_size(b: Any, what: str = "batch_size") -> int:
    if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or not 1 <= b <= _MAX_BATCH:
        raise ValueError(f"{what} must be an int from 1 to {_MAX_BATCH}, not {b!r}")
    return int(b)


def _max_len(n: Optional[int]) -> int:
    if n is None:
        return 0
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"max_len must be None or an int >= 2 (0: the model's limit), not {n!r}")
    return int(n)


def _k(k: Any, size: int) -> int:
    """k checked, and capped at the index's size before any array is made."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an int >= 1, not {k!r}")
    return int(min(k, size))


def _query_texts(queries: Texts) -> List[Union[str, bytes]]:
    """Text queries as a list, refusing a NUL (the CLI's query files and the server's JSON cannot carry
    one, and BM25 reads a query as a C string)."""
    if isinstance(queries, (str, bytes)):
        queries = [queries]
    queries = list(queries)
    for i, q in enumerate(queries):
        if ("\0" if isinstance(q, str) else b"\0") in q:
            raise ValueError(f"query {i} holds a NUL character")
    return queries


def _save_atomic(d: str, name: str, write: Callable[[Any], None]) -> str:
    """Write d/name through a temporary file and a rename; its path."""
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, name)
    tmp = f"{path}.part.{os.getpid()}"
    with open(tmp, "wb") as f:
        write(f)
    os.replace(tmp, path)
    return path


# ---------------------------------------------------------------- encoder

class Encoder:
    """A BERT bi-encoder: texts in, pooled (and, as the checkpoint says, normalised) float32 vectors out.

    ``model`` is a Hugging Face BERT directory (None: the default model). ``device`` is
    ``"auto"`` (CUDA when a GPU is usable), ``"cpu"`` or ``"cuda"``; ``dtype`` ``"fp32"``
    (default), ``"bf16"`` (the CPU encoder's linear layers in bf16, fp32 sums) or ``"int8"``
    (its linear layers in int8, int32 sums by VNNI; on a CPU without VNNI the encoder runs in
    fp32 and warns: ``info["dtype"]`` says what runs).
    ``threads`` 0 uses every core. On the CPU a text gets the same vector bit for bit in
    any batch, and the same as ``qac encode``.

    ``query_prompt`` and ``passage_prompt`` replace the model's prompts (its
    ``config_sentence_transformers.json``), as ``--query-prompt`` / ``--passage-prompt``
    do; ``""`` means none, None keeps the model's.

    Threads may share an Encoder: their calls run one after another (each
    call uses all of the encoder's ``threads``), and each gets exactly what it
    would get alone. For calls side by side, give each thread an Encoder.
    :meth:`close` (or ``with``) frees the model and buffers at once.
    """

    def __init__(self, model: Optional[PathLike] = None, device: str = "auto", dtype: str = "fp32",
                 threads: int = 0, batch_size: int = 0, *, query_prompt: Optional[str] = None,
                 passage_prompt: Optional[str] = None) -> None:
        if batch_size != 0:
            batch_size = _batch_size(batch_size)
        self._model = _qac.Model(None if model is None else _path(model))
        self._model.set_prompts(query_prompt, passage_prompt)
        self._device, self._dtype, self._threads = device, dtype, threads
        self._encoders: Dict[int, Any] = {}
        self._lock = threading.Lock()  # makes each batch size's encoder once
        self._default_batch = batch_size
        self._enc = self._encoder(batch_size)

    def _encoder(self, batch_size: int) -> Any:
        with self._lock:
            e = self._encoders.get(batch_size)
            if e is None:
                e = _qac.Encoder(self._model, self._device, self._dtype, self._threads, batch_size)
                if e.note and not self._encoders:
                    warnings.warn(e.note, RuntimeWarning, stacklevel=3)
                self._encoders[batch_size] = e
            return e

    def close(self) -> None:
        """Free the model and the encoder's buffers now (after the calls in flight); later calls
        raise ValueError. Closing twice is harmless."""
        with self._lock:
            encoders = list(self._encoders.values())
        for e in encoders:
            e.close()
        self._model.close()

    def __enter__(self) -> "Encoder":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def dim(self) -> int:
        """The embedding size."""
        return self._enc.dim

    @property
    def max_len(self) -> int:
        """Tokens per text when ``max_len`` is not given (``[CLS]``/``[SEP]`` included):
        the model's limit, its sentence-transformers ``max_seq_length``, as ``qac encode``."""
        return self._enc.max_len(0)

    @property
    def prompts(self) -> Dict[str, Any]:
        """The prompts, as ``qac info --json`` shows them: ``query`` and ``passage`` (what
        ``encode(kind=...)`` puts before a text, ``""`` for none), ``default_prompt_name``,
        ``named`` (every prompt by name) and ``include_prompt``."""
        return self._model.info()["prompts"]

    @property
    def info(self) -> Dict[str, Any]:
        """The model's name, path, fingerprint, family, shape, pooling, normalisation and prompts,
        and where it runs."""
        d = self._model.info()
        d.update(device=self._enc.device, dtype=self._enc.dtype)
        return d

    @property
    def fingerprint(self) -> str:
        """What the encoder computes, as indexes record it (16 hex digits)."""
        return self._model.info()["fingerprint"]

    @property
    def truncated(self) -> int:
        """Texts cut at their maximum length by this encoder so far (``qac encode``'s summary count)."""
        return sum(e.truncated for e in self._encoders.values())

    def _prompt(self, kind: str) -> str:
        if kind not in ("query", "passage"):
            raise ValueError(f"kind must be 'query' or 'passage', not {kind!r}")
        return self.prompts[kind]

    def encode(self, texts: Texts, kind: str = "passage", batch_size: Optional[int] = None,
               max_len: Optional[int] = None, out: Optional[np.ndarray] = None) -> np.ndarray:
        """Embed texts: a float32 array [len(texts), dim] (a single text gives [1, dim]).

        As ``qac encode --kind``: ``kind`` (``"query"`` or ``"passage"``) puts the model's
        query or passage prompt before every text (see :attr:`prompts`; a model whose
        pooling leaves the prompt out, ``include_prompt`` false, pools the text's tokens
        only), and texts are cut at ``max_len`` tokens, ``[CLS]``/``[SEP]`` and the prompt
        included (None: :attr:`max_len`, the model's limit). ``batch_size`` is sequences
        per forward pass (None: the encoder's). The library writes straight into the
        result (or into ``out``, a C-contiguous float32 array of that shape). Ctrl-C
        raises KeyboardInterrupt within a second; the encoder stays usable."""
        prompt = self._prompt(kind)
        if isinstance(texts, (str, bytes)):
            texts = [texts]
        max_len = _max_len(max_len)
        enc = self._enc if batch_size is None else self._encoder(_batch_size(batch_size))
        if out is None:
            out = np.empty((len(texts), enc.dim), dtype=np.float32)
        elif out.dtype != np.float32 or out.shape != (len(texts), enc.dim) or not out.flags.c_contiguous:
            raise ValueError(f"out must be a C-contiguous float32 array of shape ({len(texts)}, {enc.dim})")
        enc.encode(texts, max_len, out, prompt)
        return out

    def tokenize(self, texts: Texts, max_len: Optional[int] = None, tokens: bool = False,
                 kind: Optional[str] = None, special_tokens: bool = True
                 ) -> Union[List[int], List[str], List[List[int]], List[List[str]]]:
        """Token ids (or, with ``tokens=True``, token strings) of a text or a list of texts.

        As ``qac tokenize``: ``[CLS]`` text ``[SEP]``, whole, or cut to ``max_len`` tokens;
        ``special_tokens=False`` gives the text's tokens alone (the first ``max_len``).
        With ``kind`` (``"query"`` or ``"passage"``): the sequence ``encode(kind=...)``
        feeds the model, the kind's prompt and the text with ``[CLS]``/``[SEP]``, cut at
        ``max_len`` (None: :attr:`max_len`)."""
        prompt = None
        if kind is not None:
            prompt = self._prompt(kind)
            if not special_tokens:
                raise ValueError("kind gives the encoder's sequence, which has its special tokens")
            max_len = self._enc.max_len(int(max_len or 0))
        one = isinstance(texts, (str, bytes))
        out = []
        for t in ([texts] if one else texts):
            ids = self._model.tokenize(t, int(max_len or 0), bool(special_tokens), prompt)
            out.append([self._model.id_to_token(i) for i in ids] if tokens else ids)
        return out[0] if one else out


class Reranker:
    """A cross-encoder: (query, passage) pairs in, relevance scores out.

    ``model`` is a reranker directory: one ``qac finetune --cross-encoder`` (or
    :func:`finetune` with ``cross_encoder=True``) wrote, a Hugging Face
    ``BertForSequenceClassification`` or a sentence-transformers ``CrossEncoder``.
    Each pair is ``[CLS] query [SEP] passage [SEP]`` with token types, cut to
    ``max_len`` tokens by ``truncation`` (``"longest_first"``, Hugging Face's default,
    ``"only_second"``, ``"only_first"``) as the Hugging Face tokenizer cuts it.
    ``device``, ``dtype`` and ``threads`` are :class:`Encoder`'s; ``batch_size`` is
    pairs per forward pass (0: the backend's). On the CPU a pair gets the same score bit
    for bit in any call, and the same as ``qac rerank`` and the server's ``/rerank``.

    Scores: :meth:`predict` gives what sentence-transformers' ``CrossEncoder.predict``
    gives (the model's activation on every logit: sigmoid for one label unless the
    checkpoint names another); :meth:`score` and :meth:`rerank` give the ranking
    score, the probability TEI's ``/rerank`` returns (sigmoid of the logit, or with two
    labels the softmax's second entry) or with ``raw=True`` the logit (with two labels
    their difference).

    Threads may share a Reranker: their calls run one after another, each getting what
    it would get alone. Ctrl-C raises KeyboardInterrupt within a layer's time and the
    reranker stays usable. :meth:`close` (or ``with``) frees the model at once.
    """

    _CHUNK = 1024  # pairs per library call: bounds the reranker's buffers

    def __init__(self, model: PathLike, device: str = "auto", dtype: str = "fp32", threads: int = 0,
                 batch_size: int = 0) -> None:
        if batch_size != 0:
            batch_size = _batch_size(batch_size)
        self._r = _qac.Reranker(_path(model), device, dtype, threads, batch_size)

    def close(self) -> None:
        """Free the model and buffers now (after the calls in flight); later calls raise
        ValueError. Closing twice is harmless."""
        self._r.close()

    def __enter__(self) -> "Reranker":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def num_labels(self) -> int:
        """Logits per pair: 1, or 2 (whose difference ranks)."""
        return self._r.num_labels

    @property
    def max_len(self) -> int:
        """Tokens per pair when ``max_len`` is not given, specials included: the model's
        ``max_seq_length`` (what ``CrossEncoder`` truncates at)."""
        return self._r.max_len

    @property
    def info(self) -> Dict[str, Any]:
        """The model's name, path, fingerprint, labels, activation and where it runs."""
        return self._r.info()

    @property
    def fingerprint(self) -> str:
        """What the reranker computes (16 hex digits), as ``qac serve`` reports it."""
        return self._r.info()["fingerprint"]

    @property
    def truncated(self) -> int:
        """Pairs cut at their maximum length by this reranker so far."""
        return self._r.truncated

    def _logits(self, queries: List[Union[str, bytes]], passages: Sequence[Union[str, bytes]],
                max_len: Optional[int], truncation: str) -> np.ndarray:
        n, nl = len(passages), self._r.num_labels
        out = np.empty((n, nl), dtype=np.float32)
        ml = _max_len(max_len)
        for i in range(0, n, self._CHUNK):  # the same bits whatever the chunks (batch-invariant scores)
            j = min(n, i + self._CHUNK)
            q = queries if len(queries) == 1 else queries[i:j]
            self._r.logits(q, passages[i:j], out[i:j], ml, truncation)
        return out

    def _convert(self, logits: np.ndarray, kind: str) -> np.ndarray:
        n = logits.shape[0]
        out = np.empty(logits.shape if kind == "activated" else (n,), dtype=np.float32)
        self._r.convert(logits, kind, out, n)
        return out

    def predict(self, pairs: Sequence[Sequence[Union[str, bytes]]], activation: bool = True,
                max_len: Optional[int] = None, truncation: str = "longest_first") -> np.ndarray:
        """Scores of ``pairs`` (a sequence of ``(query, passage)``) as ``CrossEncoder.predict``
        gives them: float32 ``[n]`` with one label, ``[n, 2]`` with two; ``activation=False``
        gives the logits."""
        if isinstance(pairs, (str, bytes)) or (len(pairs) == 2 and all(isinstance(t, (str, bytes)) for t in pairs)):
            pairs = [pairs]  # one pair, as CrossEncoder.predict takes it
        qs, ps = [], []
        for i, p in enumerate(pairs):
            if isinstance(p, (str, bytes)) or len(p) != 2:
                raise ValueError(f"predict: pair {i} is not a (query, passage) pair")
            qs.append(p[0])
            ps.append(p[1])
        if not ps:
            return np.empty((0,) if self.num_labels == 1 else (0, self.num_labels), dtype=np.float32)
        logits = self._logits(qs, ps, max_len, truncation)
        out = self._convert(logits, "activated") if activation else logits
        return out[:, 0].copy() if self.num_labels == 1 else out

    def score(self, query: Union[str, bytes], passages: Texts, raw: bool = False, max_len: Optional[int] = None,
              truncation: str = "longest_first") -> np.ndarray:
        """The ranking score of ``query`` with each passage, float32 ``[len(passages)]``:
        the probability (TEI's ``/rerank`` score), or with ``raw=True`` the raw score.
        The query is tokenized once."""
        if isinstance(passages, (str, bytes)):
            passages = [passages]
        if not isinstance(query, (str, bytes)):
            raise TypeError("score: query must be one str or bytes (predict takes pairs)")
        if len(passages) == 0:
            return np.empty((0,), dtype=np.float32)
        return self._convert(self._logits([query], passages, max_len, truncation), "raw" if raw else "probability")

    def rerank(self, query: Union[str, bytes], documents: Texts, top_k: Optional[int] = None,
               return_documents: bool = False, raw: bool = False, max_len: Optional[int] = None,
               truncation: str = "longest_first") -> List[Dict[str, Any]]:
        """``documents`` ordered by their score with ``query``, as the server's ``/rerank``
        orders them: a list of ``{"index", "score"}`` (``"text"`` too with
        ``return_documents``), score descending, ties by the higher index first (TEI's
        order), the first ``top_k`` (None: all)."""
        if isinstance(documents, (str, bytes)):
            documents = [documents]
        scores = self.score(query, documents, raw=raw, max_len=max_len, truncation=truncation)
        order = sorted(range(len(documents)), key=lambda i: (-float(scores[i]), -i))
        if top_k is not None:
            order = order[:_k(top_k, len(order))]
        out = []
        for i in order:
            e: Dict[str, Any] = {"index": i, "score": float(scores[i])}
            if return_documents:
                d = documents[i]
                e["text"] = d.decode("utf-8", "replace") if isinstance(d, bytes) else d
            out.append(e)
        return out


# ---------------------------------------------------------------- readers

class Record(NamedTuple):
    """One record of a corpus or queries file, as qac reads it."""
    id: str
    title: str
    text: str     #: the searchable text: title and body joined by a space when both exist
    offset: int   #: byte offset of the record's start in the file
    line: int     #: 1-based line of the record's start


def read_corpus(path: PathLike, format: str = "auto", *, queries: bool = False,
                start: Optional[Tuple[int, int]] = None) -> Iterator[Record]:
    """The records of a corpus (collection.tsv, BEIR/Tevatron jsonl, Cranfield), streamed.

    ``format`` is auto, tsv, beir, tevatron or cranfield. ``start=(offset, line)``
    continues from a record's start (its ``Record.offset`` and ``Record.line``)."""
    r = _qac.Reader(_path(path), "queries" if queries else "corpus", format)
    if start is not None:
        r.seek(int(start[0]), int(start[1]))
    while True:
        rec = r.next()
        if rec is None:
            return
        yield Record(*rec)


def read_queries(path: PathLike, format: str = "auto") -> Dict[str, str]:
    """Queries as {qid: text}, in file order (qid<TAB>text TSV, BEIR queries.jsonl, cran.qry)."""
    return {r.id: r.text for r in read_corpus(path, format, queries=True)}


def read_qrels(path: PathLike) -> Dict[str, Dict[str, int]]:
    """Relevance judgements as {qid: {docid: relevance}} (TREC, BEIR or Cranfield qrels;
    Cranfield's 1..4 and -1 stored as qac stores them: 5 - rel, and 0)."""
    return _qac.read_qrels(_path(path))


def read_run(path: PathLike) -> Dict[str, Dict[str, float]]:
    """A TREC run as {qid: {docid: score}}."""
    return _qac.read_run(_path(path))


def write_run(path: PathLike, qids: Sequence[str], ids: np.ndarray, scores: np.ndarray,
              run_id: str = "qac") -> None:
    """Write search results (rows of ``ids`` and ``scores`` per query, as :meth:`Index.search`
    gives them) as the TREC run ``qac search`` writes: ``qid Q0 docid rank score run_id``
    (scores as ``%.9g``, which reads back exactly), written atomically; ids past the hits
    ("") are left out."""
    scores = np.ascontiguousarray(scores, dtype=np.float32)
    if scores.ndim != 2 or len(ids) != len(qids) or scores.shape[0] != len(qids):
        raise ValueError("one row of ids and scores per query")
    docids = []
    for row in ids:
        row = list(row)
        docids.append(row[:row.index("")] if "" in row else row)
    _qac.write_run(_path(path), list(qids), docids, scores, scores.shape[1], run_id)


def _run_file(run: Union[PathLike, Mapping[str, Mapping[str, float]]], d: str) -> str:
    if not isinstance(run, Mapping):
        return _path(run)
    p = os.path.join(d, "run")
    with open(p, "w", encoding="utf-8") as f:
        for q, docs in run.items():
            for rank, (doc, s) in enumerate(docs.items(), 1):
                f.write(f"{q} Q0 {doc} {rank} {float(s)!r} py\n")
    return p


def _qrels_file(qrels: Union[PathLike, Mapping[str, Mapping[str, int]]], d: str) -> str:
    if not isinstance(qrels, Mapping):
        return _path(qrels)
    p = os.path.join(d, "qrels")
    with open(p, "w", encoding="utf-8") as f:
        for q, docs in qrels.items():
            for doc, rel in docs.items():
                f.write(f"{q} 0 {doc} {int(rel)}\n")
    return p


def evaluate(qrels: Union[PathLike, Mapping[str, Mapping[str, int]]],
             run: Union[PathLike, Mapping[str, Mapping[str, float]]],
             measures: Union[str, Sequence[str]] = ("official",), *, max_docs: int = 0, rel_level: int = 1,
             complete: bool = False, per_query: bool = False) -> Dict[str, Any]:
    """trec_eval's numbers, computed by ``qac eval``'s code.

    ``qrels`` and ``run`` are files or dicts ({qid: {docid: rel}}, {qid: {docid: score}},
    as pytrec_eval takes them). ``measures`` use trec_eval's ``-m`` names
    (``"ndcg_cut.10"``, ``"recip_rank"``, ``"P.5,10"``, ``"official"``);
    ``max_docs`` is ``-M``, ``rel_level`` ``-l``, ``complete`` ``-c``. Returns
    {measure: value} of the "all" rows (``ndcg_cut_10``, ``recip_rank``, ...), or with
    ``per_query`` {qid: {measure: value}} with the summary under "all". Counts are
    ints, ``runid`` (summary) and ``relstring`` (per query) are str, the rest float."""
    if isinstance(measures, str):
        measures = [measures]
    with tempfile.TemporaryDirectory(prefix="qac-eval-") as d:
        rows = _qac.evaluate(_qrels_file(qrels, d), _run_file(run, d), list(measures), int(max_docs),
                             int(rel_level), bool(complete))
    out: Dict[str, Any] = {}
    for measure, qid, value, is_count in rows:
        v = int(value) if is_count else value  # runid and relstring rows are text
        if per_query:
            out.setdefault(qid, {})[measure] = v
        elif qid == "all":
            out[measure] = v
    return out


# ---------------------------------------------------------------- indexes

class Index:
    """A dense index directory (``qac index build``'s): FAISS index, docids, manifest.

    Open one with :meth:`Index.open`, build one with :meth:`Index.build`. Threads may
    share an Index: searches run side by side (text queries share the query
    encoder, whose calls run one after another). :meth:`close` (or ``with``) frees it,
    and the query encoder it made itself."""

    def __init__(self, handle: Any, path: str, encoder: Optional[Encoder] = None,
                 model: Optional[PathLike] = None, device: str = "auto") -> None:
        self._ix = handle
        self.path = path
        self._encoder = encoder
        self._own_encoder = False  # made here, on the first text query: closed with the index
        self._lock = threading.Lock()  # makes that encoder once
        self._model, self._device = model, device

    def close(self) -> None:
        """Free the index now (after the searches in flight), and the query encoder if it made
        one; later calls raise ValueError. Closing twice is harmless."""
        self._ix.close()
        with self._lock:
            if self._own_encoder:
                self._encoder.close()

    def __enter__(self) -> "Index":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @classmethod
    def open(cls, path: PathLike, *, encoder: Optional[Encoder] = None, model: Optional[PathLike] = None,
             device: str = "auto", verify: str = "full") -> "Index":
        """Open an index. Text queries are encoded with ``encoder`` (or a new Encoder of
        ``model``, loaded on the first text query; None: the default model), which must be
        the model the index was built with, with the query prompt it was built for (give
        another as ``Encoder(..., query_prompt=...)``). ``verify="size"`` skips reading the
        FAISS file's checksum (very large indexes), ``"none"`` checks nothing."""
        return cls(_qac.Index(_path(path), device, verify), _path(path), encoder, model, device)

    @classmethod
    def build(cls, source: Union[PathLike, np.ndarray], out: PathLike, *, encoder: Optional[Encoder] = None,
              model: Optional[PathLike] = None, ids: Union[PathLike, Sequence[str], None] = None,
              corpus: Optional[PathLike] = None, factory: Optional[str] = None, batch: Optional[int] = None,
              max_len: Optional[int] = None, shard_size: Optional[int] = None, dtype: Optional[str] = None,
              train_size: Optional[int] = None, format: Optional[str] = None,
              progress: Progress = None) -> "Index":
        """Build an index in ``out`` and open it, as ``qac index build``.

        ``source`` is a corpus file (encoded with ``encoder``, else an Encoder of
        ``model``, else the default model; passages get the encoder's passage prompt,
        and the manifest records the prompts), a float32/float16 ``.npy`` file, or a 2-D
        numpy array of vectors (saved as ``out/vectors.npy``, the index's source).

        Vectors need their rows' ids, as ``--vectors`` does: ``ids`` is a file of ids,
        one per line (as ``qac encode --ids`` writes), a sequence of ids (saved as
        ``out/ids.txt``), or ``"sequential"`` to number the rows 0..n-1; or ``corpus``
        names the corpus they were made from. ``model`` (or ``encoder``) names the model
        that made them, recorded so that searches and servers accept the index.

        The options are ``qac index build``'s, and None takes its default: ``factory``
        (FAISS factory string: Flat, SQfp16, SQbf16, "HNSW32,SQfp16", "IVF4096,PQ32",
        ...), ``batch``, ``max_len`` (passage tokens; the model's limit), ``shard_size``,
        ``dtype`` (fp32 or fp16 shards), ``train_size``, ``format``. Resumable: build
        again into the same ``out`` after a crash or Ctrl-C (which stops the encoding
        within a second). ``progress`` gets dicts ``{"event": "progress", "phase",
        "done", "total"}``; an exception it raises stops the build as Ctrl-C does."""
        opts = {k: v for k, v in dict(factory=factory, batch=batch, max_len=max_len, shard_size=shard_size,
                                       dtype=dtype, train_size=train_size, format=format).items() if v is not None}
        out = _path(out)
        if isinstance(source, np.ndarray) or _path(source).endswith(".npy"):
            if (ids is None) == (corpus is None):
                raise ValueError("vectors need the rows' ids: ids= (a file, a sequence of ids, or 'sequential' "
                                 "for 0..n-1) or corpus= (the corpus they were made from), one of them"
                                 if ids is None else "give the vectors' ids by ids= or by corpus=, not both")
            listed = None
            if corpus is None and not isinstance(ids, (str, os.PathLike)):
                listed = [str(i) for i in ids]
                if any("\n" in i or "\r" in i for i in listed):
                    raise ValueError("an id holds a line break")
            if isinstance(source, np.ndarray):
                if source.ndim != 2 or source.dtype not in (np.float32, np.float16):
                    raise ValueError("vectors must be a 2-D float32 or float16 array")
                if listed is not None and len(listed) != source.shape[0]:
                    raise ValueError(f"{len(listed)} ids for {source.shape[0]} vectors: they must match row for row")
            m = encoder._model if encoder is not None else (_qac.Model(_path(model)) if model is not None else None)
            # what this call writes into out (the array, the ids) goes again if
            # the build refuses, so a failed call leaves out as it found it
            made_out, saved = not os.path.exists(out), []
            try:
                if isinstance(source, np.ndarray):
                    npy = _save_atomic(out, "vectors.npy", lambda f: np.save(f, np.ascontiguousarray(source)))
                    saved.append(npy)
                else:
                    npy = _path(source)
                if corpus is not None:
                    opts["ids_corpus"] = _path(corpus)
                elif listed is None:
                    if _path(ids) != "sequential":
                        opts["ids_path"] = _path(ids)
                else:
                    opts["ids_path"] = _save_atomic(out, "ids.txt", lambda f: f.write(
                        "".join(i + "\n" for i in listed).encode("utf-8")))
                    saved.append(opts["ids_path"])
                _qac.index_build_vectors(out, npy, m, opts, progress)
            except BaseException:
                for f in saved:
                    if os.path.exists(f):
                        os.remove(f)
                if made_out and os.path.isdir(out) and not os.listdir(out):
                    os.rmdir(out)
                raise
        else:
            if ids is not None or corpus is not None:
                raise ValueError("ids= and corpus= go with vectors (a corpus carries its own ids)")
            if encoder is None:  # encoding batch as qac index build's
                encoder = Encoder(model, batch_size=int(batch or _qac.index_defaults()["batch"]))
            _qac.index_build(out, encoder._enc, _path(source), opts, progress)
        return cls.open(out, encoder=encoder, model=model)

    @classmethod
    def merge(cls, parts: PathLike, out: PathLike, *, factory: Optional[str] = None, shard_size: Optional[int] = None,
              dtype: Optional[str] = None, train_size: Optional[int] = None, progress: Progress = None) -> "Index":
        """Merge a parts directory (:class:`IndexParts`, ``qac.ray``) into one index in
        ``out`` and open it, as ``qac index merge`` (None: its defaults): the index
        ``qac index build`` gives for the same corpus, file for file."""
        opts = {k: v for k, v in dict(factory=factory, shard_size=shard_size, dtype=dtype,
                                       train_size=train_size).items() if v is not None}
        _qac.index_merge(_path(out), _path(parts), opts, progress)
        return cls.open(out)

    @property
    def info(self) -> Dict[str, Any]:
        """count, dim, factory, the model (``fingerprint``, ``model``, ``model_dir``), the
        ``prompts`` of the build (``{"query", "passage"}``; None for an index of vectors,
        whose prompts qac does not know), and whether it searches on the GPU."""
        return self._ix.info()

    def __len__(self) -> int:
        return self._ix.info()["count"]

    def _query_encoder(self, allow_prompt_mismatch: bool, allow_model_mismatch: bool) -> Encoder:
        """The query encoder, checked against the index as ``qac search`` checks it."""
        with self._lock:
            if self._encoder is None:
                self._ix.info()  # a closed index says so before a model is loaded
                self._encoder = Encoder(self._model, device=self._device)
                self._own_encoder = True
        try:
            self._ix.check_prompts(self._encoder.prompts["query"])
        except MismatchError as e:
            if not allow_prompt_mismatch:
                raise
            warnings.warn(str(e), stacklevel=4)
        if not allow_model_mismatch:
            self._ix.check_model(self._encoder._model)
        return self._encoder

    def search_rows(self, queries: Union[Texts, np.ndarray], k: int = 10, *, max_len: Optional[int] = None,
                    batch_size: int = 128, allow_prompt_mismatch: bool = False,
                    allow_model_mismatch: bool = False) -> Tuple[np.ndarray, np.ndarray]:
        """Like :meth:`search`, but rows (int64, -1 where fewer than k) instead of docids."""
        info = self._ix.info()
        k = _k(k, info["count"])
        if isinstance(queries, np.ndarray):
            q = np.ascontiguousarray(queries, dtype=np.float32)
            if q.ndim == 1:
                q = q[None, :]
        else:
            queries = _query_texts(queries)
            enc = self._query_encoder(allow_prompt_mismatch, allow_model_mismatch)
            q = enc.encode(queries, kind="query", max_len=max_len, batch_size=batch_size)
        if q.ndim != 2 or q.shape[1] != info["dim"]:
            raise ValueError(f"query vectors must be [n, {info['dim']}], not {list(q.shape)}")
        scores = np.empty((q.shape[0], k), dtype=np.float32)
        rows = np.empty((q.shape[0], k), dtype=np.int64)
        if k:
            self._ix.search(q, q.shape[0], k, scores, rows)
        return rows, scores

    def search(self, queries: Union[Texts, np.ndarray], k: int = 10, *, max_len: Optional[int] = None,
               batch_size: int = 128, allow_prompt_mismatch: bool = False,
               allow_model_mismatch: bool = False) -> Tuple[np.ndarray, np.ndarray]:
        """Top-k passages of each query by inner product: (ids, scores), numpy arrays
        [n, k] of docids (str objects, "" where fewer than k exist) and float32 scores,
        best first, ties by docid descending (trec_eval's order). ``k`` above the
        index's size is taken as its size (the arrays have ``len(index)`` columns).

        ``queries`` are query vectors [n, dim], or texts, encoded as ``qac search`` does:
        with the encoder's query prompt, cut at ``max_len`` tokens (None: the model's
        limit), ``batch_size`` per forward pass; a text holding a NUL is refused
        (ValueError), as the server refuses it. Text queries are refused
        (:class:`MismatchError`) when the index was built with another model or for
        another query prompt; ``allow_model_mismatch`` searches anyway,
        ``allow_prompt_mismatch`` with a warning (``--allow-model-mismatch``,
        ``--allow-prompt-mismatch``)."""
        rows, scores = self.search_rows(queries, k, max_len=max_len, batch_size=batch_size,
                                        allow_prompt_mismatch=allow_prompt_mismatch,
                                        allow_model_mismatch=allow_model_mismatch)
        ids = np.array(self._ix.docids(rows), dtype=object).reshape(rows.shape)
        return ids, scores

    def docids(self, rows: np.ndarray) -> np.ndarray:
        """The docids of rows."""
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        return np.array(self._ix.docids(rows), dtype=object).reshape(rows.shape)

    def text(self, row: int) -> str:
        """A passage's text, read from the corpus the index was built from."""
        return self._ix.text(int(row))

    def set_param(self, name: str, value: float) -> None:
        """A FAISS search parameter: ``nprobe`` (IVF), ``efSearch`` (HNSW)."""
        self._ix.set_param(name, float(value))

    def set_threads(self, threads: int) -> None:
        """Threads of the exact CPU scans (Flat, SQfp16, SQbf16), 0 to 1024; 0: one per core.
        It waits for the searches in flight."""
        self._ix.set_threads(threads)


class IndexParts:
    """A writer of index parts: passages of one corpus encoded by many processes, merged
    later into one index by :meth:`Index.merge` (or ``qac index merge``).

    Passages are encoded as ``qac index build`` encodes them: with ``encoder``'s (else
    an Encoder of ``model``'s) passage prompt, cut at ``max_len`` tokens (0: the model's
    limit). ``rows`` are the passages' positions in the corpus, and ids, offsets and
    lines are what :func:`read_corpus` gives; parts of rows encoded twice are the same
    file, so a retried worker neither loses nor duplicates a passage. ``qac.ray.Embed``
    uses this."""

    def __init__(self, out: PathLike, corpus: PathLike, *, encoder: Optional[Encoder] = None,
                 model: Optional[PathLike] = None, max_len: int = 0, format: str = "auto") -> None:
        self._own_encoder = encoder is None
        self.encoder = encoder if encoder is not None else Encoder(model)
        self._p = _qac.IndexParts(_path(out), self.encoder._enc, _path(corpus), int(max_len), format)

    def close(self) -> None:
        """Free the writer now (and the encoder, if it made it); later calls raise ValueError."""
        self._p.close()
        if self._own_encoder:
            self.encoder.close()

    def __enter__(self) -> "IndexParts":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def encode(self, rows: Sequence[int], ids: Sequence[str], texts: Sequence[str], offsets: Sequence[int],
               lines: Sequence[int]) -> None:
        """Encode passages and write one part per run of consecutive rows."""
        self._p.encode(np.ascontiguousarray(rows, dtype=np.int64), list(ids), list(texts),
                       np.ascontiguousarray(offsets, dtype=np.uint64), np.ascontiguousarray(lines, dtype=np.int64))


# ---------------------------------------------------------------- BM25

class BM25:
    """A BM25 index (``qac bm25``): Lucene's BM25 with Anserini's English analyzer.
    Threads may share one: searches run side by side. :meth:`close` (or ``with``) frees it."""

    def __init__(self, handle: Any, path: str) -> None:
        self._b = handle
        self.path = path

    def close(self) -> None:
        """Free the index now (after the searches in flight); later calls raise ValueError."""
        self._b.close()

    def __enter__(self) -> "BM25":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @classmethod
    def build(cls, corpus: PathLike, out: PathLike, *, progress: Progress = None) -> "BM25":
        """Index a corpus (any format qac reads) into ``out`` and open it."""
        _qac.bm25_build(_path(out), _path(corpus), progress)
        return cls.open(out)

    @classmethod
    def open(cls, path: PathLike) -> "BM25":
        """Open a BM25 index directory."""
        return cls(_qac.BM25(_path(path)), _path(path))

    def __len__(self) -> int:
        return self._b.count()

    def search(self, queries: Texts, k: int = 10, *, k1: float = 0.9, b: float = 0.4,
               exact_lengths: bool = False) -> Tuple[np.ndarray, np.ndarray]:
        """Top-k documents of each query: (ids, scores), [n, k] arrays of docids ("" past
        the matches) and float32 scores (0 past the matches). ``k`` above the index's
        size is taken as its size; a query holding a NUL is refused (ValueError)."""
        queries = _query_texts(queries)
        k = _k(k, self._b.count())
        n = len(queries)
        scores = np.zeros((n, k), dtype=np.float32)
        rows = np.full((n, k), -1, dtype=np.int64)
        counts = np.zeros(n, dtype=np.int32)
        if k:
            self._b.search(queries, k, float(k1), float(b), bool(exact_lengths), scores, rows, counts)
        for i, c in enumerate(counts):
            rows[i, c:] = -1
            scores[i, c:] = 0
        ids = np.array(self._b.docids(rows), dtype=object).reshape(rows.shape)
        return ids, scores


# ---------------------------------------------------------------- training

def finetune(train: Union[PathLike, Sequence[PathLike], None] = None, out: Optional[PathLike] = None, *,
             model: Optional[PathLike] = None, train_triples: Optional[PathLike] = None,
             train_qrels: Optional[PathLike] = None, train_queries: Optional[PathLike] = None,
             train_corpus: Optional[PathLike] = None, title_join: Optional[str] = None, progress: Progress = None,
             cross_encoder: bool = False, **options: Any) -> Tuple[int, int]:
    """Fine-tune a retriever (or a reranker) in this process, as ``qac finetune`` (same defaults).

    ``train`` is one or more Tevatron jsonl files (or ``train_triples`` /
    ``train_qrels`` with ``train_queries`` and ``train_corpus``); the run goes to
    ``out`` (checkpoints, log.jsonl, dev.jsonl). ``options`` are ``qac finetune``'s
    options with underscores: lr, epochs, steps, batch, n_passages, q_max_len, p_max_len,
    tau, sim, alpha, chunk, dropout, recompute, seed, threads, device, train_precision,
    schedule, warmup_ratio, warmup_steps, weight_decay, max_grad_norm, save_every, keep,
    resume, dev_queries, dev_qrels, dev_corpus, dev_depth, dump_batches, dry_run.
    ``title_join`` is how a passage's title meets its text: ``"sep"`` (the default) or
    ``"space"`` (the default with ``cross_encoder``, as ``qac rerank`` joins them).

    ``cross_encoder=True`` trains a reranker, as ``qac finetune --cross-encoder``:
    ``[CLS] query [SEP] passage [SEP]`` through the encoder, its pooler and a classifier
    (fresh unless ``model`` is a cross-encoder), softmax cross-entropy over each group of
    one positive and ``n_passages - 1`` negatives, on the CPU. Its own options:
    ``max_len`` (pair length with specials; 0 = q_max_len + p_max_len), ``num_labels``
    (1 or 2, of a fresh classifier), ``truncation`` (longest_first, only_second,
    only_first) and ``dev_run`` (the dev queries' first-stage run, its top ``dev_depth``
    reranked at every save); tau, sim, alpha, dump_batches and dry_run are the
    bi-encoder's. The reranker is written to ``out``; open it with :class:`Reranker`.

    ``progress`` gets a dict after every step (``event="step"``: step, total, epoch,
    loss, lr, grad_norm, seconds, ...) and at every dev evaluation (``event="dev"``).
    An exception it raises (or Ctrl-C) stops the run after that step (its checkpoint is
    written if one was due) and propagates. Returns (total steps, step resumed from)."""
    if out is None:
        raise ValueError("finetune: out is required")
    files = [] if train is None else [_path(train)] if isinstance(train, (str, os.PathLike)) else \
        [_path(t) for t in train]
    if title_join is None:
        title_join = "space" if cross_encoder else "sep"
    sources = dict(tevatron=files, triples=_opt_path(train_triples), qrels=_opt_path(train_qrels),
                   queries=_opt_path(train_queries), corpus=_opt_path(train_corpus), title_join=title_join)
    opts = _train_options(options, _FT_OPTIONS | _XE_OPTIONS if cross_encoder else _FT_OPTIONS)
    if cross_encoder:
        bi = sorted(set(opts) & {"tau", "sim", "alpha", "dump_batches", "dry_run"})
        if bi:
            raise TypeError(f"finetune: {', '.join(bi)} are bi-encoder options; cross_encoder=True does not take them")
        opts["cross_encoder"] = True
    opts["out"] = _path(out)
    return _qac.finetune(_opt_path(model), sources, opts, progress)


def pretrain(data: PathLike, out: PathLike, *, model: Optional[PathLike] = None, objective: str = "cocondenser",
             context: str = "query", curriculum: Optional[str] = None, progress: Progress = None,
             **options: Any) -> int:
    """Continue pre-training an encoder in this process, as ``qac pretrain`` (same defaults).

    ``data`` is pre-training jsonl (``{"id","text","queries":[...]}``), ``objective``
    cocondenser, cotmae or qgen, ``context`` query, span or mixed (or ``curriculum``
    like ``"span:0.75,query"``). ``options`` are ``qac pretrain``'s with underscores:
    steps, batch, lr, schedule, warmup_ratio, warmup_steps, weight_decay, max_grad_norm,
    mask_rate, enc_mask_rate, dec_mask_rate, skip_from, head_layers, qgen_window,
    pooling, normalize, tau, alpha, max_len, query_max_len, docs, dropout, recompute,
    seed, threads, device, train_precision, save_every, keep, resume.

    ``progress`` gets dicts (``event`` "step": loss and its parts, lr, ...; "note";
    "progress" while the data loads). An exception it raises (or Ctrl-C) stops the run.
    Returns the step the run resumed from (0 for a fresh run)."""
    opts = _train_options(options, _PT_OPTIONS)
    opts.update(data=_path(data), out=_path(out), objective=objective, context=context, curriculum=curriculum)
    return _qac.pretrain(_opt_path(model), opts, progress)


_COMMON = {"lr", "weight_decay", "max_grad_norm", "warmup_steps", "warmup_ratio", "recompute", "seed", "threads",
           "save_every", "keep", "resume", "schedule", "device", "train_precision", "dropout", "steps", "batch",
           "tau", "alpha"}
_FT_OPTIONS = _COMMON | {"epochs", "n_passages", "q_max_len", "p_max_len", "chunk", "sim", "dev_queries",
                         "dev_qrels", "dev_corpus", "dev_depth", "dump_batches", "dry_run"}
_XE_OPTIONS = {"max_len", "num_labels", "truncation", "dev_run"}
_PT_OPTIONS = _COMMON | {"mask_rate", "enc_mask_rate", "dec_mask_rate", "skip_from", "head_layers", "qgen_window",
                         "pooling", "normalize", "max_len", "query_max_len", "docs"}


def _opt_path(p: Optional[PathLike]) -> Optional[str]:
    return None if p is None else _path(p)


def _train_options(options: Mapping[str, Any], allowed: set) -> Dict[str, Any]:
    bad = sorted(set(options) - allowed)
    if bad:
        raise TypeError(f"unknown option(s): {', '.join(bad)}")
    out: Dict[str, Any] = {}
    for k, v in options.items():
        if v is None:
            continue
        out[k] = _path(v) if isinstance(v, os.PathLike) else v
    return out
