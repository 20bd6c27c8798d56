"""Forgetting background work (``task_queue.forget_subject``): what a task running or dead-lettered at the time
keeps afterwards, what a user may forget, and a run the orchestrator is still in the middle of."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from minihermes.runtime import Node, PermissionDenied, RequestContext

from . import doubles
from .conftest import until

ALICE = RequestContext(tenant="acme", principal="alice", roles=frozenset({"user"}))
BOB = RequestContext(tenant="acme", principal="bob", roles=frozenset({"user"}))
ADA = RequestContext(tenant="acme", principal="ada", roles=frozenset({"admin"}))
SCOPE = ("acme", "default")


async def ask(node: Node, ctx: RequestContext, actor: str, op: str, **payload: Any) -> dict[str, Any]:
    reply: dict[str, Any] = await node.ask(actor, op, payload, 30, ctx=ctx)
    return reply


async def test_a_task_running_when_its_owner_is_forgotten_keeps_nothing(app_node: Any) -> None:
    node = await app_node(scripted=True)
    doubles.SCRIPT.hold["t1"] = asyncio.Event()
    doubles.SCRIPT.entered["t1"] = asyncio.Event()
    task = {"prompt": "summarise Zq-secret", "session_id": "t1"}
    msg_id = (await ask(node, ALICE, "task_queue", "enqueue", task_type="agent_prompt", payload=task))[
        "msg_id"
    ]
    await asyncio.wait_for(doubles.SCRIPT.entered["t1"].wait(), 20)  # the worker's turn is in the model

    out = await ask(node, ALICE, "task_queue", "forget_subject", user_id="alice")
    assert out["cleared"]["tasks"] == 1
    doubles.SCRIPT.hold["t1"].set()

    async def settled() -> bool:
        stats = await ask(node, ADA, "task_queue", "get_stats")
        return stats["depth"] == stats["in_flight"] == 0

    await until(settled, what="the task acked")
    assert (await ask(node, ALICE, "task_queue", "get_result", msg_id=msg_id))["status"] == "pending"
    assert await node.store.kv.list(SCOPE, "work:turn:task:") == []
    assert await node.store.kv.list(SCOPE, "tq:") == []


async def test_a_user_forgets_only_their_own_tasks_and_dead_letters_lose_their_payload(app_node: Any) -> None:
    node = await app_node(scripted=True)
    mine = await ask(node, ALICE, "task_queue", "enqueue", task_type="report", payload={"text": "alice's"})
    await ask(node, BOB, "task_queue", "enqueue", task_type="report", payload={"text": "bob's"})
    # alice's task is dead-lettered; bob's waits
    got = await ask(node, ADA, "task_queue", "dequeue", task_type="report", limit=10)
    for t in got["tasks"]:
        if t["msg_id"] == mine["msg_id"]:
            await ask(node, ADA, "task_queue", "nack", msg_id=t["msg_id"], requeue=False, reason="bad")
        else:
            await ask(node, ADA, "task_queue", "nack", msg_id=t["msg_id"], requeue=True)

    with pytest.raises(PermissionDenied):
        await ask(node, BOB, "task_queue", "forget_subject", user_id="alice")
    with pytest.raises(PermissionDenied):
        await ask(node, BOB, "task_queue", "forget_subject", tenant=True)
    out = await ask(node, ALICE, "task_queue", "forget_subject", user_id="alice")
    assert out["cleared"] == {"tasks": 1, "task_results": 0, "delegations": 0, "orchestrations": 0}

    dead = (await ask(node, ADA, "task_queue", "dead_letters", task_type="report"))["dead_letters"]
    assert [(d["msg_id"], d["payload"], d["forgotten"]) for d in dead] == [(mine["msg_id"], None, True)]
    # put back, it is dropped unseen when handed out; bob's is handed out whole
    await ask(node, ADA, "task_queue", "redrive", task_type="report", msg_id=mine["msg_id"])
    got = await ask(node, ADA, "task_queue", "dequeue", task_type="report", limit=10)
    assert [t["payload"] for t in got["tasks"]] == [{"text": "bob's"}]
    stats = await ask(node, ADA, "task_queue", "get_stats")
    assert (stats["depth"], stats["in_flight"], stats["dead_lettered"]) == (0, 1, 0)


async def test_a_run_in_the_middle_of_a_sub_task_is_cancelled_and_cleared(app_node: Any) -> None:
    node = await app_node(scripted=True)
    doubles.SCRIPT.hold["orch:o1:0"] = asyncio.Event()
    doubles.SCRIPT.entered["orch:o1:0"] = asyncio.Event()
    await ask(node, ALICE, "orchestrator/o1", "start", task="compare Zq-secret and oats", task_id="o1")
    await asyncio.wait_for(doubles.SCRIPT.entered["orch:o1:0"].wait(), 20)

    with pytest.raises(PermissionDenied):  # bob may not forget alice's run
        await ask(node, BOB, "orchestrator/o1", "forget", task_id="o1")
    assert (await ask(node, BOB, "task_queue", "forget_subject", user_id="bob"))["cleared"][
        "orchestrations"
    ] == 0
    out = await ask(node, ALICE, "task_queue", "forget_subject", user_id="alice")
    assert out["cleared"]["orchestrations"] == 1
    doubles.SCRIPT.hold["orch:o1:0"].set()

    status = await ask(node, ADA, "orchestrator/o1", "status", task_id="o1")
    assert (status["status"], status["task"], status["sub_tasks"]) == ("cancelled", None, [])
    assert await node.store.tuples.read_all(SCOPE, ["orchestration", None, None]) == []
    # nothing left to forget, and nothing to run again
    assert (await ask(node, ALICE, "orchestrator/o1", "forget", task_id="o1"))["forgotten"] is False
    assert (await ask(node, ALICE, "task_queue", "forget_subject", user_id="alice"))["cleared"][
        "orchestrations"
    ] == 0


async def test_a_users_cron_runs_and_kanban_turns_leave_no_reply_behind(app_node: Any, clock: Any) -> None:
    node = await app_node(scripted=True)
    for ctx in (ALICE, BOB):
        who = ctx.principal
        await ask(
            node, ctx, "cron_scheduler", "create_job", job_id=f"{who}-job", prompt="p", schedule="every_1h"
        )
        await ask(node, ctx, "cron_scheduler", "run_now", job_id=f"{who}-job")
        await ask(node, ctx, "kanban", "create", title=f"{who}'s card", assignee="agent")

    async def markers(kind: str, owner_key: str) -> list[str]:
        return [k for k, _ in await node.store.kv.list(SCOPE, f"work:turn:{kind}:") if owner_key in k]

    cards = {c["created_by"]: c["task_id"] for c in (await ask(node, ADA, "kanban", "list"))["tasks"]}

    async def all_ran() -> bool:
        await clock.advance(6)  # the kanban worker's next poll
        return all(
            [
                await markers("cron", "alice-job@"),
                await markers("cron", "bob-job@"),
                await markers("kanban", f":{cards['alice']}:"),
                await markers("kanban", f":{cards['bob']}:"),
            ]
        )

    await until(all_ran, what="the runs' and cards' turns")
    await ask(node, ALICE, "cron_scheduler", "forget_subject", user_id="alice")
    await ask(node, ALICE, "kanban", "forget_subject", user_id="alice")
    assert await markers("cron", "alice-job@") == [] and await markers("kanban", f":{cards['alice']}:") == []
    assert await markers("cron", "bob-job@") and await markers("kanban", f":{cards['bob']}:")
