"""Issue 23: a URL a tenant names makes the node connect only where the node's operator allows (no SSRF).

The attack: on a node with auth, a tenant admin registers an LLM provider whose ``base_url`` is the node's own
admin port on loopback, cloud metadata (169.254.169.254) or the host's private network, and the node connects
there. Here: every such address (and a name resolving to one) is refused at registration over HTTP before
anything connects; what the operator lists is reached; a redirect from an allowed server to a forbidden one is
not followed there; a name is connected at the address that was checked (a DNS answer that changes cannot
slip a forbidden one in); a one-owner node still reaches a provider on loopback. Every server here listens on
loopback, and the private and metadata addresses are only ever refused: nothing is sent off the machine.
"""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest

from minihermes.agent.llm_gateway import LLMGateway
from minihermes.api import AuthConfig, create_app
from minihermes.app import build_agent_node, default_config, single_owner
from minihermes.llm import egress
from minihermes.runtime import (
    ActorError,
    ActorSpec,
    AppConfig,
    ConfigError,
    Node,
    NodeOptions,
    RequestContext,
    SupervisorSpec,
)
from minihermes.runtime.store import open_store

from ..llm.support import Reply, StubServer
from .world import SECRET, token

ADMIN = RequestContext(tenant="acme", principal="ada", roles=frozenset({"admin"}))
KEY = "bWluaWhlcm1lcy10ZXN0LWNyZWRlbnRpYWwta2V5LTEyMzQ="
ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "local-tiny",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "OK"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
}
OLLAMA_ANSWER = {
    "model": "llama3.2",
    "created_at": "2026-01-01T00:00:00Z",
    "message": {"role": "assistant", "content": "OK"},
    "done": True,
    "done_reason": "stop",
    "prompt_eval_count": 5,
    "eval_count": 1,
}


def forbidden(port: int) -> list[str]:
    """Base URLs a tenant may not name on a node with auth: loopback (by address, by name, in other
    spellings), link-local metadata, RFC 1918 and the other internal ranges."""
    return [
        f"http://127.0.0.1:{port}/v1",
        f"http://localhost:{port}/v1",
        f"http://[::1]:{port}/v1",
        f"http://2130706433:{port}/v1",  # 127.0.0.1 as one number
        f"http://[::ffff:127.0.0.1]:{port}/v1",
        f"http://0.0.0.0:{port}/v1",
        "http://169.254.169.254/latest/meta-data",
        "http://[fe80::1]/v1",
        "http://10.0.0.1/v1",
        "https://172.16.0.1/v1",
        "http://192.168.1.1:8080/v1",
        "http://[fd00::1]/v1",
        "http://100.64.0.1/v1",
        "http://224.0.0.1/v1",
    ]


@pytest.fixture(scope="module")
def _servers() -> Iterator[tuple[StubServer, StubServer]]:
    a, b = StubServer(), StubServer()
    a.start()
    b.start()
    yield a, b
    a.stop()
    b.stop()


@pytest.fixture
def servers(_servers: tuple[StubServer, StubServer]) -> Iterator[tuple[StubServer, StubServer]]:
    for s in _servers:
        s.reset()
    yield _servers
    for s in _servers:
        s.reset()


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Any]:
    """A node with a tenant's gateway, ``allowed_egress`` as the operator set it (None: unset)."""
    nodes: list[Node] = []

    async def make(allowed: list[str] | None, data: Path | None = None) -> Node:
        args: dict[str, Any] = {"credential_key": KEY, "usage_flush_interval": 0}
        if allowed is not None:
            args["allowed_egress"] = allowed
        spec = ActorSpec("llm_gateway", LLMGateway, per_tenant=True, args=args)
        node = Node(
            open_store("sqlite", data_dir=str(data or tmp_path / "data")),
            SupervisorSpec(name="root", children=[spec]),
            options=NodeOptions(),
        )
        await node.start()
        nodes.append(node)
        return node

    yield make
    for node in nodes:
        await node.stop(deadline=5)


async def ask(node: Node, op: str, **payload: Any) -> Any:
    return await node.ask("llm_gateway", op, payload, timeout=60, ctx=ADMIN)


async def register(node: Node, url: str, name: str = "local", kind: str = "openai") -> Any:
    return await ask(node, "register_provider", name=name, kind=kind, model="local-tiny", base_url=url)


async def complete(node: Node) -> Any:
    return await ask(node, "completion", messages=[{"role": "user", "content": "hi"}], max_tokens=8)


