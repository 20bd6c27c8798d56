"""SQLite vector search: exact cosine similarity over stored float32 vectors.

Each row keeps the vector as little-endian float32 bytes and its norm. A search reads the (scope, index,
dimension) rows on a reader thread and scores every one there (never on the event loop): exact, and fine
for the thousands of skills or memories one node keeps. PostgreSQL uses an HNSW index instead.
"""

from __future__ import annotations

import heapq
import sqlite3
from collections.abc import Sequence

from ._common import check_count, check_name, check_scope, dumps_json, loads_json
from ._sqlite_common import Part, logger
from ._vectors import check_vector, cosine, norm, pack, unpack
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
        sql = (
            "SELECT doc_id, data, norm, meta FROM vectors WHERE tenant = ? AND ns = ? AND idx = ? AND dim = ?"
        )

        def scan(conn: sqlite3.Connection) -> list[tuple[float, str, str]]:
            scored: list[tuple[float, str, str]] = []
            for doc_id, data, row_norm, raw_meta in conn.execute(sql, (tenant, ns, index, dim)):
                try:
                    values = unpack(data, dim)
                except (TypeError, ValueError):
                    logger.warning("skipping undecodable vector %r in index %r", doc_id, index)
                    continue
                scored.append((cosine(query, query_norm, values, row_norm), doc_id, raw_meta))
            # Ties by doc_id, so equal scores come back in a stable order.
            return heapq.nsmallest(limit, scored, key=lambda hit: (-hit[0], hit[1]))

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
