"""Damage done to the file behind the store's back: corrupt rows go to quarantine, tampering with the event
log is detected by verify()."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from minihermes.runtime._clock import ManualClock
from minihermes.runtime.store import Reminder, RetentionRule, Store, open_store
from minihermes.runtime.store._chain import chain_hash

from .conftest import A


@pytest.fixture
async def sqlite_store(tmp_path: Path, clock: ManualClock) -> AsyncIterator[Store]:
    store = open_store("sqlite", path=tmp_path / "store.db", clock=clock)
    await store.open()
    yield store
    await store.close()


def raw(tmp_path: Path, sql: str, params: tuple[object, ...] = ()) -> int:
    """Change the file with a separate connection, as a bad disk, a bug or an attacker would."""
    conn = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
    try:
        return conn.execute(sql, params).rowcount
    finally:
        conn.close()


def count(tmp_path: Path, sql: str, params: tuple[object, ...] = ()) -> int:
    conn = sqlite3.connect(tmp_path / "store.db")
    try:
        return int(conn.execute(sql, params).fetchone()[0])
    finally:
        conn.close()


# ------------------------------------------------------------------------------------------ corrupt rows


async def test_corrupt_kv_value_is_quarantined(
    sqlite_store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await sqlite_store.kv.put(A, "good", 1)
    await sqlite_store.kv.put(A, "bad", {"x": 1})
    assert raw(tmp_path, "UPDATE kv SET value = '{not json' WHERE key = 'bad'") == 1
    with caplog.at_level(logging.WARNING, logger="minihermes.runtime.store"):
        assert await sqlite_store.kv.get(A, "bad") is None
    assert "quarantined corrupt kv row 'bad'" in caplog.text
    [record] = await sqlite_store.quarantine.list()
    assert (record.kind, record.scope, record.key, record.data) == ("kv", A, "bad", b"{not json")
    assert record.reason
    assert count(tmp_path, "SELECT COUNT(*) FROM kv WHERE key = 'bad'") == 0
    assert await sqlite_store.kv.get(A, "good") == 1
    assert await sqlite_store.kv.put(A, "bad", "fresh") == 1  # behaves as absent


async def test_corrupt_rows_skipped_in_kv_list(sqlite_store: Store, tmp_path: Path) -> None:
    for i in range(5):
        await sqlite_store.kv.put(A, f"k{i}", i)
    raw(tmp_path, "UPDATE kv SET value = x'00ff' WHERE key = 'k1'")
    raw(tmp_path, "UPDATE kv SET version = 'seven' WHERE key = 'k3'")
    assert await sqlite_store.kv.list(A, limit=3) == [("k0", 0), ("k2", 2), ("k4", 4)]
    assert sorted(r.key for r in await sqlite_store.quarantine.list()) == ["k1", "k3"]


async def test_corrupt_tuple_is_quarantined(sqlite_store: Store, tmp_path: Path) -> None:
    for i in range(3):
        await sqlite_store.tuples.write(A, ["job", i])
    raw(tmp_path, "UPDATE tuples SET body = '[\"job\",' WHERE body = '[\"job\",0]'")
    raw(tmp_path, 'UPDATE tuples SET body = \'["job",{"a":1}]\' WHERE body = \'["job",1]\'')
    assert await sqlite_store.tuples.read(A, ["job", None]) == ("job", 2)
    assert await sqlite_store.tuples.take(A, ["job", None]) == ("job", 2)
    assert {r.kind for r in await sqlite_store.quarantine.list()} == {"tuple"}
    assert len(await sqlite_store.quarantine.list()) == 2
    assert count(tmp_path, "SELECT COUNT(*) FROM tuples") == 0


async def test_corrupt_tuple_met_by_take(sqlite_store: Store, tmp_path: Path) -> None:
    await sqlite_store.tuples.write(A, ["job", 1])
    await sqlite_store.tuples.write(A, ["job", 2])
    raw(tmp_path, "UPDATE tuples SET body = 'garbage' WHERE body = '[\"job\",1]'")
    assert await sqlite_store.tuples.take(A, ["job", None]) == ("job", 2)
    assert [r.data for r in await sqlite_store.quarantine.list()] == [b"garbage"]


async def test_corrupt_checkpoint_is_quarantined(sqlite_store: Store, tmp_path: Path) -> None:
    await sqlite_store.checkpoints.save(A, "agent/1", 1, b"state")
    raw(tmp_path, "UPDATE checkpoints SET data = 'now text' WHERE actor_id = 'agent/1'")
    assert await sqlite_store.checkpoints.load(A, "agent/1") is None
    [record] = await sqlite_store.quarantine.list()
    assert (record.kind, record.key, record.data) == ("checkpoint", "agent/1", b"now text")
    assert await sqlite_store.checkpoints.list(A) == []


async def test_corrupt_reminder_is_quarantined(sqlite_store: Store, tmp_path: Path) -> None:
    for name in ("a", "b"):
        await sqlite_store.reminders.upsert(Reminder(A, "agent/1", name, "tick", {"n": name}, 10.0, None))
    raw(tmp_path, "UPDATE reminders SET payload = '{' WHERE name = 'a'")
    assert [r.name for r in await sqlite_store.reminders.due(100.0)] == ["b"]
    assert [r.name for r in await sqlite_store.reminders.list(A)] == ["b"]
    [record] = await sqlite_store.quarantine.list()
    assert (record.kind, record.key) == ("reminder", "agent/1/a")


async def test_corrupt_channel_payloads(sqlite_store: Store, tmp_path: Path) -> None:
    bad = await sqlite_store.channels.send(A, "q", "n", 1)
    good = await sqlite_store.channels.send(A, "q", "n", 2)
    raw(tmp_path, "UPDATE channel_messages SET payload = 'nope' WHERE msg_id = ?", (bad,))
    [msg] = await sqlite_store.channels.receive(A, "q", max_messages=1)
    assert (msg.msg_id, msg.payload) == (good, 2)
    await sqlite_store.channels.nack(A, "q", good, requeue=False)
    raw(tmp_path, "UPDATE channel_dead SET payload = 'nope' WHERE msg_id = ?", (good,))
    assert await sqlite_store.channels.dead_letters(A, "q") == []
    assert sorted(r.kind for r in await sqlite_store.quarantine.list()) == ["channel_message", "dead_letter"]


async def test_undecodable_event_is_skipped_and_reported(sqlite_store: Store, tmp_path: Path) -> None:
    for i in range(3):
        await sqlite_store.events.append(A, "s", i)
    raw(tmp_path, "UPDATE events SET data = '{' WHERE seq = 2")
    assert [e.seq for e in await sqlite_store.events.read(A, "s")] == [1, 3]
    check = await sqlite_store.events.verify(A, "s")
    assert (check.ok, check.first_bad_seq, check.reason) == (False, 2, "stored data is not valid JSON")


# ----------------------------------------------------------------------------------------- tampering


async def chain(store: Store, n: int = 10) -> None:
    for i in range(n):
        await store.events.append(A, "audit", {"i": i})
    assert (await store.events.verify(A, "audit")).ok


async def test_modified_entry_is_detected(sqlite_store: Store, tmp_path: Path) -> None:
    await chain(sqlite_store)
    raw(tmp_path, "UPDATE events SET data = '{\"i\":999}' WHERE seq = 5")
    check = await sqlite_store.events.verify(A, "audit")
    assert (check.ok, check.checked, check.first_bad_seq) == (False, 4, 5)
    assert "hash" in check.reason


async def test_modified_timestamp_is_detected(sqlite_store: Store, tmp_path: Path) -> None:
    await chain(sqlite_store)
    raw(tmp_path, "UPDATE events SET ts = ts + 1 WHERE seq = 7")
    assert (await sqlite_store.events.verify(A, "audit")).first_bad_seq == 7


async def test_rehashed_entry_breaks_the_next_link(sqlite_store: Store, tmp_path: Path) -> None:
    await chain(sqlite_store)
    [e4] = await sqlite_store.events.read(A, "audit", after_seq=3, limit=1)
    forged = chain_hash(e4.hash, 5, 0.0, {"i": "forged"})
    raw(tmp_path, 'UPDATE events SET data = \'{"i":"forged"}\', ts = 0.0, hash = ? WHERE seq = 5', (forged,))
    check = await sqlite_store.events.verify(A, "audit")
    assert (check.first_bad_seq, check.reason) == (6, "prev_hash does not match the previous entry")


async def test_deleted_middle_entry_is_detected(sqlite_store: Store, tmp_path: Path) -> None:
    await chain(sqlite_store)
    raw(tmp_path, "DELETE FROM events WHERE seq = 5")
    check = await sqlite_store.events.verify(A, "audit")
    assert (check.ok, check.first_bad_seq, check.reason) == (False, 5, "expected seq 5, found 6")


async def test_reordered_entries_are_detected(sqlite_store: Store, tmp_path: Path) -> None:
    await chain(sqlite_store)
    raw(tmp_path, "UPDATE events SET seq = -1 WHERE seq = 3")
    raw(tmp_path, "UPDATE events SET seq = 3 WHERE seq = 4")
    raw(tmp_path, "UPDATE events SET seq = 4 WHERE seq = -1")
    check = await sqlite_store.events.verify(A, "audit")
    assert (check.ok, check.first_bad_seq) == (False, 3)


async def test_truncated_tail_is_detected(sqlite_store: Store, tmp_path: Path) -> None:
    await chain(sqlite_store)
    raw(tmp_path, "DELETE FROM events WHERE seq >= 9")
    check = await sqlite_store.events.verify(A, "audit")
    assert (check.ok, check.checked, check.first_bad_seq) == (False, 8, 9)


async def test_tampering_after_retention_is_detected(
    sqlite_store: Store, tmp_path: Path, clock: ManualClock
) -> None:
    await chain(sqlite_store)
    await sqlite_store.apply_retention([RetentionRule("events", "audit", max_count=3)], clock.time())
    assert (await sqlite_store.events.verify(A, "audit")).ok
    raw(tmp_path, "UPDATE events SET data = '{\"i\":0}' WHERE seq = 8")
    assert (await sqlite_store.events.verify(A, "audit")).first_bad_seq == 8
    # and deleting the first retained entry breaks the link to the anchor
    raw(tmp_path, "UPDATE events SET data = '{\"i\":7}' WHERE seq = 8")
    assert (await sqlite_store.events.verify(A, "audit")).ok
    raw(tmp_path, "DELETE FROM events WHERE seq = 8")
    assert (await sqlite_store.events.verify(A, "audit")).first_bad_seq == 8
