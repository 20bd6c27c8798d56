"""Supervision: restart strategies, restart policies, restart intensity and escalation."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING

from ._cell import Cell
from ._mailbox import Envelope
from ._spec import ActorSpec, SupervisorSpec

if TYPE_CHECKING:
    from ._node import Node

log = logging.getLogger("minihermes.runtime")


class Child:
    """A supervisor's child: one shared actor, a family of keyed/per-tenant actors, or a nested supervisor."""

    name: str
    restart: str
    parent: Supervisor

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self, reason: str) -> None:
        """Graceful: let queued messages finish, flush state."""
        raise NotImplementedError

    async def kill(self, reason: str) -> None:
        """Immediate: used when a strategy restarts siblings."""
        raise NotImplementedError


class _Intensity:
    def __init__(self, node: Node, max_restarts: int, window: float) -> None:
        self.node = node
        self.max_restarts = max_restarts
        self.window = window
        self.times: deque[float] = deque()

    def exceeded(self) -> bool:
        """Record one restart; True if that is more than max_restarts within the window."""
        now = self.node.clock.monotonic()
        self.times.append(now)
        while self.times and now - self.times[0] > self.window:
            self.times.popleft()
        return len(self.times) > self.max_restarts


class _ActorTypeChild(Child):
    """A child running one actor type; the node routes that type's cell failures and exits to it."""

    def __init__(self, node: Node, spec: ActorSpec, parent: Supervisor) -> None:
        self.node = node
        self.spec = spec
        self.name = spec.name
        self.restart = spec.restart
        self.parent = parent
        node.register_owner(spec.name, self)

    def cell_failed(self, cell: Cell, reason: str) -> None:
        raise NotImplementedError

    def cell_exited(self, cell: Cell, reason: str) -> None:
        raise NotImplementedError


class SingletonChild(_ActorTypeChild):
    def __init__(self, node: Node, spec: ActorSpec, parent: Supervisor) -> None:
        super().__init__(node, spec, parent)
        self.cell: Cell | None = None

    async def start(self) -> None:
        self.cell = self.node.singleton(self.spec, self)
        if self.cell.task is None or self.cell.task.done():
            self.cell.start()

    async def stop(self, reason: str) -> None:
        cell = self.cell
        if cell is None or cell.task is None or cell.task.done():
            return
        cell.kill_reason = (reason, False)
        cell.request_stop()
        await asyncio.shield(asyncio.wait({cell.task}))

    async def kill(self, reason: str) -> None:
        if self.cell is not None:
            await self.cell.kill(reason)

    def cell_failed(self, cell: Cell, reason: str) -> None:
        self.parent.child_failed(self, reason, abnormal=True)

    def cell_exited(self, cell: Cell, reason: str) -> None:
        self.parent.child_failed(self, reason, abnormal=False)

    def remove(self, reason: str) -> None:
        if self.cell is not None:
            self.node._remove(self.cell)
            self.node.fail_pending(self.cell, reason)


class DynamicChild(_ActorTypeChild):
    """Keyed (virtual) or per-tenant instances of one actor type, activated on demand. A crashed instance is
    restarted on its own; too many restarts of the type in the window escalate to the parent."""

    def __init__(self, node: Node, spec: ActorSpec, parent: Supervisor) -> None:
        super().__init__(node, spec, parent)
        self.running = False
        self.intensity = _Intensity(node, spec.max_restarts, spec.max_restart_window)
        self._held: list[tuple[Cell, list[Envelope]]] = []

    async def start(self) -> None:
        self.running = True
        held, self._held = self._held, []
        for old, envelopes in held:
            # what was queued when the family was restarted goes to fresh instances, like any restart
            fresh = self.node._activate(self.spec, old.scope, old.key)
            for env in envelopes:
                fresh.mailbox.put(env)

    async def stop(self, reason: str) -> None:
        self.running = False
        cells = [c for c in self.node.cells(self.name) if c.task is not None and not c.task.done()]
        for c in cells:
            c.kill_reason = (reason, False)
            c.request_stop()
        if cells:
            await asyncio.shield(asyncio.wait({c.task for c in cells if c.task is not None}))
        for c in self.node.cells(self.name):
            self.node._remove(c)

    async def kill(self, reason: str) -> None:
        self.running = False
        cells = self.node.cells(self.name)
        await asyncio.gather(*(c.kill(reason) for c in cells))
        for c in cells:
            self.node._remove(c)
            envelopes = c.mailbox.envelopes()
            c.mailbox.drain()
            if envelopes:
                self._held.append((c, envelopes))

    def cell_failed(self, cell: Cell, reason: str) -> None:
        if not self.running or cell.removed:
            return
        if self.restart == "temporary":
            self.node._remove(cell)
            self.node.fail_pending(cell, reason)
            return
        if self.intensity.exceeded():
            log.error("%s: restart intensity exceeded; escalating", self.name)
            self.parent.child_failed(self, f"restart intensity of {self.name} exceeded: {reason}", True)
            return
        self.node.metrics.incr("actor_restarts_total", actor=self.name)
        self._restart_soon(cell)

    def _restart_soon(self, cell: Cell) -> None:
        # Called from the finishing task of the cell itself: start the next incarnation once it is done.
        def go() -> None:
            if self.running and not cell.removed and (cell.task is None or cell.task.done()):
                cell.start()

        asyncio.get_running_loop().call_soon(go)

    def cell_exited(self, cell: Cell, reason: str) -> None:
        if self.restart == "permanent" and reason not in ("stopped", "deactivated") and self.running:
            self._restart_soon(cell)
            return
        self.node._remove(cell)
        self.node.fail_pending(cell, reason)


