"""The whole agent app (offline simulated model) on SQLite with the real clock, and the fake platforms."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from minihermes.app import build_agent_node, default_config
from minihermes.runtime import Node, RequestContext

from .fakes import FakeTelegram

ADMIN = RequestContext(tenant="acme", principal="alice", roles=frozenset({"admin"}))
CANARY = "7001234567:AAcanary-Bot-Token-Never-Shown-9f3e2d1c"


@pytest.fixture
async def app_node(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Node]]]:
    nodes: list[Node] = []

    async def factory(**args: Any) -> Node:
        config = default_config(tmp_path / "data")
        args = {"memory": {"semantic": False}, "skill_store": {"semantic": "off"}, **args}
        for spec in config.tree.walk():
            spec.args.update(args.get(spec.name, {}))
        node = build_agent_node(config)
        await node.start()
        nodes.append(node)
        return node

    yield factory
    for n in nodes:
        await n.stop(deadline=5)


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegram]:
    fake = FakeTelegram(CANARY)
    await fake.start()
    yield fake
    await fake.http.stop()


async def ask(node: Node, actor: str, op: str, payload: dict[str, Any] | None = None) -> Any:
    return await node.ask(actor, op, payload or {}, ctx=ADMIN)


async def connect_telegram(node: Node, fake: FakeTelegram, name: str = "tg", **extra: Any) -> dict[str, Any]:
    await ask(
        node, "llm_gateway", "register_credential", {"phantom_token": "tg-token", "api_key": fake.token}
    )
    url = f"http://127.0.0.1:{fake.http.port}"
    payload = {
        "platform": "telegram",
        "name": name,
        "credential": "tg-token",
        "base_url": url,
        "settings": {"poll_timeout": 1},
        **extra,
    }
    reply: dict[str, Any] = await ask(node, "platform_gateway", "register_platform", payload)
    return reply


async def until(check: Callable[[], Any], timeout: float = 30.0, what: str = "") -> Any:
    """Poll a check (sync or async) until it is truthy; fail after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        got = check()
        if asyncio.iscoroutine(got):
            got = await got
        if got:
            return got
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        await asyncio.sleep(0.02)


async def counters(node: Node, name: str = "tg") -> dict[str, int]:
    reply = await ask(node, "platform_gateway", "get_platform", {"name": name})
    return dict(reply.get("counters") or {})


async def model_calls(node: Node) -> int:
    stats = await ask(node, "llm_gateway", "get_stats")
    return int(
        sum(int(p.get("calls", 0) or p.get("requests", 0) or 0) for p in stats["providers"].values())
        or stats["usage"].get("calls", 0)
        or 0
    )
