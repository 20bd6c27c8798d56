"""``audit_event``: the tenant's append-only, hash-chained audit trail; senders never wait for it.

Every event is appended to the ``audit`` stream of the tenant's EventLog, whose hash chain makes any later
edit or deletion detectable (``verify``). Values that look like credentials are scrubbed before they are
written (``minihermes.audit.scrub_secrets``).

Senders never wait: actors audit what they do with ``minihermes.audit.fire_audit`` (re-exported here), which
appends the event from the sender's node and then tells this actor (``forward_event``) so that its
subscribers get it. Clients log events of their own with the ``log_event`` cast, which the actor appends.

Users (role ``user`` without ``admin``) read only the events they caused; admins and viewers read the
tenant's whole trail, but a viewer gets another principal's events redacted (``minihermes.audit.shown_to``:
type, time, principal, session and outcome; no detail, tool input or memory key), so nobody reads through
the trail what they could not read where it lives. Only what is shown changes: the stored events and their
hash chain are the same for everybody.

Forgetting (``forget_subject``, which ``memory.forget`` asks of every store): the events of a user, a session
or the whole tenant become unreadable (their keys are deleted: chain format 2; events written before it are
blanked and recorded in a chained erasure entry) and read as their type, time and ``forgotten: true``;
``verify`` still holds. Retention may remove the content of some event types (``trimmed: true``) and signs
an anchor at each trim: ``export_anchors`` hands them out, ``verify(anchor=...)`` checks the trail against
one kept elsewhere.
"""

from __future__ import annotations

import asyncio
import functools
import re
from typing import Any
from urllib.parse import quote

from minihermes.audit import (
    REDACTED,
    SESSION_SUBJECT,
    STREAM,
    USER_SUBJECT,
    append_record,
    as_seconds,
    audit_not_written,
    audit_record,
    audit_written,
    fire_audit,
    is_restricted,
    log,
    scrub_secrets,
    sees_own_only,
    shown_to,
    subject,
)
from minihermes.context import forget as forgetting
from minihermes.runtime import (
    ActorNotFound,
    GenEvent,
    InvalidArgument,
    Overloaded,
    ShuttingDown,
    call,
    cast,
    current_context,
)
from minihermes.runtime.store import EventRecord

MAX_LIMIT = 1000
_PAGE = 500
_CURSOR_PREFIX = "audit_cursor:"
_CONSUMER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$")


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

    @cast(access="admin")
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
            written = append_record(self.host, record)
        except (TypeError, ValueError) as e:  # not storable JSON (a NaN in the data): dropped, counted
            audit_not_written(self.host, record, e)
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
            if rec.seq == seq and isinstance(rec.data, dict) and not rec.kind.startswith("~"):
                self._forward(rec.data)

    def _written(self, record: dict[str, Any], written: asyncio.Future[Any]) -> None:
        if audit_written(self.host, record, written):
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

    @call(access="read")
    async def query_events(
        self,
        event_type: str = "",
        since: float = 0,
        limit: int = 100,
        session_id: str = "",
        before_seq: int = 0,
        until: float = 0,
    ) -> dict[str, Any]:
        """The newest ``limit`` events matching the filters, oldest first. ``since`` / ``until`` are epoch
        seconds (or milliseconds, as some clients send; 0: no bound). Paging, newest page first: the next page
        is ``before_seq`` = the first (oldest) event's ``seq`` of this one; ``more`` says whether older
        matching events exist. A cursor, not an offset: events appended meanwhile do not shift the pages."""
        limit = _check_limit(limit)
        for name, value in (("since", since), ("until", until), ("before_seq", before_seq)):
            if value < 0:
                raise InvalidArgument(f"{name} must be >= 0", field=name)
        start = as_seconds(since)
        end = as_seconds(until) if until else 0.0
        ctx = current_context()
        owner = ctx.principal if is_restricted(ctx) else None
        found: list[dict[str, Any]] = []
        last = await self.host.events.last_seq(STREAM)
        hi = min(last, before_seq - 1) if before_seq else last
        more = False
        while hi > 0 and not more:
            lo = max(0, hi - _PAGE)
            page = await self.host.events.read(STREAM, after_seq=lo, limit=hi - lo)
            if not page:
                break
            done = False
            for rec in reversed(page):
                if rec.ts < start:
                    done = True  # appended in clock order: everything before is older still
                    break
                if end and rec.ts > end:
                    continue
                event = _event(rec)
                if _matches(event, event_type, session_id, owner):
                    if len(found) >= limit:
                        more = True  # one older match: there is a next page
                        break
                    found.append(event)
            if done:
                break
            hi = page[0].seq - 1
        found.reverse()
        shown = [shown_to(ctx, e) for e in found]
        return {"status": "ok", "events": shown, "count": len(shown), "more": more}

    @call(access="read")
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
                event = _event(rec)
                if _matches(event, event_type, "", owner):
                    events.append(event)
                    if len(events) >= limit:
                        break
        if commit and position != cursor:
            await self.host.kv.put(key, position)
        return {
            "status": "ok",
            "events": [shown_to(ctx, e) for e in events],
            "count": len(events),
            "cursor": position,
            "committed": position if commit else cursor,
        }

    @call(access="read")
    async def commit_cursor(self, consumer_id: str, cursor: int) -> dict[str, Any]:
        """Move this consumer's cursor to ``cursor`` (a ``seq`` it has processed)."""
        key = _cursor_key(consumer_id)
        last = await self.host.events.last_seq(STREAM)
        if cursor < 0 or cursor > last:
            raise InvalidArgument(f"cursor must be between 0 and {last}", field="cursor")
        await self.host.kv.put(key, cursor)
        return {"status": "ok", "consumer_id": consumer_id, "cursor": cursor}

    @call(access="read")
    async def verify(self, anchor: dict[str, Any] | None = None) -> dict[str, Any]:
        """Recompute the hash chain of the tenant's trail. With ``anchor`` (one ``export_anchors`` gave, kept
        outside the node), the trail must also pass through what it pins and its signature must hold: a
        trail rewritten after it is reported at the first sequence number that departs from it."""
        try:
            check = await self.host.events.verify(STREAM, anchor=anchor)
        except ValueError as e:
            raise InvalidArgument(str(e), field="anchor") from None
        return {
            "status": "ok" if check.ok else "corrupt",
            "ok": check.ok,
            "checked": check.checked,
            "first_bad_seq": check.first_bad_seq,
            "reason": check.reason,
            "anchored": check.anchored,
        }

    @call(access="read")
    async def export_anchors(self) -> dict[str, Any]:
        """The anchors retention signed for the tenant's trail, oldest first: keep them outside the node and
        give one to ``verify``. Each carries the node's public key (``public_key``, ``key_id``): no secret
        is needed to check it."""
        anchors = await self.host.events.anchors(STREAM)
        return {"status": "ok", "anchors": anchors, "count": len(anchors)}

    @call(access="write")
    async def forget_subject(
        self, user_id: str = "", session_id: str = "", tenant: bool = False
    ) -> dict[str, Any]:
        """Make the trail's events of a user (theirs and those in their sessions), a session, or (admin) the
        whole tenant unreadable: they keep their type, time and place in the chain and read as
        ``forgotten: true``; ``verify`` still holds. A user may forget only themselves and their own
        sessions (``minihermes.context.forget.subject``). ``forgotten``: how many events."""
        who = forgetting.subject("forget_subject", user_id=user_id, session_id=session_id, tenant=tenant)
        subjects: list[str] | None = None
        sessions: set[str] = set()
        if who.session_id:
            owner = await forgetting.session_owner(self.host, who.session_id)
            if not forgetting.is_admin() and owner != current_context().principal:
                return _forgot(0, 0)  # not theirs (or of nobody known): nothing of theirs to take
            sessions = {who.session_id}
            subjects = [subject(SESSION_SUBJECT, who.session_id)]
        elif who.user_id:
            sessions = await forgetting.subject_sessions(self.host, who)
            subjects = [
                subject(USER_SUBJECT, who.user_id),
                *(subject(SESSION_SUBJECT, s) for s in sorted(sessions)),
            ]

        def legacy(data: Any) -> str | None:
            """Events written before they were sealed (chain format 1): those of the subject, by content."""
            if not isinstance(data, dict):
                return None
            mine = (who.user_id and data.get("principal") == who.user_id) or data.get(
                "session_id"
            ) in sessions
            return str(data.get("event_type", "")) if who.tenant or mine else None

        await self._settled()
        erasure = await self.host.events.forget(STREAM, subjects, legacy=legacy)
        return _forgot(erasure.forgotten, erasure.legacy, erasure.kept)

    @call(access="read")
    async def get_stats(self) -> dict[str, Any]:
        return {"status": "ok", "event_count": await self.host.events.last_seq(STREAM)}


