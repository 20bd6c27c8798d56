"""health_monitor: timer-driven polling of every service, crash-window degradation, snapshots, audit."""

from __future__ import annotations

import json
from typing import Any

import pytest

from minihermes.agent.audit_event import AuditEvent
from minihermes.agent.health_monitor import HealthMonitor
from minihermes.runtime import SYSTEM_CONTEXT, SYSTEM_SCOPE, ActorCrashed, ActorSpec, GenServer, call

from .conftest import ACME


class Flaky(GenServer):
    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.host.join("svc:flaky")

    @call
    def ping(self) -> dict[str, Any]:
        return {"status": "ok"}

    @call
    def crash(self) -> None:
        raise RuntimeError("boom")


def specs(**args: Any) -> list[ActorSpec]:
    return [
        ActorSpec("audit_event", AuditEvent, per_tenant=True),
        ActorSpec("flaky", Flaky),
        ActorSpec("fragile", Flaky, restart="temporary"),
        ActorSpec("health_monitor", HealthMonitor, args={"poll_interval": 5, **args}),
    ]


async def tick(node, clock, times: int = 1) -> None:
    """Advance one poll interval and let the poll run (a call behind it in the same mailbox)."""
    for _ in range(times):
        await clock.advance(5)
        await node.ask("health_monitor", "get_health")


async def snapshots(node) -> list[tuple[Any, ...]]:
    return await node.store.tuples.read_all(SYSTEM_SCOPE, ["health_snapshot", None, None])


async def test_healthy_tree_reports_ok_before_and_after_polls(make_node, clock):
    node = await make_node(specs())
    h = await node.ask("health_monitor", "get_health", ctx=ACME)
    assert h["status"] == "ok" and h["degraded"] == [] and h["poll_count"] == 0
    assert set(h["group_health"]) == {"audit_event", "flaky", "fragile", "health_monitor", "store"}
    assert h["healthy"] == 5
    await clock.advance(5)
    h = await node.ask("health_monitor", "get_health", ctx=ACME)
    assert h["poll_count"] == 1 and h["status"] == "ok"
    await tick(node, clock, 2)
    assert (await node.ask("health_monitor", "get_health"))["poll_count"] == 3
    snaps = await snapshots(node)
    assert len(snaps) == 3 and json.loads(str(snaps[-1][2]))["status"] == "ok"
    assert snaps[0][1] < snaps[1][1] < snaps[2][1]  # ts_ms keys, oldest first


async def test_a_service_that_is_down_is_degraded(make_node, clock):
    node = await make_node(specs())
    with pytest.raises(ActorCrashed):
        await node.ask("fragile", "crash")  # temporary: not restarted
    await clock.advance(5)
    h = await node.ask("health_monitor", "get_health")
    assert h["status"] == "degraded" and h["degraded"] == ["fragile"]
    assert h["group_health"]["fragile"]["reason"] == "down"
    assert h["healthy"] == 4


async def test_a_degraded_store_is_a_degraded_service(make_node, clock):
    node = await make_node(specs())
    node.store._engine.health.set_fault("io", "disk I/O error")  # as a failed read would note it
    await clock.advance(5)
    h = await node.ask("health_monitor", "get_health")
    assert h["status"] == "degraded" and h["degraded"] == ["store"]
    assert h["group_health"]["store"]["reason"] == "io: disk I/O error"


async def test_repeated_crashes_degrade_then_recover_after_the_window(make_node, clock):
    node = await make_node(specs(crash_threshold=3, crash_window=60))
    for _ in range(3):
        with pytest.raises(ActorCrashed):
            await node.ask("flaky", "crash")
        await node.ask("flaky", "ping")  # restarted
    await clock.advance(5)
    h = await node.ask("health_monitor", "get_health")
    assert h["degraded"] == ["flaky"] and h["group_health"]["flaky"]["recent_crashes"] == 3
    assert h["group_health"]["flaky"]["up"] is True
    await tick(node, clock, 13)
    h = await node.ask("health_monitor", "get_health")
    assert h["status"] == "ok" and h["group_health"]["flaky"]["recent_crashes"] == 0
    assert h["group_health"]["flaky"]["crashes"] == 3


async def test_degradation_and_recovery_are_audited_in_the_system_tenant(make_node, clock):
    node = await make_node(specs(crash_threshold=1, crash_window=10))
    with pytest.raises(ActorCrashed):
        await node.ask("flaky", "crash")
    await clock.advance(5)
    await tick(node, clock, 3)
    events = (await node.ask("audit_event", "query_events", {}, ctx=SYSTEM_CONTEXT))["events"]
    assert [(e["event_type"], e["data"]["service"]) for e in events] == [
        ("health_degraded", "flaky"),
        ("health_recovered", "flaky"),
    ]
    assert (await node.ask("audit_event", "query_events", {}, ctx=ACME))["events"] == []


async def test_required_process_groups(make_node, clock):
    node = await make_node(specs(groups=["svc:flaky", "svc:nobody"]))
    await clock.advance(5)
    h = await node.ask("health_monitor", "get_health")
    assert h["group_health"]["svc:flaky"] == {"status": "ok", "reason": "", "members": 2}
    assert h["degraded"] == ["svc:nobody"]


async def test_snapshots_are_bounded(make_node, clock):
    node = await make_node(specs(max_snapshots=3))
    await tick(node, clock, 6)
    snaps = await snapshots(node)
    assert len(snaps) == 3


async def test_tenant_callers_cannot_drive_the_poll(make_node, clock):
    node = await make_node(specs())
    await node.ask("health_monitor", "poll_tick", ctx=ACME)
    await node.ask("health_monitor", "get_health", ctx=ACME)
    assert (await node.ask("health_monitor", "get_health"))["poll_count"] == 0
    assert await node.store.tuples.read_all(ACME.scope, ["health_snapshot", None, None]) == []
    await clock.advance(5)
    assert (await node.ask("health_monitor", "get_health"))["poll_count"] == 1


async def test_a_system_poll_does_not_fork_the_timer(make_node, clock):
    node = await make_node(specs())
    await node.ask("health_monitor", "poll_tick", ctx=SYSTEM_CONTEXT)
    await node.ask("health_monitor", "get_health")
    await tick(node, clock, 4)
    assert (await node.ask("health_monitor", "get_health"))["poll_count"] == 5


def test_interval_arguments():
    from minihermes.agent.health_monitor import _interval

    assert _interval({}) == 5.0
    assert _interval({"poll_interval": "30s"}) == 30.0
    assert _interval({"poll_interval_ms": 2000}) == 2.0
    assert _interval({"poll_interval": "1h"}) == 300.0
