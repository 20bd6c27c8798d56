"""Access to actor ops over HTTP: finding the actor and op, the permission table, users' ownership of
sessions, request bodies and timeouts. Shared by the generic actor routes and the session routes."""

from __future__ import annotations

import difflib
import logging
import math
from typing import Any

from fastapi import Request

from minihermes.runtime import (
    MAX_KEY_CHARS,
    ActorError,
    ActorNotFound,
    NotFound,
    RequestContext,
    UnknownOp,
    valid_key,
)

from ._body import check_content_type, parse_object, read_limited
from ._catalog import MIN_TIMEOUT, ActorInfo, OpInfo
from ._core import ApiState
from ._errors import ApiError, forbidden, invalid

log = logging.getLogger("minihermes.api")
_SESSION_ACTOR = "session_manager"
_AUDIT_ACTOR = "audit_event"


def find_actor(state: ApiState, name: str) -> ActorInfo:
    info = state.catalog.get(name)
    if info is None:
        state.node.spec(name)  # raises ActorNotFound with a "did you mean"
        raise ActorNotFound(f"no actor named '{name}'", actor=name)
    return info


def find_op(state: ApiState, info: ActorInfo, op: str) -> OpInfo:
    found = info.ops.get(op)
    if found is None:
        hint = difflib.get_close_matches(op, list(info.ops), n=1)
        extra = f"; did you mean '{hint[0]}'?" if hint else ""
        raise UnknownOp(f"{info.name} has no op '{op}'{extra}", actor=info.name, op=op)
    return found


def authorize(state: ApiState, ctx: RequestContext, opinfo: OpInfo) -> None:
    if opinfo.roles.isdisjoint(ctx.roles):
        have = ", ".join(sorted(ctx.roles)) or "no role"
        audit_refusal(
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


def audit_refusal(
    state: ApiState, ctx: RequestContext, event_type: str, detail: str, data: dict[str, Any]
) -> None:
    """Record a refusal in the caller's tenant trail, without waiting and without ever failing the request."""
    if _AUDIT_ACTOR not in state.catalog:
        return
    try:
        state.node.send(
            _AUDIT_ACTOR, "log_event", {"event_type": event_type, "detail": detail, "data": data}, ctx=ctx
        )
    except ActorError as e:
        log.warning("audit of %s not recorded: %s", event_type, e.message)


async def enforce_ownership(
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


async def read_body(state: ApiState, request: Request) -> dict[str, Any]:
    check_content_type(request.headers.get("content-type", ""))
    raw = await read_limited(request.stream(), request.headers.get("content-length"), state.max_body_bytes)
    return parse_object(raw)


def timeout_of(state: ApiState, request: Request, default: float | None = None) -> float:
    """``?timeout=`` in [MIN_TIMEOUT, max_timeout], else ``default`` (the app's default timeout)."""
    raw = request.query_params.get("timeout")
    if raw is None:
        return state.default_timeout if default is None else default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and MIN_TIMEOUT <= value <= state.max_timeout):
        raise invalid(
            f"timeout must be a number of seconds in [{MIN_TIMEOUT:g}, {state.max_timeout:g}]",
            field="timeout",
        )
    return value


def check_key(info: ActorInfo, payload: dict[str, Any]) -> None:
    """The key of a per-session (virtual) actor names its storage: printable and bounded, else 422 here,
    before the runtime tries to activate an instance under it."""
    field = info.key_field
    value = payload.get(field) if field else None
    if isinstance(value, str) and value:
        check_key_value(field or "key", value)


def check_key_value(field: str, value: str) -> None:
    if not valid_key(value):  # the runtime's own rule, checked before a stream or a turn starts
        raise invalid(f"{field} must be 1-{MAX_KEY_CHARS} printable characters", field=field)
