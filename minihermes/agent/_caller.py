"""Whom a turn acts for and who gave it: the door's name in the prompt, the caller a resumed turn runs as,
and the checks on what a caller may ask of a session (charge a cron job, stop a turn).

A turn keeps its caller's request context; every resume of it (after a restart, on another node, after an
approval) runs as that caller, never as ``system`` or an admin whose rights the caller may not have had.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from minihermes.agent.session_manager import channel_of
from minihermes.runtime import (
    ActorError,
    Host,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    RequestContext,
    current_context,
)

DOORS = {
    "kanban": "the kanban worker",
    "cron": "the cron runner",
    "delegation": "a delegating agent (delegate_task)",
    "task": "the task worker",
    "orchestrator": "the orchestrator",
}
"""How the per-turn instructions name the door that gave them (a session's channel, ``channel_of``)."""
PRIVILEGED = frozenset({"admin", "system"})
"""Roles that may charge a turn to any cron job of the tenant and stop any turn of the tenant."""


def door(session_id: str, channel: str, cron_job: str) -> str:
    """Who gave the turn's instructions, as the system prompt names it: the work actor the session's
    channel tells (``kanban:``, ``cron:``, ``delegate:`` ...), else the caller through its channel."""
    given = channel_of(session_id, channel)
    named = DOORS.get(given, f"the caller (channel {given})")
    return f"{named} (job {cron_job})" if cron_job else named


def turn_caller(turn: dict[str, Any] | None, owner: str) -> RequestContext:
    """Whom the running ``turn`` acts for: the request context its ``chat`` came with, saved with the turn,
    in this session's tenant and namespace. A turn saved before contexts were kept (or with one from
    another scope) resumes as the session's ``owner`` with the ``user`` role."""
    turn = turn or {}
    here = current_context()
    saved = turn.get("context")
    if isinstance(saved, dict):
        try:
            ctx = RequestContext.from_dict(saved)
        except (ActorError, TypeError, ValueError):
            ctx = None
        if ctx is not None and ctx.scope == here.scope:
            return ctx
    return RequestContext(
        tenant=here.tenant,
        namespace=here.namespace,
        principal=owner or str(turn.get("user_id") or ""),
        roles=frozenset({"user"}),
        request_id=f"resume:{turn.get('turn_id', '')}",
    )


def as_runtime() -> RequestContext:
    """This session's scope as the runtime: a stop's housekeeping ops are the runtime's own."""
    return replace(current_context(), principal="agent", roles=frozenset({"system"}))


async def check_cron_job(host: Host, cron_job: str) -> None:
    """``cron_job`` on a chat: its owner's (its scheduled runs act as the owner) or an admin's only, so no
    user charges their turns to another user's job and exhausts its budget."""
    ctx = current_context()
    if ctx.roles & PRIVILEGED:
        return
    job: Any = None
    if host.has_actor("cron_scheduler"):
        try:
            # Asked as the caller: the scheduler shows a user their own jobs only.
            job = (await host.ask("cron_scheduler", "get_job", {"job_id": cron_job}))["job"]
        except ActorError as e:
            if not isinstance(e, NotFound | InvalidArgument | PermissionDenied):
                raise
    if not isinstance(job, dict) or job.get("owner") != ctx.principal:
        raise PermissionDenied(
            f"chat: cron_job '{cron_job[:100]}' is not a job of yours", op="chat", field="cron_job"
        )


def check_may_stop(owner: str, turn: dict[str, Any] | None) -> None:
    """Only the session's owner (or the turn's user) or an admin may stop its turn."""
    ctx = current_context()
    if ctx.roles & PRIVILEGED:
        return
    mine = {owner, str((turn or {}).get("user_id") or "")} - {""}
    if mine and ctx.principal not in mine:
        raise PermissionDenied(
            "cancel_turn: only the session's owner or an admin may stop its turn", op="cancel_turn"
        )


async def check_kanban_card(host: Host, task_id: str, session_id: str) -> None:
    """``kanban_card`` on a chat: only in the session holding that card's claim (the kanban worker runs
    each card's turn in the session it claimed the card with) or from an admin."""
    if len(task_id) > 200 or not task_id.isprintable():
        raise InvalidArgument("chat: kanban_card is a card's id", op="chat", field="kanban_card")
    if current_context().roles & PRIVILEGED:
        return
    card: Any = None
    if host.has_actor("kanban"):
        try:
            card = (await host.ask("kanban", "show", {"task_id": task_id}))["task"]
        except ActorError as e:
            if not isinstance(e, NotFound | InvalidArgument | PermissionDenied):
                raise
    claim = (card or {}).get("claim") or {}
    if not isinstance(card, dict) or card.get("status") != "in_progress" or claim.get("worker") != session_id:
        raise PermissionDenied(
            f"chat: kanban card '{task_id[:100]}' is not claimed by this session",
            op="chat",
            field="kanban_card",
        )
