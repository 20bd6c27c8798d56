"""task_queue: enqueue/dequeue/ack/nack, stats, idempotency, visibility timeout, dead letters, the worker."""

from __future__ import annotations

import asyncio

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


async def test_ids_and_types_the_store_cannot_key_on_are_refused_not_a_crash(app_node):
    """Issue 17: ``msg_id: ""`` reached the store's own checks (a ValueError: the actor crashed, a 500)."""
    node = await app_node(scripted=True)
    msg_id = (await tq(node, "enqueue", task_type="t"))["msg_id"]
    for op, payload, field in [
        ("ack", {"msg_id": ""}, "msg_id"),
        ("nack", {"msg_id": ""}, "msg_id"),
        ("redrive", {"task_type": "t", "msg_id": ""}, "msg_id"),
        ("ack", {"msg_id": "a\x00b"}, "msg_id"),
        ("nack", {"msg_id": "x" * 201}, "msg_id"),
        ("nack", {"msg_id": msg_id, "reason": "bad\x00"}, "reason"),
        ("ack", {"msg_id": msg_id, "task_type": "no space"}, "task_type"),
        ("redrive", {"task_type": "t\x00", "msg_id": msg_id}, "task_type"),
        ("dead_letters", {"task_type": ""}, "task_type"),
        ("set_result", {"msg_id": "", "result": {}}, "msg_id"),
        ("get_result", {"msg_id": "\x00"}, "msg_id"),
        ("enqueue", {"task_type": "t", "idempotency_key": "k\x00"}, "idempotency_key"),
    ]:
        with pytest.raises(ActorError) as e:
            await tq(node, op, **payload)
        assert (e.value.code, e.value.details.get("field")) == ("invalid_argument", field), (op, payload)
    assert (await tq(node, "dequeue"))["tasks"][0]["msg_id"] == msg_id  # the queue kept running throughout
    assert (await tq(node, "ack", msg_id=msg_id))["status"] == "ok"


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
    waiting = asyncio.ensure_future(tq(node, "dequeue", task_type="later", timeout_ms=5000))
    await clock.advance(1)
    assert not waiting.done()
    sent = await tq(node, "enqueue", task_type="later", payload={"x": 1})
    got = await until(lambda: _done(waiting))
    assert got["tasks"][0]["msg_id"] == sent["msg_id"]


async def _done(fut):
    return fut.result() if fut.done() else None


async def _stats_when(node, check):
    stats = await tq(node, "get_stats")
    return stats if check(stats) else None


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
    stats = await until(lambda: _stats_when(node, lambda s: s["completed"] == 5))  # reported after the ack
    assert stats["depth"] == 0 and stats["in_flight"] == 0
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
    # The worker nacks on the channel itself and reports both failures to the queue's counters.
    await until(lambda: _stats_when(node, lambda s: s["failed"] == 2 and s["completed"] == 0))


VISIBILITY = 300 + 60  # the worker's default: turn_timeout + 60 s


def hold(*sessions: str) -> None:
    """The scripted LLM holds these sessions' turns (durable, waiting for the LLM) until released."""
    for s in sessions:
        doubles.SCRIPT.hold[s] = asyncio.Event()
        doubles.SCRIPT.entered[s] = asyncio.Event()


async def turns_waiting(*sessions: str) -> bool:
    return all(doubles.SCRIPT.entered[s].is_set() for s in sessions)


async def advance_until(clock, check, limit: float, step: float = 0.5):
    """Move the manual clock in small steps until ``check`` holds; fail once ``limit`` seconds of node time
    have passed (shorter than the visibility timeout: what this waits for must not need it)."""
    start = clock.monotonic()
    while not (got := await check()):
        if clock.monotonic() - start > limit:
            raise AssertionError(f"not done after {limit:g}s of node time")
        await clock.advance(step)
        await asyncio.sleep(0.01)  # the store's writer thread
    return got


async def test_a_dying_workers_tasks_come_back_at_once_not_after_the_visibility_timeout(app_node, clock):
    node = await app_node(scripted=True)
    hold("t1", "t2")
    ids = [
        (await tq(node, "enqueue", task_type="agent_prompt", payload={"prompt": f"p{s}", "session_id": s}))[
            "msg_id"
        ]
        for s in ("t1", "t2")
    ]
    await until(lambda: turns_waiting("t1", "t2"), what="both turns under way")
    assert (await tq(node, "get_stats"))["in_flight"] == 2
    assert (await tq(node, "dequeue", task_type="agent_prompt"))["tasks"] == []  # the worker holds them
    # The worker dies (its node going down takes it the same way) while the queue lives on: the runtime
    # releases what the worker had received, and its restarted incarnation gets the tasks again at once.
    [worker] = [c for c in node.cells("task_worker") if c.scope[0] == "acme"]
    await worker.kill("killed by the test", abnormal=True)
    for s in ("t1", "t2"):
        doubles.SCRIPT.hold[s].set()

    async def all_done():
        results = [await tq(node, "get_result", msg_id=m) for m in ids]
        return results if all(r["status"] == "ok" for r in results) else None

    results = await advance_until(clock, all_done, limit=VISIBILITY / 10)
    assert [r["result"]["response"] for r in results] == ["done: pt1", "done: pt2"]
    assert sorted(doubles.SCRIPT.calls) == ["t1", "t2"]  # each prompt ran once: the retry took the turn
    stats = await until(lambda: _stats_when(node, lambda s: s["completed"] == 2))
    assert stats["in_flight"] == 0 and stats["depth"] == 0 and stats["failed"] == 0


