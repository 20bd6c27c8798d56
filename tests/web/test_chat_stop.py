"""Issue 27 in headless Chromium: the chat's Stop button, shown while a turn runs, stops a turn whose terminal
call sleeps in the sandbox (the process is killed), the turn ends "cancelled" on the page and in the session,
and the button goes away; the next message gets an answer. The server is ``tests.agent.test_cancel_served``
(the agent app with API keys, its model running ``sleep <marker>`` in the terminal)."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .._server import ROOT
from ..agent.test_cancel_turn import sleeping
from .conftest import Dashboard, Server

expect = pytest.importorskip("playwright.sync_api", reason="Python playwright is not installed").expect


def wait_for(check: Any, timeout: float, what: str) -> None:
    """Poll ``check`` (the process table has no event to wait on) until true."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} within {timeout}s"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def sleepy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict[str, str], str]]:
    """The served app, the API keys of ada (admin) and bob (user), and the marker of its sleep command."""
    marker = f"30.{uuid.uuid4().int % 10**9:09d}"
    data = tmp_path_factory.mktemp("stop") / "data"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.agent.test_cancel_served", str(data), "first", marker],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        while line and not line.startswith("READY"):
            line = proc.stdout.readline()
        assert line, "the server exited early"
        _, port, ada, bob, _carol = line.split()
        yield Server(f"http://127.0.0.1:{port}"), {"ada": ada, "bob": bob}, marker
    finally:
        proc.kill()
        proc.wait()


def call(server: Server, key: str, actor: str, op: str, **args: Any) -> Any:
    r = httpx.post(
        f"{server.url}/api/v1/actors/{actor}/{op}",
        json=args,
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return r.json()


def test_the_stop_button_stops_a_running_turn(browser: Any, sleepy: Any, shots: Path) -> None:
    server, keys, marker = sleepy
    bob = keys["bob"]
    session = call(server, bob, "session_manager", "create_session", channel="web")["session_id"]
    board = Dashboard(browser, server, bob)
    try:
        page = board.open(f"chat?session={session}")
        stop = page.locator("button[data-action='stop-turn']")
        expect(stop).to_be_hidden()  # nothing runs yet
        page.fill("textarea[name=message]", "sleep a while")
        page.locator("form.composer button[type=submit]").click()
        expect(stop).to_be_visible()
        expect(page.locator("details.tool.running[data-tool='terminal']")).to_be_visible()
        wait_for(lambda: bool(sleeping(marker)), 60, "the sandboxed sleep started")
        page.screenshot(path=str(shots / "chat-stop-running.png"))

        stop.click()
        wait_for(lambda: not sleeping(marker), 1, "the sandboxed sleep was killed")
        expect(page.locator(".turn-end[data-status='cancelled']")).to_be_visible()
        expect(page.locator("details.tool.failed[data-tool='terminal']")).to_contain_text("cancelled")
        expect(page.locator(".msg.assistant").last).to_contain_text("stopped this turn")
        expect(stop).to_be_hidden()
        last = call(server, bob, "agent", "last_turn", session_id=session)
        assert last["status"] == "cancelled" and last["cancelled_by"] == "bob"

        # The session takes the next message at once.
        page.fill("textarea[name=message]", "hello again")
        page.locator("form.composer button[type=submit]").click()
        expect(page.locator(".turn-end[data-status='ok']")).to_be_visible()
        expect(page.locator(".msg.assistant").last).to_contain_text("hi")
        expect(stop).to_be_hidden()
    finally:
        board.close()
