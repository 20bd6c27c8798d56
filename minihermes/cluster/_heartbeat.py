"""The heartbeat writer: a thread with its own event loop and NATS connection.

A node's leases live as long as its heartbeat, so the heartbeat must not depend on the node's event loop
being responsive: a handler that blocks the loop for a few seconds (a model load, a big JSON dump, GC) would
otherwise let the heartbeat expire and make the other nodes take over actors that are still active here.
The thread keeps writing while the loop is merely slow, and stops when the node is really unwell: the loop
has not checked in for ``stall_limit`` seconds, or the node's own connection to NATS is down. Then the key
expires after its TTL and the node fences itself as soon as its loop runs again (``Directory.beat_overdue``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import nats

log = logging.getLogger("minihermes.cluster")


class HeartbeatThread:
    def __init__(
        self,
        connect_options: dict[str, Any],
        subject: str,
        interval: float,
        ttl: float,
        stall_limit: float,
    ) -> None:
        self._opts = dict(connect_options)
        self._opts["name"] = f"{self._opts.get('name', 'minihermes')}:heartbeat"
        self._subject = subject
        self._interval = interval
        self._ttl = ttl
        self._stall_limit = stall_limit
        self.value: bytes = b""
        """The latest signed heartbeat value (replaced by the node's loop when its directory changes)."""
        self.tick = time.monotonic()
        """When the node's loop last checked in."""
        self.healthy = True
        """The node's own connection is up (set by its loop)."""
        self.last_sent_ok = time.monotonic()
        """When the last heartbeat that the server acknowledged was sent."""
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    async def start(self, first_value: bytes) -> None:
        """Start writing; returns once the first heartbeat landed (raises what connecting raised)."""
        self.value = first_value
        self._thread = threading.Thread(target=self._run, name="minihermes-heartbeat", daemon=True)
        self._thread.start()
        await asyncio.to_thread(self._ready.wait)
        if self._error is not None:
            raise self._error

    def nudge(self) -> None:
        """Write the current value now (the directory changed)."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        try:
            nc = await nats.connect(**self._opts)
            js = nc.jetstream(timeout=self._ttl)
            await self._beat(js)
        except BaseException as e:  # handed to the starting coroutine
            self._error = e
            self._ready.set()
            return
        self._ready.set()
        try:
            while not self._stop.is_set():
                await asyncio.to_thread(self._wake.wait, self._interval)
                self._wake.clear()
                if self._stop.is_set():
                    break
                if not self.healthy or time.monotonic() - self.tick > self._stall_limit:
                    continue  # let the key expire: the node cannot act on its leases
                try:
                    await self._beat(js)
                except Exception as e:  # retried next interval; the node fences if late
                    log.warning("heartbeat failed: %r", e)
        finally:
            await nc.close()

    async def _beat(self, js: Any) -> None:
        sent = time.monotonic()  # the server's TTL runs from when it stored the message: later than this
        await js.publish(self._subject, self.value, msg_ttl=self._ttl, timeout=self._ttl)
        self.last_sent_ok = sent
