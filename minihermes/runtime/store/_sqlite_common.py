"""What every SQLite primitive shares: the engine, the clock, and moving corrupt rows to quarantine."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from typing import Any

from .._clock import Clock
from ._common import prefix_upper_bound, raw_bytes
from ._sqlite_engine import SqliteEngine

logger = logging.getLogger("minihermes.runtime.store.sqlite")


def insert_quarantine(
    conn: sqlite3.Connection, kind: str, tenant: str, ns: str, key: str, reason: str, raw: object, at: float
) -> None:
    conn.execute(
        "INSERT INTO quarantine (kind, tenant, ns, key, reason, data, at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (kind, tenant, ns, key, reason, raw_bytes(raw), at),
    )
    logger.warning("quarantined corrupt %s row %r in scope (%r, %r): %s", kind, key, tenant, ns, reason)


class Corrupt:
    """A row that failed to decode, and the statement that deletes exactly that version of it.

    The delete is conditional on the row's raw content so that a valid value written after the bad read is
    never swept into quarantine by mistake.
    """

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

    def move(self, conn: sqlite3.Connection, at: float) -> bool:
        """Delete the row and record it in quarantine; False if the row already changed or vanished."""
        if conn.execute(self.delete_sql, self.delete_params).rowcount == 0:
            return False
        insert_quarantine(conn, self.kind, self.tenant, self.ns, self.key, self.reason, self.raw, at)
        return True


class Part:
    """Base of the per-primitive classes: they all talk to one engine and read time from one clock."""

    def __init__(self, db: SqliteEngine, clock: Clock) -> None:
        self._db = db
        self._clock = clock

    def _now(self) -> float:
        return self._clock.time()

    async def _quarantine(self, corrupt: list[Corrupt]) -> None:
        """Move rows found corrupt by a read out of the way; the read then behaves as if they were absent."""
        if not corrupt:
            return
        at = self._now()

        def move(conn: sqlite3.Connection) -> None:
            for item in corrupt:
                item.move(conn, at)

        await self._db.write(move)


def prefix_clause(column: str, prefix: str) -> tuple[str, tuple[str, ...]]:
    """SQL (starting with " AND") and parameters for "column starts with prefix" as an index range."""
    if not prefix:
        return "", ()
    upper = prefix_upper_bound(prefix)
    if upper is None:
        return f" AND {column} >= ?", (prefix,)
    return f" AND {column} >= ? AND {column} < ?", (prefix, upper)


def execute_each(conn: sqlite3.Connection, sql: str, rows: Sequence[Sequence[Any]]) -> int:
    """Run sql once per row; returns the rows changed. Used instead of ``executemany``, which failed
    intermittently ("bad parameter or other API misuse") when two batches of one cached statement met in
    one group commit."""
    changed = 0
    for row in rows:
        changed += conn.execute(sql, row).rowcount
    return changed
