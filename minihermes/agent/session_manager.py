"""``session_manager``: the tenant's sessions, one instance per tenant.

A session's metadata lives in the tenant's KV under ``session:<id>``; a secondary index
``session_map:<channel>:<user_id>`` points at the newest session of a channel and user, so a webhook that
carries only those two finds its session without a scan, and ``session_user:<user_id>:<id>`` lists a user's
sessions. Session ids are random (``sess-`` + 128 bits), so knowing one session id tells nothing about another.

End users (role ``user`` without ``admin``) see and manage only their own sessions (``user_id`` is their
principal); admins and viewers see the tenant's. Starts and ends are audited.

Every door that starts a turn registers its session here without knowing it: at the start of each turn the
agent casts ``record_turn`` with the caller's context. A session seen for the first time is created, owned by
the turn's principal, on the channel the door named (``agent.chat(channel=...)``) or the one its id tells
(``cron:``, ``kanban:``, ``delegate:``, ``task:``, ``orch:``, ``cli``), else ``api``, and titled by its
first user message (one short line). Each turn then updates ``last_active_at`` and ``message_count`` (the
user's messages, one per turn) of a session the caller owns; a session another principal owns is never
changed. ``list_sessions`` orders by last activity and finds sessions by title (``query``).

Secrets a user types are redacted before anything is stored (``minihermes.context.redact``, as in chat
history): in the title taken from the first message and in the ``metadata`` of ``create_session``.

Forgetting (``forget_subject``, asked by ``memory.forget``): a session's record, title included, and its
index entries are deleted, and so is its workspace folder (``workspace_root``: the app gives the session
workspaces' folder), for one session, every session of a user, or the tenant's. A user forgets only their
own sessions; a session whose owner is not known (no record, no recorded owner) only an admin.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

from minihermes.context import forget as forgetting
from minihermes.context.redact import redact, redact_text
from minihermes.runtime import (
    ActorArgs,
    ActorError,
    GenServer,
    Host,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    RequestContext,
    call,
    cast,
    current_context,
    state,
)
from minihermes.tools.workspace import erase_workspaces

from .audit_event import fire_audit, is_restricted, sees_own_only

_SESSION = "session:"
_BY_CHANNEL = "session_map:"
_BY_USER = "session_user:"
_FIELD = re.compile(r"^[^\x00-\x1f\x7f]{1,128}$")
_SESSION_ID = re.compile(r"^[A-Za-z0-9_.:\-]{1,128}$")
MAX_LIST = 1000
MAX_METADATA_BYTES = 8192
MAX_TITLE_CHARS = 80
MAX_QUERY_CHARS = 200
_CHANNEL_BY_PREFIX = (
    ("cron:", "cron"),
    ("kanban:", "kanban"),
    ("delegate:", "delegation"),
    ("task:", "task"),
    ("orch:", "orchestrator"),
    ("cli-", "cli"),
)
"""The channel a session's id tells, for a door that names none (the work actors' own session names)."""


class SessionManager(GenServer):
    """Create, find, touch, end and list the tenant's sessions."""

    class Args(ActorArgs):
        workspace_root: str | None = None
        """The session workspaces' folder (``<data_dir>/workspaces``): forgetting a session deletes its own."""

    total_created: int = state(default=0)
    total_ended: int = state(default=0)

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        root = args.get("workspace_root")
        self.workspace_root = Path(root) if root else None
        self.host.join("svc:session_manager")

    @call(access="write")
    async def create_session(
        self,
        channel: str = "web",
        user_id: str = "anonymous",
        agent_id: str = "agent",
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A new active session for (channel, user_id); it becomes the one the index resolves to."""
        ctx = current_context()
        if is_restricted(ctx):
            user_id = _own_user(ctx, user_id, default_marker="anonymous")
        _check_field("channel", channel)
        _check_field("user_id", user_id)
        _check_field("agent_id", agent_id)
        if metadata and len(json.dumps(metadata, default=str)) > MAX_METADATA_BYTES:
            raise InvalidArgument(
                f"metadata must be at most {MAX_METADATA_BYTES} bytes of JSON", field="metadata"
            )
        session_id = f"sess-{uuid.uuid4().hex}"
        meta = _new_record(
            session_id,
            channel,
            user_id,
            agent_id,
            ctx.principal,
            self.host.now(),
            metadata=redact(metadata or {}),
        )
        await self._start(meta)
        await self.host.kv.put(_index_key(channel, user_id), session_id)
        return {"status": "ok", **meta}

    @call(access="read")
    async def get_session(self, session_id: str = "", channel: str = "", user_id: str = "") -> dict[str, Any]:
        """By id, or by (channel, user_id) through the secondary index."""
        ctx = current_context()
        if not session_id:
            if not channel:
                raise InvalidArgument("give session_id, or channel and user_id", field="session_id")
            if sees_own_only(ctx):
                user_id = _own_user(ctx, user_id)
            if not user_id:
                raise InvalidArgument("give session_id, or channel and user_id", field="user_id")
            found = await self.host.kv.get(_index_key(channel, user_id))
            if not isinstance(found, str):
                raise NotFound(
                    f"no session for channel '{channel}' and user '{user_id}'",
                    channel=channel,
                    user_id=user_id,
                )
            session_id = found
        meta = await self._load(session_id, ctx)
        return {"status": "ok", **meta}

    @call(access="write")
    async def end_session(self, session_id: str) -> dict[str, Any]:
        """Mark the session ended (idempotent); the channel index no longer resolves to it."""
        ctx = current_context()
        meta = await self._load(session_id, ctx)
        if meta["state"] == "ended":
            return {"status": "ok", "session_id": session_id, "state": "ended", "already_ended": True}
        meta["state"] = "ended"
        meta["ended_at"] = self.host.now()
        meta["ended_by"] = ctx.principal
        await self.host.kv.put(_SESSION + session_id, meta)
        index = _index_key(meta["channel"], meta["user_id"])
        if await self.host.kv.get(index) == session_id:
            await self.host.kv.delete(index)
        self.total_ended += 1
        if self.host.has_actor("memory"):
            # Session-scoped memories end with the session (memory.session_ended drops them).
            try:
                self.host.send("memory", "session_ended", {"session_id": session_id})
            except ActorError as e:
                self.host.log.warning("session %s: memories not dropped: %s", session_id, e.message)
        fire_audit(
            self.host,
            "session_ended",
            f"session_id={session_id}",
            session_id=session_id,
            data={"channel": meta["channel"], "user_id": meta["user_id"]},
        )
        return {"status": "ok", "session_id": session_id, "state": "ended", "already_ended": False}

    @call(access="read")
    async def list_sessions(
        self,
        user_id: str = "",
        state: str = "",
        channel: str = "",
        limit: int = 100,
        query: str = "",
        owner: str = "",
    ) -> dict[str, Any]:
        """Sessions, the most recently active first; users get only their own. Filters: ``state``
        (active|ended), ``channel``, ``query`` (every word of it in the title or the id, any case),
        ``owner`` (the principal's own sessions: theirs, and those they made for nobody in particular; an
        admin's own, where their list would be everyone's)."""
        ctx = current_context()
        if sees_own_only(ctx):
            user_id = _own_user(ctx, user_id)
            if owner and owner != ctx.principal:
                raise PermissionDenied("users can only list their own sessions", field="owner")
        if owner:
            _check_field("owner", owner)
        if state not in ("", "active", "ended"):
            raise InvalidArgument("state must be '', 'active' or 'ended'", field="state")
        if limit < 1 or limit > MAX_LIST:
            raise InvalidArgument(f"limit must be between 1 and {MAX_LIST}", field="limit")
        if len(query) > MAX_QUERY_CHARS:
            raise InvalidArgument(f"query must be at most {MAX_QUERY_CHARS} characters", field="query")
        words = query.casefold().split()
        if user_id or owner:
            if user_id:
                _check_field("user_id", user_id)  # an overlong one reached the store's prefix check: a 500
            users = [user_id] if user_id else [owner, "anonymous"]
            ids = []
            for user in users:
                prefix = f"{_BY_USER}{quote(user, safe='')}:"
                ids += [key[len(prefix) :] for key, _ in await self.host.kv.list(prefix)]
            found = await asyncio.gather(*(self.host.kv.get(_SESSION + i) for i in ids))
            metas = [m for m in found if isinstance(m, dict)]
        else:
            metas = [m for _, m in await self.host.kv.list(_SESSION) if isinstance(m, dict)]
        rows = [
            m
            for m in metas
            if (not owner or _owned_by(m, owner))
            and (not state or m.get("state") == state)
            and (not channel or m.get("channel") == channel)
            and (not words or _matches(m, words))
        ]
        rows.sort(key=_recency, reverse=True)
        total = len(rows)
        rows = rows[:limit]
        return {"status": "ok", "sessions": rows, "count": len(rows), "total": total}

    @cast(access="write")
    async def touch(self, session_id: str) -> None:
        """Record activity on a session (fire-and-forget; unknown or foreign sessions are ignored)."""
        if not _SESSION_ID.fullmatch(session_id):
            return
        meta = await self.host.kv.get(_SESSION + session_id)
        if not isinstance(meta, dict) or not _visible(meta, current_context()):
            return
        meta["last_active_at"] = self.host.now()
        await self.host.kv.put(_SESSION + session_id, meta)

    @cast(access="admin")
    async def record_turn(self, session_id: str, channel: str = "", title_hint: str = "") -> None:
        """A turn starts in ``session_id`` (cast by the agent, with the turn's context; see the module
        docstring). Fire-and-forget: an id this index cannot hold, or another principal's session, is left
        alone. Admin over HTTP: a user's turn casts it from inside the node, and nobody else names sessions
        for them."""
        if not _SESSION_ID.fullmatch(session_id):
            return
        ctx = current_context()
        now = self.host.now()
        key = _SESSION + session_id
        meta = await self.host.kv.get(key)
        if isinstance(meta, dict):
            if not _owned_by(meta, ctx.principal):
                return
            meta["last_active_at"] = now
            meta["message_count"] = int(meta.get("message_count") or 0) + 1
            if not meta.get("title"):
                meta["title"] = session_title(title_hint, str(meta.get("channel") or ""))
            await self.host.kv.put(key, meta)
            return
        channel = channel_of(session_id, channel)
        title = session_title(title_hint, channel)
        await self._start(
            _new_record(session_id, channel, ctx.principal, "agent", ctx.principal, now, title=title, turns=1)
        )

    @call(access="write")
    async def forget_subject(
        self, user_id: str = "", session_id: str = "", tenant: bool = False
    ) -> dict[str, Any]:
        """Forget a session, a user's sessions or (admin) the tenant's: records (titles included) and their
        index entries, and workspace folders. ``cleared``: ``sessions`` (records), ``workspace_files``
        (files and folders deleted)."""
        who = forgetting.subject("forget_subject", user_id=user_id, session_id=session_id, tenant=tenant)
        if session_id and not _SESSION_ID.fullmatch(session_id):
            return {"status": "ok", "cleared": {"sessions": 0, "workspace_files": 0}}  # never stored here
        metas = [m for _, m in await self.host.kv.list(_SESSION) if isinstance(m, dict)]
        if who.session_id:
            metas = [m for m in metas if m.get("session_id") == who.session_id]
        elif who.user_id:
            metas = [m for m in metas if _owned_by(m, who.user_id)]
        metas = [m for m in metas if forgetting.may_forget(_owner(m))]
        for meta in metas:
            await self._erase(meta)
        sessions = {str(m["session_id"]) for m in metas}
        if who.user_id:
            sessions |= await forgetting.subject_sessions(self.host, who)
        elif who.session_id and not metas:
            owner = await forgetting.session_owner(self.host, who.session_id)
            if owner is not None and forgetting.may_forget(owner):
                sessions.add(who.session_id)
        files = 0
        if self.workspace_root is not None and (sessions or who.tenant):
            ctx = current_context()
            files = await asyncio.to_thread(
                erase_workspaces,
                self.workspace_root,
                ctx.tenant,
                ctx.namespace,
                None if who.tenant else sorted(sessions),
            )
        return {"status": "ok", "cleared": {"sessions": len(metas), "workspace_files": files}}

    async def _erase(self, meta: dict[str, Any]) -> None:
        """A session's record and every index entry that points at it."""
        session_id = str(meta["session_id"])
        await self.host.kv.delete(_SESSION + session_id)
        await self.host.kv.delete(_user_key(str(meta.get("user_id")), session_id))
        index = _index_key(str(meta.get("channel")), str(meta.get("user_id")))
        if await self.host.kv.get(index) == session_id:
            await self.host.kv.delete(index)

    async def _start(self, meta: dict[str, Any]) -> None:
        """A new session: its record and its owner's index entry stored, counted and audited."""
        session_id, channel, user_id = meta["session_id"], meta["channel"], meta["user_id"]
        await self.host.kv.put(_SESSION + session_id, meta)
        await self.host.kv.put(_user_key(user_id, session_id), meta["created_at"])
        self.total_created += 1
        self.host.incr_counter("sessions_created_total")
        fire_audit(
            self.host,
            "session_started",
            f"session_id={session_id} channel={channel} user_id={user_id}",
            session_id=session_id,
            data={"channel": channel, "user_id": user_id, "agent_id": meta["agent_id"]},
        )

    @call(access="read")
    def get_stats(self) -> dict[str, Any]:
        return {"status": "ok", "total_created": self.total_created, "total_ended": self.total_ended}

    async def _load(self, session_id: str, ctx: RequestContext) -> dict[str, Any]:
        if not _SESSION_ID.fullmatch(session_id):
            raise InvalidArgument(
                "session_id must be 1-128 characters of letters, digits, '_', '.', ':', '-'",
                field="session_id",
            )
        meta = await self.host.kv.get(_SESSION + session_id)
        # another user's session answers exactly like a missing one: its existence is not disclosed
        if not isinstance(meta, dict) or not _visible(meta, ctx):
            raise NotFound(f"no session '{session_id}'", session_id=session_id)
        return meta


def _new_record(
    session_id: str,
    channel: str,
    user_id: str,
    agent_id: str,
    created_by: str,
    now: float,
    *,
    metadata: dict[str, Any] | None = None,
    title: str = "",
    turns: int = 0,
) -> dict[str, Any]:
    """A new, active session's record (``create_session``'s, or ``record_turn``'s for a session a turn
    started): ``turns`` is its ``message_count`` so far."""
    return {
        "session_id": session_id,
        "channel": channel,
        "user_id": user_id,
        "agent_id": agent_id,
        "created_by": created_by,
        "created_at": now,
        "last_active_at": now,
        "ended_at": None,
        "state": "active",
        "metadata": metadata or {},
        "title": title,
        "message_count": turns,
    }


async def session_user(host: Host, session_id: str) -> str | None:
    """The principal whose session ``session_id`` is, by its record here (None: no record). A session made
    for nobody in particular (``anonymous``) is its creator's. For other actors' ownership checks."""
    if not _SESSION_ID.fullmatch(session_id):
        return None
    meta = await host.kv.get(_SESSION + session_id)
    if not isinstance(meta, dict):
        return None
    return _owner(meta)


def _owner(meta: dict[str, Any]) -> str:
    """The principal a session record belongs to (``session_user``'s rule)."""
    user = meta.get("user_id")
    return str(meta.get("created_by") if user == "anonymous" else user)


def _visible(meta: dict[str, Any], ctx: RequestContext) -> bool:
    return not sees_own_only(ctx) or meta.get("user_id") == ctx.principal


def _owned_by(meta: dict[str, Any], principal: str) -> bool:
    """The session is ``principal``'s: theirs, or made by them for nobody in particular."""
    user = meta.get("user_id")
    return user == principal or (user == "anonymous" and meta.get("created_by") == principal)


def _recency(meta: dict[str, Any]) -> tuple[float, float, str]:
    created = float(meta.get("created_at") or 0)
    return float(meta.get("last_active_at") or created), created, str(meta.get("session_id", ""))


def _matches(meta: dict[str, Any], words: list[str]) -> bool:
    text = f"{meta.get('title') or ''} {meta.get('session_id', '')}".casefold()
    return all(w in text for w in words)


def channel_of(session_id: str, given: str = "") -> str:
    """The channel of a session first seen in a turn: the one its door named, else the one its id tells,
    else ``api``."""
    if given and _FIELD.fullmatch(given):
        return given
    if session_id == "cli":  # ``minihermes chat``'s default session
        return "cli"
    return next((ch for prefix, ch in _CHANNEL_BY_PREFIX if session_id.startswith(prefix)), "api")


def session_title(text: str, channel: str = "") -> str:
    """One short line from a session's first user message (a delegated session: its goal), secrets
    redacted."""
    if channel == "delegation" and "\nGoal:" in text:
        text = text.split("\nGoal:", 1)[1]
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    # Redacted whole, before it is cut: a secret cut in half no longer looks like one.
    line = " ".join(redact_text(line).split())
    return line if len(line) <= MAX_TITLE_CHARS else line[: MAX_TITLE_CHARS - 1].rstrip() + "…"


def _own_user(ctx: RequestContext, user_id: str, default_marker: str = "") -> str:
    """A restricted caller acts only as itself: an empty (or default) user_id means the caller."""
    if user_id in ("", default_marker) or user_id == ctx.principal:
        return ctx.principal
    raise PermissionDenied("users can only act on their own sessions", field="user_id")


def _check_field(name: str, value: str) -> None:
    if not _FIELD.fullmatch(value):
        raise InvalidArgument(f"{name} must be 1-128 printable characters", field=name)


def _index_key(channel: str, user_id: str) -> str:
    # quoted so that no (channel, user) pair can collide with another through a ':' in either
    return f"{_BY_CHANNEL}{quote(channel, safe='')}:{quote(user_id, safe='')}"


def _user_key(user_id: str, session_id: str) -> str:
    return f"{_BY_USER}{quote(user_id, safe='')}:{session_id}"


__all__ = ["SessionManager", "channel_of", "session_title", "session_user"]
