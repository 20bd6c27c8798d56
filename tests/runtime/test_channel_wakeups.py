"""Messages that go back to a channel's queue wake this node's waiting receivers at once."""

from __future__ import annotations

import asyncio
from typing import Any

from minihermes.runtime import ActorSpec, GenServer, RequestContext, call

from .conftest import tree, until

A = RequestContext(tenant="acme", namespace="prod")
B = RequestContext(tenant="globex", namespace="prod")
HOUR = 3600.0


class Receiver(GenServer):
    """One per key: receives from ``jobs`` and keeps what it got un-acked (in flight under its receipt)."""

    @call
    async def take(self, key: str, stop: bool = False) -> list[str]:
        got = await self.host.channels.receive("jobs", visibility_timeout=HOUR)
        if stop:
            self.host.stop()  # leaves with the message un-acked
        return [m.msg_id for m in got]

    @call
    async def wait(self, key: str) -> list[str]:
        # Neither the timeout nor the store poll comes due: the manual clock stands still.
        got = await self.host.channels.receive("jobs", timeout=HOUR, poll_interval=HOUR)
        return [m.msg_id for m in got]

    @call
    async def send(self, key: str) -> str:
        return await self.host.channels.send("jobs", "job", {"n": 1})


async def test_a_stopped_receivers_unacked_message_wakes_a_waiting_receiver(make_node, clock):
    node = await make_node(tree(ActorSpec("rx", Receiver, virtual=True, key_field="key")))
    msg_id = await node.ask("rx", "send", {"key": "a"}, ctx=A)
    assert await node.ask("rx", "take", {"key": "a"}, ctx=A) == [msg_id]
    waiting = asyncio.ensure_future(node.ask("rx", "wait", {"key": "b"}, ctx=A, timeout=HOUR))
    reads = node.store.channels

    async def b_is_waiting() -> bool:
        return len(node._channel_events) == 1 and not waiting.done()

    await until(b_is_waiting)
    # "a" stops with the message in flight: the release puts it back, and "b" (waiting on an hour-long poll
    # of a clock that does not move) gets it now.
    started = clock.time()
    await node.ask("rx", "take", {"key": "a", "stop": True}, ctx=A)
    assert await asyncio.wait_for(waiting, 10) == [msg_id]
    assert clock.time() == started and (await reads.depth(A.scope, "jobs")).ready == 0


async def test_wake_channels_wakes_every_waiting_receiver(make_node):
    node = await make_node(tree(ActorSpec("rx", Receiver, virtual=True, key_field="key")))
    waiting = [
        asyncio.ensure_future(node.ask("rx", "wait", {"key": k}, ctx=ctx, timeout=HOUR))
        for k, ctx in (("b", A), ("c", B))
    ]

    async def both_waiting() -> bool:
        return len(node._channel_events) == 2

    await until(both_waiting)
    # Sent straight to the store (as another process would): no wake-up of its own.
    ids: list[Any] = [await node.store.channels.send(ctx.scope, "jobs", "job", {}) for ctx in (A, B)]
    await asyncio.sleep(0)
    assert not any(w.done() for w in waiting)
    node.wake_channels()
    assert [await asyncio.wait_for(w, 10) for w in waiting] == [[i] for i in ids]