# -- the attack, over HTTP on a node with auth --------------------------------------------------------


async def test_a_tenant_admin_cannot_point_a_provider_at_the_host(
    tmp_path: Path, servers: tuple[StubServer, StubServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(egress.ENV_VAR, raising=False)
    local, _ = servers
    node = build_agent_node(default_config(tmp_path / "data"))  # what `serve --jwt-secret-env` runs
    await node.start()
    app = create_app(node, AuthConfig(jwt_secret=SECRET, api_keys=False), dashboard=False)
    headers = {"Authorization": f"Bearer {token('ada')}"}
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1", timeout=60
        ) as http:
            for i, url in enumerate(forbidden(local.port)):
                for test in (False, True):
                    r = await http.post(
                        "/api/v1/actors/llm_gateway/register_provider",
                        json={"name": f"p{i}", "kind": "openai", "model": "m", "base_url": url, "test": test},
                        headers=headers,
                    )
                    assert r.status_code == 403, (url, r.text)
                    error = r.json()["error"]
                    assert error["code"] == "permission_denied" and error["field"] == "base_url", url
                    assert (
                        "allowed_egress" in error["message"]
                        and "MINIHERMES_ALLOWED_EGRESS" in error["message"]
                    )
            # A public address is a provider like any other (registering it connects nowhere).
            r = await http.post(
                "/api/v1/actors/llm_gateway/register_provider",
                json={
                    "name": "public",
                    "kind": "openai",
                    "model": "m",
                    "base_url": "https://93.184.216.34/v1",
                },
                headers=headers,
            )
            assert r.status_code == 200, r.text
            r = await http.post("/api/v1/actors/llm_gateway/list_providers", json={}, headers=headers)
            names = {p["name"] for p in r.json()["providers"]}
            assert "public" in names and not any(n.startswith("p") and n[1:].isdigit() for n in names)
    finally:
        await node.stop(deadline=5)
    assert local.seen == []  # refused before connecting


async def test_the_operator_allows_what_it_lists(
    gateway: Any, servers: tuple[StubServer, StubServer]
) -> None:
    local, other = servers
    node = await gateway([f"127.0.0.1:{local.port}", "10.0.0.0/8"])
    await register(node, f"http://127.0.0.1:{local.port}/v1")
    await register(node, "http://10.1.2.3:11434", name="lan", kind="ollama")  # listed network: accepted
    for url in (
        f"http://127.0.0.1:{other.port}/v1",
        "http://192.168.1.1/v1",
        f"http://[::1]:{local.port}/v1",
    ):
        with pytest.raises(ActorError) as e:
            await register(node, url, name="x")
        assert e.value.code == "permission_denied" and "allowed_egress" in e.value.message, url
    # Reached through the adapters' guarded transports: the SDK client (httpx2) and Ollama's (httpx).
    local.reply(Reply(json=ANSWER))
    tested = await ask(node, "test_provider", provider="local")
    assert tested["ok"] is True, tested
    await ask(node, "switch_provider", provider="local")
    local.reply(Reply(json=ANSWER))
    assert (await complete(node))["response"]["content"] == "OK"
    await ask(
        node, "register_provider", name="llama", kind="ollama", model="llama3.2", base_url=local.base_url
    )
    await ask(node, "switch_provider", provider="llama")
    local.reply(Reply(json=OLLAMA_ANSWER))
    assert (await complete(node))["response"]["content"] == "OK"
    assert [s.path for s in local.seen] == ["/v1/chat/completions", "/v1/chat/completions", "/api/chat"]
    assert other.seen == []


async def test_a_redirect_to_a_forbidden_address_is_not_followed(
    tmp_path: Path, gateway: Any, servers: tuple[StubServer, StubServer]
) -> None:
    allowed, target = servers
    for i, where in enumerate((f"http://127.0.0.1:{target.port}", f"http://localhost:{target.port}")):
        redirect = Reply(status=307, headers={"Location": f"{where}/v1/chat/completions"}, body=b"")
        # Without the guard the SDK follows it (so the test below is not passing by accident)...
        open_node = await gateway(["*"], data=tmp_path / f"open{i}")
        await register(open_node, f"{allowed.base_url}/v1")
        allowed.reply(redirect)
        target.reply(Reply(json=ANSWER))
        assert (await ask(open_node, "test_provider", provider="local"))["ok"] is True
        assert len(target.seen) == 1
        await open_node.stop(deadline=5)
        allowed.reset()
        target.reset()
        # ...with only the first server allowed, the redirected request never leaves.
        node = await gateway([f"127.0.0.1:{allowed.port}"], data=tmp_path / f"guarded{i}")
        await register(node, f"{allowed.base_url}/v1")
        allowed.reply(redirect, redirect)
        tested = await ask(node, "test_provider", provider="local")
        assert tested["ok"] is False and tested["error"]["kind"] == "unreachable", tested
        await ask(node, "switch_provider", provider="local")
        with pytest.raises(ActorError) as e:
            await complete(node)
        assert e.value.code == "llm_unavailable"
        assert len(allowed.seen) >= 2 and target.seen == []
        await node.stop(deadline=5)
        allowed.reset()


async def test_a_registration_the_operator_no_longer_allows_is_not_reached(
    tmp_path: Path, gateway: Any, servers: tuple[StubServer, StubServer]
) -> None:
    local, _ = servers
    data = tmp_path / "node"
    node = await gateway([f"127.0.0.1:{local.port}"], data=data)
    await register(node, f"{local.base_url}/v1")
    await ask(node, "switch_provider", provider="local")
    await node.stop(deadline=5)
    node = await gateway(None, data=data)  # the operator narrowed the setting: public only
    tested = await ask(node, "test_provider", provider="local")
    assert tested["ok"] is False and tested["error"]["kind"] == "misconfigured"
    assert "loopback" in tested["error"]["message"] and "allowed_egress" in tested["error"]["message"]
    with pytest.raises(ActorError) as e:
        await complete(node)
    assert e.value.code == "llm_unavailable"
    assert local.seen == []


async def test_a_one_owner_node_reaches_a_provider_on_loopback(
    tmp_path: Path, servers: tuple[StubServer, StubServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(egress.ENV_VAR, raising=False)
    local, _ = servers
    node = build_agent_node(single_owner(default_config(tmp_path / "data")))  # serve without auth, embed
    await node.start()
    try:
        await node.ask(
            "llm_gateway",
            "register_provider",
            {
                "name": "local",
                "kind": "openai",
                "model": "m",
                "base_url": f"http://localhost:{local.port}/v1",
            },
        )
        local.reply(Reply(json=ANSWER))
        tested = await node.ask("llm_gateway", "test_provider", {"provider": "local"}, timeout=60)
        assert tested["ok"] is True, tested
    finally:
        await node.stop(deadline=5)
    assert len(local.seen) == 1


async def test_the_node_wide_setting_comes_from_the_environment(
    tmp_path: Path, servers: tuple[StubServer, StubServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    local, other = servers
    monkeypatch.setenv(egress.ENV_VAR, f"127.0.0.1:{local.port}, ollama.internal:11434")
    config = default_config(tmp_path / "data")
    node = build_agent_node(config)
    given = {s.name: s.args.get("allowed_egress") for s in config.tree.walk()}
    expected = [f"127.0.0.1:{local.port}", "ollama.internal:11434"]
    assert given["llm_gateway"] == given["mcp_manager"] == expected
    await node.start()
    try:
        await register(node, f"{local.base_url}/v1")
        with pytest.raises(ActorError) as e:
            await register(node, f"{other.base_url}/v1", name="other")
        assert e.value.code == "permission_denied"
    finally:
        await node.stop(deadline=5)


# -- the guarded transports, as the adapters and the MCP client use them -------------------------------


def _client(lib: Any, policy: egress.EgressPolicy | None, **options: Any) -> Any:
    if policy is None:
        return lib.AsyncClient(timeout=10, **options)
    maker = egress.httpx_transport if lib is httpx else egress.httpx2_transport
    return lib.AsyncClient(timeout=10, transport=maker(policy), **options)


@pytest.mark.parametrize("lib", [httpx, httpx2], ids=["httpx", "httpx2"])
async def test_a_name_is_connected_at_the_address_that_was_checked(
    lib: Any, servers: tuple[StubServer, StubServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fake resolver answers for a name no DNS knows: the request reaches the server only if it is sent to
    the address checked, and one answer with a forbidden address (a rebinding) refuses before connecting."""
    local, _ = servers
    answers = {"rebind.test": ["127.0.0.1"]}

    async def resolve(host: str, port: int, timeout: float = 5.0) -> list[Any]:
        return [ipaddress.ip_address(a) for a in answers[host]]

    monkeypatch.setattr(egress, "resolve", resolve)
    policy = egress.EgressPolicy.parse([f"127.0.0.1:{local.port}"], "the test's allowed_egress")
    local.reply(Reply(json={"ok": True}))
    async with _client(lib, policy) as client:
        r = await client.get(f"http://rebind.test:{local.port}/ping")
    assert r.status_code == 200 and local.last.headers["host"] == f"rebind.test:{local.port}"
    for rebound in (["127.0.0.2"], ["127.0.0.1", "10.0.0.1"], ["169.254.169.254"]):
        answers["rebind.test"] = rebound
        async with _client(lib, policy) as client:
            with pytest.raises(lib.ConnectError, match="allowed_egress"):
                await client.get(f"http://rebind.test:{local.port}/ping")
    assert len(local.seen) == 1


@pytest.mark.parametrize("lib", [httpx, httpx2], ids=["httpx", "httpx2"])
async def test_a_client_that_follows_redirects_is_stopped_at_a_forbidden_one(
    lib: Any, servers: tuple[StubServer, StubServer]
) -> None:
    allowed, target = servers
    redirect = Reply(status=302, headers={"Location": f"http://127.0.0.1:{target.port}/admin"}, body=b"")
    allowed.reply(redirect)
    target.reply(Reply(json={"admin": True}))
    async with _client(lib, None, follow_redirects=True) as client:
        assert (await client.get(f"{allowed.base_url}/x")).json() == {"admin": True}  # unguarded: followed
    assert len(target.seen) == 1
    target.reset()
    allowed.reply(redirect)
    policy = egress.EgressPolicy.parse([f"127.0.0.1:{allowed.port}"], "allowed_egress")
    async with _client(lib, policy, follow_redirects=True) as client:
        with pytest.raises(lib.ConnectError, match="loopback"):
            await client.get(f"{allowed.base_url}/x")
    assert target.seen == []


def test_the_setting_s_shape() -> None:
    policy = egress.EgressPolicy.parse(
        ["ollama.internal:11434", "127.0.0.1:11434", "[::1]:8080", "10.0.0.0/8", "LAN-Box"], "s"
    )
    ip = ipaddress.ip_address
    assert policy.names("OLLAMA.internal.", 11434) and not policy.names("ollama.internal", 80)
    assert policy.names("lan-box", 1) and policy.why_not(ip("10.9.9.9"), 1) is None
    assert (
        policy.why_not(ip("127.0.0.1"), 11434) is None and policy.why_not(ip("127.0.0.1"), 80) == "loopback"
    )
    assert policy.why_not(ip("::1"), 8080) is None and policy.why_not(ip("::1"), 80) == "loopback"
    assert policy.why_not(ip("8.8.8.8"), 80) is None
    assert egress.EgressPolicy.parse(["*"], "s").allow_all
    for kind, address in (
        ("link-local", "169.254.169.254"),
        ("private", "172.31.255.1"),
        ("private", "fd12::1"),
        ("unspecified", "::"),
        ("multicast", "ff02::1"),
        ("loopback", "::ffff:127.0.0.1"),
        ("loopback", "2002:7f00:1::"),  # 6to4 of 127.0.0.1
        ("private", "64:ff9b::a00:1"),  # NAT64 of 10.0.0.1
        ("reserved", "240.0.0.1"),
    ):
        assert egress.forbidden_kind(ip(address)) == kind, address
    for bad in (["a:b"], ["[::1"], ["x y"], ["1.2.3.4:0"], ["10.0.0.0/33"], "127.0.0.1", [""]):
        with pytest.raises(ValueError):
            egress.EgressPolicy.parse(bad, "s")  # type: ignore[arg-type]
    assert egress.split_env(" a:1,b  c/8 ,") == ["a:1", "b", "c/8"]


def test_a_bad_setting_stops_the_node_at_start_up_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for role in ("minihermes.llm_gateway", "minihermes.mcp_manager"):
        child = {"name": "x", "role": role, "args": {"allowed_egress": ["not a host"]}}
        with pytest.raises(ConfigError, match=r"supervisor.children\[0\].args.allowed_egress.*not a host"):
            AppConfig.from_dict({"supervisor": {"children": [child]}})
    monkeypatch.setenv(egress.ENV_VAR, "10.0.0.0/33")
    with pytest.raises(ConfigError, match=egress.ENV_VAR):
        build_agent_node(default_config(tmp_path / "data"))
