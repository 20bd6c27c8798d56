"""Load shedding at the edge: a saturated gate answers 503 + Retry-After, a tenant over its share 429, health
keeps answering, nobody waits past their timeout, and everything is 200 again once the load is gone.

Requests are held inside an actor whose op waits on an event the test sets: no sleeps, no timing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from minihermes.api import AuthConfig, SheddingConfig, create_app
from minihermes.api._shedding import GATE_KEY, Shed, ShedGate
from minihermes.runtime import ActorSpec, AppConfig, ConfigError, GenServer, Node, SupervisorSpec, call
from minihermes.runtime.store import open_store

from .conftest import PERMISSIONS, SECRET, bearer, token

HS = AuthConfig(jwt_secret=SECRET)
ACME = bearer(token("acme", "alice"))
GLOBEX = bearer(token("globex", "gina"))
HOLD = "/api/v1/actors/held/hold"
PING = "/api/v1/actors/held/ping"

RELEASE: dict[str, asyncio.Event] = {}
ENTERED: list[str] = []


def _event(key: str) -> asyncio.Event:
    return RELEASE.setdefault(key, asyncio.Event())


class Held(GenServer):
    """One instance per session_id; ``hold`` answers once the test releases its key."""

    @call
    async def hold(self, session_id: str) -> dict[str, Any]:
        ENTERED.append(session_id)
        await _event(session_id).wait()
        return {"released": session_id}

    @call
    def ping(self, session_id: str) -> dict[str, Any]:
        return {"pong": session_id}


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    RELEASE.clear()
    ENTERED.clear()
    tree = SupervisorSpec(
        name="root", children=[ActorSpec("held", Held, virtual=True, key_field="session_id")]
    )
    n = Node(open_store("sqlite", data_dir=str(tmp_path / "data")), tree)
    await n.start()
    yield n
    for event in RELEASE.values():
        event.set()
    await n.stop(deadline=5)


def serve(node: Node, **shedding: Any) -> tuple[httpx.AsyncClient, ShedGate]:
    app = create_app(
        node,
        HS,
        permissions=PERMISSIONS.extended({("held", "hold"): "read", ("held", "ping"): "read"}),
        shedding=SheddingConfig(**shedding),
    )
    gate = app.state.minihermes.extras[GATE_KEY]
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1", timeout=30
    )
    return client, gate


def hold(
    c: httpx.AsyncClient, key: str, headers: dict[str, str] = ACME, query: str = ""
) -> asyncio.Task[Any]:
    return asyncio.ensure_future(c.post(HOLD + query, json={"session_id": key}, headers=headers))


async def test_a_saturated_gate_answers_503_with_retry_after_and_recovers(node: Node) -> None:
    c, gate = serve(node, max_concurrent=2, max_queue=0, tenant_max_share=1.0)
    async with c:
        held = [hold(c, "a1"), hold(c, "a2")]
        await gate.wait_until(lambda g: g.running == 2)

        r = await c.post(PING, json={"session_id": "p"}, headers=ACME)
        assert r.status_code == 503
        assert int(r.headers["retry-after"]) >= 1
        error = r.json()["error"]
        assert error["code"] == "overloaded" and "retry" in error["message"]
        assert error["retry_after"] == int(r.headers["retry-after"])
        assert r.headers["x-request-id"]

        health = await c.get("/healthz")  # bypasses the gate
        assert health.status_code == 200 and health.json() == {"status": "ok"}
        assert (await c.get("/metrics", headers=ACME)).status_code == 200
        assert node.metrics.counter("http_shed_total", code="overloaded", tenant="acme") == 1

        _event("a1").set()
        _event("a2").set()
        for r in await asyncio.gather(*held):
            assert r.status_code == 200, r.text
        assert gate.running == 0 and gate.waiting == 0
        for i in range(4):  # recovered at once: nothing left queued, no cool-down
            r = await c.post(PING, json={"session_id": f"p{i}"}, headers=ACME)
            assert r.status_code == 200 and r.json() == {"pong": f"p{i}"}


async def test_a_tenant_over_its_share_gets_429_while_another_tenant_passes(node: Node) -> None:
    c, gate = serve(node, max_concurrent=4, max_queue=0, tenant_max_share=0.5)
    assert gate.tenant_cap == 2
    async with c:
        other = hold(c, "g0", GLOBEX)  # the share applies while another tenant has requests in
        held = [hold(c, "a1"), hold(c, "a2")]
        await gate.wait_until(lambda g: g.held("acme") == 2 and g.held("globex") == 1)

        r = await c.post(PING, json={"session_id": "a3"}, headers=ACME)
        assert r.status_code == 429
        assert r.json()["error"]["code"] == "tenant_over_share"
        assert int(r.headers["retry-after"]) >= 1

        r = await c.post(PING, json={"session_id": "g1"}, headers=GLOBEX)
        assert r.status_code == 200 and r.json() == {"pong": "g1"}
        assert (await c.get("/healthz")).status_code == 200

        for key in ("a1", "a2", "g0"):
            _event(key).set()
        assert [r.status_code for r in await asyncio.gather(*held, other)] == [200, 200, 200]
        r = await c.post(PING, json={"session_id": "a3"}, headers=ACME)
        assert r.status_code == 200


async def test_a_lone_tenant_uses_the_whole_gate_until_another_tenant_comes(node: Node) -> None:
    # issue 23: with the share enforced for a lone tenant, it never got more than half the node
    c, gate = serve(node, max_concurrent=4, max_queue=0, tenant_max_share=0.5)
    assert gate.tenant_cap == 2
    async with c:
        held = [hold(c, f"a{i}") for i in range(4)]
        await gate.wait_until(lambda g: g.running == 4)  # all four slots, twice its share: nobody else waits
        assert gate.held("acme") == 4
        r = await c.post(PING, json={"session_id": "a5"}, headers=ACME)
        assert r.status_code == 503 and r.json()["error"]["code"] == "overloaded"  # full, not over share

        _event("a0").set()
        assert (await held[0]).status_code == 200
        other = hold(c, "g1", GLOBEX)
        await gate.wait_until(lambda g: g.held("globex") == 1)
        r = await c.post(PING, json={"session_id": "a6"}, headers=ACME)  # now two tenants: the share holds
        assert r.status_code == 429 and r.json()["error"]["code"] == "tenant_over_share"
        assert node.metrics.counter("http_shed_total", code="tenant_over_share", tenant="acme") == 1

        for key in ("a1", "a2", "a3", "g1"):
            _event(key).set()
        assert [r.status_code for r in await asyncio.gather(*held[1:], other)] == [200] * 4
        assert (gate.running, gate.waiting) == (0, 0)


async def test_a_newcomer_finds_room_in_a_queue_a_lone_tenant_filled(node: Node) -> None:
    c, gate = serve(node, max_concurrent=2, max_queue=2, tenant_max_share=0.5)
    assert gate.tenant_cap == 2
    async with c:
        running = [hold(c, "a1"), hold(c, "a2")]
        await gate.wait_until(lambda g: g.running == 2)
        queued = [hold(c, "a3")]
        await gate.wait_until(lambda g: g.waiting == 1)
        queued.append(hold(c, "a4"))
        await gate.wait_until(lambda g: g.waiting == 2)  # the whole gate, queue included

        newcomer = hold(c, "g1", GLOBEX)  # the queue is full: acme's newest waiter makes room
        evicted = await queued[1]
        assert evicted.status_code == 429 and evicted.json()["error"]["code"] == "tenant_over_share"
        assert "retry-after" in evicted.headers
        await gate.wait_until(lambda g: g.held("globex") == 1 and g.waiting == 2)

        _event("a1").set()  # globex runs nothing: its request starts before acme's older a3
        await gate.wait_until(lambda g: g.waiting == 1)
        assert gate.held("globex") == 1 and not queued[0].done()
        for key in ("a2", "a3", "g1"):
            _event(key).set()
        for task in (*running, queued[0], newcomer):
            assert (await task).status_code == 200
        assert ENTERED == ["a1", "a2", "g1", "a3"]
        assert (gate.running, gate.waiting) == (0, 0)


async def test_a_freed_slot_goes_to_the_waiting_tenant_with_fewest_running(node: Node) -> None:
    c, gate = serve(node, max_concurrent=2, max_queue=4, tenant_max_share=1.0)
    async with c:
        running = [hold(c, "a1"), hold(c, "a2")]
        await gate.wait_until(lambda g: g.running == 2)
        queued_acme = hold(c, "a3")
        await gate.wait_until(lambda g: g.waiting == 1)
        queued_globex = hold(c, "g1", GLOBEX)
        await gate.wait_until(lambda g: g.waiting == 2)

        _event("a1").set()  # acme still runs a2; globex runs nothing: g1 starts before a3, queued earlier
        await gate.wait_until(lambda g: g.waiting == 1)
        assert (await running[0]).status_code == 200
        assert gate.held("globex") == 1 and not queued_acme.done()

        for key in ("a2", "a3", "g1"):
            _event(key).set()
        for task in (running[1], queued_acme, queued_globex):
            assert (await task).status_code == 200
        assert ENTERED == ["a1", "a2", "g1", "a3"]
        assert gate.running == 0 and gate.waiting == 0


async def test_a_request_that_cannot_start_in_time_is_503_not_a_long_wait(node: Node) -> None:
    c, gate = serve(node, max_concurrent=1, max_queue=8, queue_timeout=0.05, tenant_max_share=1.0)
    async with c:
        first = hold(c, "a1")
        await gate.wait_until(lambda g: g.running == 1)
        r = await c.post(PING, json={"session_id": "p"}, headers=ACME)
        assert r.status_code == 503
        assert r.json()["error"]["code"] == "overloaded" and "could not start" in r.json()["error"]["message"]
        assert "retry-after" in r.headers
        assert gate.waiting == 0  # the refused request left the queue
        _event("a1").set()
        assert (await first).status_code == 200


async def test_a_reply_later_than_the_timeout_is_504_at_the_deadline_and_frees_the_slot(node: Node) -> None:
    c, gate = serve(node, max_concurrent=1, max_queue=0)
    async with c:
        r = await c.post(HOLD + "?timeout=0.05", json={"session_id": "slow"}, headers=ACME)
        assert r.status_code == 504 and r.json()["error"]["code"] == "timeout"
        assert gate.running == 0
        r = await c.post(PING, json={"session_id": "p"}, headers=ACME)
        assert r.status_code == 200


async def test_unauthenticated_requests_skip_the_gate_and_get_401(node: Node) -> None:
    c, gate = serve(node, max_concurrent=1, max_queue=0)
    async with c:
        first = hold(c, "a1")
        await gate.wait_until(lambda g: g.running == 1)
        r = await c.post(PING, json={"session_id": "p"})
        assert r.status_code == 401
        _event("a1").set()
        assert (await first).status_code == 200


async def test_shedding_can_be_turned_off(node: Node) -> None:
    app = create_app(node, HS, permissions=PERMISSIONS, shedding=SheddingConfig(enabled=False))
    assert GATE_KEY not in app.state.minihermes.extras


def test_settings_come_from_the_http_table_of_the_app_config() -> None:
    cfg = AppConfig.from_toml(
        '[http]\nmax_concurrent_requests = 8\nmax_queued_requests = 0\nqueue_timeout = "2s"\n'
        "tenant_max_share = 0.25\n"
    )
    http = cfg.model.http
    assert (http.load_shedding, http.max_concurrent_requests, http.max_queued_requests) == (True, 8, 0)
    assert (http.queue_timeout, http.tenant_max_share) == (2.0, 0.25)
    with pytest.raises(ConfigError, match=r"http\.queue_timeout"):
        AppConfig.from_toml('[http]\nqueue_timeout = "0s"\n')
    with pytest.raises(ConfigError, match=r"http\.max_concurrent_requests"):
        AppConfig.from_toml("[http]\nmax_concurrent_requests = 0\n")
    concurrent, queue = SheddingConfig().limits()
    assert concurrent >= 32 and queue == 4 * concurrent
    with pytest.raises(ValueError):
        SheddingConfig(tenant_max_share=0)


async def test_a_waiter_cancelled_as_a_slot_frees_leaves_the_gate_consistent() -> None:
    # The deadline cancels the waiting task (and with it the future it awaits) and, in the same loop pass, a
    # slot frees: the slot must go to the next live waiter, never to the cancelled one.
    gate = ShedGate(SheddingConfig(max_concurrent=1, max_queue=4, tenant_max_share=1.0))
    await gate.acquire("acme", 1.0)
    gone = asyncio.ensure_future(gate.acquire("acme", 30.0))
    live = asyncio.ensure_future(gate.acquire("globex", 30.0))
    await gate.wait_until(lambda g: g.waiting == 2)
    gone.cancel()
    gate.release("acme", 0.0)  # before the cancelled task ran its cleanup
    with pytest.raises(asyncio.CancelledError):
        await gone
    await live
    assert (gate.running, gate.waiting, gate.held("acme"), gate.held("globex")) == (1, 0, 0, 1)
    gate.release("globex", 0.0)
    assert (gate.running, gate.waiting) == (0, 0)


async def test_a_quiet_tenant_is_not_refused_for_a_busy_tenants_backlog() -> None:
    # acme fills every slot and has a backlog; at its recent pace a newcomer at the back would wait too long,
    # but globex runs nothing, so its request goes next (fair granting) and is queued, not refused.
    gate = ShedGate(SheddingConfig(max_concurrent=2, max_queue=8, queue_timeout=1.0, tenant_max_share=1.0))
    for _ in range(2):
        await gate.acquire("acme", 1.0)
    backlog = [asyncio.ensure_future(gate.acquire("acme", 30.0)) for _ in range(4)]
    await gate.wait_until(lambda g: g.waiting == 4)
    gate._service = 1.0  # one request holds a slot for 1 s: a slot frees every 0.5 s
    assert gate.ahead_of("acme") == 4 and gate.ahead_of("globex") == 0
    with pytest.raises(Shed) as refused:
        await gate.acquire("acme", 1.0)  # 5th in line: 2.5 s > 1 s
    assert refused.value.status == 503 and refused.value.retry_after >= 1
    quiet = asyncio.ensure_future(gate.acquire("globex", 1.0))  # next in line: 0.5 s
    await gate.wait_until(lambda g: g.waiting == 5)
    gate.release("acme", 1.0)
    await quiet
    assert gate.held("globex") == 1 and gate.waiting == 4
    for task in backlog:
        task.cancel()
    await asyncio.gather(*backlog, return_exceptions=True)


async def test_the_share_binds_a_tenant_only_while_another_holds_requests() -> None:
    gate = ShedGate(SheddingConfig(max_concurrent=4, max_queue=4, tenant_max_share=0.25))
    assert gate.tenant_cap == 2
    for _ in range(4):
        await gate.acquire("acme", 1.0)  # a lone tenant: every slot, twice over its share
    backlog = [asyncio.ensure_future(gate.acquire("acme", 30.0)) for _ in range(3)]
    await gate.wait_until(lambda g: g.waiting == 3)
    assert gate.held("acme") == 7 and not gate.others_hold("acme")

    quiet = asyncio.ensure_future(gate.acquire("globex", 30.0))  # room left in the queue: it waits
    await gate.wait_until(lambda g: g.held("globex") == 1)
    assert gate.others_hold("acme") and gate.others_hold("globex")
    with pytest.raises(Shed) as over:
        await gate.acquire("acme", 1.0)
    assert (over.value.status, over.value.code) == (429, "tenant_over_share")

    second = asyncio.ensure_future(gate.acquire("globex", 30.0))  # a full queue: acme's newest gives way
    with pytest.raises(Shed) as evicted:
        await backlog[2]
    assert (evicted.value.status, evicted.value.code) == (429, "tenant_over_share")
    await gate.wait_until(lambda g: g.held("globex") == 2)
    with pytest.raises(Shed) as at_share:  # globex at its own share now: refused like acme
        await gate.acquire("globex", 1.0)
    assert at_share.value.code == "tenant_over_share"

    gate.release("acme", 0.0)
    await quiet  # the freed slot goes to the tenant running nothing
    assert (gate.running, gate.waiting, gate.held("acme"), gate.held("globex")) == (4, 3, 5, 2)
    for task in (*backlog[:2], second):
        task.cancel()
    await asyncio.gather(*backlog[:2], second, return_exceptions=True)
    assert (gate.waiting, gate.held("acme"), gate.held("globex")) == (0, 3, 1)


async def test_a_lone_tenant_is_not_refused_for_its_share_at_full_load() -> None:
    gate = ShedGate(SheddingConfig(max_concurrent=2, max_queue=0, tenant_max_share=0.5))
    assert gate.tenant_cap == 1
    await gate.acquire("acme", 1.0)
    await gate.acquire("acme", 1.0)  # past its share: alone, it may
    with pytest.raises(Shed) as full:
        await gate.acquire("acme", 1.0)
    assert (full.value.status, full.value.code) == (503, "overloaded")
    with pytest.raises(Shed) as newcomer:  # no queue to make room in: the gate is simply full
        await gate.acquire("globex", 1.0)
    assert newcomer.value.code == "overloaded"
    gate.release("acme", 0.0)
    await gate.acquire("globex", 1.0)
    with pytest.raises(Shed) as over:
        await gate.acquire("acme", 1.0)
    assert (over.value.status, over.value.code) == (429, "tenant_over_share")
