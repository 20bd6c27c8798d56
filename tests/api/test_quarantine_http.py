"""Held (quarantined) memories over HTTP (issue 25): ``memory.list_quarantined``, ``confirm_memory`` and
``discard_memory`` through the generic op route, as the dashboard and the CLI call them. Their owner and admins
decide; another user gets 404 (their items do not exist for them), a viewer 403. The skills' ops are
decided the same way. Both are planted the real way: a turn reads a file and stores what it read (a memory
held), or does more with it, and a skill learned from that turn is held too.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from minihermes.api import AuthConfig, create_app
from minihermes.app import build_agent_node, default_config

from .conftest import SECRET, bearer, token

TENANT = "acme"
UMA = token(TENANT, "uma", ["user"])
OTTO = token(TENANT, "otto", ["user"])
VIC = token(TENANT, "vic", ["viewer"])
ADA = token(TENANT, "ada", ["admin"])


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    node = build_agent_node(default_config(tmp_path / "data"))
    await node.start()
    app = create_app(node, AuthConfig(jwt_secret=SECRET))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1", timeout=60
    ) as client:
        yield client
    await node.stop(deadline=5)


async def op(api: httpx.AsyncClient, tok: str, actor: str, name: str, **args: Any) -> httpx.Response:
    return await api.post(f"/api/v1/actors/{actor}/{name}", json=args, headers=bearer(tok))


async def ok(api: httpx.AsyncClient, tok: str, actor: str, name: str, **args: Any) -> Any:
    r = await op(api, tok, actor, name, **args)
    assert r.status_code == 200, r.text
    return r.json()


LEARNED = "read budget.txt, then calculate 17 * 23, then add 100 to it, and remember the result as {key}"
"""A turn of four tool calls after an untrusted result: a skill is learned from it, and held."""


async def plant(
    api: httpx.AsyncClient, key: str, request: str = "read budget.txt and remember the result as {key}"
) -> str:
    """Uma's turn writes a file, her next reads it and stores what it read; the id memory holds it under."""
    session = (await ok(api, UMA, "session_manager", "create_session", channel="api"))["session_id"]
    for message in ("write '500 euros' to budget.txt", request.format(key=key)):
        reply = await ok(api, UMA, "agent", "chat", message=message, session_id=session)
        while reply.get("status") == "paused":  # an admin approves what waits for review
            reply = (await ok(api, ADA, "guardrails", "approve", approval_id=reply["approval_id"]))["turn"]
        assert reply["status"] == "ok", reply
    held = (await ok(api, UMA, "memory", "list_quarantined"))["memories"]
    [item] = [m for m in held if m["key"] == key]
    assert item["provenance"] == "tool:read_file" and item["derived_from_untrusted"] is True
    return str(item["id"])


async def held_skill(api: httpx.AsyncClient) -> dict[str, Any]:
    """The skill learned (in the background) from uma's untrusted turn, once it is held."""
    deadline = asyncio.get_running_loop().time() + 30
    while not (skills := (await ok(api, UMA, "skill_store", "list_quarantined"))["skills"]):
        assert asyncio.get_running_loop().time() < deadline, "no skill was learned and held"
        await asyncio.sleep(0.05)
    [skill] = skills
    return dict(skill)


async def test_only_the_owner_or_an_admin_decides_on_a_held_memory(api: httpx.AsyncClient) -> None:
    held = await plant(api, "budget_note")
    spare = await plant(api, "spare_note")

    # Listing: the owner's and the admin's views have it; another user's and a viewer's do not.
    assert held in {m["id"] for m in (await ok(api, ADA, "memory", "list_quarantined"))["memories"]}
    for other in (OTTO, VIC):
        assert (await ok(api, other, "memory", "list_quarantined"))["memories"] == []

    # Another user: not found (never "forbidden": it does not exist for them); a viewer: forbidden.
    for name in ("confirm_memory", "discard_memory"):
        r = await op(api, OTTO, "memory", name, id=held)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", r.text
        r = await op(api, VIC, "memory", name, id=held)
        assert r.status_code == 403 and r.json()["error"]["code"] == "permission_denied", r.text
    assert held in {m["id"] for m in (await ok(api, UMA, "memory", "list_quarantined"))["memories"]}

    # The owner confirms: recalled from now on. An admin discards the other: never stored.
    assert (await ok(api, UMA, "memory", "confirm_memory", id=held))["confirmed"] is True
    assert (await ok(api, UMA, "memory", "recall_memory", key="budget_note"))["value"] == "500 euros"
    assert (await ok(api, ADA, "memory", "discard_memory", id=spare))["discarded"] is True
    assert (await ok(api, UMA, "memory", "recall_memory", key="spare_note"))["found"] is False
    r = await op(api, UMA, "memory", "confirm_memory", id=spare)
    assert r.status_code == 404, r.text


async def test_only_the_owner_or_an_admin_decides_on_a_held_skill(api: httpx.AsyncClient) -> None:
    await plant(api, "total", LEARNED)
    skill = await held_skill(api)
    sid = skill["skill_id"]
    assert skill["owner"] == "uma" and skill["quarantined"] is True
    assert skill["untrusted_sources"] == ["tool:read_file"]
    assert [s["skill_id"] for s in (await ok(api, ADA, "skill_store", "list_quarantined"))["skills"]] == [sid]
    for other in (OTTO, VIC):
        assert (await ok(api, other, "skill_store", "list_quarantined"))["skills"] == []

    for name in ("confirm_skill", "discard_skill"):
        r = await op(api, OTTO, "skill_store", name, skill_id=sid)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", r.text
        r = await op(api, VIC, "skill_store", name, skill_id=sid)
        assert r.status_code == 403 and r.json()["error"]["code"] == "permission_denied", r.text

    assert (await ok(api, UMA, "skill_store", "discard_skill", skill_id=sid))["discarded"] is True
    assert (await ok(api, UMA, "skill_store", "list_quarantined"))["skills"] == []


async def test_discovery_offers_the_quarantine_ops_by_role(api: httpx.AsyncClient) -> None:
    async def allowed(tok: str) -> dict[tuple[str, str], bool]:
        r = await api.get("/api/v1/actors", headers=bearer(tok))
        assert r.status_code == 200, r.text
        return {(a["name"], o["op"]): o["allowed"] for a in r.json()["actors"] for o in a["ops"]}

    ops = [("memory", "list_quarantined"), ("memory", "confirm_memory"), ("memory", "discard_memory")]
    ops += [
        ("skill_store", "list_quarantined"),
        ("skill_store", "confirm_skill"),
        ("skill_store", "discard_skill"),
    ]
    user, viewer, admin = await allowed(UMA), await allowed(VIC), await allowed(ADA)
    for key in ops:
        deciding = key[1] != "list_quarantined"
        assert user[key] is True and admin[key] is True, key
        assert viewer[key] is not deciding, key  # a viewer may look (and sees nothing), never decide
