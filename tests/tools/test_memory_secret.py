"""``memory_store`` never keeps a silent ``[REDACTED]`` (issue 24): a chat message is redacted on entry, so a
model asked to remember a password only sees the placeholder; storing it would tell the person their secret
was kept when nothing of it was. The tool refuses with ``secret_not_stored``, says why and where secrets belong,
and stores nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from minihermes import app
from minihermes.runtime import Node, RequestContext

ALICE = RequestContext(tenant="acme", principal="alice", roles=frozenset({"user"}))


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    config = app.default_config(tmp_path / "data")
    for spec in config.tree.walk():
        if spec.name == "memory":
            spec.args["semantic"] = False
        elif spec.name == "skill_store":
            spec.args["semantic"] = "off"
    started = app.build_agent_node(config)
    await started.start()
    yield started
    await started.stop(deadline=5)


async def store(node: Node, key: str, value: Any) -> dict[str, Any]:
    payload = {"name": "memory_store", "input": {"key": key, "value": value}, "session_id": "s1"}
    reply: dict[str, Any] = await node.ask("tool_executor", "execute", payload, ctx=ALICE)
    return reply


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("wifi password", "[REDACTED]"),
        ("router note", "password: [REDACTED] for the guest network"),
        ("[REDACTED]", "the key itself was a secret"),
    ],
)
async def test_a_redacted_value_is_refused_in_words_and_nothing_is_stored(
    node: Node, key: str, value: str
) -> None:
    reply = await store(node, key, value)
    assert reply["status"] == "error", reply
    error = reply["error"]
    assert error["code"] == "secret_not_stored"
    assert error["message"].startswith("not stored:")
    assert "credential vault" in error["message"] and "memory" in error["message"]
    recalled = await node.ask("memory", "recall_memory", {"key": key}, ctx=ALICE)
    assert not recalled["found"], recalled
    listed = await node.ask("memory", "list_memories", {}, ctx=ALICE)
    assert all("[REDACTED]" not in str(m.get("value")) for m in listed["memories"]), listed


async def test_an_ordinary_value_is_stored(node: Node) -> None:
    reply = await store(node, "wifi name", "HomeNet")
    assert reply["status"] == "ok" and reply["result"]["stored"] is True, reply
    recalled = await node.ask("memory", "recall_memory", {"key": "wifi name"}, ctx=ALICE)
    assert recalled["found"] and recalled["value"] == "HomeNet"
