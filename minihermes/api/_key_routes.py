"""API keys over HTTP, for admins: ``POST /api/v1/api-keys`` (the key, shown once), ``GET /api/v1/api-keys``
(never a secret) and ``DELETE /api/v1/api-keys/{key_id}``.

Every key is created in, listed from and revoked within the caller's own tenant: an admin of one tenant never
sees, names or revokes another's (a key id of another tenant is ``404``, like one that does not exist). Each
change is audited in the tenant's trail (``api_key_created``, ``api_key_revoked``) with the key id, never the
key. The store functions are ``_keys``'s, which the admin CLI uses too.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from minihermes.runtime import RequestContext

from ._access import audit_refusal, read_body
from ._approvers import report_admins
from ._core import API_PREFIX, ApiState, guarded, json_response
from ._errors import ApiError, forbidden, invalid
from ._keys import ApiKeyInfo, create_api_key, get_api_key, list_api_keys, revoke_api_key
from ._schemas import error_responses, json_content

KEYS_PATH = f"{API_PREFIX}/api-keys"
MAX_EXPIRES_IN = 10 * 366 * 86_400.0
"""Ten years, in seconds: longer is "until revoked", which is what leaving ``expires_in`` out says."""
_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"
_PRINCIPAL_PATTERN = r"^[^\x00-\x1f\x7f]{1,128}$"
_ROLES = ("admin", "user", "viewer")


class NewKeyBody(BaseModel):
    """``POST /api/v1/api-keys``: the body, validated as strictly as its schema (``create_body_schema``)."""

    model_config = ConfigDict(strict=True, extra="forbid")

    name: str = Field(pattern=_NAME_PATTERN)
    roles: list[Literal["admin", "user", "viewer"]] = Field(min_length=1, max_length=3)
    expires_in: float | None = Field(default=None, gt=0, le=MAX_EXPIRES_IN)
    principal: str | None = Field(default=None, pattern=_PRINCIPAL_PATTERN)


def add_api_key_routes(app: FastAPI, state: ApiState) -> None:
    @app.post(
        KEYS_PATH,
        tags=["api-keys"],
        summary="Create an API key (admin); the key is shown once",
        operation_id="create_api_key",
        openapi_extra={"requestBody": {"required": True, "content": create_body_schema()}},
    )
    async def create_key(request: Request) -> Response:
        return await guarded(state, request, _create)

    @app.get(
        KEYS_PATH,
        tags=["api-keys"],
        summary="The tenant's API keys (admin), never their secrets",
        operation_id="list_api_keys",
    )
    async def list_keys(request: Request) -> Response:
        return await guarded(state, request, _list)

    @app.delete(
        f"{KEYS_PATH}/{{key_id}}",
        tags=["api-keys"],
        summary="Revoke one of the tenant's API keys (admin)",
        operation_id="revoke_api_key",
    )
    async def revoke_key(request: Request, key_id: str) -> Response:
        return await guarded(state, request, _revoke, key_id)


def _require_admin(state: ApiState, ctx: RequestContext, what: str) -> None:
    if "admin" not in ctx.roles:
        have = ", ".join(sorted(ctx.roles)) or "no role"
        audit_refusal(
            state,
            ctx,
            "permission_denied",
            f"{what} refused to {have}",
            {"endpoint": what, "roles": sorted(ctx.roles)},
        )
        raise forbidden(f"{have} cannot manage API keys (admin only)", required=["admin"])


def _view(info: ApiKeyInfo) -> dict[str, Any]:
    return info.to_dict()


def _audit(state: ApiState, ctx: RequestContext, event_type: str, detail: str, info: ApiKeyInfo) -> None:
    """In the caller's tenant trail, without waiting and never failing the request (``audit_refusal`` sends
    any event so); the key id, its name, principal and roles: never the key."""
    data = {"key_id": info.key_id, "name": info.name, "principal": info.principal, "roles": list(info.roles)}
    audit_refusal(state, ctx, event_type, detail, data)


async def _create(state: ApiState, request: Request, ctx: RequestContext) -> Response:
    _require_admin(state, ctx, "POST /api/v1/api-keys")
    payload = await read_body(state, request)
    try:
        body = NewKeyBody.model_validate(payload)
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "body"
        raise invalid(f"{field}: {first['msg']}", field=field) from None
    try:
        new = await create_api_key(
            state.node.store,
            tenant=ctx.tenant,
            namespace=ctx.namespace,
            principal=body.principal or body.name,
            roles=list(body.roles),
            name=body.name,
            ttl=body.expires_in,
            now=state.node.clock.time(),
        )
    except ValueError as e:
        raise invalid(str(e)) from None
    info = new.info
    _audit(state, ctx, "api_key_created", f"API key {info.key_id} ({info.name}) created", info)
    await report_admins(state, (info.tenant, info.namespace), changed=True)
    return json_response({"status": "ok", "key": new.key, **_view(info)}, 201)


async def _list(state: ApiState, request: Request, ctx: RequestContext) -> Response:
    _require_admin(state, ctx, "GET /api/v1/api-keys")
    infos = await list_api_keys(state.node.store, tenant=ctx.tenant)
    keys = [_view(i) for i in infos]
    return json_response({"keys": keys, "count": len(keys)})


async def _revoke(state: ApiState, request: Request, ctx: RequestContext, key_id: str) -> Response:
    _require_admin(state, ctx, "DELETE /api/v1/api-keys/{key_id}")
    info = await get_api_key(state.node.store, key_id)
    if info is None or info.tenant != ctx.tenant:
        # Another tenant's key is as unknown here as one that never existed.
        raise ApiError(404, "not_found", "no API key with that id in this tenant", key_id=key_id[:64])
    if info.revoked_at is not None:
        raise ApiError(409, "conflict", "this API key is revoked already", key_id=info.key_id)
    now = state.node.clock.time()
    if not await revoke_api_key(state.node.store, info.key_id, now=now):
        raise ApiError(409, "conflict", "this API key is revoked already", key_id=info.key_id)
    _audit(state, ctx, "api_key_revoked", f"API key {info.key_id} ({info.name}) revoked", info)
    await report_admins(state, (info.tenant, info.namespace), changed=True)
    return json_response({"status": "ok", "key_id": info.key_id, "revoked_at": now})


# -- OpenAPI -----------------------------------------------------------------------------------------------

_INFO_PROPERTIES: dict[str, Any] = {
    "key_id": {"type": "string"},
    "tenant": {"type": "string"},
    "namespace": {"type": "string"},
    "principal": {"type": "string"},
    "roles": {"type": "array", "items": {"type": "string"}},
    "name": {"type": "string"},
    "created_at": {"type": "number"},
    "expires_at": {"type": ["number", "null"]},
    "revoked_at": {"type": ["number", "null"]},
}
_INFO = {"type": "object", "properties": _INFO_PROPERTIES, "required": list(_INFO_PROPERTIES)}
_AUTHED = (401, 403, 405, 500, 503)


def create_body_schema() -> dict[str, Any]:
    return json_content(
        {
            "type": "object",
            "properties": {
                "name": {
                    "type": "string",
                    "pattern": _NAME_PATTERN,
                    "description": "A label; the default principal",
                },
                "roles": {
                    "type": "array",
                    "items": {"type": "string", "enum": list(_ROLES)},
                    "minItems": 1,
                    "maxItems": 3,
                },
                "expires_in": {
                    "type": ["number", "null"],
                    "exclusiveMinimum": 0,
                    "maximum": MAX_EXPIRES_IN,
                    "description": "Seconds of validity (left out: until revoked)",
                },
                "principal": {
                    "type": ["string", "null"],
                    "pattern": _PRINCIPAL_PATTERN,
                    "description": "Who the key acts as (default: its name)",
                },
            },
            "required": ["name", "roles"],
            "additionalProperties": False,
        }
    )


def api_key_openapi() -> dict[tuple[str, str], dict[str, Any]]:
    """(path, method) -> ``responses`` (and the create body) of the API key endpoints."""
    created = {
        "type": "object",
        "properties": {"status": {"const": "ok"}, "key": {"type": "string"}, **_INFO_PROPERTIES},
        "required": ["status", "key", *_INFO_PROPERTIES],
    }
    listing = {
        "type": "object",
        "properties": {"keys": {"type": "array", "items": _INFO}, "count": {"type": "integer"}},
        "required": ["keys", "count"],
    }
    revoked = {
        "type": "object",
        "properties": {
            "status": {"const": "ok"},
            "key_id": {"type": "string"},
            "revoked_at": {"type": "number"},
        },
        "required": ["status", "key_id", "revoked_at"],
    }
    return {
        (KEYS_PATH, "post"): {
            "201": {
                "description": "The new key (its only appearance) and its record",
                "content": json_content(created),
            },
            **error_responses(400, 413, 415, 422, *_AUTHED),
        },
        (KEYS_PATH, "get"): {
            "200": {"description": "The tenant's keys", "content": json_content(listing)},
            **error_responses(*_AUTHED),
        },
        (f"{KEYS_PATH}/{{key_id}}", "delete"): {
            "200": {"description": "Revoked", "content": json_content(revoked)},
            **error_responses(404, 409, *_AUTHED),
        },
    }
