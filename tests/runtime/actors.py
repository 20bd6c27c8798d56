"""Actor classes shared by the runtime tests."""

from __future__ import annotations

from typing import Any, Literal

from minihermes.runtime import GenEvent, GenFSM, GenServer, Workflow, call, cast, in_states, state

EVENTS: list[Any] = []


class Counter(GenServer):
    count: int = state(default=0)
    seen_init: list[Any] = state(default_factory=list)

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.seen_init = [actor_id, args]
        self.host.join("svc:counter")

    @call
    def add(self, amount: int = 1) -> dict[str, Any]:
        self.count += amount
        return {"count": self.count}

    @call
    def get(self) -> dict[str, Any]:
        return {"count": self.count, "init": self.seen_init}

    @cast
    def bump(self) -> None:
        self.count += 1

    @call
    def crash(self, message: str = "boom") -> None:
        self.count += 1000  # never checkpointed: the crash discards it
        raise RuntimeError(message)

    @call
    def typed(
        self,
        name: str,
        n: int,
        ratio: float = 1.0,
        tags: list[str] | None = None,
        mode: Literal["a", "b"] = "a",
        meta: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        return {"name": name, "n": n, "ratio": ratio, "tags": tags, "mode": mode, "meta": meta}

    @call
    def quit(self) -> None:
        self.host.stop()

    @call
    def refuse(self) -> None:
        from minihermes.runtime import Conflict

        self.count += 5
        raise Conflict("nope", reason="test")


class Echo(GenServer):
    """Stateless."""

    @call
    def echo(self, value: Any = None) -> Any:
        return value

    @call
    async def relay(self, target: str, op: str, payload: dict[str, Any] | None = None) -> Any:
        return await self.host.ask(target, op, payload or {})


class Recorder(GenServer):
    """Keeps what it receives (DOWN/EXIT/ticks/events)."""

    got: list[Any] = state(default_factory=list)

    @cast
    def __DOWN__(self, monitor_ref: str, down_from: str, down_reason: str) -> None:
        self.got.append(["down", down_from, down_reason.split(":")[0]])

    @cast
    def __EXIT__(self, exit_from: str, exit_reason: str) -> None:
        self.got.append(["exit", exit_from, exit_reason.split(":")[0]])

    @cast
    def note(self, value: Any = None, **fields: Any) -> None:
        self.got.append(["note", value if value is not None else fields])

    @call
    def get(self) -> list[Any]:
        return self.got

    @call
    def watch(self, target: str) -> str:
        return self.host.monitor(target)

    @call
    def link_to(self, target: str, trap: bool = False) -> None:
        self.host.trap_exit(trap)
        self.host.link(target)

    @call
    def crash(self) -> None:
        raise RuntimeError("recorder crash")

    @call
    def timer(self, delay: float, value: Any = None) -> str:
        return self.host.send_after(delay, "note", {"value": value})

    @call
    def cancel(self, timer_id: str) -> bool:
        return self.host.cancel_timer(timer_id)

    @call
    async def remind(
        self, name: str, every: float | None = None, at: float | None = None, value: Any = None
    ) -> None:
        await self.host.set_reminder(name, "note", {"value": value}, every=every, at=at)


class Audit(GenEvent):
    count: int = state(default=0)
    events = ("log_event",)

    @cast
    def log_event(self, event_type: str, detail: str = "") -> None:
        self.count += 1
        EVENTS.append((event_type, detail))

    @call
    def stats(self) -> dict[str, Any]:
        return {"count": self.count}


class Sink(GenServer):
    """Receives forwarded events under their own op name."""

    got: list[Any] = state(default_factory=list)

    @cast
    def log_event(self, event_type: str, detail: str = "") -> None:
        self.got.append(["event", event_type, detail])

    @call
    def get(self) -> list[Any]:
        return self.got


class Door(GenFSM):
    states = ("closed", "open", "locked")
    initial = "closed"
    transitions = {"closed": {"open", "locked"}, "open": {"closed"}, "locked": {"closed"}}
    visits: int = state(default=0)

    @call
    @in_states("open")
    def walk_through(self) -> dict[str, Any]:
        self.visits += 1
        return {"visits": self.visits}


class Slow(GenServer):
    """Handles a message only when the test releases it (no sleeps)."""

    done: list[int] = state(default_factory=list)

    @call
    async def work(self, n: int) -> int:
        GATES.setdefault("entered", []).append(n)
        gate = GATES["gate"]
        await gate.wait()
        self.done.append(n)
        return n

    @cast
    async def work_cast(self, n: int) -> None:
        await GATES["gate"].wait()
        self.done.append(n)

    @call
    def get(self) -> list[int]:
        return self.done


GATES: dict[str, Any] = {}


class Steps(Workflow):
    async def execute(
        self, items: list[str], fail_at: str | None = None, gate: bool = False
    ) -> dict[str, Any]:
        out = []
        for item in items:
            out.append(await self.step(item, self._work, item, fail_at))
            if gate and item == items[0]:
                await self.wait_signal("go")
        return {"results": out}

    async def _work(self, item: str, fail_at: str | None) -> str:
        WF_CALLS.append(item)
        if item == fail_at:
            raise ValueError(f"failed on {item}")
        return item.upper()


WF_CALLS: list[str] = []
