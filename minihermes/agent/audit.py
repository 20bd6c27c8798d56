"""``audit_event``: the tenant's append-only, hash-chained audit trail (seed 000 "Audit Trail").

Every event is appended to the ``audit`` stream of the tenant's EventLog, whose hash chain makes any later
edit or deletion detectable (``verify``). Values that look like credentials are scrubbed before they are
written: callers must not put secrets in events, and this is the second line of defence.

Senders never wait. Actors audit what they do with :func:`fire_audit`, which appends the event itself, from
the sender's node, before the sender goes on: the append is queued on the store ahead of anything the sender
saves afterwards, so on SQLite (one writer, commits in queue order) an action's checkpoint is never durable
without its event, and a SIGKILL can lose both or neither. On PostgreSQL, where the two commit on connections
of their own, the reply to the message being handled (and ``wait_saved``) waits for the event's commit too
(``host.hold``), so nothing a reply acknowledged is missing from the trail. Once the event is committed,
``audit_event`` is told (``forward_event``, a cast) so that its subscribers get it; an overloaded or distant
``audit_event`` costs only that. Clients log events of their own with the ``log_event`` cast, which the
actor appends.

Users (role ``user`` without ``admin``) read only the events they caused; admins and viewers read the
tenant's whole trail.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
from typing import Any
from urllib.parse import quote

from minihermes.context.redact import redact_text
from minihermes.runtime import (
    ActorNotFound,
    GenEvent,
    Host,
    InvalidArgument,
    Overloaded,
    RequestContext,
    ShuttingDown,
    call,
    cast,
    current_context,
)

log = logging.getLogger("minihermes.agent.audit")

STREAM = "audit"
"""The EventLog stream (per tenant) holding the audit trail."""

MAX_DETAIL_CHARS = 4000
MAX_DATA_BYTES = 16_384
MAX_LIMIT = 1000
_PAGE = 500
_CURSOR_PREFIX = "audit_cursor:"
_EVENT_TYPE = re.compile(r"[^A-Za-z0-9_.:\-]")
_CONSUMER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$")
_MS_THRESHOLD = 1e11
"""A ``since`` above this is in milliseconds (1e11 seconds is the year 5138)."""

REDACTED = "[REDACTED]"
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+(?!\[REDACTED\])[A-Za-z0-9._~+/=\-]{8,}")
"""Audit is stricter than stored text about authorization headers: 8 characters are enough."""
_SECRET_KEYS = re.compile(
    r"(?i)^(api[_-]?key|x-api-key|apikey|password|passwd|secret|client[_-]?secret|authorization|"
    r"access[_-]?token|refresh[_-]?token|id[_-]?token|private[_-]?key|cookie|set-cookie)$|"
    r"(_api_key|_secret|_password)$"
)


def scrub_secrets(value: Any, _depth: int = 0) -> Any:
    """A copy of a JSON value with credential-looking strings replaced by ``[REDACTED]``: values under
    secret-named keys (``api_key``, ``password``, ``authorization``, ...) and substrings shaped like API
    keys or tokens (``sk-...``, ``Bearer ...``, JWTs, cloud and chat provider keys)."""
    if isinstance(value, str):
        # The credential shapes (and "password: ...") that history and memory redact, plus short bearers.
        return redact_text(_BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", value))
    if _depth > 32:
        return "[TRUNCATED]"
    if isinstance(value, dict):
        return {
            str(k): REDACTED
            if _SECRET_KEYS.search(str(k)) and v not in (None, "")
            else scrub_secrets(v, _depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [scrub_secrets(v, _depth + 1) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return scrub_secrets(str(value), _depth + 1)


def is_restricted(ctx: RequestContext) -> bool:
    """True for end users (role ``user`` without ``admin``): they see only what they own."""
    return "user" in ctx.roles and not ctx.roles & {"admin", "system"}


def sees_own_only(ctx: RequestContext) -> bool:
    """True for every caller who is neither an admin nor the runtime (users and viewers): of other
    principals' sessions, transcripts and private data they see nothing. Viewers own nothing, so they see
    only what is shared in the tenant (and the operator views their access class grants, such as the audit
    trail and pending approvals)."""
    return not ctx.roles & {"admin", "system"}


def fire_audit(
    host: Host,
    event_type: str,
    detail: str = "",
    *,
    session_id: str = "",
    data: dict[str, Any] | None = None,
) -> bool:
    """Append one audit event to the tenant's trail without waiting (see the module docstring: queued on
    the store before anything the caller saves next; on a store that may commit it later, the reply to the
    current message waits for it). Returns False, logging why, when nothing was queued:
    no ``audit_event`` actor in this node's tree, data that cannot be stored, a closed store. An audit
    failure never fails the operation being audited."""
    if not host.has_actor("audit_event"):
        return False
    record = audit_record(event_type, detail, session_id, data, host.now())
    try:
        written = host.events.append_nowait(STREAM, record)
    except (TypeError, ValueError) as e:  # not storable JSON (a NaN in the data): dropped, counted
        _not_written(host, record, e)
        return False
    except Exception as e:  # anything else the store refuses at once: the audited operation goes on
        host.incr_counter("audit_dropped_total")
        log.warning("audit event %s dropped: %r", record["event_type"], e)
        return False
    written.add_done_callback(functools.partial(_fired, host, record))
    if not host.commits_in_order:
        host.hold(written)  # PostgreSQL: the reply to what is audited waits for the event's commit too
    return True


def audit_record(
    event_type: str,
    detail: str,
    session_id: str,
    data: dict[str, Any] | None,
    now: float,
    timestamp: float = 0,
) -> dict[str, Any]:
    """The stored form of an event in the current request context: type, scrubbed and bounded detail and
    data, session, principal, the node's time (``ts``), the request id, and ``reported_ts`` when the sender
    gave a ``timestamp`` (seconds or ms)."""
    ctx = current_context()
    clean_type = _EVENT_TYPE.sub("_", event_type)[:64] or "unspecified"
    text = scrub_secrets(detail)
    if len(text) > MAX_DETAIL_CHARS:
        text = text[:MAX_DETAIL_CHARS] + "...[truncated]"
    body = scrub_secrets(data or {})
    size = len(json.dumps(body, default=str))
    if size > MAX_DATA_BYTES:
        body = {"truncated": True, "size": size}
    record: dict[str, Any] = {
        "event_type": clean_type,
        "detail": text,
        "session_id": session_id[:200],
        "data": body,
        "principal": ctx.principal,
        "ts": now,
    }
    if ctx.request_id:
        record["request_id"] = ctx.request_id
    if timestamp > 0:
        record["reported_ts"] = _seconds(timestamp)
    return record


def _fired(host: Host, record: dict[str, Any], written: asyncio.Future[Any]) -> None:
    """A fired event is committed (or failed): counted, and ``audit_event`` told for its subscribers. Runs in
    the sender's context (the future's callback), so the cast goes to the sender's tenant."""
    if not _committed(host, record, written):
        return
    try:
        host.send("audit_event", "forward_event", {"seq": written.result().seq})
    except (ActorNotFound, InvalidArgument, Overloaded, ShuttingDown) as e:
        # Written all the same: only live subscribers miss it (poll_events still has it).
        host.incr_counter("audit_forward_dropped_total")
        log.debug("audit event %s not forwarded: %s", record["event_type"], e.message)


