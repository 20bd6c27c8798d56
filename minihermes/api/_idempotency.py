"""Idempotent chat turns over HTTP: an ``Idempotency-Key`` header makes a retried request run no second turn.

A key is scoped to its tenant, namespace and principal and remembered, with a hash of the request (its route
and body), for ``window`` seconds (``[http] idempotency_window``) in the tenant's ``api_records`` actor (the
HTTP layer's records, where ``memory.forget`` reaches them: ``ApiRecords`` here is its client). The first request with a key
*claims* it (a compare-and-set on an absent key) and runs the turn as a node task; its outcome is stored
with the claim when the turn ends, whether or not the client is still connected. Another request with the
same key then:

- with another body (or route): 409 ``idempotency_key_reused``;
- after the outcome is stored: gets the same outcome, rendered as the first request's was (same ids);
- while the first runs in this process: waits for its outcome;
- while the claim says "running" but no process of this server runs it (the server was killed, or the
  reply timed out): asks the session's agent. The claim recorded how long the session's history was when it
  was made; a user message at that place means the turn started (the agent finishes a turn cut off by a
  crash by itself, when the session is next activated): the request waits for it to end and answers with
  its reply, and no second turn runs. Nothing there and no turn running means the turn never reached the
  agent: the retry takes over the claim and runs it.

A turn refused before it ran (4xx: a paused session, a spent budget, a bad argument) frees the key: a retry
is a new attempt. Without the header nothing here runs (one header lookup per request).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from minihermes.agent.api_records import ACTOR as RECORDS
from minihermes.agent.api_records import principal_part
from minihermes.runtime import ActorError, Node, RequestContext

from ._core import ApiState
from ._errors import ApiError, invalid

log = logging.getLogger("minihermes.api")

HEADER = "idempotency-key"
DEFAULT_WINDOW = 24 * 3600.0
"""Seconds a key is remembered (``[http] idempotency_window``)."""
RECORDS_TIMEOUT = 30.0
"""Seconds a read or write of a record may take (``api_records`` answers from the store)."""
EXTRAS_KEY = "idempotency"
AGENT = "agent"
_KEY = re.compile(r"[\x21-\x7e]{1,255}")
_RESOLVED_BEFORE = 500
"""HTTP statuses below this mean the turn did not run (refused): the key is freed for a new attempt."""
_LEFT_RUNNING = frozenset({"timeout", "shutting_down"})
"""Errors after which the turn goes on (or resumes at the next start): the claim stays 'running'."""

Outcome = dict[str, Any]
"""``{"reply": <agent.chat reply>}`` or ``{"error": {code, message, ...}, "status": <http status>}``."""
After = Callable[[dict[str, Any], Outcome], Awaitable[Outcome]]
"""Bookkeeping an endpoint does once a turn has an outcome (its session map, its response record), given
the claim's ``meta``; runs with the turn (not the request) and again for an outcome found after a crash."""


class ApiRecords:
    """The HTTP layer's records of ``ctx``'s tenant, read and written through the tenant's ``api_records``
    actor as ``ctx`` (``minihermes.agent.api_records``: keys, ownership, forgetting)."""

    __slots__ = ("ctx", "node")

    def __init__(self, node: Node, ctx: RequestContext) -> None:
        if RECORDS not in node.actor_names():
            raise ApiError(
                503,
                "not_configured",
                f"this node runs no '{RECORDS}' actor: the OpenAI API and Idempotency-Key need it "
                "(docs/openai-api.md)",
            )
        self.node = node
        self.ctx = ctx

    async def _ask(self, op: str, payload: dict[str, Any]) -> dict[str, Any]:
        reply = await self.node.ask(RECORDS, op, payload, RECORDS_TIMEOUT, ctx=self.ctx)
        return dict(reply)

    async def get_entry(self, key: str) -> tuple[Any, int] | None:
        """(value, version), None when absent."""
        got = await self._ask("get", {"key": key})
        return None if got.get("version") is None else (got.get("value"), int(got["version"]))

    async def get(self, key: str) -> Any:
        entry = await self.get_entry(key)
        return None if entry is None else entry[0]

    async def put(self, key: str, value: Any, ttl: float | None = None) -> int:
        return int((await self._ask("put", {"key": key, "value": value, "ttl": ttl}))["version"])

    async def cas(self, key: str, expected: int | None, value: Any, ttl: float | None = None) -> int | None:
        got = await self._ask("cas", {"key": key, "expected_version": expected, "value": value, "ttl": ttl})
        return None if got.get("version") is None else int(got["version"])

    async def delete(self, key: str) -> bool:
        return bool((await self._ask("delete", {"key": key})).get("deleted"))


def records_of(node: Node, ctx: RequestContext) -> ApiRecords:
    """The records of ``ctx``'s tenant, as ``ctx``."""
    return ApiRecords(node, ctx)


def idempotency_key(request: Request) -> str | None:
    """The request's ``Idempotency-Key`` (1-255 visible ASCII characters), None without one."""
    value = request.headers.get(HEADER)
    if value is None:
        return None
    if not _KEY.fullmatch(value):
        raise invalid("Idempotency-Key must be 1-255 visible ASCII characters", field="Idempotency-Key")
    return value


