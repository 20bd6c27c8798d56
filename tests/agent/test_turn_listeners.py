"""The turn-completed event (``minihermes.turn_event``): a listener added to a node's config gets one record
per finished turn, in the turn's caller's context, with no edit to the agent; a failed turn publishes
nothing; the built-in listeners (memory, skill store, goals) turn the record into their own work."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from minihermes.agent.agent import Agent
from minihermes.agent.memory import Memory
from minihermes.app import AGENT_CONFIG, single_owner
from minihermes.embed import MiniHermes
from minihermes.runtime import (
    ActorError,
    ActorSpec,
    AppConfig,
    GenServer,
    call,
    cast,
    current_context,
    register_actor_type,
)
from minihermes.turn_event import TURN_COMPLETED, listeners

from . import doubles
from .conftest import ACME, ACME_USER, GLOBEX
from .doubles import SCRIPTS, ScriptedGateway, SmallTools, end, tool_use

SEEN: list[tuple[dict[str, Any], str, str, frozenset[str]]] = []
"""What the listener got: (record, tenant, principal, roles of the context it ran in)."""


class TurnLog(GenServer):
    """A turn listener: an actor type that takes the ``turn_completed`` cast. Nothing else is needed."""

    @cast
    def turn_completed(self, **record: Any) -> None:
        ctx = current_context()
        SEEN.append((record, ctx.tenant, ctx.principal, ctx.roles))

    @call
    def count(self) -> int:
        """A barrier: answered after every record cast before it."""
        return len(SEEN)


register_actor_type("test.turn_log", TurnLog)

LISTENER = """
[[supervisor.children]]
name = "turn_log"
role = "test.turn_log"
facets = [{ type = "tenancy", config = { per_tenant = true } }]
"""


@pytest.fixture(autouse=True)
def reset():
    SEEN.clear()
    SCRIPTS.clear()
    doubles.REQUESTS.clear()
    doubles.EXECUTED.clear()
    doubles.GATE.clear()


async def test_a_listener_added_to_the_app_config_gets_each_finished_turn(tmp_path: Path):
    """The whole app's config plus one child: the listener (per tenant, never started before the turn)
    gets the turn's record, acting as the turn's caller."""
    config = single_owner(AppConfig.from_toml(AGENT_CONFIG + LISTENER, "<test>"))
    async with MiniHermes(data_dir=tmp_path / "data", config=config) as mh:
        reply = await mh.chat("Calculate 42 * 17", session_id="t1")
        assert reply["status"] == "ok" and "714" in reply["response"]
        assert await mh.node.ask("turn_log", "count", {}, ctx=mh.ctx) == 1
        history = (await mh.node.ask("agent/t1", "get_history", {}, ctx=mh.ctx))["messages"]
    record, tenant, principal, roles = SEEN[0]
    calls = [c for m in history for c in m.get("tool_calls") or []]
    assert calls and [c["name"] for c in record["tool_calls"]] == [c["name"] for c in calls]
    assert record == {
        "turn_id": reply["turn_id"],
        "session_id": "t1",
        "user_id": mh.ctx.principal,
        "user_message": "Calculate 42 * 17",
        "status": "ok",
        "response": reply["response"],
        "tool_calls": record["tool_calls"],
        "skill_ids": [],
        "success": True,
        "episodic": True,
        "truthful": True,
        "fell_short": "",
        "corrects_turn": "",
        "untrusted": False,
        "untrusted_sources": [],
    }
    assert all(c["is_error"] is False and "714" in c["result"] for c in record["tool_calls"])
    assert (tenant, principal, roles) == (mh.ctx.tenant, mh.ctx.principal, mh.ctx.roles)


def specs(*, listener: bool = True, **agent_args: Any) -> list[ActorSpec]:
    out = [
        ActorSpec("llm_gateway", ScriptedGateway),
        ActorSpec("tool_executor", SmallTools),
        ActorSpec("memory", Memory, per_tenant=True),
        ActorSpec("agent", Agent, virtual=True, key_field="session_id", args=agent_args),
    ]
    if listener:
        out.append(ActorSpec("turn_log", TurnLog, per_tenant=True))
    return out


async def test_the_listeners_are_the_types_taking_the_op(make_node):
    node = await make_node(specs())
    cell = next(c for c in node.cells() if c.instance is not None)
    assert listeners(cell.instance.host) == ("memory", "turn_log")
    assert TURN_COMPLETED == "turn_completed"


async def test_each_turn_reaches_the_listener_in_its_callers_context(make_node):
    """Two tenants, a user and an admin: each record arrives in the turn's own context (tenant, principal,
    roles), at that tenant's instance of the listener; a step-limited turn is published as well."""
    SCRIPTS["u"] = [tool_use(("echo", {"x": "a"})), end("done a")]
    SCRIPTS["g"] = [tool_use(("echo", {"x": str(i)})) for i in range(5)]
    node = await make_node(specs(max_iterations=2))
    mine = await node.ask("agent", "chat", {"message": "echo a", "session_id": "u"}, ctx=ACME_USER)
    theirs = await node.ask("agent", "chat", {"message": "loop", "session_id": "g"}, ctx=GLOBEX)
    await node.ask("turn_log", "count", {}, ctx=ACME_USER)  # after acme's record (its instance's mailbox)
    assert await node.ask("turn_log", "count", {}, ctx=GLOBEX) == 2
    (first, *who1), (second, *who2) = SEEN
    assert who1 == ["acme", "bob", ACME_USER.roles] and who2 == ["globex", "gary", GLOBEX.roles]
    assert (first["turn_id"], first["user_id"], first["status"], first["success"]) == (
        mine["turn_id"],
        "bob",
        "ok",
        True,
    )
    assert first["tool_calls"] == [
        {"name": "echo", "input": {"x": "a"}, "is_error": False, "result": '{"echo": "a"}'}
    ]
    assert (second["turn_id"], second["status"], second["success"]) == (
        theirs["turn_id"],
        "max_iterations",
        False,
    )


