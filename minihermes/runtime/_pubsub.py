"""Ephemeral, tenant-scoped publish/subscribe: live progress (a turn's text deltas and tool calls, dashboard
updates) for whoever is watching right now.

Nothing here is durable and nothing waits: ``publish`` never blocks the actor that calls it. A subscriber
whose queue is full loses the oldest events and is told how many (``{"type": "dropped", "count": n}`` comes
before the next event it reads), so one slow browser can never hold up an agent. What must not be lost goes
through channels or the store instead; a stream reader gets the final result from there.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Protocol

from ._cell import Scope

JSON = Any


class Subscription:
    """One subscriber's bounded queue on a topic. Use as an async iterator or call ``get``; ``close`` (or
    leaving ``async with``) unsubscribes."""

    __slots__ = ("_bus", "_dropped", "_key", "_queue", "closed")

    def __init__(self, bus: PubSub, key: tuple[Scope, str], maxsize: int) -> None:
        self._bus = bus
        self._key = key
        self._queue: asyncio.Queue[JSON] = asyncio.Queue(maxsize)
        self._dropped = 0
        self.closed = False

    def _offer(self, event: JSON) -> None:
        q = self._queue
        if q.full():
            q.get_nowait()
            self._dropped += 1
        q.put_nowait(event)

    async def get(self, timeout: float | None = None) -> JSON:
        """The next event; ``TimeoutError`` after ``timeout`` seconds without one."""
        if self._dropped:
            n, self._dropped = self._dropped, 0
            return {"type": "dropped", "count": n}
        if timeout is None:
            return await self._queue.get()
        return await asyncio.wait_for(self._queue.get(), timeout)

    def get_nowait(self) -> JSON | None:
        try:
            return self._queue.get_nowait()
        except asyncio.QueueEmpty:
            return None

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._bus._remove(self._key, self)

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def __aiter__(self) -> AsyncIterator[JSON]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[JSON]:
        while not self.closed:
            yield await self.get()


class Bridge(Protocol):
    """Carries topics between the nodes of a cluster (``minihermes.cluster``): a watcher on one node sees
    the events of an actor running on another. Best effort, like the local side."""

    def watch(self, scope: Scope, topic: str) -> None:
        """The first local subscriber of the topic arrived."""

    def unwatch(self, scope: Scope, topic: str) -> None:
        """The last local subscriber of the topic left."""

    def forward(self, scope: Scope, topic: str, event: JSON) -> None:
        """Offer an event published here to the other nodes' subscribers (if any)."""

    def remote_interest(self, scope: Scope, topic: str) -> bool:
        """Whether some other node has subscribers of the topic."""


class PubSub:
    """Topics per scope (tenant, namespace): a tenant can neither read nor write another tenant's topics."""

    def __init__(self) -> None:
        self._subs: dict[tuple[Scope, str], list[Subscription]] = {}
        self.bridge: Bridge | None = None

    def subscribe(self, scope: Scope, topic: str, maxsize: int = 1000) -> Subscription:
        key = (scope, topic)
        sub = Subscription(self, key, max(1, maxsize))
        subs = self._subs.get(key)
        if subs is None:
            subs = self._subs[key] = []
            if self.bridge is not None:
                self.bridge.watch(scope, topic)
        subs.append(sub)
        return sub

    def publish(self, scope: Scope, topic: str, event: JSON) -> int:
        """Offer ``event`` to every subscriber of the topic (on every node of a cluster); returns how many
        local subscribers there were."""
        if self.bridge is not None:
            self.bridge.forward(scope, topic, event)
        return self.deliver(scope, topic, event)

    def deliver(self, scope: Scope, topic: str, event: JSON) -> int:
        """Offer ``event`` to this node's subscribers only (the bridge calls it for remote events)."""
        subs = self._subs.get((scope, topic))
        if not subs:
            return 0
        for s in subs:
            s._offer(event)
        return len(subs)

    def has_subscribers(self, scope: Scope, topic: str) -> bool:
        if self._subs.get((scope, topic)):
            return True
        return self.bridge is not None and self.bridge.remote_interest(scope, topic)

    def _remove(self, key: tuple[Scope, str], sub: Subscription) -> None:
        subs = self._subs.get(key)
        if subs and sub in subs:
            subs.remove(sub)
            if not subs:
                del self._subs[key]
                if self.bridge is not None:
                    self.bridge.unwatch(*key)
