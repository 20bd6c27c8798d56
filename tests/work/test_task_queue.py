"""task_queue: enqueue/dequeue/ack/nack, stats, idempotency, visibility timeout, dead letters, the worker."""

from __future__ import annotations

import pytest

from minihermes.runtime import ActorError, Node

from . import doubles
from .conftest import ACME, ACME_VIEWER, GLOBEX, until


async def tq(node: Node, op: str, ctx=ACME, **payload):
    return await node.ask("task_queue", op, payload, ctx=ctx)


async def test_enqueue_dequeue_ack_nack_and_stats(app_node):
    node = await app_node(scripted=True)
    a = await tq(node, "enqueue", task_type="send_email", payload={"to": "bob@example.com"})
    b = await tq(node, "enqueue", task_type="send_email", payload={"to": "eve@example.com"})
    got = await tq(node, "dequeue", limit=1)
    assert [t["msg_id"] for t in got["tasks"]] == [a["msg_id"]]
    assert got["tasks"][0]["payload"] == {"to": "bob@example.com"} and got["tasks"][0]["deliveries"] == 1
    assert (await tq(node, "ack", msg_id=a["msg_id"]))["status"] == "ok"
    with pytest.raises(ActorError) as e:
        await tq(node, "ack", msg_id=a["msg_id"])  # acked already
    assert e.value.code == "not_found"
    second = (await tq(node, "dequeue", limit=5))["tasks"]
    assert [t["msg_id"] for t in second] == [b["msg_id"]]
    await tq(node, "nack", msg_id=b["msg_id"], requeue=True)
    again = (await tq(node, "dequeue", limit=5))["tasks"]
    assert [t["msg_id"] for t in again] == [b["msg_id"]] and again[0]["deliveries"] == 2
    await tq(node, "nack", msg_id=b["msg_id"], requeue=False, reason="bad address")
    stats = await tq(node, "get_stats")
    assert {
        k: stats[k] for k in ("enqueued", "completed", "failed", "depth", "in_flight", "dead_lettered")
    } == {
        "enqueued": 2,
        "completed": 1,
        "failed": 2,
        "depth": 0,
        "in_flight": 0,
        "dead_lettered": 1,
    }
    dead = (await tq(node, "dead_letters", task_type="send_email"))["dead_letters"]
    assert dead[0]["msg_id"] == b["msg_id"] and dead[0]["reason"] == "bad address"
    assert (await tq(node, "get_stats", ctx=GLOBEX))["enqueued"] == 0


async def test_bad_input_is_refused(app_node):
    node = await app_node(scripted=True)
    for payload, field in [
        ({"task_type": "has space"}, "task_type"),
        ({"task_type": "x", "idempotency_key": "k" * 201}, "idempotency_key"),
    ]:
        with pytest.raises(ActorError) as e:
            await tq(node, "enqueue", **payload)
        assert e.value.details["field"] == field
    with pytest.raises(ActorError) as e:
        await tq(node, "dequeue", limit=0)
    assert e.value.details["field"] == "limit"
    with pytest.raises(ActorError) as e:
        await tq(node, "enqueue", ctx=ACME_VIEWER, task_type="x")
    assert e.value.code == "permission_denied"


async def test_idempotency_key(app_node):
    node = await app_node(scripted=True)
    first = await tq(node, "enqueue", task_type="t", payload={"n": 1}, idempotency_key="order-7")
    second = await tq(node, "enqueue", task_type="t", payload={"n": 2}, idempotency_key="order-7")
    assert second["msg_id"] == first["msg_id"] and second["duplicate"] and not first["duplicate"]
    assert (await tq(node, "get_stats"))["enqueued"] == 1
    tasks = (await tq(node, "dequeue", limit=10))["tasks"]
    assert len(tasks) == 1 and tasks[0]["payload"] == {"n": 1}


async def test_visibility_timeout_and_dead_letter_after_max_deliveries(app_node, clock):
    node = await app_node(scripted=True, task_queue={"visibility_timeout": 10, "max_deliveries": 2})
    m = (await tq(node, "enqueue", task_type="flaky"))["msg_id"]
    assert (await tq(node, "dequeue"))["tasks"][0]["msg_id"] == m
    assert (await tq(node, "dequeue"))["tasks"] == []  # invisible while in flight
    await clock.advance(11)
    redelivered = (await tq(node, "dequeue"))["tasks"]
    assert redelivered[0]["msg_id"] == m and redelivered[0]["deliveries"] == 2
    await clock.advance(11)
    assert (await tq(node, "dequeue"))["tasks"] == []  # handed out twice without an ack: dead
    assert (await tq(node, "get_stats"))["dead_lettered"] == 1
    await tq(node, "redrive", task_type="flaky", msg_id=m)
    assert (await tq(node, "dequeue"))["tasks"][0]["msg_id"] == m


async def test_dequeue_waits_for_a_task(app_node, clock):
    node = await app_node(scripted=True)
    await tq(node, "enqueue", task_type="later")  # the type exists
    await tq(node, "ack", msg_id=(await tq(node, "dequeue", task_type="later"))["tasks"][0]["msg_id"])
    import asyncio

    waiting = asyncio.ensure_future(tq(node, "dequeue", task_type="later", timeout_ms=5000))
    await clock.advance(1)
    assert not waiting.done()
    sent = await tq(node, "enqueue", task_type="later", payload={"x": 1})
    got = await until(lambda: _done(waiting))
    assert got["tasks"][0]["msg_id"] == sent["msg_id"]


async def _done(fut):
    return fut.result() if fut.done() else None


async def test_agent_prompt_tasks_run_through_the_agent_once(app_node):
    node = await app_node(scripted=True)
    doubles.SCRIPT.answer = lambda session, messages: f"answered {messages[-1]['content']}"
    ids = [
        (await tq(node, "enqueue", task_type="agent_prompt", payload={"prompt": f"q{i}"}))["msg_id"]
        for i in range(5)
    ]

    async def all_done():
        results = [await tq(node, "get_result", msg_id=m) for m in ids]
        return results if all(r["status"] == "ok" for r in results) else None

    results = await until(all_done)
    assert [r["result"]["response"] for r in results] == [f"answered q{i}" for i in range(5)]
    assert results[0]["result"]["session_id"] == f"task:{ids[0]}"
    stats = await tq(node, "get_stats")
    assert stats["completed"] == 5 and stats["depth"] == 0 and stats["in_flight"] == 0
    assert sorted(doubles.SCRIPT.calls) == sorted(f"task:{m}" for m in ids)  # one LLM call each


async def test_a_failing_agent_task_is_retried_then_dead_lettered(app_node, clock):
    node = await app_node(scripted=True, task_queue={"max_deliveries": 2})
    doubles.SCRIPT.fail.add("doomed")
    payload = {"prompt": "boom", "session_id": "doomed"}
    m = (await tq(node, "enqueue", task_type="agent_prompt", payload=payload))["msg_id"]

    async def dead():
        await clock.advance(1)  # the worker's long poll sees a nacked task on its next poll
        return (await tq(node, "get_stats"))["dead_lettered"] == 1

    await until(dead)
    assert doubles.SCRIPT.calls.count("doomed") == 2
    assert (await tq(node, "get_result", msg_id=m))["status"] == "pending"
