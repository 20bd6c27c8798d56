"""Forgetting: a memory, a session, a user, a tenant, from every store (memory, session index, archives,
agent history, skill provenance); ending a session drops its session-scoped memories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from minihermes.agent.agent import Agent
from minihermes.agent.memory import Memory
from minihermes.agent.tool_executor import ToolExecutor
from minihermes.app import TOOLSETS
from minihermes.context import ContextCompressor
from minihermes.runtime import ActorSpec, InvalidArgument, NotFound, PermissionDenied, RequestContext

from . import doubles
from .conftest import ACME, ACME_USER
from .doubles import CASTS, FakeSkills, FnGateway

CAROL = RequestContext(tenant="acme", principal="carol", roles=frozenset({"user"}))


@pytest.fixture(autouse=True)
def _clean():
    doubles.reset()


def specs(tmp_path: Path) -> list[ActorSpec]:
    return [
        ActorSpec("llm_gateway", FnGateway, per_tenant=True),
        ActorSpec("memory", Memory, per_tenant=True),
        ActorSpec("context_compressor", ContextCompressor, per_tenant=True),
        ActorSpec("skill_store", FakeSkills, per_tenant=True),
        ActorSpec(
            "tool_executor",
            ToolExecutor,
            per_tenant=True,
            args={"workspace_root": str(tmp_path / "ws"), "toolsets": TOOLSETS},
        ),
        ActorSpec("agent", Agent, virtual=True, key_field="session_id", args={"skills_limit": 0}),
    ]


async def chat(node, message: str, session: str, ctx) -> dict[str, Any]:
    return await node.ask("agent", "chat", {"message": message, "session_id": session}, ctx=ctx)


async def populate(node) -> None:
    """bob: sessions b1, b2; carol: c1. Each with a transcript, memories, an archive."""
    for session, ctx in (("b1", ACME_USER), ("b2", ACME_USER), ("c1", CAROL)):
        await chat(node, f"{session} talks about pineapples", session, ctx)
        await node.ask(
            "memory",
            "store_memory",
            {
                "key": f"note-{session}",
                "value": "pineapples are great",
                "scope": "session",
                "session_id": session,
            },
            ctx=ctx,
        )
        await node.ask(
            "memory",
            "store_memory",
            {"key": f"fact-{session}", "value": "pineapple facts", "source_session": session},
            ctx=ctx,
        )
        msgs = [{"role": "user", "content": f"{session} " + "pineapple " * 200}] + [
            {"role": "assistant" if i % 2 else "user", "content": "pineapple " * 200} for i in range(1, 9)
        ]
        out = await node.ask(
            "context_compressor",
            "check_and_compress",
            {"messages": msgs, "token_budget": 1000, "session_id": session, "user_id": ctx.principal},
            ctx=ctx,
        )
        assert out["compressed"]


async def sessions_found(node, ctx=ACME) -> set[str]:
    found = await node.ask("agent/x", "session_search", {"query": "pineapples", "limit": 50}, ctx=ctx)
    return {h["session_id"] for h in found["hits"]}


async def memory_keys(node) -> set[str]:
    listed = await node.ask("memory", "list_memories", {"limit": 1000}, ctx=ACME)
    return {m["key"] for m in listed["memories"]}


async def has_archive(node, session: str) -> bool:
    try:
        await node.ask("context_compressor", "get_archive", {"session_id": session}, ctx=ACME)
        return True
    except NotFound:
        return False


async def test_forget_a_session_everywhere(make_node, tmp_path):
    node = await make_node(specs(tmp_path))
    await populate(node)
    out = await node.ask("memory", "forget", {"session_id": "b1"}, ctx=ACME_USER)
    assert out["mode"] == "session" and out["memories"] >= 3  # note, fact and the turn's episode
    assert out["transcript_docs"] > 0 and out["archives"] == 1 and out["sessions_cleared"] == 1
    assert await sessions_found(node) == {"b2", "c1"}
    keys = await memory_keys(node)
    assert not {k for k in keys if k.endswith("-b1")} and "note-b2" in keys
    episodes = await node.ask("memory", "list_memories", {"limit": 1000, "include_episodes": True}, ctx=ACME)
    sources = {m.get("source_session") for m in episodes["memories"] if m["kind"] == "episodic"}
    assert "b1" not in sources and "b2" in sources
    assert not await has_archive(node, "b1") and await has_archive(node, "b2")
    assert (await node.ask("agent/b1", "get_history", {}, ctx=ACME_USER))["messages"] == []
    await node.ask("skill_store", "barrier", {}, ctx=ACME)
    assert ("skill_store", "forget", {"session_id": "b1", "user_id": ""}) in CASTS


async def test_forget_a_user_everywhere(make_node, tmp_path):
    node = await make_node(specs(tmp_path))
    await populate(node)
    out = await node.ask("memory", "forget", {"user_id": "bob"}, ctx=ACME)
    assert out["mode"] == "user" and out["sessions_cleared"] == 2 and out["archives"] == 2
    assert await sessions_found(node) == {"c1"}
    assert {k for k in await memory_keys(node) if not k.startswith("episode:")} == {"note-c1", "fact-c1"}
    for session in ("b1", "b2"):
        assert (await node.ask(f"agent/{session}", "get_history", {}, ctx=ACME))["messages"] == []
        assert not await has_archive(node, session)
    assert (await node.ask("agent/c1", "get_history", {}, ctx=ACME))["messages"]
    await node.ask("skill_store", "barrier", {}, ctx=ACME)
    assert ("skill_store", "forget", {"session_id": "", "user_id": "bob"}) in CASTS


async def test_forget_the_tenant_needs_an_admin(make_node, tmp_path):
    node = await make_node(specs(tmp_path))
    await populate(node)
    with pytest.raises(PermissionDenied):
        await node.ask("memory", "forget", {"everything": True}, ctx=ACME_USER)
    out = await node.ask("memory", "forget", {"everything": True}, ctx=ACME)
    assert out["mode"] == "tenant" and out["sessions_cleared"] == 3
    assert await sessions_found(node) == set() and await memory_keys(node) == set()
    assert not any([await has_archive(node, s) for s in ("b1", "b2", "c1")])


async def test_users_forget_only_what_is_theirs(make_node, tmp_path):
    node = await make_node(specs(tmp_path))
    await populate(node)
    with pytest.raises(PermissionDenied):
        await node.ask("memory", "forget", {"session_id": "c1"}, ctx=ACME_USER)
    with pytest.raises(PermissionDenied):
        await node.ask("memory", "forget", {"user_id": "carol"}, ctx=ACME_USER)
    with pytest.raises(InvalidArgument):
        await node.ask("memory", "forget", {}, ctx=ACME)
    assert await sessions_found(node) == {"b1", "b2", "c1"}


async def test_forget_one_memory(make_node, tmp_path):
    node = await make_node(specs(tmp_path))
    await node.ask("memory", "store_memory", {"key": "colour", "value": "teal"}, ctx=ACME)
    out = await node.ask("memory", "forget", {"key": "colour"}, ctx=ACME)
    assert out["mode"] == "memory" and out["deleted"] is True
    assert (await node.ask("memory", "search_memories", {"query": "teal"}, ctx=ACME))["count"] == 0


async def test_ending_a_session_drops_its_session_memories(make_node, tmp_path):
    node = await make_node(specs(tmp_path))
    for key, scope in (("scratch", "session"), ("keeper", "global")):
        await node.ask(
            "memory", "store_memory", {"key": key, "value": "v", "scope": scope, "session_id": "s1"}, ctx=ACME
        )
    await node.ask("memory", "session_ended", {"session_id": "s1"}, ctx=ACME)
    assert await memory_keys(node) == {"keeper"}


async def test_secrets_never_reach_memory_or_the_archive(make_node, tmp_path):
    node = await make_node(specs(tmp_path))
    with pytest.raises(InvalidArgument) as refused:  # a fact holding a secret is refused, never kept redacted
        await node.ask(
            "memory",
            "store_memory",
            {"key": "aws", "value": "key AKIAABCDEFGHIJKLMNOP and token: ghp_" + "a" * 30},
            ctx=ACME,
        )
    assert refused.value.code == "secret_not_stored" and "AKIA" not in refused.value.message
    assert (await node.ask("memory", "recall_memory", {"key": "aws"}, ctx=ACME))["found"] is False
    msgs = [{"role": "user", "content": "Authorization: Bearer abcdefghijklmnopqrstuvwxyz"}] + [
        {"role": "assistant" if i % 2 else "user", "content": "filler " * 300} for i in range(1, 9)
    ]
    await node.ask(
        "context_compressor",
        "check_and_compress",
        {"messages": msgs, "token_budget": 1000, "session_id": "z"},
        ctx=ACME,
    )
    archived = await node.ask("context_compressor", "get_archive", {"session_id": "z"}, ctx=ACME)
    assert "abcdefghijklmnop" not in json.dumps(archived)
