"""The HTTP API over a running node: ``POST /api/v1/actors/{actor}/{op}`` and friends (docs/http-api.md)."""

from __future__ import annotations

import asyncio
import difflib
import logging
import math
import re
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from minihermes.runtime import ActorError, ActorNotFound, Node, NotFound, RequestContext, UnknownOp

from ._auth import AuthConfig, Authenticator
from ._body import check_content_type, dump, parse_object, read_limited
from ._catalog import ActorInfo, OpInfo, actor_listing, build_catalog, openapi_paths
from ._errors import ApiError, forbidden, invalid
from .permissions import DEFAULT_PERMISSIONS, PermissionTable

log = logging.getLogger("minihermes.api")

API_PREFIX = "/api/v1"
LOOPBACK_HOSTS: frozenset[str] = frozenset({"localhost", "127.0.0.1", "::1"})
_REQUEST_ID = re.compile(r"[A-Za-z0-9._\-]{1,64}")
_SESSION_ACTOR = "session_manager"
_AUDIT_ACTOR = "audit_event"


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
    _catalog: dict[str, ActorInfo] | None = field(default=None, repr=False)

    @property
    def catalog(self) -> dict[str, ActorInfo]:
        if self._catalog is None:
            self._catalog = build_catalog(self.node, self.permissions)
        return self._catalog


