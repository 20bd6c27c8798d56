"""The terminal chat's notifications: the caller's inbox (``notifications`` actor) read and watched.

``unread()`` lists what is unread (the chat shows it when it starts, then marks it read); ``watch(deliver)``
runs until cancelled and hands each new notification to ``deliver`` as it arrives: embedded, from the node's
live topic ``notifications:<principal>``; against a server, from ``GET /api/v1/notifications/stream`` (the
caller's own, by their credential), reconnected with a backoff after the server went away. After each
(re)subscription, and when the live feed says it dropped events, the unread list is read again: what came
in while nobody listened is delivered too. Each notification is delivered once (``shown``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ._backend import Backend, CommandError, Embedded, Remote
from ._sse import sse_events

ACTOR = "notifications"
STREAM_PATH = "/api/v1/notifications/stream"
UNREAD_LIMIT = 50
RETRY_SECONDS = (1.0, 2.0, 5.0, 10.0, 30.0)
"""Waits between reconnections to a server's stream (the last one repeats)."""

Deliver = Callable[[list[dict[str, Any]]], None]


class Inbox:
    """The caller's notifications through ``backend``; ``can_mark``: the caller may ``mark_read``."""

    def __init__(self, backend: Backend, *, can_mark: bool) -> None:
        self.backend = backend
        self.can_mark = can_mark
        self.shown: set[str] = set()

    async def unread(self) -> list[dict[str, Any]]:
        """Unread notifications not delivered yet, oldest first."""
        reply = await self.backend.ask(
            ACTOR, "list_notifications", {"unread_only": True, "limit": UNREAD_LIMIT}
        )
        return self._new(reversed(reply.get("notifications") or []))

    async def recent(self, limit: int = 20) -> list[dict[str, Any]]:
        """The latest ``limit`` notifications, read or not, oldest first (``/notifications``)."""
        reply = await self.backend.ask(ACTOR, "list_notifications", {"limit": limit})
        return list(reversed(reply.get("notifications") or []))

    async def mark_read(self, notes: list[dict[str, Any]]) -> None:
        """Mark ``notes`` read (shown to the person); a refusal leaves them unread, nothing else."""
        ids = [str(n["id"]) for n in notes if n.get("id") and not n.get("read")]
        if not ids or not self.can_mark:
            return
        try:
            await self.backend.ask(ACTOR, "mark_read", {"ids": ids})
        except CommandError:
            return  # shown again next time: better than lost

    def _new(self, notes: Any) -> list[dict[str, Any]]:
        out = []
        for note in notes:
            if not isinstance(note, dict) or not note.get("id") or note["id"] in self.shown:
                continue
            self.shown.add(str(note["id"]))
            out.append(note)
        return out

    async def watch(self, deliver: Deliver) -> None:
        """Deliver new notifications as they arrive, until cancelled."""
        if isinstance(self.backend, Embedded):
            await self._watch_node(self.backend, deliver)
        elif isinstance(self.backend, Remote):
            await self._watch_server(self.backend, deliver)

    async def _catch_up(self, deliver: Deliver) -> None:
        try:
            notes = await self.unread()
        except CommandError:
            return
        if notes:
            deliver(notes)

    async def _on_event(self, event: dict[str, Any], deliver: Deliver) -> None:
        """One event of the caller's topic, from the node or the server's stream: a notification not shown
        yet is delivered; ``dropped`` (the subscriber fell behind) re-reads the unread list."""
        if event.get("type") == "dropped":
            await self._catch_up(deliver)
        elif event.get("type") == "notification":
            notes = self._new([{k: v for k, v in event.items() if k != "type"}])
            if notes:
                deliver(notes)

    async def _watch_node(self, backend: Embedded, deliver: Deliver) -> None:
        from minihermes.work.notifications import topic_for

        sub = backend.node.subscribe(topic_for(backend.ctx.principal), ctx=backend.ctx)
        try:
            await self._catch_up(deliver)  # what arrived between the first listing and the subscription
            while True:
                event = await sub.get()
                if isinstance(event, dict):
                    await self._on_event(event, deliver)
        finally:
            sub.close()

    async def _watch_server(self, backend: Remote, deliver: Deliver) -> None:
        import httpx

        failures = 0
        while True:
            try:
                timeout = httpx.Timeout(30.0, read=None)  # the server pings every 15 s; the stream stays open
                async with backend.client.stream("GET", STREAM_PATH, timeout=timeout) as resp:
                    if resp.status_code in (401, 403, 404):
                        return  # no inbox for this credential here: nothing to watch
                    if resp.status_code == 200:
                        failures = 0
                        await self._catch_up(deliver)
                        async for event in sse_events(resp.aiter_lines()):
                            await self._on_event(event, deliver)
            except httpx.HTTPError:
                pass  # the server went away (or restarts): try again
            await asyncio.sleep(RETRY_SECONDS[min(failures, len(RETRY_SECONDS) - 1)])
            failures += 1
