"""Durable sessions behind the stateless OpenAI API, and the turn the ``/v1`` endpoints run.

A ``/v1`` conversation is one durable session (channel ``openai``, created with ``session_manager`` and
titled by its first message, listed with the others). Which session a request continues:

1. the ``X-MiniHermes-Session`` header (sent back with every reply), or a response's or conversation's
   session (``_openai_responses``), or Open WebUI's ``X-OpenWebUI-Chat-Id`` header as a conversation name;
2. else the **fingerprint** of the history the client resent: after each exchange the server remembers a
   hash of the conversation as the client now holds it (its user and assistant messages, whitespace
   collapsed; system messages aside) pointing at the session, so the next request, whose history before its
   new user message is exactly that, finds it. Only the new user message enters the agent: the session's
   own history stays authoritative;
3. else a new session.

Records live with the tenant's ``api_records`` actor (``_idempotency.records_of``; where ``memory.forget``
reaches them), keyed by or owned by the principal: one user's fingerprints and conversations never lead to another's session, and every session a
request names is checked as the caller (``session_manager.get_session``: a user's own only, else 404).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from minihermes.context.tokens import count_tokens
from minihermes.runtime import ActorError, Conflict, NotFound, RequestContext, Subscription

from ._access import check_key_value
from ._core import ApiState
from ._errors import ApiError
from ._idempotency import Outcome, Ticket, idempotency_of, outcome_of, principal_part, records_of

log = logging.getLogger("minihermes.api")

AGENT = "agent"
SESSIONS = "session_manager"
CHANNEL = "openai"
RECORD_TTL = 90 * 24 * 3600.0
"""Seconds a fingerprint, conversation or response record is kept after its last use."""


def fingerprint(ctx: RequestContext, messages: list[tuple[str, str]]) -> str:
    """The hash of a conversation as a client holds it: roles and texts, whitespace collapsed."""
    norm = [[role, " ".join(text.split())] for role, text in messages if role in ("user", "assistant")]
    text = json.dumps(norm, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _key(ctx: RequestContext, kind: str, name: str) -> str:
    return f"{kind}:{principal_part(ctx)}:{name}"


async def find_by_fingerprint(state: ApiState, ctx: RequestContext, fp: str) -> str | None:
    found = await records_of(state.node, ctx).get(_key(ctx, "fp", fp))
    return found if isinstance(found, str) else None


async def remember_fingerprint(state: ApiState, ctx: RequestContext, fp: str, session_id: str) -> None:
    await records_of(state.node, ctx).put(_key(ctx, "fp", fp), session_id, ttl=RECORD_TTL)


async def conversation_session(state: ApiState, ctx: RequestContext, name: str) -> str | None:
    found = await records_of(state.node, ctx).get(_key(ctx, "conv", _digest(name)))
    return found if isinstance(found, str) else None


async def name_conversation(state: ApiState, ctx: RequestContext, name: str, session_id: str) -> None:
    await records_of(state.node, ctx).put(_key(ctx, "conv", _digest(name)), session_id, ttl=RECORD_TTL)


async def session_record(state: ApiState, ctx: RequestContext, session_id: str) -> dict[str, Any]:
    """What ``/v1`` keeps about one of its sessions: ``latest_response``, ``paused_turn``."""
    found = await records_of(state.node, ctx).get(f"sess:{session_id}")
    return dict(found) if isinstance(found, dict) else {}


async def update_session_record(
    state: ApiState, ctx: RequestContext, session_id: str, **changes: Any
) -> None:
    # owner: who first kept something of the session here (forgetting a user finds it by that too)
    record = {"owner": principal_part(ctx), **await session_record(state, ctx, session_id), **changes}
    await records_of(state.node, ctx).put(f"sess:{session_id}", record, ttl=RECORD_TTL)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


async def new_session(state: ApiState, ctx: RequestContext, timeout: float) -> str:
    """A fresh session of the caller's on channel ``openai`` (titled by its first message's turn)."""
    if SESSIONS not in state.catalog:
        return f"sess-{uuid.uuid4().hex}"
    reply = await state.node.ask(
        SESSIONS, "create_session", {"channel": CHANNEL, "user_id": ctx.principal}, timeout, ctx=ctx
    )
    return str(reply["session_id"])


async def check_session(state: ApiState, ctx: RequestContext, session_id: str, timeout: float) -> str:
    """``session_id`` if the caller may continue it (a user: their own), else 404."""
    check_key_value("session_id", session_id)
    if SESSIONS not in state.catalog:
        return session_id
    try:
        await state.node.ask(SESSIONS, "get_session", {"session_id": session_id}, timeout, ctx=ctx)
    except ActorError as e:
        if isinstance(e, NotFound) or e.code == "invalid_argument":
            raise ApiError(404, "session_not_found", f"no session '{session_id}' of yours") from None
        raise
    return session_id


def approvals_note(reply: dict[str, Any], base_url: str) -> str:
    """A paused turn's answer: what waits, where to decide, and what to do next."""
    approval = str(reply.get("approval_id") or "")
    where = f"the dashboard's Approvals page ({base_url.rstrip('/')}/#/approvals)"
    how = f", or `/approve {approval}` in `minihermes chat`" if approval else ""
    return (
        f"{reply.get('response') or 'A tool call is waiting for approval.'} Approve or deny it in {where}{how}; "
        "then send any message here to get the finished answer."
    )


def answer_text(outcome: Outcome, base_url: str) -> str | None:
    """The assistant's text a client gets for an outcome (None: the outcome is an error)."""
    reply = outcome.get("reply")
    if not isinstance(reply, dict):
        return None
    if reply.get("status") == "paused":
        return approvals_note(reply, base_url)
    return str(reply.get("response") or "")


