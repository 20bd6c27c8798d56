"""Bounded mailboxes, overload answers, fairness between tenants."""

from __future__ import annotations

import asyncio

import pytest

from minihermes.runtime import ActorSpec, Overloaded, RequestContext

from .actors import GATES, Slow
from .conftest import tree, until

A = RequestContext(tenant="acme")
B = RequestContext(tenant="globex")


async def entered() -> bool:
    return bool(GATES.get("entered"))


@pytest.fixture(autouse=True)
def gate():
    GATES.clear()
    GATES["gate"] = asyncio.Event()
    yield GATES["gate"]
    GATES["gate"].set()


async def test_full_mailbox_answers_overloaded(make_node, gate):
    node = await make_node(tree(ActorSpec("slow", Slow, mailbox_capacity=3)))
    pending = [asyncio.ensure_future(node.ask("slow", "work", {"n": 0}))]
    await until(entered)  # the actor has taken message 0 and is blocked in it
    pending += [asyncio.ensure_future(node.ask("slow", "work", {"n": i})) for i in (1, 2, 3)]
    await asyncio.sleep(0)
    with pytest.raises(Overloaded) as ei:
        await node.ask("slow", "work", {"n": 99})
    assert ei.value.code == "overloaded" and ei.value.http_status == 503
    with pytest.raises(Overloaded):
        node.send("slow", "work_cast", {"n": 100})
    gate.set()
    assert await asyncio.gather(*pending) == [0, 1, 2, 3]
    assert node.metrics.counter("overloaded_total") == 2


async def test_a_flooding_tenant_cannot_starve_another(make_node, gate):
    node = await make_node(
        tree(ActorSpec("slow", Slow, virtual=True, mailbox_capacity=1000)), max_inflight=100
    )
    flood = []
    refused = 0
    for i in range(200):
        try:
            node.send(f"slow/k{i % 10}", "work_cast", {"n": i}, ctx=A)
            flood.append(i)
        except Overloaded:
            refused += 1
    assert refused > 0 and len(flood) <= 50
    # tenant B still gets in, up to its fair share of the node
    node.send("slow/b", "work_cast", {"n": 1}, ctx=B)
    node.send("slow/b", "work_cast", {"n": 2}, ctx=B)
    gate.set()
    assert await node.ask("slow/b", "get", ctx=B) == [1, 2]
