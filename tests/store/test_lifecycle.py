"""Store lifecycle and the backend registry."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from minihermes.runtime._clock import ManualClock
from minihermes.runtime.store import (
    Store,
    StoreClosedError,
    _registry,
    backend_names,
    get_backend,
    open_store,
    register_backend,
)
from minihermes.runtime.store.sqlite import SqliteStore

from .conftest import A


async def test_open_is_idempotent_and_schema_version(store: Store) -> None:
    await store.open()
    assert await store.schema_version() >= 1
    assert isinstance(store.backend, str) and store.backend


async def test_operations_after_close_raise(store: Store) -> None:
    await store.kv.put(A, "k", 1)
    await store.close()
    with pytest.raises(StoreClosedError, match="closed"):
        await store.kv.get(A, "k")
    with pytest.raises(StoreClosedError, match="closed"):
        await store.kv.put(A, "k", 2)
    await store.close()  # closing twice is harmless


async def test_close_flushes_queued_writes(store: Store) -> None:
    tasks = [asyncio.ensure_future(store.checkpoints.save(A, f"a{i}", i, b"x")) for i in range(50)]
    await asyncio.sleep(0)  # let every task enqueue its write
    await store.close()
    assert all(t.done() and t.exception() is None for t in tasks)


async def test_use_before_open_raises(tmp_path: Path) -> None:
    store = open_store("sqlite", path=tmp_path / "x.db", clock=ManualClock())
    with pytest.raises(StoreClosedError, match="not open"):
        await store.kv.get(A, "k")
    assert not (tmp_path / "x.db").exists()  # construction does no I/O


def test_unknown_backend_lists_known_and_suggests() -> None:
    with pytest.raises(
        ValueError, match=r"unknown store backend 'sqlit'\. Did you mean 'sqlite'\? Known backends: .*sqlite"
    ):
        open_store("sqlit", path="x.db")
    with pytest.raises(ValueError, match="Known backends"):
        get_backend("mongodb")


def test_register_backend() -> None:
    def factory(**options: object) -> Store:
        raise NotImplementedError

    register_backend("test-dummy", factory)
    try:
        assert "test-dummy" in backend_names()
        assert get_backend("test-dummy") is factory
        with pytest.raises(ValueError, match="already registered"):
            register_backend("test-dummy", factory)
        register_backend("test-dummy", "minihermes.runtime.store.sqlite:SqliteStore", replace=True)
        assert get_backend("test-dummy") is SqliteStore  # "module:attr" entries import lazily
    finally:
        _registry._backends.pop("test-dummy", None)
    assert "test-dummy" not in backend_names()


def test_sqlite_options_are_validated_at_construction(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="exactly one of path= or data_dir="):
        open_store("sqlite")
    with pytest.raises(ValueError, match="exactly one"):
        open_store("sqlite", path=tmp_path / "a.db", data_dir=tmp_path)
    with pytest.raises(ValueError, match="synchronous"):
        open_store("sqlite", path=tmp_path / "a.db", synchronous="off")
    with pytest.raises(ValueError, match="file path"):
        open_store("sqlite", path=":memory:")
    with pytest.raises(TypeError):
        open_store("sqlite", path=tmp_path / "a.db", pth="typo")
