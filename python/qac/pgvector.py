"""Searching a table made by ``qac export`` (PostgreSQL + pgvector) with
psycopg 3 and numpy, returning what qac's own search returns.

    import psycopg
    from qac import pgvector as qpg

    with psycopg.connect("postgresql://user@host/db") as conn:
        ids, scores = qpg.search(conn, "qac_passages", query_vectors, k=10)

``query_vectors`` come from the same model as the table: ``qac encode
--kind query`` (a .npy), qac serve's ``/v1/embeddings`` or the Python
``qac.Encoder``. ``ids`` is a numpy object array of docid strings [nq, k]
(None past the last hit), ``scores`` a float32 array [nq, k] of the dot
products qac reports (-inf past the last hit).

Ranking. The table's comment (written by ``qac export``) names its metric.
For ``ip`` the query orders by ``embedding <#> q`` (pgvector's negative
inner product), which is qac's dot-product ranking; for ``cosine``
(normalised models only) by ``embedding <=> q``, the same ranking for
unit vectors. Equal scores are ordered by docid descending, byte by byte
(the id column is COLLATE "C"), as qac and trec_eval order them.

Exact and approximate. ``exact=True`` disables index scans for the query,
so PostgreSQL scans every row: the same top-k as qac's exact (Flat)
search. Scores are float32 dot products summed in another order than
qac's, so a pair of passages whose scores differ by a few float32 ulps may
swap places; equal vectors tie exactly on both sides. The default uses
pgvector's index (HNSW or IVFFlat): ``ef_search`` (HNSW, pgvector's
default 40) or ``probes`` (IVFFlat, default 1) trade speed for recall. An
HNSW scan returns at most ef_search rows, so when k is larger and
ef_search is not given, it is raised to k for the query.

Settings are applied with ``set_config(..., is_local => true)`` inside a
transaction (a savepoint when the connection is already in one) and put
back afterwards, so the caller's session and transaction keep their own.
"""
from __future__ import annotations

import json
import re
from typing import Optional, Sequence, Tuple, Union

import numpy as np

__all__ = ["search", "table_info", "vector_literal", "TableInfo"]

_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,39}$")
_FORMAT = "qac-pgvector"


class TableInfo(dict):
    """The table's qac metadata: model, fingerprint, normalize, dim, metric, texts."""


def _qualified(table: str) -> str:
    """'"schema"."name"' for a name qac export accepts (lower-case identifiers)."""
    parts = table.split(".")
    if len(parts) > 2 or not all(_IDENT.match(p) for p in parts):
        raise ValueError("table name %r: use [schema.]name with lower-case letters, digits and '_' "
                         "(qac export's rule)" % table)
    return ".".join('"%s"' % p for p in parts)


def table_info(conn, table: str) -> TableInfo:
    """The metadata ``qac export`` left in the table's comment.

    Raises LookupError when the table does not exist and ValueError when it
    was not made by qac export."""
    q = _qualified(table)
    row = conn.execute("SELECT to_regclass(%s)::oid, obj_description(to_regclass(%s), 'pg_class')",
                       (q, q)).fetchone()
    if row is None or row[0] is None:
        raise LookupError("table %s does not exist" % q)
    comment = row[1] or ""
    try:
        meta = json.loads(comment[4:]) if comment.startswith("qac ") else None
    except ValueError:
        meta = None
    if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
        raise ValueError("table %s was not made by qac export (its comment does not say so)" % q)
    return TableInfo(meta)


def vector_literal(v: np.ndarray) -> str:
    """pgvector's text form of a float32 row. Python's float repr of each
    float32 value reads back (strtof) to the same float32: the server sees
    the exact query vector."""
    return str(np.asarray(v, dtype=np.float32).tolist())


def _as_matrix(vectors) -> np.ndarray:
    x = np.asarray(vectors, dtype=np.float32)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2:
        raise ValueError("vectors: expected [nq, dim] or [dim], got shape %s" % (x.shape,))
    if not np.isfinite(x).all():
        raise ValueError("vectors: NaN or infinity (pgvector refuses them)")
    return x


def search(conn, table: str, vectors: Union[np.ndarray, Sequence[Sequence[float]]], k: int = 10, *,
           exact: bool = False, ef_search: Optional[int] = None,
           probes: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Top-k of each query vector in a ``qac export`` table.

    conn: a psycopg 3 connection (autocommit or not).
    table: "[schema.]name" as given to ``qac export --table``.
    vectors: float32 [nq, dim] (or one [dim] vector) from the table's model.
    k: hits per query (>= 1).
    exact: scan every row (no index): the same top-k as qac's exact search.
    ef_search / probes: pgvector's HNSW / IVFFlat search breadth.

    Returns (ids, scores): object array [nq, k] of docids, float32 [nq, k]
    of dot products, best first; equal scores by docid descending."""
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError("k must be a positive integer")
    x = _as_matrix(vectors)
    info = table_info(conn, table)
    dim = int(info.get("dim", 0))
    if x.shape[1] != dim:
        raise ValueError("vectors have dimension %d, table %s holds %d (model %s)"
                         % (x.shape[1], table, dim, info.get("model")))
    cosine = info.get("metric") == "cosine"
    op = "<=>" if cosine else "<#>"
    q = _qualified(table)
    nq = x.shape[0]
    ids = np.full((nq, k), None, dtype=object)
    scores = np.full((nq, k), -np.inf, dtype=np.float32)
    settings = {}
    if exact:
        settings["enable_indexscan"] = "off"
        settings["enable_bitmapscan"] = "off"
    else:
        if ef_search is not None:
            settings["hnsw.ef_search"] = str(int(ef_search))
        elif k > 40:
            settings["hnsw.ef_search"] = str(int(k))  # an HNSW scan stops at ef_search rows
        if probes is not None:
            settings["ivfflat.probes"] = str(int(probes))
    if exact:
        # one ORDER BY over every row: ties at the cut are decided by docid too
        sql = ("SELECT id, embedding {op} %s::vector AS d FROM {t} ORDER BY d, id DESC LIMIT %s"
               .format(op=op, t=q))
    else:
        # the inner ORDER BY is the one pgvector's index serves; the outer one
        # orders equal scores among the k hits as qac does
        sql = ("SELECT id, d FROM (SELECT id, embedding {op} %s::vector AS d FROM {t} ORDER BY d LIMIT %s) s "
               "ORDER BY d, id DESC".format(op=op, t=q))
    with conn.transaction():
        saved = {}
        for name, value in settings.items():
            saved[name] = conn.execute("SELECT current_setting(%s, true)", (name,)).fetchone()[0]
            conn.execute("SELECT set_config(%s, %s, true)", (name, value))
        for i in range(nq):
            rows = conn.execute(sql, (vector_literal(x[i]), int(k))).fetchall()
            for j, (doc, d) in enumerate(rows):
                ids[i, j] = doc
                # <#> is -(a.b); <=> is 1 - cos: back to the score qac reports
                scores[i, j] = np.float32(1.0 - d) if cosine else np.float32(-d)
        for name, old in saved.items():
            if old is not None:  # a custom setting unset before stays set (to '') to the end of the transaction
                conn.execute("SELECT set_config(%s, %s, true)", (name, old))
    return ids, scores
