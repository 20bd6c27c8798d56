"""Spend caps (issue 30) end to end: the whole agent app on a manual clock, its llm_gateway calling a fake
OpenAI-compatible server on 127.0.0.1 that reports usage, priced by the gateway's price table.

The fake server's request count is the proof that a refused call was refused before it was sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from minihermes.app import build_agent_node, default_config
from minihermes.runtime import ActorError, ManualClock, Node, RequestContext, SupervisorSpec

from .support import Reply, StubServer

ADMIN = RequestContext(tenant="acme", principal="ada", roles=frozenset({"admin"}))
ALICE = RequestContext(tenant="acme", principal="alice", roles=frozenset({"user"}))
BOB = RequestContext(tenant="acme", principal="bob", roles=frozenset({"user"}))
MIDNIGHT = 1_800_057_600.0
"""2027-01-16 00:00 UTC: the tests start ten minutes before it, so a day rolls over in a few ticks."""
PRICES = {"fake": {"gpt-spend": {"input": 1.0, "output": 5.0}}}
"""USD per million tokens. A reply of 2000 prompt and 500 completion tokens costs $0.0045."""
LEFT_OUT = {"skill_workflow", "curator", "goals", "kanban_worker", "orchestrator", "task_worker"}
"""Actors that may call the model after a turn (learning, judging goals): left out so that every request
the fake server sees is the turn's own."""


def answer(text: str, prompt_tokens: int = 2000, completion_tokens: int = 500) -> Reply:
    return Reply(
        json={
            "id": "chatcmpl-spend",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-spend",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
    )


def _leave_out(sup: SupervisorSpec, names: set[str]) -> None:
    sup.children = [c for c in sup.children if isinstance(c, SupervisorSpec) or c.name not in names]
    for c in sup.children:
        if isinstance(c, SupervisorSpec):
            _leave_out(c, names)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=MIDNIGHT - 600)


