"""``POST /v1/responses`` and ``GET /v1/responses/{id}`` (OpenAI's Responses API) over durable sessions.

A response is one agent turn. ``previous_response_id`` continues the session of that response, which must be
the session's latest (another answers 409 ``response_not_latest``, naming the latest: a session's history is
one line, it does not fork); ``conversation`` (an id or ``{"id"}``) names a conversation of the caller's,
mapped to one session (an existing session id of theirs works too). Neither: a new session. Each response
is stored (``resp:<id>`` in the tenant's ``api_records``, where ``memory.forget`` reaches it) for ``GET`` and for continuing: a user reads
only their own, an admin the tenant's. Streamed, the turn is the Responses API's events
(``response.created`` ... ``response.output_text.delta`` ... ``response.completed``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from minihermes.permissions import sees_own_only
from minihermes.runtime import RequestContext

from ._access import authorize, find_actor, find_op, read_body, timeout_of
from ._core import ApiState, json_response
from ._errors import ApiError
from ._idempotency import Outcome, idempotency_key, principal_part, records_of, request_digest
from ._openai import SESSION_HEADER, authorize_chat, check_model, openai_door
from ._openai_chat import MAX_INSTRUCTIONS_CHARS, MAX_MESSAGE_CHARS, _error, _live, _started, text_of
from ._openai_sessions import (
    RECORD_TTL,
    Turn,
    answer_text,
    check_session,
    conversation_session,
    name_conversation,
    record_paused,
    session_record,
    start_turn,
    update_session_record,
    usage_of,
)

_STREAM_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def add_response_routes(app: FastAPI, state: ApiState) -> None:
    @app.post("/v1/responses", include_in_schema=False, summary="A turn as a response (OpenAI Responses API)")
    async def create(request: Request) -> Response:
        return await openai_door(state, request, create_response)

    @app.post("/v1/responses/{response_id}/cancel", include_in_schema=False, summary="Stop a response's turn")
    async def cancel(request: Request, response_id: str) -> Response:
        return await openai_door(state, request, cancel_response, response_id)

    @app.get(
        "/v1/responses/{response_id}",
        include_in_schema=False,
        summary="A stored response (OpenAI Responses API)",
    )
    async def retrieve(request: Request, response_id: str) -> Response:
        return await openai_door(state, request, get_response, response_id)


def _input_message(value: Any) -> str:
    """The new user message: the input string, or the last user message of an input list."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, list) and value:
        users = [
            i
            for i in value
            if isinstance(i, dict)
            and i.get("role", "user") == "user"
            and i.get("type", "message") == "message"
        ]
        if not users:
            raise ApiError(400, "invalid_argument", "input must hold a user message", field="input")
        text = text_of(users[-1].get("content"), "input")
    else:
        raise ApiError(400, "invalid_argument", "input must be a string or a list of messages", field="input")
    if not text.strip():
        raise ApiError(400, "invalid_argument", "input must not be empty", field="input")
    if len(text) > MAX_MESSAGE_CHARS:
        raise ApiError(
            400, "invalid_argument", f"input is over {MAX_MESSAGE_CHARS} characters", field="input"
        )
    return text


async def _stored(state: ApiState, ctx: RequestContext, response_id: str) -> dict[str, Any]:
    """A stored response the caller may see (a user: their own), else 404."""
    found = None
    if response_id.startswith("resp_") and len(response_id) <= 64:
        found = await records_of(state.node, ctx).get(f"resp:{response_id}")
    if not isinstance(found, dict) or (sees_own_only(ctx) and found.get("owner") != principal_part(ctx)):
        raise ApiError(
            404, "response_not_found", f"no response '{response_id}' of yours", field="response_id"
        )
    return found


