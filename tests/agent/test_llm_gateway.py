"""The llm_gateway actor: routing, retries, failover, circuit breakers, budgets, persistence and tenancy.

Providers here are ``gwtest`` (scripted per test, on the node's ManualClock); the real protocols against
local HTTP servers are in ``test_llm_gateway_wire.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from minihermes.agent.gateway import GatewaySettings, UsageLedger
from minihermes.llm import AuthError, BadRequestError, RateLimitedError, UnavailableError, Usage
from minihermes.runtime import ActorError, ConfigError, ManualClock, Node, RequestContext

from . import test_llm_gateway_support as support
from .conftest import audit_trail
from .test_llm_gateway_support import (
    ACME,
    ACME_USER,
    ACME_VIEWER,
    GLOBEX,
    HANG,
    Behavior,
    RecordingClock,
    Slow,
    ask,
    behavior,
    ok,
    settle,
    tree,
    user,
)

# The support module's fixtures (autouse guards, the recording clock), made visible to this module.
_key_never_logged = support._key_never_logged
_loopback_only = support._loopback_only
clock = support.clock


class DictKV:
    """The KV calls the ledger makes, on a dict, noting every put."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.puts: list[str] = []

    async def get(self, key: str) -> Any:
        return self.data.get(key)

    async def put(self, key: str, value: Any, ttl: float | None = None) -> int:
        self.data[key] = value
        self.puts.append(key)
        return len(self.puts)


DOWN = UnavailableError("upstream down", provider="primary", status_code=503)


async def add(
    node: Node,
    name: str,
    *items: Any,
    repeat: Any = None,
    clock: RecordingClock | None = None,
    ctx: RequestContext = ACME,
    **registration: Any,
) -> Behavior:
    """Register a ``gwtest`` provider answering ``items`` (then ``repeat``); returns its behavior."""
    made, options = behavior(*items, repeat=repeat, clock=clock)
    registration.setdefault("model", f"{name}-model")
    await ask(node, "register_provider", ctx=ctx, name=name, kind="gwtest", options=options, **registration)
    return made


async def failing_primary(
    node: Node, clock: RecordingClock, *primary: Any, repeat: Any = DOWN
) -> tuple[Behavior, Behavior]:
    """``primary`` active (answering ``primary`` then ``repeat``), ``backup`` next in the chain."""
    first = await add(node, "primary", *primary, repeat=repeat, clock=clock)
    second = await add(node, "backup", repeat=ok("from backup"), clock=clock)
    await ask(node, "switch_provider", provider="primary")
    await ask(node, "set_failover", chain=["backup"])
    return first, second


async def error_of(node: Node, op: str, ctx: RequestContext = ACME, **payload: Any) -> ActorError:
    with pytest.raises(ActorError) as caught:
        await ask(node, op, ctx=ctx, **payload)
    return caught.value


async def ticks(node: Node, clock: RecordingClock, count: int, interval: float = 10) -> None:
    """Let ``count`` recovery ticks fire, each handled before the next: a tick's checkpoint goes through
    the store's writer thread, which ``advance`` does not wait for."""
    for _ in range(count):
        await clock.advance(interval)
        await ask(node, "get_circuit")


async def circuit(node: Node, name: str) -> dict[str, Any]:
    reply: dict[str, Any] = await ask(node, "get_circuit", provider=name)
    return reply


CALCULATOR = {
    "name": "calculator",
    "description": "Evaluate an arithmetic expression.",
    "input_schema": {
        "type": "object",
        "properties": {"expression": {"type": "string"}},
        "required": ["expression"],
    },
}


# -- answering --------------------------------------------------------------------------------------------


async def test_the_default_provider_is_the_offline_simulated_model(make_node: Any) -> None:
    node = await make_node(tree())
    reply = await ask(
        node,
        "completion",
        messages=user("calculate 42 * 17"),
        tools=[CALCULATOR],
        session_id="s1",
        user_id="bob",
    )
    assert reply["status"] == "ok"
    assert (reply["provider"], reply["model"], reply["attempts"]) == ("simulated", "simulated", [])
    response = reply["response"]
    assert response["stop_reason"] == "tool_use"
    [tool_call] = response["tool_calls"]
    assert set(tool_call) == {"id", "name", "input"}
    assert tool_call["name"] == "calculator" and tool_call["input"]["expression"].replace(" ", "") == "42*17"
    assert set(response["usage"]) == {"input_tokens", "output_tokens", "cached_tokens", "cache_write_tokens"}
    assert response["usage"]["input_tokens"] > 0

    # The neutral shape goes back in: the tool result ends the turn with the answer.
    follow_up = [
        *user("calculate 42 * 17"),
        {"role": "assistant", "content": "", "tool_calls": [tool_call]},
        {"role": "tool", "tool_call_id": tool_call["id"], "content": {"result": "714"}},
    ]
    final = await ask(
        node, "completion", messages=follow_up, tools=[CALCULATOR], session_id="s1", user_id="bob"
    )
    assert final["response"]["stop_reason"] == "end_turn" and "714" in final["response"]["content"]

    stats = await ask(node, "get_stats", session_id="s1", user_id="bob")
    assert stats["active"] == {"provider": "simulated", "model": ""}
    assert stats["usage"]["calls"] == 2 and stats["providers"]["simulated"]["successes"] == 2
    assert stats["usage_by"]["session"] == stats["usage_by"]["user"] == stats["usage"]
    assert node.metrics.counter("llm_calls_total", tenant="acme", provider="simulated", outcome="ok") == 2