def create_app(
    node: Node,
    auth: AuthConfig | None = None,
    *,
    permissions: PermissionTable | None = None,
    default_timeout: float = 30.0,
    max_timeout: float = 300.0,
    max_body_bytes: int = 1_048_576,
    allowed_hosts: set[str] | frozenset[str] | None = None,
    title: str = "MiniHermes",
) -> FastAPI:
    """A FastAPI app serving ``node`` (started or about to be).

    - ``auth``: None means no authentication: every request is the local owner (tenant ``default``, role
      admin), and only requests whose ``Host`` (and ``Origin``, if sent) is a loopback name are served, so a
      web page cannot drive the local agent (cross-site requests, DNS rebinding). ``serve_http`` also refuses
      to bind a non-loopback address without auth.
    - ``permissions``: the (actor, op) access table (default: ``DEFAULT_PERMISSIONS``).
    - ``default_timeout`` / ``max_timeout``: seconds an op may take (``?timeout=`` picks up to the max).
    - ``max_body_bytes``: larger bodies get 413.
    - ``allowed_hosts``: extra host names accepted without auth (default: localhost, 127.0.0.1, ::1).
    """
    if not 0 < default_timeout <= max_timeout:
        raise ValueError("need 0 < default_timeout <= max_timeout")
    if max_body_bytes < 1:
        raise ValueError("max_body_bytes must be positive")
    state = ApiState(
        node=node,
        auth=Authenticator(auth, node.store),
        permissions=permissions or DEFAULT_PERMISSIONS,
        default_timeout=default_timeout,
        max_timeout=max_timeout,
        max_body_bytes=max_body_bytes,
        allowed_hosts=LOOPBACK_HOSTS | frozenset(h.lower() for h in (allowed_hosts or ())),
    )
    app = FastAPI(
        title=title,
        description="The MiniHermes actor API: every actor op is POST /api/v1/actors/{actor}/{op}.",
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.state.minihermes = state

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        message = "no such endpoint" if exc.status_code == 404 else str(exc.detail)
        return _error(ApiError(exc.status_code, code, message, headers=dict(exc.headers or {})), "")

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        return _error(invalid("invalid request"), "")

    @app.get("/healthz", tags=["health"], summary="The process is up")
    async def healthz() -> Response:
        return _json({"status": "ok"})

    @app.get("/readyz", tags=["health"], summary="The node is started and its store answers")
    async def readyz() -> Response:
        reason = await _not_ready(state)
        if reason:
            return _json({"status": "not_ready", "reason": reason}, 503)
        return _json({"status": "ready"})

    @app.get(f"{API_PREFIX}/whoami", tags=["discovery"], summary="The caller's tenant, principal and roles")
    async def whoami(request: Request) -> Response:
        return await _guarded(state, request, _whoami)

    @app.get(f"{API_PREFIX}/actors", tags=["discovery"], summary="Every actor, its ops and their arguments")
    async def list_actors(request: Request) -> Response:
        return await _guarded(state, request, _list_actors)

    @app.get(f"{API_PREFIX}/actors/{{actor}}", tags=["discovery"], summary="One actor's ops")
    async def describe_actor(request: Request, actor: str) -> Response:
        return await _guarded(state, request, _describe_actor, actor)

    @app.post(f"{API_PREFIX}/actors/{{actor}}/{{op}}", include_in_schema=False)
    async def call_op(request: Request, actor: str, op: str) -> Response:
        return await _guarded(state, request, _call, actor, op)

    @app.post(f"{API_PREFIX}/actors/{{actor}}", include_in_schema=False)
    async def call_op_in_body(request: Request, actor: str) -> Response:
        return await _guarded(state, request, _call, actor, None)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version="1", description=app.description, routes=app.routes)
            paths, components = openapi_paths(state.catalog)
            schema["paths"].update(paths)
            schema.setdefault("components", {}).setdefault("schemas", {}).update(components)
            if state.auth.enabled:
                schema["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
                schema["security"] = [{"bearer": []}]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


# -- request handling ------------------------------------------------------------------------------------


async def _guarded(state: ApiState, request: Request, handler: Any, *args: Any) -> Response:
    """Authenticate, run the handler, and turn every failure into a structured error (never a traceback)."""
    header_id = request.headers.get("x-request-id", "")
    request_id = header_id if _REQUEST_ID.fullmatch(header_id) else uuid.uuid4().hex
    try:
        if not state.auth.enabled:
            _check_local_request(state, request)
        ctx = await state.auth.authenticate(
            request.headers, request_id=request_id, now=state.node.clock.time()
        )
        response: Response = await handler(state, request, ctx, *args)
    except ApiError as e:
        return _error(e, request_id)
    except ActorError as e:
        return _actor_error(e, request_id)
    except Exception:
        log.exception("request %s failed", request_id)
        return _error(ApiError(500, "internal", "internal server error", request_id=request_id), request_id)
    response.headers["x-request-id"] = request_id
    return response


async def _call(
    state: ApiState, request: Request, ctx: RequestContext, actor: str, op: str | None
) -> Response:
    info = _actor(state, actor)
    if op is None:
        payload = await _body(state, request)
        named = payload.pop("op", None)
        if not isinstance(named, str) or not named:
            raise invalid("POST /api/v1/actors/{actor} needs the op in the body ('op')", field="op")
        op = named
        opinfo = _op(state, info, op)
        _authorize(state, ctx, opinfo)
    else:
        opinfo = _op(state, info, op)
        _authorize(state, ctx, opinfo)  # before reading the body: refused callers do not get to upload
        payload = await _body(state, request)
        named = payload.pop("op", op)
        if named != op:
            raise invalid(f"the body names op {named!r} but the URL names {op!r}", field="op")
    timeout = _timeout(state, request)
    if _restricted(ctx):
        await _enforce_ownership(state, ctx, info, opinfo, payload, timeout)
    reply = await state.node.ask(actor, op, payload, timeout, ctx=ctx)
    if opinfo.kind == "cast":
        return _json({"status": "accepted"}, 202)
    return _json({"status": "ok"} if reply is None else reply)


async def _whoami(state: ApiState, request: Request, ctx: RequestContext) -> Response:
    return _json(
        {
            "tenant": ctx.tenant,
            "namespace": ctx.namespace,
            "principal": ctx.principal,
            "roles": sorted(ctx.roles),
            "authenticated": state.auth.enabled,
        }
    )


async def _list_actors(state: ApiState, request: Request, ctx: RequestContext) -> Response:
    actors = [actor_listing(info, ctx.roles) for info in state.catalog.values()]
    return _json({"actors": actors, "count": len(actors)})


async def _describe_actor(state: ApiState, request: Request, ctx: RequestContext, actor: str) -> Response:
    return _json(actor_listing(_actor(state, actor), ctx.roles))


def _actor(state: ApiState, name: str) -> ActorInfo:
    info = state.catalog.get(name)
    if info is None:
        state.node.spec(name)  # raises ActorNotFound with a "did you mean"
        raise ActorNotFound(f"no actor named '{name}'", actor=name)
    return info


def _op(state: ApiState, info: ActorInfo, op: str) -> OpInfo:
    found = info.ops.get(op)
    if found is None:
        hint = difflib.get_close_matches(op, list(info.ops), n=1)
        extra = f"; did you mean '{hint[0]}'?" if hint else ""
        raise UnknownOp(f"{info.name} has no op '{op}'{extra}", actor=info.name, op=op)
    return found


def _authorize(state: ApiState, ctx: RequestContext, opinfo: OpInfo) -> None:
    if opinfo.roles.isdisjoint(ctx.roles):
        have = ", ".join(sorted(ctx.roles)) or "no role"
        _audit(
            state,
            ctx,
            "permission_denied",
            f"{opinfo.actor}.{opinfo.op} refused to {have}",
            {"actor": opinfo.actor, "op": opinfo.op, "roles": sorted(ctx.roles)},
        )
        raise forbidden(
            f"{have} cannot call {opinfo.actor}.{opinfo.op} (access '{opinfo.access}': "
            f"{', '.join(sorted(opinfo.roles))})",
            actor=opinfo.actor,
            op=opinfo.op,
            access=opinfo.access,
            required=sorted(opinfo.roles),
        )


def _audit(state: ApiState, ctx: RequestContext, event_type: str, detail: str, data: dict[str, Any]) -> None:
    """Record a refusal in the caller's tenant trail, without waiting and without ever failing the request."""
    if _AUDIT_ACTOR not in state.catalog:
        return
    try:
        state.node.send(
            _AUDIT_ACTOR, "log_event", {"event_type": event_type, "detail": detail, "data": data}, ctx=ctx
        )
    except ActorError as e:
        log.warning("audit of %s not recorded: %s", event_type, e.message)


def _restricted(ctx: RequestContext) -> bool:
    """End users: role user without admin. They act only as themselves and in their own sessions."""
    return "user" in ctx.roles and "admin" not in ctx.roles


async def _enforce_ownership(
    state: ApiState,
    ctx: RequestContext,
    info: ActorInfo,
    opinfo: OpInfo,
    payload: dict[str, Any],
    timeout: float,
) -> None:
    names = {p["name"] for p in opinfo.params}
    if "user_id" in names:
        user_id = payload.get("user_id")
        if user_id is None or user_id == "":
            payload["user_id"] = ctx.principal
        elif user_id != ctx.principal:
            raise forbidden(
                "users can only act as themselves (user_id must be your principal)", field="user_id"
            )
    session_id = payload.get("session_id")
    if (
        info.name == _SESSION_ACTOR
        or _SESSION_ACTOR not in state.catalog
        or not isinstance(session_id, str)
        or not session_id
        or ("session_id" not in names and info.key_field != "session_id")
    ):
        return
    try:
        # the session manager answers a user only about their own sessions
        await state.node.ask(_SESSION_ACTOR, "get_session", {"session_id": session_id}, timeout, ctx=ctx)
    except ActorError as e:
        if isinstance(e, NotFound) or e.code == "invalid_argument":
            raise ApiError(
                404,
                "not_found",
                f"no session '{session_id}' of yours (create one with session_manager.create_session)",
            ) from None
        raise


async def _body(state: ApiState, request: Request) -> dict[str, Any]:
    check_content_type(request.headers.get("content-type", ""))
    raw = await read_limited(request.stream(), request.headers.get("content-length"), state.max_body_bytes)
    return parse_object(raw)


def _timeout(state: ApiState, request: Request) -> float:
    raw = request.query_params.get("timeout")
    if raw is None:
        return state.default_timeout
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= state.max_timeout):
        raise invalid(f"timeout must be a number of seconds in (0, {state.max_timeout:g}]", field="timeout")
    return value


