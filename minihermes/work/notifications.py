"""Notifications (one per tenant): each person's inbox of what the runtime tells them without being asked.

A reminder that fires, a scheduled run's answer (or its failure, in words): each reaches its owner as a
notification, a short text with where it came from (``source``, e.g. ``cron:<job_id>``). People read their
own inbox only (``list_notifications``, ``mark_read``); an admin reads their own too, and another user's only
by naming them (``user_id``). Only the runtime's own hops and admins deliver (``notify``).

Notifications live in the tenant's KV (``notif:<user>:<id>``, the user percent-encoded), so they survive
restarts and every node on the store sees the same inbox. A delivery with a ``dedupe_key`` (a cron run's id)
gets an id derived from that key and is written only if absent (compare-and-set on an absent key), so a
delivery repeated after a crash, by a redelivered run, is the same notification, not a second one. Each
inbox keeps its newest ``keep`` (500) notifications; older ones are dropped when a new one arrives. The text
is stored with recognisable secrets redacted, as chat and memory are.

A new notification is also published to the live topic ``notifications:<user>`` of the tenant (what the
HTTP API's ``GET /api/v1/notifications/stream`` forwards as the ``notification`` event): per user, so
another user's stream never carries it.

Forgetting a user (``forget_subject``, asked by ``memory.forget``) deletes their inbox; forgetting the tenant,
every inbox. A session has no notifications of its own (a run's notification is its job owner's).
"""

from __future__ import annotations

import hashlib
import re
import uuid
from typing import Any
from urllib.parse import quote

from minihermes.context.forget import subject
from minihermes.runtime import (
    ActorArgs,
    GenServer,
    InvalidArgument,
    PermissionDenied,
    call,
    current_context,
)

from ._owner import acting_principal, is_admin, scrub

DEFAULT_KEEP = 500
MAX_TEXT_CHARS = 20_000
MAX_SOURCE_CHARS = 200
MAX_LIST = 500
MAX_IDS = 500
MAX_QUOTED_USER = 1024
"""Longest principal once percent-encoded into a key: the whole key stays within what every store holds."""
_PREFIX = "notif:"
_ID = re.compile(r"[0-9a-f]{20}")
"""What ``_id_for`` makes: anything else names no notification."""


def topic_for(user_id: str) -> str:
    """The live topic (tenant-scoped by the runtime) on which ``user_id``'s new notifications appear."""
    return f"notifications:{user_id}"