async def create_response(state: ApiState, request: Request, ctx: RequestContext) -> Response:
    authorize_chat(state, ctx)
    key = idempotency_key(request)
    body = await read_body(state, request)
    model = check_model(state, body.get("model"))
    message = _input_message(body.get("input"))
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "invalid_argument", "stream must be true or false", field="stream")
    instructions = body.get("instructions") or ""
    if not isinstance(instructions, str) or len(instructions) > MAX_INSTRUCTIONS_CHARS:
        raise ApiError(
            400,
            "invalid_argument",
            f"instructions must be a string of at most {MAX_INSTRUCTIONS_CHARS} characters",
            field="instructions",
        )
    timeout = timeout_of(state, request, default=state.max_timeout)
    previous = body.get("previous_response_id")
    conversation = body.get("conversation")
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    if conversation is not None and (not isinstance(conversation, str) or not conversation):
        raise ApiError(
            400, "invalid_argument", 'conversation must be an id or {"id": ...}', field="conversation"
        )
    if previous is not None and conversation is not None:
        raise ApiError(
            400,
            "invalid_argument",
            "give previous_response_id or conversation, not both",
            field="conversation",
        )
    session_id, new = await _session_for(state, request, ctx, previous, conversation, timeout)
    meta = {
        "id": f"resp_{uuid.uuid4().hex}",
        "created_at": int(time.time()),
        "model": model,
        "base_url": str(request.base_url),
        "message": message,
        "previous_response_id": previous,
        "conversation": conversation,
        "instructions": instructions or None,
        "session_id": session_id,
    }

    async def after(meta: dict[str, Any], outcome: Outcome) -> Outcome:
        sid = str(meta["session_id"])
        await record_paused(state, ctx, sid, outcome)
        if answer_text(outcome, str(meta["base_url"])) is not None:
            record = {**meta, "owner": principal_part(ctx), "outcome": outcome}
            await records_of(state.node, ctx).put(f"resp:{meta['id']}", record, ttl=RECORD_TTL)
            await update_session_record(state, ctx, sid, latest_response=meta["id"])
        if meta.get("conversation"):
            await name_conversation(state, ctx, str(meta["conversation"]), sid)
        return outcome

    args = {"message": message, **({"instructions": instructions} if instructions else {})}
    turn = await start_turn(
        state,
        ctx,
        session_id=session_id,
        args=args,
        meta=meta,
        timeout=timeout,
        after=after,
        key=key,
        digest=request_digest("/v1/responses", body),
        new=new,
        stream=stream,
    )
    headers = {SESSION_HEADER: turn.session_id}
    if turn.task is not None:  # in progress, for GET and cancel (unless its end is recorded already)
        running = {**turn.meta, "owner": principal_part(ctx), "outcome": None}
        await records_of(state.node, ctx).cas(f"resp:{turn.meta['id']}", None, running, ttl=RECORD_TTL)
    if stream and await _started(turn):
        return StreamingResponse(
            events(turn), media_type="text/event-stream", headers={**_STREAM_HEADERS, **headers}
        )
    outcome = await turn.result()
    if answer_text(outcome, str(turn.meta["base_url"])) is None:
        return _error(outcome, headers)
    if stream:
        return StreamingResponse(
            events(turn), media_type="text/event-stream", headers={**_STREAM_HEADERS, **headers}
        )
    return json_response(response_object(turn.meta, outcome), headers=headers)


async def _session_for(
    state: ApiState, request: Request, ctx: RequestContext, previous: Any, conversation: Any, timeout: float
) -> tuple[str, bool]:
    if previous is not None:
        if not isinstance(previous, str):
            raise ApiError(
                400, "invalid_argument", "previous_response_id must be a string", field="previous_response_id"
            )
        found = await _stored(state, ctx, previous)
        session_id = await check_session(state, ctx, str(found["session_id"]), timeout)
        latest = (await session_record(state, ctx, session_id)).get("latest_response")
        if latest and latest != previous:
            raise ApiError(
                409,
                "response_not_latest",
                f"response '{previous}' is not the latest of its conversation (the latest is '{latest}'): "
                "continue from the latest; a conversation does not fork",
                field="previous_response_id",
                latest_response_id=latest,
            )
        return session_id, False
    if isinstance(conversation, str):
        found_sid = await conversation_session(state, ctx, conversation)
        if found_sid is None and conversation.startswith("sess-"):
            found_sid = conversation  # one of the caller's sessions, by its id (checked below)
        if found_sid is not None:
            return await check_session(state, ctx, found_sid, timeout), False
        return "", True
    named = request.headers.get(SESSION_HEADER)
    if named:
        return await check_session(state, ctx, named, timeout), False
    return "", True


async def get_response(state: ApiState, request: Request, ctx: RequestContext, response_id: str) -> Response:
    found = await _stored(state, ctx, response_id)
    outcome = found.get("outcome")
    return json_response(
        response_object(found, dict(outcome) if isinstance(outcome, dict) else None),
        headers={SESSION_HEADER: str(found["session_id"])},
    )


async def cancel_response(
    state: ApiState, request: Request, ctx: RequestContext, response_id: str
) -> Response:
    """Stop the turn of a response still in progress (``agent.cancel_turn`` on its session, as the caller:
    its owner or an admin); a finished response is answered as it is."""
    authorize(state, ctx, find_op(state, find_actor(state, "agent"), "cancel_turn"))
    found = await _stored(state, ctx, response_id)
    outcome = found.get("outcome")
    if not isinstance(outcome, dict):
        timeout = timeout_of(state, request)
        session_id = await check_session(state, ctx, str(found["session_id"]), timeout)
        stopped = await state.node.ask("agent", "cancel_turn", {"session_id": session_id}, timeout, ctx=ctx)
        reply = stopped.get("reply")
        outcome = {"reply": reply} if stopped.get("cancelled") and isinstance(reply, dict) else None
    return json_response(response_object(found, outcome), headers={SESSION_HEADER: str(found["session_id"])})