def _check_local_request(state: ApiState, request: Request) -> None:
    """Without auth, serve only requests that are visibly local: no web page may drive the owner's agent."""
    host = request.headers.get("host")
    if host is not None and _hostname(f"//{host}") not in state.allowed_hosts:
        raise forbidden("without authentication this server only answers requests addressed to localhost")
    origin = request.headers.get("origin")
    if origin is not None and _hostname(origin) not in state.allowed_hosts:
        raise forbidden("cross-origin requests are refused without authentication")


def _hostname(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


async def _not_ready(state: ApiState) -> str:
    node = state.node
    if state.draining:
        return "shutting down"
    if node.root is None:
        return "node not started"
    if node.failed.is_set():
        return "root supervisor failed"
    try:
        await asyncio.wait_for(node.store.schema_version(), timeout=2.0)
    except Exception:  # any failure to answer means not ready; the reason is for operators, not callers
        log.warning("readiness: store did not answer", exc_info=True)
        return "store unreachable"
    return ""


# -- responses -------------------------------------------------------------------------------------------


def _json(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    try:
        body = dump(value)
    except (TypeError, ValueError) as e:
        log.error("reply is not JSON: %s", e)
        body = dump({"error": {"code": "reply_not_serializable", "message": "the actor's reply is not JSON"}})
        status = 500
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def _error(e: ApiError, request_id: str) -> Response:
    headers = dict(e.headers)
    if request_id:
        headers["x-request-id"] = request_id
    return _json(e.to_dict(), e.status, headers)


def _actor_error(e: ActorError, request_id: str) -> Response:
    status = e.http_status if 400 <= e.http_status <= 599 else 500
    headers = {"x-request-id": request_id}
    if status == 503:
        headers["retry-after"] = "1"
    try:
        body = e.to_dict()
        dump(body)
    except (TypeError, ValueError):
        body = {"error": {"code": e.code, "message": e.message}}
    return _json(body, status, headers)