class SupervisorChild(Child):
    def __init__(self, sup: Supervisor) -> None:
        self.sup = sup
        self.name = sup.spec.name
        self.restart = sup.spec.restart
        assert sup.parent is not None
        self.parent = sup.parent

    async def start(self) -> None:
        self.sup.intensity.times.clear()
        await self.sup.start()

    async def stop(self, reason: str) -> None:
        await self.sup.stop(reason)

    async def kill(self, reason: str) -> None:
        await self.sup.kill(reason)


class Supervisor:
    def __init__(self, node: Node, spec: SupervisorSpec, parent: Supervisor | None) -> None:
        self.node = node
        self.spec = spec
        self.parent = parent
        self.intensity = _Intensity(node, spec.max_restarts, spec.max_restart_window)
        self.children: list[Child] = []
        self.failed = False
        self._lock = asyncio.Lock()
        for c in spec.children:
            if isinstance(c, SupervisorSpec):
                self.children.append(SupervisorChild(Supervisor(node, c, self)))
            elif c.dynamic:
                self.children.append(DynamicChild(node, c, self))
            else:
                self.children.append(SingletonChild(node, c, self))
        self.as_child: SupervisorChild | None = None

    async def start(self) -> None:
        self.failed = False
        for c in self.children:
            await c.start()

    async def stop(self, reason: str) -> None:
        for c in reversed(self.children):
            await c.stop(reason)

    async def kill(self, reason: str) -> None:
        for c in reversed(self.children):
            await c.kill(reason)

    def child_failed(self, child: Child, reason: str, abnormal: bool) -> None:
        self.node.spawn(self._handle(child, reason, abnormal))

    async def _handle(self, child: Child, reason: str, abnormal: bool) -> None:
        async with self._lock:
            if self.failed or child not in self.children:
                return
            if child.restart == "temporary" or (child.restart == "transient" and not abnormal):
                if isinstance(child, SingletonChild):
                    child.remove(reason)
                self.children.remove(child)
                log.info("%s exited (%s); not restarted (%s)", child.name, reason, child.restart)
                return
            if self.intensity.exceeded():
                await self._give_up(
                    f"restart intensity exceeded in {self.spec.name} ({child.name}: {reason})"
                )
                return
            log.warning("%s: restarting after %s (%s)", self.spec.name, child.name, reason)
            self.node.metrics.incr("actor_restarts_total", actor=child.name)
            strategy = self.spec.strategy
            if strategy == "one_for_one":
                victims = [child]
            elif strategy == "rest_for_one":
                victims = self.children[self.children.index(child) :]
            else:
                victims = list(self.children)
            for c in reversed(victims):
                if c is not child:
                    await c.kill(f"restarted with {child.name} ({strategy})")
            if child is not None and not isinstance(child, SingletonChild):
                await child.kill(f"restarting ({reason})")
            for c in victims:
                await c.start()

    async def _give_up(self, reason: str) -> None:
        self.failed = True
        log.error("%s", reason)
        await self.kill(reason)
        if self.parent is not None:
            me = next(c for c in self.parent.children if isinstance(c, SupervisorChild) and c.sup is self)
            self.parent.child_failed(me, reason, True)
        else:
            self.node._root_failed(reason)