def _committed(host: Host, record: dict[str, Any], written: asyncio.Future[Any]) -> bool:
    """Whether an append of ``record`` was written: counted if so, logged and counted as failed if not."""
    error = asyncio.CancelledError() if written.cancelled() else written.exception()
    if error is not None:
        _not_written(host, record, error)
        return False
    host.incr_counter("audit_events_total", event_type=record["event_type"])
    return True


def _not_written(host: Host, record: dict[str, Any], error: BaseException) -> None:
    log.error("audit event %s not written: %r", record["event_type"], error)
    host.incr_counter("audit_write_failed_total")


class AuditEvent(GenEvent):
    """The tenant's audit trail: ``log_event`` (cast), ``query_events``, ``poll_events``, ``verify``."""

    events = ("log_event",)
    forward_events = False  # it forwards the scrubbed record itself (log_event below)
    mailbox_capacity = 10_000
    """Every service fires events here; a burst must not be refused (and so lost) at the door."""

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.host.join("svc:audit")
        self._last: asyncio.Future[Any] | None = None
        """The newest append in flight."""

    async def on_stop(self, reason: str) -> None:
        await self._settled()

    @cast
    def log_event(
        self,
        event_type: str,
        detail: str = "",
        session_id: str = "",
        data: dict[str, Any] | None = None,
        timestamp: float = 0,
    ) -> None:
        """Append one event (never blocks the sender). ``timestamp`` (optional, seconds or ms) is what the
        sender reports; the trail's own ``ts`` is always the node's clock."""
        record = audit_record(event_type, detail, session_id, data, self.host.now(), timestamp)
        # Queued on the store at once, no task per event: the store chains appends in call order and writes
        # those of one loop pass (or, on PostgreSQL, those that arrive while a batch commits) together.
        try:
            written = self.host.events.append_nowait(STREAM, record)
        except (TypeError, ValueError) as e:  # not storable JSON (a NaN in the data): dropped, counted
            _not_written(self.host, record, e)
            return
        written.add_done_callback(functools.partial(self._written, record))
        self._last = written

    @cast
    async def forward_event(self, seq: int) -> None:
        """Give subscribers the event ``fire_audit`` wrote as ``seq`` (read back from the trail: only what
        was written is forwarded). Nothing to do without subscribers."""
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
            raise InvalidArgument("seq must be a positive integer", field="seq")
        if not self.subscribers:
            return
        for rec in await self.host.events.read(STREAM, after_seq=seq - 1, limit=1):
            if rec.seq == seq and isinstance(rec.data, dict):
                self._forward(rec.data)

    def _written(self, record: dict[str, Any], written: asyncio.Future[Any]) -> None:
        if _committed(self.host, record, written):
            self._forward(record)

    def _forward(self, record: dict[str, Any]) -> None:
        for target, op in list(self.subscribers):  # forward_events=False: subscribers get the scrubbed record
            try:
                self.host.send(target, op or "log_event", {k: record.get(k, "") for k in _FORWARDED})
            except (ActorNotFound, InvalidArgument, Overloaded, ShuttingDown) as e:
                log.warning("audit subscriber %s not reached: %s", target, e.message)

    async def _settled(self) -> None:
        """Until the newest event this actor appended is done (written or failed), before it stops: appends
        commit in call order, so then so are all before it. Reads need no wait of their own: the store's
        event-log reads wait for the appends it was asked for before them (``AppendMarks``)."""
        last = self._last
        if last is not None and not last.done():
            await asyncio.wait({last})

    @call
    async def query_events(
        self, event_type: str = "", since: float = 0, limit: int = 100, session_id: str = ""
    ) -> dict[str, Any]:
        """The newest ``limit`` events matching the filters, oldest first. ``since`` is epoch seconds (or
        milliseconds, as the seed's clients send)."""
        limit = _check_limit(limit)
        if since < 0:
            raise InvalidArgument("since must be >= 0", field="since")
        start = _seconds(since)
        ctx = current_context()
        owner = ctx.principal if is_restricted(ctx) else None
        found: list[dict[str, Any]] = []
        hi = await self.host.events.last_seq(STREAM)
        while hi > 0 and len(found) < limit:
            lo = max(0, hi - _PAGE)
            page = await self.host.events.read(STREAM, after_seq=lo, limit=hi - lo)
            if not page:
                break
            done = False
            for rec in reversed(page):
                if rec.ts < start:
                    done = True  # appended in clock order: everything before is older still
                    break
                event = _event(rec.seq, rec.ts, rec.hash, rec.data)
                if _matches(event, event_type, session_id, owner):
                    found.append(event)
                    if len(found) >= limit:
                        break
            if done:
                break
            hi = page[0].seq - 1
        found.reverse()
        return {"status": "ok", "events": found, "count": len(found)}

    @call
    async def poll_events(
        self, consumer_id: str, limit: int = 100, event_type: str = "", commit: bool = True
    ) -> dict[str, Any]:
        """Events after this consumer's durable cursor, oldest first. The cursor (one per caller and
        ``consumer_id``) moves past what is returned, unless ``commit`` is false: then the consumer confirms
        with ``commit_cursor`` once it has processed them (at-least-once)."""
        limit = _check_limit(limit)
        key = _cursor_key(consumer_id)
        ctx = current_context()
        owner = ctx.principal if is_restricted(ctx) else None
        cursor = int(await self.host.kv.get(key) or 0)
        events: list[dict[str, Any]] = []
        position = cursor
        last = await self.host.events.last_seq(STREAM)
        while position < last and len(events) < limit:
            page = await self.host.events.read(STREAM, after_seq=position, limit=_PAGE)
            if not page:
                break
            for rec in page:
                position = rec.seq
                event = _event(rec.seq, rec.ts, rec.hash, rec.data)
                if _matches(event, event_type, "", owner):
                    events.append(event)
                    if len(events) >= limit:
                        break
        if commit and position != cursor:
            await self.host.kv.put(key, position)
        return {
            "status": "ok",
            "events": events,
            "count": len(events),
            "cursor": position,
            "committed": position if commit else cursor,
        }

    @call
    async def commit_cursor(self, consumer_id: str, cursor: int) -> dict[str, Any]:
        """Move this consumer's cursor to ``cursor`` (a ``seq`` it has processed)."""
        key = _cursor_key(consumer_id)
        last = await self.host.events.last_seq(STREAM)
        if cursor < 0 or cursor > last:
            raise InvalidArgument(f"cursor must be between 0 and {last}", field="cursor")
        await self.host.kv.put(key, cursor)
        return {"status": "ok", "consumer_id": consumer_id, "cursor": cursor}

    @call
    async def verify(self) -> dict[str, Any]:
        """Recompute the hash chain of the tenant's trail."""
        check = await self.host.events.verify(STREAM)
        return {
            "status": "ok" if check.ok else "corrupt",
            "ok": check.ok,
            "checked": check.checked,
            "first_bad_seq": check.first_bad_seq,
            "reason": check.reason,
        }

    @call
    async def get_stats(self) -> dict[str, Any]:
        return {"status": "ok", "event_count": await self.host.events.last_seq(STREAM)}