def _message_item(meta: dict[str, Any], text: str, status: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{str(meta['id'])[5:]}",
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


def response_object(meta: dict[str, Any], outcome: Outcome | None, status: str = "") -> dict[str, Any]:
    """The Responses API's ``response`` object for a turn (``outcome`` None: still running)."""
    text = answer_text(outcome, str(meta["base_url"])) if outcome is not None else None
    reply = (outcome or {}).get("reply") or {}
    if not status:
        status = (
            "in_progress"
            if outcome is None
            else "incomplete"
            if reply.get("status") == "max_iterations"
            else "cancelled"
            if reply.get("status") == "cancelled"
            else "completed"
        )
    conversation = meta.get("conversation")
    return {
        "id": meta["id"],
        "object": "response",
        "created_at": meta["created_at"],
        "status": status,
        "model": meta["model"],
        "output": [] if text is None else [_message_item(meta, text, "completed")],
        "previous_response_id": meta.get("previous_response_id"),
        "conversation": {"id": conversation} if conversation else None,
        "instructions": meta.get("instructions"),
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "metadata": {"session_id": meta.get("session_id"), "status": reply.get("status")},
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "tools": [],
        "temperature": None,
        "top_p": None,
        "store": True,
        "usage": _usage(str(meta["message"]), text or "", outcome),
    }


def _usage(message: str, answer: str, outcome: Outcome | None) -> dict[str, Any]:
    u = usage_of(message, answer, outcome)
    return {
        "input_tokens": u["prompt_tokens"],
        "output_tokens": u["completion_tokens"],
        "total_tokens": u["total_tokens"],
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    }


async def events(turn: Turn) -> AsyncIterator[str]:
    """The turn as Responses API stream events, ``sequence_number`` counting from 0."""
    meta = turn.meta
    seq = -1
    item_id = f"msg_{str(meta['id'])[5:]}"

    def frame(kind: str, **data: Any) -> str:
        nonlocal seq
        seq += 1
        body = {"type": kind, "sequence_number": seq, **data}
        return f"event: {kind}\ndata: {json.dumps(body, ensure_ascii=False, default=str)}\n\n"

    place = {"item_id": item_id, "output_index": 0, "content_index": 0}
    yield frame("response.created", response=response_object(meta, None))
    yield frame("response.in_progress", response=response_object(meta, None))
    yield frame("response.output_item.added", output_index=0, item=_message_item(meta, "", "in_progress"))
    yield frame(
        "response.content_part.added", **place, part={"type": "output_text", "text": "", "annotations": []}
    )
    sent, gap = "", False
    try:
        if turn.sub is not None and turn.task is not None:
            async for event in _live(turn):
                kind = event.get("type")
                if kind == "text_delta" and event.get("text"):
                    text = ("\n\n" if gap and sent else "") + str(event["text"])
                    gap = False
                    sent += text
                    yield frame("response.output_text.delta", **place, delta=text, logprobs=[])
                elif kind == "tool_call_start":
                    gap = True
                elif kind == "ping":
                    yield ": ping\n\n"
        outcome = await turn.result()
    finally:
        if turn.sub is not None:
            turn.sub.close()
    answer = answer_text(outcome, str(meta["base_url"]))
    if answer is None:
        error = outcome.get("error") or {}
        failed = {
            **response_object(meta, None, "failed"),
            "error": {
                "code": str(error.get("code") or "server_error"),
                "message": str(error.get("message") or "the turn failed"),
            },
        }
        yield frame("response.failed", response=failed)
        return
    rest = (
        answer
        if not sent
        else ("\n\n" + answer if (outcome.get("reply") or {}).get("status") == "paused" else "")
    )
    if rest:
        yield frame("response.output_text.delta", **place, delta=rest, logprobs=[])
    full = sent + rest
    done = response_object(meta, outcome)
    done["output"] = [_message_item(meta, full, "completed")]
    yield frame("response.output_text.done", **place, text=full, logprobs=[])
    yield frame(
        "response.content_part.done", **place, part={"type": "output_text", "text": full, "annotations": []}
    )
    yield frame("response.output_item.done", output_index=0, item=done["output"][0])
    yield frame("response.completed", response=done)