@pytest.fixture
async def app(
    tmp_path: Path, clock: ManualClock, stub: StubServer
) -> AsyncIterator[Callable[..., Awaitable[Node]]]:
    nodes: list[Node] = []

    async def start(prices: dict[str, Any] | None = None) -> Node:
        config = default_config(tmp_path / "data")
        _leave_out(config.tree, LEFT_OUT)
        args: dict[str, dict[str, Any]] = {
            "memory": {"semantic": False},
            "skill_store": {"semantic": "off"},
            "llm_gateway": {
                "allowed_egress": ["*"],
                "prices": PRICES if prices is None else prices,
                "usage_flush_interval": 0,
            },
            "cron_scheduler": {"tick_interval": 60},
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


async def gateway(node: Node, op: str, ctx: RequestContext = ADMIN, **payload: Any) -> Any:
    return await node.ask("llm_gateway", op, payload, ctx=ctx)


async def chat(node: Node, message: str, session: str, ctx: RequestContext = ALICE) -> dict[str, Any]:
    reply: dict[str, Any] = await node.ask(
        "agent", "chat", {"message": message, "session_id": session}, ctx=ctx
    )
    return reply


async def alerts(node: Node) -> list[dict[str, Any]]:
    records = await node.store.events.read(("acme", "default"), "audit", limit=100_000)
    out = []
    for r in records:
        data = r.data if isinstance(r.data, dict) else {}
        if data.get("event_type") == "budget_alert":
            out.append(data)
    return out


async def test_a_daily_cap_refuses_the_call_that_would_cross_it_before_sending(
    app: Callable[..., Awaitable[Node]], stub: StubServer
) -> None:
    node = await app()
    cap = await gateway(node, "set_budget", scope="user", key="alice", max_usd=0.01, period="day")
    assert (cap["max_usd"], cap["period"], cap["alerts"], cap["used_usd"]) == (0.01, "day", [50, 80, 100], 0)
    stub.reply(answer("first"), answer("second"))  # a third request would get a 599
    first = await chat(node, "hello", "s1")
    assert first["usage"] == {"calls": 1, "input_tokens": 2000, "output_tokens": 500, "cost_usd": 0.0045}
    assert await alerts(node) == []  # 45%: below the first threshold
    second = await chat(node, "and again", "s1")
    assert second["response"] == "second"
    # 90% spent: the 50% and 80% thresholds are announced, each once.
    assert sorted(a["data"]["threshold"] for a in await alerts(node)) == [50, 80]

    with pytest.raises(ActorError) as refused:
        await chat(node, "once more", "s1")
    error = refused.value
    assert (error.code, error.http_status) == ("budget_exceeded", 429)
    assert error.message.startswith("the daily budget of $0.01 for user alice is spent")
    assert error.message.endswith("it resets at 2027-01-16 00:00 UTC")
    assert error.details["period"] == "day" and error.details["resets_at"] == MIDNIGHT
    assert error.details["used"] == pytest.approx(0.009) and error.details["estimate"] > 0.001
    assert len(stub.seen) == 2  # refused before it was sent

    # The turn ends with that error (the session's last turn says why), and nothing is learned from it.
    last = await node.ask("agent", "last_turn", {"session_id": "s1"}, ctx=ALICE)
    assert last["status"] == "error" and last["error"]["code"] == "budget_exceeded"
    assert "daily budget of $0.01" in last["error"]["message"]
    with pytest.raises(ActorError):
        await chat(node, "still there?", "s2")
    assert len(stub.seen) == 2
    assert sorted(a["data"]["threshold"] for a in await alerts(node)) == [50, 80]  # once per period

    # Another user is not capped by alice's budget.
    stub.reply(answer("bob's"))
    assert (await chat(node, "hi", "b1", ctx=BOB))["response"] == "bob's"

    usage = await gateway(node, "get_usage", ctx=ALICE)
    assert usage["key"] == "alice" and usage["current"]["label"] == "2027-01-15"
    assert usage["current"]["cost_usd"] == pytest.approx(0.009)
    assert usage["current"]["models"]["fake/gpt-spend"]["calls"] == 2
    [daily] = usage["caps"]
    assert daily["percent"] == pytest.approx(90) and daily["alerts_sent"] == [50, 80]
    assert daily["resets_at"] == MIDNIGHT


async def test_a_user_cannot_raise_their_own_cap_nor_read_anyone_elses_usage(
    app: Callable[..., Awaitable[Node]],
) -> None:
    node = await app()
    await gateway(node, "set_budget", scope="user", key="alice", max_usd=0.01, period="day")
    with pytest.raises(ActorError) as raised:
        await gateway(node, "set_budget", ctx=ALICE, scope="user", key="alice", max_usd=100.0, period="day")
    assert raised.value.code == "permission_denied"
    with pytest.raises(ActorError) as other:
        await gateway(node, "get_usage", ctx=ALICE, scope="user", key="bob")
    assert other.value.code == "permission_denied"
    with pytest.raises(ActorError) as tenant:
        await gateway(node, "get_usage", ctx=ALICE, scope="tenant")
    assert tenant.value.code == "permission_denied"
    own = await gateway(node, "get_usage", ctx=ALICE)
    assert [c["max_usd"] for c in own["caps"]] == [0.01]  # unchanged


async def test_a_money_cap_over_an_unknown_price_refuses_instead_of_assuming_zero(
    app: Callable[..., Awaitable[Node]], stub: StubServer
) -> None:
    node = await app(prices={})
    stub.reply(answer("unpriced"))
    reply = await chat(node, "hello", "s1")
    assert reply["usage"]["cost_usd"] is None  # unknown, not $0
    usage = await gateway(node, "get_usage", scope="user", key="alice")
    assert usage["current"]["unknown_cost_calls"] == 1 and usage["current"]["cost_usd"] == 0
    await gateway(node, "set_budget", scope="tenant", key="", max_usd=5.0, period="month")
    with pytest.raises(ActorError) as refused:
        await chat(node, "again", "s1")
    assert refused.value.code == "price_unknown" and "fake/gpt-spend" in refused.value.message
    assert len(stub.seen) == 1


async def test_bad_caps_are_refused_with_the_field_named(app: Callable[..., Awaitable[Node]]) -> None:
    node = await app()
    for payload, field in [
        ({"max_usd": 1.0, "period": "week"}, "period"),
        ({"max_usd": 1.0, "period": "day", "time_zone": "Mars/Olympus"}, "time_zone"),
        ({"max_usd": -1.0}, "max_usd"),
        ({"max_usd": 1.0, "alerts": [0]}, "alerts"),
    ]:
        with pytest.raises(ActorError) as bad:
            await gateway(node, "set_budget", scope="user", key="alice", **payload)
        assert bad.value.code == "invalid_argument" and bad.value.details["field"] == field, payload


async def test_a_cron_job_at_its_cap_is_paused_and_runs_again_next_period(
    app: Callable[..., Awaitable[Node]], stub: StubServer, clock: ManualClock
) -> None:
    node = await app()
    await node.ask(
        "cron_scheduler",
        "create_job",
        {"job_id": "digest", "prompt": "summarize", "schedule": "every 60s", "max_retries": 0},
        ctx=ALICE,
    )
    await gateway(node, "set_budget", scope="cron_job", key="digest", max_usd=0.005, period="day")
    stub.reply(answer("digest one"), answer("digest two"))
    await clock.advance(61)
    await until(lambda: len(stub.seen) == 1, "the first run")
    await until(lambda: run_status(node, "digest", "completed", 1), "the first run to complete")
    await clock.advance(60)  # the second run would cross $0.005: refused, and the job paused
    job = await until(lambda: paused(node, "digest"), "the job to be paused")
    assert job["paused_by"] == "budget" and job["resume_at"] == MIDNIGHT
    assert "daily budget of $0.005 for cron job digest" in job["paused_reason"]
    assert len(stub.seen) == 1
    await clock.advance(120)  # still before midnight: nothing runs
    assert len(stub.seen) == 1
    await clock.advance(MIDNIGHT - clock.time() + 61)  # the next day: resumed, and its next run calls
    # The resume is the scheduler's tick after midnight; a busy machine may handle it after the minute's
    # slot was computed, so the clock moves on a minute at a time until the run comes (a few at most).
    for _ in range(5):
        if await _seen_within(lambda: len(stub.seen) == 2, 2.0):
            break
        await clock.advance(60)
    await until(lambda: len(stub.seen) == 2, "the run after the period rolled over")
    job = (await node.ask("cron_scheduler", "get_job", {"job_id": "digest"}, ctx=ALICE))["job"]
    assert job["status"] == "active" and job["paused_reason"] is None


async def run_status(node: Node, job_id: str, status: str, n: int) -> bool:
    runs = (await node.ask("cron_scheduler", "job_runs", {"job_id": job_id}, ctx=ADMIN))["runs"]
    return len([r for r in runs if r["status"] == status]) >= n


async def paused(node: Node, job_id: str) -> dict[str, Any] | None:
    job: dict[str, Any] = (await node.ask("cron_scheduler", "get_job", {"job_id": job_id}, ctx=ADMIN))["job"]
    return job if job["status"] == "paused" else None


async def _seen_within(check: Callable[[], Any], timeout: float) -> bool:
    try:
        await until(check, "", timeout)
    except AssertionError:
        return False
    return True


async def until(check: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    """Poll a check (real time: the node's work runs beside the test) until it is truthy."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        got = check()
        if asyncio.iscoroutine(got):
            got = await got
        if got:
            return got
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def test_kanban_worker_turns_count_for_the_kanban_worker_scope(
    app: Callable[..., Awaitable[Node]], stub: StubServer
) -> None:
    node = await app()
    await gateway(
        node, "set_budget", scope="kanban_worker", key="kanban_worker", max_tokens=2000, period="month"
    )
    stub.reply(answer("card done"))
    messages = [{"role": "user", "content": "do the card"}]
    await gateway(
        node,
        "completion",
        messages=messages,
        session_id="kanban:t1:1",
        user_id="alice",
        kanban_worker="kanban_worker",
    )
    usage = await gateway(node, "get_usage", scope="kanban_worker", period="month")
    assert usage["current"]["label"] == "2027-01" and usage["current"]["total_tokens"] == 2500
    with pytest.raises(ActorError) as refused:
        await gateway(
            node,
            "completion",
            messages=messages,
            session_id="t2",
            user_id="alice",
            kanban_worker="kanban_worker",
        )
    assert refused.value.details["scope"] == "kanban_worker"
    assert "monthly budget of 2000 tokens for kanban worker" in refused.value.message
    assert len(stub.seen) == 1