async def test_the_well_known_providers_exist_but_answer_only_once_configured(make_node: Any) -> None:
    node = await make_node(tree(max_retries=0))
    listed = await ask(node, "list_providers")
    assert [p["name"] for p in listed["providers"]] == ["anthropic", "ollama", "openai", "simulated"]
    # Switching to a name nobody configured is refused (test_provider_switch_refused.py); reached through
    # the failover chain it fails without a key (nothing is sent: the test would fail on any non-loopback
    # connect), and is not answered by the simulated model instead.
    await ask(node, "register_provider", name="gone", kind="openai", model="m", base_url="http://127.0.0.1:9")
    await ask(node, "switch_provider", provider="gone")
    await ask(node, "register_provider", name="claude", kind="anthropic", model="claude-opus-4-8")
    await ask(node, "set_failover", chain=["claude", "ollama"])  # and ollama has no model to ask for
    error = await error_of(node, "completion", messages=user("hi"))
    assert error.message == (
        "no LLM provider could answer (gone: unavailable; claude: auth; ollama: misconfigured)"
    )
    assert "simulated" not in (await ask(node, "get_stats"))["providers"]


async def test_the_packaged_scripted_provider_answers_through_the_gateway(make_node: Any) -> None:
    node = await make_node(tree())
    script = [
        {"content": "", "tool_calls": [{"name": "calculator", "input": {"expression": "6 * 7"}}]},
        {"content": "6 x 7 = 42"},
    ]
    await ask(
        node, "register_provider", name="script", kind="scripted", model="s-1", options={"script": script}
    )
    await ask(node, "switch_provider", provider="script")
    first = await ask(node, "completion", messages=user("what is 6 * 7?"), tools=[CALCULATOR])
    assert first["provider"] == "script" and first["model"] == "s-1"
    assert first["response"]["stop_reason"] == "tool_use"
    assert first["response"]["tool_calls"] == [
        {"id": "call_1_0", "name": "calculator", "input": {"expression": "6 * 7"}}
    ]
    second = await ask(node, "completion", messages=user("and?"))
    assert second["response"]["content"] == "6 x 7 = 42" and second["response"]["stop_reason"] == "end_turn"


async def test_usage_and_cost_are_counted_per_tenant_user_session_and_cron_job(make_node: Any) -> None:
    node = await make_node(tree())
    cached = ok(
        usage={"input_tokens": 100, "output_tokens": 20, "cached_tokens": 80, "cache_write_tokens": 0}
    )
    await add(node, "priced", repeat=cached, pricing={"input": 3, "output": 15, "cached": 0.3})
    await ask(node, "switch_provider", provider="priced")
    first = await ask(node, "completion", messages=user("a"), user_id="bob", session_id="s1")
    await ask(node, "completion", messages=user("b"), user_id="bob", session_id="s2", cron_job="nightly")
    # 20 fresh input tokens at $3/M, 80 cached at $0.3/M, 20 output at $15/M.
    assert first["cost_usd"] == pytest.approx((20 * 3 + 80 * 0.3 + 20 * 15) / 1e6)

    stats = await ask(node, "get_stats", user_id="bob", session_id="s1", cron_job="nightly")
    assert stats["usage"]["calls"] == 2 and stats["usage"]["total_tokens"] == 240
    assert stats["usage"]["cost_usd"] == pytest.approx(2 * first["cost_usd"])
    by = stats["usage_by"]
    assert (by["user"]["calls"], by["session"]["calls"], by["cron_job"]["calls"]) == (2, 1, 1)
    priced = stats["providers"]["priced"]
    assert (priced["cache_hits"], priced["cached_tokens"], priced["cache_hit_rate"]) == (2, 160, 1.0)
    assert node.metrics.counter("llm_tokens_total", tenant="acme", direction="input") == 200
    assert node.metrics.counter("llm_tokens_total", tenant="acme", direction="output") == 40
    assert node.metrics.counter("llm_cached_tokens_total", tenant="acme", provider="priced") == 160


async def test_calls_run_concurrently_and_never_block_the_mailbox(
    make_node: Any, clock: RecordingClock
) -> None:
    node = await make_node(tree())
    await add(node, "stuck", HANG, clock=clock, timeout=5)
    await ask(node, "switch_provider", provider="stuck", session_id="s1")
    stuck = asyncio.ensure_future(ask(node, "completion", messages=user("hi"), session_id="s1"))
    await settle()
    # While one call waits on its provider, the gateway answers other sessions and other ops.
    other = await ask(node, "completion", messages=user("hello"), session_id="s2")
    assert other["provider"] == "simulated"
    assert (await ask(node, "get_stats"))["usage"]["calls"] == 1
    assert not stuck.done()
    await clock.advance(5)
    with pytest.raises(ActorError) as caught:
        await stuck
    assert caught.value.code == "llm_unavailable" and "stuck: timeout" in caught.value.message


