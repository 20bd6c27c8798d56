"""Spend caps and the work actors (issue 30): the kanban worker paused at its cap and resumed when the period
rolls over (or as an admin says), its budget charged by the turn's claim and not by a session's name, and a
cron run refused for its budget recorded as final instead of retried.

The whole agent app on a manual clock, its llm_gateway calling the fake OpenAI-compatible server on
127.0.0.1 (``tests/llm/support.py``); the server's request count proves a refused call was never sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from minihermes.app import build_agent_node, default_config
from minihermes.runtime import ActorError, ManualClock, Node

from .support import StubServer
from .test_spend import ADMIN, ALICE, MIDNIGHT, PRICES, _leave_out, answer, gateway, until

LEFT_OUT = {"skill_workflow", "curator", "goals", "orchestrator", "task_worker"}
"""As in test_spend, but with the kanban worker: every request the fake server sees is a turn's own."""


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=MIDNIGHT - 600)


@pytest.fixture
async def app(
    tmp_path: Path, clock: ManualClock, stub: StubServer
) -> AsyncIterator[Callable[..., Awaitable[Node]]]:
    nodes: list[Node] = []

    async def start() -> Node:
        config = default_config(tmp_path / "data")
        _leave_out(config.tree, LEFT_OUT)
        args: dict[str, dict[str, Any]] = {
            "memory": {"semantic": False},
            "skill_store": {"semantic": "off"},
            "llm_gateway": {"allowed_egress": ["*"], "prices": PRICES, "usage_flush_interval": 0},
            "cron_scheduler": {"tick_interval": 60},
            # One card at a time: two turns checked against the same spend at once would both pass.
            "kanban_worker": {"max_concurrent": 1, "poll": 5},
        }
        for spec in config.tree.walk():
            spec.args.update(args.get(spec.name, {}))
        node = build_agent_node(config, clock=clock)
        await node.start()
        nodes.append(node)
        await gateway(
            node,
            "register_provider",
            name="fake",
            kind="openai",
            model="gpt-spend",
            base_url=stub.base_url + "/v1",
            timeout=5,
        )
        await gateway(node, "switch_provider", provider="fake")
        return node

    yield start
    for n in nodes:
        await n.stop(deadline=5)


async def card(node: Node, task_id: str) -> dict[str, Any]:
    shown: dict[str, Any] = (await node.ask("kanban", "show", {"task_id": task_id}, ctx=ADMIN))["task"]
    return shown


async def create(node: Node, title: str) -> str:
    reply = await node.ask("kanban", "create", {"title": title, "assignee": "agent"}, ctx=ALICE)
    return str(reply["task_id"])


async def worker(node: Node, op: str, **payload: Any) -> dict[str, Any]:
    reply: dict[str, Any] = await node.ask("kanban_worker", op, payload, ctx=ADMIN)
    return reply


async def audit(node: Node, event_type: str) -> list[dict[str, Any]]:
    records = await node.store.events.read(("acme", "default"), "audit", limit=100_000)
    return [r.data for r in records if isinstance(r.data, dict) and r.data.get("event_type") == event_type]


async def refused_and_put_back(node: Node, task_id: str) -> dict[str, Any]:
    """The card once the worker put it back after a refusal: ready, with its "Paused:" comment."""

    async def check() -> dict[str, Any] | None:
        now = await card(node, task_id)
        paused = [c for c in now["comments"] if c["text"].startswith("Paused: ")]
        return now if paused and now["status"] == "ready" else None

    found: dict[str, Any] = await until(check, f"card {task_id} put back")
    return found


async def status_is(node: Node, task_id: str, status: str) -> bool:
    return (await card(node, task_id))["status"] == status


async def test_the_kanban_worker_pauses_at_its_cap_and_resumes_next_period(
    app: Callable[..., Awaitable[Node]], stub: StubServer, clock: ManualClock
) -> None:
    node = await app()
    await gateway(node, "set_budget", scope="kanban_worker", key="kanban_worker", max_usd=0.005, period="day")
    stub.reply(answer("first card done"))
    first = await create(node, "Write the first note")
    await until(lambda: status_is(node, first, "done"), "the first card done")
    usage = await gateway(node, "get_usage", scope="kanban_worker", key="kanban_worker")
    assert usage["current"]["cost_usd"] == pytest.approx(0.0045)  # the worker's turn is charged to it

    second = await create(node, "Write the second note")  # would cross $0.005: refused before sending
    put_back = await refused_and_put_back(node, second)
    assert put_back["failures"] == 0 and put_back["claim"] is None  # not a failed attempt
    (comment,) = [c for c in put_back["comments"] if c["text"].startswith("Paused: ")]
    assert "daily budget of $0.005 for kanban worker kanban_worker" in comment["text"]
    assert "runs when the budget resets" in comment["text"]
    assert len(stub.seen) == 1
    (hold,) = (await worker(node, "get_stats"))["paused"]
    assert (hold["hold"], hold["paused_by"], hold["resume_at"]) == ("all", "budget", MIDNIGHT)
    assert hold["scope"] == "kanban_worker" and "it resets at 2027-01-16 00:00 UTC" in hold["reason"]
    assert [e["data"]["task_id"] for e in await audit(node, "kanban_worker_paused")] == [second]

    await clock.advance(120)  # polls before midnight claim nothing
    await node.ask("kanban_worker", "poll", {}, ctx=ADMIN)
    assert await status_is(node, second, "ready") and len(stub.seen) == 1

    stub.reply(answer("second card done"))
    await clock.advance(MIDNIGHT - clock.time() + 6)  # the next day: the next poll resumes and claims it
    await until(lambda: status_is(node, second, "done"), "the second card done after the period rolled over")
    assert len(stub.seen) == 2
    assert (await worker(node, "get_stats"))["paused"] == []
    assert [e["data"]["by"] for e in await audit(node, "kanban_worker_resumed")] == ["budget"]


