"""What every route shares: the app state, authentication around a handler, and JSON responses.

``guarded`` is the one door of every authenticated endpoint: it authenticates (or checks that an
unauthenticated request is local), runs the handler, turns every failure into a structured error, counts
the request (``http_requests_total``) and logs one line per request with its id, tenant and principal.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from fastapi import Request
from fastapi.responses import Response

from minihermes.permissions import PermissionTable
from minihermes.runtime import ActorError, Node, RequestContext

from ._approvers import report_admins
from ._auth import Authenticator
from ._body import dump
from ._catalog import ActorInfo, build_catalog
from ._errors import ApiError, forbidden

log = logging.getLogger("minihermes.api")
access_log = logging.getLogger("minihermes.api.access")

API_PREFIX = "/api/v1"
LOOPBACK_HOSTS: frozenset[str] = frozenset({"localhost", "127.0.0.1", "::1"})
_REQUEST_ID = re.compile(r"[A-Za-z0-9._\-]{1,64}")

Handler = Callable[..., Awaitable[Response]]


@dataclass(slots=True)
class ApiState:
    """What the routes share; reachable as ``app.state.minihermes``."""

    node: Node
    auth: Authenticator
    permissions: PermissionTable
    default_timeout: float
    max_timeout: float
    max_body_bytes: int
    allowed_hosts: frozenset[str]
    draining: bool = False
    """Set while the server shuts down: /readyz answers 503 so load balancers stop sending traffic."""
    public_metrics: bool = False
    """Serve /metrics without credentials (every tenant's series) even when auth is configured."""
    extras: dict[str, Any] = field(default_factory=dict)
    """Per-app helpers of other modules (the metrics history), created on first use."""
    _catalog: dict[str, ActorInfo] | None = field(default=None, repr=False)

    @property
    def catalog(self) -> dict[str, ActorInfo]:
        if self._catalog is None:
            self._catalog = build_catalog(self.node, self.permissions)
        return self._catalog


def request_id_of(request: Request) -> str:
    header_id = request.headers.get("x-request-id", "")
    return header_id if _REQUEST_ID.fullmatch(header_id) else uuid.uuid4().hex


async def authenticate(state: ApiState, request: Request, request_id: str) -> RequestContext:
    """The caller's context, or an ApiError (401, or 403 for a non-local request without auth)."""
    if not state.auth.enabled:
        check_local_request(state, request)
    ctx = await state.auth.authenticate(request.headers, request_id=request_id, now=state.node.clock.time())
    await report_admins(state, ctx.scope)  # once per scope: who could decide on a paused call
    return ctx


async def guarded(state: ApiState, request: Request, handler: Handler, *args: Any) -> Response:
    """Authenticate, run the handler, and turn every failure into a structured error (never a traceback)."""
    request_id = request_id_of(request)
    started = time.perf_counter()
    ctx: RequestContext | None = None
    try:
        ctx = await authenticate(state, request, request_id)
        response: Response = await handler(state, request, ctx, *args)
    except ApiError as e:
        response = error_response(e, request_id)
    except ActorError as e:
        response = actor_error_response(e, request_id)
    except Exception:
        log.exception("request %s failed", request_id)
        response = error_response(
            ApiError(500, "internal", "internal server error", request_id=request_id), request_id
        )
    response.headers["x-request-id"] = request_id
    observe(state, request, response.status_code, started, request_id, ctx)
    return response


def observe(
    state: ApiState,
    request: Request,
    status: int,
    started: float,
    request_id: str,
    ctx: RequestContext | None,
) -> None:
    """Count and log one finished request (for a stream: once its headers are decided). Never raises: the
    response is decided, and bookkeeping must not turn it into a 500."""
    try:
        _observe(state, request, status, started, request_id, ctx)
    except Exception:
        log.exception("request %s: metrics or access log failed", request_id)


def _observe(
    state: ApiState,
    request: Request,
    status: int,
    started: float,
    request_id: str,
    ctx: RequestContext | None,
) -> None:
    route = str(getattr(request.scope.get("route"), "path", "") or "unmatched")
    elapsed = time.perf_counter() - started
    start_history = state.extras.get("start_history")
    if start_history is not None:
        start_history()  # the dashboard's charts cover the time since the first request
    metrics = state.node.metrics
    metrics.incr("http_requests_total", method=request.method, route=route, status=str(status))
    metrics.incr("http_request_seconds_total", elapsed, method=request.method, route=route)
    access_log.info(
        "%s %s %d %.1fms",
        request.method,
        request.url.path,
        status,
        elapsed * 1000,
        extra={
            "request_id": request_id,
            "method": request.method,
            "path": request.url.path,
            "route": route,
            "status": status,
            "duration_ms": round(elapsed * 1000, 3),
            "tenant": ctx.tenant if ctx else None,
            "principal": ctx.principal if ctx else None,
        },
    )


def check_local_request(state: ApiState, request: Request) -> None:
    """Without auth, serve only requests that are visibly local: no web page may drive the owner's agent."""
    host = request.headers.get("host")
    if host is not None and hostname(f"//{host}") not in state.allowed_hosts:
        raise forbidden("without authentication this server only answers requests addressed to localhost")
    origin = request.headers.get("origin")
    if origin is not None and hostname(origin) not in state.allowed_hosts:
        raise forbidden("cross-origin requests are refused without authentication")


def hostname(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


# -- responses -------------------------------------------------------------------------------------------


def json_response(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    try:
        body = dump(value)
    except (TypeError, ValueError) as e:
        log.error("reply is not JSON: %s", e)
        body = dump({"error": {"code": "reply_not_serializable", "message": "the actor's reply is not JSON"}})
        status = 500
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def error_response(e: ApiError, request_id: str) -> Response:
    headers = dict(e.headers)
    if request_id:
        headers["x-request-id"] = request_id
    return json_response(e.to_dict(), e.status, headers)


def actor_error_response(e: ActorError, request_id: str) -> Response:
    status = e.http_status if 400 <= e.http_status <= 599 else 500
    headers = {"x-request-id": request_id}
    if status == 503:
        headers["retry-after"] = "1"
    return json_response(actor_error_body(e), status, headers)


def actor_error_body(e: ActorError) -> dict[str, Any]:
    try:
        body = e.to_dict()
        dump(body)
    except (TypeError, ValueError):
        body = {"error": {"code": e.code, "message": e.message}}
    return body