# -- retries and failover ---------------------------------------------------------------------------------


async def test_a_transient_error_is_retried_after_a_jittered_backoff(
    make_node: Any, clock: RecordingClock
) -> None:
    node = await make_node(tree())
    primary, backup = await failing_primary(node, clock, DOWN, repeat=ok("second try"))
    task = asyncio.ensure_future(ask(node, "completion", messages=user("hi")))
    await clock.until_sleeping()
    [delay] = clock.sleeps
    assert 0.25 <= delay <= 0.5  # backoff_base 0.5, equal jitter
    assert len(primary.calls) == 1 and not task.done()
    await clock.advance(delay)
    reply = await task
    assert (reply["provider"], reply["response"]["content"], reply["attempts"]) == (
        "primary",
        "second try",
        [],
    )
    assert primary.calls[1] - primary.calls[0] == pytest.approx(delay)
    assert backup.calls == []
    stats = (await ask(node, "get_stats"))["providers"]["primary"]
    assert (stats["calls"], stats["retries"], stats["successes"], stats["failures"]) == (1, 1, 1, 0)


async def test_retries_are_bounded_then_the_next_provider_answers(
    make_node: Any, clock: RecordingClock
) -> None:
    node = await make_node(tree(max_retries=2))
    primary, backup = await failing_primary(node, clock)
    task = asyncio.ensure_future(ask(node, "completion", messages=user("hi")))
    for n in (1, 2):
        await clock.until_sleeping(n)
        await clock.advance(clock.sleeps[-1])
    reply = await task
    assert 0.5 <= clock.sleeps[1] <= 1.0  # the second step doubles
    assert len(primary.calls) == 3 and len(backup.calls) == 1
    assert reply["provider"] == "backup" and reply["attempts"] == [
        {"provider": "primary", "error": "unavailable"}
    ]
    assert node.metrics.counter("llm_retries_total", tenant="acme", provider="primary") == 2


async def test_retry_after_is_honoured_before_retrying(make_node: Any, clock: RecordingClock) -> None:
    node = await make_node(tree())
    limited = RateLimitedError("slow down", provider="primary", status_code=429, retry_after=7)
    primary, _ = await failing_primary(node, clock, limited, repeat=ok("after the wait"))
    task = asyncio.ensure_future(ask(node, "completion", messages=user("hi")))
    await clock.until_sleeping()
    assert clock.sleeps == [7]
    await clock.advance(6.9)
    await settle()
    assert len(primary.calls) == 1 and not task.done()
    await clock.advance(0.1)
    reply = await task
    assert reply["response"]["content"] == "after the wait"
    assert primary.calls[1] - primary.calls[0] == pytest.approx(7.0)


async def test_a_retry_after_longer_than_the_limit_fails_over_at_once(
    make_node: Any, clock: RecordingClock
) -> None:
    node = await make_node(tree(max_retry_wait=30))
    limited = RateLimitedError("come back tomorrow", provider="primary", status_code=429, retry_after=120)
    primary, _ = await failing_primary(node, clock, limited)
    reply = await ask(node, "completion", messages=user("hi"))
    assert reply["provider"] == "backup" and reply["attempts"] == [
        {"provider": "primary", "error": "rate_limited"}
    ]
    assert clock.sleeps == [] and len(primary.calls) == 1


async def test_auth_and_bad_request_fail_over_without_retrying(make_node: Any, clock: RecordingClock) -> None:
    node = await make_node(tree())
    rejected = BadRequestError("context too long", provider="primary", status_code=400)
    primary, _ = await failing_primary(
        node, clock, AuthError("bad key", provider="primary", status_code=401), rejected
    )
    first = await ask(node, "completion", messages=user("hi"))
    second = await ask(node, "completion", messages=user("hi"))
    assert first["attempts"] == [{"provider": "primary", "error": "auth"}]
    assert second["attempts"] == [{"provider": "primary", "error": "bad_request"}]
    assert len(primary.calls) == 2 and clock.sleeps == []
    # The auth failure counts against the provider; the rejected request is the request's fault.
    state = await circuit(node, "primary")
    assert (state["consecutive_failures"], state["samples"], state["last_error"]) == (1, 1, "auth")


async def test_a_timeout_fails_over_without_retrying_the_same_provider(
    make_node: Any, clock: RecordingClock
) -> None:
    node = await make_node(tree())
    primary = await add(node, "primary", HANG, clock=clock, timeout=5)
    await add(node, "backup", repeat=ok("from backup"), clock=clock)
    await ask(node, "switch_provider", provider="primary")
    await ask(node, "set_failover", chain=["backup"])
    task = asyncio.ensure_future(ask(node, "completion", messages=user("hi")))
    await settle()
    assert len(primary.calls) == 1
    await clock.advance(4.9)
    assert not task.done()
    await clock.advance(0.1)
    reply = await task
    assert reply["provider"] == "backup" and reply["attempts"] == [
        {"provider": "primary", "error": "timeout"}
    ]
    assert len(primary.calls) == 1