async def test_tasks_of_a_worker_whose_node_is_declared_down_come_back_at_once(app_node):
    """The worker runs on node ``w``, the queue on node ``q`` (one store). Without a cluster fabric in this
    test, "the queue is active on another node" is a worker node without ``task_queue``."""
    q = await app_node(scripted=True, node_id="q", without=("task_worker",))
    w = await app_node(scripted=True, node_id="w", without=("task_queue",))
    hold("t1", "t2")
    for s in ("t1", "t2"):
        await tq(q, "enqueue", task_type="agent_prompt", payload={"prompt": f"p{s}", "session_id": s})
    await w.ask("task_worker", "get_stats", {}, ctx=ACME)  # the worker on w starts receiving
    await until(lambda: turns_waiting("t1", "t2"), what="both turns under way on w")
    assert (await tq(q, "dequeue", task_type="agent_prompt"))["tasks"] == []
    # What the cluster does when w's heartbeat stops (Cluster._node_down): release w's receipts.
    assert await q.store.channels.release_receipt_prefix(f"{w.node_id}:{w.boot_id}:") == 2
    again = (await tq(q, "dequeue", task_type="agent_prompt", limit=10))["tasks"]  # the clock has not moved
    assert sorted(t["payload"]["session_id"] for t in again) == ["t1", "t2"]
    assert all(t["deliveries"] == 2 for t in again)
    for s in ("t1", "t2"):
        doubles.SCRIPT.hold[s].set()


async def test_a_task_released_when_its_node_is_declared_down_wakes_a_waiting_worker(
    app_node, clock, monkeypatch
):
    """What ``Cluster._node_down`` does on a survivor: the dead node's worker's task goes back to the channel
    and the worker waiting here takes it at once. The manual clock stands still and the queue's nudge is a
    day away, so neither the worker's next poll of the store nor a nudge can be what picks it up."""
    pytest.importorskip("nats", reason="nats-py is not installed (pip install -e '.[dev]')")
    from minihermes.cluster import Cluster, ClusterSettings

    node = await app_node(scripted=True, node_id="s", task_queue={"nudge_interval": 86400})
    scope, channel, store = ACME.scope, "tasks:agent_prompt", node.store
    await store.channels.declare(scope, channel, max_deliveries=5, visibility_timeout=VISIBILITY)
    # A task sent from another process, taken by the worker of node "dead" (boot "b1"), which then dies.
    body = {"payload": {"prompt": "p1", "session_id": "x1"}, "owner": "alice", "roles": ["admin"]}
    msg_id = await store.channels.send(scope, channel, "agent_prompt", body)
    assert len(await store.channels.receive(scope, channel, receipt="dead:b1:task_worker:1")) == 1

    # The worker here starts and waits: its receive finds nothing ready and no store read follows until a
    # wake-up (or the clock moves).
    real_receive = store.channels.receive
    reads: list[int] = []

    async def receive(*args, **kwargs):
        got = await real_receive(*args, **kwargs)
        if str(kwargs.get("receipt")).startswith("s:"):
            reads.append(len(got))
        return got

    monkeypatch.setattr(store.channels, "receive", receive)
    await node.ask("task_worker", "get_stats", {}, ctx=ACME)

    async def worker_waiting() -> bool:
        return reads == [0]

    await until(worker_waiting, what="the worker's first (empty) receive")
    started = clock.time()
    cluster = Cluster(ClusterSettings(nats_url="nats://127.0.0.1:1", secret=b"s" * 16))
    cluster._node = node  # not connected: only the survivor's take-over of node "dead" runs
    cluster._node_down("dead", "b1")

    async def done():
        got = await tq(node, "get_result", msg_id=msg_id)
        return got if got["status"] == "ok" else None

    result = await until(done, timeout=5, what="the released task picked up without a poll or a nudge")
    assert result["result"]["response"] == "done: p1" and doubles.SCRIPT.calls == ["x1"]
    assert clock.time() == started and reads[:2] == [0, 1]  # woken once, and that read took the task
