"""EventLog contract: hash chain, gap-free seq, reads, verification across retention."""

from __future__ import annotations

import hashlib
import json

import pytest

from minihermes.runtime._clock import ManualClock
from minihermes.runtime.store import RetentionRule, Store

from .conftest import A

ZERO = "0" * 64


def expected_hash(prev: str, seq: int, ts: float, data: object) -> str:
    canonical = json.dumps([seq, ts, data], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256((prev + canonical).encode()).hexdigest()


async def test_append_builds_documented_hash_chain(store: Store, clock: ManualClock) -> None:
    first = await store.events.append(A, "audit", {"b": 1, "a": [1, 2]})
    await clock.advance(1.5)
    second = await store.events.append(A, "audit", "text")
    assert (first.seq, first.prev_hash) == (1, ZERO)
    assert first.hash == expected_hash(ZERO, 1, first.ts, {"a": [1, 2], "b": 1})
    assert (second.seq, second.prev_hash, second.ts) == (2, first.hash, clock.time())
    assert second.hash == expected_hash(first.hash, 2, second.ts, "text")
    assert await store.events.read(A, "audit") == [first, second]


async def test_read_after_seq_and_limit(store: Store) -> None:
    for i in range(10):
        await store.events.append(A, "s", {"i": i})
    assert [r.seq for r in await store.events.read(A, "s", after_seq=7)] == [8, 9, 10]
    assert [r.data for r in await store.events.read(A, "s", after_seq=2, limit=2)] == [{"i": 2}, {"i": 3}]
    assert await store.events.read(A, "s", after_seq=10) == []
    assert await store.events.read(A, "s", limit=0) == []
    assert await store.events.read(A, "unknown") == []


async def test_last_seq_streams_and_independent_chains(store: Store) -> None:
    assert await store.events.last_seq(A, "x") == 0
    assert await store.events.streams(A) == []
    await store.events.append(A, "x", 1)
    await store.events.append(A, "x", 2)
    y = await store.events.append(A, "y", 1)
    assert (y.seq, y.prev_hash) == (1, ZERO)
    assert await store.events.last_seq(A, "x") == 2
    assert await store.events.streams(A) == ["x", "y"]


async def test_verify_ok_and_empty(store: Store) -> None:
    assert (await store.events.verify(A, "none")).ok
    for i in range(25):
        await store.events.append(A, "audit", {"i": i, "f": i / 3})
    check = await store.events.verify(A, "audit")
    assert check.ok and check.checked == 25 and check.first_bad_seq is None


async def test_retention_keeps_anchor_and_seq_continues(store: Store, clock: ManualClock) -> None:
    for i in range(10):
        await store.events.append(A, "audit", i)
        await clock.advance(10)
    report = await store.apply_retention([RetentionRule("events", "audit", max_count=4)], clock.time())
    assert report.deleted["events"] == 6
    remaining = await store.events.read(A, "audit")
    assert [r.seq for r in remaining] == [7, 8, 9, 10]
    check = await store.events.verify(A, "audit")
    assert check.ok and check.checked == 4
    nxt = await store.events.append(A, "audit", "after")
    assert nxt.seq == 11 and nxt.prev_hash == remaining[-1].hash
    assert (await store.events.verify(A, "audit")).ok
    assert await store.events.last_seq(A, "audit") == 11


async def test_retention_by_age_and_trimming_everything(store: Store, clock: ManualClock) -> None:
    for i in range(6):
        await store.events.append(A, "s", i)
        await clock.advance(10)  # entry i has ts = start + 10 i
    start = clock.time() - 60
    report = await store.apply_retention([RetentionRule("events", "*", max_age=35)], start + 60)
    assert report.deleted["events"] == 3  # ts start+0, +10, +20 are older than 25 s before "now"
    assert [r.seq for r in await store.events.read(A, "s")] == [4, 5, 6]
    assert (await store.events.verify(A, "s")).ok
    await store.apply_retention([RetentionRule("events", "s", max_count=0)], clock.time())
    assert await store.events.read(A, "s") == []
    assert (await store.events.verify(A, "s")).ok
    assert (await store.events.append(A, "s", "again")).seq == 7
    assert (await store.events.verify(A, "s")).ok


async def test_append_roundtrips_like_read(store: Store) -> None:
    record = await store.events.append(A, "s", {"t": (1, 2)})
    assert record.data == {"t": [1, 2]}
    assert (await store.events.read(A, "s"))[0] == record


async def test_event_bad_input(store: Store) -> None:
    with pytest.raises(TypeError, match="event data is not JSON-serializable"):
        await store.events.append(A, "s", {"x": {1, 2}})
    with pytest.raises(ValueError, match="event data is not valid JSON"):
        await store.events.append(A, "s", float("nan"))
    with pytest.raises(ValueError, match="stream must not be empty"):
        await store.events.append(A, "", 1)
    with pytest.raises(ValueError, match="after_seq"):
        await store.events.read(A, "s", after_seq=-1)
    assert await store.events.last_seq(A, "s") == 0


async def test_reads_see_the_appends_asked_for_before_them(store: Store) -> None:
    """One actor queues appends without waiting, another reads at once: the read waits for them (whoever
    asked), so an action's audit event is never missing from a query that follows it."""
    queued = [store.events.append_nowait(A, "audit", {"n": i}) for i in range(3)]
    assert [r.data for r in await store.events.read(A, "audit")] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert all(f.done() for f in queued)
    store.events.append_nowait(A, "audit", {"n": 3})
    assert await store.events.last_seq(A, "audit") == 4
    store.events.append_nowait(A, "audit", {"n": 4})
    check = await store.events.verify(A, "audit")
    assert check.ok and check.checked == 5
    # Another stream's reads do not wait for this one; a failed append is waited for, not raised.
    assert await store.events.read(A, "other") == []
    with pytest.raises(ValueError):
        store.events.append_nowait(A, "audit", {"bad": float("nan")})
    assert await store.events.last_seq(A, "audit") == 5
