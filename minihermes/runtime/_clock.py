"""Time for the runtime: wall time, timers and sleeps behind one injectable object.

Everything time-based (send_after, reminders, TTLs, visibility timeouts, idle deactivation, restart windows)
goes through a Clock, so tests drive time with ``ManualClock.advance`` instead of sleeping.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Any, Protocol


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def time(self) -> float:
        """Wall-clock seconds since the epoch."""
        ...

    def monotonic(self) -> float: ...

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        """Run callback(*args) on the event loop after delay seconds."""
        ...

    async def sleep(self, delay: float) -> None: ...


class SystemClock:
    """Real time on the running event loop."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        return asyncio.get_running_loop().call_later(max(0.0, delay), callback, *args)

    async def sleep(self, delay: float) -> None:
        await asyncio.sleep(max(0.0, delay))


class _ManualTimer:
    __slots__ = ("args", "callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.when = when
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A clock that only moves when told to. ``advance`` fires due timers in time order; a callback that
    returns a task (async work it started) is awaited before time moves on."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        self._mono = 0.0
        self._heap: list[tuple[float, int, _ManualTimer]] = []
        self._seq = itertools.count()

    def time(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        timer = _ManualTimer(self._mono + max(0.0, delay), callback, args)
        heapq.heappush(self._heap, (timer.when, next(self._seq), timer))
        return timer

    async def sleep(self, delay: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.call_later(delay, _resolve, fut)
        await fut

    def pending(self) -> int:
        return sum(1 for _, _, t in self._heap if not t.cancelled)

    async def advance(self, seconds: float) -> None:
        """Move time forward, firing every timer that falls due, and let the loop run what they started."""
        target = self._mono + seconds
        while self._heap and self._heap[0][0] <= target:
            when, _, timer = heapq.heappop(self._heap)
            if timer.cancelled:
                continue
            self._now += when - self._mono
            self._mono = when
            result = timer.callback(*timer.args)
            if isinstance(result, asyncio.Future):
                await result  # a callback that started async work (e.g. firing reminders) finishes first
            await _settle()
        self._now += target - self._mono
        self._mono = target
        await _settle()


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def _settle(rounds: int = 20) -> None:
    """Let callbacks and the tasks they created run a few loop iterations."""
    for _ in range(rounds):
        await asyncio.sleep(0)
