"""``health_monitor``: polls the health of every service on a timer, never by subscription.

It never subscribes to anything: every tick it reads the node's view of each actor type
(``host.service_status()``: up, instances, restarts, crashes), the store's report on itself
(``host.store_health()``: ``store`` is degraded after a damaged page, an I/O error or a full disk) and,
optionally, the member counts of process groups named in its args, then re-arms its own timer with
``send_after``. Polling converges to the truth on
every tick whatever order failures happened in.

A service is degraded when it is not up, or when it crashed ``crash_threshold`` times or more within the last
``crash_window`` seconds. Each poll writes a snapshot tuple ``["health_snapshot", ts_ms, json]`` in the system
scope (a retention rule ``kind="tuples", selector="health_snapshot"`` can age them out; the monitor also keeps
at most ``max_snapshots``). Changes between ok and degraded are logged and audited in the system tenant.

Args (ActorSpec args / config): ``poll_interval`` (seconds or "5s"; ``poll_interval_ms`` also
works; default 5 s), ``crash_threshold`` (3), ``crash_window`` (60 s), ``groups`` (process groups that must
have members, e.g. ``["svc:audit"]``), ``max_snapshots`` (720), ``backups`` (false: whether admins may take a
backup of the node with ``backup``; it holds every tenant's data).
"""

from __future__ import annotations

import json
import logging
from collections import deque
from typing import Any

from minihermes.runtime import (
    SYSTEM_TENANT,
    ActorArgs,
    Duration,
    GenServer,
    PermissionDenied,
    call,
    cast,
    current_context,
    parse_duration,
)

from .audit_event import fire_audit

log = logging.getLogger("minihermes.agent.health_monitor")

SNAPSHOT = "health_snapshot"
DEFAULT_INTERVAL = 5.0
MIN_INTERVAL = 0.05
MAX_INTERVAL = 300.0


