"""PostgreSQL tuple space.

Each tuple also stores ``elems``, the typed encoding of every element (``encode_element``: 1 -> '1',
1.0 -> '1.0', True -> 'true', "1" -> '"1"'), so a pattern is matched entirely in SQL by equality on the
non-wildcard positions. That keeps the typed-equality rule of ``tuple_matches`` (1 != 1.0 != "1" != True)
and lets ``take`` lock only matching rows: ``FOR UPDATE SKIP LOCKED`` hands concurrent takers different
tuples without blocking one another.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._common import (
    check_limit,
    check_scope,
    check_tuple,
    check_tuples,
    decode_tuple,
    encode_element,
    encode_tuple,
)
from ._pg_common import Corrupt, Part, insert_quarantine, write_rows
from ._pg_engine import Conn, Op
from .base import Scalar, Scope

_DELETE_EXACT = "DELETE FROM tuples WHERE id = %s AND body = %s"
_INSERT = "INSERT INTO tuples (tenant, ns, arity, elems, body, created_at) VALUES (%s, %s, %s, %s, %s, %s)"


def _where(tenant: str, ns: str, pattern: tuple[Scalar, ...]) -> tuple[str, list[object]]:
    clauses = ["tenant = %s", "ns = %s", "arity = %s"]
    params: list[object] = [tenant, ns, len(pattern)]
    for i, element in enumerate(pattern):
        if element is not None:
            clauses.append(f"elems[{i + 1}] = %s")
            params.append(encode_element(element))
    return " AND ".join(clauses), params


def _decode(
    tenant: str, ns: str, arity: int, rows: list[tuple[object, ...]]
) -> tuple[list[tuple[Scalar, ...]], list[Corrupt]]:
    found: list[tuple[Scalar, ...]] = []
    corrupt: list[Corrupt] = []
    for row_id, body in rows:
        try:
            found.append(decode_tuple(body, arity))
        except ValueError as exc:
            corrupt.append(
                Corrupt("tuple", tenant, ns, str(row_id), str(exc), body, _DELETE_EXACT, (row_id, body))
            )
    return found, corrupt


class PgTuples(Part):
    """Linda-style tuple space; each tuple is taken at most once, across connections and nodes."""

    async def write(self, scope: Scope, tup: Sequence[Scalar]) -> None:
        await self._db.run(self.write_op(scope, tup))

    def write_op(self, scope: Scope, tup: Sequence[Scalar]) -> Op:
        """``write`` checked now, as a function of a connection (for ``write_batch``)."""
        tenant, ns = check_scope(scope)
        row = self._row(tenant, ns, check_tuple(tup))

        async def op(conn: Conn) -> None:
            await conn.execute(_INSERT, row)

        return op

    async def write_many(self, scope: Scope, tuples: Sequence[Sequence[Scalar]]) -> int:
        tenant, ns = check_scope(scope)
        rows = [self._row(tenant, ns, tup) for tup in check_tuples(tuples)]
        return await write_rows(self._db, _INSERT, rows)

    async def write_unless(self, scope: Scope, tup: Sequence[Scalar], pattern: Sequence[Scalar]) -> bool:
        tenant, ns = check_scope(scope)
        values = check_tuple(tup)
        row = self._row(tenant, ns, values)
        pat = check_tuple(pattern, pattern=True)
        where, params = _where(tenant, ns, pat)
        # Writers of tuples with one (scope, first element) take a transaction lock first: under READ
        # COMMITTED two transactions would otherwise both find no match and both insert.
        lock_key = f"tuples\x1f{tenant}\x1f{ns}\x1f{encode_element(values[0])}"

        async def op(conn: Conn) -> bool:
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (lock_key,))
            cur = await conn.execute(f"SELECT 1 FROM tuples WHERE {where} LIMIT 1", params)
            if await cur.fetchone() is not None:
                return False
            await conn.execute(_INSERT, row)
            return True

        return await self._db.transaction(op)

    def _row(self, tenant: str, ns: str, values: tuple[Scalar, ...]) -> tuple[object, ...]:
        elems = [encode_element(v) for v in values]
        return (tenant, ns, len(values), elems, encode_tuple(values), self._now())

    async def read(self, scope: Scope, pattern: Sequence[Scalar]) -> tuple[Scalar, ...] | None:
        found = await self.read_all(scope, pattern, limit=1)
        return found[0] if found else None

    async def read_all(
        self, scope: Scope, pattern: Sequence[Scalar], limit: int | None = None
    ) -> list[tuple[Scalar, ...]]:
        tenant, ns = check_scope(scope)
        pat = check_tuple(pattern, pattern=True)
        limit = check_limit(limit)
        if limit == 0:
            return []
        where, params = _where(tenant, ns, pat)
        sql = f"SELECT id, body FROM tuples WHERE {where} ORDER BY id LIMIT %s"
        while True:
            rows = await self._db.fetchall(sql, (*params, limit))
            found, corrupt = _decode(tenant, ns, len(pat), rows)
            if not corrupt:
                return found
            await self._quarantine(corrupt)  # then rescan: more matches may fit under the limit

    async def take(self, scope: Scope, pattern: Sequence[Scalar]) -> tuple[Scalar, ...] | None:
        tenant, ns = check_scope(scope)
        pat = check_tuple(pattern, pattern=True)
        where, params = _where(tenant, ns, pat)
        sql = (
            f"DELETE FROM tuples WHERE id = (SELECT id FROM tuples WHERE {where} ORDER BY id LIMIT 1"
            " FOR UPDATE SKIP LOCKED) RETURNING id, body"
        )
        now = self._now()

        async def op(conn: Conn) -> tuple[Scalar, ...] | None:
            while True:
                cur = await conn.execute(sql, params)
                rows = await cur.fetchall()
                if not rows:
                    return None
                found, corrupt = _decode(tenant, ns, len(pat), rows)
                if found:
                    return found[0]
                # The row is already deleted; keep its content for the operator and take the next one.
                item = corrupt[0]
                await _record(conn, item, now)

        return await self._db.transaction(op)

    async def take_all(self, scope: Scope, pattern: Sequence[Scalar]) -> int:
        taken: int = await self._db.transaction(self.take_all_op(scope, pattern))
        return taken

    def take_all_op(self, scope: Scope, pattern: Sequence[Scalar]) -> Op:
        """``take_all`` checked now, as a function of a connection in a transaction (``write_batch``)."""
        tenant, ns = check_scope(scope)
        pat = check_tuple(pattern, pattern=True)
        where, params = _where(tenant, ns, pat)
        now = self._now()

        async def op(conn: Conn) -> int:
            cur = await conn.execute(f"DELETE FROM tuples WHERE {where} RETURNING id, body", params)
            _, corrupt = _decode(tenant, ns, len(pat), await cur.fetchall())
            for item in corrupt:
                await _record(conn, item, now)
            return (cur.rowcount or 0) - len(corrupt)

        return op


async def _record(conn: Conn, item: Corrupt, at: float) -> None:
    await insert_quarantine(conn, item.kind, item.tenant, item.ns, item.key, item.reason, item.raw, at)