_FORWARDED = ("event_type", "detail", "session_id", "data")
_ERASURE = "~erasure"
"""The kind of the entries the store appends to record removed content (shown as ``audit_erasure``)."""


def _forgot(forgotten: int, legacy: int, kept: int = 0) -> dict[str, Any]:
    return {
        "status": "ok",
        "forgotten": forgotten,
        "legacy": legacy,
        "kept": kept,
        "cleared": {"audit_events": forgotten},
    }


def _event(rec: EventRecord) -> dict[str, Any]:
    """A stored entry as the trail shows it. One whose content is gone keeps its type, time and hash."""
    if rec.data is None or rec.erased:
        gone = rec.erased or "forgotten"
        return _shape(rec, {"event_type": rec.kind}) | {gone: True}
    if rec.kind == _ERASURE and isinstance(rec.data, dict):
        record = rec.data
        count = sum(int(b) - int(a) + 1 for a, b in record.get("seqs", [])) + len(record.get("legacy", []))
        data = {"reason": record.get("reason", ""), "entries": count}
        if record.get("event_types"):
            data["event_types"] = record["event_types"]
        return _shape(rec, {"event_type": "audit_erasure", "data": data})
    return _shape(rec, rec.data if isinstance(rec.data, dict) else {"detail": str(rec.data)})


def _shape(rec: EventRecord, body: dict[str, Any]) -> dict[str, Any]:
    return {
        "seq": rec.seq,
        "event_type": body.get("event_type", ""),
        "detail": body.get("detail", ""),
        "session_id": body.get("session_id", ""),
        "data": body.get("data", {}),
        "principal": body.get("principal", ""),
        "ts": body.get("ts", rec.ts),
        "hash": rec.hash,
        "v": rec.v,
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


def _cursor_key(consumer_id: str) -> str:
    if not _CONSUMER.fullmatch(consumer_id):
        raise InvalidArgument(
            "consumer_id must be 1-128 characters of letters, digits, '_', '.', ':', '-'",
            field="consumer_id",
        )
    # one cursor per principal: nobody can move another caller's cursor
    return f"{_CURSOR_PREFIX}{quote(current_context().principal, safe='')}/{consumer_id}"


__all__ = [
    "REDACTED",
    "STREAM",
    "AuditEvent",
    "audit_record",
    "fire_audit",
    "is_restricted",
    "scrub_secrets",
    "sees_own_only",
    "shown_to",
]
