"""Process groups, the registry, monitors and links."""

from __future__ import annotations

from typing import Any

import pytest

from minihermes.runtime import ActorCrashed, ActorSpec, GenServer, RequestContext, call, cast, state

from .actors import Counter, Recorder
from .conftest import tree


class Member(GenServer):
    got: list[Any] = state(default_factory=list)

    @call
    def join(self, group: str) -> None:
        self.host.join(group)

    @call
    def leave(self, group: str) -> None:
        self.host.leave(group)

    @call
    def members(self, group: str) -> list[str]:
        return self.host.members(group)

    @call
    def first(self, group: str) -> str | None:
        return self.host.first(group)

    @call
    def broadcast(self, group: str, value: Any) -> int:
        return self.host.broadcast(group, "hear", {"value": value})

    @cast
    def hear(self, value: Any) -> None:
        self.got.append(value)

    @call
    def heard(self) -> list[Any]:
        return self.got

    @call
    def register(self, category: str, capabilities: list[str]) -> None:
        self.host.register(category, capabilities)

    @call
    def discover(self, category: str | None = None, capability: str | None = None) -> list[str]:
        return [e["object_id"] for e in self.host.discover(category, capability)]

    @call
    def crash(self) -> None:
        raise RuntimeError("x")


A = RequestContext(tenant="acme")
B = RequestContext(tenant="globex")


async def test_groups_join_leave_members_first_broadcast(make_node):
    node = await make_node(tree(ActorSpec("m", Member, virtual=True)))
    for k in ("a", "b", "c"):
        await node.ask(f"m/{k}", "join", {"group": "svc:workers"})
    assert await node.ask("m/a", "members", {"group": "svc:workers"}) == ["m/a", "m/b", "m/c"]
    await node.ask("m/a", "leave", {"group": "svc:workers"})
    assert await node.ask("m/a", "first", {"group": "svc:workers"}) == "m/b"
    assert await node.ask("m/a", "broadcast", {"group": "svc:workers", "value": 7}) == 2
    assert await node.ask("m/b", "heard") == [7]
    assert await node.ask("m/c", "heard") == [7]
    assert await node.ask("m/a", "heard") == []
    assert await node.ask("m/a", "first", {"group": "svc:nobody"}) is None


async def test_membership_ends_with_the_instance_and_init_rejoins(make_node):
    node = await make_node(tree(ActorSpec("counter", Counter), ActorSpec("m", Member, virtual=True)))
    await node.ask("counter", "get")  # handled once on_init (which joins) has run: start does not wait for it
    assert await node.ask("m/x", "members", {"group": "svc:counter"}) == ["counter"]
    with pytest.raises(ActorCrashed):
        await node.ask("counter", "crash")
    await node.ask("counter", "get")
    assert await node.ask("m/x", "members", {"group": "svc:counter"}) == ["counter"]


async def test_groups_and_registry_are_tenant_scoped(make_node):
    node = await make_node(tree(ActorSpec("m", Member, virtual=True), ActorSpec("counter", Counter)))
    await node.ask("m/a", "join", {"group": "svc:x"}, ctx=A)
    await node.ask("m/a", "register", {"category": "skill_store", "capabilities": ["match_skills"]}, ctx=A)
    assert await node.ask("m/b", "members", {"group": "svc:x"}, ctx=B) == []
    assert await node.ask("m/b", "discover", {"category": "skill_store"}, ctx=B) == []
    assert await node.ask("m/b", "discover", {"capability": "match_skills"}, ctx=B) == []
    assert await node.ask("m/z", "discover", {"category": "skill_store"}, ctx=A) == ["m/a"]
    # shared system services (joined in the system scope) are visible from every tenant
    assert await node.ask("m/b", "members", {"group": "svc:counter"}, ctx=B) == ["counter"]


