"""kanban: the board's operations, dependencies and hand-offs, atomic claims with heartbeats, reclaiming,
the two-failure block, the agent worker protocol and the kanban_* tools."""

from __future__ import annotations

import asyncio

import pytest

from minihermes.runtime import ActorError, Node

from . import doubles
from .conftest import ACME, GLOBEX, until


async def kb(node: Node, op: str, ctx=ACME, **payload):
    return await node.ask("kanban", op, payload, ctx=ctx)


async def card(node: Node, task_id: str) -> dict:
    return (await kb(node, "show", task_id=task_id))["task"]


async def test_the_fifteen_operations(app_node):
    node = await app_node(scripted=True)
    t1 = (await kb(node, "create", title="Research", body="find sources"))["task_id"]
    t2 = (await kb(node, "create", title="Write", depends_on=[t1], assignee="human"))["task_id"]
    assert (await card(node, t1))["status"] == "ready" and (await card(node, t2))["status"] == "todo"
    await kb(node, "update", task_id=t1, title="Research topic", priority=5)
    await kb(node, "assign", task_id=t1, assignee="alice")
    await kb(node, "comment", task_id=t1, text="start with the requirements")
    with pytest.raises(ActorError) as e:
        await kb(node, "move", task_id=t2, status="ready")  # waits for t1
    assert e.value.code == "conflict"
    await kb(node, "block", task_id=t1, reason="no access")
    await kb(node, "unblock", task_id=t1)
    await kb(node, "start", task_id=t1, worker="w1")
    done = await kb(node, "complete", task_id=t1, summary="sources: requirements", worker="w1")
    assert done["unblocked"] == [t2]
    shown = await kb(node, "show", task_id=t2)
    assert shown["task"]["status"] == "ready"
    assert shown["dependencies"] == [
        {"task_id": t1, "title": "Research topic", "status": "done", "summary": "sources: requirements"}
    ]
    events = [e["type"] for e in (await kb(node, "show", task_id=t1))["events"]]
    assert events == [
        "created",
        "updated",
        "assigned",
        "commented",
        "blocked",
        "unblocked",
        "claimed",
        "completed",
    ]
    t3 = (await kb(node, "create", title="Spare"))["task_id"]
    await kb(node, "cancel", task_id=t3, reason="not needed")
    await kb(node, "archive", task_id=t3)
    assert [t["task_id"] for t in (await kb(node, "list"))["tasks"]] == [t1, t2]
    assert [
        t["task_id"] for t in (await kb(node, "list", include_archived=True, status="cancelled"))["tasks"]
    ] == [t3]
    with pytest.raises(ActorError) as e:
        await kb(node, "delete", task_id=t1)  # t2 depends on it
    assert e.value.code == "conflict"
    await kb(node, "delete", task_id=t3)
    stats = await kb(node, "stats")
    assert stats["total"] == 2 and stats["by_status"]["done"] == 1 and stats["by_status"]["ready"] == 1
    assert (await kb(node, "stats", ctx=GLOBEX))["total"] == 0
    with pytest.raises(ActorError) as e:
        await kb(node, "create", title="x", depends_on=["t999"])
    assert e.value.code == "not_found"


async def test_claims_are_atomic_and_need_heartbeats(app_node, clock):
    node = await app_node(scripted=True, kanban={"sweep_interval": 5})
    t = (await kb(node, "create", title="job"))["task_id"]
    results = await asyncio.gather(
        *(kb(node, "start", task_id=t, worker=f"w{i}", ttl=30) for i in range(5)), return_exceptions=True
    )
    winners = [r for r in results if isinstance(r, dict)]
    assert len(winners) == 1 and all(isinstance(r, ActorError) for r in results if r not in winners)
    holder = winners[0]["task"]["claim"]["worker"]
    await clock.advance(20)
    await kb(node, "heartbeat", task_id=t, worker=holder, ttl=30)
    await clock.advance(20)  # 40 s after the claim, but the heartbeat extended it
    assert (await card(node, t))["status"] == "in_progress"
    with pytest.raises(ActorError):
        await kb(node, "heartbeat", task_id=t, worker="intruder")
    await clock.advance(30)  # no heartbeat: reclaimed by the sweep, counted as a failure
    c = await card(node, t)
    assert c["status"] == "ready" and c["failures"] == 1 and "expired" in c["last_error"]
    with pytest.raises(ActorError):
        await kb(node, "complete", task_id=t, summary="late", worker=holder)
    await kb(node, "start", task_id=t, worker="w9", ttl=30)
    await kb(node, "fail", task_id=t, worker="w9", reason="tool crashed")
    c = await card(node, t)
    assert (
        c["status"] == "blocked"
        and "failed 2 times" in c["blocked_reason"]
        and "tool crashed" in c["blocked_reason"]
    )


