"""`minihermes chat` in a terminal: embedded, and against a running server."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from minihermes.runtime._loop import loop_name

ROOT = Path(__file__).resolve().parents[2]


async def _chat(*args: str, stdin: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "minihermes.cli.main",
        "chat",
        *args,
        cwd=ROOT,
        env={**os.environ, "MINIHERMES_EVENT_LOOP": loop_name()},  # the loop this test runs on
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), 300)  # a loaded CI machine
    assert proc.returncode == 0, err.decode()
    return out.decode()


@pytest.mark.slow
async def test_embedded_chat_with_slash_commands(tmp_path):
    out = await _chat(
        "--data-dir",
        str(tmp_path / "d"),
        "--session",
        "t1",
        stdin="calculate 42 * 17\n/tools\n/history\n/model nope\n/memory store colour teal\n/memory\n/bogus\n/quit\n",
    )
    assert "714" in out
    # The tool call is shown live, before the answer that uses its result.
    assert out.index("⚙ calculator") < out.index("✓ calculator") < out.rindex("714")
    assert "colour = teal" in out
    assert "calculator" in out  # /tools
    assert "calculate 42 * 17" in out  # /history
    assert "error" in out and "not_found" in out  # /model with an unknown provider: reported, chat goes on
    assert "unknown command /bogus" in out


@pytest.mark.slow
async def test_chat_against_a_running_server(server_factory):
    srv = await server_factory()
    out = await _chat(
        "--url", srv.url, "--session", "remote", stdin="remember that my favourite colour is teal\n"
    )
    assert "teal" in out.lower()
    out = await _chat("--url", srv.url, "--session", "remote2", stdin="what is my favourite colour\n")
    assert "teal" in out.lower()


@pytest.mark.slow
async def test_scripting_commands_against_a_running_server(server_factory):
    srv = await server_factory()

    async def cli(*args: str) -> str:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "minihermes.cli.main",
            *args,
            "--url",
            srv.url,
            "--json",
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 300)
        assert proc.returncode == 0, err.decode()
        return out.decode()

    import json

    await cli("memory", "store", "city", "Lisbon")
    listed = json.loads(await cli("memory", "list"))
    assert [(m["key"], m["value"]) for m in listed["memories"]] == [("city", "Lisbon")]
    # The server's node has them: a chat there recalls the stored fact.
    out = await _chat("--url", srv.url, "--session", "s", stdin="/memory search Lisbon\n")
    assert "city = Lisbon" in out