async def test_registry_discover_by_category_and_capability(make_node):
    node = await make_node(tree(ActorSpec("m", Member, virtual=True)))
    await node.ask(
        "m/s1", "register", {"category": "skill_store", "capabilities": ["match_skills", "lifecycle"]}
    )
    await node.ask("m/s2", "register", {"category": "skill_store", "capabilities": ["propose_skill"]})
    await node.ask("m/ag", "register", {"category": "agent", "capabilities": ["chat", "match_skills"]})
    assert await node.ask("m/q", "discover", {"category": "skill_store"}) == ["m/s1", "m/s2"]
    assert await node.ask("m/q", "discover", {"category": "skill_store", "capability": "match_skills"}) == [
        "m/s1"
    ]
    assert await node.ask("m/q", "discover", {"capability": "match_skills"}) == ["m/s1", "m/ag"]


async def test_monitor_delivers_down_on_crash_and_stop(make_node):
    node = await make_node(tree(ActorSpec("rec", Recorder), ActorSpec("counter", Counter)))
    await node.ask("rec", "watch", {"target": "counter"})
    with pytest.raises(ActorCrashed):
        await node.ask("counter", "crash")
    await node.ask("counter", "get")
    got = await node.ask("rec", "get")
    assert got == [["down", "counter", "crash"]]
    # monitors are one-shot, like Erlang's: the restarted counter is not watched
    await node.ask("rec", "watch", {"target": "counter"})
    await node.ask("counter", "quit")
    await node.ask("counter", "get")
    assert (await node.ask("rec", "get"))[-1] == ["down", "counter", "stopped"]
    await node.ask("rec", "watch", {"target": "nobody/x"}) if False else None


async def test_monitor_of_a_missing_actor_is_down_noproc(make_node):
    node = await make_node(tree(ActorSpec("rec", Recorder), ActorSpec("t", Counter, restart="temporary")))
    with pytest.raises(ActorCrashed):
        await node.ask("t", "crash")
    await node.ask("rec", "watch", {"target": "t"})
    assert await node.ask("rec", "get") == [["down", "t", "noproc"]]


async def test_link_shares_fate_unless_trapped(make_node):
    node = await make_node(
        tree(ActorSpec("rec", Recorder), ActorSpec("trapper", Recorder), ActorSpec("counter", Counter))
    )
    await node.ask("rec", "link_to", {"target": "counter"})
    await node.ask("trapper", "link_to", {"target": "counter", "trap": True})
    with pytest.raises(ActorCrashed):
        await node.ask("counter", "crash")
    await node.ask("counter", "get")
    await node.ask("rec", "get")
    assert node.metrics.counter("actor_starts_total", actor="rec") == 2  # killed with counter, restarted
    assert await node.ask("trapper", "get") == [["exit", "counter", "crash"]]
    assert node.metrics.counter("actor_starts_total", actor="trapper") == 1


async def test_link_works_both_ways_and_normal_exit_does_not_propagate(make_node):
    node = await make_node(tree(ActorSpec("rec", Recorder), ActorSpec("counter", Counter)))
    await node.ask("rec", "link_to", {"target": "counter"})
    await node.ask("counter", "quit")  # normal exit
    await node.ask("counter", "get")
    assert node.metrics.counter("actor_starts_total", actor="rec") == 1
    await node.ask("rec", "link_to", {"target": "counter"})
    with pytest.raises(ActorCrashed):
        await node.ask("rec", "crash")
    await node.ask("rec", "get")
    await node.ask("counter", "get")
    assert node.metrics.counter("actor_starts_total", actor="counter") == 3


async def test_node_status_reports_every_actor_type(make_node):
    node = await make_node(
        tree(
            ActorSpec("counter", Counter),
            ActorSpec("m", Member, virtual=True),
            ActorSpec("t", Counter, restart="temporary"),
        )
    )
    await node.ask("m/a", "members", {"group": "x"})
    with pytest.raises(ActorCrashed):
        await node.ask("t", "crash")
    await node.ask("counter", "get")
    st = node.status()
    assert st["counter"] == {
        "behavior": "GenServer",
        "kind": "shared",
        "up": True,
        "instances": 1,
        "restarts": 0,
        "crashes": 0,
    }
    assert st["m"]["kind"] == "virtual" and st["m"]["up"] and st["m"]["instances"] == 1
    assert st["t"]["up"] is False and st["t"]["crashes"] == 1