async def test_when_every_provider_fails_the_reply_is_llm_unavailable_not_a_simulated_answer(
    make_node: Any, clock: RecordingClock
) -> None:
    node = await make_node(tree(max_retries=0))
    await add(node, "primary", repeat=DOWN, clock=clock)
    await ask(node, "switch_provider", provider="primary")
    error = await error_of(node, "completion", messages=user("hi"))
    assert (error.code, error.http_status) == ("llm_unavailable", 503)
    assert error.message == "no LLM provider could answer (primary: unavailable)"
    assert error.details["providers"] == [{"provider": "primary", "error": "unavailable"}]

    await add(node, "backup", repeat=AuthError("nope", provider="backup", status_code=401), clock=clock)
    await ask(node, "set_failover", chain=["backup"])
    error = await error_of(node, "completion", messages=user("hi"))
    assert error.message == "no LLM provider could answer (primary: unavailable; backup: auth)"
    assert "upstream down" not in error.message and "nope" not in error.message  # kinds only

    stats = await ask(node, "get_stats")
    assert "simulated" not in stats["providers"]
    assert stats["counters"]["unavailable"] == 2 and stats["usage"]["calls"] == 0


async def test_a_provider_bug_is_reported_not_failed_over(make_node: Any, clock: RecordingClock) -> None:
    node = await make_node(tree())
    _, backup = await failing_primary(node, clock, RuntimeError("adapter bug"))
    error = await error_of(node, "completion", messages=user("hi"))
    assert (error.code, error.http_status) == ("llm_internal_error", 500)
    assert "RuntimeError: adapter bug" in error.message
    assert backup.calls == []


# -- the circuit breaker ----------------------------------------------------------------------------------


async def test_the_breaker_opens_after_consecutive_failures(make_node: Any, clock: RecordingClock) -> None:
    node = await make_node(tree(max_retries=0))
    primary, _ = await failing_primary(node, clock)
    for _ in range(3):
        reply = await ask(node, "completion", messages=user("hi"))
        assert reply["provider"] == "backup"
    state = await circuit(node, "primary")
    assert (state["state"], state["consecutive_failures"], state["opens"]) == ("open", 3, 1)
    assert state["opened_at"] == clock.time()

    reply = await ask(node, "completion", messages=user("hi"))
    assert reply["attempts"] == [{"provider": "primary", "error": "circuit_open"}]
    assert len(primary.calls) == 3  # the open circuit kept the call away
    assert node.metrics.gauge("llm_circuit_open", tenant="acme", provider="primary") == 1.0
    trail = await audit_trail(node, ACME, GLOBEX)
    changes = [e for e in trail if e["event_type"] == "circuit_changed"]
    assert [(e["tenant"], e["data"]["provider"], e["data"]["state"]) for e in changes] == [
        ("acme", "primary", "open")
    ]


async def test_the_breaker_opens_on_the_error_rate_over_its_window(
    make_node: Any, clock: RecordingClock
) -> None:
    node = await make_node(tree(max_retries=0, failure_threshold=10, error_window=6, min_samples=5))
    await failing_primary(node, clock, ok(), DOWN, ok(), DOWN, DOWN)
    for expected in ("primary", "backup", "primary", "backup"):
        assert (await ask(node, "completion", messages=user("hi")))["provider"] == expected
    state = await circuit(node, "primary")
    assert (state["state"], state["error_rate"]) == ("closed", 0.5)  # 2 of 4: not over 50%, too few samples
    await ask(node, "completion", messages=user("hi"))
    state = await circuit(node, "primary")
    # Only two failures in a row, but 3 of the last 5 calls failed.
    assert (state["state"], state["error_rate"], state["samples"]) == ("open", 0.6, 5)
    assert state["consecutive_failures"] == 10  # what the recovery ticks count down


async def test_the_breaker_recovers_gradually_on_timer_ticks(make_node: Any, clock: RecordingClock) -> None:
    node = await make_node(tree(max_retries=0, tick_interval=10))
    await failing_primary(node, clock, DOWN, DOWN, DOWN, ok("recovered"))
    for _ in range(3):
        await ask(node, "completion", messages=user("hi"))
    seen = []
    for _ in range(3):
        await ticks(node, clock, 1)
        state = await circuit(node, "primary")
        seen.append((state["state"], state["consecutive_failures"]))
    assert seen == [("open", 2), ("open", 1), ("half_open", 0)]
    # One trial call decides: it succeeds, the circuit closes with a clean window.
    reply = await ask(node, "completion", messages=user("hi"))
    assert (reply["provider"], reply["response"]["content"]) == ("primary", "recovered")
    state = await circuit(node, "primary")
    assert (state["state"], state["samples"]) == ("closed", 0)
    trail = await audit_trail(node, ACME, GLOBEX)
    assert [e["data"]["state"] for e in trail if e["event_type"] == "circuit_changed"] == [
        "open",
        "half_open",
        "closed",
    ]