async def test_an_admin_keeps_the_worker_paused_past_the_period_and_resumes_it_now(
    app: Callable[..., Awaitable[Node]], stub: StubServer, clock: ManualClock
) -> None:
    node = await app()
    await gateway(node, "set_budget", scope="kanban_worker", key="kanban_worker", max_usd=0.0, period="day")
    task_id = await create(node, "Summarize the inbox")
    await refused_and_put_back(node, task_id)
    assert len(stub.seen) == 0
    with pytest.raises(ActorError) as denied:
        await node.ask("kanban_worker", "resume_worker", {}, ctx=ALICE)
    assert denied.value.code == "permission_denied"

    await worker(node, "pause_worker", reason="until the invoice is checked")
    await clock.advance(MIDNIGHT - clock.time() + 6)  # the cap's hold ends; the admin's does not
    await until(lambda: _holds(node, ["admin"]), "the budget hold to end at midnight")
    await node.ask("kanban_worker", "poll", {}, ctx=ADMIN)
    assert await status_is(node, task_id, "ready") and len(stub.seen) == 0

    await gateway(node, "set_budget", scope="kanban_worker", key="kanban_worker", period="day")  # no cap
    stub.reply(answer("summarized"))
    resumed = await worker(node, "resume_worker")
    assert resumed["resumed"] == ["admin"] and resumed["paused"] == []
    await until(lambda: status_is(node, task_id, "done"), "the card done after resume_worker")
    assert len(stub.seen) == 1


async def _holds(node: Node, ids: list[str]) -> bool:
    return [h["id"] for h in (await worker(node, "get_stats"))["paused"]] == ids


async def test_a_session_named_kanban_is_not_charged_to_the_worker(
    app: Callable[..., Awaitable[Node]], stub: StubServer
) -> None:
    node = await app()
    await gateway(node, "set_budget", scope="kanban_worker", key="kanban_worker", max_usd=0.0, period="day")
    stub.reply(answer("hello alice"))
    reply = await node.ask("agent", "chat", {"message": "hi", "session_id": "kanban:mine:1"}, ctx=ALICE)
    assert reply["response"] == "hello alice"  # not refused by the worker's (zero) cap
    usage = await gateway(node, "get_usage", scope="kanban_worker", key="kanban_worker")
    assert usage["current"]["calls"] == 0 and usage["current"]["total_tokens"] == 0

    # Naming a card is not enough either: only the session holding the card's claim is the worker's.
    task_id = (await node.ask("kanban", "create", {"title": "by hand"}, ctx=ALICE))["task_id"]
    with pytest.raises(ActorError) as denied:
        await node.ask(
            "agent",
            "chat",
            {"message": "hi", "session_id": "kanban:mine:1", "kanban_card": task_id},
            ctx=ALICE,
        )
    assert denied.value.code == "permission_denied" and denied.value.details["field"] == "kanban_card"
    with pytest.raises(ActorError) as bad:
        await gateway(node, "completion", messages=[{"role": "user", "content": "x"}], kanban_worker="bob")
    assert bad.value.code == "invalid_argument"
    assert len(stub.seen) == 1


async def test_a_cron_run_refused_for_its_budget_is_final_not_retried(
    app: Callable[..., Awaitable[Node]], stub: StubServer, clock: ManualClock
) -> None:
    node = await app()
    await node.ask(
        "cron_scheduler",
        "create_job",
        {
            "job_id": "digest",
            "prompt": "summarize",
            "schedule": "every 1h",
            "max_retries": 3,
            "retry_backoff": 5,
        },
        ctx=ALICE,
    )
    await gateway(node, "set_budget", scope="user", key="alice", max_usd=0.0, period="day")
    await node.ask("cron_scheduler", "run_now", {"job_id": "digest"}, ctx=ALICE)

    async def failed() -> dict[str, Any] | None:
        runs = (await node.ask("cron_scheduler", "job_runs", {"job_id": "digest"}, ctx=ADMIN))["runs"]
        return runs[0] if runs and runs[0]["status"] == "failed" else None

    run = await until(failed, "the refused run to be final")
    assert run["attempt"] == 0 and run["error"]["code"] == "budget_exceeded"
    assert run["not_retried"].startswith("refused before sending") and "next_attempt_at" not in run
    for _ in range(3):  # past every backoff: no retry comes
        await clock.advance(61)
    runs = (await node.ask("cron_scheduler", "job_runs", {"job_id": "digest"}, ctx=ADMIN))["runs"]
    assert [r["status"] for r in runs] == ["failed"] and len(stub.seen) == 0
    stats = await node.ask("cron_runner", "get_stats", {}, ctx=ADMIN)
    assert stats["retried"] == 0 and stats["failed"] == 1
