"""What every PostgreSQL primitive shares: the engine, the clock, NUL checks and moving corrupt rows to
quarantine."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._clock import Clock
from ._common import prefix_upper_bound, raw_bytes
from ._pg_engine import Conn, PgEngine, logger


def check_no_nul(what: str, value: str) -> str:
    """PostgreSQL text cannot hold NUL characters (SQLite can): refuse them with a clear error instead of a
    driver error. Names and keys already exclude NUL (check_name); this is for free text."""
    if "\x00" in value:
        raise ValueError(f"{what} must not contain NUL characters (PostgreSQL text cannot store them)")
    return value


async def insert_quarantine(
    conn: Conn, kind: str, tenant: str, ns: str, key: str, reason: str, raw: object, at: float
) -> None:
    await conn.execute(
        "INSERT INTO quarantine (kind, tenant, ns, key, reason, data, at) VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (kind, tenant, ns, key.replace("\x00", "\ufffd"), reason, raw_bytes(raw), at),
    )
    logger.warning("quarantined corrupt %s row %r in scope (%r, %r): %s", kind, key, tenant, ns, reason)


class Corrupt:
    """A row that failed to decode, and the statement that deletes exactly that version of it (conditional
    on its raw content, so a valid value written after the bad read is never swept away)."""

    __slots__ = ("delete_params", "delete_sql", "key", "kind", "ns", "raw", "reason", "tenant")

    def __init__(
        self,
        kind: str,
        tenant: str,
        ns: str,
        key: str,
        reason: str,
        raw: object,
        delete_sql: str,
        delete_params: tuple[object, ...],
    ) -> None:
        self.kind, self.tenant, self.ns, self.key = kind, tenant, ns, key
        self.reason, self.raw = reason, raw
        self.delete_sql, self.delete_params = delete_sql, delete_params

    async def move(self, conn: Conn, at: float) -> bool:
        cur = await conn.execute(self.delete_sql, self.delete_params)
        if cur.rowcount == 0:
            return False
        await insert_quarantine(conn, self.kind, self.tenant, self.ns, self.key, self.reason, self.raw, at)
        return True


class Part:
    """Base of the per-primitive classes: one engine, one clock."""

    def __init__(self, db: PgEngine, clock: Clock) -> None:
        self._db = db
        self._clock = clock

    def _now(self) -> float:
        return self._clock.time()

    async def _quarantine(self, corrupt: list[Corrupt]) -> None:
        """Move rows found corrupt by a read out of the way; the read then behaves as if they were absent."""
        if not corrupt:
            return
        at = self._now()

        async def move(conn: Conn) -> None:
            for item in corrupt:
                await item.move(conn, at)

        await self._db.transaction(move)


def prefix_clause(column: str, prefix: str) -> tuple[str, tuple[str, ...]]:
    """SQL (starting with " AND") and parameters for "column starts with prefix" as an index range (the
    column is COLLATE "C", so comparison is by code point)."""
    if not prefix:
        return "", ()
    upper = prefix_upper_bound(prefix)
    if upper is None:
        return f" AND {column} >= %s", (prefix,)
    return f" AND {column} >= %s AND {column} < %s", (prefix, upper)


async def execute_many(conn: Conn, sql: str, rows: Sequence[Sequence[Any]]) -> int:
    """executemany (pipelined by psycopg) returning the total rows changed."""
    if not rows:
        return 0
    async with conn.cursor() as cur:
        await cur.executemany(sql, rows)
        return cur.rowcount


async def write_rows(db: PgEngine, sql: str, rows: Sequence[Any]) -> int:
    """``sql`` for each of ``rows`` in one transaction (pipelined): all or none. Returns ``len(rows)``."""
    if not rows:
        return 0

    async def op(conn: Conn) -> int:
        async with conn.cursor() as cur:
            await cur.executemany(sql, rows)
        return len(rows)

    return await db.transaction(op)
