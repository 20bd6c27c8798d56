"""Concurrent callers on one store: atomic take/receive/acquire/cas, gap-free appends."""

from __future__ import annotations

import asyncio

from minihermes.runtime.store import Store

from .conftest import A


async def test_50_concurrent_takes_of_20_tuples(store: Store) -> None:
    for i in range(20):
        await store.tuples.write(A, ["work", i])
    results = await asyncio.gather(*(store.tuples.take(A, ["work", None]) for _ in range(50)))
    taken = [r for r in results if r is not None]
    assert sorted(t[1] for t in taken) == list(range(20))  # type: ignore[type-var]
    assert results.count(None) == 30


async def test_100_concurrent_lock_acquirers_one_winner(store: Store) -> None:
    results = await asyncio.gather(
        *(store.locks.try_acquire(A, "leader", f"n{i}", ttl=30) for i in range(100))
    )
    winners = [(i, token) for i, token in enumerate(results) if token is not None]
    assert len(winners) == 1
    info = await store.locks.get(A, "leader")
    assert info is not None and (info.holder, info.token) == (f"n{winners[0][0]}", winners[0][1])


async def test_concurrent_cas_increments_lose_nothing(store: Store) -> None:
    await store.kv.put(A, "counter", 0)

    async def increment() -> None:
        while True:
            entry = await store.kv.get_entry(A, "counter")
            assert entry is not None
            if await store.kv.cas(A, "counter", entry.version, entry.value + 1) is not None:
                return

    await asyncio.gather(*(increment() for _ in range(30)))
    entry = await store.kv.get_entry(A, "counter")
    assert entry is not None and (entry.value, entry.version) == (30, 31)


async def test_concurrent_cas_create_one_winner(store: Store) -> None:
    results = await asyncio.gather(*(store.kv.cas(A, "once", None, i) for i in range(40)))
    assert [r for r in results if r is not None] == [1]


async def test_competing_consumers_get_each_message_once(store: Store) -> None:
    sent = set(await asyncio.gather(*(store.channels.send(A, "q", "n", i) for i in range(200))))
    received: list[str] = []

    async def consumer(name: str) -> None:
        while batch := await store.channels.receive(A, "q", max_messages=3, receipt=name):
            for msg in batch:
                received.append(msg.msg_id)
                assert await store.channels.ack(A, "q", msg.msg_id, receipt=name)

    await asyncio.gather(*(consumer(f"c{i}") for i in range(20)))
    assert len(received) == 200 and set(received) == sent
    assert (await store.channels.depth(A, "q")).ready == 0


async def test_concurrent_appends_are_gap_free(store: Store) -> None:
    records = await asyncio.gather(*(store.events.append(A, "s", i) for i in range(100)))
    assert sorted(r.seq for r in records) == list(range(1, 101))
    check = await store.events.verify(A, "s")
    assert check.ok and check.checked == 100


async def test_concurrent_mixed_reads_see_acknowledged_writes(store: Store) -> None:
    async def writer_then_reader(i: int) -> None:
        await store.kv.put(A, f"k{i}", i)
        assert await store.kv.get(A, f"k{i}") == i
        await store.blobs.put(A, f"b{i}", bytes([i]))
        assert await store.blobs.get(A, f"b{i}") == bytes([i])

    await asyncio.gather(*(writer_then_reader(i) for i in range(100)))
