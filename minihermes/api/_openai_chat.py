"""``POST /v1/chat/completions``: one agent turn per request, as a ``chat.completion`` or streamed as
``chat.completion.chunk`` Server-Sent Events ending with ``finish_reason`` and ``data: [DONE]``.

Only the last message (the user's new one) enters the agent; the history a client resends finds the session
(``_openai_sessions``). System and developer messages become the turn's ``instructions``. The agent's tool
calls run on the server: a stream carries their activity only as the text around them.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from minihermes.runtime import ActorError, RequestContext

from ._access import read_body, timeout_of
from ._core import ApiState, json_response
from ._errors import ApiError
from ._idempotency import Outcome, idempotency_key, request_digest
from ._openai import SESSION_HEADER, authorize_chat, check_model, error_of
from ._openai_sessions import (
    Turn,
    answer_text,
    check_session,
    conversation_session,
    find_by_fingerprint,
    fingerprint,
    name_conversation,
    record_paused,
    remember_fingerprint,
    start_turn,
    usage_of,
)

MAX_MESSAGE_CHARS = 100_000
MAX_INSTRUCTIONS_CHARS = 4_000
OPENWEBUI_CHAT = "x-openwebui-chat-id"
_STREAM_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def text_of(content: Any, where: str) -> str:
    """A message's text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            p.get("text")
            for p in content
            if isinstance(p, dict) and p.get("type") in ("text", "input_text", "output_text")
        ]
        if all(isinstance(p, str) for p in parts):
            return "\n".join(p for p in parts if isinstance(p, str))
    if content is None:
        return ""
    raise ApiError(
        400, "invalid_argument", f"{where}: content must be a string or a list of text parts", field=where
    )


