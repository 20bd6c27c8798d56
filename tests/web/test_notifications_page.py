"""Notifications in the dashboard (issue 24), in headless Chromium against `minihermes serve`: a reminder that
fires shows up live as the unread count beside "Notifications"; after the server is restarted on the same data
dir (a new process, same SQLite store) it is still there, once, on the Notifications page, which marks it read;
a run job's answer arrives the same way; another user sees none of it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from .._server import serve_process
from .conftest import SECRET, Dashboard, Server, token

expect = pytest.importorskip("playwright.sync_api", reason="Python playwright is not installed").expect

OPTIONS = ["--jwt-secret-env", "WEB_JWT_SECRET"]
ENV = {"WEB_JWT_SECRET": SECRET}


def inbox(server: Server, tok: str) -> list[dict[str, Any]]:
    r = httpx.get(
        f"{server.url}/api/v1/notifications", headers={"Authorization": f"Bearer {tok}"}, timeout=30
    )
    assert r.status_code == 200, r.text
    notes: list[dict[str, Any]] = r.json()["notifications"]
    return notes


def wait_for_inbox(server: Server, tok: str, n: int, timeout: float = 60) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while len(notes := inbox(server, tok)) < n:
        assert time.monotonic() < deadline, f"{n} notifications did not arrive: {notes}"
        time.sleep(0.1)
    return notes


def test_notifications_arrive_live_survive_a_restart_and_stay_with_their_owner(
    browser: Any, tmp_path: Path, shots: Path
) -> None:
    data = tmp_path / "data"
    alice = token("acme", "alice", ["user"])
    bob = token("acme", "bob", ["user"])

    with serve_process(data, OPTIONS, env=ENV, ready_timeout=90) as url:
        server = Server(url)
        job = {"job_id": "plants", "prompt": "Water the plants", "schedule": "0 9 * * 1", "action": "notify"}
        server.call(alice, "cron_scheduler", "create_job", **job)
        board = Dashboard(browser, server, alice)
        try:
            page = board.open("chat")
            unread = page.locator("#unread")
            expect(unread).to_be_hidden()
            server.call(alice, "cron_scheduler", "run_now", job_id="plants")
            expect(unread).to_have_text("1")  # live, over the stream: no reload
            expect(unread).to_be_visible()
        finally:
            board.close()
        assert [n["text"] for n in inbox(server, bob)] == []

    with serve_process(data, OPTIONS, env=ENV, ready_timeout=90) as url:  # the same data dir, a new process
        server = Server(url)
        board = Dashboard(browser, server, alice)
        try:
            page = board.open("chat")
            expect(page.locator("#unread")).to_have_text("1")
            page = board.open("notifications")
            row = page.locator("tr[data-notification]", has_text="Water the plants")
            expect(row).to_have_count(1)
            expect(row.locator(".badge")).to_have_text("new")
            expect(page.locator("#unread")).to_be_hidden()  # viewing marked it read
            assert all(n["read"] for n in inbox(server, alice))
            page.screenshot(path=str(shots / "notifications.png"))

            # a run job's answer (the offline model's), while the page is open: shown at once
            run = {"job_id": "sum", "prompt": "What is 6 * 7?", "schedule": "0 9 * * 1"}
            server.call(alice, "cron_scheduler", "create_job", **run)
            server.call(alice, "cron_scheduler", "run_now", job_id="sum")
            answer = page.locator("tr[data-notification]", has_text="42")
            expect(answer).to_have_count(1, timeout=60_000)
            expect(page.locator("tr[data-notification]")).to_have_count(2)
            expect(page.locator("#unread")).to_be_hidden()
        finally:
            board.close()
        assert [n["source"] for n in wait_for_inbox(server, alice, 2)] == ["cron:sum", "cron:plants"]

        other = Dashboard(browser, server, bob)
        try:
            page = other.open("notifications")
            expect(page.locator("tr[data-notification]")).to_have_count(0)
            expect(page.locator(".view")).to_contain_text("No notifications yet")
            expect(page.locator("#unread")).to_be_hidden()
        finally:
            other.close()
        assert inbox(server, bob) == []
