"""PostgreSQL vector search on pgvector: cosine distance over an HNSW index.

pgvector indexes only columns of a fixed dimension, and an index may hold vectors of several dimensions, so
the column is an untyped ``vector`` and each dimension in use gets its own partial expression index,
``USING hnsw ((embedding::vector(d)) vector_cosine_ops) WHERE dim = d``, created in the transaction of the
first upsert of that dimension (``vector_dims`` records which exist; its primary key makes two nodes that
meet a new dimension at once create the index once). Searches repeat the same cast and predicate with the
dimension as a literal, which is what lets the planner use the partial index.

The HNSW scan filters by scope and index after finding neighbours; ``hnsw.iterative_scan = strict_order``
(pgvector 0.8) keeps it scanning until enough rows pass the filter, so a tenant with few vectors among
many still gets its nearest ones, in order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pgvector import Vector

from ._common import check_count, check_name, check_scope, dumps_json, loads_json
from ._pg_common import Part
from ._pg_engine import Conn, logger
from ._vectors import check_vector
from .base import JSON, Scope, VectorHit

_UPSERT = """
INSERT INTO vectors (tenant, ns, idx, doc_id, dim, embedding, meta, updated_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (tenant, ns, idx, doc_id) DO UPDATE SET dim = excluded.dim, embedding = excluded.embedding,
    meta = excluded.meta, updated_at = excluded.updated_at"""

DEFAULT_EF_SEARCH = 40


class PgVectors(Part):
    """Named vector indexes per scope."""

    _known_dims: set[int] | None = None

    async def upsert(
        self, scope: Scope, index: str, doc_id: str, vector: Sequence[float], meta: JSON = None
    ) -> None:
        tenant, ns = check_scope(scope)
        check_name("index", index)
        check_name("doc_id", doc_id)
        values = check_vector("vector", vector)
        meta_text = dumps_json("vector meta", meta)
        dim = len(values)
        params = (tenant, ns, index, doc_id, dim, Vector(values), meta_text, self._now())
        known = self._known_dims if self._known_dims is not None else set()
        self._known_dims = known

        async def op(conn: Conn) -> None:
            if dim not in known:
                await _ensure_index(conn, dim)
            await conn.execute(_UPSERT, params)

        await self._db.transaction(op)
        known.add(dim)

    async def delete(self, scope: Scope, index: str, doc_id: str) -> bool:
        tenant, ns = check_scope(scope)
        check_name("index", index)
        check_name("doc_id", doc_id)
        sql = "DELETE FROM vectors WHERE tenant = %s AND ns = %s AND idx = %s AND doc_id = %s"
        return await self._db.rowcount(sql, (tenant, ns, index, doc_id)) > 0

    async def search(
        self, scope: Scope, index: str, vector: Sequence[float], limit: int = 10
    ) -> list[VectorHit]:
        tenant, ns = check_scope(scope)
        check_name("index", index)
        values = check_vector("vector", vector)
        check_count("limit", limit)
        if limit == 0:
            return []
        dim = len(values)  # an int we computed: safe to put in the SQL text
        sql = f"""
            SELECT doc_id, 1 - (embedding::vector({dim}) <=> %(q)s::vector({dim})), meta FROM vectors
            WHERE tenant = %(tenant)s AND ns = %(ns)s AND idx = %(idx)s AND dim = {dim}
            ORDER BY embedding::vector({dim}) <=> %(q)s::vector({dim}) LIMIT %(limit)s"""
        params = {"q": Vector(values), "tenant": tenant, "ns": ns, "idx": index, "limit": limit}

        async def op(conn: Conn) -> list[tuple[Any, ...]]:
            # The candidate list must be at least as long as the answer.
            ef_search = str(max(DEFAULT_EF_SEARCH, min(limit, 1000)))
            await conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", (ef_search,))
            cur = await conn.execute(sql, params)
            return await cur.fetchall()

        hits = []
        for doc_id, score, raw_meta in await self._db.transaction(op):
            try:
                meta = loads_json(raw_meta)
            except ValueError:
                logger.warning(
                    "vector hit %r in index %r has undecodable meta; returning it without", doc_id, index
                )
                meta = None
            hits.append(VectorHit(str(doc_id), max(-1.0, min(1.0, float(score))), meta))
        return hits


async def _ensure_index(conn: Conn, dim: int) -> None:
    cur = await conn.execute(
        "INSERT INTO vector_dims (dim) VALUES (%s) ON CONFLICT DO NOTHING RETURNING dim", (dim,)
    )
    if await cur.fetchone() is None:
        return
    await conn.execute(
        f"CREATE INDEX IF NOT EXISTS vectors_hnsw_{dim} ON vectors USING hnsw ((embedding::vector({dim})) vector_cosine_ops)"
        f" WHERE dim = {dim}"
    )
