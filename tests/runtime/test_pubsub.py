"""Ephemeral topics: tenant-scoped, never blocking the publisher, a slow subscriber told what it missed."""

from __future__ import annotations

from typing import Any

from minihermes.runtime import ActorSpec, GenServer, RequestContext, SupervisorSpec, call

A = RequestContext(tenant="a", principal="x", roles=frozenset({"admin"}))
B = RequestContext(tenant="b", principal="y", roles=frozenset({"admin"}))


class Speaker(GenServer):
    @call
    def say(self, topic: str, n: int = 1) -> dict[str, Any]:
        return {"delivered_to": [self.host.publish(topic, {"i": i}) for i in range(n)][-1]}


async def test_events_reach_subscribers_of_the_same_tenant_only(make_node):
    node = await make_node(
        SupervisorSpec(name="root", children=[ActorSpec("speaker", Speaker, per_tenant=True)])
    )
    sub_a = node.subscribe("t", ctx=A)
    sub_b = node.subscribe("t", ctx=B)
    out = await node.ask("speaker", "say", {"topic": "t"}, ctx=A)
    assert out["delivered_to"] == 1
    assert sub_a.get_nowait() == {"i": 0}
    assert sub_b.get_nowait() is None
    sub_a.close()
    out = await node.ask("speaker", "say", {"topic": "t"}, ctx=A)
    assert out["delivered_to"] == 0


async def test_a_full_subscriber_loses_the_oldest_and_is_told(make_node):
    node = await make_node(
        SupervisorSpec(name="root", children=[ActorSpec("speaker", Speaker, per_tenant=True)])
    )
    async with node.subscribe("t", ctx=A, maxsize=3) as sub:
        await node.ask("speaker", "say", {"topic": "t", "n": 5}, ctx=A)
        assert await sub.get() == {"type": "dropped", "count": 2}
        assert [await sub.get(), await sub.get(), await sub.get()] == [{"i": 2}, {"i": 3}, {"i": 4}]
    assert not node.pubsub.has_subscribers(A.scope, "t")
