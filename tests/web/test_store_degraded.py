"""A damaged store in the dashboard (issue 30), in headless Chromium: after a page of the SQLite file is
garbled behind the node's back, every page carries a banner with the reason ``/healthz`` gives (the page and
table named), instead of lists that look empty; a healthy store shows no banner."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .._server import serve_process
from ..cli.test_backup import damage_a_page
from .conftest import SECRET, Dashboard, Server, token

expect = pytest.importorskip("playwright.sync_api", reason="Python playwright is not installed").expect

OPTIONS = ["--jwt-secret-env", "WEB_JWT_SECRET"]
ENV = {"WEB_JWT_SECRET": SECRET}


def test_a_damaged_store_shows_a_banner_with_the_reason(browser: Any, tmp_path: Path, shots: Path) -> None:
    data = tmp_path / "data"
    admin = token("acme", "ada", ["admin"])
    with serve_process(data, OPTIONS, env=ENV, ready_timeout=90) as url:
        server = Server(url)
        for i in range(60):
            server.call(admin, "memory", "store_memory", key=f"k{i}", value="x" * 200)
        board = Dashboard(browser, server, admin)
        try:
            board.open("memory")
            expect(board.page.locator("#store-degraded")).to_be_hidden()
        finally:
            board.close()
    page = damage_a_page(data / "minihermes.db", "kv")

    with serve_process(data, OPTIONS, env=ENV, ready_timeout=90) as url:
        board = Dashboard(browser, Server(url), admin)
        try:
            shown = board.open("memory")
            banner = shown.locator("#store-degraded")
            # The node's open-time check runs beside serving; the banner is read again at each page.
            for name in ("memory", "sessions", "health", "memory"):
                board.open(name)
                if banner.is_visible():
                    break
            expect(banner).to_be_visible()
            expect(banner).to_contain_text("Storage degraded")
            expect(banner).to_contain_text(f"page {page} of table kv")
            shown.screenshot(path=str(shots / "store-degraded.png"))
        finally:
            board.close()
