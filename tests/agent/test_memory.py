"""memory: scopes, tiers, FTS5 ranking, the core snapshot for the system prompt, durability, tenancy."""

from __future__ import annotations

from typing import Any

import pytest

from minihermes.agent.audit_event import AuditEvent
from minihermes.agent.memory import Memory
from minihermes.runtime import ActorSpec, Conflict, InvalidArgument, PermissionDenied

from .conftest import ACME, ACME_USER, ACME_VIEWER, GLOBEX, audit_trail


def specs(**args: Any) -> list[ActorSpec]:
    return [
        ActorSpec("audit_event", AuditEvent, per_tenant=True),
        ActorSpec("memory", Memory, per_tenant=True, args=args),
    ]


async def mem(node, op: str, ctx=ACME, **payload: Any) -> Any:
    return await node.ask("memory", op, payload, ctx=ctx)


async def test_store_recall_overwrite_delete(make_node):
    node = await make_node(specs())
    stored = await mem(node, "store_memory", key="favourite_colour", value="teal")
    assert stored == {
        "status": "ok",
        "key": "favourite_colour",
        "scope": "global",
        "tier": "reachable",
        "kind": "semantic",
        "private": False,
        "created": True,
        "expires_at": None,  # facts do not expire unless asked (or configured)
        "provenance": "admin",  # a person's own request, stamped by the runtime
        "quarantined": False,
    }
    got = await mem(node, "recall_memory", key="favourite_colour")
    assert got["found"] is True and got["value"] == "teal" and got["user_id"] == "alice"
    again = await mem(node, "store_memory", key="favourite_colour", value="navy", tier="core")
    assert again["created"] is False
    assert (await mem(node, "recall_memory", key="favourite_colour"))["value"] == "navy"
    assert (await mem(node, "store_memory", key="answer", value=42))["status"] == "ok"
    assert (await mem(node, "recall_memory", key="answer"))["value"] == "42"
    assert (await mem(node, "get_stats"))["memories"] == 2
    deleted = await mem(node, "delete_memory", key="favourite_colour")
    assert deleted["deleted"] is True
    assert (await mem(node, "delete_memory", key="favourite_colour"))["deleted"] is False
    assert await mem(node, "recall_memory", key="favourite_colour") == {
        "status": "ok",
        "key": "favourite_colour",
        "scope": "global",
        "found": False,
        "value": None,
    }
    assert (await mem(node, "search_memories", query="navy"))["memories"] == []
    assert (await mem(node, "list_memories"))["count"] == 1
    trail = await audit_trail(node)
    assert [e["event_type"] for e in trail] == ["memory_stored"] * 3 + ["memory_deleted"]
    assert "navy" not in str(trail)  # values stay out of the audit trail


async def test_bad_input_is_a_structured_error_naming_the_field(make_node):
    node = await make_node(specs(max_value_chars={"core": 10}))
    cases = [
        ({"key": "", "value": "x"}, "key"),
        ({"key": "  ", "value": "x"}, "key"),
        ({"key": "k" * 201, "value": "x"}, "key"),
        ({"key": "a\x00b", "value": "x"}, "key"),
        ({"key": "k", "value": ""}, "value"),
        ({"key": "k", "value": None}, "value"),
        ({"key": "k", "value": "x" * 11, "tier": "core"}, "value"),
        ({"key": "k", "value": "x", "scope": "team"}, "scope"),
        ({"key": "k", "value": "x", "tier": "hot"}, "tier"),
        ({"key": "k", "value": "x", "scope": "agent"}, "agent_id"),
        ({"key": "k", "value": "x", "scope": "session"}, "session_id"),
    ]
    for payload, field in cases:
        with pytest.raises(InvalidArgument) as info:
            await mem(node, "store_memory", **payload)
        assert info.value.details["field"] == field, payload
    with pytest.raises(InvalidArgument) as info:
        await mem(node, "store_memory", value="x")
    assert info.value.details["field"] == "key"
    with pytest.raises(InvalidArgument) as info:
        await mem(node, "search_memories", query=" ")
    assert info.value.details["field"] == "query"
    with pytest.raises(InvalidArgument) as info:
        await mem(node, "list_memories", limit=0)
    assert info.value.details["field"] == "limit"