class HealthMonitor(GenServer):
    """Shared service: ``get_health()`` -> ``{status, group_health, healthy, degraded}``."""

    class Args(ActorArgs):
        poll_interval: Duration = DEFAULT_INTERVAL
        poll_interval_ms: float | None = None
        crash_threshold: int = 3
        crash_window: Duration = 60.0
        groups: list[str] = []
        max_snapshots: int = 720
        backups: bool = False
        """Admins may take backups through ``backup`` (they cover every tenant: on for one owner)."""

    interval: float
    crash_threshold: int
    crash_window: float
    groups: list[str]
    max_snapshots: int

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.interval = _interval(args)
        self.crash_threshold = max(1, int(args.get("crash_threshold", 3)))
        self.crash_window = parse_duration(args.get("crash_window", 60.0))
        self.groups = [str(g) for g in args.get("groups", [])]
        self.max_snapshots = max(1, int(args.get("max_snapshots", 720)))
        self.backups = bool(args.get("backups", False))
        self.poll_count = 0
        self.last_poll_at = 0.0
        self.report: dict[str, Any] = {}
        # (time, crashes per service) samples within the crash window; the oldest is the baseline
        self.samples: deque[tuple[float, dict[str, int]]] = deque()
        self.samples.append((self.host.now(), _crash_counts(self.host.service_status())))
        self.snapshots = len(await self.host.tuples.read_all([SNAPSHOT, None, None]))
        self.timer = self.host.send_after(self.interval, "poll_tick")
        self.host.join("svc:health_monitor")

    @cast(access="admin")
    async def poll_tick(self) -> None:
        """One poll (the monitor's own timer sends it; it re-arms itself). Ignored from tenant callers, whose
        scope is not where snapshots live."""
        if current_context().tenant != SYSTEM_TENANT:
            return
        self.host.cancel_timer(self.timer)
        try:
            before = set(self.report.get("degraded", ())) if self.report else set()
            self.report = self._evaluate()
            self.poll_count += 1
            self.last_poll_at = self.host.now()
            await self._snapshot()
            self._announce(before, set(self.report["degraded"]))
        finally:
            self.timer = self.host.send_after(self.interval, "poll_tick")

    @call(access="read")
    def get_health(self) -> dict[str, Any]:
        """The last poll's view: overall status, per-service health, and the degraded services' names."""
        report = self.report or self._evaluate(record=False)
        return {
            **report,
            "poll_count": self.poll_count,
            "last_poll_at": self.last_poll_at or None,
            "poll_interval": self.interval,
        }

    @call(access="admin")
    async def backup(self, label: str = "") -> dict[str, Any]:
        """A backup of the node's store and data dir, taken while it serves, into the store's configured
        backups folder (``backups_dir``; no path is taken: ``label`` only names it), the newest
        ``scheduled_backups`` kept: what a scheduler calls over HTTP (``minihermes call health_monitor backup``).
        Only where the operator turned it on (``backups = true``; on for one owner without auth)."""
        if not self.backups:
            raise PermissionDenied(
                "backups through the node are off: they hold every tenant's data, so the operator turns them "
                "on (health_monitor args backups = true) or runs `minihermes backup` on the node's machine"
            )
        return await self.host.backup_store(label)

    def _evaluate(self, record: bool = True) -> dict[str, Any]:
        now = self.host.now()
        status = self.host.service_status()
        crashes = _crash_counts(status)
        if record:
            self.samples.append((now, crashes))
            while len(self.samples) > 1 and self.samples[1][0] <= now - self.crash_window:
                self.samples.popleft()
        baseline = self.samples[0][1]
        health: dict[str, dict[str, Any]] = {}
        for name, st in sorted(status.items()):
            # a lower count than the baseline means the counters were reset: count from zero
            recent = crashes[name] - baseline.get(name, 0)
            recent = crashes[name] if recent < 0 else recent
            reason = ""
            if not st.get("up"):
                reason = "down"
            elif recent >= self.crash_threshold:
                reason = f"crashed {recent} times in the last {self.crash_window:g}s"
            health[name] = {
                "status": "degraded" if reason else "ok",
                "reason": reason,
                "up": bool(st.get("up")),
                "kind": st.get("kind"),
                "behavior": st.get("behavior"),
                "instances": st.get("instances", 0),
                "restarts": st.get("restarts", 0),
                "crashes": crashes[name],
                "recent_crashes": recent,
            }
        for group in self.groups:
            members = len(self.host.members(group))
            health[group] = {
                "status": "ok" if members else "degraded",
                "reason": "" if members else "no members",
                "members": members,
            }
        store = self.host.store_health()
        if store is not None:  # a damaged page or a full disk: the store is a service too
            health["store"] = {
                "status": store["status"],
                "reason": store.get("reason", ""),
                "errors": store.get("errors", 0),
            }
        degraded = sorted(n for n, h in health.items() if h["status"] == "degraded")
        return {
            "status": "degraded" if degraded else "ok",
            "group_health": health,
            "healthy": len(health) - len(degraded),
            "degraded": degraded,
            "checked_at": now,
        }

    async def _snapshot(self) -> None:
        summary = {
            "status": self.report["status"],
            "degraded": self.report["degraded"],
            "group_health": {
                n: {k: h[k] for k in ("status", "reason", "instances", "recent_crashes", "members") if k in h}
                for n, h in self.report["group_health"].items()
            },
        }
        await self.host.tuples.write(
            [SNAPSHOT, self.host.now_ms(), json.dumps(summary, separators=(",", ":"))]
        )
        self.snapshots += 1
        while self.snapshots > self.max_snapshots:
            if await self.host.tuples.take([SNAPSHOT, None, None]) is None:
                self.snapshots = 0
                break
            self.snapshots -= 1

    def _announce(self, before: set[str], after: set[str]) -> None:
        for name in sorted(after - before):
            reason = self.report["group_health"][name]["reason"]
            log.warning("service %s degraded: %s", name, reason)
            fire_audit(
                self.host, "health_degraded", f"service={name} reason={reason}", data={"service": name}
            )
        for name in sorted(before - after):
            log.info("service %s recovered", name)
            fire_audit(self.host, "health_recovered", f"service={name}", data={"service": name})


def _crash_counts(status: dict[str, dict[str, Any]]) -> dict[str, int]:
    return {name: int(st.get("crashes", 0)) for name, st in status.items()}


def _interval(args: dict[str, Any]) -> float:
    if "poll_interval" in args:
        value = parse_duration(args["poll_interval"])
    elif "poll_interval_ms" in args:
        value = float(args["poll_interval_ms"]) / 1000.0
    else:
        value = DEFAULT_INTERVAL
    return min(max(value, MIN_INTERVAL), MAX_INTERVAL)


__all__ = ["HealthMonitor"]