_FORWARDED = ("event_type", "detail", "session_id", "data")


def _event(seq: int, ts: float, digest: str, data: Any) -> dict[str, Any]:
    body = data if isinstance(data, dict) else {"detail": str(data)}
    return {
        "seq": seq,
        "event_type": body.get("event_type", ""),
        "detail": body.get("detail", ""),
        "session_id": body.get("session_id", ""),
        "data": body.get("data", {}),
        "principal": body.get("principal", ""),
        "ts": body.get("ts", ts),
        "hash": digest,
    }


def _matches(event: dict[str, Any], event_type: str, session_id: str, owner: str | None) -> bool:
    return (
        (not event_type or event["event_type"] == event_type)
        and (not session_id or event["session_id"] == session_id)
        and (owner is None or event["principal"] == owner)
    )


def _check_limit(limit: int) -> int:
    if limit < 1 or limit > MAX_LIMIT:
        raise InvalidArgument(f"limit must be between 1 and {MAX_LIMIT}", field="limit")
    return limit


def _seconds(value: float) -> float:
    return value / 1000.0 if value > _MS_THRESHOLD else float(value)


def _cursor_key(consumer_id: str) -> str:
    if not _CONSUMER.fullmatch(consumer_id):
        raise InvalidArgument(
            "consumer_id must be 1-128 characters of letters, digits, '_', '.', ':', '-'",
            field="consumer_id",
        )
    # one cursor per principal: nobody can move another caller's cursor
    return f"{_CURSOR_PREFIX}{quote(current_context().principal, safe='')}/{consumer_id}"


__all__ = ["STREAM", "AuditEvent", "fire_audit", "is_restricted", "scrub_secrets", "sees_own_only"]
