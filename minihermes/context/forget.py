"""Forgetting across stores: what is deleted is deleted everywhere it went.

``memory.forget`` deletes its own records and then calls ``forget_elsewhere`` for the rest of what a session,
a user or a tenant left behind: the session-search index, the compressor's archives of full histories, the
agents' durable histories, and skill provenance (``skill_store.forget``). Every store here is in the
caller's tenant scope, so nothing outside the tenant can be named. Agents and the skill store are told with
casts: an agent may be in a turn that is waiting on the caller, and an ``ask`` would wait on it in turn.
The casts are queued before this returns, so a later request to the same agent sees the history gone.
"""

from __future__ import annotations

from typing import Any

from minihermes.runtime import ActorError, ActorNotFound, Host

from . import session_index


async def record_session(host: Host, session_id: str, user_id: str) -> None:
    """Remember who a session belongs to (for forgetting a user, and ownership checks): the first owner
    recorded stays."""
    await host.tuples.write_unless(
        ["session_owner", session_id, user_id], ["session_owner", session_id, None]
    )


async def session_owner(host: Host, session_id: str) -> str | None:
    row = await host.tuples.read(["session_owner", session_id, None])
    return None if row is None else str(row[2])


def _cast(host: Host, target: str, op: str, payload: dict[str, Any]) -> bool:
    try:
        host.send(target, op, payload)
        return True
    except (ActorNotFound, ActorError) as e:
        host.log.warning("forget: %s.%s not delivered: %s", target, op, e.message)
        return False


async def forget_elsewhere(host: Host, *, session_id: str = "", user_id: str = "") -> dict[str, Any]:
    """Forget a session, a user, or (neither given) the whole tenant outside the memory store. Returns
    counts per store."""
    docs, sessions = await session_index.forget(host, session_id=session_id, user_id=user_id)
    owners = await host.tuples.read_all(["session_owner", session_id or None, user_id or None])
    sessions |= {str(r[1]) for r in owners}
    users = {str(r[2]) for r in owners if r[2]}
    if session_id:
        sessions.add(session_id)
    if user_id:
        users.add(user_id)
    archives = 0
    if host.has_actor("context_compressor"):
        reply = await host.ask(
            "context_compressor",
            "forget",
            {"session_id": session_id, "user_id": user_id, "everything": not (session_id or user_id)},
        )
        archives = int(reply.get("deleted", 0))
    cleared = 0
    if host.has_actor("agent"):
        for sid in sorted(sessions):
            cleared += _cast(host, f"agent/{sid}", "forget_session", {"session_id": sid})
    skills = 0
    if host.has_actor("skill_store"):
        if session_id:
            skills += _cast(host, "skill_store", "forget", {"session_id": session_id, "user_id": ""})
        else:
            for uid in sorted(users):
                skills += _cast(host, "skill_store", "forget", {"session_id": "", "user_id": uid})
    for row in owners:
        await host.tuples.take_all(list(row))
    return {
        "transcript_docs": docs,
        "archives": archives,
        "sessions_cleared": cleared,
        "skill_store_notified": skills,
    }
