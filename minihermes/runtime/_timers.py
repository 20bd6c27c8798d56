"""A node's timers: ``send_after`` (in memory, gone with the sending cell or the node), the ask deadline
buckets, the reminder wake-up (reminders live in the store; the node arms one timer for the earliest) and
the periodic retention pass."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Any

from ._clock import TimerHandle
from ._context import RequestContext, current_context
from ._errors import AskTimeout

if TYPE_CHECKING:
    from ._cell import Cell
    from ._node import Node

log = logging.getLogger("minihermes.runtime")

DEADLINE_BUCKET = 0.25
"""Ask deadlines share one timer per bucket of this many seconds: a timeout fires at most this late."""


class Timers:
    __slots__ = (
        "_node",
        "_reminder_due",
        "_reminder_timer",
        "_retention_timer",
        "deadlines",
        "timers",
    )

    def __init__(self, node: Node) -> None:
        self._node = node
        self.timers: dict[str, tuple[Cell, TimerHandle]] = {}
        """Pending ``send_after`` timers by id, with the cell that set each (cancelled when it exits)."""
        self.deadlines: dict[int, dict[asyncio.Future[Any], tuple[str, str, float]]] = {}
        """Asks waiting for a reply, by deadline bucket (``Node.ask`` fills it; see ``expire_slot``)."""
        self._reminder_timer: TimerHandle | None = None
        self._reminder_due: float | None = None
        self._retention_timer: TimerHandle | None = None

    async def start(self) -> None:
        await self._arm_reminders()
        node = self._node
        if node.options.retention:
            self._retention_timer = node.clock.call_later(
                node.options.retention_interval, self._retention_tick
            )

    def stop_wake_ups(self) -> None:
        """The node is stopping: no more reminder fires or retention passes."""
        for h in (self._reminder_timer, self._retention_timer):
            if h is not None:
                h.cancel()

    def stop(self) -> None:
        """The node's actors are stopped: drop every pending ``send_after``."""
        for _, handle in self.timers.values():
            handle.cancel()
        self.timers.clear()

    # -- send_after ---------------------------------------------------------------------------------------

    def send_after(
        self, cell: Cell, delay: float, op: str, payload: dict[str, Any], target: str | None = None
    ) -> str:
        timer_id = uuid.uuid4().hex
        ctx = current_context()
        dest = target or cell.address
        node = self._node

        def fire() -> None:
            self.timers.pop(timer_id, None)
            node.deliver_system(dest, op, payload, ctx)

        self.timers[timer_id] = (cell, node.clock.call_later(delay, fire))
        return timer_id

    def cancel(self, timer_id: str) -> bool:
        entry = self.timers.pop(timer_id, None)
        if entry is None:
            return False
        entry[1].cancel()
        return True

    def cancel_all(self, cell: Cell) -> None:
        """The cell exited: its pending timers go with it."""
        for tid in [t for t, (c, _) in self.timers.items() if c is cell]:
            self.timers.pop(tid)[1].cancel()

    # -- ask deadlines ------------------------------------------------------------------------------------

    def expire_slot(self, slot: int) -> None:
        for fut, (target, op, limit) in list(self.deadlines.pop(slot, {}).items()):
            if not fut.done():
                fut.set_exception(
                    AskTimeout(f"{target}.{op} did not answer within {limit:g}s", actor=target, op=op)
                )

    # -- reminders ----------------------------------------------------------------------------------------

    async def _arm_reminders(self) -> None:
        node = self._node
        if not node._started:
            return
        nxt = await node.store.reminders.next_fire_at()
        if nxt is None:
            return
        if self._reminder_timer is not None and self._reminder_due is not None and self._reminder_due <= nxt:
            return
        if self._reminder_timer is not None:
            self._reminder_timer.cancel()
        self._reminder_due = nxt
        self._reminder_timer = node.clock.call_later(
            max(0.0, nxt - node.clock.time()), lambda: node.spawn(self._fire_reminders())
        )

    async def reminders_changed(self) -> None:
        fabric = self._node.fabric
        if fabric is not None:
            fabric.reminders_changed()
        await self.rearm_reminders()

    async def rearm_reminders(self) -> None:
        if self._reminder_timer is not None:
            self._reminder_timer.cancel()
            self._reminder_timer = None
            self._reminder_due = None
        await self._arm_reminders()

    async def _fire_reminders(self) -> None:
        node = self._node
        self._reminder_timer = None
        self._reminder_due = None
        now = node.clock.time()
        for r in await node.store.reminders.due(now):
            if not await node.store.reminders.advance(r, now):
                continue  # another node fired it
            ctx = RequestContext.from_dict(r.context) if isinstance(r.context, dict) else None
            node.metrics.incr("reminders_fired_total")
            node.deliver_system(
                r.target, r.op, dict(r.payload or {}), ctx or node.system_context_for(r.scope)
            )
        await self._arm_reminders()

    # -- retention ----------------------------------------------------------------------------------------

    def _retention_tick(self) -> None:
        node = self._node

        async def run() -> None:
            try:
                await self.compact()
            finally:
                if node._started:
                    self._retention_timer = node.clock.call_later(
                        node.options.retention_interval, self._retention_tick
                    )

        node.spawn(run())

    async def compact(self) -> dict[str, int]:
        node = self._node
        report = await node.store.apply_retention(node.options.retention, node.clock.time())
        if any(report.deleted.values()):
            log.info("retention: %s", report.deleted)
        return dict(report.deleted)
