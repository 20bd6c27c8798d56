"""The web dashboard: ``GET /`` (the page) and ``GET /static/{path}`` (its modules, styles and icons).

The assets ship in the package (``minihermes/web``): plain HTML, ES modules and CSS, no build step and no
request to anything but this server, so the dashboard works offline. Every response carries a strict
Content-Security-Policy (scripts and connections to this origin only, no inline script) and refuses
framing; the page renders data with ``textContent`` only.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import Response

from minihermes.web import STATIC_DIR

from ._core import json_response

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    # Assets change with upgrades; revalidating is cheap on loopback and never serves a stale module graph.
    "cache-control": "no-cache",
}


def add_dashboard_routes(app: FastAPI) -> None:
    root = STATIC_DIR.resolve()

    @app.get("/", tags=["dashboard"], summary="The web dashboard", operation_id="dashboard")
    async def index() -> Response:
        return _file(root / "index.html")

    @app.get(
        "/static/{path:path}", tags=["dashboard"], summary="A dashboard asset", operation_id="dashboard_asset"
    )
    async def asset(path: str) -> Response:
        try:
            target = (root / path).resolve()
            found = target.is_relative_to(root) and target.suffix in _TYPES and target.is_file()
        except (ValueError, OSError):  # NUL bytes, names too long: no such asset either
            found = False
        if not found:
            return json_response({"error": {"code": "not_found", "message": "no such asset"}}, 404)
        return _file(target)


def _file(path: Path) -> Response:
    return Response(path.read_bytes(), media_type=_TYPES[path.suffix], headers=SECURITY_HEADERS)
