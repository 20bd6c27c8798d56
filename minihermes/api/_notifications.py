"""The caller's notifications: ``GET /api/v1/notifications``, ``POST /api/v1/notifications/read`` and the live
``GET /api/v1/notifications/stream``.

The first two are ``notifications.list_notifications`` and ``notifications.mark_read`` for the signed-in
person (authorized and answered exactly as those ops over ``/api/v1/actors/...``; an admin reads their own
inbox here too). The stream is Server-Sent Events on the caller's own topic: ``notification`` {id, text,
source, created_at, read} when one arrives, ``dropped`` {count} if this reader fell behind, and ``: ping``
comments. It carries only what arrives while it is open (read the list on connect, and again after a
reconnect) and ends when the server shuts down.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from minihermes.runtime import RequestContext, Subscription

from ._access import authorize, find_actor, find_op, read_body, timeout_of
from ._core import API_PREFIX, ApiState, guarded, json_response
from ._errors import invalid
from ._schemas import error_responses, json_content

ACTOR = "notifications"
LIST_PATH = f"{API_PREFIX}/notifications"
READ_PATH = f"{API_PREFIX}/notifications/read"
STREAM_PATH = f"{API_PREFIX}/notifications/stream"
MAX_LIMIT = 500
MAX_IDS = 500
PING_SECONDS = 15.0
DRAIN_CHECK_SECONDS = 1.0
"""How often an open stream looks whether the server is shutting down (so it never holds the shutdown)."""
_FORWARDED = frozenset({"notification", "dropped"})


def notifications_topic(user_id: str) -> str:
    # The actor's topic name (minihermes.work.notifications.topic_for), repeated so the HTTP layer does not
    # import the work package; the runtime scopes it to the caller's tenant.
    return f"notifications:{user_id}"


def add_notification_routes(app: FastAPI, state: ApiState) -> None:
    @app.get(
        LIST_PATH,
        tags=["notifications"],
        summary="The caller's notifications, newest first",
        operation_id="list_notifications",
        openapi_extra={
            "parameters": [
                {"name": "unread_only", "in": "query", "required": False, "schema": {"type": "boolean"}},
                {
                    "name": "limit",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
                },
            ]
        },
    )
    async def list_notifications(request: Request) -> Response:
        return await guarded(state, request, _list)

    @app.post(
        READ_PATH,
        tags=["notifications"],
        summary="Mark some of the caller's notifications as read",
        operation_id="mark_notifications_read",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": json_content(
                    {
                        "type": "object",
                        "properties": {
                            "ids": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_IDS}
                        },
                        "required": ["ids"],
                        "additionalProperties": False,
                    }
                ),
            }
        },
    )
    async def mark_read(request: Request) -> Response:
        return await guarded(state, request, _mark_read)

    # Not in the OpenAPI document: a stream that stays open is not an operation a fuzzer can finish.
    @app.get(STREAM_PATH, include_in_schema=False)
    async def stream(request: Request) -> Response:
        return await guarded(state, request, _stream)


def _authorized(state: ApiState, ctx: RequestContext, op: str) -> None:
    authorize(state, ctx, find_op(state, find_actor(state, ACTOR), op))


def _flag(request: Request, name: str) -> bool:
    raw = request.query_params.get(name)
    if raw is None:
        return False
    if raw not in ("true", "false"):
        raise invalid(f"{name} must be true or false", field=name)
    return raw == "true"


def _limit(request: Request) -> int:
    raw = request.query_params.get("limit")
    if raw is None:
        return 50
    if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= MAX_LIMIT):
        raise invalid(f"limit must be an integer 1..{MAX_LIMIT}", field="limit")
    return int(raw)


async def _list(state: ApiState, request: Request, ctx: RequestContext) -> Response:
    _authorized(state, ctx, "list_notifications")
    payload = {"unread_only": _flag(request, "unread_only"), "limit": _limit(request)}
    reply = await state.node.ask(ACTOR, "list_notifications", payload, timeout_of(state, request), ctx=ctx)
    return json_response(reply)


async def _mark_read(state: ApiState, request: Request, ctx: RequestContext) -> Response:
    _authorized(state, ctx, "mark_read")
    body = await read_body(state, request)
    unknown = sorted(set(body) - {"ids"})
    if unknown:
        raise invalid(f"unknown field {unknown[0]!r} (send ids)", field=unknown[0])
    ids = body.get("ids")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids) or len(ids) > MAX_IDS:
        raise invalid(f"ids must be a list of at most {MAX_IDS} notification ids", field="ids")
    reply = await state.node.ask(ACTOR, "mark_read", {"ids": ids}, timeout_of(state, request), ctx=ctx)
    return json_response(reply)


async def _stream(state: ApiState, request: Request, ctx: RequestContext) -> Response:
    _authorized(state, ctx, "list_notifications")
    sub = state.node.subscribe(notifications_topic(ctx.principal), ctx=ctx)
    return StreamingResponse(
        _events(state, sub),
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
    )


async def _events(state: ApiState, sub: Subscription) -> AsyncIterator[str]:
    seq = 0
    idle = 0.0
    try:
        yield ": connected\n\n"  # the headers and a first byte now: the reader knows it is subscribed
        while not state.draining:
            try:
                event = await sub.get(timeout=DRAIN_CHECK_SECONDS)
            except TimeoutError:
                idle += DRAIN_CHECK_SECONDS
                if idle >= PING_SECONDS:
                    idle = 0.0
                    yield ": ping\n\n"
                continue
            if not isinstance(event, dict) or event.get("type") not in _FORWARDED:
                continue
            seq += 1
            data = {k: v for k, v in event.items() if k != "type"}
            yield f"id: {seq}\nevent: {event['type']}\ndata: {json.dumps(data, default=str)}\n\n"
    finally:
        sub.close()


def notifications_openapi() -> dict[tuple[str, str], dict[str, Any]]:
    """(path, method) -> the ``responses`` of the list and mark-read endpoints."""
    item = {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "text": {"type": "string"},
            "source": {"type": "string"},
            "created_at": {"type": "number"},
            "read": {"type": "boolean"},
        },
        "required": ["id", "text", "source", "created_at", "read"],
    }
    listing = {
        "type": "object",
        "properties": {
            "status": {"const": "ok"},
            "notifications": {"type": "array", "items": item},
            "count": {"type": "integer"},
            "unread": {"type": "integer"},
        },
        "required": ["status", "notifications", "count", "unread"],
    }
    marked = {
        "type": "object",
        "properties": {"status": {"const": "ok"}, "marked": {"type": "integer"}},
        "required": ["status", "marked"],
    }
    return {
        (LIST_PATH, "get"): {
            "200": {"description": "The caller's notifications", "content": json_content(listing)},
            **error_responses(404, 422, 401, 403, 405, 500, 503, 504),
        },
        (READ_PATH, "post"): {
            "200": {"description": "How many were unread and are now read", "content": json_content(marked)},
            **error_responses(400, 404, 413, 415, 422, 401, 403, 405, 500, 503, 504),
        },
    }
