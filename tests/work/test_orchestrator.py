"""orchestrator: LLM plan or deterministic fallback, concurrent independent sub-tasks, hand-offs,
checkpointed results that survive a restart mid-run, status and cancel."""

from __future__ import annotations

import asyncio
import json

import pytest

from minihermes.runtime import ActorError, Node

from . import doubles
from .conftest import ACME, until

PLAN = [
    {"task": "research topic A", "after": []},
    {"task": "research topic B", "after": []},
    {"task": "compare A and B", "after": [0, 1]},
]


def scripted(plan: object) -> None:
    def answer(session: str, messages: list[dict]) -> str:
        if "Split the user's task" in messages[0]["content"]:
            return json.dumps(plan) if not isinstance(plan, str) else plan
        return f"result of [{messages[-1]['content'].splitlines()[0]}]"

    doubles.SCRIPT.answer = answer


async def orch(node: Node, op: str, **payload):
    return await node.ask("orchestrator", op, payload, ctx=ACME, timeout=30)


async def test_an_llm_plan_runs_independent_sub_tasks_concurrently(app_node):
    node = await app_node(scripted=True)
    scripted(PLAN)
    for n in (0, 1):
        doubles.SCRIPT.hold[f"orch:o1:{n}"] = asyncio.Event()
        doubles.SCRIPT.entered[f"orch:o1:{n}"] = asyncio.Event()
    run = asyncio.ensure_future(orch(node, "workflow_run", task="compare A and B", task_id="o1"))
    # Both independent sub-tasks are running at the same time before either may finish.
    await asyncio.wait_for(doubles.SCRIPT.entered["orch:o1:0"].wait(), 10)
    await asyncio.wait_for(doubles.SCRIPT.entered["orch:o1:1"].wait(), 10)
    status = await orch(node, "status", task_id="o1")
    assert status["status"] == "running" and status["progress"] == 0 and len(status["sub_tasks"]) == 3
    for ev in doubles.SCRIPT.hold.values():
        ev.set()
    out = (await asyncio.wait_for(run, 20))["result"]
    assert out["status"] == "ok" and out["sub_tasks"] == 3
    third = out["sub_results"][2]
    assert third["session_id"] == "orch:o1:2" and third["response"] == "result of [compare A and B]"
    history = (await node.ask("agent", "get_history", {"session_id": "orch:o1:2"}, ctx=ACME))["messages"]
    assert "result of [research topic A]" in history[0]["content"]  # the hand-off from its dependencies
    assert (await orch(node, "status", task_id="o1"))["progress"] == 100
    again = await orch(node, "workflow_run", task="compare A and B", task_id="o1")
    assert again["result"] == out  # a finished run answers with its outcome


async def test_an_unusable_llm_plan_falls_back_to_the_deterministic_planner(app_node):
    node = await app_node(scripted=True)
    scripted("I would rather not.")
    out = (await orch(node, "workflow_run", task="calculate 6*7 and remember the result", task_id="o2"))[
        "result"
    ]
    assert [s["task"] for s in out["sub_results"]] == ["calculate 6*7", "remember the result"]
    assert (
        "result of [calculate 6*7]"
        in (await node.ask("agent", "get_history", {"session_id": "orch:o2:1"}, ctx=ACME))["messages"][0][
            "content"
        ]
    )


async def test_a_restart_mid_run_does_not_redo_finished_sub_tasks(app_node, clock):
    node = await app_node(scripted=True)
    scripted([{"task": "step one", "after": []}, {"task": "step two", "after": [0]}])
    doubles.SCRIPT.hold["orch:o3:1"] = asyncio.Event()
    doubles.SCRIPT.entered["orch:o3:1"] = asyncio.Event()
    await orch(node, "start", task="two steps", task_id="o3")
    await asyncio.wait_for(doubles.SCRIPT.entered["orch:o3:1"].wait(), 10)
    await node.stop(deadline=1)  # step one is checkpointed, step two is mid-turn
    doubles.SCRIPT.hold.clear()
    node = await app_node(scripted=True)  # the node re-activates the running workflow

    async def finished():
        await clock.advance(0.5)  # the step polls the resumed agent turn on the node's clock
        status = await orch(node, "status", task_id="o3")
        return status if status["status"] == "completed" else None

    status = await until(finished)
    assert status["attempt"] == 2 and status["completed_sub_tasks"] == 2
    assert doubles.SCRIPT.calls.count("orch:o3:0") == 1  # step one was not run again
    history = (await node.ask("agent", "get_history", {"session_id": "orch:o3:1"}, ctx=ACME))["messages"]
    assert sum(1 for m in history if m["role"] == "user") == 1  # step two's turn was resumed, not restarted


async def test_cancel_and_bad_input(app_node):
    node = await app_node(scripted=True)
    scripted([{"task": "slow", "after": []}])
    doubles.SCRIPT.hold["orch:o4:0"] = asyncio.Event()
    doubles.SCRIPT.entered["orch:o4:0"] = asyncio.Event()
    await orch(node, "start", task="slow", task_id="o4")
    await asyncio.wait_for(doubles.SCRIPT.entered["orch:o4:0"].wait(), 10)
    assert (await orch(node, "cancel", task_id="o4"))["cancelled"]
    assert (await orch(node, "status", task_id="o4"))["status"] == "cancelled"
    doubles.SCRIPT.hold["orch:o4:0"].set()
    with pytest.raises(ActorError) as e:
        await orch(node, "workflow_run", task=" ", task_id="o5")
    assert e.value.details["field"] == "task"
    with pytest.raises(ActorError) as e:
        await orch(node, "status", task_id="never")
    assert e.value.code == "not_found"
