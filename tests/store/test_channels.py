"""ChannelStore contract: at-least-once delivery, visibility, receipts, dead letters, dedup."""

from __future__ import annotations

import pytest

from minihermes.runtime._clock import ManualClock
from minihermes.runtime.store import ChannelDepth, Store

from .conftest import A


async def test_send_receive_ack(store: Store, clock: ManualClock) -> None:
    msg_id = await store.channels.send(A, "inbox", "note", {"text": "hi"})
    [msg] = await store.channels.receive(A, "inbox", receipt="c1")
    assert (msg.msg_id, msg.channel, msg.msg_type, msg.payload) == (msg_id, "inbox", "note", {"text": "hi"})
    assert (msg.deliveries, msg.sent_at, msg.receipt) == (1, clock.time(), "c1")
    assert await store.channels.depth(A, "inbox") == ChannelDepth(ready=0, in_flight=1, dead=0)
    assert await store.channels.receive(A, "inbox") == []
    assert await store.channels.ack(A, "inbox", msg_id, receipt="c1") is True
    assert await store.channels.ack(A, "inbox", msg_id, receipt="c1") is False
    assert await store.channels.depth(A, "inbox") == ChannelDepth(0, 0, 0)


async def test_fifo_and_max_messages(store: Store) -> None:
    ids = [await store.channels.send(A, "q", "n", i) for i in range(5)]
    assert len(set(ids)) == 5
    got = await store.channels.receive(A, "q", max_messages=3)
    assert [m.payload for m in got] == [0, 1, 2]
    assert len({m.receipt for m in got}) == 1 and got[0].receipt  # generated when none is given
    assert [m.payload for m in await store.channels.receive(A, "q", max_messages=10)] == [3, 4]


async def test_visibility_timeout_redelivers(store: Store, clock: ManualClock) -> None:
    await store.channels.declare(A, "q", visibility_timeout=10)
    msg_id = await store.channels.send(A, "q", "n", None)
    [first] = await store.channels.receive(A, "q", receipt="c1")
    await clock.advance(9.9)
    assert await store.channels.receive(A, "q") == []
    await clock.advance(0.1)
    assert await store.channels.depth(A, "q") == ChannelDepth(1, 0, 0)
    [second] = await store.channels.receive(A, "q", receipt="c2", visibility_timeout=100)
    assert (second.msg_id, second.deliveries) == (msg_id, 2)
    # the first consumer's lease is stale: its ack and nack are refused
    assert await store.channels.ack(A, "q", msg_id, receipt=first.receipt) is False
    assert await store.channels.nack(A, "q", msg_id, receipt="c1") is False
    await clock.advance(50)
    assert await store.channels.receive(A, "q") == []  # per-call timeout (100 s) applies
    assert await store.channels.ack(A, "q", msg_id, receipt="c2") is True


async def test_stale_ack_refused_for_anonymous_consumers(store: Store, clock: ManualClock) -> None:
    msg_id = await store.channels.send(A, "q", "n", None)
    [first] = await store.channels.receive(A, "q", visibility_timeout=1)
    await clock.advance(1)
    [second] = await store.channels.receive(A, "q", visibility_timeout=1)
    assert first.receipt != second.receipt
    assert await store.channels.ack(A, "q", msg_id, receipt=first.receipt) is False
    assert await store.channels.ack(A, "q", msg_id, receipt=second.receipt) is True


async def test_ack_after_expiry_before_redelivery_is_accepted(store: Store, clock: ManualClock) -> None:
    msg_id = await store.channels.send(A, "q", "n", None)
    await store.channels.receive(A, "q", visibility_timeout=1, receipt="c1")
    await clock.advance(5)
    assert await store.channels.ack(A, "q", msg_id, receipt="c1") is True
    assert await store.channels.receive(A, "q") == []


async def test_ack_without_receipt_and_unknown_ids(store: Store) -> None:
    msg_id = await store.channels.send(A, "q", "n", None)
    assert await store.channels.ack(A, "q", "no-such-id") is False
    assert await store.channels.ack(A, "other", msg_id) is False
    await store.channels.receive(A, "q", receipt="c1")
    assert await store.channels.ack(A, "q", msg_id) is True


