"""memory list/search for people (issue 19): filters by kind, tier and scope, pages with a total, episodes
hidden unless asked, and search that matches possessives and stems ("sister" finds "sister's name",
"running" finds "run"), records indexed before that analysis included."""

from __future__ import annotations

from typing import Any

import pytest

from minihermes.agent.memory import Memory
from minihermes.context import analyze
from minihermes.runtime import ActorSpec, InvalidArgument

from .conftest import ACME


async def mem(node: Any, op: str, ctx: Any = ACME, **payload: Any) -> Any:
    return await node.ask("memory", op, payload, ctx=ctx)


async def started(make_node: Any) -> Any:
    return await make_node([ActorSpec("memory", Memory, per_tenant=True)])


async def a_few_facts_and_episodes(node: Any) -> None:
    await mem(node, "store_memory", key="sister", value="My sister's name is Ana")
    await mem(node, "store_memory", key="habit", value="I run every morning before work")
    await mem(node, "store_memory", key="rule", value="deploy on Tuesdays", tier="core")
    await mem(node, "store_memory", key="manual", value="how to run the backup", kind="declarative")
    await mem(node, "store_memory", key="draft", value="notes of s1", scope="session", session_id="s1")
    for n in range(5):
        await mem(
            node,
            "store_memory",
            key=f"episode:{n}",
            value=f"Task: run the report {n}\nOutcome: ok",
            kind="episodic",
            private=True,
        )


def keys(reply: dict[str, Any]) -> list[str]:
    return [m["key"] for m in reply["memories"]]


async def test_episodes_are_hidden_unless_asked(make_node: Any) -> None:
    node = await started(make_node)
    await a_few_facts_and_episodes(node)
    listed = await mem(node, "list_memories")
    assert keys(listed) == ["habit", "manual", "rule", "sister", "draft"]
    assert listed["total"] == 5 and listed["count"] == 5 and listed["next_offset"] is None
    everything = await mem(node, "list_memories", include_episodes=True)
    assert everything["total"] == 10 and sum(k.startswith("episode:") for k in keys(everything)) == 5
    episodes = await mem(node, "list_memories", kind="episodic")
    assert keys(episodes) == [f"episode:{n}" for n in range(5)]
    found = await mem(node, "search_memories", query="run", include_episodes=False)
    assert set(keys(found)) == {"habit", "manual"}
    only = await mem(node, "search_memories", query="run", kind="episodic", include_episodes=False)
    assert set(keys(only)) == {f"episode:{n}" for n in range(5)}  # asked for by kind


async def test_filters_by_kind_tier_and_scope(make_node: Any) -> None:
    node = await started(make_node)
    await a_few_facts_and_episodes(node)
    assert keys(await mem(node, "list_memories", scope="global")) == ["habit", "manual", "rule", "sister"]
    assert keys(await mem(node, "list_memories", kind="declarative")) == ["manual"]
    assert keys(await mem(node, "list_memories", tier="core")) == ["rule"]
    assert keys(await mem(node, "list_memories", scope="session")) == ["draft"]
    assert keys(await mem(node, "list_memories", scope="global", kind="semantic", tier="reachable")) == [
        "habit",
        "sister",
    ]
    assert keys(await mem(node, "search_memories", query="run", kind="declarative")) == ["manual"]
    assert keys(await mem(node, "search_memories", query="notes", scope="session")) == ["draft"]
    assert keys(await mem(node, "search_memories", query="deploy", tier="reachable")) == []


async def test_pages_with_a_total(make_node: Any) -> None:
    node = await started(make_node)
    await a_few_facts_and_episodes(node)
    pages, offset = [], 0
    while offset is not None:
        page = await mem(node, "list_memories", include_episodes=True, limit=4, offset=offset)
        assert page["total"] == 10 and page["offset"] == offset
        pages.append(keys(page))
        offset = page["next_offset"]
    assert [len(p) for p in pages] == [4, 4, 2]
    whole = keys(await mem(node, "list_memories", include_episodes=True))
    assert [k for p in pages for k in p] == whole
    assert (await mem(node, "list_memories", offset=50))["memories"] == []
    first = await mem(node, "search_memories", query="run report", limit=2, include_episodes=True)
    rest = await mem(node, "search_memories", query="run report", limit=10, offset=2, include_episodes=True)
    assert first["total"] == rest["total"] == 7 and first["next_offset"] == 2 and rest["next_offset"] is None
    assert not set(keys(first)) & set(keys(rest)) and len(keys(first) + keys(rest)) == 7
    for op, payload in (
        ("list_memories", {"offset": -1}),
        ("search_memories", {"query": "run", "offset": -1}),
        ("search_memories", {"query": "run", "offset": 495, "limit": 10}),
    ):
        with pytest.raises(InvalidArgument) as e:
            await mem(node, op, **payload)
        assert e.value.details["field"] == "offset"


async def test_search_matches_possessives_and_stems(make_node: Any) -> None:
    node = await started(make_node)
    await a_few_facts_and_episodes(node)
    await mem(node, "store_memory", key="Gina's birthday", value="the 3rd of May")
    sister = await mem(node, "search_memories", query="sister", include_episodes=False)
    assert keys(sister) == ["sister"] and "[sister's]" in sister["memories"][0]["snippet"]
    assert keys(await mem(node, "search_memories", query="What is my sister's name?")) == ["sister"]
    running = await mem(node, "search_memories", query="running", include_episodes=False)
    assert set(keys(running)) == {"habit", "manual"}
    assert "[run]" in next(m for m in running["memories"] if m["key"] == "habit")["snippet"]
    assert "habit" in keys(await mem(node, "search_memories", query="mornings runs"))
    assert keys(await mem(node, "search_memories", query="gina")) == ["Gina's birthday"]


async def test_records_indexed_before_the_new_analysis_are_still_found(make_node: Any) -> None:
    """A record whose index entry was written by an earlier release (the light stemmer, no ``analysis`` in
    its meta) is still found by the words it was found by."""
    node = await started(make_node)
    await mem(node, "store_memory", key="pets", value="two cats called Miso and Tofu")
    rkey = "mem:global::pets"
    legacy_meta = {
        "key": "pets",
        "scope": "global",
        "owner": "",
        "holder": "",
        "tier": "reachable",
        "kind": "semantic",
        "pinned": False,
        "private": False,
        "user_id": "alice",
        "updated_at": 1_800_000_000.0,
        "terms": " ".join(dict.fromkeys(analyze("pets two cats called Miso and Tofu").split())),
    }
    scope = (ACME.tenant, ACME.namespace)
    await node.store.text.upsert(scope, "memories", rkey, {"terms": analyze("pets two cats")}, legacy_meta)
    found = await mem(node, "search_memories", query="cats")
    assert keys(found) == ["pets"] and found["memories"][0]["relevance"] > 0
