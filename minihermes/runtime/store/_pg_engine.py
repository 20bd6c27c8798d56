"""The PostgreSQL connection pool of one store: psycopg 3 async connections from a psycopg_pool pool.

Every connection is in autocommit mode, so a single statement is its own transaction (most operations are
one statement: upserts with RETURNING, conditional updates, ``FOR UPDATE SKIP LOCKED`` picks); operations of
several statements run in an explicit transaction (``transaction``). The store's schema and the schemas of
the extensions it uses are put on each connection's ``search_path`` when the connection is made (the
``options`` startup parameter), so the SQL text names tables without a schema and one server can hold many
stores side by side (one schema each).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import psycopg
from pgvector.psycopg.vector import register_vector_info
from psycopg.rows import TupleRow
from psycopg.types import TypeInfo
from psycopg_pool import AsyncConnectionPool

from ._errors import StoreClosedError

T = TypeVar("T")
Conn = psycopg.AsyncConnection[TupleRow]
Params = Sequence[Any] | Mapping[str, Any]
Op = Callable[[Conn], Awaitable[Any]]
"""A write checked and bound to its parameters, run on a connection (``Store.write_batch``)."""
logger = logging.getLogger("minihermes.runtime.store.postgres")


class PgEngine:
    """Owns the pool. ``start`` runs a setup function on a first connection (schema creation, migrations)
    and then opens the pool with the search_path that setup returned."""

    def __init__(
        self, conninfo: str, connect_kwargs: dict[str, Any], *, min_size: int, max_size: int, timeout: float
    ) -> None:
        self._conninfo = conninfo
        self._kwargs = connect_kwargs
        self._min_size = min_size
        self._max_size = max_size
        self._timeout = timeout
        self._pool: AsyncConnectionPool[Conn] | None = None
        self._state = "new"  # new -> open -> closed

    def set_password(self, password: str) -> None:
        """Use this password (from a secret file) instead of one in the connection string."""
        self._kwargs["password"] = password

    @property
    def is_open(self) -> bool:
        return self._state == "open"

    async def connect(self, **extra: Any) -> Conn:
        """A connection outside the pool (setup, tests)."""
        conn: Conn = await psycopg.AsyncConnection.connect(
            self._conninfo,
            autocommit=True,
            connect_timeout=max(1, round(self._timeout)),
            **{**self._kwargs, **extra},
        )
        return conn

    async def start(self, setup: Callable[[Conn], Awaitable[Sequence[str]]]) -> None:
        """Run setup on one connection (it returns the search_path schemas), then open the pool."""
        if self._state == "closed":
            raise StoreClosedError("the store is closed; open a new one")
        if self._state == "open":
            return
        async with await self.connect() as conn:
            search_path = await setup(conn)
        options = " ".join(
            part
            for part in (
                self._kwargs.get("options", ""),
                "-c search_path=" + ",".join(_quote_ident(s) for s in search_path),
            )
            if part
        )
        kwargs = {
            **self._kwargs,
            "autocommit": True,
            "options": options,
            "connect_timeout": max(1, round(self._timeout)),
        }
        pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            self._conninfo,
            kwargs=kwargs,
            min_size=self._min_size,
            max_size=self._max_size,
            timeout=self._timeout,
            configure=_configure,
            open=False,
            name="minihermes-store",
        )
        try:
            await pool.open(wait=True, timeout=self._timeout)
        except BaseException:
            await pool.close()
            raise
        self._pool = pool
        self._state = "open"

    async def stop(self) -> None:
        """Close the pool (idempotent). Later calls raise StoreClosedError."""
        pool, self._pool = self._pool, None
        self._state = "closed"
        if pool is not None:
            await pool.close()

    def _check_open(self) -> AsyncConnectionPool[Conn]:
        if self._pool is None or self._state != "open":
            if self._state == "new":
                raise StoreClosedError("the store is not open; await store.open() first")
            raise StoreClosedError("the store is closed")
        return self._pool

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Conn]:
        pool = self._check_open()
        async with pool.connection() as conn:
            yield conn

    async def run(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        """Run fn on a pooled connection in autocommit (each statement its own transaction)."""
        async with self.connection() as conn:
            return await fn(conn)

    async def transaction(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        """Run fn in one transaction (READ COMMITTED) on a pooled connection."""
        async with self.connection() as conn, conn.transaction():
            return await fn(conn)

    async def snapshot(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        """Run fn in a read-only REPEATABLE READ transaction: several statements see one state."""
        async with self.connection() as conn:
            await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                return await fn(conn)
            finally:
                await conn.execute("COMMIT")

    async def fetchone(self, sql: str, params: Params = ()) -> tuple[Any, ...] | None:
        async with self.connection() as conn:
            cur = await conn.execute(sql, params)
            return await cur.fetchone()

    async def fetchall(self, sql: str, params: Params = ()) -> list[tuple[Any, ...]]:
        async with self.connection() as conn:
            cur = await conn.execute(sql, params)
            return await cur.fetchall()

    async def rowcount(self, sql: str, params: Params = ()) -> int:
        async with self.connection() as conn:
            cur = await conn.execute(sql, params)
            return cur.rowcount


async def _configure(conn: Conn) -> None:
    """Per new pooled connection: teach psycopg the pgvector type (its oid differs per database), and let
    filtered HNSW scans go on until they found enough rows, in exact distance order (pgvector >= 0.8)."""
    info = await TypeInfo.fetch(conn, "vector")
    register_vector_info(conn, info)
    await conn.execute("SET hnsw.iterative_scan = strict_order")


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
