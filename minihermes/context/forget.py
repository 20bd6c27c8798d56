"""Forgetting across stores: what is deleted is deleted everywhere it went.

``memory.forget`` deletes its own records and then calls ``forget_elsewhere`` for the rest of what a session,
a user or a tenant (the *subject*) left behind:

- here: the session-search index (its documents and vectors) and the compressor's archives of full
  histories;
- the agents' durable histories (``forget_session``, a cast: an agent may be in a turn that is waiting on
  the caller, and an ``ask`` would wait on it in turn; the casts are queued before this returns, so a later
  request to the same agent sees the history gone, and the agent's next checkpoint overwrites the old one);
- every actor type that takes ``forget_subject`` (``FORGET_OP``; ``Host.actors_taking``, as turn listeners
  are found): session records and their workspaces, kanban cards, cron jobs, goals, notifications, skills,
  and last the audit trail, so that nothing written while forgetting names the subject in clear. Each gets
  ``{user_id, session_id, tenant}`` (exactly one set), runs as the caller, checks what it may forget
  (``subject``) and answers ``{"cleared": {store: count}}``;
- finally the full-text indexes that lost documents are compacted (``host.text.compact``), so no deleted
  word stays in an old FTS5 segment, and the WAL is truncated.

Every store here is in the caller's tenant scope, so nothing outside the tenant can be named.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from minihermes import permissions
from minihermes.runtime import (
    ActorError,
    ActorNotFound,
    Host,
    InvalidArgument,
    PermissionDenied,
    RequestContext,
    current_context,
)

from . import session_index

FORGET_OP = "forget_subject"
"""The op every store that keeps something of a session, a user or the tenant takes (see the module)."""
AUDIT_ACTOR = "audit_event"
"""Told last: the other stores may write audit events while they forget."""
FORGET_TIMEOUT = 120.0


@dataclass(frozen=True, slots=True)
class Subject:
    """What is forgotten: one session, one user, or (``tenant``) everything of the tenant."""

    user_id: str = ""
    session_id: str = ""
    tenant: bool = False

    @property
    def kind(self) -> str:
        return "session" if self.session_id else "user" if self.user_id else "tenant"

    def payload(self) -> dict[str, Any]:
        return {"user_id": self.user_id, "session_id": self.session_id, "tenant": self.tenant}


def is_admin(ctx: RequestContext | None = None) -> bool:
    """An admin or the runtime (``minihermes.permissions.is_admin``, of the current request by default): may
    forget any user, any session, the tenant."""
    return permissions.is_admin(ctx or current_context())


def subject(op: str, *, user_id: str = "", session_id: str = "", tenant: bool = False) -> Subject:
    """The subject a ``forget_subject`` call names, checked against the caller: a session, else a user, else
    (``tenant``, alone) the tenant. A user (anybody but an admin or the runtime) may name only themselves, and
    only an admin the tenant. A session is checked by each store item by item (a user's forget of a session
    takes only what is theirs in it: ``may_forget``). A ``user_id`` beside a ``session_id`` is ignored: the
    HTTP edge fills in a user's own ``user_id`` where an op takes one."""
    ctx = current_context()
    if tenant and not is_admin(ctx):
        raise PermissionDenied(f"{op}: forgetting a tenant needs the admin role", op=op, field="tenant")
    if tenant and (user_id or session_id):
        raise InvalidArgument(f"{op}: tenant names everything: give it alone", op=op, field="tenant")
    if session_id:
        return Subject(session_id=session_id)
    if user_id and user_id != ctx.principal and not is_admin(ctx):
        raise PermissionDenied(f"{op}: users can forget only themselves", op=op, field="user_id")
    if not (user_id or tenant):
        raise InvalidArgument(f"{op}: give session_id, user_id or tenant", op=op, field="user_id")
    return Subject(user_id=user_id, tenant=tenant)


def may_forget(owner: str, ctx: RequestContext | None = None) -> bool:
    """Whether the caller may forget an item owned by ``owner`` (theirs, or they are an admin)."""
    ctx = ctx or current_context()
    return is_admin(ctx) or owner == ctx.principal


async def record_session(host: Host, session_id: str, user_id: str) -> None:
    """Remember who a session belongs to (for forgetting a user, and ownership checks): the first owner
    recorded stays."""
    await host.tuples.write_unless(
        ["session_owner", session_id, user_id], ["session_owner", session_id, None]
    )


async def session_owner(host: Host, session_id: str) -> str | None:
    row = await host.tuples.read(["session_owner", session_id, None])
    return None if row is None else str(row[2])