def request_digest(route: str, body: Any) -> str:
    """What a retry must repeat exactly: the route and the body (canonical JSON)."""
    text = json.dumps([route, body], sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def outcome_of(result: Any) -> Outcome:
    """An ``agent.chat`` reply, or the ActorError it raised, as a storable outcome."""
    if isinstance(result, ActorError):
        status = result.http_status if 400 <= result.http_status <= 599 else 500
        return {"error": result.to_dict()["error"], "status": status}
    return {"reply": result}


@dataclass(slots=True)
class Ticket:
    """A claimed key: run the turn, then ``settle`` (or ``release``) it. ``session_id`` and ``meta`` are the
    claim's (a retry that takes over a dead claim reuses the first request's)."""

    records: ApiRecords
    key: str
    version: int
    record: dict[str, Any]

    @property
    def scope(self) -> tuple[str, str]:
        return (self.records.ctx.tenant, self.records.ctx.namespace)

    @property
    def session_id(self) -> str:
        return str(self.record["session_id"])

    @property
    def meta(self) -> dict[str, Any]:
        return dict(self.record.get("meta") or {})


class Idempotency:
    """The app's idempotency records (``app.state.minihermes.extras["idempotency"]``)."""

    def __init__(self, node: Node, window: float = DEFAULT_WINDOW) -> None:
        if not window > 0:
            raise ValueError("the idempotency window must be > 0 seconds")
        self.node = node
        self.window = window
        self.owner = uuid.uuid4().hex  # this app instance: a claim of another one is not in _inflight
        self._inflight: dict[tuple[tuple[str, str], str], asyncio.Future[Outcome | None]] = {}

    async def acquire(
        self,
        state: ApiState,
        ctx: RequestContext,
        key: str,
        digest: str,
        *,
        session_id: str,
        meta: dict[str, Any],
        timeout: float,
        after: After | None = None,
        new_session: bool = False,
    ) -> Ticket | dict[str, Any]:
        """A Ticket when this request must run the turn, else the stored record (``meta``, ``outcome``) of
        the request that ran it. 409 for the key with another body; 504 when the first is still running at
        ``timeout``."""
        records = records_of(self.node, ctx)
        scope = (ctx.tenant, ctx.namespace)
        name = f"idem:{principal_part(ctx)}:{hashlib.sha256(key.encode()).hexdigest()}"
        deadline = asyncio.get_running_loop().time() + timeout
        before = 0 if new_session else await _history_length(self.node, ctx, session_id, timeout)
        record = {
            "state": "running",
            "digest": digest,
            "session_id": session_id,
            "before": before,
            "owner": self.owner,
            "meta": meta,
            "at": time.time(),
        }
        while True:
            version = await records.cas(name, None, record, ttl=self.window)
            if version is not None:
                return self._claimed(records, name, version, record)
            entry = await records.get_entry(name)
            if entry is None or not isinstance(entry[0], dict):
                continue  # expired in between: claim it
            found: dict[str, Any] = dict(entry[0])
            found_version = entry[1]
            if found.get("digest") != digest:
                raise ApiError(
                    409,
                    "idempotency_key_reused",
                    "this Idempotency-Key was used with another request; send a new key for a new request",
                )
            if found.get("state") == "done":
                return found
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise _still_running()
            waiting = self._inflight.get((scope, name))
            if waiting is not None:
                try:
                    outcome = await asyncio.wait_for(asyncio.shield(waiting), remaining)
                except TimeoutError:
                    raise _still_running() from None
                if outcome is not None:
                    settled = await records.get(name)
                    if isinstance(settled, dict) and settled.get("state") == "done":
                        return settled  # as stored: the session the first request made is in its meta
                continue  # freed or left running: the record says what happened
            recovered = await _recover(self.node, ctx, found, deadline)
            if recovered is None:  # the turn never reached the agent: take the claim over and run it
                taken = {**found, "owner": self.owner, "at": time.time()}
                version = await records.cas(name, found_version, taken, ttl=self.window)
                if version is not None:
                    return self._claimed(records, name, version, taken)
                continue
            if after is not None:
                recovered = await _after(after, found.get("meta") or {}, recovered)
            done = {**found, "state": "done", "outcome": recovered}
            await records.cas(name, found_version, done, ttl=self.window)
            return done

    def _claimed(self, records: ApiRecords, name: str, version: int, record: dict[str, Any]) -> Ticket:
        ticket = Ticket(records, name, version, record)
        self._inflight[(ticket.scope, name)] = asyncio.get_running_loop().create_future()
        return ticket

    async def bind(self, ticket: Ticket, session_id: str, meta: dict[str, Any]) -> None:
        """Name the session a claim made for a new conversation runs in (before its turn starts)."""
        record = {**ticket.record, "session_id": session_id, "meta": meta}
        version = await ticket.records.cas(ticket.key, ticket.version, record, ttl=self.window)
        if version is None:  # another server judged the claim dead and took it over: it runs the turn
            raise _still_running()
        ticket.version, ticket.record = version, record

    async def settle(self, ticket: Ticket, outcome: Outcome) -> None:
        """Store the turn's outcome (a reply, or an error after it ran), or free the key (refused before it
        ran), or leave the claim running (timed out, cut off by a stop: the turn goes on)."""
        records = ticket.records
        error = outcome.get("error")
        try:
            if error is None or (
                int(outcome.get("status", 500)) >= _RESOLVED_BEFORE and error.get("code") not in _LEFT_RUNNING
            ):
                done = {**ticket.record, "state": "done", "outcome": outcome}
                await records.cas(ticket.key, ticket.version, done, ttl=self.window)
            elif int(outcome.get("status", 500)) < _RESOLVED_BEFORE:
                entry = await records.get_entry(ticket.key)
                if entry is not None and entry[1] == ticket.version:
                    await records.delete(ticket.key)
                outcome = {**outcome, "freed": True}
            else:
                outcome = {**outcome, "left_running": True}
        finally:
            waiting = self._inflight.pop((ticket.scope, ticket.key), None)
            if waiting is not None and not waiting.done():
                # a waiter on a freed or still-running claim reads the record again
                waiting.set_result(None if error is not None else outcome)


def idempotency_of(state: ApiState) -> Idempotency:
    found = state.extras.get(EXTRAS_KEY)
    if not isinstance(found, Idempotency):
        found = Idempotency(state.node)
        state.extras[EXTRAS_KEY] = found
    return found


def _still_running() -> ApiError:
    return ApiError(
        409,
        "idempotency_in_progress",
        "the first request with this Idempotency-Key is still running; retry later for its result",
        headers={"retry-after": "1"},
        retry_after=1,
    )


async def _after(after: After, meta: dict[str, Any], outcome: Outcome) -> Outcome:
    try:
        return await after(meta, outcome)
    except Exception:  # bookkeeping must not lose the turn's outcome
        log.exception("after-turn bookkeeping failed")
        return outcome


async def _history_length(node: Node, ctx: RequestContext, session_id: str, timeout: float) -> int:
    stats = await node.ask(AGENT, "get_stats", {"session_id": session_id}, timeout, ctx=ctx)
    return int(stats.get("messages") or 0)


async def _recover(
    node: Node, ctx: RequestContext, record: dict[str, Any], deadline: float
) -> Outcome | None:
    """The outcome of a claimed turn no request of this app runs, from the session's agent: None when the
    turn never started there (and none runs), else its reply once it has ended (waiting for it)."""
    session_id = str(record.get("session_id") or "")
    if not session_id:
        return None  # claimed for a new conversation whose session was not made yet: nothing ran
    before = int(record.get("before") or 0)
    loop = asyncio.get_running_loop()
    sub = node.subscribe(f"session:{session_id}", ctx=ctx)
    try:
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise _still_running()
            # get_stats activates the session: a turn a crash cut off resumes with its activation
            stats = await node.ask(AGENT, "get_stats", {"session_id": session_id}, remaining, ctx=ctx)
            history = await node.ask(AGENT, "get_history", {"session_id": session_id}, remaining, ctx=ctx)
            messages = list(history.get("messages") or [])
            started = len(messages) > before and messages[before].get("role") == "user"
            later = next(
                (i for i in range(before + 1, len(messages)) if messages[i].get("role") == "user"), None
            )
            if not started and not stats.get("turn_in_progress"):
                return None
            if started and (later is not None or not stats.get("turn_in_progress")):
                return await _finished(
                    node, ctx, session_id, messages[before:later], later is None, remaining
                )
            if started and stats.get("paused"):
                return {
                    "reply": {
                        "status": "paused",
                        "response": "A tool call of this turn is waiting for approval.",
                        "session_id": session_id,
                    }
                }
            # running: its end is published on the session's topic (or checked again within a second)
            try:
                await sub.get(timeout=min(1.0, max(remaining, 0.001)))
            except TimeoutError:
                pass
    finally:
        sub.close()


async def _finished(
    node: Node, ctx: RequestContext, session_id: str, turn: list[dict[str, Any]], latest: bool, timeout: float
) -> Outcome:
    if latest:
        last = await node.ask(AGENT, "last_turn", {"session_id": session_id}, timeout, ctx=ctx)
        if last.get("status") == "error" and isinstance(last.get("error"), dict):
            return {"error": last["error"], "status": 502}
        if last.get("status") in ("ok", "max_iterations"):
            return {"reply": last}
    text = next(
        (str(m.get("content")) for m in reversed(turn) if m.get("role") == "assistant" and m.get("content")),
        "",
    )
    return {"reply": {"status": "ok", "response": text, "session_id": session_id}}


__all__ = [
    "DEFAULT_WINDOW",
    "HEADER",
    "ApiRecords",
    "Idempotency",
    "Ticket",
    "idempotency_key",
    "idempotency_of",
    "outcome_of",
    "principal_part",
    "records_of",
    "request_digest",
]
