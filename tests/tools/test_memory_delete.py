"""``memory_delete`` (issue 24, item 8): the agent can forget a fact when asked, as the turn's caller. The
offline model says "Forget my dog's name" with it and the fact is gone; forgetting what was never stored is
said honestly (the tool's ``not_found``); a user's call never deletes another user's fact or a tenant-shared
one; the guardrails allow it by default, as they allow ``memory_store`` (a person changing their own facts)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from minihermes import app
from minihermes.runtime import ManualClock, Node, RequestContext

ADA = RequestContext(tenant="acme", principal="ada", roles=frozenset({"admin"}))
ALICE = RequestContext(tenant="acme", principal="alice", roles=frozenset({"user"}))
BOB = RequestContext(tenant="acme", principal="bob", roles=frozenset({"user"}))


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    config = app.default_config(tmp_path / "data")  # the offline simulated model answers
    for spec in config.tree.walk():
        if spec.name == "memory":
            spec.args["semantic"] = False
        elif spec.name == "skill_store":
            spec.args["semantic"] = "off"
    started = app.build_agent_node(config, clock=ManualClock())
    await started.start()
    yield started
    await started.stop(deadline=5)


async def chat(node: Node, ctx: RequestContext, message: str, session: str) -> dict[str, Any]:
    reply: dict[str, Any] = await node.ask(
        "agent", "chat", {"message": message, "session_id": session}, ctx=ctx
    )
    assert reply["status"] == "ok", reply
    return reply


async def recall(node: Node, ctx: RequestContext, key: str) -> dict[str, Any]:
    got: dict[str, Any] = await node.ask("memory", "recall_memory", {"key": key}, ctx=ctx)
    return got


async def delete(node: Node, ctx: RequestContext, key: str, session: str) -> dict[str, Any]:
    payload = {"name": "memory_delete", "input": {"key": key}, "session_id": session}
    reply: dict[str, Any] = await node.ask("tool_executor", "execute", payload, ctx=ctx)
    return reply


async def test_forget_my_dogs_name_forgets_it_and_says_so(node: Node) -> None:
    stored = await chat(node, ALICE, "My dog's name is Biscuit, please remember that", "s1")
    assert "Biscuit" in stored["response"]
    assert (await recall(node, ALICE, "dog's name"))["value"] == "Biscuit"

    forgot = await chat(node, ALICE, "Forget my dog's name", "s1")
    assert forgot["response"] == "Done: I forgot your dog's name.", forgot
    assert (await recall(node, ALICE, "dog's name"))["found"] is False
    asked = await chat(node, ALICE, "What's my dog called?", "s1")
    assert "Biscuit" not in asked["response"]

    # Again: nothing is stored under it now, and the answer says so instead of claiming it forgot.
    again = await chat(node, ALICE, "Forget my dog's name", "s1")
    assert again["response"] == "Nothing was stored as your dog's name, so there was nothing to forget."
    never = await chat(node, ALICE, "delete 'shoe size' from memory", "s1")
    assert never["response"] == "Nothing was stored as shoe size, so there was nothing to forget."


async def test_a_key_never_stored_is_a_not_found_the_model_reads(node: Node) -> None:
    reply = await delete(node, ALICE, "shoe size", "s1")
    assert reply["status"] == "error", reply
    error = reply["error"]
    assert error["code"] == "not_found" and error["key"] == "shoe size"
    assert "nothing is stored under 'shoe size'" in error["message"]


async def test_a_user_deletes_only_their_own_fact(node: Node) -> None:
    await node.ask("memory", "store_memory", {"key": "dog's name", "value": "Biscuit"}, ctx=ALICE)
    await node.ask("memory", "store_memory", {"key": "office", "value": "Building 4"}, ctx=ADA)  # shared

    # bob, in his own turn, names alice's key: he has nothing there, and hers stays.
    theirs = await delete(node, BOB, "dog's name", "bob-s1")
    assert theirs["status"] == "error" and theirs["error"]["code"] == "not_found", theirs
    assert (await recall(node, ALICE, "dog's name"))["value"] == "Biscuit"
    # A tenant-shared fact is changed by admins only.
    shared = await delete(node, BOB, "office", "bob-s1")
    assert shared["status"] == "error" and shared["error"]["code"] == "permission_denied", shared
    assert (await recall(node, BOB, "office"))["value"] == "Building 4"

    # bob's own fact under the same key is his to delete, and alice's is untouched by it.
    await node.ask("memory", "store_memory", {"key": "dog's name", "value": "Rex"}, ctx=BOB)
    mine = await delete(node, BOB, "dog's name", "bob-s1")
    assert mine["status"] == "ok" and mine["result"] == {
        "key": "dog's name",
        "scope": "global",
        "deleted": True,
    }
    assert (await recall(node, BOB, "dog's name"))["found"] is False
    assert (await recall(node, ALICE, "dog's name"))["value"] == "Biscuit"


async def test_memory_delete_is_mutating_and_allowed_by_default(node: Node) -> None:
    described = await node.ask(
        "tool_executor", "describe_tool", {"name": "memory_delete", "input": {"key": "k"}}, ctx=ALICE
    )
    assert described["effects"] == "mutating"
    assert described["permission"] == {"actor": "memory", "op": "delete_memory"}
    for tool in ("memory_store", "memory_delete"):
        got = await node.ask(
            "guardrails", "check_tool", {"tool_name": tool, "input": {"key": "k"}}, ctx=ALICE
        )
        assert (got["decision"], got["reason"]) == ("allow", "default"), (tool, got)
    # A viewer's turn never runs it (mutating), as with memory_store.
    viewer = RequestContext(tenant="acme", principal="vic", roles=frozenset({"viewer"}))
    refused = await delete(node, viewer, "k", "vic-s1")
    assert refused["status"] == "error" and refused["error"]["code"] == "permission_denied", refused


async def test_forgetting_a_fact_takes_the_episodes_that_quote_it(node: Node) -> None:
    # The turn that stated the fact left an episode quoting it ("My dog's name is Biscuit ..."): the prompt's
    # recall asks for episodes, so a real model would go on answering "Biscuit" after the fact was forgotten.
    await chat(node, ALICE, "My dog's name is Biscuit, please remember that", "s1")
    await chat(node, ALICE, "calculate 6 * 7", "s1")  # an episode that does not quote it
    await chat(node, BOB, "My dog's name is Biscuit, please remember that", "s2")  # bob's own

    async def episodes(ctx: RequestContext) -> list[str]:
        found = await node.ask(
            "memory", "search_memories", {"query": "Biscuit", "kind": "episodic", "limit": 20}, ctx=ctx
        )
        return [str(m["value"]) for m in found["memories"]]

    async def all_episodes(ctx: RequestContext) -> int:
        listed = await node.ask("memory", "list_memories", {"kind": "episodic"}, ctx=ctx)
        return len(listed["memories"])

    assert any("Biscuit" in v for v in await episodes(ALICE))
    before = await all_episodes(ALICE)
    reply = await node.ask("memory", "delete_memory", {"key": "dog's name"}, ctx=ALICE)
    assert reply["deleted"] is True and reply["episodes_deleted"] >= 1, reply
    assert not any("Biscuit" in v for v in await episodes(ALICE))
    assert await all_episodes(ALICE) == before - reply["episodes_deleted"] >= 1  # the calculation's stays
    assert any("Biscuit" in v for v in await episodes(BOB))  # another user's episode is theirs
