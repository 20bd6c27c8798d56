"""One node per data dir, as a person meets it in a terminal (real processes): a second ``serve`` on a served
data dir refuses naming the first, the CLI's ``--data-dir`` commands talk to the served node, a SIGKILLed node
leaves nothing that blocks the next, and failures are one line and a non-zero exit, never a traceback."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import httpx
import jwt
import pytest

from minihermes.api import create_app
from minihermes.cli._backend import Remote
from minihermes.cli.chat import ChatLoop

from .._server import ROOT, free_port, serve_process
from ._served import squash
from .conftest import core_config, lines


def run(*args: str, stdin: str = "", env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``minihermes ARGS`` in a child process, as typed in a terminal (no MINIHERMES_* of the test run)."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("MINIHERMES_")}
    child_env["MINIHERMES_EVENT_LOOP"] = os.environ.get("MINIHERMES_EVENT_LOOP", "auto")
    return subprocess.run(
        [sys.executable, "-m", "minihermes.cli.main", *args],
        cwd=ROOT,
        env=child_env | (env or {}),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """The failure's stderr, which must be a single line and no traceback; the exit code non-zero."""
    assert result.returncode != 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    (line,) = result.stderr.strip().splitlines()
    return line


def post(url: str, actor: str, op: str, payload: dict[str, object], key: str = "") -> dict[str, object]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    resp = httpx.post(f"{url}/api/v1/actors/{actor}/{op}", json=payload, headers=headers, timeout=60)
    assert resp.status_code == 200, resp.text
    body: dict[str, object] = resp.json()
    return body


def test_a_served_data_dir_has_one_node_and_the_cli_talks_to_it(tmp_path):
    data = tmp_path / "data"
    with serve_process(data, []) as url:
        holder = json.loads((data / "node.json").read_text())
        assert holder["url"] == url and holder["auth"] is False

        second = run("serve", "--data-dir", str(data), "--port", str(free_port()))
        line = one_line_error(second)
        assert f"pid {holder['pid']}" in line and url in line and str(data.resolve()) in line

        chat = run("chat", "--data-dir", str(data), "--session", "next-door", stdin="calculate 2 + 3\n")
        assert chat.returncode == 0, chat.stderr
        assert squash(f"({url}, the node serving {data})") in squash(chat.stdout) and "5" in chat.stdout
        sessions = post(url, "session_manager", "list_sessions", {})["sessions"]
        assert "next-door" in [s["session_id"] for s in sessions]  # type: ignore[union-attr, index]

        post(url, "memory", "store_memory", {"key": "colour", "value": "teal"})
        listed = run("memory", "list", "--data-dir", str(data), "--json")
        assert listed.returncode == 0, listed.stderr
        assert [m["key"] for m in json.loads(listed.stdout)["memories"]] == ["colour"]

        # API keys are changed through the running node, not written into its store beside it.
        keys = run("keys", "create", "--tenant", "acme", "--principal", "ann", "--data-dir", str(data))
        line = one_line_error(keys)
        assert url in line and "/api/v1/api-keys" in line
    assert not (data / "node.json").exists()  # a clean stop removes the record


