"""The store contract suite runs once per backend.

Backends come from MINIHERMES_STORE_BACKENDS (comma separated, default "sqlite"). To add one, write an
async factory ``(tmp_path, clock) -> opened Store`` and put it in BACKENDS; e.g. a "postgres" factory that
creates a fresh schema per test from MINIHERMES_TEST_POSTGRES_DSN.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from minihermes.runtime._clock import ManualClock
from minihermes.runtime.store import Store, open_store

BackendFactory = Callable[[Path, ManualClock], Awaitable[Store]]

A = ("acme", "main")
B = ("globex", "main")
A2 = ("acme", "other")
"""A and B differ by tenant, A and A2 only by namespace."""


async def _sqlite(tmp_path: Path, clock: ManualClock) -> Store:
    store = open_store("sqlite", path=tmp_path / "store.db", clock=clock)
    await store.open()
    return store


BACKENDS: dict[str, BackendFactory] = {"sqlite": _sqlite}
SELECTED = [name.strip() for name in os.environ.get("MINIHERMES_STORE_BACKENDS", "sqlite").split(",") if name]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=SELECTED)
async def store(request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock) -> AsyncIterator[Store]:
    factory = BACKENDS.get(request.param)
    if factory is None:
        pytest.fail(f"no test factory for store backend {request.param!r}; known: {sorted(BACKENDS)}")
    opened = await factory(tmp_path, clock)
    try:
        yield opened
    finally:
        await opened.close()
