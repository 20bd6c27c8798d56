"""SQLite file format: pragmas, fresh creation, migration from v1, refusal of newer/foreign files."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from minihermes.runtime._clock import ManualClock
from minihermes.runtime.store import ChannelDepth, SchemaVersionError, Store, open_store
from minihermes.runtime.store._sqlite_schema import LATEST_VERSION
from minihermes.runtime.store.testing import create_v1_database


async def opened(path: Path, clock: ManualClock | None = None, **options: object) -> Store:
    store = open_store("sqlite", path=path, clock=clock or ManualClock(), **options)
    await store.open()
    return store


def columns(path: Path, table: str) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]


async def test_fresh_file_settings(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    store = await opened(path, synchronous="full")
    assert await store.schema_version() == LATEST_VERSION == 8
    await store.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == "8"
    finally:
        conn.close()
    assert "receipt" in columns(path, "channel_messages")


async def test_data_dir_option_creates_directory(tmp_path: Path) -> None:
    store = open_store("sqlite", data_dir=tmp_path / "nested" / "data", clock=ManualClock())
    await store.open()
    await store.kv.put(("t", "n"), "k", 1)
    await store.close()
    assert (tmp_path / "nested" / "data" / "minihermes.db").is_file()


async def test_migrates_v1_file_with_its_data(tmp_path: Path) -> None:
    clock = ManualClock()
    fixture = create_v1_database(tmp_path / "old.db", now=clock.time())
    assert "receipt" not in columns(fixture.path, "channel_messages")
    store = await opened(fixture.path, clock)
    try:
        assert await store.schema_version() == LATEST_VERSION
        scope = fixture.scope
        for key, value in fixture.kv.items():
            entry = await store.kv.get_entry(scope, key)
            assert entry is not None and (entry.value, entry.version) == (value, 1)
        assert await store.tuples.read(scope, [fixture.tuple_[0], None, None]) == fixture.tuple_
        # v5 moved each (tenant, namespace, index)'s documents to its own FTS table: each finds its own only
        found = await store.text.search(scope, "notes", "invoice")
        assert [(h.doc_id, h.meta) for h in found] == [("n1", {"n": 1})]
        assert [h.doc_id for h in await store.text.search(scope, "other", "invoice")] == ["o1"]
        assert [h.doc_id for h in await store.text.search(("elsewhere", "main"), "notes", "invoice")] == [
            "e1"
        ]
        await store.text.upsert(scope, "notes", "n3", {"body": "a new invoice"})
        assert {h.doc_id for h in await store.text.search(scope, "notes", "invoice")} == {"n1", "n3"}
        assert await store.text.remove(scope, "notes", "n1")
        assert [h.doc_id for h in await store.text.search(scope, "notes", "invoice")] == ["n3"]
        # v4 indexed the second element of the tuples already stored: a two-literal pattern finds them
        assert await store.tuples.read(scope, [*fixture.tuple_[:2], None]) == fixture.tuple_
        assert await store.tuples.read(scope, [fixture.tuple_[0], "other", None]) is None
        checkpoint = await store.checkpoints.load(scope, fixture.actor_id)
        assert checkpoint is not None and (checkpoint.state_version, checkpoint.data) == (
            2,
            fixture.checkpoint,
        )
        # v6 added fences: a checkpoint written before them is claimed like any other
        claimed = await store.checkpoints.claim(scope, fixture.actor_id, 4)
        assert claimed is not None and claimed.data == fixture.checkpoint
        lock = await store.locks.get(scope, fixture.lock_name)
        assert lock is not None and lock.token == fixture.lock_token
        assert (
            await store.locks.try_acquire(scope, fixture.lock_name, "node-a", ttl=5) == fixture.lock_token + 1
        )
        # the event chain written by v1 verifies and continues
        assert (await store.events.verify(scope, fixture.stream)).checked == fixture.events
        assert (await store.events.append(scope, fixture.stream, "v2")).seq == fixture.events + 1
        assert (await store.events.verify(scope, fixture.stream)).ok
        # channel rows gained the receipt column: the v1 in-flight message has none yet
        assert await store.channels.depth(scope, fixture.channel) == ChannelDepth(1, 1, 0)
        [ready] = await store.channels.receive(scope, fixture.channel, receipt="new-consumer")
        assert ready.msg_id == fixture.ready_msg_id
        assert (
            await store.channels.ack(scope, fixture.channel, fixture.in_flight_msg_id, receipt="x") is False
        )
        await clock.advance(30)
        got = await store.channels.receive(scope, fixture.channel, max_messages=5, receipt="new-consumer")
        assert [(m.msg_id, m.deliveries) for m in got] == [
            (fixture.ready_msg_id, 2),
            (fixture.in_flight_msg_id, 2),
        ]
        assert await store.channels.release_receipt("new-consumer") == 2
    finally:
        await store.close()
    assert "receipt" in columns(fixture.path, "channel_messages")
    # reopening a migrated file is a no-op
    store = await opened(fixture.path, clock)
    assert await store.schema_version() == LATEST_VERSION
    await store.close()


async def test_migrated_schema_equals_fresh_schema(tmp_path: Path) -> None:
    create_v1_database(tmp_path / "old.db")
    await (await opened(tmp_path / "old.db")).close()
    await (await opened(tmp_path / "new.db")).close()

    def schema(path: Path) -> list[tuple[str, str]]:
        # Per-index FTS tables (text_fts_<n>) come with data, not with the schema (the fixture has documents),
        # and so do the planner statistics PRAGMA optimize keeps (sqlite_stat1).
        with sqlite3.connect(path) as conn:
            rows = conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'text_fts_%'"
                " AND name NOT LIKE 'sqlite_stat%'"
                " ORDER BY name"
            )
            return [(name, " ".join(sql.split())) for name, sql in rows]

    assert schema(tmp_path / "old.db") == schema(tmp_path / "new.db")


async def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    await (await opened(path)).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    store = open_store("sqlite", path=path, clock=ManualClock())
    with pytest.raises(SchemaVersionError, match="version 99 is newer than this MiniHermes supports"):
        await store.open()
    with sqlite3.connect(path) as conn:  # nothing was changed
        assert conn.execute("SELECT value FROM meta").fetchone()[0] == "99"


async def test_foreign_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (id INTEGER)")
    with pytest.raises(SchemaVersionError, match="not a MiniHermes database"):
        await opened(path)


async def test_failed_migration_rolls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from minihermes.runtime.store import _sqlite_schema

    fixture = create_v1_database(tmp_path / "old.db")

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("ALTER TABLE channel_messages ADD COLUMN receipt TEXT")
        raise RuntimeError("disk on fire")

    monkeypatch.setitem(_sqlite_schema.MIGRATIONS, 2, broken)
    with pytest.raises(RuntimeError, match="disk on fire"):
        await opened(fixture.path)
    assert "receipt" not in columns(fixture.path, "channel_messages")
    with sqlite3.connect(fixture.path) as conn:
        assert conn.execute("SELECT value FROM meta").fetchone()[0] == "1"


async def test_v1_fixture_for_a_data_dir_with_checkpoints(tmp_path: Path) -> None:
    from minihermes.runtime.store import sqlite_v1_fixture

    await sqlite_v1_fixture(
        tmp_path / "old", checkpoints={("system", "default", "c"): {"count": 11}, ("t", "n", "raw"): b"\x00"}
    )
    store = open_store("sqlite", data_dir=tmp_path / "old", clock=ManualClock())
    await store.open()
    try:
        assert await store.schema_version() == LATEST_VERSION
        checkpoint = await store.checkpoints.load(("system", "default"), "c")
        assert checkpoint is not None and (checkpoint.state_version, checkpoint.data) == (1, b'{"count":11}')
        assert (await store.checkpoints.load(("t", "n"), "raw")).data == b"\x00"  # type: ignore[union-attr]
    finally:
        await store.close()