def test_after_a_sigkill_the_next_serve_starts(tmp_path):
    data, port = tmp_path / "data", free_port()
    log = (tmp_path / "first.log").open("wb")
    first = subprocess.Popen(
        [sys.executable, "-m", "minihermes.cli.main", "serve", "--data-dir", str(data), "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    try:
        deadline = time.monotonic() + 60
        while not (data / "node.json").exists() or "url" not in (data / "node.json").read_text():
            assert first.poll() is None and time.monotonic() < deadline, (tmp_path / "first.log").read_text()
            time.sleep(0.05)
        busy = run("serve", "--data-dir", str(data), "--port", str(free_port()))
        assert f"pid {first.pid}" in one_line_error(busy)
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        log.close()
    assert json.loads((data / "node.json").read_text())["pid"] == first.pid  # left behind, and stale
    with serve_process(data, []) as url:
        assert json.loads((data / "node.json").read_text())["url"] == url


def test_serve_on_a_busy_port_exits_non_zero_naming_it(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("serve", "--data-dir", str(tmp_path / "data"), "--port", str(port))
    line = one_line_error(result)
    assert f"cannot listen on 127.0.0.1:{port}" in line and "--port" in line
    assert not (tmp_path / "data" / "node.json").exists()  # the data dir is free again


def test_chat_to_a_closed_port_is_one_line(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    line = one_line_error(run("chat", "--url", url, stdin="hello\n"))
    assert "connection_failed" in line and url in line and "Connection refused" in line
    line = one_line_error(run("memory", "list", "--url", url))
    assert "connection_failed" in line and url in line


def test_version_is_the_package_version():
    result = run("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"minihermes {version('minihermes')}"


def test_with_api_keys_the_cli_needs_a_credential_and_offers_what_the_key_may_do(tmp_path):
    data = tmp_path / "data"
    keys = {}
    for role in ("user", "admin"):
        made = run(
            "keys",
            "create",
            "--tenant",
            "acme",
            "--principal",
            role,
            "--roles",
            role,
            "--data-dir",
            str(data),
        )
        assert made.returncode == 0, made.stderr
        keys[f"KEY_{role.upper()}"] = made.stdout.strip()
    with serve_process(data, ["--api-keys"]):
        line = one_line_error(run("chat", "--data-dir", str(data), stdin="/help\n"))
        assert "auth_required" in line and "--token-env" in line

        def help_for(var: str) -> str:
            chat = run("chat", "--data-dir", str(data), "--token-env", var, stdin="/help\n", env=keys)
            assert chat.returncode == 0, chat.stderr
            return chat.stdout.split("Commands:", 1)[1]

        user, admin = help_for("KEY_USER"), help_for("KEY_ADMIN")
        assert "/memory" in user and "/history" in user
        assert "/approve" not in user and "/deny" not in user and "/model" not in user
        assert "/approve" in admin and "/deny" in admin and "/model" in admin


async def test_the_chat_offers_and_completes_only_the_callers_commands(tmp_path, captured):
    """In process, the same rule for the completions: a viewer gets no /approve, /model or /memory store."""
    from minihermes.api import AuthConfig
    from minihermes.app import build_agent_node

    secret = "s" * 32
    cfg = core_config()
    cfg.model.node.data_dir = str(tmp_path / "srv")
    node = build_agent_node(cfg)
    await node.start()
    try:
        app = create_app(node, AuthConfig(jwt_secret=secret))

        async def loop_for(role: str) -> ChatLoop:
            claims = {"tenant": "acme", "sub": role, "roles": [role], "exp": int(time.time()) + 600}
            client = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://127.0.0.1",
                headers={"Authorization": f"Bearer {jwt.encode(claims, secret, algorithm='HS256')}"},
            )
            loop = ChatLoop(captured.console, Remote(client, "http://127.0.0.1"), "cli")
            assert await loop.run(lines("/help")) == 0
            return loop

        viewer, user, admin = await loop_for("viewer"), await loop_for("user"), await loop_for("admin")
        assert "/approve" not in user.command_names() and "/model" not in user.command_names()
        assert {"/memory", "/history", "/new", "/quit"} <= set(user.command_names())
        assert {"/approve", "/deny", "/model", "/memory"} <= set(admin.command_names())
        assert "/approve" not in viewer.command_names() and "/goal" not in admin.command_names()  # not run
        assert "/memory" in viewer.command_names()  # it may list them
    finally:
        await node.stop()


@pytest.mark.parametrize("holder", [{}, {"pid": 1, "http": False}])
async def test_a_node_without_an_http_api_is_named_not_bypassed(tmp_path, holder, monkeypatch):
    """The data dir held by a node that serves no HTTP (an embedded program, ``serve --port 0``): the CLI says
    so instead of opening a second node on its store."""
    from minihermes.cli import _backend
    from minihermes.cli._backend import CommandError, open_backend

    monkeypatch.setattr(_backend, "SERVED_WAIT", 0.1)
    monkeypatch.setattr(_backend, "running_node", lambda data_dir: holder)
    with pytest.raises(CommandError) as e:
        async with open_backend(url=None, data_dir=tmp_path / "data"):
            pass
    assert e.value.code == "data_dir_busy" and "serves no HTTP API" in e.value.message
    assert not (tmp_path / "data").exists()


def test_embedded_commands_free_the_data_dir_when_they_end(tmp_path):
    d = str(tmp_path / "data")
    assert run("memory", "store", "k", "v", "--data-dir", d).returncode == 0
    assert not Path(d, "node.json").exists() and run("memory", "list", "--data-dir", d).returncode == 0
