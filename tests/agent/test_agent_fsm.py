"""agent_fsm: the lifecycle table, one durable FSM per session."""

from __future__ import annotations

import pytest

from minihermes.agent.agent_fsm import STATES, TRANSITIONS, AgentFSM
from minihermes.runtime import ActorSpec, InvalidArgument, InvalidTransition

from .conftest import ACME, GLOBEX


def specs() -> list[ActorSpec]:
    return [ActorSpec("agent_fsm", AgentFSM, virtual=True, key_field="session_id")]


def test_table_is_the_seeds():
    assert TRANSITIONS == {
        "idle": {"processing", "tool_executing"},
        "processing": {"tool_executing", "responding", "idle"},
        "tool_executing": {"processing", "idle"},
        "responding": {"idle"},
    }
    assert STATES == ("idle", "processing", "tool_executing", "responding")


async def test_every_pair_is_accepted_or_rejected_per_the_table(make_node):
    node = await make_node(specs())
    paths = {  # how to reach each state from idle
        "idle": [],
        "processing": ["processing"],
        "tool_executing": ["tool_executing"],
        "responding": ["processing", "responding"],
    }
    n = 0
    for src in STATES:
        for dst in STATES:
            n += 1
            sid = f"s{n}"
            for step in paths[src]:
                await node.ask("agent_fsm", "transition", {"session_id": sid, "to": step}, ctx=ACME)
            if dst in TRANSITIONS[src]:
                r = await node.ask("agent_fsm", "transition", {"session_id": sid, "to": dst}, ctx=ACME)
                assert r == {"status": "ok", "from": src, "to": dst, "session_id": sid}
            else:
                with pytest.raises(InvalidTransition):
                    await node.ask("agent_fsm", "transition", {"session_id": sid, "to": dst}, ctx=ACME)
                assert (await node.ask("agent_fsm", "get_state", {"session_id": sid}, ctx=ACME))[
                    "state"
                ] == src


async def test_full_turn_and_state_report(make_node, clock):
    node = await make_node(specs())
    for to in ("processing", "tool_executing", "processing", "responding", "idle"):
        await node.ask("agent_fsm/s1", "transition", {"to": to}, ctx=ACME)
        await clock.advance(1)
    st = await node.ask("agent_fsm/s1", "get_state", ctx=ACME)
    assert st["state"] == "idle" and st["transitions"] == 5 and st["session_id"] == "s1"
    assert st["allowed"] == ["processing", "tool_executing"]
    assert [h["to"] for h in st["history"]] == [
        "processing",
        "tool_executing",
        "processing",
        "responding",
        "idle",
    ]
    assert st["history"][1]["at"] - st["history"][0]["at"] == 1


async def test_unknown_state_and_missing_session(make_node):
    node = await make_node(specs())
    with pytest.raises(InvalidArgument):
        await node.ask("agent_fsm", "transition", {"session_id": "s", "to": "dancing"}, ctx=ACME)
    with pytest.raises(InvalidArgument):
        await node.ask("agent_fsm", "get_state", {}, ctx=ACME)


async def test_sessions_and_tenants_are_independent(make_node):
    node = await make_node(specs())
    await node.ask("agent_fsm", "transition", {"session_id": "a", "to": "processing"}, ctx=ACME)
    assert (await node.ask("agent_fsm", "get_state", {"session_id": "b"}, ctx=ACME))["state"] == "idle"
    assert (await node.ask("agent_fsm", "get_state", {"session_id": "a"}, ctx=GLOBEX))["state"] == "idle"


async def test_reset_recovers_from_any_state(make_node):
    node = await make_node(specs())
    await node.ask("agent_fsm/x", "transition", {"to": "tool_executing"}, ctx=ACME)
    r = await node.ask("agent_fsm/x", "reset", {"reason": "turn interrupted"}, ctx=ACME)
    assert r["from"] == "tool_executing" and r["to"] == "idle"
    assert (await node.ask("agent_fsm/x", "reset", ctx=ACME))["from"] == "idle"
    assert (await node.ask("agent_fsm/x", "get_state", ctx=ACME))["transitions"] == 2


async def test_state_survives_restart(make_node, tmp_path):
    node = await make_node(specs(), data_dir=tmp_path / "d")
    await node.ask("agent_fsm/x", "transition", {"to": "processing"}, ctx=ACME)
    await node.stop()
    node = await make_node(specs(), data_dir=tmp_path / "d")
    st = await node.ask("agent_fsm/x", "get_state", ctx=ACME)
    assert st["state"] == "processing" and st["history"][0]["to"] == "processing"
    with pytest.raises(InvalidTransition):
        await node.ask("agent_fsm/x", "transition", {"to": "processing"}, ctx=ACME)


async def test_saved_at_rest_not_on_every_move(make_node, tmp_path):
    """Moves inside a turn stay in memory; reaching idle (or a reset) is checkpointed before the reply."""
    node = await make_node(specs(), data_dir=tmp_path / "d")
    saved = node.metrics.counter("checkpoints_total")
    for to in ("processing", "tool_executing", "processing", "responding"):
        await node.ask("agent_fsm/x", "transition", {"to": to}, ctx=ACME)
    assert node.metrics.counter("checkpoints_total") == saved
    await node.ask("agent_fsm/x", "transition", {"to": "idle"}, ctx=ACME)
    assert node.metrics.counter("checkpoints_total") == saved + 1
    cp = await node.store.checkpoints.load(ACME.scope, "agent_fsm/x")
    assert cp is not None and b'"idle"' in cp.data
    await node.ask("agent_fsm/x", "transition", {"to": "processing"}, ctx=ACME)
    await node.ask("agent_fsm/x", "reset", {"reason": "test"}, ctx=ACME)
    assert node.metrics.counter("checkpoints_total") == saved + 2