async def test_agent_workers_follow_the_protocol_and_hand_off(app_node, clock):
    node = await app_node(scripted=True)
    seen: list[str] = []

    def answer(session: str, messages: list[dict]) -> str:
        prompt = messages[-1]["content"]
        seen.append(prompt)
        return f"summary of {session.split(':')[1]}"

    doubles.SCRIPT.answer = answer
    t1 = (await kb(node, "create", title="Gather facts", assignee="agent"))["task_id"]
    t2 = (await kb(node, "create", title="Write it up", assignee="agent:writer", depends_on=[t1]))["task_id"]
    t3 = (await kb(node, "create", title="Human review", assignee="bob", depends_on=[t2]))["task_id"]

    async def done(task_id: str):
        return (await card(node, task_id))["status"] == "done"

    await until(lambda: done(t1))
    await clock.advance(6)  # the worker's next poll (also nudged when t2 became ready)
    await until(lambda: done(t2))
    assert (await card(node, t1))["summary"] == f"summary of {t1}"
    assert seen[1].startswith("Write it up")  # the card itself, no protocol text before it
    assert f"{t1} (Gather facts): summary of {t1}" in seen[1]  # the hand-off
    await clock.advance(6)
    assert (await card(node, t3))["status"] == "ready"  # not an agent's card: left for bob


async def test_a_card_whose_turns_fail_twice_is_blocked(app_node, clock):
    node = await app_node(scripted=True)
    t = (await kb(node, "create", title="Impossible", assignee="agent"))["task_id"]
    doubles.SCRIPT.fail.update({f"kanban:{t}:1", f"kanban:{t}:2"})

    async def blocked():
        await clock.advance(6)
        return (await card(node, t))["status"] == "blocked"

    await until(blocked)
    c = await card(node, t)
    assert c["failures"] == 2 and "llm_unavailable" in c["blocked_reason"]


async def test_the_kanban_tools(app_node):
    node = await app_node(scripted=True)
    tools = {t["name"] for t in (await node.ask("tool_executor", "list_tools", {}, ctx=ACME))["tools"]}
    ops = [
        "create",
        "show",
        "list",
        "update",
        "delete",
        "assign",
        "move",
        "comment",
        "block",
        "unblock",
        "start",
        "complete",
        "cancel",
        "archive",
        "stats",
        "heartbeat",
    ]
    assert {f"kanban_{op}" for op in ops} <= tools
    run = await node.ask(
        "tool_executor",
        "execute",
        {"name": "kanban_create", "input": {"title": "From a tool"}, "session_id": "s"},
        ctx=ACME,
    )
    assert run["status"] == "ok" and run["result"]["task_id"] == "t1"
    claim = await node.ask(
        "tool_executor",
        "execute",
        {"name": "kanban_start", "input": {"task_id": "t1"}, "session_id": "s"},
        ctx=ACME,
    )
    assert claim["result"]["task"]["claim"]["worker"] == "s"  # the calling session holds the claim
    bad = await node.ask(
        "tool_executor", "execute", {"name": "kanban_show", "input": {"task_id": "t7"}}, ctx=ACME
    )
    assert bad["status"] == "error" and bad["error"]["code"] == "not_found"
