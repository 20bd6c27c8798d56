"""A small demo application for ``minihermes serve``: a few actors that exercise the runtime and log what
they do (a counter, a per-session notebook, a lifecycle FSM, a heartbeat with a durable daily reminder, and a
three-step workflow)."""

from __future__ import annotations

from typing import Any

from minihermes.runtime import GenFSM, GenServer, Workflow, call, cast, register_actor_type, state


class Counter(GenServer):
    """A durable counter (checkpointed every message)."""

    count: int = state(default=0)

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.host.join("svc:counter")
        self.host.register("counter", ["add", "get"])
        self.host.log.info("counter %s starts at %d", actor_id, self.count)

    @call
    def add(self, amount: int = 1) -> dict[str, Any]:
        self.count += amount
        return {"status": "ok", "count": self.count}

    @call
    def get(self) -> dict[str, Any]:
        return {"status": "ok", "count": self.count}


class Notebook(GenServer):
    """One instance per session id (a virtual actor): notes that survive restarts."""

    notes: list[str] = state(default_factory=list)

    @call
    def append(self, session_id: str, text: str) -> dict[str, Any]:
        self.notes.append(text)
        return {"status": "ok", "session_id": session_id, "notes": len(self.notes)}

    @call
    def read(self, session_id: str) -> dict[str, Any]:
        return {"status": "ok", "session_id": session_id, "notes": list(self.notes)}


class Lifecycle(GenFSM):
    """An agent's lifecycle: idle -> processing -> tool_executing -> responding -> idle."""

    states = ("idle", "processing", "tool_executing", "responding")
    initial = "idle"
    transitions = {
        "idle": {"processing", "tool_executing"},
        "processing": {"tool_executing", "responding", "idle"},
        "tool_executing": {"processing", "idle"},
        "responding": {"idle"},
    }


class Heartbeat(GenServer):
    """Ticks with send_after and keeps a durable daily reminder."""

    ticks: int = state(default=0)
    daily: int = state(default=0)

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.interval = float(args.get("interval_seconds", 30))
        self.host.send_after(self.interval, "tick")
        if not await self.host.list_reminders():
            await self.host.set_reminder("daily", "daily_tick", every=86400.0)

    @cast
    def tick(self) -> None:
        self.ticks += 1
        self.host.incr_counter("heartbeat_ticks_total")
        self.host.log.info("heartbeat tick %d", self.ticks)
        self.host.send_after(self.interval, "tick")

    @cast
    def daily_tick(self) -> None:
        self.daily += 1
        self.host.log.info("daily reminder fired (%d so far)", self.daily)

    @call
    def get(self) -> dict[str, Any]:
        return {"status": "ok", "ticks": self.ticks, "daily": self.daily}


class Pipeline(Workflow):
    """fetch -> transform -> store, each step checkpointed."""

    async def execute(self, text: str) -> dict[str, Any]:
        words = await self.step("fetch", lambda: text.split())
        upper = await self.step("transform", lambda: [w.upper() for w in words])
        await self.step("store", self.host.kv.put, f"pipeline:{self.actor_id}", upper)
        return {"words": len(upper)}


for _role, _cls in {
    "demo.counter": Counter,
    "demo.notebook": Notebook,
    "demo.lifecycle": Lifecycle,
    "demo.heartbeat": Heartbeat,
    "demo.pipeline": Pipeline,
}.items():
    register_actor_type(_role, _cls)

DEMO_CONFIG = """
[node]
id = "demo-node"

[retention]
interval = "1h"
[[retention.rules]]
kind = "events"
max_age = "90d"
[[retention.rules]]
kind = "dead_letters"
max_age = "30d"
[[retention.rules]]
kind = "quarantine"
max_age = "90d"

[supervisor]
strategy = "one_for_one"
max_restarts = 10
max_restart_window_seconds = 60

[[supervisor.children]]
name = "counter"
role = "demo.counter"
behavior_kind = "GenServer"

[[supervisor.children]]
name = "notebook"
role = "demo.notebook"
behavior_kind = "GenServer"
facets = [
  { type = "virtual_actor", priority = 100, config = { idle_timeout = "10m", key_field = "session_id" } },
  { type = "durability", priority = 90, config = { checkpoint_interval = 1 } },
]

[[supervisor.children]]
name = "lifecycle"
role = "demo.lifecycle"
behavior_kind = "GenFSM"
facets = [{ type = "tenancy", config = { per_tenant = true } }]

[[supervisor.children]]
name = "heartbeat"
role = "demo.heartbeat"
args = { interval_seconds = 30 }

[[supervisor.children]]
name = "pipeline"
role = "demo.pipeline"
behavior_kind = "Workflow"
facets = [{ type = "virtual_actor", config = { idle_timeout = "10m" } }]
"""