async def test_a_failed_trial_reopens_the_circuit_for_a_full_recovery(
    make_node: Any, clock: RecordingClock
) -> None:
    node = await make_node(tree(max_retries=0, tick_interval=10))
    await failing_primary(node, clock)
    for _ in range(3):
        await ask(node, "completion", messages=user("hi"))
    await ticks(node, clock, 3)
    assert (await circuit(node, "primary"))["state"] == "half_open"
    reply = await ask(node, "completion", messages=user("hi"))
    assert reply["attempts"] == [{"provider": "primary", "error": "unavailable"}]
    state = await circuit(node, "primary")
    assert (state["state"], state["consecutive_failures"], state["opens"]) == ("open", 3, 2)


async def test_half_open_lets_one_trial_call_through_at_a_time(make_node: Any, clock: RecordingClock) -> None:
    node = await make_node(tree(max_retries=0, tick_interval=10))
    primary, _ = await failing_primary(node, clock, DOWN, DOWN, DOWN, Slow(5, ok("trial passed")))
    for _ in range(3):
        await ask(node, "completion", messages=user("hi"))
    await ticks(node, clock, 3)
    trial = asyncio.ensure_future(ask(node, "completion", messages=user("hi"), session_id="a"))
    await settle()
    assert len(primary.calls) == 4
    other = await ask(node, "completion", messages=user("hi"), session_id="b")
    assert other["attempts"] == [{"provider": "primary", "error": "circuit_open"}]
    await clock.advance(5)
    assert (await trial)["response"]["content"] == "trial passed"
    assert (await circuit(node, "primary"))["state"] == "closed"


async def test_slow_calls_answer_but_count_against_the_breaker(make_node: Any, clock: RecordingClock) -> None:
    node = await make_node(tree(max_retries=0))
    await add(node, "primary", repeat=Slow(3, ok("slow but fine")), clock=clock, slow_call_seconds=2)
    await add(node, "backup", repeat=ok("from backup"), clock=clock)
    await ask(node, "switch_provider", provider="primary")
    await ask(node, "set_failover", chain=["backup"])
    for _ in range(3):
        task = asyncio.ensure_future(ask(node, "completion", messages=user("hi")))
        await settle()
        await clock.advance(3)
        assert (await task)["response"]["content"] == "slow but fine"
    state = await circuit(node, "primary")
    assert (state["state"], state["last_error"]) == ("open", "slow")
    stats = (await ask(node, "get_stats"))["providers"]["primary"]
    assert (stats["successes"], stats["slow_calls"], stats["avg_latency_s"]) == (3, 3, 3.0)
    assert (await ask(node, "completion", messages=user("hi")))["provider"] == "backup"


async def test_ticks_need_an_admin_and_extra_ticks_do_not_multiply(
    make_node: Any, clock: RecordingClock
) -> None:
    node = await make_node(tree(max_retries=0, tick_interval=10))
    await failing_primary(node, clock)
    for _ in range(3):
        await ask(node, "completion", messages=user("hi"))
    assert await ask(node, "timer_tick", ctx=ACME_USER) == {"status": "accepted"}
    assert (await circuit(node, "primary"))["consecutive_failures"] == 3
    await ask(node, "timer_tick")  # an admin may push recovery by hand
    assert (await circuit(node, "primary"))["consecutive_failures"] == 2
    await clock.advance(10)  # exactly one timer is armed: one more step, not two
    assert (await circuit(node, "primary"))["consecutive_failures"] == 1


async def test_a_dropped_tick_is_re_armed_by_the_next_call_whoever_makes_it(
    make_node: Any, clock: RecordingClock
) -> None:
    node = await make_node(tree(max_retries=0, tick_interval=10))
    await failing_primary(node, clock)
    for _ in range(3):
        await ask(node, "completion", messages=user("hi"))
    for timer_id in list(node._timers):  # the tick in flight is lost (a full mailbox drops timer messages)
        node.cancel_timer(timer_id)
    await ticks(node, clock, 3)
    assert (await circuit(node, "primary"))["consecutive_failures"] == 3  # recovery stalled
    # A plain user's call notices and re-arms; the new ticks carry that user's context and still count.
    await ask(node, "completion", ctx=ACME_USER, messages=user("hi"))
    await ticks(node, clock, 1)
    assert (await circuit(node, "primary"))["consecutive_failures"] == 2


# -- budgets ----------------------------------------------------------------------------------------------


