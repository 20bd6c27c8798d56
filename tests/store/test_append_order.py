"""Appends issued together by one caller are chained in the order they were issued (both backends group
them into one commit; a log reader relies on the order, e.g. the audit trail's newest-N query)."""

from __future__ import annotations

import asyncio

from minihermes.runtime.store import Store

from .conftest import A, B


async def test_concurrent_appends_keep_call_order(store: Store) -> None:
    records = await asyncio.gather(
        *(store.events.append(A if i % 3 else B, "trail", {"i": i}) for i in range(600))
    )
    for scope in (A, B):
        got = [r.data["i"] for r in await store.events.read(scope, "trail", limit=1000)]
        assert got == sorted(got) and len(got) == (400 if scope == A else 200)
        assert (await store.events.verify(scope, "trail")).ok
    assert [r.seq for r in records if r.data["i"] % 3 == 0] == list(range(1, 201))


async def test_an_append_whose_caller_gave_up_is_written_and_chained(store: Store) -> None:
    first = asyncio.ensure_future(store.events.append(A, "trail", {"i": 0}))
    second = asyncio.ensure_future(store.events.append(A, "trail", {"i": 1}))
    await asyncio.sleep(0)  # both requested, in one batch
    first.cancel()
    assert (await second).seq == 2
    got = await store.events.read(A, "trail")
    assert [r.data["i"] for r in got] == [0, 1]
    assert (await store.events.verify(A, "trail")).ok