def parse_messages(body: dict[str, Any]) -> tuple[list[tuple[str, str]], str, str]:
    """(the history before the new message, the new user message, instructions from system messages)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "invalid_argument", "messages must be a non-empty list", field="messages")
    history: list[tuple[str, str]] = []
    system: list[str] = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(
                400, "invalid_argument", f"messages[{i}] must be an object with a role", field="messages"
            )
        role, text = m["role"], text_of(m.get("content"), f"messages[{i}].content")
        if role in ("system", "developer"):
            if text.strip():
                system.append(text.strip())
        elif role in ("user", "assistant"):
            history.append((role, text))
        # tool / function messages: the client's own tools, which this server never asked for
    if not history or history[-1][0] != "user" or not history[-1][1].strip():
        raise ApiError(
            400, "invalid_argument", "the last message must be the user's, with text", field="messages"
        )
    message = history[-1][1]
    if len(message) > MAX_MESSAGE_CHARS:
        raise ApiError(
            400,
            "invalid_argument",
            f"the user message is over {MAX_MESSAGE_CHARS} characters",
            field="messages",
        )
    instructions = "\n\n".join(system)
    if len(instructions) > MAX_INSTRUCTIONS_CHARS:
        raise ApiError(
            400,
            "invalid_argument",
            f"system messages are over {MAX_INSTRUCTIONS_CHARS} characters in all (the agent's own prompt is "
            "configured on the server)",
            field="messages",
        )
    return history[:-1], message, instructions


async def chat_completions(state: ApiState, request: Request, ctx: RequestContext) -> Response:
    authorize_chat(state, ctx)
    key = idempotency_key(request)
    body = await read_body(state, request)
    model = check_model(state, body.get("model"))
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "invalid_argument", "stream must be true or false", field="stream")
    if body.get("n", 1) not in (1, None):
        raise ApiError(400, "invalid_argument", "n must be 1", field="n")
    options = body.get("stream_options") or {}
    include_usage = bool(isinstance(options, dict) and options.get("include_usage"))
    prior, message, instructions = parse_messages(body)
    timeout = timeout_of(state, request, default=state.max_timeout)
    session_id, new = await _session_for(state, request, ctx, prior, timeout)
    meta = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "created": int(time.time()),
        "model": model,
        "base_url": str(request.base_url),
        "prior": prior,
        "message": message,
        "conversation": request.headers.get(OPENWEBUI_CHAT, ""),
    }

    async def after(meta: dict[str, Any], outcome: Outcome) -> Outcome:
        sid = str(meta.get("session_id") or session_id)
        await record_paused(state, ctx, sid, outcome)
        answer = answer_text(outcome, str(meta["base_url"]))
        if answer is not None:
            held = [*map(tuple, meta["prior"]), ("user", meta["message"]), ("assistant", answer)]
            await remember_fingerprint(state, ctx, fingerprint(ctx, held), sid)
        if meta.get("conversation"):
            await name_conversation(state, ctx, str(meta["conversation"]), sid)
        return outcome

    meta["session_id"] = session_id
    args = {"message": message, **({"instructions": instructions} if instructions else {})}
    digest = request_digest("/v1/chat/completions", body)
    turn = await start_turn(
        state,
        ctx,
        session_id=session_id,
        args=args,
        meta=meta,
        timeout=timeout,
        after=after,
        key=key,
        digest=digest,
        new=new,
        stream=stream,
    )
    headers = {SESSION_HEADER: turn.session_id}
    if not stream:
        outcome = await turn.result()
        if answer_text(outcome, str(turn.meta["base_url"])) is None:
            return _error(outcome, headers)
        return json_response(completion(turn.meta, outcome), headers=headers)
    if not await _started(turn):
        outcome = await turn.result()
        if answer_text(outcome, str(turn.meta["base_url"])) is None:
            return _error(outcome, headers)  # refused before anything streamed: a plain HTTP error

    async def remember(text: str) -> None:
        held = [*prior, ("user", message), ("assistant", text)]
        await remember_fingerprint(state, ctx, fingerprint(ctx, held), turn.session_id)

    return StreamingResponse(
        chunks(turn, include_usage, remember),
        media_type="text/event-stream",
        headers={**_STREAM_HEADERS, **headers},
    )


async def _started(turn: Turn) -> bool:
    """Whether the turn streams: its first event came before its end (kept for the stream), else (it ended
    at once: replayed, owed, refused) the subscription is closed."""
    sub, task = turn.sub, turn.task
    if sub is None or task is None:
        if sub is not None:
            sub.close()
        return False
    first = asyncio.ensure_future(sub.get())
    try:
        await asyncio.wait({first, task}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        first.cancel()
        sub.close()
        raise
    if first.done():
        turn.extra["pending"] = [first.result()]
        return True
    first.cancel()
    sub.close()
    turn.sub = None
    return False


def _error(outcome: Outcome, headers: dict[str, str]) -> Response:
    error = ActorError.from_dict({"error": outcome.get("error") or {}})
    error.http_status = int(outcome.get("status") or 500)
    response = error_of(error, "")
    response.headers.update(headers)
    return response


async def _session_for(
    state: ApiState, request: Request, ctx: RequestContext, prior: list[tuple[str, str]], timeout: float
) -> tuple[str, bool]:
    """(the session this request continues, whether it is new): the header, Open WebUI's chat id, the
    fingerprint of the resent history, else a new one."""
    named = request.headers.get(SESSION_HEADER)
    if named:
        return await check_session(state, ctx, named, timeout), False
    conversation = request.headers.get(OPENWEBUI_CHAT)
    if conversation:
        found = await conversation_session(state, ctx, conversation)
        if found is not None:
            return await check_session(state, ctx, found, timeout), False
    if prior:
        found = await find_by_fingerprint(state, ctx, fingerprint(ctx, prior))
        if found is not None:
            return await check_session(state, ctx, found, timeout), False
    return "", True


def completion(meta: dict[str, Any], outcome: Outcome) -> dict[str, Any]:
    answer = answer_text(outcome, str(meta["base_url"])) or ""
    return {
        "id": meta["id"],
        "object": "chat.completion",
        "created": meta["created"],
        "model": meta["model"],
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": answer},
                "finish_reason": _finish(outcome),
                "logprobs": None,
            }
        ],
        "usage": usage_of(str(meta["message"]), answer, outcome),
        "system_fingerprint": None,
    }


def _finish(outcome: Outcome) -> str:
    reply = outcome.get("reply") or {}
    return "length" if reply.get("status") == "max_iterations" else "stop"


async def chunks(
    turn: Turn, include_usage: bool, remember: Callable[[str], Awaitable[None]] | None = None
) -> AsyncIterator[str]:
    """The turn as ``chat.completion.chunk`` events: the role, text deltas as the model writes them (a
    blank line between the text before a tool call and after it), the rest of the answer the deltas did not
    carry (a replay, an approval note), the finish, usage if asked, ``[DONE]``."""
    meta = turn.meta

    def chunk(delta: dict[str, Any], finish: str | None = None, usage: Any = None) -> str:
        body = {
            "id": meta["id"],
            "object": "chat.completion.chunk",
            "created": meta["created"],
            "model": meta["model"],
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]
            if usage is None
            else [],
            **({"usage": usage} if usage is not None else {}),
        }
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    sent = ""
    gap = False
    sub = turn.sub
    try:
        if sub is not None and turn.task is not None:
            async for event in _live(turn):
                kind = event.get("type")
                if kind == "text_delta" and event.get("text"):
                    text = str(event["text"])
                    if gap and sent:
                        text = "\n\n" + text
                    gap = False
                    sent += text
                    yield chunk({"content": text})
                elif kind == "tool_call_start":
                    gap = True
                elif kind == "ping":
                    yield ": ping\n\n"
        outcome = await turn.result()
        answer = answer_text(outcome, str(meta["base_url"]))
        if answer is None:
            error = outcome.get("error") or {}
            payload = {
                "error": {
                    "message": str(error.get("message") or "the turn failed"),
                    "type": "server_error",
                    "code": error.get("code"),
                    "param": None,
                }
            }
            yield f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"
            return
        rest = answer if not sent else ""
        if sent and (outcome.get("reply") or {}).get("status") == "paused":
            rest = "\n\n" + answer  # what waits, and where to approve it
        if rest:
            yield chunk({"content": rest})
        yield chunk({}, _finish(outcome))
        if include_usage:
            yield chunk({}, usage=usage_of(str(meta["message"]), sent + rest, outcome))
        yield "data: [DONE]\n\n"
        if sent + rest != answer and remember is not None:
            await remember(sent + rest)  # the text this client holds (the deltas of every step)
    finally:
        if sub is not None:
            sub.close()


async def _live(turn: Turn) -> AsyncIterator[dict[str, Any]]:
    """The session's events until the turn's task ends (then what was queued before it); a ``ping`` every
    15 idle seconds."""
    sub, task = turn.sub, turn.task
    assert sub is not None and task is not None
    get: asyncio.Future[Any] | None = None
    for event in turn.extra.pop("pending", []):
        if isinstance(event, dict):
            yield event
    try:
        while True:
            if get is None:
                get = asyncio.ensure_future(sub.get())
            done, _ = await asyncio.wait({get, task}, timeout=15.0, return_when=asyncio.FIRST_COMPLETED)
            if get in done:
                event, get = get.result(), None
                if isinstance(event, dict):
                    yield event
                continue
            if task in done:
                while (event := sub.get_nowait()) is not None:
                    if isinstance(event, dict):
                        yield event
                return
            yield {"type": "ping"}
    finally:
        if get is not None:
            get.cancel()
