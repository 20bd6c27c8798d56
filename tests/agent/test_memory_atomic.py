"""memory: a fact's record, index entry, tuple and embedding are written together or not at all (issue 23,
hole 4), on SQLite and on PostgreSQL; forgetting finds and removes whatever part an interrupted write of an
older release left behind; readers never show such a part."""

from __future__ import annotations

import hashlib
import math
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import minihermes.agent.memory as memory_module
from minihermes.agent.audit_event import AuditEvent
from minihermes.agent.memory import Memory
from minihermes.runtime import (
    ActorError,
    ActorSpec,
    ManualClock,
    Node,
    RequestContext,
    SupervisorSpec,
)
from minihermes.runtime.store import Store, open_store
from minihermes.runtime.store.testing import failing_writes

from ..store.conftest import PG_DSN, drop_schema
from .conftest import ACME, ACME_USER

BACKENDS = ["sqlite", "postgres"] if PG_DSN else ["sqlite"]
SCOPE = ACME.scope
INDEX = "memories"


class WordEmbedder:
    """A stand-in for the semantic extra: each word hashed into one of 16 dimensions, unit length."""

    name = "words"

    def embed(self, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            v = [0.0] * 16
            for word in text.lower().split():
                v[hashlib.sha256(word.encode()).digest()[0] % 16] += 1.0
            norm = math.sqrt(sum(x * x for x in v)) or 1.0
            out.append([x / norm for x in v])
        return out


@pytest.fixture(params=BACKENDS)
async def make_node(
    request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Callable[..., Any]]:
    """A node running memory on a fresh store of the parametrized backend (semantic: the word embedder)."""
    nodes: list[Node] = []
    schemas: list[str] = []
    monkeypatch.setattr(memory_module, "load_embedder", WordEmbedder)

    async def factory(*extra: ActorSpec, **args: Any) -> Node:
        store: Store
        if request.param == "sqlite":
            store = open_store("sqlite", data_dir=str(tmp_path / f"data{len(nodes)}"), clock=clock)
        else:
            schemas.append(f"test_{uuid.uuid4().hex[:16]}")
            store = open_store("postgres", dsn=PG_DSN, schema=schemas[-1], clock=clock, max_size=4)
        children = [
            ActorSpec("audit_event", AuditEvent, per_tenant=True),
            ActorSpec("memory", Memory, per_tenant=True, args=args),
            *extra,
        ]
        node = Node(store, SupervisorSpec(name="root", children=children), clock=clock)
        await node.start()
        nodes.append(node)
        return node

    yield factory
    for node in nodes:
        await node.stop(deadline=5)
    for schema in schemas:
        await drop_schema(schema)


async def mem(node: Node, op: str, ctx: RequestContext = ACME, **payload: Any) -> Any:
    return await node.ask("memory", op, payload, ctx=ctx)


async def stored(node: Node, rkey: str) -> dict[str, Any]:
    """Every part of the fact ``rkey`` in the store, read directly."""
    store = node.store
    tuples = [
        t for arity in (5, 6) for t in await store.tuples.read_all(SCOPE, ["memory", *[None] * (arity - 1)])
    ]
    return {
        "record": await store.kv.get(SCOPE, rkey),
        "index": [d for d, _ in await store.text.documents(SCOPE, INDEX, rkey) if d == rkey],
        "vector": await store.kv.get(SCOPE, "memvec:" + rkey) is not None,
        "tuples": [t for t in tuples if _tuple_rkey(t) == rkey],
    }


def _tuple_rkey(t: tuple[Any, ...]) -> str:
    """The record key a memory tuple lists (the ids in these tests need no quoting)."""
    return f"memp:{t[5]}:{t[1]}:{t[2]}:{t[3]}" if len(t) == 6 else f"mem:{t[1]}:{t[2]}:{t[3]}"


NOTHING = {"record": None, "index": [], "vector": False, "tuples": []}

PARTS = {
    "record": ("kv", "NEW.key LIKE 'mem:%' OR NEW.key LIKE 'memp:%'"),
    "index": ("text_docs", "NEW.idx = 'memories'"),
    "tuple": ("tuples", "NEW.body LIKE '[\"memory\",%'"),
    "vector": ("kv", "NEW.key LIKE 'memvec:%'"),
}


@pytest.mark.parametrize("part", sorted(PARTS))
@pytest.mark.parametrize(
    ("ctx", "rkey"),
    [(ACME_USER, "memp:bob:global::zebra"), (ACME, "mem:global::zebra")],
    ids=["user", "admin"],
)
async def test_a_failed_write_of_any_part_leaves_no_partial_memory(
    make_node: Callable[..., Any], part: str, ctx: RequestContext, rkey: str
) -> None:
    node = await make_node(semantic=True)
    await mem(node, "store_memory", ctx, key="other", value="an unrelated fact")
    table, when = PARTS[part]
    async with failing_writes(node.store, table, when):
        with pytest.raises(ActorError):
            await mem(node, "store_memory", ctx, key="zebra", value="the zebra lives in the savanna")
    assert await stored(node, rkey) == NOTHING
    recalled = await mem(node, "recall_memory", ctx, key="zebra")
    assert recalled["found"] is False
    assert (await mem(node, "search_memories", ctx, query="zebra savanna"))["memories"] == []
    assert [m["key"] for m in (await mem(node, "list_memories", ctx))["memories"]] == ["other"]
    assert (await mem(node, "get_stats"))["memories"] == 1
    # Nothing stands in the way of storing it again, whole.
    assert (await mem(node, "store_memory", ctx, key="zebra", value="the zebra lives in the savanna"))[
        "created"
    ] is True
    whole = await stored(node, rkey)
    assert whole["record"]["value"] == "the zebra lives in the savanna"
    assert (whole["index"], whole["vector"], len(whole["tuples"])) == ([rkey], True, 1)
    assert (await mem(node, "search_memories", ctx, query="savanna"))["memories"][0]["key"] == "zebra"


async def test_a_failed_overwrite_keeps_the_old_fact_whole(make_node: Callable[..., Any]) -> None:
    node = await make_node()
    await mem(node, "store_memory", ACME_USER, key="colour", value="teal", tier="core")
    async with failing_writes(node.store, *PARTS["tuple"]):
        with pytest.raises(ActorError):
            await mem(node, "store_memory", ACME_USER, key="colour", value="navy", tier="deep")
    got = await mem(node, "recall_memory", ACME_USER, key="colour")
    assert (got["value"], got["tier"]) == ("teal", "core")
    assert (await mem(node, "search_memories", ACME_USER, query="teal"))["count"] == 1
    assert (await mem(node, "search_memories", ACME_USER, query="navy"))["count"] == 0
    parts = await stored(node, "memp:bob:global::colour")
    assert [t[4] for t in parts["tuples"]] == ["core"]


# ----------------------------------------------------------------- parts an older release left behind


async def leave_parts(node: Node, key: str, user: str, *, scope: str = "global", owner: str = "") -> str:
    """Write what an interrupted write could leave of ``user``'s private fact: an index entry, a tuple and
    an embedding, without the record. Returns its record key."""
    rkey = f"memp:{user}:{scope}:{owner}:{key}"
    meta = {"key": key, "scope": scope, "owner": owner, "holder": user, "tier": "reachable"}
    meta |= {"kind": "semantic", "private": True, "user_id": user, "updated_at": 1.0, "analysis": 2}
    meta["terms"] = f"{key} orphan"
    store = node.store
    await store.text.upsert(SCOPE, INDEX, rkey, {"terms": f"{key} orphan"}, meta)
    await store.tuples.write(SCOPE, ["memory", scope, owner, key, "reachable", user])
    await store.kv.put(SCOPE, "memvec:" + rkey, WordEmbedder().embed([f"{key} orphan"])[0])
    return rkey


async def leave_unlisted_record(node: Node, key: str, user: str) -> str:
    """The part the attack found: a record and its index entry, without the tuple that lists it."""
    await mem(node, "store_memory", RequestContext(tenant="acme", principal=user, roles=frozenset({"user"})),
              key=key, value=f"{key} half written")  # fmt: skip
    await node.store.tuples.take_all(SCOPE, ["memory", "global", "", key, None, user])
    return f"memp:{user}:global::{key}"


async def test_readers_never_show_a_part_without_its_record(make_node: Callable[..., Any]) -> None:
    node = await make_node(semantic=True)
    await mem(node, "store_memory", ACME_USER, key="real", value="a real orphan story")
    await leave_parts(node, "ghost", "bob")
    assert (await mem(node, "recall_memory", ACME_USER, key="ghost"))["found"] is False
    found = await mem(node, "search_memories", ACME_USER, query="ghost orphan")
    assert [m["key"] for m in found["memories"]] == ["real"]
    assert [m["key"] for m in (await mem(node, "list_memories", ACME_USER))["memories"]] == ["real"]
    admin_view = await mem(node, "search_memories", ACME, query="ghost orphan")
    assert [m["key"] for m in admin_view["memories"]] == ["real"]


async def test_forget_a_user_removes_every_part_left_behind(make_node: Callable[..., Any]) -> None:
    node = await make_node(semantic=True)
    await mem(node, "store_memory", ACME_USER, key="kept", value="a whole fact")
    ghost = await leave_parts(node, "ghost", "bob")
    half = await leave_unlisted_record(node, "half", "bob")
    carol = await leave_parts(node, "hers", "carol")
    assert (await stored(node, half))["record"] is not None
    reply = await mem(node, "forget", ACME_USER, user_id="bob")
    assert reply["memories"] == 2  # the whole fact and the unlisted record
    assert reply["partial_memories"] == 1
    for rkey in (ghost, half, "memp:bob:global::kept"):
        assert await stored(node, rkey) == NOTHING, rkey
    # Another user's leftovers are not bob's to forget.
    assert (await stored(node, carol))["index"] == [carol]
    await mem(node, "forget", ACME, user_id="carol")
    assert await stored(node, carol) == NOTHING


async def test_forget_a_session_removes_its_parts_left_behind(make_node: Callable[..., Any]) -> None:
    node = await make_node()
    scoped = await leave_parts(node, "plan", "bob", scope="session", owner="s1")
    other = await leave_parts(node, "plan", "bob", scope="session", owner="s2")
    reply = await mem(node, "forget", ACME_USER, session_id="s1")
    assert reply["partial_memories"] == 1
    assert await stored(node, scoped) == NOTHING
    assert (await stored(node, other))["index"] == [other]


async def test_delete_memory_removes_parts_left_behind(make_node: Callable[..., Any]) -> None:
    node = await make_node()
    ghost = await leave_parts(node, "ghost", "bob")
    assert (await mem(node, "delete_memory", ACME_USER, key="ghost"))["deleted"] is True
    assert await stored(node, ghost) == NOTHING
    assert (await mem(node, "delete_memory", ACME_USER, key="ghost"))["deleted"] is False
    half = await leave_unlisted_record(node, "half", "bob")
    assert (await mem(node, "delete_memory", ACME_USER, key="half"))["deleted"] is True
    assert await stored(node, half) == NOTHING
    # A user's delete never reaches another user's leftovers under the same key.
    carol = await leave_parts(node, "ghost", "carol")
    assert (await mem(node, "delete_memory", ACME_USER, key="ghost"))["deleted"] is False
    assert (await stored(node, carol))["index"] == [carol]
    assert (await mem(node, "delete_memory", ACME, key="ghost", user_id="carol"))["deleted"] is True
    assert await stored(node, carol) == NOTHING


async def test_clear_memories_removes_parts_left_behind(make_node: Callable[..., Any]) -> None:
    node = await make_node()
    await mem(node, "store_memory", ACME_USER, key="a", value="x", scope="agent", agent_id="ag")
    ghost = await leave_parts(node, "b", "bob", scope="agent", owner="ag")
    carol = await leave_parts(node, "c", "carol", scope="agent", owner="ag")
    assert (await mem(node, "clear_memories", ACME_USER, scope="agent", agent_id="ag"))["deleted"] == 1
    assert await stored(node, ghost) == NOTHING
    assert (await stored(node, carol))["index"] == [carol]


async def test_storing_again_lists_a_record_left_without_its_tuple(make_node: Callable[..., Any]) -> None:
    node = await make_node()
    await leave_unlisted_record(node, "half", "bob")
    assert (await mem(node, "list_memories", ACME_USER))["count"] == 0
    await mem(node, "store_memory", ACME_USER, key="half", value="half written, again")
    assert [m["key"] for m in (await mem(node, "list_memories", ACME_USER))["memories"]] == ["half"]