async def test_scopes_keep_agents_and_sessions_apart(make_node):
    node = await make_node(specs())
    await mem(node, "store_memory", key="plan", value="global plan")
    await mem(node, "store_memory", key="plan", value="plan of agent a", scope="agent", agent_id="a")
    await mem(node, "store_memory", key="plan", value="plan of session s1", scope="session", session_id="s1")
    await mem(node, "store_memory", key="plan", value="plan of session s2", scope="session", session_id="s2")
    assert (await mem(node, "recall_memory", key="plan"))["value"] == "global plan"
    assert (await mem(node, "recall_memory", key="plan", scope="agent", agent_id="a"))[
        "value"
    ] == "plan of agent a"
    assert (await mem(node, "recall_memory", key="plan", scope="agent", agent_id="b"))["found"] is False
    s1 = await mem(node, "recall_memory", key="plan", scope="session", session_id="s1")
    assert s1["value"] == "plan of session s1" and s1["session_id"] == "s1"
    everything = await mem(node, "list_memories")
    assert [(m["scope"], m["value"]) for m in everything["memories"]] == [
        ("global", "global plan"),
        ("agent", "plan of agent a"),
        ("session", "plan of session s1"),
        ("session", "plan of session s2"),
    ]
    only_s1 = await mem(node, "list_memories", scope="session", session_id="s1")
    assert [m["value"] for m in only_s1["memories"]] == ["plan of session s1"]
    seen_by_s1 = await mem(node, "search_memories", query="plan", session_id="s1")
    assert "plan of session s2" not in [m["value"] for m in seen_by_s1["memories"]]
    assert len(seen_by_s1["memories"]) == 3
    cleared = await mem(node, "clear_memories", scope="session", session_id="s1")
    assert cleared["deleted"] == 1
    assert (await mem(node, "list_memories", scope="session"))["count"] == 1


async def test_search_ranks_with_fts5(make_node):
    node = await make_node(specs())
    await mem(node, "store_memory", key="favourite_colour", value="teal, like the sea at dawn")
    await mem(node, "store_memory", key="car", value="a teal hatchback, second hand")
    await mem(node, "store_memory", key="pet", value="a cat called Miso")
    await mem(node, "store_memory", key="colour_of_walls", value="white", tier="deep")
    found = await mem(node, "search_memories", query="favourite colour teal")
    keys = [m["key"] for m in found["memories"]]
    assert keys[0] == "favourite_colour"  # all three words
    assert set(keys) == {"favourite_colour", "car", "colour_of_walls"}
    assert "pet" not in keys
    scores = [m["score"] for m in found["memories"]]
    assert scores == sorted(scores, reverse=True)
    first = found["memories"][0]
    assert first["value"] == "teal, like the sea at dawn" and "[teal]" in first["snippet"]
    deep_only = await mem(node, "search_memories", query="colour", tier="deep")
    assert [m["key"] for m in deep_only["memories"]] == ["colour_of_walls"]
    assert (await mem(node, "search_memories", query="teal", limit=1))["count"] == 1
    hostile = await mem(node, "search_memories", query='teal" OR key:* NEAR(')  # user text, never syntax
    assert {m["key"] for m in hostile["memories"]} == {"favourite_colour", "car"}