async def test_budgets_end_a_turn_with_budget_exceeded(make_node: Any, clock: RecordingClock) -> None:
    node = await make_node(tree())
    primary = await add(node, "primary", repeat=ok(), clock=clock)  # 15 tokens a call
    await ask(node, "switch_provider", provider="primary")
    reply = await ask(node, "set_budget", scope="session", key="s1", max_tokens=20)
    assert (reply["used"], reply["max_tokens"]) == (0, 20)
    for _ in range(2):  # 0 and 15 used before these: both under 20
        await ask(node, "completion", messages=user("hi"), session_id="s1")
    error = await error_of(node, "completion", messages=user("hi"), session_id="s1")
    assert (error.code, error.http_status) == ("budget_exceeded", 429)
    assert error.details == {"scope": "session", "key": "s1", "used": 30, "limit": 20}
    assert len(primary.calls) == 2  # refused before any provider was called
    assert (await ask(node, "completion", messages=user("hi"), session_id="s2"))["status"] == "ok"

    await ask(node, "set_budget", scope="user", key="*", max_tokens=15)  # every user
    await ask(node, "completion", messages=user("hi"), user_id="carol")
    assert (await error_of(node, "completion", messages=user("hi"), user_id="carol")).details[
        "key"
    ] == "carol"
    await ask(node, "set_budget", scope="user", key="*", max_tokens=None)

    await ask(node, "set_budget", scope="tenant", key="", max_tokens=75)  # 60 used so far
    await ask(node, "completion", messages=user("hi"), session_id="s3")
    assert (await error_of(node, "completion", messages=user("hi"), session_id="s4")).details[
        "scope"
    ] == "tenant"
    await ask(node, "set_budget", scope="tenant", key="", max_tokens=None)
    await ask(node, "set_budget", scope="session", key="s1", max_tokens=None)
    assert (await ask(node, "completion", messages=user("hi"), session_id="s1"))["status"] == "ok"
    assert (await ask(node, "get_stats"))["counters"]["budget_exceeded"] == 3


# -- switching, persistence, tenancy ----------------------------------------------------------------------


async def test_switch_provider_takes_effect_on_the_next_call_and_survives_a_restart(
    make_node: Any, clock: RecordingClock, tmp_path: Path
) -> None:
    data = tmp_path / "gw"
    # The production default: usage per user/session is written behind, and flushed by the graceful stop.
    node = await make_node(tree(max_retries=0, tick_interval=10, usage_flush_interval=1.0), data_dir=data)
    primary, backup = await failing_primary(node, clock)
    for _ in range(3):
        await ask(node, "completion", messages=user("hi"), session_id="s1", user_id="bob")
    reply = await ask(node, "switch_provider", provider="backup", model="b-2")
    assert (reply["scope"], reply["provider"], reply["model"]) == ("tenant", "backup", "b-2")
    reply = await ask(node, "completion", messages=user("hi"), session_id="s1", user_id="bob")
    assert (reply["provider"], reply["model"], reply["attempts"]) == ("backup", "b-2", [])
    assert backup.requests[-1].model == "b-2"
    await node.stop()

    node = await make_node(tree(max_retries=0, tick_interval=10), data_dir=data)
    stats = await ask(node, "get_stats", session_id="s1", user_id="bob")
    assert stats["active"] == {"provider": "backup", "model": "b-2"}
    assert stats["failover"] == ["backup"]
    assert stats["circuits"]["primary"]["state"] == "open"
    assert stats["circuits"]["primary"]["consecutive_failures"] == 3
    assert stats["usage"]["calls"] == 4 and stats["usage_by"]["session"]["calls"] == 4
    assert stats["usage_by"]["user"]["total_tokens"] == 60
    assert stats["providers"]["primary"]["failures"] == 3
    # The restored circuit still keeps calls away, and the new instance's ticks carry on recovering.
    await ask(node, "switch_provider", provider="primary", session_id="s9")
    reply = await ask(node, "completion", messages=user("hi"), session_id="s9")
    assert reply["attempts"] == [{"provider": "primary", "error": "circuit_open"}]
    assert len(primary.calls) == 3
    await ticks(node, clock, 3)
    assert (await circuit(node, "primary"))["state"] == "half_open"


async def test_a_session_override_applies_to_that_session_only(make_node: Any, clock: RecordingClock) -> None:
    node = await make_node(tree())
    await add(node, "primary", repeat=ok("primary"), clock=clock)
    await add(node, "backup", repeat=ok("backup"), clock=clock)
    await ask(node, "switch_provider", provider="primary")
    reply = await ask(node, "switch_provider", provider="backup", session_id="s1", ctx=ACME_USER)
    assert (reply["scope"], reply["provider"], reply["previous"]["provider"]) == (
        "session",
        "backup",
        "primary",
    )
    await ask(node, "switch_provider", provider="backup", model="tiny", session_id="s3")

    async def answered_by(session_id: str) -> tuple[str, str]:
        reply = await ask(node, "completion", messages=user("hi"), session_id=session_id)
        return reply["provider"], reply["model"]

    assert await answered_by("s1") == ("backup", "backup-model")
    assert await answered_by("s2") == ("primary", "primary-model")
    assert await answered_by("s3") == ("backup", "tiny")
    await ask(node, "switch_provider", provider="", session_id="s1")  # drop the override
    assert await answered_by("s1") == ("primary", "primary-model")
    assert (
        await error_of(node, "switch_provider", ctx=ACME_VIEWER, provider="backup", session_id="s1")
    ).code == ("permission_denied")
    trail = await audit_trail(node, ACME, GLOBEX)
    switches = [e for e in trail if e["event_type"] == "provider_switched" and e["session_id"] == "s1"]
    assert [e["data"]["to"]["provider"] for e in switches] == ["backup", "primary"]


