"""Fixtures for the dashboard tests: `minihermes serve` (JWT auth) in a child process, headless Chromium
(Debian's `chromium`, driven by Python Playwright through `executable_path`), and helpers to sign in and act
over the HTTP API.

Tests skip, saying why, when Playwright or Chromium is missing (scripts/setup.d/20-chromium.sh installs it).
Screenshots go to a temporary directory, or to docs/screenshots/ with MINIHERMES_UPDATE_SCREENSHOTS=1.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from .._server import ROOT, serve_process

SECRET = "dashboard-test-secret-long-enough-for-hs256"
CHROMIUM = os.environ.get("MINIHERMES_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 20_000


def token(tenant: str, sub: str, roles: list[str]) -> str:
    claims = {"tenant": tenant, "sub": sub, "roles": roles, "exp": int(time.time()) + 3600}
    return jwt.encode(claims, SECRET, algorithm="HS256")


class Server:
    """The live server and an HTTP client for setting things up as any caller."""

    def __init__(self, url: str) -> None:
        self.url = url

    def call(self, tok: str, actor: str, op: str, **args: Any) -> Any:
        r = httpx.post(
            f"{self.url}/api/v1/actors/{actor}/{op}",
            json=args,
            headers={"Authorization": f"Bearer {tok}"},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        return r.json()

    def has(self, tok: str, actor: str) -> bool:
        r = httpx.get(f"{self.url}/api/v1/actors", headers={"Authorization": f"Bearer {tok}"}, timeout=30)
        return any(a["name"] == actor for a in r.json()["actors"])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The agent app with JWT auth."""
    yield from _serve(tmp_path_factory, "web", ["--jwt-secret-env", "WEB_JWT_SECRET"])


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The demo app (none of the agent's actors), without auth: the local owner on loopback."""
    yield from _serve(tmp_path_factory, "demo", ["--app", "demo"])


def _serve(factory: pytest.TempPathFactory, name: str, options: list[str]) -> Iterator[Server]:
    data = factory.mktemp(name) / "data"
    # The operator lets tenants' providers reach loopback: the tests' fake models listen there.
    env = {"WEB_JWT_SECRET": SECRET, "MINIHERMES_ALLOWED_EGRESS": "127.0.0.1"}
    with serve_process(data, options, env=env, ready_timeout=90) as url:
        yield Server(url)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Module-scoped: Playwright's sync API keeps an event loop running in this thread while it is started,
    so it must be stopped before the async tests of other modules run."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="Python playwright is not installed")
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"{CHROMIUM} not found: run scripts/setup.d/20-chromium.sh")
    pw = sync_api.sync_playwright().start()
    chromium = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
    try:
        yield chromium
    finally:
        chromium.close()
        pw.stop()


class Dashboard:
    """One signed-in browser context; ``errors`` collects uncaught page errors (a test fails on any)."""

    def __init__(self, browser: Any, server: Server, tok: str) -> None:
        self.server = server
        self.context = browser.new_context(viewport={"width": 1360, "height": 860})
        self.context.set_default_timeout(TIMEOUT_MS)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(server.url + "/")
        self.page.fill("textarea[name=credential]", tok)
        self.page.click("form.login-form button[type=submit]")
        self.page.wait_for_selector("nav.side")

    def open(self, name: str) -> Any:
        self.page.goto(f"{self.server.url}/#/{name}")
        page_name = name.split("?")[0]
        self.page.wait_for_selector(f"#page[data-page='{page_name}'] .view")
        return self.page

    def close(self) -> None:
        self.context.close()
        assert not self.errors, self.errors


@pytest.fixture
def dashboard(browser: Any, server: Server) -> Iterator[Any]:
    opened: list[Dashboard] = []

    def open_as(tenant: str, sub: str, roles: list[str]) -> Dashboard:
        board = Dashboard(browser, server, token(tenant, sub, roles))
        opened.append(board)
        return board

    yield open_as
    for board in opened:
        board.close()


@pytest.fixture(scope="session")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.environ.get("MINIHERMES_UPDATE_SCREENSHOTS") == "1":
        target = ROOT / "docs" / "screenshots"
        target.mkdir(parents=True, exist_ok=True)
        return target
    return tmp_path_factory.mktemp("screenshots")
