"""Tenant isolation on every primitive: nothing written in one scope is visible to, or changeable from,
another scope (different tenant, or same tenant and another namespace)."""

from __future__ import annotations

import pytest

from minihermes.runtime._clock import ManualClock
from minihermes.runtime.store import ChannelDepth, Reminder, Scope, Store

from .conftest import A2, A, B

OTHERS = [B, A2]


@pytest.mark.parametrize("other", OTHERS)
async def test_kv(store: Store, other: Scope) -> None:
    await store.kv.put(A, "k", "secret")
    await store.kv.put(A, "prefix/x", 1)
    assert await store.kv.get(other, "k") is None
    assert await store.kv.get_entry(other, "k") is None
    assert await store.kv.list(other, "") == []
    assert await store.kv.delete(other, "k") is False
    assert await store.kv.cas(other, "k", 1, "hijack") is None
    # same key in the other scope is a separate entry with its own version
    assert await store.kv.put(other, "k", "mine") == 1
    assert await store.kv.cas(other, "k", None, "x") is None
    assert await store.kv.get(A, "k") == "secret"
    assert (await store.kv.get_entry(A, "k")).version == 1  # type: ignore[union-attr]


@pytest.mark.parametrize("other", OTHERS)
async def test_tuples(store: Store, other: Scope) -> None:
    await store.tuples.write(A, ["skill_trigger", "s", 1])
    for pattern in (["skill_trigger", None, None], [None, None, None]):
        assert await store.tuples.read(other, pattern) is None
        assert await store.tuples.read_all(other, pattern) == []
        assert await store.tuples.take(other, pattern) is None
        assert await store.tuples.take_all(other, pattern) == 0
    assert await store.tuples.read(A, [None, None, None]) == ("skill_trigger", "s", 1)


@pytest.mark.parametrize("other", OTHERS)
async def test_blobs(store: Store, other: Scope) -> None:
    await store.blobs.put(A, "f", b"secret")
    assert await store.blobs.get(other, "f") is None
    assert await store.blobs.list(other, "") == []
    assert await store.blobs.delete(other, "f") is False
    await store.blobs.put(other, "f", b"mine")
    assert await store.blobs.get(A, "f") == b"secret"


@pytest.mark.parametrize("other", OTHERS)
async def test_events(store: Store, other: Scope) -> None:
    await store.events.append(A, "audit", "a1")
    await store.events.append(A, "audit", "a2")
    assert await store.events.read(other, "audit") == []
    assert await store.events.last_seq(other, "audit") == 0
    assert await store.events.streams(other) == []
    assert (await store.events.verify(other, "audit")).checked == 0
    first = await store.events.append(other, "audit", "o1")
    assert (first.seq, first.prev_hash) == (1, "0" * 64)
    assert (await store.events.verify(A, "audit")).ok
    assert [e.data for e in await store.events.read(A, "audit")] == ["a1", "a2"]


@pytest.mark.parametrize("other", OTHERS)
async def test_channels(store: Store, other: Scope, clock: ManualClock) -> None:
    await store.channels.declare(A, "q", max_deliveries=1, visibility_timeout=5)
    msg_id = await store.channels.send(A, "q", "n", "secret", dedup_key="d")
    assert await store.channels.receive(other, "q", max_messages=10) == []
    assert await store.channels.depth(other, "q") == ChannelDepth(0, 0, 0)
    assert await store.channels.ack(other, "q", msg_id) is False
    assert await store.channels.nack(other, "q", msg_id, requeue=False) is False
    assert await store.channels.redrive(other, "q", msg_id) is False
    # dedup keys are per scope too
    assert await store.channels.send(other, "q", "n", "mine", dedup_key="d") != msg_id
    [own] = await store.channels.receive(other, "q")
    assert own.payload == "mine"
    # the other scope's channel options are its own (defaults here)
    await clock.advance(5)
    assert await store.channels.receive(other, "q") == []  # default timeout is 30 s, not A's 5 s
    [m] = await store.channels.receive(A, "q", receipt="a-consumer")
    assert m.msg_id == msg_id
    assert await store.channels.ack(other, "q", msg_id, receipt="a-consumer") is False
    await store.channels.nack(A, "q", msg_id, requeue=False)
    assert await store.channels.dead_letters(other, "q") == []
    assert await store.channels.redrive(other, "q", msg_id) is False
    assert [d.msg_id for d in await store.channels.dead_letters(A, "q")] == [msg_id]


@pytest.mark.parametrize("other", OTHERS)
async def test_locks(store: Store, other: Scope) -> None:
    token = await store.locks.try_acquire(A, "leader", "node-a", ttl=10)
    assert token is not None
    assert await store.locks.get(other, "leader") is None
    assert await store.locks.release(other, "leader", "node-a", token) is False
    assert await store.locks.renew(other, "leader", "node-a", token, ttl=10) is False
    assert await store.locks.try_acquire(other, "leader", "node-b", ttl=10) == 1  # own counter
    assert (await store.locks.get(A, "leader")).holder == "node-a"  # type: ignore[union-attr]


@pytest.mark.parametrize("other", OTHERS)
async def test_checkpoints(store: Store, other: Scope) -> None:
    await store.checkpoints.save(A, "agent/1", 3, b"secret")
    assert await store.checkpoints.load(other, "agent/1") is None
    assert await store.checkpoints.list(other, "") == []
    assert await store.checkpoints.delete(other, "agent/1") is False
    assert (await store.checkpoints.load(A, "agent/1")).data == b"secret"  # type: ignore[union-attr]


@pytest.mark.parametrize("other", OTHERS)
async def test_reminders(store: Store, other: Scope) -> None:
    r = Reminder(A, "agent/1", "r", "tick", None, 1.0, None)
    await store.reminders.upsert(r)
    assert await store.reminders.list(other) == []
    assert await store.reminders.list(other, "agent/1") == []
    assert await store.reminders.delete(other, "agent/1", "r") is False
    moved = Reminder(other, "agent/1", "r", "tick", None, 1.0, None)
    assert await store.reminders.advance(moved, 2.0) is False
    assert await store.reminders.list(A) == [r]


@pytest.mark.parametrize("other", OTHERS)
async def test_text(store: Store, other: Scope) -> None:
    await store.text.upsert(A, "memory", "m1", {"body": "the launch code is swordfish"})
    assert await store.text.search(other, "memory", "swordfish launch code") == []
    assert await store.text.remove(other, "memory", "m1") is False
    await store.text.upsert(other, "memory", "m1", {"body": "nothing here"})
    assert [h.doc_id for h in await store.text.search(A, "memory", "swordfish")] == ["m1"]


async def test_global_operations_cross_scopes_only_by_their_key(store: Store) -> None:
    """release_receipt / release_holder span scopes by design, but only for their receipt / holder."""
    for scope in (A, B):
        await store.channels.send(scope, "q", "n", None)
        await store.channels.receive(scope, "q", receipt="node-1:r")
        await store.locks.try_acquire(scope, "l", "node-1", ttl=10)
    await store.channels.send(A, "q", "n", None)
    await store.channels.receive(A, "q", receipt="node-2:r")
    await store.locks.try_acquire(A, "l2", "node-2", ttl=10)
    assert await store.channels.release_receipt("node-1:r") == 2
    assert await store.locks.release_holder("node-1") == 2
    assert await store.channels.depth(A, "q") == ChannelDepth(1, 1, 0)
    assert (await store.locks.get(A, "l2")).holder == "node-2"  # type: ignore[union-attr]