async def test_nack_requeue_and_dead_letter_after_max(store: Store, clock: ManualClock) -> None:
    await store.channels.declare(A, "q", max_deliveries=2)
    msg_id = await store.channels.send(A, "q", "n", {"x": 1})
    [m1] = await store.channels.receive(A, "q")
    assert await store.channels.nack(A, "q", msg_id, receipt=m1.receipt) is True
    [m2] = await store.channels.receive(A, "q")
    assert m2.deliveries == 2
    assert await store.channels.nack(A, "q", msg_id, reason="still failing") is True
    assert await store.channels.receive(A, "q") == []
    assert await store.channels.depth(A, "q") == ChannelDepth(0, 0, 1)
    [dead] = await store.channels.dead_letters(A, "q")
    assert (dead.msg_id, dead.payload, dead.deliveries, dead.reason) == (msg_id, {"x": 1}, 2, "still failing")
    assert dead.dead_at == clock.time()


async def test_dead_letter_on_receive_after_max_deliveries(store: Store, clock: ManualClock) -> None:
    await store.channels.declare(A, "q", max_deliveries=1, visibility_timeout=5)
    poison = await store.channels.send(A, "q", "n", "poison")
    good = await store.channels.send(A, "q", "n", "good")
    [m] = await store.channels.receive(A, "q")
    assert m.msg_id == poison
    await clock.advance(5)
    # the poison message reached max_deliveries: it is dead-lettered and the next one is handed out
    [m] = await store.channels.receive(A, "q")
    assert m.msg_id == good
    [dead] = await store.channels.dead_letters(A, "q")
    assert dead.msg_id == poison and "max_deliveries=1" in dead.reason


async def test_nack_without_requeue_dead_letters_and_redrive(store: Store) -> None:
    msg_id = await store.channels.send(A, "q", "n", 7)
    await store.channels.send(A, "q", "n", 8)
    await store.channels.receive(A, "q", receipt="c")
    assert await store.channels.nack(A, "q", msg_id, requeue=False, reason="bad", receipt="c") is True
    assert [d.reason for d in await store.channels.dead_letters(A, "q")] == ["bad"]
    assert await store.channels.redrive(A, "q", msg_id) is True
    assert await store.channels.redrive(A, "q", msg_id) is False
    assert await store.channels.dead_letters(A, "q") == []
    got = await store.channels.receive(A, "q", max_messages=5)
    assert [(m.payload, m.deliveries) for m in got] == [(8, 1), (7, 1)]  # redriven goes to the back, reset


async def test_release_receipt_makes_in_flight_ready(store: Store) -> None:
    ids = [await store.channels.send(A, "q", "n", i) for i in range(3)]
    await store.channels.receive(A, "q", max_messages=2, receipt="node-1:boot-1:cell")
    await store.channels.receive(A, "q", max_messages=1, receipt="node-2:boot-1:cell")
    assert await store.channels.release_receipt("node-1:boot-1:cell") == 2
    assert await store.channels.release_receipt("node-1:boot-1:cell") == 0
    assert await store.channels.depth(A, "q") == ChannelDepth(2, 1, 0)
    assert await store.channels.ack(A, "q", ids[0], receipt="node-1:boot-1:cell") is False
    got = await store.channels.receive(A, "q", max_messages=5)
    assert [(m.msg_id, m.deliveries) for m in got] == [(ids[0], 2), (ids[1], 2)]


async def test_release_receipt_prefix(store: Store) -> None:
    for i in range(4):
        await store.channels.send(A, "q", "n", i)
    await store.channels.receive(A, "q", receipt="node-1:boot-1:a")
    await store.channels.receive(A, "q", receipt="node-1:boot-1:b")
    await store.channels.receive(A, "q", receipt="node-10:boot-1:a")
    await store.channels.receive(A, "q", receipt="node-1_x")
    assert await store.channels.release_receipt_prefix("node-1:") == 2
    assert await store.channels.depth(A, "q") == ChannelDepth(2, 2, 0)
    with pytest.raises(ValueError, match="receipt prefix"):
        await store.channels.release_receipt_prefix("")


