"""The OpenAI-compatible API (docs/openai-api.md): ``GET /v1/models``, ``POST /v1/chat/completions``,
``POST /v1/responses`` and ``GET /v1/responses/{id}``, behind the same credentials and permission table as
``/api/v1``.

Every turn runs as the credential's principal with its roles (authorized as ``agent.chat``: a viewer is
refused 403, a user reaches only their own sessions), in a durable session recorded with channel ``openai``.
The agent's own tool calls run on the server and never reach the client as ``tool_calls``. Errors answer in
OpenAI's shape, ``{"error": {"message", "type", "code", "param"}}``. This module holds what the endpoints
share: the error shape, the request door (authentication, the load-shedding gate) and the models list.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from minihermes.runtime import ActorError, RequestContext

from ._access import authorize, find_actor, find_op
from ._core import ApiState, authenticate, json_response, observe, request_id_of
from ._errors import ApiError
from ._shedding import GATE_KEY, Shed, ShedGate

log = logging.getLogger("minihermes.api")

MODEL = "minihermes"
"""The model name every deployment answers to: the node's agent, whatever LLM it runs on."""
SESSION_HEADER = "x-minihermes-session"
"""Sent back with every reply; a client that sends it again continues that session."""
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
}

OpenAIHandler = Callable[..., Awaitable[Response]]


def models(state: ApiState) -> list[str]:
    """The model names this server answers to: ``minihermes``, then one per agent profile a deployment
    configures (``extras["openai_models"]``; the built-in app configures none)."""
    extra = [str(m) for m in state.extras.get("openai_models", ()) if str(m) != MODEL]
    return [MODEL, *extra]


def check_model(state: ApiState, model: Any) -> str:
    if not isinstance(model, str) or not model:
        raise ApiError(400, "invalid_argument", "model is required (use 'minihermes')", field="model")
    if model not in models(state):
        raise ApiError(
            404,
            "model_not_found",
            f"The model '{model}' does not exist; this server answers to {', '.join(models(state))}",
            field="model",
        )
    return model


def openai_error(
    status: int, code: str, message: str, param: Any = None, headers: dict[str, str] | None = None
) -> Response:
    """An error in OpenAI's shape; a 422 (this API's bad-argument status) answers 400 as OpenAI does."""
    status = 400 if status == 422 else status
    kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    body = {"error": {"message": message, "type": kind, "code": code, "param": param}}
    out = dict(headers or {})
    if status in (429, 503) and "retry-after" not in {k.lower() for k in out}:
        out["retry-after"] = "1"
    return json_response(body, status, out)


def error_of(e: Exception, request_id: str) -> Response:
    if isinstance(e, ApiError):
        headers = {k.lower(): v for k, v in e.headers.items()}
        if "retry_after" in e.details:
            headers["retry-after"] = str(e.details["retry_after"])
        return openai_error(e.status, e.code, e.message, e.details.get("field"), headers)
    if isinstance(e, ActorError):
        status = e.http_status if 400 <= e.http_status <= 599 else 500
        headers = {}
        retry = e.details.get("retry_after")
        if status in (429, 503):
            headers["retry-after"] = str(int(retry) if isinstance(retry, int | float) else 1)
        return openai_error(status, e.code, e.message, e.details.get("field"), headers)
    log.exception("request %s failed", request_id, exc_info=e)
    return openai_error(500, "internal", "internal server error")


async def openai_door(state: ApiState, request: Request, handler: OpenAIHandler, *args: Any) -> Response:
    """``guarded`` for ``/v1``: authenticate, pass the load-shedding gate, run, answer errors in OpenAI's
    shape. The gate's slot is held until the response starts (a stream: while it starts)."""
    request_id = request_id_of(request)
    started = time.perf_counter()
    ctx: RequestContext | None = None
    gate: ShedGate | None = state.extras.get(GATE_KEY)
    held: float | None = None
    try:
        ctx = await authenticate(state, request, request_id)
        if gate is not None:
            try:
                await gate.acquire(ctx.tenant, gate.config.queue_timeout)
            except Shed as e:
                state.node.metrics.incr("http_shed_total", code=e.code, tenant=ctx.tenant)
                raise e.to_api_error(request_id) from None
            held = time.monotonic()
        response = await handler(state, request, ctx, *args)
    except Exception as e:
        response = error_of(e, request_id)
    finally:
        if gate is not None and held is not None and ctx is not None:
            gate.release(ctx.tenant, time.monotonic() - held)
    response.headers["x-request-id"] = request_id
    observe(state, request, response.status_code, started, request_id, ctx)
    return response


def authorize_chat(state: ApiState, ctx: RequestContext) -> None:
    """The caller may run turns (``agent.chat``): viewers may not."""
    authorize(state, ctx, find_op(state, find_actor(state, "agent"), "chat"))


async def _list_models(state: ApiState, request: Request, ctx: RequestContext) -> Response:
    created = int(state.extras.setdefault("openai_created", int(time.time())))
    data = [{"id": m, "object": "model", "created": created, "owned_by": "minihermes"} for m in models(state)]
    return json_response({"object": "list", "data": data})


async def _get_model(state: ApiState, request: Request, ctx: RequestContext, model: str) -> Response:
    check_model(state, model)
    created = int(state.extras.setdefault("openai_created", int(time.time())))
    return json_response({"id": model, "object": "model", "created": created, "owned_by": "minihermes"})


def add_openai_routes(app: FastAPI, state: ApiState) -> None:
    """Register ``/v1``: models, chat completions, responses."""
    from ._openai_chat import chat_completions
    from ._openai_responses import add_response_routes

    @app.get(
        "/v1/models", include_in_schema=False, summary="The model names this server answers to (OpenAI API)"
    )
    async def list_models(request: Request) -> Response:
        return await openai_door(state, request, _list_models)

    @app.get("/v1/models/{model}", include_in_schema=False, summary="One model (OpenAI API)")
    async def get_model(request: Request, model: str) -> Response:
        return await openai_door(state, request, _get_model, model)

    @app.post(
        "/v1/chat/completions", include_in_schema=False, summary="A chat turn (OpenAI Chat Completions)"
    )
    async def completions(request: Request) -> Response:
        return await openai_door(state, request, chat_completions)

    add_response_routes(app, state)
