"""What every subsystem uses to audit and to keep secrets out: ``fire_audit``, ``scrub_secrets``, who sees
only their own data (``is_restricted``, ``sees_own_only``), and what of an event a reader is shown
(``shown_to``).

The trail itself is the ``audit_event`` actor (``minihermes.agent.audit_event``): every event is appended to the
``audit`` stream of the tenant's EventLog, whose hash chain makes any later edit or deletion detectable.
Values that look like credentials are scrubbed before they are written: callers must not put secrets in
events, and this is the second line of defence.

Events are forgettable: each is appended in chain format 2 with its type as the entry's kind and sealed under
the key of its subjects (``audit_subjects``: the principal who acted, ``user:<principal>``, and the session,
``session:<id>``), so ``audit_event.forget_subject`` deletes those keys and the events read as their type,
time and ``forgotten: true`` while the chain still verifies.

Senders never wait. Actors audit what they do with :func:`fire_audit`, which appends the event itself, from
the sender's node, before the sender goes on: the append is queued on the store ahead of anything the sender
saves afterwards, so on SQLite (one writer, commits in queue order) an action's checkpoint is never durable
without its event, and a SIGKILL can lose both or neither. On PostgreSQL, where the two commit on connections
of their own, the reply to the message being handled (and ``wait_saved``) waits for the event's commit too
(``host.hold``), so nothing a reply acknowledged is missing from the trail. Once the event is committed,
``audit_event`` is told (``forward_event``, a cast) so that its subscribers get it; an overloaded or distant
``audit_event`` costs only that.

This module sits below the agent and the subsystems (work, skills, mcp): it imports only the runtime and
``minihermes.context.redact``.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import re
from typing import Any

from minihermes.context.redact import redact_text
from minihermes.permissions import restricted as is_restricted
from minihermes.permissions import sees_own_only
from minihermes.runtime import (
    ActorNotFound,
    Host,
    InvalidArgument,
    Overloaded,
    RequestContext,
    ShuttingDown,
    current_context,
)

log = logging.getLogger("minihermes.agent.audit_event")
"""The audit trail's logger (named as before the helpers left ``minihermes.agent.audit_event``)."""

STREAM = "audit"
"""The EventLog stream (per tenant) holding the audit trail."""
USER_SUBJECT = "user:"
SESSION_SUBJECT = "session:"
"""Prefixes of the subjects an event is sealed under (``audit_subjects``)."""

MAX_DETAIL_CHARS = 4000
MAX_DATA_BYTES = 16_384
_EVENT_TYPE = re.compile(r"[^A-Za-z0-9_.:\-]")
_MS_THRESHOLD = 1e11
"""A ``since`` or ``timestamp`` above this is in milliseconds (1e11 seconds is the year 5138)."""

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


_SHOWN_DATA = frozenset(
    {
        "tool",
        "status",
        "error_code",
        "duration_ms",
        "decision",
        "mode",
        "state",
        "service",
        "provider",
        "scope",
        "tier",
    }
)
"""The ``data`` fields of another principal's event that a caller who sees only their own data still gets: the
kind of thing done and how it went, never what it was done with."""
_SHOWN_NAME = re.compile(r"[A-Za-z0-9_.:\-]{1,64}")
_UNOWNED = frozenset({"", "system"})
"""Principals no caller owns: the runtime's events (a resumed or scheduled piece of work may have run as
``system``) are nobody's own."""


def shown_to(ctx: RequestContext, event: dict[str, Any]) -> dict[str, Any]:
    """An audit event as ``ctx`` may read it. Admins (and the runtime) and the event's own principal get it
    whole; anybody else who sees only their own data (viewers; users never get others' events at all) gets
    its type, time, principal, session and outcome, with ``detail`` emptied, ``data`` cut to a few
    outcome fields, no ``hash`` (an unsalted digest of the content would confirm a guessed value) and
    ``redacted: true``: tool inputs, memory keys and free text stay with those who may read them. What is
    stored and its hash chain are untouched."""
    principal = event.get("principal", "")
    if not sees_own_only(ctx) or (principal == ctx.principal and principal not in _UNOWNED):
        return event
    data = event.get("data")
    kept = {k: v for k, v in data.items() if k in _SHOWN_DATA and _plain(v)} if isinstance(data, dict) else {}
    return event | {"detail": "", "data": kept, "hash": "", "redacted": True}


