"""skill_workflow: learning from a turn, the evaluation that promotes, cancel/status, and SIGKILL resume."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from minihermes.runtime import ActorError, ActorSpec, SystemClock
from minihermes.skills import SkillStore, SkillWorkflow
from minihermes.skills._store_io import workflow_key

from .._proc import kill_hard, read_line, spawn_module
from .conftest import ACME, ACME_USER, skills_tree
from .doubles import SUMS, HistoryAgent, SimGateway, sums_history
from .learnproc import NODE_ID, tree


def _tree(
    gateway_args: dict[str, Any] | None = None, histories: dict[str, Any] | None = None
) -> list[ActorSpec]:
    return skills_tree(
        ActorSpec(
            "agent", HistoryAgent, virtual=True, key_field="session_id", args={"histories": histories or {}}
        ),
        ActorSpec("llm_gateway", SimGateway, per_tenant=True, args=gateway_args or {}),
    )


async def _wait_done(node: Any, turn_id: str, *, ctx: Any = ACME_USER) -> dict[str, Any]:
    addr = f"skill_workflow/{workflow_key(turn_id)}"
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        try:
            status = await node.ask(addr, "query", {"name": "status"}, ctx=ctx)
        except ActorError:
            status = {"status": "idle"}
        if status["status"] in ("completed", "failed", "cancelled"):
            return dict(status)
        assert asyncio.get_running_loop().time() < deadline, status
        await asyncio.sleep(0.01)


def _learn(
    node: Any,
    turn_id: str = "turn-1",
    tool_calls: int | list[dict[str, Any]] = 3,
    intent: str = SUMS,
    session_id: str = "s1",
    **extra: Any,
) -> None:
    node.send(
        "skill_store",
        "evaluate_for_learning",
        {
            **extra,
            "session_id": session_id,
            "turn_id": turn_id,
            "user_intent": intent,
            "user_id": "bob",
            "tool_calls": tool_calls,
        },
        ctx=ACME_USER,
    )


async def test_a_turn_with_enough_tool_calls_becomes_an_evaluated_active_skill(make_node):
    node = await make_node(_tree())
    _learn(node)
    status = await _wait_done(node, "turn-1")
    assert status["status"] == "completed", status["error"]
    assert status["completed_steps"] == ["turn", "name", "procedure", "triggers", "propose", "evaluate"]
    result = await node.ask(f"skill_workflow/{workflow_key('turn-1')}", "result", {}, ctx=ACME_USER)
    out = result["result"]
    assert out["created"] and out["passed"] and out["skill_status"] == "active"
    got = await node.ask("skill_store", "get_skill", {"skill_id": out["skill_id"]}, ctx=ACME_USER)
    skill = got["skill"]
    # Three calculator calls collapse into one step the simulated model batches.
    assert skill["procedure"] == "1. calculator: evaluate each arithmetic expression from the request"
    assert skill["name"] == "calculator-steps"  # the request has no content words: the steps name it
    assert skill["provenance"] == {
        "session_id": "s1",
        "user_id": "bob",
        "turn_id": "turn-1",
        "source": "agent",
    }
    assert skill["evaluation"]["baseline"]["iterations"] == 4
    assert skill["evaluation"]["with_skill"]["iterations"] == 2
    assert "calculator" in skill["tags"]
    [hit] = (
        await node.ask("skill_store", "match_skills", {"query": "what is 7*6 and 2+5 and 9-3"}, ctx=ACME_USER)
    )["skills"]
    assert hit["skill_id"] == out["skill_id"]


async def test_a_short_turn_starts_nothing(make_node):
    node = await make_node(_tree())
    _learn(node, tool_calls=2)
    await node.ask("skill_store", "get_stats", {}, ctx=ACME)  # the cast before it is handled
    idle = await node.ask(f"skill_workflow/{workflow_key('turn-1')}", "result", {}, ctx=ACME_USER)
    assert idle["status"] == "idle"
    assert (await node.ask("skill_store", "get_stats", {}, ctx=ACME))["skills"] == 0


async def test_learning_the_same_family_twice_patches_instead_of_duplicating(make_node):
    other = SUMS.replace("what is", "please work out")
    node = await make_node(_tree(histories={"s2": sums_history(other)}))
    _learn(node, "turn-1")
    first = await _wait_done(node, "turn-1")
    _learn(node, "turn-2", intent=other, session_id="s2")
    second = await _wait_done(node, "turn-2")
    assert first["status"] == second["status"] == "completed"
    r2 = (await node.ask(f"skill_workflow/{workflow_key('turn-2')}", "result", {}, ctx=ACME_USER))["result"]
    assert r2["patched"] and not r2["created"]
    assert (await node.ask("skill_store", "get_stats", {}, ctx=ACME))["skills"] == 1


async def test_a_repeated_request_or_a_turn_a_skill_carried_teaches_nothing_new(make_node):
    node = await make_node(_tree())
    calls = [{"name": "calculator", "input": {"expression": e}, "is_error": False} for e in "abc"]
    _learn(node, "turn-1", tool_calls=calls)
    first = await _wait_done(node, "turn-1")
    assert first["status"] == "completed"
    # The same request again, in other words of spacing and case, with the same tools: nothing starts.
    _learn(node, "turn-2", tool_calls=calls, intent="  " + SUMS.upper())
    # A different request that a matched skill carried to success: its usage counts, no new extraction.
    skill_id = (await node.ask("skill_store", "list_skills", {}, ctx=ACME))["skills"][0]["skill_id"]
    _learn(node, "turn-3", tool_calls=calls, intent="sum these up", skill_ids=[skill_id], success=True)
    # The same as turn 3 but it fell short (a failed call, a contradicted answer): nothing is learned from it.
    _learn(node, "turn-4", tool_calls=calls, intent="sum those up", skill_ids=[skill_id], success=False)
    await node.ask("skill_store", "get_stats", {}, ctx=ACME)  # the casts before it are handled
    for turn in ("turn-2", "turn-3", "turn-4"):
        status = await node.ask(
            f"skill_workflow/{workflow_key(turn)}", "query", {"name": "status"}, ctx=ACME_USER
        )
        assert status["status"] == "idle" and status["completed_steps"] == [], (turn, status)
    assert node.metrics.counter("skill_extractions_skipped_total", tenant="acme", reason="repeat") == 1
    assert node.metrics.counter("skill_extractions_skipped_total", tenant="acme", reason="skill_used") == 1
    assert node.metrics.counter("skill_extractions_skipped_total", tenant="acme", reason="fell_short") == 1
    # Forgetting the user forgets what they taught: the request may be learned again.
    node.send("skill_store", "forget", {"user_id": "bob"}, ctx=ACME)
    _learn(node, "turn-5", tool_calls=calls)
    assert (await _wait_done(node, "turn-5"))["status"] == "completed"


async def test_status_and_cancel_while_a_step_runs(make_node):
    node = await make_node(_tree({"hang_on": "procedure"}))
    _learn(node)
    addr = f"skill_workflow/{workflow_key('turn-1')}"
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        try:
            status = await node.ask(addr, "query", {"name": "status"}, ctx=ACME_USER)
        except ActorError:
            status = {"current_step": None}
        if status["current_step"] == "procedure":
            break
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)
    assert status["status"] == "running" and status["completed_steps"] == ["turn", "name"]
    out = await node.ask(addr, "signal", {"name": "cancel"}, ctx=ACME_USER)
    assert out["cancelled"] is True
    assert (await node.ask(addr, "query", {"name": "status"}, ctx=ACME_USER))["status"] == "cancelled"
    assert (await node.ask("skill_store", "get_stats", {}, ctx=ACME))["skills"] == 0


async def test_an_llm_answer_true_to_the_turn_is_used(make_node):
    from minihermes.skills import _extract as extract

    calls = [
        extract.TurnCall("calculator", {"expression": "1+1"}, True),
        extract.TurnCall("memory_store", {"key": "k", "value": "2"}, True),
    ]
    good = '{"procedure": "1. calculator: work it out\\n2. memory_store: keep it under key k"}'
    assert extract.parse_procedure(good, calls) is not None
    wrong_tools = '{"procedure": "1. terminal: rm -rf /"}'
    assert extract.parse_procedure(wrong_tools, calls) is None
    assert extract.parse_procedure("Sure! Here it is.", calls) is None
    assert extract.parse_name('{"name": "Calc And Keep", "description": "Compute then store."}') == {
        "name": "calc-and-keep",
        "description": "Compute then store.",
    }
    assert (
        extract.fallback_procedure(calls)
        == "1. calculator: evaluate each arithmetic expression from the request\n2. memory_store: store the result under key k"
    )


@pytest.mark.slow
async def test_sigkill_mid_extraction_resumes_at_the_next_step(make_node, tmp_path):
    data = tmp_path / "learn"
    data.mkdir()
    proc = await spawn_module("tests.skills.learnproc", str(data))
    try:
        assert await read_line(proc) == "HANGING procedure"
    finally:
        await kill_hard(proc)
    assert (data / "parts.log").read_text().split() == ["name", "procedure"]

    node = await make_node(tree({}).children, data_dir=data, use_clock=SystemClock(), node_id=NODE_ID)
    status = await _wait_done(node, "turn-1")
    assert status["status"] == "completed" and status["attempt"] == 2, status
    # The finished name step was not run again; the interrupted procedure step was.
    parts = await node.ask("llm_gateway", "get_parts", {}, ctx=ACME_USER)
    assert parts[:2] == ["procedure", "triggers"] and "name" not in parts
    skills = await node.ask("skill_store", "list_skills", {}, ctx=ACME)
    assert skills["count"] == 1 and skills["skills"][0]["status"] == "active"


def test_the_node_tree_of_the_skill_services_is_complete():
    names = [s.name for s in _tree()]
    assert {"skill_store", "skill_workflow", "curator"} <= set(names)
    assert SkillStore and SkillWorkflow
