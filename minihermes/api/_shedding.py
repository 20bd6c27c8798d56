"""Load shedding at the edge: a bounded number of API requests run at once, a bounded number wait for a slot,
and a request that cannot start within its deadline is refused at once instead of queueing past it.

Every request under ``/api/`` passes the gate (``/healthz``, ``/readyz``, ``/metrics``, the dashboard and
``/openapi.json`` do not, so health keeps answering under any load):

- a free slot (fewer than ``max_concurrent`` running and nobody waiting): the request runs;
- else it waits in the queue, at most ``min(its timeout, queue_timeout)`` seconds (refused at once when the
  queue ahead, drained at the recent pace, would take longer); when a slot frees, the
  waiting tenant with the fewest running requests gets it (oldest first among equals), so a busy tenant
  does not make a quiet one wait behind its backlog;
- the queue is full (``max_queue``) or the wait ran out: 503 ``overloaded`` with ``Retry-After``;
- the caller's tenant already holds (running + waiting) ``tenant_max_share`` of ``max_concurrent +
  max_queue`` while another tenant holds requests too: 429 ``tenant_over_share`` with ``Retry-After``. A lone
  tenant may use the whole gate; when another tenant arrives and the queue is full, the newest waiter of a
  tenant over its share makes room for it (that waiter gets the 429), so another tenant finds room as soon
  as a request of its can wait.

A request's slot is held until its response starts (a Server-Sent Events stream holds it while it starts,
not while it streams). The request's timeout (``?timeout=``, else the endpoint's default) counts from its
arrival and covers the wait: a request whose reply has not started by then is answered 504 ``timeout`` and
its handler cancelled (the actor's message, once queued, still runs; a streamed turn is owned by the node).

Requests whose credentials do not authenticate skip the gate: they are answered 401/403 without any work.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import math
import os
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from starlette.datastructures import Headers
from starlette.requests import Request

from minihermes.runtime import RequestContext

from ._catalog import MIN_TIMEOUT
from ._core import _REQUEST_ID, API_PREFIX, ApiState, error_response, observe
from ._errors import ApiError, refused

log = logging.getLogger("minihermes.api")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

GATE_KEY = "shed_gate"
"""Where the app's gate lives: ``app.state.minihermes.extras[GATE_KEY]`` (absent when shedding is off)."""

_SESSION_MESSAGES = (f"{API_PREFIX}/sessions/", "/messages")
MAX_RETRY_AFTER = 60


def usable_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True, slots=True)
class SheddingConfig:
    """The gate's settings (``[http]`` in the app config; docs/configuration.md).

    - ``enabled``: False serves every request as it comes (no gate, no deadline at the edge).
    - ``max_concurrent``: requests running at once (default: 32 per usable CPU).
    - ``max_queue``: requests waiting for a slot (default: 4 x ``max_concurrent``; 0: none wait).
    - ``queue_timeout``: the longest a request waits for a slot, in seconds (its own timeout if shorter).
    - ``tenant_max_share``: the share of ``max_concurrent + max_queue`` one tenant may hold while another
      tenant holds requests too (a lone tenant may use the whole gate).
    """

    enabled: bool = True
    max_concurrent: int | None = None
    max_queue: int | None = None
    queue_timeout: float = 10.0
    tenant_max_share: float = 0.5

    def __post_init__(self) -> None:
        if self.max_concurrent is not None and self.max_concurrent < 1:
            raise ValueError("max_concurrent must be >= 1")
        if self.max_queue is not None and self.max_queue < 0:
            raise ValueError("max_queue must be >= 0")
        if not (math.isfinite(self.queue_timeout) and self.queue_timeout > 0):
            raise ValueError("queue_timeout must be > 0")
        if not 0 < self.tenant_max_share <= 1:
            raise ValueError("tenant_max_share must be in (0, 1]")

    def limits(self) -> tuple[int, int]:
        """(max_concurrent, max_queue), the defaults derived from this machine."""
        concurrent = self.max_concurrent or 32 * usable_cpus()
        queue = 4 * concurrent if self.max_queue is None else self.max_queue
        return concurrent, queue