def _check_text(op: str, field: str, value: str) -> None:
    """Text a store can hold as it is: no NUL, no lone surrogate (not UTF-8)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(f"{op}: {field} is not valid text", op=op, field=field) from None
    if "\x00" in value:
        raise InvalidArgument(f"{op}: {field} must not contain NUL characters", op=op, field=field)


def _user_prefix(op: str, user_id: str) -> str:
    _check_text(op, "user_id", user_id)
    quoted = quote(user_id, safe="")
    if not user_id or len(quoted) > MAX_QUOTED_USER:
        raise InvalidArgument(f"{op}: user_id must be 1-{MAX_QUOTED_USER} characters", op=op, field="user_id")
    return f"{_PREFIX}{quoted}:"


def _id_for(user_id: str, dedupe_key: str) -> str:
    if not dedupe_key:
        return uuid.uuid4().hex[:20]
    return hashlib.sha256(f"{user_id}\x00{dedupe_key}".encode()).hexdigest()[:20]


def _view(record: dict[str, Any]) -> dict[str, Any]:
    return {k: record.get(k) for k in ("id", "text", "source", "created_at", "read")}


def _newest_first(rows: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    records = [v for _, v in rows if isinstance(v, dict)]
    records.sort(key=lambda r: (float(r.get("created_at") or 0), int(r.get("seq") or 0)), reverse=True)
    return records


class Notifications(GenServer):
    """Per-tenant inboxes. Args: ``keep`` (newest notifications kept per user)."""

    class Args(ActorArgs):
        keep: int = DEFAULT_KEEP

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.keep = max(1, int(args.get("keep", DEFAULT_KEEP)))

    @call(access="read")
    async def list_notifications(
        self, unread_only: bool = False, limit: int = 50, user_id: str = ""
    ) -> dict[str, Any]:
        """The caller's notifications, newest first: ``{notifications: [{id, text, source, created_at,
        read}], count, unread}`` (``unread``: how many of the inbox are unread). An admin may name
        ``user_id``; anybody else reads their own inbox whatever they name."""
        op = "list_notifications"
        if not 1 <= limit <= MAX_LIST:
            raise InvalidArgument(f"{op}: limit must be 1..{MAX_LIST}", op=op, field="limit")
        who = acting_principal(user_id)
        records = _newest_first(await self.host.kv.list(_user_prefix(op, who)))
        unread = [r for r in records if not r.get("read")]
        shown = (unread if unread_only else records)[:limit]
        return {
            "status": "ok",
            "user_id": who,
            "notifications": [_view(r) for r in shown],
            "count": len(shown),
            "unread": len(unread),
            "total": len(records),
        }

    @call(access="write")
    async def mark_read(self, ids: list[str], user_id: str = "") -> dict[str, Any]:
        """Mark notifications of the caller's as read: ``{marked}`` (how many were unread). Ids that are not
        the caller's (or do not exist) are ignored, as if already read."""
        op = "mark_read"
        if len(ids) > MAX_IDS:
            raise InvalidArgument(f"{op}: at most {MAX_IDS} ids at once", op=op, field="ids")
        who = acting_principal(user_id)
        prefix = _user_prefix(op, who)
        marked = 0
        for nid in dict.fromkeys(ids):
            if not _ID.fullmatch(nid):
                continue  # not an id this actor makes (nor a key the store takes): nothing of the caller's
            key = f"{prefix}{nid}"
            for _ in range(10):
                entry = await self.host.kv.get_entry(key)
                if entry is None or not isinstance(entry.value, dict) or entry.value.get("read"):
                    break
                read = {**entry.value, "read": True, "read_at": self.host.now()}
                if await self.host.kv.cas(key, entry.version, read) is not None:
                    marked += 1
                    break
        return {"status": "ok", "marked": marked}

    @call(access="admin")
    async def notify(self, user_id: str, text: str, source: str = "", dedupe_key: str = "") -> dict[str, Any]:
        """Deliver ``text`` to ``user_id``'s inbox: ``{id, created}``. With ``dedupe_key`` a second
        delivery of the same key is the first one (``created: false``). The runtime's own hops and admins
        only."""
        op = "notify"
        if not is_admin():
            raise PermissionDenied(f"{op}: only the runtime and admins deliver notifications", op=op)
        if not text.strip() or len(text) > MAX_TEXT_CHARS:
            raise InvalidArgument(f"{op}: text must be 1..{MAX_TEXT_CHARS} characters", op=op, field="text")
        if len(source) > MAX_SOURCE_CHARS or len(dedupe_key) > MAX_SOURCE_CHARS:
            raise InvalidArgument(
                f"{op}: source and dedupe_key must be at most {MAX_SOURCE_CHARS} characters", op=op
            )
        for field, value in (("text", text), ("source", source), ("dedupe_key", dedupe_key)):
            _check_text(op, field, value)
        prefix = _user_prefix(op, user_id)
        nid = _id_for(user_id, dedupe_key)
        rows = await self.host.kv.list(prefix)
        records = _newest_first(rows)
        record = {
            "id": nid,
            "user_id": user_id,
            "text": scrub(text),
            "source": source,
            "created_at": self.host.now(),
            "seq": 1 + max((int(r.get("seq") or 0) for r in records), default=0),
            "read": False,
            "dedupe_key": dedupe_key,
            "by": current_context().principal,
        }
        if await self.host.kv.cas(f"{prefix}{nid}", None, record) is None:
            return {"status": "ok", "id": nid, "created": False}  # delivered before: once per key
        for old in records[self.keep - 1 :]:
            await self.host.kv.delete(f"{prefix}{old['id']}")
        self.host.publish(topic_for(user_id), {"type": "notification", **_view(record)})
        self.host.incr_counter("notifications_delivered_total")
        return {"status": "ok", "id": nid, "created": True}

    @call(access="write")
    async def forget_subject(
        self, user_id: str = "", session_id: str = "", tenant: bool = False
    ) -> dict[str, Any]:
        """Delete a user's inbox, or (admin) every inbox of the tenant: ``cleared: {notifications}``."""
        who = subject("forget_subject", user_id=user_id, session_id=session_id, tenant=tenant)
        if who.session_id:
            return {"status": "ok", "cleared": {"notifications": 0}}
        prefix = _PREFIX if who.tenant else _user_prefix("forget_subject", who.user_id)
        rows = await self.host.kv.list(prefix)
        for key, _ in rows:
            await self.host.kv.delete(key)
        return {"status": "ok", "cleared": {"notifications": len(rows)}}


__all__ = ["DEFAULT_KEEP", "Notifications", "topic_for"]
