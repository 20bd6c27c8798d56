"""An MCP server's ``url`` reaches only what the node's operator allows (issue 23: no SSRF through MCP).

Unset ``allowed_egress`` (a node with auth): loopback, link-local, private and the other internal addresses,
and names resolving to them, are refused by ``add_server`` before anything connects. Listed addresses are
reached through the guarded transport (with and without headers), and a stored server the operator no longer
allows is refused at its next connection. The guarded transport's redirect and rebinding checks are in
tests/security/test_egress.py. Every server here is on loopback; other addresses are only ever refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from minihermes.runtime import ActorError

from ..llm.support import StubServer
from .conftest import ACME, http_config

PUBLIC_ONLY = {"allowed_egress": None}  # the arg unset, as on a node with auth


@pytest.fixture(scope="module")
def recorder() -> Iterator[StubServer]:
    """A loopback server that records every request: refused URLs must leave it untouched."""
    server = StubServer()
    server.start()
    yield server
    server.stop()


def port_of(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


async def add(node: Any, url: str, **extra: Any) -> Any:
    return await node.ask("mcp_manager", "add_server", http_config(url, **extra), ctx=ACME, timeout=60)


async def test_a_tenant_admin_cannot_point_an_mcp_server_at_the_host(
    make_node: Any, http_server: str, recorder: StubServer
) -> None:
    recorder.reset()
    node = await make_node(mcp_args=PUBLIC_ONLY)
    port = recorder.port
    for url in (
        http_server,
        f"http://127.0.0.1:{port}/mcp",
        f"http://localhost:{port}/mcp",
        f"http://[::1]:{port}/mcp",
        f"http://2130706433:{port}/mcp",
        "http://169.254.169.254/mcp",
        "http://10.0.0.1/mcp",
        "https://192.168.0.10:8443/mcp",
        "http://[fd00::1]/mcp",
    ):
        with pytest.raises(ActorError) as e:
            await add(node, url)
        assert e.value.code == "permission_denied" and e.value.details["field"] == "url", url
        assert "allowed_egress" in e.value.message, url
    listed = await node.ask("mcp_manager", "list_servers", {}, ctx=ACME)
    assert listed["count"] == 0
    assert recorder.seen == []


async def test_the_operator_allows_an_mcp_server_it_lists(
    make_node: Any, http_server: str, recorder: StubServer
) -> None:
    node = await make_node(mcp_args={"allowed_egress": [f"127.0.0.1:{port_of(http_server)}"]})
    for headers in (None, {"Authorization": "Bearer t0ken-value"}):
        added = await add(node, http_server, headers=headers, replace=True)
        assert "mcp_t_add" in added["tools"]
        result = await node.ask(
            "mcp_manager",
            "call_tool",
            {"server": "t", "tool": "add", "arguments": {"a": 2, "b": 3}},
            ctx=ACME,
            timeout=60,
        )
        assert "5" in result["text"]
    with pytest.raises(ActorError) as e:
        await add(node, f"http://127.0.0.1:{recorder.port}/mcp", replace=True)
    assert e.value.code == "permission_denied"


async def test_a_stored_server_the_operator_no_longer_allows_is_not_reached(
    make_node: Any, http_server: str, tmp_path: Path
) -> None:
    data = tmp_path / "node"
    node = await make_node(data_dir=data, mcp_args={"allowed_egress": [f"127.0.0.1:{port_of(http_server)}"]})
    await add(node, http_server)
    await node.stop(deadline=10)
    node = await make_node(data_dir=data, mcp_args=PUBLIC_ONLY)
    with pytest.raises(ActorError) as e:
        await node.ask(
            "mcp_manager",
            "call_tool",
            {"server": "t", "tool": "add", "arguments": {"a": 1, "b": 2}},
            ctx=ACME,
            timeout=60,
        )
    assert e.value.code == "mcp_unavailable" and "allowed_egress" in e.value.message
    with pytest.raises(ActorError) as e:
        await node.ask("mcp_manager", "refresh_server", {"name": "t"}, ctx=ACME, timeout=60)
    assert e.value.code == "permission_denied" and "allowed_egress" in e.value.message
