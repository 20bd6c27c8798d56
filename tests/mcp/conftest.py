"""Fixtures for MCP: a node with the tool executor, guardrails and the MCP manager per tenant, and the test
MCP server (``mcp_test_server.py``) over stdio or streamable HTTP on loopback."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from minihermes.agent.guardrails import Guardrails
from minihermes.agent.tool_executor import ToolExecutor
from minihermes.app import TOOLSETS
from minihermes.mcp import MCPManager
from minihermes.runtime import ActorSpec, Node, NodeOptions, RequestContext, SupervisorSpec
from minihermes.runtime.store import open_store

SERVER = str(Path(__file__).with_name("mcp_test_server.py"))
ACME = RequestContext(tenant="acme", principal="alice", roles=frozenset({"admin"}))
ACME_USER = RequestContext(tenant="acme", principal="bob", roles=frozenset({"user"}))
GLOBEX = RequestContext(tenant="globex", principal="gary", roles=frozenset({"admin"}))


def stdio_server(**extra: Any) -> dict[str, Any]:
    return {"name": "t", "transport": "stdio", "command": sys.executable, "args": [SERVER, "stdio"], **extra}


def specs(mcp_args: dict[str, Any] | None = None) -> list[ActorSpec]:
    return [
        ActorSpec("tool_executor", ToolExecutor, per_tenant=True, args={"toolsets": TOOLSETS}),
        ActorSpec("guardrails", Guardrails, per_tenant=True),
        # The tests' own programs and loopback servers: a node whose operator allows any (a served node's
        # default is none, and public addresses only).
        ActorSpec(
            "mcp_manager",
            MCPManager,
            per_tenant=True,
            args={"stdio_commands": ["*"], "allowed_egress": ["*"], **(mcp_args or {})},
        ),
    ]


@pytest.fixture
async def make_node(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    nodes: list[Node] = []

    async def factory(data_dir: Path | None = None, mcp_args: dict[str, Any] | None = None) -> Node:
        tree = SupervisorSpec(name="root", children=list(specs(mcp_args)))
        node = Node(
            open_store("sqlite", data_dir=str(data_dir or tmp_path / "data")), tree, options=NodeOptions()
        )
        await node.start()
        nodes.append(node)
        return node

    yield factory
    for n in nodes:
        await n.stop(deadline=10)  # a no-op for a node a test already stopped


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def http_server() -> Iterator[str]:
    """The test server on streamable HTTP, shared by the session's tests (each test's node opens its own MCP
    session on it); yields its URL once it answers."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, SERVER, "http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, "the MCP test server exited"
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)  # polling for the port, with a deadline
        yield url
    finally:
        proc.kill()
        proc.wait()


def http_config(url: str, **extra: Any) -> dict[str, Any]:
    return {"name": "t", "transport": "http", "url": url, **extra}
