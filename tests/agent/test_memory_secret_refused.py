"""``store_memory`` never keeps a silent ``[REDACTED]`` (issue 24, item 7), whoever calls it: a fact typed
outside the chat (HTTP, the dashboard's Memory page, the CLI, the terminal chat's ``/memory store``) whose key
or value holds a secret redaction finds is refused with ``secret_not_stored``, saying it was not stored and
where secrets belong, never quoting the secret; nothing of it is stored. An episode (the record of a turn,
which quotes the conversation) is still stored, with the secret redacted."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from minihermes.api import AuthConfig, create_app
from minihermes.app import build_agent_node, default_config
from minihermes.runtime import InvalidArgument, ManualClock, Node

from .conftest import ACME, ACME_USER

JWT_SECRET = "test-secret-that-is-long-enough-for-hs256!"
PASSWORD = "password: hunter2"  # a value introduced as a secret: minihermes/context/redact.py's _ASSIGNED
GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5" * 3


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    config = default_config(tmp_path / "data")
    for spec in config.tree.walk():
        if spec.name == "memory":
            spec.args["semantic"] = False
        elif spec.name == "skill_store":
            spec.args["semantic"] = "off"
    started = build_agent_node(config, clock=ManualClock())
    await started.start()
    yield started
    await started.stop(deadline=5)


async def everything(node: Node) -> str:
    """Every memory of the tenant, episodes included, as the admin lists them (JSON text)."""
    listed = await node.ask("memory", "list_memories", {"include_episodes": True, "limit": 500}, ctx=ACME)
    return json.dumps(listed["memories"])


@pytest.mark.parametrize(
    ("key", "value", "field", "kind"),
    [
        ("wifi", PASSWORD, "value", "value of password"),
        ("wifi", f"the router says {GITHUB_TOKEN}", "value", "GitHub token"),
        (f"token {GITHUB_TOKEN}", "mine", "key", "GitHub token"),
    ],
)
@pytest.mark.parametrize("who", [ACME_USER, ACME], ids=["user", "admin"])
async def test_a_fact_holding_a_secret_is_refused_and_nothing_is_stored(
    node: Node, key: str, value: str, field: str, kind: str, who: Any
) -> None:
    with pytest.raises(InvalidArgument) as refused:
        await node.ask("memory", "store_memory", {"key": key, "value": value}, ctx=who)
    error = refused.value
    assert error.code == "secret_not_stored" and error.details["field"] == field
    assert "not stored" in error.message and kind in error.message
    assert "credential vault" in error.message and "Providers page" in error.message
    assert "hunter2" not in error.message and GITHUB_TOKEN not in error.message
    assert "hunter2" not in await everything(node) and "REDACTED" not in await everything(node)
    assert (await node.ask("memory", "get_stats", {}, ctx=ACME))["memories"] == 0


async def test_an_ordinary_fact_about_a_password_is_stored(node: Node) -> None:
    """Naming a secret is not holding one: "where is the wifi password" has nothing to redact."""
    await node.ask(
        "memory", "store_memory", {"key": "wifi password", "value": "on the router"}, ctx=ACME_USER
    )
    got = await node.ask("memory", "recall_memory", {"key": "wifi password"}, ctx=ACME_USER)
    assert got["found"] and got["value"] == "on the router"


async def test_over_http_a_secret_is_a_422_secret_not_stored(node: Node) -> None:
    app = create_app(node, AuthConfig(jwt_secret=JWT_SECRET, api_keys=False), dashboard=False)
    claims = {"tenant": "acme", "sub": "bob", "roles": ["user"], "exp": 4_000_000_000}
    headers = {"Authorization": f"Bearer {jwt.encode(claims, JWT_SECRET, algorithm='HS256')}"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        r = await client.post(
            "/api/v1/actors/memory/store_memory", json={"key": "wifi", "value": PASSWORD}, headers=headers
        )
        assert r.status_code == 422, r.text
        error = r.json()["error"]
        assert error["code"] == "secret_not_stored" and error["field"] == "value"
        assert "hunter2" not in r.text and "credential vault" in error["message"]
        listed = await client.post("/api/v1/actors/memory/list_memories", json={}, headers=headers)
        assert listed.status_code == 200 and listed.json()["memories"] == []
        ok = await client.post(
            "/api/v1/actors/memory/store_memory", json={"key": "wifi", "value": "HomeNet"}, headers=headers
        )
        assert ok.status_code == 200, ok.text


async def test_an_episode_quoting_a_secret_is_still_stored_redacted(node: Node) -> None:
    """The agent's record of a turn goes through the same store: refused, it would lose the turn's episode;
    it is kept with the secret redacted instead (and the memory_store tool's own refusal is unchanged)."""
    node.send(
        "memory",
        "turn_completed",
        {
            "session_id": "s1",
            "user_id": "bob",
            "user_message": f"log in to the router with {PASSWORD} and restart it",
            "status": "ok",
            "response": "Restarted.",
            "tool_calls": [{"name": "http_request", "input": {}, "is_error": False, "result": "ok"}],
        },
        ctx=ACME_USER,
    )
    listed = await node.ask("memory", "list_memories", {"kind": "episodic"}, ctx=ACME_USER)
    [episode] = listed["memories"]
    assert "password: [REDACTED]" in episode["value"] and "hunter2" not in episode["value"]

    payload = {"name": "memory_store", "input": {"key": "wifi", "value": "[REDACTED]"}, "session_id": "s1"}
    reply = await node.ask("tool_executor", "execute", payload, ctx=ACME_USER)
    assert reply["error"]["code"] == "secret_not_stored" and reply["error"]["message"].startswith(
        "not stored:"
    )