def _plain(value: Any) -> bool:
    """A number, a flag, nothing, or a short name: nothing a person wrote."""
    if value is None or isinstance(value, (bool, int, float)):
        return True
    return isinstance(value, str) and _SHOWN_NAME.fullmatch(value) is not None


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
        written = append_record(host, record)
    except (TypeError, ValueError) as e:  # not storable JSON (a NaN in the data): dropped, counted
        audit_not_written(host, record, e)
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
        "session_id": session_id[:SESSION_ID_CHARS],
        "data": body,
        "principal": ctx.principal,
        "ts": now,
    }
    if ctx.request_id:
        record["request_id"] = ctx.request_id
    if timestamp > 0:
        record["reported_ts"] = as_seconds(timestamp)
    return record


SESSION_ID_CHARS = 200
"""How much of a session id an event keeps (and so its session subject names)."""


def subject(prefix: str, name: str) -> str:
    """The subject key of a principal (``USER_SUBJECT``) or a session (``SESSION_SUBJECT``). A name the store
    cannot take as it is (a NUL, or longer than its 512-character limit with the prefix: an event's ids come
    from requests) is named by its sha256 instead, the same way when the event is written and when it is
    forgotten, so no such event is left unwritten and none unforgettable."""
    if prefix == SESSION_SUBJECT:
        name = name[:SESSION_ID_CHARS]
    key = prefix + name
    if len(key) <= 512 and "\x00" not in key:
        return key
    return prefix + "sha256:" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()


def audit_subjects(record: dict[str, Any]) -> list[str]:
    """Whom an event concerns, as the keys it is sealed under: the principal who acted (not the runtime's
    own ``system``) and the session. Forgetting either makes the event unreadable."""
    subjects = []
    principal = str(record.get("principal", ""))
    if principal not in _UNOWNED:
        subjects.append(subject(USER_SUBJECT, principal))
    if record.get("session_id"):
        subjects.append(subject(SESSION_SUBJECT, str(record["session_id"])))
    return subjects


def append_record(host: Host, record: dict[str, Any]) -> asyncio.Future[Any]:
    """Queue ``record`` on the trail: chain format 2, its type the entry's kind, sealed under its subjects."""
    return host.events.append_nowait(
        STREAM, record, kind=record["event_type"], subjects=audit_subjects(record)
    )


def _fired(host: Host, record: dict[str, Any], written: asyncio.Future[Any]) -> None:
    """A fired event is committed (or failed): counted, and ``audit_event`` told for its subscribers. Runs in
    the sender's context (the future's callback), so the cast goes to the sender's tenant."""
    if not audit_written(host, record, written):
        return
    try:
        host.send("audit_event", "forward_event", {"seq": written.result().seq})
    except (ActorNotFound, InvalidArgument, Overloaded, ShuttingDown) as e:
        # Written all the same: only live subscribers miss it (poll_events still has it).
        host.incr_counter("audit_forward_dropped_total")
        log.debug("audit event %s not forwarded: %s", record["event_type"], e.message)


def audit_written(host: Host, record: dict[str, Any], written: asyncio.Future[Any]) -> bool:
    """Whether an append of ``record`` was written: counted if so, logged and counted as failed if not."""
    error = asyncio.CancelledError() if written.cancelled() else written.exception()
    if error is not None:
        audit_not_written(host, record, error)
        return False
    host.incr_counter("audit_events_total", event_type=record["event_type"])
    return True


def audit_not_written(host: Host, record: dict[str, Any], error: BaseException) -> None:
    log.error("audit event %s not written: %r", record["event_type"], error)
    host.incr_counter("audit_write_failed_total")


def as_seconds(value: float) -> float:
    return value / 1000.0 if value > _MS_THRESHOLD else float(value)


__all__ = [
    "REDACTED",
    "SESSION_SUBJECT",
    "STREAM",
    "USER_SUBJECT",
    "append_record",
    "audit_record",
    "audit_subjects",
    "fire_audit",
    "is_restricted",
    "scrub_secrets",
    "sees_own_only",
    "shown_to",
    "subject",
]