async def test_tenants_do_not_share_providers_circuits_usage_or_credentials(
    make_node: Any, clock: RecordingClock
) -> None:
    node = await make_node(tree(max_retries=0))
    await failing_primary(node, clock)
    for _ in range(3):
        await ask(node, "completion", messages=user("hi"))
    await ask(node, "register_credential", phantom_token="acme-openai", api_key="sk-acme-only-0123456789")

    reply = await ask(node, "completion", ctx=GLOBEX, messages=user("hi"))
    assert (reply["provider"], reply["attempts"]) == ("simulated", [])
    error = await error_of(node, "switch_provider", ctx=GLOBEX, provider="primary")
    assert error.code == "not_found" and error.details["known"] == [
        "anthropic",
        "ollama",
        "openai",
        "simulated",
    ]
    error = await error_of(
        node,
        "register_provider",
        ctx=GLOBEX,
        name="stolen",
        kind="openai",
        model="gpt",
        credential="acme-openai",
    )
    assert error.code == "not_found" and error.details["field"] == "credential"
    stats = await ask(node, "get_stats", ctx=GLOBEX)
    assert "primary" not in stats["circuits"] and stats["usage"]["calls"] == 1
    trail = await audit_trail(node, ACME, GLOBEX)
    assert {e["tenant"] for e in trail} == {"acme", "globex"} - {"globex"}  # GLOBEX changed nothing


async def test_provider_clients_are_cached_rebuilt_on_change_and_closed_when_retired(
    make_node: Any, clock: RecordingClock
) -> None:
    node = await make_node(tree())
    primary = await add(node, "primary", repeat=ok(), clock=clock)
    await ask(node, "switch_provider", provider="primary")
    for _ in range(3):
        await ask(node, "completion", messages=user("hi"))
    assert (primary.built, primary.closed) == (1, 0)
    made, options = behavior(repeat=ok("v2"), clock=clock)
    await ask(node, "register_provider", name="primary", kind="gwtest", model="m-2", options=options)
    await settle()
    assert primary.closed == 1  # the old registration's client
    assert (await ask(node, "completion", messages=user("hi")))["response"]["content"] == "v2"
    await ask(node, "switch_provider", provider="simulated")
    await settle()
    assert (made.built, made.closed) == (1, 1)  # closed on switch


# -- permissions and bad arguments ------------------------------------------------------------------------


@pytest.mark.parametrize("ctx", [ACME_USER, ACME_VIEWER], ids=["user", "viewer"])
async def test_only_admins_change_providers_credentials_chains_and_budgets(
    make_node: Any, ctx: RequestContext
) -> None:
    node = await make_node(tree())
    denied = [
        ("register_provider", {"name": "x", "kind": "simulated", "model": "m"}),
        ("register_credential", {"phantom_token": "t", "api_key": "sk-not-allowed-0123"}),
        ("switch_provider", {"provider": "simulated"}),
        ("set_failover", {"chain": []}),
        ("set_budget", {"scope": "tenant", "key": "", "max_tokens": 1}),
    ]
    for op, payload in denied:
        error = await error_of(node, op, ctx=ctx, **payload)
        assert (error.code, error.http_status) == ("permission_denied", 403), op
    assert (await ask(node, "completion", ctx=ctx, messages=user("hi")))["status"] == "ok"
    assert (await ask(node, "get_stats", ctx=ctx))["status"] == "ok"
    trail = await audit_trail(node, ACME, GLOBEX)
    assert [e for e in trail if e["event_type"] != "circuit_changed"] == []


