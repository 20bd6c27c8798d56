"""Skill folders in and out over HTTP, as archives: the only way, since no request names a path on the
server (``skill_store.import_skills`` / ``export_skills`` refuse ``path``).

``POST /api/v1/skills/import`` (the dashboard's upload): the body is the archive's bytes (a ``.zip`` /
``.skill`` archive or a tarball, any content type); the query may say ``approve=true`` (admins only) and
``scope=user|tenant``. It is ``skill_store.import_skills`` with the archive, authorized and answered the
same way: a user's upload is their own candidate skills, an admin's is the tenant's (approved at once with
``approve``). The body may be up to ``MAX_UPLOAD_BYTES`` (the op's JSON route keeps the small general
limit); everything in it is checked by the store (``skills/_archive.py``).

``GET /api/v1/skills/export`` (``?status=``): ``skill_store.export_skills`` with every file, authorized the
same way (admins), as one zip of ``<folder>/SKILL.md`` plus each file (executable bits kept), which imports
back unchanged.
"""

from __future__ import annotations

import base64
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from minihermes.runtime import RequestContext
from minihermes.skills import bundles

from ._access import authorize, find_actor, find_op, timeout_of
from ._body import read_limited
from ._core import API_PREFIX, ApiState, guarded, json_response
from ._errors import invalid
from ._schemas import error_responses, json_content

UPLOAD_PATH = f"{API_PREFIX}/skills/import"
EXPORT_PATH = f"{API_PREFIX}/skills/export"
_STATUSES = ("", "candidate", "active", "stale", "archived", "pinned")
MAX_UPLOAD_BYTES = 64 * 1024 * 1024
"""An uploaded archive at most (``ApiState.extras["max_skill_upload_bytes"]`` overrides it)."""
_TRUE = frozenset({"1", "true", "yes", "on"})


def add_skill_upload_routes(app: FastAPI, state: ApiState) -> None:
    @app.post(
        UPLOAD_PATH,
        tags=["skills"],
        summary="Import skill folders from an uploaded .zip / .skill archive or tarball",
        operation_id="import_skill_archive",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
            }
        },
    )
    async def import_archive(request: Request) -> Response:
        return await guarded(state, request, _import_archive)

    @app.get(
        EXPORT_PATH,
        tags=["skills"],
        summary="Download skill folders as a .zip (SKILL.md and every file)",
        operation_id="export_skill_archive",
    )
    async def export_archive(request: Request) -> Response:
        return await guarded(state, request, _export_archive)


async def _import_archive(state: ApiState, request: Request, ctx: RequestContext) -> Response:
    opinfo = find_op(state, find_actor(state, "skill_store"), "import_skills")
    authorize(state, ctx, opinfo)  # before reading the body: refused callers do not get to upload
    query = request.query_params
    scope = query.get("scope", "tenant")
    if scope not in ("user", "tenant"):
        raise invalid("scope must be user or tenant", field="scope")
    limit = int(state.extras.get("max_skill_upload_bytes", MAX_UPLOAD_BYTES))
    raw = await read_limited(request.stream(), request.headers.get("content-length"), limit)
    if not raw:
        raise invalid("the body must be the archive's bytes (.zip, .skill or a tarball)", field="body")
    payload = {
        "archive": base64.b64encode(raw).decode("ascii"),
        "approve": query.get("approve", "").lower() in _TRUE,
        "scope": scope,
    }
    reply = await state.node.ask(
        "skill_store", "import_skills", payload, timeout_of(state, request, 120.0), ctx=ctx
    )
    return json_response(reply)


async def _export_archive(state: ApiState, request: Request, ctx: RequestContext) -> Response:
    opinfo = find_op(state, find_actor(state, "skill_store"), "export_skills")
    authorize(state, ctx, opinfo)
    status = request.query_params.get("status", "")
    if status not in _STATUSES:
        raise invalid(f"status must be one of {', '.join(s or '(empty)' for s in _STATUSES)}", field="status")
    payload = {"status": status, "with_files": True}
    reply = await state.node.ask(
        "skill_store", "export_skills", payload, timeout_of(state, request, 120.0), ctx=ctx
    )
    docs = list(reply.get("documents") or [])
    for doc in docs:
        doc["file_bytes"] = {str(f["path"]): base64.b64decode(f["data"]) for f in doc.get("files") or []}
    return Response(
        bundles.docs_zip(docs),
        media_type="application/zip",
        headers={"content-disposition": 'attachment; filename="skills.zip"', "x-skill-count": str(len(docs))},
    )


def skill_upload_openapi() -> dict[tuple[str, str], dict[str, Any]]:
    """(path, method) -> the ``responses`` of the upload endpoint."""
    entry = {"type": "object", "additionalProperties": True}
    reply = {
        "type": "object",
        "properties": {
            "status": {"const": "ok"},
            "imported": {"type": "array", "items": entry},
            "count": {"type": "integer"},
            "refused": {"type": "array", "items": entry},
            "warnings": {"type": "array", "items": entry},
        },
        "required": ["status", "imported", "count", "refused", "warnings"],
    }
    return {
        (UPLOAD_PATH, "post"): {
            "200": {
                "description": "What was imported, refused (with reasons) and warned about",
                "content": json_content(reply),
            },
            **error_responses(400, 404, 413, 422, 401, 403, 405, 500, 503, 504),
        },
        (EXPORT_PATH, "get"): {
            "200": {
                "description": "A zip of <folder>/SKILL.md and every file of each skill (imports back unchanged)",
                "content": {"application/zip": {"schema": {"type": "string", "format": "binary"}}},
            },
            **error_responses(400, 404, 422, 401, 403, 405, 500, 503, 504),
        },
    }