async def test_core_snapshot_is_sorted_scoped_and_bounded(make_node):
    node = await make_node(specs(core_snapshot_chars=60))
    await mem(node, "store_memory", key="name", value="Alice", tier="core")
    await mem(node, "store_memory", key="city", value="Oslo", tier="core")
    await mem(
        node, "store_memory", key="units", value="metric", tier="core", scope="session", session_id="s1"
    )
    await mem(node, "store_memory", key="tone", value="terse", tier="core", scope="agent", agent_id="helper")
    await mem(node, "store_memory", key="shoe_size", value="42")  # reachable: not in the prompt
    await mem(node, "store_memory", key="boss", value="Bob", tier="core", ctx=ACME_USER)
    snap = await mem(node, "core_snapshot")
    assert snap["memories"] == [
        {"key": "city", "value": "Oslo", "scope": "global"},
        {"key": "name", "value": "Alice", "scope": "global"},
    ]
    assert snap == await mem(node, "core_snapshot")
    scoped = await mem(node, "core_snapshot", session_id="s1", agent_id="helper")
    assert [m["key"] for m in scoped["memories"]] == ["city", "name", "tone", "units"]
    # A user's own core facts are in their prompts only (the shared ones are in everybody's).
    bobs = await mem(node, "core_snapshot", user_id="bob")
    assert [m["key"] for m in bobs["memories"]] == ["boss", "city", "name"]
    assert bobs == await mem(node, "core_snapshot", ctx=ACME_USER)
    await mem(node, "store_memory", key="city", value="Bergen", tier="reachable")  # leaves the core tier
    assert [m["key"] for m in (await mem(node, "core_snapshot"))["memories"]] == ["name"]
    await mem(node, "store_memory", key="bio", value="x" * 50, tier="core")
    bounded = await mem(node, "core_snapshot")
    assert bounded["truncated"] is True
    assert sum(len(m["key"]) + len(m["value"]) for m in bounded["memories"]) <= 60


async def test_viewers_read_but_do_not_write(make_node):
    node = await make_node(specs())
    await mem(node, "store_memory", key="k", value="v")
    assert (await mem(node, "recall_memory", key="k", ctx=ACME_VIEWER))["value"] == "v"
    assert (await mem(node, "search_memories", query="v", ctx=ACME_VIEWER))["status"] == "ok"
    with pytest.raises(PermissionDenied):
        await mem(node, "store_memory", key="k", value="w", ctx=ACME_VIEWER)
    with pytest.raises(PermissionDenied):
        await mem(node, "delete_memory", key="k", ctx=ACME_VIEWER)
    with pytest.raises(PermissionDenied):
        await mem(node, "clear_memories", scope="global", ctx=ACME_USER)
    assert (await mem(node, "recall_memory", key="k"))["value"] == "v"


async def test_quota(make_node):
    node = await make_node(specs(max_memories=2))
    await mem(node, "store_memory", key="a", value="1")
    await mem(node, "store_memory", key="b", value="2")
    with pytest.raises(Conflict) as info:
        await mem(node, "store_memory", key="c", value="3")
    assert info.value.code == "quota_exceeded"
    assert (await mem(node, "store_memory", key="a", value="updated"))["status"] == "ok"


async def test_memories_survive_a_restart_and_stay_in_their_tenant(make_node, tmp_path):
    node = await make_node(specs())
    await mem(node, "store_memory", key="favourite_colour", value="teal", tier="core")
    await mem(node, "store_memory", key="project", value="apollo launch plan")
    assert (await mem(node, "recall_memory", key="favourite_colour", ctx=GLOBEX))["found"] is False
    assert (await mem(node, "search_memories", query="teal apollo", ctx=GLOBEX))["memories"] == []
    assert (await mem(node, "list_memories", ctx=GLOBEX))["count"] == 0
    assert (await mem(node, "core_snapshot", ctx=GLOBEX))["memories"] == []
    await mem(node, "store_memory", key="favourite_colour", value="red", ctx=GLOBEX)
    await node.stop()
    node2 = await make_node(specs(), data_dir=tmp_path / "data")
    assert (await mem(node2, "recall_memory", key="favourite_colour"))["value"] == "teal"
    assert (await mem(node2, "recall_memory", key="favourite_colour", ctx=GLOBEX))["value"] == "red"
    assert [m["key"] for m in (await mem(node2, "search_memories", query="apollo"))["memories"]] == [
        "project"
    ]
    assert (await mem(node2, "core_snapshot"))["memories"] == [
        {"key": "favourite_colour", "value": "teal", "scope": "global"}
    ]
    assert (await mem(node2, "get_stats"))["memories"] == 2
