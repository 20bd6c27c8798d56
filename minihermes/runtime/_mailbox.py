"""Mailboxes and the messages in them."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ._context import RequestContext


@dataclass(slots=True)
class Envelope:
    op: str
    payload: dict[str, Any]
    ctx: RequestContext
    reply: asyncio.Future[Any] | None = None
    """None for a cast."""
    sender: str = ""
    system: bool = False
    """Runtime-originated (timers, reminders, __DOWN__/__EXIT__): exempt from tenant admission."""
    counted: bool = field(default=False)
    """Whether it holds an admission slot (released when handled)."""


class Control:
    """Sentinels the node puts in a mailbox for the actor's own loop."""

    __slots__ = ("kind",)

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __repr__(self) -> str:
        return f"Control({self.kind})"


STOP = Control("stop")
DEACTIVATE = Control("deactivate")


class Crash(Control):
    """A handler run in its caller's task (``Cell.call_inline``) raised: the actor's own loop crashes with
    it, as if the handler had raised there."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        super().__init__("crash")
        self.error = error


class Mailbox:
    """A FIFO with one consumer. Bounded by the caller (the node checks ``len`` before ``put``) so that a
    full mailbox is answered with ``overloaded`` instead of growing without limit."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: deque[Envelope | Control] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: Envelope | Control) -> None:
        self._items.append(item)
        self._wake()

    def put_first(self, item: Envelope | Control) -> None:
        """Ahead of everything queued (a crash is the next thing the actor's loop sees)."""
        self._items.appendleft(item)
        self._wake()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None:
            self._waiter = None
            if not w.done():
                w.set_result(None)

    @property
    def parked(self) -> bool:
        """The consumer is waiting in ``get`` on an empty mailbox (nothing queued, nothing about to run)."""
        w = self._waiter
        return w is not None and not w.done()

    async def get(self) -> Envelope | Control:
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        return self._items.popleft()

    def drain(self) -> list[Envelope | Control]:
        items = list(self._items)
        self._items.clear()
        return items

    def envelopes(self) -> list[Envelope]:
        return [m for m in self._items if isinstance(m, Envelope)]