@pytest.mark.parametrize(
    ("op", "payload", "field", "fragment"),
    [
        (
            "register_provider",
            {"name": "x", "kind": "opnai", "model": "gpt"},
            "kind",
            "did you mean 'openai'",
        ),
        (
            "register_provider",
            {"name": "x", "kind": "openai", "model": "gpt", "timeout": 0},
            "timeout",
            "> 0",
        ),
        (
            "register_provider",
            {"name": "x", "kind": "openai", "model": "gpt", "timeout": -5},
            "timeout",
            "> 0",
        ),
        (
            "register_provider",
            {"name": "x", "kind": "openai", "model": "gpt", "timeout": 601},
            "timeout",
            "600",
        ),
        (
            "register_provider",
            {"name": "x", "kind": "openai", "model": "gpt", "timeout": "soon"},
            "timeout",
            "number",
        ),
        ("register_provider", {"name": "x", "kind": "openai", "model": ""}, "model", "model name"),
        (
            "register_provider",
            {"name": "x", "kind": "ollama", "model": "m", "base_url": "ftp://h"},
            "base_url",
            "http",
        ),
        ("register_provider", {"name": "no spaces", "kind": "simulated", "model": "m"}, "name", "letters"),
        (
            "register_provider",
            {"name": "x", "kind": "simulated", "model": "m", "pricing": {"input": -1}},
            "pricing.input",
            ">= 0",
        ),
        (
            "register_provider",
            {"name": "x", "kind": "simulated", "model": "m", "credential": "ghost"},
            "credential",
            "register_credential",
        ),
        ("register_provider", {"name": "x", "kind": "simulated"}, "model", "missing"),
        ("switch_provider", {"provider": "simulatd"}, None, "did you mean 'simulated'"),
        ("switch_provider", {"provider": ""}, None, "Known providers: anthropic, ollama, openai, simulated"),
        ("set_failover", {"chain": ["simulated", "simulated"]}, "chain", "twice"),
        ("set_failover", {"chain": ["ghost"]}, None, "unknown provider 'ghost'"),
        ("set_budget", {"scope": "planet", "key": "", "max_tokens": 1}, "scope", "one of"),
        ("set_budget", {"scope": "session", "key": "", "max_tokens": 1}, "key", "needs a key"),
        ("set_budget", {"scope": "tenant", "key": "", "max_tokens": -1}, "max_tokens", ">= 0"),
        ("completion", {"messages": []}, "messages", "empty"),
        (
            "completion",
            {"messages": [{"role": "wizard", "content": "x"}]},
            "messages.0.role",
            "'system', 'user'",
        ),
        ("completion", {"messages": [{"role": "tool", "content": "x"}]}, "messages.0", "tool_call_id"),
        (
            "completion",
            {"messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
            "max_tokens",
            "greater",
        ),
        (
            "completion",
            {"messages": [{"role": "user", "content": "x"}], "tool": []},
            "tool",
            "unknown argument",
        ),
        ("register_credential", {"phantom_token": "a b", "api_key": "k"}, "phantom_token", "phantom token"),
        ("register_credential", {"phantom_token": "t", "api_key": ""}, "api_key", "empty"),
        ("get_circuit", {"provider": "ghost"}, None, "unknown provider"),
    ],
)
async def test_bad_arguments_get_structured_errors(
    make_node: Any, op: str, payload: dict[str, Any], field: str | None, fragment: str
) -> None:
    node = await make_node(tree())
    error = await error_of(node, op, **payload)
    assert error.code in ("invalid_argument", "not_found") and error.http_status in (404, 422)
    if field is not None:
        assert error.details.get("field") == field
    assert fragment in error.message


async def test_an_api_key_with_whitespace_is_refused_without_being_echoed(make_node: Any) -> None:
    node = await make_node(tree())
    error = await error_of(node, "register_credential", phantom_token="t", api_key="sk-live secret-value")
    assert error.details["field"] == "api_key" and "secret-value" not in repr(error.to_dict())


async def test_usage_per_key_is_written_behind_coalesced_and_flushed_on_stop() -> None:
    clock = ManualClock()
    kv = DictKV()
    spawned: list[asyncio.Task[None]] = []

    def spawn(coro: Any) -> asyncio.Task[None]:
        spawned.append(asyncio.ensure_future(coro))
        return spawned[-1]

    ledger = UsageLedger(kv, spawn=spawn, sleep=clock.sleep, delay=1.0)
    usage = Usage(input_tokens=10, output_tokens=5)
    for _ in range(3):
        await ledger.add([("user", "bob"), ("session", "s1")], usage, 0.5)
    await settle()
    assert kv.puts == [] and len(spawned) == 1  # one flush pending for all three calls
    await clock.advance(1.0)
    assert sorted(kv.puts) == ["llm_usage/session/s1", "llm_usage/user/bob"]
    assert (
        kv.data["llm_usage/user/bob"]["total_tokens"] == 45
        and kv.data["llm_usage/user/bob"]["cost_usd"] == 1.5
    )
    await ledger.add([("cron_job", "nightly")], usage, None)
    await ledger.flush()  # a graceful stop does not wait out the delay
    assert kv.data["llm_usage/cron_job/nightly"]["calls"] == 1
    fresh = UsageLedger(kv, spawn=asyncio.ensure_future, sleep=clock.sleep, delay=1.0)
    assert (await fresh.get("user", "bob"))["calls"] == 3  # a new activation reads what was written


def test_gateway_settings_are_checked_at_start_up() -> None:
    assert GatewaySettings.from_args({"max_retries": 0, "tick_interval": 2.5}).tick_interval == 2.5
    for bad in (
        {"failure_threshold": 0},
        {"max_retries": 1.5},
        {"error_rate_threshold": 1.5},
        {"retries": 2},
    ):
        with pytest.raises(ConfigError):
            GatewaySettings.from_args(bad)


async def test_usage_ledger_over_capacity_with_everything_dirty_keeps_every_increment() -> None:
    clock = ManualClock()
    kv = DictKV()
    ledger = UsageLedger(kv, spawn=asyncio.ensure_future, sleep=clock.sleep, delay=1.0, capacity=8)
    usage = Usage(input_tokens=1, output_tokens=1)
    for i in range(20):  # more distinct keys than the cache holds, all written behind (dirty)
        await ledger.add([("session", f"s{i}")], usage, None)
    await ledger.flush()
    assert all(kv.data[f"llm_usage/session/s{i}"]["calls"] == 1 for i in range(20))