async def subject_sessions(host: Host, who: Subject) -> set[str]:
    """The sessions a subject had, as the tenant's indexes know them: the session itself; a user's sessions
    (recorded owner, transcript documents, archived histories); every session of the tenant. A store with
    its own record of sessions (the session manager) adds its own."""
    if who.session_id:
        return {who.session_id}
    user = who.user_id or None
    rows = [
        *(await host.tuples.read_all(["session_owner", None, user])),
        *(await host.tuples.read_all(["transcript_doc", None, user, None])),
        *(await host.tuples.read_all(["history_archive", None, user, None])),
    ]
    return {str(r[1]) for r in rows if r[1]}


def _cast(host: Host, target: str, op: str, payload: dict[str, Any]) -> bool:
    try:
        host.send(target, op, payload)
        return True
    except (ActorNotFound, ActorError) as e:
        host.log.warning("forget: %s.%s not delivered: %s", target, op, e.message)
        return False


def _merge(into: dict[str, int], reply: Any, actor: str) -> None:
    """Add a store's ``cleared`` counts (an audit reply may count ``forgotten`` events instead)."""
    if not isinstance(reply, dict):
        return
    cleared = reply.get("cleared")
    if isinstance(cleared, dict):
        for store, n in cleared.items():
            if isinstance(n, int) and not isinstance(n, bool):
                into[str(store)] = into.get(str(store), 0) + n
    elif actor == AUDIT_ACTOR and isinstance(reply.get("forgotten"), int):
        into["audit_events"] = into.get("audit_events", 0) + int(reply["forgotten"])


async def ask_stores(host: Host, who: Subject, *, skip: Iterable[str] = ()) -> dict[str, int]:
    """``forget_subject`` asked of every actor type that takes it (the audit trail last), as the caller;
    their counts summed per store."""
    cleared: dict[str, int] = {}
    names = [n for n in host.actors_taking(FORGET_OP) if n not in set(skip)]
    names.sort(key=lambda n: n == AUDIT_ACTOR)  # stable: the others in name order, then the audit trail
    for name in names:
        _merge(cleared, await host.ask(name, FORGET_OP, who.payload(), timeout=FORGET_TIMEOUT), name)
    return cleared


async def forget_elsewhere(
    host: Host, *, session_id: str = "", user_id: str = "", indexes: Iterable[str] = ()
) -> dict[str, Any]:
    """Forget a session, a user, or (neither given) the whole tenant outside the memory store; ``indexes``:
    the caller's own full-text indexes that lost documents, compacted with the session index's. Returns the
    counts of before (``transcript_docs``, ``archives``, ``sessions_cleared``, ``skill_store_notified``) and
    ``cleared``: per store, what went."""
    who = Subject(user_id=user_id, session_id=session_id, tenant=not (session_id or user_id))
    sessions = await subject_sessions(host, who)
    docs, indexed, touched = await session_index.forget(host, session_id=session_id, user_id=user_id)
    sessions |= indexed
    owners = await host.tuples.read_all(["session_owner", session_id or None, user_id or None])
    sessions |= {str(r[1]) for r in owners}
    users = {str(r[2]) for r in owners if r[2]}
    if user_id:
        users.add(user_id)
    archives = 0
    if host.has_actor("context_compressor"):
        reply = await host.ask(
            "context_compressor",
            "forget",
            {"session_id": session_id, "user_id": user_id, "everything": who.tenant},
        )
        archives = int(reply.get("deleted", 0))
    cleared = 0
    if host.has_actor("agent"):
        for sid in sorted(sessions):
            cleared += _cast(host, f"agent/{sid}", "forget_session", {"session_id": sid})
    stores = await ask_stores(host, who, skip=("memory",))
    skills = int("skill_store" in host.actors_taking(FORGET_OP))
    if not skills and host.has_actor("skill_store"):  # a skill store without forget_subject: told
        if session_id:
            skills += _cast(host, "skill_store", "forget", {"session_id": session_id, "user_id": ""})
        else:
            for uid in sorted(users):
                skills += _cast(host, "skill_store", "forget", {"session_id": "", "user_id": uid})
    for row in owners:
        await host.tuples.take_all(list(row))
    await host.text.compact(*dict.fromkeys([*indexes, *touched]))
    counts = {"transcripts": cleared, "session_index": docs, "archives": archives, **stores}
    return {
        "transcript_docs": docs,
        "archives": archives,
        "sessions_cleared": cleared,
        "skill_store_notified": skills,
        "cleared": counts,
    }
