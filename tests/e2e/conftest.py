"""End-to-end fixtures: the whole agent app over its HTTP API (in-process ASGI, or a real server process)."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from minihermes.api import create_app
from minihermes.app import build_agent_node, default_config
from minihermes.runtime._loop import loop_name

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    config = default_config(tmp_path / "data")
    for spec in config.tree.walk():  # no auth: the owner's node, whose providers may be on loopback
        if spec.name == "llm_gateway":
            spec.args["allowed_egress"] = ["*"]
    node = build_agent_node(config)
    await node.start()
    app = create_app(node)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as c:
        yield c
    await node.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """`minihermes serve` in a child process."""

    def __init__(self, data_dir: Path, port: int) -> None:
        self.data_dir = data_dir
        self.port = port
        self.proc: asyncio.subprocess.Process | None = None
        self.url = f"http://127.0.0.1:{port}"

    async def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MINIHERMES_")}
        env["MINIHERMES_EVENT_LOOP"] = loop_name()  # the server runs on the loop this test runs on
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "minihermes.cli.main",
            "serve",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--log-level",
            "info",
            cwd=ROOT,
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        assert self.proc.stderr is not None
        started = ""
        while True:
            line = (await asyncio.wait_for(self.proc.stderr.readline(), 60)).decode()
            assert line, "server exited before listening"
            started += line
            if "HTTP API on" in line:
                break
        assert f"event loop: {env['MINIHERMES_EVENT_LOOP']}" in started, started
        self._drain = asyncio.ensure_future(self._drain_stderr())

    async def _drain_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while await self.proc.stderr.readline():
            pass

    async def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()  # SIGKILL
        await self.proc.wait()
        self._drain.cancel()

    async def terminate(self) -> int:
        assert self.proc is not None
        self.proc.terminate()
        code = await asyncio.wait_for(self.proc.wait(), 60)
        self._drain.cancel()
        return code


@pytest.fixture
async def server_factory(tmp_path: Path) -> AsyncIterator[Any]:
    servers: list[Server] = []

    async def make(data_dir: Path | None = None) -> Server:
        server = Server(data_dir or tmp_path / "srv", free_port())
        await server.start()
        servers.append(server)
        return server

    yield make
    for s in servers:
        if s.proc is not None and s.proc.returncode is None:
            await s.kill()
