"""The SQLite engine: group commit, per-op isolation inside a batch, threads, close, lock contention."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from minihermes.runtime._clock import ManualClock
from minihermes.runtime.store import RetentionRule, open_store
from minihermes.runtime.store._sqlite_engine import SqliteEngine
from minihermes.runtime.store.sqlite import SqliteStore

from .conftest import A


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    opened = SqliteStore(tmp_path / "store.db", clock=ManualClock())
    await opened.open()
    yield opened
    await opened.close()


def engine(store: SqliteStore) -> SqliteEngine:
    return store._engine


@asynccontextmanager
async def writer_paused(store: SqliteStore) -> AsyncIterator[None]:
    """Occupy the writer thread so that everything submitted meanwhile lands in one batch."""
    entered, release = threading.Event(), threading.Event()

    def block(conn: sqlite3.Connection) -> None:
        entered.set()
        release.wait(10)

    blocker = asyncio.ensure_future(engine(store).write(block))
    assert await asyncio.to_thread(entered.wait, 10)
    try:
        yield
        await asyncio.sleep(0)  # let the tasks created in the block enqueue their writes
    finally:
        release.set()
        await blocker


async def test_one_commit_and_one_loop_wakeup_per_batch(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = asyncio.get_running_loop()
    wakeups: list[Any] = []
    original = loop.call_soon_threadsafe

    def counting(callback: Any, *args: Any, **kwargs: Any) -> Any:
        wakeups.append(callback)
        return original(callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_soon_threadsafe", counting)
    await asyncio.sleep(0)
    async with writer_paused(store):
        saves = [asyncio.ensure_future(store.checkpoints.save(A, f"a{i}", i, b"x")) for i in range(200)]
    await asyncio.gather(*saves)
    settles = [cb for cb in wakeups if getattr(cb, "__name__", "") == "_settle"]
    assert len(settles) == 2  # the blocker's batch and one batch for all 200 saves
    assert len(await store.checkpoints.list(A)) == 200


async def test_saves_of_one_actor_in_a_batch_coalesce(store: SqliteStore) -> None:
    before = await engine(store).write(lambda c: c.total_changes)
    async with writer_paused(store):
        saves = [
            asyncio.ensure_future(store.checkpoints.save(A, "hot", i, str(i).encode())) for i in range(100)
        ]
    assert await asyncio.gather(*saves) == [None] * 100
    after = await engine(store).write(lambda c: c.total_changes)
    assert after - before == 1  # one upsert for the whole batch
    checkpoint = await store.checkpoints.load(A, "hot")
    assert checkpoint is not None and checkpoint.state_version == 99


async def test_failing_op_fails_only_its_caller(store: SqliteStore) -> None:
    def half_then_fail(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO kv VALUES ('acme', 'main', 'partial', '1', 1, NULL, 0)")
        raise RuntimeError("op bug")

    async with writer_paused(store):
        first = asyncio.ensure_future(store.kv.put(A, "k1", 1))
        bad_sql = asyncio.ensure_future(
            engine(store).write(lambda c: c.execute("INSERT INTO nope VALUES (1)"))
        )
        bad_op = asyncio.ensure_future(engine(store).write(half_then_fail))
        last = asyncio.ensure_future(store.kv.put(A, "k2", 2))
    assert await first == 1 and await last == 1
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        await bad_sql
    with pytest.raises(RuntimeError, match="op bug"):
        await bad_op
    assert await store.kv.list(A) == [("k1", 1), ("k2", 2)]  # "partial" was rolled back


async def test_lone_failing_op_rolls_back(store: SqliteStore) -> None:
    def half_then_fail(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO kv VALUES ('acme', 'main', 'partial', '1', 1, NULL, 0)")
        raise RuntimeError("op bug")

    with pytest.raises(RuntimeError):
        await engine(store).write(half_then_fail)
    assert await store.kv.get(A, "partial") is None
    assert await store.kv.put(A, "after", 1) == 1


async def test_sqlite_runs_off_the_event_loop(store: SqliteStore) -> None:
    writer = await engine(store).write(lambda c: threading.current_thread().name)
    reader = await engine(store).read(lambda c: threading.current_thread().name)
    assert writer.startswith("minihermes-sqlite-writer")
    assert reader.startswith("minihermes-sqlite-reader")
    assert threading.current_thread().name != writer


async def test_close_flushes_queued_writes_to_disk(tmp_path: Path) -> None:
    store = open_store("sqlite", path=tmp_path / "s.db", clock=ManualClock())
    await store.open()
    tasks = [asyncio.ensure_future(store.kv.put(A, f"k{i}", i)) for i in range(300)]
    await asyncio.sleep(0)
    await store.close()
    assert [t.result() for t in tasks] == [1] * 300
    reopened = open_store("sqlite", path=tmp_path / "s.db", clock=ManualClock())
    await reopened.open()
    assert len(await reopened.kv.list(A)) == 300
    await reopened.close()


async def test_other_process_holding_the_write_lock(tmp_path: Path) -> None:
    store = open_store("sqlite", path=tmp_path / "s.db", clock=ManualClock(), busy_timeout=0.2)
    await store.open()
    await store.kv.put(A, "k", 1)
    other = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            await store.kv.put(A, "k", 2)
        assert await store.kv.get(A, "k") == 1  # WAL readers are not blocked by a writer
        other.execute("COMMIT")
    finally:
        other.close()
    assert await store.kv.put(A, "k", 3) == 2
    await store.close()


async def test_retention_returns_free_pages_to_the_file_system(store: SqliteStore) -> None:
    for i in range(40):
        await store.blobs.put(A, f"big/{i}", bytes(100_000))
    size_full = store.path.stat().st_size
    await engine(store).write(
        lambda c: c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall(), transactional=False
    )
    report = await store.apply_retention([RetentionRule("blobs", "big/", max_count=0)], 0)
    assert report.deleted["blobs"] == 40
    assert await engine(store).read(lambda c: c.execute("PRAGMA freelist_count").fetchone()[0]) == 0
    await engine(store).write(
        lambda c: c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall(), transactional=False
    )
    assert store.path.stat().st_size < size_full / 4


async def test_tuple_patterns_with_a_literal_first_element_use_the_index(store: SqliteStore) -> None:
    from minihermes.runtime.store._sqlite_tuples import _candidates

    sql, params = _candidates("acme", "main", ("skill_trigger", None, None))
    plan = await engine(store).read(lambda c: c.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall())
    assert "USING INDEX tuples_first (tenant=? AND ns=? AND arity=? AND e0=?)" in str(plan)
    sql, params = _candidates("acme", "main", (None, "x"))
    plan = await engine(store).read(lambda c: c.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall())
    assert "USING INDEX tuples_arity" in str(plan) and "TEMP B-TREE" not in str(plan)