class Shed(Exception):
    """A request the gate refuses: ``status`` 503 (overloaded) or 429 (the tenant is over its share)."""

    def __init__(self, status: int, code: str, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after

    def to_api_error(self, request_id: str) -> ApiError:
        return refused(self.status, self.code, self.message, self.retry_after, request_id=request_id)


@dataclass(slots=True)
class _Waiter:
    tenant: str
    seq: int
    granted: asyncio.Future[Shed | None]
    """None: a slot is the waiter's; a ``Shed``: it was evicted (``ShedGate._evict``) and is refused with it."""


def _granted(waiter: _Waiter) -> bool:
    future = waiter.granted
    return future.done() and not future.cancelled() and future.result() is None


class ShedGate:
    """Slots for running requests, a bounded fair queue in front of them, and a per-tenant bound."""

    def __init__(self, config: SheddingConfig) -> None:
        self.config = config
        self.max_concurrent, self.max_queue = config.limits()
        capacity = self.max_concurrent + self.max_queue
        self.tenant_cap = max(1, int(config.tenant_max_share * capacity))
        """Requests one tenant may hold (running + waiting) while another tenant holds any; at the whole
        capacity, no tenant is refused for its share (a full gate answers 503)."""
        self._shares = self.tenant_cap < capacity
        self.running = 0
        self.waiting = 0
        self._running_by: dict[str, int] = {}
        self._held_by: dict[str, int] = {}
        self._queues: dict[str, collections.deque[_Waiter]] = {}
        self._seq = itertools.count()
        self._service = 0.0
        """Smoothed seconds a request holds its slot (for Retry-After)."""
        self._changed = asyncio.Event()

    def held(self, tenant: str) -> int:
        """Requests of ``tenant`` running or waiting."""
        return self._held_by.get(tenant, 0)

    async def wait_until(self, predicate: Callable[[ShedGate], bool]) -> None:
        """Return once ``predicate(gate)`` holds (re-checked after every change; for tests and tooling)."""
        while not predicate(self):
            await self._changed.wait()

    async def acquire(self, tenant: str, wait: float) -> float:
        """Take a slot for ``tenant`` within ``wait`` seconds, else raise :class:`Shed`. Returns the seconds
        waited. The caller must ``release(tenant, ...)`` exactly once after a successful acquire."""
        if self._shares and self.held(tenant) >= self.tenant_cap and self.others_hold(tenant):
            raise self._over_share(tenant)
        if self.running < self.max_concurrent and not self.waiting:
            self._start(tenant)
            return 0.0
        full = self.waiting >= self.max_queue
        victim = self._over_share_waiter(tenant) if full else None
        if wait <= 0 or (full and victim is None):
            raise Shed(
                503,
                "overloaded",
                "the server is at capacity and its queue is full; retry later",
                self.retry_after(),
            )
        if self.expected_wait(tenant) > wait:
            raise Shed(
                503,
                "overloaded",
                f"the server is at capacity: this request would not start within {wait:g}s; retry later",
                self.retry_after(),
            )
        if victim is not None:
            self._evict(victim)
        waiter = _Waiter(tenant, next(self._seq), asyncio.get_running_loop().create_future())
        self._queues.setdefault(tenant, collections.deque()).append(waiter)
        self.waiting += 1
        self._held_by[tenant] = self.held(tenant) + 1
        self._notify()
        started = time.monotonic()
        evicted: Shed | None = None
        try:
            async with asyncio.timeout(wait):
                evicted = await waiter.granted
        except TimeoutError:
            if not _granted(waiter):
                self._forget(waiter)
                raise Shed(
                    503,
                    "overloaded",
                    f"the server is at capacity: this request could not start within {wait:g}s; retry later",
                    self.retry_after(),
                ) from None
        except BaseException:
            if _granted(waiter):
                self.release(tenant, 0.0)  # granted as the caller went away: hand the slot on
            else:
                self._forget(waiter)
            raise
        if evicted is not None:
            raise evicted
        return time.monotonic() - started

    def others_hold(self, tenant: str) -> bool:
        """Whether a tenant other than ``tenant`` has requests running or waiting."""
        return len(self._held_by) > (1 if tenant in self._held_by else 0)

    def _over_share(self, tenant: str) -> Shed:
        return Shed(
            429,
            "tenant_over_share",
            f"your tenant has {self.held(tenant)} requests running or waiting, its share of this server while "
            "other tenants wait; retry later",
            self.retry_after(),
        )

    def _over_share_waiter(self, tenant: str) -> _Waiter | None:
        """The newest waiter of the tenant most over its share, when ``tenant`` (asking for a place in a full
        queue) is under its own: a lone tenant's backlog gives way to a newcomer."""
        if not self._shares or self.held(tenant) >= self.tenant_cap:
            return None
        over = [t for t, q in self._queues.items() if t != tenant and q and self.held(t) > self.tenant_cap]
        if not over:
            return None
        return self._queues[max(over, key=self.held)][-1]

    def _evict(self, waiter: _Waiter) -> None:
        """Take ``waiter`` out of the queue and answer it 429 ``tenant_over_share`` (its ``acquire`` raises)."""
        shed = self._over_share(waiter.tenant)
        self._forget(waiter)
        if not waiter.granted.done():  # else its task is already cancelled: nothing to tell
            waiter.granted.set_result(shed)

    def release(self, tenant: str, held_for: float) -> None:
        self.running -= 1
        self._running_by[tenant] -= 1
        if not self._running_by[tenant]:
            del self._running_by[tenant]
        self._drop_held(tenant)
        self._service = held_for if not self._service else 0.9 * self._service + 0.1 * held_for
        while self.running < self.max_concurrent and self.waiting:
            self._grant_next()
        self._notify()

    def expected_wait(self, tenant: str | None = None) -> float:
        """Seconds a request of ``tenant`` queued now would likely wait: the waiters that go before it (all of
        them without a tenant), drained at the recent pace (a slot frees every ``service / max_concurrent``
        seconds). 0 before any request finished."""
        return self._service * (self.ahead_of(tenant) + 1) / self.max_concurrent

    def ahead_of(self, tenant: str | None) -> int:
        """Waiters that a new waiter of ``tenant`` would let go first: its tenant's own, and each other
        tenant's as long as that tenant runs no more than this one would by then (the order of
        ``_grant_next``; completions meanwhile ignored)."""
        if tenant is None:
            return self.waiting
        own = len(self._queues.get(tenant, ()))
        mine = self._running_by.get(tenant, 0) + own
        ahead = own
        for other, queue in self._queues.items():
            if other != tenant:
                ahead += min(len(queue), max(0, mine - self._running_by.get(other, 0) + 1))
        return ahead

    def retry_after(self) -> int:
        """Seconds until the queue ahead has likely drained (1 to MAX_RETRY_AFTER)."""
        return max(1, min(MAX_RETRY_AFTER, math.ceil(self.expected_wait())))

    def _start(self, tenant: str) -> None:
        self.running += 1
        self._running_by[tenant] = self._running_by.get(tenant, 0) + 1
        self._held_by[tenant] = self.held(tenant) + 1
        self._notify()

    def _grant_next(self) -> None:
        # the waiting tenant with the fewest running requests; the longest waiting among equals
        tenant = min(self._queues, key=lambda t: (self._running_by.get(t, 0), self._queues[t][0].seq))
        queue = self._queues[tenant]
        waiter = queue.popleft()
        if not queue:
            del self._queues[tenant]
        self.waiting -= 1
        if waiter.granted.done():
            # its task was cancelled (its deadline, a disconnect) and has not run its cleanup yet: it leaves
            # the queue here, and ``_forget`` will find it gone
            self._drop_held(tenant)
            return
        self.running += 1
        self._running_by[tenant] = self._running_by.get(tenant, 0) + 1
        waiter.granted.set_result(None)

    def _forget(self, waiter: _Waiter) -> None:
        queue = self._queues.get(waiter.tenant)
        if queue is None or waiter not in queue:
            return
        queue.remove(waiter)
        if not queue:
            del self._queues[waiter.tenant]
        self.waiting -= 1
        self._drop_held(waiter.tenant)
        self._notify()

    def _drop_held(self, tenant: str) -> None:
        n = self._held_by[tenant] - 1
        if n:
            self._held_by[tenant] = n
        else:
            del self._held_by[tenant]

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def snapshot(self) -> dict[str, Any]:
        return {
            "running": self.running,
            "waiting": self.waiting,
            "max_concurrent": self.max_concurrent,
            "max_queue": self.max_queue,
            "tenant_cap": self.tenant_cap,
        }


class SheddingMiddleware:
    """The ASGI side of the gate: admission, the deadline, and the refusal replies."""

    def __init__(self, app: ASGIApp, state: ApiState, gate: ShedGate) -> None:
        self.app = app
        self.state = state
        self.gate = gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith("/api/"):
            await self.app(scope, receive, send)
            return
        arrived = time.perf_counter()
        timeout = self._timeout_of(scope)
        deadline = asyncio.get_running_loop().time() + timeout
        state = self.state
        headers = Headers(scope=scope)
        try:
            ctx = await state.auth.authenticate(headers, request_id="", now=state.node.clock.time())
        except ApiError:
            await self.app(scope, receive, send)  # refused by the handler without any work
            return
        tenant = ctx.tenant
        gate = self.gate
        try:
            await gate.acquire(tenant, min(timeout, gate.config.queue_timeout))
        except Shed as e:
            state.node.metrics.incr("http_shed_total", code=e.code, tenant=tenant)
            await self._answer(scope, send, headers, e.to_api_error, arrived, ctx)
            return
        started = time.monotonic()
        released = False
        response_started = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                gate.release(tenant, time.monotonic() - started)

        try:
            async with asyncio.timeout_at(deadline) as cm:

                async def send_started(message: Message) -> None:
                    nonlocal response_started
                    if message["type"] == "http.response.start" and not response_started:
                        response_started = True
                        cm.reschedule(None)  # a reply (or a stream) under way is not cut off
                        release()
                    await send(message)

                await self.app(scope, receive, send_started)
        except TimeoutError:
            if response_started or not cm.expired():
                raise
            release()
            state.node.metrics.incr("http_deadline_exceeded_total", tenant=tenant)

            def late(request_id: str) -> ApiError:
                return ApiError(
                    504,
                    "timeout",
                    f"no reply within the request's timeout ({timeout:g}s)",
                    request_id=request_id,
                )

            await self._answer(scope, send, headers, late, arrived, ctx)
        finally:
            release()

    def _timeout_of(self, scope: Scope) -> float:
        """The request's ``?timeout=``, else its endpoint's default (a bad value: the default; the handler
        answers it with 422)."""
        state = self.state
        path = str(scope.get("path", ""))
        prefix, suffix = _SESSION_MESSAGES
        default = (
            state.max_timeout
            if path.startswith(prefix) and path.endswith(suffix) and scope.get("method") == "POST"
            else state.default_timeout
        )
        query = scope.get("query_string", b"")
        if b"timeout=" not in query:
            return default
        for name, value in parse_qsl(query.decode("latin-1")):
            if name == "timeout":
                with contextlib.suppress(ValueError):
                    t = float(value)
                    if math.isfinite(t) and MIN_TIMEOUT <= t <= state.max_timeout:
                        return t
                return default
        return default

    async def _answer(
        self,
        scope: Scope,
        send: Send,
        headers: Headers,
        error: Callable[[str], ApiError],
        arrived: float,
        ctx: RequestContext,
    ) -> None:
        request_id = _request_id(headers)
        response = error_response(error(request_id), request_id)
        await _send(scope, send, response)
        observe(self.state, Request(scope), response.status_code, arrived, request_id, ctx)


def _request_id(headers: Headers) -> str:
    header_id = headers.get("x-request-id", "")
    return header_id if _REQUEST_ID.fullmatch(header_id) else uuid.uuid4().hex


async def _send(scope: Scope, send: Send, response: Any) -> None:
    async def no_body() -> Message:
        return {"type": "http.disconnect"}

    await response(scope, no_body, send)


def install_shedding(app: Any, state: ApiState, config: SheddingConfig | None) -> ShedGate | None:
    """Put the gate in front of ``app`` (a FastAPI app); None when ``config`` disables it."""
    config = config or SheddingConfig()
    if not config.enabled:
        return None
    gate = ShedGate(config)
    state.extras[GATE_KEY] = gate
    app.add_middleware(SheddingMiddleware, state=state, gate=gate)
    return gate