def usage_of(message: str, answer: str, outcome: Outcome | None = None) -> dict[str, int]:
    """The turn's tokens: what its LLM calls used (every step, the agent's prompt and tools included) when the
    reply says, else this node's counter's estimate of the message and the answer."""
    spent = ((outcome or {}).get("reply") or {}).get("usage")
    if isinstance(spent, dict) and spent.get("calls"):
        prompt, completion = int(spent.get("input_tokens") or 0), int(spent.get("output_tokens") or 0)
    else:
        prompt, completion = count_tokens(message), count_tokens(answer)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


async def pending_outcome(
    state: ApiState, ctx: RequestContext, session_id: str, timeout: float
) -> Outcome | None:
    """The answer owed for a turn that paused for approval (its finished reply, or "still waiting"), or None
    when the session has no paused turn this API answered: then the new message runs a turn."""
    record = await session_record(state, ctx, session_id)
    paused = str(record.get("paused_turn") or "")
    if not paused:
        return None
    node = state.node
    stats = await node.ask(AGENT, "get_stats", {"session_id": session_id}, timeout, ctx=ctx)
    if stats.get("paused"):
        reply = dict(record.get("paused_reply") or {})
        reply.setdefault("response", "A tool call is still waiting for approval.")
        return {"reply": {**reply, "status": "paused", "session_id": session_id}}
    if stats.get("turn_in_progress"):
        return None  # resumed and running: the new message waits in the mailbox behind it
    last = await node.ask(AGENT, "last_turn", {"session_id": session_id}, timeout, ctx=ctx)
    await update_session_record(state, ctx, session_id, paused_turn="", paused_reply=None)
    if last.get("turn_id") == paused:
        if last.get("status") == "error" and isinstance(last.get("error"), dict):
            return {"error": last["error"], "status": 502}
        return {"reply": last}
    return None


@dataclass(slots=True)
class Turn:
    """A ``/v1`` turn under way (``task``, owned by the node: a disconnect never cancels it; ``sub``: its
    session's live events, for a stream) or already answered (``outcome``: replayed or owed)."""

    session_id: str
    meta: dict[str, Any]
    task: asyncio.Task[Outcome] | None = None
    sub: Subscription | None = None
    outcome: Outcome | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    async def result(self) -> Outcome:
        if self.outcome is not None:
            return self.outcome
        assert self.task is not None
        return await self.task


After = Callable[[dict[str, Any], Outcome], Awaitable[Outcome]]


async def start_turn(
    state: ApiState,
    ctx: RequestContext,
    *,
    session_id: str,
    args: dict[str, Any],
    meta: dict[str, Any],
    timeout: float,
    after: After,
    key: str | None,
    digest: str,
    new: bool,
    stream: bool,
) -> Turn:
    """Run ``agent.chat`` for a ``/v1`` request (once per ``Idempotency-Key``), ``after`` once it ends;
    ``session_id`` "" (with ``new``): a new session of the caller's, made here."""
    ticket: Ticket | None = None
    if key is not None:
        got = await idempotency_of(state).acquire(
            state,
            ctx,
            key,
            digest,
            session_id=session_id,
            meta=meta,
            timeout=timeout,
            after=after,
            new_session=new,
        )
        if not isinstance(got, Ticket):
            return Turn(str(got["session_id"]), dict(got.get("meta") or {}), outcome=dict(got["outcome"]))
        ticket, session_id, meta = got, got.session_id, got.meta
    if not session_id:  # made once the key is ours: a retry of a new conversation makes no second session
        session_id = await new_session(state, ctx, timeout)
        meta["session_id"] = session_id
        if ticket is not None:
            await idempotency_of(state).bind(ticket, session_id, meta)
    if not new:
        owed = await pending_outcome(state, ctx, session_id, timeout)
        if owed is not None:
            owed = await _after(after, meta, owed)
            if ticket is not None:
                await idempotency_of(state).settle(ticket, owed)
            return Turn(session_id, meta, outcome=owed)
    node = state.node
    chat = {**args, "session_id": session_id, "channel": CHANNEL}
    sub = node.subscribe(f"session:{session_id}", ctx=ctx) if stream else None

    async def run() -> Outcome:
        try:
            result: Any = await node.ask(AGENT, "chat", chat, timeout, ctx=ctx)
        except ActorError as e:
            result = e
        outcome = outcome_of(result)
        if isinstance(result, Conflict) and result.details.get("approval_id"):
            # a turn of this session waits for a person: say so, as an answer
            reply = {
                "status": "paused",
                "session_id": session_id,
                "approval_id": result.details["approval_id"],
                "response": "A tool call of this conversation is waiting for approval.",
            }
            outcome = {"reply": reply}
        outcome = await _after(after, meta, outcome)
        if ticket is not None:
            await idempotency_of(state).settle(ticket, outcome)
        return outcome

    return Turn(session_id, meta, task=node.spawn(run()), sub=sub)


async def _after(after: After, meta: dict[str, Any], outcome: Outcome) -> Outcome:
    try:
        return await after(meta, outcome)
    except Exception:  # the session map is a convenience: the turn's answer is never lost for it
        log.exception("/v1 bookkeeping after a turn failed")
        return outcome


async def record_paused(state: ApiState, ctx: RequestContext, session_id: str, outcome: Outcome) -> None:
    """Remember a paused answer, so that the next message gets the finished one (``pending_outcome``)."""
    reply = outcome.get("reply")
    if isinstance(reply, dict) and reply.get("status") == "paused":
        kept = {k: reply.get(k) for k in ("response", "approval_id", "turn_id", "pending_tool")}
        await update_session_record(
            state, ctx, session_id, paused_turn=str(reply.get("turn_id") or "?"), paused_reply=kept
        )
