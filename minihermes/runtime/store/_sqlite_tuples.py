"""SQLite tuple space.

SQL narrows candidates by scope, arity and (when the pattern's first element is a literal, the common case:
``("skill_trigger", None, None)``) the typed first element, and the second one too when it is a literal
(``("session_owner", sid, None)``), through an index, in insertion order; Python applies the remaining
typed comparisons with the shared ``tuple_matches``.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Sequence

from ._common import (
    check_limit,
    check_scope,
    check_tuple,
    check_tuples,
    decode_tuple,
    encode_element,
    encode_tuple,
    tuple_matches,
)
from ._sqlite_common import Corrupt, Part, execute_each
from .base import Scalar, Scope

_DELETE_EXACT = "DELETE FROM tuples WHERE id = ? AND body IS ?"
_INSERT = "INSERT INTO tuples (tenant, ns, arity, e0, e1, body, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)"


def _row(tenant: str, ns: str, values: tuple[Scalar, ...], at: float) -> tuple[object, ...]:
    """The ``_INSERT`` parameters of a tuple."""
    e1 = encode_element(values[1]) if len(values) > 1 else None
    return (tenant, ns, len(values), encode_element(values[0]), e1, encode_tuple(values), at)


def _candidates(tenant: str, ns: str, pattern: tuple[Scalar, ...]) -> tuple[str, tuple[object, ...]]:
    if pattern[0] is None:
        return (
            "SELECT id, body FROM tuples WHERE tenant = ? AND ns = ? AND arity = ? ORDER BY id",
            (tenant, ns, len(pattern)),
        )
    if len(pattern) > 1 and pattern[1] is not None:
        return (
            "SELECT id, body FROM tuples WHERE tenant = ? AND ns = ? AND arity = ? AND e0 = ? AND e1 = ?"
            " ORDER BY id",
            (tenant, ns, len(pattern), encode_element(pattern[0]), encode_element(pattern[1])),
        )
    return (
        "SELECT id, body FROM tuples WHERE tenant = ? AND ns = ? AND arity = ? AND e0 = ? ORDER BY id",
        (tenant, ns, len(pattern), encode_element(pattern[0])),
    )


def _scan(
    conn: sqlite3.Connection, tenant: str, ns: str, pattern: tuple[Scalar, ...], limit: int | None
) -> tuple[list[tuple[int, tuple[Scalar, ...]]], list[Corrupt]]:
    """Matches (id, tuple) oldest first, up to limit, plus the corrupt rows met on the way."""
    sql, params = _candidates(tenant, ns, pattern)
    found: list[tuple[int, tuple[Scalar, ...]]] = []
    corrupt: list[Corrupt] = []
    if limit == 0:
        return found, corrupt
    # closing() resets the statement when we stop early, so a reader does not keep its WAL snapshot open.
    with contextlib.closing(conn.execute(sql, params)) as cursor:
        for row_id, body in cursor:
            try:
                tup = decode_tuple(body, len(pattern))
            except ValueError as exc:
                corrupt.append(
                    Corrupt("tuple", tenant, ns, str(row_id), str(exc), body, _DELETE_EXACT, (row_id, body))
                )
                continue
            if tuple_matches(pattern, tup):
                found.append((row_id, tup))
                if limit is not None and len(found) >= limit:
                    break
    return found, corrupt


class SqliteTuples(Part):
    """Linda-style tuple space; take/take_all run in the writer so each tuple is taken at most once, also
    across processes (the write lock serializes them)."""

    async def write(self, scope: Scope, tup: Sequence[Scalar]) -> None:
        await self._db.write(self.write_op(scope, tup))

    def write_op(self, scope: Scope, tup: Sequence[Scalar]) -> Callable[[sqlite3.Connection], None]:
        """``write`` checked now, as a function of the write connection (for ``write_batch``)."""
        tenant, ns = check_scope(scope)
        params = _row(tenant, ns, check_tuple(tup), self._now())

        def op(conn: sqlite3.Connection) -> None:
            conn.execute(_INSERT, params)

        return op

    async def write_many(self, scope: Scope, tuples: Sequence[Sequence[Scalar]]) -> int:
        tenant, ns = check_scope(scope)
        now = self._now()
        rows = [_row(tenant, ns, tup, now) for tup in check_tuples(tuples)]
        if rows:
            await self._db.write(lambda c: c.executemany(_INSERT, rows))
        return len(rows)

    async def write_unless(self, scope: Scope, tup: Sequence[Scalar], pattern: Sequence[Scalar]) -> bool:
        tenant, ns = check_scope(scope)
        now = self._now()
        params = _row(tenant, ns, check_tuple(tup), now)
        pat = check_tuple(pattern, pattern=True)

        def op(conn: sqlite3.Connection) -> bool:
            # In the writer: the check and the insert in one transaction.
            found, corrupt = _scan(conn, tenant, ns, pat, 1)
            for item in corrupt:
                item.move(conn, now)
            if found:
                return False
            conn.execute(_INSERT, params)
            return True

        return await self._db.write(op)

    async def read(self, scope: Scope, pattern: Sequence[Scalar]) -> tuple[Scalar, ...] | None:
        found = await self.read_all(scope, pattern, limit=1)
        return found[0] if found else None

    async def read_all(
        self, scope: Scope, pattern: Sequence[Scalar], limit: int | None = None
    ) -> list[tuple[Scalar, ...]]:
        tenant, ns = check_scope(scope)
        pat = check_tuple(pattern, pattern=True)
        limit = check_limit(limit)
        while True:
            found, corrupt = await self._db.read(lambda c: _scan(c, tenant, ns, pat, limit))
            if not corrupt:
                return [tup for _, tup in found]
            # Removing corrupt rows may let more matches under the limit; rescan once they are gone.
            await self._quarantine(corrupt)

    async def take(self, scope: Scope, pattern: Sequence[Scalar]) -> tuple[Scalar, ...] | None:
        tenant, ns = check_scope(scope)
        pat = check_tuple(pattern, pattern=True)
        now = self._now()

        def op(conn: sqlite3.Connection) -> tuple[Scalar, ...] | None:
            found, corrupt = _scan(conn, tenant, ns, pat, 1)
            for item in corrupt:
                item.move(conn, now)
            if not found:
                return None
            row_id, tup = found[0]
            conn.execute("DELETE FROM tuples WHERE id = ?", (row_id,))
            return tup

        return await self._db.write(op)

    async def take_all(self, scope: Scope, pattern: Sequence[Scalar]) -> int:
        return await self._db.write(self.take_all_op(scope, pattern))

    def take_all_op(self, scope: Scope, pattern: Sequence[Scalar]) -> Callable[[sqlite3.Connection], int]:
        """``take_all`` checked now, as a function of the write connection (for ``write_batch``)."""
        tenant, ns = check_scope(scope)
        pat = check_tuple(pattern, pattern=True)
        now = self._now()

        def op(conn: sqlite3.Connection) -> int:
            found, corrupt = _scan(conn, tenant, ns, pat, None)
            for item in corrupt:
                item.move(conn, now)
            execute_each(conn, "DELETE FROM tuples WHERE id = ?", [(row_id,) for row_id, _ in found])
            return len(found)

        return op