async def test_dedup_key(store: Store) -> None:
    first = await store.channels.send(A, "q", "n", 1, dedup_key="order-42")
    assert await store.channels.send(A, "q", "n", 2, dedup_key="order-42") == first
    other = await store.channels.send(A, "other", "n", 3, dedup_key="order-42")  # per channel
    assert other != first
    assert (await store.channels.depth(A, "q")).ready == 1
    [m] = await store.channels.receive(A, "q")
    await store.channels.ack(A, "q", m.msg_id)
    # acked, but still remembered within retention
    assert await store.channels.send(A, "q", "n", 2, dedup_key="order-42") == first
    assert (await store.channels.depth(A, "q")).ready == 0


async def test_declare_updates_options(store: Store, clock: ManualClock) -> None:
    await store.channels.declare(A, "q", visibility_timeout=5)
    await store.channels.declare(A, "q", visibility_timeout=50, max_deliveries=3)
    await store.channels.send(A, "q", "n", None)
    await store.channels.receive(A, "q")
    await clock.advance(49)
    assert await store.channels.receive(A, "q") == []


async def test_default_options(store: Store, clock: ManualClock) -> None:
    msg_id = await store.channels.send(A, "q", "n", None)
    for delivery in range(1, 6):
        [m] = await store.channels.receive(A, "q")
        assert m.deliveries == delivery
        await clock.advance(30)  # the default visibility timeout
    assert await store.channels.receive(A, "q") == []  # 5 deliveries (the default max) exhausted
    assert [d.msg_id for d in await store.channels.dead_letters(A, "q")] == [msg_id]


async def test_channel_bad_input(store: Store) -> None:
    with pytest.raises(TypeError, match="message payload is not JSON-serializable"):
        await store.channels.send(A, "q", "n", object())
    with pytest.raises(ValueError, match="msg_type must not be empty"):
        await store.channels.send(A, "q", "", 1)
    with pytest.raises(ValueError, match="max_messages"):
        await store.channels.receive(A, "q", max_messages=0)
    with pytest.raises(ValueError, match="visibility_timeout"):
        await store.channels.receive(A, "q", visibility_timeout=-1)
    with pytest.raises(ValueError, match="max_deliveries"):
        await store.channels.declare(A, "q", max_deliveries=0)
    with pytest.raises(ValueError, match="receipt must not be empty"):
        await store.channels.release_receipt("")
    with pytest.raises(ValueError, match="channel must not be empty"):
        await store.channels.depth(A, "")
    assert await store.channels.depth(A, "q") == ChannelDepth(0, 0, 0)


async def test_send_batch_and_ack_batch(store: Store) -> None:
    ids = await store.channels.send_batch(A, "bulk", [("n", i) for i in range(5)])
    assert len(set(ids)) == 5
    assert await store.channels.send_batch(A, "bulk", []) == []
    got = await store.channels.receive(A, "bulk", max_messages=10, receipt="r1")
    assert [m.msg_id for m in got] == ids and [m.payload for m in got] == list(range(5))
    assert await store.channels.ack_batch(A, "bulk", ids[:3], receipt="stale") == 0
    assert await store.channels.ack_batch(A, "bulk", ids[:3], receipt="r1") == 3
    assert await store.channels.ack_batch(A, "bulk", ids, receipt="r1") == 2
    assert await store.channels.depth(A, "bulk") == ChannelDepth(0, 0, 0)
    with pytest.raises(TypeError):
        await store.channels.send_batch(A, "bulk", [("n",)])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        await store.channels.send_batch(A, "bulk", [("", 1)])


async def test_batches_are_scoped(store: Store) -> None:
    from .conftest import B

    ids = await store.channels.send_batch(A, "bulk", [("n", 1), ("n", 2)])
    assert await store.channels.receive(B, "bulk", max_messages=10) == []
    assert await store.channels.ack_batch(B, "bulk", ids) == 0
    assert len(await store.channels.receive(A, "bulk", max_messages=10)) == 2
