"""``POST /api/v1/sessions/{session_id}/messages``: one chat turn, answered as JSON or as Server-Sent Events.

Streaming subscribes to the session's live topic *before* the turn starts (so no event is missed), then
runs the turn as a node-owned background task: a client that disconnects mid-stream stops only its own
stream, the turn goes on and is saved (its reply is the agent's ``last_turn``, its messages in the history).

Events (``event:`` name, ``data:`` JSON): ``turn_started`` {turn_id}; ``text_delta`` {text};
``tool_call_start`` {id, name, input}; ``tool_call_end`` {id, name, is_error, result, duration_ms};
``dropped`` {count} (this reader fell behind and lost events); then exactly one of ``final`` {reply} or
``error`` {error: {code, message}}, after which the stream ends. Comment lines (``: ping``) keep idle
connections open through proxies.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from minihermes.permissions import sees_own_only
from minihermes.runtime import ActorError, Node, RequestContext, Subscription

from ._access import (
    authorize,
    check_key_value,
    enforce_ownership,
    find_actor,
    find_op,
    read_body,
    timeout_of,
)
from ._core import (
    API_PREFIX,
    ApiState,
    actor_error_body,
    actor_error_response,
    guarded,
    json_response,
)
from ._errors import invalid
from ._idempotency import Ticket, idempotency_key, idempotency_of, outcome_of, request_digest
from ._schemas import message_body_schema

log = logging.getLogger("minihermes.api")

AGENT = "agent"
MAX_CONTENT_CHARS = 100_000
PING_SECONDS = 15.0
_FORWARDED = frozenset({"turn_started", "text_delta", "tool_call_start", "tool_call_end", "dropped"})


def session_topic(session_id: str) -> str:
    # The agent's topic name (minihermes.agent.agent.session_topic); repeated here so the HTTP layer does
    # not import the agent package (api sits beside agent, over the runtime).
    return f"session:{session_id}"


def add_session_routes(app: FastAPI, state: ApiState) -> None:
    @app.post(
        f"{API_PREFIX}/sessions/{{session_id}}/messages",
        tags=["sessions"],
        summary="Send a message to a session's agent; the reply as JSON, or streamed as Server-Sent Events",
        operation_id="post_session_message",
        openapi_extra={"requestBody": {"required": True, "content": message_body_schema()}},
    )
    async def post_message(request: Request, session_id: str) -> Response:
        return await guarded(state, request, _post_message, session_id)

    @app.post(
        f"{API_PREFIX}/sessions/{{session_id}}/cancel",
        tags=["sessions"],
        summary="Stop the session's running or paused turn (agent.cancel_turn); no body",
        operation_id="cancel_session_turn",
    )
    async def cancel_turn(request: Request, session_id: str) -> Response:
        return await guarded(state, request, _cancel_turn, session_id)


async def _cancel_turn(state: ApiState, request: Request, ctx: RequestContext, session_id: str) -> Response:
    """``agent.cancel_turn`` as the caller: a user reaches only their own sessions (404 for another's)."""
    info = find_actor(state, AGENT)
    opinfo = find_op(state, info, "cancel_turn")
    authorize(state, ctx, opinfo)
    check_key_value("session_id", session_id)
    payload: dict[str, Any] = {"session_id": session_id}
    if sees_own_only(ctx):
        await enforce_ownership(state, ctx, info, opinfo, payload, state.default_timeout)
    timeout = timeout_of(state, request)
    return json_response(await state.node.ask(AGENT, "cancel_turn", payload, timeout, ctx=ctx))


async def _post_message(state: ApiState, request: Request, ctx: RequestContext, session_id: str) -> Response:
    """``agent.chat`` as the caller: the reply as JSON, or the turn streamed (``_open_stream``); with an
    ``Idempotency-Key``, a retry gets the first reply (``_idempotent``). Run by ``guarded``, as every route:
    a failure before the stream opens is a structured error, never a traceback."""
    request_id = ctx.request_id
    key = idempotency_key(request)
    payload = await _prepare(state, request, ctx, session_id)
    content, stream = payload.pop("__stream__")
    timeout = timeout_of(state, request, default=state.max_timeout)
    args = {**payload, "message": content}
    if key is not None:
        return await _idempotent(state, ctx, key, args, stream, timeout, request_id)
    if stream:
        return await _open_stream(state.node, ctx, args, timeout, request_id)
    return json_response(await state.node.ask(AGENT, "chat", args, timeout, ctx=ctx))


async def _prepare(state: ApiState, request: Request, ctx: RequestContext, session_id: str) -> dict[str, Any]:
    """Authorize as ``agent.chat``, read the body, and apply a user's ownership rules."""
    info = find_actor(state, AGENT)
    opinfo = find_op(state, info, "chat")
    authorize(state, ctx, opinfo)
    check_key_value("session_id", session_id)
    body = await read_body(state, request)
    unknown = sorted(set(body) - {"content", "stream"})
    if unknown:
        raise invalid(
            f"unknown field {unknown[0]!r} (send content and, optionally, stream)", field=unknown[0]
        )
    content = body.get("content")
    if not isinstance(content, str) or not content.strip():
        raise invalid("content must be a non-empty string", field="content")
    if len(content) > MAX_CONTENT_CHARS:
        raise invalid(f"content must be at most {MAX_CONTENT_CHARS} characters", field="content")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise invalid("stream must be true or false", field="stream")
    payload: dict[str, Any] = {"session_id": session_id}
    if sees_own_only(ctx):
        await enforce_ownership(state, ctx, info, opinfo, payload, state.default_timeout)
    payload["__stream__"] = (content, stream)
    return payload


async def _turn(node: Node, args: dict[str, Any], timeout: float, ctx: RequestContext) -> Any:
    """The chat, with its structured error as a value: a failed turn is an answer, not a task failure."""
    try:
        return await node.ask(AGENT, "chat", args, timeout, ctx=ctx)
    except ActorError as e:
        return e


async def _idempotent(
    state: ApiState,
    ctx: RequestContext,
    key: str,
    args: dict[str, Any],
    stream: bool,
    timeout: float,
    request_id: str,
) -> Response:
    """The turn of a request with an ``Idempotency-Key`` (``_idempotency``): run once, replayed after."""
    session_id = args["session_id"]
    digest = request_digest(f"{API_PREFIX}/sessions/{session_id}/messages", [args["message"], stream])
    idem = idempotency_of(state)
    got = await idem.acquire(state, ctx, key, digest, session_id=session_id, meta={}, timeout=timeout)
    if isinstance(got, Ticket):
        if stream:
            run = _recorded_turn(state, args, timeout, ctx, got)
            return await _open_stream(state.node, ctx, args, timeout, request_id, run)
        result = await _recorded_turn(state, args, timeout, ctx, got)
        if isinstance(result, ActorError):
            raise result
        return json_response(result)
    outcome = got.get("outcome") or {}
    if "reply" not in outcome:
        return json_response({"error": outcome.get("error")}, int(outcome.get("status") or 500))
    if not stream:
        return json_response(outcome["reply"])
    return StreamingResponse(
        _replayed(outcome["reply"]),
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
    )


async def _recorded_turn(
    state: ApiState, args: dict[str, Any], timeout: float, ctx: RequestContext, ticket: Ticket
) -> Any:
    """The turn, its outcome stored with the claim when it ends (whoever still waits for it)."""
    result = await _turn(state.node, args, timeout, ctx)
    await idempotency_of(state).settle(ticket, outcome_of(result))
    return result


async def _replayed(reply: dict[str, Any]) -> AsyncIterator[str]:
    """A stored reply as the stream of its turn: started, its text in one delta, final."""
    events = [
        {"turn_id": reply.get("turn_id", "")},
        {"text": str(reply.get("response") or "")},
        {"reply": reply},
    ]
    for seq, (name, data) in enumerate(zip(("turn_started", "text_delta", "final"), events, strict=True), 1):
        yield f"id: {seq}\nevent: {name}\ndata: {json.dumps(data, default=str, ensure_ascii=False)}\n\n"


async def _open_stream(
    node: Node,
    ctx: RequestContext,
    args: dict[str, Any],
    timeout: float,
    request_id: str,
    run: Coroutine[Any, Any, Any] | None = None,
) -> Response:
    """``run``: the turn to run instead of a plain ``agent.chat`` (one that also records its outcome)."""
    sub = node.subscribe(session_topic(args["session_id"]), ctx=ctx)
    try:
        # Owned by the node, not by this request: a disconnect cancels the stream, never the turn.
        turn = node.spawn(run if run is not None else _turn(node, args, timeout, ctx))
        first = asyncio.ensure_future(sub.get())
        await asyncio.wait({first, turn}, return_when=asyncio.FIRST_COMPLETED)
        if not first.done():
            first.cancel()
            outcome = turn.result()
            if isinstance(outcome, ActorError):
                # Refused before anything streamed (a paused session, bad input): a plain HTTP error.
                sub.close()
                return actor_error_response(outcome, request_id)
            pending: list[Any] = []
        else:
            pending = [first.result()]
    except BaseException:
        sub.close()
        raise
    return StreamingResponse(
        _events(sub, turn, pending),
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
    )


async def _events(sub: Subscription, turn: asyncio.Task[Any], pending: list[Any]) -> AsyncIterator[str]:
    seq = 0

    def frame(event: dict[str, Any]) -> str:
        nonlocal seq
        seq += 1
        name = str(event.get("type", "message"))
        data = {k: v for k, v in event.items() if k != "type"}
        return f"id: {seq}\nevent: {name}\ndata: {json.dumps(data, default=str, ensure_ascii=False)}\n\n"

    get: asyncio.Future[Any] | None = None
    try:
        for event in pending:
            if _forwarded(event):
                yield frame(event)
        while True:
            if get is None:
                get = asyncio.ensure_future(sub.get())
            done, _ = await asyncio.wait(
                {get, turn}, timeout=PING_SECONDS, return_when=asyncio.FIRST_COMPLETED
            )
            if get in done:
                event, get = get.result(), None
                if _forwarded(event):
                    yield frame(event)
                continue
            if turn in done:
                # Events published before the reply are already queued: send them before the end.
                while (event := sub.get_nowait()) is not None:
                    if _forwarded(event):
                        yield frame(event)
                outcome = turn.result()
                if isinstance(outcome, ActorError):
                    yield frame({"type": "error", **actor_error_body(outcome)})
                else:
                    yield frame({"type": "final", "reply": outcome})
                return
            yield ": ping\n\n"
    finally:
        if get is not None:
            get.cancel()
        sub.close()


def _forwarded(event: Any) -> bool:
    return isinstance(event, dict) and event.get("type") in _FORWARDED
