"""Virtual (keyed) actors and per-tenant instances."""

from __future__ import annotations

import pytest

from minihermes.runtime import ActorSpec, GenServer, InvalidArgument, ManualClock, RequestContext, call

from .actors import Counter, Door
from .conftest import tree

A = RequestContext(tenant="acme")
B = RequestContext(tenant="globex")


async def test_keyed_by_address_or_key_field(make_node):
    node = await make_node(tree(ActorSpec("nb", Counter, virtual=True, key_field="amount")))
    await node.ask("nb/s1", "add", {"amount": 1})
    await node.ask("nb/s2", "add", {"amount": 5})
    assert (await node.ask("nb/s1", "get"))["count"] == 1
    assert (await node.ask("nb/s1", "get"))["init"][0] == "nb/s1"
    with pytest.raises(InvalidArgument):
        await node.ask("nb", "get")


async def test_key_field_routing(make_node):
    from .actors import Recorder

    node = await make_node(tree(ActorSpec("rec", Recorder, virtual=True, key_field="value")))
    node.send("rec", "note", {"value": "s9"})
    assert await node.ask("rec/s9", "get") == [["note", "s9"]]


async def test_idle_deactivation_and_reactivation_with_state(make_node, clock: ManualClock):
    node = await make_node(tree(ActorSpec("nb", Counter, virtual=True, idle_timeout=60)))
    await node.ask("nb/s1", "add", {"amount": 3})
    assert len(node.cells("nb")) == 1
    await clock.advance(30)
    await node.ask("nb/s1", "get")  # activity postpones deactivation
    await clock.advance(45)
    assert len(node.cells("nb")) == 1
    (cell,) = node.cells("nb")
    await clock.advance(20)
    await cell.task  # the instance flushes and ends on its own
    assert node.cells("nb") == []
    assert (await node.ask("nb/s1", "get"))["count"] == 3
    assert node.metrics.counter("actor_starts_total", actor="nb") == 2


async def test_same_key_in_two_tenants_is_two_actors(make_node):
    node = await make_node(tree(ActorSpec("nb", Counter, virtual=True)))
    await node.ask("nb/s1", "add", {"amount": 1}, ctx=A)
    await node.ask("nb/s1", "add", {"amount": 10}, ctx=B)
    assert (await node.ask("nb/s1", "get", ctx=A))["count"] == 1
    assert (await node.ask("nb/s1", "get", ctx=B))["count"] == 10


async def test_per_tenant_service_changes_never_cross_tenants(make_node):
    node = await make_node(tree(ActorSpec("policy", Door, per_tenant=True)))
    await node.ask("policy", "transition", {"to": "locked"}, ctx=A)
    assert (await node.ask("policy", "get_state", ctx=A))["state"] == "locked"
    assert (await node.ask("policy", "get_state", ctx=B))["state"] == "closed"
    await node.stop()
    node2 = await make_node(tree(ActorSpec("policy", Door, per_tenant=True)))
    assert (await node2.ask("policy", "get_state", ctx=A))["state"] == "locked"
    assert (await node2.ask("policy", "get_state", ctx=B))["state"] == "closed"


async def test_a_key_no_store_can_hold_is_refused_before_activation(make_node):
    """A NUL (or any control character) in a key used to crash-loop the activation and stop the node."""
    node = await make_node(tree(ActorSpec("v", _KeyEcho, virtual=True)))
    for bad in ("a\x00b", "line\nbreak", "x" * 600):
        with pytest.raises(InvalidArgument):
            await node.ask(f"v/{bad}", "who")
    assert await node.ask("v/fine", "who") == "v/fine"
    assert not node.failed.is_set()


class _KeyEcho(GenServer):
    @call
    def who(self) -> str:
        return self.actor_id
