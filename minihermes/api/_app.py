"""The HTTP API over a running node: ``POST /api/v1/actors/{actor}/{op}`` and friends (docs/http-api.md)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from minihermes.permissions import DEFAULT_PERMISSIONS, PermissionTable, sees_own_only
from minihermes.runtime import Node, RequestContext

from ._access import (
    authorize,
    check_key,
    enforce_ownership,
    find_actor,
    find_op,
    read_body,
    timeout_of,
)
from ._auth import AuthConfig, Authenticator
from ._catalog import actor_listing, openapi_paths
from ._core import (
    API_PREFIX,
    LOOPBACK_HOSTS,
    ApiState,
    error_response,
    guarded,
    json_response,
)
from ._dashboard import add_dashboard_routes
from ._errors import ApiError, invalid
from ._idempotency import DEFAULT_WINDOW, EXTRAS_KEY, Idempotency
from ._key_routes import add_api_key_routes, api_key_openapi
from ._metrics import add_metrics_routes, store_health
from ._notifications import add_notification_routes, notifications_openapi
from ._openai import add_openai_routes
from ._schemas import fixed_responses
from ._sessions import add_session_routes
from ._shedding import SheddingConfig, install_shedding
from ._skill_upload import add_skill_upload_routes, skill_upload_openapi

log = logging.getLogger("minihermes.api")


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
    public_metrics: bool = False,
    metrics_interval: float = 10.0,
    dashboard: bool = True,
    shedding: SheddingConfig | None = None,
    idempotency_window: float = DEFAULT_WINDOW,
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
    - ``public_metrics``: serve ``/metrics`` (every tenant's series) without credentials even with auth.
    - ``metrics_interval``: seconds between the samples behind the dashboard's charts.
    - ``dashboard``: serve the web dashboard at ``/``.
    - ``shedding``: the load-shedding gate in front of ``/api/`` (default: on, limits from the machine;
      ``SheddingConfig(enabled=False)`` turns it off). See ``_shedding``.
    - ``idempotency_window``: seconds an ``Idempotency-Key`` is remembered (``_idempotency``).
    """
    if metrics_interval <= 0:
        raise ValueError("metrics_interval must be > 0")
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
        public_metrics=public_metrics,
        extras={"metrics_interval": metrics_interval},
    )
    app = FastAPI(
        title=title,
        description="The MiniHermes actor API: every actor op is POST /api/v1/actors/{actor}/{op}.",
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.state.minihermes = state
    state.extras[EXTRAS_KEY] = Idempotency(node, idempotency_window)
    install_shedding(app, state, shedding)
    _add_error_handlers(app)
    _add_health_routes(app, state)
    _add_discovery_routes(app, state)
    add_session_routes(app, state)
    add_skill_upload_routes(app, state)
    add_api_key_routes(app, state)
    add_metrics_routes(app, state)
    add_notification_routes(app, state)
    add_openai_routes(app, state)
    if dashboard:
        add_dashboard_routes(app)
    _add_op_routes(app, state)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _openapi(app, state)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def _add_error_handlers(app: FastAPI) -> None:
    """FastAPI's own errors (no route, a malformed request) in the API's error shape."""

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        message = "no such endpoint" if exc.status_code == 404 else str(exc.detail)
        return error_response(ApiError(exc.status_code, code, message, headers=dict(exc.headers or {})), "")

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        return error_response(invalid("invalid request"), "")


def _add_health_routes(app: FastAPI, state: ApiState) -> None:
    """``/healthz`` (the process is up; its store degraded or not) and ``/readyz`` (started, store answers)."""

    @app.get("/healthz", tags=["health"], summary="The process is up, and whether its store is degraded")
    async def healthz() -> Response:
        # 200 either way: the process is up, and restarting it would not mend its store (doctor, then restore).
        store = store_health(state.node)
        if store is None or store["status"] == "ok":
            return json_response({"status": "ok"})
        return json_response(
            {"status": "degraded", "reason": f"store degraded: {store['reason']}", "store": store}
        )

    @app.get("/readyz", tags=["health"], summary="The node is started and its store answers")
    async def readyz() -> Response:
        reason = await _not_ready(state)
        if reason:
            return json_response({"status": "not_ready", "reason": reason}, 503)
        return json_response({"status": "ready"})


def _add_discovery_routes(app: FastAPI, state: ApiState) -> None:
    """Who the caller is, and the actor catalog as the caller may use it."""

    @app.get(f"{API_PREFIX}/whoami", tags=["discovery"], summary="The caller's tenant, principal and roles")
    async def whoami(request: Request) -> Response:
        return await guarded(state, request, _whoami)

    @app.get(f"{API_PREFIX}/actors", tags=["discovery"], summary="Every actor, its ops and their arguments")
    async def list_actors(request: Request) -> Response:
        return await guarded(state, request, _list_actors)

    @app.get(f"{API_PREFIX}/actors/{{actor}}", tags=["discovery"], summary="One actor's ops")
    async def describe_actor(request: Request, actor: str) -> Response:
        return await guarded(state, request, _describe_actor, actor)


def _add_op_routes(app: FastAPI, state: ApiState) -> None:
    """``POST /api/v1/actors/{actor}/{op}`` (and the op in the body), after every other route."""

    @app.post(f"{API_PREFIX}/actors/{{actor}}/{{op}}", include_in_schema=False)
    async def call_op(request: Request, actor: str, op: str) -> Response:
        return await guarded(state, request, _call, actor, op)

    @app.post(f"{API_PREFIX}/actors/{{actor}}", include_in_schema=False)
    async def call_op_in_body(request: Request, actor: str) -> Response:
        return await guarded(state, request, _call, actor, None)


def _openapi(app: FastAPI, state: ApiState) -> dict[str, Any]:
    schema = get_openapi(title=app.title, version="1", description=app.description, routes=app.routes)
    paths, components = openapi_paths(state.catalog)
    schema["paths"].update(paths)
    components.update(schema.get("components", {}).get("schemas", {}))
    for name in ("HTTPValidationError", "ValidationError"):  # FastAPI's; this API answers Error instead
        components.pop(name, None)
    schema["components"] = {"schemas": components}
    public = {"/healthz", "/readyz", "/", "/static/{path}"} | (
        {"/metrics"} if state.public_metrics else set()
    )
    documented = {
        **fixed_responses(),
        **api_key_openapi(),
        **skill_upload_openapi(),
        **notifications_openapi(),
    }
    for (path, method), responses in documented.items():
        operation = schema["paths"].get(path, {}).get(method)
        if operation is None:
            continue  # e.g. the dashboard is off
        operation["responses"] = responses
        if path in public:
            operation["security"] = []
    if state.auth.enabled:
        schema["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        schema["security"] = [{"bearer": []}]
    return schema


# -- request handling ------------------------------------------------------------------------------------


async def _call(
    state: ApiState, request: Request, ctx: RequestContext, actor: str, op: str | None
) -> Response:
    info = find_actor(state, actor)
    if op is None:
        payload = await read_body(state, request)
        named = payload.pop("op", None)
        if not isinstance(named, str) or not named:
            raise invalid("POST /api/v1/actors/{actor} needs the op in the body ('op')", field="op")
        op = named
        opinfo = find_op(state, info, op)
        authorize(state, ctx, opinfo)
    else:
        opinfo = find_op(state, info, op)
        authorize(state, ctx, opinfo)  # before reading the body: refused callers do not get to upload
        payload = await read_body(state, request)
        named = payload.pop("op", op)
        if named != op:
            raise invalid(f"the body names op {named!r} but the URL names {op!r}", field="op")
    check_key(info, payload)
    timeout = timeout_of(state, request)
    if sees_own_only(ctx):
        await enforce_ownership(state, ctx, info, opinfo, payload, timeout)
    reply = await state.node.ask(actor, op, payload, timeout, ctx=ctx)
    if opinfo.kind == "cast":
        return json_response({"status": "accepted"}, 202)
    return json_response({"status": "ok"} if reply is None else reply)


async def _whoami(state: ApiState, request: Request, ctx: RequestContext) -> Response:
    return json_response(
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
    return json_response({"actors": actors, "count": len(actors)})


async def _describe_actor(state: ApiState, request: Request, ctx: RequestContext, actor: str) -> Response:
    return json_response(actor_listing(find_actor(state, actor), ctx.roles))


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
