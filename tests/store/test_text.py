"""TextIndex contract: ranking, snippets, upsert/remove, hostile queries."""

from __future__ import annotations

import pytest

from minihermes.runtime.store import Store

from .conftest import A, B

DOCS = {
    "deploy": {
        "title": "Deploying the app",
        "body": "Build the container image, then deploy to the cluster.",
    },
    "backup": {"title": "Backups", "body": "Nightly backups of the database to object storage."},
    "cluster": {"title": "Cluster upgrade", "body": "Upgrade each cluster node; drain the node first."},
}


async def index_docs(store: Store) -> None:
    for doc_id, fields in DOCS.items():
        await store.text.upsert(A, "skills", doc_id, fields, meta={"id": doc_id})


async def test_search_ranks_and_snippets(store: Store) -> None:
    await index_docs(store)
    hits = await store.text.search(A, "skills", "cluster node")
    assert [h.doc_id for h in hits] == ["cluster", "deploy"]
    assert hits[0].score > hits[1].score > 0
    assert "[cluster]" in hits[0].snippet.lower() or "[Cluster]" in hits[0].snippet
    assert hits[0].meta == {"id": "cluster"}
    assert [h.doc_id for h in await store.text.search(A, "skills", "BACKUPS")] == ["backup"]
    assert len(await store.text.search(A, "skills", "the", limit=2)) == 2
    assert await store.text.search(A, "skills", "kubernetes") == []
    assert await store.text.search(A, "other-index", "cluster") == []


async def test_upsert_replaces_and_remove(store: Store) -> None:
    await index_docs(store)
    await store.text.upsert(A, "skills", "backup", {"title": "Restores"}, meta=None)
    assert await store.text.search(A, "skills", "nightly") == []
    [hit] = await store.text.search(A, "skills", "restores")
    assert (hit.doc_id, hit.meta) == ("backup", None)
    assert await store.text.remove(A, "skills", "backup") is True
    assert await store.text.remove(A, "skills", "backup") is False
    assert await store.text.search(A, "skills", "restores") == []


async def test_diacritics_and_unicode(store: Store) -> None:
    await store.text.upsert(A, "i", "fr", {"body": "Le café est très bon"})
    await store.text.upsert(A, "i", "zh", {"body": "数据库 备份"})
    assert [h.doc_id for h in await store.text.search(A, "i", "cafe")] == ["fr"]
    assert [h.doc_id for h in await store.text.search(A, "i", "数据库")] == ["zh"]


@pytest.mark.parametrize(
    "query",
    [
        "",
        "   ",
        "!!! ??? ...",
        '"',
        '"unbalanced',
        "cluster AND OR NOT",
        "NEAR(cluster node)",
        "title:cluster",
        "clu*",
        "^cluster",
        "(cluster",
        "cluster) OR (",
        "-cluster +node",
        "{title body}: cluster",
        "\x00",
        "a" * 10_000,
        " ".join(["word"] * 500),
    ],
)
async def test_untrusted_queries_never_raise(store: Store, query: str) -> None:
    await index_docs(store)
    hits = await store.text.search(A, "skills", query)
    assert isinstance(hits, list)
    if not any(ch.isalnum() for ch in query):
        assert hits == []


async def test_operators_are_treated_as_words(store: Store) -> None:
    await index_docs(store)
    # "title:cluster" must not be a column filter; "NOT" must not negate
    assert {h.doc_id for h in await store.text.search(A, "skills", "title:cluster")} >= {"cluster"}
    assert "cluster" in {h.doc_id for h in await store.text.search(A, "skills", "NOT cluster")}


async def test_text_bad_input(store: Store) -> None:
    with pytest.raises(TypeError, match="fields must be a dict"):
        await store.text.upsert(A, "i", "d", ["body"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="field 'body'"):
        await store.text.upsert(A, "i", "d", {"body": 5})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="document meta is not JSON-serializable"):
        await store.text.upsert(A, "i", "d", {"body": "x"}, meta=object())
    with pytest.raises(TypeError, match="query must be a str"):
        await store.text.search(A, "i", None)  # type: ignore[arg-type]


async def test_ranking_depends_only_on_the_index_own_documents(store: Store) -> None:
    """bm25's statistics come from the searched (tenant, namespace, index) alone: what another tenant or
    another index stores moves neither the scores nor the order (no side channel between tenants)."""
    docs = {"d1": "invoice for the design work", "d2": "invoice invoice reminder", "d3": "team lunch"}
    for doc_id, body in docs.items():
        await store.text.upsert(A, "notes", doc_id, {"body": body})
    before = [(h.doc_id, round(h.score, 9)) for h in await store.text.search(A, "notes", "invoice design")]
    assert [d for d, _ in before] and {d for d, _ in before} <= {"d1", "d2"}
    for i in range(40):  # another tenant, and another index of the same tenant, full of the query's words
        await store.text.upsert(B, "notes", f"b{i}", {"body": "invoice " * (i % 5 + 1) + "design"})
        await store.text.upsert(A, "other", f"o{i}", {"body": "design invoice design"})
    after = [(h.doc_id, round(h.score, 9)) for h in await store.text.search(A, "notes", "invoice design")]
    assert after == before


async def test_upsert_many_writes_all_or_none(store: Store) -> None:
    docs = [(doc_id, fields, {"id": doc_id}) for doc_id, fields in DOCS.items()]
    assert await store.text.upsert_many(A, "skills", docs) == 3
    hits = await store.text.search(A, "skills", "cluster node")
    assert [h.doc_id for h in hits] == ["cluster", "deploy"]  # the same ranking as one upsert at a time
    assert hits[0].meta == {"id": "cluster"}
    # An existing document is replaced, a new one added, in one call.
    changed = [("cluster", {"title": "Retired"}, None), ("new", {"title": "cluster of nodes"}, {"n": 1})]
    assert await store.text.upsert_many(A, "skills", changed) == 2
    assert [h.doc_id for h in await store.text.search(A, "skills", "cluster")] == ["new", "deploy"]
    assert await store.text.upsert_many(A, "skills", []) == 0
    assert await store.text.search(B, "skills", "cluster") == []  # nothing in the other scope
    # Bad input is refused before anything is written: no document of the batch is stored.
    with pytest.raises(ValueError, match="twice"):
        await store.text.upsert_many(A, "other", [("x", {"t": "alpha"}, None), ("x", {"t": "beta"}, None)])
    with pytest.raises(TypeError):
        await store.text.upsert_many(A, "other", [("y", {"t": "alpha"}, None), ("z", {"t": 5}, None)])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        await store.text.upsert_many(A, "other", [("y", {"t": "alpha"})])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        await store.text.upsert_many(A, "other", "not a list")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        await store.text.upsert_many(A, "other", [("y", {"t": "alpha"}, {"bad": float("nan")})])
    assert await store.text.search(A, "other", "alpha") == []
