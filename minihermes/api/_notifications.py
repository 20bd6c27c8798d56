"""The caller's notifications: ``GET /api/v1/notifications``, ``POST /api/v1/notifications/read`` and the live
``GET /api/v1/notifications/stream``.

The first two are ``notifications.list_notifications`` and ``notifications.mark_read`` for the signed-in
person (authorized and answered exactly as those ops over ``/api/v1/actors/...``; an admin reads their own
inbox here too). The stream is Server-Sent Events on the caller's own topic: ``notification`` {id, text,
source, created_at, read} when one arrives, ``dropped`` {count} if this reader fell behind, and ``: ping``
comments. It carries only what arrives while it is open (read the list on connect, and again after a
reconnect) and ends when the server shuts down.

A browser's ``EventSource`` cannot send a credential header, and a credential in a URL ends up in access
logs; so the dashboard first asks ``POST /api/v1/notifications/stream/ticket`` (with its credential) for a
ticket, and opens ``GET /api/v1/notifications/stream?ticket=...``. A ticket is random, single use, good for
``TICKET_SECONDS`` and for this server process only (the stream is opened right after, on the same
connection as a rule); it carries the caller's context, checked again when the stream opens. Other clients
send their credential on the stream request itself.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from minihermes.runtime import ActorError, RequestContext, Subscription

from ._access import authorize, find_actor, find_op, read_body, timeout_of
from ._core import (
    API_PREFIX,
    ApiState,
    actor_error_response,
    error_response,
    guarded,
    json_response,
    observe,
    request_id_of,
)
from ._errors import ApiError, invalid, unauthenticated
from ._schemas import error_responses, json_content

ACTOR = "notifications"
LIST_PATH = f"{API_PREFIX}/notifications"
READ_PATH = f"{API_PREFIX}/notifications/read"
STREAM_PATH = f"{API_PREFIX}/notifications/stream"
TICKET_PATH = f"{API_PREFIX}/notifications/stream/ticket"
TICKET_SECONDS = 60.0
MAX_TICKETS = 10_000
"""Tickets outstanding at most (issued and not yet used or expired); beyond it the oldest are dropped."""
_TICKETS = "notification_stream_tickets"
MAX_LIMIT = 500
MAX_IDS = 500
PING_SECONDS = 15.0
DRAIN_CHECK_SECONDS = 0.25
"""How often an open stream looks whether the server or the node is shutting down: it then ends, so that it
never holds the server's graceful shutdown (a wake-up per open stream, four times a second: no store work)."""
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

    @app.post(
        TICKET_PATH,
        tags=["notifications"],
        summary="A single-use ticket that opens the caller's notification stream (for a browser's EventSource)",
        operation_id="notification_stream_ticket",
    )
    async def ticket(request: Request) -> Response:
        return await guarded(state, request, _ticket)

    # Not in the OpenAPI document: a stream that stays open is not an operation a fuzzer can finish.
    @app.get(STREAM_PATH, include_in_schema=False)
    async def stream(request: Request) -> Response:
        if "ticket" in request.query_params:
            return await _stream_by_ticket(state, request)
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


def _tickets(state: ApiState) -> dict[str, tuple[RequestContext, float]]:
    tickets: dict[str, tuple[RequestContext, float]] = state.extras.setdefault(_TICKETS, {})
    return tickets


async def _ticket(state: ApiState, request: Request, ctx: RequestContext) -> Response:
    _authorized(state, ctx, "list_notifications")
    tickets = _tickets(state)
    now = time.monotonic()
    for old in [t for t, (_, expires) in tickets.items() if expires <= now]:
        del tickets[old]
    while len(tickets) >= MAX_TICKETS:
        del tickets[next(iter(tickets))]
    value = secrets.token_urlsafe(32)
    tickets[value] = (ctx, now + TICKET_SECONDS)
    return json_response({"status": "ok", "ticket": value, "expires_in": TICKET_SECONDS})


async def _stream_by_ticket(state: ApiState, request: Request) -> Response:
    """``guarded`` for the stream opened with a ticket instead of a credential."""
    request_id = request_id_of(request)
    started = time.perf_counter()
    ctx: RequestContext | None = None
    try:
        found = _tickets(state).pop(request.query_params["ticket"], None)
        if found is None or found[1] <= time.monotonic():
            raise unauthenticated("the stream ticket is unknown, used or expired: ask for a new one")
        ctx = found[0]
        response = await _stream(state, request, ctx)
    except ApiError as e:
        response = error_response(e, request_id)
    except ActorError as e:
        response = actor_error_response(e, request_id)
    response.headers["x-request-id"] = request_id
    observe(state, request, response.status_code, started, request_id, ctx)
    return response


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
        while not state.draining and state.node.accepting:
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
    ticket = {
        "type": "object",
        "properties": {
            "status": {"const": "ok"},
            "ticket": {"type": "string"},
            "expires_in": {"type": "number"},
        },
        "required": ["status", "ticket", "expires_in"],
    }
    return {
        (TICKET_PATH, "post"): {
            "200": {
                "description": "Open GET /api/v1/notifications/stream?ticket=... with it, once, soon",
                "content": json_content(ticket),
            },
            **error_responses(404, 422, 401, 403, 405, 500, 503, 504),
        },
        (LIST_PATH, "get"): {
            "200": {"description": "The caller's notifications", "content": json_content(listing)},
            **error_responses(404, 422, 401, 403, 405, 500, 503, 504),
        },
        (READ_PATH, "post"): {
            "200": {"description": "How many were unread and are now read", "content": json_content(marked)},
            **error_responses(400, 404, 413, 415, 422, 401, 403, 405, 500, 503, 504),
        },
    }
