"""The store contract suite runs once per backend.

Backends come from MINIHERMES_STORE_BACKENDS (comma separated). The default is "sqlite,postgres" when
MINIHERMES_PG_DSN is set (scripts/setup.d/10-postgres.sh sets it) and "sqlite" otherwise. Each test gets a
fresh store: a new SQLite file, or a new PostgreSQL schema that is dropped after the test. Naming postgres
explicitly without a DSN fails the tests instead of skipping them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from minihermes.runtime._clock import ManualClock
from minihermes.runtime.store import Store, open_store

BackendFactory = Callable[[Path, ManualClock], AbstractAsyncContextManager[Store]]

A = ("acme", "main")
B = ("globex", "main")
A2 = ("acme", "other")
"""A and B differ by tenant, A and A2 only by namespace."""

PG_DSN = os.environ.get("MINIHERMES_PG_DSN", "")


@asynccontextmanager
async def _sqlite(tmp_path: Path, clock: ManualClock) -> AsyncIterator[Store]:
    store = open_store("sqlite", path=tmp_path / "store.db", clock=clock)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def drop_schema(schema: str) -> None:
    import psycopg
    from psycopg import sql

    async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
        await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@asynccontextmanager
async def postgres_store(clock: ManualClock, **options: object) -> AsyncIterator[Store]:
    """A PostgreSQL store in a new schema, dropped afterwards."""
    if not PG_DSN:
        pytest.fail("MINIHERMES_PG_DSN is not set (run scripts/setup.d/10-postgres.sh, or scripts/test)")
    schema = f"test_{uuid.uuid4().hex[:16]}"
    store = open_store("postgres", dsn=PG_DSN, schema=schema, clock=clock, max_size=8, **options)
    try:
        await store.open()
        yield store
    finally:
        await store.close()
        await drop_schema(schema)


def _postgres(tmp_path: Path, clock: ManualClock) -> AbstractAsyncContextManager[Store]:
    return postgres_store(clock, anchor_key_file=tmp_path / "anchor.key")  # a node passes its data dir's


BACKENDS: dict[str, BackendFactory] = {"sqlite": _sqlite, "postgres": _postgres}
_DEFAULT = "sqlite,postgres" if PG_DSN else "sqlite"
SELECTED = [
    name.strip() for name in os.environ.get("MINIHERMES_STORE_BACKENDS", _DEFAULT).split(",") if name.strip()
]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=SELECTED)
async def store(request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock) -> AsyncIterator[Store]:
    factory = BACKENDS.get(request.param)
    if factory is None:
        pytest.fail(f"no test factory for store backend {request.param!r}; known: {sorted(BACKENDS)}")
    async with factory(tmp_path, clock) as opened:
        yield opened


requires_postgres = pytest.mark.skipif(
    not PG_DSN, reason="MINIHERMES_PG_DSN is not set (scripts/setup.d/10-postgres.sh starts a server)"
)
