"""SQLite vector search: exact cosine similarity over stored float32 vectors.

Each row keeps the vector as little-endian float32 bytes and its norm. A search reads the (scope, index,
dimension) rows on a reader thread and scores every one there with numpy (never on the event loop): exact,
one matrix-vector product per search, fine for the tens of thousands of vectors one node's skills, memories
and session transcripts hold. PostgreSQL uses an HNSW index instead.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import numpy as np

from ._common import check_count, check_name, check_scope, dumps_json, loads_json
from ._sqlite_common import Part, logger
from ._vectors import check_vector, norm, pack
from .base import JSON, Scope, VectorHit

_UPSERT = """
INSERT INTO vectors (tenant, ns, idx, doc_id, dim, data, norm, meta, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (tenant, ns, idx, doc_id) DO UPDATE SET dim = excluded.dim, data = excluded.data,
    norm = excluded.norm, meta = excluded.meta, updated_at = excluded.updated_at"""


class SqliteVectors(Part):
    """Named vector indexes per scope."""

    async def upsert(
        self, scope: Scope, index: str, doc_id: str, vector: Sequence[float], meta: JSON = None
    ) -> None:
        tenant, ns = check_scope(scope)
        check_name("index", index)
        check_name("doc_id", doc_id)
        values = check_vector("vector", vector)
        params = (
            tenant,
            ns,
            index,
            doc_id,
            len(values),
            pack(values),
            norm(values),
            dumps_json("vector meta", meta),
            self._now(),
        )
        await self._db.write(lambda c: c.execute(_UPSERT, params))

    async def delete(self, scope: Scope, index: str, doc_id: str) -> bool:
        tenant, ns = check_scope(scope)
        check_name("index", index)
        check_name("doc_id", doc_id)
        sql = "DELETE FROM vectors WHERE tenant = ? AND ns = ? AND idx = ? AND doc_id = ?"
        count: int = await self._db.write(lambda c: c.execute(sql, (tenant, ns, index, doc_id)).rowcount)
        return count > 0

    async def search(
        self, scope: Scope, index: str, vector: Sequence[float], limit: int = 10
    ) -> list[VectorHit]:
        tenant, ns = check_scope(scope)
        check_name("index", index)
        query = check_vector("vector", vector)
        check_count("limit", limit)
        if limit == 0:
            return []
        query_norm = norm(query)
        dim = len(query)
        q = np.asarray(query, dtype=np.float64)
        sql = (
            "SELECT doc_id, data, norm, meta FROM vectors WHERE tenant = ? AND ns = ? AND idx = ? AND dim = ?"
        )

        def scan(conn: sqlite3.Connection) -> list[tuple[float, str, str]]:
            ids: list[str] = []
            blobs: list[bytes] = []
            norms: list[float] = []
            metas: list[str] = []
            size = 4 * dim
            for doc_id, data, row_norm, raw_meta in conn.execute(sql, (tenant, ns, index, dim)):
                if not isinstance(data, bytes) or len(data) != size or not isinstance(row_norm, float):
                    logger.warning("skipping undecodable vector %r in index %r", doc_id, index)
                    continue
                ids.append(doc_id)
                blobs.append(data)
                norms.append(row_norm)
                metas.append(raw_meta)
            if not ids:
                return []
            matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(ids), dim)
            with np.errstate(divide="ignore", invalid="ignore"):
                scores = (matrix.astype(np.float64) @ q) / (np.asarray(norms) * query_norm)
            scores = np.clip(np.nan_to_num(scores, nan=-1.0), -1.0, 1.0)
            if limit < len(ids):
                # Every row scoring at least the limit-th best, ties included; then ties by doc_id, so equal
                # scores come back in a stable order.
                kth = np.partition(scores, len(ids) - limit)[len(ids) - limit]
                chosen = np.flatnonzero(scores >= kth).tolist()
            else:
                chosen = list(range(len(ids)))
            chosen.sort(key=lambda k: (-scores[k], ids[k]))
            return [(float(scores[k]), ids[k], metas[k]) for k in chosen[:limit]]

        hits = []
        for score, doc_id, raw_meta in await self._db.read(scan):
            try:
                meta = loads_json(raw_meta)
            except ValueError:
                logger.warning(
                    "vector hit %r in index %r has undecodable meta; returning it without", doc_id, index
                )
                meta = None
            hits.append(VectorHit(doc_id, score, meta))
        return hits
