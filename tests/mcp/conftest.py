"""Fixtures for MCP: a node with the tool executor, guardrails and the MCP manager per tenant, and the test
MCP server (``mcp_test_server.py``) over stdio or streamable HTTP on loopback."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from minihermes.agent.guardrails import Guardrails
from minihermes.agent.tool_executor import ToolExecutor
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
        ActorSpec("tool_executor", ToolExecutor, per_tenant=True),
        ActorSpec("guardrails", Guardrails, per_tenant=True),
        ActorSpec("mcp_manager", MCPManager, per_tenant=True, args=mcp_args or {}),
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


@pytest.fixture
async def http_server() -> AsyncIterator[str]:
    """The test server on streamable HTTP; yields its URL once it answers."""
    port = _free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        SERVER,
        "http",
        str(port),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        async with httpx.AsyncClient() as client:
            while True:
                assert proc.returncode is None, "the MCP test server exited"
                try:
                    await client.get(url, timeout=1)
                    break
                except httpx.TransportError:
                    if loop.time() > deadline:
                        raise
                    await asyncio.sleep(0.05)  # polling for the port, with a deadline
        yield url
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