async def test_a_failed_turn_publishes_nothing(make_node):
    """Nothing is learned or remembered from a turn that failed: no record, no episode."""
    node = await make_node(specs())
    with pytest.raises(ActorError) as failed:
        await node.ask("agent", "chat", {"message": "hi", "session_id": "s"}, ctx=ACME)
    assert failed.value.code == "llm_unavailable"
    SCRIPTS["s"] = [end("back")]
    reply = await node.ask("agent", "chat", {"message": "again", "session_id": "s"}, ctx=ACME)
    assert await node.ask("turn_log", "count", {}, ctx=ACME) == 1
    assert [r["turn_id"] for r, *_ in SEEN] == [reply["turn_id"]]
    episodes = await node.ask("memory", "list_memories", {"kind": "episodic"}, ctx=ACME)
    assert [m["value"].splitlines()[0] for m in episodes["memories"]] == ["Task: again"]


async def test_memory_writes_the_episode_only_where_the_session_keeps_them(make_node, tmp_path: Path):
    SCRIPTS["a"] = [end("noted")]
    SCRIPTS["b"] = [end("noted")]
    node = await make_node(specs(listener=False))
    await node.ask("agent", "chat", {"message": "keep this", "session_id": "a"}, ctx=ACME_USER)
    episodes = await node.ask("memory", "list_memories", {"kind": "episodic"}, ctx=ACME_USER)
    [episode] = episodes["memories"]
    assert episode["value"] == "Task: keep this\nTools used: none\nOutcome: ok: noted"
    assert episode["private"] is True
    quiet = await make_node(specs(listener=False, episodic=False), data_dir=tmp_path / "quiet")
    await quiet.ask("agent", "chat", {"message": "keep this", "session_id": "b"}, ctx=ACME_USER)
    none = await quiet.ask("memory", "list_memories", {"kind": "episodic"}, ctx=ACME_USER)
    assert none["memories"] == []
